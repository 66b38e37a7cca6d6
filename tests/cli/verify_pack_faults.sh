#!/usr/bin/env bash
# The pack tier through the real binary: a correct pack passes (0) with JSON and Markdown
# reports; each CPU-detectable planted fault exits 1 with a stderr line naming the pack tier,
# the weight and, for the local faults, the place (rows or groups and columns; the places are
# those of libverify/planted_faults.cpp for the fixture's shapes); the input is never modified.
set -u
V="$TL_BIN/tl-verify"
FIX="$TL_BIN/../tests/make_verify_fixture"
[ -x "$FIX" ] || { echo "make_verify_fixture not built"; exit 77; }
mkdir -p "$TL_TMP" && rm -rf "${TL_TMP:?}"/*
fail() { echo "FAIL: $*"; exit 1; }

"$FIX" "$TL_TMP/ok.tinyloop" --seed 9 || fail "fixture"
sum=$(md5sum < "$TL_TMP/ok.tinyloop")
"$V" "$TL_TMP/ok.tinyloop" --tiers pack --json "$TL_TMP/ok.json" --md "$TL_TMP/ok.md" > "$TL_TMP/out" 2> "$TL_TMP/err"
rc=$?
[ $rc -eq 0 ] || { cat "$TL_TMP/out" "$TL_TMP/err"; fail "correct pack: exit $rc"; }
[ "$(md5sum < "$TL_TMP/ok.tinyloop")" = "$sum" ] || fail "input modified"
grep -q '"name": "pack"' "$TL_TMP/ok.json" || fail "JSON lacks the pack tier"
grep -q '"exit_code": 0' "$TL_TMP/ok.json" || fail "JSON exit_code"
grep -q "^## pack (file" "$TL_TMP/ok.md" || fail "Markdown lacks the pack section"
grep -q "layers.0.mlp_up .*passed" "$TL_TMP/out" || fail "table lacks the passed weight"

status=0
while read -r fault weight expect; do
  f="$TL_TMP/$fault.tinyloop"
  "$FIX" "$f" --seed 9 --fault "$fault" --weight "$weight" || fail "fixture $fault"
  "$V" "$f" --tiers pack --json "$TL_TMP/$fault.json" > "$TL_TMP/$fault.out" 2> "$TL_TMP/$fault.err"
  rc=$?
  if [ $rc -ne 1 ] || ! grep -q "^tl-verify: FAILED pack: $weight: .*$expect" "$TL_TMP/$fault.err"; then
    echo "FAIL: $fault: exit $rc"; cat "$TL_TMP/$fault.err"; status=1
  elif ! grep -q '"exit_code": 1' "$TL_TMP/$fault.json"; then
    echo "FAIL: $fault: report not written with exit_code 1"; status=1
  else
    echo "ok: $(grep -m1 FAILED "$TL_TMP/$fault.err" | cut -c1-150)"
  fi
done <<'LIST'
swapped-perm-entry layers.0.mlp_up codes differ
delta-sign layers.0.mlp_down delta entries differ
per-row-as-grouped layers.0.attn_out Marlin groupsize 256, expected -1
scales-off-by-one-group layers.0.mlp_down scales differ
transposed layers.0.attn_out codes differ
one-group-scales layers.0.mlp_down scales differ in groups 2..2, columns 0..255
one-column-delta layers.0.mlp_up delta entries differ in groups 0..1, columns 259..259
one-tile-permutation layers.0.attn_out codes differ in rows 128..143, columns 128..143
one-nibble layers.0.mlp_down 1 of 131072 codes differs: q\[261, 165\]
last-k-tile layers.0.mlp_up codes differ in rows 240..255, columns 0..511
LIST
exit $status
