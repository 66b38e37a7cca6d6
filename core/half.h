// float16 / bfloat16 <-> float32 conversions on the CPU (round to nearest even, NaN kept),
// bit-compatible with the GPU's __float2half_rn and with numpy / torch.
#pragma once

#include <cstdint>
#include <cstring>

namespace tl {

using half_bits = uint16_t;  // IEEE binary16, raw bits
using bf16_bits = uint16_t;  // bfloat16, raw bits

inline float bits_to_float(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }
inline uint32_t float_to_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }

inline float half_to_float(half_bits h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t man = h & 0x3ffu;
  if (exp == 0x1f) return bits_to_float(sign | 0x7f800000u | (man << 13));  // inf / nan
  if (exp == 0) {
    if (man == 0) return bits_to_float(sign);
    // subnormal: value = man * 2^-24
    float v = float(man) * 5.9604644775390625e-08f;
    return sign ? -v : v;
  }
  return bits_to_float(sign | ((exp + 112u) << 23) | (man << 13));
}

inline half_bits float_to_half(float f) {
  const uint32_t u = float_to_bits(f);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t abs = u & 0x7fffffffu;
  if (abs >= 0x7f800000u) {  // inf or nan
    return half_bits(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u | ((abs >> 13) & 0x3ffu) : 0u));
  }
  if (abs >= 0x477ff000u) return half_bits(sign | 0x7c00u);  // rounds to >= 65520: inf
  if (abs < 0x38800000u) {  // below the smallest normal half (2^-14): subnormal or zero
    // Add 0.5 (as float) so the FPU does the round-to-nearest-even at 2^-24 resolution.
    const float v = bits_to_float(abs) + 0.5f;
    return half_bits(sign | (float_to_bits(v) - 0x3f000000u));
  }
  // normal: rebias the exponent and round the 13 dropped mantissa bits to nearest even
  const uint32_t mant_odd = (abs >> 13) & 1u;
  uint32_t r = abs + 0xc8000fffu + mant_odd;  // -(112 << 23) + 0xfff + odd
  return half_bits(sign | (r >> 13));
}

inline float bf16_to_float(bf16_bits b) { return bits_to_float(uint32_t(b) << 16); }

inline bf16_bits float_to_bf16(float f) {
  uint32_t u = float_to_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return bf16_bits((u >> 16) | 0x40u);  // quiet nan
  u += 0x7fffu + ((u >> 16) & 1u);
  return bf16_bits(u >> 16);
}

// Round a float to the nearest float16 and back (the value an fp16 store would keep).
inline float round_to_half(float f) { return half_to_float(float_to_half(f)); }

}  // namespace tl
