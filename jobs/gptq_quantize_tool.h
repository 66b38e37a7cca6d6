// The whole job of the `gptq-quantize` tool, callable in-process (tests) and from the thin main
// in apps/gptq_quantize.cpp:
//
//   input checkpoint (checkpoint_import.h) -> every selected linear weight quantized with GPTQ
//   (gptq.h, Hessians from --calib) or RTN (minmax_quantizer.h) -> .tinyloop with QuantWeight
//   entries (codes, float16 scale/zero, provenance) and every other tensor + the config.
//
// Streaming: worker threads each take one weight at a time (read -> quantize -> write), so peak
// memory is a few weights, never the model. Threads: min(threads, weights) workers; each
// weight's column chunks use threads / workers threads. Weights are written in input order
// whatever finishes first, so the output bytes do not depend on the thread count. HDF5 (the
// .tinyloop input, the calibration file and the output) is used under one lock.
//
// Marlin: every selected weight is checked against the Marlin gate (core/group_size.h) up
// front; those that fail are named in one warning line at the end of the run, beside the summary
// (and in --json), or with --for marlin the run stops there (exit 2) -- a group size of 64 is
// legal, but marlin-pack will skip it.
//
// Before any work: every option, every input (outputs may not alias them, docs/format.md) and
// the memory estimate (--max-memory or the available memory; the sequential --calib-tokens
// path holds the whole model in float32) are checked.
//
// Device: GPTQ (with --calib or --calib-tokens) runs on `gpu` when --device is cuda (no usable
// GPU: exit 2 with its reason) or auto and it can run (else the CPU path, and a line says so).
// The GPU path with --calib-tokens streams the model block by block (libgpu/gptq_device.h) and
// writes each block's weights as soon as they exist; its output codes differ from the CPU's
// only at near-ties of round() (docs/gptq.md "GPU"). RTN always runs on the CPU.
//
// Resume: a sequential calibration on either device (without --save-calib) keeps a journal
// beside the output (OUTPUT.journal, gptq_journal.h) and removes it once the output is committed;
// after an interruption the same command with --resume continues from the last completed stage
// and writes the same bytes.
//
// Errors are tl::Error (exit 2 at the tool boundary): gptq without --calib, missing Hessians
// (all listed), a Hessian of the wrong size, a Hessian that stays not positive definite, bad
// input. The output is written to a temporary file and renamed into place only on success.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/group_size.h"
#include "libconvert/minmax_quantizer.h"

namespace tl {
class GptqDevice;
}

namespace tl {

struct GptqQuantizeOptions {
  std::string input;                 // HF folder, .safetensors or .tinyloop
  std::string output;                // .tinyloop to write
  std::string calib;                 // calibration .h5 (formats/calib_file.h); gptq needs it
  std::string calib_tokens;          // or: token file; calibrate sequentially on the CPU forward
  std::string calib_text;            // or: a UTF-8 text, tokenized with `tokenizer` (text/text_tokens.h)
  std::string tokenizer;             // the folder of tokenizer.model; empty: INPUT when it is a folder
  bool sequential() const { return !calib_tokens.empty() || !calib_text.empty(); }
  const std::string& calib_source() const { return calib_text.empty() ? calib_tokens : calib_text; }
  int64_t calib_seq = 512;           // tokens per calibration window
  int64_t calib_samples = 128;       // windows used (at most)
  std::string save_calib;            // with calib_tokens: write the Hessians here (.h5)
  bool resume = false;               // continue an interrupted sequential run (gptq_journal.h)
  std::string method = "gptq";       // "gptq" or "rtn"
  std::string only;                  // regex selecting the linear weights (see checkpoint_import.h)
  GroupSize group_size;              // core/group_size.h: 32..256 or per row
  double damp = 0.01;                // fraction of mean(diag H)
  int64_t block_size = 128;
  bool act_order = false;            // with groups: static groups (contiguous, Marlin-compatible)
  ZeroMode zero_mode = ZeroMode::kInt;
  bool range_search = false;         // --range-search: each group's range searched (minmax_quantizer.h)
  int threads = 0;                   // 0: all cores
  uint64_t max_memory = 0;           // bytes; 0: the available memory (formats/memory_budget.h)
  bool for_marlin = false;           // --for marlin: a weight the Marlin kernel cannot run is an error
  bool drop_unselected = false;      // write only the quantized weights (+ the config), no dense copy
  bool json = false;                 // summary JSON on stdout
  bool quiet = false;                // no progress or summary on stderr
  bool rtn_compare = true;           // compute RTN's loss for every GPTQ weight (~K^2 N flops)
  std::string device = "auto";       // where GPTQ runs: cpu, cuda, or auto (a usable GPU, else the CPU)
  GptqDevice* gpu = nullptr;         // the GPU (libgpu's make_gptq_device); null: none in this build
  const char* tool = "gptq-quantize";  // prefix of log lines
};

// Returns the exit code (0); throws tl::Error for bad input / usage.
int run_gptq_quantize(const GptqQuantizeOptions& opt);

}  // namespace tl
