// Marlin-format INT4 x FP16 GEMM for 1..16 rows (decode): C[M, N] = A[M, K] * W[K, N], on the
// exact bytes marlin-pack writes (the same operands and results as the tiled kernel in
// marlin_gemm.cu, which serves M > 16).
//
// At M <= 16 a GEMM is a weight stream and, on the H200, a race between the weight bytes and
// the instructions that turn them into tensor-core work. The tiled kernel (Marlin's structure:
// a shared-memory pipeline and a block barrier per k-tile) streamed ~15 GB/s per SM, half of
// what cuBLAS reads, with every warp waiting at every barrier for the slowest copy. This one:
//   * no barrier while streaming: each warp owns a contiguous stripe of "units" (128 columns x
//     128 k, one scale group) and loads its codes straight into registers: in Marlin's layout
//     lane l's 16 bytes of a k16 row are exactly lane l's B fragment, so nothing is staged;
//   * a register ring keeps the next R k16 rows of the stripe in flight while the warp
//     multiplies the current one, across unit and slice boundaries (R = 8 at M <= 8: a whole
//     unit, 8 KB per warp, 64 KB per SM);
//   * the product is computed transposed, C^T = W^T A^T: the dequantized codes of two adjacent
//     n8 fragments are exactly an m16n8k16 A operand, and A's rows are the n8 operand. At
//     M <= 8 that is one mma per 16 columns x 16 k (half the mma of the untransposed form);
//   * scales are applied in fp32 once per unit, not to every fragment: the fragments hold the
//     bare codes (1024 + q, one lop3 per register, or q - 8), an extra mma per k16 step sums
//     the activations for the offset and for the asymmetric deltas (see "The products");
//   * rows of A past M are clamped to row M - 1 instead of predicated: each A row only feeds
//     its own output column of C^T, and those columns are never stored;
//   * partials: a slice (128 columns) wholly inside a warp's stripe is written from registers;
//     the warp parks the partial of a slice it shares in shared memory; after one barrier at
//     the end the block sums them in warp order, and blocks sharing a slice combine through
//     fp32 slots and an arrival counter: the last to arrive sums the slots in block order and
//     writes fp16 once (deterministic; no block waits for another; the device-scope fence is
//     paid once per block, after its loads have drained).
// Measured on the H200 (docs/perf.md): ~3.4 TB/s of codes on the 70B MLP layers at M <= 8,
// 1.54x / 2.31x cuBLAS over the 7B / 70B sets at M <= 16; docs/kernels.md has the design notes
// and what was tried (a shared-memory ring with 12 warps per SM, balanced row stripes).
#include <algorithm>

#include "cuda/cuda_check.h"
#include "cuda/device_context.h"
#include "cuda/marlin_device.cuh"
#include "cuda/marlin_gemm.h"
#include "cuda/tl_kernels.h"

