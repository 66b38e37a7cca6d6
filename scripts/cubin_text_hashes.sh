#!/usr/bin/env bash
# Prints one line per kernel: "<file> <kernel> <sha256 of its machine code>", for the sm_90 cubin
# of every cuda/*.cu. Two checkouts whose lines match run the same SASS (no cuobjdump needed:
# the .text.<kernel> sections of a cubin are the machine code; anonymous-namespace hashes are
# stripped from the names). Used to show that a refactor of cuda/ did not change a kernel.
#   scripts/cubin_text_hashes.sh [ARCH] > hashes.txt      (ARCH: 90 by default)
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
arch=${1:-90}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for cu in "$root"/cuda/*.cu; do
  b=$(basename "$cu" .cu)
  nvcc -cubin -arch=sm_$arch -O3 -std=c++17 --expt-relaxed-constexpr -I"$root" -o "$tmp/$b.cubin" "$cu" ||
    { echo "nvcc failed on $cu" >&2; exit 1; }
  # The cubin is an ELF64 file: hash the bytes of every .text.<kernel> section.
  python3 - "$tmp/$b.cubin" "$b" <<'PY'
import hashlib, re, struct, sys
data = open(sys.argv[1], "rb").read()
shoff, = struct.unpack_from("<Q", data, 0x28)
shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
def sec(i):
    return struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize)
names_off = sec(shstrndx)[4]
for i in range(shnum):
    name_i, typ, _, _, off, size = sec(i)[:6]
    end = data.index(b"\0", names_off + name_i)
    name = data[names_off + name_i:end].decode()
    if name.startswith(".text."):
        clean = re.sub(r"_GLOBAL__N__[0-9a-f]+_[0-9]+_[A-Za-z0-9_]+_cu_[0-9a-f]+", "", name)
        print(sys.argv[2], clean, hashlib.sha256(data[off:off + size]).hexdigest()[:16])
PY
done | sort
