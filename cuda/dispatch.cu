// quant_gemm: picks the GEMM path for one linear weight, in this order:
//   1. an fp16 copy of the weight exists ("fp16 body cache")   -> cuBLAS fp16 GEMM;
//   2. Marlin: bits == 4, not flagged exact-int4, dispatch enabled, a Marlin pack is present,
//      marlin_available(), M >= marlin_min_m(), K % 128 == 0, N % 128 == 0
//                                                             -> marlin_mm_asymmetric;
//   3. otherwise, or when the Marlin launcher declines (rc 1/2) -> native int4_gemm.
// Every call is counted per path; every time Marlin was wanted (dispatch enabled) but not
// taken, the reason is counted too, so a runtime report can say why a layer fell back.
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "cuda/cublas_gemm.h"
#include "cuda/cuda_check.h"
#include "cuda/tl_kernels.h"

namespace tl::cuda {
namespace {

// The smallest M sent to Marlin. The Marlin kernel is faster than the native int4_gemm at
// every M we measured on the H200 (M = 1 included: it streams the same weight bytes with a
// deeper pipeline, see docs/perf.md, "CUDA kernels (H200)"), so the floor is 1. The seed
// runtime's 16 came from upstream Marlin, whose small-batch configuration crashed on Hopper.
constexpr int kMarlinMinM = 1;
constexpr int kMarlinTile = 128;  // K % 128 == 0, N % 128 == 0

std::atomic<int> g_dispatch{-1};  // -1: not decided yet (read TINYLOOP_USE_MARLIN on first use)

std::mutex g_mutex;  // guards g_stats
DispatchStats g_stats;
std::once_flag g_first_line;

bool read_env_switch() {
  const char* v = std::getenv("TINYLOOP_USE_MARLIN");
  return v != nullptr && std::strcmp(v, "1") == 0;
}

bool cached_marlin_available(int device) {
  // 0 unknown, 1 no, 2 yes; devices beyond the table are asked every time.
  static std::atomic<int> cache[64];
  if (device < 0 || device >= 64) return marlin_available(device);
  int v = cache[device].load(std::memory_order_relaxed);
  if (v == 0) {
    v = marlin_available(device) ? 2 : 1;
    cache[device].store(v, std::memory_order_relaxed);
  }
  return v == 2;
}

// Empty when Marlin should run; otherwise why not (the fallback reason).
std::string marlin_refusal(const DeviceQuantWeight& w, int M) {
  if (w.bits != 4) return "bits != 4";
  if (w.exact_int4) return "flagged exact_int4";
  if (!w.marlin_B || !w.marlin_s || !w.marlin_delta || !w.marlin_workspace) return "no marlin pack";
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || !cached_marlin_available(device)) {
    cudaGetLastError();
    return "marlin not available on this GPU";
  }
  if (M < kMarlinMinM) return "M < " + std::to_string(kMarlinMinM);
  if (w.K % kMarlinTile != 0) return "K % 128 != 0";
  if (w.N % kMarlinTile != 0) return "N % 128 != 0";
  return "";
}

void count(GemmPath path, const std::string& fallback_reason) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_stats.dispatches[static_cast<int>(path)]++;
  if (!fallback_reason.empty()) g_stats.fallbacks[fallback_reason]++;
}

}  // namespace

const char* gemm_path_name(GemmPath p) {
  switch (p) {
    case GemmPath::kFp16Copy: return "fp16-copy";
    case GemmPath::kMarlin: return "marlin";
    case GemmPath::kNativeInt4: return "native-int4";
  }
  return "?";
}

int marlin_min_m() { return kMarlinMinM; }

void set_marlin_dispatch(bool enabled) { g_dispatch.store(enabled ? 1 : 0); }

bool marlin_dispatch_enabled() {
  int v = g_dispatch.load();
  if (v < 0) {
    int expected = -1;
    g_dispatch.compare_exchange_strong(expected, read_env_switch() ? 1 : 0);
    v = g_dispatch.load();
  }
  return v == 1;
}

GemmPath quant_gemm(const DeviceQuantWeight& w, const __half* X, __half* Y, int M,
                    cudaStream_t stream, int* rc) {
  int status = kOk;
  GemmPath path = GemmPath::kNativeInt4;
  std::string fallback;
  if (w.fp16_weight) {
    path = GemmPath::kFp16Copy;
    status = detail::cublas_fp16_gemm(X, w.fp16_weight, Y, M, w.N, w.K, stream);
  } else {
    const bool enabled = marlin_dispatch_enabled();
    std::string refusal = enabled ? marlin_refusal(w, M) : "dispatch disabled";
    if (refusal.empty()) {
      status = marlin_mm_asymmetric(X, w.marlin_B, w.marlin_s, w.marlin_delta, Y,
                                    w.marlin_workspace, M, w.N, w.K, w.group_size, stream);
      if (status == kOk || status == kCudaError) {
        path = GemmPath::kMarlin;
        if (status == kOk) {
          std::call_once(g_first_line, [&] {
            char line[160];
            std::snprintf(line, sizeof line, "[marlin] first dispatch ok: BT=%d N=%d K=%d gs=%d",
                          M, w.N, w.K, w.group_size == w.K ? -1 : w.group_size);
            std::fprintf(stderr, "%s\n", line);
            std::lock_guard<std::mutex> lock(g_mutex);
            g_stats.first_dispatch_line = line;
          });
        }
      } else {
        refusal = "marlin rc=" + std::to_string(status);
      }
    }
    if (path == GemmPath::kNativeInt4) {
      if (enabled) fallback = refusal;
      status = int4_gemm(X, w.q, w.scale, w.zero, Y, M, w.N, w.K, w.group_size, stream);
    }
  }
  count(path, fallback);
  if (rc) *rc = status;
  return path;
}

DispatchStats dispatch_stats() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_stats;
}

void reset_dispatch_stats() {
  std::lock_guard<std::mutex> lock(g_mutex);
  const std::string line = g_stats.first_dispatch_line;  // the line is printed once per process
  g_stats = DispatchStats{};
  g_stats.first_dispatch_line = line;
}

}  // namespace tl::cuda