namespace tl::cuda {
namespace {

using namespace marlin_dev;

constexpr int kTileK = 128;                // k depth of a unit: one group of 128
constexpr int kSliceN = 128;               // columns of a unit: one warp's accumulators
constexpr int kRowsPerUnit = kTileK / 16;  // k16 rows per unit
// Partial-sum row stride (floats): 132 = 128 + 4 puts the 4 output rows a lane group writes
// at once (2 tig, stride 2 rows) on 4 distinct bank octets: conflict-free stores.
constexpr int kRedStride = kSliceN + 4;
constexpr int kSlotFloats = 16 * kSliceN;  // one block's fp32 partial of a slice (rows < M)

struct SmallParams {
  const __half* A;      // [M, K]
  const int4* B;        // [K/16, 2N] int32, as int4
  const __half* s;      // permuted scales [G, N]
  const __half* delta;  // natural [G, N] or nullptr (symmetric)
  __half* C;            // [M, N]
  int* counters;        // [N / 128] arrival counters, zero on entry and on exit
  float* slots;         // [2 * gridDim.x][kSlotFloats]
  int M, N, K;
  int per_warp;  // units per warp stripe
};

// MB8: n8 blocks of A rows (1: M <= 8, 2: M <= 16). R: k16 rows in flight per warp (divides 8).
// kWarps: warps per block (one block per SM). kGrouped: scales per 128-row group, i.e. per
// unit (else one per column). kAsym: with deltas (the asymmetric wrapper).
template <int MB8, int R, int kWarps, bool kGrouped, bool kAsym>
__global__ void __launch_bounds__(kWarps * 32, 1) marlin_small_m_kernel(const SmallParams p) {
  constexpr int kThreads = kWarps * 32;
  static_assert(kRowsPerUnit % R == 0, "a ring slot always holds the same row of a unit");
  extern __shared__ float red[];  // [kWarps][2][M][kRedStride]: each warp's two partials
  __shared__ int tag[kWarps][2];  // the slice of each partial, -1: none
  __shared__ int s_last[2];

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int gid = lane / 4, tig = lane % 4;  // mma fragment coordinates
  const int k_tiles = p.K / kTileK;
  const int units = k_tiles * (p.N / kSliceN);
  const int block_units = kWarps * p.per_warp;
  const int u_begin = min((blockIdx.x * kWarps + warp) * p.per_warp, units);
  const int u_end = min(u_begin + p.per_warp, units);
  constexpr bool asym = kAsym;
  const int b_row = p.N / 2;  // int4 per k16 row of B
  const int M = p.M;
  if (lane < 2) tag[warp][lane] = -1;

  // ---- Where this lane reads a unit's operands. Unit u: slice c = u / k_tiles (columns
  // 128 c .. 128 c + 127, two 64-column halves h), k-tile u % k_tiles. ----
  struct Src {
    const int4* b;    // row 0 of the unit, this lane's 16-byte word of half 0 (+ 32: half 1)
    const __half* a;  // A[0][k0 + 2 tig]
    const __half* s;  // grouped: this lane's 16-byte word of the unit's scales, half 0 (+ 64)
    const __half* d;  // grouped asymmetric: delta of column 64 h + 8 f + gid is d[64 h + 8 f]
  };
  auto src_of = [&](int c, int kt) {
    const size_t group_row = size_t(kGrouped ? kt : 0) * p.N + size_t(c) * kSliceN;
    Src r;
    r.b = p.B + size_t(kt) * kRowsPerUnit * b_row + c * (kSliceN / 2) + lane;
    r.a = p.A + size_t(kt) * kTileK + 2 * tig;
    r.s = p.s + group_row + 8 * gid;
    r.d = asym ? p.delta + group_row + gid : nullptr;
    return r;
  };

  // ---- The register ring. Slot indices are compile-time after unrolling. ----
  // A rows past M are not zeroed: lanes read row M - 1 again (same addresses, no extra
  // traffic). In C^T = W^T A^T each A row feeds only its own output column, and those are
  // never stored, so no predicate or mask is needed on the loads.
  size_t x_row[MB8];
#pragma unroll
  for (int b8 = 0; b8 < MB8; ++b8) x_row[b8] = size_t(min(8 * b8 + gid, M - 1)) * p.K;
  int4 bq[R][2];           // codes of one k16 row of the unit: two 64-column halves
  uint32_t xa[R][MB8][2];  // A^T fragments of the same row (k and k + 8 pairs)
  auto load_row = [&](const Src& src, int j, int slot) {
    const int4* b = src.b + size_t(j) * b_row;
    bq[slot][0] = ldg_stream16(b);
    bq[slot][1] = ldg_stream16(b + 32);
#pragma unroll
    for (int b8 = 0; b8 < MB8; ++b8) {
      const __half* x = src.a + x_row[b8] + 16 * j;
      xa[slot][b8][0] = ldg_u32(x);
      xa[slot][b8][1] = ldg_u32(x + 8);
    }
  };

  // ---- Scales and deltas of this lane's 16 columns 64 h + 8 f + gid, factor f' = 8 h + f.
  // Grouped: loaded when a unit starts, used when it ends (the unit's own streaming hides the
  // latency); per-column asymmetric: loaded when a slice starts, used when it ends. Per-column
  // symmetric needs none here: its exact integer sums are scaled when C is written. ----
  int4 s_grp[2];          // grouped: the unit's scales, permuted (half f': factor f')
  __half s_col[16] = {};  // per-column asymmetric: the slice's scales
  __half d_raw[16];       // asymmetric: the unit's (grouped) or the slice's (per column) deltas
  auto fetch_group_factors = [&](const Src& src) {
    s_grp[0] = __ldg(reinterpret_cast<const int4*>(src.s));
    s_grp[1] = __ldg(reinterpret_cast<const int4*>(src.s + 64));
    if (asym) {
#pragma unroll
      for (int f = 0; f < 16; ++f) d_raw[f] = src.d[(f / 8) * 64 + 8 * (f % 8)];
    }
  };
  auto scale_of = [&](int f) {  // grouped
    return __half2float(reinterpret_cast<const __half*>(s_grp)[f]);
  };

  // ---- The products. The transposed mma C^T = W^T A^T: part[b8][w] holds, for columns
  // n = 16 w + gid (+ 8 for elements 2, 3; w = 4 h + word) and rows r = 8 b8 + 2 tig (+ 1 for
  // elements 1, 3), this unit's sum over k of w'_k a_k, with w' = q - 8 exactly (rows k + 8 of each k16 step;
  // all rows in per-column mode) or w' = 1024 + q (rows k of each k16 step, grouped mode: the
  // fragment is then the bare bit pattern, no subtract). One more mma per k16 step multiplies
  // the same A^T fragment by a constant W^T whose rows 0..7 hold 1032 at k (0 at k + 8) and
  // rows 8..15 hold 1: cx[b8][0, 1] = 1032 * sum over the k rows of a (the offset to take
  // away), cx[b8][2, 3] = sum of a over the unit (the group sum the deltas multiply).
  // Accuracy of the offset form: the products are exact in the tensor core and the fp32 sum
  // carries |1024 sum a| on top of the result, ~2^8 times the typical |sum (q - 8) a| of a
  // 128-deep unit, so it keeps ~16 significant bits: ~0.03 fp16 ULP, far inside the 8 ULP
  // that the grouped path's bound allows (and the fp16 scale multiply of Marlin's own
  // dequantization rounds more). Per-column symmetric output is held to 1 ULP, so that mode
  // subtracts exactly instead. ----
  float acc[MB8][8][4];   // the slice's sums: scaled (grouped, asymmetric) or not
  float part[MB8][8][4];  // this unit's sums of w' a
  float cx[MB8][4];       // this unit's offset and group sums (see above)
  float xs[MB8][2];       // per-column asymmetric: the slice's sums of a (rows 2 tig, + 1)
  constexpr bool kOffset = kGrouped;
  constexpr bool need_cx = kOffset || asym;
  const uint32_t kConstW[4] = {kOffset ? 0x64086408u : 0u, 0x3c003c00u, 0u, 0x3c003c00u};
  auto mma_row = [&](int slot) {
#pragma unroll
    for (int w = 0; w < 8; ++w) {
      const int4& q = bq[slot][w / 4];
      const uint32_t word = uint32_t(w % 4 == 0 ? q.x : w % 4 == 1 ? q.y : w % 4 == 2 ? q.z : q.w);
      // d = {frag0 k, frag0 k+8, frag1 k, frag1 k+8} (columns 16 w + gid, + 8); the A
      // operand of W^T wants rows gid, gid + 8 at k, then at k + 8: {d0, d2, d1, d3}.
      uint32_t d[4];
      dequant_word_unscaled<!kOffset>(word, d);
      const uint32_t a[4] = {d[0], d[2], d[1], d[3]};
#pragma unroll
      for (int b8 = 0; b8 < MB8; ++b8)
        mma_16816(part[b8][w], a, xa[slot][b8][0], xa[slot][b8][1]);
    }
    if constexpr (need_cx) {
#pragma unroll
      for (int b8 = 0; b8 < MB8; ++b8) mma_16816(cx[b8], kConstW, xa[slot][b8][0], xa[slot][b8][1]);
    }
  };
  auto clear = [&](float (&v)[MB8][8][4]) {
#pragma unroll
    for (int b8 = 0; b8 < MB8; ++b8)
#pragma unroll
      for (int w = 0; w < 8; ++w)
#pragma unroll
        for (int e = 0; e < 4; ++e) v[b8][w][e] = 0.f;
  };
  auto clear_unit = [&]() {
    clear(part);
#pragma unroll
    for (int b8 = 0; b8 < MB8; ++b8)
#pragma unroll
      for (int e = 0; e < 4; ++e) cx[b8][e] = 0.f;
  };
  // acc += scale * (part - offset) + delta * group sum, per element, in fp32.
  auto fold_unit = [&]() {
#pragma unroll
    for (int b8 = 0; b8 < MB8; ++b8)
#pragma unroll
      for (int w = 0; w < 8; ++w)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int f = 2 * w + e / 2;  // factor of column 16 w + gid (+ 8)
          const float t = kOffset ? part[b8][w][e] - cx[b8][e % 2] : part[b8][w][e];
          float& a = acc[b8][w][e];
          if constexpr (kGrouped) {
            a = fmaf(scale_of(f), t, a);
            if constexpr (asym) a = fmaf(__half2float(d_raw[f]), cx[b8][2 + e % 2], a);
          } else {
            a += t;  // per column: the slice's scale and delta come once, in finish_slice
          }
        }
    if constexpr (!kGrouped && asym) {
#pragma unroll
      for (int b8 = 0; b8 < MB8; ++b8) {
        xs[b8][0] += cx[b8][2];
        xs[b8][1] += cx[b8][3];
      }
    }
    clear_unit();
  };
  // Per-column asymmetric: acc = s * (sum of (q - 8) a) + delta * (sum of a), once per slice.
  auto finish_slice = [&]() {
    if constexpr (!kGrouped && asym) {
#pragma unroll
      for (int b8 = 0; b8 < MB8; ++b8) {
#pragma unroll
        for (int w = 0; w < 8; ++w)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int f = 2 * w + e / 2;
            acc[b8][w][e] = fmaf(__half2float(s_col[f]), acc[b8][w][e],
                                 __half2float(d_raw[f]) * xs[b8][e % 2]);
          }
        xs[b8][0] = xs[b8][1] = 0.f;
      }
    }
  };

