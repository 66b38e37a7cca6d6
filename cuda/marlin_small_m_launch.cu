// Host side of the decode kernel (marlin_small_m.cu): how a problem is shared out over the
// GPU at hand -- warp stripes of units, blocks, and on sm_90 thread-block clusters -- and the
// launch. The plan is cached per (kernel, device, N, K, clusters on/off).
//
// Partition (units are 128 columns x 128 k, one scale group; slice c = columns 128c..128c+127):
//
//            k-tile 0   1   2  ...  k_tiles-1
//   slice 0  [u0  u1  u2  ...              ]   unit u = c * k_tiles + k-tile
//   slice 1  [....                         ]   warps take contiguous stripes of per_warp units
//     ...                                      in this order; a block takes kWarps stripes;
//   slice S-1[.......................  u_end]  a slice cut by a stripe boundary is "shared"
//
//   flat grid:    stripes over all units; blocks sharing a slice combine through fp32 slots
//                 and an arrival counter (the last block sums and stores).
//   cluster grid: each cluster of 2 / 4 / 8 blocks owns whole slices (cluster_slices of them),
//                 so shared slices are combined inside the cluster through DSMEM.
#include <algorithm>
#include <map>
#include <mutex>
#include <tuple>
#include <utility>

#include "core/group_size.h"
#include "cuda/cuda_check.h"
#include "cuda/device_context.h"
#include "cuda/marlin_gemm.h"
#include "cuda/marlin_small_m.cuh"
#include "cuda/tl_kernels.h"

