// The GPU tiers' cases: run the kernel through the backend, compare every reference row with
// the fp64 reference in floored ULPs (ulp_stats.h), scan every output for NaN/Inf, judge.
#include <cmath>
#include <cstdio>

#include "core/group_size.h"
#include "core/nibbles.h"
#include "formats/marlin_layout.h"
#include "libverify/reference_math.h"
#include "libverify/tier_cases.h"
#include "libverify/tolerances.h"

namespace tl::verify {
namespace {

std::string shape_label(int64_t M, int64_t K, int64_t N, int64_t group_size) {
  char buf[96];
  if (group_size == K)
    std::snprintf(buf, sizeof buf, "m=%lld k=%lld n=%lld g=-1", (long long)M, (long long)K, (long long)N);
  else
    std::snprintf(buf, sizeof buf, "m=%lld k=%lld n=%lld g=%lld", (long long)M, (long long)K,
                  (long long)N, (long long)group_size);
  return buf;
}

// Labelled by shape; the file drivers relabel their cases with the weight's name.
CaseResult new_case(int64_t M, int64_t K, int64_t N, int64_t gs) {
  CaseResult c;
  c.M = M;
  c.K = K;
  c.N = N;
  c.group_size = gs;
  c.total = M * N;
  c.label = shape_label(M, K, N, gs);
  return c;
}

// Compares out [M, N] with the reference rows; NaN/Inf counted over every element.
void compare_and_judge(CaseResult& c, const std::vector<half_bits>& out, const CaseReference& ref,
                       int64_t N, const TierBounds& b) {
  UlpAccumulator acc(b.floor_factor);
  std::vector<char> is_ref_row(size_t(c.M), 0);
  for (size_t i = 0; i < ref.rows.size(); ++i) {
    const int64_t m = ref.rows[i];
    is_ref_row[size_t(m)] = 1;
    for (int64_t n = 0; n < N; ++n)
      acc.add(out[size_t(m * N + n)], ref.ref[i * size_t(N) + size_t(n)],
              ref.sigma[i * size_t(N) + size_t(n)], m * N + n);
  }
  c.stats = acc.finish();
  c.has_stats = true;
  int64_t first_bad = -1;
  for (int64_t m = 0; m < c.M; ++m) {
    for (int64_t n = 0; n < N; ++n) {
      const half_bits h = out[size_t(m * N + n)];
      const bool bad = half_is_nan(h) || (h & 0x7fff) == 0x7c00;
      if (bad && first_bad < 0) first_bad = m * N + n;
      if (!is_ref_row[size_t(m)] && bad) ++(half_is_nan(h) ? c.stats.nan : c.stats.inf);
    }
  }
  char buf[256];
  auto fail = [&](const std::string& text) {
    c.status = Status::kFailed;
    c.message += (c.message.empty() ? "" : "; ") + text;
  };
  if (c.stats.nan || c.stats.inf) {
    std::snprintf(buf, sizeof buf, "%llu NaN and %llu Inf outputs (first at C[%lld, %lld])",
                  (unsigned long long)c.stats.nan, (unsigned long long)c.stats.inf,
                  (long long)(first_bad / N), (long long)(first_bad % N));
    fail(buf);
  }
  const int64_t wi = c.stats.worst_index;
  double worst_ref = 0;
  half_bits worst_out = 0;
  if (wi >= 0) {
    worst_out = out[size_t(wi)];
    for (size_t i = 0; i < ref.rows.size(); ++i)
      if (ref.rows[i] == wi / N) worst_ref = ref.ref[i * size_t(N) + size_t(wi % N)];
  }
  const std::string worst = describe_element("C", wi, N, worst_out, worst_ref);
  if (c.stats.max_ulp > b.max_ulp) {
    std::snprintf(buf, sizeof buf, "max ULP %.2f > %g at ", c.stats.max_ulp, b.max_ulp);
    fail(buf + worst);
  }
  if (!(c.stats.rel_err <= b.max_rel)) {
    std::snprintf(buf, sizeof buf, "rel err %.3e > %g", c.stats.rel_err, b.max_rel);
    fail(buf);
  }
  if (c.status == Status::kPassed) c.message = "worst " + worst;
}

}  // namespace

CaseResult run_symmetric_case(KernelBackend& backend, const QuantWeight& w,
                              const std::vector<half_bits>& A, int64_t M, const TierBounds& bounds) {
  CaseResult c = new_case(M, w.K, w.N, w.group_size);
  const MarlinSection& sec = *w.marlin;
  // The kernel runs what the section says (its groupsize and columns, not the weight's): a
  // padded section's whole product, of which the weight's own N columns are compared.
  const int64_t NP = sec.columns(w.N);
  std::vector<half_bits> full(size_t(M * NP));
  const KernelStatus st = backend.marlin_gemm(A.data(), sec.B.data(), sec.s.data(), full.data(), int(M), int(NP),
                                              int(w.K), int(group_size_from_marlin(w.K, sec.groupsize)));
  if (!st.ok) {
    c.status = Status::kFailed;
    c.message = st.message;
    return c;
  }
  std::vector<half_bits> out(size_t(M * w.N));
  for (int64_t m = 0; m < M; ++m)
    std::copy(full.begin() + m * NP, full.begin() + m * NP + w.N, out.begin() + m * w.N);
  const CaseReference ref = symmetric_reference(A.data(), M, w, kReferenceRowsMax);
  compare_and_judge(c, out, ref, w.N, bounds);
  return c;
}

CaseResult run_wrapper_case(KernelBackend& backend, const QuantWeight& w,
                            const std::vector<half_bits>& A, int64_t M, const TierBounds& bounds) {
  CaseResult c = new_case(M, w.K, w.N, w.group_size);
  const MarlinSection& sec = *w.marlin;
  std::vector<half_bits> out(size_t(M * w.N));
  // A padded section runs as the runtime runs it: only the weight's own N columns written.
  const int64_t NP = sec.columns(w.N);
  const KernelStatus st =
      backend.mm_asymmetric(A.data(), sec.B.data(), sec.s.data(), sec.delta.data(), out.data(), int(M), int(NP),
                            int(w.K), int(w.group_size), NP != w.N ? int(w.N) : 0);
  if (!st.ok) {
    c.status = Status::kFailed;
    c.message = st.message;
    return c;
  }
  const CaseReference ref = wrapper_reference(A.data(), M, w, column_range(sec.delta.data(), w.groups(), NP, 0, w.N), kReferenceRowsMax);
  compare_and_judge(c, out, ref, w.N, bounds);
  return c;
}

CaseResult run_swiglu_case(KernelBackend& backend, const QuantWeight& gate, const QuantWeight& up,
                           const std::vector<float>& bias_gate, const std::vector<float>& bias_up,
                           const std::vector<half_bits>& A, int64_t M, const TierBounds& bounds) {
  CaseResult c = new_case(M, gate.K, gate.N, gate.group_size);
  const MarlinSection &g = *gate.marlin, &u = *up.marlin;
  std::vector<half_bits> out(size_t(M * gate.N));
  const KernelStatus st = backend.swiglu_pair(
      A.data(), g.B.data(), g.s.data(), g.delta.data(), u.B.data(), u.s.data(), u.delta.data(),
      bias_gate.empty() ? nullptr : bias_gate.data(), bias_up.empty() ? nullptr : bias_up.data(), out.data(), int(M),
      int(gate.N), int(gate.K), int(gate.group_size));
  if (!st.ok) {
    c.status = Status::kFailed;
    c.message = st.message;
    return c;
  }
  compare_and_judge(c, out, swiglu_reference(A.data(), M, gate, up, bias_gate, bias_up, kReferenceRowsMax), gate.N,
                    bounds);
  return c;
}

CaseResult run_native_case(KernelBackend& backend, const QuantWeight& w, const std::vector<half_bits>& A,
                           int64_t M, const TierBounds& bounds) {
  CaseResult c = new_case(M, w.K, w.N, w.group_size);
  const std::vector<uint8_t> q = pack_nibbles(w.q.data(), w.K, w.N);
  std::vector<half_bits> out(size_t(M * w.N));
  const KernelStatus st = backend.native_gemm(A.data(), q.data(), w.scale.data(), w.zero.data(), out.data(), int(M),
                                              int(w.N), int(w.K), int(w.group_size));
  if (!st.ok) {
    c.status = Status::kFailed;
    c.message = st.message;
    return c;
  }
  compare_and_judge(c, out, native_reference(A.data(), M, w, kReferenceRowsMax), w.N, bounds);
  return c;
}

CaseResult run_correction_case(KernelBackend& backend, const std::vector<half_bits>& A,
                               const std::vector<half_bits>& C_in, const std::vector<half_bits>& delta,
                               int64_t M, int64_t N, int64_t K, int64_t group_size,
                               const TierBounds& bounds) {
  CaseResult c = new_case(M, K, N, group_size);
  const int64_t G = group_count(K, group_size);
  std::vector<half_bits> out = C_in;
  std::vector<float> a_sum(size_t(M * G));
  const KernelStatus st = backend.correction(A.data(), delta.data(), out.data(), a_sum.data(),
                                             int(M), int(N), int(K), int(group_size));
  if (!st.ok) {
    c.status = Status::kFailed;
    c.message = st.message;
    return c;
  }
  const CaseReference ref =
      correction_reference(A.data(), C_in.data(), delta.data(), M, N, K, group_size);
  compare_and_judge(c, out, ref, N, bounds);
  // a_sum against the exact group sums: any summation order stays within (n - 1) u32 sum|a|.
  const std::vector<double> exact = group_sums(A.data(), K, group_size, ref.rows);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t g = 0; g < G; ++g) {
      double abs_sum = 0;
      const int64_t k1 = std::min(K, (g + 1) * group_size);
      for (int64_t k = g * group_size; k < k1; ++k) abs_sum += std::fabs(half_to_float(A[size_t(m * K + k)]));
      const double tol = kASumBoundFactor * double(k1 - g * group_size - 1) * kFloatUnitRoundoff * abs_sum;
      const double got = a_sum[size_t(m * G + g)], want = exact[size_t(m * G + g)];
      if (!(std::fabs(got - want) <= tol)) {
        char buf[200];
        std::snprintf(buf, sizeof buf, "a_sum[%lld, %lld] = %.9g, exact %.9g (bound %.3g)",
                      (long long)m, (long long)g, got, want, tol);
        c.message = c.status == Status::kPassed ? std::string(buf) : c.message + "; " + buf;
        c.status = Status::kFailed;
        return c;
      }
    }
  return c;
}

}  // namespace tl::verify
