#!/usr/bin/env bash
# The real pipeline on the CPU: an unpacked .tinyloop -> marlin-pack -> tl-verify --tiers pack.
set -u
V="$TL_BIN/tl-verify"
P="$TL_BIN/marlin-pack"
FIX="$TL_BIN/../tests/make_verify_fixture"
[ -x "$P" ] && [ -x "$FIX" ] || { echo "marlin-pack or make_verify_fixture not built"; exit 77; }
mkdir -p "$TL_TMP" && rm -rf "${TL_TMP:?}"/*
"$FIX" "$TL_TMP/raw.tinyloop" --seed 4 --no-marlin || exit 1
"$P" "$TL_TMP/raw.tinyloop" -o "$TL_TMP/packed.tinyloop" -q || { echo "FAIL: marlin-pack exit $?"; exit 1; }
"$V" "$TL_TMP/packed.tinyloop" --tiers pack > "$TL_TMP/out" 2> "$TL_TMP/err"
rc=$?
cat "$TL_TMP/out"
[ $rc -eq 0 ] || { cat "$TL_TMP/err"; echo "FAIL: exit $rc"; exit 1; }
[ "$(grep -c 'passed$' "$TL_TMP/out")" -eq 4 ] || { echo "FAIL: expected 4 packed weights to pass"; exit 1; }
grep -q "head .*skipped: not packed: " "$TL_TMP/out" || { echo "FAIL: head not listed as skipped"; exit 1; }
echo ok
