#!/bin/bash
# gptq-quantize usage and bad input: exit 2 with one stderr line "gptq-quantize: ..." that says
# what was expected, nothing written at the output path, no temporary file, input untouched.
# --help / --version exit 0.
set -u
: "${TL_BIN:?}" "${TL_TMP:?}" "${TL_SRC:?}"
python3 -c "import numpy, h5py" 2>/dev/null || { echo "python3 with numpy + h5py not found: skipped"; exit 77; }
rm -rf "$TL_TMP" && mkdir -p "$TL_TMP" && cd "$TL_TMP" || exit 1
GQ="$TL_BIN/gptq-quantize" TI="$TL_BIN/tl-inspect"
fail() { echo "FAIL: $*" >&2; exit 1; }

python3 <<'PY' || fail "could not build the inputs"
import json, struct
import h5py, numpy as np
rng = np.random.default_rng(0)
tensors = {"a.weight": rng.standard_normal((64, 32)).astype("<f4"),   # [N, K]
           "b.weight": rng.standard_normal((48, 32)).astype("<f4")}
def write(path, ts):
    meta, off, blobs = {}, 0, []
    for k, v in ts.items():
        meta[k] = {"dtype": "F32", "shape": list(v.shape), "data_offsets": [off, off + v.nbytes]}
        off += v.nbytes; blobs.append(v.tobytes())
    hdr = json.dumps(meta).encode(); hdr += b" " * (-len(hdr) % 8)
    open(path, "wb").write(struct.pack("<Q", len(hdr)) + hdr + b"".join(blobs))
write("w.safetensors", tensors)
write("nan.safetensors", {"nan.weight": np.full((16, 32), np.nan, "<f4")})
X = rng.standard_normal((256, 32)).astype("<f4")
with h5py.File("calib.h5", "w", libver=("v110", "v110")) as f:
    f.attrs["format"] = "tinyloop-calib"; f.attrs["format_version"] = 1
    d = f.create_dataset("hessian/a.weight", data=(2 / 256 * X.T @ X).astype("<f4"))
    d.attrs["nsamples"] = 256; d.attrs["K"] = 32
    d = f.create_dataset("hessian/nan.weight", data=np.eye(32, dtype="<f4"))
    d.attrs["nsamples"] = 1; d.attrs["K"] = 32
with h5py.File("calib_k16.h5", "w", libver=("v110", "v110")) as f:
    f.attrs["format"] = "tinyloop-calib"; f.attrs["format_version"] = 1
    d = f.create_dataset("hessian/a.weight", data=np.eye(16, dtype="<f4"))
    d.attrs["nsamples"] = 1; d.attrs["K"] = 16
open("junk.bin", "w").write("not a checkpoint")
PY
cp w.safetensors w.orig

expect_bad() {  # expect_bad PATTERN ARGS...
  local pat="$1"; shift
  rm -f out.tinyloop
  "$GQ" "$@" > bad.out 2> bad.err
  local rc=$?
  [ $rc -eq 2 ] || fail "expected exit 2, got $rc: $* ($(cat bad.err))"
  grep -q "^gptq-quantize: \|^--\|^The following\|^input" bad.err || fail "no tool prefix: $(cat bad.err)"
  [ "$(grep -vc '^Run with --help' bad.err)" -eq 1 ] || fail "expected one message line: $(cat bad.err)"
  grep -qE -- "$pat" bad.err || fail "stderr lacks '$pat': $(cat bad.err)"
  [ -e out.tinyloop ] && fail "output written despite the error: $*"
  ls -a | grep -q '\.tmp-' && fail "temporary file left behind: $*"
  return 0
}

"$GQ" --help > help.txt || fail "--help exit $?"
grep -q -- "--group-size" help.txt && grep -q "32, 64, 128, 256, row" help.txt || fail "--help lacks the group sizes"
"$GQ" --version | grep -q "^gptq-quantize [0-9]" || fail "--version"

