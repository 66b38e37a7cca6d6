// The e2e tier of tl-verify: perplexity of a quantized .tinyloop, how far it is from the model
// it was made from (--reference), and how far apart its kernel paths are.
//
// On the GPU (--device cuda, or auto with a usable GPU) the file runs through the three GEMM
// paths of the dispatcher:
//   fp16     every quantized weight's W_hat = q * scale + zero as an fp16 copy (cuBLAS): what
//            the kernel paths are measured against (same weights, no int4 kernel)
//   native   Marlin dispatch off: int4_gemm on TinyLoop's q / scale / zero
//   marlin   Marlin dispatch on: marlin_mm_asymmetric where a weight is packed, else fallback
// On the CPU (--device cpu, or auto without a GPU) it runs libconvert's fp32 forward on W_hat,
// the one path named native (device "cpu"), window by window on every core.
//
// With --reference ORIG (the original checkpoint: an HF folder, a .safetensors file or a dense
// .tinyloop, imported as gptq-quantize imports it) the reference runs on the same windows and
// device with its dense weights, and every path of FILE (and of --baseline) is reported against
// it (drift_stats.h): PPL ratio and ln ratio +- error, KLD(reference || path) distribution, top-1
// agreement, delta p. --per-layer swaps one quantized weight (W_hat) at a time into the
// reference on the first per_layer_windows windows and ranks the weights by the KLD each adds.
//
// Reported per path besides: PPL +- error (perplexity.h), on the GPU KL divergence against the
// fp16 path (mean, p99, max), top-1 agreement, dispatch counts per GEMM path and the reasons of
// every fallback; per model: weights packed, the VRAM the Marlin sections add, the dispatcher's
// first-dispatch line, and a CPU check (a prefix of window 0 through the CPU forward vs the GPU
// fp16 path).
// drift % = (PPL_marlin / PPL_native - 1) * 100.
//
// Modes (--e2e-mode; libconvert/model_forward.h ForwardMode): prefill scores batches of windows
// with every linear at M = windows x ctx (the tiled / Hopper kernels or the floor); decode scores
// --decode-batch B windows in lockstep, every linear once per position at M = B (the decode
// kernel, 1 <= B <= 16), attention over each position's keys: what a runtime generating B
// sequences runs. auto: both on the GPU, prefill on the CPU (whose decode re-reads every weight
// once per position). Each path row names its mode and the GEMMs each kernel ran; a decode row's
// PPL must match the prefill row of its path within kE2eDecodeMaxPplPct.
// Pass (GPU): |drift| <= max_drift_pct, mean KLD(fp16 || native) and mean KLD(fp16 || marlin) <=
// max_kld, and the CPU check within kE2eCpuCheckMaxRel. With a reference, on any device:
// PPL ratio <= max_ppl_ratio and mean KLD(reference || path) <= max_ref_kld for FILE's paths
// where those bounds are set (> 0). A --baseline file (e.g. an RTN quantization of the same
// model) is scored on the same windows and reported beside it (not gated).
//
// Skips (status kSkipped, reason): --device cuda without a usable GPU, no quantized weight in
// the file. Bad input (unreadable file, bad tokens, ctx larger than the stream, a reference or
// baseline of another shape, ...) throws tl::Error before any scoring.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "libverify/drift_stats.h"
#include "libgpu/model_gpu.h"
#include "libverify/perplexity.h"
#include "libverify/tolerances.h"
#include "libverify/verify_report.h"

