// Random quantized layers for the GPU tests (see quant_case.h).
#include "quant_case.h"

#include <cmath>

#include "cuda/kernels_ref.h"
#include "formats/marlin_layout.h"

namespace tl::test {

std::string QuantCase::name() const {
  return "M=" + std::to_string(M) + " K=" + std::to_string(K) + " N=" + std::to_string(N) +
         " g=" + std::to_string(marlin_gs());
}

QuantCase make_quant_case(int64_t M, int64_t K, int64_t N, int64_t group_size, uint64_t stream) {
  Rng rng(stream);
  QuantCase c;
  c.M = M;
  c.K = K;
  c.N = N;
  c.group_size = group_size;
  const int64_t G = group_count(K, group_size);  // a ragged last group where group_size does not divide K
  c.A = random_halves(rng, size_t(M * K), -1.0, 1.0);
  c.codes = random_codes(rng, size_t(K * N));
  c.scale = random_halves(rng, size_t(G * N), 0.002, 0.02);
  c.zero.resize(size_t(G * N));
  for (size_t i = 0; i < c.zero.size(); ++i) {
    const double z = double(rng.next() % 16) + rng.uniform(-0.5, 0.5);
    c.zero[i] = float_to_half(float(-z * half_to_float(c.scale[i])));
  }
  c.delta.resize(c.zero.size());
  marlin_delta(c.scale.data(), c.zero.data(), int64_t(c.zero.size()), c.delta.data());
  c.q_tinyloop = pack_nibbles(c.codes.data(), K, N);
  if (K % 16 == 0 && N % 64 == 0) {
    c.B.resize(size_t(K / 16 * 2 * N));
    marlin_pack_codes(c.codes.data(), K, N, c.B.data());
    c.s_marlin.resize(c.scale.size());
    marlin_permute_scales(c.scale.data(), G, N, G == 1, c.s_marlin.data());
  }
  return c;
}

namespace {

// value and sumsq for the rows, one pass over the weights per contiguous run of rows.
void ref_rows(const QuantCase& c, const std::vector<int64_t>& rows, const half_bits* zero, bool delta_form,
              std::vector<double>* value, std::vector<double>* sumsq) {
  value->assign(rows.size() * size_t(c.N), 0.0);
  sumsq->assign(rows.size() * size_t(c.N), 0.0);
  size_t i = 0;
  while (i < rows.size()) {
    size_t j = i + 1;
    while (j < rows.size() && rows[j] == rows[j - 1] + 1) ++j;
    cuda::quant_gemm_ref(c.A.data(), c.codes.data(), c.scale.data(), zero, delta_form, c.N, c.K, c.group_size,
                         rows[i], rows[j - 1] + 1, value->data() + i * size_t(c.N), sumsq->data() + i * size_t(c.N));
    i = j;
  }
}

Reference make_reference(std::vector<double> value, const std::vector<double>& sumsq) {
  Reference r;
  r.value = std::move(value);
  r.sigma.resize(sumsq.size());
  for (size_t i = 0; i < sumsq.size(); ++i) r.sigma[i] = std::sqrt(sumsq[i]);
  return r;
}

}  // namespace

// sigma^2 = sum_k (a_k (q - 8) s)^2: the weight products the kernel rounds (symmetric tier).
Reference ref_marlin(const QuantCase& c, const std::vector<int64_t>& rows) {
  std::vector<double> v, sq;
  ref_rows(c, rows, nullptr, false, &v, &sq);
  return make_reference(std::move(v), sq);
}

// Against A * W_hat: the wrapper tier's model, the rounded terms of both forms,
// sigma^2 = sum_k (a_k W_marlin)^2 + sum_k (a_k W_hat)^2.
Reference ref_w_hat(const QuantCase& c, const std::vector<int64_t>& rows) {
  std::vector<double> v, sq, vm, sqm;
  ref_rows(c, rows, c.zero.data(), false, &v, &sq);
  ref_rows(c, rows, nullptr, false, &vm, &sqm);
  for (size_t i = 0; i < sq.size(); ++i) sq[i] += sqm[i];
  return make_reference(std::move(v), sq);
}

// The unfused composition (GEMM stored in fp16, then + A_sum * delta16): the wrapper tier's
// full model (libverify/reference_math.h), sigma^2 = the W_hat terms + C_marlin^2 (its fp16
// store, at the scale of C_marlin, which activations of one sign make far larger than the
// result) + sum_g (A_sum[g] delta16[g])^2.
Reference ref_composed(const QuantCase& c, const std::vector<int64_t>& rows) {
  std::vector<double> v, sq, vm, sqm;
  ref_rows(c, rows, c.zero.data(), false, &v, &sq);
  ref_rows(c, rows, nullptr, false, &vm, &sqm);
  const int64_t G = c.G();
  for (size_t r = 0; r < rows.size(); ++r) {
    std::vector<double> a_sum(size_t(G), 0.0);
    for (int64_t k = 0; k < c.K; ++k)
      a_sum[size_t(k / c.group_size)] += double(half_to_float(c.A[size_t(rows[r] * c.K + k)]));
    for (int64_t n = 0; n < c.N; ++n) {
      const size_t i = r * size_t(c.N) + size_t(n);
      double corr = 0;
      for (int64_t g = 0; g < G; ++g) {
        const double t = a_sum[size_t(g)] * double(half_to_float(c.delta[size_t(g * c.N + n)]));
        corr += t * t;
      }
      sq[i] += sqm[i] + vm[i] * vm[i] + corr;
    }
  }
  return make_reference(std::move(v), sq);
}

// What the fused kernel computes, A ((q - 8) s + delta16): sigma^2 = sum_k (a_k w_k)^2.
Reference ref_delta_form(const QuantCase& c, const std::vector<int64_t>& rows) {
  std::vector<double> v, sq;
  ref_rows(c, rows, c.delta.data(), true, &v, &sq);
  return make_reference(std::move(v), sq);
}

}  // namespace tl::test
