// Host side of the Hopper prefill kernel (marlin_hopper.cu): the tensor maps the copy engine
// reads the operands through, what fits on the device (asked of the driver once), the schedule
// of marlin_hopper_plan.h kept per shape, and the launch. Plain host code: it is built for
// every target of the library; the kernel itself only for sm_90a.
#include <cuda.h>
#include <cudaTypedefs.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <iterator>
#include <map>
#include <mutex>

#include "core/group_size.h"
#include "cuda/cuda_check.h"
#include "cuda/device_context.h"
#include "cuda/marlin_gemm.h"
#include "cuda/marlin_hopper.cuh"
#include "cuda/tl_kernels.h"

namespace tl::cuda::detail {
namespace {

using hopper::kK16PerStage;
using hopper::kStageK;
using hopper::kTileN;
using hopper::Maps;
using hopper::Params;
using hopper::Variant;
using hopper::variant_for;

using EncodeTiled = PFN_cuTensorMapEncodeTiled_v12000;
// The driver's tensor-map encoder, through the runtime (no link-time libcuda dependency).
EncodeTiled encode_tiled() {
  static EncodeTiled fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult q{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess) {
      (void)cudaGetLastError();
      return EncodeTiled(nullptr);
    }
    return reinterpret_cast<EncodeTiled>(f);
  }();
  return fn;
}

// One tensor map: `rank` dimensions (innermost first, sizes in elements), the strides of the
// outer ones in bytes, the box, no interleave, zeros out of bounds.
bool encode_map(CUtensorMap* map, CUtensorMapDataType type, int rank, const void* base, const cuuint64_t* dims,
                const cuuint64_t* strides, const cuuint32_t* box, CUtensorMapSwizzle swizzle) {
  EncodeTiled enc = encode_tiled();
  const cuuint32_t elem[3] = {1, 1, 1};
  return enc && enc(map, type, cuuint32_t(rank), const_cast<void*>(base), dims, strides, box, elem,
                    CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                    CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// The four maps of struct Maps (the scales' and deltas' only where the kernel reads them).
bool encode_maps(Maps* m, const __half* A, const int32_t* B, const __half* s, const __half* delta, int M, int N,
                 int K, bool grouped, int rows) {
  *m = Maps{};
  const cuuint64_t a_dims[2] = {cuuint64_t(K), cuuint64_t(M)}, a_strides[1] = {cuuint64_t(K) * 2};
  const cuuint32_t a_box[2] = {cuuint32_t(kStageK), cuuint32_t(rows)};
  // The Marlin section: a k16 row is 2N words, 4 Marlin tiles (one CTA tile) 2 KB of it.
  const cuuint64_t w_dims[3] = {256, cuuint64_t(N / 128), cuuint64_t(K / 16)};
  const cuuint64_t w_strides[2] = {1024, cuuint64_t(N) * 8};
  const cuuint32_t w_box[3] = {256, 2, cuuint32_t(kK16PerStage)};
  if (!encode_map(&m->a, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2, A, a_dims, a_strides, a_box, CU_TENSOR_MAP_SWIZZLE_128B) ||
      !encode_map(&m->w, CU_TENSOR_MAP_DATA_TYPE_INT32, 3, B, w_dims, w_strides, w_box, CU_TENSOR_MAP_SWIZZLE_NONE))
    return false;
  if (!grouped) return true;
  const cuuint64_t s_dims[2] = {cuuint64_t(N), cuuint64_t(K / kMarlinGroupSizes[0])}, s_strides[1] = {cuuint64_t(N) * 2};
  const cuuint32_t s_box[2] = {cuuint32_t(kTileN), 1};
  return encode_map(&m->s, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2, s, s_dims, s_strides, s_box, CU_TENSOR_MAP_SWIZZLE_NONE) &&
         (!delta || encode_map(&m->delta, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2, delta, s_dims, s_strides, s_box,
                               CU_TENSOR_MAP_SWIZZLE_NONE));
}

// Whether this build holds the sm_90a kernel and the device is an sm_90 one (the only kind
// sm_90a code runs on), and the driver offers tensor maps. Cached per device.
bool hopper_device(int device) {
  static std::atomic<int> cache[64];
  return cached_device_fact(cache, device, [](int d) {
    int major = 0, minor = 0;
    const bool ok = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, d) == cudaSuccess &&
                    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, d) == cudaSuccess &&
                    major == 9 && minor == 0 && encode_tiled() != nullptr;
    (void)cudaGetLastError();
    return ok;
  });
}

struct HopperGrid {
  Variant v{};
  hopper::Schedule plan{};
};

// How many clusters of `split` CTAs of each variant run at once on a device (split 1: the SM
// count; 0: the variant does not fit), asked of the driver once per device, so that a launch's
// plan is arithmetic (cuda/marlin_hopper_plan.h) and not a dozen queries.
constexpr int kVariantRows[] = {32, 64, 128};
struct Fits {
  int clusters[3][hopper::kMaxSplit + 1] = {};
};
int device_fits(int device, int sms, const Fits** out) {
  static std::mutex mutex;
  static std::map<int, Fits> known;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = known.find(device);
  if (it == known.end()) {
    Fits f;
    for (int v = 0; v < 3; ++v)
      for (int split = 1; split <= hopper::kMaxSplit; ++split) {
        const Variant var = variant_for(kVariantRows[v], split);
        const void* kernel = reinterpret_cast<const void*>(var.kernel);
        int resident = 0;
        if (int rc = open_kernel(kernel, device, var.smem_bytes, var.threads, 1, &resident)) return rc;
        if (resident < 1) continue;
        int& clusters = f.clusters[v][split];
        if (split == 1)
          clusters = sms;
        else if (int rc = max_active_clusters(kernel, device, var.smem_bytes, var.threads, split, &clusters))
          return rc;
      }
    it = known.emplace(device, f).first;
  }
  *out = &it->second;  // std::map: stable under later insertions
  return kOk;
}

// The schedule of cuda/marlin_hopper_plan.h on this device, and its variant. Kept per (device,
// shape, options): stream-K's cut bisects over its runs, 3-12 us of host time per launch on the
// 7B / 70B layers (more than the launch itself), paid once per shape instead. Bounded: a runtime
// sees a few layer shapes times the prompt lengths' row-tile counts.
int plan_grid(int M, int N, int K, int device, int sms, const KernelOptions& options, HopperGrid* g) {
  static std::mutex mutex;
  static std::map<std::array<int, 7>, hopper::Schedule> known;
  const std::array<int, 7> key = {device, M, N, K, options.hopper_split, options.hopper_stream_k,
                                  options.hopper_sk_handover};
  bool found = false;
  {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = known.find(key);
    if ((found = it != known.end())) g->plan = it->second;
  }
  if (!found) {
    const Fits* fits = nullptr;
    if (int rc = device_fits(device, sms, &fits)) return rc;
    g->plan = hopper::plan_schedule(M, N, K, [&](int rows, int split) {
      const int v = int(std::find(std::begin(kVariantRows), std::end(kVariantRows), rows) - std::begin(kVariantRows));
      return fits->clusters[v][split];
    }, options.hopper_split, options.hopper_stream_k, options.hopper_sk_handover);
    std::lock_guard<std::mutex> lock(mutex);
    if (known.size() >= 4096) known.clear();
    known.emplace(key, g->plan);
  }
  if (g->plan.shape.grid < 1) return kNoConfig;
  g->v = variant_for(g->plan.shape.rows, g->plan.shape.split);
  return kOk;
}

}  // namespace

