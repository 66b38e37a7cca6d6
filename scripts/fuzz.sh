#!/usr/bin/env bash
# Runs every libFuzzer target of tests/fuzz (built in the fuzz tree by `make fuzz-build`).
#   scripts/fuzz.sh BUILD SECONDS [--smoke]      (FUZZ_RUNS=N: stop a target after N executions)
# Seeds: tl_fuzz_seeds (files made by the project's writers) plus tests/repro. Each target runs
# SECONDS with ASan + UBSan; the first finding (crash, sanitizer report, uncaught exception,
# timeout, allocation over the limit, leak) fails the run, and its input is kept under
# BUILD/fuzz/findings/. A table of executions and coverage is written to BUILD/fuzz/report.md.
# --smoke: the CI run -- SECONDS per target, the kept corpus replayed first.
# FUZZ_LEAKS=0 (deep runs): the campaign without LeakSanitizer's check after each input, then every
# input of the kept corpus replayed once with it. libhdf5 leaks on many corrupt files (suppressed,
# tests/fuzz/lsan.supp), and the full-heap scan each of those inputs triggers took three quarters
# of the HDF5 targets' time; a leak of our code on a path the campaign found is still reported,
# by the replay of the input that reached that path.
set -uo pipefail
build=${1:?build dir}; seconds=${2:?seconds}; mode=${3:-}
root=$(cd "$(dirname "$0")/.." && pwd)
work="$build/fuzz"
mkdir -p "$work/findings" "$work/corpus" "$work/logs"
seeds="$work/seeds-$$"
"$build/tests/fuzz/tl_fuzz_seeds" "$seeds" "$root" || { echo "fuzz: seed generation failed"; exit 1; }
trap 'rm -rf "$seeds"' EXIT
cp "$root"/tests/repro/*.tinyloop "$seeds/tinyloop/"
mkdir -p "$seeds/hf_config" && cp "$root/tests/repro/config_dhead_mul_overflow.json" "$seeds/hf_config/"
targets=(tinyloop tinyloop_structured calib safetensors safetensors_index hf_config tokens quant_checkpoint hf_import tokenizer_json)
[ -n "${FUZZ_TARGETS:-}" ] && read -r -a targets <<< "$FUZZ_TARGETS"  # a subset, e.g. for parallel runs
status=0
leaks=${FUZZ_LEAKS:-1}
# The inputs are written to a file per execution (the readers take paths): on tmpfs where there is one.
if [ -z "${TMPDIR:-}" ] && [ -d /dev/shm ] && [ -w /dev/shm ]; then export TMPDIR=/dev/shm; fi
mkdir -p "$work/report"
for t in "${targets[@]}"; do
  bin="$build/tests/fuzz/fuzz_$t"
  mkdir -p "$work/corpus/$t" "$seeds/$t"
  log="$work/logs/$t.log"
  # -timeout: one input may take at most 30 s (the guarded HDF5 walk has its own 10 s limit);
  # -rss_limit_mb / -malloc_limit_mb: no input may make a reader take more than 2 GiB.
  ASAN_OPTIONS=detect_leaks=$leaks:allocator_may_return_null=0 LSAN_OPTIONS=suppressions=$root/tests/fuzz/lsan.supp \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    nice -n 10 "$bin" -max_total_time="$seconds" -runs="${FUZZ_RUNS:--1}" -timeout=30 -rss_limit_mb=2048 -malloc_limit_mb=2048 -max_len=262144 \
      -detect_leaks="$leaks" -print_final_stats=1 -artifact_prefix="$work/findings/$t-" "$work/corpus/$t" "$seeds/$t" > "$log" 2>&1
  rc=$?
  leak_note="" failed_log=$log
  if [ $rc -eq 0 ] && [ "$leaks" = 0 ]; then  # the kept corpus, once each, with the leak check
    ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=0 LSAN_OPTIONS=suppressions=$root/tests/fuzz/lsan.supp \
    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
      nice -n 10 "$bin" -runs=0 -detect_leaks=1 -timeout=30 -rss_limit_mb=2048 -malloc_limit_mb=2048 -max_len=262144 \
        -artifact_prefix="$work/findings/$t-leak-" "$work/corpus/$t" > "$log.leaks" 2>&1
    rc=$?
    leak_note=", corpus replayed with the leak check"
    failed_log=$log.leaks
  fi
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
  line=$(grep -E '^#[0-9]+' "$log" | tail -1)
  cov=$(echo "$line" | grep -o 'cov: [0-9]*' | grep -o '[0-9]*')
  ft=$(echo "$line" | grep -o 'ft: [0-9]*' | grep -o '[0-9]*')
  corp=$(echo "$line" | grep -o 'corp: [0-9]*' | grep -o '[0-9]*')
  took=$(grep -o 'Done [0-9]* runs in [0-9]* second' "$log" | grep -o 'in [0-9]*' | grep -o '[0-9]*' | tail -1)
  took=${took:-$seconds}
  rate=$(( ${execs:-0} / (took > 0 ? took : 1) ))
  result=ok
  if [ $rc -ne 0 ]; then
    result="FINDING (exit $rc, see $failed_log)"
    status=1
    echo "fuzz_$t: finding, exit $rc; last lines of $failed_log:"
    tail -n 30 "$failed_log"
  fi
  echo "| $t | $took | ${execs:-?} | $rate | ${cov:-?} | ${ft:-?} | ${corp:-?} | $result |" > "$work/report/$t.md"
  echo "fuzz_$t: ${execs:-?} executions in ${took}s, cov ${cov:-?}, $result$leak_note"
done
{
  echo "| target | seconds | executions | exec/s | coverage (edges) | features | corpus | result |"
  echo "|---|---|---|---|---|---|---|---|"
  for t in tinyloop tinyloop_structured calib safetensors safetensors_index hf_config tokens quant_checkpoint hf_import tokenizer_json; do
    [ -f "$work/report/$t.md" ] && cat "$work/report/$t.md"
  done
} > "$work/report.md"
cat "$work/report.md"
[ "$mode" = "--smoke" ] && [ $status -eq 0 ] && echo "fuzz smoke: every target clean"
exit $status
