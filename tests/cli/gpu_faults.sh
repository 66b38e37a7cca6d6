#!/bin/bash
# GPU failures mid-run (issue 48, item 2), through the fault hook (core/fault_injection.h,
# TL_FAULT_INJECT): the N-th device allocation fails, the N-th launch check fails, or a kernel
# traps after the N-th launch (the context is lost; whatever CUDA call comes next finds it).
# For every GPU job -- gptq-quantize on the GPU (sequential calibration with its resume journal,
# the same with --save-calib, and streaming from a calibration file), tl-verify's kernel tiers (synthetic and on a packed file)
# and the e2e tier on the GPU (prefill and decode) -- each fault, at the first, a middle and the
# last allocation / launch of the job (counted by a clean run with TL_FAULT_INJECT=count), must
# end the tool with exit 2 and one stderr line naming the failure (an allocation: the bytes asked
# for; the trap: the CUDA error the next call met), no temporary left, and every output path as
# it was before the run (a file that stood there is byte-identical). A gptq-quantize run leaves a
# journal exactly when it kept completed stages, says so in that line, and the same command with
# --resume then writes the reference's bytes (checked after every fault that kept stages).
# Skipped (77) where the GPU cannot run (no GPU, or a build without CUDA).
source "$TL_SRC/tests/cli/tools_common.bash"
python3 -c "import numpy" 2>/dev/null || { echo "python3 with numpy not found: skipped"; exit 77; }

python3 "$TL_SRC/tools/make_llama_checkpoint.py" orig --shape tiny --dtype fp16 --layers 3 > /dev/null || fail "make_llama_checkpoint"
python3 -c "import numpy as np; np.random.default_rng(5).integers(0, 512, 32 * 128, dtype='<u4').tofile('calib.u32')"
SEQ=(orig --calib-tokens calib.u32 --calib-seq 128 --calib-samples 32 --group-size 128 --device cuda -q)
if ! "$GQ" "${SEQ[@]}" -o ref.tinyloop 2> ref.err; then
  grep -q -- "--device cuda: " ref.err && { echo "no usable GPU ($(cat ref.err)): skipped"; exit 77; }
  fail "reference run: $(cat ref.err)"
fi
"$GQ" "${SEQ[@]}" --save-calib ref.h5 -o ref2.tinyloop 2> ref.err || fail "the --save-calib run: $(cat ref.err)"
"$MP" ref.tinyloop -o packed.tinyloop -q 2> mp.err || fail "marlin-pack: $(cat mp.err)"

