// One random quantized linear layer in every layout the kernels read: TinyLoop (q packed two
// per byte, scale, zero), Marlin (B and permuted s from the real packer in libconvert, delta),
// plus random activations. Shared by the Marlin, wrapper and dispatcher tests.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/group_size.h"
#include "core/half.h"
#include "gpu_support/gpu_test_util.h"

namespace tl::test {

struct QuantCase {
  int64_t M = 0, K = 0, N = 0, group_size = 0;  // group_size == K: per column
  std::vector<half_bits> A;                      // [M, K]
  std::vector<uint8_t> codes;                    // [K, N], 0..15
  std::vector<half_bits> scale, zero, delta;     // [G, N] natural order
  std::vector<uint8_t> q_tinyloop;               // [K, ceil(N/2)]
  std::vector<int32_t> B;                        // [K/16, 2N] (only when K%16 == 0, N%64 == 0)
  std::vector<half_bits> s_marlin;               // [G, N] permuted
  int64_t G() const { return K / group_size; }
  int marlin_gs() const { return int(tl::marlin_groupsize_arg(K, group_size)); }  // names: g=-1 per column
  std::string name() const;  // "M=.. K=.. N=.. g=.."
};

// Activations uniform in [-1, 1]; codes uniform 0..15; scales uniform in [0.002, 0.02];
// zero = -(z + j) * scale with z uniform 0..15 and j in [-0.5, 0.5] (an arbitrary TinyLoop zero,
// not only GPTQ's integer one); delta = fp16(zero + 8 scale) from the packer's marlin_delta.
QuantCase make_quant_case(int64_t M, int64_t K, int64_t N, int64_t group_size, uint64_t stream);

// fp64 references for rows `rows`: W_marlin = (q - 8) s, and W_hat = q scale + zero.
Reference ref_marlin(const QuantCase& c, const std::vector<int64_t>& rows);
Reference ref_w_hat(const QuantCase& c, const std::vector<int64_t>& rows);
// A * W_hat with the error model of the unfused GEMM + correction pair (its fp16 intermediate).
Reference ref_composed(const QuantCase& c, const std::vector<int64_t>& rows);
// W = (q - 8) s + delta with the stored fp16 delta: what marlin_mm_asymmetric computes.
Reference ref_delta_form(const QuantCase& c, const std::vector<int64_t>& rows);

}  // namespace tl::test
