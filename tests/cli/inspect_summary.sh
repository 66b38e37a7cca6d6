#!/bin/bash
# tl-inspect's summary block (table top, "summary" in --json) against numbers h5py computes on
# its own from the file's datasets; the JSON header (tool, version, schema_version first); and
# the table's short provenance (4 significant digits, ~120-character rows) with the full
# values kept in --json.
source "$TL_SRC/tests/cli/inspect_common.bash"
python3 -c "import h5py" 2>/dev/null || { echo "python3 with h5py not found: skipped"; exit 77; }

"$INSPECT" fx/model.tinyloop > t.txt || fail "listing"
"$INSPECT" fx/model.tinyloop --json > s.json || fail "--json"
# The summary is the block right after the file line.
[ "$(sed -n 2p t.txt)" = "summary:" ] || fail "summary is not at the top: $(head -3 t.txt)"
python3 - s.json t.txt <<'PY' || fail "summary content"
import json, os, sys, h5py
s = json.load(open(sys.argv[1]))
table = open(sys.argv[2]).read().splitlines()
assert list(s)[:3] == ["tool", "version", "schema_version"], list(s)[:3]
assert s["tool"] == "tl-inspect" and s["schema_version"] == 1 and isinstance(s["version"], str)
want = {"dense": 0, "quantized": 0, "marlin": 0}
dense_p = quant_p = packed = nq = 0
with h5py.File("fx/model.tinyloop", "r") as f:
    for n, d in f["tensors"].items():
        want["dense"] += d.id.get_storage_size()
        dense_p += d.size
    for n, g in f["quant"].items():
        nq += 1
        quant_p += int(g.attrs["K"]) * int(g.attrs["N"])
        def walk(name, obj, key):
            if isinstance(obj, h5py.Dataset):
                want[key] += obj.id.get_storage_size()
        for c, obj in g.items():
            if c == "marlin":
                packed += 1
                obj.visititems(lambda name, o: walk(name, o, "marlin"))
            else:
                walk(c, obj, "quantized")
m = s["summary"]
assert m["parameters"] == dense_p + quant_p == 115968, m
assert m["dense_parameters"] == dense_p and m["quantized_parameters"] == quant_p == 128*256 + 256*256 + 128*37
assert (m["quantized_weights"], m["packed"], m["unpacked"], m["dense_tensors"]) == (3, 2, 1, 2), m
assert m["bytes"] == dict(want, total=sum(want.values())), (m["bytes"], want)
assert m["bytes"]["total"] == s["stored_bytes"]
bits = (want["quantized"] + want["marlin"]) * 8 / quant_p
assert isinstance(m["bits_per_quantized_weight"], float) and abs(m["bits_per_quantized_weight"] - bits) < 1e-12
assert m["file_bytes"] == os.path.getsize("fx/model.tinyloop")
kib = lambda b: "%.1f KiB" % (b / 1024)
rows = [l.split(":", 1)[1].strip() for l in table[2:7]]
assert rows == ["115,968 (dense 12,928, quantized 103,040)",
                "3 (packed 2, unpacked 1)",
                "dense %s, quantized codes+scales %s, Marlin sections %s, total %s"
                % (kib(want["dense"]), kib(want["quantized"]), kib(want["marlin"]), kib(sum(want.values()))),
                "%.2f" % bits,
                kib(os.path.getsize("fx/model.tinyloop"))], rows
assert [l.split(":")[0].strip() for l in table[2:7]] == [
    "parameters", "quantized weights", "stored", "bits per quantized weight", "file size"], table[2:7]
PY

