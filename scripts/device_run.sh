#!/usr/bin/env bash
# Runs on the GPU machine (through the `run` tool, carrying .device): the CUDA tests, the
# compute-sanitizer checks and the kernel benchmark, with logs and JSON under $OUT and a short
# summary printed last.
#   bash scripts/device_run.sh [test] [test-stream] [tokens] [native-floor] [sanitize] [bench-quick] [bench] [ab] [verify] [tiers]
#                              [tiers-thorough] [faults] [demo] [crosscheck] [hfcalib] [sanitize-model]
#                              [gptq-devices] [gptq-bench] [gptq-big] [cli-gpu] [families] [e2e-big]
#                              [e2e-depth]
# gptq-devices: the demo model's GPTQ on --device cuda and cpu (plain, --act-order, --range-search:
# GPTQ_VARIANTS="0 1 rs"), each through the e2e tier against the original; their PPLs must agree
# within 0.3 %.
# cli-gpu: the CLI tests that need a GPU, on the staged tools: tests/cli/gptq_resume_gpu.sh (kills
# and --resume on the GPU) and tests/cli/gpu_faults.sh (allocation, launch and trap faults).
# gptq-bench: bench_gptq_gpu (BENCH_GPTQ_ARGS, e.g. "--sets 70b --reps 3"): the inverse-Hessian
# factor by both methods and the sweep of one weight per 7B / 70B layer shape.
# gptq-big: a Llama-2-7B-shaped random bf16 checkpoint (tools/make_llama_checkpoint.py, kept in
# /tmp/l<shape>-<layers> between calls of one lease; BIG_SHAPE=70b BIG_LAYERS=2 for two 70B
# blocks), 128 x 2048 random tokens, gptq-quantize --device cuda with act-order off and on
# (GPTQ_ACT="0 1"); --json, /usr/bin/time -v, the tool's anonymous RSS and the GPU's memory.
# GPTQ_EXES="gptq-quantize_base gptq-quantize": an A/B against another commit's build staged
# beside it; GPTQ_SAME=1: gptq-quantize's output again, compared byte for byte.
# e2e-big: the e2e tier on the same 7B-shaped checkpoint (RTN g128, marlin-pack --drop-native)
# against its bf16 original, 16 x 2048 random tokens, once per mode of E2E_MODES ("prefill
# decode"); end-to-end seconds, max RSS and the tool's phase lines. BIG_VOCAB=50257: GPT-2's
# vocabulary (the head's section padded); E2E_ONLY: gptq-quantize's --only (e.g. 'attn|mlp|head'
# to quantize the head too); E2E_TOKENS (16 x 2048), E2E_CTX (2048). Each run: end-to-end seconds,
# max RSS, the GPU's memory peak, the streamed tier's phase lines (e2e_measure).
# e2e-depth: the same protocol on DEPTH_SHAPE (70b) checkpoints of DEPTH_LAYERS (2 4 8) layers,
# written with --fast values, read cold (page cache dropped, the disk's read rate stated), in
# DEPTH_MODE (prefill); on the DEPTH_TOOLS-layer one the other tools' max RSS (marlin-pack,
# tl-inspect, tl-export both formats, marlin-pack of the exported GPTQ folder, the pack tier and
# each GPU file tier of DEPTH_TIERS for its first TIER_SECONDS). DEPTH_SHAPE=405b DEPTH_LAYERS=1
# DEPTH_TOOLS=0: one Llama-3.1-405B block.
# ab: .device/bin/bench_kernels_base (another commit's build) and bench_kernels alternately,
# base, new, base, new, with BENCH_ARGS; logs ab-base-N.log / ab-new-N.log.
# Extra benchmark arguments: BENCH_ARGS="--sets 70b --g 128". SANITIZER_TESTS: a doctest
# test-case filter for the sanitizer runs (e.g. "marlin*,int4*"). Each step has a time limit
# (TEST_TIMEOUT, SANITIZER_TIMEOUT, BENCH_TIMEOUT seconds; rc 124 when it ran out) so that the
# summary still comes back within one `run` call.
set -uo pipefail
OUT=${OUT:-$PWD/.device/out}
mkdir -p "$OUT"
bin=.device/bin
# A carry packed by scripts/stage_device.sh --xz: unpacked once.
[ -d "$bin" ] || [ ! -f .device/staged.tar.xz ] || tar -C .device -xJf .device/staged.tar.xz
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}
steps=("$@")
[ ${#steps[@]} -eq 0 ] && steps=(test sanitize bench-quick)
summary=()
# Each note also goes to $OUT/summary-live.txt at once: a call cut at its time limit keeps them.
note() { summary+=("$1"); echo "$1" >> "$OUT/summary-live.txt"; }

nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader > "$OUT/gpu.txt" 2>&1
note "gpu: $(head -1 "$OUT/gpu.txt")"
for runner in test_cuda test_gpu; do
  [ -x "$bin/$runner" ] || { echo "device_run: $bin/$runner missing (scripts/stage_device.sh)"; exit 2; }
done
ldd "$bin/test_cuda" | grep -q "not found" && { ldd "$bin/test_cuda"; echo "device_run: missing libraries"; exit 2; }

# The PID of a process by its name (comm: 15 characters at most), read from /proc: with pgrep
# the anonymous-RSS samples came back empty on the GPU machine (2026-12-04 and -05).
pid_of_comm() {
  local d
  for d in /proc/[0-9]*; do
    [ "$(cat "$d/comm" 2>/dev/null)" = "$1" ] && { echo "${d#/proc/}"; return; }
  done
}

# The runners' data paths are the staging machine's (scripts/stage_device.sh wrote its root): where
# this copy lives elsewhere, that path is made a link to it, and the runners' scratch folders exist.
if [ -f .device/source_root ]; then
  src_root=$(cat .device/source_root)
  if [ "$src_root" != "$PWD" ] && [ ! -e "$src_root" ]; then mkdir -p "$(dirname "$src_root")" && ln -s "$PWD" "$src_root"; fi
  mkdir -p "$src_root/build-sm90/tests/tmp" "$src_root/build/tests/tmp"
fi

doctest_line() { grep -E "^\[doctest\] (test cases|assertions)" "$1" | tr '\n' ' '; }

# The random Llama-shaped checkpoint of gptq-big and e2e-big (BIG_SHAPE, BIG_LAYERS), written
# once per lease into /tmp/l<shape>-<layers>; sets shape, layers and ck.
big_checkpoint() {
  shape=${BIG_SHAPE:-7b}; layers=${BIG_LAYERS:-0}; vocab=${BIG_VOCAB:-0}; ck=/tmp/l$shape-$layers-$vocab
  if [ ! -f $ck/model.safetensors.index.json ]; then
    python3 tools/make_llama_checkpoint.py $ck --shape $shape --layers $layers --vocab $vocab ${BIG_FAST:+--fast} \
      > "$OUT/make-$shape.log" 2>&1 ||
      note "make_llama_checkpoint failed"
  fi
}


# Evicts files from the page cache (clean pages; sync first): a run after it reads them from disk.
drop_cache() { sync; python3 -c "
import os, sys
for f in sys.argv[1:]:
    fd = os.open(f, os.O_RDONLY); os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED); os.close(fd)" "$@"; }
# The disk's cold read rate on one file (GB/s), the file evicted before and after.
disk_rate() { drop_cache "$1"; local t0 t1; t0=$(date +%s.%N); cat "$1" > /dev/null; t1=$(date +%s.%N); drop_cache "$1"
  python3 -c "import os, sys; print('%.2f' % (os.path.getsize(sys.argv[1]) / 1e9 / (float(sys.argv[3]) - float(sys.argv[2]))))" "$1" $t0 $t1; }
# One tl-verify e2e run measured (TAG FILE REF MODE [tl-verify args]): end-to-end seconds, max
# RSS, the GPU's memory peak (nvidia-smi every 250 ms), the tool's phase lines, the PPLs.
e2e_measure() {
  local tag=$1 file=$2 ref=$3 mode=$4; shift 4
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 250 > "$OUT/gpumem-$tag.txt" 2>/dev/null &
  local smi=$! t0; t0=$(date +%s.%N)
  timeout ${E2E_TIMEOUT:-400} /usr/bin/time -v "$bin/tl-verify" $file --tiers e2e --reference $ref --tokens /tmp/e2e_tokens.u32 \
    --ctx ${E2E_CTX:-2048} --device cuda --e2e-mode $mode --drift-json "$OUT/$tag.json" "$@" > "$OUT/$tag.log" 2>&1
  local rc=$?
  kill $smi 2>/dev/null
  note "$tag: rc=$rc $(python3 - "$OUT/$tag.log" "$OUT/gpumem-$tag.txt" "$OUT/$tag.json" $t0 $(date +%s.%N) <<'PY' 2>&1
import json, re, sys
log = open(sys.argv[1]).read()
rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", log)
mem = max([int(x) for x in open(sys.argv[2]).read().split() if x.strip().isdigit()] or [0])
out = f"{float(sys.argv[5]) - float(sys.argv[4]):.1f} s end to end, max RSS {int(rss.group(1)) / 1e6 if rss else 0:.2f} GB, GPU peak {mem / 1024:.2f} GiB"
try:
    d = json.load(open(sys.argv[3]))
    out += "; PPL ref %.4f" % d["reference"]["ppl"] + "".join(f", {p['name']} {p['ppl']:.4f}" for p in d["paths"])
except Exception as e:
    out += f"; no drift JSON ({e})"
print(out)
PY
)"
  while IFS= read -r l; do note "  $l"; done < <(grep -E "^tl-verify: (streaming|e2e: GPU memory|embedded|blocks:|heads:|GPU memory used)|FAILED|rror" "$OUT/$tag.log" | head -12)
}
# A tool's max RSS (LABEL CMD...): one line.
rss_of() { local label=$1; shift; /usr/bin/time -v "$@" > /tmp/rss.out 2> /tmp/rss.err; local rc=$?
  note "  $label: rc=$rc, max RSS $(( $(grep -E 'Maximum resident' /tmp/rss.err | grep -oE '[0-9]+$') / 1000 )) MB$([ $rc -ne 0 ] && echo " ($(grep -v '^\s' /tmp/rss.err | tail -1))")"; }

for step in "${steps[@]}"; do
  case "$step" in
    test)  # the GPU runners: test_cuda (cuda/) and test_gpu (libgpu)
      for runner in test_cuda test_gpu; do
        start=$(date +%s)
        timeout "${TEST_TIMEOUT:-180}" "$bin/$runner" > "$OUT/$runner.log" 2>&1; rc=$?
        note "$runner: rc=$rc $(doctest_line "$OUT/$runner.log") ($(( $(date +%s) - start )) s)"
      done
      ;;
    test-stream)  # the streamed forward's and the GPU model's tests alone (TEST_TIMEOUT s)
      start=$(date +%s)
      timeout "${TEST_TIMEOUT:-180}" "$bin/test_gpu" -tc="stream forward*,model gpu*,gptq gpu calibration*,gptq-quantize --device cuda*" \
        > "$OUT/test_gpu-stream.log" 2>&1; rc=$?
      note "test_gpu (stream, model, sequential GPTQ): rc=$rc $(doctest_line "$OUT/test_gpu-stream.log") ($(( $(date +%s) - start )) s)"
      ;;
    tokens)  # the tokenizers in the device build: each test says whether it ran (test_text)
      timeout 60 "$bin/test_text" > "$OUT/test_text.log" 2>&1; rc=$?
      note "test_text: rc=$rc $(doctest_line "$OUT/test_text.log"); $(grep -c ': ran' "$OUT/test_text.log") ran, $(grep -c 'not run' "$OUT/test_text.log") not run"
      ;;
    native-floor)  # int4_gemm's CUDA-core kernel against its dequantize + cuBLAS floor at decode sizes
      # (kDefaultNativeFloorMinM): the kernel / floor ratio per M on the 7B and 70B layers.
      timeout "${BENCH_TIMEOUT:-150}" "$bin/bench_kernels" --sets 7b,70b --m 1,2,4,8,12,16,24,32 --g 128 \
        > "$OUT/bench-native-floor.log" 2>&1; rc=$?
      note "native floor bench: rc=$rc"
      while IFS= read -r l; do note "  $l"; done < <(grep -A9 "native int4_gemm time" "$OUT/bench-native-floor.log")
      ;;
    sanitize)
      for tool in memcheck racecheck synccheck; do
        start=$(date +%s)
        TL_TEST_QUICK=1 timeout "${SANITIZER_TIMEOUT:-120}" compute-sanitizer --tool "$tool" \
          --error-exitcode 9 "$bin/test_cuda" ${SANITIZER_TESTS:+-tc="$SANITIZER_TESTS"} \
          > "$OUT/$tool.log" 2>&1; rc=$?
        note "$tool (quick subset): rc=$rc $(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$OUT/$tool.log" | tail -1) $(doctest_line "$OUT/$tool.log") ($(( $(date +%s) - start )) s)"
      done
      ;;
    bench-quick|bench)
      start=$(date +%s)
      args=(--json "$OUT/$step.json")
      [ "$step" = bench-quick ] && args+=(--quick)
      # shellcheck disable=SC2086
      timeout "${BENCH_TIMEOUT:-480}" "$bin/bench_kernels" "${args[@]}" ${BENCH_ARGS:-} \
        > "$OUT/$step.log" 2>&1; rc=$?
      note "$step: rc=$rc ($(( $(date +%s) - start )) s)"
      while IFS= read -r line; do note "  $line"; done < <(sed -n '/^summary/,$p' "$OUT/$step.log" | grep -v "^wrote")
      ;;
    ab)
      if [ ! -x "$bin/bench_kernels_base" ]; then note "ab: bench_kernels_base not staged"; continue; fi
      for round in 1 2; do
        for which in base new; do
          exe=$bin/bench_kernels; [ "$which" = base ] && exe=$bin/bench_kernels_base
          start=$(date +%s)
          # shellcheck disable=SC2086
          timeout "${BENCH_TIMEOUT:-480}" "$exe" ${BENCH_ARGS:-} > "$OUT/ab-$which-$round.log" 2>&1; rc=$?
          note "ab $which $round: rc=$rc ($(( $(date +%s) - start )) s)"
        done
      done
      ;;
    tiers-thorough)  # the same with --thorough (a second shape per kernel path)
      start=$(date +%s)
      "$bin/tl-verify" --seed 20261201 --thorough --json "$OUT/verify_thorough.json" \
        > "$OUT/verify_thorough.log" 2>&1; rc=$?
      note "tl-verify --thorough: rc=$rc $(grep '^summary' "$OUT/verify_thorough.log") ($(( $(date +%s) - start )) s)"
      ;;
    verify)
      if [ -x "$bin/test_verify" ]; then
        "$bin/test_verify" > "$OUT/test_verify.log" 2>&1; rc=$?
        note "test_verify: rc=$rc $(doctest_line "$OUT/test_verify.log")"
      else
        note "test_verify: not staged"
      fi
      ;;
    tiers)  # tl-verify's synthetic tiers on random data (every GPU tier, fixed seed)
      start=$(date +%s)
      "$bin/tl-verify" --seed 20261129 --json "$OUT/verify_synthetic.json" --md "$OUT/verify_synthetic.md" \
        > "$OUT/verify_synthetic.log" 2>&1; rc=$?
      note "tl-verify synthetic: rc=$rc $(grep '^summary' "$OUT/verify_synthetic.log") ($(( $(date +%s) - start )) s)"
      ;;
    faults)  # planted packing faults must fail the GPU tiers
      start=$(date +%s)
      TL_VERIFY=$bin/tl-verify TL_FIXTURE=$bin/make_verify_fixture TL_MARLIN_PACK=$bin/marlin-pack \
        TL_TMP=/tmp/faults bash tests/verify/planted_faults_gpu.sh > "$OUT/faults.log" 2>&1; rc=$?
      note "planted faults (GPU tiers): rc=$rc $(tail -1 "$OUT/faults.log") ($(( $(date +%s) - start )) s)"
      ;;
    demo)  # make demo's pipeline with the carried tools; every tier and the drift report
      start=$(date +%s)
      TL_BIN_DIR=$bin bash scripts/demo.sh /tmp/demo-build > "$OUT/demo.log" 2>&1; rc=$?
      cp /tmp/demo-build/demo/*.md /tmp/demo-build/demo/*.json "$OUT/" 2>/dev/null
      note "demo: rc=$rc ($(( $(date +%s) - start )) s)"
      while IFS= read -r line; do note "  $line"; done < <(tail -6 "$OUT/demo.log")
      ;;
    families)  # the model-family fixtures: the CLI pipeline with the GPU, and the generator re-run here
      start=$(date +%s)
      TL_BIN=$PWD/$bin TL_TMP=/tmp/tl_families TL_SRC=$PWD timeout 300 bash tests/cli/model_families.sh \
        > "$OUT/families.log" 2>&1; rc=$?
      note "families (tests/cli/model_families.sh): rc=$rc ($(( $(date +%s) - start )) s)"
      while IFS= read -r line; do note "  $line"; done < <(tail -9 "$OUT/families.log")
      timeout 120 python3 tools/make_family_fixtures.py --out /tmp/fam_regen 2>&1 | grep ppl_all > "$OUT/families_regen.log"
      note "generator on this machine ($(python3 -c 'import transformers, torch; print("transformers", transformers.__version__, "torch", torch.__version__)' 2>&1)):"
      while IFS= read -r line; do note "  $line"; done < "$OUT/families_regen.log"
      ;;
    crosscheck)  # our runner vs HF transformers' LlamaForCausalLM
      start=$(date +%s)
      timeout 240 python3 tools/hf_llama_crosscheck.py --tl-verify "$bin/tl-verify" --out /tmp/hfx \
        > "$OUT/crosscheck.log" 2>&1; rc=$?
      note "hf crosscheck: rc=$rc ($(( $(date +%s) - start )) s)"
      while IFS= read -r line; do note "  $line"; done < <(tail -4 "$OUT/crosscheck.log")
      ;;
    hfcalib)  # tools/hf_calibrate.py on the cross-check's HF model -> gptq-quantize --calib -> pack -> verify
      start=$(date +%s)
      { python3 tools/hf_calibrate.py /tmp/hfx/llama-random --tokens /tmp/hfx/tokens.u32 --seq 96 \
          -o /tmp/hfx/calib.h5 &&
        "$bin/gptq-quantize" /tmp/hfx/llama-random --calib /tmp/hfx/calib.h5 -o /tmp/hfx/q.tinyloop &&
        "$bin/marlin-pack" /tmp/hfx/llama-random/../q.tinyloop -o /tmp/hfx/qm.tinyloop --quiet &&
        "$bin/tl-verify" /tmp/hfx/qm.tinyloop --tiers pack,wrapper; } > "$OUT/hfcalib.log" 2>&1; rc=$?
      note "hf calibrate -> gptq -> pack -> verify: rc=$rc ($(( $(date +%s) - start )) s)"
      while IFS= read -r line; do note "  $line"; done < <(grep -E "Hessians|quantized|^summary" "$OUT/hfcalib.log")
      ;;
    sanitize-model)  # memcheck on the model runner's GPU tests
      start=$(date +%s)
      timeout "${SANITIZER_TIMEOUT:-120}" compute-sanitizer --tool memcheck --error-exitcode 9 \
        "$bin/test_gpu" -tc="model gpu*" > "$OUT/memcheck_model.log" 2>&1; rc=$?
      note "memcheck (model gpu tests): rc=$rc $(grep -E "ERROR SUMMARY" "$OUT/memcheck_model.log" | tail -1) ($(( $(date +%s) - start )) s)"
      ;;
    gptq-devices)
      start=$(date +%s)
      mkdir -p /tmp/gd
      rc=0
      # GPTQ_VARIANTS: "0" plain, "1" --act-order, "rs" --range-search (the GPU's search against the CPU's).
      for act in ${GPTQ_VARIANTS:-0 1 rs}; do
        flag=""; [ "$act" = 1 ] && flag=--act-order; [ "$act" = rs ] && flag=--range-search
        for dev in cuda cpu; do
          "$bin/gptq-quantize" data/tinyloop-kjv --calib-tokens data/kjv_calib.u32 --calib-samples 32 --group-size 128 \
            $flag --device $dev -o /tmp/gd/$dev-$act.tinyloop --json > "$OUT/gptq-$dev-$act.json" 2> "$OUT/gptq-$dev-$act.log" || rc=1
          "$bin/tl-verify" /tmp/gd/$dev-$act.tinyloop --tiers e2e --tokens data/kjv_eval.u32 --reference data/tinyloop-kjv \
            --drift-json "$OUT/drift-$dev-$act.json" > /dev/null 2>> "$OUT/gptq-$dev-$act.log" || rc=1
        done
        line=$(python3 - "$OUT/drift-cuda-$act.json" "$OUT/drift-cpu-$act.json" "$OUT/gptq-cuda-$act.json" "$OUT/gptq-cpu-$act.json" <<'PY'
import json, sys
g, c = (json.load(open(p)) for p in sys.argv[1:3])
jg, jc = (json.load(open(p)) for p in sys.argv[3:5])
pg = next(p for p in g["paths"] if p["name"] == "fp16" and p["model"] == "main")["ppl"]
pc = next(p for p in c["paths"] if p["name"] == "fp16" and p["model"] == "main")["ppl"]
d = abs(pg / pc - 1)
print(f"PPL gpu {pg:.4f} cpu {pc:.4f} (original {g['reference']['ppl']:.4f}): differ {100 * d:.3f} % "
      f"({'ok' if d <= 0.003 else 'FAIL'} <= 0.3 %); gptq time gpu {jg['totals']['seconds']:.1f} s cpu {jc['totals']['seconds']:.1f} s; "
      f"loss gpu {jg['totals']['gptq_loss']:.5g} cpu {jc['totals']['gptq_loss']:.5g}")
sys.exit(0 if d <= 0.003 else 1)
PY
        ) || rc=1
        note "gptq-devices ${flag:-plain}: $line"
      done
      note "gptq-devices: rc=$rc ($(( $(date +%s) - start )) s)"
      ;;
    cli-gpu)  # the CLI tests that need a GPU (gptq_resume_gpu.sh, gpu_faults.sh), on the staged tools
      for t in gptq_resume_gpu gpu_faults; do
        start=$(date +%s)
        # gpu_faults runs the tools ~90 times (each paying CUDA's start): 540 s unless TEST_TIMEOUT says.
        limit=${TEST_TIMEOUT:-180}; [ $t = gpu_faults ] && limit=${TEST_TIMEOUT:-540}
        TL_BIN=$(cd "$bin" && pwd) TL_TMP=/tmp/cli-$t TL_SRC=$PWD timeout "$limit" bash tests/cli/$t.sh > "$OUT/cli-$t.log" 2>&1; rc=$?
        note "cli $t: rc=$rc $(tail -1 "$OUT/cli-$t.log") ($(( $(date +%s) - start )) s)"
      done
      ;;
    gptq-bench)  # bench_gptq_gpu: one weight's factor (both methods) and sweep on the 7B / 70B shapes
      start=$(date +%s)
      # shellcheck disable=SC2086
      timeout "${BENCH_TIMEOUT:-480}" "$bin/bench_gptq_gpu" --json "$OUT/bench_gptq_gpu.json" ${BENCH_GPTQ_ARGS:-} \
        > "$OUT/bench_gptq_gpu.log" 2>&1; rc=$?
      note "bench_gptq_gpu: rc=$rc ($(( $(date +%s) - start )) s)"
      while IFS= read -r line; do note "  $line"; done < "$OUT/bench_gptq_gpu.log"
      ;;
    gptq-big)
      start=$(date +%s)
      big_checkpoint
      python3 -c "import numpy as np; np.random.default_rng(0).integers(0, 32000, 128 * 2048, dtype='<u4').tofile('/tmp/big_tokens.u32')"
      note "$shape checkpoint ($layers layers; 0: all) ready ($(( $(date +%s) - start )) s; $(du -sh $ck | cut -f1))"
      for exe in ${GPTQ_EXES:-gptq-quantize}; do
      for act in ${GPTQ_ACT:-0 1}; do
        flag=""; [ "$act" = 1 ] && flag=--act-order
        tag=$shape-$act; [ "$exe" != gptq-quantize ] && tag=$shape-$act-${exe#gptq-quantize}
        rm -rf /tmp/big-q.tinyloop /tmp/big-q.tinyloop.journal
        nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 500 > "$OUT/gpumem-$act.txt" 2>/dev/null &
        smi=$!
        # The tool's own memory: anonymous RSS (heap, pinned buffers), apart from the mmap'ed shards.
        ( while sleep 0.5; do p=$(pid_of_comm "${exe:0:15}"); [ -n "$p" ] && grep -E "^RssAnon" /proc/$p/status; done ) \
          > "$OUT/rssanon-$act.txt" 2>/dev/null &
        anon=$!
        t0=$(date +%s)
        /usr/bin/time -v "$bin/$exe" $ck --calib-tokens /tmp/big_tokens.u32 --calib-seq 2048 --calib-samples 128 \
          --group-size 128 $flag --device cuda -o /tmp/big-q.tinyloop --json > "$OUT/gptq-$tag.json" 2> "$OUT/gptq-$tag.log"; rc=$?
        kill $smi $anon 2>/dev/null
        # A failure (exit 2: admission's numbers, say) prints no JSON: its error line is the result.
        if [ $rc -ne 0 ]; then
          note "gptq $shape $exe act-order=$act: rc=$rc $(grep '^gptq-quantize: ' "$OUT/gptq-$tag.log" | tail -1)"
          rm -rf /tmp/big-q.tinyloop.journal  # a failure's kept stages: the next run starts afresh
          continue
        fi
        line=$(python3 - "$OUT/gptq-$tag.json" "$OUT/gpumem-$act.txt" "$OUT/gptq-$tag.log" "$OUT/rssanon-$act.txt" <<'PY' 2>&1
import json, re, sys
s = json.load(open(sys.argv[1]))
mem = max(int(x) for x in open(sys.argv[2]).read().split() if x.strip().isdigit())
rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", open(sys.argv[3]).read())
anon = max([int(x.split()[1]) for x in open(sys.argv[4]) if x.startswith("RssAnon")] or [0])
ph = s["phases"]
print(f"{s['totals']['seconds']:.1f} s end to end; phases " + ", ".join(f"{k} {v:.1f}" for k, v in ph.items() if v is not None) +
      f"; GPU memory peak {mem} MiB; max RSS {int(rss.group(1)) / 1e6:.2f} GB (anonymous {anon / 1e6:.2f} GB); {s['totals']['bytes'] / 1e9:.3f} GB of codes")
PY
        )
        note "gptq $shape $exe act-order=$act: rc=$rc $line (wall $(( $(date +%s) - t0 )) s)"
        while IFS= read -r l; do note "  $l"; done < <(grep -E "^gptq-quantize: (calibration|pre\.(0|1|31) )" "$OUT/gptq-$tag.log" | head -4)
        # GPTQ_SAME=1: the last binary's output again, byte for byte (the same inputs, GPU and software).
        if [ "${GPTQ_SAME:-0}" = 1 ] && [ "$exe" = gptq-quantize ] && [ $rc = 0 ]; then
          mv /tmp/big-q.tinyloop /tmp/big-q1.tinyloop
          "$bin/$exe" $ck --calib-tokens /tmp/big_tokens.u32 --calib-seq 2048 --calib-samples 128 --group-size 128 $flag \
            --device cuda -o /tmp/big-q.tinyloop -q > /dev/null 2>&1
          if cmp -s /tmp/big-q.tinyloop /tmp/big-q1.tinyloop; then note "  second run: byte-identical"; else note "  second run: DIFFERS"; fi
          rm -f /tmp/big-q1.tinyloop
        fi
      done
      done
      rm -f /tmp/big-q.tinyloop
      ;;
    e2e-big)  # the e2e tier at 7B scale: an RTN g128 compact file against its bf16 reference, 16 x 2048
      start=$(date +%s)
      big_checkpoint
      nv=$(python3 -c "import json; print(json.load(open('$ck/config.json'))['vocab_size'])")
      python3 -c "import numpy as np; np.random.default_rng(1).integers(0, $nv, ${E2E_TOKENS:-32768}, dtype='<u4').tofile('/tmp/e2e_tokens.u32')"
      note "$shape checkpoint ready ($(( $(date +%s) - start )) s)"
      t0=$(date +%s)
      { "$bin/gptq-quantize" $ck --method rtn --group-size 128 ${E2E_ONLY:+--only "$E2E_ONLY"} -o /tmp/big-rtn.tinyloop -q &&
        "$bin/marlin-pack" /tmp/big-rtn.tinyloop -o /tmp/big-rtnm.tinyloop --drop-native --quiet; } > "$OUT/e2e-big-prep.log" 2>&1
      note "RTN g128 + marlin-pack --drop-native: rc=$? ($(( $(date +%s) - t0 )) s, $(du -h /tmp/big-rtnm.tinyloop | cut -f1))"
      rm -f /tmp/big-rtn.tinyloop
      for mode in ${E2E_MODES:-prefill decode}; do e2e_measure e2e-$shape-$mode /tmp/big-rtnm.tinyloop $ck $mode; done
      ;;
    e2e-depth)  # the e2e tier on 70B-shaped models of DEPTH_LAYERS (2 4 8) layers, each read cold from disk
      # (the page cache dropped first), 16 x 2048 tokens, prefill; the tools' max RSS on the deepest.
      python3 -c "import numpy as np; np.random.default_rng(1).integers(0, 32000, ${E2E_TOKENS:-32768}, dtype='<u4').tofile('/tmp/e2e_tokens.u32')"
      for L in ${DEPTH_LAYERS:-2 4 8}; do
        t0=$(date +%s)
        rm -rf /tmp/d-*
        BIG_SHAPE=${DEPTH_SHAPE:-70b} BIG_LAYERS=$L BIG_FAST=1 big_checkpoint
        { "$bin/gptq-quantize" $ck --method rtn --group-size 128 --threads ${DEPTH_THREADS:-4} -o /tmp/d-rtn.tinyloop -q &&
          "$bin/marlin-pack" /tmp/d-rtn.tinyloop -o /tmp/d-c.tinyloop --drop-native --quiet; } > "$OUT/depth-prep-$L.log" 2>&1
        note "$shape x $L layers: checkpoint + RTN + pack rc=$? ($(( $(date +%s) - t0 )) s; $(du -sh $ck | cut -f1) bf16, $(du -h /tmp/d-c.tinyloop | cut -f1) compact)"
        note "  disk: $(disk_rate $(ls $ck/*.safetensors | head -1)) GB/s cold read"
        drop_cache $ck/*.safetensors /tmp/d-c.tinyloop
        e2e_measure e2e-$shape-L$L /tmp/d-c.tinyloop $ck ${DEPTH_MODE:-prefill}
        if [ "$L" = "${DEPTH_TOOLS:-8}" ]; then
          rss_of "marlin-pack (RTN native -> packed)" "$bin/marlin-pack" /tmp/d-rtn.tinyloop -o /tmp/d-p.tinyloop -q; rm -f /tmp/d-p.tinyloop
          rss_of "tl-inspect" "$bin/tl-inspect" /tmp/d-c.tinyloop
          rss_of "tl-export compressed-tensors" "$bin/tl-export" /tmp/d-c.tinyloop --format compressed-tensors -o /tmp/d-ct --quiet
          rss_of "tl-export gptq v2" "$bin/tl-export" /tmp/d-c.tinyloop --format gptq --gptq-format v2 -o /tmp/d-gq --quiet
          rss_of "marlin-pack (GPTQ folder)" "$bin/marlin-pack" /tmp/d-gq -o /tmp/d-g.tinyloop -q
          rm -rf /tmp/d-ct /tmp/d-gq /tmp/d-g.tinyloop
          rss_of "tl-verify pack tier" "$bin/tl-verify" /tmp/d-c.tinyloop --tiers pack -q
          # Each GPU file tier for its first TIER_SECONDS (15): one weight at a time, so the largest
          # weights (block 0's MLP) set its peak long before the end (rc 124: cut there).
          for t in ${DEPTH_TIERS:-symmetric correction wrapper swiglu native}; do
            rss_of "tl-verify --tiers $t (first ${TIER_SECONDS:-15} s)" timeout ${TIER_SECONDS:-15} "$bin/tl-verify" /tmp/d-c.tinyloop --tiers $t -q
          done
        fi
        rm -rf $ck /tmp/d-*
      done
      ;;
    *) note "unknown step $step" ;;
  esac
done

printf '%s\n' "${summary[@]}" > "$OUT/summary.txt"
# PACK=1: everything under $OUT in one archive (the run tool brings back at most 8 files).
if [ "${PACK:-0}" = 1 ]; then
  tar -C "$OUT" -czf /tmp/device_logs.tar.gz . && find "$OUT" -mindepth 1 -delete && mv /tmp/device_logs.tar.gz "$OUT/logs.tar.gz"
fi
echo "==== device_run summary ===="
printf '%s\n' "${summary[@]}"
