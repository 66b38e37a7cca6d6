// Causal attention on the tensor cores (causal_attention_tc, model_ops.h): the calibration
// forward of gptq-quantize --device cuda, where attention over 2048-token windows had been most
// of the forward's time in the fp32 kernel (model_ops.cu: ~30 of a 7B model's 45 s of forward).
//
// One block = 4 warps = 64 consecutive queries of one (sequence, head); each warp owns 16 query
// rows, the m16 side of mma.m16n8k16 (fp16 in, fp32 accumulation). Keys and values stream
// through shared memory in tiles of 64, double-buffered by cp.async (rows past T zero-filled, so
// no NaN can reach the P V product):
//
//   Q [64 x dh]  -> registers once (ldmatrix: the A fragments of every k16 step of q . k)
//   per key tile:  S [16 x 64] = Q K^T        K rows -> B fragments by ldmatrix
//                  mask (causal, window, T), online softmax in fp32 (exp2, running max / sum)
//                  O [16 x dh] += P V          P from S's accumulators, rounded to fp16 in
//                                              registers (the C layout of two n8 tiles is the
//                                              A layout of one k16 step); V by ldmatrix.trans
//
// Precision (the bound tests/cuda/test_attention.cpp holds, derived in docs/gptq.md): the scores
// are exact fp16 products summed in fp32 (by the tensor cores, which truncate where IEEE rounds);
// the softmax is fp32; what this kernel adds is the fp16 rounding of each probability in the P V
// product (relative 2^-11, or
// 2^-25 absolute below fp16's normal range), while the row sum l is taken from the unrounded
// fp32 probabilities: |o - o_fp32| <= (2^-11 + T 2^-25) max |v| before the output's own rounding.
// The e2e tier keeps the fp32 kernel: the verifier's reference forward does not take this error.
//
// Rows padded by 8 halves (16 bytes): the 8 rows one ldmatrix phase reads then start on 8
// distinct 4-bank groups for every dh this takes (32, 64, 96, 128). Query tiles run in reverse
// order: the longest (last) tiles start first, so the causal triangle's tail is short ones.
#include <cmath>

#include "cuda/cuda_check.h"
#include "cuda/marlin_device.cuh"
#include "cuda/model_ops.h"
#include "cuda/tl_kernels.h"

namespace tl::cuda {
namespace {

using namespace marlin_dev;

constexpr int kTcWarps = 4;
constexpr int kTcThreads = 32 * kTcWarps;
constexpr int kTcQueries = 16 * kTcWarps;  // per block
constexpr int kTcKeys = 64;                // per tile

template <int DH>
struct TcLayout {
  static constexpr int kRow = DH + 8;                            // halves per shared row
  static constexpr int kQ = kTcQueries * kRow, kKV = kTcKeys * kRow;  // halves per buffer
  static constexpr size_t kBytes = size_t(kQ + 4 * kKV) * sizeof(__half);  // Q, K[2], V[2]
};

__device__ __forceinline__ uint32_t pack_half2(float lo, float hi) {
  return as_u32(__floats2half2_rn(lo, hi));
}

template <int DH>
__global__ void __launch_bounds__(kTcThreads, 2)
    attention_tc_kernel(const __half* q, const __half* k, const __half* v, __half* out, int T, int H, int Hkv,
                        int window, int position_major, float scale_log2) {
  static_assert(DH % 16 == 0 && DH <= 128, "k16 steps of q . k; the accumulators of dh <= 128 fit");
  constexpr int KS = DH / 16;  // k16 steps of q . k
  constexpr int NO = DH / 8;   // n8 tiles of the output
  constexpr int R = TcLayout<DH>::kRow;
  constexpr int kChunks = DH / 8;  // 16-byte pieces of a row
  extern __shared__ __align__(16) __half tc_smem[];
  __half* const qs = tc_smem;
  __half* const ks = qs + TcLayout<DH>::kQ;      // [2][kTcKeys][R]
  __half* const vs = ks + 2 * TcLayout<DH>::kKV;  // [2][kTcKeys][R]

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, gid = lane / 4, tig = lane % 4;
  const int s = blockIdx.z, h = blockIdx.y, kvh = h / (H / Hkv);
  const int q0 = (gridDim.x - 1 - blockIdx.x) * kTcQueries;
  const __half* qb = q + (int64_t(s) * H + h) * T * DH;
  const __half* kb = k + (int64_t(s) * Hkv + kvh) * T * DH;
  const __half* vb = v + (int64_t(s) * Hkv + kvh) * T * DH;

  // Rows [row0, row0 + rows) of a [T, DH] head into a padded shared buffer; rows >= T as zeros.
  auto load_rows = [&](__half* dst, const __half* src, int row0, int rows) {
    for (int c = threadIdx.x; c < rows * kChunks; c += kTcThreads) {
      const int r = c / kChunks, col = (c % kChunks) * 8, row = row0 + r;
      cp_async16_zfill(dst + r * R + col, src + int64_t(min(row, T - 1)) * DH + col, row < T);
    }
  };

  const int last_key = min(T - 1, q0 + kTcQueries - 1);  // the last key any query here sees
  const int first_key = window > 0 ? max(0, q0 - window + 1) / kTcKeys * kTcKeys : 0;
  const int tiles = (last_key - first_key) / kTcKeys + 1;
  load_rows(qs, qb, q0, kTcQueries);
  load_rows(ks, kb, first_key, kTcKeys);
  load_rows(vs, vb, first_key, kTcKeys);
  cp_async_commit();

  const int wq0 = q0 + 16 * warp;                   // this warp's first query
  const int row_a = wq0 + gid, row_b = row_a + 8;  // the queries of accumulator elements 0, 1 / 2, 3
  uint32_t qa[KS][4];
  float o[NO][4];
#pragma unroll
  for (int d = 0; d < NO; ++d) o[d][0] = o[d][1] = o[d][2] = o[d][3] = 0.f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};  // running max (log2 units) and sum

