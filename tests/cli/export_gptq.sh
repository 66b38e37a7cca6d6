#!/bin/bash
# tl-export --format gptq from the command line: a tiny random HF Llama (tools/make_llama_checkpoint.py)
# quantized by gptq-quantize (RTN, group 128) and exported with --from; the folder is read back by
# marlin-pack's GPTQ importer and tl-inspect, and carries the tokenizer and config keys of the
# original, and tl-verify's e2e tier scores it with the file's perplexity. Bad input: exit 2, one
# stderr line, nothing written.
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

"$TE" m.tinyloop -o out --from orig --json > export.json 2> export.err || fail "tl-export: $(cat export.err)"
grep -q "^tl-export: wrote out (GPTQ v1, group size 128, 10 quantized weights -> 14 GPTQ layers" export.err ||
  fail "summary line: $(cat export.err)"
python3 - <<'PY' || fail "exported folder"
import json
r = json.load(open("export.json"))
assert r["gptq_layers"] == 14 and r["zero_points"]["groups"] > 0, r
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
unset -f bad_hook  # out is the exported folder now
bad "the pack tier reads .tinyloop files" "$TV" out --tokens t.u32
echo "export_gptq: ok"
