#include "libconvert/token_calibration.h"

#include <chrono>
#include <cstdio>
#include <memory>

#include "core/error.h"
#include "libconvert/hessian.h"
#include "libconvert/model_forward.h"

namespace tl {

namespace {

// Accumulates the Hessians of the selected weights that a forward stage reports. mlp_gate and
// mlp_up read the same input, so only mlp_gate's is accumulated when both are selected and
// mlp_up's is copied from it (half the X^T X work of the MLP input).
class HessianSet {
 public:
  HessianSet(const std::set<std::string>& selected, int64_t n_seq) : selected_(selected), n_seq_(n_seq) {}

  LinearInputHook hook() {
    return [this](const std::string& name, const float* X, int64_t rows, int64_t K) {
      if (!selected_.count(name)) return;
      if (shares_gate_input(name)) return;
      auto& acc = acc_[name];
      if (!acc) acc = std::make_unique<HessianAccumulator>(K);
      acc->add_batch(X, rows, n_seq_);
    };
  }

  // Moves the accumulated Hessians out (mlp_up filled from mlp_gate where shared).
  std::map<std::string, Hessian> take() {
    std::map<std::string, Hessian> out;
    for (auto& [name, acc] : acc_) {
      Hessian h;
      h.name = name;
      h.K = acc->K();
      h.nsamples = acc->nsamples();
      h.H.assign(acc->H().data(), acc->H().data() + acc->H().size());
      const std::string up = up_of_gate(name);
      if (!up.empty() && selected_.count(up)) {
        Hessian hu = h;
        hu.name = up;
        out.emplace(up, std::move(hu));
      }
      out.emplace(name, std::move(h));
    }
    acc_.clear();
    return out;
  }

 private:
  static bool ends_with(const std::string& s, const std::string& suffix) {
    return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
  }
  static std::string up_of_gate(const std::string& name) {
    return ends_with(name, ".mlp_gate") ? name.substr(0, name.size() - 4) + "up" : "";
  }
  bool shares_gate_input(const std::string& name) const {
    if (!ends_with(name, ".mlp_up")) return false;
    return selected_.count(name.substr(0, name.size() - 2) + "gate") > 0;
  }

