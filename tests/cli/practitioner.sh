#!/bin/bash
# The CLI a practitioner expects (one section per friction of the CLI issue, on the shipped model):
#  1. dead ends are named: a group size Marlin cannot run is a warning (and in --json) in
#     gptq-quantize, an error with --for marlin; marlin-pack says why it skipped, --require-all
#     exits 1 writing nothing; tl-verify tells "not runnable by Marlin" from "marlin-pack not run";
#  2. one copy of the codes: marlin-pack --drop-native writes compact weights that every reader
#     sees exactly as the native ones (extract, e2e PPL), at ~4.25 instead of ~8.5 bits/weight;
#  3. progress: per-phase ETA (unit-tested in test_formats), a long dense copy reports itself;
#  4. --only + --drop-unselected writes only the selected weights and the config;
#  5. flags: case-insensitive enums, -1 for per row, "did you mean", the -o hint, input-type hints;
#  6. conventions: "<tool> <version>", JSON headers (tool, version, schema_version), numbers as
#     numbers, summaries on stderr and data on stdout, "-" for report paths.
source "$(dirname "$0")/tools_common.bash"
TOKENS="$TL_SRC/data/kjv_eval.u32"
command -v python3 > /dev/null || { echo "python3 not found: skipped"; exit 77; }
json() { python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print($2)" "$1"; }

# ---- 1. dead ends ----
"$GQ" "$MODEL" --method rtn --group-size 64 -o g64.tinyloop --json > g64.json 2> g64.err || fail "g64 run"
[ "$(grep -c 'warning' g64.err)" -eq 1 ] || fail "expected one warning line: $(cat g64.err)"
grep -q "warning: 15 of 15 weight(s) cannot run on the Marlin kernel (15 x group size 64 is not supported" g64.err ||
  fail "warning text: $(grep warning g64.err)"
[ "$(json g64.json "j['marlin']['not_runnable']")" = 15 ] || fail "--json marlin.not_runnable"
[ "$(json g64.json "sum(w['marlin_ok'] for w in j['weights'])")" = 0 ] || fail "--json marlin_ok per weight"
"$GQ" "$MODEL" --method rtn -o g128.tinyloop 2> g128.err || fail "g128 run"
grep -q warning g128.err && fail "a warning for group 128: $(cat g128.err)"
bad "--for marlin: 15 of 15 weight\(s\) cannot run on the Marlin kernel.*use --group-size 128 or row" \
  "$GQ" "$MODEL" --method rtn --group-size 64 --for marlin -o nope.tinyloop
[ -e nope.tinyloop ] && fail "--for marlin wrote its output"
"$GQ" "$MODEL" --method rtn --group-size 128 --for marlin -o ok.tinyloop -q || fail "--for marlin on g128"

"$MP" g64.tinyloop -o g64m.tinyloop > mp.out 2> mp.err || fail "marlin-pack g64"
grep -q "0 packed, 0 verified, 15 skipped" mp.err || fail "marlin-pack summary: $(tail -2 mp.err)"
grep -q "^marlin-pack: skipped: 15 x group size 64 is not supported by the Marlin kernel" mp.err ||
  fail "marlin-pack does not say why: $(tail -2 mp.err)"
"$MP" g64.tinyloop -o req.tinyloop --require-all > req.out 2> req.err; rc=$?
[ $rc -eq 1 ] || fail "--require-all with skips: exit $rc, expected 1"
[ "$(wc -l < req.err)" -eq 1 ] && grep -q "^marlin-pack: --require-all: 15 of 15 weight(s) would stay unpacked" req.err ||
  fail "--require-all message: $(cat req.err)"
[ -e req.tinyloop ] && fail "--require-all wrote its output"
ls -a | grep -q '\.tmp-' && fail "temporary left by --require-all"
"$MP" g128.tinyloop -o req.tinyloop --require-all -q || fail "--require-all with everything packable"

"$TV" g64m.tinyloop --tiers pack > tv.out 2> tv.err; rc=$?
[ $rc -eq 77 ] || fail "tl-verify on an unpackable file: exit $rc"
grep -q "pack: skipped: not packed: no weight of FILE is runnable by the Marlin kernel (15 x group size 64" tv.err ||
  fail "skip reason for unpackable: $(cat tv.err)"
"$TV" g128.tinyloop --tiers pack > tv.out 2> tv.err; rc=$?
[ $rc -eq 77 ] || fail "tl-verify on an unpacked file: exit $rc"
grep -q "pack: skipped: no Marlin section in FILE: marlin-pack was not run (15 of 15 weight(s) pass the Marlin gate)" tv.err ||
  fail "skip reason for not packed: $(cat tv.err)"

# ---- 2. one copy of the codes ----
"$MP" g128.tinyloop -o native.tinyloop --json > native.json 2> /dev/null || fail "pack native"
"$MP" g128.tinyloop -o compact.tinyloop --drop-native --json > compact.json 2> compact.err || fail "pack compact"
grep -q "15 packed, 0 verified, 0 skipped; .* 4.25 bits/weight (compact)" compact.err || fail "compact summary: $(tail -1 compact.err)"
[ "$(json native.json "round(j['totals']['bits_per_weight'], 2)")" = 8.5 ] || fail "native bits/weight"
[ "$(json compact.json "round(j['totals']['bits_per_weight'], 2)")" = 4.25 ] || fail "compact bits/weight"
[ "$(json compact.json "all(w['compact'] for w in j['weights'])")" = True ] || fail "compact per weight"
n=$(stat -c %s native.tinyloop) c=$(stat -c %s compact.tinyloop) u=$(stat -c %s g128.tinyloop)
# The shipped model's quantized codes are 4.7 MiB of its ~5.3 MiB; compact drops the second copy.
[ $((c * 100 / n)) -le 55 ] || fail "compact file is $c bytes, native packed $n"
[ $((c * 100 / u)) -le 102 ] || fail "compact file $c bytes is larger than the unpacked $u"
[ "$(json compact.json "j['weights'][0]['bytes_added']")" -gt 0 ] || fail "bytes_added"
# Every reader sees the same weight: tl-inspect --extract gives identical arrays (q, scale, zero,
# w_hat, marlin.B, marlin.s, marlin.delta) from both files.
for f in native compact; do
  "$TI" $f.tinyloop --extract pre.1.mlp_down -o $f-x.safetensors -q || fail "extract from $f"
done
cat > same_arrays.py <<'PY'
import json, struct, sys
def arrays(p):
    b = open(p, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    h.pop("__metadata__", None)
    return {k: b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]] for k, v in h.items()}
