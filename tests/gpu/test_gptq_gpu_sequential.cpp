// gptq-quantize's sequential calibration on the GPU (libgpu/gptq_device.h, gptq_sequential.h)
// and the tool on it, against the CPU's sequential mode on fresh random data:
//  - a random TinyLoop model (pre blocks, a loop block, the head): the same weights in the same
//    order, Hessians from fp16 inputs within their rounding bound, the same sample counts, GPTQ
//    losses within a few percent; activations kept on the host give the same bytes, and so does a
//    second run (determinism);
//  - the tool: `--device cuda` twice gives byte-identical files; a run the fault hook fails late
//    keeps its completed stages, and --resume writes the uninterrupted run's bytes;
//  - bad input is an error before any work.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "convert/test_gptq_golden.h"
#include "core/fault_injection.h"
#include "core/group_size.h"
#include "core/half.h"
#include "cuda/cuda_errors.h"
#include "formats/calib_file.h"
#include "formats/token_file.h"
#include "gpu_support/gpu_test_util.h"
#include "libconvert/gptq.h"
#include "jobs/gptq_quantize_tool.h"
#include "libconvert/model_forward.h"
#include "libconvert/model_source.h"
#include "libconvert/model_weights.h"
#include "libconvert/token_calibration.h"
#include "libgpu/gptq_device.h"
#include "libgpu/gptq_gpu.h"

namespace {

tl::ModelConfig small_config() {
  tl::ModelConfig c;
  c.d_model = 64;
  c.n_heads = 2;  // d_head 32: the calibration's tensor-core attention (attention_tc_supports)
  c.n_kv_heads = 1;
  c.d_head = 32;
  c.ffn = 160;
  c.vocab = 300;
  c.n_pre = 2;
  c.n_loop = 1;
  c.loops = 2;
  c.norm_eps = 1e-5;
  c.rope_theta = 10000;
  return c;
}

struct CalibOut {
  std::vector<std::string> order;              // quantized, in the order they came
  std::map<std::string, tl::Hessian> hessians;
  std::map<std::string, tl::GptqResult> results;
  std::map<std::string, int64_t> nsamples;
};

tl::GptqOptions calib_options(int64_t K) {
  tl::GptqOptions o;
  o.group_size = K;  // per row: every weight of the small model takes it
  o.want_rtn_loss = true;
  return o;
}

CalibOut run_gpu(const std::string& model, const std::vector<int32_t>& tokens, int64_t T, int64_t n_seq,
                 const std::set<std::string>& selected, bool on_host) {
  CalibOut out;
  auto dev = tl::gpu::make_gptq_device();
  tl::SequentialCalls calls;
  calls.options = [](const std::string&, int64_t K) { return calib_options(K); };
  calls.quantized = [&](const std::string& name, tl::GptqResult&& r, int64_t ns, double) {
    out.order.push_back(name);
    out.nsamples[name] = ns;
    out.results[name] = std::move(r);
  };
  calls.hessian = [&](const tl::Hessian& h) { out.hessians[h.name] = h; };
  calls.activations_on_host = on_host;
  tl::GptqPhaseTimes t;
  dev->calibrate(tl::ModelSource(model, false), tokens, T, n_seq, selected, calls, &t);
  CHECK(t.forward > 0);
  CHECK(t.hessian > 0);
  CHECK(t.sweep > 0);
  return out;
}

std::string tmp_dir(const std::string& name);

double rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / den);
}

