// Calibration from tokens: GPTQ's sequential mode on the CPU forward (model_forward.h).
//
// The model runs on `n_seq` windows of `seq_len` tokens, block by block in execution order:
//   x = embed(tokens)
//   for each distinct block i (pre.0, pre.1, ...):
//     run block i on x with the fp weights, accumulating the Hessian of each selected linear
//     weight from its inputs; hand the Hessians to `quantize` (which replaces the block's
//     weights by W_hat); re-run block i on the same x with W_hat -> the next block's input.
//   the loop blocks: run the whole loop schedule (loops x n_loop steps) with fp weights, each
//     loop block's Hessians accumulating over every iteration it runs; quantize them; re-run the
//     schedule with W_hat -> the head's input.
//   head (only when selected): its Hessian from the final RMSNorm output.
// So block i + 1 is calibrated on the outputs of the already quantized block i, as upstream
// GPTQ's sequential llama.py does (one add_batch per forward call; a call of n_seq windows
// counts n_seq samples, so H = 2/n * sum x x^T over every row seen).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "formats/calib_file.h"
#include "libconvert/model_weights.h"

namespace tl {

// Quantizes the weights named in `hessians` (all of one block, or all loop blocks) and writes
// W_hat into `w` (w.find_linear(name)->W) before returning.
using QuantizeBlock = std::function<void(std::map<std::string, Hessian>& hessians, ModelWeights& w)>;

struct TokenCalibration {
  int64_t n_seq = 0, seq_len = 0;
};

// Peak bytes of calibrate_sequential beyond the model's float32 weights, for `rows` = windows x
// seq_len rows: the block input and its saved copy, one block's activations (norm output,
// q|k|v, attention output, gate and up), one block's Hessians twice (accumulators and the
// handed-out copies), and with the head selected the [rows, vocab] logits.
uint64_t calibration_peak_bytes(const ModelConfig& c, int64_t rows, bool head_selected);

// What calibrate_sequential tells its caller as it goes (each may be empty).
struct CalibrationEvents {
  std::function<void(const std::string&)> log;  // one line per stage
  std::function<void(double)> planned;          // the FLOPs of every forward pass, once, first
  std::function<void(double)> forward_done;     // the FLOPs of the pass that just finished
};

// The FLOPs of one forward pass of a block's linears over `rows` rows (2 x rows x parameters;
// attention and norms are a few percent at calibration lengths and are left out).
double block_forward_flops(const ModelConfig& c, int64_t rows);

// True when a weight of the block with this prefix ("pre.3", "loop.0") is selected.
bool block_selected(const std::string& prefix, const std::set<std::string>& selected);
// The FLOPs of every forward pass a sequential calibration runs over `rows` rows, counted the
// way both paths run them: a selected distinct block twice (original weights with Hessians,
// then W_hat), an unselected one once; the loop stack once per iteration when a loop weight is
// selected, and again before the head's Hessian when the head is.
double calibration_forward_flops(const ModelConfig& c, int64_t rows, const std::set<std::string>& selected);

// The stage of the calibration that quantizes a weight: "pre.<i>" for a distinct block's
// weights, "loop" for every shared loop block's (quantized together), "head".
std::string calibration_stage(const std::string& weight_name);

// tokens: at least seq_len tokens; the first min(max_seq, tokens / seq_len) windows are used.
// `selected`: linear weight names to calibrate and quantize; others keep their fp weights.
// `resumed`: stages already quantized (gptq_journal.h) whose weights in `w` hold W_hat: their
// blocks run once with W_hat (the activations the quantizing run left behind them), no Hessians,
// no `quantize` call. Throws tl::Error for bad arguments.
TokenCalibration calibrate_sequential(ModelWeights& w, const std::vector<int32_t>& tokens,
                                      int64_t seq_len, int64_t max_seq,
                                      const std::set<std::string>& selected,
                                      const QuantizeBlock& quantize, const CalibrationEvents& events = {},
                                      const std::set<std::string>& resumed = {});

}  // namespace tl
