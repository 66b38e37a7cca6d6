// The Hopper prefill kernel (sm_90a): C[M, N] = A[M, K] * W[K, N] for M > 16 on the Marlin
// section exactly as marlin-pack writes it (no other layout, files unchanged), with warpgroup
// MMA (wgmma.mma_async), tensor copies (TMA) and warp specialization. Written for
// tinyloop-tools from the PTX ISA and the published Hopper GEMM designs (warp-specialized
// producer / consumer warpgroups, persistent tile loops, split-K over a cluster); no code of
// CUTLASS, Machete or Marlin is used.
//
// The transposed problem. wgmma multiplies a 64-row A operand (registers or shared memory) by
// an N-column B operand from shared memory, N = 8..256. The weight is the operand that must be
// decoded on the way, so it is wgmma's register A and the product is C^T = W^T * A^T:
//   wgmma M (64 rows)  = 64 output columns n of W       (the dequantized 4-bit codes)
//   wgmma N (BM)       = BM tokens (rows of A)          (fp16 from shared memory, K-major)
//   wgmma K (16)       = 16 of the reduction axis k
// so a small M costs a narrow wgmma (n32 / n64) instead of a 64-row tile of padding.
//
// Why the Marlin layout fits wgmma's register operand as it is. One 32-bit word of a thread's
// 16-byte piece of a Marlin 16 x 64 tile holds its 8 codes of a 16 (n) x 16 (k) sub-block:
// nibbles (0, 4) at (n = lane/4, k = 2 (lane%4) + {0, 1}), (2, 6) at n + 8, (1, 5) at k + 8,
// (3, 7) at both -- which is the per-warp A fragment of wgmma .f16 (rows 16 w .. 16 w + 15 of
// warp w), registers {a01, a23, a45, a67}. So a warp reads its lane's NW words of one Marlin
// tile per k16 row, and word i, dequantized, is its 16-row share of wgmma i. Over the 4 warps
// each wgmma covers 64 columns, every column of the tile once, in an order the epilogue undoes.
//
// A CTA computes a tile of 256 columns (4 Marlin tiles) x BM tokens (partition of the consumers):
//
//   <128, NW = 2, 2 consumers>           <32 | 64, NW = 4, 2 consumers, k-interleaved (KI)>
//          cols 0..127   128..255               cols 0 .. 255
//        +-------------+-------------+        +---------------------------+
//   128  | consumer 0  | consumer 1  |   BM   | consumer 0: stages 0,2,4.. |  acc0 + acc1
//   tok  | 2 x n128    | 2 x n128    |   tok  | consumer 1: stages 1,3,5.. |  at the tile's end
//        | wgmma / k16 | wgmma / k16 |        | 4 x n32|n64 wgmma per k16  |  (shared memory)
//        +-------------+-------------+        +---------------------------+
//   every weight decoded once, feeding        at 32-64 tokens one chain of shared loads ->
//   128 tokens; wide wgmma                    dequant -> wgmma per k16 is latency-bound: two
//                                             chains in flight
//
//   producer warpgroup: one thread issues, per stage of 64 k, one tensor copy per operand: A
//   (BM x 64 halves, 128-byte swizzle: wgmma's canonical K-major layout, rows past M zeros),
//   the weight (the CTA tile's 4 k16 rows x 2 KB of the Marlin section, one 3-D box) and, with
//   groups, the 256 scales and deltas of the stage's group; all complete on the stage's
//   mbarrier. (One copy per operand, not one 1-D bulk copy per 2 KB row: the same bytes in 4
//   instead of 7 copies per stage moved 13-21 % more at M <= 64, docs/perf.md -- the copy
//   engine, not the memory, bounded a stage's arrival.) Consumers hand a stage back through a
//   second mbarrier once the wgmmas that read it have retired (wgmma.wait_group), so copies
//   run up to STAGES stages ahead.
//
// Grid (cuda/marlin_hopper_plan.h): output tiles, in groups of 8 row tiles so that the CTAs
// running at once share rows of A and columns of W in L2 (tile_coords), are walked by clusters
// of `split` CTAs (persistent: cluster c takes tiles c, c + #clusters, ...; the producer runs
// into the next tile while the consumers finish the last). split = 1: one CTA per tile. split
// 2..8 (the KI variants, when tiles are too few to fill the GPU): the tile's k range is cut over
// the cluster; every CTA sums a 1/split share of the tile over all ranks in rank order
// (deterministic), the other ranks' fp32 partials of it pushed into its shared memory by
// asynchronous remote stores (st.async, distributed shared memory) that complete on its
// mbarrier red_full; red_free says a receive buffer may be pushed to again. No cluster
// barrier (the producers never stop, no CTA waits at its exit), no global scratch, no arrival
// counters.
//
// Numerics are the other Marlin kernels': each weight is (q - 8) * s (+ delta) rounded once to
// fp16 (one fp16 fma; per-column scales folded in the same way), products accumulate in fp32
// in the tensor cores, C is rounded once.
#include "cuda/marlin_hopper.cuh"

#include <cooperative_groups.h>

#include <algorithm>
#include <type_traits>

#include "core/group_size.h"
#include "cuda/cuda_check.h"
#include "cuda/marlin_device.cuh"
#include "cuda/marlin_hopper_plan.h"

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define TL_HOPPER_DEVICE 1
#endif

