// GPTQ layers (AutoGPTQ / GPTQModel) to TinyLoop; the layout is described in gptq_checkpoint.h.
#include "libconvert/gptq_checkpoint.h"

#include <cmath>
#include <cstdio>
#include <cstring>

#include "core/error.h"
#include "core/group_size.h"
#include "core/parallel.h"
#include "libconvert/checkpoint_layers.h"

namespace tl {
namespace {

std::string at2(int64_t r, int64_t c) { return "[" + std::to_string(r) + ", " + std::to_string(c) + "]"; }

}  // namespace

GptqCheckpointConfig gptq_config_from_json(const nlohmann::json& q, const std::string& file) {
  if (!q.is_object()) throw Error("quantization settings must be a JSON object", file);
  GptqCheckpointConfig c;
  c.source = file;
  try {
    const std::string method = q.value("quant_method", std::string("gptq"));
    if (method != "gptq")
      throw Error("quant_method '" + method + "': expected 'gptq'", file, "quant_method");
    if (!q.contains("bits")) throw Error("missing key", file, "bits");
    c.bits = q.at("bits").get<int>();
    if (c.bits != 4)
      throw Error("bits = " + std::to_string(c.bits) + ": expected 4 (Marlin and TinyLoop are int4)",
                  file, "bits");
    c.group_size = q.value("group_size", int64_t(-1));
    if (c.group_size == 0 || c.group_size < -1)
      throw Error("group_size = " + std::to_string(c.group_size) + ": expected -1 or > 0", file,
                  "group_size");
    c.sym = q.value("sym", true);
    c.desc_act = q.value("desc_act", false);
    if (q.value("is_marlin_format", false))
      throw Error("is_marlin_format: the checkpoint is already Marlin-packed (AutoGPTQ's layout); "
                  "expected a plain GPTQ checkpoint",
                  file, "is_marlin_format");
    c.checkpoint_format = q.value("checkpoint_format", std::string("gptq"));
    if (c.checkpoint_format == "gptq") {
      c.zeros_minus_one = true;
    } else if (c.checkpoint_format == "gptq_v2") {
      c.zeros_minus_one = false;
    } else {
      throw Error("checkpoint_format '" + c.checkpoint_format + "': expected 'gptq' or 'gptq_v2'",
                  file, "checkpoint_format");
    }
  } catch (const nlohmann::json::exception& e) {
    throw Error(std::string("bad quantization settings: ") + e.what(), file);
  }
  return c;
}

QuantWeight gptq_layer_to_tinyloop(const std::string& name, const GptqLayerView& v,
                                   const GptqCheckpointConfig& c, const std::string& file) {
  const int64_t K = v.K, N = v.N, G = v.G;
  const int64_t gs = group_size_from_upstream(c.group_size, K);
  if (K <= 0 || N <= 0 || N % 8 != 0 || K % 8 != 0)
    throw Error("expected K and N multiples of 8, got K = " + std::to_string(K) + ", N = " +
                    std::to_string(N),
                file, name);
  if (K % gs != 0 || G != K / gs)
    throw Error("scales have " + std::to_string(G) + " groups, expected K / group_size = " +
                    std::to_string(K) + " / " + std::to_string(gs) +
                    (K % gs ? " (group_size does not divide K)" : ""),
                file, name);
  if (v.g_idx) {
    for (int64_t k = 0; k < K; ++k)
      if (v.g_idx[k] != k / gs)
        throw Error("act-order checkpoint (desc_act = " + std::string(c.desc_act ? "true" : "false") +
                        "): g_idx[" + std::to_string(k) + "] = " + std::to_string(v.g_idx[k]) +
                        ", expected k / group_size = " + std::to_string(k / gs) +
                        "; TinyLoop groups are contiguous row blocks: re-quantize without "
                        "desc_act or with static_groups",
                    file, name);
  }

  std::vector<uint8_t> q(size_t(K * N));
  parallel_chunks(K / 8, 8, [&](int64_t r0, int64_t r1) {  // word rows: a 7B model is ~7e9 codes
    for (int64_t r = r0; r < r1; ++r) {
      const int32_t* row = v.qweight + r * N;
      for (int i = 0; i < 8; ++i) {
        uint8_t* out = q.data() + (8 * r + i) * N;
        for (int64_t n = 0; n < N; ++n) out[n] = uint8_t((uint32_t(row[n]) >> (4 * i)) & 15u);
      }
    }
  });
  std::vector<int32_t> z(size_t(G * N));
  const uint32_t offset = c.zeros_minus_one ? 1u : 0u;
  for (int64_t g = 0; g < G; ++g)
    for (int64_t n = 0; n < N; ++n) {
      const uint32_t nibble = (uint32_t(v.qzeros[g * (N / 8) + n / 8]) >> (4 * (n % 8))) & 15u;
      z[size_t(g * N + n)] = int32_t(nibble + offset);
      if (c.sym && nibble + offset != 8)
        throw Error("sym = true but zero point z" + at2(g, n) + " = " + std::to_string(nibble + offset) +
                        " (stored nibble " + std::to_string(nibble) + ", checkpoint_format '" +
                        c.checkpoint_format + "'); symmetric checkpoints store 7 in 'gptq' (v1) "
                        "and 8 in 'gptq_v2': is checkpoint_format right?",
                    file, name);
    }
  QuantWeight w = quant_weight_from_integer_zeros(name, K, N, gs, std::move(q), z,
                                                  std::vector<half_bits>(v.scales, v.scales + G * N), file);
  w.provenance = {{"method", "gptq-checkpoint"},
                  {"checkpoint_format", c.checkpoint_format},
                  {"sym", c.sym},
                  {"desc_act", c.desc_act},
                  {"checkpoint_group_size", c.group_size},
                  {"source", c.source}};
  return w;
}

std::vector<int32_t> gptq_pack_qweight(const std::vector<uint8_t>& q, int64_t K, int64_t N) {
  if (K % 8 != 0 || int64_t(q.size()) != K * N) throw Error("gptq_pack_qweight: expected K % 8 == 0 and K * N codes");
  std::vector<int32_t> out(size_t(K / 8 * N), 0);
  for (int64_t k = 0; k < K; ++k)
    for (int64_t n = 0; n < N; ++n)
      out[size_t((k / 8) * N + n)] =
          int32_t(uint32_t(out[size_t((k / 8) * N + n)]) | (uint32_t(q[size_t(k * N + n)] & 15u) << (4 * (k % 8))));
  return out;
}

std::vector<int32_t> gptq_pack_qzeros(const std::vector<int32_t>& z, int64_t G, int64_t N,
                                      bool zeros_minus_one) {
  if (N % 8 != 0 || int64_t(z.size()) != G * N) throw Error("gptq_pack_qzeros: expected N % 8 == 0 and G * N zero points");
  std::vector<int32_t> out(size_t(G * N / 8), 0);
  for (int64_t g = 0; g < G; ++g)
    for (int64_t n = 0; n < N; ++n) {
      // Per nibble, as AutoGPTQ's kernels read it back: (z - 1) & 15 for v1.
      const uint32_t nib = uint32_t(z[size_t(g * N + n)] - (zeros_minus_one ? 1 : 0)) & 15u;
      int32_t& word = out[size_t(g * (N / 8) + n / 8)];
      word = int32_t(uint32_t(word) | (nib << (4 * (n % 8))));
    }
  return out;
}

}  // namespace tl
