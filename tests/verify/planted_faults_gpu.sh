#!/usr/bin/env bash
# Each planted packing fault, written into a file the way a buggy packer would, must make the
# GPU tiers (symmetric + wrapper, without the pack tier) exit 1 with a stderr line naming the
# wrapper tier and the faulty weight -- and only that weight; for a fault confined to known
# columns, the worst element named must lie in them. Exit 77 where the GPU tiers are skipped.
set -u
dir="$TL_TMP/planted_faults_gpu"
rm -rf "$dir" && mkdir -p "$dir"
"$TL_FIXTURE" "$dir/ok.tinyloop" --seed 23 || exit 2
"$TL_VERIFY" "$dir/ok.tinyloop" --tiers symmetric,wrapper > "$dir/ok.out" 2> "$dir/ok.err"
rc=$?
if [ $rc -eq 77 ]; then
  grep "skipped" "$dir/ok.err"
  exit 77
fi
if [ $rc -ne 0 ]; then
  echo "FAIL: the correct file does not pass (rc $rc):"; cat "$dir/ok.out" "$dir/ok.err"; exit 1
fi
status=0
while read -r fault weight cols; do
  f="$dir/$fault.tinyloop"
  "$TL_FIXTURE" "$f" --seed 23 --fault "$fault" --weight "$weight" || exit 2
  "$TL_VERIFY" "$f" --tiers symmetric,wrapper > "$dir/$fault.out" 2> "$dir/$fault.err"
  rc=$?
  others=$(grep -o "FAILED [a-z]*: [^ ]* m=" "$dir/$fault.err" | grep -v "FAILED [a-z]*: $weight m=")
  bad_col=""
  if [ -n "$cols" ]; then
    lo=${cols%..*}; hi=${cols#*..}
    for n in $(grep "FAILED [a-z]*: $weight m=.*max ULP" "$dir/$fault.err" | sed -n 's/.* at C\[[0-9]*, \([0-9]*\)\].*/\1/p'); do
      { [ "$n" -lt "$lo" ] || [ "$n" -gt "$hi" ]; } && bad_col="$bad_col $n"
    done
  fi
  if [ $rc -ne 1 ] || ! grep -q "FAILED wrapper: $weight m=" "$dir/$fault.err"; then
    echo "FAIL: fault $fault in $weight: rc $rc, expected 1 and 'FAILED wrapper: $weight m=...'"
    cat "$dir/$fault.err"
    status=1
  elif [ -n "$others" ]; then
    echo "FAIL: fault $fault in $weight also failed other weights: $others"; status=1
  elif [ -n "$bad_col" ]; then
    echo "FAIL: fault $fault in $weight: worst element outside columns $cols:$bad_col"
    cat "$dir/$fault.err"; status=1
  else
    echo "ok: $fault in $weight caught: $(grep -m1 "FAILED" "$dir/$fault.err")"
  fi
done <<'LIST'
swapped-perm-entry layers.0.mlp_down
delta-sign layers.0.mlp_up
per-row-as-grouped layers.0.attn_out
scales-off-by-one-group layers.0.mlp_down
transposed layers.0.attn_out
one-group-scales layers.0.mlp_down
one-column-delta layers.0.mlp_up 259..259
one-tile-permutation layers.0.attn_out 128..143
one-nibble layers.0.mlp_down 165..165
last-k-tile layers.0.mlp_up
LIST
# The SwiGLU pair (the fused decode launch and the unfused sequence): the correct pair passes; a
# fault in one group of W_up alone, or one column of its delta, fails the pair's cases.
if ! "$TL_VERIFY" "$dir/ok.tinyloop" --tiers swiglu > "$dir/ok_swiglu.out" 2> "$dir/ok_swiglu.err"; then
  echo "FAIL: the correct pair does not pass the swiglu tier:"; cat "$dir/ok_swiglu.err"; status=1
fi
for fault in one-group-scales one-column-delta; do
  f="$dir/swiglu-$fault.tinyloop"
  "$TL_FIXTURE" "$f" --seed 23 --fault "$fault" --weight layers.0.mlp_up || exit 2
  "$TL_VERIFY" "$f" --tiers swiglu > "$dir/swiglu-$fault.out" 2> "$dir/swiglu-$fault.err"
  rc=$?
  if [ $rc -ne 1 ] || ! grep -q "FAILED swiglu: layers.0.mlp_gate+up m=" "$dir/swiglu-$fault.err"; then
    echo "FAIL: $fault in layers.0.mlp_up: swiglu tier rc $rc, expected 1 and 'FAILED swiglu: layers.0.mlp_gate+up m='"
    cat "$dir/swiglu-$fault.err"; status=1
  else
    echo "ok: $fault in layers.0.mlp_up caught by the swiglu tier: $(grep -c "FAILED swiglu" "$dir/swiglu-$fault.err") of 4 cases"
  fi
done
exit $status