TEST_CASE("gptq gpu calibration: the CPU's sequential mode, block by block") {
  const tl::ModelConfig cfg = small_config();
  const uint64_t seed = tl::test::test_seed();
  tl::ModelWeights w = tl::random_model_weights(cfg, seed);
  const std::string path = tmp_dir("gptq_gpu_calib") + "/model.tinyloop";
  tl::write_model_tinyloop(w, path, tl::DType::F32);
  const int64_t T = 80, n_seq = 12;  // 960 rows: one chunk; two query and key tiles of the attention
  const std::vector<int32_t> tokens = tl::test::random_tokens(T * n_seq, cfg.vocab, 1);
  std::set<std::string> selected;
  for (const std::string& n : w.linear_names()) selected.insert(n);

  const CalibOut gpu = run_gpu(path, tokens, T, n_seq, selected, false);
  REQUIRE(gpu.results.size() == selected.size());
  // The schedule's order: pre.0.*, pre.1.*, loop.0.*, head.
  std::vector<std::string> expect;
  for (const char* p : {"pre.0", "pre.1", "loop.0"})
    for (const char* n : tl::kBlockLinearNames) expect.push_back(std::string(p) + "." + n);
  expect.push_back("head");
  CHECK(gpu.order == expect);

  // The CPU path on the same schedule, fed the GPU's W_hat after each block, so that both see
  // the same weights upstream of every Hessian (the two GPTQs' codes differ at near-ties, and
  // each difference would move every later Hessian): GPTQ on the CPU with its own Hessians.
  CalibOut cpu;
  tl::calibrate_sequential(w, tokens, T, n_seq, selected, [&](std::map<std::string, tl::Hessian>& hs, tl::ModelWeights& mw) {
    for (auto& [name, h] : hs) {
      tl::LinearWeight* l = mw.find_linear(name);
      cpu.results[name] = tl::gptq_quantize(l->W.data(), l->K, l->N, h.H.data(), calib_options(l->K));
      const tl::GptqResult& g = gpu.results.at(name);
      tl::QuantWeight qw;
      qw.name = name;
      qw.K = l->K;
      qw.N = l->N;
      qw.group_size = g.group_size;
      qw.q = g.q;
      qw.scale = g.scale16;
      qw.zero = g.zero16;
      l->W = qw.dequantize();
      cpu.nsamples[name] = h.nsamples;
      cpu.hessians[name] = h;
    }
  });
  for (const std::string& name : expect) {
    CAPTURE(name);
    CHECK(gpu.nsamples.at(name) == cpu.nsamples.at(name));
    // The GPU's Hessian inputs are fp16 (2^-11 relative per element, ~1e-3 at most on a product
    // of two, far less in a sum over rows); pre.0 sees the same embeddings on both sides. Later
    // blocks also see the GPU forward's fp16 activations (about 8 roundings of 2^-11 per block
    // pass, 5 block passes before the head), against the CPU's fp32 forward: 1e-2.
    const double hd = rel_diff(gpu.hessians.at(name).H, cpu.hessians.at(name).H);
    const bool first = name.rfind("pre.0.", 0) == 0;
    MESSAGE(name << ": Hessian relative difference " << hd);
    CHECK(hd <= (first ? 2e-3 : 1e-2));
    // GPTQ's loss on each side's own Hessian: the same optimization of nearly the same problem.
    const double lg = gpu.results.at(name).loss, lc = cpu.results.at(name).loss;
    CHECK(std::fabs(lg - lc) <= 0.05 * lc);
    CHECK(lg < gpu.results.at(name).rtn_loss);
  }

  // Activations in pinned host memory: the same bytes; and a second run: the same bytes.
  for (bool on_host : {true, false}) {
    CAPTURE(on_host);
    const CalibOut again = run_gpu(path, tokens, T, n_seq, selected, on_host);
    for (const std::string& name : expect) {
      CAPTURE(name);
      CHECK(again.hessians.at(name).H == gpu.hessians.at(name).H);
      CHECK(again.results.at(name).q == gpu.results.at(name).q);
      CHECK(again.results.at(name).scale16 == gpu.results.at(name).scale16);
      CHECK(again.results.at(name).zero16 == gpu.results.at(name).zero16);
    }
  }
}

std::string tmp_dir(const std::string& name) {
  const std::string dir = std::string(TL_TEST_TMP) + "/" + name;
  REQUIRE(std::system(("rm -rf '" + dir + "' && mkdir -p '" + dir + "'").c_str()) == 0);
  return dir;
}

