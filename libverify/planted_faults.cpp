#include "libverify/planted_faults.h"

#include <utility>

#include "core/error.h"
#include "libconvert/marlin_layout.h"

namespace tl::verify {

const std::vector<PlantedFaultSpec>& planted_faults() {
  static const std::vector<PlantedFaultSpec> table = {
      {PlantedFault::kSwappedPermEntry, "swapped-perm-entry", ""},
      {PlantedFault::kDeltaSign, "delta-sign", ""},
      {PlantedFault::kPerRowAsGrouped, "per-row-as-grouped", "a per-row weight (group_size == K)"},
      {PlantedFault::kScalesOffByOneGroup, "scales-off-by-one-group", "at least two groups"},
      {PlantedFault::kTransposed, "transposed", "a square weight (K == N)"},
  };
  return table;
}

PlantedFault planted_fault_from_name(const std::string& name) {
  std::string known;
  for (const PlantedFaultSpec& f : planted_faults()) {
    if (name == f.name) return f.fault;
    known += (known.empty() ? "" : ", ") + std::string(f.name);
  }
  throw Error("unknown planted fault '" + name + "' (expected one of " + known + ")");
}

static const PlantedFaultSpec& spec_of(PlantedFault f) {
  for (const PlantedFaultSpec& s : planted_faults())
    if (s.fault == f) return s;
  throw Error("unknown planted fault");
}

void plant_fault(QuantWeight& w, PlantedFault fault) {
  if (!w.marlin) throw Error("weight has no Marlin section to corrupt", "", w.name);
  MarlinSection& m = *w.marlin;
  const int64_t K = w.K, N = w.N, G = w.groups();
  const bool ok = fault == PlantedFault::kPerRowAsGrouped ? G == 1
                  : fault == PlantedFault::kScalesOffByOneGroup ? G >= 2
                  : fault == PlantedFault::kTransposed ? K == N
                                                       : true;
  if (!ok)
    throw Error(std::string("planted fault '") + spec_of(fault).name + "' needs " +
                    spec_of(fault).requirement, "", w.name);
  switch (fault) {
    case PlantedFault::kSwappedPermEntry: {
      // A packer whose tile permutation has two entries exchanged puts the codes of two tile
      // positions into each other's nibble slots, in every 16 x 64 tile. Positions (0, 0) and
      // (1, 8) of a tile: different k, different n, same 16-row block.
      std::vector<uint8_t> q(size_t(K * N));
      marlin_unpack_codes(m.B.data(), K, N, q.data());
      for (int64_t t = 0; t < K; t += 16)
        for (int64_t b = 0; b < N; b += 64) std::swap(q[size_t(t * N + b)], q[size_t((t + 1) * N + b + 8)]);
      marlin_pack_codes(q.data(), K, N, m.B.data());
      break;
    }
    case PlantedFault::kDeltaSign:
      for (half_bits& d : m.delta) d ^= 0x8000;
      break;
    case PlantedFault::kPerRowAsGrouped:
      m.groupsize = K;
      marlin_permute_scales(w.scale.data(), 1, N, /*per_column=*/false, m.s.data());
      break;
    case PlantedFault::kScalesOffByOneGroup: {
      std::vector<half_bits> shifted(w.scale.size());
      for (int64_t g = 0; g < G; ++g)
        for (int64_t n = 0; n < N; ++n)
          shifted[size_t(g * N + n)] = w.scale[size_t(((g + 1) % G) * N + n)];
      marlin_permute_scales(shifted.data(), G, N, /*per_column=*/false, m.s.data());
      break;
    }
    case PlantedFault::kTransposed: {
      std::vector<uint8_t> qt(size_t(K * N));
      for (int64_t k = 0; k < K; ++k)
        for (int64_t n = 0; n < N; ++n) qt[size_t(n * K + k)] = w.q[size_t(k * N + n)];
      marlin_pack_codes(qt.data(), K, N, m.B.data());
      break;
    }
  }
}

}  // namespace tl::verify
