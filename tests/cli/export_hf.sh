#!/bin/bash
# tl-export --format gptq | compressed-tensors from the command line: a tiny random HF Llama
# (tools/make_llama_checkpoint.py) quantized by gptq-quantize (RTN, group 128) and exported with
# --from; each folder is read back by marlin-pack's importer and tl-inspect, carries the tokenizer
# and config keys of the original, and tl-verify's e2e tier scores it with the file's perplexity.
# Bad input: exit 2, one stderr line, nothing written.
source "$TL_SRC/tests/cli/tools_common.bash"
python3 -c "import numpy" 2>/dev/null || { echo "python3 with numpy not found: skipped"; exit 77; }
TE="$TL_BIN/tl-export"
bad_hook() { [ -e out ] && fail "output written despite the error: $1"; ls -a | grep -q '\.tmp-' && fail "temporary left: $1"; return 0; }

python3 "$TL_SRC/tools/make_llama_checkpoint.py" orig --shape tiny --dtype fp16 > /dev/null || fail "make_llama_checkpoint"
echo '{"model": {"type": "BPE"}}' > orig/tokenizer.json
"$GQ" orig --method rtn --group-size 128 -o m.tinyloop -q || fail "gptq-quantize"

bad "no-such.tinyloop" "$TE" no-such.tinyloop -o out
bad "the file's config is TinyLoop's own|--from" "$TE" m.tinyloop -o out --from no-such-folder
"$GQ" "$MODEL" --method rtn --group-size 128 -o loop.tinyloop -q || fail "gptq-quantize (shipped model)"
bad "a looped model" "$TE" loop.tinyloop -o out
mkdir keep && bad "keep: exists; tl-export writes a new folder" "$TE" m.tinyloop -o keep
"$GQ" orig --method rtn --group-size 128 --zero float -o float.tinyloop -q || fail "gptq-quantize --zero float"
bad "is not an integer zero point" "$TE" float.tinyloop -o out
bad "is not an integer zero point" "$TE" float.tinyloop --format compressed-tensors -o out

"$TE" m.tinyloop -o out --from orig --json > export.json 2> export.err || fail "tl-export: $(cat export.err)"
grep -q "^tl-export: wrote out (GPTQ v1, group size 128, 10 quantized weights -> 14 HF layers" export.err ||
  fail "summary line: $(cat export.err)"
python3 - <<'PY' || fail "exported folder"
import json
r = json.load(open("export.json"))
assert r["hf_layers"] == 14 and r["zero_points"]["groups"] > 0, r
c = json.load(open("out/config.json"))
q = c["quantization_config"]
assert q["quant_method"] == "gptq" and q["bits"] == 4 and q["group_size"] == 128 and q["checkpoint_format"] == "gptq", q
assert c["model_type"] == "llama" and c["hidden_size"] == 256, c
assert open("out/tokenizer.json").read() == open("orig/tokenizer.json").read()
PY
"$MP" out -o back.tinyloop -q || fail "marlin-pack cannot read the exported folder"
"$TI" out > inspect.txt 2>&1 || fail "tl-inspect: $(cat inspect.txt)"
grep -q "model.layers.1.self_attn.k_proj.qweight" inspect.txt || fail "tl-inspect lacks the split k_proj: $(head inspect.txt)"
# The folder is a model tl-verify's e2e tier scores as it is, as the file it came from.
python3 -c "import numpy as np; np.random.default_rng(3).integers(0, 512, 4 * 64, dtype='<u4').tofile('t.u32')"
"$TV" out --tiers e2e --tokens t.u32 --ctx 64 --device cpu --drift-json folder.json > folder.txt 2>&1 || fail "tl-verify on the folder: $(tail -3 folder.txt)"
"$TV" m.tinyloop --tiers e2e --tokens t.u32 --ctx 64 --device cpu --drift-json file.json > file.txt 2>&1 || fail "tl-verify on the file"
python3 - <<'PY' || fail "the folder's PPL is not the file's"
import json
a = json.load(open("file.json"))["paths"][0]["ppl"]
b = json.load(open("folder.json"))["paths"][0]["ppl"]
assert abs(b / a - 1) <= 1e-3, (a, b)
PY

# compressed-tensors: the same file as llm-compressor's pack-quantized W4A16 folder.
"$TE" m.tinyloop --format compressed-tensors -o ct --from orig --json > ct.json 2> ct.err || fail "tl-export ct: $(cat ct.err)"
grep -q "^tl-export: wrote ct (compressed-tensors pack-quantized, group size 128, 10 quantized weights -> 14 HF layers" ct.err ||
  fail "ct summary line: $(cat ct.err)"
