// Marlin-format INT4 x FP16 tensor-core GEMM: C[M, N] = A[M, K] * W[K, N]. The entry point for
// every M; 1..16 rows go to the decode kernel in marlin_small_m.cu, the tiled kernel here serves
// the rest (and M <= 16 where the decode kernel does not fit, or TL_MARLIN_SMALL_M=tile).
//
// Written for tinyloop-tools from the published Marlin design (Frantar et al., "MARLIN:
// Mixed-Precision Auto-Regressive Parallel Inference on Large Language Models") and the layout
// facts in formats/marlin_layout.h; it reads exactly what marlin-pack writes. What it does:
//   * INT4 weights stay INT4 in global memory; each k-tile of B is streamed once through a
//     STAGES-deep cp.async pipeline with an L2 evict-first policy (B is read once, A is reused
//     by every block and should stay in L2);
//   * A tiles arrive by cp.async into an XOR-swizzled shared layout and are read with ldmatrix;
//   * weights are dequantized in registers straight into mma.sync.m16n8k16 B fragments (the
//     packer's nibble order makes one 32-bit word yield two n8 fragments), fp32 accumulation;
//   * 8 warps per block split a 16 x TK x TN tile along k and reduce in shared memory;
//   * "striped" partitioning: the k-tile x n-tile iteration space is cut into one equal stripe
//     per SM, so every SM streams the same number of weight bytes even when N / TN < #SMs;
//     blocks sharing an n-tile reduce through fp32 slots in a scratch buffer and a per-tile
//     arrival counter in `workspace` (the last block to arrive sums and writes; see below).
//
// Partitioning (example: K = 4 k-tiles, N = 3 n-tiles, 6 blocks, stripe = 2 tiles):
//
//            n-tile 0   n-tile 1   n-tile 2          iteration it = n_tile * k_tiles + k_tile
//   k-tile 0 [ blk 0 ]  [ blk 2 ]  [ blk 4 ]         block b owns it in [b*iters, (b+1)*iters)
//   k-tile 1 [ blk 0 ]  [ blk 2 ]  [ blk 4 ]         a stripe may wrap into the next n-tile
//   k-tile 2 [ blk 1 ]  [ blk 3 ]  [ blk 5 ]         (then the block handles two segments)
//   k-tile 3 [ blk 1 ]  [ blk 3 ]  [ blk 5 ]
//
// Deviation from upstream, on purpose: upstream serializes the blocks of one n-tile through a
// spin lock and fp16 partial sums in C (p blocks -> p-1 serial L2 round trips and p-1 extra fp16
// roundings). Here every block writes its fp32 partial to its own slot, bumps an arrival counter
// and leaves; the last to arrive adds the slots in a fixed order (deterministic) and rounds once.
// No block ever waits for another, so nothing depends on blocks being co-resident.
#include "cuda/marlin_gemm.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <utility>

#include "core/group_size.h"
#include "cuda/cuda_check.h"
#include "cuda/device_context.h"
#include "cuda/marlin_device.cuh"
#include "cuda/tl_kernels.h"

