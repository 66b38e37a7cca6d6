// Shared helpers of the formats tests: a scratch folder per test, seeded random data, and small
// byte-level file edits for the corruption tests.
#pragma once

#include <cstdint>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "core/half.h"
#include "formats/tinyloop_file.h"

namespace tl::test {

// What f throws as tl::Error (its what()), or "<no error>".
inline std::string error_message(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}

// A fresh folder under the build's test tmp dir (removed and recreated).
inline std::string scratch(const std::string& name) {
  const std::string dir = std::string(TL_TEST_TMP) + "/formats_" + name;
  std::string cmd = "rm -rf '" + dir + "' && mkdir -p '" + dir + "'";
  if (std::system(cmd.c_str()) != 0) throw std::runtime_error("cannot create " + dir);
  return dir;
}

inline bool file_exists(const std::string& p) {
  struct stat st {};
  return stat(p.c_str(), &st) == 0;
}

inline std::vector<uint8_t> slurp(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

inline void spit(const std::string& p, const std::vector<uint8_t>& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
}

inline void spit(const std::string& p, const std::string& s) {
  spit(p, std::vector<uint8_t>(s.begin(), s.end()));
}

// Number of entries in a folder (to prove that a failed write left no temporary behind).
inline int count_entries(const std::string& dir) {
  int n = 0;
  std::string cmd = "ls -A '" + dir + "' | wc -l";
  FILE* p = popen(cmd.c_str(), "r");
  if (p) { if (std::fscanf(p, "%d", &n) != 1) n = -1; pclose(p); }
  return n;
}

// A random quantized weight: codes uniform in 0..15, scale log-uniform in [2^-12, 2^-2],
// zero = -z * scale with z uniform in 0..15 (the GPTQ asymmetric form), all float16.
inline QuantWeight random_quant(const std::string& name, int64_t K, int64_t N, int64_t group_size,
                                std::mt19937& rng) {
  QuantWeight w;
  w.name = name;
  w.K = K;
  w.N = N;
  w.group_size = group_size;
  std::uniform_int_distribution<int> code(0, 15);
  std::uniform_real_distribution<float> lg(-12.f, -2.f);
  w.q.resize(size_t(K * N));
  for (auto& c : w.q) c = uint8_t(code(rng));
  const int64_t G = w.groups();
  for (int64_t i = 0; i < G * N; ++i) {
    const float s = std::exp2(lg(rng));
    w.scale.push_back(float_to_half(s));
    w.zero.push_back(float_to_half(-float(code(rng)) * half_to_float(w.scale.back())));
  }
  w.provenance = {{"method", "gptq"}, {"damp", 0.01}, {"block_size", 128}, {"act_order", false},
                  {"loss", 12.5}, {"calib", {{"nsamples", 128}, {"seq", 2048}}}};
  return w;
}

// A Marlin section of the right sizes with random content (the packer's tests own the layout;
// these tests only need bytes that must survive a round trip).
inline MarlinSection random_marlin(const QuantWeight& w, std::mt19937& rng) {
  MarlinSection m;
  m.groupsize = w.group_size == w.K ? -1 : w.group_size;
  m.B.resize(size_t(w.K / 16 * 2 * w.N));
  for (auto& b : m.B) b = int32_t(rng());
  m.s = w.scale;
  std::reverse(m.s.begin(), m.s.end());  // some permutation of the scales
  for (size_t i = 0; i < w.scale.size(); ++i)
    m.delta.push_back(float_to_half(half_to_float(w.zero[i]) + 8.f * half_to_float(w.scale[i])));
  return m;
}

inline ModelConfig small_config() {
  ModelConfig c;
  c.architecture = "tinyloop";
  c.d_model = 64;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.d_head = 16;
  c.ffn = 176;
  c.vocab = 1000;
  c.n_pre = 1;
  c.n_loop = 1;
  c.loops = 3;
  c.norm_eps = 1e-6;
  c.rope_theta = 500000.0;
  c.max_seq = 512;
  c.tie_embeddings = true;
  return c;
}

}  // namespace tl::test
