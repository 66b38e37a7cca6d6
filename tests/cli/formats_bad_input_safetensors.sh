#!/bin/bash
# safetensors headers that lie, and other broken checkpoints: exit 2, one clear line, no output.
source "$TL_SRC/tests/cli/inspect_common.bash"

# mk NAME HEADER DATA_BYTES: an 8-byte LE header length, the header, DATA_BYTES bytes of data.
mk() {
  python3 - "$1" "$2" "$3" <<'PY'
import struct, sys
h = sys.argv[2].encode()
open(sys.argv[1], "wb").write(struct.pack("<Q", len(h)) + h + b"\x5a" * int(sys.argv[3]))
PY
}
e() { printf '"%s": {"dtype": "%s", "shape": %s, "data_offsets": [%s, %s]}' "$@"; }

run_bad() {  # run_bad PATTERN FILE: listing and extraction both refuse it
  expect_bad "$1" - "$INSPECT" "$2"
  expect_bad "$1" out.safetensors "$INSPECT" "$2" --extract a -o out.safetensors
}
mkdir -p st
: > st/empty.safetensors
run_bad "empty.safetensors: empty file" st/empty.safetensors
printf 'abc' > st/short.safetensors
run_bad "short.safetensors: truncated: 3 bytes" st/short.safetensors
printf 'GIF89a not a checkpoint at all, just some bytes' > st/magic.safetensors
run_bad "magic.safetensors: header length [0-9]+: expected 2..100000000" st/magic.safetensors
mk st/trunc.safetensors "{$(e a F32 '[4]' 0 16)}" 16
head -c 30 st/trunc.safetensors > st/t2 && mv st/t2 st/trunc.safetensors
run_bad "trunc.safetensors: header length .* at most the file size" st/trunc.safetensors
mk st/past.safetensors "{$(e a F32 '[4]' 0 16)}" 12
run_bad "past.safetensors: a: data_offsets \[0,16\] end past the data section" st/past.safetensors
mk st/overlap.safetensors "{$(e a F32 '[2]' 0 8), $(e b F32 '[2]' 4 12)}" 12
run_bad "overlap.safetensors: b: .*overlap" st/overlap.safetensors
mk st/hole.safetensors "{$(e a F32 '[2]' 0 8), $(e b F32 '[2]' 12 20)}" 20
run_bad "hole.safetensors: b: .*hole of 4" st/hole.safetensors
mk st/neg.safetensors "{$(e a F32 '[-2]' 0 8)}" 8
run_bad "neg.safetensors: a: shape \[-2\]: expected non-negative" st/neg.safetensors
mk st/huge.safetensors "{$(e a F32 '[4294967296, 4294967296]' 0 8)}" 8
run_bad "huge.safetensors: a: .*overflows" st/huge.safetensors
mk st/size.safetensors "{$(e a F16 '[3]' 0 8)}" 8
run_bad "size.safetensors: a: .*expected 6" st/size.safetensors
mk st/json.safetensors '{"a": {"dtype": "F32", "shape": [2]' 8
run_bad "json.safetensors: header: invalid JSON" st/json.safetensors
mk st/dtype.safetensors "{$(e a F8_E5M2 '[8]' 0 8)}" 8
run_bad "dtype.safetensors: a: unsupported dtype 'F8_E5M2'" st/dtype.safetensors
# sharded: an index that names a missing shard / a tensor the shard lacks
mkdir -p shard && cp fx/sharded/*.safetensors shard/
python3 -c '
import json; j = json.load(open("fx/sharded/model.safetensors.index.json"))
j["weight_map"]["lm_head.weight"] = "model-00002-of-00002.safetensors"
json.dump(j, open("shard/model.safetensors.index.json", "w"))'
run_bad "lm_head.weight: missing tensor" shard
echo '{"weight_map": ' > shard/model.safetensors.index.json
run_bad "model.safetensors.index.json: invalid JSON" shard
echo "formats_bad_input_safetensors: ok"