namespace tl::cuda::detail {
namespace {

namespace cg = cooperative_groups;
using namespace marlin_dev;
using hopper::Maps;
using hopper::Params;
using hopper::Variant;

// ---------------------------------------------------------------------------------------------
// Shapes.
// ---------------------------------------------------------------------------------------------

using hopper::kTileN;                            // columns per CTA tile: 4 Marlin tiles of 64
using hopper::kStageK;                          // k per stage: one 128-byte swizzle row per token
using hopper::kK16PerStage;
// The scale group of stage `it` of a tile (grouped weights: one group of 128 k per 2 stages).
constexpr int kGroupK = kMarlinGroupSizes[0];
__host__ __device__ constexpr int stage_group(int it) { return it * kStageK / kGroupK; }
constexpr int kMarlinTileBytes = 512;           // one 16 x 64 Marlin tile: 32 lanes x 16 bytes
constexpr int kWRowBytes = 4 * kMarlinTileBytes;  // a k16 row of the CTA tile: 2 KB, contiguous
constexpr int kWStageBytes = kK16PerStage * kWRowBytes;
constexpr int kSStageBytes = 2 * kTileN * 2;    // the stage group's scales, then its deltas
constexpr int kSmemBudget = 227 * 1024;         // sm_90 opt-in limit per block
constexpr int kAlignSlack = 1024;               // the 128-byte swizzle wants 1024-aligned tiles
constexpr int kMaxStages = 16;

// BM: tokens per tile (wgmma's N). NW: wgmma per consumer per k16 step, i.e. 64-column blocks
// per consumer (each thread decodes NW words of its lane's Marlin piece per k16 row). All
// consumers share the tile's tokens; KI false: they split the 256 columns (CONSUMERS x NW x 64);
// KI true ("k-interleaved"): two consumers take every column and alternate stages, each with
// accumulators of its own, summed at the end of the tile (at 32 or 64 tokens one warpgroup's
// chain of shared loads, dequantization and wgmma per k16 step cannot keep the weight stream
// busy: two chains in flight per SM).
template <int BM, int NW, int CONSUMERS, bool KI>
struct Cfg {
  static constexpr int kRows = BM;
  static constexpr int kThreads = 128 * (CONSUMERS + 1);
  static constexpr int kABytes = BM * 128;      // BM x 64 halves
  static constexpr int kStageBytes = kABytes + kWStageBytes + kSStageBytes;
  static constexpr int kAcc = BM / 2;           // fp32 accumulators per thread per wgmma
  // Fragment buffers: k16 steps whose wgmmas may be in flight at once (wgmma.wait_group
  // kFragBufs - 1). A register-sourced wgmma holds its A registers until it retires. Two: with
  // 128 accumulators per thread (64 and 128 tokens) that is what fits without spilling, and at
  // 32 tokens four buffers were 1.5-2.5 % slower than two (H200 A/B, docs/perf.md) -- the two
  // consumers overlap each other's waits.
  static constexpr int kFragBufs = 2;
  static_assert(kK16PerStage % kFragBufs == 0, "a stage's k16 steps map onto the buffers");
  // A consumer thread's accumulators as float4 quads (NW wgmma x BM/8).
  static constexpr int kThreadQuads = NW * (BM / 8);
  // The k split over a cluster, and the k-interleaved consumers' sum, need a partial tile of
  // their own in shared memory (the stages keep streaming the next tile meanwhile): one
  // consumer's quads.
  static constexpr bool kSplit = KI;
  static constexpr int kPartialBytes = kSplit ? kThreadQuads * 128 * 16 : 0;
  // Stream-K: a consumer's accumulators, one slot; KI: only consumer 0 holds the tile's sum.
  static constexpr int kSlotQuads = kThreadQuads * 128;
  static constexpr int kSlotConsumers = KI ? 1 : CONSUMERS;
  // The epilogue of a KI tile is both consumers' (each owns half its 64-column blocks: sums,
  // stores and combines them), so the split's combine counts both; stream-K keeps a counter per
  // consumer and tile either way.
  static constexpr int kCombineConsumers = KI ? 2 : 1;
  static constexpr int kCountersPerTile = CONSUMERS;
  static constexpr int kStages =
      std::min(kMaxStages, (kSmemBudget - kAlignSlack - kPartialBytes) / kStageBytes);
  // The split's receive buffer: the quads of this rank's share of threads from every rank
  // (both consumers' halves), [rank][quad j][thread of the share], a share padded to
  // hopper::split_max_share(split) threads (hopper::kMaxSplitShareSlots in all). Under a
  // split the ring is shorter by what it takes (a rank's k range is a few stages: 10-11 for 7B o
  // at M = 32, split 6).
  static constexpr int kRecvBytes = kSplit ? kThreadQuads * hopper::kMaxSplitShareSlots * 16 : 0;
  static constexpr int kSplitStages =
      std::min(kStages, (kSmemBudget - kAlignSlack - kPartialBytes - kRecvBytes) / kStageBytes);
  // The ring's length and the dynamic shared memory of the kernel that runs whole tiles and
  // stream-K (split_run false) or the split (true): marlin_hopper_kernel's SPLIT.
  static constexpr int ring(bool split_run) { return split_run ? kSplitStages : kStages; }
  static constexpr int smem_bytes(bool split_run) {
    return kAlignSlack + kPartialBytes + ring(split_run) * kStageBytes + (split_run ? kRecvBytes : 0);
  }
  // Registers: the producer gives back what the consumers take (setmaxnreg).
  static constexpr int kProducerRegs = KI ? 56 : 72;
  static constexpr int kConsumerRegs = KI ? 224 : 216;
  static_assert(KI ? CONSUMERS == 2 && NW * 64 == kTileN : CONSUMERS * NW * 64 == kTileN, "a tile is 256 columns");
  static_assert(kStageBytes % 1024 == 0, "every stage's A tile stays 1024-aligned");
  static_assert(kSplitStages >= 3 && smem_bytes(false) <= kSmemBudget && smem_bytes(true) <= kSmemBudget,
                "shared memory");
  static_assert(kProducerRegs * 128 + kConsumerRegs * 128 * CONSUMERS <= 65536, "register file");
};

// ---------------------------------------------------------------------------------------------
// PTX wrappers (sm_90a).
// ---------------------------------------------------------------------------------------------
#ifdef TL_HOPPER_DEVICE

__device__ __forceinline__ void mbar_init(uint64_t* bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_u32(bar)), "r"(count));
}
__device__ __forceinline__ void mbar_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_u32(bar)), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// Spins until the phase with parity `parity` of the barrier has completed (acquire at CTA
// scope). One thread (the producer).
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred done;\nWAIT_%=:\nmbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT_%=;\n}\n" ::"r"(smem_u32(bar)),
      "r"(parity)
      : "memory");
}
// The same wait for whole warps (the consumers): each lane tries until the warp's vote says all
// have seen the phase complete; kCluster: acquire at cluster scope (the split's combine). A spin
// inside the asm is a branch the compiler cannot see is warp-uniform, and after it nothing of a
// consumer's stage walk counted as uniform: the wgmma descriptors' address arithmetic ran in
// vector registers and reached the instruction through R2UR (the 128-token loop: 235
// instructions per stage with the asm spin, 227 with the vote, 214 with the warpgroup index
// broadcast from lane 0 as well).
template <bool kCluster = false>
__device__ __forceinline__ void mbar_wait_warp(uint32_t bar, uint32_t parity) {
#define TL_MBAR_TRY(SEM) \
  "{\n.reg .pred done;\nmbarrier.try_wait.parity" SEM ".shared::cta.b64 done, [%1], %2;\nselp.u32 %0, 1, 0, done;\n}\n"
  uint32_t done = 0;
  do {
    if constexpr (kCluster)
      asm volatile(TL_MBAR_TRY(".acquire.cluster") : "=r"(done) : "r"(bar), "r"(parity) : "memory");
    else
      asm volatile(TL_MBAR_TRY("") : "=r"(done) : "r"(bar), "r"(parity) : "memory");
  } while (__any_sync(0xffffffffu, done == 0));
#undef TL_MBAR_TRY
}

// A condition that holds in every lane of a warp or in none, as a warp vote: the compiler
// treats a vote's result as warp-uniform (a register, even one broadcast from lane 0, it does
// not), so code under it stays on the uniform datapath -- the consumer index, which decides the
// stage walk; the epilogue's `mine`; stream-K's "last piece" test (docs/kernels.md).
__device__ __forceinline__ bool warp_uniform(bool same_in_warp) { return __any_sync(0xffffffffu, same_in_warp); }

