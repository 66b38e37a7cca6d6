// QuantWeight checks and dequantization, the nibble packing of q, and Marlin-section checks.
#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/group_size.h"
#include "core/parallel.h"
#include "formats/tinyloop_schema.h"

namespace tl {

static std::string at2(int64_t r, int64_t c) { return "[" + std::to_string(r) + ", " + std::to_string(c) + "]"; }

void QuantWeight::validate(const std::string& file) const {
  auto fail = [&](const std::string& what) { throw Error(what, file, name); };
  if (bits != 4) fail("expected bits = 4, got " + std::to_string(bits));
  if (K <= 0 || N <= 0) fail("expected K > 0 and N > 0, got K = " + std::to_string(K) + ", N = " + std::to_string(N));
  check_effective_group_size(K, group_size, file, name);
  const int64_t G = groups();
  if (int64_t(q.size()) != K * N)
    fail("q: expected " + std::to_string(K * N) + " codes [K, N], got " + std::to_string(q.size()));
  if (int64_t(scale.size()) != G * N) fail("scale: expected " + std::to_string(G * N) + " values [G, N], got " + std::to_string(scale.size()));
  if (int64_t(zero.size()) != G * N) fail("zero: expected " + std::to_string(G * N) + " values [G, N], got " + std::to_string(zero.size()));
  const int64_t bad = parallel_find_first(int64_t(q.size()), [&](int64_t i) { return q[size_t(i)] > 15; });
  if (bad >= 0) fail("q" + at2(bad / N, bad % N) + " = " + std::to_string(q[size_t(bad)]) + ": expected a 4-bit code 0..15");
  for (size_t i = 0; i < scale.size(); ++i) {
    const float s = half_to_float(scale[i]), z = half_to_float(zero[i]);
    if (!std::isfinite(s) || !(s > 0))
      fail("scale" + at2(int64_t(i) / N, int64_t(i) % N) + " = " + std::to_string(s) + ": expected finite and > 0");
    if (!std::isfinite(z)) fail("zero" + at2(int64_t(i) / N, int64_t(i) % N) + " = " + std::to_string(z) + ": expected finite");
  }
  if (marlin) schema::validate_marlin(*marlin, K, N, G, group_size, file, name);
}

std::vector<float> QuantWeight::dequantize() const {
  // q * scale is exact in float32 (4-bit code times an 11-bit significand), so this is one
  // rounding whether or not the compiler contracts it into an FMA.
  std::vector<float> w(size_t(K * N));
  const int64_t rows = std::max<int64_t>(1, (int64_t(1) << 18) / std::max<int64_t>(1, N));  // rows per piece
  parallel_chunks(K, rows, [&](int64_t k0, int64_t k1) {
    for (int64_t k = k0; k < k1; ++k) {
      const int64_t g = k / group_size;
      for (int64_t n = 0; n < N; ++n)
        w[size_t(k * N + n)] = float(q[size_t(k * N + n)]) * half_to_float(scale[size_t(g * N + n)]) +
                               half_to_float(zero[size_t(g * N + n)]);
    }
  });
  return w;
}

namespace schema {

void check_entry_name(const std::string& name, const std::string& file) {
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos)
    throw Error("bad entry name '" + name + "': expected a non-empty name without '/'", file);
}

hid_t file_type(DType t) {
  switch (t) {
    case DType::F64: return H5T_IEEE_F64LE;
    case DType::F32: return H5T_IEEE_F32LE;
    case DType::F16: return h5::float16_type();
    case DType::BF16: return h5::bfloat16_type();
    case DType::I64: return H5T_STD_I64LE;
    case DType::I32: return H5T_STD_I32LE;
    case DType::I8: return H5T_STD_I8LE;
    case DType::U8: return H5T_STD_U8LE;
  }
  return H5T_IEEE_F32LE;
}

hid_t mem_type(DType t) {
  switch (t) {
    case DType::F64: return H5T_NATIVE_DOUBLE;
    case DType::F32: return H5T_NATIVE_FLOAT;
    case DType::F16: return h5::float16_type();   // raw bits, no conversion
    case DType::BF16: return h5::bfloat16_type();
    case DType::I64: return H5T_NATIVE_INT64;
    case DType::I32: return H5T_NATIVE_INT32;
    case DType::I8: return H5T_NATIVE_INT8;
    case DType::U8: return H5T_NATIVE_UINT8;
  }
  return H5T_NATIVE_FLOAT;
}

bool dtype_of(const h5::DatasetInfo& info, DType* out) {
  if (info.type_class == H5T_FLOAT) {
    if (info.type_size == 8) *out = DType::F64;
    else if (info.type_size == 4) *out = DType::F32;
    else if (info.is_float16) *out = DType::F16;
    else if (info.is_bfloat16) *out = DType::BF16;
    else return false;
    return true;
  }
  if (info.type_class == H5T_INTEGER) {
    if (info.type_size == 8 && info.is_signed) *out = DType::I64;
    else if (info.type_size == 4 && info.is_signed) *out = DType::I32;
    else if (info.type_size == 1 && info.is_signed) *out = DType::I8;
    else if (info.type_size == 1) *out = DType::U8;
    else return false;
    return true;
  }
  return false;
}

void validate_marlin(const MarlinSection& m, int64_t K, int64_t N, int64_t G, int64_t group_size,
                     const std::string& file, const std::string& item) {
  const std::string it = item + "/marlin";
  if (m.layout != kMarlinLayoutTag)
    throw Error("layout '" + m.layout + "': expected '" + kMarlinLayoutTag + "' (the only Marlin layout this build knows)", file, it);
  const int64_t want_gs = marlin_groupsize_arg(K, group_size);
  if (m.groupsize != want_gs)
    throw Error("groupsize " + std::to_string(m.groupsize) + ": expected " + std::to_string(want_gs) +
                    " for group_size " + std::to_string(group_size) + " and K = " + std::to_string(K),
                file, it);
  if (K % 16 != 0) throw Error("expected K divisible by 16 for a Marlin section, K = " + std::to_string(K), file, it);
  if (!marlin_padding_ok(N, m.padded_n))
    throw Error("a section of " + std::to_string(m.padded_n) + " columns: expected " + marlin_padding_expected(N), file,
                it);
  N = m.columns(N);  // the sizes below are the section's
  if (int64_t(m.B.size()) != (K / 16) * 2 * N)
    throw Error("B: expected " + std::to_string((K / 16) * 2 * N) + " words [K/16, 2N], got " + std::to_string(m.B.size()), file, it);
  if (int64_t(m.s.size()) != G * N)
    throw Error("s: expected " + std::to_string(G * N) + " values [G, N], got " + std::to_string(m.s.size()), file, it);
  if (int64_t(m.delta.size()) != G * N)
    throw Error("delta: expected " + std::to_string(G * N) + " values [G, N], got " + std::to_string(m.delta.size()), file, it);
  for (size_t i = 0; i < m.s.size(); ++i) {
    const float s = half_to_float(m.s[i]), d = half_to_float(m.delta[i]);
    if (!std::isfinite(s) || !(s > 0))
      throw Error("s[" + std::to_string(i) + "] = " + std::to_string(s) + ": expected finite and > 0", file, it);
    if (!std::isfinite(d))
      throw Error("delta" + at2(int64_t(i) / N, int64_t(i) % N) + " = " + std::to_string(d) + ": expected finite", file, it);
  }
}

}  // namespace schema
}  // namespace tl
