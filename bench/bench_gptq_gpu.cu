// GPU GPTQ of one weight (libgpu/gptq_gpu.h) on the linear shapes of Llama-2-7B and -70B:
// the inverse-Hessian factor by each method GpuGptq takes (kReversed: potrf of the reversed
// matrix + trtri, the default; kPotri: upstream's potrf -> potri -> potrf) and the sweep, in
// seconds (CUDA-synchronized wall time of each phase, median of --reps runs).
//
// Before timing, each shape is checked: both factors must give GPTQ losses within 1 % of each
// other and below RTN's (the two factors are the same matrix up to fp32 summation order; a code
// on a near-tie can flip, and the error feedback then carries the difference down its column,
// so the share of differing codes is reported, not gated).
//
// Hessians: H = X^T X / n of n = K + 1024 random rows (per-channel scales with outliers, as
// bench_gptq), generated on the GPU; weights N(0, 0.02). Group 128, block 128, act-order off.
//
// Usage: bench_gptq_gpu [--sets 7b,70b] [--reps N] [--json FILE]. Exit 77 without a GPU.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <nlohmann/json.hpp>

#include "bench/bench_data.cuh"
#include "cuda/device_buffer.h"
#include "libgpu/gptq_gpu.h"

namespace {

using tl::cuda::DeviceBuffer;
using Factor = tl::gpu::GpuGptq::Factor;

// x[i] = scale(column) * a standard normal (Box-Muller on two of bench_data.cuh's uniforms).
__global__ void random_rows_kernel(float* x, int64_t rows, int64_t K, uint64_t seed) {
  const int64_t n = rows * K;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float u1 = bench::uniform(seed, 2 * uint64_t(i), 0x1p-24f, 1.0f), u2 = bench::uniform(seed, 2 * uint64_t(i) + 1, 0.0f, 1.0f);
    const int64_t k = i % K;
    const float s = (k % 97 == 0) ? 10.0f : 0.5f + float(k % 13) / 13.0f;
    x[i] = s * sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2);
  }
}

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "bench_gptq_gpu: %s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

// H [K, K] = X^T X / rows on the device (X [rows, K] row-major = column-major X^T [K, rows]).
void make_hessian(cublasHandle_t blas, int64_t K, uint64_t seed, DeviceBuffer<float>& H) {
  const int64_t rows = K + 1024;
  DeviceBuffer<float> X(size_t(rows * K));
  random_rows_kernel<<<4096, 256>>>(X.get(), rows, K, seed);
  check(cudaGetLastError(), "random_rows_kernel");
  H.resize(size_t(K * K));
  const float alpha = 1.0f / float(rows), beta = 0.0f;
  if (cublasSgemm(blas, CUBLAS_OP_N, CUBLAS_OP_T, int(K), int(K), int(rows), &alpha, X.get(), int(K), X.get(), int(K),
                  &beta, H.get(), int(K)) != CUBLAS_STATUS_SUCCESS) {
    std::fprintf(stderr, "bench_gptq_gpu: cublasSgemm failed\n");
    std::exit(1);
  }
  check(cudaDeviceSynchronize(), "Hessian");
}

struct Run {
  tl::GptqResult r;
  double cholesky = 0, sweep = 0;
};