namespace tl::cuda {
namespace {

using namespace detail::small_m;

// How the units are shared out: blocks, the warp stripe and, in cluster mode, the cluster.
struct SmallGrid {
  int blocks = 0;
  int per_warp = 0;
  int cluster = 0;         // blocks per cluster, 0: one flat group combining through slots
  int cluster_slices = 0;  // whole slices per cluster
};

// Flat: warp stripes of ceil(units / warps) units, `resident` blocks per SM (fewer for small
// problems); blocks sharing a slice combine through global slots and an arrival counter.
SmallGrid flat_grid(int units, int sms, int resident, int warps_per_block) {
  const int warps = std::min(resident * sms * warps_per_block, units);
  SmallGrid g;
  g.per_warp = (units + warps - 1) / warps;
  g.blocks = (units + warps_per_block * g.per_warp - 1) / (warps_per_block * g.per_warp);
  return g;
}

// Cluster mode (sm_90): each cluster owns whole slices, so every slice that several blocks
// share is combined inside one cluster through distributed shared memory. Of the cluster sizes
// 2, 4, 8 the one whose longest warp stripe is shortest (given how many clusters fit at once),
// the smaller on a tie. The per-warp stripe is the kernel's time, so the flat grid stays when
// it is strictly shorter. KernelOptions::clusters = false keeps the flat grid (tests cover both).
int cluster_grid(const SmallLaunch& l, int device, int smem, int slices, int k_tiles,
                 const SmallGrid& flat, SmallGrid* out) {
  *out = flat;
  for (int size : kClusterSizes) {
    int fit = 0;
    if (int rc = detail::max_active_clusters(reinterpret_cast<const void*>(l.kernel), device,
                                             smem, l.warps * 32, size, &fit))
      return rc;
    if (fit == 0) continue;
    const int per_cluster = (slices + std::min(fit, slices) - 1) / std::min(fit, slices);
    const int warps = size * l.warps;
    const int per_warp = (per_cluster * k_tiles + warps - 1) / warps;
    if (per_warp < out->per_warp || (per_warp == out->per_warp && out->cluster == 0)) {
      const int clusters = (slices + per_cluster - 1) / per_cluster;
      *out = SmallGrid{clusters * size, per_warp, size, per_cluster};
    }
  }
  return kOk;
}

}  // namespace

size_t marlin_workspace_ints(int N) { return N > 0 ? size_t(N + kSliceN - 1) / kSliceN : 0; }

namespace detail {

namespace {

// The kernel and grid for one problem on the current device (shared by the launcher and the
// report below). Returns kOk, kNoConfig (shared memory does not fit) or kCudaError.
struct SmallPlan {
  SmallLaunch launch;
  SmallGrid grid;
  int device = 0;
  // The kernel's code on this device was compiled for sm_90 or later (not sm_8x PTX compiled
  // just in time, whose griddep_wait is empty): only then may its dependent variant run.
  bool dependent_ok = false;
  bool dependent = false;  // launch is the dependent variant (plan_small_m chose it)
};
// The grid is worked out once per (kernel, device, N, K, clusters on/off) and cached: a
// decode step launches the same few shapes over and over, and this is on its host path.
int plan_variant(int M, int N, int K, bool grouped, bool asym, bool pair, bool clusters, bool dependent,
                 SmallPlan* plan) {
  int sms = 0;
  if (int rc = current_device_sms(&plan->device, &sms)) return rc;
  plan->launch = pick_small_launch(M, grouped, asym, pair, dependent);
  const SmallLaunch& l = plan->launch;
  using Key = std::tuple<const void*, int, int, int, bool>;
  struct Planned {
    int rc;
    SmallGrid grid;
    bool dependent_ok;
  };
  static std::mutex mutex;
  static std::map<Key, Planned> planned;
  const Key key{reinterpret_cast<const void*>(l.kernel), plan->device, N, K, clusters};
  {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = planned.find(key);
    if (it != planned.end()) {
      plan->grid = it->second.grid;
      plan->dependent_ok = it->second.dependent_ok;
      return it->second.rc;
    }
  }
  cudaFuncAttributes fa{};
  TL_CUDA_CHECK(cudaFuncGetAttributes(&fa, reinterpret_cast<const void*>(l.kernel)));
  const bool dependent_ok = fa.ptxVersion >= 90 && fa.binaryVersion >= 90;
  int smem_optin = 0;
  TL_CUDA_CHECK(cudaDeviceGetAttribute(&smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin,
                                       plan->device));
  int rc = kOk;
  SmallGrid grid;
  if (l.max_smem_bytes > smem_optin) {
    rc = kNoConfig;  // e.g. 9..16 rows on sm_86 / sm_89
  } else {
    int resident = 1;
    if (int e = open_kernel(reinterpret_cast<const void*>(l.kernel), plan->device,
                            l.max_smem_bytes, l.warps * 32, 8 / l.warps, &resident))
      return e;  // a CUDA error is not cached
    const int k_tiles = K / kTileK, slices = N / kSliceN;
    grid = flat_grid(k_tiles * slices, sms, resident, l.warps);
    if (clusters) {
      if (int e = cluster_grid(l, plan->device, l.max_smem_bytes, slices, k_tiles, grid, &grid))
        return e;
    }
  }
  std::lock_guard<std::mutex> lock(mutex);
  planned.emplace(key, Planned{rc, grid, dependent_ok});
  plan->grid = grid;
  plan->dependent_ok = dependent_ok;
  return rc;
}

// The plan of the variant the options ask for: the dependent one (KernelOptions::
// dependent_launch) where its code is sm_90's, else the plain kernel.
int plan_small_m(int M, int N, int K, bool grouped, bool asym, bool pair, const KernelOptions& options, SmallPlan* plan) {
  if (options.dependent_launch &&
      plan_variant(M, N, K, grouped, asym, pair, options.clusters, true, plan) == kOk && plan->dependent_ok) {
    plan->dependent = true;
    return kOk;
  }
  plan->dependent = false;
  return plan_variant(M, N, K, grouped, asym, pair, options.clusters, false, plan);
}

}  // namespace

int marlin_small_m_grid(int M, int N, int K, int group_size, bool asym, const KernelOptions& options,
                        SmallMGrid* out, bool pair) {
  if (M < 1 || M > kSmallMMaxRows || N % kSliceN || K % kTileK) return kShapeUnsupported;
  if (!marlin_group_size_ok(K, group_size)) return kNoConfig;
  SmallPlan plan;
  if (int rc = plan_small_m(M, N, K, group_size != K, asym || pair, pair, options, &plan)) return rc;
  *out = SmallMGrid{plan.grid.blocks, plan.launch.warps, plan.grid.per_warp, plan.grid.cluster};
  return kOk;
}

int marlin_small_m(const __half* A, const int32_t* B, const __half* s, const __half* delta,
                   __half* C, int* workspace, int M, int N, int K, bool grouped,
                   cudaStream_t stream, const KernelOptions& options, const SmallPairOperands* pair, int n_out) {
  if (M < 1 || M > kSmallMMaxRows || N % kSliceN || K % kTileK || n_out > N || n_out < 0) return kShapeUnsupported;
  if (pair && (!delta || !pair->B_up || !pair->s_up || !pair->delta_up)) return kShapeUnsupported;
  SmallPlan plan;
  if (int rc = plan_small_m(M, N, K, grouped, delta != nullptr, pair != nullptr, options, &plan)) return rc;
  const SmallLaunch& l = plan.launch;
  const SmallGrid& grid = plan.grid;
  void* slots = nullptr;
  if (grid.cluster == 0) {
    if (int rc = stream_scratch(plan.device, stream,
                                size_t(2) * grid.blocks * kSlotFloats * sizeof(float), &slots))
      return rc;
  }
  SmallParams p;
  p.A = A;
  p.B = reinterpret_cast<const int4*>(B);
  p.s = s;
  p.delta = delta;
  p.C = C;
  p.B_up = pair ? reinterpret_cast<const int4*>(pair->B_up) : nullptr;
  p.s_up = pair ? pair->s_up : nullptr;
  p.delta_up = pair ? pair->delta_up : nullptr;
  p.bias_gate = pair ? pair->bias_gate : nullptr;
  p.bias_up = pair ? pair->bias_up : nullptr;
  p.counters = workspace;
  p.slots = static_cast<float*>(slots);
  p.M = M;
  p.N = N;
  p.K = K;
  p.n_out = pair ? N / 2 : n_out > 0 ? n_out : N;
  p.per_warp = grid.per_warp;
  p.cluster = grid.cluster;
  p.cluster_slices = grid.cluster_slices;
  // PDL exists from sm_90 and needs the kernel's sm_90 code (its waits are empty in older
  // code): elsewhere plan_small_m took the plain kernel, launched as before the option.
  cudaLaunchAttribute attrs[2]{};
  unsigned n_attrs = 0;
  if (grid.cluster) {
    attrs[n_attrs].id = cudaLaunchAttributeClusterDimension;
    attrs[n_attrs].val.clusterDim.x = unsigned(grid.cluster);
    attrs[n_attrs].val.clusterDim.y = attrs[n_attrs].val.clusterDim.z = 1;
    ++n_attrs;
  }
  if (plan.dependent) {
    attrs[n_attrs].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attrs[n_attrs].val.programmaticStreamSerializationAllowed = 1;
    ++n_attrs;
  }
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(unsigned(grid.blocks));
  config.blockDim = dim3(unsigned(l.warps * 32));
  config.dynamicSmemBytes = size_t(smem_bytes(l.warps, M));
  config.stream = stream;
  config.attrs = attrs;
  config.numAttrs = n_attrs;
  TL_CUDA_CHECK(cudaLaunchKernelEx(&config, l.kernel, p));
  TL_CHECK_LAUNCH("marlin_small_m_kernel");
  return kOk;
}

}  // namespace detail
}  // namespace tl::cuda
