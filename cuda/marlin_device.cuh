// Device helpers shared by the two Marlin-format kernels (marlin_gemm.cu: the tiled kernel for
// more than 16 rows; marlin_small_m.cu: the streaming kernel for 1..16 rows): PTX wrappers (also
// used by the tensor-core attention, attention_tc.cu), the INT4 -> fp16 fragment dequantization
// and the per-column scale permutation. Header-only,
// everything __forceinline__; include from .cu files only.
#pragma once

#include <cstdint>
#include <cstring>

#include <cuda/atomic>
#include <cuda_fp16.h>

namespace tl::cuda::marlin_dev {

// ---------------------------------------------------------------------------------------------
// Cross-block combine: the one memory-ordering idiom of both kernels. Blocks that share an
// output tile or slice each store their fp32 partial to a global slot; then, after a
// __syncthreads() that orders the whole block's slot stores before it, one thread arrives on the
// tile's counter with a device-scope acq_rel read-modify-write (the semaphore pattern: the
// release publishes the block's stores, cumulatively through the barrier; for the last arrival
// the acquire makes every other block's slots visible, and a second __syncthreads() extends
// that to the whole block). The last block to arrive sums the slots in block order -- the
// result does not depend on arrival order -- writes C and resets the counter. No block waits
// for another and no thread issues a device-wide fence.
// ---------------------------------------------------------------------------------------------
// `others`: how many other blocks arrive on this counter (parts - 1).
__device__ __forceinline__ bool arrive_is_last(int* counter, int others) {
  ::cuda::atomic_ref<int, ::cuda::thread_scope_device> c(*counter);
  return c.fetch_add(1, ::cuda::memory_order_acq_rel) == others;
}

// ---------------------------------------------------------------------------------------------
// PTX helpers. All valid on sm_80, sm_86, sm_89 and sm_90 (PTX ISA 7.4+); nothing here is
// sm_90a-only, so the same source runs on Ampere, Ada and Hopper.
// ---------------------------------------------------------------------------------------------

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ half2 as_half2(uint32_t u) {
  half2 h;
  memcpy(&h, &u, 4);
  return h;
}
__device__ __forceinline__ uint32_t as_u32(half2 h) {
  uint32_t u;
  memcpy(&u, &h, 4);
  return u;
}

// a += b, lane by lane: the combines' fp32 partial quads.
__device__ __forceinline__ void add4(float4& a, const float4& b) {
  a.x += b.x;
  a.y += b.y;
  a.z += b.z;
  a.w += b.w;
}

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_u32(smem)), "l"(gmem));
}

// 16 bytes, or 16 zero bytes where `valid` is false (the source is not read then; it must still
// be a mapped address for the instruction's operand, so pass a clamped one).
__device__ __forceinline__ void cp_async16_zfill(void* smem, const void* gmem, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_u32(smem)), "l"(gmem),
               "r"(valid ? 16 : 0));
}

// Weights are read exactly once per GEMM: mark them evict-first so that streaming 100+ MB of
// B does not push A (read by every block) and the partial-sum slots out of L2.
__device__ __forceinline__ uint64_t evict_first_policy() {
  uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(policy));
  return policy;
}
__device__ __forceinline__ void cp_async16_stream(void* smem, const void* gmem, uint64_t policy) {
  asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2;\n" ::"r"(
                   smem_u32(smem)),
               "l"(gmem), "l"(policy));
}

// The "memory" clobbers keep the compiler from moving shared-memory reads of a stage across
// the points where its copies are committed / known complete.
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}

template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

// One ldmatrix.x4 loads the whole 16x16 A fragment of a warp (4 8x8 matrices) in one
// instruction, already in the register order mma.m16n8k16 expects.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_u32(smem)));
}

// The same, each 8x8 matrix transposed: lane l gets column l / 4, rows 2 (l % 4) and + 1 -- the
// mma's B fragment of a matrix stored k-major (rows = k), e.g. attention's V [key][dim].
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_u32(smem)));
}

// D += A * B, fp16 inputs, fp32 accumulators. Not volatile: a pure function the compiler may
// schedule freely around the shared-memory loads.
__device__ __forceinline__ void mma_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                          uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// (a & b) | c in one instruction: extract two nibbles and OR in an fp16 exponent.
__device__ __forceinline__ uint32_t and_or(uint32_t a, uint32_t b, uint32_t c) {
  uint32_t r;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;\n" : "=r"(r) : "r"(a), "r"(b), "r"(c));
  return r;
}

