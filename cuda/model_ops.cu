// GPU ops of the TinyLoop forward (see model_ops.h). Simple, bandwidth-friendly kernels: the
// e2e tier's cost is dominated by the GEMMs (quant_gemm) and attention at ctx <= 2048.
#include <cmath>

#include "cuda/cuda_check.h"
#include "cuda/model_ops.h"

namespace tl::cuda {
namespace {

constexpr int kRowThreads = 256;  // one block per row for the row-wise ops (norm, stats, KLD)
constexpr unsigned kFullMask = 0xffffffffu;

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, o));
  return v;
}

// Sum over the block (kRowThreads threads); every thread gets the result.
__device__ float block_sum(float v) {
  __shared__ float part[kRowThreads / 32];
  __shared__ float total;
  v = warp_sum(v);
  if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = v;
  __syncthreads();
  if (threadIdx.x < 32) {
    float w = threadIdx.x < kRowThreads / 32 ? part[threadIdx.x] : 0.f;
    w = warp_sum(w);
    if (threadIdx.x == 0) total = w;
  }
  __syncthreads();
  return total;
}

// ---- dense weights to fp16 ----

template <WeightElem E>
__device__ __forceinline__ float widen(const void* src, int64_t i) {
  if (E == WeightElem::kF32) return static_cast<const float*>(src)[i];
  const uint16_t b = static_cast<const uint16_t*>(src)[i];
  if (E == WeightElem::kF16) return __half2float(__ushort_as_half(b));
  return __uint_as_float(uint32_t(b) << 16);  // bf16: the high half of an fp32
}

// [K, N] -> [K, N]: a grid-stride copy with one rounding.
template <WeightElem E>
__global__ void weight_to_half_kernel(const void* src, __half* dst, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    dst[i] = __float2half_rn(widen<E>(src, i));
}

// [N, K] -> [K, N] through a 32 x 33 shared tile (the padding column keeps the transposed reads
// free of bank conflicts): a block reads 32 rows of 32 contiguous source elements and writes 32
// rows of 32 contiguous destination elements, so both sides stay coalesced.
constexpr int kTile = 32, kTileRows = 8;
template <WeightElem E>
__global__ void weight_to_half_t_kernel(const void* src, __half* dst, int64_t K, int64_t N) {
  __shared__ float tile[kTile][kTile + 1];
  const int64_t k0 = int64_t(blockIdx.x) * kTile, n0 = int64_t(blockIdx.y) * kTile;
  for (int r = threadIdx.y; r < kTile; r += kTileRows) {
    const int64_t n = n0 + r, k = k0 + threadIdx.x;
    if (n < N && k < K) tile[r][threadIdx.x] = widen<E>(src, n * K + k);
  }
  __syncthreads();
  for (int r = threadIdx.y; r < kTile; r += kTileRows) {
    const int64_t k = k0 + r, n = n0 + threadIdx.x;
    if (k < K && n < N) dst[k * N + n] = __float2half_rn(tile[threadIdx.x][r]);
  }
}

template <WeightElem E>
int launch_weight_to_half(const void* src, bool transposed, int64_t K, int64_t N, __half* dst, cudaStream_t stream) {
  if (transposed) {
    const dim3 grid(unsigned((K + kTile - 1) / kTile), unsigned((N + kTile - 1) / kTile)), block(kTile, kTileRows);
    if (grid.y > 65535) return kShapeUnsupported;
    weight_to_half_t_kernel<E><<<grid, block, 0, stream>>>(src, dst, K, N);
  } else {
    const int64_t n = K * N;
    weight_to_half_kernel<E><<<unsigned(std::min<int64_t>((n + 255) / 256, 65535)), 256, 0, stream>>>(src, dst, n);
  }
  TL_CHECK_LAUNCH("weight_to_half");
  return kOk;
}

// ---- embedding, norm, residual, SwiGLU ----

__global__ void embed_gather_kernel(const __half* table, const int32_t* tokens, float* x, int D) {
  const int r = blockIdx.x;
  const __half* src = table + size_t(tokens[r]) * D;
  for (int d = threadIdx.x; d < D; d += blockDim.x) x[size_t(r) * D + d] = __half2float(src[d]);
}

