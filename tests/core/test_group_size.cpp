// core/group_size.h's rules, each written once: the effective group size, the Marlin gate and
// its words, group counts; and cuda/kernel_options.h's runtime defaults.
#include <doctest/doctest.h>

#include <string>

#include "core/error.h"
#include "core/group_size.h"
#include "cuda/kernel_options.h"

TEST_CASE("group size: the effective rule 0 < group_size <= K, as one error") {
  CHECK(tl::effective_group_size_ok(4096, 128));
  CHECK(tl::effective_group_size_ok(4096, 4096));  // per row
  CHECK(tl::effective_group_size_ok(172, 32));     // ragged: 5 groups of 32 and one of 12
  CHECK(!tl::effective_group_size_ok(64, 128));
  CHECK(!tl::effective_group_size_ok(64, 0));
  CHECK(!tl::effective_group_size_ok(64, -1));  // upstream's "per row" must be converted first
  CHECK_NOTHROW(tl::check_effective_group_size(256, 128));
  std::string msg;
  try {
    tl::check_effective_group_size(64, 128, "f.tinyloop", "pre.0.mlp_up");
  } catch (const tl::Error& e) {
    msg = e.what();
  }
  CHECK(msg == "f.tinyloop: pre.0.mlp_up: group size 128: expected 0 < group_size <= K = 64 (K for per row)");
  CHECK(tl::group_count(172, 32) == 6);
  CHECK(tl::group_count(4096, 4096) == 1);
}

TEST_CASE("group size: the Marlin gate, its shape half and its words") {
  CHECK(tl::marlin_shape_ok(4096, 12288));
  CHECK(!tl::marlin_shape_ok(4096, 50257));  // GPT-2's vocabulary
  CHECK(!tl::marlin_shape_ok(64, 128));
  CHECK(!tl::marlin_shape_ok(0, 128));
  CHECK(tl::marlin_gate(4096, 4096, 128).ok);
  CHECK(tl::marlin_gate(4096, 4096, 4096).ok);
  CHECK(!tl::marlin_gate(4096, 4096, 64).ok);
  CHECK(tl::marlin_gate(4096, 50257, 128).ok);  // packed with its section padded to 50304 columns
  CHECK(tl::marlin_padded_n(50257) == 50304);
  CHECK(tl::marlin_padded_n(50304) == 50304);
  CHECK(tl::marlin_padded_n(1) == 128);
  CHECK(tl::marlin_gate_text() == "K % 128 == 0 (N any: padded to a multiple of 128), group size 128 or per-row (= K)");
}

TEST_CASE("kernel options: the runtime's defaults and their one-line form") {
  const tl::cuda::KernelOptions plain, rt = tl::cuda::runtime_kernel_options();
  CHECK((!plain.hopper_kernel && plain.dequant_min_m == 0));  // the launchers' own default
  CHECK((rt.hopper_kernel && rt.decode_kernel && rt.clusters));
  CHECK(rt.dequant_min_m == tl::cuda::kDefaultDequantMinM);
  CHECK(rt.hopper_max_m == tl::cuda::kDefaultHopperMaxM);
  const std::string line = tl::cuda::kernel_options_line(rt);
  CHECK(line.find("hopper_kernel=1 hopper_max_m=8192 dequant_min_m=256") != std::string::npos);
  CHECK(line.find("crossovers=none") != std::string::npos);
}
