#!/usr/bin/env bash
# Compiles cuda/marlin_hopper.cu for sm_90a as the build does and checks its main loops'
# SASS with hopper_loops.py (no R2UR, instructions per stage bounded). Exit 77 (skipped) where
# no nvdisasm is found: set TL_NVDISASM, or put one on PATH or beside nvcc (the CUDA toolkit
# has it; PyPI's nvidia-cuda-nvdisasm too).
# Env: TL_NVCC (the build's CUDA compiler), TL_NVCC_FLAGS (its flags for the Hopper kernel,
# tests/sass/tests.cmake), TL_SRC (the source tree), TL_TMP (scratch).
set -u
here=$(cd "$(dirname "$0")" && pwd)
nvdisasm=${TL_NVDISASM:-}
[ -z "$nvdisasm" ] && nvdisasm=$(command -v nvdisasm 2> /dev/null)
[ -z "$nvdisasm" ] && [ -x "$(dirname "$TL_NVCC")/nvdisasm" ] && nvdisasm=$(dirname "$TL_NVCC")/nvdisasm
if [ -z "$nvdisasm" ] || [ ! -x "$nvdisasm" ]; then
  echo "skipped: no nvdisasm (set TL_NVDISASM)"
  exit 77
fi
mkdir -p "$TL_TMP" || exit 2
cubin="$TL_TMP/marlin_hopper_sm90a.cubin"
# shellcheck disable=SC2086  # TL_NVCC_FLAGS is a list of flags
"$TL_NVCC" $TL_NVCC_FLAGS -cubin -I"$TL_SRC" "$TL_SRC/cuda/marlin_hopper.cu" -o "$cubin" || exit 2
python3 "$here/hopper_loops.py" "$nvdisasm" "$cubin"
