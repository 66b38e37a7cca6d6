#!/bin/bash
# Two runs writing the same output at once (a shell loop started twice): both finish, the target
# is always one complete, valid file -- byte-identical to what either run writes alone, since the
# outputs are reproducible -- and no temporary is left. Each run writes its own temporary
# (".<name>.tmp-<host>-<pid>-<n>", atomic_output.h) and rename(2)s it into place, so the last
# rename wins whole. For every writing tool: gptq-quantize, marlin-pack, tl-export (a folder:
# one run creates it, the other is refused by name with nothing written) and tl-verify's reports.
source "$(dirname "$0")/tools_common.bash"
no_temporaries() { ! ls -a | grep -q '\.tmp-' || fail "temporary left: $(ls -a | grep '\.tmp-') ($*)"; }

"$GQ" "$MODEL" --method rtn -o alone.tinyloop -q || fail "gptq-quantize alone"
"$MP" alone.tinyloop -o alone-m.tinyloop -q > /dev/null || fail "marlin-pack alone"
for round in 1 2 3; do
  rm -f out.tinyloop packed.tinyloop
  "$GQ" "$MODEL" --method rtn -o out.tinyloop -q & a=$!
  "$GQ" "$MODEL" --method rtn -o out.tinyloop -q & b=$!
  wait $a || fail "gptq-quantize run 1 of round $round"
  wait $b || fail "gptq-quantize run 2 of round $round"
  cmp out.tinyloop alone.tinyloop || fail "round $round: the target is not one run's complete file"
  "$MP" out.tinyloop -o packed.tinyloop -q > /dev/null & a=$!
  "$MP" out.tinyloop -o packed.tinyloop -q > /dev/null & b=$!
  wait $a && wait $b || fail "marlin-pack, round $round"
  cmp packed.tinyloop alone-m.tinyloop || fail "round $round: marlin-pack's target is not one run's file"
  "$TV" packed.tinyloop --tiers pack --json r.json > /dev/null 2>&1 & a=$!
  "$TV" packed.tinyloop --tiers pack --json r.json > /dev/null 2>&1 & b=$!
  wait $a && wait $b || fail "tl-verify, round $round"
  python3 -c "import json; json.load(open('r.json'))" || fail "round $round: r.json is not one complete report"
  no_temporaries "round $round"
done
# tl-export writes a new folder: of two runs at once one creates it, the other is refused (exit 2,
# one line) -- or both finish one after the other's check and the second is refused -- and the
# folder is the complete export either way.
if python3 -c "import numpy" 2>/dev/null; then
  python3 "$TL_SRC/tools/make_llama_checkpoint.py" orig --shape tiny --dtype fp16 > /dev/null || fail "make_llama_checkpoint"
  "$GQ" orig --method rtn --group-size 128 -o llama.tinyloop -q || fail "gptq-quantize (llama)"
  "$TL_BIN/tl-export" llama.tinyloop -o alone-gptq -q || fail "tl-export alone"
  for round in 1 2 3; do
    rm -rf gptq
    "$TL_BIN/tl-export" llama.tinyloop -o gptq -q 2> e1.err & a=$!
    "$TL_BIN/tl-export" llama.tinyloop -o gptq -q 2> e2.err & b=$!
    wait $a; ra=$?
    wait $b; rb=$?
    [ $((ra + rb)) -eq 2 ] && [ $((ra * rb)) -eq 0 ] || fail "tl-export round $round: exit codes $ra and $rb"
    grep -hq "exists; tl-export writes a new folder" e1.err e2.err || fail "tl-export round $round: $(cat e1.err e2.err)"
    diff -r gptq alone-gptq > /dev/null || fail "tl-export round $round: the folder is not one run's export"
    no_temporaries "tl-export round $round"
  done
fi
echo "concurrent_writers: ok"
