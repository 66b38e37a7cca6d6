#!/bin/bash
# gptq-quantize end to end against upstream (tests/golden/gptq_256x128_*, slimmed copies of
# ../shared/golden): a bare .safetensors holding the golden W (PyTorch [N, K]) and a
# tinyloop-calib file holding the golden H go through the CLI; the stored codes must equal
# upstream's (the port reproduces them exactly for these cases), float16 scale/zero too, the
# --json summary must parse and report upstream's sum(Losses); --method rtn must equal rtn/.
set -u
: "${TL_BIN:?}" "${TL_TMP:?}" "${TL_SRC:?}" "${TL_GOLDEN:?}"
python3 -c "import numpy, h5py" 2>/dev/null || { echo "python3 with numpy + h5py not found: skipped"; exit 77; }
rm -rf "$TL_TMP" && mkdir -p "$TL_TMP" && cd "$TL_TMP" || exit 1
GQ="$TL_BIN/gptq-quantize"
fail() { echo "FAIL: $*" >&2; exit 1; }

python3 - "$TL_GOLDEN" <<'PY' || fail "could not build the inputs"
import json, struct, sys
import h5py, numpy as np
g = sys.argv[1]
with h5py.File(f"{g}/gptq_256x128_calib.h5", "r") as f:
    W, H, n = f["W"][:], f["H"][:], int(f.attrs["nsamples"])
w_pt = np.ascontiguousarray(W.T.astype("<f4"))  # PyTorch [N, K]
hdr = json.dumps({"proj.weight": {"dtype": "F32", "shape": list(w_pt.shape), "data_offsets": [0, w_pt.nbytes]}}).encode()
hdr += b" " * (-len(hdr) % 8)
with open("w.safetensors", "wb") as f:
    f.write(struct.pack("<Q", len(hdr)) + hdr + w_pt.tobytes())
with h5py.File("calib.h5", "w", libver=("v110", "v110")) as f:
    f.attrs["format"] = "tinyloop-calib"
    f.attrs["format_version"] = 1
    d = f.create_dataset("hessian/proj", data=H.astype("<f4"))  # found via "proj.weight" minus ".weight"
    d.attrs["nsamples"] = n
    d.attrs["K"] = H.shape[0]
PY
cp w.safetensors w.orig

check() {  # check CASE OUT [rtn]: codes / scale / zero of OUT vs the golden case (or its rtn/)
  python3 - "$TL_GOLDEN/gptq_$1.h5" "$2" "${3:-}" <<'PY'
import sys
import h5py, numpy as np
ref, out, rtn = sys.argv[1], sys.argv[2], sys.argv[3] == "rtn"
p = "rtn/" if rtn else ""
with h5py.File(ref, "r") as r, h5py.File(out, "r") as o:
    q = o["quant/proj.weight/q"][:]
    K, N = r[p + "q"].shape
    codes = np.empty((K, N), np.uint8)
    codes[:, 0::2] = q & 15
    codes[:, 1::2] = q >> 4
    bad = np.argwhere(codes != r[p + "q"][:])
    if len(bad):
        sys.exit(f"{len(bad)} codes differ, first at {bad[:5].tolist()}")
    for name in ("scale", "zero"):
        a = o[f"quant/proj.weight/{name}"][:].view(np.uint16)
        b = r[p + name][:].view(np.uint16)
        if not np.array_equal(a, b):
            sys.exit(f"{name}: {int((a != b).sum())} float16 values differ")
PY
}

"$GQ" w.safetensors -o g128.tinyloop --calib calib.h5 --group-size 128 --json > g128.json 2> g128.err \
  || fail "gptq g128 failed: $(cat g128.err)"
check 256x128_g128_act0 g128.tinyloop || fail "g128 act0 differs from upstream"
python3 - "$TL_GOLDEN/gptq_256x128_g128_act0.h5" <<'PY' || fail "JSON summary"
import json, sys, h5py
s = json.load(open("g128.json"))
w = s["weights"][0]
ref = float(h5py.File(sys.argv[1], "r").attrs["gptq_error_sum_losses"])
assert w["name"] == "proj.weight" and w["K"] == 256 and w["N"] == 128 and w["group_size"] == 128, w
assert abs(w["gptq_loss"] - ref) <= 1e-4 * ref, (w["gptq_loss"], ref)
assert w["rtn_loss"] > w["gptq_loss"], w
assert s["totals"]["quantized"] == 1 and s["input_kind"] == "safetensors", s["totals"]
PY
grep -q "^\[1/1\] proj.weight 256x128 gs=128 loss=" g128.err || fail "progress line: $(cat g128.err)"

"$GQ" w.safetensors -o row_act.tinyloop --calib calib.h5 --group-size row --act-order -q 2> q.err \
  || fail "gptq row act-order failed: $(cat q.err)"
[ -s q.err ] && fail "--quiet printed: $(cat q.err)"
check 256x128_gfull_act1 row_act.tinyloop || fail "row act-order differs from upstream"

"$GQ" w.safetensors -o static.tinyloop --calib calib.h5 --act-order -q || fail "static groups failed"
check 256x128_g128_act1_static static.tinyloop || fail "act-order + g128 (static groups) differs from upstream"

"$GQ" w.safetensors -o rtn.tinyloop --method rtn --group-size 128 -q || fail "rtn failed"
check 256x128_g128_act0 rtn.tinyloop rtn || fail "rtn differs from upstream rtn/"

cmp -s w.safetensors w.orig || fail "the input was modified"
ls -a | grep -q '\.tmp-' && fail "temporary file left behind"
echo "gptq_golden_cli: ok"
