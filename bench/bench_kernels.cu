// bench_kernels: the libtl_cuda GEMMs against cuBLAS fp16 on the linear layers of Llama-2-7B
// and -70B. For each layer and group size it first checks every kernel against cuBLAS on the
// same weights (exit 1 on a mismatch), then times: Marlin (symmetric), the fused asymmetric
// wrapper, the dequantize + cuBLAS floor, the Hopper kernel (sm_90, M > 16; symmetric and
// asymmetric), what the runtime's options dispatch to, the correction pair (a_group_sum +
// correction_accum), native int4_gemm and its dequantize + cuBLAS floor, and cuBLAS
// (cublasGemmEx, fp16 in/out, fp32 accumulation). Each time is the median of many runs timed
// with CUDA events, a point's kernels in interleaved rounds (every kernel once per round, each
// round's order rotated, so none is timed on a GPU the others warmed or slowed to its power
// cap more often than another), the L2 flushed before every run so weights come
// from HBM. The flush READS a
// 2 x L2 buffer: a memset would leave the L2 full of dirty lines whose write-back (up to 60 MB)
// is then billed to the kernel being timed.
// Prints a table and a summary, writes JSON. Exit 77 without a suitable GPU.
// --tune FILE: also writes the crossovers measured here per layer shape (K, N, group size) as
// a crossover table (formats/crossover_file.h) for TL_MARLIN_CROSSOVERS: from which M of --m
// the floor beats the Hopper kernel (hopper_max_m) and the tiled kernel (dequant_min_m), all
// asymmetric, as the runtime runs them. The runtime row uses the table TL_MARLIN_CROSSOVERS
// names, if any.
//
// --layers graph: a decode step's four linears of each set back to back, as a runtime sees
// them: on the stream and captured in one CUDA graph (what a runtime replays; also with the
// decode kernels as programmatic dependents, checked bit for bit against the plain graph), against
// the sum of the four timed alone and against cuBLAS's graph; with the MLP as the SwiGLU pair;
// M <= 64; at M = 1 each layer's read floor (read_floor_us).
// --layers swiglu: the SwiGLU pair of each set's MLP (marlin_swiglu_asymmetric, fused at decode
// sizes) against the two GEMMs + elementwise pass it replaces and against cuBLAS doing the same.
//
//   bench_kernels [--quick] [--sets 7b,70b] [--layers qkv,o,gate_up,down,swiglu] [--m 1,16]
//                 [--g 128,-1] [--json FILE] [--reps N] [--min-reps N] [--native-max-m M] [--tune FILE]
// --reps / --min-reps: the most / fewest timed runs per kernel and point (100 / 5; a point
// takes as many as fit ~30 ms per kernel between them). Where the GPU runs under its power cap
// (70B at M = 4096) medians of few runs differ by up to 12 % for the same kernel: --min-reps 32.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include "apps/kernel_env.h"
#include "bench/bench_data.cuh"
#include "core/error.h"
#include "core/group_size.h"
#include "core/marlin_crossovers.h"
#include "cuda/cublas_gemm.h"
#include "cuda/device_buffer.h"
#include "cuda/marlin_gemm.h"
#include "cuda/model_ops.h"
#include "cuda/tl_kernels.h"
#include "formats/crossover_file.h"

namespace {

// CUDA and launcher failures throw (device_buffer.h's CudaError, tl::Error); main's one catch
// prints them and exits 2.
#define CHECK_CUDA(call) TL_CUDA_THROW(call)
#define CHECK_RC(expr)                                                                              \
  do {                                                                                              \
    const int rc_ = (expr);                                                                         \
    if (rc_ != 0)                                                                                   \
      throw tl::Error(std::string(#expr) + " returned rc " + std::to_string(rc_) + " (" + tl::cuda::rc_message(rc_) + ")"); \
  } while (0)

// Both sides round to fp16 (cuBLAS the fp16 copy of the weights, ours the dequantized
// fragments, or nothing): each is ~3e-4 from the exact product, so 2e-3 flags real errors only.
constexpr double kCheckRelFro = 2e-3;
constexpr double kTargetMsPerPoint = 30.0;  // timing budget per measurement
constexpr int kMinReps = 5;

using bench::Layer;
using bench::kLayers;

struct Options {
  std::vector<std::string> sets{"7b", "70b"};
  std::vector<std::string> layers{"qkv", "o", "gate_up", "down", "swiglu", "graph"};
  std::vector<int> ms{1, 2, 4, 8, 16, 32, 64, 128, 256, 1024, 4096};
  std::vector<int> gs{128, -1};
  std::string json = "bench_kernels.json";
  std::string tune;  // crossover table to write ("": none)
  int max_reps = 100;
  int min_reps = kMinReps;
  int native_max_m = 256;  // the CUDA-core kernel takes seconds at M = 4096 on 70B layers
};

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  size_t b = 0;
  while (b <= s.size()) {
    const size_t e = s.find(',', b);
    out.push_back(s.substr(b, e == std::string::npos ? std::string::npos : e - b));
    if (e == std::string::npos) break;
    b = e + 1;
  }
  return out;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "bench_kernels: %s: expected a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--quick") {
      o.sets = {"7b"};
      o.ms = {1, 16, 64, 256};
    } else if (a == "--sets") {
      o.sets = split(value());
    } else if (a == "--layers") {
      o.layers = split(value());
    } else if (a == "--m") {
      o.ms.clear();
      for (const auto& v : split(value())) o.ms.push_back(std::atoi(v.c_str()));
    } else if (a == "--g") {
      o.gs.clear();
      for (const auto& v : split(value())) o.gs.push_back(std::atoi(v.c_str()));
    } else if (a == "--json") {
      o.json = value();
    } else if (a == "--reps") {
      o.max_reps = std::max(kMinReps, std::atoi(value().c_str()));
    } else if (a == "--min-reps") {
      o.min_reps = std::max(kMinReps, std::atoi(value().c_str()));
    } else if (a == "--tune") {
      o.tune = value();
    } else if (a == "--native-max-m") {
      o.native_max_m = std::atoi(value().c_str());
    } else {
      std::fprintf(stderr, "bench_kernels: %s: unknown option (see the header of bench_kernels.cu)\n",
                   a.c_str());
      std::exit(2);
    }
  }
  return o;
}