a, b = arrays(sys.argv[1]), arrays(sys.argv[2])
assert sorted(a) == sorted(b) and "marlin.delta" in a, (sorted(a), sorted(b))
for k in a:
    assert a[k] == b[k], k
PY
python3 same_arrays.py native-x.safetensors compact-x.safetensors || fail "extracted arrays differ (native vs compact)"
"$TV" compact.tinyloop --tiers pack --json pack.json > /dev/null 2>&1 || fail "pack tier on the compact file"
[ "$(json pack.json "sum(c['status'] == 'passed' for t in j['tiers'] for c in t['cases'])")" = 15 ] || fail "pack cases"
"$TI" compact.tinyloop | grep -q "bits per quantized weight:  4.25" || fail "tl-inspect summary of the compact file"
# The e2e tier on the CPU: identical perplexity from the native and the compact file.
for f in native compact; do
  "$TV" $f.tinyloop --tiers e2e --tokens "$TOKENS" --device cpu --max-tokens 2048 --drift-json $f-drift.json -q \
    > /dev/null 2>&1 || fail "e2e on $f"
done
[ "$(json native-drift.json "[p['ppl'] for p in j['paths']]")" = "$(json compact-drift.json "[p['ppl'] for p in j['paths']]")" ] ||
  fail "native and compact files score differently"
# Compact back to native: marlin-pack without --drop-native restores q and scale (format_version 1).
"$MP" compact.tinyloop -o renative.tinyloop -q || fail "compact -> native"
"$TI" compact.tinyloop | head -1 | grep -q "(tinyloop v2," || fail "a compact file is not format_version 2"
"$TI" renative.tinyloop | head -1 | grep -q "(tinyloop v1," || fail "the re-expanded file is not format_version 1"
"$TI" renative.tinyloop --extract pre.1.mlp_down -o re-x.safetensors -q || fail "extract renative"
python3 same_arrays.py native-x.safetensors re-x.safetensors || fail "compact -> native changed the weight"

# ---- 3. progress: a dense copy longer than 2 s says so (here: fast, so only the absence of noise) ----
"$GQ" "$MODEL" --method rtn -o quiet.tinyloop -q > q.out 2> q.err || fail "quiet run"
[ -s q.out ] || [ -s q.err ] && fail "--quiet printed: $(cat q.out q.err)"

# ---- 4. --only + --drop-unselected ----
"$GQ" "$MODEL" --method rtn --only 'pre\.0\.mlp_up' --drop-unselected -o one.tinyloop --json > one.json 2> one.err ||
  fail "--drop-unselected run"
"$TI" one.tinyloop --json > one-inspect.json || fail "inspect one"
[ "$(json one-inspect.json "[q['name'] for q in j['quantized']]")" = "['pre.0.mlp_up']" ] || fail "quantized entries"
[ "$(json one-inspect.json "len(j['tensors'])")" = 0 ] || fail "dense tensors were written"
[ "$(json one-inspect.json "'config' in j")" = True ] || fail "the config is missing"
[ "$(stat -c %s one.tinyloop)" -lt 700000 ] || fail "--drop-unselected file is $(stat -c %s one.tinyloop) bytes"
"$GQ" "$MODEL" --method rtn --only 'pre\.0\.mlp_up' -o one-all.tinyloop -q || fail "--only without drop"
"$TI" one-all.tinyloop --json > one-all.json
[ "$(json one-all.json "len(j['tensors'])")" -gt 9 ] || fail "--only alone must copy the rest"

