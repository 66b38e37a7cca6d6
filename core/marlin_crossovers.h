// Where the Marlin launchers hand a layer over from one prefill kernel to the next, measured on
// one GPU per layer shape: the table `bench_kernels --tune` writes (formats/crossover_file.h
// reads and writes it as JSON), a runtime installs in its KernelOptions (cuda/tl_kernels.h,
// use_crossovers), and the launchers' routing rule consults (cuda/marlin_gemm.h, marlin_route).
// Plain data, no CUDA and no file format here, so the route, the file and the tests share it.
#pragma once

#include <string>
#include <vector>

namespace tl {

// The two crossovers of KernelOptions for one layer shape (same meaning, same 0 = never):
//   hopper_max_m   from this M on the dequantize + cuBLAS floor runs instead of the Hopper
//                  kernel (0: the Hopper kernel at every M > 16);
//   dequant_min_m  from this M on the floor runs instead of the tiled kernel, where the Hopper
//                  kernel does not run (0: the tiled kernel at every M > 16).
struct MarlinCrossover {
  int K = 0, N = 0;
  int group_size = 0;  // effective group size (== K for per-column scales)
  int hopper_max_m = 0;
  int dequant_min_m = 0;
};

struct MarlinCrossovers {
  std::string device;  // the GPU it was measured on, as cuda_device_label spells it
  std::vector<MarlinCrossover> shapes;

  // The entry of a layer shape, or nullptr (the options' own crossovers apply).
  const MarlinCrossover* find(int K, int N, int group_size) const {
    for (const MarlinCrossover& c : shapes)
      if (c.K == K && c.N == N && c.group_size == group_size) return &c;
    return nullptr;
  }
};

// The crossover of a kernel pair from timings at increasing M (t_fast: the kernel that wins at
// small M, t_floor: the floor): the smallest measured M from which the floor is faster at
// that M and at every larger one measured; 0 when it is not faster at the largest M (the
// small-M kernel keeps every M). A single win below a loss is noise, not a crossover.
inline int measured_crossover(const std::vector<int>& ms, const std::vector<double>& t_fast,
                              const std::vector<double>& t_floor) {
  int from = 0;
  for (size_t i = ms.size(); i-- > 0;) {
    if (!(t_floor[i] < t_fast[i])) break;
    from = ms[i];
  }
  return from;
}

}  // namespace tl
