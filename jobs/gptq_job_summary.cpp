// The gptq-quantize job's summary: the --json document and its totals (gptq_job.h).
#include "jobs/gptq_job.h"

namespace tl::gptq_job {

// schema_version 2: the header, group_size a number (-1 = per row, as GPTQ writes it), bytes
// and bits per weight, and which weights the Marlin kernel cannot run.
nlohmann::json Job::summary_json(double wall) const {
  double sum_gptq = 0, sum_rtn = 0, params = 0;
  uint64_t bytes = 0;
  bool have_rtn = true;
  nlohmann::json jw = nlohmann::json::array();
  for (const WeightReport& r : reports) {
    const uint64_t b = quant_payload_bytes(r.K, r.N, group_count(r.K, r.group_size), false, CodeStorage::kNative);
    const double p = double(r.K) * double(r.N);
    nlohmann::json j = {{"name", r.name},
                        {"K", r.K},
                        {"N", r.N},
                        {"group_size", r.group_size},
                        {"marlin_ok", marlin_gate(r.K, r.N, r.group_size).ok},
                        {"bytes", b},
                        {"bits_per_weight", bits_per_weight(b, p)},
                        {"seconds", r.seconds}};
    bytes += b;
    params += p;
    if (gptq) {
      j["gptq_loss"] = r.gptq_loss;
      j["damp"] = r.percdamp;
      j["damp_retries"] = r.damp_retries;
      j["dead_inputs"] = r.dead;
      sum_gptq += r.gptq_loss;
    }
    j["rtn_loss"] = r.rtn_loss >= 0 ? nlohmann::json(r.rtn_loss) : nlohmann::json(nullptr);
    if (r.rtn_loss >= 0) sum_rtn += r.rtn_loss;
    else have_rtn = false;
    if (r.nsamples > 0) j["nsamples"] = r.nsamples;
    jw.push_back(j);
  }
  nlohmann::json s = report_header("gptq-quantize", 2);
  s["input"] = opt.input;
  s["input_kind"] = checkpoint_kind_name(in.kind());
  s["output"] = opt.output;
  s["method"] = opt.method;
  s["group_size"] = opt.group_size.is_per_row() ? int64_t(-1) : opt.group_size.rows();
  s["group"] = opt.group_size.name();
  s["zero"] = zero_mode_name(opt.zero_mode);
  s["range_search"] = opt.range_search;
  s["threads"] = threads;
  s["device"] = use_gpu ? "cuda" : "cpu";
  if (use_gpu) s["device_name"] = opt.gpu->name();
  auto phase = [](double v) { return v < 0 ? nlohmann::json(nullptr) : nlohmann::json(v); };
  s["phases"] = {{"load", phase(phases.load)},         {"forward", phase(phases.forward)},
                 {"hessian", phase(phases.hessian)},   {"cholesky", phase(phases.cholesky)},
                 {"sweep", phase(phases.sweep)},       {"write", phase(phases.write)},
                 {"write_wait", phase(phases.write_wait)}};
  s["drop_unselected"] = opt.drop_unselected;
  s["marlin"] = {{"runnable", linears.size() - plan.marlin_misfits.count()},
                 {"not_runnable", plan.marlin_misfits.count()},
                 {"reasons", plan.marlin_misfits.text()}};
  s["weights"] = jw;
  if (gptq) {
    s["calib"] = opt.calib;
    s["damp"] = opt.damp;
    s["block_size"] = opt.block_size;
    s["act_order"] = opt.act_order;
  }
  nlohmann::json totals = {{"quantized", linears.size()}, {"dense", n_dense}, {"copied_quantized", n_copied},
                           {"bytes", bytes}, {"bits_per_weight", bits_per_weight(bytes, params)},
                           {"seconds", wall}};
  if (gptq) totals["gptq_loss"] = sum_gptq;
  totals["rtn_loss"] = have_rtn ? nlohmann::json(sum_rtn) : nlohmann::json(nullptr);
  s["totals"] = totals;
  return s;
}

}  // namespace tl::gptq_job
