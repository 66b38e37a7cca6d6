#!/bin/bash
# Damaged, hostile and special inputs, and a full disk, through every tool (issue 15): exit 2 with
# one stderr line "tool: file: item: what was expected", within seconds, no signal, no hang, no
# temporary left, nothing written at the output path.
set -u
: "${TL_BIN:?}" "${TL_TMP:?}" "${TL_SRC:?}"
python3 -c "import numpy, h5py" 2>/dev/null || { echo "python3 with numpy + h5py not found: skipped"; exit 77; }
rm -rf "$TL_TMP" && mkdir -p "$TL_TMP" && cd "$TL_TMP" || exit 1
GQ="$TL_BIN/gptq-quantize" MP="$TL_BIN/marlin-pack" TV="$TL_BIN/tl-verify" TI="$TL_BIN/tl-inspect"
FIX="$TL_BIN/../tests/make_verify_fixture"
REPRO="$TL_SRC/tests/repro"
fail() { echo "FAIL: $*" >&2; exit 1; }
bad() {  # bad PATTERN CMD...: exit 2 within 30 s, exactly one stderr line matching PATTERN
  ONLY_LINE=1 bad_last "$@"
}
bad_last() {  # bad_last PATTERN CMD...: as bad, for damage found mid-run: the last line is the error
  local pat="$1"; shift
  rm -f out.tinyloop out.safetensors
  timeout 30 "$@" > bad.out 2> bad.err; local rc=$?
  [ $rc -eq 2 ] || fail "expected exit 2, got $rc: $* ($(head -c 600 bad.err))"
  [ -z "${ONLY_LINE:-}" ] || [ "$(wc -l < bad.err)" -eq 1 ] || fail "expected one stderr line: $* ($(cat bad.err))"
  tail -n 1 bad.err | grep -q "^[a-z-]*: " || fail "no tool prefix: $(cat bad.err)"
  tail -n 1 bad.err | grep -qE -- "$pat" || fail "the last stderr line lacks '$pat': $* ($(cat bad.err))"
  [ ! -e out.tinyloop ] && [ ! -e out.safetensors ] || fail "output written despite the error: $*"
  ! ls -a | grep -q '\.tmp-' || fail "temporary file left: $*"
}
every_tool() {  # every_tool PATTERN FILE: each tool that reads a .tinyloop refuses FILE
  local pat="$1" f="$2"
  bad "$pat" "$TI" "$f"
  bad "$pat" "$TI" "$f" --check
  bad "$pat" "$TI" "$f" --extract w -o out.safetensors
  bad "$pat" "$MP" "$f" -o out.tinyloop
  bad "$pat" "$TV" "$f"
  bad "$pat" "$GQ" "$f" --method rtn -o out.tinyloop
}

# ---- the reproducers of the reliability pass (tests/repro, copied from the shared folder) ----
for f in hdf5_segv_attr_iterate hdf5_hang_global_heap tl_attr_N_int64max; do
  every_tool "$f.tinyloop: HDF5 superblock version 0 has no metadata checksums.*h5repack --low=2 --high=2" \
    "$REPRO/$f.tinyloop"
done
# Rewritten in the checksummed format (h5repack itself crashes or hangs on the first two), N =
# INT64_MAX is caught by the reader's range check.
h5repack --low=2 --high=2 "$REPRO/tl_attr_N_int64max.tinyloop" nmax.tinyloop > /dev/null 2>&1 ||
  fail "h5repack of tl_attr_N_int64max"
every_tool "nmax.tinyloop: /quant/w: expected 0 < K, N <= 2\^31.*N = 9223372036854775807" nmax.tinyloop
mkdir hf && cp "$REPRO/config_dhead_mul_overflow.json" hf/config.json
python3 - <<'PY' || fail "safetensors"
import json, struct, numpy as np
t = {"model.embed_tokens.weight": np.zeros((8, 512), "<f4")}
meta, off, blobs = {}, 0, []
for k, v in t.items():
    meta[k] = {"dtype": "F32", "shape": list(v.shape), "data_offsets": [off, off + v.nbytes]}; off += v.nbytes; blobs.append(v.tobytes())
h = json.dumps(meta).encode(); h += b" " * (-len(h) % 8)
open("hf/model.safetensors", "wb").write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
PY
bad "config.json: head_dim: expected an integer of at most 16777216" "$GQ" hf --method rtn -o out.tinyloop

# ---- special files as inputs: refused at once, never opened (a FIFO would block) ----
mkfifo fifo
bad "fifo: is a FIFO" "$TI" fifo
bad "fifo: is a FIFO" "$MP" fifo -o out.tinyloop
bad "fifo: is a FIFO" "$TV" fifo
bad "fifo: is a FIFO; expected a checkpoint" "$GQ" fifo --method rtn -o out.tinyloop

# ---- a packed fixture and damaged copies of it ----
"$FIX" packed.tinyloop --seed 5 || fail "fixture"
python3 - <<'PY' || fail "damaged copies"
import shutil, h5py, numpy as np
def copy(name):
    shutil.copy("packed.tinyloop", name)
    return h5py.File(name, "r+")
w = "layers.0.mlp_up"
with h5py.File("packed.tinyloop", "r") as f:
    off = f[f"quant/{w}/marlin/B"].id.get_chunk_info(0).byte_offset  # first chunk of B's data
b = bytearray(open("packed.tinyloop", "rb").read()); b[off + 100] ^= 0x5a
open("flipped_B.tinyloop", "wb").write(bytes(b))
with copy("B_float32.tinyloop") as f:  # B rewritten as float32, shape kept
    B = f[f"quant/{w}/marlin/B"][...]; del f[f"quant/{w}/marlin/B"]
    f.create_dataset(f"quant/{w}/marlin/B", data=B.astype("<f4"), chunks=True, fletcher32=True)
