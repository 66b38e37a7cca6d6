// GPU test runner: exits 77 (skipped) with the reason when there is no CUDA device or the
// device is below sm_80 (the kernels' floor), so CTest reports "skipped" on CPU-only machines.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>

#include <cuda_runtime_api.h>

#include "core/exit_codes.h"
#include "gpu_test_util.h"

int main(int argc, char** argv) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    std::printf("test_cuda: skipped: no CUDA device (%s)\n",
                err != cudaSuccess ? cudaGetErrorString(err) : "0 devices");
    return tl::exit_code::kSkipped;
  }
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess || prop.major < 8) {
    std::printf("test_cuda: skipped: device 0 (%s) is sm_%d%d, below sm_80\n", prop.name,
                prop.major, prop.minor);
    return tl::exit_code::kSkipped;
  }
  std::printf("test_cuda: %s, sm_%d%d, %d SMs%s\n", prop.name, prop.major, prop.minor,
              prop.multiProcessorCount, tl::test::quick_mode() ? " (quick subset)" : "");
  tl::test::test_seed();  // print the seed first
  doctest::Context ctx(argc, argv);
  return ctx.run();
}