# safetensors and calibration summaries
"$INSPECT" fx/sharded --json | python3 -c '
import json, os, sys
s = json.load(sys.stdin)
assert list(s)[:3] == ["tool", "version", "schema_version"]
m = s["summary"]
assert m["parameters"] == 100*64 + 64*176 + 64*64 + 64 and m["tensors"] == 4 and m["shards"] == 2, m
assert m["bytes"] == {"tensors": s["bytes"]} and m["file_bytes"] == sum(os.path.getsize(p) for p in s["shards"])
' || fail "safetensors summary"
"$INSPECT" fx/sharded | grep -qx "  parameters:  21,824 in 4 tensor(s)" || fail "safetensors summary row"
"$INSPECT" fx/calib.h5 --json | python3 -c '
import json, sys
m = json.load(sys.stdin)["summary"]
assert m["hessians"] == 2 and m["bytes"] == {"hessians": (128*128 + 256*256) * 4}, m
' || fail "calibration summary"
"$INSPECT" fx/calib.h5 | grep -qx "  hessians:   2 (320.0 KiB)" || fail "calibration summary row"

# Provenance: floats at %.4g, a long provenance cut to whole pairs counted as "+N more", long
# strings shortened in the middle; --json keeps every value as written.
cp fx/model.tinyloop prov.tinyloop
python3 - <<'PY' || fail "adding provenance with h5py"
import h5py
with h5py.File("prov.tinyloop", "r+") as f:
    g = f["/quant/blk0.mlp_up"]
    g.attrs["loss"] = 48571.234375
    g.attrs["damp"] = 0.0123456789
    g.attrs["source"] = "/data/checkpoints/some/very/long/folder/name/model.safetensors"
    for i in range(12):
        g.attrs[f"note{i}"] = f"value number {i}"
PY
"$INSPECT" prov.tinyloop > p.txt || fail "listing prov.tinyloop"
row="$(grep '^  blk0.mlp_up ' p.txt)"
[[ "$row" == *"  method=gptq loss=4.857e+04 +17 more" ]] || fail "short floats, whole pairs, count: $row"
# The provenance cell gets what the other columns leave of 120 characters, and at least 40.
cell="${row#*  method=}"; start=$(( ${#row} - ${#cell} - 7 ))
budget=$(( 120 - start > 40 ? 120 - start : 40 ))
[ $(( ${#row} - start )) -le $budget ] || fail "provenance cell over its $budget characters: $row"
grep '^  blk0.attn_qkv ' p.txt | grep -q "  method=gptq loss=12.5 damp=0.01 +3 more$" || fail "untouched provenance row"
# A narrow table leaves room for more pairs: the same provenance on a short-named, unpacked weight.
cp prov.tinyloop narrow.tinyloop
python3 - <<'PY' || fail "narrow table file"
import h5py
with h5py.File("narrow.tinyloop", "r+") as f:
    del f["/quant/blk0.attn_qkv"], f["/quant/head"], f["/quant/blk0.mlp_up/marlin"]
    f.move("/quant/blk0.mlp_up", "/quant/w")
    f.copy("/quant/w", "/quant/v")
    for k in list(f["/quant/v"].attrs):
        if k not in ("bits", "group_size", "K", "N", "G", "method", "source"):
            del f["/quant/v"].attrs[k]
PY
"$INSPECT" narrow.tinyloop > n.txt || fail "listing narrow.tinyloop"
row="$(grep '^  w ' n.txt)"
[ "${#row}" -le 120 ] || fail "row longer than 120 characters (${#row}): $row"
[[ "$row" == *"  method=gptq loss=4.857e+04 damp=0.01235 +16 more" ]] || fail "narrow row: $row"
# a long path keeps its start and its file name (32 characters)
grep -qE '^  v .*  method=gptq source=/data/check\.\.\./model\.safetensors$' n.txt \
  || fail "long string: $(grep '^  v ' n.txt)"
# --json keeps every value as written
"$INSPECT" prov.tinyloop --json | python3 -c '
import json, sys
q = {w["name"]: w for w in json.load(sys.stdin)["quantized"]}
p = q["blk0.mlp_up"]["provenance"]
assert p["loss"] == 48571.234375 and p["damp"] == 0.0123456789, p
assert p["source"] == "/data/checkpoints/some/very/long/folder/name/model.safetensors"
assert p["note11"] == "value number 11" and len(p) == 6 + 13, sorted(p)
' || fail "full provenance in --json"
echo "inspect_summary: ok"
