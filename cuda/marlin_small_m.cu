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
//     bare codes (1024 + q or 64 + q, one lop3 per register), an extra mma per k16 step sums
//     the activations for the offset and for the asymmetric deltas (see "The products");
//   * a unit's scales and deltas are loaded when the unit before it starts: a DRAM read
//     outlasts a unit under the stream's queueing;
//   * rows of A past M are clamped to row M - 1 instead of predicated: each A row only feeds
//     its own output column of C^T, and those columns are never stored;
//   * partials: a slice (128 columns) wholly inside a warp's stripe is written from registers;
//     the warp parks the partial of a slice it shares in shared memory; after one barrier at
//     the end the block sums them in warp order. Blocks sharing a slice combine either inside
//     a thread-block cluster (sm_90: a cluster owns whole slices, the blocks read each other's
//     sums through distributed shared memory after a cluster barrier) or through fp32 slots
//     and an arrival counter (the last block to arrive sums the slots in block order and
//     writes fp16 once; no block waits for another). Both are deterministic;
//   * the epilogue is the kernel's critical path after the stream (the last block to finish
//     ends the kernel): all its loads are issued before they are summed, 16 bytes each.
// Measured on the H200 (docs/perf.md; per layer: docs/perf-history.md, "Decode kernel (M <= 16):
// per layer"): ~3.6 TB/s of codes on the 70B MLP layers at M <= 8, 1.83-1.87x / 2.63-2.65x
// cuBLAS over the 7B / 70B sets at M <= 16, g = 128; docs/kernels.md has the design notes and
// what was tried (shared-memory rings filled by cp.async or bulk copies, L2 prefetch, balanced
// row stripes).
#include <algorithm>

#include <cooperative_groups.h>

#include "cuda/cuda_check.h"
#include "cuda/device_context.h"
#include "cuda/marlin_device.cuh"
#include "cuda/marlin_gemm.h"
#include "cuda/marlin_small_m.cuh"
#include "cuda/tl_kernels.h"

