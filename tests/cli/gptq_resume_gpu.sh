#!/bin/bash
# gptq-quantize --resume on the GPU (--device cuda; libconvert/gptq_journal.h): a sequential
# calibration killed at any point continues from its journal and writes the same bytes as an
# uninterrupted run -- the resumed blocks run with W_hat rebuilt on the GPU from the journal's
# codes, so the activations after them are the uninterrupted run's.
#   - 8 trials on a 6-block random HF Llama: trial t kills the run (kill -9) once its journal
#     lists (t % 6) + 1 completed stages; the rerun must say it resumes after them, the resumed
#     file must equal the reference byte for byte, the journal must be gone, no temporary left.
#     At least two trials must have resumed mid-run. A kill that lands between the commit's
#     rename and the journal's removal (trial 5 waits for all six stages, so it can) leaves a
#     whole output beside a full journal: tools_common.bash's killed_state accepts exactly that.
#   - The shipped TinyLoop model (an HF folder whose shared loop block is one stage, "loop")
#     killed after its first stage, then resumed: the same bytes as its reference.
#   - A commit that fails keeps all six stages, and --resume writes them without calibrating.
#   - A journal begun on the GPU is refused by --device cpu --resume, naming the device.
# Skipped (77) where --device cuda cannot run (no GPU, or a build without CUDA).
source "$TL_SRC/tests/cli/tools_common.bash"
python3 -c "import numpy" 2>/dev/null || { echo "python3 with numpy not found: skipped"; exit 77; }

python3 "$TL_SRC/tools/make_llama_checkpoint.py" orig --shape tiny --dtype fp16 --layers 6 > /dev/null || fail "make_llama_checkpoint"
python3 -c "import numpy as np; np.random.default_rng(5).integers(0, 512, 64 * 128, dtype='<u4').tofile('calib.u32')"
ARGS=(orig --calib-tokens calib.u32 --calib-seq 128 --calib-samples 64 --group-size 128 --device cuda)
if ! "$GQ" "${ARGS[@]}" -o ref.tinyloop -q 2> ref.err; then
  grep -q -- "--device cuda: " ref.err && { echo "no usable GPU ($(cat ref.err)): skipped"; exit 77; }
  fail "reference run: $(cat ref.err)"
fi
[ -e ref.tinyloop.journal ] && fail "a finished run left its journal"

mid=0
for t in $(seq 0 7); do
  rm -rf out.tinyloop out.tinyloop.journal
  want=$(( (t % 6) + 1 ))
  "$GQ" "${ARGS[@]}" -o out.tinyloop -q 2> run.err & pid=$!
  for i in $(seq 6000); do [ "$(stages)" -ge $want ] && break; kill -0 $pid 2> /dev/null || break; sleep 0.002; done
  kill -9 $pid 2> /dev/null; wait $pid 2> /dev/null
  grep -q "error\|failed" run.err && fail "trial $t: the interrupted run had failed before the kill: $(cat run.err)"
  killed_state 6
  if [ "$got" != done ] && [ "$got" -ge 1 ]; then
    [ -e out.tinyloop ] || mid=$((mid + 1))
    refused_without_resume "${ARGS[@]}"
  fi
  resume_matches_ref "trial $t (killed after $got stage(s))" "$got" "${ARGS[@]}"
done
[ $mid -ge 2 ] || fail "only $mid of 8 trials were interrupted mid-run"
echo "gptq_resume_gpu: 8 trials identical to the reference ($mid resumed mid-run, $window killed in the commit window)"

# A commit that fails (the output's path made a folder mid-run) keeps all six stages; --resume
# then writes the reference's bytes from the journal alone, without the GPU's calibration.
failed_commit "(6 completed stage(s) kept in out.tinyloop.journal" "${ARGS[@]}"
resume_matches_ref "the journal of a failed commit" 6 "${ARGS[@]}"
grep -q "every stage is in the journal: no calibration to run" resume.err || fail "a complete journal ran the calibration: $(cat resume.err)"

# A journal begun on the GPU: the CPU does not continue it.
rm -rf out.tinyloop out.tinyloop.journal
"$GQ" "${ARGS[@]}" -o out.tinyloop -q 2> /dev/null & pid=$!
for i in $(seq 6000); do [ "$(stages)" -ge 1 ] && break; kill -0 $pid 2> /dev/null || break; sleep 0.002; done
kill -9 $pid 2> /dev/null; wait $pid 2> /dev/null
[ "$(stages)" -ge 1 ] && [ ! -e out.tinyloop ] || fail "could not interrupt a run after its first stage"
bad "device differs from the interrupted run's" "$GQ" "${ARGS[@]/cuda/cpu}" -o out.tinyloop --resume

# The TinyLoop model: its pre blocks, then the shared loop block (one stage over 4 iterations).
rm -rf out.tinyloop out.tinyloop.journal ref.tinyloop
python3 -c "import numpy as np; np.random.default_rng(7).integers(0, 256, 16 * 256, dtype='<u4').tofile('calib_kjv.u32')"
KARGS=("$MODEL" --calib-tokens calib_kjv.u32 --calib-seq 256 --group-size 128 --device cuda)
"$GQ" "${KARGS[@]}" -o ref.tinyloop -q || fail "TinyLoop reference run"
"$GQ" "${KARGS[@]}" -o out.tinyloop -q 2> /dev/null & pid=$!
for i in $(seq 6000); do [ "$(stages)" -ge 1 ] && break; kill -0 $pid 2> /dev/null || break; sleep 0.002; done
kill -9 $pid 2> /dev/null; wait $pid 2> /dev/null
got=$(stages); [ -e out.tinyloop ] && got=done
resume_matches_ref "TinyLoop model (killed after $got stage(s))" "$got" "${KARGS[@]}"
exit 0
