// The main of the GPU test runners (test_cuda: cuda/; test_gpu: libgpu): exits 77 (skipped) with the reason when there is no CUDA device or the
// device is below sm_80 (the kernels' floor), so CTest reports "skipped" on CPU-only machines.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <string>

#include <cuda_runtime_api.h>

#include "core/exit_codes.h"
#include "gpu_support/gpu_test_util.h"

int main(int argc, char** argv) {
  std::string name = argv[0];
  name = name.substr(name.find_last_of('/') + 1);
  const char* runner = name.c_str();
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    std::printf("%s: skipped: no CUDA device (%s)\n", runner,
                err != cudaSuccess ? cudaGetErrorString(err) : "0 devices");
    return tl::exit_code::kSkipped;
  }
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess || prop.major < 8) {
    std::printf("%s: skipped: device 0 (%s) is sm_%d%d, below sm_80\n", runner, prop.name,
                prop.major, prop.minor);
    return tl::exit_code::kSkipped;
  }
  std::printf("%s: %s, sm_%d%d, %d SMs%s\n", runner, prop.name, prop.major, prop.minor,
              prop.multiProcessorCount, tl::test::quick_mode() ? " (quick subset)" : "");
  tl::test::test_seed();  // print the seed first
  doctest::Context ctx(argc, argv);
  return ctx.run();
}
