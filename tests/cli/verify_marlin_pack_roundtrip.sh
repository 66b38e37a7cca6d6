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
[ "$(grep -c 'passed$' "$TL_TMP/out")" -eq 5 ] || { echo "FAIL: expected 5 packed weights to pass"; exit 1; }
# The head (N = 200) is packed padded to 256 zero columns, and the pack tier checks the padding.
grep -q "head .*passed" "$TL_TMP/out" || { echo "FAIL: the padded head did not pass"; exit 1; }
# tl-inspect names the padding (table and JSON), and the file says version 4.
I="$TL_BIN/tl-inspect"
"$I" "$TL_TMP/packed.tinyloop" > "$TL_TMP/inspect" || { echo "FAIL: tl-inspect exit $?"; exit 1; }
grep -q "head .* padded to 256 " "$TL_TMP/inspect" || { cat "$TL_TMP/inspect"; echo "FAIL: tl-inspect does not show the padding"; exit 1; }
"$I" "$TL_TMP/packed.tinyloop" --json > "$TL_TMP/inspect.json" || { echo "FAIL: tl-inspect --json exit $?"; exit 1; }
python3 - "$TL_TMP/inspect.json" <<'PY' || { echo "FAIL: tl-inspect JSON"; exit 1; }
import json, sys
j = json.load(open(sys.argv[1]))
head = [q for q in j["quantized"] if q["name"] == "head"][0]["marlin"]
assert head["padded_n"] == 256 and head["B_shape"] == [16, 512], head
assert all("padded_n" not in q["marlin"] for q in j["quantized"] if q["name"] != "head" and q["marlin"]), j
assert j["format_version"] == 4, j["format_version"]
PY
echo ok
