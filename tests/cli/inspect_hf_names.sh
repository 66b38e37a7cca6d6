#!/bin/bash
# tl-inspect --extract takes Hugging Face names (with or without ".weight") and maps them the way
# gptq-quantize imports a plain HF stack (q/k/v fused into pre.<i>.attn_qkv, noted on stderr);
# an unknown name is one stderr line, exit 2, with the closest stored name.
source "$TL_SRC/tests/cli/inspect_common.bash"
python3 -c "import h5py" 2>/dev/null || { echo "python3 with h5py not found: skipped"; exit 77; }

# The fixture under the names gptq-quantize gives an imported HF checkpoint.
cp fx/model.tinyloop hf.tinyloop
python3 - <<'PY' || fail "renaming entries with h5py"
import h5py
with h5py.File("hf.tinyloop", "r+") as f:
    f.move("/quant/blk0.attn_qkv", "/quant/pre.0.attn_qkv")
    f.move("/quant/blk0.mlp_up", "/quant/pre.0.mlp_up")
    f.move("/tensors/tok_embed", "/tensors/embed")
PY
arrays() { python3 - "$1" <<'PY'
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
h = json.loads(raw[8:8 + struct.unpack("<Q", raw[:8])[0]])
m = h.pop("__metadata__")
print(m["entry"], " ".join(f"{k}:{v['dtype']}{v['shape']}".replace(" ", "") for k, v in
                           sorted(h.items(), key=lambda kv: kv[1]["data_offsets"][0])))
PY
}
up="pre.0.mlp_up q:U8[256,256] scale:F16[2,256] zero:F16[2,256] w_hat:F32[256,256] marlin.B:I32[16,512] marlin.s:F16[2,256] marlin.delta:F16[2,256]"
for n in model.layers.0.mlp.up_proj.weight model.layers.0.mlp.up_proj; do
  "$INSPECT" hf.tinyloop --extract "$n" -o up.safetensors > up.txt 2> up.err || fail "extract $n: $(cat up.err)"
  [ "$(head -1 up.err)" = "tl-inspect: $n is stored as pre.0.mlp_up" ] || fail "note for $n: $(cat up.err)"
  [ "$(arrays up.safetensors)" = "$up" ] || fail "arrays for $n: $(arrays up.safetensors)"
done
for p in q k v; do
  n="model.layers.0.self_attn.${p}_proj"
  "$INSPECT" hf.tinyloop --extract "$n" -o qkv.safetensors --json > qkv.json 2> qkv.err || fail "extract $n"
  [ "$(cat qkv.err)" = "tl-inspect: $n is stored fused as pre.0.attn_qkv (q, k, v along N)" ] \
    || fail "fused note for $n: $(cat qkv.err)"
  [ "$(arrays qkv.safetensors)" = "pre.0.attn_qkv q:U8[128,256] scale:F16[1,256] zero:F16[1,256] w_hat:F32[128,256] marlin.B:I32[8,512] marlin.s:F16[1,256] marlin.delta:F16[1,256]" ] \
    || fail "fused arrays: $(arrays qkv.safetensors)"
  python3 -c 'import json, sys; d = json.load(open("qkv.json")); assert d["entry"] == "pre.0.attn_qkv" and d["requested"] == sys.argv[1], d' "$n" \
    || fail "--json entry/requested"
done
"$INSPECT" hf.tinyloop --extract model.embed_tokens.weight -o e.safetensors -q 2> e.err || fail "extract embed"
[ -s e.err ] && fail "--quiet printed the note: $(cat e.err)"
[ "$(arrays e.safetensors)" = "embed embed:F16[100,128]" ] || fail "embed arrays: $(arrays e.safetensors)"
# A stored name is taken as is, without a note.
"$INSPECT" hf.tinyloop --extract pre.0.mlp_up -o up.safetensors > /dev/null 2> up.err || fail "extract pre.0.mlp_up"
[ "$(cat up.err)" = "wrote up.safetensors" ] || fail "stored name: $(cat up.err)"

# Unknown names: the closest stored name, to what was asked or to its mapping.
expect_bad "^tl-inspect: hf.tinyloop: pre.0.mlp_upp: no such tensor or quantized weight; did you mean 'pre.0.mlp_up'\?$" \
  out.safetensors "$INSPECT" hf.tinyloop --extract pre.0.mlp_upp -o out.safetensors
expect_bad "model.layers.3.mlp.up_proj.weight: no such tensor or quantized weight; did you mean 'pre.0.mlp_up'\?$" \
  out.safetensors "$INSPECT" hf.tinyloop --extract model.layers.3.mlp.up_proj.weight -o out.safetensors
expect_bad "fx/model.tinyloop: nope: no such tensor or quantized weight; did you mean 'head'\?$" \
  out.safetensors "$INSPECT" fx/model.tinyloop --extract nope -o out.safetensors
expect_bad "fx/sharded: model.norm.weigth: no such tensor; did you mean 'model.norm.weight'\?$" \
  out.safetensors "$INSPECT" fx/sharded --extract model.norm.weigth -o out.safetensors
expect_bad "fx/calib.h5: blk0.mlp: no such Hessian; did you mean 'blk0.mlp_up'\?$" \
  out.safetensors "$INSPECT" fx/calib.h5 --extract blk0.mlp -o out.safetensors
# safetensors: the module name finds its ".weight"
"$INSPECT" fx/sharded --extract model.norm -o n.safetensors > /dev/null 2> n.err || fail "model.norm"
[ "$(head -1 n.err)" = "tl-inspect: model.norm is stored as model.norm.weight" ] || fail "note: $(cat n.err)"
[ "$(arrays n.safetensors)" = "model.norm.weight model.norm.weight:BF16[64]" ] || fail "$(arrays n.safetensors)"
echo "inspect_hf_names: ok"