namespace tl::verify {

// The e2e bounds (kE2eMaxDriftPct, kE2eMaxMeanKld, kE2eCpuCheckMaxRel, kE2eDecodeMaxPplPct) and the
// decode batch are in tolerances.h with the kernel tiers' bounds.

enum class E2eDevice { kAuto, kCpu, kCuda };
const char* e2e_device_name(E2eDevice d);  // "auto", "cpu", "cuda"
E2eDevice parse_e2e_device(const std::string& s);  // tl::Error naming --device

enum class E2eMode { kAuto, kPrefill, kDecode, kBoth };
const char* e2e_mode_name(E2eMode m);        // "auto", "prefill", "decode", "both"
E2eMode parse_e2e_mode(const std::string& s);  // tl::Error naming --e2e-mode
// The forward modes a run scores, in order (auto: both on the GPU, prefill on the CPU).
std::vector<ForwardMode> e2e_forward_modes(E2eMode m, bool on_gpu);

struct E2eOptions {
  std::string file;            // the quantized (ideally Marlin-packed) .tinyloop, or a quantized folder
  std::shared_ptr<const TinyloopReader> opened;  // FILE, when the caller has it open (else opened by path)
  std::string tokens;          // token file (formats/token_file.h), or:
  std::string text;            // a UTF-8 text file, tokenized with `tokenizer` (text/text_tokens.h)
  std::string tokenizer;       // the folder of tokenizer.model; empty: --reference when it is a folder
  bool has_eval_input() const { return !tokens.empty() || !text.empty(); }
  std::string baseline;        // optional second .tinyloop scored beside it
  std::string reference;       // optional original checkpoint the paths are measured against
  E2eDevice device = E2eDevice::kAuto;
  ScoreMode score = ScoreMode::kSecondHalf;
  bool per_layer = false;      // rank the quantized weights by the KLD each adds (needs reference)
  int64_t per_layer_windows = 8;
  double max_ppl_ratio = 0;    // > 0: bound on PPL(FILE path) / PPL(reference)
  double max_ref_kld = 0;      // > 0: bound on mean KLD(reference || FILE path)
  int threads = 0;             // CPU forward threads (0: every core)
  int64_t ctx = 512;           // window length (capped by the model's max_seq only by choice)
  int64_t stride = 0;          // 0 = ctx
  int64_t max_tokens = 0;      // 0 = the whole stream
  int64_t batch = 16;          // windows per forward (M = batch * ctx rows per GEMM); a run with
                               // decode scores batches of decode_batch windows in both modes
  E2eMode mode = E2eMode::kAuto;
  int64_t decode_batch = kE2eMaxDecodeBatch;  // decode: windows in lockstep, M = decode_batch
  double max_drift_pct = kE2eMaxDriftPct;
  double max_kld = kE2eMaxMeanKld;
  // The CPU check: the first cpu_check_tokens tokens of window 0 (at most ctx) through the CPU
  // forward against the GPU fp16 path; 0: off. A prefix bounds its cost on large models (the CPU
  // forward of a 7B model runs ~0.1 s per token on 16 cores) while its logits (tokens x vocab
  // values) still measure the runner's error.
  int64_t cpu_check_tokens = 16;
  cuda::KernelOptions kernel = cuda::runtime_kernel_options();  // the GPU paths' launcher options
  std::ostream* progress = nullptr;  // progress lines (every 10 % or 10 s without a terminal), ETA
  std::string tool;                  // the caller's name: the prefix of its lines, the reports' "tool"
};

// The e2e tier's numeric options, defined once: the range each must be in, why, and where it
// lives in E2eOptions. tl-verify's --help shows the ranges from here and run_e2e_tier refuses a
// value outside one (exit 2, naming the flag) before anything is read.
struct E2eOptionRule {
  const char* flag;        // "--decode-batch"
  double min, max;         // inclusive
  const char* why;         // "the decode kernel's M"
  double (*get)(const E2eOptions&);
  void (*set)(E2eOptions&, double);    // for the tests that walk the table
  bool (*applies)(const E2eOptions&);  // null: always
};
const std::vector<E2eOptionRule>& e2e_option_rules();
std::string e2e_option_range(const char* flag);  // "1..16", ">= 1" for --help
void validate_e2e_options(const E2eOptions& o);   // tl::Error naming the first flag out of range

struct E2ePathRow {
  gpu::GpuPath path = gpu::GpuPath::kFp16;
  ForwardMode mode = ForwardMode::kPrefill;
  std::string device = "cuda"; // "cuda" or "cpu"
  PathSummary s;               // PPL, and on the GPU KLD vs the fp16 path, top-1 agreement
  PathTrace trace;             // per scored token (KLD against the reference, when there is one)
  bool has_ref = false;        // vs_ref below is meaningful
  RefComparison vs_ref;
  double seconds = 0;
  long long dispatches[3] = {0, 0, 0};          // GEMM calls per tl::cuda::GemmPath
  std::map<std::string, long long> fallbacks;   // reason -> calls (Marlin wanted, not taken)
  // GEMM calls per kernel that ran them: "marlin-decode", "marlin-tiled", "marlin-hopper",
  // "marlin-dequant" (the floor), "native-int4", "native-dequant" (the native floor),
  // "cublas-fp16"; on the CPU "cpu-fp32".
  std::map<std::string, long long> kernels;
  int64_t gemm_m = 0;                           // rows of each GEMM (the head's too)
  bool has_vs_prefill = false;                  // decode rows: the prefill row of the path exists
  double vs_prefill_pct = 0;                    // (PPL / PPL of that prefill row - 1) * 100
};

struct E2eModelResult {
  std::string file;
  gpu::GpuModelInfo info;
  std::vector<E2ePathRow> rows;      // fp16, native, marlin (those the file supports)
  bool has_drift = false;
  double drift_pct = 0;              // (PPL_marlin / PPL_native - 1) * 100
  std::string first_dispatch_line;
  bool cpu_checked = false;
  double cpu_max_abs = 0, cpu_rel = 0;  // GPU fp16 path vs CPU forward, a prefix of window 0
  int64_t cpu_check_tokens = 0;
  double cpu_check_seconds = 0;
  const E2ePathRow* row(gpu::GpuPath p, ForwardMode mode = ForwardMode::kPrefill) const;
};

struct E2eReference {
  std::string source;          // the path given to --reference
  NllSummary nll;              // its PPL on the run's windows
  PathTrace trace;
  double seconds = 0;
};

// One quantized weight swapped into the reference, alone (--per-layer).
struct LayerDrift {
  std::string weight;
  double kld_mean = 0, kld_mean_err = 0, ln_ppl_ratio = 0;
  int64_t n = 0;               // tokens scored
};

struct E2eResult {
  Status status = Status::kSkipped;
  std::string reason;                // skip reason, or the failed checks joined by "; "
  std::vector<std::string> failures;
  E2eOptions options;                // bounds in force
  int64_t n_tokens = 0;              // tokens in the file
  int64_t windows = 0, scored = 0, first_target = 0;
  std::string device;                // "NVIDIA H200 (sm_90)" or "CPU (N threads)"
  std::string device_kind;           // "cuda" or "cpu"
  std::vector<ForwardMode> modes;    // the modes scored, in order (e2e_forward_modes)
  E2eModelResult main;
  std::optional<E2eModelResult> baseline;
  std::optional<E2eReference> reference;
  std::vector<LayerDrift> per_layer;  // worst first
  int64_t per_layer_windows = 0;
  double tokens_per_second = 0;      // forward tokens (every window position) per second, per path
  double seconds = 0;
};

E2eResult run_e2e_tier(const E2eOptions& options);

// A row's name in reports and failures: "marlin", "native-int4", "fp16", "native" (CPU), with
// " decode" for decode rows.
std::string row_name(const E2ePathRow& row);
// "marlin-decode 448, cublas-fp16 16": the GEMMs each kernel ran, or "none".
std::string kernel_counts_text(const E2ePathRow& row);

// Why --device auto would not use the GPU here (empty: it would).
std::string e2e_gpu_unavailable_reason();

// The same result in the tier framework's form: one case per (model, path), message holding
// PPL / KLD / dispatch counts (no ULP statistics: has_stats = false).
TierResult e2e_tier_result(const E2eResult& r);

// Logits dump for cross-checks (tools/hf_llama_crosscheck.py): the first n_seq windows of ctx
// tokens of `tokens_path` through the model at `model_path` (a .tinyloop or an HF folder),
// written to `out_npy` as float32 [paths, n_seq * ctx, vocab] with paths = cpu (fp32 forward)
// and, when a GPU is usable, gpu-fp16. Returns the path names in order. Atomic output.
std::vector<std::string> dump_logits(const std::string& model_path, const std::string& tokens_path,
                                     int64_t ctx, int64_t n_seq, const std::string& out_npy);

}  // namespace tl::verify
