#include "formats/tensor.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/half.h"
#include "core/parallel.h"

namespace tl {

namespace {
constexpr int64_t kConvertChunk = int64_t(1) << 18;  // elements per piece of a parallel conversion
}  // namespace

size_t dtype_size(DType t) {
  switch (t) {
    case DType::F64: case DType::I64: return 8;
    case DType::F32: case DType::I32: return 4;
    case DType::F16: case DType::BF16: return 2;
    case DType::I8: case DType::U8: return 1;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::F64: return "F64";
    case DType::F32: return "F32";
    case DType::F16: return "F16";
    case DType::BF16: return "BF16";
    case DType::I64: return "I64";
    case DType::I32: return "I32";
    case DType::I8: return "I8";
    case DType::U8: return "U8";
  }
  return "?";
}

bool dtype_from_name(const std::string& s, DType* out) {
  static const struct { const char* name; DType t; } table[] = {
      {"F64", DType::F64}, {"F32", DType::F32}, {"F16", DType::F16}, {"BF16", DType::BF16},
      {"I64", DType::I64}, {"I32", DType::I32}, {"I8", DType::I8},   {"U8", DType::U8}};
  for (const auto& e : table)
    if (s == e.name) { *out = e.t; return true; }
  return false;
}

bool dtype_is_float(DType t) {
  return t == DType::F64 || t == DType::F32 || t == DType::F16 || t == DType::BF16;
}

int64_t shape_numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int64_t Tensor::numel() const { return shape_numel(shape); }

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::string Tensor::shape_str() const { return tl::shape_str(shape); }

std::vector<float> Tensor::to_float() const {
  const int64_t n = numel();
  if (!dtype_is_float(dtype)) throw Error(std::string("expected a float tensor, got ") + dtype_name(dtype), "", name);
  std::vector<float> out(static_cast<size_t>(n));
  float* o = out.data();
  parallel_chunks(n, kConvertChunk, [&](int64_t i0, int64_t i1) {
    switch (dtype) {
      case DType::F32: for (int64_t i = i0; i < i1; ++i) o[i] = as<float>()[i]; break;
      case DType::F64: for (int64_t i = i0; i < i1; ++i) o[i] = float(as<double>()[i]); break;
      case DType::F16: for (int64_t i = i0; i < i1; ++i) o[i] = half_to_float(as<uint16_t>()[i]); break;
      default: for (int64_t i = i0; i < i1; ++i) o[i] = bf16_to_float(as<uint16_t>()[i]); break;
    }
  });
  return out;
}

float Tensor::float_at(int64_t i) const {
  switch (dtype) {
    case DType::F32: return as<float>()[i];
    case DType::F64: return float(as<double>()[i]);
    case DType::F16: return half_to_float(as<uint16_t>()[i]);
    case DType::BF16: return bf16_to_float(as<uint16_t>()[i]);
    default: throw Error(std::string("expected a float tensor, got ") + dtype_name(dtype), "", name);
  }
}

bool Tensor::nonfinite_at(int64_t i) const {
  // On the stored bits, without a float copy: an all-ones exponent is Inf or NaN.
  switch (dtype) {
    case DType::F16: return (as<uint16_t>()[i] & 0x7c00u) == 0x7c00u;
    case DType::BF16: return (as<uint16_t>()[i] & 0x7f80u) == 0x7f80u;
    case DType::F32: return !std::isfinite(as<float>()[i]);
    default: return !std::isfinite(float(as<double>()[i]));  // as the float copy sees it
  }
}

void Tensor::check_finite(const std::string& file) const {
  if (!dtype_is_float(dtype)) return;
  const int64_t bad = parallel_find_first(numel(), [&](int64_t i) { return nonfinite_at(i); });
  if (bad < 0) return;
  const float v = float_at(bad);
  throw Error(std::string(std::isnan(v) ? "NaN" : "Inf") + " at flat index " + std::to_string(bad) + " of " +
                  shape_str() + " (non-finite weights cannot be quantized; fix or re-export the checkpoint)",
              file, name);
}

Tensor Tensor::from_float(const std::string& name, std::vector<int64_t> shape, const float* values,
                          DType dtype) {
  Tensor t;
  t.name = name;
  t.dtype = dtype;
  t.shape = std::move(shape);
  const int64_t n = t.numel();
  t.data.resize(size_t(n) * dtype_size(dtype));
  switch (dtype) {
    case DType::F32: for (int64_t i = 0; i < n; ++i) t.as<float>()[i] = values[i]; break;
    case DType::F64: for (int64_t i = 0; i < n; ++i) t.as<double>()[i] = values[i]; break;
    case DType::F16: for (int64_t i = 0; i < n; ++i) t.as<uint16_t>()[i] = float_to_half(values[i]); break;
    case DType::BF16: for (int64_t i = 0; i < n; ++i) t.as<uint16_t>()[i] = float_to_bf16(values[i]); break;
    default: throw Error("from_float needs a float dtype", "", name);
  }
  return t;
}

namespace {

float load_elem(const uint8_t* p, DType t, int64_t i) {
  switch (t) {
    case DType::F32: { float v; std::memcpy(&v, p + 4 * i, 4); return v; }
    case DType::F16: { half_bits h; std::memcpy(&h, p + 2 * i, 2); return half_to_float(h); }
    case DType::BF16: { bf16_bits h; std::memcpy(&h, p + 2 * i, 2); return bf16_to_float(h); }
    case DType::F64: { double v; std::memcpy(&v, p + 8 * i, 8); return float(v); }
    default: return 0.0f;
  }
}

}  // namespace

void transpose_to_float(const uint8_t* src, DType t, int64_t rows, int64_t cols, float* dst, int64_t ld, int64_t n0) {
  constexpr int64_t T = 32;
  // Bands of T rows on every core (a band writes its own T columns of dst), tiles of T x T.
  parallel_chunks((rows + T - 1) / T, 1, [&](int64_t b0, int64_t) {
    const int64_t r0 = b0 * T, r1 = std::min(rows, r0 + T);
    for (int64_t k0 = 0; k0 < cols; k0 += T) {
      const int64_t k1 = std::min(cols, k0 + T);
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t k = k0; k < k1; ++k) dst[k * ld + n0 + r] = load_elem(src, t, r * cols + k);
    }
  });
}

}  // namespace tl