__global__ void rms_norm_kernel(const float* x, const float* gain, __half* out, int D, float eps) {
  const float* row = x + size_t(blockIdx.x) * D;
  float ss = 0.f;
  for (int d = threadIdx.x; d < D; d += blockDim.x) ss += row[d] * row[d];
  ss = block_sum(ss);
  const float inv = rsqrtf(ss / float(D) + eps);
  for (int d = threadIdx.x; d < D; d += blockDim.x)
    out[size_t(blockIdx.x) * D + d] = __float2half_rn(row[d] * inv * gain[d]);
}

__global__ void residual_add_kernel(float* x, const __half* y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    x[i] += __half2float(y[i]);
}

// The formula of silu(g) * u is the fused SwiGLU pair's too (marlin_small_m.cu).
__global__ void swiglu_kernel(__half* gate, const __half* up, const float* bias_gate, const float* bias_up,
                              int64_t n, int64_t F) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    float g = __half2float(gate[i]), u = __half2float(up[i]);
    if (bias_gate) g += bias_gate[i % F];
    if (bias_up) u += bias_up[i % F];
    gate[i] = __float2half_rn(g / (1.0f + expf(-g)) * u);
  }
}

// ---- q/k/v split + RoPE ----

// One thread per (row, head of the H + 2 Hkv, pair i < dh/2).
__global__ void qkv_split_rope_kernel(const __half* qkv, const float* cos_tab, const float* sin_tab,
                                      __half* q, __half* k, __half* v, int n_seq, int T, int H, int Hkv, int dh,
                                      int position_major, int64_t total) {
  const int half = dh / 2, heads = H + 2 * Hkv;
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < total;
       idx += int64_t(gridDim.x) * blockDim.x) {
    const int i = int(idx % half);
    const int head = int((idx / half) % heads);
    const int64_t row = idx / (int64_t(half) * heads);
    const int s = int(position_major ? row % n_seq : row / T);
    const int t = int(position_major ? row / n_seq : row % T);
    const __half* src = qkv + row * int64_t(heads) * dh + int64_t(head) * dh;
    float a = __half2float(src[i]), b = __half2float(src[i + half]);
    __half* dst;
    if (head < H) {
      dst = q + ((int64_t(s) * H + head) * T + t) * dh;
    } else if (head < H + Hkv) {
      dst = k + ((int64_t(s) * Hkv + (head - H)) * T + t) * dh;
    } else {
      dst = v + ((int64_t(s) * Hkv + (head - H - Hkv)) * T + t) * dh;
      dst[i] = src[i];
      dst[i + half] = src[i + half];
      continue;
    }
    const float c = cos_tab[t * half + i], sn = sin_tab[t * half + i];
    dst[i] = __float2half_rn(a * c - b * sn);
    dst[i + half] = __float2half_rn(b * c + a * sn);
  }
}

// ---- causal attention ----
//
// Block = kAttnWarps warps x kQueriesPerWarp consecutive queries each (32 queries of one
// (sequence, head)); grid (ceil(T / 32), H, n_seq). Keys and values stream through shared memory
// in tiles of 32 (one key per lane for the scores); each warp keeps an online softmax (running
// max m, sum l) and the output, DPL dims per lane, of each of its queries in registers. A tile is
// loaded once per 32 queries: at 8 (one per warp) the K/V re-reads, T/8 passes over each
// sequence's keys, were what a 2048-token forward spent its time on. K tile rows are padded by
// one float so the 32 lanes reading 32 different keys at the same dim hit 32 different banks.
//
// Any even d_head up to 256: DPL = ceil(dh / 32) dims per lane, the tiles sized for 32 * DPL
// (dynamic shared memory, 98 KB at DPL = 8, above the 48 KB static limit). kFull: dh == 32 *
// DPL, the common head sizes (32, 64, 96, 128, 256) with a compile-time dh, so their loops
// unroll; otherwise (8, 80, 112, ...) dh is read at run time and the lanes or dims beyond it
// hold zeros.
constexpr int kAttnWarps = 8;
constexpr int kQueriesPerWarp = 4;
constexpr int kAttnQueries = kAttnWarps * kQueriesPerWarp;  // per block
constexpr int kKeyTile = 32;
constexpr int kAttnMaxDpl = 8;  // d_head <= 256

constexpr size_t attention_smem_bytes(int dpl) {
  return sizeof(float) * (size_t(kKeyTile) * (32 * dpl + 1) + size_t(kKeyTile) * 32 * dpl + size_t(kAttnQueries) * 32 * dpl);
}

