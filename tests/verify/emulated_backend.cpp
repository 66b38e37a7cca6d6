#include "verify/emulated_backend.h"

#include "core/group_size.h"

#include <cmath>
#include <algorithm>
#include <vector>

#include "core/nibbles.h"
#include "cuda/swiglu_pair.h"
#include "cuda/marlin_hopper_plan.h"
#include "formats/marlin_layout.h"

namespace tl::verify::testing {

KernelStatus EmulatedBackend::marlin_gemm(const half_bits* A, const int32_t* B, const half_bits* s,
                                          half_bits* C, int M, int N, int K, int group_size) {
  ++calls;
  const int groupsize = int(marlin_groupsize_arg(K, group_size));  // as the kernel sees it
  if (!marlin_gate(K, N, group_size).ok || K % group_size)
    return KernelStatus::failure("emulated marlin_int4_tc_gemm: rc=1 (problem shape unsupported) "
                                 "for m=" + std::to_string(M) + " n=" + std::to_string(N) +
                                 " k=" + std::to_string(K) + " groupsize=" + std::to_string(groupsize));
  const bool per_column = groupsize == -1;
  const int G = per_column ? 1 : K / groupsize;
  std::vector<uint8_t> q(size_t(K) * N);
  marlin_unpack_codes(B, K, N, q.data());
  std::vector<half_bits> sc(size_t(G) * N);
  marlin_unpermute_scales(s, G, N, per_column, sc.data());
  // Dequantized weights as the kernel's MMA sees them.
  std::vector<float> w(size_t(K) * N);
  for (int k = 0; k < K; ++k) {
    int g = per_column ? 0 : k / groupsize;
    const bool on_floor = floor_ && !hopper_ && M > 16 && M >= prefill_floor_min_m();
    if ((bug_ == EmulatedBug::kWrongGroup || (bug_ == EmulatedBug::kFloorWrongGroup && on_floor)) && G > 1 && g == G - 1)
      g = G - 2;
    for (int n = 0; n < N; ++n) {
      const float c = float(int(q[size_t(k) * N + n]) - 8);
      w[size_t(k) * N + n] = per_column ? c : round_to_half(c * half_to_float(sc[size_t(g) * N + n]));
    }
  }
  constexpr int kSlice = 512;  // split-K slice; partials pass through fp16 between slices
  std::fill(C, C + size_t(M) * N, half_bits(0x7e7e));
  const int n_end = bug_ == EmulatedBug::kUnwrittenTile ? N - 64 : N;
  std::vector<float> acc(static_cast<size_t>(N));
  for (int m = 0; m < M; ++m) {
    std::vector<float> partial(size_t(N), 0.0f);
    for (int k0 = 0; k0 < K; k0 += kSlice) {
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int k = k0; k < std::min(K, k0 + kSlice); ++k) {
        const float a = half_to_float(A[size_t(m) * K + k]);
        for (int n = 0; n < N; ++n) {
          acc[size_t(n)] += a * w[size_t(k) * N + n];
          if (bug_ == EmulatedBug::kFp16Accumulation) acc[size_t(n)] = round_to_half(acc[size_t(n)]);
        }
      }
      for (int n = 0; n < N; ++n) partial[size_t(n)] = round_to_half(partial[size_t(n)] + acc[size_t(n)]);
    }
    for (int n = 0; n < n_end; ++n) {
      float v = partial[size_t(n)];
      if (per_column) v = float(v) * half_to_float(sc[size_t(n)]);
      C[size_t(m) * N + n] = float_to_half(v);
    }
  }
  // per-column: the emulation rounds the unscaled partials to fp16 too, slightly worse than
  // upstream (which scales the fp32 accumulator); the bounds must hold either way.
  return {};
}

KernelStatus EmulatedBackend::correction(const half_bits* A, const half_bits* delta, half_bits* C,
                                         float* a_sum, int M, int N, int K, int group_size) {
  ++calls;
  const int G = group_count(K, group_size);
  for (int m = 0; m < M; ++m)
    for (int g = 0; g < G; ++g) {
      float sum = 0;
      int k1 = std::min(K, (g + 1) * group_size);
      if (bug_ == EmulatedBug::kCorrectionOffByOne) --k1;
      for (int k = g * group_size; k < k1; ++k) sum += half_to_float(A[size_t(m) * K + k]);
      a_sum[size_t(m) * G + g] = sum;
    }
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < N; ++n) {
      float v = half_to_float(C[size_t(m) * N + n]);
      for (int g = 0; g < G; ++g) v += a_sum[size_t(m) * G + g] * half_to_float(delta[size_t(g) * N + n]);
      C[size_t(m) * N + n] = float_to_half(v);
    }
  return {};
}

