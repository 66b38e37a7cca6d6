#!/bin/bash
# tl-inspect on a .tinyloop: the table names every entry with dtype/shape, group size, Marlin
# section and provenance; --json carries the same facts; --check reads everything back.
source "$TL_SRC/tests/cli/inspect_common.bash"

"$INSPECT" fx/model.tinyloop > table.txt 2> err.txt || fail "listing failed: $(cat err.txt)"
[ -s err.txt ] && fail "listing wrote to stderr: $(cat err.txt)"
grep -q "tinyloop v1, producer tl_make_fixtures" table.txt || fail "header line: $(head -1 table.txt)"
grep -qE "^  tok_embed +F16 +\[100, 128\] +25.0 KiB" table.txt || fail "dense row for tok_embed"
grep -qE "^  blk0.attn_qkv +128 x 256 +4 +128 +1 +gs=-1 ist-daslab-marlin-v1" table.txt || fail "per-row Marlin row"
grep -qE "^  blk0.mlp_up +256 x 256 +4 +128 +2 +gs=128 ist-daslab-marlin-v1" table.txt || fail "grouped Marlin row"
grep -qE "^  head +128 x 37 +4 +64 +2 +- .*sign_bit .*method=gptq" table.txt || fail "odd-N row with extra channel"
grep -q "n_loop=1" table.txt || fail "config line"

"$INSPECT" fx/model.tinyloop --json > s.json || fail "--json failed"
python3 - s.json <<'PY' || fail "JSON summary content"
import json, sys
s = json.load(open(sys.argv[1]))
assert s["kind"] == "tinyloop" and s["format_version"] == 1, s["kind"]
assert s["config"]["d_model"] == 128 and s["config"]["loops"] == 2
dense = {t["name"]: t for t in s["tensors"]}
assert dense["tok_embed"]["dtype"] == "F16" and dense["tok_embed"]["shape"] == [100, 128]
assert dense["tok_embed"]["bytes"] == 100 * 128 * 2
q = {w["name"]: w for w in s["quantized"]}
assert sorted(q) == ["blk0.attn_qkv", "blk0.mlp_up", "head"], sorted(q)
assert q["blk0.mlp_up"]["marlin"] == {"groupsize": 128, "layout": "ist-daslab-marlin-v1",
                                      "B_shape": [16, 512], "s_shape": [2, 256], "compact": False}, q["blk0.mlp_up"]["marlin"]
assert q["blk0.attn_qkv"]["marlin"]["groupsize"] == -1 and q["blk0.attn_qkv"]["G"] == 1
assert q["head"]["marlin"] is None and q["head"]["N"] == 37 and q["head"]["extra_datasets"] == ["sign_bit"]
assert q["head"]["provenance"]["method"] == "gptq" and q["head"]["provenance"]["damp"] == 0.01
assert "K" not in q["head"]["provenance"]
PY

"$INSPECT" fx/model.tinyloop --check > check.txt 2> check.err || fail "--check failed"
grep -q "checked: 5 entries read back, all valid" check.txt || fail "--check summary: $(tail -1 check.txt)"
[ -s check.err ] && fail "--check of a small file wrote to stderr: $(cat check.err)"
out="$("$INSPECT" fx/model.tinyloop --check --quiet 2>&1)" || fail "--quiet failed"
[ -z "$out" ] || fail "--quiet printed: $out"
"$INSPECT" --help | grep -q -- "--extract" || fail "--help"
version="$("$INSPECT" --version)" || fail "--version"
[[ "$version" =~ ^tl-inspect\ [0-9]+\.[0-9]+\.[0-9]+ ]] || fail "--version: $version"
# --json leads with the report header of every tool (formats/report_header.h), for the listing
# and for --extract alike.
"$INSPECT" fx/model.tinyloop --extract head -o h.safetensors --json > x.json || fail "--extract --json"
for j in s.json x.json; do
  python3 - "$j" "${version#tl-inspect }" <<'PY' || fail "JSON header of $j"
import json, sys
d = json.load(open(sys.argv[1]))
assert list(d)[:3] == ["tool", "version", "schema_version"], list(d)[:4]
assert d["tool"] == "tl-inspect" and d["version"] == sys.argv[2] and d["schema_version"] == 1, d
PY
done
echo "inspect_tinyloop: ok"