  // ---- Output helpers. ----
  auto out_value = [&](int n, float v) {  // per-column symmetric: the exact sums scaled here
    if (!kGrouped && !asym) v *= __half2float(p.s[per_column_scale_index(n)]);
    return v;
  };
  auto store_pair = [&](int c, int row, int col, float2 v) {
    const int n = c * kSliceN + col;
    *reinterpret_cast<half2*>(p.C + size_t(row) * p.N + n) =
        __floats2half2_rn(out_value(n, v.x), out_value(n + 1, v.y));
  };
  // A slice that lies wholly in this warp's stripe: written straight from the registers.
  auto store_from_registers = [&](int c) {
#pragma unroll
    for (int b8 = 0; b8 < MB8; ++b8)
#pragma unroll
      for (int w = 0; w < 8; ++w)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int n = c * kSliceN + 16 * w + gid + 8 * (e / 2), row = 8 * b8 + 2 * tig + e % 2;
          if (row < M) p.C[size_t(row) * p.N + n] = __float2half_rn(out_value(n, acc[b8][w][e]));
        }
  };
  // Otherwise the warp parks it in shared memory (partial 0: the slice the stripe starts in,
  // 1: the one it ends in) for the block to combine at the end; no barrier mid-stream.
  auto park = [&](int c, int which) {
    float* dst = red + (warp * 2 + which) * M * kRedStride;
#pragma unroll
    for (int b8 = 0; b8 < MB8; ++b8)
#pragma unroll
      for (int w = 0; w < 8; ++w) {
        const int n = 16 * w + gid, r = 8 * b8 + 2 * tig;  // e 0: (r, n) 1: (r+1, n) 2, 3: n+8
        if (r < M) {
          dst[r * kRedStride + n] = acc[b8][w][0];
          dst[r * kRedStride + n + 8] = acc[b8][w][2];
        }
        if (r + 1 < M) {
          dst[(r + 1) * kRedStride + n] = acc[b8][w][1];
          dst[(r + 1) * kRedStride + n + 8] = acc[b8][w][3];
        }
      }
    if (lane == 0) tag[warp][which] = c;
  };

  // ---- The stream: this warp's units in order, R rows always in flight. Unit u is
  // (slice c, k-tile kt), u = c * k_tiles + kt, advanced without a division. ----
  int c = u_begin / k_tiles, kt = u_begin % k_tiles;
  Src cs{};
  if (u_begin < u_end) {
    cs = src_of(c, kt);
#pragma unroll
    for (int j = 0; j < R; ++j) load_row(cs, j, j);
  }
  clear(acc);
  clear_unit();
