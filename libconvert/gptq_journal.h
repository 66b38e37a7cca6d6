// The resume journal of gptq-quantize's sequential calibration, on the CPU or the GPU
// (--calib-tokens / --calib-text): a run interrupted anywhere -- Ctrl-C, an OOM kill, kill -9, a preempted machine's SIGTERM -- is
// continued by the same command with --resume from its last completed stage, and writes a file
// byte-identical to an uninterrupted run's.
//
// A stage is what the calibration quantizes at once: one distinct block ("pre.<i>"), the shared
// loop blocks ("loop"), the head ("head"). The journal is the folder OUTPUT.journal beside the
// output:
//   journal.json       the run's fingerprint (every option that changes the output, the
//                      inputs' sizes and modification times, a hash of the calibration tokens)
//                      and the completed stages in order, each with its weights' names
//   stage-<k>.tinyloop the k-th completed stage's quantized weights (codes, scale, zero,
//                      provenance), written atomically before journal.json names it
// journal.json is replaced atomically after each stage, so a kill at any instant leaves the
// journal of the last completed stage (or none). The run that commits the output removes the
// folder (remove(): journal.json emptied first, so a kill inside the removal leaves a folder
// any rerun clears, never a journal naming a deleted stage file).
//
// Resuming (the job's part, gptq_job_weights.cpp): the completed stages' weights are read back,
// their W_hat put in place of the original weights, and the calibration forward runs those
// blocks with W_hat only (no Hessians) -- the activations the uninterrupted run computed at that
// point, bit for bit, since the CPU forward's result does not depend on the thread count and the
// GPU's chunks and kernels are fixed (it rebuilds W_hat with the kernel GPTQ used). Then the
// calibration continues with the next stage. The fingerprint names the device.
//
// The folder is flock(2)ed by the run that uses it, for its whole life (a kill releases it): a
// second run of the same output while the first still runs is refused by name, never shares it.
//
// Refused by name: a run without --resume whose journal exists (it would be lost), a --resume
// whose fingerprint differs from the journal's (the key that differs, both values), a journal
// that is not one of ours, a journal another live run holds.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "formats/tinyloop_file.h"

namespace tl {

class GptqJournal {
 public:
  static std::string folder_for(const std::string& output) { return output + ".journal"; }

  // Opens the journal of `output`. Without `resume` an existing journal is an error; with it a
  // missing one starts a fresh journal and an existing one must carry `fingerprint`.
  GptqJournal(const std::string& output, const nlohmann::json& fingerprint, bool resume);
  // Releases the folder's lock; removes the folder when no stage was completed (a run that
  // failed before its first stage leaves nothing behind).
  ~GptqJournal();
  size_t stages() const { return stages_.size(); }
  GptqJournal(const GptqJournal&) = delete;
  GptqJournal& operator=(const GptqJournal&) = delete;

  const std::string& folder() const { return folder_; }
  bool resumed() const { return !stages_.empty(); }
  bool stage_done(const std::string& stage) const;
  std::vector<std::string> done_stages() const;
  // The weights of a completed stage, as they were recorded.
  std::vector<QuantWeight> read_stage(const std::string& stage) const;
  // Records a completed stage: its weights, then journal.json naming it.
  void record_stage(const std::string& stage, const std::vector<const QuantWeight*>& weights);
  // After the output is committed: the folder and everything in it.
  void remove();

 private:
  struct Stage {
    std::string name, file;
    std::vector<std::string> weights;
  };
  void write_journal() const;
  void lock();
  void open_locked(bool exists, bool resume);  // after lock(): a fresh journal, or the one to resume

  std::string folder_;
  nlohmann::json fingerprint_;
  std::vector<Stage> stages_;
  int lock_fd_ = -1;
};

}  // namespace tl
