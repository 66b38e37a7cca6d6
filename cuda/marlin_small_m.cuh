// Internal to the decode kernel (not part of the public API): what the kernel's file
// (marlin_small_m.cu) and its host-side planning and launcher (marlin_small_m_launch.cu) share
// -- the unit geometry, the parameter block, and the list of instantiated kernels.
#pragma once

#include <cuda_fp16.h>

namespace tl::cuda::detail::small_m {

constexpr int kTileK = 128;                // k depth of a unit: one group of 128
constexpr int kSliceN = 128;               // columns of a unit: one warp's accumulators
constexpr int kRowsPerUnit = kTileK / 16;  // k16 rows per unit
// Partial-sum row stride (floats): 132 = 128 + 4 puts the 4 output rows a lane group writes
// at once (2 tig, stride 2 rows) on 4 distinct bank octets: conflict-free stores.
constexpr int kRedStride = kSliceN + 4;
constexpr int kSlotFloats = 16 * kSliceN;  // one block's fp32 partial of a slice (rows < M)

// The kernel's parameters (one block of registers per launch).
struct SmallParams {
  const __half* A;      // [M, K]
  const int4* B;        // [K/16, 2N] int32, as int4
  const __half* s;      // permuted scales [G, N]
  const __half* delta;  // natural [G, N] or nullptr (symmetric)
  __half* C;            // [M, N]; a SwiGLU pair: [M, N / 2]
  // A SwiGLU pair (kPair): B, s, delta are W_gate's [K, N / 2] section, these W_up's; the
  // kernel's N is the pair's 2 F columns, slice c = gate columns 64c..64c+63 (half 0) and the
  // same up columns (half 1), and it writes silu(gate + bias_gate) * (up + bias_up) to C.
  const int4* B_up;
  const __half* s_up;
  const __half* delta_up;
  const float* bias_gate;  // [N / 2] fp32 or nullptr
  const float* bias_up;
  int* counters;        // [N / 128] arrival counters, zero on entry and on exit
  float* slots;         // [2 * gridDim.x][kSlotFloats]
  int M, N, K;
  int n_out;  // columns of C (its row stride): N; F = N / 2 for a pair; a padded section's own N < N
  int per_warp;        // units per warp stripe
  int cluster;         // blocks per cluster (sm_90): they share slices through DSMEM; 0: slots
  int cluster_slices;  // slices per cluster (the last cluster may have fewer)
};

// The cluster sizes the launcher tries (sm_90). The kernel's cluster combine reads up to
// kMaxCluster partials and the launcher never asks for more.
constexpr int kClusterSizes[] = {2, 4, 8};
constexpr int kMaxCluster = 8;
constexpr bool cluster_sizes_fit() {
  for (int s : kClusterSizes)
    if (s > kMaxCluster) return false;
  return true;
}
static_assert(cluster_sizes_fit(), "a cluster size above kMaxCluster would drop partial sums");

struct SmallLaunch {
  void (*kernel)(SmallParams);
  int warps;           // per block
  int max_smem_bytes;  // for 8 * MB8 rows; a launch takes what its M needs
};

// Dynamic shared memory of a launch of `warps` warps for M rows.
int smem_bytes(int warps, int M);
// The instantiated kernel for M rows (defined next to the kernels, marlin_small_m.cu); pair:
// the fused SwiGLU pair (asymmetric only); dependent: the variant launched as a programmatic
// dependent (PDL), which reads the weights' first rows and factors before griddep_wait and
// everything else after it.
SmallLaunch pick_small_launch(int M, bool grouped, bool asym, bool pair = false, bool dependent = false);

}  // namespace tl::cuda::detail::small_m
