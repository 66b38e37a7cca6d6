#!/bin/bash
# Bad .tinyloop / HDF5 inputs and bad output paths: exit 2, one line naming the file, the item and
# what was expected; nothing written at the output path; the input unchanged.
source "$TL_SRC/tests/cli/inspect_common.bash"
B=fx/bad
: > empty.tinyloop && mv empty.tinyloop fx/empty.tinyloop
expect_bad "fx/empty.tinyloop: empty file" - "$INSPECT" fx/empty.tinyloop
expect_bad "truncated.tinyloop: truncated: the HDF5 superblock says [0-9]+ bytes, the file has [0-9]+" out.safetensors \
  "$INSPECT" $B/truncated.tinyloop --extract head -o out.safetensors
expect_bad "missing_dataset.tinyloop: /quant/blk0.mlp_up/zero: missing dataset" out.safetensors \
  "$INSPECT" $B/missing_dataset.tinyloop --extract blk0.mlp_up -o out.safetensors
expect_bad "missing_dataset.tinyloop: /quant/blk0.mlp_up/zero: missing dataset" - "$INSPECT" $B/missing_dataset.tinyloop --check
expect_bad "wrong_dtype.tinyloop: /quant/blk0.mlp_up/scale: expected a float16 dataset" out.safetensors \
  "$INSPECT" $B/wrong_dtype.tinyloop --extract blk0.mlp_up -o out.safetensors
expect_bad "wrong_shape.tinyloop: /quant/blk0.mlp_up/marlin/B: expected shape \[16, 512\], found \[16, 256\]" \
  out.safetensors "$INSPECT" $B/wrong_shape.tinyloop --extract blk0.mlp_up -o out.safetensors
expect_bad "version9.tinyloop: unsupported format_version 9: this build reads versions 1 to 4" - "$INSPECT" $B/version9.tinyloop
expect_bad "nan_dense.tinyloop: bad_norm: NaN at flat index 17" out.safetensors \
  "$INSPECT" $B/nan_dense.tinyloop --extract bad_norm -o out.safetensors
expect_bad "nan_dense.tinyloop: bad_norm: NaN" - "$INSPECT" $B/nan_dense.tinyloop --check
expect_bad "not_tinyloop.h5: HDF5 file without a root 'format' attribute" - "$INSPECT" $B/not_tinyloop.h5
expect_bad "model.tinyloop: nope: no such tensor" out.safetensors "$INSPECT" fx/model.tinyloop --extract nope -o out.safetensors
expect_bad "no-such.tinyloop: No such file" - "$INSPECT" no-such.tinyloop
# a directory where a file was expected (input and output)
mkdir -p adir
expect_bad "adir: folder holds neither" - "$INSPECT" adir
mkdir -p outdir
expect_bad "outdir: output path is a directory" - "$INSPECT" fx/model.tinyloop --extract head -o outdir
# unwritable output folder: a path under a regular file, a missing folder (root ignores modes)
echo x > regular
expect_bad "regular/out.safetensors: cannot write output: 'regular' is not a folder" regular/out.safetensors \
  "$INSPECT" fx/model.tinyloop --extract head -o regular/out.safetensors
expect_bad "missing/out.safetensors: cannot write output: folder 'missing' does not exist" missing/out.safetensors \
  "$INSPECT" fx/model.tinyloop --extract head -o missing/out.safetensors
# an existing output is not clobbered by a failed run
echo keep > out.safetensors
"$INSPECT" fx/model.tinyloop --extract nope -o out.safetensors 2>/dev/null && fail "expected failure"
[ "$(cat out.safetensors)" = keep ] || fail "existing output clobbered by a failed run"
echo "formats_bad_input_tinyloop: ok"