// The cluster-scope pair of the split's combine: arrive (release) on the barrier at the same
// offset in CTA `rank` of the cluster, and wait (acquire) on one's own.
__device__ __forceinline__ void mbar_arrive_cluster(uint64_t* bar, uint32_t rank) {
  asm volatile(
      "{\n.reg .b32 remote;\n"
      "mapa.shared::cluster.u32 remote, %0, %1;\n"
      "mbarrier.arrive.release.cluster.shared::cluster.b64 _, [remote];\n}\n" ::"r"(smem_u32(bar)),
      "r"(rank)
      : "memory");
}
__device__ __forceinline__ void mbar_wait_cluster(uint64_t* bar, uint32_t parity) {  // whole warps
  mbar_wait_warp<true>(smem_u32(bar), parity);
}
// 16 bytes into shared address `addr` of CTA `rank` of the cluster (distributed shared memory),
// completing 16 bytes on that CTA's mbarrier at shared address `bar` (whose expect_tx counts
// them): an asynchronous remote store, the value taken from registers at issue. (A plain remote
// store released by an arrival there was no faster -- st.async 0.1-0.9 % ahead, H200, 2026-12-03 --
// and compute-sanitizer's racecheck then reports every such store (203,200 at 7B M = 32) as a
// write to a block that "might have already exited": it takes only a cluster barrier as proof
// that the target is alive.)
__device__ __forceinline__ void st_async_cluster_f4(uint32_t addr, uint32_t bar, uint32_t rank, float4 v) {
  asm volatile(
      "{\n.reg .b32 ra, rb;\n"
      "mapa.shared::cluster.u32 ra, %0, %2;\n"
      "mapa.shared::cluster.u32 rb, %1, %2;\n"
      "st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.f32 [ra], {%3, %4, %5, %6}, [rb];\n}\n" ::"r"(addr),
      "r"(bar), "r"(rank), "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w)
      : "memory");
}

// The box of a tensor map at coordinates {c0, c1(, c2)} into shared memory, completing on `bar`
// (the whole box counts, elements out of bounds arrive as zeros), with an L2 policy.
__device__ __forceinline__ void tma_load_2d(void* dst, const CUtensorMap* map, int c0, int c1, uint64_t* bar,
                                            uint64_t policy) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
      " [%0], [%1, {%2, %3}], [%4], %5;\n" ::"r"(smem_u32(dst)),
      "l"(map), "r"(c0), "r"(c1), "r"(smem_u32(bar)), "l"(policy)
      : "memory");
}
__device__ __forceinline__ void tma_load_3d(void* dst, const CUtensorMap* map, int c0, int c1, int c2, uint64_t* bar,
                                            uint64_t policy) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
      " [%0], [%1, {%2, %3, %4}], [%5], %6;\n" ::"r"(smem_u32(dst)),
      "l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(smem_u32(bar)), "l"(policy)
      : "memory");
}
// The descriptor into the cache before the first copy needs it.
__device__ __forceinline__ void prefetch_map(const CUtensorMap* map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(map) : "memory");
}
__device__ __forceinline__ uint64_t evict_last_policy() {
  uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;\n" : "=l"(policy));
  return policy;
}
__device__ __forceinline__ uint64_t evict_normal_policy() {
  uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_normal.b64 %0, 1.0;\n" : "=l"(policy));
  return policy;
}

template <int kRegs>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}
template <int kRegs>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}

// wgmma bookkeeping: fence before the first wgmma that reads registers written since the last
// one (the fragments, the zeroed accumulators); commit the issued ones as a group; wait until at
// most N groups are in flight (their register operands and shared-memory reads are done then).
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// An accumulator register is tied to the wgmma in flight: the compiler must not move it.
template <int N>
__device__ __forceinline__ void fence_regs(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// A cluster barrier under `split > 1`, which the variant that calls it never runs with: see the
// kernel's last line.
__device__ __forceinline__ void unreached_exit_barrier(int split) {
  if (split > 1) asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;\n" ::: "memory");
}

// Named barrier kId (0 is __syncthreads) over kThreads consumer threads: 1 and 2 for the
// k-interleaved consumers' hand-over. Not .aligned (bar.sync is): the two consumers take
// different branches before it (their own stages, their own halves of the epilogue).
template <int kId, int kThreads>
__device__ __forceinline__ void named_barrier() {
  asm volatile("barrier.sync %0, %1;\n" ::"n"(kId), "n"(kThreads) : "memory");
}
// The 128 threads of consumer warpgroup cw alone (barriers 3 and 4): stream-K's combine.
__device__ __forceinline__ void consumer_barrier(int cw) {
  if (cw == 0)
    named_barrier<3, 128>();
  else
    named_barrier<4, 128>();
}

// Shared-memory descriptor of a K-major operand in the 128-byte swizzle layout that the tensor
// copy writes: the start address in 16-byte units (bits 0-13), the leading byte offset unused
// for this layout (1, bits 16-29), rows of 128 bytes in 8-row groups 1024 bytes apart (stride
// byte offset, bits 32-45), swizzle mode 1 (128 B) in bits 62-63. Split in words: the low one
// per stage; a k16 step 32 bytes into the rows adds 2 to it (no carry: shared addresses are
// below 2^18), the high one is a constant.
__device__ __forceinline__ uint32_t smem_desc_sw128_lo(uint32_t shared_addr) {
  return ((shared_addr & 0x3FFFF) >> 4) | (1u << 16);
}
constexpr uint32_t kDescSw128Hi = (1024 >> 4) | (1u << 30);
__device__ __forceinline__ uint64_t smem_desc(uint32_t lo) { return (uint64_t(kDescSw128Hi) << 32) | lo; }

// D[64 x BN] += A[64 x 16] (registers, this warp's 16 rows) * B[16 x BN] (shared, K-major).
// One instruction per shape (the accumulators are BN / 2 named registers); scale-d is always 1
// (the accumulators are zeroed in registers), no transpose of B (K-major).
template <int BN>
__device__ __forceinline__ void wgmma_rs(float (&d)[BN / 2], const uint32_t (&a)[4], uint64_t desc);

// The accumulator operands, 8 at a time, and one specialization per shape: the register list
// of the instruction is spelled out (asm operands are named one by one).
#define TL_ACC8(i)                                                                               \
  "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]),   \
      "+f"(d[i + 6]), "+f"(d[i + 7])
#define TL_WGMMA_RS(BN, REGS, ...)                                                                \
  template <>                                                                                     \
  __device__ __forceinline__ void wgmma_rs<BN>(float(&d)[BN / 2], const uint32_t(&a)[4], uint64_t desc) { \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"                                     \
                 "wgmma.mma_async.sync.aligned.m64n" #BN "k16.f32.f16.f16 " REGS ", p, 1, 1, 0;\n}\n" \
                 : __VA_ARGS__                                                                    \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc));                       \
  }
TL_WGMMA_RS(32, "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, {%16,%17,%18,%19}, %20",
            TL_ACC8(0), TL_ACC8(8))
TL_WGMMA_RS(64, "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27," \
           "%28,%29,%30,%31}, {%32,%33,%34,%35}, %36",
            TL_ACC8(0), TL_ACC8(8), TL_ACC8(16), TL_ACC8(24))
TL_WGMMA_RS(128, "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27," \
           "%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55," \
           "%56,%57,%58,%59,%60,%61,%62,%63}, {%64,%65,%66,%67}, %68",
            TL_ACC8(0), TL_ACC8(8), TL_ACC8(16), TL_ACC8(24), TL_ACC8(32), TL_ACC8(40), TL_ACC8(48), TL_ACC8(56))
#undef TL_WGMMA_RS
#undef TL_ACC8

// Loads from a 32-bit shared-memory address: the consumers address a stage from one base and
// offsets of their own computed once (through generic pointers the loop had 5 to 6 address
// instructions per stage more). NW consecutive 32-bit words (NW = 4: one 16-byte load, 2: one
// 8-byte load).
template <int NW>
__device__ __forceinline__ void load_words(uint32_t (&v)[NW], uint32_t addr) {
  if constexpr (NW == 4) {
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(v[0]), "=r"(v[1]), "=r"(v[2]), "=r"(v[3])
                 : "r"(addr));
  } else {
    static_assert(NW == 2, "2 or 4 words");
    asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];\n" : "=r"(v[0]), "=r"(v[1]) : "r"(addr));
  }
}
// Two halves 16 bytes apart (columns n and n + 8) as one half2 register.
__device__ __forceinline__ uint32_t load_half_pair(uint32_t addr) {
  unsigned short lo, hi;
  asm volatile("ld.shared.u16 %0, [%2];\nld.shared.u16 %1, [%2+16];\n" : "=h"(lo), "=h"(hi) : "r"(addr));
  return uint32_t(lo) | (uint32_t(hi) << 16);
}

