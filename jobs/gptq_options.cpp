// gptq-quantize's command line and its --resume table (gptq_options.h).
#include "jobs/gptq_options.h"

#include <dirent.h>
#include <sys/stat.h>

#include <CLI/CLI.hpp>

#include "core/error.h"
#include "core/version.h"
#include "formats/file_check.h"
#include "formats/memory_budget.h"
#include "libconvert/gptq_backend.h"

namespace tl {

void add_gptq_quantize_options(CLI::App& app, GptqCli& cli) {
  GptqQuantizeOptions& o = cli.o;
  app.add_option("input", o.input, "HF folder (config.json + safetensors), .safetensors, or fp16 .tinyloop")
      ->required();
  app.add_option("-o,--output", o.output, "output .tinyloop (written atomically)")->required();
  app.add_option("--calib", o.calib, "calibration .h5 with /hessian/<weight> (required by --method gptq)");
  auto* calib_tokens = app.add_option("--calib-tokens", o.calib_tokens,
                                      "token file (.u32 / .npy): run the model and calibrate block by block (GPTQ's "
                                      "sequential mode)")
                           ->check(CLI::ExistingFile);
  app.add_option("--calib-text", o.calib_text,
                 "a UTF-8 text instead, tokenized with the model's own tokenizer: tokenizer.model (SentencePiece; "
                 "BOS once, as tokenizer_config.json says) or else tokenizer.json (byte-level BPE; BOS as its "
                 "post_processor says)")
      ->excludes(calib_tokens);
  app.add_option("--tokenizer", o.tokenizer, "the folder of tokenizer.model / tokenizer.json for --calib-text (default: INPUT when a folder)");
  app.add_option("--calib-seq", o.calib_seq, "tokens per calibration window")->capture_default_str();
  app.add_option("--calib-samples", o.calib_samples, "calibration windows (at most)")->capture_default_str();
  app.add_option("--save-calib", o.save_calib, "with --calib-tokens: also write the Hessians (.h5)");
  app.add_flag("--resume", o.resume,
               "continue an interrupted --calib-tokens / --calib-text run (CPU or GPU) from its journal (OUTPUT.journal) "
               "at the last completed block: the same arguments and inputs, the same output bytes");
  // Enum values are case-insensitive (RTN, Row): IsMember with ignore_case rewrites them to
  // the canonical spelling before anything reads them.
  app.add_option("--method", o.method, "gptq or rtn (round-to-nearest, no calibration)")
      ->transform(CLI::IsMember({"gptq", "rtn"}, CLI::ignore_case))->capture_default_str();
  app.add_option("--group-size", cli.group, "rows per group along K: " + group_size_choices() +
                                                " (-1 = row, as GPTQ writes it); the Marlin kernel runs 128 and row")
      ->check([](const std::string& s) {
        GroupSize g;
        return parse_group_size(s, &g) ? std::string() : "must be one of " + group_size_choices();
      })->capture_default_str();
  app.add_option("--zero", cli.zero, "zero point: int (upstream GPTQ, zero = -z*scale) or float (exact minimum)")
      ->transform(CLI::IsMember({"int", "float"}, CLI::ignore_case))->capture_default_str();
  app.add_option("--for", cli.target, "what the file is for: marlin (every weight must be runnable by the Marlin "
                                      "kernel, else exit 2 before any work) or any (a warning names the misfits)")
      ->transform(CLI::IsMember({"any", "marlin"}, CLI::ignore_case))->capture_default_str();
  app.add_option("--damp", o.damp, "Hessian damping, fraction of the mean diagonal")->capture_default_str();
  app.add_option("--block-size", o.block_size, "rows per lazy-update block")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_flag("--act-order", o.act_order, "quantize rows by decreasing Hessian diagonal (static groups: stays contiguous)");
  app.add_flag("--range-search", o.range_search,
               "search each group's range (shrink min-max over 80 steps, keep the least |W_hat - W|^2.4; upstream "
               "GPTQ's mse option) inside GPTQ's sweep or for RTN; integer zero points, CPU only");
  app.add_option("--only", o.only, "regex over weight names selecting what to quantize (default: block linears); "
                                  "the rest is copied unchanged");
  app.add_flag("--drop-unselected", o.drop_unselected,
               "write only the quantized weights and the config, not the rest (e.g. one layer of a 7B model)");
  app.add_option("--device", o.device, "where GPTQ runs: cuda (the GPU; none usable: exit 2), cpu, or auto "
                                       "(the GPU when one is usable, else the CPU, said on stderr)")
      ->transform(CLI::IsMember({"auto", "cpu", "cuda"}, CLI::ignore_case))->capture_default_str();
  app.add_option("--threads", o.threads, "worker threads (0 = all cores)")->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--max-memory", cli.max_memory, "refuse to start when the estimated peak exceeds this (e.g. 16G; "
                                                 "default: the available memory)");
  app.add_flag("--json", o.json, "print a JSON summary on stdout");
  app.add_flag("-q,--quiet", o.quiet, "no progress or summary on stderr");
}

void finish_gptq_options(GptqCli& cli) {
  if (!parse_group_size(cli.group, &cli.o.group_size)) throw Error("--group-size: must be one of " + group_size_choices());
  cli.o.for_marlin = cli.target == "marlin";
  if (!zero_mode_from_name(cli.zero, &cli.o.zero_mode)) throw Error("--zero: expected int or float");
  if (!cli.max_memory.empty()) cli.o.max_memory = parse_memory_size(cli.max_memory, "--max-memory");
}

const std::vector<ResumeRule>& gptq_resume_rules() {
  using R = ResumeEffect;
  using O = GptqQuantizeOptions;
  static const std::vector<ResumeRule> rules = {
      {"input", R::kCovered, "input files", nullptr, nullptr},
      {"--output", R::kNoEffect, "the path written; the journal is found beside it", nullptr, nullptr},
      {"--calib", R::kNoEffect, "a Hessian file's run keeps no journal (--resume needs --calib-tokens / --calib-text)", nullptr, nullptr},
      {"--calib-tokens", R::kCovered, "calibration tokens", nullptr, nullptr},
      {"--calib-text", R::kCovered, "calibration tokens", nullptr, nullptr},
      {"--tokenizer", R::kCovered, "calibration tokens", nullptr, nullptr},
      {"--calib-seq", R::kRecorded, "--calib-seq", "32", [](const O& o) { return nlohmann::json(o.calib_seq); }},
      {"--calib-samples", R::kRecorded, "--calib-samples", "8", [](const O& o) { return nlohmann::json(o.calib_samples); }},
      {"--save-calib", R::kNoEffect, "excludes --resume: a run that saves its Hessians keeps no journal", nullptr, nullptr},
      {"--resume", R::kNoEffect, "the mode itself", nullptr, nullptr},
      {"--method", R::kRecorded, "--method", "rtn", [](const O& o) { return nlohmann::json(o.method); }},
      {"--group-size", R::kRecorded, "--group-size", "64", [](const O& o) { return nlohmann::json(o.group_size.name()); }},
      {"--zero", R::kRecorded, "--zero", "float", [](const O& o) { return nlohmann::json(zero_mode_name(o.zero_mode)); }},
      {"--for", R::kNoEffect, "a check before any work: it refuses or warns, the bytes are the same", nullptr, nullptr},
      {"--damp", R::kRecorded, "--damp", "0.02", [](const O& o) { return nlohmann::json(o.damp); }},
      {"--block-size", R::kRecorded, "--block-size", "64", [](const O& o) { return nlohmann::json(o.block_size); }},
      {"--act-order", R::kRecorded, "--act-order", "", [](const O& o) { return nlohmann::json(o.act_order); }},
      {"--range-search", R::kRecorded, "--range-search", "", [](const O& o) { return nlohmann::json(o.range_search); }},
      {"--only", R::kRecorded, "--only", "mlp", [](const O& o) { return nlohmann::json(o.only); }},
      {"--drop-unselected", R::kRecorded, "--drop-unselected", "", [](const O& o) { return nlohmann::json(o.drop_unselected); }},
      {"--device", R::kCovered, "device", nullptr, nullptr},
      {"--threads", R::kNoEffect, "weights are written in input order whatever finishes first (gptq_quantize_tool.h)", "1", nullptr},
      {"--max-memory", R::kNoEffect, "admission: the run starts or is refused, what it computes is the same", "64G", nullptr},
      {"--json", R::kNoEffect, "the summary on stdout", "", nullptr},
      {"--quiet", R::kNoEffect, "stderr only", "", nullptr},
  };
  return rules;
}

namespace {

// What identifies an input between two runs: size and modification time of the file, or of every
// regular file in the folder (a re-downloaded shard, an edited config.json differ).
nlohmann::json input_identity(const std::string& path) {
  auto one = [](const std::string& p) -> nlohmann::json {
    struct stat st {};
    if (::stat(p.c_str(), &st) != 0) return nullptr;
    return {{"bytes", int64_t(st.st_size)},
            {"mtime_ns", int64_t(st.st_mtim.tv_sec) * 1000000000 + int64_t(st.st_mtim.tv_nsec)}};
  };
  if (!is_directory(path)) return one(path);
  nlohmann::json files = nlohmann::json::object();
  if (DIR* d = ::opendir(path.c_str())) {
    while (const dirent* e = ::readdir(d)) {
      const std::string n = e->d_name;
      if (n == "." || n == ".." || !is_regular_file(path + "/" + n)) continue;
      files[n] = one(path + "/" + n);
    }
    ::closedir(d);
  }
  return files;
}

// FNV-1a over the calibration token ids: the same windows, whichever file they came from.
uint64_t tokens_hash(const std::vector<int32_t>& t) {
  uint64_t h = 1469598103934665603ull;
  for (int32_t v : t)
    for (int b = 0; b < 4; ++b) {
      h ^= uint64_t((uint32_t(v) >> (8 * b)) & 0xffu);
      h *= 1099511628211ull;
    }
  return h;
}

}  // namespace

nlohmann::json resume_fingerprint(const GptqQuantizeOptions& opt, const std::vector<int32_t>& tokens, bool use_gpu) {
  char hash[32];
  std::snprintf(hash, sizeof hash, "%016llx", (unsigned long long)tokens_hash(tokens));
  nlohmann::json f = {{"producer", std::string("gptq-quantize ") + kVersion},
                      {"input files", input_identity(opt.input)},
                      {"calibration tokens", {{"count", tokens.size()}, {"fnv1a64", hash}}},
                      // An in-process option (benchmarks), not on the command line.
                      {"--no-rtn-compare", !opt.rtn_compare},
                      // The GPU's codes differ from the CPU's at near-ties, and another GPU model or
                      // software may pick other GEMM kernels: a run resumes on the device (and model)
                      // and the driver and libraries that began it.
                      {"device", use_gpu ? "cuda: " + opt.gpu->name() : std::string("cpu")},
                      {"device software", use_gpu ? opt.gpu->software() : std::string("none")}};
  for (const ResumeRule& r : gptq_resume_rules())
    if (r.effect == ResumeEffect::kRecorded) f[r.key] = r.value(opt);
  return f;
}

}  // namespace tl
