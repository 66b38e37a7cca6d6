#!/bin/bash
# No tool destroys a file it was not asked to write (docs/format.md, "Writing"), and what it
# writes is byte-reproducible:
#  - identical bytes for the same inputs whatever --threads (gptq-quantize RTN and calibrated,
#    --save-calib), and on a second run (marlin-pack, tl-inspect --extract);
#  - a character device / FIFO target: HDF5 outputs refused (exit 2, the device untouched),
#    byte-stream outputs written into it; a symbolic link followed; "-" is stdout for reports;
#  - an output that is an input (also through a hard or symbolic link) or another output:
#    exit 2, one line, the input byte-identical;
#  - SIGINT / SIGTERM / SIGHUP / a closed pipe: the conventional status, no temporary, no target;
#    a temporary left by SIGKILL is removed by the next run in that folder;
#  - --max-memory below the estimate: exit 2 naming the estimate and the limit.
source "$(dirname "$0")/tools_common.bash"
TOKENS="$TL_SRC/data/kjv_calib.u32"
no_temporaries() { ! ls -a | grep -q '\.tmp-' || fail "temporary file left: $(ls -a | grep '\.tmp-') ($*)"; }
bad_hook() { no_temporaries "$1"; }

# ---- byte-reproducible outputs ----
for t in 1 2 3; do
  "$GQ" "$MODEL" --method rtn -o rtn$t.tinyloop --threads $t -q || fail "rtn --threads $t"
done
cmp rtn1.tinyloop rtn2.tinyloop && cmp rtn1.tinyloop rtn3.tinyloop || fail "RTN output depends on --threads"
for t in 1 2; do
  "$GQ" "$MODEL" --calib-tokens "$TOKENS" --calib-samples 4 --calib-seq 128 -o gptq$t.tinyloop \
    --save-calib calib$t.h5 --threads $t -q || fail "gptq --threads $t"
done
cmp gptq1.tinyloop gptq2.tinyloop || fail "calibrated GPTQ output depends on --threads"
cmp calib1.h5 calib2.h5 || fail "--save-calib output depends on --threads"
"$MP" rtn1.tinyloop -o packed1.tinyloop -q > /dev/null && "$MP" rtn1.tinyloop -o packed2.tinyloop -q > /dev/null ||
  fail "marlin-pack"
cmp packed1.tinyloop packed2.tinyloop || fail "marlin-pack output differs between two runs"
"$TI" packed1.tinyloop --extract pre.0.mlp_up -o x1.safetensors -q && \
  "$TI" packed1.tinyloop --extract pre.0.mlp_up -o x2.safetensors -q || fail "extract"
cmp x1.safetensors x2.safetensors || fail "tl-inspect --extract output differs between two runs"

# ---- special files: refused for HDF5, written into for byte streams ----
mkfifo fifo || fail "mkfifo"
bad "fifo: is a FIFO; an HDF5 file must be written to a regular file" "$GQ" "$MODEL" --method rtn -o fifo
bad "fifo: is a FIFO" "$MP" rtn1.tinyloop -o fifo
[ -p fifo ] || fail "the FIFO was replaced"
cat fifo > from_fifo.safetensors & reader=$!
"$TI" packed1.tinyloop --extract pre.0.mlp_up -o fifo -q || fail "extract into a FIFO"
wait $reader
cmp from_fifo.safetensors x1.safetensors || fail "extract through a FIFO gave other bytes"
[ -p fifo ] || fail "the FIFO was replaced by the extract"
"$TV" packed1.tinyloop --tiers pack --json /dev/null > /dev/null 2>&1; [ $? -eq 0 ] || fail "--json /dev/null"
[ -c /dev/null ] || fail "/dev/null is no longer a character device"
if [ "$(id -u)" = 0 ] && mknod nulldev c 1 3 2> /dev/null; then
  bad "nulldev: is a character device" "$GQ" "$MODEL" --method rtn -o nulldev
  bad "nulldev: is a character device" "$MP" rtn1.tinyloop -o nulldev
  "$TI" packed1.tinyloop --extract pre.0.mlp_up -o nulldev -q || fail "extract into a device"
  "$TV" packed1.tinyloop --tiers pack --json nulldev --md nulldev > /dev/null 2>&1 || fail "reports into a device"
  [ -c nulldev ] || fail "the device node was replaced"
else
  echo "note: not root (or no mknod here): the device-node case ran with /dev/null and a FIFO only"
fi
"$TV" packed1.tinyloop --tiers pack --json - > stdout.json 2> /dev/null || fail "--json -"
python3 -c "import json,sys; json.load(open('stdout.json'))" || fail "--json - did not put the JSON alone on stdout"