# What stood at each output path before a faulty run: it must still be there, unchanged.
echo "an earlier file at the output path" > keep.orig
OUTS=(out.tinyloop out.h5 rep.json drift.json)
reset_outputs() {
  rm -rf out.tinyloop.journal ./*.tmp-* .*.tmp-* 2> /dev/null
  for f in "${OUTS[@]}"; do cp keep.orig "$f"; done
}

# faulty WHAT PATTERN CMD...: the run with the current TL_FAULT_INJECT ends as described above.
faulty() {
  local what="$1" pat="$2"; shift 2
  reset_outputs
  timeout 300 "$@" > fault.out 2> fault.err; local rc=$?
  [ $rc -eq 2 ] || fail "$what ($TL_FAULT_INJECT): expected exit 2, got $rc: $(tail -n 3 fault.err)"
  local last; last=$(tail -n 1 fault.err)
  echo "$last" | grep -q "^[a-z-]*: " || fail "$what ($TL_FAULT_INJECT): no tool prefix: $last"
  echo "$last" | grep -qE -- "$pat" || fail "$what ($TL_FAULT_INJECT): the last line lacks '$pat': $last"
  # One line on stderr, nothing else.
  [ "$(wc -l < fault.err)" -eq 1 ] ||
    fail "$what ($TL_FAULT_INJECT): more than one line on stderr: $(cat fault.err)"
  # gptq-quantize: a journal is left exactly when completed stages were kept, and the line says so.
  if [ -d out.tinyloop.journal ]; then
    echo "$last" | grep -q "completed stage(s) kept in out.tinyloop.journal: the same command with --resume continues)$" ||
      fail "$what ($TL_FAULT_INJECT): a journal was left but the line does not say so: $last"
    ! find out.tinyloop.journal -name '*.tmp-*' | grep -q . || fail "$what ($TL_FAULT_INJECT): temporary in the journal"
  else
    ! echo "$last" | grep -q "kept in" || fail "$what ($TL_FAULT_INJECT): the line names a journal that is not there"
  fi
  for f in "${OUTS[@]}"; do cmp -s keep.orig "$f" || fail "$what ($TL_FAULT_INJECT): $f was replaced or changed"; done
  ! ls -a | grep -q '\.tmp-' || fail "$what ($TL_FAULT_INJECT): temporary left: $(ls -a | grep '\.tmp-')"
  return 0
}

# each_fault WHAT CMD...: a clean counting run, then each fault at the first, middle and last
# allocation and launch (the trap also at the second-to-last, so a later CUDA call must find it).
each_fault() {
  local what="$1"; shift
  reset_outputs
  TL_FAULT_INJECT=count "$@" > count.out 2> count.err || fail "$what: the counting run failed: $(tail -n 3 count.err)"
  local a l
  a=$(grep -o "count: [0-9]* device allocations" count.err | grep -o "[0-9][0-9]*")
  l=$(grep -o "allocations, [0-9]* kernel launches" count.err | grep -o "[0-9][0-9]*")
  [ -n "$a" ] && [ "$a" -ge 1 ] && [ -n "$l" ] && [ "$l" -ge 1 ] || fail "$what: no counts: $(cat count.err)"
  local n
  for n in $(printf "%s\n" 1 2 $((a / 3)) $((2 * a / 3)) "$a" | awk '$1 >= 1' | sort -un); do
    TL_FAULT_INJECT=alloc:$n faulty "$what" \
      "cudaMalloc of [0-9.]+ [KMG]iB \([0-9]+ bytes\) failed: out of memory .*injected by TL_FAULT_INJECT=alloc:$n\)" "$@"
    [ -n "${ON_FAULT:-}" ] && $ON_FAULT "alloc:$n"
  done
  for n in $(printf "%s\n" 1 $((l / 2)) "$l" | awk '$1 >= 1' | sort -un); do
    TL_FAULT_INJECT=launch:$n faulty "$what" "launch [a-z_0-9]+ failed at [a-z_]+/[a-z_0-9]+\.cu:[0-9]+: .*injected by TL_FAULT_INJECT=launch:$n\)" "$@"
    [ -n "${ON_FAULT:-}" ] && $ON_FAULT "launch:$n"
  done
  # The trap's error is the lost context as the next call meets it: a CUDA error by name, or
  # cuBLAS's / cuSOLVER's status for it.
  for n in $(printf "%s\n" 1 $((l / 2)) $((l - 1)) "$l" | awk '$1 >= 1' | sort -un); do
    TL_FAULT_INJECT=trap:$n faulty "$what" "failed.*(cudaError[A-Za-z]+|cuBLAS status [0-9]+|cuSOLVER status [0-9]+)" "$@"
    [ -n "${ON_FAULT:-}" ] && $ON_FAULT "trap:$n"
  done
  echo "gpu_faults: $what: $a allocations, $l launches; every fault ended cleanly"
}

# gptq-quantize, sequential calibration on the GPU. After each fault that left completed stages
# (faulty checked that the line says so), --resume without the fault writes the reference's bytes.
resumed_after_fault() {
  if [ -d out.tinyloop.journal ]; then
    rm -f out.tinyloop
    "$GQ" "${SEQ[@]}" -o out.tinyloop --resume 2> resume.err || fail "--resume after $1: $(cat resume.err)"
    cmp -s out.tinyloop ref.tinyloop || fail "--resume after $1: the file differs from the reference"
    resumed=$((resumed + 1))
  fi
}
resumed=0
ON_FAULT=resumed_after_fault each_fault "gptq-quantize sequential" "$GQ" "${SEQ[@]}" -o out.tinyloop
[ $resumed -ge 1 ] || fail "no fault came after a completed stage: none resumed"
echo "gpu_faults: $resumed fault(s) resumed to the reference's bytes"
each_fault "gptq-quantize sequential --save-calib" "$GQ" "${SEQ[@]}" --save-calib out.h5 -o out.tinyloop
each_fault "gptq-quantize streaming" "$GQ" orig --calib ref.h5 --group-size 128 --device cuda -q -o out.tinyloop

# tl-verify: the kernel tiers on synthetic shapes and on the packed file, and the e2e tier.
each_fault "tl-verify kernel tiers" "$TV" --tiers symmetric,correction,wrapper,native,swiglu --seed 1 -q --json rep.json
each_fault "tl-verify tiers on a file" "$TV" packed.tinyloop --tiers symmetric,wrapper,native,swiglu --seed 1 -q --json rep.json
each_fault "tl-verify e2e" "$TV" packed.tinyloop --tiers e2e --reference orig --tokens calib.u32 --ctx 128 --max-tokens 1024 \
  --device cuda --e2e-mode both --decode-batch 4 --max-drift 100 --max-kld 10 -q --json rep.json --drift-json drift.json

echo "gpu_faults: passed"