namespace tl::cuda {
namespace {

using namespace marlin_dev;
using namespace detail::small_m;

// MB8: n8 blocks of A rows (1: M <= 8, 2: M <= 16). R: k16 rows in flight per warp (divides 8).
// kWarps: warps per block (8 / kWarps blocks per SM). kGrouped: scales per 128-row group, i.e.
// per unit (else one per column). kAsym: with deltas (the asymmetric wrapper). kPair: the fused
// SwiGLU pair (see "The SwiGLU pair" below; asymmetric only). kDependent: the variant launched as
// a programmatic dependent (PDL, sm_90 code only; see "The stream" below). A variant of its own,
// not a runtime flag, so that the plain kernels stay the code they were before PDL (the runtime
// flag's build, the flag off, measured 3-6 % slower at 9..16 rows on the H200, 2026-12-05).
template <int MB8, int R, int kWarps, bool kGrouped, bool kAsym, bool kPair = false, bool kDependent = false>
__global__ void __launch_bounds__(kWarps * 32, 8 / kWarps)
    marlin_small_m_kernel(const SmallParams p) {
  constexpr int kThreads = kWarps * 32;
  static_assert(kRowsPerUnit % R == 0, "a ring slot always holds the same row of a unit");
  static_assert(!kPair || kAsym, "the SwiGLU pair runs the asymmetric weights of the runtime");
  // ---- The SwiGLU pair. silu(x W_gate) * (x W_up) in one launch: the activations are read
  // once, the two [M, F] results never reach memory, one launch and one tail instead of three.
  // The pair is two ordinary Marlin sections (no format of its own). The kernel runs them as one
  // weight of 2 F columns whose slice c holds gate columns 64c..64c+63 in its half 0 and the same
  // up columns in its half 1: Marlin's layout keeps each 64-column half of a 128-column slice in
  // its own 512 bytes of every k16 row (and its scales in their own 64), so half 1 is read from
  // W_up's section at half 0's offset. Every accumulator of a gate column then sits in the same
  // thread as the one of its up column, 4 accumulator words apart (w and w + 4), and the combine
  // paths below sum an "item" of two quads (col, col + 64) where they sum one quad. ----
  constexpr int kSub = kPair ? 2 : 1;              // quads per item
  constexpr int kItemCols = kSliceN / kSub;        // the item's quads are kItemCols apart
  constexpr int kItemsPerRow = kItemCols / 4;
  // [kWarps][2][M][kRedStride]: each warp's two partials, then [2][M][kSliceN]: the block's
  // partials of its first / last slice when blocks combine through DSMEM (cluster mode).
  extern __shared__ float red[];
  __shared__ int tag[kWarps][2];  // the slice of each partial, -1: none
  __shared__ int s_last[2];

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int gid = lane / 4, tig = lane % 4;  // mma fragment coordinates
  const int k_tiles = p.K / kTileK;
  const int units = k_tiles * (p.N / kSliceN);
  const int block_units = kWarps * p.per_warp;
  // The units this block's group shares out: a cluster's whole slices, or all of them. Warps
  // take stripes of per_warp units in order, blocks kWarps stripes.
  const int rank = p.cluster ? blockIdx.x % p.cluster : blockIdx.x;  // block within the group
  const int g_begin =
      p.cluster ? min(blockIdx.x / p.cluster * p.cluster_slices * k_tiles, units) : 0;
  const int g_end = p.cluster ? min(g_begin + p.cluster_slices * k_tiles, units) : units;
  const int u_begin = min(g_begin + (rank * kWarps + warp) * p.per_warp, g_end);
  const int u_end = min(u_begin + p.per_warp, g_end);
  constexpr bool asym = kAsym;
  const int n_src = kPair ? p.N / 2 : p.N;  // columns of a section (the pair: each of its two)
  const int b_row = n_src / 2;              // int4 per k16 row of B
  const int ldc = p.n_out;                  // C's columns; a padded section's columns past it are not stored
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
    const size_t group_row = size_t(kGrouped ? kt : 0) * n_src + size_t(c) * kItemCols;
    Src r;
    r.b = p.B + size_t(kt) * kRowsPerUnit * b_row + c * (kItemCols / 2) + lane;
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
  auto load_row_b = [&](const Src& src, int j, int slot) {
    const int4* b = src.b + size_t(j) * b_row;
    bq[slot][0] = ldg_stream16(b);
    bq[slot][1] = ldg_stream16(kPair ? p.B_up + (b - p.B) : b + 32);
  };
  auto load_row_a = [&](const Src& src, int j, int slot) {
#pragma unroll
    for (int b8 = 0; b8 < MB8; ++b8) {
      const __half* x = src.a + x_row[b8] + 16 * j;
      xa[slot][b8][0] = ldg_u32(x);
      xa[slot][b8][1] = ldg_u32(x + 8);
    }
  };
  // A first: its loads hit L2 and are issued ahead of the row's weight loads (DRAM) so that
  // they do not queue behind them (H200: 7B layers ~0.1 us faster, 70B unchanged).
  auto load_row = [&](const Src& src, int j, int slot) {
    load_row_a(src, j, slot);
    load_row_b(src, j, slot);
  };

  // ---- Scales and deltas of this lane's 16 columns 64 h + 8 f + gid, factor f' = 8 h + f.
  // Grouped: loaded when the unit before starts, used when the unit ends. Loaded when their
  // own unit started, they had been the stream's main stall: under the weight stream's
  // queueing a DRAM read outlasts a unit, and the fold waited on the scale load at every unit
  // (ncu source sampling, 70B gate_up M = 1: 48 % of all stall samples on the first use).
  // Per-column asymmetric: loaded when a slice starts, used when it ends. Per-column symmetric
  // needs none here: its sums are scaled when C is written. ----
  int4 s_grp[2] = {};     // grouped: the unit's scales, permuted (half f': factor f')
  int4 s_nxt[2];          // grouped: the next unit's, loaded a unit ahead
  __half s_col[16] = {};  // per-column asymmetric: the slice's scales
  __half d_raw[16];       // asymmetric: the unit's (grouped) or the slice's (per column) deltas
  auto fetch_group_factors = [&](const Src& src, int4 (&dst)[2]) {
    dst[0] = __ldg(reinterpret_cast<const int4*>(src.s));
    dst[1] = __ldg(reinterpret_cast<const int4*>(kPair ? p.s_up + (src.s - p.s) : src.s + 64));
  };
  // Grouped asymmetric: the deltas are in natural column order, 16 scattered halves per lane,
  // the same for the 4 lanes of a gid. Each of those lanes loads 4 of them (factors tig + 4 i),
  // a unit ahead like the scales, and the fold gathers all 16 with 8 shuffles: 8 registers
  // held across the stream instead of 32.
  __half d_share[4] = {}, d_share_nxt[4];
  auto fetch_group_deltas = [&](const Src& src, __half (&dst)[4]) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int f = tig + 4 * i;
      if constexpr (kPair)
        dst[i] = (f < 8 ? src.d : p.delta_up + (src.d - p.delta))[8 * (f % 8)];
      else
        dst[i] = src.d[(f / 8) * 64 + 8 * (f % 8)];
    }
  };
  auto gather_group_deltas = [&]() {
    const uint32_t mine[2] = {as_u32(__halves2half2(d_share[0], d_share[1])),
                              as_u32(__halves2half2(d_share[2], d_share[3]))};
#pragma unroll
    for (int t = 0; t < 4; ++t)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const half2 v = as_half2(__shfl_sync(0xffffffffu, mine[h], (lane & ~3) | t));
        d_raw[t + 8 * h] = __low2half(v);
        d_raw[t + 4 + 8 * h] = __high2half(v);
      }
  };
  auto scale_of = [&](int f) {  // grouped
    return __half2float(reinterpret_cast<const __half*>(s_grp)[f]);
  };

  // ---- The products. The transposed mma C^T = W^T A^T: part[b8][w] holds, for columns
  // n = 16 w + gid (+ 8 for elements 2, 3; w = 4 h + word) and rows r = 8 b8 + 2 tig (+ 1 for
  // elements 1, 3), this unit's sum over k of w'_k a_k, in the offset form: the fragments are
  // the bare bit patterns, one lop3 per register: w' = 1024 + q on the k rows of each k16 step
  // and 64 + q on the k + 8 rows (dequant_word_biased). One more mma per k16 step multiplies
  // the same A^T fragment by a constant W^T whose rows 0..7 hold 1032 at k and 72 at k + 8,
  // rows 8..15 hold 1: cx[b8][0, 1] is the offset to take away (1032 * the k rows' sum of a
  // + 72 * the k + 8 rows'), cx[b8][2, 3] the sum of a over the unit (the group sum the deltas
  // multiply). This saves the four fp16 fixes per word that made the codes exactly q - 8.
  // Accuracy: the products are exact in the tensor core and the fp32 sum carries |1024 sum a|
  // on top of the result, ~2^8 times the typical |sum (q - 8) a| of a 128-deep unit, so it
  // keeps ~16 significant bits: ~0.03 fp16 ULP per unit, inside the 8 ULP of the grouped
  // bound (Marlin's own fp16 scale multiply rounds more) and inside the 1 ULP that per-column
  // symmetric output is held to (an fp16 rounding of 0.5 ULP plus these; the tests include
  // activations far from zero mean, where the offset is largest). ----
  float acc[MB8][8][4];   // the slice's sums: scaled (grouped, asymmetric) or not
  float part[MB8][8][4];  // this unit's sums of w' a
  float cx[MB8][4];       // this unit's offset and group sums (see above)
  float xs[MB8][2];       // per-column asymmetric: the slice's sums of a (rows 2 tig, + 1)
  // {rows 0..7 at k, rows 8..15 at k, rows 0..7 at k + 8, rows 8..15 at k + 8}: 1032, 1, 72,
  // 1 (fp16, all exact).
  const uint32_t kConstW[4] = {0x64086408u, 0x3c003c00u, 0x54805480u, 0x3c003c00u};
  auto mma_row = [&](int slot) {
#pragma unroll
    for (int w = 0; w < 8; ++w) {
      const int4& q = bq[slot][w / 4];
      const uint32_t word = uint32_t(w % 4 == 0 ? q.x : w % 4 == 1 ? q.y : w % 4 == 2 ? q.z : q.w);
      // d = {frag0 k, frag0 k+8, frag1 k, frag1 k+8} (columns 16 w + gid, + 8); the A
      // operand of W^T wants rows gid, gid + 8 at k, then at k + 8: {d0, d2, d1, d3}.
      uint32_t d[4];
      dequant_word_biased(word, d);
      const uint32_t a[4] = {d[0], d[2], d[1], d[3]};
#pragma unroll
      for (int b8 = 0; b8 < MB8; ++b8)
        mma_16816(part[b8][w], a, xa[slot][b8][0], xa[slot][b8][1]);
    }
#pragma unroll
    for (int b8 = 0; b8 < MB8; ++b8) mma_16816(cx[b8], kConstW, xa[slot][b8][0], xa[slot][b8][1]);
  };
  // fn(b8, w, e) for every accumulator element of a [MB8][8][4] set, fully unrolled.
  auto each_element = [&](auto&& fn) {
#pragma unroll
    for (int b8 = 0; b8 < MB8; ++b8)
#pragma unroll
      for (int w = 0; w < 8; ++w)
#pragma unroll
        for (int e = 0; e < 4; ++e) fn(b8, w, e);
  };
  auto clear = [&](float (&v)[MB8][8][4]) {
    each_element([&](int b8, int w, int e) { v[b8][w][e] = 0.f; });
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
    if constexpr (kGrouped && asym) gather_group_deltas();
    each_element([&](int b8, int w, int e) {
      const int f = 2 * w + e / 2;  // factor of column 16 w + gid (+ 8)
      const float t = part[b8][w][e] - cx[b8][e % 2];
      float& a = acc[b8][w][e];
      if constexpr (kGrouped) {
        a = fmaf(scale_of(f), t, a);
        if constexpr (asym) a = fmaf(__half2float(d_raw[f]), cx[b8][2 + e % 2], a);
      } else {
        a += t;  // per column: the slice's scale and delta come once, in finish_slice
      }
    });
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
      each_element([&](int b8, int w, int e) {
        const int f = 2 * w + e / 2;
        acc[b8][w][e] = fmaf(__half2float(s_col[f]), acc[b8][w][e],
                             __half2float(d_raw[f]) * xs[b8][e % 2]);
      });
#pragma unroll
      for (int b8 = 0; b8 < MB8; ++b8) xs[b8][0] = xs[b8][1] = 0.f;
    }
  };

  // ---- Output helpers. ----
  auto out_value = [&](int n, float v) {  // per-column symmetric: the sums scaled here
    if (!kGrouped && !asym) v *= __half2float(p.s[per_column_scale_index(n)]);
    return v;
  };
  // A slice that lies wholly in this warp's stripe: written straight from the registers.
  // The pair's output: silu(g + bias) * (u + bias) in fp32, one rounding (output column n of C).
  auto swiglu = [&](int n, float g, float u) {
    if (p.bias_gate) g += p.bias_gate[n];
    if (p.bias_up) u += p.bias_up[n];
    return g / (1.0f + expf(-g)) * u;
  };
  auto store_from_registers = [&](int c) {
    if constexpr (kPair) {  // accumulator words w (gate) and w + 4 (up) of the same column
#pragma unroll
      for (int b8 = 0; b8 < MB8; ++b8)
#pragma unroll
        for (int w = 0; w < 4; ++w)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int n = c * kItemCols + 16 * w + gid + 8 * (e / 2), row = 8 * b8 + 2 * tig + e % 2;
            if (row < M) p.C[size_t(row) * ldc + n] = __float2half_rn(swiglu(n, acc[b8][w][e], acc[b8][w + 4][e]));
          }
      return;
    }
    each_element([&](int b8, int w, int e) {
      const int n = c * kSliceN + 16 * w + gid + 8 * (e / 2), row = 8 * b8 + 2 * tig + e % 2;
      if (row < M && n < ldc) p.C[size_t(row) * ldc + n] = __float2half_rn(out_value(n, acc[b8][w][e]));
    });
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
  // The dependent variant loads the ring's weight rows and the first unit's factors, which
  // nothing the kernel before it writes, during that kernel's tail; A (its output, perhaps), C,
  // the slots and the counters wait for it to complete.
  if (u_begin < u_end) {
    cs = src_of(c, kt);
#pragma unroll
    for (int j = 0; j < R; ++j) {
      if constexpr (kDependent)
        load_row_b(cs, j, j);
      else
        load_row(cs, j, j);
    }
    if constexpr (kGrouped) fetch_group_factors(cs, s_grp);
    if constexpr (kGrouped && asym) fetch_group_deltas(cs, d_share);
  }
  if constexpr (kDependent) {
    griddep_wait();
    if (u_begin < u_end) {
#pragma unroll
      for (int j = 0; j < R; ++j) load_row_a(cs, j, j);
    }
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
          if constexpr (kPair) {  // half f / 8 of the slice: gate's or up's columns 64c..64c+63
            const int n = c * kItemCols + 8 * (f % 8) + gid;
            s_col[f] = (f < 8 ? p.s : p.s_up)[per_column_scale_index(n)];
            d_raw[f] = (f < 8 ? p.delta : p.delta_up)[n];
          } else {
            const int n = c * kSliceN + (f / 8) * 64 + 8 * (f % 8) + gid;
            s_col[f] = p.s[per_column_scale_index(n)];
            d_raw[f] = p.delta[n];
          }
        }
      }
    }
    const bool more = u + 1 < u_end;
    const bool slice_ends = !more || kt + 1 == k_tiles;
    const int next_c = kt + 1 == k_tiles ? c + 1 : c, next_kt = kt + 1 == k_tiles ? 0 : kt + 1;
    const Src ns = more ? src_of(next_c, next_kt) : cs;
    if constexpr (kGrouped) {
      if (more) fetch_group_factors(ns, s_nxt);
      if (asym && more) fetch_group_deltas(ns, d_share_nxt);
    }
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
    if constexpr (kGrouped) {
      s_grp[0] = s_nxt[0];
      s_grp[1] = s_nxt[1];
      if constexpr (asym) {
#pragma unroll
        for (int i = 0; i < 4; ++i) d_share[i] = d_share_nxt[i];
      }
    }
    cs = ns;
    c = next_c;
    kt = next_kt;
  }
  // This warp's weights are read (the first warp of a block to get here lets its block count as
  // done): the next grid, if launched as a programmatic dependent, may be scheduled as blocks
  // leave; it still waits for this grid to complete before it reads or writes anything of it.
  if constexpr (kDependent) griddep_launch_dependents();
  __syncthreads();  // every warp's partials are parked; nothing is in flight any more

  // ---- The epilogue. It runs once, after the stream, on the kernel's critical path (the
  // last block to finish it ends the kernel), so every step keeps all of a thread's loads in
  // flight at once: 4 columns (a quad, 16 bytes) per load, the summands of a quad selected by
  // predicates, not branches, and summed in a fixed order afterwards (deterministic). Measured
  // on the H200 (7B down, M = 16): one dependent load per partial had made this tail ~10 us. ----
  const int bu0 = min(g_begin + rank * block_units, g_end), bu1 = min(bu0 + block_units, g_end);
  const int c0 = bu0 / k_tiles, c1 = bu0 < bu1 ? (bu1 - 1) / k_tiles : c0 - 1;  // none if empty
  // An item: kSub quads of one row, kItemCols columns apart (one quad; the pair: a gate quad and
  // its up quad). (row, col) of item e: item_at(e), its quads at col + kItemCols * sub.
  constexpr int kItemsPerThread = 8 * MB8 * kItemsPerRow / kThreads;  // a slice's items, max M
  constexpr int kQuadsPerThread = kItemsPerThread * kSub;
  const int items = M * kItemsPerRow;
  float* const block_slots = red + 2 * kWarps * M * kRedStride;
  auto item_at = [&](int e) { return make_int2(e / kItemsPerRow, 4 * (e % kItemsPerRow)); };
  auto store_item = [&](int c, int row, int col, const float4 (&v)[kSub]) {
    const int n = c * kItemCols + col;
    half2 lo, hi;
    if constexpr (kPair) {
      lo = __floats2half2_rn(swiglu(n, v[0].x, v[1].x), swiglu(n + 1, v[0].y, v[1].y));
      hi = __floats2half2_rn(swiglu(n + 2, v[0].z, v[1].z), swiglu(n + 3, v[0].w, v[1].w));
    } else {
      lo = __floats2half2_rn(out_value(n, v[0].x), out_value(n + 1, v[0].y));
      hi = __floats2half2_rn(out_value(n + 2, v[0].z), out_value(n + 3, v[0].w));
    }
    __half* out = p.C + size_t(row) * ldc + n;
    if ((ldc & 3) == 0 && n + 3 < ldc) {  // 8 bytes, aligned: every row starts on a multiple of 4 halves
      uint2 bits;
      bits.x = *reinterpret_cast<const uint32_t*>(&lo);
      bits.y = *reinterpret_cast<const uint32_t*>(&hi);
      *reinterpret_cast<uint2*>(out) = bits;
    } else {  // a padded section's last columns, or rows of an odd width: halves up to ldc
      const __half v[4] = {__low2half(lo), __high2half(lo), __low2half(hi), __high2half(hi)};
#pragma unroll
      for (int i = 0; i < 4; ++i)
        if (n + i < ldc) out[i] = v[i];
    }
  };

  // Combine the block: per slice, the parked partials in warp order. A slice wholly inside
  // the block is written; its first / last slice (shared with neighbouring blocks) goes to
  // the block's slot 0 / 1: in shared memory in cluster mode, else in global memory.
  auto slot_of = [&](int blk, int which) {  // block blk's global slot `which`
    return p.slots + size_t(2 * blk + which) * kSlotFloats;
  };
  bool pending[2] = {false, false};
  for (int c = c0; c <= c1; ++c) {
    unsigned parked = 0;  // bit i: partial i % 2 of warp i / 2 belongs to slice c
#pragma unroll
    for (int i = 0; i < 2 * kWarps; ++i) parked |= unsigned(tag[i / 2][i % 2] == c) << i;
    if (!parked) continue;  // written from registers (or not this block's)
    const bool whole = c * k_tiles >= bu0 && (c + 1) * k_tiles <= bu1;
    const int which = c == c0 ? 0 : 1;
#pragma unroll
    for (int j = 0; j < kItemsPerThread; ++j) {
      const int e = threadIdx.x + j * kThreads;
      if (e >= items) break;
      const int2 rc = item_at(e);
      float4 sum[kSub];
#pragma unroll
      for (int sub = 0; sub < kSub; ++sub) {
        const int col = rc.y + kItemCols * sub;
        float4 v[2 * kWarps];
#pragma unroll
        for (int i = 0; i < 2 * kWarps; ++i)
          v[i] = parked >> i & 1u
                     ? *reinterpret_cast<const float4*>(red + (i * M + rc.x) * kRedStride + col)
                     : make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
        for (int i = 1; i < 2 * kWarps; ++i) add4(v[0], v[i]);
        sum[sub] = v[0];
      }
      if (whole) {
        store_item(c, rc.x, rc.y, sum);
        continue;
      }
#pragma unroll
      for (int sub = 0; sub < kSub; ++sub) {
        const int col = rc.y + kItemCols * sub;
        if (p.cluster)
          *reinterpret_cast<float4*>(block_slots + (which * M + rc.x) * kSliceN + col) = sum[sub];
        else
          __stcg(reinterpret_cast<float4*>(slot_of(blockIdx.x, which) + rc.x * kSliceN + col), sum[sub]);
      }
    }
    if (!whole) pending[which] = true;
  }

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  // Cluster mode: the blocks sharing a slice are one cluster, so their slots are read through
  // distributed shared memory after a cluster barrier: no global round trip, no arrival
  // counter, no serial tail in one block. Every thread of the cluster takes (slice, quad)
  // items and sums the slots in block order. Blocks with no units still arrive at both barriers.
  if (p.cluster) {
    namespace cg = cooperative_groups;
    cg::cluster_group cluster = cg::this_cluster();
    cluster.sync();  // release / acquire at cluster scope: every block's slots are visible
    const int slices = (g_end - g_begin) / k_tiles;
    for (int it = rank * kThreads + threadIdx.x; it < slices * items; it += p.cluster * kThreads) {
      const int f0 = (it / items) * k_tiles;  // the slice's first unit, relative to the group
      const int b0 = f0 / block_units, b1 = (f0 + k_tiles - 1) / block_units;
      if (b0 == b1) continue;  // inside one block: written above
      const int2 rc = item_at(it % items);
      float4 sum[kSub];
#pragma unroll
      for (int sub = 0; sub < kSub; ++sub) {
        const int col = rc.y + kItemCols * sub;
        float4 v[kMaxCluster];
#pragma unroll
        for (int k = 0; k < kMaxCluster; ++k) {
          v[k] = make_float4(0.f, 0.f, 0.f, 0.f);
          if (b0 + k <= b1) {
            // Slot 0 of a block holds the slice if the slice contains the block's first unit:
            // every block after b0, and b0 when the slice starts with it.
            const float* slots = cluster.map_shared_rank(block_slots, b0 + k);
            const int which = k == 0 && f0 != b0 * block_units ? 1 : 0;
            v[k] = *reinterpret_cast<const float4*>(slots + (which * M + rc.x) * kSliceN + col);
          }
        }
#pragma unroll
        for (int k = 1; k < kMaxCluster; ++k) add4(v[0], v[k]);
        sum[sub] = v[0];
      }
      store_item(g_begin / k_tiles + it / items, rc.x, rc.y, sum);
    }
    cluster.sync();  // no block leaves while a peer may still read its shared memory
    return;
  }
