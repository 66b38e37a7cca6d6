#!/usr/bin/env bash
# The model families end to end through the tools, on the transformers-written fixtures of
# tests/data/families (tools/make_family_fixtures.py): for each, gptq-quantize (GPTQ and RTN,
# sequential calibration on other tokens), marlin-pack, tl-inspect and tl-verify's e2e tier
# against the original checkpoint with --score all. Checked: the reference PPL equals
# transformers' within 1e-4 relative (CPU; the GPU too where one is present, within 1e-3: fp16
# activations), GPTQ's KLD against the reference is below RTN's, the family entries (biases,
# q/k norms) are in the files and survive marlin-pack, and the files are format_version 3
# (those whose config uses a family feature).
source "$(dirname "$0")/tools_common.bash"
FAM="$TL_SRC/tests/data/families"
# Calibration tokens other than the scored ones: 128 windows of 64 random ids < 256 (8192 tokens:
# with fewer, the Hessians of these tiny layers are too noisy for GPTQ to beat RTN reliably).
python3 -c "import numpy as np; np.random.default_rng(7).integers(0, 256, 128 * 64).astype('<u4').tofile('calib.u32')"

ppl_of() {  # the transformers PPL a fixture recorded (safetensors header metadata)
  python3 - "$1" <<'EOF'
import json, struct, sys
with open(sys.argv[1], "rb") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    print(json.loads(f.read(n))["__metadata__"]["ppl_all"])
EOF
}
field() {  # field FILE EXPR: a value of a drift JSON (j = the object)
  python3 -c "import json, sys; j = json.load(open(sys.argv[1])); print($2)" "$1"
}
within() {  # within A B REL: |A / B - 1| <= REL
  python3 -c "import sys; a, b, r = map(float, sys.argv[1:]); sys.exit(0 if abs(a / b - 1) <= r else 1)" "$1" "$2" "$3"
}

