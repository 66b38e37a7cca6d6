#!/bin/bash
# marlin-pack on bad input: exit 2, exactly one line on stderr "marlin-pack: file: item: what",
# nothing written at the output path, no temporary file left, the input untouched.
set -u
: "${TL_BIN:?}" "${TL_TMP:?}" "${TL_SRC:?}"
command -v python3 >/dev/null || { echo "python3 not found: skipped"; exit 77; }
source "$TL_SRC/tests/cli/marlin_pack_gptq.sh"
rm -rf "$TL_TMP" && mkdir -p "$TL_TMP" && cd "$TL_TMP" || exit 1
MP="$TL_BIN/marlin-pack"

# expect_bad PATTERN CMD...: exit 2, one stderr line matching PATTERN, no out.tinyloop, no temp.
expect_bad() {
  local pat="$1"; shift
  rm -f out.tinyloop
  "$@" > bad.out 2> bad.err
  local rc=$?
  [ $rc -eq 2 ] || fail "expected exit 2, got $rc: $* ($(cat bad.err))"
  [ "$(wc -l < bad.err)" -eq 1 ] || fail "expected one stderr line, got: $(cat bad.err)"
  grep -q "^marlin-pack: " bad.err || fail "stderr does not start with the tool name: $(cat bad.err)"
  grep -qE -- "$pat" bad.err || fail "stderr lacks '$pat': $(cat bad.err)"
  [ -e out.tinyloop ] && fail "output written despite the error: $*"
  ls -a | grep -q '\.tmp-' && fail "temporary file left behind: $*"
  return 0
}

make_gptq ck8 gptq 0 8
expect_bad "bits = 8: expected 4" "$MP" ck8 -o out.tinyloop
make_gptq ckbad gptq_v2 0 4 1
expect_bad "ckbad: lm_head: scales\[0, 7\] = 0: expected finite and > 0" "$MP" ckbad -o out.tinyloop
make_gptq ckok gptq 1 4
expect_bad "exactly one of -o OUTPUT and --in-place|excludes" "$MP" ckok
expect_bad "--in-place needs a .tinyloop input" "$MP" ckok --in-place
expect_bad "bad regular expression" "$MP" ckok -o out.tinyloop --only '('
expect_bad "no-such-file: No such file or directory; expected a .tinyloop" "$MP" no-such-file -o out.tinyloop
echo "not hdf5" > junk.bin
expect_bad "junk.bin: expected a .tinyloop" "$MP" junk.bin -o out.tinyloop
mkdir -p plain && expect_bad "a folder must be a quantized checkpoint" "$MP" plain -o out.tinyloop
# A sym v1 checkpoint declared as gptq_v2 carries z = 7: refused, naming the likely cause.
sed -i 's/"gptq"}/"gptq_v2"}/' ckok/quantize_config.json
expect_bad "is checkpoint_format right" "$MP" ckok -o out.tinyloop

# A failed --in-place run leaves its input byte for byte as it was.
sed -i 's/"gptq_v2"}/"gptq"}/' ckok/quantize_config.json
"$MP" ckok -o good.tinyloop -q > /dev/null || fail "good conversion"
cp good.tinyloop good.orig
expect_bad "bad regular expression" "$MP" good.tinyloop --in-place --only '['
cmp -s good.tinyloop good.orig || fail "input changed by a failed --in-place run"
echo "marlin_pack_bad_input: ok"