int marlin_hopper_plan(int M, int N, int K, const KernelOptions& options, GemmPlan* plan) {
  int device = 0, sms = 0;
  if (int rc = current_device_sms(&device, &sms)) return rc;
  if (!hopper_device(device)) return kNoConfig;
  HopperGrid g;
  if (int rc = plan_grid(M, N, K, device, sms, options, &g)) return rc;
  plan->kernel = "hopper";
  plan->blocks = g.plan.shape.grid;
  plan->warps_per_block = g.v.threads / 32;
  plan->cluster = g.plan.shape.split > 1 ? g.plan.shape.split : 0;
  plan->k_splits = g.plan.shape.split;
  plan->tiles_per_block = g.plan.tiles_per_cta;
  plan->stream_k = g.plan.shape.stream_k;
  plan->stream_k_group = g.plan.shape.stream_k ? g.plan.shape.sk_group : 0;
  plan->last_slice_rows = M % g.v.rows ? M % g.v.rows : g.v.rows;
  plan->rows_per_block = g.v.rows;
  plan->ragged_n = N % kTileN != 0;
  return kOk;
}

int marlin_hopper(const __half* A, const int32_t* B, const __half* s, const __half* delta, __half* C, int M, int N,
                  int K, int group_size, cudaStream_t stream, const KernelOptions& options) {
  int device = 0, sms = 0;
  if (int rc = current_device_sms(&device, &sms)) return rc;
  if (!hopper_device(device)) return kNoConfig;
  HopperGrid g;
  if (int rc = plan_grid(M, N, K, device, sms, options, &g)) return rc;
  Maps maps;
  if (!encode_maps(&maps, A, B, s, delta, M, N, K, group_size != K, g.v.rows)) return kNoConfig;
  Params p;
  p.B = B;
  p.s = s;
  p.delta = delta;
  p.C = C;
  p.M = M;
  p.N = N;
  p.K = K;
  p.grouped = group_size != K;
  p.n_tiles = g.plan.shape.n_tiles;
  p.m_tiles = g.plan.shape.tiles / g.plan.shape.n_tiles;
  p.tiles = g.plan.shape.tiles;
  p.k_iters = K / kStageK;
  p.split = g.plan.shape.split;
  p.stream_k = g.plan.shape.stream_k ? 1 : 0;
  p.sk_group = g.plan.shape.sk_group;
  p.partials = nullptr;
  p.counters = nullptr;
  if (g.plan.shape.stream_k) {
    void* scratch = nullptr;
    const size_t slots = size_t(g.plan.shape.grid) * 2 * size_t(g.v.slot_consumers);
    if (int rc = stream_scratch(device, stream, slots * size_t(g.v.slot_bytes), &scratch)) return rc;
    if (int rc = stream_flags(device, stream, size_t(g.plan.shape.tiles) * size_t(g.v.counters_per_tile), &p.counters))
      return rc;
    p.partials = static_cast<float4*>(scratch);
  }
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeClusterDimension;
  attr.val.clusterDim.x = unsigned(g.plan.shape.split);
  attr.val.clusterDim.y = attr.val.clusterDim.z = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(unsigned(g.plan.shape.grid));
  config.blockDim = dim3(unsigned(g.v.threads));
  config.dynamicSmemBytes = size_t(g.v.smem_bytes);
  config.stream = stream;
  config.attrs = &attr;
  config.numAttrs = 1;
  TL_CUDA_CHECK(cudaLaunchKernelEx(&config, g.v.kernel, maps, p, g.plan.runs));
  TL_CHECK_LAUNCH("marlin_hopper_kernel");
  return kOk;
}

}  // namespace tl::cuda::detail

namespace tl::cuda {
bool hopper_kernel_available(int device) { return detail::hopper_device(device); }
}  // namespace tl::cuda