#endif  // TL_HOPPER_DEVICE

// Tile t's (row tile, column tile): groups of kRasterRows row tiles, columns outermost within a
// group and rows fastest, so the CTAs running at once cover ~kRasterRows row tiles x (CTAs /
// kRasterRows) column tiles -- their rows of A and columns of W both stay in L2 (rows fastest
// over all of N would re-stream every weight from HBM once per row tile).
using hopper::kRasterRows;
__host__ __device__ inline void tile_coords(int t, int n_tiles, int m_tiles, int* mt, int* nt) {
  const int group = t / (kRasterRows * n_tiles);
  const int first = group * kRasterRows;
  const int rows = min(kRasterRows, m_tiles - first);
  const int in_group = t - group * kRasterRows * n_tiles;
  *mt = first + in_group % rows;
  *nt = in_group / rows;
}

// The k-iterations [k_begin, k_end) of rank `rank` of `split` CTAs sharing a tile: balanced to
// within one stage.
__host__ __device__ inline void k_range(int k_iters, int split, int rank, int* k_begin, int* k_end) {
  // In int (k_iters = K / 64, split <= kMaxSplit): in 64 bits it was a ~60-instruction division
  // call at every CTA's start, before the tensor-map prefetch.
  *k_begin = k_iters * rank / split;
  *k_end = k_iters * (rank + 1) / split;
}

// The pieces (tile, stages [kb, ke)) a CTA works on, in order -- the producer and the consumers
// walk the same: its tiles (one of every `tile_step`) with its split's k range, or under
// stream-K (`stream_k`: the kernel's view of p.stream_k) its run of stages cut at tile boundaries.
template <class F>
__device__ __forceinline__ void for_each_piece(const Params& p, bool stream_k, const hopper::StreamKRuns& runs,
                                               int tile_first, int tile_step, int kb, int ke, F&& f) {
  if (stream_k) {
    hopper::stream_k_pieces(p.k_iters, p.sk_group, runs, int(blockIdx.x), f);
  } else {
    for (int tile = tile_first; tile < p.tiles; tile += tile_step) f(tile, kb, ke);
  }
}

// ---------------------------------------------------------------------------------------------
// The kernel.
// ---------------------------------------------------------------------------------------------