  for (int t = 0; t < tiles; ++t) {
    const int t0 = first_key + t * kTcKeys, buf = t & 1;
    if (t + 1 < tiles) {  // the next tile into the other buffer (consumed at the end of t - 1)
      load_rows(ks + (buf ^ 1) * TcLayout<DH>::kKV, kb, t0 + kTcKeys, kTcKeys);
      load_rows(vs + (buf ^ 1) * TcLayout<DH>::kKV, vb, t0 + kTcKeys, kTcKeys);
    }
    cp_async_commit();
    cp_async_wait<1>();  // everything but the group just issued: tile t (and Q) are in
    __syncthreads();
    if (t == 0) {
#pragma unroll
      for (int kk = 0; kk < KS; ++kk)  // matrices: rows 0-7 / 8-15 at k 0-7, then at k 8-15
        ldmatrix_x4(qa[kk], qs + (16 * warp + (lane / 8 % 2) * 8 + lane % 8) * R + 16 * kk + (lane / 16) * 8);
    }
    // The warp's queries wq0 .. wq0 + 15 against keys t0 .. t0 + 63: skip a tile wholly after
    // them or wholly before their windows (warp-uniform; the barriers are still reached).
    const bool after = t0 > wq0 + 15;
    const bool before = window > 0 && t0 + kTcKeys - 1 <= wq0 - window;
    if (!after && !before) {
      const __half* kt = ks + buf * TcLayout<DH>::kKV;
      const __half* vt = vs + buf * TcLayout<DH>::kKV;
      float sc[8][4];
#pragma unroll
      for (int j = 0; j < 8; ++j) sc[j][0] = sc[j][1] = sc[j][2] = sc[j][3] = 0.f;
#pragma unroll
      for (int kk = 0; kk < KS; ++kk)
#pragma unroll
        for (int j2 = 0; j2 < 4; ++j2) {  // n8 tiles 2 j2, 2 j2 + 1: keys 16 j2 .. 16 j2 + 15
          uint32_t b[4];
          ldmatrix_x4(b, kt + (16 * j2 + (lane / 16) * 8 + lane % 8) * R + 16 * kk + (lane / 8 % 2) * 8);
          mma_16816(sc[2 * j2], qa[kk], b[0], b[1]);
          mma_16816(sc[2 * j2 + 1], qa[kk], b[2], b[3]);
        }
      // Element e of n8 tile j: query e < 2 ? row_a : row_b, key t0 + 8 j + 2 tig + e % 2.
      const bool mask = t0 + kTcKeys - 1 > wq0 || t0 + kTcKeys > T || (window > 0 && t0 <= wq0 + 15 - window);
      float mx[2] = {m[0], m[1]};
#pragma unroll
      for (int j = 0; j < 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          float x = sc[j][e] * scale_log2;
          if (mask) {
            const int key = t0 + 8 * j + 2 * tig + e % 2, row = e < 2 ? row_a : row_b;
            const bool visible = key <= row && key < T && (window <= 0 || key > row - window);
            x = visible ? x : -INFINITY;
          }
          sc[j][e] = x;
          mx[e / 2] = fmaxf(mx[e / 2], x);
        }
      float base[2], corr[2], sum[2] = {0.f, 0.f};
#pragma unroll
      for (int r = 0; r < 2; ++r) {  // the 4 lanes of a gid hold one row's 64 keys
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
        base[r] = mx[r] == -INFINITY ? 0.f : mx[r];  // a row with nothing visible yet: p = 0
        corr[r] = exp2f(m[r] - base[r]);              // 0 while m = -inf (l and o are 0 then)
        m[r] = mx[r];
      }
#pragma unroll
      for (int j = 0; j < 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float p = exp2f(sc[j][e] - base[e / 2]);
          sc[j][e] = p;
          sum[e / 2] += p;
        }
#pragma unroll
      for (int r = 0; r < 2; ++r) l[r] = l[r] * corr[r] + sum[r];
#pragma unroll
      for (int d = 0; d < NO; ++d) {
        o[d][0] *= corr[0];
        o[d][1] *= corr[0];
        o[d][2] *= corr[1];
        o[d][3] *= corr[1];
      }
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {  // keys 16 kk .. 16 kk + 15: S tiles 2 kk, 2 kk + 1 as A
        const uint32_t pa[4] = {pack_half2(sc[2 * kk][0], sc[2 * kk][1]), pack_half2(sc[2 * kk][2], sc[2 * kk][3]),
                                pack_half2(sc[2 * kk + 1][0], sc[2 * kk + 1][1]),
                                pack_half2(sc[2 * kk + 1][2], sc[2 * kk + 1][3])};
#pragma unroll
        for (int d2 = 0; d2 < NO / 2; ++d2) {  // dims 16 d2 .. 16 d2 + 15
          uint32_t b[4];
          ldmatrix_x4_trans(b, vt + (16 * kk + (lane / 8 % 2) * 8 + lane % 8) * R + 16 * d2 + (lane / 16) * 8);
          mma_16816(o[2 * d2], pa, b[0], b[1]);
          mma_16816(o[2 * d2 + 1], pa, b[2], b[3]);
        }
      }
    }
    __syncthreads();  // tile t's buffers are consumed before iteration t + 1 refills them
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int i = r == 0 ? row_a : row_b;
    if (i >= T) continue;
    const int64_t row = position_major ? int64_t(i) * gridDim.z + s : int64_t(s) * T + i;
    __half* dst = out + row * int64_t(H) * DH + int64_t(h) * DH + 2 * tig;
    const float inv = 1.0f / l[r];
#pragma unroll
    for (int d = 0; d < NO; ++d)
      *reinterpret_cast<half2*>(dst + 8 * d) = __floats2half2_rn(o[d][2 * r] * inv, o[d][2 * r + 1] * inv);
  }
}

template <int DH>
int launch_attention_tc(const __half* q, const __half* k, const __half* v, __half* out, int n_seq, int T, int H,
                        int Hkv, int window, RowOrder order, cudaStream_t stream) {
  constexpr size_t smem = TcLayout<DH>::kBytes;
  if (smem > 48 * 1024)
    TL_CUDA_CHECK(cudaFuncSetAttribute(attention_tc_kernel<DH>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  const dim3 grid((T + kTcQueries - 1) / kTcQueries, H, n_seq);
  const float scale_log2 = float(1.4426950408889634 / std::sqrt(double(DH)));
  attention_tc_kernel<DH><<<grid, kTcThreads, smem, stream>>>(
      q, k, v, out, T, H, Hkv, window, order == RowOrder::kPositionMajor ? 1 : 0, scale_log2);
  TL_CHECK_LAUNCH("attention_tc_kernel");
  return kOk;
}

}  // namespace

bool attention_tc_supports(int dh) { return dh == 32 || dh == 64 || dh == 96 || dh == 128; }

int causal_attention_tc(const __half* q, const __half* k, const __half* v, __half* out, int n_seq, int T, int H,
                        int Hkv, int dh, int window, RowOrder order, cudaStream_t stream) {
  if (H <= 0 || Hkv <= 0 || H % Hkv != 0 || T <= 0 || n_seq <= 0 || n_seq > 65535 || H > 65535 || window < 0 ||
      !attention_tc_supports(dh))
    return kShapeUnsupported;
  switch (dh) {
    case 32: return launch_attention_tc<32>(q, k, v, out, n_seq, T, H, Hkv, window, order, stream);
    case 64: return launch_attention_tc<64>(q, k, v, out, n_seq, T, H, Hkv, window, order, stream);
    case 96: return launch_attention_tc<96>(q, k, v, out, n_seq, T, H, Hkv, window, order, stream);
    default: return launch_attention_tc<128>(q, k, v, out, n_seq, T, H, Hkv, window, order, stream);
  }
}

}  // namespace tl::cuda