std::vector<char> file_bytes(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return std::vector<char>(std::istreambuf_iterator<char>(f), {});
}

// A random TinyLoop model (fp16 .tinyloop) and 600 calibration tokens in a fresh folder, and the
// tool's options for a sequential GPTQ run on them (15 windows of 40 tokens).
struct ToolModel {
  tl::ModelConfig cfg = small_config();
  std::string dir, model, toks;
  ToolModel(const std::string& name, uint64_t seed) : dir(tmp_dir(name)), model(dir + "/model.tinyloop"),
                                                      toks(dir + "/tokens.u32") {
    tl::write_model_tinyloop(tl::random_model_weights(cfg, tl::test::test_seed() + seed), model, tl::DType::F16);
    tl::write_token_file_u32(toks, tl::test::random_tokens(600, cfg.vocab, seed + 4));
  }
  tl::GptqQuantizeOptions options(const std::string& out) const {
    tl::GptqQuantizeOptions o;
    o.input = model;
    o.output = out;
    o.calib_tokens = toks;
    o.calib_seq = 40;
    o.calib_samples = 15;
    o.quiet = true;
    return o;
  }
};

TEST_CASE("gptq-quantize --device cuda: the same bytes on every run, the CPU path beside it") {
  const ToolModel tm("gptq_gpu_tool", 7);
  const tl::ModelConfig& cfg = tm.cfg;
  const std::string& dir = tm.dir;
  auto dev = tl::gpu::make_gptq_device();
  auto run = [&](const std::string& device, const std::string& out, uint64_t max_memory = 0,
                 const std::string& save_calib = "") {
    tl::GptqQuantizeOptions o = tm.options(out);
    o.group_size = tl::GroupSize::per_row();
    o.device = device;
    o.gpu = dev.get();
    o.threads = 2;
    o.max_memory = max_memory;
    o.save_calib = save_calib;
    return tl::run_gptq_quantize(o);
  };
  // Admission before any work: the host formula of the streamed path, with its numbers.
  CHECK_THROWS_WITH(run("cuda", dir + "/gpu_tool_small.tinyloop", 1 << 16),
                    doctest::Contains("streaming block by block: 2 x one block in float32"));
  REQUIRE(run("cuda", dir + "/gpu_tool_a.tinyloop") == 0);
  REQUIRE(run("cuda", dir + "/gpu_tool_b.tinyloop", 0, dir + "/gpu_tool_calib.h5") == 0);
  REQUIRE(run("cpu", dir + "/gpu_tool_cpu.tinyloop") == 0);
  const std::vector<char> a = file_bytes(dir + "/gpu_tool_a.tinyloop"), b = file_bytes(dir + "/gpu_tool_b.tinyloop");
  CHECK(a.size() > 10000);
  CHECK(a == b);
  // --save-calib on the GPU: every selected weight's Hessian, symmetric, with its sample count.
  const tl::CalibReader calib(dir + "/gpu_tool_calib.h5");
  CHECK(calib.names().size() == 15);  // 3 blocks x 5 linears
  const tl::Hessian h = calib.read("loop.0.mlp_down");
  CHECK(h.K == cfg.ffn);
  CHECK(h.nsamples == 15 * cfg.loops);  // 15 windows, every loop iteration
  bool symmetric = true;
  for (int64_t i = 0; i < h.K; ++i)
    for (int64_t j = 0; j < i; ++j) symmetric = symmetric && h.H[size_t(i * h.K + j)] == h.H[size_t(j * h.K + i)];
  CHECK(symmetric);
  // Both devices write every block linear, readable as a model.
  for (const char* f : {"/gpu_tool_a.tinyloop", "/gpu_tool_cpu.tinyloop"}) {
    const tl::ModelWeights q = tl::load_model_weights(dir + f, false);
    CHECK(bool(q.pre[1].mlp_down.quant));
    CHECK(bool(q.loop[0].attn_qkv.quant));
  }
}