#pragma unroll
  for (int b8 = 0; b8 < MB8; ++b8) xs[b8][0] = xs[b8][1] = 0.f;
  for (int u = u_begin; u < u_end; ++u) {
    if constexpr (!kGrouped && asym) {
      if (u == u_begin || kt == 0) {  // per-column asymmetric: a new slice's factors
#pragma unroll
        for (int f = 0; f < 16; ++f) {
          const int n = c * kSliceN + (f / 8) * 64 + 8 * (f % 8) + gid;
          s_col[f] = p.s[per_column_scale_index(n)];
          d_raw[f] = p.delta[n];
        }
      }
    }
    const bool more = u + 1 < u_end;
    const bool slice_ends = !more || kt + 1 == k_tiles;
    const int next_c = kt + 1 == k_tiles ? c + 1 : c, next_kt = kt + 1 == k_tiles ? 0 : kt + 1;
    const Src ns = more ? src_of(next_c, next_kt) : cs;
    if constexpr (kGrouped) fetch_group_factors(cs);
    // Multiply the unit's 8 rows, refilling each slot with the row R places further in this
    // warp's stream; the stripe's last unit refills nothing (two unrolled copies of the loop,
    // so neither has a branch per row).
    auto rows = [&](bool refill) {
#pragma unroll
      for (int j = 0; j < kRowsPerUnit; ++j) {
        mma_row(j % R);
        if (j + R < kRowsPerUnit)
          load_row(cs, j + R, j % R);
        else if (refill)
          load_row(ns, j + R - kRowsPerUnit, j % R);
      }
    };
    if (more)
      rows(true);
    else
      rows(false);
    fold_unit();
    if (slice_ends) {  // the slice ends here for this warp
      finish_slice();
      const int first = c * k_tiles;
      if (first >= u_begin && first + k_tiles <= u_end)
        store_from_registers(c);
      else
        park(c, first < u_begin ? 0 : 1);
      clear(acc);
    }
    cs = ns;
    c = next_c;
    kt = next_kt;
  }
  __syncthreads();  // every warp's partials are parked; nothing is in flight any more

  // ---- Combine the block: per slice, the parked partials in warp order (deterministic);
  // a slice wholly inside the block is written, the first / last one (shared with the
  // neighbouring blocks) goes to this block's slot 0 / 1. ----
  const int bu0 = blockIdx.x * block_units, bu1 = min(bu0 + block_units, units);
  if (bu0 >= bu1) return;
  const int c0 = bu0 / k_tiles, c1 = (bu1 - 1) / k_tiles;
  const int pairs = M * (kSliceN / 2);
  auto slot_of = [&](int blk, int c) {  // block blk's partial of slice c
    const int which = (blk * block_units) / k_tiles == c ? 0 : 1;
    return p.slots + size_t(2 * blk + which) * kSlotFloats;
  };
  bool pending[2] = {false, false};
  for (int c = c0; c <= c1; ++c) {
    bool parked = false;
    for (int i = 0; i < 2 * kWarps; ++i) parked |= tag[i / 2][i % 2] == c;
    if (!parked) continue;  // written from registers (or not this block's)
    const bool whole = c * k_tiles >= bu0 && (c + 1) * k_tiles <= bu1;
    for (int e = threadIdx.x; e < pairs; e += kThreads) {
      const int row = e / (kSliceN / 2), col = 2 * (e % (kSliceN / 2));
      float2 v = make_float2(0.f, 0.f);
      for (int i = 0; i < 2 * kWarps; ++i)
        if (tag[i / 2][i % 2] == c) {
          const float2 x =
              *reinterpret_cast<const float2*>(red + (i * M + row) * kRedStride + col);
          v.x += x.x;
          v.y += x.y;
        }
      if (whole)
        store_pair(c, row, col, v);
      else
        __stcg(reinterpret_cast<float2*>(slot_of(blockIdx.x, c) + row * kSliceN + col), v);
    }
    if (!whole) pending[c == c0 ? 0 : 1] = true;
  }
  if (!pending[0] && !pending[1]) return;

  // ---- Combine the blocks sharing the first / last slice: the last to arrive sums all
  // slots in block order and writes C (no block waits for another). Only now, with no loads in
  // flight, does the block pay for a device-scope fence. ----
  __threadfence();
  __syncthreads();
  if (threadIdx.x < 2 && pending[threadIdx.x]) {
    const int c = threadIdx.x == 0 ? c0 : c1;
    const int first_blk = c * k_tiles / block_units;
    const int last_blk = ((c + 1) * k_tiles - 1) / block_units;
    s_last[threadIdx.x] = atomicAdd(&p.counters[c], 1) == last_blk - first_blk;
  }
  __syncthreads();
  for (int i = 0; i < 2; ++i) {
    if (!pending[i] || !s_last[i]) continue;
    __threadfence();
    const int c = i == 0 ? c0 : c1;
    const int first_blk = c * k_tiles / block_units;
    const int nparts = ((c + 1) * k_tiles - 1) / block_units - first_blk + 1;
    for (int e = threadIdx.x; e < pairs; e += kThreads) {
      const int row = e / (kSliceN / 2), col = 2 * (e % (kSliceN / 2));
      const int off = row * kSliceN + col;
      float2 sum = make_float2(0.f, 0.f);
      for (int q = 0; q < nparts; q += 4) {  // four loads in flight: this tail is serial
        float2 v[4];
#pragma unroll
        for (int k = 0; k < 4; ++k)
          v[k] = q + k < nparts
                     ? __ldcg(reinterpret_cast<const float2*>(slot_of(first_blk + q + k, c) + off))
                     : make_float2(0.f, 0.f);
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          sum.x += v[k].x;
          sum.y += v[k].y;
        }
      }
      store_pair(c, row, col, sum);
    }
    if (threadIdx.x == 0) atomicExch(&p.counters[c], 0);  // leave it zeroed
  }
}