// The read floor of a layer at one launch: its weight bytes (B, permuted s, delta) streamed by a
// kernel that does nothing else, U 16-byte loads in flight per thread (evict-first, no reuse),
// and one value stored that depends on them. The best of a few grid shapes (read_floor_us) is
// what no GEMM launch of those bytes beats in this harness, launch, first-byte latency and tail
// included: the decode kernel's distance to the read roofline measured on the same footing
// rather than computed from the HBM's peak (issue 47).
template <int U>
__global__ void read_floor(const int4* a, size_t na, const int4* b, size_t nb, const int4* c, size_t nc, int* sink) {
  const size_t n = na + nb + nc, stride = size_t(gridDim.x) * blockDim.x;
  int acc = 0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += U * stride) {
    int4 v[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const size_t j = i + u * stride;
      v[u] = j < na ? __ldcs(a + j) : j < na + nb ? __ldcs(b + (j - na)) : j < n ? __ldcs(c + (j - na - nb)) : int4{};
    }
#pragma unroll
    for (int u = 0; u < U; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  if (acc == 0x7fffffff) *sink = acc;
}

// Device memory of one scope (a layer's buffers; the run's flush buffer): DeviceBuffers, freed
// together when the scope ends.
using DeviceScope = std::vector<tl::cuda::DeviceBuffer<uint8_t>>;
template <class T>
T* dalloc(DeviceScope& scope, size_t n) {
  scope.emplace_back(std::max<size_t>(n, 1) * sizeof(T));
  return scope.back().as<T>();
}

// Reads n int4 and stores one value that depends on them (so nothing is optimized away).
__global__ void l2_flush_read(const int4* buf, size_t n, int* sink) {
  int acc = 0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const int4 v = __ldcg(buf + i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x7fffffff) *sink = acc;
}

struct Timer {
  cudaStream_t stream;
  void* flush;
  size_t flush_bytes;
  cudaEvent_t start, stop;
  int min_reps, max_reps;

  // Median time in microseconds of each of `launches`, timed in rounds: one run of every launch
  // per round, the L2 flushed before each run, so that all of them see the GPU in the same
  // state. (Timed one kernel after another, the later rows of a point ran on a GPU warmed by the
  // earlier ones: on the H200 at M >= 1024 the floor's launcher came out 5-9 % slower as the
  // runtime row, timed last, than as its own row, docs/perf.md.) The rounds come in blocks of
  // n: in block b the launches run in an order of their own (a shuffle seeded by b), rotated by
  // one place per round, so that within a block every launch is timed once at every place of a
  // round and across blocks after different ones. Where the GPU runs under its power cap (70B
  // at M = 4096: the SM clock 1.47-1.98 GHz, "SW power cap") the clock a launch gets depends on
  // what ran before it: in one fixed order the two asymmetric Hopper rows (one kernel, the same
  // data) came out 1-13 % slower than the symmetric row and than each other; at a fixed clock,
  // under ncu, the three were within 0.3 % (H200, 2026-12-03). Each timed run
  // follows an untimed one of the same launch (then the flush), so its code is in the SMs'
  // instruction caches as in a run of repeats: cold, the Hopper kernel's first run after the
  // others took up to 4.5 us longer at M <= 64. Rounds: as many as fit the
  // time budget of all the points (kTargetMsPerPoint each), within [min_reps, max_reps] and then
  // up to a multiple of n (--min-reps 4n: four blocks).
  std::vector<double> medians_us(const std::vector<std::function<int()>>& launches) {
    const int n = int(launches.size());
    std::vector<std::vector<float>> ms(launches.size());
    int reps = max_reps;
    std::vector<int> order(launches.size());
    for (int r = 0; r < reps; ++r) {
      if (r % n == 0) {  // a block's order
        std::iota(order.begin(), order.end(), 0);
        std::shuffle(order.begin(), order.end(), std::mt19937(uint32_t(r / n)));
      }
      float round_ms = 0;
      for (int i = 0; i < n; ++i) {
        const int k = order[size_t((i + r) % n)];
        CHECK_RC(launches[k]());  // untimed: module load, handles, scratch; the code into the caches
        l2_flush_read<<<1024, 256, 0, stream>>>(static_cast<const int4*>(flush), flush_bytes / 16,
                                                static_cast<int*>(flush));
        CHECK_CUDA(cudaEventRecord(start, stream));
        CHECK_RC(launches[k]());
        CHECK_CUDA(cudaEventRecord(stop, stream));
        CHECK_CUDA(cudaEventSynchronize(stop));
        float t = 0;
        CHECK_CUDA(cudaEventElapsedTime(&t, start, stop));
        ms[k].push_back(t);
        round_ms += t;
      }
      if (r == 0) {
        reps = std::clamp(int(kTargetMsPerPoint * double(n) / std::max(round_ms, 1e-3f)), min_reps,
                          std::max(min_reps, max_reps));
        reps = (reps + n - 1) / n * n;
      }
    }
    std::vector<double> us;
    for (auto& m : ms) {
      std::sort(m.begin(), m.end());
      us.push_back(1e3 * m[m.size() / 2]);
    }
    return us;
  }
};

// Relative Frobenius distance of two fp16 device arrays, and their non-finite count.
double rel_fro(const __half* got_d, const __half* want_d, size_t n, long long* nonfinite) {
  std::vector<__half> got(n), want(n);
  CHECK_CUDA(cudaMemcpy(got.data(), got_d, n * 2, cudaMemcpyDeviceToHost));
  CHECK_CUDA(cudaMemcpy(want.data(), want_d, n * 2, cudaMemcpyDeviceToHost));
  double e2 = 0, r2 = 0;
  *nonfinite = 0;
  for (size_t i = 0; i < n; ++i) {
    const double g = __half2float(got[i]), w = __half2float(want[i]);
    if (!std::isfinite(g)) {
      ++*nonfinite;
      continue;
    }
    e2 += (g - w) * (g - w);
    r2 += w * w;
  }
  return std::sqrt(e2 / std::max(r2, 1e-30));
}

struct Record {
  std::string set, layer, kernel;
  int K, N, M, g;
  double us, tflops, gbs, speedup;
  std::string path;  // what the launcher ran: decode / tiled / dequant (marlin_plan), or the kernel
  std::string schedule;  // the Hopper kernel's grid (tile rows, split or stream-K, CTAs); "" otherwise
};

double geomean(const std::vector<double>& v) {
  if (v.empty()) return 0;
  double s = 0;
  for (double x : v) s += std::log(x);
  return std::exp(s / double(v.size()));
}

// The MLP shapes of the SwiGLU pair: gate and up [K, F] each.
struct MlpShape {
  const char* set;
  int K, F;
};
constexpr MlpShape kMlpShapes[] = {{"7b", 4096, 11008}, {"70b", 8192, 28672}};

// One asymmetric weight [K, N] made on the GPU in every layout the kernels read: Marlin's B,
// permuted s and delta; TinyLoop's q (two codes per byte), scale and zero; and the fp16 weights
// the checks compare against, W_hat = q scale + zero and W_marlin = (q - 8) s.
struct BenchWeight {
  const int32_t* B;
  const __half *s_perm, *delta, *w_hat, *w_marlin, *scale, *zero;
  const uint8_t* q_tl;
};
BenchWeight make_bench_weight(DeviceScope& mem, int K, int N, int gsz, uint64_t* seed) {
  const int G = K / gsz;
  const size_t kn = size_t(K) * N, gn = size_t(G) * N;
  uint32_t* B = dalloc<uint32_t>(mem, kn / 8);
  __half *scale = dalloc<__half>(mem, gn), *s_perm = dalloc<__half>(mem, gn), *zero = dalloc<__half>(mem, gn),
         *delta = dalloc<__half>(mem, gn), *w_hat = dalloc<__half>(mem, kn), *w_marlin = dalloc<__half>(mem, kn);
  uint8_t* q_tl = dalloc<uint8_t>(mem, kn / 2);
  CHECK_CUDA(cudaMemset(q_tl, 0, kn / 2));
  bench::fill_bits<<<1024, 256>>>(B, kn / 8, ++*seed);
  bench::fill_uniform<<<1024, 256>>>(scale, gn, ++*seed, 0.002f, 0.02f);
  bench::make_zero_delta<<<1024, 256>>>(scale, zero, delta, gn, ++*seed);
  bench::permute_scales<<<1024, 256>>>(scale, s_perm, gn, G == 1);
  bench::decode_marlin<<<4096, 256>>>(B, scale, zero, K, N, gsz, q_tl, w_marlin, w_hat);
  CHECK_CUDA(cudaGetLastError());
  return {reinterpret_cast<const int32_t*>(B), s_perm, delta, w_hat, w_marlin, scale, zero, q_tl};
}

// A graph of `run` captured on `stream` (each launcher called once before, so that its scratch
// and plans exist: nothing may allocate during capture). rc 0, or the failing call's.
struct Graph {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  ~Graph() {
    if (exec) cudaGraphExecDestroy(exec);
    if (graph) cudaGraphDestroy(graph);
  }
};
int capture(cudaStream_t stream, const std::function<int()>& run, Graph* g) {
  if (int rc = run()) return rc;
  CHECK_CUDA(cudaStreamSynchronize(stream));
  CHECK_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  const int rc = run();
  const cudaError_t end = cudaStreamEndCapture(stream, &g->graph);
  if (rc) return rc;
  CHECK_CUDA(end);
  CHECK_CUDA(cudaGraphInstantiate(&g->exec, g->graph, 0));
  return 0;
}

// read_floor's best time over its grid shapes (U 4 or 8 loads per thread, 256 threads, 2, 4 or 8
// blocks per SM, at most the blocks the bytes fill) for one weight's B, s and delta.
// Its stored value goes to the flush buffer (never a kernel's workspace, which must stay zero).
double read_floor_us(Timer& timer, cudaStream_t stream, const BenchWeight& w, int K, int N, int gsz) {
  int* sink = static_cast<int*>(timer.flush);
  int sms = 0, dev = 0;
  CHECK_CUDA(cudaGetDevice(&dev));
  CHECK_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  const size_t nb = size_t(K) * N / 2 / 16, ns = size_t(K / gsz) * N * 2 / 16;
  const int4* B = reinterpret_cast<const int4*>(w.B);
  const int4* s = reinterpret_cast<const int4*>(w.s_perm);
  const int4* d = reinterpret_cast<const int4*>(w.delta);
  constexpr int kThreads = 256;
  std::vector<std::function<int()>> runs;
  for (int u : {4, 8})
    for (int per_sm : {2, 4, 8}) {
      const size_t fill = (nb + 2 * ns + size_t(kThreads) * u - 1) / (size_t(kThreads) * u);
      const int blocks = int(std::min<size_t>(size_t(per_sm) * sms, fill));
      runs.push_back([=] {
        if (u == 4)
          read_floor<4><<<blocks, kThreads, 0, stream>>>(B, nb, s, ns, d, ns, sink);
        else
          read_floor<8><<<blocks, kThreads, 0, stream>>>(B, nb, s, ns, d, ns, sink);
        return cudaGetLastError() == cudaSuccess ? 0 : 3;
      });
    }
  const std::vector<double> t = timer.medians_us(runs);
  return *std::min_element(t.begin(), t.end());
}

// The four layers of each set (kLayers) back to back: the sum of their times alone, the four on
// the stream one after another, and the four in one CUDA graph; that graph with the decode
// kernels launched as programmatic dependents (KernelOptions::dependent_launch: each GEMM's
// weight stream starts under its predecessor's tail; the plain kernels where PDL is not
// available); the graph with the MLP as the SwiGLU pair (qkv, o, marlin_swiglu_asymmetric, down:
// what the runtime runs, the silu included); cuBLAS's four in a graph. All asymmetric on the
// runtime's options; the L2 flushed before each timed run (of a single layer or of the whole
// sequence). At M = 1 the weight bytes each layer
// reads over its time alone: the achieved DRAM bandwidth.
int bench_graph(const Options& opt, Timer& timer, cudaStream_t stream, uint64_t seed, std::vector<Record>& records) {
  std::printf("\nA decode step's four linears back to back (sums over the set's layers; x: cuBLAS graph / Marlin graph)\n"
              "%-4s %5s %4s | %9s %9s %9s %9s | %9s %6s | %9s %6s | %s\n",
              "set", "M", "g", "alone us", "stream us", "graph us", "PDL graph", "pair grph", "x", "cuBLAS gr", "x",
              "GB/s per layer at M = 1");
  for (const std::string& set : opt.sets) {
    std::vector<const Layer*> layers;
    for (const Layer& L : kLayers)
      if (set == L.set) layers.push_back(&L);
    const MlpShape* mlp = nullptr;
    for (const MlpShape& S : kMlpShapes)
      if (set == S.set) mlp = &S;
    if (layers.size() != 4 || !mlp) continue;
    for (int g : opt.gs) {
      DeviceScope mem;
      int max_k = 0, max_m = 0;
      for (int M : opt.ms) max_m = std::max(max_m, M <= 64 ? M : 0);
      if (max_m == 0) continue;
      struct LayerData {
        const Layer* L;
        int gsz;
        BenchWeight w;
        int* work;
        __half* out;
        double bytes;
      };
      std::vector<LayerData> ld;
      for (const Layer* L : layers) {
        const int gsz = int(tl::group_size_from_marlin(L->K, g));
        LayerData d{L, gsz, make_bench_weight(mem, L->K, L->N, gsz, &seed), dalloc<int>(mem, tl::cuda::marlin_workspace_ints(L->N)),
                    dalloc<__half>(mem, size_t(max_m) * L->N),
                    double(L->K) * L->N / 2 + 2.0 * 2.0 * double(L->K / gsz) * L->N};
        CHECK_CUDA(cudaMemset(d.work, 0, tl::cuda::marlin_workspace_ints(L->N) * sizeof(int)));
        ld.push_back(d);
        max_k = std::max(max_k, L->K);
      }
      const int pgsz = int(tl::group_size_from_marlin(mlp->K, g));
      const BenchWeight wg = make_bench_weight(mem, mlp->K, mlp->F, pgsz, &seed), wu = make_bench_weight(mem, mlp->K, mlp->F, pgsz, &seed);
      int* pair_work = dalloc<int>(mem, tl::cuda::marlin_workspace_ints(2 * mlp->F));
      CHECK_CUDA(cudaMemset(pair_work, 0, tl::cuda::marlin_workspace_ints(2 * mlp->F) * sizeof(int)));
      __half *pair_out = dalloc<__half>(mem, size_t(max_m) * mlp->F), *pair_scratch = dalloc<__half>(mem, size_t(max_m) * mlp->F);
      __half* A = dalloc<__half>(mem, size_t(max_m) * max_k);
      bench::fill_uniform<<<1024, 256>>>(A, size_t(max_m) * max_k, ++seed, -1.f, 1.f);
      CHECK_CUDA(cudaGetLastError());
      CHECK_CUDA(cudaDeviceSynchronize());
      const tl::cuda::KernelOptions rt = tl::kernel_options_from_env();
      tl::cuda::KernelOptions rt_pdl = rt;
      rt_pdl.dependent_launch = true;
      auto layer_with = [&](size_t i, int M, const tl::cuda::KernelOptions& o) {
        const LayerData& d = ld[i];
        return tl::cuda::marlin_mm_asymmetric(A, d.w.B, d.w.s_perm, d.w.delta, d.out, d.work, M, d.L->N, d.L->K, d.gsz,
                                              stream, o);
      };
      auto layer = [&](size_t i, int M) { return layer_with(i, M, rt); };
      auto cublas_layer = [&](size_t i, int M) {
        const LayerData& d = ld[i];
        return tl::cuda::detail::cublas_fp16_gemm(A, d.w.w_hat, d.out, M, d.L->N, d.L->K, stream);
      };
      for (int M : opt.ms) {
        if (M > 64) continue;
        auto four_with = [&](const tl::cuda::KernelOptions& o) {
          return [&, o]() {
            for (size_t i = 0; i < ld.size(); ++i)
              if (int rc = layer_with(i, M, o)) return rc;
            return 0;
          };
        };
        const auto four = four_with(rt);
        const auto four_pdl = four_with(rt_pdl);
        auto four_pair = [&]() {  // the MLP's gate_up as the pair (its silu included)
          for (size_t i = 0; i < ld.size(); ++i) {
            const int rc = std::string(ld[i].L->name) == "gate_up"
                               ? tl::cuda::marlin_swiglu_asymmetric(A, {wg.B, wg.s_perm, wg.delta}, {wu.B, wu.s_perm, wu.delta},
                                                                    nullptr, nullptr, pair_out, pair_scratch, pair_work, M,
                                                                    mlp->F, mlp->K, pgsz, stream, rt)
                               : layer(i, M);
            if (rc) return rc;
          }
          return 0;
        };
        auto four_cublas = [&]() {
          for (size_t i = 0; i < ld.size(); ++i)
            if (int rc = cublas_layer(i, M)) return rc;
          return 0;
        };
        // A sequence that cannot be captured (a library call that refuses capture) is reported,
        // not timed: the launchers' own sequences are capturable by contract (tl_kernels.h).
        Graph gm, gd, gp, gc;
        auto try_capture = [&](const std::function<int()>& run, Graph* gr, const char* what) {
          try {
            if (int rc = capture(stream, run, gr)) throw tl::Error(std::string("rc ") + std::to_string(rc));
            return true;
          } catch (const std::exception& e) {
            (void)cudaGetLastError();
            std::printf("bench_kernels: %s M=%d: no graph (%s)\n", what, M, e.what());
            return false;
          }
        };
        const bool have[4] = {try_capture(four, &gm, "marlin"), try_capture(four_pdl, &gd, "marlin PDL"),
                              try_capture(four_pair, &gp, "pair"), try_capture(four_cublas, &gc, "cublas")};
        // Checked first: the PDL graph writes the plain graph's outputs bit for bit (the kernels
        // are deterministic; only when they start differs).
        if (have[0] && have[1]) {
          auto outputs = [&](const Graph& gr) {
            CHECK_CUDA(cudaGraphLaunch(gr.exec, stream));
            CHECK_CUDA(cudaStreamSynchronize(stream));
            std::vector<std::vector<__half>> o;
            for (const LayerData& d : ld) {
              o.emplace_back(size_t(M) * d.L->N);
              CHECK_CUDA(cudaMemcpy(o.back().data(), d.out, o.back().size() * sizeof(__half), cudaMemcpyDeviceToHost));
            }
            return o;
          };
          const auto plain = outputs(gm), pdl = outputs(gd);
          for (size_t i = 0; i < ld.size(); ++i)
            if (std::memcmp(plain[i].data(), pdl[i].data(), plain[i].size() * sizeof(__half)) != 0) {
              std::fprintf(stderr, "bench_kernels: %s %s M=%d: the PDL graph's output differs from the plain graph's\n",
                           set.c_str(), ld[i].L->name, M);
              return 1;
            }
        }
        std::vector<std::function<int()>> runs;
        for (size_t i = 0; i < ld.size(); ++i) runs.push_back([&, i] { return layer(i, M); });
        runs.push_back(four);
        const Graph* graphs[4] = {&gm, &gd, &gp, &gc};
        for (int k = 0; k < 4; ++k)
          if (have[k])
            runs.push_back([gr = graphs[k], &stream] { return cudaGraphLaunch(gr->exec, stream) == cudaSuccess ? 0 : 3; });
        const std::vector<double> t = timer.medians_us(runs);
        std::vector<double> us(t.begin(), t.begin() + long(ld.size()) + 1);  // alone x 4, stream
        size_t next = ld.size() + 1;
        for (int k = 0; k < 4; ++k) us.push_back(have[k] ? t[next++] : NAN);  // NaN: no graph
        double alone = 0, bytes = 0;
        std::string gbs;
        for (size_t i = 0; i < ld.size(); ++i) {
          alone += us[i];
          bytes += ld[i].bytes;
          char b[48];
          std::snprintf(b, sizeof b, "%s%s %.0f", gbs.empty() ? "" : ", ", ld[i].L->name, ld[i].bytes / us[i] * 1e-3);
          gbs += b;
        }
        const double t_stream = us[4], t_graph = us[5], t_pdl = us[6], t_pair = us[7], t_cublas = us[8];
        const char* names[] = {"set4_alone", "set4_stream", "set4_graph", "set4_graph_pdl", "set4_graph_pair",
                               "set4_graph_cublas"};
        const double ts[] = {alone, t_stream, t_graph, t_pdl, t_pair, t_cublas};
        for (int k = 0; k < 6; ++k)
          records.push_back({set, "set4", names[k], 0, 0, M, g, ts[k], 0.0, bytes / ts[k] * 1e-3, t_cublas / ts[k], names[k], ""});
        std::printf("%-4s %5d %4d | %9.1f %9.1f %9.1f %9.1f | %9.1f %6.2f | %9.1f %6.2f | %s\n", set.c_str(), M, g, alone,
                    t_stream, t_graph, t_pdl, t_pair, t_cublas / t_pair, t_cublas, t_cublas / t_graph,
                    M == 1 ? gbs.c_str() : "");
        if (M == 1) {  // each layer's read floor: its bytes streamed by a kernel that does nothing else
          double floor_sum = 0;
          std::string line;
          for (size_t i = 0; i < ld.size(); ++i) {
            const double f = read_floor_us(timer, stream, ld[i].w, ld[i].L->K, ld[i].L->N, ld[i].gsz);
            floor_sum += f;
            records.push_back({set, ld[i].L->name, "read_floor", ld[i].L->K, ld[i].L->N, 1, g, f, 0.0, ld[i].bytes / f * 1e-3,
                               0.0, "read_floor", ""});
            char b[96];
            std::snprintf(b, sizeof b, "%s%s %.1f us (%.0f GB/s, layer at %.0f %%)", line.empty() ? "" : ", ", ld[i].L->name, f,
                          ld[i].bytes / f * 1e-3, 100.0 * f / us[i]);
            line += b;
          }
          std::printf("%-4s read floor at M = 1 (the weight bytes streamed alone; %% = floor / layer time): %s; sum %.1f us "
                      "(the four layers alone: %.1f)\n", set.c_str(), line.c_str(), floor_sum, alone);
        }
        std::fflush(stdout);
      }
    }
  }
  return 0;
}

// The SwiGLU pair (issue 49): marlin_swiglu_asymmetric against the sequence it replaces (two
// marlin_mm_asymmetric + swiglu_bias_rows: the unfused route, forced by options that turn the
// decode kernel off at M <= 16) and against cuBLAS fp16 doing the same (two GEMMs + the pass).
// Checked first: both Marlin routes against cuBLAS on W_hat, rel <= kCheckRelFro. Rows: kernel
// swiglu_fused (the runtime's route; "unfused" above 16 rows), swiglu_unfused, swiglu_cublas;
// speedup_vs_cublas as for the layers.
int bench_swiglu(const Options& opt, Timer& timer, cudaStream_t stream, uint64_t seed, std::vector<Record>& records) {
  const int max_m = *std::max_element(opt.ms.begin(), opt.ms.end());
  std::printf("\nSwiGLU pair: silu(A W_gate) * (A W_up), asymmetric, biases; fused = marlin_swiglu_asymmetric as the "
              "runtime runs it\n%-4s %-12s %5s %4s | %9s | %9s %7s | %9s | %8s %8s\n",
              "set", "KxF", "M", "g", "fused us", "unfused", "x", "cuBLAS us", "x fused", "GB/s");
  for (const MlpShape& S : kMlpShapes) {
    if (std::find(opt.sets.begin(), opt.sets.end(), S.set) == opt.sets.end()) continue;
    for (int g : opt.gs) {
      const int gsz = int(tl::group_size_from_marlin(S.K, g)), G = S.K / gsz;
      DeviceScope mem;
      const BenchWeight wg = make_bench_weight(mem, S.K, S.F, gsz, &seed), wu = make_bench_weight(mem, S.K, S.F, gsz, &seed);
      const size_t mf = size_t(max_m) * S.F;
      __half *A = dalloc<__half>(mem, size_t(max_m) * S.K), *C = dalloc<__half>(mem, mf),
             *scratch = dalloc<__half>(mem, mf), *C_ref = dalloc<__half>(mem, mf), *up_ref = dalloc<__half>(mem, mf);
      float *bias_g = dalloc<float>(mem, S.F), *bias_u = dalloc<float>(mem, S.F);
      std::vector<float> bias_host(size_t(2) * S.F);
      for (size_t i = 0; i < bias_host.size(); ++i) bias_host[i] = 0.05f * float(int((i * 2654435761u) % 41) - 20) / 20;
      CHECK_CUDA(cudaMemcpy(bias_g, bias_host.data(), S.F * 4, cudaMemcpyHostToDevice));
      CHECK_CUDA(cudaMemcpy(bias_u, bias_host.data() + S.F, S.F * 4, cudaMemcpyHostToDevice));
      int* work = dalloc<int>(mem, tl::cuda::marlin_workspace_ints(2 * S.F));
      CHECK_CUDA(cudaMemset(work, 0, tl::cuda::marlin_workspace_ints(2 * S.F) * sizeof(int)));
      bench::fill_uniform<<<1024, 256>>>(A, size_t(max_m) * S.K, ++seed, -1.f, 1.f);
      CHECK_CUDA(cudaGetLastError());
      CHECK_CUDA(cudaDeviceSynchronize());
      const tl::cuda::MarlinOperands og{wg.B, wg.s_perm, wg.delta}, ou{wu.B, wu.s_perm, wu.delta};
      const tl::cuda::KernelOptions rt = tl::kernel_options_from_env();
      auto fused = [&](int M) {
        return tl::cuda::marlin_swiglu_asymmetric(A, og, ou, bias_g, bias_u, C, scratch, work, M, S.F, S.K, gsz, stream, rt);
      };
      // The unfused sequence exactly as the launcher's fallback runs it, on the runtime's kernels.
      auto unfused = [&](int M) {
        int rc = tl::cuda::marlin_mm_asymmetric(A, wg.B, wg.s_perm, wg.delta, C, work, M, S.F, S.K, gsz, stream, rt);
        if (!rc) rc = tl::cuda::marlin_mm_asymmetric(A, wu.B, wu.s_perm, wu.delta, scratch, work, M, S.F, S.K, gsz, stream, rt);
        return rc ? rc : tl::cuda::swiglu_bias_rows(C, scratch, bias_g, bias_u, M, S.F, stream);
      };
      auto cublas = [&](int M) {
        int rc = tl::cuda::detail::cublas_fp16_gemm(A, wg.w_hat, C_ref, M, S.F, S.K, stream);
        if (!rc) rc = tl::cuda::detail::cublas_fp16_gemm(A, wu.w_hat, up_ref, M, S.F, S.K, stream);
        return rc ? rc : tl::cuda::swiglu_bias_rows(C_ref, up_ref, bias_g, bias_u, M, S.F, stream);
      };
      for (int M : {1, 5, 16, 33}) {
        if (M > max_m) continue;
        for (int which = 0; which < 2; ++which) {
          CHECK_CUDA(cudaMemsetAsync(C, 0xff, size_t(M) * S.F * 2, stream));
          CHECK_RC(which == 0 ? fused(M) : unfused(M));
          CHECK_RC(cublas(M));
          CHECK_CUDA(cudaStreamSynchronize(stream));
          long long bad = 0;
          const double r = rel_fro(C, C_ref, size_t(M) * S.F, &bad);
          if (bad || !(r <= kCheckRelFro)) {
            std::fprintf(stderr, "bench_kernels: CHECK FAILED swiglu %s %s K=%d F=%d M=%d g=%d: rel %.3g, %lld non-finite\n",
                         which == 0 ? "fused" : "unfused", S.set, S.K, S.F, M, g, r, bad);
            return 1;
          }
        }
      }
      for (int M : opt.ms) {
        const std::vector<double> us = timer.medians_us({[&] { return fused(M); }, [&] { return unfused(M); },
                                                         [&] { return cublas(M); }});
        const double flop = 4.0 * M * double(S.F) * S.K, bytes = 2 * (double(S.K) * S.F / 2 + 4.0 * G * S.F);
        const char* route = tl::cuda::marlin_swiglu_route(M, S.F, S.K, gsz, rt);
        const char* names[3] = {"swiglu_fused", "swiglu_unfused", "swiglu_cublas"};
        for (int k = 0; k < 3; ++k)
          records.push_back({S.set, "swiglu", names[k], S.K, S.F, M, g, us[size_t(k)], flop / us[size_t(k)] * 1e-6,
                             bytes / us[size_t(k)] * 1e-3, us[2] / us[size_t(k)], k == 0 ? route : names[k], ""});
        char kxf[24];
        std::snprintf(kxf, sizeof kxf, "%dx%d", S.K, S.F);
        std::printf("%-4s %-12s %5d %4d | %9.1f | %9.1f %7.2f | %9.1f | %8.2f %8.0f  %s\n", S.set, kxf, M, g, us[0],
                    us[1], us[1] / us[0], us[2], us[2] / us[0], bytes / us[0] * 1e-3, route);
        std::fflush(stdout);
      }
    }
  }
  std::printf("\nSwiGLU pair, unfused time / fused time (geometric mean over M <= 16):\n");
  for (const MlpShape& S : kMlpShapes)
    for (int g : opt.gs) {
      std::map<int, std::map<std::string, double>> t;
      for (const Record& r : records)
        if (r.layer == "swiglu" && r.set == S.set && r.g == g && r.M <= 16) t[r.M][r.kernel] = r.us;
      std::vector<double> ratio;
      double worst = INFINITY;
      for (const auto& [M, k] : t) {
        ratio.push_back(k.at("swiglu_unfused") / k.at("swiglu_fused"));
        worst = std::min(worst, ratio.back());
      }
      if (!ratio.empty())
        std::printf("  %-4s g=%4d: %.2fx (lowest %.2fx), %zu points\n", S.set, g, geomean(ratio), worst, ratio.size());
    }
  return 0;
}

}  // namespace

