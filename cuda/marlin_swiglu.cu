// marlin_swiglu_asymmetric: the MLP's gate and up projections and its SwiGLU,
// C = silu(A W_gate + b_gate) * (A W_up + b_up), for two asymmetric Marlin weights.
//
// At decode sizes (the decode kernel's M <= 16) one launch of marlin_small_m in pair mode: the
// two sections stream as one weight of 2 F columns, A is read once, and the two [M, F] results
// never reach memory (marlin_small_m.cu, "The SwiGLU pair"). Unfused, the same work is three
// launches, three kernel tails and a round trip of both results; at M = 1 on a 7B MLP the
// weights stream in ~6 us per GEMM, so those fixed costs are a large share of it.
// Above 16 rows the GEMMs are compute-bound tiles (Hopper / tiled kernel / floor) whose time
// dwarfs the elementwise pass, so the pair runs as the two GEMMs and swiglu_bias_rows.
#include "cuda/marlin_gemm.h"
#include "cuda/model_ops.h"
#include "cuda/tl_kernels.h"

#include "core/group_size.h"
#include "cuda/swiglu_pair.h"

namespace tl::cuda {
namespace {

// Whether a pair the gate passes runs fused: on the decode kernel's rows, and at 9..16 rows only
// on short warp stripes (cuda/swiglu_pair.h).
bool runs_fused(int M, int F, int K, int group_size, const KernelOptions& options) {
  if (detail::marlin_route(M, 2 * F, K, group_size, options) != detail::MarlinRoute::kDecode) return false;
  if (M <= 8) return true;
  detail::SmallMGrid g{};
  return detail::marlin_small_m_grid(M, 2 * F, K, group_size, true, options, &g, true) == kOk &&
         g.per_warp <= kPairMaxUnitsPerWarp9To16;
}

}  // namespace

const char* marlin_swiglu_route(int M, int F, int K, int group_size, const KernelOptions& options) {
  if (M < 1 || !marlin_shape_ok(K, F) || !marlin_group_size_ok(K, group_size)) return "unsupported";
  return runs_fused(M, F, K, group_size, options) ? "fused" : "unfused";
}

int marlin_swiglu_plan(int M, int F, int K, int group_size, const KernelOptions& options, GemmPlan* plan) {
  *plan = GemmPlan{};
  if (M >= 1 && marlin_shape_ok(K, F) && marlin_group_size_ok(K, group_size) &&
      runs_fused(M, F, K, group_size, options)) {
    detail::SmallMGrid g{};
    const int rc = detail::marlin_small_m_grid(M, 2 * F, K, group_size, true, options, &g, true);
    if (rc == kOk) {
      plan->kernel = pair_kernel_name("decode");
      plan->blocks = g.blocks;
      plan->warps_per_block = g.warps_per_block;
      plan->units_per_warp = g.per_warp;
      plan->cluster = g.cluster;
      return kOk;
    }
    if (rc != kNoConfig) return rc;  // kNoConfig: the unfused sequence runs
  }
  const int rc = marlin_plan(M, F, K, group_size, true, options, plan);
  if (rc == kOk) plan->kernel = pair_kernel_name(plan->kernel);
  return rc;
}

int marlin_swiglu_asymmetric(const __half* A, const MarlinOperands& gate, const MarlinOperands& up,
                             const float* bias_gate, const float* bias_up, __half* C, __half* up_scratch,
                             int* workspace, int M, int F, int K, int group_size, cudaStream_t stream,
                             const KernelOptions& options) {
  if (!gate.delta || !up.delta || !up.B || !up.s) return kShapeUnsupported;
  if (M < 1 || !marlin_shape_ok(K, F)) return kShapeUnsupported;
  if (!marlin_group_size_ok(K, group_size)) return kNoConfig;
  if (runs_fused(M, F, K, group_size, options)) {  // the gate was checked above
    // marlin_gemm's checks (pointers, alignment) on each section, then the pair launch.
    const detail::SmallPairOperands pair{up.B, up.s, up.delta, bias_gate, bias_up};
    for (const MarlinOperands* w : {&gate, &up})
      if (!w->B || !w->s || !A || !C || !workspace ||
          (reinterpret_cast<uintptr_t>(A) | reinterpret_cast<uintptr_t>(w->B) | reinterpret_cast<uintptr_t>(w->s) |
           reinterpret_cast<uintptr_t>(w->delta) | reinterpret_cast<uintptr_t>(C)) % kMarlinAlignBytes)
        return kShapeUnsupported;
    const int rc = detail::marlin_small_m(A, gate.B, gate.s, gate.delta, C, workspace, M, 2 * F, K, group_size != K,
                                          stream, options, &pair);
    if (rc != kNoConfig) return rc;  // else: too little shared memory, the unfused sequence runs
  }
  if (!up_scratch) return kShapeUnsupported;
  if (int rc = marlin_mm_asymmetric(A, gate.B, gate.s, gate.delta, C, workspace, M, F, K, group_size, stream, options))
    return rc;
  if (int rc = marlin_mm_asymmetric(A, up.B, up.s, up.delta, up_scratch, workspace, M, F, K, group_size, stream,
                                    options))
    return rc;
  return swiglu_bias_rows(C, up_scratch, bias_gate, bias_up, M, F, stream);
}

}  // namespace tl::cuda