// ---- q/k head norms (Qwen3) ----

// One warp per (row, head) of the H + Hkv q and k heads: the sum of squares in fp32 over dh,
// then each element scaled and multiplied by its gain, written back in place.
__global__ void head_rms_norm_kernel(__half* qkv, const float* q_gain, const float* k_gain, int H, int Hkv,
                                     int dh, float eps, int64_t heads_total) {
  const int lane = threadIdx.x % 32;
  const int64_t warps = int64_t(gridDim.x) * blockDim.x / 32;
  for (int64_t w = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) / 32; w < heads_total; w += warps) {
    const int64_t row = w / (H + Hkv);  // w is uniform per warp, so is the loop
    const int head = int(w % (H + Hkv));
    __half* v = qkv + row * int64_t(H + 2 * Hkv) * dh + int64_t(head) * dh;
    const float* g = head < H ? q_gain : k_gain;
    float ss = 0.f;
    for (int d = lane; d < dh; d += 32) {
      const float x = __half2float(v[d]);
      ss += x * x;
    }
    ss = warp_sum(ss);
    const float inv = rsqrtf(ss / float(dh) + eps);
    for (int d = lane; d < dh; d += 32) v[d] = __float2half_rn(g[d] * (__half2float(v[d]) * inv));
  }
}

__global__ void add_bias_kernel(__half* y, const float* bias, int64_t N, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    y[i] = __float2half_rn(__half2float(y[i]) + bias[i % N]);
}

template <int DPL, bool kFull>  // dims per lane: dh <= 32 * DPL (== when kFull)
__global__ void attention_kernel(const __half* q, const __half* k, const __half* v, __half* out,
                                 int T, int H, int Hkv, int dh_runtime, int window, int position_major) {
  constexpr int DH = 32 * DPL;  // the tiles' row length
  constexpr int QW = kQueriesPerWarp;
  const int dh = kFull ? DH : dh_runtime;
  extern __shared__ float attn_smem[];
  float (*ks)[DH + 1] = reinterpret_cast<float (*)[DH + 1]>(attn_smem);
  float (*vs)[DH] = reinterpret_cast<float (*)[DH]>(attn_smem + kKeyTile * (DH + 1));
  float (*qs)[DH] = reinterpret_cast<float (*)[DH]>(attn_smem + kKeyTile * (DH + 1) + kKeyTile * DH);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int s = blockIdx.z, h = blockIdx.y, kvh = h / (H / Hkv);
  const int q0 = blockIdx.x * kAttnQueries, i0 = q0 + warp * QW;  // this warp's queries i0 .. i0 + QW - 1
  const __half* kb = k + (int64_t(s) * Hkv + kvh) * T * dh;
  const __half* vb = v + (int64_t(s) * Hkv + kvh) * T * dh;
  const float scale = 1.0f / sqrtf(float(dh));
  for (int idx = threadIdx.x; idx < kAttnQueries * DH; idx += blockDim.x) {
    const int r = idx / DH, d = idx % DH, i = q0 + r;
    qs[r][d] = i < T && d < dh ? __half2float(q[((int64_t(s) * H + h) * T + i) * dh + d]) * scale : 0.f;
  }
  float m[QW], l[QW], acc[QW][DPL];
#pragma unroll
  for (int j = 0; j < QW; ++j) {
    m[j] = -INFINITY;
    l[j] = 0.f;
#pragma unroll
    for (int u = 0; u < DPL; ++u) acc[j][u] = 0.f;
  }
  const int last = min(T - 1, q0 + kAttnQueries - 1);  // the last key any query of the block sees
  // With a window, the block's first query sees keys from q0 - window + 1: earlier tiles are
  // skipped whole (a window of W costs O(W) per query instead of O(T)).
  const int first = window > 0 ? max(0, q0 - window + 1) / kKeyTile * kKeyTile : 0;
  for (int t0 = first; t0 <= last; t0 += kKeyTile) {
    __syncthreads();  // the previous tile is consumed (and qs is written before its first use)
    for (int idx = threadIdx.x; idx < kKeyTile * DH; idx += blockDim.x) {
      const int r = idx / DH, d = idx % DH, key = t0 + r;
      const bool in = key < T && d < dh;
      ks[r][d] = in ? __half2float(kb[int64_t(key) * dh + d]) : 0.f;
      vs[r][d] = in ? __half2float(vb[int64_t(key) * dh + d]) : 0.f;
    }
    __syncthreads();
    // Per query, uniform over the warp; every thread still reaches the syncs. A tile wholly
    // before a query's window or after it is skipped, so every tile processed holds a visible
    // key and m stays finite.
#pragma unroll
    for (int j = 0; j < QW; ++j) {
      const int i = i0 + j;
      const int lo = window > 0 ? i - window + 1 : 0;  // the query's first visible key
      if (i >= T || t0 > i || t0 + kKeyTile <= lo) continue;
      const int key = t0 + lane;
      const bool visible = key <= i && key >= lo;
      float sc = -INFINITY;
      if (visible) {
        float d = 0.f;
#pragma unroll 16
        for (int e = 0; e < dh; ++e) d += qs[warp * QW + j][e] * ks[lane][e];
        sc = d;
      }
      const float m_new = fmaxf(m[j], warp_max(sc));  // finite: the tile holds a visible key
      const float corr = expf(m[j] - m_new);          // 0 on the first tile (m = -inf)
      const float p = visible ? expf(sc - m_new) : 0.f;
      l[j] = l[j] * corr + warp_sum(p);
#pragma unroll
      for (int u = 0; u < DPL; ++u) acc[j][u] *= corr;
      const int nk = min(kKeyTile, i - t0 + 1);
      for (int jj = 0; jj < nk; ++jj) {
        const float pj = __shfl_sync(kFullMask, p, jj);
#pragma unroll
        for (int u = 0; u < DPL; ++u) acc[j][u] += pj * vs[jj][lane + 32 * u];
      }
      m[j] = m_new;
    }
  }
#pragma unroll
  for (int j = 0; j < QW; ++j) {
    const int i = i0 + j;
    if (i >= T) continue;
    const int64_t row = position_major ? int64_t(i) * gridDim.z + s : int64_t(s) * T + i;
    __half* o = out + row * int64_t(H) * dh + int64_t(h) * dh;
    const float inv = 1.0f / l[j];
#pragma unroll
    for (int u = 0; u < DPL; ++u)
      if (lane + 32 * u < dh) o[lane + 32 * u] = __float2half_rn(acc[j][u] * inv);
  }
}