int run_bench(int argc, char** argv) {
  const Options opt = parse(argc, argv);
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::printf("bench_kernels: skipped: no CUDA device\n");
    return 77;
  }
  cudaDeviceProp prop{};
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  if (prop.major < 8) {
    std::printf("bench_kernels: skipped: %s is sm_%d%d, below sm_80\n", prop.name, prop.major, prop.minor);
    return 77;
  }
  char date[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", std::gmtime(&now));
  std::printf("bench_kernels: %s, sm_%d%d, %d SMs, L2 %d MB, %s\n", prop.name, prop.major, prop.minor,
              prop.multiProcessorCount, prop.l2CacheSize >> 20, date);
  // What a runtime runs: the environment's options and the crossover table it names, if any.
  tl::cuda::KernelOptions runtime_options;
  try {
    std::string note;
    runtime_options = tl::runtime_options_from_env(&note);
    if (!note.empty()) std::printf("bench_kernels: runtime row: %s\n", note.c_str());
  } catch (const tl::Error& e) {
    std::fprintf(stderr, "bench_kernels: %s\n", e.what());
    return 2;
  }

  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreate(&stream));
  Timer timer{stream, nullptr, size_t(2) * prop.l2CacheSize, nullptr, nullptr, opt.min_reps, opt.max_reps};
  DeviceScope run_memory;
  timer.flush = dalloc<char>(run_memory, timer.flush_bytes);
  CHECK_CUDA(cudaMemset(timer.flush, 1, timer.flush_bytes));
  CHECK_CUDA(cudaEventCreate(&timer.start));
  CHECK_CUDA(cudaEventCreate(&timer.stop));
  const int max_m = *std::max_element(opt.ms.begin(), opt.ms.end());

  std::vector<Record> records;
  uint64_t seed = uint64_t(now);
  std::printf("\n%-4s %-8s %-12s %5s %4s | %9s | %9s %6s | %9s %6s | %9s %6s | %9s %6s | %9s %6s | %8s | %9s %6s | %7s %7s | %s\n",
              "set", "layer", "KxN", "M", "g", "cuBLAS us", "marlin us", "x", "asym us", "x", "dequant us", "x",
              "hopper us", "x", "hop-as us", "x", "pair us", "native us", "x", "TFLOP/s", "GB/s", "decode grid");

  const bool swiglu = std::find(opt.layers.begin(), opt.layers.end(), "swiglu") != opt.layers.end();
  for (const Layer& L : kLayers) {
    if (std::find(opt.sets.begin(), opt.sets.end(), L.set) == opt.sets.end()) continue;
    if (std::find(opt.layers.begin(), opt.layers.end(), L.name) == opt.layers.end()) continue;
    const std::string key = std::string(L.set) + "/" + L.name;
    for (int g : opt.gs) {
      const int gsz = int(tl::group_size_from_marlin(L.K, g)), G = L.K / gsz;  // g: Marlin's form, -1 per column
      const size_t kn = size_t(L.K) * L.N, gn = size_t(G) * L.N;
      // ---- weights, generated on the GPU ----
      DeviceScope mem;  // this layer's buffers
      const BenchWeight bw = make_bench_weight(mem, L.K, L.N, gsz, &seed);
      const int32_t* Bi = bw.B;
      const __half *scale = bw.scale, *s_perm = bw.s_perm, *zero = bw.zero, *delta = bw.delta, *w_hat = bw.w_hat,
                   *w_marlin = bw.w_marlin;
      const uint8_t* q_tl = bw.q_tl;
      __half *A = dalloc<__half>(mem, size_t(max_m) * L.K), *C = dalloc<__half>(mem, size_t(max_m) * L.N),
             *C_ref = dalloc<__half>(mem, size_t(max_m) * L.N);
      float* a_sum = dalloc<float>(mem, size_t(max_m) * G);
      int* workspace = dalloc<int>(mem, tl::cuda::marlin_workspace_ints(L.N));
      CHECK_CUDA(cudaMemset(workspace, 0, tl::cuda::marlin_workspace_ints(L.N) * sizeof(int)));
      bench::fill_uniform<<<1024, 256>>>(A, size_t(max_m) * L.K, ++seed, -1.f, 1.f);
      CHECK_CUDA(cudaGetLastError());
      CHECK_CUDA(cudaDeviceSynchronize());

      auto marlin = [&](int M) {
        return tl::cuda::marlin_int4_tc_gemm(A, Bi, C, s_perm, workspace, M, L.N, L.K, gsz, stream);
      };
      auto asym = [&](int M) {
        return tl::cuda::marlin_mm_asymmetric(A, Bi, s_perm, delta, C, workspace, M, L.N, L.K, gsz, stream);
      };
      // The prefill floor forced at every M > 16 (the runtime takes it from kDefaultDequantMinM).
      tl::cuda::KernelOptions dq_opt;
      dq_opt.dequant_min_m = 17;
      auto asym_dq = [&](int M) {
        return tl::cuda::marlin_mm_asymmetric(A, Bi, s_perm, delta, C, workspace, M, L.N, L.K, gsz, stream, dq_opt);
      };
      // The Hopper kernel (sm_90) at every M > 16, and what the runtime's options run (the
      // dispatcher: decode kernel, Hopper kernel or the floor, by M and GPU).
      tl::cuda::KernelOptions hop_opt;
      hop_opt.hopper_kernel = true;
      const tl::cuda::KernelOptions rt_opt = runtime_options;
      auto marlin_hop = [&](int M) {
        return tl::cuda::marlin_int4_tc_gemm(A, Bi, C, s_perm, workspace, M, L.N, L.K, gsz, stream, hop_opt);
      };
      auto asym_hop = [&](int M) {
        return tl::cuda::marlin_mm_asymmetric(A, Bi, s_perm, delta, C, workspace, M, L.N, L.K, gsz, stream, hop_opt);
      };
      auto asym_rt = [&](int M) {
        return tl::cuda::marlin_mm_asymmetric(A, Bi, s_perm, delta, C, workspace, M, L.N, L.K, gsz, stream, rt_opt);
      };
      // What the launcher plans for these options (kernel "?" where it would not run).
      auto plan_of = [&](int M, const tl::cuda::KernelOptions& o) {
        tl::cuda::GemmPlan plan;
        if (tl::cuda::marlin_plan(M, L.N, L.K, gsz, true, o, &plan) != 0) plan.kernel = "?";
        return plan;
      };
      // The Hopper kernel's schedule in a plan ("" where another path runs): tile rows, then
      // split k (cluster of n), stream-K or whole tiles, then the CTAs.
      auto schedule_of = [](const tl::cuda::GemmPlan& plan) {
        if (plan.kernel != "hopper") return std::string();
        char b[64];
        if (plan.stream_k)
          std::snprintf(b, sizeof b, "%d rows, stream-K in row groups of %d, %d CTAs", plan.rows_per_block,
                        plan.stream_k_group, plan.blocks);
        else if (plan.k_splits > 1)
          std::snprintf(b, sizeof b, "%d rows, split %d, %d CTAs", plan.rows_per_block, plan.k_splits, plan.blocks);
        else
          std::snprintf(b, sizeof b, "%d rows, whole tiles, %d CTAs", plan.rows_per_block, plan.blocks);
        return std::string(b);
      };
      auto pair = [&](int M) {
        int rc = tl::cuda::a_group_sum(A, a_sum, M, L.K, gsz, stream);
        return rc ? rc : tl::cuda::correction_accum(C, a_sum, delta, M, L.N, L.K, gsz, stream);
      };
      auto native = [&](int M) {
        return tl::cuda::int4_gemm(A, q_tl, scale, zero, C, M, L.N, L.K, gsz, stream);
      };
      tl::cuda::KernelOptions native_floor_opt;  // the native path's floor at every M
      native_floor_opt.native_floor_min_m = 1;
      auto native_floor = [&](int M) {
        return tl::cuda::int4_gemm(A, q_tl, scale, zero, C, M, L.N, L.K, gsz, stream, native_floor_opt);
      };
      auto cublas = [&](int M, const __half* W, __half* out) {
        return tl::cuda::detail::cublas_fp16_gemm(A, W, out, M, L.N, L.K, stream);
      };

      // ---- correctness against cuBLAS on the same weights, before any timing ----
      for (int M : {1, 16, 33, 100, 256}) {
        if (M > max_m) continue;
        const size_t mn = size_t(M) * L.N;
        struct Check {
          const char* what;
          std::function<int()> run;
          const __half* w_ref;
        };
        const Check checks[] = {
            {"marlin", [&] { return marlin(M); }, w_marlin},
            {"marlin_mm_asymmetric", [&] { return asym(M); }, w_hat},
            {"marlin + correction pair", [&] { int rc = marlin(M); return rc ? rc : pair(M); }, w_hat},
            {"int4_gemm", [&] { return native(M); }, w_hat},
            {"int4_gemm (dequant + cuBLAS)", [&] { return native_floor(M); }, w_hat},
            {"marlin_mm_asymmetric (dequant + cuBLAS)", [&] { return asym_dq(M); }, w_hat},
            {"marlin (hopper)", [&] { return marlin_hop(M); }, w_marlin},
            {"marlin_mm_asymmetric (hopper)", [&] { return asym_hop(M); }, w_hat},
            {"marlin_mm_asymmetric (runtime dispatch)", [&] { return asym_rt(M); }, w_hat},
        };
        for (const Check& ck : checks) {
          CHECK_CUDA(cudaMemsetAsync(C, 0xff, mn * 2, stream));
          CHECK_RC(ck.run());
          CHECK_RC(cublas(M, ck.w_ref, C_ref));
          CHECK_CUDA(cudaStreamSynchronize(stream));
          long long bad = 0;
          const double r = rel_fro(C, C_ref, mn, &bad);
          if (bad || !(r <= kCheckRelFro)) {
            std::fprintf(stderr, "bench_kernels: CHECK FAILED %s %s K=%d N=%d M=%d g=%d: rel %.3g, %lld non-finite\n",
                         ck.what, key.c_str(), L.K, L.N, M, g, r, bad);
            return 1;
          }
        }
      }

      // ---- timing ----
      for (int M : opt.ms) {
        // The point's kernels, timed together in rounds (Timer::medians_us); NaN: not run here.
        double t_cublas = NAN, t_marlin = NAN, t_asym = NAN, t_pair = NAN, t_native = NAN, t_dq = NAN, t_hop = NAN,
               t_asym_hop = NAN, t_rt = NAN, t_native_dq = NAN;
        std::vector<std::function<int()>> runs;
        std::vector<double*> into;
        auto time = [&](double* t, std::function<int()> run) {
          into.push_back(t);
          runs.push_back(std::move(run));
        };
        const tl::cuda::GemmPlan default_plan = plan_of(M, {}), hop_plan = plan_of(M, hop_opt),
                                 rt_plan = plan_of(M, rt_opt);
        const bool hop = M > 16 && hop_plan.kernel == "hopper";
        time(&t_cublas, [&] { return cublas(M, w_hat, C_ref); });
        time(&t_marlin, [&] { return marlin(M); });
        time(&t_asym, [&] { return asym(M); });
        time(&t_pair, [&] { return pair(M); });
        if (M <= opt.native_max_m) time(&t_native, [&] { return native(M); });
        time(&t_native_dq, [&] { return native_floor(M); });
        if (M > 16) time(&t_dq, [&] { return asym_dq(M); });
        if (hop) {
          time(&t_hop, [&] { return marlin_hop(M); });
          time(&t_asym_hop, [&] { return asym_hop(M); });
        }
        time(&t_rt, [&] { return asym_rt(M); });
        const std::vector<double> us = timer.medians_us(runs);
        for (size_t k = 0; k < us.size(); ++k) *into[k] = us[k];
        const double flop = 2.0 * M * double(L.N) * L.K;
        const double int4_bytes = double(kn) / 2 + 2.0 * gn;
        auto add = [&](const char* kernel, double us, double bytes, std::string path = "", std::string sched = "") {
          if (std::isnan(us)) return;
          records.push_back({L.set, L.name, kernel, L.K, L.N, M, g, us, flop / us * 1e-6, bytes / us * 1e-3,
                             t_cublas / us, path.empty() ? std::string(kernel) : path, sched});
        };
        add("cublas_fp16", t_cublas, 2.0 * kn);
        add("marlin", t_marlin, int4_bytes, std::string(default_plan.kernel));
        add("marlin_asym", t_asym, int4_bytes + 2.0 * gn, std::string(default_plan.kernel));
        add("marlin_asym_dequant", t_dq, int4_bytes + 2.0 * gn, "dequant");
        add("marlin_hopper", t_hop, int4_bytes, "hopper", schedule_of(hop_plan));
        add("marlin_asym_hopper", t_asym_hop, int4_bytes + 2.0 * gn, "hopper", schedule_of(hop_plan));
        add("marlin_asym_runtime", t_rt, int4_bytes + 2.0 * gn, std::string(rt_plan.kernel), schedule_of(rt_plan));
        add("correction_pair", t_pair, 2.0 * gn);
        add("int4_gemm", t_native, double(kn) / 2 + 4.0 * gn);
        add("int4_gemm_dequant", t_native_dq, double(kn) / 2 + 4.0 * gn, "native-dequant");
        char kxn[24];
        std::snprintf(kxn, sizeof kxn, "%dx%d", L.K, L.N);
        // The decode kernel's grid: blocks x warps : units per warp stripe, cluster size or
        // flat (blocks combine through global slots).
        char grid[48] = "";
        tl::cuda::detail::SmallMGrid sg{};
        if (M <= tl::cuda::detail::kSmallMMaxRows &&
            tl::cuda::detail::marlin_small_m_grid(M, L.N, L.K, gsz, false, tl::cuda::KernelOptions{}, &sg) == 0)
          std::snprintf(grid, sizeof grid, "%dx%d:%d %s%.0d", sg.blocks, sg.warps_per_block,
                        sg.per_warp, sg.cluster ? "cluster " : "flat", sg.cluster);
        const double t_best = hop ? t_hop : t_marlin;  // the TFLOP/s and GB/s of the faster symmetric kernel
        std::printf("%-4s %-8s %-12s %5d %4d | %9.1f | %9.1f %6.2f | %9.1f %6.2f | %9.1f %6.2f | %9.1f %6.2f | %9.1f %6.2f | %8.1f | %9.1f %6.2f | %7.1f %7.0f | %s\n",
                    L.set, L.name, kxn, M, g, t_cublas, t_marlin, t_cublas / t_marlin, t_asym, t_cublas / t_asym,
                    t_dq, t_cublas / t_dq, t_hop, t_cublas / t_hop, t_asym_hop, t_cublas / t_asym_hop, t_pair, t_native,
                    t_cublas / t_native, flop / t_best * 1e-6, int4_bytes / t_best * 1e-3, grid);
        std::fflush(stdout);
      }
    }
  }

  if (swiglu)
    if (int rc = bench_swiglu(opt, timer, stream, seed + 1000, records)) return rc;
  if (std::find(opt.layers.begin(), opt.layers.end(), "graph") != opt.layers.end())
    if (int rc = bench_graph(opt, timer, stream, seed + 2000, records)) return rc;

  // ---- summary: geometric means per set and group size ----
  struct Summary {
    std::string set;
    int g;
    double marlin_small, asym_small, wrapper_overhead, wrapper_overhead_max;
    int points;
  };
  std::vector<Summary> summaries;
  std::printf("\nsummary (geometric means over the set's layers at M <= 16):\n");
  for (const std::string& set : opt.sets)
    for (int g : opt.gs) {
      std::vector<double> sm, sa, ov;
      double ov_max = 0;
      std::map<std::pair<std::string, int>, double> marlin_t;
      for (const Record& r : records)
        if (r.set == set && r.g == g && r.M <= 16 && r.kernel == "marlin") marlin_t[{r.layer, r.M}] = r.us;
      for (const Record& r : records) {
        if (r.set != set || r.g != g || r.M > 16) continue;
        if (r.kernel == "marlin") sm.push_back(r.speedup);
        if (r.kernel == "marlin_asym") {
          sa.push_back(r.speedup);
          const double o = r.us / marlin_t[{r.layer, r.M}];
          ov.push_back(o);
          ov_max = std::max(ov_max, o - 1);
        }
      }
      if (sm.empty()) continue;
      summaries.push_back({set, g, geomean(sm), geomean(sa), geomean(ov) - 1, ov_max, int(sm.size())});
      std::printf("  %-4s g=%4d: marlin %.2fx cuBLAS, asymmetric wrapper %.2fx; wrapper overhead %+.1f %% (max %+.1f %%), %d points\n",
                  set.c_str(), g, geomean(sm), geomean(sa), 100 * (geomean(ov) - 1), 100 * ov_max, int(sm.size()));
    }
  // The issue's measure: per set, g and M, sum of cuBLAS time over the set's layers / sum of the
  // kernel's, for the tiled/decode wrapper, the dequant floor, the Hopper kernel (symmetric and
  // asymmetric) and what the runtime's dispatcher runs.
  std::printf("\nsum over layers, cuBLAS time / kernel time (wrapper and floor asymmetric; hopper symmetric, then "
              "asymmetric and its overhead; runtime dispatch: kernel_options_from_env() (apps/kernel_env.h), with the paths it took):\n");
  for (const std::string& set : opt.sets)
    for (int g : opt.gs)
      for (int M : opt.ms) {
        double cub = 0, asym = 0;
        std::map<std::string, double> sums;  // kernel -> sum over the layers that have it
        std::map<std::string, int> layers;
        std::string paths;
        for (const Record& r : records) {
          if (r.set != set || r.g != g || r.M != M) continue;
          sums[r.kernel] += r.us;
          layers[r.kernel]++;
          if (r.kernel == "marlin_asym") {
            cub += r.us * r.speedup;
            asym += r.us;
          }
          if (r.kernel == "marlin_asym_runtime" && paths.find(r.path) == std::string::npos)
            paths += (paths.empty() ? "" : "+") + r.path;
        }
        if (asym <= 0) continue;
        const int n = layers["marlin_asym"];
        auto ratio = [&](const char* kernel) {  // "-" unless every layer has the kernel
          char buf[16] = "-";
          if (layers[kernel] == n) std::snprintf(buf, sizeof buf, "%.2fx", cub / sums[kernel]);
          return std::string(buf);
        };
        char overhead[24] = "-";
        if (layers["marlin_hopper"] == n && layers["marlin_asym_hopper"] == n)
          std::snprintf(overhead, sizeof overhead, "%+.1f %%", 100 * (sums["marlin_asym_hopper"] / sums["marlin_hopper"] - 1));
        std::printf("  %-4s g=%4d M=%5d: wrapper %.2fx, dequant floor %s, hopper %s (asym %s, %s vs sym), "
                    "runtime dispatch %s [%s]\n",
                    set.c_str(), g, M, cub / asym, ratio("marlin_asym_dequant").c_str(), ratio("marlin_hopper").c_str(),
                    ratio("marlin_asym_hopper").c_str(), overhead, ratio("marlin_asym_runtime").c_str(), paths.c_str());
      }
  // Native vs Marlin per M (the dispatcher's floor): geometric mean of native / asym time.
  std::printf("\nnative int4_gemm time / marlin_mm_asymmetric time (geometric mean over layers and g):\n");
  for (int M : opt.ms) {
    std::vector<double> ratio;
    std::map<std::tuple<std::string, std::string, int>, double> asym_t;
    for (const Record& r : records)
      if (r.M == M && r.kernel == "marlin_asym") asym_t[{r.set, r.layer, r.g}] = r.us;
    for (const Record& r : records)
      if (r.M == M && r.kernel == "int4_gemm") ratio.push_back(r.us / asym_t[{r.set, r.layer, r.g}]);
    if (!ratio.empty()) std::printf("  M=%5d: %.2f\n", M, geomean(ratio));
  }
  // The native path's floor per M (kDefaultNativeFloorMinM): the kernel's time / the floor's, and
  // the floor against cuBLAS fp16 (geometric means over layers and g).
  std::printf("\nnative int4_gemm time / its dequantize + cuBLAS floor's, and cuBLAS fp16 time / the floor's:\n");
  for (int M : opt.ms) {
    std::map<std::tuple<std::string, std::string, int>, std::map<std::string, double>> t;
    for (const Record& r : records)
      if (r.M == M) t[{r.set, r.layer, r.g}][r.kernel] = r.us;
    std::vector<double> kernel_vs_floor, cublas_vs_floor;
    for (const auto& [key, k] : t) {
      if (!k.count("int4_gemm_dequant")) continue;
      if (k.count("int4_gemm")) kernel_vs_floor.push_back(k.at("int4_gemm") / k.at("int4_gemm_dequant"));
      cublas_vs_floor.push_back(k.at("cublas_fp16") / k.at("int4_gemm_dequant"));
    }
    if (cublas_vs_floor.empty()) continue;
    char kernel_ratio[16] = "-";
    if (!kernel_vs_floor.empty()) std::snprintf(kernel_ratio, sizeof kernel_ratio, "%.2f", geomean(kernel_vs_floor));
    std::printf("  M=%5d: kernel / floor %s, cuBLAS / floor %.2f\n", M, kernel_ratio, geomean(cublas_vs_floor));
  }

  if (!opt.tune.empty()) {
    // Per layer shape: the asymmetric Hopper kernel, tiled kernel and floor at every M > 16 of
    // --m, in increasing M; the crossovers as core/marlin_crossovers.h defines them.
    struct Series {
      std::vector<int> ms;
      std::vector<double> hopper, tiled, floor;
    };
    std::map<std::tuple<int, int, int>, Series> series;  // (K, N, effective group size)
    std::map<std::tuple<int, int, int, int>, std::map<std::string, double>> at;  // + M -> kernel -> us
    for (const Record& r : records)
      if (r.M > 16) at[{r.K, r.N, int(tl::group_size_from_marlin(r.K, r.g)), r.M}][r.kernel] = r.us;
    for (const auto& [key, t] : at) {  // M increasing within a shape (std::map order)
      auto [K, N, gs, M] = key;
      if (!t.count("marlin_asym_dequant") || !t.count("marlin_asym")) continue;
      Series& s = series[{K, N, gs}];
      s.ms.push_back(M);
      s.floor.push_back(t.at("marlin_asym_dequant"));
      s.tiled.push_back(t.at("marlin_asym"));
      s.hopper.push_back(t.count("marlin_asym_hopper") ? t.at("marlin_asym_hopper") : INFINITY);
    }
    tl::MarlinCrossovers table;
    table.device = tl::cuda::cuda_device_label(prop);
    for (const auto& [key, s] : series) {
      tl::MarlinCrossover c;
      std::tie(c.K, c.N, c.group_size) = key;
      const bool hopper = std::isfinite(s.hopper.back());
      c.hopper_max_m = hopper ? tl::measured_crossover(s.ms, s.hopper, s.floor) : 0;
      c.dequant_min_m = tl::measured_crossover(s.ms, s.tiled, s.floor);
      // The route hands the Hopper kernel over to the floor only where the floor is on.
      if (c.hopper_max_m > 0 && (c.dequant_min_m == 0 || c.dequant_min_m > c.hopper_max_m))
        c.dequant_min_m = c.hopper_max_m;
      table.shapes.push_back(c);
      std::printf("tune: K=%d N=%d g=%d: hopper_max_m %d, dequant_min_m %d (M = %d..%d)\n", c.K, c.N,
                  c.group_size, c.hopper_max_m, c.dequant_min_m, s.ms.front(), s.ms.back());
    }
    try {
      tl::write_crossovers(opt.tune, table);
    } catch (const tl::Error& e) {
      std::fprintf(stderr, "bench_kernels: %s\n", e.what());
      return 2;
    }
    std::printf("wrote %s (%zu shapes)\n", opt.tune.c_str(), table.shapes.size());
  }

  FILE* f = std::fopen(opt.json.c_str(), "w");
  if (!f) {
    std::fprintf(stderr, "bench_kernels: %s: cannot write\n", opt.json.c_str());
    return 2;
  }
  std::fprintf(f, "{\n  \"gpu\": \"%s\", \"sm\": %d, \"sms\": %d, \"date\": \"%s\",\n  \"records\": [\n", prop.name,
               prop.major * 10 + prop.minor, prop.multiProcessorCount, date);
  for (size_t i = 0; i < records.size(); ++i) {
    const Record& r = records[i];
    std::fprintf(f,
                 "    {\"set\": \"%s\", \"layer\": \"%s\", \"K\": %d, \"N\": %d, \"M\": %d, \"g\": %d, \"kernel\": \"%s\", "
                 "\"path\": \"%s\", \"schedule\": \"%s\", \"us\": %.3f, \"tflops\": %.3f, \"weight_gbs\": %.1f, "
                 "\"speedup_vs_cublas\": %.4f}%s\n",
                 r.set.c_str(), r.layer.c_str(), r.K, r.N, r.M, r.g, r.kernel.c_str(), r.path.c_str(),
                 r.schedule.c_str(), r.us, r.tflops, r.gbs, r.speedup, i + 1 < records.size() ? "," : "");
  }
  std::fprintf(f, "  ],\n  \"summary_m_le_16\": [\n");
  for (size_t i = 0; i < summaries.size(); ++i) {
    const Summary& s = summaries[i];
    std::fprintf(f,
                 "    {\"set\": \"%s\", \"g\": %d, \"marlin_speedup\": %.4f, \"asym_speedup\": %.4f, "
                 "\"wrapper_overhead\": %.4f, \"wrapper_overhead_max\": %.4f, \"points\": %d}%s\n",
                 s.set.c_str(), s.g, s.marlin_small, s.asym_small, s.wrapper_overhead, s.wrapper_overhead_max,
                 s.points, i + 1 < summaries.size() ? "," : "");
  }
  std::fprintf(f, "  ]\n}\n");
  std::fclose(f);
  std::printf("\nwrote %s\n", opt.json.c_str());
  return 0;
}

int main(int argc, char** argv) {
  try {
    return run_bench(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_kernels: %s\n", e.what());
    return 2;
  }
}