  const std::set<std::string>& selected_;
  int64_t n_seq_;
  std::map<std::string, std::unique_ptr<HessianAccumulator>> acc_;
};

bool block_has_selected(const BlockWeights& b, const std::set<std::string>& selected) {
  return block_selected(b.prefix, selected);
}

}  // namespace

uint64_t calibration_peak_bytes(const ModelConfig& c, int64_t rows, bool head_selected) {
  const uint64_t r = uint64_t(rows), D = uint64_t(c.d_model), F = uint64_t(c.ffn);
  const uint64_t qkv = uint64_t(c.n_heads + 2 * c.n_kv_heads) * uint64_t(c.d_head), att = uint64_t(c.n_heads * c.d_head);
  const uint64_t acts = r * (3 * D + qkv + att + 2 * F);        // x, x_in, h | qkv | attention | gate, up
  const uint64_t hess = 2 * (3 * D * D + att * att + F * F);   // qkv, gate, up, out, down; twice
  const uint64_t logits = head_selected ? r * uint64_t(c.vocab) : 0;
  return 4 * (acts + hess + logits);
}

bool block_selected(const std::string& prefix, const std::set<std::string>& selected) {
  for (const char* n : kBlockLinearNames)
    if (selected.count(prefix + "." + n)) return true;
  return false;
}

double calibration_forward_flops(const ModelConfig& c, int64_t rows, const std::set<std::string>& selected) {
  const double pass = block_forward_flops(c, rows);
  double plan = 0;
  for (int64_t i = 0; i < c.n_pre; ++i) plan += pass * (block_selected(block_prefix(false, i), selected) ? 2 : 1);
  bool loop_selected = false;
  for (int64_t j = 0; j < c.n_loop; ++j) loop_selected = loop_selected || block_selected(block_prefix(true, j), selected);
  const double loop_pass = pass * double(c.loops) * double(c.n_loop);
  if (loop_selected) plan += loop_pass;
  if (selected.count("head")) plan += loop_pass;
  return plan;
}

double block_forward_flops(const ModelConfig& c, int64_t rows) {
  const double D = double(c.d_model), F = double(c.ffn);
  const double qkv = double(c.n_heads + 2 * c.n_kv_heads) * double(c.d_head), att = double(c.n_heads * c.d_head);
  return 2.0 * double(rows) * (D * qkv + att * D + 3.0 * D * F);
}

std::string calibration_stage(const std::string& weight_name) {
  if (weight_name.rfind("loop.", 0) == 0) return "loop";
  if (weight_name.rfind("pre.", 0) == 0) {
    const size_t dot = weight_name.find('.', 4);
    return weight_name.substr(0, dot);
  }
  return weight_name;  // "head"
}

TokenCalibration calibrate_sequential(ModelWeights& w, const std::vector<int32_t>& tokens,
                                      int64_t seq_len, int64_t max_seq,
                                      const std::set<std::string>& selected,
                                      const QuantizeBlock& quantize, const CalibrationEvents& events,
                                      const std::set<std::string>& resumed) {
  const auto& log = events.log;
  if (seq_len <= 0) throw Error("calibration window length must be positive");
  if (int64_t(tokens.size()) < seq_len)
    throw Error("calibration needs at least one window of " + std::to_string(seq_len) + " tokens, got " +
                std::to_string(tokens.size()));
  for (const std::string& name : selected)
    if (!w.find_linear(name))
      throw Error("selected weight is not a linear weight of the model's forward pass", "", name);
  TokenCalibration tc;
  tc.seq_len = seq_len;
  tc.n_seq = std::min<int64_t>(max_seq > 0 ? max_seq : INT64_MAX, int64_t(tokens.size()) / seq_len);
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  auto t_step = t0;
  // One line per stage: what ran, its own time and the time since the start.
  auto say = [&](const std::string& what) {
    if (!log) return;
    const auto now = Clock::now();
    char b[80];
    std::snprintf(b, sizeof b, " (%.1fs; %.1fs in all)", std::chrono::duration<double>(now - t_step).count(),
                  std::chrono::duration<double>(now - t0).count());
    t_step = now;
    log(what + b);
  };
  // Said before a stage that takes a while, so a long forward is never silent.
  auto starting = [&](const std::string& what) {
    if (log) log(what + " ...");
  };
  const ModelConfig& c = w.config;
  // The passes below, counted the way they run: a selected distinct block twice (original
  // weights with Hessians, then quantized), an unselected one once; the loop stack once per
  // iteration with Hessians, and again before the head's Hessian.
  const double pass = block_forward_flops(c, tc.n_seq * seq_len);
  bool loop_selected = false;
  for (const BlockWeights& b : w.loop) loop_selected = loop_selected || block_has_selected(b, selected);
  const double loop_pass = pass * double(c.loops) * double(w.loop.size());
  auto forward_done = [&](double flops) {
    if (events.forward_done) events.forward_done(flops);
  };
  if (events.planned) events.planned(calibration_forward_flops(c, tc.n_seq * seq_len, selected));
  ActMatrix x = embed_tokens(w, tokens.data(), tc.n_seq * seq_len);
  say("calibration: " + std::to_string(tc.n_seq) + " windows x " + std::to_string(seq_len) + " tokens embedded");

  // Distinct blocks, one at a time.
  for (BlockWeights& b : w.pre) {
    if (!block_has_selected(b, selected)) {
      run_block(c, b, x, seq_len);
      forward_done(pass);
      continue;
    }
    if (resumed.count(b.prefix)) {
      // Quantized by the interrupted run: its W_hat is in place; the pass with the original
      // weights is not needed (it is counted as done, so the plan stays the same).
      forward_done(pass);
      run_block(c, b, x, seq_len);
      forward_done(pass);
      say(b.prefix + " resumed from the journal (forward with the quantized weights)");
      continue;
    }
    starting(b.prefix + ": forward with the original weights, Hessians");
    HessianSet hs(selected, tc.n_seq);
    ActMatrix x_in = x;
    run_block(c, b, x, seq_len, hs.hook());
    forward_done(pass);
    auto hessians = hs.take();
    quantize(hessians, w);
    x = std::move(x_in);
    starting(b.prefix + ": forward with the quantized weights");
    run_block(c, b, x, seq_len);  // with W_hat: the next block sees quantized outputs
    forward_done(pass);
    say(b.prefix + " calibrated and quantized");
  }

  // The shared loop blocks: Hessians over every iteration, then one quantization.
  auto run_loops = [&](ActMatrix& xs, const LinearInputHook& hook) {
    for (int64_t it = 0; it < c.loops; ++it)
      for (BlockWeights& b : w.loop) run_block(c, b, xs, seq_len, hook);
  };
  if (loop_selected && resumed.count("loop")) {
    forward_done(loop_pass);
    say("loop blocks resumed from the journal");
  } else if (loop_selected) {
    starting("loop blocks: forward over " + std::to_string(c.loops) + " iterations, Hessians");
    HessianSet hs(selected, tc.n_seq);
    ActMatrix x_in = x;
    run_loops(x, hs.hook());
    forward_done(loop_pass);
    auto hessians = hs.take();
    quantize(hessians, w);
    x = std::move(x_in);
    say("loop blocks calibrated over " + std::to_string(c.loops) + " iterations and quantized");
  }
  if (selected.count("head") && !resumed.count("head")) {
    starting("head: forward to the final norm, Hessian");
    run_loops(x, {});
    forward_done(loop_pass);
    HessianSet hs(selected, tc.n_seq);
    final_logits(w, x, hs.hook());
    auto hessians = hs.take();
    quantize(hessians, w);
    say("head calibrated and quantized");
  }
  return tc;
}

}  // namespace tl