template <int DPL>
int launch_attention(const __half* q, const __half* k, const __half* v, __half* out, int n_seq, int T, int H,
                     int Hkv, int dh, int window, RowOrder order, cudaStream_t stream) {
  const dim3 grid((T + kAttnQueries - 1) / kAttnQueries, H, n_seq);
  constexpr size_t smem = attention_smem_bytes(DPL);
  const bool full = dh == 32 * DPL;
  auto kernel = full ? attention_kernel<DPL, true> : attention_kernel<DPL, false>;
  if (smem > 48 * 1024)  // above the default dynamic limit: opt in
    TL_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  kernel<<<grid, kAttnWarps * 32, smem, stream>>>(q, k, v, out, T, H, Hkv, dh, window,
                                                  order == RowOrder::kPositionMajor ? 1 : 0);
  TL_CHECK_LAUNCH("attention_kernel");
  return kOk;
}

// ---- logits statistics ----

__global__ void row_stats_kernel(const __half* logits, const int32_t* targets, int V, float* lse,
                                 int32_t* argmax, float* target_logit) {
  __shared__ float best_v[kRowThreads];
  __shared__ int best_i[kRowThreads];
  const int r = blockIdx.x;
  const __half* x = logits + int64_t(r) * V;
  float bv = -INFINITY;
  int bi = V;  // larger than any index: loses every tie
  for (int j = threadIdx.x; j < V; j += blockDim.x) {
    const float val = __half2float(x[j]);
    if (val > bv || (val == bv && j < bi)) { bv = val; bi = j; }
  }
  best_v[threadIdx.x] = bv;
  best_i[threadIdx.x] = bi;
  __syncthreads();
  for (int stride = kRowThreads / 2; stride > 0; stride >>= 1) {
    if (threadIdx.x < stride) {
      const float ov = best_v[threadIdx.x + stride];
      const int oi = best_i[threadIdx.x + stride];
      if (ov > best_v[threadIdx.x] || (ov == best_v[threadIdx.x] && oi < best_i[threadIdx.x])) {
        best_v[threadIdx.x] = ov;
        best_i[threadIdx.x] = oi;
      }
    }
    __syncthreads();
  }
  const float mx = best_v[0];
  float sum = 0.f;
  for (int j = threadIdx.x; j < V; j += blockDim.x) sum += expf(__half2float(x[j]) - mx);
  sum = block_sum(sum);
  if (threadIdx.x == 0) {
    lse[r] = mx + logf(sum);
    if (argmax) argmax[r] = best_i[0];
    if (target_logit) {
      const int t = targets ? targets[r] : -1;
      target_logit[r] = (t >= 0 && t < V) ? __half2float(x[t]) : 0.f;
    }
  }
}