Run run_once(tl::gpu::GpuGptq& g, const std::vector<float>& W, int64_t K, int64_t N, const DeviceBuffer<float>& H,
             DeviceBuffer<float>& Hw, bool rtn) {
  check(cudaMemcpy(Hw.get(), H.get(), H.bytes(), cudaMemcpyDeviceToDevice), "H copy");  // quantize modifies H
  tl::GptqOptions o;
  o.group_size = 128;
  o.want_rtn_loss = rtn;
  tl::gpu::GptqGpuTimes t;
  Run run;
  run.r = g.quantize(W.data(), K, N, Hw.get(), o, nullptr, &t);
  run.cholesky = t.cholesky;
  run.sweep = t.sweep;
  return run;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::string sets = "7b,70b", json_path;
  int reps = 3;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--sets" && i + 1 < argc) sets = argv[++i];
    else if (a == "--reps" && i + 1 < argc) reps = std::max(1, std::atoi(argv[++i]));
    else if (a == "--json" && i + 1 < argc) json_path = argv[++i];
    else {
      std::fprintf(stderr, "usage: bench_gptq_gpu [--sets 7b,70b] [--reps N] [--json FILE]\n");
      return 2;
    }
  }
  const std::string why = tl::cuda::cuda_device_unavailable_reason();
  if (!why.empty()) {
    std::printf("bench_gptq_gpu: skipped (%s)\n", why.c_str());
    return 77;
  }
  cublasHandle_t blas;
  if (cublasCreate(&blas) != CUBLAS_STATUS_SUCCESS) return 1;
  cublasSetMathMode(blas, CUBLAS_DEFAULT_MATH);
  tl::gpu::GpuGptq g;
  nlohmann::json out = nlohmann::json::array();
  int bad = 0;
  std::printf("%-4s %-5s %6s %6s | %-22s | %-22s | %s\n", "set", "layer", "K", "N", "reversed+trtri: chol / sweep s",
              "potri: chol / sweep s", "check");
  for (const bench::Layer& L : bench::kLayers) {
    if (("," + sets + ",").find("," + std::string(L.set) + ",") == std::string::npos) continue;
    // gate_up is two weights for GPTQ (gate, up: the same shape); one of them is timed.
    const bool pair = std::string(L.name) == "gate_up";
    const char* layer = pair ? "gate" : L.name;
    const int64_t K = L.K, N = pair ? L.N / 2 : L.N;
    DeviceBuffer<float> H, Hw(size_t(K * K));
    make_hessian(blas, K, 0x5eed + uint64_t(K) * 131 + uint64_t(N), H);
    std::vector<float> W(size_t(K * N));
    std::mt19937_64 rng(uint64_t(K) * 7 + uint64_t(N));
    std::normal_distribution<float> nd(0.0f, 0.02f);
    for (float& w : W) w = nd(rng);
    // Check: both factors, then the timed runs (the first run of each is also its check).
    Run first[2];
    std::vector<double> chol[2], sweep[2];
    for (int rep = 0; rep < reps + 1; ++rep)
      for (int m = 0; m < 2; ++m) {
        g.set_factor(m == 0 ? Factor::kReversed : Factor::kPotri);
        Run r = run_once(g, W, K, N, H, Hw, rep == 0);
        if (rep == 0) first[m] = std::move(r);
        else chol[m].push_back(r.cholesky), sweep[m].push_back(r.sweep);
      }
    int64_t diff = 0;
    for (size_t i = 0; i < first[0].r.q.size(); ++i) diff += first[0].r.q[i] != first[1].r.q[i];
    const double la = first[0].r.loss, lb = first[1].r.loss, frac = double(diff) / double(first[0].r.q.size());
    const bool ok = std::fabs(la - lb) <= 0.01 * lb && la < first[0].r.rtn_loss && lb < first[1].r.rtn_loss;
    bad += !ok;
    const double c0 = median(chol[0]), s0 = median(sweep[0]), c1 = median(chol[1]), s1 = median(sweep[1]);
    std::printf("%-4s %-5s %6lld %6lld | %9.3f / %9.3f | %9.3f / %9.3f | %s (loss %.5g vs %.5g, rtn %.5g, %.2e codes differ)\n",
                L.set, layer, (long long)K, (long long)N, c0, s0, c1, s1, ok ? "ok" : "MISMATCH", la, lb,
                first[0].r.rtn_loss, frac);
    std::fflush(stdout);
    out.push_back({{"set", L.set}, {"layer", layer}, {"K", K}, {"N", N}, {"reversed_cholesky_s", c0},
                   {"reversed_sweep_s", s0}, {"potri_cholesky_s", c1}, {"potri_sweep_s", s1}, {"loss_reversed", la},
                   {"loss_potri", lb}, {"rtn_loss", first[0].r.rtn_loss}, {"codes_differ", frac}, {"ok", ok}});
  }
  cublasDestroy(blas);
  if (!json_path.empty()) {
    FILE* f = std::fopen(json_path.c_str(), "w");
    if (f) {
      std::fputs(out.dump(1).c_str(), f);
      std::fclose(f);
    }
  }
  return bad ? 1 : 0;
}