# Strict consumption at the tools' boundary: an extra tensor, an unknown math-changing key.
cp -r "$FAM/qwen3" extra && python3 - extra/model.safetensors <<'EOF'
import json, struct, sys
p = sys.argv[1]
raw = open(p, "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
head, data = json.loads(raw[8:8 + n]), raw[8 + n:]
head["model.layers.0.mlp.gate_scale"] = {"dtype": "F16", "shape": [64], "data_offsets": [len(data), len(data) + 128]}
h = json.dumps(head).encode()
open(p, "wb").write(struct.pack("<Q", len(h)) + h + data + bytes(128))
EOF
bad "extra: model.layers.0.mlp.gate_scale: tensor not modelled by tinyloop-tools" "$GQ" extra --method rtn -o x.tinyloop
"$GQ" "$FAM/qwen3" --method rtn --group-size 32 -o q3.tinyloop -q || fail "gptq-quantize qwen3"
bad "model.layers.0.mlp.gate_scale: tensor not modelled" "$TV" q3.tinyloop --tiers e2e --reference extra \
  --tokens "$FAM/qwen3.tokens.u32" --ctx 64 --device cpu
[ ! -e x.tinyloop ] || fail "a refused input left an output"
cp -r "$FAM/mistral-window" key && python3 -c "
import json; c = json.load(open('key/config.json')); c['attn_logit_softcapping'] = 50.0; json.dump(c, open('key/config.json', 'w'))"
bad "key/config.json: attn_logit_softcapping: config key not modelled by tinyloop-tools \(= 50.0\)" "$GQ" key --method rtn -o x.tinyloop

gpu=0
for name in llama-rope-llama3 llama-rope-linear llama-head-dim llama-bias-tied mistral-window qwen2-bias-tied \
            qwen2-window qwen3; do
  d="$FAM/$name"
  want=$(ppl_of "$d.ref.safetensors")
  for m in gptq rtn; do
    extra=()
    [ $m = gptq ] && extra=(--calib-tokens calib.u32 --calib-seq 64 --calib-samples 128)
    "$GQ" "$d" --method $m --group-size 32 --device cpu "${extra[@]}" -o $name-$m.tinyloop -q 2> gq.err ||
      fail "$name: gptq-quantize --method $m: $(cat gq.err)"
    "$TV" $name-$m.tinyloop --tiers e2e --reference "$d" --tokens "$d.tokens.u32" --ctx 64 --score all --device cpu \
      --drift-json $name-$m.json -q > /dev/null 2> tv.err || fail "$name: tl-verify e2e ($m): $(cat tv.err)"
    ref=$(field $name-$m.json "j['reference']['ppl']")
    within "$ref" "$want" 1e-4 || fail "$name: reference PPL $ref, transformers $want (bound 1e-4 relative)"
  done
  kg=$(field $name-gptq.json "j['paths'][0]['kld']['mean']")
  kr=$(field $name-rtn.json "j['paths'][0]['kld']['mean']")
  python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) < float(sys.argv[2]) else 1)" "$kg" "$kr" ||
    fail "$name: GPTQ's KLD vs the reference ($kg) is not below RTN's ($kr)"
  # The file: version 3, the family entries present, and still present after marlin-pack.
  "$MP" $name-gptq.tinyloop -o $name-packed.tinyloop -q 2> mp.err || fail "$name: marlin-pack: $(cat mp.err)"
  for f in $name-gptq.tinyloop $name-packed.tinyloop; do
    "$TI" $f > inspect.out || fail "$name: tl-inspect $f"
    v=3; [ $name = llama-head-dim ] && v=1  # head_dim was always in /config: no new feature
    grep -q "(tinyloop v$v," inspect.out || fail "$name: $f is not format_version $v: $(head -1 inspect.out)"
    case $name in
      *bias*) grep -qE "^  pre\.1\.attn_qkv\.bias +F16 +\[" inspect.out || fail "$name: no pre.1.attn_qkv.bias in $f";;
      qwen2-window) grep -qE "sliding_window=16 .*window_first_block=1" inspect.out || fail "$name: window not in $f's config";;
      qwen3) grep -qE "^  pre\.0\.q_norm +F16 +\[32\]" inspect.out || fail "$name: no pre.0.q_norm in $f";;
    esac
  done
  grep -qE "^  pre\.0\.mlp_down\.bias " inspect.out || [ $name != llama-bias-tied ] || fail "$name: no mlp bias"
  # The GPU: the same reference on the fp16 path, where a GPU is present.
  "$TV" $name-packed.tinyloop --tiers e2e --reference "$d" --tokens "$d.tokens.u32" --ctx 64 --score all \
    --device cuda --drift-json $name-gpu.json -q > gpu.out 2> gpu.err
  rc=$?
  if [ $rc -eq 77 ]; then
    continue
  fi
  [ $rc -eq 0 ] || fail "$name: tl-verify --device cuda: exit $rc: $(cat gpu.err)"
  gpu=1
  ref=$(field $name-gpu.json "j['reference']['ppl']")
  within "$ref" "$want" 1e-3 || fail "$name: GPU reference PPL $ref, transformers $want (bound 1e-3 relative)"
  # GPTQ's sequential calibration on the GPU (libgpu's block forward): beats RTN too.
  "$GQ" "$d" --group-size 32 --device cuda --calib-tokens calib.u32 --calib-seq 64 --calib-samples 128 \
    -o $name-gpugptq.tinyloop -q 2> gq.err || fail "$name: gptq-quantize --device cuda: $(cat gq.err)"
  "$TV" $name-gpugptq.tinyloop --tiers e2e --reference "$d" --tokens "$d.tokens.u32" --ctx 64 --score all \
    --device cpu --drift-json $name-gpugptq.json -q > /dev/null 2> tv.err || fail "$name: tl-verify (GPU GPTQ): $(cat tv.err)"
  kq=$(field $name-gpugptq.json "j['paths'][0]['kld']['mean']")
  python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) < float(sys.argv[2]) else 1)" "$kq" "$kr" ||
    fail "$name: GPU GPTQ's KLD vs the reference ($kq) is not below RTN's ($kr)"
  echo "$name: GPU reference PPL $ref (transformers $want); KLD GPTQ cpu $kg, gpu $kq, RTN $kr"
done
echo "model families: 8 fixtures through gptq-quantize, marlin-pack, tl-inspect, tl-verify (CPU$([ $gpu = 1 ] && echo ' and GPU'))"