__global__ void kld_kernel(const __half* ref, const float* ref_lse, const __half* x, const float* lse,
                           int V, float* kld) {
  const int r = blockIdx.x;
  const __half* a = ref + int64_t(r) * V;
  const __half* b = x + int64_t(r) * V;
  const float la = ref_lse[r], lb = lse[r];
  float s = 0.f;
  for (int j = threadIdx.x; j < V; j += blockDim.x) {
    const float lr = __half2float(a[j]) - la;
    // log p_ref - log p per term, so two close distributions do not cancel large sums.
    s += expf(lr) * (lr - (__half2float(b[j]) - lb));
  }
  s = block_sum(s);
  if (threadIdx.x == 0) kld[r] = fmaxf(s, 0.f);
}

int grid_for(int64_t n, int threads) {
  const int64_t blocks = (n + threads - 1) / threads;
  return int(blocks < 65535 * 8 ? (blocks > 0 ? blocks : 1) : 65535 * 8);
}

}  // namespace

int embed_gather(const __half* table, const int32_t* tokens, float* x, int rows, int D,
                 cudaStream_t stream) {
  if (rows <= 0 || D <= 0) return rows == 0 ? kOk : kShapeUnsupported;
  embed_gather_kernel<<<rows, 128, 0, stream>>>(table, tokens, x, D);
  TL_CHECK_LAUNCH("embed_gather_kernel");
  return kOk;
}

int rms_norm_rows(const float* x, const float* gain, __half* out, int rows, int D, float eps,
                  cudaStream_t stream) {
  if (rows <= 0 || D <= 0) return rows == 0 ? kOk : kShapeUnsupported;
  rms_norm_kernel<<<rows, kRowThreads, 0, stream>>>(x, gain, out, D, eps);
  TL_CHECK_LAUNCH("rms_norm_kernel");
  return kOk;
}

int qkv_split_rope(const __half* qkv, const float* cos_tab, const float* sin_tab, __half* q,
                   __half* k, __half* v, int n_seq, int T, int H, int Hkv, int dh, RowOrder order,
                   cudaStream_t stream) {
  if (dh <= 0 || dh % 2 != 0 || H <= 0 || Hkv <= 0 || H % Hkv != 0 || T <= 0) return kShapeUnsupported;
  const int64_t total = int64_t(n_seq) * T * (H + 2 * Hkv) * (dh / 2);
  if (total == 0) return kOk;
  qkv_split_rope_kernel<<<grid_for(total, 256), 256, 0, stream>>>(
      qkv, cos_tab, sin_tab, q, k, v, n_seq, T, H, Hkv, dh, order == RowOrder::kPositionMajor ? 1 : 0, total);
  TL_CHECK_LAUNCH("qkv_split_rope_kernel");
  return kOk;
}

int head_rms_norm(__half* qkv, const float* q_gain, const float* k_gain, int rows, int H, int Hkv,
                  int dh, float eps, cudaStream_t stream) {
  if (rows < 0 || H <= 0 || Hkv <= 0 || dh <= 0) return kShapeUnsupported;
  const int64_t heads = int64_t(rows) * (H + Hkv);
  if (heads == 0) return kOk;
  head_rms_norm_kernel<<<grid_for(heads * 32, 256), 256, 0, stream>>>(qkv, q_gain, k_gain, H, Hkv, dh, eps, heads);
  TL_CHECK_LAUNCH("head_rms_norm_kernel");
  return kOk;
}

int add_bias_rows(__half* y, const float* bias, int64_t rows, int64_t N, cudaStream_t stream) {
  if (rows < 0 || N <= 0) return kShapeUnsupported;
  if (rows == 0) return kOk;
  add_bias_kernel<<<grid_for(rows * N, 256), 256, 0, stream>>>(y, bias, N, rows * N);
  TL_CHECK_LAUNCH("add_bias_kernel");
  return kOk;
}

