// tl-verify: parity tiers of a Marlin-packed .tinyloop (or of the kernels on random data),
// ULP reports, and an exit code a CI gate reads. The job is jobs/verify_tool.h over libverify;
// the flags, --tiers values and bound flags come from libverify's tier table.
#include <map>

#include "apps/kernel_env.h"
#include "apps/tool_main.h"
#include "libverify/e2e_tier.h"
#include "libverify/tier_table.h"
#include "jobs/verify_tool.h"

int main(int argc, char** argv) {
  tl::run_with_huge_pages(argv);  // first: glibc reads the tunable at startup
  namespace tv = tl::verify;
  tv::VerifyOptions opt;
  CLI::App app{"tl-verify: check Marlin packing and kernels against fp64 references, with fp16 "
               "ULP reports.\nWithout FILE the GPU tiers run on fresh seeded random data; with "
               "FILE the pack tier and the GPU tiers run on the file's own packed weights."};
  tl::add_version_flag(app, "tl-verify");
  // The e2e options' ranges from the tier's own table (run_e2e_tier refuses what is outside).
  auto in_range = [](const char* flag) { return " [" + tv::e2e_option_range(flag) + "]"; };
  app.add_option("FILE", opt.file,
                 "a .tinyloop file (optional); for --tiers e2e alone also a quantized checkpoint folder (GPTQ, "
                 "AWQ, compressed-tensors), scored as it is");
  app.add_flag("-q,--quiet", opt.quiet, "no progress lines on stderr (skip reasons, failures and the seed stay)");
  std::string tiers;
  app.add_option("--tiers", tiers, "comma-separated tiers to run (default: all): " +
                                       tv::tier_names_joined(","));
  app.add_option("--json", opt.json_path, "write the report as JSON (docs/verify-report.schema.json)");
  app.add_option("--md", opt.md_path, "write the report as Markdown");
  auto* tokens = app.add_option("--tokens", opt.e2e.tokens, "e2e: token file (.u32 raw uint32 or .npy) to score");
  app.add_option("--text", opt.e2e.text,
                 "e2e: a UTF-8 text file to score instead, tokenized with the model's own tokenizer: "
                 "tokenizer.model (SentencePiece; BOS once, as tokenizer_config.json says) or else tokenizer.json "
                 "(byte-level BPE; BOS as its post_processor says)")
      ->excludes(tokens);
  app.add_option("--tokenizer", opt.e2e.tokenizer,
                 "e2e: the folder of tokenizer.model / tokenizer.json for --text (default: --reference when it is a folder)");
  app.add_option("--baseline", opt.e2e.baseline, "e2e: a second .tinyloop (e.g. RTN) scored beside FILE");
  app.add_option("--reference", opt.e2e.reference,
                 "e2e: the original model (HF folder, .safetensors with config, dense .tinyloop); every path is "
                 "reported against it (PPL ratio, KLD, same top-1, delta p)");
  std::string device = "auto", score = "second-half";
  app.add_option("--device", device, "e2e: cpu, cuda or auto (the GPU if usable, else the CPU)")->capture_default_str();
  app.add_option("--score", score,
                 "e2e: second-half (llama.cpp: the last ctx/2 tokens of each window) or all (tokens 1..ctx-1 of "
                 "non-overlapping windows, the GPTQ paper's protocol)")
      ->capture_default_str();
  app.add_flag("--per-layer", opt.e2e.per_layer,
               "e2e: rank the quantized weights by the KLD each adds alone (needs --reference)");
  app.add_option("--per-layer-windows", opt.e2e.per_layer_windows, std::string("e2e: windows --per-layer scores") + in_range("--per-layer-windows"))
      ->capture_default_str();
  app.add_option("--max-ppl-ratio", opt.e2e.max_ppl_ratio,
                 std::string("e2e: bound on PPL(FILE) / PPL(reference) per path (0 = not gated)") + in_range("--max-ppl-ratio"))->capture_default_str();
  app.add_option("--max-ref-kld", opt.e2e.max_ref_kld,
                 std::string("e2e: bound on the mean KLD(reference || FILE) per path (0 = not gated)") + in_range("--max-ref-kld"))->capture_default_str();
  std::string e2e_mode = "auto";
  app.add_option("--e2e-mode", e2e_mode,
                 "e2e: prefill (every GEMM at M = batch x ctx), decode (--decode-batch windows token by token, "
                 "every GEMM at M = decode-batch: the decode kernel), both, or auto (both on the GPU, prefill on "
                 "the CPU)")
      ->capture_default_str();
  app.add_option("--decode-batch", opt.e2e.decode_batch,
                 std::string("e2e decode: windows in lockstep, the M of every decode GEMM; with decode it is also "
                 "the prefill batch") + in_range("--decode-batch"))
      ->capture_default_str();
  app.add_option("--batch", opt.e2e.batch, std::string("e2e prefill: windows per forward") + in_range("--batch"))->capture_default_str();
  app.add_option("--cpu-check-tokens", opt.e2e.cpu_check_tokens,
                 std::string("e2e on the GPU: the first N tokens of window 0 through the CPU forward against the GPU's fp16 "
                 "path (0 = off)") + in_range("--cpu-check-tokens"))
      ->capture_default_str();
  app.add_option("--threads", opt.e2e.threads, std::string("e2e on the CPU: forward threads (0 = every core)") + in_range("--threads"))->capture_default_str();
  app.add_option("--ctx", opt.e2e.ctx, std::string("e2e: window length") + in_range("--ctx"))->capture_default_str();
  app.add_option("--stride", opt.e2e.stride, std::string("e2e: window stride (0 = ctx)") + in_range("--stride"))->capture_default_str();
  app.add_option("--max-tokens", opt.e2e.max_tokens, std::string("e2e: score at most this many tokens (0 = all)") + in_range("--max-tokens"));
  app.add_option("--max-drift", opt.e2e.max_drift_pct, std::string("e2e: bound on |PPL drift| in %") + in_range("--max-drift"))->capture_default_str();
  app.add_option("--max-kld", opt.e2e.max_kld, std::string("e2e: bound on the mean KLD vs fp16") + in_range("--max-kld"))->capture_default_str();
  app.add_option("--drift-json", opt.drift_json_path, "e2e: write the drift report as JSON");
  app.add_option("--drift-md", opt.drift_md_path, "e2e: write the drift report as Markdown");
  app.add_flag("--thorough", opt.thorough,
               "synthetic tiers: a second random shape for every kernel path (and more M values)");
  std::string dump_npy;  // hidden: logits for tools/hf_llama_crosscheck.py
  int64_t dump_windows = 1;
  app.add_option("--dump-logits", dump_npy)->group("");
  app.add_option("--dump-windows", dump_windows)->group("");
  uint64_t seed = 0;
  CLI::Option* seed_opt =
      app.add_option("--seed", seed, "seed of the random data (default: from the clock, printed)");

  const std::vector<tv::BoundFlag> flags = tv::bound_flags();
  std::vector<double> values;
  values.reserve(flags.size());
  std::vector<CLI::Option*> bound_opts;
  for (const tv::BoundFlag& f : flags) {
    values.push_back(f.default_value);
    bound_opts.push_back(app.add_option(f.flag, values.back(), f.help)->capture_default_str());
  }
  tl::add_footer(app, "\n" + tv::tier_help_table() + "\nBounds and their derivation: docs/verify.md.");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return tl::cli_exit(app, e, argc, argv);
  }

  return tl::tool_main("tl-verify", [&] {
    tl::install_fault_injection_from_env();
    if (!dump_npy.empty()) {  // FILE may be an HF folder here
      tv::dump_logits(opt.file, opt.e2e.tokens, opt.e2e.ctx, dump_windows, dump_npy);
      return 0;
    }
    // Enum values are case-insensitive (--tiers PACK, --device CUDA), as in every tool.
    auto lower = [](std::string s) {
      for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
      return s;
    };
    if (!tiers.empty()) opt.tiers = tv::parse_tier_list(lower(tiers));
    opt.e2e.device = tv::parse_e2e_device(lower(device));
    opt.e2e.score = tv::parse_score_mode(lower(score));
    opt.e2e.mode = tv::parse_e2e_mode(lower(e2e_mode));
    if (seed_opt->count() > 0) opt.seed = seed;
    std::string table_note;
    opt.kernel = tl::runtime_options_from_env(&table_note);  // the runtime's options, as this shell sets them
    if (!table_note.empty() && !opt.quiet) std::fprintf(stderr, "tl-verify: TL_MARLIN_CROSSOVERS: %s\n", table_note.c_str());
    for (size_t i = 0; i < flags.size(); ++i)
      if (bound_opts[i]->count() > 0) opt.bounds.push_back({flags[i].tier, flags[i].kind, values[i]});
    return tv::run_tl_verify(opt);
  });
}