#endif
  if (!pending[0] && !pending[1]) return;

  // Flat mode: combine the blocks sharing the first / last slice through global slots, one
  // arriving thread per slice (marlin_device.cuh, "Cross-block combine").
  __syncthreads();
  if (threadIdx.x < 2 && pending[threadIdx.x]) {
    const int c = threadIdx.x == 0 ? c0 : c1;
    const int first_blk = c * k_tiles / block_units;
    const int last_blk = ((c + 1) * k_tiles - 1) / block_units;
    // arrive_is_last(&p.counters[c], last_blk - first_blk), spelled out: through the helper
    // nvcc allocates this kernel's registers differently (not the same SASS as the measured one).
    ::cuda::atomic_ref<int, ::cuda::thread_scope_device> counter(p.counters[c]);
    const int arrived = counter.fetch_add(1, ::cuda::memory_order_acq_rel);
    s_last[threadIdx.x] = arrived == last_blk - first_blk;
  }
  __syncthreads();
  constexpr int kPartsInFlight = 8;
  for (int i = 0; i < 2; ++i) {
    if (!pending[i] || !s_last[i]) continue;
    const int c = i == 0 ? c0 : c1;
    const int first_blk = c * k_tiles / block_units;
    const int nparts = ((c + 1) * k_tiles - 1) / block_units - first_blk + 1;
    // The first block holds the slice in slot 1 if the slice starts inside it; every later
    // block holds it in slot 0 (the slice contains its first unit).
    const int first_which = first_blk * block_units < c * k_tiles ? 1 : 0;
    float4 sum[kQuadsPerThread];
#pragma unroll
    for (int j = 0; j < kQuadsPerThread; ++j) sum[j] = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int q = 0; q < nparts; q += kPartsInFlight) {
      float4 v[kQuadsPerThread][kPartsInFlight];
#pragma unroll
      for (int j = 0; j < kQuadsPerThread; ++j) {  // quad j: item j / kSub's quad j % kSub
        const int e = threadIdx.x + (j / kSub) * kThreads;
        const int2 rc = item_at(e);
        const int col = rc.y + kItemCols * (j % kSub);
#pragma unroll
        for (int k = 0; k < kPartsInFlight; ++k) {
          const int part = q + k;
          const float* slot = slot_of(first_blk + part, part == 0 ? first_which : 0);
          v[j][k] = e < items && part < nparts
                        ? __ldcg(reinterpret_cast<const float4*>(slot + rc.x * kSliceN + col))
                        : make_float4(0.f, 0.f, 0.f, 0.f);
        }
      }
#pragma unroll
      for (int j = 0; j < kQuadsPerThread; ++j)
#pragma unroll
        for (int k = 0; k < kPartsInFlight; ++k) add4(sum[j], v[j][k]);
    }