int causal_attention(const __half* q, const __half* k, const __half* v, __half* out, int n_seq,
                     int T, int H, int Hkv, int dh, int window, RowOrder order, cudaStream_t stream) {
  if (H <= 0 || Hkv <= 0 || H % Hkv != 0 || T <= 0 || n_seq <= 0 || n_seq > 65535 || window < 0)
    return kShapeUnsupported;
  if (dh < 2 || dh % 2 != 0 || dh > 32 * kAttnMaxDpl) return kShapeUnsupported;
  switch ((dh + 31) / 32) {
    case 1: return launch_attention<1>(q, k, v, out, n_seq, T, H, Hkv, dh, window, order, stream);
    case 2: return launch_attention<2>(q, k, v, out, n_seq, T, H, Hkv, dh, window, order, stream);
    case 3: return launch_attention<3>(q, k, v, out, n_seq, T, H, Hkv, dh, window, order, stream);
    case 4: return launch_attention<4>(q, k, v, out, n_seq, T, H, Hkv, dh, window, order, stream);
    case 5: return launch_attention<5>(q, k, v, out, n_seq, T, H, Hkv, dh, window, order, stream);
    case 6: return launch_attention<6>(q, k, v, out, n_seq, T, H, Hkv, dh, window, order, stream);
    case 7: return launch_attention<7>(q, k, v, out, n_seq, T, H, Hkv, dh, window, order, stream);
    default: return launch_attention<8>(q, k, v, out, n_seq, T, H, Hkv, dh, window, order, stream);
  }
}

int swiglu_inplace(__half* gate, const __half* up, int64_t n, cudaStream_t stream) {
  if (n <= 0) return kOk;
  swiglu_kernel<<<grid_for(n, 256), 256, 0, stream>>>(gate, up, nullptr, nullptr, n, n);
  TL_CHECK_LAUNCH("swiglu_kernel");
  return kOk;
}

int swiglu_bias_rows(__half* gate, const __half* up, const float* bias_gate, const float* bias_up, int64_t rows,
                     int64_t F, cudaStream_t stream) {
  if (rows <= 0 || F <= 0) return kOk;
  swiglu_kernel<<<grid_for(rows * F, 256), 256, 0, stream>>>(gate, up, bias_gate, bias_up, rows * F, F);
  TL_CHECK_LAUNCH("swiglu_kernel");
  return kOk;
}

int residual_add(float* x, const __half* y, int64_t n, cudaStream_t stream) {
  if (n <= 0) return kOk;
  residual_add_kernel<<<grid_for(n, 256), 256, 0, stream>>>(x, y, n);
  TL_CHECK_LAUNCH("residual_add_kernel");
  return kOk;
}

int logits_row_stats(const __half* logits, const int32_t* targets, int rows, int V, float* lse,
                     int32_t* argmax, float* target_logit, cudaStream_t stream) {
  if (V <= 0) return kShapeUnsupported;
  if (rows <= 0) return kOk;
  row_stats_kernel<<<rows, kRowThreads, 0, stream>>>(logits, targets, V, lse, argmax, target_logit);
  TL_CHECK_LAUNCH("row_stats_kernel");
  return kOk;
}

int kld_rows(const __half* ref, const float* ref_lse, const __half* x, const float* lse, int rows,
             int V, float* kld, cudaStream_t stream) {
  if (V <= 0) return kShapeUnsupported;
  if (rows <= 0) return kOk;
  kld_kernel<<<rows, kRowThreads, 0, stream>>>(ref, ref_lse, x, lse, V, kld);
  TL_CHECK_LAUNCH("kld_kernel");
  return kOk;
}

int weight_to_half(const void* src, WeightElem elem, bool transposed, int64_t K, int64_t N, __half* dst,
                   cudaStream_t stream) {
  if (!src || !dst || K < 1 || N < 1) return kShapeUnsupported;
  switch (elem) {
    case WeightElem::kF32: return launch_weight_to_half<WeightElem::kF32>(src, transposed, K, N, dst, stream);
    case WeightElem::kF16: return launch_weight_to_half<WeightElem::kF16>(src, transposed, K, N, dst, stream);
    case WeightElem::kBF16: return launch_weight_to_half<WeightElem::kBF16>(src, transposed, K, N, dst, stream);
  }
  return kShapeUnsupported;
}

}  // namespace tl::cuda
