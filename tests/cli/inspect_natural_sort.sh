#!/bin/bash
# tl-inspect lists names in natural order (runs of digits compare as numbers: pre.2 before
# pre.10) in the table and in --json, for every list: safetensors tensors, dense tensors,
# quantized weights, Hessians. The .tinyloop / calibration variants are the fixtures with
# entries copied under layer names by h5py.
source "$TL_SRC/tests/cli/inspect_common.bash"

# Rows of the table section that starts with HEADING, names only.
rows() { awk -v h="$2" '$0 ~ "^"h { on = 1; getline; next } on && /^  / { print $1; next } { on = 0 }' "$1" | paste -sd' '; }
json_names() { python3 -c 'import json, sys; print(" ".join(e["name"] for e in json.load(open(sys.argv[1]))[sys.argv[2]]))' "$1" "$2"; }

# safetensors: a file whose header lists the names in byte order
python3 - <<'PY' || fail "writing ns.safetensors"
import json, struct
names = ["layers.10.w", "layers.1.w", "layers.2.w", "layers.0.w", "a9", "a10", "a009b", "a9a"]
h, off = {}, 0
for n in sorted(names):
    h[n] = {"dtype": "F32", "shape": [2], "data_offsets": [off, off + 8]}
    off += 8
b = json.dumps(h).encode()
b += b" " * (-len(b) % 8)
open("ns.safetensors", "wb").write(struct.pack("<Q", len(b)) + b + bytes(off))
PY
want="a9 a9a a009b a10 layers.0.w layers.1.w layers.2.w layers.10.w"
"$INSPECT" ns.safetensors > st.txt || fail "listing ns.safetensors"
[ "$(rows st.txt tensors:)" = "$want" ] || fail "safetensors table order: $(rows st.txt tensors:)"
"$INSPECT" ns.safetensors --json > st.json || fail "--json ns.safetensors"
[ "$(json_names st.json tensors)" = "$want" ] || fail "safetensors JSON order: $(json_names st.json tensors)"

python3 -c "import h5py" 2>/dev/null || { echo "python3 with h5py not found: .tinyloop part skipped"; exit 77; }
cp fx/model.tinyloop ns.tinyloop && cp fx/calib.h5 ns.h5
python3 - <<'PY' || fail "adding layer entries with h5py"
import h5py
with h5py.File("ns.tinyloop", "r+") as f:
    for i in (10, 2, 1):
        f.copy("/tensors/final_norm", f"/tensors/pre.{i}.attn_norm")
        f.copy("/quant/head", f"/quant/pre.{i}.mlp_up")
    f.copy("/tensors/final_norm", "/tensors/loop.0.attn_norm")
with h5py.File("ns.h5", "r+") as f:
    for n in ("blk10.mlp_up", "blk2.mlp_up"):
        f.copy("/hessian/blk0.mlp_up", f"/hessian/{n}")
PY
"$INSPECT" ns.tinyloop > tl.txt || fail "listing ns.tinyloop"
"$INSPECT" ns.tinyloop --json > tl.json || fail "--json ns.tinyloop"
want="final_norm loop.0.attn_norm pre.1.attn_norm pre.2.attn_norm pre.10.attn_norm tok_embed"
[ "$(rows tl.txt 'dense tensors:')" = "$want" ] || fail "dense table order: $(rows tl.txt 'dense tensors:')"
[ "$(json_names tl.json tensors)" = "$want" ] || fail "dense JSON order: $(json_names tl.json tensors)"
want="blk0.attn_qkv blk0.mlp_up head pre.1.mlp_up pre.2.mlp_up pre.10.mlp_up"
[ "$(rows tl.txt 'quantized weights:')" = "$want" ] || fail "quantized table order: $(rows tl.txt 'quantized weights:')"
[ "$(json_names tl.json quantized)" = "$want" ] || fail "quantized JSON order: $(json_names tl.json quantized)"
"$INSPECT" ns.tinyloop --check > /dev/null || fail "--check ns.tinyloop"
"$INSPECT" ns.h5 > h.txt || fail "listing ns.h5"
"$INSPECT" ns.h5 --json > h.json || fail "--json ns.h5"
want="blk0.attn_qkv blk0.mlp_up blk2.mlp_up blk10.mlp_up"
[ "$(rows h.txt 'hessians:')" = "$want" ] || fail "Hessian table order: $(rows h.txt 'hessians:')"
[ "$(json_names h.json hessians)" = "$want" ] || fail "Hessian JSON order: $(json_names h.json hessians)"
echo "inspect_natural_sort: ok"
