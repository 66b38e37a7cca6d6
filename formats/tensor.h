// In-memory tensors shared by every library: a name, a dtype, a row-major shape and raw bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace tl {

// Element types of safetensors and .tinyloop datasets (names as safetensors spells them).
enum class DType { F64, F32, F16, BF16, I64, I32, I8, U8 };

size_t dtype_size(DType t);
const char* dtype_name(DType t);           // "F32", "F16", "BF16", ...
bool dtype_from_name(const std::string& s, DType* out);  // false for unknown names
bool dtype_is_float(DType t);

struct Tensor {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;  // row-major; a 2-D linear weight in .tinyloop is [K, N]
  std::vector<uint8_t> data;   // little-endian raw bytes, numel() * dtype_size(dtype)

  int64_t numel() const;  // shape_numel(shape)
  size_t nbytes() const { return data.size(); }
  std::string shape_str() const;  // "[4096, 11008]"

  template <class T> T* as() { return reinterpret_cast<T*>(data.data()); }
  template <class T> const T* as() const { return reinterpret_cast<const T*>(data.data()); }

  // Float views of F64/F32/F16/BF16 data (throws tl::Error for integer dtypes).
  std::vector<float> to_float() const;
  float float_at(int64_t i) const;  // element i of a float tensor
  // Whether element i is a NaN or an Inf, read on its stored bits (float dtypes).
  bool nonfinite_at(int64_t i) const;
  // Throws tl::Error naming the tensor and the first flat index of a NaN or Inf.
  void check_finite(const std::string& file = "") const;

  static Tensor from_float(const std::string& name, std::vector<int64_t> shape,
                           const float* values, DType dtype);
};

// The number of elements of a shape (1 for a scalar's empty shape).
int64_t shape_numel(const std::vector<int64_t>& shape);
std::string shape_str(const std::vector<int64_t>& shape);

// src [rows, cols] of float dtype t -> dst[c * ld + n0 + r] as float32: a transposed copy into
// columns n0 .. n0 + rows - 1 of a row-major [cols, ld] matrix (PyTorch's [N, K] weight into
// TinyLoop's [K, N]), on every core. The values are exact (widening only).
void transpose_to_float(const uint8_t* src, DType t, int64_t rows, int64_t cols, float* dst, int64_t ld, int64_t n0);

}  // namespace tl
