#!/bin/bash
# gptq-quantize --resume (libconvert/gptq_journal.h): a sequential calibration on the CPU killed
# at any point continues from its journal and writes the same bytes as an uninterrupted run.
#   - 20 trials on a 6-block random HF Llama: trial t kills the run (kill -9; one trial SIGINT)
#     once its journal lists t % 7 completed stages, a few milliseconds later still; the resumed
#     file must equal the reference byte for byte and the journal must be gone. The stages the
#     kills landed after are counted: at least one trial per stage count 1..5 resumed mid-run.
#   - A commit that fails keeps all stages; a whole output beside them (a kill between the
#     commit's rename and the journal's removal) is refused without --resume and finished by it,
#     from the journal alone (no calibration forward).
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

declare -A resumed_at
for t in $(seq 0 19); do
  rm -rf out.tinyloop out.tinyloop.journal
  want=$((t % 7))
  sig=KILL; [ $t -eq 3 ] && sig=INT
  "$GQ" "${ARGS[@]}" -o out.tinyloop -q 2> run.err & pid=$!
  for i in $(seq 3000); do [ "$(stages)" -ge $want ] && break; kill -0 $pid 2> /dev/null || break; sleep 0.005; done
  sleep "0.00$((RANDOM % 10))"
  kill -$sig $pid 2> /dev/null; wait $pid 2> /dev/null
  killed_state 6
  [ "$got" != done ] && [ "$got" -ge 1 ] && refused_without_resume "${ARGS[@]}"
  resume_matches_ref "trial $t ($sig after $got stage(s))" "$got" "${ARGS[@]}"
  resumed_at[$got]=$(( ${resumed_at[$got]:-0} + 1 ))
done
summary=""
for k in "${!resumed_at[@]}"; do summary="$summary $k:${resumed_at[$k]}"; done
echo "gptq_resume: 20 trials identical to the reference; resumed after (stages:trials)$summary; $window killed in the commit window"
for k in 1 2 3 4 5; do [ -n "${resumed_at[$k]:-}" ] || fail "no trial resumed after $k stage(s):$summary"; done

# A commit that fails (the output's path made a folder mid-run) keeps all six stages, and so does
# a kill between the commit's rename and the journal's removal (made here from that journal and
# the reference's bytes, since no kill lands in that window on purpose): a rerun without --resume
# is refused and leaves the output alone; --resume finishes with the reference's bytes.
failed_commit "cannot rename the temporary file into place: Is a directory (6 completed stage(s) kept in out.tinyloop.journal" \
  "${ARGS[@]}"
ls -a | grep -q '\.tmp-' && fail "the failed commit left a temporary: $(ls -a)"
cp ref.tinyloop out.tinyloop || fail "could not put the reference beside the full journal"
killed_state 6
refused_without_resume "${ARGS[@]}"
resume_matches_ref "a whole output beside the journal of all its stages" "$got" "${ARGS[@]}"
grep -q "every stage is in the journal: no calibration to run" resume.err && ! grep -q "forward with the quantized weights" resume.err ||
  fail "a journal of every stage ran the calibration again: $(cat resume.err)"
# Killed inside a removal: after journal.json was emptied and a stage file deleted (the commit's
# removal), or after journal.json was deleted with stage files and a temporary left (a clearing
# cut short). Either way no stage can be resumed: a rerun, with or without --resume, clears the
# folder and writes the reference's bytes.
for state in emptied:"" none:--resume; do
  flag=${state#*:}
  rm -rf out.tinyloop out.tinyloop.journal
  "$GQ" "${ARGS[@]}" -o out.tinyloop -q 2> run.err & pid=$!
  for i in $(seq 3000); do [ "$(stages)" -ge 2 ] && break; sleep 0.005; done
  kill -9 $pid; wait $pid 2> /dev/null
  [ "$(stages)" -ge 2 ] || fail "could not interrupt a run after two stages"
  if [ "${state%%:*}" = emptied ]; then
    python3 -c "
import json; p = 'out.tinyloop.journal/journal.json'; j = json.load(open(p)); j['stages'] = []
json.dump(j, open(p, 'w'))"
    rm out.tinyloop.journal/stage-0.tinyloop
  else
    rm out.tinyloop.journal/journal.json && touch out.tinyloop.journal/.journal.json.tmp-0-0-0
  fi
  cp ref.tinyloop out.tinyloop
  killed_state 6
  [ "$got" = 0 ] || fail "the half-removed journal ($state) reads as $got stage(s)"
  "$GQ" "${ARGS[@]}" $flag -o out.tinyloop -q 2> run.err || fail "a rerun ($state) beside a half-removed journal: $(cat run.err)"
  cmp -s out.tinyloop ref.tinyloop || fail "the rerun ($state) beside a half-removed journal differs from the reference"
  [ -e out.tinyloop.journal ] && fail "the rerun ($state) left the half-removed journal"
done

# A kill at each file operation of the commit and of the journal's removal (strace's syscall
# injection: SIGKILL on entering the N-th rename, unlink or rmdir of the run; the points found in
# a traced run): whatever is left, --resume writes the reference's bytes and leaves no journal
# and no temporary. Where ptrace is not allowed this part is skipped, said on stdout.
OPS=rename,unlink,unlinkat,rmdir  # x86-64's calls (arm64 has only the *at forms: skipped there)
if strace -qq -o /dev/null -e trace=$OPS true 2> /dev/null; then
  rm -rf out.tinyloop out.tinyloop.journal
  strace -qq -o ops.txt -e trace=$OPS "$GQ" "${ARGS[@]}" -o out.tinyloop -q || fail "the traced run"
  cmp -s out.tinyloop ref.tinyloop || fail "the traced run differs from the reference"
  n_out=$(grep '^rename(' ops.txt | grep -n ', "out.tinyloop")' | cut -d: -f1)
  [ -n "$n_out" ] || fail "the traced run's output was not renamed into place: $(cat ops.txt)"
  points=$(seq -f "rename:%g" "$n_out" "$(grep -c '^rename(' ops.txt)")
  for op in unlink unlinkat rmdir; do points="$points $(seq -f "$op:%g" 1 "$(grep -c "^$op(" ops.txt)")"; done
  [ "$(echo $points | wc -w)" -ge 8 ] || fail "fewer operations than six stage files need: $(cat ops.txt)"
  for p in $points; do
    rm -rf out.tinyloop out.tinyloop.journal
    (strace -qq -o /dev/null -e inject="${p%:*}":signal=KILL:when="${p#*:}" "$GQ" "${ARGS[@]}" -o out.tinyloop -q
     echo $? > kill.rc) 2> /dev/null
    [ "$(cat kill.rc)" = 137 ] || fail "killed at $p: the run was not killed there (exit $(cat kill.rc))"
    [ -e out.tinyloop ] || [ "$(stages)" -eq 6 ] || fail "killed at $p: no output and a journal of $(stages) stage(s)"
    killed_state 6
    resume_matches_ref "killed at $p" "$got" "${ARGS[@]}"
  done
  echo "gptq_resume: killed at each of $(echo $points | wc -w) commit and removal operations ($(echo $points)): all resumed to the reference"
else
  echo "gptq_resume: strace cannot trace $OPS here: the kills at the commit's operations are skipped"
fi

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
