// The model-family fixtures of tests/data/families (tools/make_family_fixtures.py): tiny
// checkpoints written by transformers' own classes, with transformers' float32 logits and
// per-token NLL on fixed tokens. Shared by the CPU test (tests/convert/test_model_families.cpp)
// and the GPU test (tests/cuda/test_model_families_gpu.cpp).
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "formats/safetensors.h"

namespace tl::test {

// Every fixture, with the feature it holds (the same list as the generator's FIXTURES).
inline const std::vector<std::string>& family_fixture_names() {
  static const std::vector<std::string> names = {"llama-rope-llama3", "llama-rope-linear", "llama-head-dim",
                                                 "llama-bias-tied",   "mistral-window",    "qwen2-bias-tied",
                                                 "qwen2-window",      "qwen3"};
  return names;
}

struct FamilyFixture {
  std::string name, dir, tokens_path;
  int64_t windows = 0, ctx = 0, vocab = 0;
  std::vector<int32_t> tokens;  // [windows * ctx]
  std::vector<float> logits;    // [windows * ctx, vocab], transformers float32
  double ppl_all = 0;           // exp(mean NLL over positions 1..ctx-1 of every window)
};

inline FamilyFixture load_family_fixture(const std::string& name) {
  FamilyFixture f;
  f.name = name;
  f.dir = std::string(TL_FAMILY_DIR) + "/" + name;
  f.tokens_path = f.dir + ".tokens.u32";
  SafetensorsReader r(f.dir + ".ref.safetensors");
  const Tensor t = r.read("tokens"), l = r.read("logits");
  f.windows = t.shape[0];
  f.ctx = t.shape[1];
  f.vocab = l.shape[1];
  f.tokens.resize(size_t(t.numel()));
  for (size_t i = 0; i < f.tokens.size(); ++i) f.tokens[i] = reinterpret_cast<const int32_t*>(t.data.data())[i];
  f.logits = l.to_float();
  f.ppl_all = std::stod(r.metadata().at("ppl_all"));
  return f;
}

// ||a - b||_F / ||b||_F in double.
inline double rel_frobenius(const float* a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    const double d = double(a[i]) - double(b[i]);
    num += d * d;
    den += double(b[i]) * double(b[i]);
  }
  return std::sqrt(num / den);
}

// PPL of --score all from logits [windows * ctx, vocab]: exp of the mean NLL of tokens 1..ctx-1.
inline double ppl_all_from_logits(const float* logits, const FamilyFixture& f) {
  double sum = 0;
  int64_t n = 0;
  for (int64_t w = 0; w < f.windows; ++w)
    for (int64_t t = 0; t + 1 < f.ctx; ++t) {
      const float* row = logits + (w * f.ctx + t) * f.vocab;
      double mx = row[0];
      for (int64_t v = 1; v < f.vocab; ++v) mx = std::max(mx, double(row[v]));
      double se = 0;
      for (int64_t v = 0; v < f.vocab; ++v) se += std::exp(double(row[v]) - mx);
      sum += mx + std::log(se) - double(row[f.tokens[size_t(w * f.ctx + t + 1)]]);
      ++n;
    }
  return std::exp(sum / double(n));
}

}  // namespace tl::test
