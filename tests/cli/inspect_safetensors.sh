#!/bin/bash
# tl-inspect on safetensors: a single file, a sharded bf16 checkpoint given as its folder or as
# its index, and a calibration file; table and --json.
source "$TL_SRC/tests/cli/inspect_common.bash"

"$INSPECT" fx/model.safetensors > t1.txt || fail "single file"
grep -qE "^  embed.weight +F32 +\[100, 16\] +6.2 KiB +0" t1.txt || fail "single-file row: $(cat t1.txt)"
grep -q "metadata: format=pt" t1.txt || fail "metadata line"

for arg in fx/sharded fx/sharded/model.safetensors.index.json; do
  "$INSPECT" "$arg" --json > s.json || fail "sharded $arg"
  python3 - s.json <<'PY' || fail "sharded JSON for $arg"
import json, sys
s = json.load(open(sys.argv[1]))
assert s["kind"] == "safetensors" and len(s["shards"]) == 2
t = {e["name"]: e for e in s["tensors"]}
assert len(t) == 4
d = t["model.layers.0.mlp.down_proj.weight"]
assert d["dtype"] == "BF16" and d["shape"] == [64, 176] and d["bytes"] == 64 * 176 * 2 and d["shard"] == 1
assert s["bytes"] == sum(e["bytes"] for e in s["tensors"])
PY
done
"$INSPECT" fx/sharded --check --quiet || fail "sharded --check"

"$INSPECT" fx/calib.h5 > c.txt || fail "calibration file"
grep -qE "^  blk0.mlp_up +F32 +\[256, 256\] +16 +256.0 KiB" c.txt || fail "calibration row: $(cat c.txt)"
"$INSPECT" fx/calib.h5 --json | python3 -c '
import json, sys
s = json.load(sys.stdin)
assert s["kind"] == "calibration" and s["layout"] == "tinyloop-calib"
assert [h["name"] for h in s["hessians"]] == ["blk0.attn_qkv", "blk0.mlp_up"]
' || fail "calibration JSON"
echo "inspect_safetensors: ok"
