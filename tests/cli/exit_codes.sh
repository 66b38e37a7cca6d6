#!/usr/bin/env bash
# Every exit code of every tool, one case per row of core/exit_codes.h's table: the rows are read
# back from each tool's --help ("Exit codes:"), each is run through its case below and must exit
# with that code. A row without a case, or a case whose tool no longer returns its code, fails:
# a code added to the table (a new gate) is tested before it ships.
source "$TL_SRC/tests/cli/tools_common.bash"
TE="$TL_BIN/tl-export"
FIX="$TL_BIN/../tests/make_verify_fixture"
[ -x "$FIX" ] || { echo "make_verify_fixture not built: skipped"; exit 77; }
python3 -c "import numpy" 2>/dev/null || { echo "python3 with numpy not found: skipped"; exit 77; }

python3 "$TL_SRC/tools/make_llama_checkpoint.py" orig --shape tiny --dtype fp16 > /dev/null || fail "make_llama_checkpoint"
"$GQ" orig --method rtn --group-size 128 -o g128.tinyloop -q || fail "setup: gptq-quantize g128"
"$GQ" orig --method rtn --group-size 64 -o g64.tinyloop -q || fail "setup: gptq-quantize g64"
"$FIX" ok.tinyloop --seed 3 || fail "setup: fixture"
"$FIX" fault.tinyloop --seed 3 --fault delta-sign --weight layers.0.mlp_down || fail "setup: fault fixture"

# One command per (tool, code); each runs in a fresh output name.
declare -A case_of=(
  ["gptq-quantize 0"]="$GQ orig --method rtn -o a.tinyloop -q"
  ["gptq-quantize 2"]="$GQ no-such-folder -o b.tinyloop -q"
  ["marlin-pack 0"]="$MP g128.tinyloop -o c.tinyloop -q"
  ["marlin-pack 1"]="$MP g64.tinyloop -o d.tinyloop --require-all"
  ["marlin-pack 2"]="$MP no-such.tinyloop -o e.tinyloop"
  ["tl-verify 0"]="$TV ok.tinyloop --tiers pack -q"
  ["tl-verify 1"]="$TV fault.tinyloop --tiers pack -q"
  ["tl-verify 2"]="$TV ok.tinyloop --tiers bogus"
  ["tl-verify 77"]="$TV --tiers pack"
  ["tl-inspect 0"]="$TI g128.tinyloop"
  ["tl-inspect 2"]="$TI no-such.tinyloop"
  ["tl-export 0"]="$TE g128.tinyloop -o f --from orig"
  ["tl-export 2"]="$TE no-such.tinyloop -o g"
)

rows=0
declare -A seen=()
for tool in gptq-quantize marlin-pack tl-verify tl-inspect tl-export; do
  codes=$("$TL_BIN/$tool" --help | sed -n '/^Exit codes:/,$p' | sed -n 's/^  \([0-9][0-9]*\)  .*/\1/p')
  [ -n "$codes" ] || fail "$tool --help lists no exit codes"
  for code in $codes; do
    key="$tool $code"
    cmd=${case_of[$key]:-}
    [ -n "$cmd" ] || fail "$key: a row of core/exit_codes.h with no case in this test"
    $cmd > out.txt 2> err.txt; rc=$?
    [ $rc -eq "$code" ] || fail "$key: '$cmd' exited $rc ($(head -c 300 err.txt))"
    seen[$key]=1
    rows=$((rows + 1))
  done
done
for key in "${!case_of[@]}"; do
  [ -n "${seen[$key]:-}" ] || fail "$key: a case for a code its tool's --help does not list"
done
echo "exit_codes: $rows rows, each exited with its code"
