#!/usr/bin/env bash
# tl-verify command line: --help from the tier table, usage errors (exit 2, one stderr line,
# no report written), skips (exit 77 with every reason printed).
set -u
V="$TL_BIN/tl-verify"
mkdir -p "$TL_TMP" && rm -rf "${TL_TMP:?}"/*
fail() { echo "FAIL: $*"; exit 1; }

"$V" --help > "$TL_TMP/help" || fail "--help exit $?"
for w in pack symmetric correction wrapper native e2e --max-ulp-symmetric --max-rel-wrapper \
         --max-ulp-correction --max-ulp-native --thorough "Exit codes" "ULP<=8 rel<=0.002"; do
  grep -q -- "$w" "$TL_TMP/help" || fail "--help lacks '$w'"
done

"$V" --tiers pack,bogus 2> "$TL_TMP/err"; rc=$?
[ $rc -eq 2 ] || fail "unknown tier: exit $rc, expected 2"
grep -q "^tl-verify: --tiers: unknown tier 'bogus' (expected a comma-separated list of pack, symmetric" "$TL_TMP/err" \
  || fail "unknown tier message: $(cat "$TL_TMP/err")"
[ "$(wc -l < "$TL_TMP/err")" -eq 1 ] || fail "more than one stderr line for a usage error"

"$V" "$TL_TMP/missing.tinyloop" --json "$TL_TMP/r.json" 2> "$TL_TMP/err"; rc=$?
[ $rc -eq 2 ] || fail "missing FILE: exit $rc"
grep -q "missing.tinyloop" "$TL_TMP/err" || fail "missing FILE not named: $(cat "$TL_TMP/err")"
[ ! -e "$TL_TMP/r.json" ] || fail "report written on bad input"
ls -A "$TL_TMP" | grep -q '^\.' && fail "temporary file left behind: $(ls -A "$TL_TMP")"

"$V" --max-rel-wrapper -3 2> "$TL_TMP/err"; rc=$?
[ $rc -eq 2 ] || fail "negative bound: exit $rc"
grep -q -- "--max-rel-wrapper" "$TL_TMP/err" || fail "negative bound not named"
"$V" --no-such-flag 2> /dev/null; [ $? -eq 2 ] || fail "unknown flag not exit 2"
# e2e options: one line naming the option, exit 2.
"$V" --device gpu 2> "$TL_TMP/err"; rc=$?
[ $rc -eq 2 ] && grep -q -- "--device: expected cpu, cuda or auto, got 'gpu'" "$TL_TMP/err" || fail "bad --device: rc $rc $(cat "$TL_TMP/err")"
"$V" --score half 2> "$TL_TMP/err"; rc=$?
[ $rc -eq 2 ] && grep -q -- "--score: expected second-half or all" "$TL_TMP/err" || fail "bad --score: rc $rc $(cat "$TL_TMP/err")"
"$V" --per-layer --tiers pack 2> "$TL_TMP/err"; rc=$?
[ $rc -eq 2 ] && grep -q -- "need the e2e tier and --tokens" "$TL_TMP/err" || fail "--per-layer without e2e: rc $rc $(cat "$TL_TMP/err")"

# Tiers that can never run without FILE (pack and e2e check a file): 77.
"$V" --tiers pack,e2e --json "$TL_TMP/skip.json" > "$TL_TMP/out" 2> "$TL_TMP/err"; rc=$?
[ $rc -eq 77 ] || fail "all skipped: exit $rc, expected 77"
grep -q "pack: skipped: no FILE given" "$TL_TMP/err" || fail "pack skip reason missing"
grep -q "e2e: skipped: no FILE given" "$TL_TMP/err" || fail "e2e skip reason missing"
grep -q '"exit_code": 77' "$TL_TMP/skip.json" || fail "JSON report lacks exit_code 77"

# Default run without FILE: the GPU tiers run (0) or are all skipped with a reason (77).
"$V" --seed 42 --json "$TL_TMP/default.json" > "$TL_TMP/out" 2> "$TL_TMP/err"; rc=$?
grep -q "seed 42" "$TL_TMP/out" || fail "seed not printed"
if [ $rc -eq 77 ]; then
  for t in symmetric correction wrapper native; do
    grep -q "^tl-verify: $t: skipped: ." "$TL_TMP/err" || fail "$t skipped without a reason"
  done
  echo "no GPU here: $(grep -m1 'symmetric: skipped' "$TL_TMP/err")"
elif [ $rc -ne 0 ]; then
  cat "$TL_TMP/out" "$TL_TMP/err"; fail "synthetic GPU tiers: exit $rc"
else
  # The report names the kernel paths each tier reached (and those this GPU has not got).
  for t in symmetric correction wrapper native; do
    grep -q "^$t  *(coverage) *[0-9][0-9]* kernel path(s) reached" "$TL_TMP/out" || fail "$t: no coverage line"
  done
  grep -q '"covers": \[' "$TL_TMP/default.json" || fail "JSON lacks covers"
  grep -q '"not_reached": \[' "$TL_TMP/default.json" || fail "JSON lacks not_reached"
fi
echo "ok"
