#!/bin/bash
# tl-inspect --extract: the documented names, dtypes, shapes and orientations of the arrays
# written for a quantized weight (with and without Marlin), a dense tensor, a safetensors tensor
# and a Hessian; w_hat recomputed independently from q, scale, zero with numpy when available.
source "$TL_SRC/tests/cli/inspect_common.bash"

check() {  # check FILE EXPECTED_JSON: names/dtypes/shapes exactly, in order
  python3 - "$1" "$2" <<'PY'
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
h = json.loads(raw[8:8 + n])
meta = h.pop("__metadata__", {})
got = [[k, v["dtype"], v["shape"]] for k, v in sorted(h.items(), key=lambda kv: kv[1]["data_offsets"][0])]
want = json.loads(sys.argv[2])
assert got == want, (got, want)
try:
    import numpy as np
except ImportError:
    sys.exit(0)
if "w_hat" in h:
    base = 8 + n
    def arr(name, dt):
        b, e = h[name]["data_offsets"]
        return np.frombuffer(raw[base + b:base + e], dtype=dt).reshape(h[name]["shape"])
    q, s, z, w = arr("q", np.uint8), arr("scale", np.float16), arr("zero", np.float16), arr("w_hat", np.float32)
    assert q.max() <= 15
    gs = int(meta["group_size"])
    g = np.arange(q.shape[0]) // gs  # groups run along K (rows)
    ref = q.astype(np.float32) * s[g].astype(np.float32) + z[g].astype(np.float32)
    assert np.array_equal(ref, w), float(np.abs(ref - w).max())
    if "marlin.delta" in h:
        d = arr("marlin.delta", np.float16).astype(np.float32)
        ref_d = (z.astype(np.float32) + 8 * s.astype(np.float32)).astype(np.float16).astype(np.float32)
        assert np.array_equal(d, ref_d)
PY
}

"$INSPECT" fx/model.tinyloop --extract blk0.mlp_up -o q.safetensors > list.txt 2> err.txt || fail "extract blk0.mlp_up"
grep -q "wrote q.safetensors" err.txt || fail "no note on stderr"
check q.safetensors '[["q","U8",[256,256]],["scale","F16",[2,256]],["zero","F16",[2,256]],["w_hat","F32",[256,256]],
  ["marlin.B","I32",[16,512]],["marlin.s","F16",[2,256]],["marlin.delta","F16",[2,256]]]' || fail "quantized + Marlin arrays"
"$INSPECT" fx/model.tinyloop --extract head -o h.safetensors --quiet || fail "extract head"
check h.safetensors '[["q","U8",[128,37]],["scale","F16",[2,37]],["zero","F16",[2,37]],["w_hat","F32",[128,37]]]' \
  || fail "quantized arrays, odd N"
"$INSPECT" fx/model.tinyloop --extract tok_embed -o e.safetensors --json > e.json || fail "extract dense"
check e.safetensors '[["tok_embed","F16",[100,128]]]' || fail "dense tensor as stored"
python3 -c 'import json,sys; d=json.load(open("e.json")); assert d["arrays"][0]["name"] == "tok_embed"' || fail "--json"
"$INSPECT" fx/sharded --extract model.norm.weight -o n.safetensors --quiet || fail "extract from shards"
check n.safetensors '[["model.norm.weight","BF16",[64]]]' || fail "safetensors tensor as stored"
"$INSPECT" fx/calib.h5 --extract blk0.attn_qkv -o H.safetensors --quiet || fail "extract Hessian"
check H.safetensors '[["H","F32",[128,128]]]' || fail "Hessian"
# The extracted file is itself inspectable.
"$INSPECT" q.safetensors --check --quiet || fail "extracted file does not validate"
echo "inspect_extract: ok"
