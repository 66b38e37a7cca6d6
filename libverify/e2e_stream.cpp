// What the CPU and GPU scorers of the e2e tier share: the block loop that reads the next step's
// blocks while the current one computes, with its per-block phase lines, and the per-layer
// bookkeeping. e2e_internal.h has the declarations.
#include <future>

#include "core/progress.h"
#include "libverify/e2e_internal.h"

namespace tl::verify::e2e {

std::vector<std::string> quantized_linears(const ModelSource& src) {
  std::vector<std::string> names;
  for (const BlockStep& s : block_schedule(src.config())) {
    if (s.loop && s.iteration > 0) continue;  // a shared block's weights once
    for (const char* l : kBlockLinearNames) {
      const SourceEntry* e = src.entry(s.prefix + "." + l);
      if (e && e->quantized) names.push_back(e->name);
    }
  }
  const SourceEntry* h = src.entry("head");
  if (h && h->quantized) names.push_back("head");
  return names;
}

SwapTarget swap_target(const std::string& weight) {
  if (weight == "head") return {"head", -1};
  const size_t dot = weight.rfind('.');
  SwapTarget t{weight.substr(0, dot), -1};
  for (int l = 0; l < kBlockLinears; ++l)
    if (weight.compare(dot + 1, std::string::npos, kBlockLinearNames[l]) == 0) t.linear = l;
  return t;
}

ModelWeights head_weights(const ModelSource& src) {
  ModelWeights w;
  w.config = src.config();
  w.final_norm = src.read_vector("final_norm");
  w.head = to_linear_weight(src.read_head());
  return w;
}

std::vector<int32_t> window_tokens(const std::vector<int32_t>& tokens, const WindowPlan& plan, int64_t w0, int64_t n) {
  std::vector<int32_t> out;
  gather_windows(tokens, plan, w0, n, &out);
  return out;
}

void stream_blocks(const std::vector<const ModelSource*>& sources, const std::vector<BlockStep>& steps,
                   const std::function<bool(int64_t step, size_t source)>& wanted,
                   const std::function<void(int64_t step, std::vector<StoredBlock>& blocks)>& stage,
                   const std::function<BlockTimes(int64_t step)>& run, const E2eOptions& opt, const std::string& what,
                   BlockTimes* total, bool overlap) {
  const int64_t S = int64_t(steps.size());
  if (S == 0) return;
  Progress progress(opt.tool, size_t(S), double(S), opt.progress == nullptr, opt.progress);
  progress.set_sparse(true);
  // Reads step s's block of every source, then stages them: {read seconds, staging seconds}. The
  // memory-mapped sources (an HF reference) read on threads of their own beside the HDF5 ones,
  // which read one after the other on this thread (HDF5 takes one thread at a time): the two
  // disks' worth of waiting overlap.
  auto read_stage = [&](int64_t s) {
    const auto t0 = Clock::now();
    std::vector<StoredBlock> blocks(sources.size());
    auto read_one = [&](size_t m) { blocks[m] = sources[m]->read_block(steps[size_t(s)].prefix); };
    auto want = [&](size_t m) { return sources[m] && (!wanted || wanted(s, m)); };
    std::vector<std::future<void>> mapped;
    for (size_t m = 0; m < sources.size(); ++m)
      if (want(m) && !sources[m]->hdf5()) mapped.push_back(std::async(std::launch::async, read_one, m));
    for (size_t m = 0; m < sources.size(); ++m)
      if (want(m) && sources[m]->hdf5()) read_one(m);
    for (std::future<void>& f : mapped) f.get();
    const double read = seconds_since(t0);
    const auto t1 = Clock::now();
    stage(s, blocks);
    return BlockTimes{read, seconds_since(t1), 0, 0};
  };
  BlockTimes staged = read_stage(0);
  for (int64_t s = 0; s < S; ++s) {
    std::future<BlockTimes> next;
    if (overlap && s + 1 < S) next = std::async(std::launch::async, read_stage, s + 1);
    BlockTimes t = run(s);
    t.read = staged.read;
    t.stage = staged.stage;
    if (next.valid()) staged = next.get();
    else if (s + 1 < S) staged = read_stage(s + 1);
    total->read += t.read;
    total->stage += t.stage;
    total->upload += t.upload;
    total->compute += t.compute;
    progress.finished(what + " " + steps[size_t(s)].prefix + ": read " + fmt("%.2f", t.read) + " s, staged " +
                          fmt("%.2f", t.stage) + " s, upload " + fmt("%.2f", t.upload) + " s, compute " +
                          fmt("%.2f", t.compute) + " s",
                      1.0);
  }
}

// One swapped weight's trace on the first windows against the reference's trace there.
LayerDrift layer_drift(const std::string& name, const PathTrace& tr, const PathTrace& ref_trace) {
  PathTrace rt;
  rt.nll.assign(ref_trace.nll.begin(), ref_trace.nll.begin() + std::ptrdiff_t(tr.nll.size()));
  rt.top1.assign(ref_trace.top1.begin(), ref_trace.top1.begin() + std::ptrdiff_t(tr.nll.size()));
  const RefComparison c = compare_to_reference(tr, rt);
  return {name, c.kld.mean, c.kld.mean_err, c.ln_ratio, c.n};
}

}  // namespace tl::verify::e2e