struct SmallLaunch {
  void (*kernel)(SmallParams);
  int warps;           // per block
  int max_smem_bytes;  // for 8 * MB8 rows; a launch takes what its M needs
};

int smem_bytes(int warps, int M) { return warps * 2 * M * kRedStride * int(sizeof(float)); }

template <int MB8, int R, int kWarps>
SmallLaunch make_small_launch(bool grouped, bool asym) {
  const int smem = smem_bytes(kWarps, 8 * MB8);
  auto kernel = grouped ? (asym ? marlin_small_m_kernel<MB8, R, kWarps, true, true>
                                : marlin_small_m_kernel<MB8, R, kWarps, true, false>)
                        : (asym ? marlin_small_m_kernel<MB8, R, kWarps, false, true>
                                : marlin_small_m_kernel<MB8, R, kWarps, false, false>);
  return SmallLaunch{kernel, kWarps, smem};
}

// 8 warps per SM with up to 255 registers each: at M <= 8 a whole unit (8 KB) in flight per
// warp, 64 KB per SM; at 9..16 rows the second set of accumulators leaves room for half a unit.
SmallLaunch pick_small_launch(int M, bool grouped, bool asym) {
  return M <= 8 ? make_small_launch<1, 8, 8>(grouped, asym)
                : make_small_launch<2, 4, 8>(grouped, asym);
}

}  // namespace