KernelStatus EmulatedBackend::mm_asymmetric(const half_bits* A, const int32_t* B, const half_bits* s,
                                            const half_bits* delta, half_bits* C, int M, int N, int K,
                                            int group_size, int n_out) {
  if (n_out > 0 && n_out < N) {  // a padded section: the whole product, then its first n_out columns
    std::vector<half_bits> full(size_t(M) * size_t(N));
    const KernelStatus st = mm_asymmetric(A, B, s, delta, full.data(), M, N, K, group_size, 0);
    if (st.ok) {
      const std::vector<half_bits> own = column_range(full.data(), M, N, 0, n_out);
      std::copy(own.begin(), own.end(), C);
    }
    return st;
  }
  const KernelStatus st =
      marlin_gemm(A, B, s, C, M, N, K, group_size);
  if (!st.ok) return st;
  std::vector<float> a_sum(size_t(M) * size_t(group_count(K, group_size)));
  return correction(A, delta, C, a_sum.data(), M, N, K, group_size);
}

KernelStatus EmulatedBackend::swiglu_pair(const half_bits* A, const int32_t* B_gate, const half_bits* s_gate,
                                          const half_bits* delta_gate, const int32_t* B_up, const half_bits* s_up,
                                          const half_bits* delta_up, const float* bias_gate, const float* bias_up,
                                          half_bits* C, int M, int N, int K, int group_size) {
  std::vector<half_bits> up(size_t(M) * size_t(N));
  KernelStatus st = mm_asymmetric(A, B_gate, s_gate, delta_gate, C, M, N, K, group_size, 0);
  if (st.ok) st = mm_asymmetric(A, B_up, s_up, delta_up, up.data(), M, N, K, group_size, 0);
  if (!st.ok) return st;
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < N; ++n) {
      const size_t i = size_t(m) * N + n;
      const float g = half_to_float(C[i]) + (bias_gate ? bias_gate[n] : 0.f);
      const float u = half_to_float(up[i]) + (bias_up ? bias_up[n] : 0.f);
      C[i] = float_to_half(g / (1.0f + std::exp(-g)) * u);
    }
  return st;
}

KernelStatus EmulatedBackend::native_gemm(const half_bits* A, const uint8_t* q_packed, const half_bits* scale,
                                          const half_bits* zero, half_bits* C, int M, int N, int K, int group_size) {
  ++calls;
  if (M < 1 || N < 1 || K < 1 || !effective_group_size_ok(K, group_size))
    return KernelStatus::failure("emulated int4_gemm: rc=1 (problem shape unsupported) for k=" + std::to_string(K) +
                                 " group_size=" + std::to_string(group_size));
  const std::vector<uint8_t> q = unpack_nibbles(q_packed, K, N);
  const int G = int(group_count(K, group_size));
  const bool floor = native_floor_ && native_floor_min > 0 && M >= native_floor_min;  // W_hat rounded to fp16
  std::vector<float> acc(static_cast<size_t>(N));
  for (int m = 0; m < M; ++m) {
    std::fill(acc.begin(), acc.end(), 0.0f);
    for (int k = 0; k < K; ++k) {
      int g = k / group_size;
      const float a = half_to_float(A[size_t(m) * K + k]);
      for (int n = 0; n < N; ++n) {
        const int gz = (bug_ == EmulatedBug::kNativeLastGroup && G > 1 && g == G - 1) ? G - 2 : g;
        const int gs = (bug_ == EmulatedBug::kNativeFloorGroup && floor && G > 1 && g == G - 1) ? G - 2 : g;
        const float w = float(q[size_t(k) * N + n]) * half_to_float(scale[size_t(gs) * N + n]) +
                        half_to_float(zero[size_t(gz) * N + n]);
        acc[size_t(n)] += a * (floor ? half_to_float(float_to_half(w)) : w);
      }
    }
    for (int n = 0; n < N; ++n) C[size_t(m) * N + n] = float_to_half(acc[size_t(n)]);
  }
  return {};
}