expect_bad "pass --calib FILE.h5 .* or use --method rtn" w.safetensors -o out.tinyloop --only '^a\.'
expect_bad "no Hessian for 1 selected weight\(s\): b.weight" w.safetensors -o out.tinyloop --calib calib.h5 --only '^(a|b)\.' --group-size 32
expect_bad "calib_k16.h5: a.weight: Hessian a.weight is 16x16, expected 32x32" w.safetensors -o out.tinyloop --calib calib_k16.h5 --only '^a\.' --group-size 32
expect_bad "a.weight: --group-size 128 is larger than K = 32 \(in_features\); use --group-size row" w.safetensors -o out.tinyloop --method rtn
expect_bad "group-size.*must be one of 32, 64, 128, 256, row" w.safetensors -o out.tinyloop --group-size 100
expect_bad "zero" w.safetensors -o out.tinyloop --zero half
expect_bad "--act-order applies to --method gptq" w.safetensors -o out.tinyloop --method rtn --act-order
expect_bad "--range-search searches integer zero points: it does not apply to --zero float" w.safetensors -o out.tinyloop --method rtn --range-search --zero float
expect_bad "gptq-quantize: nope.safetensors: No such file" nope.safetensors -o out.tinyloop --method rtn
expect_bad "junk.bin" junk.bin -o out.tinyloop --method rtn
expect_bad "nan.weight: weight is not finite at \[0, 0\]" nan.safetensors -o out.tinyloop --method rtn --group-size row
expect_bad "no linear weight matches --only zzz" w.safetensors -o out.tinyloop --method rtn --only zzz
expect_bad "is the same file as the input" w.safetensors -o w.safetensors --method rtn
expect_bad "not a valid regular expression" w.safetensors -o out.tinyloop --method rtn --only '('
expect_bad "output" w.safetensors --method rtn

expect_bad "device" w.safetensors -o out.tinyloop --calib calib.h5 --only '^a\.' --group-size 32 --device tpu
# --device: without a usable GPU, cuda is exit 2 with the reason and auto says it runs on the
# CPU. (Where a GPU is usable, test_cuda's gptq gpu cases run the GPU path instead.)
if ! "$GQ" w.safetensors -o probe.tinyloop --calib calib.h5 --only '^a\.' --group-size 32 --device cuda -q 2> /dev/null; then
  expect_bad "^gptq-quantize: --device cuda: (no CUDA|no usable|this build|built without)" \
    w.safetensors -o out.tinyloop --calib calib.h5 --only '^a\.' --group-size 32 --device cuda
  "$GQ" w.safetensors -o auto.tinyloop --calib calib.h5 --only '^a\.' --group-size 32 2> auto.err || fail "--device auto failed"
  grep -q "device auto: .*GPTQ runs on the CPU" auto.err || fail "--device auto did not say where GPTQ runs: $(cat auto.err)"
  "$GQ" w.safetensors -o cpu.tinyloop --calib calib.h5 --only '^a\.' --group-size 32 --device cpu 2> cpu.err || fail "--device cpu failed"
  ! grep -q "device" cpu.err || fail "--device cpu mentions devices: $(cat cpu.err)"
  cmp -s auto.tinyloop cpu.tinyloop || fail "--device auto on the CPU wrote other bytes than --device cpu"
fi
rm -f probe.tinyloop

# The happy path still works on the same files, and exit codes stay 0.
"$GQ" w.safetensors -o out.tinyloop --calib calib.h5 --only '^a\.' --group-size 32 -q || fail "good run failed"
# --range-search: recorded in the provenance, the codes differ from the plain run's.
"$GQ" w.safetensors -o rs.tinyloop --calib calib.h5 --only '^a\.' --group-size 32 --range-search --device cpu -q || fail "--range-search run failed"
"$TI" rs.tinyloop --json | grep -q '"range_search"' || fail "--range-search is not in the provenance"
"$TI" out.tinyloop --json | grep -q '"range_search"' && fail "a plain run's provenance names a range search"
cmp -s rs.tinyloop out.tinyloop && fail "--range-search changed nothing"
[ -s out.tinyloop ] || fail "no output"
cmp -s w.safetensors w.orig || fail "the input was modified"
echo "gptq_bad_input: ok"
