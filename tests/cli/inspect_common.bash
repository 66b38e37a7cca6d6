# Shared by tests/cli/inspect_*.sh and formats_bad_input_*.sh (sourced, not a test itself:
# CTest registers *.sh only). Builds the fixtures with tl_make_fixtures into $TL_TMP/fx.
set -u
: "${TL_BIN:?}" "${TL_TMP:?}"
fail() { echo "FAIL: $*" >&2; exit 1; }
INSPECT="$TL_BIN/tl-inspect"
GEN="$TL_BIN/../tests/tl_make_fixtures"
[ -x "$INSPECT" ] || fail "tl-inspect not built at $INSPECT"
[ -x "$GEN" ] || fail "tl_make_fixtures not built at $GEN"
command -v python3 >/dev/null || { echo "python3 not found: skipped"; exit 77; }
rm -rf "$TL_TMP" && mkdir -p "$TL_TMP" && cd "$TL_TMP" || exit 1
"$GEN" fx || fail "tl_make_fixtures failed"

# Fingerprint of every fixture file, to prove that no command modified its input.
fingerprint() { find fx -type f -print0 | sort -z | xargs -0 md5sum; }

# expect_bad PATTERN OUT CMD...: exit 2, exactly one stderr line "tl-inspect: ..." matching
# PATTERN, nothing at OUT (use - for none), no temporary file anywhere, fixtures untouched.
expect_bad() {
  local pat="$1" out="$2"; shift 2
  local before; before="$(fingerprint)"
  [ "$out" != - ] && rm -f "$out"
  "$@" > bad.out 2> bad.err
  local rc=$?
  [ $rc -eq 2 ] || fail "expected exit 2, got $rc: $* ($(cat bad.err))"
  [ "$(wc -l < bad.err)" -eq 1 ] || fail "expected one stderr line, got: $(cat bad.err)"
  grep -q "^tl-inspect: " bad.err || fail "stderr does not start with the tool name: $(cat bad.err)"
  grep -qE -- "$pat" bad.err || fail "stderr lacks '$pat': $(cat bad.err)"
  [ "$out" != - ] && [ -e "$out" ] && fail "output written despite the error: $*"
  find . -name '*.tmp-*' | grep -q . && fail "temporary file left behind: $*"
  [ "$(fingerprint)" = "$before" ] || fail "an input file changed: $*"
  return 0
}