// A GPU that fails mid-run (the fault hook: a kernel launch three quarters into the run fails;
// launches, unlike allocations, are spread evenly over the blocks) on a
// .tinyloop model (HDF5 reads beside the writer): exit-2 error naming the kept stages, the
// journal there, no output; then --resume without the fault writes the uninterrupted run's bytes.
TEST_CASE("gptq-quantize --device cuda --resume after a GPU fault, on a .tinyloop model: the same bytes") {
  const ToolModel tm("gptq_gpu_fault_resume", 9);
  const std::string& dir = tm.dir;
  auto dev = tl::gpu::make_gptq_device();
  auto run = [&](const std::string& out, bool resume) {
    tl::GptqQuantizeOptions o = tm.options(out);
    o.group_size = tl::GroupSize::rows(32);  // divides both K of small_config (64, 160)
    o.device = "cuda";
    o.gpu = dev.get();
    o.resume = resume;
    return tl::run_gptq_quantize(o);
  };
  struct HookOff {
    ~HookOff() { tl::cuda::set_fault_injection({}); }
  } off;
  REQUIRE(run(dir + "/warm.tinyloop", false) == 0);  // the process's scratch and handles exist now
  const int64_t l0 = tl::cuda::fault_counts().launches;
  REQUIRE(run(dir + "/ref.tinyloop", false) == 0);
  const int64_t per_run = tl::cuda::fault_counts().launches - l0;
  REQUIRE(per_run >= 40);
  const std::string out = dir + "/out.tinyloop";
  tl::cuda::set_fault_injection({tl::FaultPlan::Kind::kLaunch, tl::cuda::fault_counts().launches + per_run * 3 / 4});
  std::string what;
  try {
    run(out, false);
  } catch (const tl::Error& e) {
    what = e.what();
  }
  tl::cuda::set_fault_injection({});
  CAPTURE(what);
  CHECK(what.find("injected by TL_FAULT_INJECT=launch:") != std::string::npos);
  CHECK(what.find("completed stage(s) kept in " + out + ".journal: the same command with --resume continues") !=
        std::string::npos);
  CHECK(!std::ifstream(out).good());
  CHECK(std::ifstream(out + ".journal/journal.json").good());
  REQUIRE(run(out, true) == 0);
  CHECK(file_bytes(out) == file_bytes(dir + "/ref.tinyloop"));
  CHECK(!std::ifstream(out + ".journal/journal.json").good());
}

}  // namespace

namespace {

TEST_CASE("gptq gpu calibration: bad input is an error before any work") {
  const tl::ModelConfig cfg = small_config();
  const tl::ModelWeights w = tl::random_model_weights(cfg, 5);
  const std::string path = tmp_dir("gptq_gpu_bad") + "/model.tinyloop";
  tl::write_model_tinyloop(w, path, tl::DType::F16);
  auto dev = tl::gpu::make_gptq_device();
  tl::SequentialCalls calls;
  calls.options = [](const std::string&, int64_t K) { return calib_options(K); };
  calls.quantized = [](const std::string&, tl::GptqResult&&, int64_t, double) { FAIL("nothing may be quantized"); };
  std::vector<int32_t> tokens(64, 1);
  tokens[37] = int32_t(cfg.vocab);  // one id past the vocabulary
  CHECK_THROWS_WITH(dev->calibrate(tl::ModelSource(path, false), tokens, 16, 4, {"pre.0.attn_qkv"}, calls, nullptr),
                    doctest::Contains("token id 300 outside [0, 300)"));
  tokens[37] = 1;
  CHECK_THROWS_WITH(dev->calibrate(tl::ModelSource(path, false), tokens, 16, 4, {"embed"}, calls, nullptr),
                    doctest::Contains("not a linear weight"));
  CHECK_THROWS_WITH(dev->calibrate(tl::ModelSource(path, false), tokens, 16, 5, {"pre.0.attn_qkv"}, calls, nullptr),
                    doctest::Contains("needs 5 windows of 16 tokens"));
}

}  // namespace