// Dequantize one packed word into the 4 B-fragment registers of two n8 fragments.
// The packer puts nibbles (0,4), (1,5), (2,6), (3,7) on the (k, k+1) register pairs:
//   out[0] = rows (k, k+1),   frag 0     out[1] = rows (k+8, k+9), frag 0
//   out[2] = rows (k, k+1),   frag 1     out[3] = rows (k+8, k+9), frag 1
// Trick: OR-ing a nibble q into the low mantissa bits of fp16 1024.0 (0x6400) gives exactly
// 1024 + q, so one lop3 makes two fp16 values at once. The high nibble of a byte sits 4 bits
// up, at mantissa weight 16: OR-ed into fp16 64.0 (0x5400), whose mantissa step is 1/16, it
// gives exactly 64 + q. No int->float conversions, no shifts but one per word.
// Biased form (the decode kernel): one lop3 per register, out[0], out[2] = 1024 + q and
// out[1], out[3] = 64 + q; the decode kernel takes 1032 resp. 72 times the activations' sums
// away once per unit with one more mma (see marlin_small_m.cu for why that is accurate).
__device__ __forceinline__ void dequant_word_biased(uint32_t q, uint32_t (&out)[4]) {
  constexpr uint32_t kLowNibbles = 0x000f000f;
  constexpr uint32_t kHighNibbles = 0x00f000f0;
  constexpr uint32_t kExp1024 = 0x64006400;
  constexpr uint32_t kExp64 = 0x54005400;
  out[0] = and_or(q, kLowNibbles, kExp1024);
  out[1] = and_or(q, kHighNibbles, kExp64);
  q >>= 8;
  out[2] = and_or(q, kLowNibbles, kExp1024);
  out[3] = and_or(q, kHighNibbles, kExp64);
}

// Exact form: all four registers hold q - 8, one half2 subtract more per register
// (1032 = 1024 + 8, 72 = 64 + 8).
__device__ __forceinline__ void dequant_word_exact(uint32_t q, uint32_t (&out)[4]) {
  const half2 k1032 = as_half2(0x64086408);
  const half2 k72 = as_half2(0x54805480);
  uint32_t b[4];
  dequant_word_biased(q, b);
  out[0] = as_u32(__hsub2(as_half2(b[0]), k1032));
  out[1] = as_u32(__hsub2(as_half2(b[1]), k72));
  out[2] = as_u32(__hsub2(as_half2(b[2]), k1032));
  out[3] = as_u32(__hsub2(as_half2(b[3]), k72));
}

// The tiled kernel's form: half2 values q - 8.
__device__ __forceinline__ void dequant_word(uint32_t q, half2 (&out)[4]) {
  uint32_t u[4];
  dequant_word_exact(q, u);
#pragma unroll
  for (int i = 0; i < 4; ++i) out[i] = as_half2(u[i]);
}

// Index of column n (natural order) in Marlin's per-column scale permutation (rows of 32:
// s_packed[8a + c] = s[2a + {0,1,8,9,16,17,24,25}[c]]).
__device__ __forceinline__ int per_column_scale_index(int n) {
  const int x = n & 31;
  return (n - x) + 8 * ((x & 7) >> 1) + 2 * (x >> 3) + (x & 1);
}

// A 16-byte load of data read exactly once (the packed weights): through the non-coherent path,
// not kept in L1 (nothing else in the SM reads it again).
__device__ __forceinline__ int4 ldg_stream16(const int4* p) {
  int4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.s32 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// A 4-byte read-only load (activations, reused from L2 by every warp); volatile like the weight
// loads, so it stays in program order beside them instead of being sunk to its use.
__device__ __forceinline__ uint32_t ldg_u32(const void* p) {
  uint32_t v;
  asm volatile("ld.global.nc.b32 %0, [%1];\n" : "=r"(v) : "l"(p));
  return v;
}

// Programmatic dependent launch (sm_90; a no-op elsewhere, and where the kernel was not launched
// as a dependent). griddep_wait: returns once the grids this one depends on have completed and
// their writes are visible -- every read of what they wrote, and every write they might read,
// comes after it. griddep_launch_dependents: this block no longer holds the next grid back
// (it may be scheduled as blocks leave; it still waits for this grid to complete).
__device__ __forceinline__ void griddep_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void griddep_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

}  // namespace tl::cuda::marlin_dev
