#include "verify/fixture_file.h"

#include <filesystem>

#include <hdf5.h>

#include "core/error.h"
#include "formats/h5_util.h"
#include "formats/h5_write.h"
#include "formats/tinyloop_file.h"
#include "formats/marlin_layout.h"
#include "libverify/random_weights.h"

namespace tl::verify::testing {

const std::vector<FixtureWeight>& fixture_weights() {
  static const std::vector<FixtureWeight> w = {
      {"layers.0.attn_out", 256, 256, 256},
      {"layers.0.mlp_gate", 256, 512, 128},
      {"layers.0.mlp_up", 256, 512, 128},
      {"layers.0.mlp_down", 512, 256, 128},
      {"head", 256, 200, 256},           // N = 200: packed padded to 256 columns
      {"layers.0.attn_k200", 200, 128, 200},  // K = 200: not packable (the gate's K rule)
  };
  return w;
}

const FixtureWeight& fixture_weight(const std::string& name) {
  for (const FixtureWeight& f : fixture_weights())
    if (name == f.name) return f;
  throw Error("no fixture weight named " + name);
}

FaultPlace fixture_fault_place(const std::string& weight, PlantedFault fault) {
  const FixtureWeight& f = fixture_weight(weight);
  return planted_fault_place(fault, f.K, f.N, f.K / f.group_size);
}

void write_verify_fixture(const std::string& path, uint64_t seed, bool with_marlin) {
  TinyloopWriter out(path, "tl-verify-test-fixture");
  for (size_t i = 0; i < fixture_weights().size(); ++i) {
    const FixtureWeight& f = fixture_weights()[i];
    Rng rng = case_rng(seed, "fixture", i);
    QuantWeight w = random_quant_weight(rng, f.name, f.K, f.N, f.group_size);
    if (with_marlin && marlin_gate(f.K, f.N, f.group_size).ok) w.marlin = marlin_pack(w);
    out.write_quant(w);
  }
  out.commit();
}

FaultPlace write_faulty_fixture(const std::string& path, uint64_t seed, const std::string& weight,
                                PlantedFault fault) {
  std::filesystem::remove(path);
  write_verify_fixture(path, seed);
  plant_fault_in_file(path, weight, fault);
  return fixture_fault_place(weight, fault);
}

void plant_fault_in_file(const std::string& path, const std::string& weight, PlantedFault fault) {
  QuantWeight w;
  {
    const TinyloopReader in(path);
    w = in.read_quant(weight, true);
  }  // closed before the file is reopened for writing
  plant_fault(w, fault);
  const MarlinSection& m = *w.marlin;
  h5::Handle f = h5::open_file(path, /*writable=*/true);
  const std::string gp = "/quant/" + weight;
  if (H5Ldelete(f, (gp + "/marlin").c_str(), H5P_DEFAULT) < 0)
    throw Error("cannot delete the Marlin group", path, gp);
  h5::Handle g = h5::open_group(f, gp, path);
  h5::Handle mg = h5::create_group(g, "marlin", path);
  h5::write_attr(mg, "groupsize", m.groupsize, path);
  h5::write_attr(mg, "layout", m.layout, path);
  h5::write_attr(mg, "K", w.K, path);
  h5::write_attr(mg, "N", w.N, path);
  h5::write_dataset(mg, "B", H5T_STD_I32LE, H5T_NATIVE_INT32, {w.K / 16, 2 * w.N}, m.B.data(), path);
  h5::write_dataset(mg, "s", h5::float16_type(), h5::float16_type(), {w.groups(), w.N}, m.s.data(), path);
  h5::write_dataset(mg, "delta", h5::float16_type(), h5::float16_type(), {w.groups(), w.N},
                    m.delta.data(), path);
}

}  // namespace tl::verify::testing