size_t marlin_workspace_ints(int N) { return N > 0 ? size_t(N + kSliceN - 1) / kSliceN : 0; }

namespace detail {

int marlin_small_m(const __half* A, const int32_t* B, const __half* s, const __half* delta,
                   __half* C, int* workspace, int M, int N, int K, int groupsize,
                   cudaStream_t stream) {
  if (M < 1 || M > kSmallMMaxRows || N % kSliceN || K % kTileK) return kShapeUnsupported;
  if (groupsize != -1 && groupsize != kTileK) return kNoConfig;
  int device = 0, sms = 0;
  if (int rc = current_device_sms(&device, &sms)) return rc;
  int smem_optin = 0;
  TL_CUDA_CHECK(cudaDeviceGetAttribute(&smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin,
                                       device));
  const SmallLaunch l = pick_small_launch(M, groupsize > 0, delta != nullptr);
  if (l.max_smem_bytes > smem_optin) return kNoConfig;  // e.g. 9..16 rows on sm_86 / sm_89
  int resident = 1;
  if (int rc = open_kernel(reinterpret_cast<const void*>(l.kernel), device, l.max_smem_bytes,
                           l.warps * 32, 1, &resident))
    return rc;
  // Warp stripes of ceil(units / warps) units, one block per SM (fewer for small problems).
  const int units = (K / kTileK) * (N / kSliceN);
  const int warps = std::min(resident * sms * l.warps, units);
  const int per_warp = (units + warps - 1) / warps;
  const int blocks = (units + l.warps * per_warp - 1) / (l.warps * per_warp);

  void* slots = nullptr;
  if (int rc = stream_scratch(device, stream, size_t(2) * blocks * kSlotFloats * sizeof(float),
                              &slots))
    return rc;
  SmallParams p;
  p.A = A;
  p.B = reinterpret_cast<const int4*>(B);
  p.s = s;
  p.delta = delta;
  p.C = C;
  p.counters = workspace;
  p.slots = static_cast<float*>(slots);
  p.M = M;
  p.N = N;
  p.K = K;
  p.per_warp = per_warp;
  l.kernel<<<blocks, l.warps * 32, smem_bytes(l.warps, M), stream>>>(p);
  TL_CHECK_LAUNCH("marlin_small_m_kernel");
  return kOk;
}

}  // namespace detail
}  // namespace tl::cuda