GemmPlan EmulatedBackend::plan(PlanKernel kernel, int M, int N, int K, int group_size) {
  constexpr int kSms = 132;
  GemmPlan p;
  if (kernel == PlanKernel::kSwiglu) {  // the launcher's rule: fused on the decode kernel's M
    if (!marlin_gate(K, N, group_size).ok) return p;
    p = M <= 16 ? plan(PlanKernel::kMarlinAsymmetric, M, 2 * N, K, group_size) : GemmPlan{};
    if (M > 16 || (M > 8 && p.units_per_warp > tl::cuda::kPairMaxUnitsPerWarp9To16))  // the launcher's rule
      p = plan(PlanKernel::kMarlinAsymmetric, M, N, K, group_size);
    if (!p.kernel.empty()) p.kernel = tl::cuda::pair_kernel_name(p.kernel);
    return p;
  }
  if (kernel == PlanKernel::kNative) {
    if (M < 1 || N < 1 || K < 1 || !effective_group_size_ok(K, group_size)) return p;
    p.ragged_n = N % 8 != 0;
    if (native_floor_ && native_floor_min > 0 && M >= native_floor_min) {
      const int cols = std::max(128, std::min(N, int((size_t(64) << 20) / (size_t(K) * 2) / 128 * 128)));
      p.kernel = "native-dequant";
      p.slices = (N + cols - 1) / cols;
      return p;
    }
    p.kernel = "native";
    p.rows_per_block = M >= 4 ? 4 : (M == 3 ? 4 : M);
    const long long base = (N + 255) / 256 * ((M + p.rows_per_block - 1) / p.rows_per_block);
    p.k_splits = int(std::max<long long>(1, std::min<long long>((4LL * kSms + base - 1) / base, std::max(1, K / 256))));
    p.ragged_n = N % 8 != 0;
    p.blocks = int(base) * p.k_splits;
    return p;
  }
  if (!marlin_gate(K, N, group_size).ok || !marlin_shape_ok(K, N) || M < 1) return p;  // the kernels: whole tiles
  if (hopper_ && M > 16) {
    const tl::cuda::hopper::Schedule sched =
        tl::cuda::hopper::plan_schedule(M, N, K, [](int, int split) { return kSms / split; });
    const tl::cuda::hopper::Shape& h = sched.shape;
    p.kernel = "hopper";
    p.blocks = h.grid;
    p.cluster = h.split > 1 ? h.split : 0;
    p.k_splits = h.split;
    p.tiles_per_block = sched.tiles_per_cta;
    p.stream_k = h.stream_k;
    p.rows_per_block = h.rows;
    p.last_slice_rows = M % h.rows ? M % h.rows : h.rows;
    p.ragged_n = N % tl::cuda::hopper::kTileN != 0;
    return p;
  }
  if (floor_ && M > 16 && M >= prefill_floor_min_m()) {
    const int cols = std::max(128, std::min(N, int((size_t(64) << 20) / (size_t(K) * 2) / 128 * 128)));
    p.kernel = "dequant";
    p.slices = (N + cols - 1) / cols;
    return p;
  }
  const int units = (K / 128) * (N / 128);
  if (M <= 16) {
    const int warps = std::min(kSms * 8, units);
    p.kernel = "decode";
    p.warps_per_block = M <= 8 ? 4 : 8;
    p.units_per_warp = (units + warps - 1) / warps;
    p.blocks = (units + p.warps_per_block * p.units_per_warp - 1) / (p.warps_per_block * p.units_per_warp);
    return p;
  }
  auto iters = [&](int rows, int* occ) {
    const int tiles = units;
    *occ = rows <= 16 && tiles >= 28 * kSms ? 2 : 1;
    const int blocks = std::min(*occ * kSms, tiles);
    return (tiles + blocks - 1) / blocks;
  };
  p.kernel = "tiled";
  p.warps_per_block = 8;
  p.slices = (M + 63) / 64;
  p.last_slice_rows = M % 64 ? M % 64 : 64;
  int occ = 1;
  p.tiles_per_block = iters(std::min(M, 64), &occ);
  p.last_tiles_per_block = iters(p.last_slice_rows, &occ);
  p.last_blocks_per_sm = occ;
  p.blocks = std::min(kSms, units);
  return p;
}

}  // namespace tl::verify::testing