# ---- symbolic links: followed; the link stays, its target is replaced atomically ----
echo old > real.tinyloop && ln -s real.tinyloop link.tinyloop
"$GQ" "$MODEL" --method rtn -o link.tinyloop -q || fail "write through a link"
[ -L link.tinyloop ] || fail "the symbolic link was replaced by a file"
cmp real.tinyloop rtn1.tinyloop || fail "the link's target does not hold the output"
ln -s sub/dangling.tinyloop dangling.tinyloop && mkdir sub
"$MP" rtn1.tinyloop -o dangling.tinyloop -q > /dev/null || fail "write through a dangling link"
[ -L dangling.tinyloop ] && [ -f sub/dangling.tinyloop ] || fail "a dangling link's target was not created"

# ---- outputs never alias inputs, or each other ----
cp packed1.tinyloop model.tinyloop && cp model.tinyloop model.orig && ln model.tinyloop hard.tinyloop
ln -s model.tinyloop soft.tinyloop
bad "model.tinyloop: --json: is the same file as the input FILE" "$TV" model.tinyloop --json model.tinyloop
bad "hard.tinyloop: --md: is the same file as the input FILE" "$TV" model.tinyloop --md hard.tinyloop
bad "soft.tinyloop: -o: is the same file as the input INPUT" "$MP" model.tinyloop -o soft.tinyloop
bad "hard.tinyloop: -o: is the same file as the input FILE" "$TI" model.tinyloop --extract pre.0.mlp_up -o hard.tinyloop
bad "calib1.h5: -o: is the same file as the input --calib" "$GQ" "$MODEL" --calib calib1.h5 -o calib1.h5
bad "model.safetensors.index.json in" "$GQ" "$MODEL" --method rtn -o "$MODEL/model.safetensors.index.json"
bad "r.json: --md: is also the output of --json" "$TV" model.tinyloop --json r.json --md r.json
bad "same.h5: --save-calib: is also the output of -o" "$GQ" "$MODEL" --calib-tokens "$TOKENS" -o same.h5 --save-calib same.h5
cmp model.tinyloop model.orig || fail "an input was modified"
[ ! -e r.json ] && [ ! -e same.h5 ] || fail "an output was written despite the error"

# ---- interrupted runs: no temporary, no target, the conventional status ----
# Python starts the tool (a background job of a script would inherit SIGINT ignored).
python3 - "$GQ" "$MODEL" "$TOKENS" <<'PY' || fail "signal cleanup"
import glob, os, signal, subprocess, sys, time
gq, model, tokens = sys.argv[1:4]
for sig, status in [(signal.SIGINT, 130), (signal.SIGTERM, 143), (signal.SIGHUP, 129)]:
    p = subprocess.Popen([gq, model, "--calib-tokens", tokens, "--calib-samples", "16", "-o", "sig.tinyloop", "-q"])
    for _ in range(400):
        if glob.glob(".sig.tinyloop.tmp-*"):
            break
        time.sleep(0.01)
    else:
        sys.exit("no temporary file appeared")
    time.sleep(0.2)
    p.send_signal(sig)
    rc = p.wait()
    shell_status = 128 - rc if rc < 0 else rc
    if shell_status != status:
        sys.exit(f"{sig.name}: exit status {shell_status}, expected {status}")
    if glob.glob(".sig.tinyloop.tmp-*") or os.path.exists("sig.tinyloop"):
        sys.exit(f"{sig.name}: a temporary or a partial target remained")
PY
"$GQ" "$MODEL" --calib-tokens "$TOKENS" --calib-samples 16 -o pipe.tinyloop 2>&1 | head -n 1 > /dev/null
[ "${PIPESTATUS[0]}" -eq 141 ] || fail "closed pipe: exit ${PIPESTATUS[0]}, expected 141"
[ ! -e pipe.tinyloop ] || fail "closed pipe: a target was written"
no_temporaries "closed pipe"
# SIGKILL cannot be caught: the temporary stays, and the next run in this folder removes it.
"$GQ" "$MODEL" --calib-tokens "$TOKENS" --calib-samples 16 -o killed.tinyloop -q & victim=$!
for _ in $(seq 400); do ls -a | grep -q '\.killed\.tinyloop\.tmp-' && break; sleep 0.01; done
kill -KILL $victim; wait $victim 2> /dev/null
ls -a | grep -q '\.killed\.tinyloop\.tmp-' || fail "no temporary after SIGKILL (the run ended too early?)"
"$GQ" "$MODEL" --method rtn -o next.tinyloop -q 2> next.err || fail "the run after SIGKILL"
grep -q "removed .*\.killed\.tinyloop\.tmp-.*interrupted run (pid $victim is gone)" next.err ||
  fail "stale temporary not reported: $(cat next.err)"
no_temporaries "after the stale sweep"

# ---- memory admission ----
bad "calibrating on the CPU .* needs about .* but the limit is 10 MiB \(--max-memory\)" \
  "$GQ" "$MODEL" --calib-tokens "$TOKENS" -o mem.tinyloop --max-memory 10M
bad "expected a memory size" "$GQ" "$MODEL" --method rtn -o mem.tinyloop --max-memory lots
echo "output_safety: ok"
