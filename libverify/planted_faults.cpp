#include "libverify/planted_faults.h"

#include <algorithm>
#include <utility>

#include "core/error.h"
#include "formats/marlin_layout.h"

namespace tl::verify {

const std::vector<PlantedFaultSpec>& planted_faults() {
  static const std::vector<PlantedFaultSpec> table = {
      {PlantedFault::kSwappedPermEntry, "swapped-perm-entry", ""},
      {PlantedFault::kDeltaSign, "delta-sign", ""},
      {PlantedFault::kPerRowAsGrouped, "per-row-as-grouped", "a per-row weight (group_size == K)"},
      {PlantedFault::kScalesOffByOneGroup, "scales-off-by-one-group", "at least two groups"},
      {PlantedFault::kTransposed, "transposed", "a square weight (K == N)"},
      {PlantedFault::kOneGroupScales, "one-group-scales", "at least two groups"},
      {PlantedFault::kOneColumnDelta, "one-column-delta", ""},
      {PlantedFault::kOneTilePermutation, "one-tile-permutation", ""},
      {PlantedFault::kOneNibble, "one-nibble", ""},
      {PlantedFault::kLastKTile, "last-k-tile", ""},
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

FaultPlace planted_fault_place(PlantedFault fault, int64_t K, int64_t N, int64_t G) {
  switch (fault) {
    case PlantedFault::kOneGroupScales: return {G / 2, G / 2, 0, N - 1};
    case PlantedFault::kOneColumnDelta: return {0, G - 1, N / 2 + 3, N / 2 + 3};
    case PlantedFault::kOneTilePermutation: {
      const int64_t k0 = (K / 16 / 2) * 16, n0 = (N / 16 / 2) * 16;
      return {k0, k0 + 15, n0, n0 + 15};
    }
    case PlantedFault::kOneNibble: {
      const int64_t k = K / 2 + 5, n = (N / 2 + 37) % N;
      return {k, k, n, n};
    }
    case PlantedFault::kLastKTile: return {K - 16, K - 1, 0, N - 1};
    default: return {0, K - 1, 0, N - 1};
  }
}

void plant_fault(QuantWeight& w, PlantedFault fault) {
  if (!w.marlin) throw Error("weight has no Marlin section to corrupt", "", w.name);
  MarlinSection& m = *w.marlin;
  if (m.padded_n != 0) throw Error("planted faults take unpadded sections (N a multiple of 128)", "", w.name);
  const int64_t K = w.K, N = w.N, G = w.groups();
  const bool ok = fault == PlantedFault::kPerRowAsGrouped ? G == 1
                  : fault == PlantedFault::kScalesOffByOneGroup || fault == PlantedFault::kOneGroupScales ? G >= 2
                  : fault == PlantedFault::kTransposed ? K == N
                                                       : true;
  if (!ok)
    throw Error(std::string("planted fault '") + spec_of(fault).name + "' needs " +
                    spec_of(fault).requirement, "", w.name);
  const FaultPlace at = planted_fault_place(fault, K, N, G);
  // Codes edited in TinyLoop's [K, N] order and packed again: a packer that got one place wrong.
  auto edit_codes = [&](auto&& edit) {
    std::vector<uint8_t> q(size_t(K * N));
    marlin_unpack_codes(m.B.data(), K, N, q.data());
    edit(q);
    marlin_pack_codes(q.data(), K, N, m.B.data());
  };
  switch (fault) {
    case PlantedFault::kOneGroupScales: {
      std::vector<half_bits> scaled = w.scale;
      for (int64_t n = 0; n < N; ++n) {
        half_bits& s = scaled[size_t(at.k0 * N + n)];
        s = float_to_half(half_to_float(s) * 1.25f);
      }
      marlin_permute_scales(scaled.data(), G, N, /*per_column=*/false, m.s.data());
      break;
    }
    case PlantedFault::kOneColumnDelta:
      // zero one code step off: delta + scale (delta is stored unpermuted, [G, N]).
      for (int64_t g = 0; g < G; ++g) {
        half_bits& d = m.delta[size_t(g * N + at.n0)];
        d = float_to_half(half_to_float(d) + half_to_float(w.scale[size_t(g * N + at.n0)]));
      }
      break;
    case PlantedFault::kOneTilePermutation:
      edit_codes([&](std::vector<uint8_t>& q) {
        for (int64_t i = 0; i < 16; ++i)
          for (int64_t j = i + 1; j < 16; ++j)
            std::swap(q[size_t((at.k0 + i) * N + at.n0 + j)], q[size_t((at.k0 + j) * N + at.n0 + i)]);
      });
      break;
    case PlantedFault::kOneNibble:
      edit_codes([&](std::vector<uint8_t>& q) { q[size_t(at.k0 * N + at.n0)] ^= 0x8; });
      break;
    case PlantedFault::kLastKTile:
      // B is [K / 16, 2N] ints: row K / 16 - 1 holds the last k-tile.
      std::fill(m.B.end() - 2 * N, m.B.end(), 0);
      break;
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
