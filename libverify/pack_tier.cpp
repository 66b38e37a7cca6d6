// The pack tier (CPU): is each embedded Marlin section exactly the weight it claims to be?
// The source of truth is the weight's own q/scale/zero; the section is decoded back with the
// libconvert decoder (the inverse of the packer, checked against upstream's golden files in
// libconvert's tests) and compared bit for bit.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "formats/marlin_layout.h"
#include "libverify/reference_math.h"
#include "libverify/tier_cases.h"

namespace tl::verify {
namespace {

std::string at(const char* what, int64_t i, int64_t N) {
  char buf[96];
  std::snprintf(buf, sizeof buf, "%s[%lld, %lld]", what, (long long)(i / N), (long long)(i % N));
  return buf;
}

// The mismatching entries of one [R, N] array: how many, the first, and the rectangle they lie
// in, so that a message names the place ("in rows 128..143, columns 64..79") and a local fault
// reads as local.
struct Mismatches {
  int64_t N, count = 0, first = -1, r0 = 0, r1 = 0, n0 = 0, n1 = 0;
  explicit Mismatches(int64_t n) : N(n) {}
  void add(int64_t i) {
    const int64_t r = i / N, n = i % N;
    if (count++ == 0) {
      first = i;
      r0 = r1 = r;
      n0 = n1 = n;
      return;
    }
    r0 = std::min(r0, r), r1 = std::max(r1, r), n0 = std::min(n0, n), n1 = std::max(n1, n);
  }
  // "3 of 1024 scales differ in groups 2..2, columns 0..255 (first s[2, 0]: ...)"
  std::string describe(const char* what, const char* rows, int64_t total, const char* array,
                       const std::string& first_values) const {
    char buf[256];
    if (count == 1)
      std::snprintf(buf, sizeof buf, "1 of %lld %s differs: %s", (long long)total, what, at(array, first, N).c_str());
    else
      std::snprintf(buf, sizeof buf, "%lld of %lld %s differ in %s %lld..%lld, columns %lld..%lld (first %s",
                    (long long)count, (long long)total, what, rows, (long long)r0, (long long)r1, (long long)n0,
                    (long long)n1, at(array, first, N).c_str());
    return std::string(buf) + (count == 1 ? " (" : ": ") + first_values + ")";
  }
};

// Appends "; " + text to the message of a failing case.
void fail(CaseResult& c, const std::string& text) {
  c.status = Status::kFailed;
  c.message += (c.message.empty() ? "" : "; ") + text;
}

}  // namespace

CaseResult check_pack(const QuantWeight& w) {
  CaseResult c;
  c.weight = w.name;
  c.label = w.name;
  c.M = 0;
  c.K = w.K;
  c.N = w.N;
  c.group_size = w.group_size;
  const MarlinSection& sec = *w.marlin;
  const int64_t K = w.K, N = w.N, G = w.groups();
  c.total = K * N;

  const int64_t want_gs = marlin_groupsize_arg(K, w.group_size);
  if (sec.groupsize != want_gs)
    fail(c, "Marlin groupsize " + std::to_string(sec.groupsize) + ", expected " +
                std::to_string(want_gs) + " (group_size " + std::to_string(w.group_size) +
                ", K " + std::to_string(K) + "; -1 iff group_size == K)");
  if (sec.layout != kMarlinLayoutTag)
    fail(c, "layout tag '" + sec.layout + "', expected '" + kMarlinLayoutTag + "'");
  // NP: the section's columns, N or (N not a multiple of 128) N padded to one.
  const int64_t NP = sec.columns(N);
  if (!marlin_padding_ok(N, sec.padded_n)) {
    fail(c, "a section of " + std::to_string(sec.padded_n) + " columns: expected " + marlin_padding_expected(N));
    return c;
  }
  const bool shapes_ok = K % 16 == 0 && NP % 64 == 0 && sec.B.size() == size_t(K / 16 * 2 * NP) &&
                         sec.s.size() == size_t(G * NP) && sec.delta.size() == size_t(G * NP);
  if (!shapes_ok) {
    fail(c, "section shapes B " + std::to_string(sec.B.size()) + " ints, s " +
                std::to_string(sec.s.size()) + ", delta " + std::to_string(sec.delta.size()) +
                " halves; expected B [K/16, 2N] = " + std::to_string(K / 16 * 2 * NP) +
                ", s and delta [G, N] = " + std::to_string(G * NP) + " (N = " + std::to_string(NP) + ")");
    return c;
  }
  // Codes: the section's own N columns of its NP.
  std::vector<uint8_t> q_sec(size_t(K * NP));
  marlin_unpack_codes(sec.B.data(), K, NP, q_sec.data());
  const std::vector<uint8_t> q = column_range(q_sec.data(), K, NP, 0, N);
  Mismatches bad_q(N);
  for (int64_t i = 0; i < K * N; ++i)
    if (q[size_t(i)] != w.q[size_t(i)]) bad_q.add(i);
  if (bad_q.count)
    fail(c, bad_q.describe("codes", "rows", K * N, "q",
                           std::to_string(q[size_t(bad_q.first)]) + " decoded, " +
                               std::to_string(w.q[size_t(bad_q.first)]) + " stored"));

  // Scales, undone with the permutation the contract's groupsize implies (G == 1: per column).
  std::vector<half_bits> s_sec(size_t(G * NP));
  marlin_unpermute_scales(sec.s.data(), G, NP, G == 1, s_sec.data());
  const std::vector<half_bits> s = column_range(s_sec.data(), G, NP, 0, N);
  const std::vector<half_bits> sec_delta = column_range(sec.delta.data(), G, NP, 0, N);
  const std::vector<half_bits> delta = delta_contract(w.scale, w.zero);
  UlpAccumulator acc(0.0);
  Mismatches bad_s(N), bad_d(N);
  for (int64_t i = 0; i < G * N; ++i) {
    acc.add(s[size_t(i)], half_to_float(w.scale[size_t(i)]), 0.0, i);
    acc.add(sec_delta[size_t(i)], half_to_float(delta[size_t(i)]), 0.0, G * N + i);
    if (s[size_t(i)] != w.scale[size_t(i)]) bad_s.add(i);
    if (sec_delta[size_t(i)] != delta[size_t(i)]) bad_d.add(i);
  }
  // The padding (docs/format.md): zero weights, codes 8, scale 1, delta 0, so that nothing a
  // kernel computes in those columns could reach the weight's own.
  if (NP != N) {
    const std::vector<uint8_t> pad_q = column_range(q_sec.data(), K, NP, N, NP);
    const std::vector<half_bits> pad_s = column_range(s_sec.data(), G, NP, N, NP);
    const std::vector<half_bits> pad_d = column_range(sec.delta.data(), G, NP, N, NP);
    int64_t bad_pad = std::count_if(pad_q.begin(), pad_q.end(), [](uint8_t v) { return v != 8; });
    for (size_t i = 0; i < pad_s.size(); ++i) bad_pad += pad_s[i] != float_to_half(1.0f) || pad_d[i] != 0;
    if (bad_pad)
      fail(c, std::to_string(bad_pad) + " padding entries (columns " + std::to_string(N) + ".." + std::to_string(NP - 1) +
                  ") are not the zero weight (codes 8, scale 1, delta 0)");
  }
  if (bad_s.count)
    fail(c, bad_s.describe("scales", "groups", G * N, "s",
                           std::to_string(half_to_float(s[size_t(bad_s.first)])) + " decoded, " +
                               std::to_string(half_to_float(w.scale[size_t(bad_s.first)])) + " stored"));
  if (bad_d.count)
    fail(c, bad_d.describe("delta entries", "groups", G * N, "delta",
                           std::to_string(half_to_float(sec_delta[size_t(bad_d.first)])) + " stored, " +
                               std::to_string(half_to_float(delta[size_t(bad_d.first)])) +
                               " expected = float16(zero + 8*scale)"));

  c.stats = acc.finish();
  c.has_stats = true;
  // rel_err: how far the weight the section represents, (q' - 8) s' + delta', is from W_hat
  // (q * scale + zero, exact). Informational: a correct section differs by delta's own fp16
  // rounding (~1e-4); a corrupted one by O(1).
  double diff2 = 0, ref2 = 0;
  for (int64_t k = 0; k < K; ++k) {
    const int64_t g = k / w.group_size;
    for (int64_t n = 0; n < N; ++n) {
      const size_t i = size_t(k * N + n), gi = size_t(g * N + n);
      const double ref = double(w.q[i]) * half_to_float(w.scale[gi]) + half_to_float(w.zero[gi]);
      const double sec_w = (double(q[i]) - 8.0) * half_to_float(s[gi]) + half_to_float(sec_delta[gi]);
      diff2 += (sec_w - ref) * (sec_w - ref);
      ref2 += ref * ref;
    }
  }
  c.stats.rel_err = ref2 > 0 ? std::sqrt(diff2 / ref2) : (diff2 > 0 ? INFINITY : 0.0);
  if (c.status == Status::kPassed)
    c.message = NP == N ? "codes, scales and delta bit-identical"
                        : "codes, scales and delta bit-identical; padded to " + std::to_string(NP) + " zero columns";
  return c;
}

}  // namespace tl::verify
