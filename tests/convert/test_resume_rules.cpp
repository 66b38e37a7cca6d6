// gptq-quantize's --resume table walked row by row (jobs/gptq_options.h): the command line
// itself is enumerated, so an option added later without a row fails here, and every option the
// table records is changed on the command line and must be refused by a real journal's --resume,
// naming its key. The cases come from the CLI and the table, not from a list in this file: an
// output-changing option left out of the fingerprint (a kRecorded row turned kNoEffect, or a
// fingerprint that skips a row) lets --resume mix stages quantized two ways, and fails here.
#include <doctest/doctest.h>

#include <CLI/CLI.hpp>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <set>

#include "core/error.h"
#include "libconvert/gptq_journal.h"
#include "jobs/gptq_options.h"

namespace {

std::string tmp_dir(const std::string& tag) {
  const std::string dir = std::string(TL_TEST_TMP) + "/resume_rules_" + tag;
  REQUIRE(std::system(("rm -rf '" + dir + "' && mkdir -p '" + dir + "'").c_str()) == 0);
  return dir;
}

// The options of `extra` after the base command line, parsed and finished as the tool does.
tl::GptqQuantizeOptions parse(const std::string& dir, const std::vector<std::string>& extra,
                              const std::string& input = "", const std::string& tokens = "") {
  tl::GptqCli cli;
  CLI::App app;
  tl::add_gptq_quantize_options(app, cli);
  std::vector<std::string> args = {"gptq-quantize", input.empty() ? dir + "/in" : input, "-o", dir + "/out.tinyloop",
                                   "--calib-tokens", tokens.empty() ? dir + "/calib.u32" : tokens};
  args.insert(args.end(), extra.begin(), extra.end());
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  app.parse(int(argv.size()), argv.data());
  tl::finish_gptq_options(cli);
  return cli.o;
}

// The option's long name as the table spells it ("--damp"; the positional's own name).
std::string long_name(const CLI::Option* o) {
  if (!o->get_lnames().empty()) return "--" + o->get_lnames().front();
  return o->get_name();
}

}  // namespace

TEST_CASE("resume rules: every option of gptq-quantize's command line has exactly one row") {
  tl::GptqCli cli;
  CLI::App app;
  tl::add_gptq_quantize_options(app, cli);
  std::set<std::string> options, rows;
  for (const CLI::Option* o : app.get_options()) {
    if (o == app.get_help_ptr()) continue;
    options.insert(long_name(o));
  }
  for (const tl::ResumeRule& r : tl::gptq_resume_rules()) {
    CAPTURE(r.flag);
    CHECK(rows.insert(r.flag).second);
    CHECK(options.count(r.flag) == 1);
    CHECK(std::string(r.key).size() > 0);
    CHECK(bool(r.value) == (r.effect == tl::ResumeEffect::kRecorded));
  }
  for (const std::string& o : options) {
    CAPTURE(o);
    CHECK(rows.count(o) == 1);
  }
}

TEST_CASE("resume rules: each recorded option changed is refused by --resume naming it; the others are not keys") {
  const std::string dir = tmp_dir("walk");
  REQUIRE(std::system(("mkdir -p '" + dir + "/in' && echo '{}' > '" + dir + "/in/config.json' && printf 'abcd' > '" + dir +
                       "/calib.u32'").c_str()) == 0);
  const std::vector<int32_t> tokens = {1, 2, 3, 4};
  const tl::GptqQuantizeOptions base = parse(dir, {});
  const nlohmann::json fp = tl::resume_fingerprint(base, tokens, false);
  // A journal of the base run with one completed stage (an interrupted run).
  tl::QuantWeight w;
  w.name = "w";
  w.K = w.N = w.group_size = 8;
  w.q.assign(64, 1);
  w.scale.assign(8, 0x3c00);
  w.zero.assign(8, 0);
  {
    tl::GptqJournal j(base.output, fp, false);
    j.record_stage("block 0", {&w});
  }
  int recorded = 0;
  for (const tl::ResumeRule& r : tl::gptq_resume_rules()) {
    CAPTURE(r.flag);
    if (r.effect == tl::ResumeEffect::kCovered) {
      CHECK(fp.contains(r.key));  // recorded through what it selects
      continue;
    }
    if (r.effect == tl::ResumeEffect::kNoEffect) {
      CHECK(!fp.contains(r.flag));
      continue;
    }
    REQUIRE(r.example != nullptr);
    std::vector<std::string> changed = {r.flag};
    if (*r.example) changed.push_back(r.example);
    const tl::GptqQuantizeOptions o = parse(dir, changed);
    const nlohmann::json now = tl::resume_fingerprint(o, tokens, false);
    CHECK(now.at(r.key) != fp.at(r.key));
    nlohmann::json rest = now;
    rest[r.key] = fp.at(r.key);
    CHECK(rest == fp);  // the option moves its own key and no other
    std::string refused;
    try {
      tl::GptqJournal j(base.output, now, true);
    } catch (const tl::Error& e) {
      refused = e.what();
    }
    CHECK(refused.find("--resume: " + std::string(r.key) + " differs from the interrupted run's") != std::string::npos);
    ++recorded;
  }
  CHECK(recorded >= 10);
  // The unchanged command line resumes.
  tl::GptqJournal same(base.output, fp, true);
  CHECK(same.stages() == 1);
  same.remove();
}

TEST_CASE("resume rules: each option the table calls without effect leaves a run's output bytes as they were") {
  // A sequential GPTQ of a family fixture (transformers' Qwen3, 2 blocks) on its own tokens, once
  // as the base command line and once per kNoEffect row that has an example.
  const std::string dir = tmp_dir("bytes"), fixture = std::string(TL_FAMILY_DIR) + "/qwen3";
  const std::string tokens = fixture + ".tokens.u32";
  auto run = [&](const std::vector<std::string>& extra, const std::string& out) {
    std::vector<std::string> args = {"--calib-seq", "16", "--group-size", "32", "--device", "cpu"};
    args.insert(args.end(), extra.begin(), extra.end());
    tl::GptqQuantizeOptions o = parse(dir, args, fixture, tokens);
    o.output = dir + "/" + out;
    o.quiet = o.quiet || !o.json;  // the base run prints nothing; --quiet's row prints the summary
    REQUIRE(tl::run_gptq_quantize(o) == 0);
    std::ifstream in(o.output, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  };
  const std::string base = run({}, "base.tinyloop");
  REQUIRE(base.size() > 1000);
  int exercised = 0;
  for (const tl::ResumeRule& r : tl::gptq_resume_rules()) {
    if (r.effect != tl::ResumeEffect::kNoEffect || r.example == nullptr) continue;
    CAPTURE(r.flag);
    std::vector<std::string> changed = {r.flag};
    if (*r.example) changed.push_back(r.example);
    CHECK(run(changed, "changed.tinyloop") == base);
    ++exercised;
  }
  CHECK(exercised >= 3);
}