namespace tl::cuda {
namespace {

using namespace marlin_dev;

// ---------------------------------------------------------------------------------------------
// Tuning constants.
// ---------------------------------------------------------------------------------------------

// 8 warps: enough to split a 128-deep k-tile into 2 sub-tiles per warp and still cover two
// (or four) 64-column warp tiles; one block per SM, the latency is hidden by the pipeline, not
// by occupancy.
constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
// Rows per launch slice (4 m16 blocks): the accumulators of 4 x 64 columns use 128 registers
// per thread; more would spill. Larger M is processed in 64-row slices.
constexpr int kMaxMBlocks = 4;
// Pipeline depth. At M <= 16 the kernel is a weight stream: an H200 moves ~4.3 TB/s over 132
// SMs with ~1 us of latency, i.e. ~30 KB must be in flight per SM; 6 stages of 8 KB of B keep
// 40 KB in flight. (Measured on the H200: 4, 6 and 10 stages gave the same times, so depth is
// not what limits this kernel there; see docs/perf.md.) With more rows the A tile grows and
// the tensor cores matter, so 4 stages (Marlin's choice) leave shared memory for the
// reduction and keep the largest configuration within sm_86/89's 99 KB.
#ifndef TL_MARLIN_STAGES_SMALL_M
#define TL_MARLIN_STAGES_SMALL_M 6
#endif
#ifndef TL_MARLIN_STAGES_LARGE_M
#define TL_MARLIN_STAGES_LARGE_M 4
#endif
constexpr int kStagesSmallM = TL_MARLIN_STAGES_SMALL_M;
constexpr int kStagesLargeM = TL_MARLIN_STAGES_LARGE_M;
// The shapes the kernel takes are the Marlin contract's (core/group_size.h, marlin_shape_ok):
// N and K multiples of 128, the smallest tile edge.

// ---------------------------------------------------------------------------------------------
// The kernel.
// ---------------------------------------------------------------------------------------------

struct Params {
  const __half* A;      // [M, K] rows of this launch slice
  const int4* B;        // [K/16, 2N] int32, as int4
  const __half* s;      // permuted scales [G, N]
  const __half* delta;  // natural [G, N] or nullptr (symmetric)
  __half* C;            // [M, N]
  int* counters;        // [N / TN] arrival counters, zero on entry and on exit
  float4* slots;        // [2 * gridDim.x] partial tiles
  int M, N, K;
  int groupsize;  // -1 (per column) or > 0
  int iters;      // k-tiles per block stripe
  int tiles_per_group;  // grouped: groupsize / TK (k-tiles sharing one row of scales)
};

template <int MB, int KB, int NB, int STAGES>
struct Tile {
  static constexpr int kRows = MB * 16;          // A / C rows of the tile
  static constexpr int kK = KB * 16;             // k depth of a tile
  static constexpr int kN = NB * 16;             // columns of a tile
  static constexpr int kN64 = NB / 4;            // 64-column warp tiles
  static constexpr int kKGroups = kWarps / kN64; // warps splitting k on one warp tile
  static constexpr int kSubPerWarp = KB / kKGroups;  // k16 sub-tiles per warp per k-tile
  static constexpr int kAChunks = kK / 8;        // 16-byte chunks per A row
  static constexpr int kBRow = NB * 8;           // int4 per k16 row of the B tile
  static constexpr int kABytes = kRows * kK * 2;
  static constexpr int kBBytes = KB * kBRow * 16;
  static constexpr int kStageBytes = kABytes + kBBytes + 2 * kN * 2;  // + scales + deltas
  static constexpr int kSlotF4 = kN64 * MB * 8 * 32;  // float4 per partial tile
  static constexpr int kReduceBytes = (kKGroups / 2) * kSlotF4 * 16;
  static constexpr int kSmemBytes = std::max(STAGES * kStageBytes, kReduceBytes);
  static_assert(kKGroups * kN64 == kWarps && kSubPerWarp * kKGroups == KB, "warp layout");
  static_assert(kAChunks >= 8, "the A swizzle XORs chunk indices with row % 8");
  static_assert((KB * kBRow) % kThreads == 0, "every thread issues the same B copies");
  static constexpr int kACopies = kRows * kAChunks;  // 16-byte copies per A tile
  static_assert(2 * (kN / 8) <= kThreads, "one thread per scale chunk");
};

// OCC: resident blocks per SM the kernel is compiled for (register budget 65536 / (256 OCC)).
// At M <= 16 one block per SM leaves each scheduler 2 warps to hide the shared-load ->
// dequant -> mma chain and the per-k-tile barrier; deeper pipelines did not help (docs/perf.md),
// more warps did: 2 blocks per SM (6 stages each, <= 128 registers) stream the large layers
// 7-13 % faster on the H200. See small_m_occ() for when the host asks for it.
template <int MB, int KB, int NB, int STAGES, int OCC>
__global__ void __launch_bounds__(kThreads, OCC) marlin_kernel(const Params p) {
  using T = Tile<MB, KB, NB, STAGES>;
  extern __shared__ int4 smem_int4[];
  char* const smem = reinterpret_cast<char*>(smem_int4);
  __shared__ int s_last;

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int n64 = warp % T::kN64;     // which 64-column warp tile
  const int kgroup = warp / T::kN64;  // which share of the k sub-tiles
  const int k_tiles = p.K / T::kK;
  const int total = k_tiles * (p.N / T::kN);
  const int it_begin = blockIdx.x * p.iters;
  const int it_end = min(it_begin + p.iters, total);
  const bool grouped = p.groupsize > 0;
  const bool asym = p.delta != nullptr;
  const uint64_t policy = evict_first_policy();
  int tiles_done = 0;  // tiles this block has consumed (stage of tile t: t % STAGES)
  const int b_row_int4 = p.N / 2;  // int4 per k16 row of B

  auto stage_a = [&](int st) { return reinterpret_cast<__half*>(smem + st * T::kStageBytes); };
  auto stage_b = [&](int st) {
    return reinterpret_cast<int4*>(smem + st * T::kStageBytes + T::kABytes);
  };
  auto stage_s = [&](int st) {
    return reinterpret_cast<__half*>(smem + st * T::kStageBytes + T::kABytes + T::kBBytes);
  };

  // ---- Per-thread copy assignments, fixed for the whole kernel. ----
  // The main loop is issue-bound at small M (the tensor cores idle, the SM issues copies and
  // dequantization), so every copy's offsets are computed once here and each k-tile only
  // advances two uniform pointers: the loop body stays ~2 instructions per 16-byte copy.
  constexpr int kAIters = (T::kACopies + kThreads - 1) / kThreads;
  constexpr int kBIters = KB * T::kBRow / kThreads;
  int a_smem[kAIters], a_glob[kAIters];
  bool a_on[kAIters];
#pragma unroll
  for (int i = 0; i < kAIters; ++i) {
    const int idx = threadIdx.x + i * kThreads;
    const int r = idx / T::kAChunks, c = idx % T::kAChunks;
    // Rows past M are never copied: they are zeroed once per segment (zero_pad_rows), so the
    // tensor cores multiply zeros and the copy path carries only real rows.
    a_on[i] = idx < T::kACopies && r < p.M;
    // XOR swizzle: the 8 rows one ldmatrix phase reads sit in 8 different 16-byte columns, so
    // the read is free of bank conflicts although rows are 256 bytes apart.
    a_smem[i] = r * T::kK + ((c ^ (r & 7)) * 8);
    a_glob[i] = r * p.K + c * 8;
  }
  int b_glob[kBIters];
#pragma unroll
  for (int i = 0; i < kBIters; ++i) {
    const int idx = threadIdx.x + i * kThreads;
    b_glob[i] = (idx / T::kBRow) * b_row_int4 + idx % T::kBRow;
  }
  constexpr int kSChunks = T::kN / 8;
  const bool s_copier = grouped && (threadIdx.x < kSChunks || (asym && threadIdx.x < 2 * kSChunks));
  const int s_smem = threadIdx.x * 8;  // scales then deltas, contiguous in the stage
  // Running source pointers of the next tile to fetch (set at each segment start).
  const __half* a_next = nullptr;
  const int4* b_next = nullptr;
  const __half* s_next = nullptr;
  int s_tile = 0;  // position of the next tile within its group

  // ---- Phase: issue the copies of the next k-tile into stage st. ----
  auto fetch = [&](int st) {
    char* stage = smem + st * T::kStageBytes;
    __half* a_dst = reinterpret_cast<__half*>(stage);
#pragma unroll
    for (int i = 0; i < kAIters; ++i)
      if (a_on[i]) cp_async16(a_dst + a_smem[i], a_next + a_glob[i]);
    int4* b_dst = reinterpret_cast<int4*>(stage + T::kABytes) + threadIdx.x;
#pragma unroll
    for (int i = 0; i < kBIters; ++i)
      cp_async16_stream(b_dst + i * kThreads, b_next + b_glob[i], policy);
    if (s_copier)  // a k-tile never straddles a group (groupsize % TK == 0)
      cp_async16(reinterpret_cast<__half*>(stage + T::kABytes + T::kBBytes) + s_smem, s_next);
    a_next += T::kK;
    b_next += size_t(KB) * b_row_int4;
    if (grouped && ++s_tile == p.tiles_per_group) {
      s_tile = 0;
      s_next += p.N;
    }
  };

  // Zero the A rows past M in every stage (the copies never write them). Needed once per
  // segment because the reduction scratch overlaps the stages.
  auto zero_pad_rows = [&]() {
    if (p.M >= T::kRows) return;
    constexpr int kRowInt4 = T::kK / 8;
    const int pad = (T::kRows - p.M) * kRowInt4;  // int4 per stage
    for (int i = threadIdx.x; i < pad * STAGES; i += kThreads) {
      const int st = i / pad, j = i % pad;
      reinterpret_cast<int4*>(stage_a(st) + p.M * T::kK)[j] = make_int4(0, 0, 0, 0);
    }
  };

  float acc[MB][8][4];
  half2 col_s[8], col_d[8];  // per-column mode: the dequant factors of this thread's 8 columns

  // Shared-memory read offsets of this thread (stage-relative), also fixed for the kernel.
  int a_rd[T::kSubPerWarp][MB], b_rd[T::kSubPerWarp];
#pragma unroll
  for (int j = 0; j < T::kSubPerWarp; ++j) {
    const int ks = kgroup + j * T::kKGroups;
    b_rd[j] = ks * T::kBRow + n64 * 32 + lane;
#pragma unroll
    for (int mb = 0; mb < MB; ++mb) {
      const int r = mb * 16 + (lane & 15);
      const int c = 2 * ks + (lane >> 4);
      a_rd[j][mb] = r * T::kK + ((c ^ (r & 7)) * 8);
    }
  }
  const int s_rd = n64 * 64 + 8 * (lane / 4);        // grouped scales: one int4
  const int d_rd = T::kN + n64 * 64 + lane / 4;      // grouped deltas: 8 halves, stride 8

  // ---- Phase: multiply the tile in stage st into the accumulators. ----
  auto compute = [&](int st) {
    const __half* a_src = stage_a(st);
    const int4* b_src = stage_b(st);
    half2 fs[8], fd[8];
    if (grouped) {
      // Grouped scales are permuted so that lane/4 finds its column's scale for all 8 n8
      // fragments of its warp tile in one 16-byte word.
      const __half* s_src = stage_s(st);
      const int4 sv = *reinterpret_cast<const int4*>(s_src + s_rd);
      const __half* sh = reinterpret_cast<const __half*>(&sv);
#pragma unroll
      for (int f = 0; f < 8; ++f) fs[f] = __half2half2(sh[f]);
#pragma unroll
      for (int f = 0; f < 8; ++f)
        fd[f] = asym ? __half2half2(s_src[d_rd + 8 * f]) : __float2half2_rn(0.f);
    } else {
#pragma unroll
      for (int f = 0; f < 8; ++f) {
        fs[f] = col_s[f];
        fd[f] = col_d[f];
      }
    }
#pragma unroll
    for (int j = 0; j < T::kSubPerWarp; ++j) {
      const int4 bq = b_src[b_rd[j]];
      uint32_t a[MB][4];
#pragma unroll
      for (int mb = 0; mb < MB; ++mb) ldmatrix_x4(a[mb], a_src + a_rd[j][mb]);
      const uint32_t words[4] = {uint32_t(bq.x), uint32_t(bq.y), uint32_t(bq.z),
                                 uint32_t(bq.w)};
#pragma unroll
      for (int w = 0; w < 4; ++w) {
        half2 d[4];
        dequant_word(words[w], d);
        // Group scale (and, for the asymmetric wrapper, delta) folded in with one fp16 fma:
        // the fragment holds (q - 8) * s + delta rounded once to fp16, exactly the weight an
        // fp16 copy of W_hat would hold. Per-column symmetric: s = 1, delta = 0 (exact).
        const uint32_t b0 = as_u32(__hfma2(d[0], fs[2 * w], fd[2 * w]));
        const uint32_t b1 = as_u32(__hfma2(d[1], fs[2 * w], fd[2 * w]));
        const uint32_t b2 = as_u32(__hfma2(d[2], fs[2 * w + 1], fd[2 * w + 1]));
        const uint32_t b3 = as_u32(__hfma2(d[3], fs[2 * w + 1], fd[2 * w + 1]));
#pragma unroll
        for (int mb = 0; mb < MB; ++mb) {
          mma_16816(acc[mb][2 * w], a[mb], b0, b1);
          mma_16816(acc[mb][2 * w + 1], a[mb], b2, b3);
        }
      }
    }
  };

  for (int it = it_begin; it < it_end;) {
    const int slice = it / k_tiles;
    const int kt0 = it - slice * k_tiles;
    const int seg_end = min(it_end, (slice + 1) * k_tiles);
    const int len = seg_end - it;
    const int col0 = slice * T::kN + n64 * 64;  // first column of this warp tile

#pragma unroll
    for (int mb = 0; mb < MB; ++mb)
#pragma unroll
      for (int f = 0; f < 8; ++f)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[mb][f][e] = 0.f;
    if (!grouped) {
      // Per-column mode: the symmetric kernel keeps q - 8 exact and scales the fp32 sums at
      // the end (Marlin's choice); the asymmetric wrapper needs W_hat = (q-8) s + delta inside
      // the sum, so it folds this thread's 8 column factors into every fragment.
#pragma unroll
      for (int f = 0; f < 8; ++f) {
        const int n = col0 + 8 * f + lane / 4;
        col_s[f] = asym ? __half2half2(p.s[per_column_scale_index(n)]) : __float2half2_rn(1.f);
        col_d[f] = asym ? __half2half2(p.delta[n]) : __float2half2_rn(0.f);
      }
    }

    // ---- Phase: the pipeline. STAGES-1 tiles in flight while one is multiplied. ----
    zero_pad_rows();
    a_next = p.A + size_t(kt0) * T::kK;
    b_next = p.B + size_t(kt0) * KB * b_row_int4 + size_t(slice) * T::kBRow;
    if (grouped) {
      const int chunk = threadIdx.x < kSChunks ? threadIdx.x : threadIdx.x - kSChunks;
      const __half* base = threadIdx.x < kSChunks ? p.s : p.delta;
      s_next = base + size_t(kt0 / p.tiles_per_group) * p.N + size_t(slice) * T::kN + chunk * 8;
      s_tile = kt0 % p.tiles_per_group;
    }
    const int t0 = tiles_done;  // tile i of this segment is the block's tile t0 + i
#pragma unroll
    for (int st = 0; st < STAGES - 1; ++st) {
      if (st < len) fetch((t0 + st) % STAGES);
      cp_async_commit();  // empty groups keep the wait count uniform
    }
    int stage = t0 % STAGES, fill = (t0 + STAGES - 1) % STAGES;
    for (int i = 0; i < len; ++i) {
      cp_async_wait<STAGES - 2>();  // tile i has landed (for this thread's copies) ...
      __syncthreads();              // ... for all threads; stage (i-1) is free again
      if (i + STAGES - 1 < len) fetch(fill);
      cp_async_commit();
      compute(stage);
      stage = stage + 1 == STAGES ? 0 : stage + 1;
      fill = fill + 1 == STAGES ? 0 : fill + 1;
    }
    tiles_done += len;
    cp_async_wait<0>();
    __syncthreads();  // pipeline drained: its shared memory is the reduction scratch now

    // ---- Phase: reduce the k-split warps of each warp tile in shared memory (a tree). ----
    float4* red = reinterpret_cast<float4*>(smem);
#pragma unroll
    for (int h = T::kKGroups / 2; h >= 1; h /= 2) {
      if (kgroup >= h && kgroup < 2 * h) {
        float4* dst = red + ((kgroup - h) * T::kN64 + n64) * (MB * 8 * 32);
#pragma unroll
        for (int mb = 0; mb < MB; ++mb)
#pragma unroll
          for (int f = 0; f < 8; ++f)
            dst[(mb * 8 + f) * 32 + lane] =
                make_float4(acc[mb][f][0], acc[mb][f][1], acc[mb][f][2], acc[mb][f][3]);
      }
      __syncthreads();
      if (kgroup < h) {
        const float4* src = red + (kgroup * T::kN64 + n64) * (MB * 8 * 32);
#pragma unroll
        for (int mb = 0; mb < MB; ++mb)
#pragma unroll
          for (int f = 0; f < 8; ++f) {
            const float4 v = src[(mb * 8 + f) * 32 + lane];
            acc[mb][f][0] += v.x;
            acc[mb][f][1] += v.y;
            acc[mb][f][2] += v.z;
            acc[mb][f][3] += v.w;
          }
      }
      __syncthreads();
    }

    // ---- Phase: combine the blocks that share this n-tile, then write fp16. ----
    const int first_blk = slice * k_tiles / p.iters;
    const int last_blk = ((slice + 1) * k_tiles - 1) / p.iters;
    const int nparts = last_blk - first_blk + 1;
    // Which of a block's two slots holds its partial of this n-tile: a partial n-tile is
    // either the first segment of a block's stripe (slot 0) or its last (slot 1).
    auto slot_of = [&](int blk) {
      const int which = (blk * p.iters >= slice * k_tiles) ? 0 : 1;
      return p.slots + size_t(2 * blk + which) * T::kSlotF4;
    };
    // Writes the 4 sums of tile element-quad idx (the index of a float4 in a slot, which is
    // also (n64 * MB + mb) * 256 + f * 32 + lane of the warp that holds it in registers):
    // columns 8f + 2 (lane % 4) + {0, 1} of rows lane/4 and lane/4 + 8 of m16 block mb.
    auto store_quad = [&](int idx, float4 v) {
      const int q_lane = idx % 32, q_f = (idx / 32) % 8, q_mb = (idx / 256) % MB,
                q_n64 = idx / (256 * MB);
      const int col = slice * T::kN + q_n64 * 64 + 8 * q_f + 2 * (q_lane % 4);
      float s0 = 1.f, s1 = 1.f;
      if (!grouped && !asym) {  // per-column symmetric: q - 8 was exact, scale the sums now
        s0 = __half2float(p.s[per_column_scale_index(col)]);
        s1 = __half2float(p.s[per_column_scale_index(col + 1)]);
      }
      const int row = q_mb * 16 + q_lane / 4;
      if (row < p.M)
        *reinterpret_cast<half2*>(p.C + size_t(row) * p.N + col) =
            __floats2half2_rn(v.x * s0, v.y * s1);
      if (row + 8 < p.M)
        *reinterpret_cast<half2*>(p.C + size_t(row + 8) * p.N + col) =
            __floats2half2_rn(v.z * s0, v.w * s1);
    };
    const bool holder = warp < T::kN64;  // warps of k-group 0 hold the block's sums
    if (nparts == 1) {
      if (holder) {
#pragma unroll
        for (int mb = 0; mb < MB; ++mb)
#pragma unroll
          for (int f = 0; f < 8; ++f)
            store_quad((n64 * MB + mb) * 256 + f * 32 + lane,
                       make_float4(acc[mb][f][0], acc[mb][f][1], acc[mb][f][2], acc[mb][f][3]));
      }
    } else {
      if (holder) {
        float4* mine = slot_of(blockIdx.x);
#pragma unroll
        for (int mb = 0; mb < MB; ++mb)
#pragma unroll
          for (int f = 0; f < 8; ++f)
            __stcg(&mine[(n64 * MB + mb) * 8 * 32 + f * 32 + lane],
                   make_float4(acc[mb][f][0], acc[mb][f][1], acc[mb][f][2], acc[mb][f][3]));
      }
      // marlin_device.cuh, "Cross-block combine": barrier, one acq_rel arrival, barrier.
      __syncthreads();
      if (threadIdx.x == 0) s_last = arrive_is_last(&p.counters[slice], nparts - 1);
      __syncthreads();
      if (s_last) {
        // Sum all parts (this block's own included, read back from its slot) in block order,
        // whichever block arrived last: the output does not depend on arrival order. All 256
        // threads share the work, and the loads of 4 parts are issued before any add, so the
        // tail costs ~nparts / 4 L2 round trips instead of nparts (it is serial: every other
        // block of this n-tile has finished, nothing overlaps it).
        constexpr int kQuadsPerThread = T::kSlotF4 / kThreads;
        static_assert(T::kSlotF4 % kThreads == 0, "slot quads split evenly over the block");
        // At most 2 quads x 4 parts in registers at a time (the 64 x 256 tiles have 16 quads
        // per thread; holding them all would spill).
        constexpr int kChunk = kQuadsPerThread < 2 ? kQuadsPerThread : 2;
        for (int i0 = 0; i0 < kQuadsPerThread; i0 += kChunk) {
          float4 sum[kChunk];
#pragma unroll
          for (int i = 0; i < kChunk; ++i) sum[i] = make_float4(0.f, 0.f, 0.f, 0.f);
          const int base = threadIdx.x + i0 * kThreads;
          const float4* part0 = slot_of(first_blk);
          for (int q = 0; q < nparts; q += 4) {
            float4 v[4][kChunk];
#pragma unroll
            for (int u = 0; u < 4; ++u) {
              const float4* part = q + u < nparts ? slot_of(first_blk + q + u) : part0;
#pragma unroll
              for (int i = 0; i < kChunk; ++i) v[u][i] = __ldcg(&part[base + i * kThreads]);
            }
#pragma unroll
            for (int u = 0; u < 4; ++u)
              if (q + u < nparts)
#pragma unroll
                for (int i = 0; i < kChunk; ++i) add4(sum[i], v[u][i]);
          }
#pragma unroll
          for (int i = 0; i < kChunk; ++i) store_quad(base + i * kThreads, sum[i]);
        }
        if (threadIdx.x == 0) atomicExch(&p.counters[slice], 0);  // leave it zeroed
      }
    }
    __syncthreads();  // shared memory and s_last are reused by the next segment
    it = seg_end;
  }
}

// ---------------------------------------------------------------------------------------------
// Host side.
// ---------------------------------------------------------------------------------------------

// The configurations we instantiate: (m16 blocks) x (k16, n16 blocks per tile). 128 x 128 for
// up to 16 rows (many k-tiles per n-tile give the stripes room; Marlin's small-batch shape);
// 64 x 256 above (twice the columns per A fragment load: more mma per ldmatrix when the
// tensor cores, not the weight stream, are the limit).
struct TileShape {
  int kb, nb;
};
constexpr TileShape kSmallM{8, 8};
constexpr TileShape kLargeM{4, 16};

TileShape pick_shape(int rows, int N) {
  if (rows > 16 && N % (kLargeM.nb * 16) == 0) return kLargeM;
  return kSmallM;
}

struct Launch {
  void (*kernel)(Params);
  int smem_bytes;
  int slot_f4;
  int occ;  // blocks per SM the kernel was compiled for
};

template <int MB, int KB, int NB, int OCC = 1>
Launch make_launch() {
  // Small M with two blocks per SM: 6 stages (75 KB) still fit twice in 228 KB.
  constexpr int kStages = MB == 1 ? kStagesSmallM : kStagesLargeM;
  using T = Tile<MB, KB, NB, kStages>;
  return Launch{marlin_kernel<MB, KB, NB, kStages, OCC>, T::kSmemBytes, T::kSlotF4, OCC};
}

// Blocks per SM at M <= 16. Two blocks help once each SM streams many tiles (measured on the
// H200: 7-13 % less time on layers with >= ~30 k-tiles per SM) and hurt a little on small layers,
// where the extra blocks only add partial sums to the cross-block reduction (docs/perf.md).
// Three blocks (4 stages, 80 registers) were slower everywhere. KernelOptions::
// tiled_small_m_blocks_per_sm (1 or 2) forces a value for tuning runs.
constexpr int kTwoBlocksMinTilesPerSm = 28;
int small_m_occ(int tiles, int sms, int forced) {
  if (forced == 1 || forced == 2) return forced;
  return tiles >= kTwoBlocksMinTilesPerSm * sms ? 2 : 1;
}

// The instantiated kernels: 4 + 1 (two blocks per SM at M <= 16) + 3 (the 64 x 256 shape
// only serves more than 16 rows).
Launch pick_launch(int mb, TileShape shape, int tiles, int sms, int forced_occ) {
  if (shape.kb == kLargeM.kb && shape.nb == kLargeM.nb) {
    switch (mb) {
      case 2: return make_launch<2, kLargeM.kb, kLargeM.nb>();
      case 3: return make_launch<3, kLargeM.kb, kLargeM.nb>();
      default: return make_launch<4, kLargeM.kb, kLargeM.nb>();
    }
  }
  switch (mb) {
    case 1:
      return small_m_occ(tiles, sms, forced_occ) == 2 ? make_launch<1, kSmallM.kb, kSmallM.nb, 2>()
                                          : make_launch<1, kSmallM.kb, kSmallM.nb, 1>();
    case 2: return make_launch<2, kSmallM.kb, kSmallM.nb>();
    case 3: return make_launch<3, kSmallM.kb, kSmallM.nb>();
    default: return make_launch<4, kSmallM.kb, kSmallM.nb>();
  }
}


// One slice (<= 64 rows) on the GPU at hand: tile shape, kernel, grid, slot bytes.
struct SlicePlan {
  TileShape shape{};
  Launch launch{};
  int tiles = 0, blocks = 0, iters = 0;
  size_t slot_bytes = 0;
};
int plan_slice(int rows, int N, int K, int device, int sms, const KernelOptions& options, SlicePlan* out) {
  SlicePlan& sp = *out;
  const int mb = (rows + 15) / 16;
  sp.shape = pick_shape(rows, N);
  sp.tiles = (K / (sp.shape.kb * 16)) * (N / (sp.shape.nb * 16));
  sp.launch = pick_launch(mb, sp.shape, sp.tiles, sms, options.tiled_small_m_blocks_per_sm);
  int smem_optin = 0;
  TL_CUDA_CHECK(cudaDeviceGetAttribute(&smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  if (sp.launch.smem_bytes > smem_optin) return kNoConfig;
  int resident = 1;
  if (int rc = detail::open_kernel(reinterpret_cast<const void*>(sp.launch.kernel), device, sp.launch.smem_bytes,
                                   kThreads, sp.launch.occ, &resident))
    return rc;
  sp.blocks = std::min(resident * sms, sp.tiles);
  sp.iters = (sp.tiles + sp.blocks - 1) / sp.blocks;
  sp.blocks = (sp.tiles + sp.iters - 1) / sp.iters;  // no empty stripes
  sp.slot_bytes = size_t(2) * std::min(sp.launch.occ * sms, sp.tiles) * sp.launch.slot_f4 * sizeof(float4);
  return kOk;
}

// Rows of the last slice of M (1..64), and the plans of the first and the last slice (every
// slice between is a full one, planned like the first).
int last_slice_rows(int M) {
  const int slice_rows = kMaxMBlocks * 16;
  return M % slice_rows ? M % slice_rows : std::min(M, slice_rows);
}
int plan_first_last(int M, int N, int K, int device, int sms, const KernelOptions& options, SlicePlan* first,
                    SlicePlan* last) {
  if (int rc = plan_slice(std::min(M, kMaxMBlocks * 16), N, K, device, sms, options, first)) return rc;
  return plan_slice(last_slice_rows(M), N, K, device, sms, options, last);
}

}  // namespace

namespace detail {

int marlin_tiled(const __half* A, const int32_t* B, const __half* s, const __half* delta, __half* C,
                 int* workspace, int M, int N, int K, int group_size, cudaStream_t stream,
                 const KernelOptions& options) {
  const int groupsize = int(marlin_groupsize_arg(K, group_size));  // the kernel's form: -1 per column
  int device = 0, sms = 0;
  if (int rc = current_device_sms(&device, &sms)) return rc;

  // Slots for the largest need of any slice: only the first and the last can differ.
  const int slice_rows = kMaxMBlocks * 16;
  SlicePlan first, last;
  if (int rc = plan_first_last(M, N, K, device, sms, options, &first, &last)) return rc;
  const size_t slot_bytes = std::max(first.slot_bytes, last.slot_bytes);
  void* slots = nullptr;
  if (int rc = stream_scratch(device, stream, slot_bytes, &slots)) return rc;

  for (int row0 = 0; row0 < M; row0 += slice_rows) {
    const int rows = std::min(M - row0, slice_rows);
    SlicePlan sp;
    if (int rc = plan_slice(rows, N, K, device, sms, options, &sp)) return rc;
    Params p;
    p.A = A + size_t(row0) * K;
    p.B = reinterpret_cast<const int4*>(B);
    p.s = s;
    p.delta = delta;
    p.C = C + size_t(row0) * N;
    p.counters = workspace;
    p.slots = static_cast<float4*>(slots);
    p.M = rows;
    p.N = N;
    p.K = K;
    p.groupsize = groupsize;
    p.iters = sp.iters;
    p.tiles_per_group = groupsize > 0 ? groupsize / (sp.shape.kb * 16) : 0;
    sp.launch.kernel<<<sp.blocks, kThreads, sp.launch.smem_bytes, stream>>>(p);
    TL_CHECK_LAUNCH("marlin_kernel");
  }
  return kOk;
}

int marlin_tiled_plan(int M, int N, int K, const KernelOptions& options, GemmPlan* plan) {
  int device = 0, sms = 0;
  if (int rc = current_device_sms(&device, &sms)) return rc;
  const int slice_rows = kMaxMBlocks * 16;
  SlicePlan first, last;
  if (int rc = plan_first_last(M, N, K, device, sms, options, &first, &last)) return rc;
  const int last_rows = last_slice_rows(M);
  plan->kernel = "tiled";
  plan->blocks = first.blocks;
  plan->warps_per_block = kThreads / 32;
  plan->slices = (M + slice_rows - 1) / slice_rows;
  plan->last_slice_rows = last_rows;
  plan->tiles_per_block = first.iters;
  plan->last_tiles_per_block = last.iters;
  plan->last_blocks_per_sm = last.launch.occ;
  return kOk;
}

}  // namespace detail

bool marlin_available(int device) {
  int major = 0, minor = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
    cudaGetLastError();  // clear: "not available" is the answer, not an error
    return false;
  }
  const int cc = major * 10 + minor;
  return cc == 80 || cc == 86 || cc == 89 || cc == 90;
}

}  // namespace tl::cuda
