# Shared by the CLI tests that run the four tools on the shipped model (sourced, not a test:
# CTest registers *.sh only): a fresh $TL_TMP as the working folder, the tool paths, the model,
# fail, and bad PATTERN CMD... (exit 2, exactly one stderr line matching PATTERN; a caller may
# define bad_hook to check more, e.g. that no temporary was left).
set -u
: "${TL_BIN:?}" "${TL_TMP:?}" "${TL_SRC:?}"
rm -rf "$TL_TMP" && mkdir -p "$TL_TMP" && cd "$TL_TMP" || exit 1
GQ="$TL_BIN/gptq-quantize" MP="$TL_BIN/marlin-pack" TV="$TL_BIN/tl-verify" TI="$TL_BIN/tl-inspect"
MODEL="$TL_SRC/data/tinyloop-kjv"
fail() { echo "FAIL: $*" >&2; exit 1; }
bad() {
  local pat="$1"; shift
  "$@" > bad.out 2> bad.err; local rc=$?
  [ $rc -eq 2 ] || fail "expected exit 2, got $rc: $* ($(cat bad.err))"
  [ "$(wc -l < bad.err)" -eq 1 ] || fail "expected one stderr line: $(cat bad.err)"
  grep -qE -- "$pat" bad.err || fail "stderr lacks '$pat': $(cat bad.err)"
  if declare -F bad_hook > /dev/null; then bad_hook "$*"; fi
  return 0
}
# The resume tests' journal: its completed stages (0 where there is none).
stages() { grep -o '"stage":' out.tinyloop.journal/journal.json 2> /dev/null | wc -l; }
# What a run of out.tinyloop killed after its journal held some stages left, in `got`: "done"
# (the output whole, the journal gone) or the journal's stage count. The commit renames the output
# into place and then removes the journal (GptqJournal::remove: journal.json emptied first):
# steps no file system makes one, so a kill between them leaves a whole output beside a journal
# of all ALL stages (a rerun without --resume is refused, --resume rewrites the same bytes) or of
# none (any rerun clears it) -- never anything else. Counted in `window`.
window=0
killed_state() {
  local all="$1"; got=$(stages)
  [ -e out.tinyloop ] || return 0
  if [ -e out.tinyloop.journal ]; then
    [ "$got" -eq "$all" ] || [ "$got" -eq 0 ] || fail "a whole output beside a journal of $got of $all stages"
    window=$((window + 1))
  else
    got=done
  fi
}
# A commit that fails: gptq-quantize "$@" -o out.tinyloop, stopped once its journal holds a stage
# while the output's path is made a folder, must fail with a line matching PATTERN (first
# argument); the folder is removed again, the journal left as the failure kept it.
failed_commit() {
  local pat="$1"; shift
  rm -rf out.tinyloop out.tinyloop.journal
  "$GQ" "$@" -o out.tinyloop -q 2> run.err & local pid=$!
  for i in $(seq 6000); do [ "$(stages)" -ge 1 ] && break; sleep 0.002; done
  kill -STOP $pid; mkdir out.tinyloop; kill -CONT $pid
  wait $pid && fail "a commit over a folder succeeded"
  grep -q -- "$pat" run.err || fail "the failed commit's line: $(cat run.err)"
  rmdir out.tinyloop || fail "the failed commit removed the folder in its way"
}
# After a kill: a rerun of the same command without --resume is refused and touches no output
# (none, or the whole one of the commit window).
refused_without_resume() {
  local had; had=$(md5sum out.tinyloop 2> /dev/null)
  bad "rerun the same command with --resume" "$GQ" "$@" -o out.tinyloop -q
  [ "$had" = "$(md5sum out.tinyloop 2> /dev/null)" ] || fail "the refused run wrote the output"
}
# The resume tests: gptq-quantize "$@" -o out.tinyloop --resume after a run interrupted once its
# journal held GOT stages (a number, or "done"): the run must say it resumes after at least GOT of
# them, the resumed file must equal ref.tinyloop, and the journal and every temporary must be gone.
resume_matches_ref() {
  local what="$1" got="$2"; shift 2
  "$GQ" "$@" -o out.tinyloop --resume 2> resume.err || fail "$what: --resume failed: $(cat resume.err)"
  if [ "$got" != done ] && [ "$got" -ge 1 ]; then
    local n; n=$(grep -o "resuming after [0-9]* completed stage" resume.err | grep -o "[0-9]*")
    [ -n "$n" ] && [ "$n" -ge "$got" ] || fail "$what: the run did not resume after $got stage(s): $(grep -m1 resum resume.err)"
  fi
  cmp -s out.tinyloop ref.tinyloop || fail "$what: the resumed file differs from the reference"
  [ -e out.tinyloop.journal ] && fail "$what: the journal was left after a finished run"
  ls -a | grep -q '\.tmp-' && fail "$what: temporary left: $(ls -a)"
  return 0
}
