// The GPU as gptq-quantize sees it: an interface libconvert defines and libgpu implements
// (libgpu/gptq_device.h, make_gptq_device), handed to run_gptq_quantize by the tool's main. The
// converter so stays below the GPU code (DESIGN.md: libgpu depends on libconvert, never the
// reverse) and knows no CUDA; a build without CUDA hands in a device that says why it cannot run.
//
// Two jobs, the same math as the CPU path:
//  - gptq(): one weight with a host Hessian (--calib FILE);
//  - calibrate(): GPTQ's sequential mode from tokens (--calib-tokens), streaming the model block
//    by block from its checkpoint: each block runs once with its original weights to accumulate
//    its linears' Hessians, its selected weights are quantized, and it runs again with W_hat to
//    give the next block its inputs (libgpu/gptq_device.cpp says how, with the memory formula).
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "formats/calib_file.h"
#include "formats/model_config.h"
#include "formats/tinyloop_file.h"
#include "libconvert/gptq.h"
#include "libconvert/token_calibration.h"

namespace tl {

class ModelSource;

// Seconds per phase of a GPTQ run (--json "phases"); a phase a path does not separate is -1.
struct GptqPhaseTimes {
  double load = 0;      // reading the checkpoint (what the run waited for)
  double forward = 0;   // calibration forward passes, without the Hessian GEMMs
  double hessian = 0;   // the Hessian GEMMs
  double cholesky = 0;  // dead inputs, permutation, damping, the inverse-Hessian factor
  double sweep = 0;     // parameters, the blocked sweep, RTN's loss
  double write = 0;     // the output's quantized weights (on the GPU path: on the writer's thread)
  double write_wait = -1;  // GPU path: what the GPU's thread waited for the writer (-1: no writer)
};

// What calibrate() needs from the tool.
struct SequentialCalls {
  std::function<GptqOptions(const std::string& name, int64_t K)> options;  // GPTQ options of a weight
  std::function<void(const std::string& name)> started;                   // a weight's GPTQ starts
  // A weight is quantized: its result, its Hessian's sample count, the seconds it took.
  std::function<void(const std::string& name, GptqResult&& r, int64_t nsamples, double seconds)> quantized;
  std::function<void(const Hessian& h)> hessian;  // --save-calib: each Hessian before GPTQ (may be empty)
  CalibrationEvents events;                       // stage lines, the forward FLOPs (progress)
  bool activations_on_host = false;               // tests: keep them in host memory even when they fit
  // Held around the model's own HDF5 reads (a .tinyloop input) when `quantized` hands the
  // writing to another thread: the HDF5 library is used from one thread at a time.
  std::mutex* hdf5_mutex = nullptr;
  // --resume (libconvert/gptq_journal.h): the stages the journal holds (calibration_stage names:
  // "pre.<i>", "loop", "head"). Their blocks run with W_hat rebuilt from resumed_weight(name)'s
  // codes, scales and zeros exactly as the uninterrupted run's GPTQ left it (no Hessians, no GPTQ,
  // no quantized() call), so the activations after them are the uninterrupted run's, bit for bit.
  std::set<std::string> resumed;
  std::function<const QuantWeight&(const std::string& name)> resumed_weight;
  // A stage's last weight went to quantized(): the stage is complete (the journal records it).
  std::function<void(const std::string& stage)> stage_done;
};

// Memory a calibrate() run needs, and where the calibration activations live.
struct SequentialMemory {
  uint64_t host_bytes = 0, device_bytes = 0, device_free = 0;
  bool activations_on_host = false;  // spilled: they do not fit beside the block on the GPU
  std::string formula;               // how host_bytes is made up, for the admission message
};

class GptqDevice {
 public:
  virtual ~GptqDevice() = default;
  virtual std::string unavailable_reason() const = 0;  // "" when the device can run
  virtual std::string name() const = 0;                // "NVIDIA H200 (sm_90)"
  // The software whose kernels decide the bytes ("driver 12.8, runtime 13.0, cuBLAS 13.1.0,
  // cuSOLVER 12.0.4"): a resume after a driver or library update would not write the
  // uninterrupted run's bytes, so the journal's fingerprint carries it.
  virtual std::string software() const = 0;

  virtual GptqResult gptq(const float* W, int64_t K, int64_t N, const float* H, const GptqOptions& opt,
                          GptqPhaseTimes* times) = 0;

  // Throws tl::Error naming the numbers when even spilled activations do not fit the GPU.
  virtual SequentialMemory plan(const ModelConfig& c, int64_t n_seq, int64_t seq_len,
                                const std::set<std::string>& selected) const = 0;
  // model: the model as the caller opened it (gptq-quantize: its input's import; reads of an
  // HDF5 model take calls.hdf5_mutex). tokens: at least n_seq * seq_len ids checked against the
  // vocabulary. Quantizes every weight in `selected` (linear names of the forward) in the
  // block schedule's order.
  virtual void calibrate(const ModelSource& model, const std::vector<int32_t>& tokens, int64_t seq_len,
                         int64_t n_seq, const std::set<std::string>& selected, const SequentialCalls& calls,
                         GptqPhaseTimes* times) = 0;
};

}  // namespace tl
