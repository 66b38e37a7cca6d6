#!/bin/bash
# tl-inspect --check on a file of 64 MiB and more: one tl::Progress line per entry on stderr
# ("[ i/n] name ... | m:ss elapsed, ETA m:ss", in listing order, ETA weighted by bytes), stdout
# exactly as without progress; nothing on stderr for small files or with --quiet.
source "$TL_SRC/tests/cli/inspect_common.bash"
python3 -c "import h5py, numpy" 2>/dev/null || { echo "python3 with h5py + numpy not found: skipped"; exit 77; }

# Small files: the verdict only.
"$INSPECT" fx/model.tinyloop --check > small.out 2> small.err || fail "--check on the fixture"
[ -s small.err ] && fail "progress for a small file: $(cat small.err)"
tail -1 small.out | grep -qx "checked: 5 entries read back, all valid" || fail "small verdict"

# The fixture plus a 64 MiB dense tensor (chunked, Fletcher32, as the writer stores tensors).
cp fx/model.tinyloop big.tinyloop
python3 - <<'PY' || fail "adding a 64 MiB tensor with h5py"
import h5py, numpy as np
with h5py.File("big.tinyloop", "r+") as f:
    f.create_dataset("/tensors/pre.1.big", data=np.ones((4096, 4096), np.float32), chunks=(256, 4096), fletcher32=True)
PY
"$INSPECT" big.tinyloop --check > big.out 2> big.err || fail "--check big.tinyloop: $(cat big.err)"
"$INSPECT" big.tinyloop > list.out || fail "listing big.tinyloop"
{ cat list.out; echo "checked: 6 entries read back, all valid"; } | cmp -s - big.out || fail "stdout changed: $(diff <("$INSPECT" big.tinyloop) big.out)"
python3 - big.err <<'PY' || fail "progress lines: $(cat big.err)"
import re, sys
lines = open(sys.argv[1]).read().splitlines()
names = ["final_norm", "pre.1.big", "tok_embed", "blk0.attn_qkv", "blk0.mlp_up", "head"]
assert len(lines) == 6, lines
for i, (l, n) in enumerate(zip(lines, names), 1):
    m = re.fullmatch(r"\[(\d)/6\] (\S+) (.+) \| (\d+:\d\d) elapsed(, ETA \d+:\d\d)?", l)
    assert m and int(m[1]) == i and m[2] == n, l
assert lines[1].startswith("[2/6] pre.1.big F32 [4096, 4096] 64.0 MiB |"), lines[1]
assert lines[4].startswith("[5/6] blk0.mlp_up 256x256 gs=128 marlin "), lines[4]
assert "ETA" not in lines[-1], lines[-1]  # nothing left after the last entry
PY
out="$("$INSPECT" big.tinyloop --check --quiet 2>&1)" || fail "--check --quiet big.tinyloop"
[ -z "$out" ] || fail "--quiet printed: $out"
"$INSPECT" big.tinyloop --check --json > big.json 2> big.err || fail "--check --json big.tinyloop"
[ "$(wc -l < big.err)" -eq 6 ] || fail "progress with --json: $(cat big.err)"
python3 -c 'import json; assert json.load(open("big.json"))["checked_entries"] == 6' || fail "--json checked_entries"
echo "inspect_progress: ok"
