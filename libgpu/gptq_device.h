// gptq-quantize's GPU (libconvert/gptq_backend.h) on device 0: GPTQ of one weight through
// GpuGptq (gptq_gpu.h), and GPTQ's sequential calibration streamed block by block.
//
// Sequential calibration (calibrate):
//   tokens -> x = embed[tokens] (fp32, [n_seq * T, D]: the calibration activations)
//   for each distinct block, in order (read from the checkpoint while the previous one runs):
//     upload its weights (fp16 copies for the forward, fp32 kept on the host for GPTQ)
//     pass 1, chunk by chunk: x_chunk copied, the block run on the copy with the original
//       weights; before each selected linear its fp16 input X adds (2 / n) X^T X to the
//       linear's fp32 Hessian (cublasGemmEx, fp32 accumulation; mlp_up reuses mlp_gate's)
//     GPTQ of each selected weight on the device; its fp16 copy becomes fp16(W_hat)
//     pass 2, chunk by chunk: the block with W_hat, in place on x (the next block's inputs)
//   TinyLoop loop blocks: their Hessians over every iteration of the loop stack (pass 1 only,
//   as the CPU path), then the head's from the final norm of x after the loop stack.
// Chunks hold a fixed number of whole windows (kChunkRows / T, at least one), whatever the
// memory, so each Hessian is the same sum of the same GEMMs on any run: the output is
// byte-identical for the same inputs on the same GPU model and software.
//
// Memory (plan(); numbers for Llama-2-7B, 128 x 2048 tokens):
//   GPU:  activations rows x D x 4 (4.3 GB; moved to pinned host memory when they do not fit)
//         + one chunk's buffers (~2 GB) + the block's fp16 weights (0.4 GB) + its Hessians
//         (0.7 GB) + GpuGptq's buffers for the largest weight (~2.2 GB)
//   host: 2 x the largest block in fp32 (the one being quantized and the one being read:
//         1.6 GB) + the embedding in fp32 while x is built (0.5 GB) + the head in fp32 when it
//         is selected + one chunk of staging (0.27 GB) + the activations when spilled.
#pragma once

#include <memory>

#include "libconvert/gptq_backend.h"

namespace tl::gpu {

// Always returns a device; in a build without CUDA or on a machine without a usable GPU its
// unavailable_reason() says why.
std::unique_ptr<GptqDevice> make_gptq_device();

constexpr int64_t kChunkRows = 16384;  // rows of one calibration forward chunk (whole windows)

}  // namespace tl::gpu
