#!/usr/bin/env bash
# make demo: the whole pipeline on the shipped model (data/tinyloop-kjv, data/README.md).
#   GPTQ 4-bit g128 calibrated on data/kjv_calib.u32 (and RTN 4-bit g128 beside it)
#   -> marlin-pack -> tl-verify (pack tier here; every tier and the PPL drift report on a GPU)
# Outputs in <build>/demo/: the .tinyloop files, verify reports (JSON / Markdown), drift report.
# Usage: scripts/demo.sh [build-dir]   (TL_BIN_DIR overrides where the tools are)
set -euo pipefail
build=${1:-build}
bin=${TL_BIN_DIR:-$build/apps}
root=$(cd "$(dirname "$0")/.." && pwd)
out=$build/demo
mkdir -p "$out"
model=$root/data/tinyloop-kjv
calib_windows=${DEMO_CALIB_WINDOWS:-32}   # of the 128 shipped: keeps the CPU forward ~30 s on 2 cores
step() { printf '\n== %s\n' "$*"; }

step "1/4 gptq-quantize: GPTQ 4-bit g128, calibrated block by block on $calib_windows x 512 tokens"
"$bin/gptq-quantize" "$model" --calib-tokens "$root/data/kjv_calib.u32" --calib-samples "$calib_windows" \
  --group-size 128 -o "$out/kjv-gptq-g128.tinyloop" --json > "$out/gptq.json"
step "    gptq-quantize: RTN 4-bit g128 (the baseline)"
"$bin/gptq-quantize" "$model" --method rtn --group-size 128 -o "$out/kjv-rtn-g128.tinyloop" --quiet

step "2/4 marlin-pack"
"$bin/marlin-pack" "$out/kjv-gptq-g128.tinyloop" -o "$out/kjv-gptq-g128-marlin.tinyloop"
"$bin/marlin-pack" "$out/kjv-rtn-g128.tinyloop" -o "$out/kjv-rtn-g128-marlin.tinyloop" --quiet

step "3/4 tl-verify: pack tier + GPU tiers (symmetric, correction, wrapper, e2e) where a GPU is present"
set +e
"$bin/tl-verify" "$out/kjv-gptq-g128-marlin.tinyloop" --tokens "$root/data/kjv_eval.u32" \
  --baseline "$out/kjv-rtn-g128-marlin.tinyloop" --json "$out/verify.json" --md "$out/verify.md" \
  --drift-json "$out/drift.json" --drift-md "$out/drift.md" 2> "$out/verify.log"
rc=$?
set -e
grep -E "skipped|FAILED|first dispatch" "$out/verify.log" || true
case $rc in
  0) verdict="passed" ;;
  77) verdict="skipped (no suitable GPU)" ;;
  *) echo "demo: tl-verify exit $rc (see $out/verify.log)" >&2; exit $rc ;;
esac

step "4/4 summary"
python3 - "$out/gptq.json" <<'PY' 2>/dev/null || true
import json, sys
s = json.load(open(sys.argv[1]))
t = s["totals"]
print(f"GPTQ calibrated loss {t['gptq_loss']:.4g} vs RTN {t['rtn_loss']:.4g} over {t['quantized']} weights "
      f"({100 * (1 - t['gptq_loss'] / t['rtn_loss']):.1f} % lower)")
PY
if [ -f "$out/drift.md" ]; then
  echo "PPL drift report: $out/drift.md ($out/drift.json)"
else
  echo "no PPL drift report: the e2e tier needs a GPU (sm_80+); the CPU reference PPL of the fp16"
  echo "model is in data/README.md"
fi
echo "tl-verify: $verdict; reports in $out/"
