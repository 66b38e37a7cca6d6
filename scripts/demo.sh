#!/usr/bin/env bash
# make demo: the whole pipeline on the shipped model (data/tinyloop-kjv, data/README.md).
#   GPTQ 4-bit g128 calibrated on data/kjv_calib.u32 (and RTN 4-bit g128 beside it)
#   -> marlin-pack -> tl-verify: the pack tier, the GPU tiers where a GPU is present, and the e2e
#      tier (on the GPU, else on the CPU) against the original model, with the per-layer ranking
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
rm -rf "$out/kjv-gptq-g128.tinyloop.journal"  # an interrupted demo's resume journal: the demo starts afresh
"$bin/gptq-quantize" "$model" --calib-tokens "$root/data/kjv_calib.u32" --calib-samples "$calib_windows" \
  --group-size 128 -o "$out/kjv-gptq-g128.tinyloop" --json > "$out/gptq.json"
step "    gptq-quantize: RTN 4-bit g128 (the baseline)"
"$bin/gptq-quantize" "$model" --method rtn --group-size 128 -o "$out/kjv-rtn-g128.tinyloop" --quiet

step "2/4 marlin-pack"
"$bin/marlin-pack" "$out/kjv-gptq-g128.tinyloop" -o "$out/kjv-gptq-g128-marlin.tinyloop"
"$bin/marlin-pack" "$out/kjv-rtn-g128.tinyloop" -o "$out/kjv-rtn-g128-marlin.tinyloop" --quiet

step "3/4 tl-verify: pack tier, GPU tiers where a GPU is present, e2e vs the original model (GPU or CPU)"
set +e
"$bin/tl-verify" "$out/kjv-gptq-g128-marlin.tinyloop" --tokens "$root/data/kjv_eval.u32" \
  --reference "$model" --per-layer \
  --baseline "$out/kjv-rtn-g128-marlin.tinyloop" --json "$out/verify.json" --md "$out/verify.md" \
  --drift-json "$out/drift.json" --drift-md "$out/drift.md" 2> "$out/verify.log"
rc=$?
set -e
grep -E "skipped|FAILED|first dispatch|warning" "$out/verify.log" || true
case $rc in
  0) verdict="passed" ;;
  77) verdict="skipped" ;;
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
if [ -f "$out/drift.json" ]; then
  python3 - "$out/drift.json" <<'PY' 2>/dev/null || true
import json, sys
d = json.load(open(sys.argv[1]))
ref = d.get("reference")
if ref:
    print(f"original model: PPL {ref['ppl']:.4f} on {ref['n_scored']} tokens ({d['device']})")
for p in d["paths"]:
    if p["ppl_ratio"] is None or p["name"] == "fp16":
        continue
    who = "GPTQ" if p["model"] == "main" else "RTN "
    print(f"{who} {p['name']:6s} ({p['device']}): PPL {p['ppl']:.4f}, ratio {p['ppl_ratio']:.4f}, "
          f"KLD {p['kld']['mean']:.2e}, same top-1 {100 * p['top1_agree']:.2f} %")
PY
  echo "PPL drift report: $out/drift.md ($out/drift.json)"
fi
echo "tl-verify: $verdict; reports in $out/"