// SPLIT: the kernel of the KI variants that runs clusters (p.split 2..8); false: the one that
// runs whole tiles and stream-K (p.split 1). Each walks a ring of a constant length (Cfg::ring)
// and holds only its own end of a tile (the cluster's push and sum, or stream-K's park and
// combine): 3.2-6.6 k instructions against 5.8-8.1 k for one kernel of both, whose ring's length
// was a runtime value (H200, 2026-12-03, 1570e8c against e6cf9a0: with the stage loop below, 7B
// M = 32 went 1.500x -> 1.558x cuBLAS with groups and 1.503x -> 1.584x per column).
template <int BM, int NW, int CONSUMERS, bool KI, bool SPLIT>
__global__ void __launch_bounds__(Cfg<BM, NW, CONSUMERS, KI>::kThreads, 1)
    marlin_hopper_kernel(const __grid_constant__ Maps maps, const Params p,
                         const __grid_constant__ hopper::StreamKRuns runs) {
  // runs: stream-K's cut (hopper::stream_k_cut), read in place from the parameter space by index
  // (a parameter of its own: as a member of Params, grid-constant, the 32- and 64-token main loops
  // took 4-6 instructions per stage more, nvdisasm).
#ifdef TL_HOPPER_DEVICE
  using T = Cfg<BM, NW, CONSUMERS, KI>;
  static_assert(KI || !SPLIT, "only the k-interleaved variants split");
  // The ring's stages: under a split fewer, the partial tile and the receive buffer after them
  // (Cfg::kSplitStages, kRecvBytes).
  constexpr int S = T::ring(SPLIT);
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  __shared__ __align__(8) uint64_t full[S], empty[S];
  __shared__ __align__(8) uint64_t red_full, red_free;  // the split's combine (cluster scope)
  __shared__ int s_last[2];  // stream-K: per consumer, whether its piece arrived last on the tile
  // [stage 0 .. S-1: A kRows x 128 B | W 4 x 2 KB | scales 512 B | deltas 512 B][partial tile]
  // [split: receive buffer], 1024-aligned.
  unsigned char* const smem = smem_raw + ((1024 - (smem_u32(smem_raw) & 1023)) & 1023);

  // The descriptors of the two copies every stage makes, first: the first copy's issue waits for
  // its descriptor, and a launch's first reads of each constant line (the parameters, the
  // parameter space's address) miss, ~0.5 us each after the L2 flush (timeline probe of 2416a38,
  // H200, 2026-12-03). ptxas still schedules the set-up's parameter reads and
  // divisions first; the prefetches now follow them instead of the barriers' set-up and a 64-bit
  // division (k_range).
  if (threadIdx.x == 0) {
    prefetch_map(&maps.a);
    prefetch_map(&maps.w);
  }

  // The warpgroup, broadcast from lane 0 (a hint that it is the same in a warp: the 128-token
  // loop had 13 instructions per stage fewer with it; the consumer index is a vote, see consume).
  const int wg = __shfl_sync(0xffffffffu, int(threadIdx.x / 128), 0);
  const bool grouped = p.grouped != 0;
  const bool asym = p.delta != nullptr;
  // The k-interleaved kernels know their split's kind; the 128-token variant, which never
  // splits, reads p.split (1) as before -- see its last line.
  const int split = !KI || SPLIT ? p.split : 1;
  // Stream-K runs only without a split. (Read where it is used: held in a register from here the
  // 128-token kernel came out of ptxas differently.)
  auto stream_k = [&]() { return !SPLIT && p.stream_k != 0; };
  cg::cluster_group cluster = cg::this_cluster();
  const int rank = split > 1 ? int(cluster.block_rank()) : 0;
  // Clusters (of `split` CTAs; 1 without a split) walk the tiles: cluster c takes c, c + #clusters, ...
  const int tile_first = int(blockIdx.x) / split, tile_step = int(gridDim.x) / split;
  int split_kb = 0, split_ke = p.k_iters;  // this rank's k range of every tile (no split: all)
  k_range(p.k_iters, split, rank, &split_kb, &split_ke);
  // The bytes the peers push to this rank per tile of a split: each of the other ranks the
  // kThreadQuads float4 of every thread whose quads this rank sums (hopper::split_reader_rank).
  auto recv_tx = [&]() { return uint32_t((split - 1) * hopper::split_share(rank, split) * T::kThreadQuads * 16); };

  if (threadIdx.x == 0) {
    if (grouped) prefetch_map(&maps.s);  // the descriptors the parameters say are used
    if (grouped && asym) prefetch_map(&maps.delta);
    for (int i = 0; i < S; ++i) {
      mbar_init(&full[i], 1);                  // the producer's expect_tx arrival
      // Every consumer thread that reads the stage arrives: an arrival releases the accesses of
      // its own thread only, and the copy engine must not refill a stage any lane still reads.
      mbar_init(&empty[i], KI ? 128 : 128 * CONSUMERS);
    }
    // The split's combine: red_full completes when the peers' pushes of a tile have landed (this
    // thread's expect_tx arrival per tile, the first one here); red_free takes one arrival per
    // consumer thread of every rank (both consumers': T::kCombineConsumers) after its sum (then
    // every receive buffer this rank pushes to has been read).
    mbar_init(&red_full, 1);
    if (split > 1) mbar_expect_tx(&red_full, recv_tx());
    mbar_init(&red_free, split * 128 * T::kCombineConsumers);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  // No rank may arrive on a peer's barriers before the peer initialized them.
  if (split > 1) cluster.sync();
  else __syncthreads();

  const int n_valid64 = p.N / 64;  // Marlin tiles across N
  // ---- Producer: one thread feeds the pipeline, over the same tiles and k-range as the consumers. ----
  auto produce = [&]() {
    // Weights are read once per tile row of A (evict first); the scales are re-read by every
    // row tile (keep them); A by every column tile, but at large M it is larger than L2.
    const uint64_t w_policy = evict_first_policy();
    const uint64_t keep = evict_last_policy();
    const uint64_t a_policy = evict_normal_policy();
    // Every box arrives whole (zeros out of bounds): the same bytes every stage.
    const uint32_t tx = uint32_t(T::kABytes) + kWStageBytes + (grouped ? kTileN * 2 * (asym ? 2 : 1) : 0);
    int stage = 0;
    uint32_t phase = 0;
    for_each_piece(p, stream_k(), runs, tile_first, tile_step, split_kb, split_ke, [&](int tile, int kb, int ke) {
      int mt = 0, nt = 0;
      tile_coords(tile, p.n_tiles, p.m_tiles, &mt, &nt);
      for (int it = kb; it < ke; ++it) {
        mbar_wait(&empty[stage], phase ^ 1);
        unsigned char* st = smem + stage * T::kStageBytes;
        mbar_expect_tx(&full[stage], tx);
        tma_load_2d(st, &maps.a, it * kStageK, mt * T::kRows, &full[stage], a_policy);
        tma_load_3d(st + T::kABytes, &maps.w, 0, nt * 2, it * kK16PerStage, &full[stage], w_policy);
        if (grouped) {
          const int g = stage_group(it);
          unsigned char* s_dst = st + T::kABytes + kWStageBytes;
          tma_load_2d(s_dst, &maps.s, nt * kTileN, g, &full[stage], keep);
          if (asym) tma_load_2d(s_dst + kTileN * 2, &maps.delta, nt * kTileN, g, &full[stage], keep);
        }
        if (++stage == S) {
          stage = 0;
          phase ^= 1;
        }
      }
    });
  };

  if (wg == 0) {
    // ---- Producer warpgroup. ----
    setmaxnreg_dec<T::kProducerRegs>();
    if (threadIdx.x == 0) produce();
    if constexpr (!T::kSplit) unreached_exit_barrier(split);  // see the consumers' last line
    return;
  }

  // ---- Consumer warpgroups. ----
  setmaxnreg_inc<T::kConsumerRegs>();
  // The consumer's body, one copy for both consumers. c must be warp-uniform to the compiler,
  // or the stage walk and every address of it become per-thread values and the wgmma
  // descriptors go through R2UR (335 instructions per stage at 32 tokens against 288 when c was
  // a register, even one broadcast from lane 0); c comes from warp_uniform. (Two
  // copies, one per constant c, kept the loop at 296-301 instructions per stage but doubled it
  // and the epilogue: 23.8 k instructions in all against 19.1 k, and 1-2 % slower at M = 32 and
  // 256: 7B M = 32 1.383x -> 1.399x cuBLAS with one copy, H200, 2026-12-02, against df301bb.)
  auto consume = [&](int c) {                   // c: which 64 x NW columns of the tile (KI: which stages)
    const int tid = threadIdx.x % 128;
    const int w = tid / 32, lane = tid % 32;
    // Warp w decodes words wb .. wb + NW - 1 of its lane's piece of Marlin tile 4 nt + tl:
    // 16-column blocks wb.. of that tile, its 16-row share of wgmma 0 .. NW-1.
    const int tl = (KI ? 0 : c * NW) + (w * NW) / 4, wb = (w * NW) % 4;
    float acc[NW][T::kAcc];
    // The thread's column scales and deltas, two columns (n, n + 8) per register: word i's.
    uint32_t fs[NW], fd[NW];
    auto bcast = [](uint32_t v, int hi) {  // one half of v in both lanes of a half2
      const half2 h = as_half2(v);
      return hi ? __high2half2(h) : __low2half2(h);
    };
    // Stage s of the CTA's sequence (both consumers' stages, in the producer's order) sits in
    // buffer s % S, filled for the (s / S)-th time: (stage, phase) is this consumer's next one,
    // walked in steps (KI: consumer c starts at stage c).
    [[maybe_unused]] uint32_t round = 0;  // KI under a split: the cluster combines so far
    int stage = KI ? c : 0;
    uint32_t phase = 0;
    auto advance = [&](int by) {  // 0 < by <= S
      stage += by;
      if (stage >= S) {
        stage -= S;
        phase ^= 1;
      }
    };
    // The stages, their barriers and this thread's operands in a stage, as shared addresses: its
    // lane's weight words, word i's column scales (n, n + 8) and its deltas (natural order).
    const uint32_t smem_s = smem_u32(smem), full_s = smem_u32(full), empty_s = smem_u32(empty);
    const uint32_t w_off = T::kABytes + tl * kMarlinTileBytes + lane * 16 + wb * 4;
    const uint32_t s_off = T::kABytes + kWStageBytes + 2 * (tl * 64 + 8 * (lane / 4) + 2 * wb);
    const uint32_t d_off = T::kABytes + kWStageBytes + 2 * (kTileN + tl * 64 + 16 * wb + lane / 4);

    for_each_piece(p, stream_k(), runs, tile_first, tile_step, split_kb, split_ke, [&](int tile, int kb, int ke) {
      int mt = 0, nt = 0;
      tile_coords(tile, p.n_tiles, p.m_tiles, &mt, &nt);
      const int t64 = nt * 4 + tl;
      // False past a ragged N % 256 edge. The same in a warp (tl is the warp's), and a vote says so
      // to the compiler: the epilogue's stores trade halves through shuffles under `if (mine)`,
      // and a branch it took for divergent around them put every consumer's stage walk that
      // followed (the next piece's main loop) on vector registers, descriptors through R2UR:
      // 330 instructions per stage at 32 and 64 tokens against 297 (nvdisasm).
      const bool mine = warp_uniform(t64 < n_valid64);
      const int col0 = t64 * 64;                // the 64 columns of this warp's Marlin tile
#pragma unroll
      for (int i = 0; i < NW; ++i)
#pragma unroll
        for (int e = 0; e < T::kAcc; ++e) acc[i][e] = 0.f;
      if (!grouped) {
        // Per column: the thread's factors once per tile ((q - 8) * s + delta per weight).
#pragma unroll
        for (int i = 0; i < NW; ++i) {
          const int n = min(col0 + 16 * (wb + i) + lane / 4, p.N - 1), n1 = min(n + 8, p.N - 1);
          fs[i] = as_u32(__halves2half2(p.s[per_column_scale_index(n)], p.s[per_column_scale_index(n1)]));
          fd[i] = asym ? as_u32(__halves2half2(p.delta[n], p.delta[n1])) : 0u;
        }
      }
      constexpr int FB = T::kFragBufs;
      uint32_t frag[FB][NW][4];
      int prev_stage = -1;
      int loaded_group = -1;  // the group whose scales and deltas fs, fd hold
      constexpr int kStep = KI ? 2 : 1;  // this consumer's stages: every one, or every other one
      // The stage loop, once per scale form in the k-interleaved kernels, unswitched here: ptxas
      // did it by itself in some kernels and not in others (the split kernel: one loop of 313
      // instructions per stage), and its own copies kept the scale form's tests; these take
      // 274-279 instructions per stage per column, 294-304 with groups, against 300-308
      // (nvdisasm). The 128-token kernel's loop as it was (a runtime test; its main loops unchanged).
      auto stages = [&](auto grouped_v) {
        for (int it = kb + (KI ? c : 0); it < ke; it += kStep) {
          mbar_wait_warp(full_s + 8 * stage, phase);
          const uint32_t st = smem_s + stage * T::kStageBytes;
          // Every stage holds its group's scales and deltas. A consumer that takes every stage keeps
          // the last group's in registers while the group lasts (2 stages of 64 k): read every
          // stage, the deltas' 2-byte loads cost the 128-token tiles up to 6 % (H200, asymmetric,
          // M >= 256); the k-interleaved consumers see a new group every stage.
          const int group = stage_group(it);
          if (bool(grouped_v) && (KI || group != loaded_group)) {
            // The 64-column permutation of the Marlin scales puts lane/4's 8 column scales in one
            // 16-byte word, word i's two (n, n + 8) in its 32-bit part wb + i; deltas are in
            // natural order.
            loaded_group = group;
            load_words<NW>(fs, st + s_off);
#pragma unroll
            for (int i = 0; i < NW; ++i) fd[i] = asym ? load_half_pair(st + d_off + 32 * i) : 0u;
          }
          // The stage's words for all its k16 steps at once: the wgmma bookkeeping below orders
          // memory, so a load placed in a step would wait there, its latency exposed every step.
          uint32_t words[kK16PerStage][NW];
#pragma unroll
          for (int r = 0; r < kK16PerStage; ++r) load_words<NW>(words[r], st + w_off + r * kWRowBytes);
          const uint32_t desc_lo = smem_desc_sw128_lo(st);  // the stage's A tile
#pragma unroll
          for (int r = 0; r < kK16PerStage; ++r) {
            uint32_t(&fr)[NW][4] = frag[r % FB];  // 4 k16 steps per stage: r % FB is the step's buffer
#pragma unroll
            for (int i = 0; i < NW; ++i) {
              half2 d[4];
              dequant_word(words[r][i], d);
              // wgmma's A registers {a01, a23, a45, a67} = rows (n, n + 8) x k-halves (k, k + 8):
              // the word's (k, frag 0), (k, frag 1), (k + 8, frag 0), (k + 8, frag 1).
              const half2 s0 = bcast(fs[i], 0), s1 = bcast(fs[i], 1);
              const half2 d0 = bcast(fd[i], 0), d1 = bcast(fd[i], 1);
              fr[i][0] = as_u32(__hfma2(d[0], s0, d0));
              fr[i][1] = as_u32(__hfma2(d[2], s1, d1));
              fr[i][2] = as_u32(__hfma2(d[1], s0, d0));
              fr[i][3] = as_u32(__hfma2(d[3], s1, d1));
            }
            const uint64_t desc = smem_desc(desc_lo + 2 * r);  // k16 step r: 32 bytes into the rows
            wgmma_fence();
#pragma unroll
            for (int i = 0; i < NW; ++i) wgmma_rs<BM>(acc[i], fr[i], desc);
            wgmma_commit();
            // At most FB - 1 groups in flight: the group FB - 1 steps back has retired, so its
            // fragment buffer (this step's + 1) can be rewritten, and at step FB - 2 of a stage the
            // previous stage's last group has retired: its shared memory is free.
            wgmma_wait<FB - 1>();
#pragma unroll
            for (int i = 0; i < NW; ++i) fence_regs(acc[i]);
            if (r == FB - 2 && prev_stage >= 0) mbar_arrive(empty_s + 8 * prev_stage);
          }
          prev_stage = stage;
          advance(kStep);
        }
      };
      if constexpr (KI) {
        if (grouped)
          stages(std::true_type{});
        else
          stages(std::false_type{});
      } else {
        stages(grouped);
      }
      // KI: the loop left (stage, phase) at the piece's first stage + c + 2 n, n = the iterations
      // it ran; the next piece starts at its first stage + ke - kb + c: one further back (c = 0)
      // or on (c = 1) when the piece's length is odd.
      if (KI && ((ke - kb) & 1)) {
        if (c == 1) {
          advance(1);
        } else if (--stage < 0) {
          stage += S;
          phase ^= 1;
        }
      }
      wgmma_wait<0>();
#pragma unroll
      for (int i = 0; i < NW; ++i) fence_regs(acc[i]);
      if (prev_stage >= 0) mbar_arrive(empty_s + 8 * prev_stage);

      // ---- Epilogue. acc[i][4 u + e]: column n = col0 + 16 (wb + i) + lane/4 (+ 8 for e >= 2),
      // token m = m0 + 8 u + 2 (lane % 4) (+ 1 for odd e). ----
      const int m0 = mt * T::kRows;
      // One quad of lane `lanex`'s layout, element by element (the split's combine, where a thread
      // sums quads of other lanes).
      auto store = [&](int col, int u, int lanex, float x, float y, float z, float v) {
        const int m = m0 + 8 * u + 2 * (lanex % 4);
        __half* out = p.C + size_t(m) * p.N + col;
        if (m < p.M) {
          out[0] = __float2half_rn(x);
          out[8] = __float2half_rn(z);
        }
        if (m + 1 < p.M) {
          out[p.N] = __float2half_rn(y);
          out[p.N + 8] = __float2half_rn(v);
        }
      };
      // The same quad as store() for this thread's own lane, in pairs of columns: a thread holds
      // two tokens of its column n, the lane 4 apart the same tokens of n ^ 1; they trade one
      // half2 (shfl.xor 4), then the even lane writes token m's (n, n + 1) and (n + 8, n + 9), the
      // odd one token m + 1's. Half the stores of store(), 4 bytes each (and half the addresses
      // live at once). The whole warp calls it (the exchange), rows past M are not written.
      auto store_pair = [&](int col, int u, float x, float y, float z, float v) {
        const int odd = (lane >> 2) & 1;
        const half2 send = odd ? __floats2half2_rn(x, z) : __floats2half2_rn(y, v);
        const half2 got = as_half2(__shfl_xor_sync(0xffffffffu, as_u32(send), 4));
        const half2 lo = odd ? __halves2half2(__low2half(got), __float2half_rn(y))
                             : __halves2half2(__float2half_rn(x), __low2half(got));
        const half2 hi = odd ? __halves2half2(__high2half(got), __float2half_rn(v))
                             : __halves2half2(__float2half_rn(z), __high2half(got));
        const int m = m0 + 8 * u + 2 * (lane % 4) + odd;
        if (m < p.M) {
          half2* out = reinterpret_cast<half2*>(p.C + size_t(m) * p.N + col - odd);
          out[0] = lo;
          out[4] = hi;
        }
      };
      // The 64-column blocks i of acc this consumer completes: KI, half of them each (consumer c
      // blocks [c NW / 2, (c + 1) NW / 2): the two sum, store and combine a tile side by side, the
      // hand-over between them half as long); otherwise all of its own columns.
      constexpr int kOwnBlocks = KI ? NW / 2 : NW;
      const int own_first = KI ? c * kOwnBlocks : 0;
      auto owned = [&](int i) { return i >= own_first && i < own_first + kOwnBlocks; };
      auto store_all = [&]() {  // this thread's accumulators of its blocks into C
        if (mine)
#pragma unroll
          for (int i = 0; i < NW; ++i)
            if (owned(i))
#pragma unroll
              for (int u = 0; u < T::kAcc / 4; ++u)
                store_pair(col0 + 16 * (wb + i) + lane / 4, u, acc[i][4 * u], acc[i][4 * u + 1], acc[i][4 * u + 2],
                           acc[i][4 * u + 3]);
      };
      // Quad (i, u) of this thread: slot (i * kAcc / 4 + u) * 128 + tid of a partial buffer; the
      // blocks i for which keep(i) holds.
      auto park = [&](float4* part, auto&& keep) {
#pragma unroll
        for (int i = 0; i < NW; ++i)
          if (keep(i))
#pragma unroll
            for (int u = 0; u < T::kAcc / 4; ++u)
              part[(i * (T::kAcc / 4) + u) * 128 + tid] =
                  make_float4(acc[i][4 * u], acc[i][4 * u + 1], acc[i][4 * u + 2], acc[i][4 * u + 3]);
      };
      // A piece that is its tile's whole k range is stored. Under stream-K a cut one parks its sum
      // in its slot and arrives on the tile's counter; the last piece to arrive sums the tile's
      // pieces in k order (the result does not depend on which is last), stores C and leaves the
      // counter zero -- marlin_device.cuh's cross-block combine (barrier, one acq_rel arrival,
      // barrier), over this consumer warpgroup. No CTA waits for another. KI: each consumer its
      // half of the slot, with a counter of its own.
      auto finish = [&]() {
        if (!stream_k() || (kb == 0 && ke == p.k_iters)) {
          store_all();
          return;
        }
        // In the schedule of stream_k_pieces: this CTA's group runs [b, e) of the groups' column
        // stages; the tile's are [first, first + k_iters), held by groups c0..c1, whose CTAs on
        // this row tile (group g: CTA g x gs + row) hold its pieces.
        const int gs = p.sk_group, me = int(blockIdx.x), row = me % gs;
        const int first = (tile / gs) * p.k_iters;
        // Slot 0 of a CTA: its run's first piece; 1: its last (a run's middle tiles are whole).
        auto slot = [&](int cta, int pos) {
          return p.partials + (size_t(cta * 2 + pos) * T::kSlotConsumers + (KI ? 0 : c)) * T::kSlotQuads;
        };
        park(slot(me, runs.begin[me / gs] == first + kb ? 0 : 1), owned);
        const int c0 = runs.holder(first), c1 = runs.holder(first + p.k_iters - 1);
        int* counter = &p.counters[tile * T::kCountersPerTile + c];
        consumer_barrier(c);
        if (tid == 0) s_last[c] = arrive_is_last(counter, c1 - c0);
        consumer_barrier(c);
        if (!warp_uniform(s_last[c] != 0)) return;
        // Every piece's slot (this one's too) in k order, kChunk 64-column blocks at a time (the
        // accumulators are parked: only the chunk's sums are live), all of a slot's chunk loaded
        // before any of it is added: one L2 round trip per piece and chunk. At 32 tokens the chunk
        // is all the consumer's blocks (8 float4); one block at a time, NW round trips per
        // piece, the last piece's sum of a 7B gate_up tile at M = 32 took ~5 us (timeline probe,
        // docs/perf.md). At 64 and 128 tokens a chunk is one block (8 or 16 float4): two blocks'
        // sums and loads, or keeping them in the parked accumulators, spilled in the main loop
        // (ptxas -v).
        constexpr int kQuadsPerBlock = T::kAcc / 4;
        constexpr int kChunk = BM <= 32 ? kOwnBlocks : 1;
#pragma unroll 1
        for (int i0 = own_first; i0 < own_first + kOwnBlocks; i0 += kChunk) {
          float4 sum[kChunk][kQuadsPerBlock];
#pragma unroll
          for (int i = 0; i < kChunk; ++i)
#pragma unroll
            for (int u = 0; u < kQuadsPerBlock; ++u) sum[i][u] = make_float4(0.f, 0.f, 0.f, 0.f);
          for (int g = c0; g <= c1; ++g) {
            const float4* part = slot(g * gs + row, runs.begin[g] >= first ? 0 : 1) + i0 * kQuadsPerBlock * 128 + tid;
            float4 v[kChunk][kQuadsPerBlock];
#pragma unroll
            for (int i = 0; i < kChunk; ++i)
#pragma unroll
              for (int u = 0; u < kQuadsPerBlock; ++u) v[i][u] = __ldcg(part + (i * kQuadsPerBlock + u) * 128);
#pragma unroll
            for (int i = 0; i < kChunk; ++i)
#pragma unroll
              for (int u = 0; u < kQuadsPerBlock; ++u) add4(sum[i][u], v[i][u]);
          }
          if (mine)
#pragma unroll
            for (int i = 0; i < kChunk; ++i)
#pragma unroll
              for (int u = 0; u < kQuadsPerBlock; ++u)
                store_pair(col0 + 16 * (wb + i0 + i) + lane / 4, u, sum[i][u].x, sum[i][u].y, sum[i][u].z,
                           sum[i][u].w);
        }
        if (tid == 0) atomicExch(counter, 0);
      };
      if constexpr (!KI) {
        finish();
      } else {
        // The two consumers' sums, half each: each parks the blocks the other owns and adds the
        // other's parked half of its own (each thread its own slots).
        float4* part = reinterpret_cast<float4*>(smem + S * T::kStageBytes);
        park(part, [&](int i) { return !owned(i); });
        named_barrier<1, 256>();  // both halves are parked
#pragma unroll
        for (int i = 0; i < NW; ++i)
          if (owned(i))
#pragma unroll
            for (int u = 0; u < T::kAcc / 4; ++u) {
              const float4 v = part[(i * (T::kAcc / 4) + u) * 128 + tid];
              acc[i][4 * u] += v.x;
              acc[i][4 * u + 1] += v.y;
              acc[i][4 * u + 2] += v.z;
              acc[i][4 * u + 3] += v.w;
            }
        if (split == 1) {
          named_barrier<2, 256>();  // ... and read: the next tile's hand-over may rewrite them
          finish();
          return;
        }
        // The split: every thread pushes its quads to the rank that sums them
        // (hopper::split_reader_rank: one rank per thread) -- asynchronous remote stores into that
        // rank's receive buffer (Cfg::kRecvBytes; its own rank's, local ones) that complete on the
        // rank's red_full. Every rank then sums its share over all ranks in rank order
        // (deterministic) from its own memory and stores it. No rank reads a peer's memory, so a
        // push waits for nothing and no rank waits for the others to leave. (Parked locally and
        // read by the summing rank, the sum took one or two distributed-shared-memory round trips
        // per thread and the exit a cluster barrier: 1.5 and 0.8 us of a 14 us 7B o launch at
        // M = 32, timeline probe of 2416a38, H200, 2026-12-03.) red_free: a receive buffer is pushed to again
        // only after its rank has summed it (the tile before); the hand-over buffer is this CTA's
        // alone (barrier 2 below).
        if (round > 0) mbar_wait_cluster(&red_free, (round - 1) & 1);
        float4* recv = reinterpret_cast<float4*>(smem + S * T::kStageBytes + T::kPartialBytes);
        const int stride = hopper::split_max_share(split);  // a share's threads, padded
        const int share_begin = hopper::split_threads_begin(rank, split);
        const int share_threads = hopper::split_share(rank, split);
        {
          const int reader = hopper::split_reader_rank(tid, split);
          const int lt = tid - hopper::split_threads_begin(reader, split);
          const uint32_t red_full_s = smem_u32(&red_full);
#pragma unroll
          for (int i = 0; i < NW; ++i)
            if (owned(i))
#pragma unroll
              for (int u = 0; u < T::kAcc / 4; ++u) {
                const int slot = (rank * T::kThreadQuads + i * (T::kAcc / 4) + u) * stride + lt;
                const float4 v = make_float4(acc[i][4 * u], acc[i][4 * u + 1], acc[i][4 * u + 2], acc[i][4 * u + 3]);
                if (reader == rank)
                  recv[slot] = v;
                else
                  st_async_cluster_f4(smem_u32(recv + slot), red_full_s, uint32_t(reader), v);
              }
        }
        named_barrier<2, 256>();  // the local share is stored; the hand-over's reads are done
        mbar_wait_cluster(&red_full, round & 1);
        // The next tile's pushes land in the barrier's next phase: they wait for red_free, which
        // no rank releases before it has passed this wait.
        if (tid == 0 && c == 0 && tile + tile_step < p.tiles) mbar_expect_tx(&red_full, recv_tx());
        // Both consumers' threads take the share's quads in turn: item = (quad j, thread lt).
#pragma unroll 1
        for (int item = tid + 128 * c; item < share_threads * T::kThreadQuads; item += 256) {
          const int j = item / share_threads, lt = item - j * share_threads;
          float4 sum = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
          for (int r = 0; r < hopper::kMaxSplit; ++r)
            if (r < split) add4(sum, recv[(r * T::kThreadQuads + j) * stride + lt]);
          // Quad j of thread q_tid was its acc[qi][4 qu ..]: recover its column and tokens.
          const int q_tid = share_begin + lt, qu = j % (T::kAcc / 4), qi = j / (T::kAcc / 4);
          const int q_w = q_tid / 32, q_lane = q_tid % 32;
          const int q_t64 = nt * 4 + (q_w * NW) / 4, q_wb = (q_w * NW) % 4;
          if (q_t64 < n_valid64)
            store(q_t64 * 64 + 16 * (q_wb + qi) + q_lane / 4, qu, q_lane, sum.x, sum.y, sum.z, sum.w);
        }
        // Every thread releases its own reads, to every rank (its items' quads came from all of
        // them): one arrival per rank after a consumer barrier, releasing the others' accesses
        // cumulatively, is valid PTX, but compute-sanitizer's racecheck reported such reads
        // against the writes that followed. Only where the cluster has a tile to come.
        if (tile + tile_step < p.tiles)
          for (int r = 0; r < split; ++r) mbar_arrive_cluster(&red_free, uint32_t(r));
        ++round;
      }
    });
  };
  consume(warp_uniform(wg == 2) ? 1 : 0);  // consumer warpgroups 1 and 2
  // No exit barrier under a split: a CTA leaves after its last red_full wait, when every push to
  // it has landed, and no peer arrives on its red_free after the peer's last tile. The variant
  // that never splits keeps the one it had, never executed: without it ptxas laid that kernel out
  // differently (128-token main loops 205 / 211 instructions per stage against 205 / 205 with it,
  // nvdisasm) and it ran 1-3.6 % slower with per-column scales at M = 256-1024 (H200, 2026-12-03:
  // 70B gate_up at M = 256 347.4 -> 360.1 us).
  if constexpr (!T::kSplit) unreached_exit_barrier(split);
#endif  // TL_HOPPER_DEVICE
}

// ---------------------------------------------------------------------------------------------
// The variants, as the host side (marlin_hopper_launch.cu) launches them.
// ---------------------------------------------------------------------------------------------

template <int BM, int NW, int CONSUMERS, bool KI, bool SPLIT>
Variant make_variant() {
  using T = Cfg<BM, NW, CONSUMERS, KI>;
  static_assert(T::kSplit == hopper::tile_splits(BM), "the plan knows which variants split");
  return Variant{BM, T::kThreads, T::smem_bytes(SPLIT), T::kSlotConsumers, T::kSlotQuads * 16, T::kCountersPerTile,
                 marlin_hopper_kernel<BM, NW, CONSUMERS, KI, SPLIT>};
}

}  // namespace
}  // namespace tl::cuda::detail

namespace tl::cuda::hopper {
Variant variant_for(int rows, int split) {
  switch (rows) {
    case 32: return split > 1 ? detail::make_variant<32, 4, 2, true, true>() : detail::make_variant<32, 4, 2, true, false>();
    case 64: return split > 1 ? detail::make_variant<64, 4, 2, true, true>() : detail::make_variant<64, 4, 2, true, false>();
    default: return detail::make_variant<128, 2, 2, false, false>();
  }
}
}  // namespace tl::cuda::hopper
