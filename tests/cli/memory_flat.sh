#!/usr/bin/env bash
# Memory that does not grow with depth: every tool that reads a whole model holds one block (or one
# weight) of it at a time. The same Llama-shaped model of 1 and of 3 layers (67 M parameters a
# layer: 134 MB in bf16, 268 MB as float32, ~36 MB packed), and each tool's maximum resident set
# on both; what it holds per added layer must stay under 32 MB (issue "70B and 405B drift
# reports": a tool that held the model grew by a float32 layer per model, 268-536 MB here, or
# by the packed layer, ~36 MB, in tl-export's case). Measured: the e2e tier on the CPU (an RTN
# compact file against its bf16 original), on a compressed-tensors folder, tl-export in both
# formats, marlin-pack of a .tinyloop and of a folder, tl-inspect, the pack tier.
source "$(dirname "$0")/tools_common.bash"
TE="$TL_BIN/tl-export"
python3 -c 'import numpy' 2> /dev/null || { echo "memory_flat: numpy not found: skipped"; exit 77; }

# Peak resident set of a command (its own, as the kernel counts it: ru_maxrss of the child), in MB.
rss() {
  python3 - "$@" <<'EOF'
import resource, subprocess, sys
r = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=open("cmd.err", "w"))
if r.returncode != 0:
    sys.exit("exit %d: %s: %s" % (r.returncode, " ".join(sys.argv[1:]), open("cmd.err").read()))
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024)
EOF
}

python3 -c "import numpy as np; np.random.default_rng(3).integers(0, 512, 256, dtype='<u4').tofile('tok.u32')"
declare -A mb
for L in 1 3; do
  python3 "$TL_SRC/tools/make_llama_checkpoint.py" l$L --shape 1b --layers $L --vocab 512 2> /dev/null ||
    fail "make_llama_checkpoint"
  "$GQ" l$L --method rtn --group-size 128 -o rtn$L.tinyloop -q || fail "gptq-quantize l$L"
  "$MP" rtn$L.tinyloop -o c$L.tinyloop --drop-native -q || fail "marlin-pack l$L"
  mb[e2e,$L]=$(rss "$TV" c$L.tinyloop --tiers e2e --device cpu --reference l$L --tokens tok.u32 --ctx 32 \
                   --max-tokens 64 -q) || fail "${mb[e2e,$L]}"
  mb[export-ct,$L]=$(rss "$TE" c$L.tinyloop --format compressed-tensors -o ct$L --quiet) || fail "${mb[export-ct,$L]}"
  mb[export-gptq,$L]=$(rss "$TE" c$L.tinyloop --format gptq --gptq-format v2 -o gq$L --quiet) || fail "${mb[export-gptq,$L]}"
  mb[e2e-folder,$L]=$(rss "$TV" ct$L --tiers e2e --device cpu --reference l$L --tokens tok.u32 --ctx 32 \
                          --max-tokens 64 -q) || fail "${mb[e2e-folder,$L]}"
  mb[marlin-pack,$L]=$(rss "$MP" rtn$L.tinyloop -o p$L.tinyloop -q) || fail "${mb[marlin-pack,$L]}"
  mb[marlin-pack-folder,$L]=$(rss "$MP" gq$L -o g$L.tinyloop -q) || fail "${mb[marlin-pack-folder,$L]}"
  mb[inspect,$L]=$(rss "$TI" c$L.tinyloop) || fail "${mb[inspect,$L]}"
  mb[pack-tier,$L]=$(rss "$TV" c$L.tinyloop --tiers pack -q) || fail "${mb[pack-tier,$L]}"
  rm -rf ct$L gq$L p$L.tinyloop g$L.tinyloop rtn$L.tinyloop
done
worst=0
for t in e2e e2e-folder export-ct export-gptq marlin-pack marlin-pack-folder inspect pack-tier; do
  per=$(( (${mb[$t,3]} - ${mb[$t,1]}) / 2 ))
  echo "memory_flat: $t: ${mb[$t,1]} MB at 1 layer, ${mb[$t,3]} MB at 3: $per MB per added layer"
  [ $per -le 32 ] || fail "$t grows by $per MB per layer (bound 32 MB: one block or weight at a time)"
done