for name, attr, value in [("gs0", "group_size", 0), ("gs_big", "group_size", 100000), ("n_neg", "N", -3),
                          ("k_nan", "K", np.float64("nan")), ("k_1e300", "K", np.float64(1e300))]:
    with copy(name + ".tinyloop") as f:
        f[f"quant/{w}"].attrs[attr] = value
PY
bad_last "flipped_B.tinyloop: /quant/layers.0.mlp_up/marlin/B: read failed \(corrupt data or checksum mismatch\)" \
  "$TV" flipped_B.tinyloop --tiers pack
bad "flipped_B.tinyloop: .*checksum mismatch" "$TI" flipped_B.tinyloop --check
bad_last "B_float32.tinyloop: /quant/layers.0.mlp_up/marlin/B: expected dtype int32" "$TV" B_float32.tinyloop --tiers pack
bad "B_float32.tinyloop: .*expected dtype int32" "$MP" B_float32.tinyloop -o out.tinyloop
for f in gs0 gs_big n_neg; do
  bad "$f.tinyloop: /quant/layers.0.mlp_up: expected 0 < K, N <= 2\^31 and 0 < group_size <= K" "$MP" $f.tinyloop -o out.tinyloop
  bad "$f.tinyloop: /quant/layers.0.mlp_up: expected 0 < K" "$TV" $f.tinyloop --tiers pack
done
for f in k_nan k_1e300; do
  bad "$f.tinyloop: /quant/layers.0.mlp_up: attribute 'K' = .*: expected an integer" "$MP" $f.tinyloop -o out.tinyloop
done

# ---- RTN checks every weight against config.json ----
python3 - <<'PY' || fail "HF fixtures"
import json, os, struct, numpy as np
rng = np.random.default_rng(0)
cfg = {"model_type": "llama", "hidden_size": 512, "num_attention_heads": 8, "num_key_value_heads": 8,
       "intermediate_size": 1024, "vocab_size": 256, "num_hidden_layers": 1}
def write(folder, shapes):
    os.makedirs(folder, exist_ok=True)
    json.dump(cfg, open(f"{folder}/config.json", "w"))
    meta, off, blobs = {}, 0, []
    for k, s in shapes.items():
        v = rng.standard_normal(s).astype("<f4")
        meta[k] = {"dtype": "F32", "shape": list(s), "data_offsets": [off, off + v.nbytes]}; off += v.nbytes; blobs.append(v.tobytes())
    h = json.dumps(meta).encode(); h += b" " * (-len(h) % 8)
    open(f"{folder}/model.safetensors", "wb").write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
L = "model.layers.0."
good = {"model.embed_tokens.weight": (256, 512), L + "self_attn.q_proj.weight": (512, 512),
        L + "self_attn.k_proj.weight": (512, 512), L + "self_attn.v_proj.weight": (512, 512),
        L + "self_attn.o_proj.weight": (512, 512), L + "mlp.gate_proj.weight": (1024, 512),
        L + "mlp.up_proj.weight": (1024, 512), L + "mlp.down_proj.weight": (512, 1024),
        L + "input_layernorm.weight": (512,), L + "post_attention_layernorm.weight": (512,),
        "model.norm.weight": (512,), "lm_head.weight": (256, 512)}
write("good", good)
write("o_proj", dict(good, **{L + "self_attn.o_proj.weight": (256, 1024)}))
write("embed", dict(good, **{"model.embed_tokens.weight": (300, 512)}))
os.makedirs("cfgdir/config.json", exist_ok=True)
PY
"$GQ" good --method rtn -o good.tinyloop -q || fail "RTN on the consistent checkpoint"
bad "o_proj: pre.0.attn_out: shape \[1024, 256\] disagrees with the config, which gives \[512, 512\].*o_proj" \
  "$GQ" o_proj --method rtn -o out.tinyloop
bad "embed: embed: shape \[300, 512\] disagrees with the config, which gives \[256, 512\]" \
  "$GQ" embed --method rtn -o out.tinyloop
cp good/model.safetensors cfgdir/
bad "cfgdir/config.json: is a directory" "$GQ" cfgdir --method rtn -o out.tinyloop

# ---- a full disk (ulimit -f stands in for ENOSPC): exit 2 naming the cause, no temporary ----
"$FIX" raw.tinyloop --seed 5 --no-marlin || fail "fixture"
for limit in 8 40; do  # KiB: fails in the first dataset, and in a later one
  ( ulimit -f $limit; bad "out.tinyloop: .*(cannot write|cannot close).*File too large" "$MP" raw.tinyloop -o out.tinyloop -q ) || exit 1
  ( ulimit -f $limit; bad "out.tinyloop: .*(cannot write|cannot close).*File too large" "$GQ" good --method rtn -o out.tinyloop -q ) || exit 1
done
( ulimit -f 1; bad "out.safetensors: write failed: File too large" "$TI" packed.tinyloop --extract layers.0.mlp_up -o out.safetensors ) || exit 1

# ---- one line for bad input found before work starts (no seed line, no progress) ----
bad "nope.tinyloop: No such file" "$TV" nope.tinyloop
bad "nope.tinyloop: No such file" "$MP" nope.tinyloop -o out.tinyloop
# The GPU fault hook of the tests (tests/cli/gpu_faults.sh): a misspelt plan is refused, not ignored.
bad "TL_FAULT_INJECT: expected alloc:N, launch:N, trap:N \(N >= 1\) or count, got 'alloc:0'" \
  env TL_FAULT_INJECT=alloc:0 "$TV" --tiers pack
bad "TL_FAULT_INJECT: expected .*got 'oom'" env TL_FAULT_INJECT=oom "$GQ" good --method rtn -o out.tinyloop
echo "hardening: ok"