python3 - <<'PY' || fail "exported compressed-tensors folder"
import json, struct
r = json.load(open("ct.json"))
assert r["format"] == "compressed-tensors" and r["hf_layers"] == 14 and r["ignored_linears"] == ["lm_head"], r
c = json.load(open("ct/config.json"))
q = c["quantization_config"]
assert q["quant_method"] == "compressed-tensors" and q["format"] == "pack-quantized", q
assert q["quantization_status"] == "compressed" and q["ignore"] == ["lm_head"], q
w = q["config_groups"]["group_0"]["weights"]
assert w == {**w, "num_bits": 4, "type": "int", "symmetric": False, "strategy": "group", "group_size": 128}, w
assert c["torch_dtype"] == "float16" and c["model_type"] == "llama", c
# The tensors' names, dtypes and shapes, from the safetensors header.
raw = open("ct/model.safetensors", "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
h = json.loads(raw[8:8 + n])
p = "model.layers.0.mlp.down_proj."   # K = 768, N = 256
assert h[p + "weight_packed"]["dtype"] == "I32" and h[p + "weight_packed"]["shape"] == [256, 96], h[p + "weight_packed"]
assert h[p + "weight_scale"]["dtype"] == "F16" and h[p + "weight_scale"]["shape"] == [256, 6]
assert h[p + "weight_zero_point"]["dtype"] == "I32" and h[p + "weight_zero_point"]["shape"] == [32, 6]
assert h[p + "weight_shape"]["dtype"] == "I64" and h[p + "weight_shape"]["shape"] == [2]
assert h["lm_head.weight"]["shape"] == [512, 256] and "lm_head.weight_packed" not in h
PY
"$TI" ct > ct_inspect.txt 2>&1 || fail "tl-inspect on the ct folder"
grep -q "4-bit checkpoint: *compressed-tensors, group size 128, zero points: 14 quantized linear(s), 7 dense tensor(s)" ct_inspect.txt ||
  fail "tl-inspect's checkpoint line: $(head -5 ct_inspect.txt)"
"$MP" ct -o ct.tinyloop --json > ct_pack.json 2> /dev/null || fail "marlin-pack cannot read the compressed-tensors folder"
grep -q '"input_format": "compressed-tensors-checkpoint"' ct_pack.json || fail "marlin-pack input_format: $(head -c 300 ct_pack.json)"
"$TV" ct --tiers e2e --tokens t.u32 --ctx 64 --device cpu --drift-json ct_drift.json > ct.txt 2>&1 || fail "tl-verify on the ct folder: $(tail -3 ct.txt)"
python3 - <<'PY' || fail "the compressed-tensors folder's PPL is not the file's"
import json
a = json.load(open("file.json"))["paths"][0]["ppl"]
b = json.load(open("ct_drift.json"))["paths"][0]["ppl"]
assert abs(b / a - 1) <= 1e-3, (a, b)
PY

# AWQ: the compressed-tensors folder repacked as AutoAWQ's GEMM layout (numpy, from AutoAWQ's
# description: qweight [K, N/8] with column 8c + order[i] at bits 4i), scored as a model.
python3 - <<'PY' || fail "writing the AWQ folder"
import json, os, shutil, struct
import numpy as np
ORDER = [0, 2, 4, 6, 1, 3, 5, 7]
raw = open("ct/model.safetensors", "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
hdr = json.loads(raw[8:8 + n])
def get(name):
    e = hdr[name]
    a, b = e["data_offsets"]
    dt = {"I32": "<i4", "I64": "<i8", "F16": "<f2", "BF16": "<u2", "F32": "<f4"}[e["dtype"]]
    return np.frombuffer(raw[8 + n + a:8 + n + b], dtype=dt).reshape(e["shape"]), e["dtype"]
def nibbles(words, count):   # [rows, W] int32 -> [rows, count] values, element i at bits 4 (i % 8)
    w = words.view("<u4")
    v = np.stack([(w >> np.uint32(4 * i)) & np.uint32(15) for i in range(8)], axis=-1).reshape(w.shape[0], -1)
    return v[:, :count]
def awq(v):                  # [rows, N] -> [rows, N/8] in AutoAWQ's order
    out = np.zeros((v.shape[0], v.shape[1] // 8), dtype=np.uint32)
    for i in range(8):
        out |= v[:, ORDER[i]::8].astype(np.uint32) << np.uint32(4 * i)
    return out.view("<i4")
tensors = {}
for name in hdr:
    if name == "__metadata__": continue
    if name.endswith(".weight_packed"):
        p = name[:-len(".weight_packed")]
        N, K = (int(x) for x in get(p + ".weight_shape")[0])
        scale, _ = get(p + ".weight_scale")                 # [N, G]
        G = scale.shape[1]
        q = nibbles(get(name)[0], K)                         # [N, K]
        z = nibbles(get(p + ".weight_zero_point")[0].T.copy(), N)  # [G, N]
        tensors[p + ".qweight"] = ("I32", awq(q.T.copy()))
        tensors[p + ".qzeros"] = ("I32", awq(z))
        tensors[p + ".scales"] = ("F16", scale.T.copy())
    elif not any(name.endswith(s) for s in (".weight_scale", ".weight_zero_point", ".weight_shape")):
        a, dt = get(name)
        tensors[name] = (dt, a)
os.makedirs("awq")
meta, off, blobs = {}, 0, []
for name, (dt, a) in sorted(tensors.items()):
    b = np.ascontiguousarray(a).tobytes()
    meta[name] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
    off += len(b); blobs.append(b)
h = json.dumps(meta).encode(); h += b" " * ((8 - len(h) % 8) % 8)
with open("awq/model.safetensors", "wb") as f:
    f.write(struct.pack("<Q", len(h))); f.write(h); f.writelines(blobs)
c = json.load(open("ct/config.json"))
c["quantization_config"] = {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True, "version": "gemm"}
json.dump(c, open("awq/config.json", "w"), indent=1)
PY
"$TV" awq --tiers e2e --tokens t.u32 --ctx 64 --device cpu --drift-json awq_drift.json > awq.txt 2>&1 || fail "tl-verify on the AWQ folder: $(tail -3 awq.txt)"
python3 - <<'PY' || fail "the AWQ folder's PPL is not the compressed-tensors folder's"
import json
a = json.load(open("ct_drift.json"))["paths"][0]["ppl"]
b = json.load(open("awq_drift.json"))["paths"][0]["ppl"]
assert a == b, (a, b)   # the same codes, scales and zeros: the same forward, bit for bit
PY

unset -f bad_hook  # out is the exported folder now
bad "the pack tier reads .tinyloop files" "$TV" out --tokens t.u32
echo "export_hf: ok"
