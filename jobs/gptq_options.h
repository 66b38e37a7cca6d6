// gptq-quantize's command line, and how each of its options bears on --resume.
//
// add_gptq_quantize_options() declares every option (apps/gptq_quantize.cpp parses with it, the
// tests enumerate it); finish_gptq_options() turns the parsed strings into GptqQuantizeOptions.
//
// gptq_resume_rules() has one row per option of that command line. A resumed run must write the
// bytes an uninterrupted one would, so every option that changes the output is a key of the
// journal's fingerprint (gptq_journal.h) and a --resume with it changed is refused naming it:
//   kRecorded  the option's own key, its value from the options;
//   kCovered   recorded through what it selects: the key named (the inputs' sizes and times,
//              the calibration tokens' hash, the device the run resolved to);
//   kNoEffect  never changes the output's bytes (why: the row says).
// tests/convert/test_resume_rules.cpp walks the command line against the table (an option
// without a row fails), each kRecorded row through a real journal's refusal, and each kNoEffect
// row with an example through a run whose output must keep its bytes.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "jobs/gptq_quantize_tool.h"

namespace CLI {
class App;
}

namespace tl {

// The parsed command line: the options, and the strings finish_gptq_options() converts.
struct GptqCli {
  GptqQuantizeOptions o;
  std::string group = "128", zero = "int", target = "any", max_memory;
};

void add_gptq_quantize_options(CLI::App& app, GptqCli& cli);
// After parsing: group size, zero mode, --for and --max-memory into `cli.o` (tl::Error when bad).
void finish_gptq_options(GptqCli& cli);

enum class ResumeEffect { kRecorded, kCovered, kNoEffect };

struct ResumeRule {
  const char* flag;     // the option's long name ("input" for the positional)
  ResumeEffect effect;
  const char* key;      // kRecorded: the flag; kCovered: the fingerprint key; kNoEffect: why not
  // A value other than the default ("" for a flag) that the tests set: every kRecorded row, and the
  // kNoEffect rows a run can change without changing its mode (null: none).
  const char* example;
  std::function<nlohmann::json(const GptqQuantizeOptions&)> value;  // kRecorded only
};
const std::vector<ResumeRule>& gptq_resume_rules();

// The journal's fingerprint of a run: the producer, the inputs' identity, the calibration
// tokens' count and hash, each kRecorded row's value, and the device and its software.
nlohmann::json resume_fingerprint(const GptqQuantizeOptions& opt, const std::vector<int32_t>& tokens, bool use_gpu);

}  // namespace tl
