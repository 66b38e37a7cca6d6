// AWQ and compressed-tensors layer layouts; see checkpoint_layers.h.
#include "libconvert/checkpoint_layers.h"

#include <cmath>
#include <cstdio>

#include "core/error.h"
#include "core/group_size.h"
#include "core/parallel.h"

namespace tl {
namespace {

std::string at2(int64_t r, int64_t c) { return "[" + std::to_string(r) + ", " + std::to_string(c) + "]"; }

void check_shape(const std::string& name, int64_t K, int64_t N, int64_t G, int64_t group_size,
                 const std::string& file) {
  if (K <= 0 || N <= 0 || group_size <= 0 || group_size > K)
    throw Error("expected K, N > 0 and a group size in 1..K, got K = " + std::to_string(K) + ", N = " +
                    std::to_string(N) + ", group size " + std::to_string(group_size),
                file, name);
  if (G != group_count(K, group_size))
    throw Error("scales have " + std::to_string(G) + " groups, expected ceil(K / group_size) = ceil(" +
                    std::to_string(K) + " / " + std::to_string(group_size) + ") = " +
                    std::to_string(group_count(K, group_size)),
                file, name);
}

}  // namespace

QuantWeight quant_weight_from_integer_zeros(const std::string& name, int64_t K, int64_t N, int64_t group_size,
                                            std::vector<uint8_t> q, const std::vector<int32_t>& z,
                                            std::vector<half_bits> scales, const std::string& file) {
  QuantWeight w;
  w.name = name;
  w.bits = 4;
  w.K = K;
  w.N = N;
  w.group_size = group_size;
  w.q = std::move(q);
  const int64_t G = w.groups();
  w.zero.resize(size_t(G * N));
  for (int64_t g = 0; g < G; ++g)
    for (int64_t n = 0; n < N; ++n) {
      const size_t i = size_t(g * N + n);
      const float s = half_to_float(scales[i]);
      if (!std::isfinite(s) || !(s > 0.0f)) {
        char buf[96];
        std::snprintf(buf, sizeof buf, " = %.9g: expected finite and > 0", double(s));
        throw Error("scales" + at2(g, n) + buf, file, name);
      }
      if (z[i] < 0 || z[i] > 16)
        throw Error("zero point" + at2(g, n) + " = " + std::to_string(z[i]) + ": expected 0..16", file, name);
      w.zero[i] = float_to_half(-(float(z[i]) * s));  // exact: a 5-bit integer times 11 bits; one rounding
    }
  w.scale = std::move(scales);
  return w;
}

QuantWeight awq_layer_to_tinyloop(const std::string& name, const AwqLayerView& v, const std::string& file) {
  const int64_t K = v.K, N = v.N, G = v.G;
  check_shape(name, K, N, G, v.group_size, file);
  if (N % 8 != 0)
    throw Error("N = " + std::to_string(N) + ": AWQ packs 8 columns per int32 (N a multiple of 8)", file, name);
  const int64_t W = N / 8;
  // Column 8c + kAwqOrder[i] sits at bits 4i of word c: invert once.
  int shift_of[8];
  for (int i = 0; i < 8; ++i) shift_of[kAwqOrder[i]] = 4 * i;
  std::vector<uint8_t> q(size_t(K * N));
  parallel_chunks(K, 64, [&](int64_t k0, int64_t k1) {  // rows: a 7B model is ~7e9 codes
    for (int64_t k = k0; k < k1; ++k)
      for (int64_t n = 0; n < N; ++n)
        q[size_t(k * N + n)] = uint8_t((uint32_t(v.qweight[k * W + n / 8]) >> shift_of[n % 8]) & 15u);
  });
  std::vector<int32_t> z(size_t(G * N), 8);
  if (v.qzeros)
    for (int64_t g = 0; g < G; ++g)
      for (int64_t n = 0; n < N; ++n)
        z[size_t(g * N + n)] = int32_t((uint32_t(v.qzeros[g * W + n / 8]) >> shift_of[n % 8]) & 15u);
  QuantWeight w = quant_weight_from_integer_zeros(name, K, N, v.group_size, std::move(q), z,
                                                  std::vector<half_bits>(v.scales, v.scales + G * N), file);
  w.provenance = {{"method", "awq-checkpoint"}, {"zero_point", v.qzeros != nullptr}, {"source", file}};
  return w;
}

std::vector<int32_t> awq_pack(const std::vector<int32_t>& values, int64_t rows, int64_t N) {
  if (N % 8 != 0 || int64_t(values.size()) != rows * N) throw Error("awq_pack: expected N % 8 == 0 and rows * N values");
  std::vector<int32_t> out(size_t(rows * N / 8), 0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < N / 8; ++c) {
      uint32_t word = 0;
      for (int i = 0; i < 8; ++i) word |= (uint32_t(values[size_t(r * N + 8 * c + kAwqOrder[i])]) & 15u) << (4 * i);
      out[size_t(r * (N / 8) + c)] = int32_t(word);
    }
  return out;
}

QuantWeight ct_layer_to_tinyloop(const std::string& name, const CtLayerView& v, const std::string& file) {
  const int64_t K = v.K, N = v.N, G = v.G, gs = v.group_size;
  check_shape(name, K, N, G, gs, file);
  if (v.g_idx)
    for (int64_t k = 0; k < K; ++k)
      if (v.g_idx[k] != k / gs)
        throw Error("weight_g_idx[" + std::to_string(k) + "] = " + std::to_string(v.g_idx[k]) +
                        ", expected k / group_size = " + std::to_string(k / gs) +
                        " (actorder 'group'); TinyLoop groups are contiguous row blocks: re-quantize with "
                        "actorder 'weight' or null",
                    file, name + ".weight_g_idx");
  const int64_t words = (K + 7) / 8;
  std::vector<uint8_t> q(size_t(K * N));
  parallel_chunks(K, 64, [&](int64_t k0, int64_t k1) {  // row blocks of the [K, N] codes
    for (int64_t k = k0; k < k1; ++k)
      for (int64_t n = 0; n < N; ++n)
        q[size_t(k * N + n)] = uint8_t((uint32_t(v.packed[n * words + k / 8]) >> (4 * (k % 8))) & 15u);
  });
  // [N, G] -> TinyLoop's [G, N].
  std::vector<half_bits> scales(size_t(G * N));
  std::vector<int32_t> z(size_t(G * N), 8);
  for (int64_t g = 0; g < G; ++g)
    for (int64_t n = 0; n < N; ++n) {
      scales[size_t(g * N + n)] = v.scales[n * G + g];
      if (v.zero_points)
        z[size_t(g * N + n)] = int32_t((uint32_t(v.zero_points[(n / 8) * G + g]) >> (4 * (n % 8))) & 15u);
    }
  QuantWeight w = quant_weight_from_integer_zeros(name, K, N, gs, std::move(q), z, std::move(scales), file);
  w.provenance = {{"method", "compressed-tensors-checkpoint"}, {"symmetric", v.zero_points == nullptr}, {"source", file}};
  return w;
}

std::vector<int32_t> ct_pack_weight(const std::vector<uint8_t>& q, int64_t K, int64_t N) {
  if (int64_t(q.size()) != K * N) throw Error("ct_pack_weight: expected K * N codes");
  const int64_t words = (K + 7) / 8;
  std::vector<int32_t> out(size_t(N * words), 0);
  for (int64_t k = 0; k < K; ++k)
    for (int64_t n = 0; n < N; ++n) {
      int32_t& word = out[size_t(n * words + k / 8)];
      word = int32_t(uint32_t(word) | ((uint32_t(q[size_t(k * N + n)]) & 15u) << (4 * (k % 8))));
    }
  return out;
}

std::vector<int32_t> ct_pack_zero_points(const std::vector<int32_t>& z, int64_t G, int64_t N) {
  if (int64_t(z.size()) != G * N) throw Error("ct_pack_zero_points: expected G * N zero points");
  std::vector<int32_t> out(size_t((N + 7) / 8 * G), 0);
  for (int64_t g = 0; g < G; ++g)
    for (int64_t n = 0; n < N; ++n) {
      int32_t& word = out[size_t((n / 8) * G + g)];
      word = int32_t(uint32_t(word) | ((uint32_t(z[size_t(g * N + n)]) & 15u) << (4 * (n % 8))));
    }
  return out;
}

}  // namespace tl
