#!/bin/bash
# gptq-quantize --resume (libconvert/gptq_journal.h): a sequential calibration on the CPU killed
# at any point continues from its journal and writes the same bytes as an uninterrupted run.
#   - 20 trials on a 6-block random HF Llama: trial t kills the run (kill -9; one trial SIGINT)
#     once its journal lists t % 7 completed stages, a few milliseconds later still; the resumed
#     file must equal the reference byte for byte and the journal must be gone. The stages the
#     kills landed after are counted: at least one trial per stage count 1..5 resumed mid-run.
#   - A second run of the same output while the first runs is refused by name (the journal's
#     lock), with or without --resume.
#   - Without --resume an existing journal is refused by name (nothing touched); a --resume
#     whose arguments or inputs differ is refused naming the key; a folder that is not our
#     journal is never taken for one.
source "$TL_SRC/tests/cli/tools_common.bash"
python3 -c "import numpy" 2>/dev/null || { echo "python3 with numpy not found: skipped"; exit 77; }

python3 "$TL_SRC/tools/make_llama_checkpoint.py" orig --shape tiny --dtype fp16 --layers 6 > /dev/null || fail "make_llama_checkpoint"
python3 -c "import numpy as np; np.random.default_rng(5).integers(0, 512, 16 * 64, dtype='<u4').tofile('calib.u32')"
python3 -c "import numpy as np; np.random.default_rng(6).integers(0, 512, 16 * 64, dtype='<u4').tofile('calib2.u32')"
ARGS=(orig --calib-tokens calib.u32 --calib-seq 64 --group-size 128 --device cpu)
"$GQ" "${ARGS[@]}" -o ref.tinyloop -q || fail "reference run"
[ -e ref.tinyloop.journal ] && fail "a finished run left its journal"

stages() { grep -o '"stage":' out.tinyloop.journal/journal.json 2> /dev/null | wc -l; }
declare -A resumed_at
for t in $(seq 0 19); do
  rm -rf out.tinyloop out.tinyloop.journal
  want=$((t % 7))
  sig=KILL; [ $t -eq 3 ] && sig=INT
  "$GQ" "${ARGS[@]}" -o out.tinyloop -q 2> run.err & pid=$!
  for i in $(seq 3000); do [ "$(stages)" -ge $want ] && break; kill -0 $pid 2> /dev/null || break; sleep 0.005; done
  sleep "0.00$((RANDOM % 10))"
  kill -$sig $pid 2> /dev/null; wait $pid 2> /dev/null
  got=$(stages)
  if [ -e out.tinyloop ]; then
    got=done  # finished before the kill landed: the journal must be gone already
    [ -e out.tinyloop.journal ] && fail "trial $t: a finished run left its journal"
  fi
  if [ "$got" != done ] && [ "$got" -ge 1 ]; then
    bad "rerun the same command with --resume" "$GQ" "${ARGS[@]}" -o out.tinyloop -q
    [ -e out.tinyloop ] && fail "trial $t: the refused run wrote the output"
  fi
  resume_matches_ref "trial $t ($sig after $got stage(s))" "$got" "${ARGS[@]}"
  resumed_at[$got]=$(( ${resumed_at[$got]:-0} + 1 ))
done
summary=""
for k in "${!resumed_at[@]}"; do summary="$summary $k:${resumed_at[$k]}"; done
echo "gptq_resume: 20 trials identical to the reference; resumed after (stages:trials)$summary"
for k in 1 2 3 4 5; do [ -n "${resumed_at[$k]:-}" ] || fail "no trial resumed after $k stage(s):$summary"; done

# Two runs of the same output at once: while the first runs (stopped here with SIGSTOP, so the
# timing is the test's, not the machine's), a second is refused by name, with or without --resume,
# and touches nothing; the first then finishes with the reference's bytes.
rm -rf out.tinyloop out.tinyloop.journal
"$GQ" "${ARGS[@]}" -o out.tinyloop -q 2> /dev/null & pid=$!
for i in $(seq 3000); do [ "$(stages)" -ge 1 ] && break; sleep 0.005; done
kill -STOP $pid
bad "another gptq-quantize run of this output is running" "$GQ" "${ARGS[@]}" -o out.tinyloop
bad "another gptq-quantize run of this output is running" "$GQ" "${ARGS[@]}" -o out.tinyloop --resume
kill -CONT $pid
wait $pid || fail "the first run failed beside the refused ones"
cmp -s out.tinyloop ref.tinyloop || fail "the first run's file differs from the reference"
[ -e out.tinyloop.journal ] && fail "the journal was left after a finished run"

# A journal with two completed stages for the refusals below.
rm -rf out.tinyloop out.tinyloop.journal
"$GQ" "${ARGS[@]}" -o out.tinyloop -q 2> /dev/null & pid=$!
for i in $(seq 3000); do [ "$(stages)" -ge 2 ] && break; sleep 0.005; done
kill -9 $pid; wait $pid 2> /dev/null
[ "$(stages)" -ge 2 ] || fail "could not interrupt a run after two stages"
snapshot() { find out.tinyloop.journal -type f -exec md5sum {} + | sort; }
before=$(snapshot)
bad "--damp differs from the interrupted run's \(journal: 0.01, now: 0.02\)" "$GQ" "${ARGS[@]}" --damp 0.02 -o out.tinyloop --resume
bad "--group-size differs" "$GQ" "${ARGS[@]/128/64}" -o out.tinyloop --resume
bad "calibration tokens differs" "$GQ" orig --calib-tokens calib2.u32 --calib-seq 64 --group-size 128 --device cpu -o out.tinyloop --resume
touch orig/config.json
bad "input files differs" "$GQ" "${ARGS[@]}" -o out.tinyloop --resume
[ "$before" = "$(snapshot)" ] || fail "a refused --resume changed the journal"
[ -e out.tinyloop ] && fail "a refused --resume wrote the output"
rm -rf out.tinyloop.journal

# Not ours: never read as a journal, never removed.
mkdir out.tinyloop.journal && echo mine > out.tinyloop.journal/notes.txt
bad "the journal of an interrupted run of this output" "$GQ" "${ARGS[@]}" -o out.tinyloop
bad "not a gptq-quantize resume journal" "$GQ" "${ARGS[@]}" -o out.tinyloop --resume
[ "$(cat out.tinyloop.journal/notes.txt)" = mine ] || fail "a folder that is not a journal was touched"
# An output the HDF5 writer refuses is refused before a journal is made beside it.
bad "/dev/null: is a character device" "$GQ" "${ARGS[@]}" -o /dev/null
[ -e /dev/null.journal ] && fail "a journal was made beside /dev/null"
bad "folder '[^']*no-such-folder' does not exist" "$GQ" "${ARGS[@]}" -o no-such-folder/x.tinyloop
# --resume where no journal is kept.
bad "--resume continues a sequential calibration" "$GQ" orig --method rtn -o rtn.tinyloop --resume
bad "--resume and --save-calib exclude each other" "$GQ" "${ARGS[@]}" --save-calib h.h5 -o x.tinyloop --resume
echo "gptq_resume: ok"
