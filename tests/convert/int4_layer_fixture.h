// Shared by the checkpoint-format tests (test_gptq_checkpoint.cpp, test_quant_checkpoint.cpp): one
// 4-bit layer in "model" form -- codes, integer zero points, fp16 scales -- drawn at random, and a
// safetensors tensor from a vector.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/group_size.h"
#include "core/half.h"
#include "formats/tensor.h"

namespace int4_fixture {

// One GPTQ layer in "model" form: codes, integer zero points, fp16 scales.
struct Layer {
  std::string name;
  int64_t K = 0, N = 0, gs = 0;  // gs as the checkpoint states it (-1 = per row)
  std::vector<uint8_t> q;        // [K, N]
  std::vector<int32_t> z;        // [G, N]
  std::vector<tl::half_bits> s;  // [G, N]
  int64_t eff_gs() const { return tl::group_size_from_upstream(gs, K); }
  int64_t G() const { return tl::group_count(K, eff_gs()); }
  // The checkpoint's own dequantized weight, exact in fp32 and double.
  double w(int64_t k, int64_t n) const {
    const size_t g = size_t((k / eff_gs()) * N + n);
    return double(tl::half_to_float(s[g])) * (double(q[size_t(k * N + n)]) - double(z[g]));
  }
};

inline Layer random_layer(std::mt19937& rng, const std::string& name, int64_t K, int64_t N, int64_t gs, bool sym) {
  Layer L;
  L.name = name;
  L.K = K;
  L.N = N;
  L.gs = gs;
  L.q.resize(size_t(K * N));
  for (auto& v : L.q) v = uint8_t(rng() & 15u);
  std::uniform_real_distribution<float> e(-10.0f, -3.0f);
  L.s.resize(size_t(L.G() * N));
  L.z.resize(L.s.size());
  for (size_t i = 0; i < L.s.size(); ++i) {
    L.s[i] = tl::float_to_half(std::exp2(e(rng)));
    // asym: the full range, with z = 0 and z = 15 forced in (0 is v1's awkward case: nibble 15).
    L.z[i] = sym ? 8 : (i == 0 ? 0 : i == 1 ? 15 : int32_t(rng() % 16u));
  }
  return L;
}

template <class T>
inline tl::Tensor make_tensor(const std::string& name, tl::DType dt, std::vector<int64_t> shape, const std::vector<T>& v) {
  tl::Tensor t;
  t.name = name;
  t.dtype = dt;
  t.shape = std::move(shape);
  t.data.resize(v.size() * sizeof(T));
  std::memcpy(t.data.data(), v.data(), t.data.size());
  return t;
}

}  // namespace int4_fixture
