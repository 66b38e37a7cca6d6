// The range search's grid (gptq-quantize --range-search), one definition for the CPU
// (libconvert/minmax_quantizer.cpp) and the GPU (cuda/gptq_ops.cu): step i = 0 .. kRangeSteps - 1
// shrinks a column's range [xmin, xmax] to [s xmin, s xmax], s = 1 - i / kRangeGrid (1.0 down to
// 0.21), and scores the group by sum |W_hat - w|^kRangeNorm (upstream GPTQ's Quantizer(mse=True):
// grid 100, maxshrink 0.8, norm 2.4).
#pragma once

namespace tl {

constexpr int kRangeGrid = 100;
constexpr float kRangeMaxShrink = 0.8f;
constexpr int kRangeSteps = 80;  // kRangeMaxShrink * kRangeGrid
constexpr float kRangeNorm = 2.4f;
static_assert(kRangeSteps == int(kRangeMaxShrink * float(kRangeGrid) + 0.5f), "the grid's step count");

}  // namespace tl