#pragma unroll
    for (int j = 0; j < kItemsPerThread; ++j) {
      const int e = threadIdx.x + j * kThreads;
      if (e < items) {
        const int2 rc = item_at(e);
        float4 v[kSub];
#pragma unroll
        for (int sub = 0; sub < kSub; ++sub) v[sub] = sum[j * kSub + sub];
        store_item(c, rc.x, rc.y, v);
      }
    }
    if (threadIdx.x == 0) atomicExch(&p.counters[c], 0);  // leave it zeroed
  }
}

}  // namespace

namespace detail::small_m {

// Each warp's two parked partials, then the block's two slots (cluster mode).
int smem_bytes(int warps, int M) {
  return (warps * 2 * M * kRedStride + 2 * M * kSliceN) * int(sizeof(float));
}

template <int MB8, int R, int kWarps, bool kDependent>
SmallLaunch make_small_launch(bool grouped, bool asym) {
  auto kernel = grouped ? (asym ? marlin_small_m_kernel<MB8, R, kWarps, true, true, false, kDependent>
                                : marlin_small_m_kernel<MB8, R, kWarps, true, false, false, kDependent>)
                        : (asym ? marlin_small_m_kernel<MB8, R, kWarps, false, true, false, kDependent>
                                : marlin_small_m_kernel<MB8, R, kWarps, false, false, false, kDependent>);
  return SmallLaunch{kernel, kWarps, smem_bytes(kWarps, 8 * MB8)};
}

template <int MB8, int R, int kWarps, bool kDependent>
SmallLaunch make_pair_launch(bool grouped) {
  return SmallLaunch{grouped ? marlin_small_m_kernel<MB8, R, kWarps, true, true, true, kDependent>
                             : marlin_small_m_kernel<MB8, R, kWarps, false, true, true, kDependent>,
                     kWarps, smem_bytes(kWarps, 8 * MB8)};
}

template <bool kDependent>
SmallLaunch pick_variant(int M, bool grouped, bool asym, bool pair) {
  if (pair)
    return M <= 8 ? make_pair_launch<1, 8, 4, kDependent>(grouped) : make_pair_launch<2, 4, 8, kDependent>(grouped);
  return M <= 8 ? make_small_launch<1, 8, 4, kDependent>(grouped, asym)
                : make_small_launch<2, 4, 8, kDependent>(grouped, asym);
}

// 8 warps per SM with up to 255 registers each: at M <= 8 a whole unit (8 KB) in flight per
// warp, 64 KB per SM; at 9..16 rows the second set of accumulators leaves room for half a unit.
// At M <= 8 the 8 warps are two blocks of 4: a block's end-of-stream barrier then waits for 4
// stripes, not 8, and one block's epilogue overlaps the other's stream (H200: +2 % over both
// sets; at 9..16 rows blocks of 8 measured 1-3 % faster, see docs/perf.md).
// The SwiGLU pair takes the same shapes (H200, 2026-12-05: at 9..16 rows 2 k16 rows in flight
// instead of 4 measured 4-10 % slower, blocks of 4 warps the same).
SmallLaunch pick_small_launch(int M, bool grouped, bool asym, bool pair, bool dependent) {
  return dependent ? pick_variant<true>(M, grouped, asym, pair) : pick_variant<false>(M, grouped, asym, pair);
}

}  // namespace detail::small_m
}  // namespace tl::cuda
