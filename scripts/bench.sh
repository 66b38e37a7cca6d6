#!/usr/bin/env bash
# make bench: the CPU benchmarks here, the GPU benchmark where a GPU is present.
# Each benchmark checks correctness before it times anything. Tables go to docs/perf.md by hand.
set -euo pipefail
build=${1:-build}
for b in bench_gptq bench_marlin_pack; do
  [ -x "$build/bench/$b" ] && { echo "== $b"; "$build/bench/$b"; }
done
if [ -x "$build/bench/bench_kernels" ]; then
  echo "== bench_kernels"
  "$build/bench/bench_kernels" || { rc=$?; [ $rc = 77 ] && echo "bench_kernels: skipped (no suitable GPU)" || exit $rc; }
fi
if [ -x "$build/bench/bench_gptq_gpu" ]; then
  echo "== bench_gptq_gpu"
  "$build/bench/bench_gptq_gpu" || { rc=$?; [ $rc = 77 ] && echo "bench_gptq_gpu: skipped (no GPU)" || exit $rc; }
fi