# ---- 5. flags and messages ----
"$GQ" "$MODEL" --method RTN --group-size ROW -o upper.tinyloop -q || fail "case-insensitive --method/--group-size"
"$GQ" "$MODEL" --method rtn --group-size -1 -o minus1.tinyloop -q || fail "--group-size -1"
cmp -s upper.tinyloop minus1.tinyloop || fail "-1 and ROW differ"
"$GQ" "$MODEL" --method rtn --zero FLOAT -o zf.tinyloop -q || fail "--zero FLOAT"
bad "unknown options --bits, --group_size \(did you mean --group-size\?\)" "$GQ" "$MODEL" --bits 4 --group_size 128 -o x.tinyloop
bad "unknown option --metod \(did you mean --method\?\)" "$GQ" "$MODEL" --metod rtn -o x.tinyloop
bad "unexpected argument 'out.tinyloop'; marlin-pack takes one INPUT; give the output with -o OUTPUT" \
  "$MP" g128.tinyloop out.tinyloop
bad "config.json: this is a model config \(config.json\), not a safetensors index: pass the folder" \
  "$GQ" "$MODEL/config.json" --method rtn -o x.tinyloop
bad "kjv_eval.u32: not a calibration file \(HDF5 Hessians\): it looks like a token file; pass it with --calib-tokens" \
  "$GQ" "$MODEL" --calib "$TOKENS" -o x.tinyloop
bad "an HDF5 file, not a token file: pass a calibration file \(Hessians\) with --calib" \
  "$GQ" "$MODEL" --calib-tokens g128.tinyloop -o x.tinyloop
"$TV" --tiers PACK g128.tinyloop > /dev/null 2>&1; [ $? -eq 77 ] || fail "--tiers PACK"
# Without a GPU the reason says so, not "CUDA driver version is insufficient for CUDA runtime".
"$TV" g128.tinyloop --tiers e2e --tokens "$TOKENS" --device CUDA --max-tokens 1024 -q > gpu.out 2> gpu.err
if grep -q "e2e: skipped" gpu.err; then
  grep -qE "e2e: skipped: --device cuda: (no CUDA GPU on this machine|no CUDA device|built without CUDA)" gpu.err ||
    fail "GPU skip reason: $(grep skipped gpu.err)"
fi

# ---- 6. conventions ----
version=$(sed -n 's/.*project(tinyloop_tools VERSION \([0-9.]*\).*/\1/p' "$TL_SRC/CMakeLists.txt")
[ -n "$version" ] || fail "no version in CMakeLists.txt"
for t in gptq-quantize marlin-pack tl-inspect tl-verify; do
  [ "$("$TL_BIN/$t" --version)" = "$t $version" ] ||
    fail "$t --version prints '$("$TL_BIN/$t" --version)'"
done
"$TV" g128.tinyloop --tiers pack --json - > tvj.json 2> /dev/null; "$TI" g128.tinyloop --json > tij.json
for f in g64.json native.json tvj.json tij.json compact-drift.json; do
  [ "$(json $f "all(k in j for k in ('tool', 'version', 'schema_version'))")" = True ] ||
    fail "$f: top-level keys $(json $f "sorted(j)")"
  [ "$(json $f "j['version']")" = "$version" ] || fail "$f: version"
  [ "$(json $f "type(j['schema_version']).__name__")" = int ] || fail "$f: schema_version"
done
[ "$(json g64.json "type(j['group_size']).__name__, j['group_size'], j['group']")" = "int 64 64" ] ||
  fail "gptq-quantize --json group_size: $(json g64.json "j['group_size']")"
"$GQ" "$MODEL" --method rtn --group-size row -o row.tinyloop --json > row.json 2> /dev/null
[ "$(json row.json "j['group_size']")" = -1 ] || fail "per row is group_size -1 in --json"
# Summaries on stderr, stdout data only (or nothing).
"$GQ" "$MODEL" --method rtn -o s1.tinyloop > s.out 2> s.err; [ -s s.out ] && fail "gptq-quantize wrote to stdout"
grep -q "weight(s) quantized (rtn, 4.25 bits/weight)" s.err || fail "gptq-quantize summary: $(tail -1 s.err)"
"$MP" s1.tinyloop -o s2.tinyloop > s.out 2> s.err; [ -s s.out ] && fail "marlin-pack wrote to stdout"
grep -q "^marlin-pack: s1.tinyloop -> s2.tinyloop: 15 weights" s.err || fail "marlin-pack summary on stderr"
echo "practitioner: ok"
