// The conversions the streamed e2e tier runs on the GPU instead of on the host: a dense weight as
// stored (fp32 / fp16 / bf16, [K, N] or PyTorch's [N, K]) to fp16 [K, N] (weight_to_half), and a
// quantized weight's W_hat = fp16(fmaf(q, scale, zero)) (dequantize_native). Both must give the
// host's bits exactly (core/half.h float_to_half of the widened value; QuantWeight::dequantize
// then float_to_half), since the fp16 path and the reference are built from them: one flipped
// bit moves a KLD that the tier reports to the last digit.
#include <doctest/doctest.h>

#include <cstring>

#include "core/nibbles.h"
#include "formats/tinyloop_file.h"
#include "cuda/model_ops.h"
#include "gpu_support/gpu_test_util.h"

namespace {

// Random fp32 values over every fp16 regime: normals, subnormals, values that round to 0, the
// largest finite, values that overflow to Inf, ties at the rounding boundary, negative zero.
std::vector<float> regime_floats(tl::test::Rng& rng, size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) {
    const uint64_t pick = rng.next() % 8;
    double x = rng.uniform(-4, 4);
    if (pick == 1) x = rng.uniform(-1e-5, 1e-5);            // fp16 subnormals
    if (pick == 2) x = rng.uniform(-1e-8, 1e-8);            // below the smallest subnormal
    if (pick == 3) x = rng.uniform(-70000, 70000);           // around the largest finite
    if (pick == 4) {                                        // an exact tie: fp16 value + half a step
      const float h = tl::half_to_float(tl::float_to_half(float(x)));
      x = double(h) + std::ldexp(1.0, std::ilogb(h == 0 ? 1.0 : double(h)) - 11);
    }
    v[i] = pick == 5 ? -0.0f : float(x);
  }
  return v;
}

}  // namespace

TEST_CASE("weight_to_half: every stored dtype and orientation gives the host's fp16 bits") {
  using tl::cuda::WeightElem;
  struct Shape { int64_t K, N; };
  for (const Shape sh : {Shape{37, 45}, Shape{64, 96}, Shape{1, 33}, Shape{129, 1}, Shape{300, 70}}) {
    tl::test::Rng rng(uint64_t(sh.K * 1000 + sh.N));
    const size_t n = size_t(sh.K * sh.N);
    const std::vector<float> f = regime_floats(rng, n);
    for (const WeightElem elem : {WeightElem::kF32, WeightElem::kF16, WeightElem::kBF16})
      for (const bool transposed : {false, true}) {
        CAPTURE(sh.K);
        CAPTURE(sh.N);
        CAPTURE(int(elem));
        CAPTURE(transposed);
        // The stored bytes (index [k, n] or, transposed, [n, k]) and the host's fp16 of each.
        std::vector<uint8_t> stored(n * (elem == WeightElem::kF32 ? 4 : 2));
        std::vector<tl::half_bits> want(n);
        for (int64_t k = 0; k < sh.K; ++k)
          for (int64_t j = 0; j < sh.N; ++j) {
            const size_t at = size_t(transposed ? j * sh.K + k : k * sh.N + j);
            const float x = f[size_t(k * sh.N + j)];
            float widened = x;
            if (elem == WeightElem::kF32) {
              std::memcpy(stored.data() + 4 * at, &x, 4);
            } else if (elem == WeightElem::kF16) {
              const tl::half_bits h = tl::float_to_half(x);
              std::memcpy(stored.data() + 2 * at, &h, 2);
              widened = tl::half_to_float(h);
            } else {
              const tl::bf16_bits b = tl::float_to_bf16(x);
              std::memcpy(stored.data() + 2 * at, &b, 2);
              widened = tl::bf16_to_float(b);
            }
            want[size_t(k * sh.N + j)] = tl::float_to_half(widened);
          }
        tl::test::DeviceBuffer<uint8_t> src(stored);
        tl::test::DeviceBuffer<tl::half_bits> dst(n);
        dst.poison();
        TL_REQUIRE_LAUNCH(tl::cuda::weight_to_half(src.get(), elem, transposed, sh.K, sh.N, dst.half(), nullptr));
        const std::vector<tl::half_bits> got = dst.download();
        size_t bad = 0, first = n;
        for (size_t i = 0; i < n; ++i)
          if (got[i] != want[i]) bad++, first = std::min(first, i);
        CHECK_MESSAGE(bad == 0, bad << " of " << n << " differ, first at " << first << ": got 0x" << std::hex
                                    << (first < n ? got[first] : 0) << " want 0x" << (first < n ? want[first] : 0));
      }
  }
}

TEST_CASE("dequantize_native: W_hat in fp16 equals the host's float_to_half(dequantize()), every group shape") {
  struct Case { int64_t K, N, group; };
  // groups that divide K, a ragged last group, one group per column; an odd N (a half-used byte)
  for (const Case c : {Case{256, 128, 128}, Case{172, 96, 32}, Case{64, 45, 64}, Case{300, 200, 128}, Case{16, 8, 16}}) {
    CAPTURE(c.K);
    CAPTURE(c.N);
    CAPTURE(c.group);
    tl::test::Rng rng(uint64_t(c.K * 7 + c.N));
    tl::QuantWeight w;
    w.K = c.K;
    w.N = c.N;
    w.group_size = c.group;
    w.q = tl::test::random_codes(rng, size_t(c.K * c.N));
    w.scale = tl::test::random_halves(rng, size_t(w.groups() * c.N), 1e-3, 0.05);
    w.zero = tl::test::random_halves(rng, size_t(w.groups() * c.N), -0.6, 0.1);
    const std::vector<float> hat = w.dequantize();
    const std::vector<uint8_t> packed = tl::pack_nibbles(w.q.data(), c.K, c.N);
    tl::test::DeviceBuffer<uint8_t> q(packed);
    tl::test::DeviceBuffer<tl::half_bits> s(w.scale), z(w.zero), out(size_t(c.K * c.N));
    out.poison();
    TL_REQUIRE_LAUNCH(tl::cuda::dequantize_native(q.get(), s.half(), z.half(), out.half(), int(c.K), int(c.N),
                                                  int(c.group), nullptr));
    const std::vector<tl::half_bits> got = out.download();
    size_t bad = 0;
    for (size_t i = 0; i < hat.size(); ++i) bad += got[i] != tl::float_to_half(hat[i]);
    CHECK(bad == 0);
  }
}
