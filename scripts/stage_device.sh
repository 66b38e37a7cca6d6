#!/usr/bin/env bash
# Copies the binaries that run on the GPU machine into .device/bin (ignored by git; the `run`
# tool carries it with `carry: [".device"]`). Build first: `make device` (build-sm90: sm_90
# only, static HDF5). Usage: scripts/stage_device.sh [build-dir] [--xz]
# --xz: the staged files packed into .device/staged.tar.xz (bin/ and lib/ removed), for a carry
# under the `run` tool's 64 MiB; scripts/device_run.sh unpacks it on the GPU machine.
set -euo pipefail
xz=0
args=()
for a in "$@"; do [ "$a" = --xz ] && xz=1 || args+=("$a"); done
build=${args[0]:-build-sm90}
root=$(cd "$(dirname "$0")/.." && pwd)
dest="$root/.device/bin"
rm -rf "$dest" "$root/.device/lib" "$root/.device/staged.tar.xz"
mkdir -p "$dest"
staged=()
# GPU test runner and benchmark first; then whatever else was built (test runners, tools).
for f in "$build/tests/test_cuda" "$build/tests/test_gpu" "$build/bench/bench_kernels" "$build/bench/bench_gptq_gpu" "$build"/tests/test_* "$build"/apps/tl-* \
         "$build"/apps/gptq-quantize "$build"/apps/marlin-pack "$build"/tests/make_verify_fixture; do
  [ -f "$f" ] && [ -x "$f" ] || continue
  name=$(basename "$f")
  [ -e "$dest/$name" ] && continue
  cp "$f" "$dest/$name"
  strip --strip-debug "$dest/$name" 2>/dev/null || true
  staged+=("$name")
done
# The shared libraries the static device build still links (SentencePiece: Debian ships no static
# archive) go into .device/lib, the binaries' rpath ($ORIGIN/../lib).
mkdir -p "$root/.device/lib"
for f in "$dest"/*; do
  ldd "$f" 2>/dev/null | awk '/libsentencepiece/ {print $3}'
done | sort -u | while read -r lib; do cp -L "$lib" "$root/.device/lib/"; done
# The test runners find their data (tests/data, tests/golden) and scratch folder (build-sm90/tests/tmp)
# by this tree's absolute paths, compiled in: device_run.sh links them to the copy it runs in.
echo "$root" > "$root/.device/source_root"
if [ ${#staged[@]} -eq 0 ]; then
  echo "stage_device: nothing built in $build (run 'make device' first)" >&2
  exit 2
fi
size=$(du -sm "$root/.device" | cut -f1)
echo "stage_device: ${staged[*]} -> .device/bin (${size} MiB; the working tree + carry must stay < 64 MiB)"
if [ "$size" -ge 48 ] && [ "$xz" = 0 ]; then
  echo "stage_device: warning: .device is ${size} MiB (--xz packs it)" >&2
fi
if [ "$xz" = 1 ]; then
  tar -C "$root/.device" -cf - bin lib source_root | xz -T0 -6 > "$root/.device/staged.tar.xz"
  rm -rf "$dest" "$root/.device/lib"
  echo "stage_device: packed into .device/staged.tar.xz ($(du -m "$root/.device/staged.tar.xz" | cut -f1) MiB)"
fi
