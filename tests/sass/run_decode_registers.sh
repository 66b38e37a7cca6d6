#!/usr/bin/env bash
# Compiles cuda/marlin_small_m.cu for sm_90 as the build does, with ptxas's report, and checks
# the decode kernel's register budget with decode_registers.py (no spills but the SwiGLU pair's
# known ones at 9..16 rows). Needs only the CUDA compiler; no GPU.
# Env: TL_NVCC (the build's CUDA compiler), TL_NVCC_FLAGS (its flags, tests/sass/tests.cmake),
# TL_SRC (the source tree), TL_TMP (scratch).
set -u
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$TL_TMP" || exit 2
log="$TL_TMP/marlin_small_m_sm90.ptxas.log"
# shellcheck disable=SC2086  # TL_NVCC_FLAGS is a list of flags
"$TL_NVCC" $TL_NVCC_FLAGS -gencode=arch=compute_90,code=sm_90 -Xptxas -v -cubin -I"$TL_SRC" \
  "$TL_SRC/cuda/marlin_small_m.cu" -o "$TL_TMP/marlin_small_m_sm90.cubin" > "$log" 2>&1 || { cat "$log"; exit 2; }
python3 "$here/decode_registers.py" "$log"
