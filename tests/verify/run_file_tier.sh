#!/usr/bin/env bash
# run_file_tier.sh NAME TIERS: builds an unpacked fixture, packs it with the real marlin-pack
# when it is built (else the fixture packs itself with tl::marlin_pack), then runs
# `tl-verify FILE --tiers TIERS` and passes its exit code on (77 = skipped).
set -u
name=$1 tiers=$2
dir="$TL_TMP/$name"
rm -rf "$dir" && mkdir -p "$dir"
if [ -n "${TL_MARLIN_PACK:-}" ] && [ -x "$TL_MARLIN_PACK" ]; then
  "$TL_FIXTURE" "$dir/raw.tinyloop" --seed 17 --no-marlin || exit 2
  "$TL_MARLIN_PACK" "$dir/raw.tinyloop" -o "$dir/packed.tinyloop" -q || exit 2
else
  "$TL_FIXTURE" "$dir/packed.tinyloop" --seed 17 || exit 2
fi
"$TL_VERIFY" "$dir/packed.tinyloop" --tiers "$tiers" --json "$dir/report.json" --md "$dir/report.md"
