#!/bin/bash
# marlin-pack end to end on a GPTQ checkpoint written here (python3 stdlib only): import + pack
# with --json, the head (N = 200) listed as skipped with its reason, an idempotent --in-place
# repack ("verified"), --only, and progress on stderr unless --quiet.
# Sourced by marlin_pack_bad_input.sh for make_gptq (the tests below run only when executed).
set -u

# make_gptq DIR FORMAT SYM BITS [BAD_SCALE]: a checkpoint with model.layers.0.mlp.up_proj
# (K = N = 256, group 128) and lm_head (K = 256, N = 200); BAD_SCALE=1 sets one scale to 0.
make_gptq() {
  python3 - "$@" <<'PY'
import json, os, random, struct, sys
d, fmt, sym, bits = sys.argv[1], sys.argv[2], sys.argv[3] == "1", int(sys.argv[4])
bad = len(sys.argv) > 5 and sys.argv[5] == "1"
rnd = random.Random(5)
os.makedirs(d, exist_ok=True)
tensors = []  # (name, dtype, shape, bytes)
def layer(name, K, N, gs):
    G = K // gs
    q = [[rnd.randrange(16) for _ in range(N)] for _ in range(K)]
    qw = bytearray()
    for r in range(K // 8):
        for n in range(N):
            w = 0
            for i in range(8):
                w |= q[8 * r + i][n] << (4 * i)
            qw += struct.pack("<I", w)
    qz = bytearray()
    for g in range(G):
        for j in range(N // 8):
            w = 0
            for i in range(8):
                z = 8 if sym else rnd.randrange(1, 16)
                w |= ((z - 1) & 15 if fmt == "gptq" else z) << (4 * i)
            qz += struct.pack("<I", w)
    sc = bytearray()
    for i in range(G * N):
        sc += struct.pack("<e", 0.0 if (bad and i == 7) else 2.0 ** rnd.uniform(-10, -3))
    tensors.extend([(name + ".qweight", "I32", [K // 8, N], bytes(qw)),
                    (name + ".qzeros", "I32", [G, N // 8], bytes(qz)),
                    (name + ".scales", "F16", [G, N], bytes(sc))])
layer("model.layers.0.mlp.up_proj", 256, 256, 128)
layer("lm_head", 256, 200, 128)
tensors.append(("model.norm.weight", "F16", [256], struct.pack("<256e", *([1.0] * 256))))
header, off = {}, 0
for name, dt, shape, data in tensors:
    header[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(data)]}
    off += len(data)
h = json.dumps(header).encode()
h += b" " * (-len(h) % 8)
with open(os.path.join(d, "model.safetensors"), "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h)
    for t in tensors:
        f.write(t[3])
json.dump({"bits": bits, "group_size": 128, "sym": sym, "desc_act": False,
           "quant_method": "gptq", "checkpoint_format": fmt},
          open(os.path.join(d, "quantize_config.json"), "w"))
PY
}

# json_get FILE EXPR: evaluates a python expression over the parsed report `j`.
json_get() { python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print($2)" "$1"; }

fail() { echo "FAIL: $*" >&2; exit 1; }

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
  : "${TL_BIN:?}" "${TL_TMP:?}"
  command -v python3 >/dev/null || { echo "python3 not found: skipped"; exit 77; }
  rm -rf "$TL_TMP" && mkdir -p "$TL_TMP" && cd "$TL_TMP" || exit 1
  MP="$TL_BIN/marlin-pack"

  for fmt in gptq gptq_v2; do
    for sym in 0 1; do
      make_gptq "ck_${fmt}_$sym" "$fmt" "$sym" 4
      "$MP" "ck_${fmt}_$sym" -o "a_${fmt}_$sym.tinyloop" --json --quiet > a.json 2> a.err \
        || fail "$fmt sym=$sym: exit $? ($(cat a.err))"
      [ -s a.err ] && fail "--quiet printed on stderr: $(cat a.err)"
      [ "$(json_get a.json "j['totals']['packed'], j['totals']['skipped'], j['totals']['weights']")" = "2 0 2" ] \
        || fail "$fmt sym=$sym: totals $(json_get a.json "j['totals']")"
      # B = K*N/2 bytes, s and delta 2 bytes x G x N each: 32768 + 2 * 1024 per weight, the
      # head's section padded from N = 200 to 256 columns (56 zero columns: 7168 + 2 * 224 bytes).
      [ "$(json_get a.json "j['totals']['bytes_added']")" = "69632" ] || fail "bytes_added"
      [ "$(json_get a.json "[(w['padded_n'], w['padding_bytes']) for w in j['weights'] if w['name']=='lm_head'][0]")" = "(256, 7616)" ] \
        || fail "head padding: $(json_get a.json "j['weights']")"
      [ "$(json_get a.json "j['totals']['padded'], j['totals']['padding_bytes']")" = "1 7616" ] || fail "padding totals"
      [ "$(json_get a.json "[w for w in j['weights'] if w['status']=='packed'][0]['marlin_groupsize']")" = "128" ] \
        || fail "marlin_groupsize"
    done
  done

  # Idempotent repack in place: the stored section is rebuilt, compared, kept.
  cp a_gptq_0.tinyloop keep.tinyloop
  "$MP" a_gptq_0.tinyloop --in-place --json > b.json 2> b.err || fail "in-place repack: $(cat b.err)"
  [ "$(json_get b.json "j['totals']['verified'], j['totals']['packed'], j['totals']['bytes_added']")" = "2 0 0" ] \
    || fail "in-place totals $(json_get b.json "j['totals']")"
  grep -q "verified" b.err || fail "no progress line on stderr without --quiet"
  if command -v h5diff >/dev/null; then
    h5diff keep.tinyloop a_gptq_0.tinyloop /quant /quant >/dev/null || fail "repack changed /quant"
  fi
  ls -a | grep -q '\.tmp-' && fail "temporary file left behind"

  # --only: nothing selected -> both weights skipped with that reason, still a valid file.
  "$MP" ck_gptq_0 -o only.tinyloop --only 'attn' --json --quiet > c.json || fail "--only run"
  [ "$(json_get c.json "sorted(w['reason'] for w in j['weights'])[1]")" = "not selected by --only" ] \
    || fail "--only reason"
  [ "$(json_get c.json "j['totals']['packed']")" = "0" ] || fail "--only packed something"
  "$MP" ck_gptq_0 -o only2.tinyloop --only 'mlp\.up' --json --quiet > d.json || fail "--only up"
  [ "$(json_get d.json "j['totals']['packed']")" = "1" ] || fail "--only 'mlp\\.up' did not pack"

  # The summary on stderr (stdout carries data only), with why weights were skipped.
  "$MP" ck_gptq_v2_1 -o e.tinyloop > e.out 2> e.err || fail "summary run"
  [ -s e.out ] && fail "marlin-pack printed to stdout without --json: $(cat e.out)"
  grep -q "2 packed, 0 verified, 0 skipped; .* bits/weight" e.err || fail "summary line: $(cat e.err)"
  grep -q "^marlin-pack: 1 weight(s) padded to a multiple of 128 columns (zero weights): " e.err || fail "padding line: $(cat e.err)"
  grep -q "^marlin-pack: skipped:" e.err && fail "a skip reasons line without skipped weights: $(cat e.err)"
  "$MP" ck_gptq_v2_1 -o e2.tinyloop -q > e.out 2> e.err || fail "quiet run"
  [ -s e.out ] || [ -s e.err ] && fail "--quiet printed something: $(cat e.out e.err)"
  echo "marlin_pack_gptq: ok"
fi
