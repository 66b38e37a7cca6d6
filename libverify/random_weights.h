// Seeded random inputs for the synthetic tiers and for test fixtures: fp16 activations and
// asymmetric 4-bit weights shaped like GPTQ output, packed with the real Marlin packer.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "core/half.h"
#include "formats/tinyloop_file.h"

namespace tl::verify {

using Rng = std::mt19937_64;

// An independent stream per (run seed, tier, case): a case's data does not depend on which
// other tiers or cases ran, so `--tiers wrapper --seed S` reproduces the wrapper cases of a
// full run with seed S.
Rng case_rng(uint64_t seed, const std::string& tier, uint64_t case_index);

// fp16(N(0, 1)) values, [rows, cols].
std::vector<half_bits> random_halves(Rng& rng, int64_t rows, int64_t cols, double stddev = 1.0);

// q uniform in [0, 15]; scale log-uniform in [2^-9, 2^-6] (|w| ~ 0.004..0.12, typical of LLM
// linear layers); zero = fp16(-(z + N(0, 0.25)) * scale) with integer z uniform in [0, 15], as
// upstream Marlin's test generator and the golden files do, so delta = zero + 8 * scale spans
// both signs. group_size: effective (== K for per-row). No Marlin section.
QuantWeight random_quant_weight(Rng& rng, const std::string& name, int64_t K, int64_t N,
                                int64_t group_size);

// The weight with its Marlin section, made by tl::marlin_pack (the gate is checked first;
// throws tl::Error with the gate's reason when the shape cannot be packed).
QuantWeight random_packed_weight(Rng& rng, const std::string& name, int64_t K, int64_t N,
                                 int64_t group_size);

}  // namespace tl::verify
