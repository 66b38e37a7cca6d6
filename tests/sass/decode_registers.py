#!/usr/bin/env python3
"""The decode kernel's register budget, as ptxas reports it for sm_90 (nvcc -Xptxas -v).

The decode kernel (cuda/marlin_small_m.cu) streams the weights through a ring of k16 rows held in
registers: 8 rows in flight per warp at M <= 8, 4 at 9..16 rows, next to one or two accumulator
sets, within 255 registers (two blocks of 4 warps, or one of 8, per SM). The stream's speed rests
on all of it staying in registers (docs/kernels.md, "Decode kernel"); a spill puts local-memory
traffic into every k16 step. The compiler decides this, so a change anywhere in the kernel's
source, its parameter block included (adding 32 bytes to SmallParams changed the register
allocation of every instantiation, 2026-12-05), can spill without any test failing.

Checks, for every instantiation of marlin_small_m_kernel:
  * the expected set is there (MB8 1 / 2 x grouped x asym x PDL, and the SwiGLU pair's grouped x
    PDL per MB8): 24 kernels, so that a parse that finds nothing cannot pass;
  * spill stores at most SPILL_CEILING bytes: 0 everywhere, except the SwiGLU pair at 9..16 rows,
    whose second accumulator set and W_up's three pointers overflow by 8 bytes (groups) and 36
    bytes (per column) with nvcc 13.0: cuda/swiglu_pair.h runs it fused only on short warp
    stripes, where those spills measured cheaper than the unfused sequence (docs/perf.md). Their
    ceilings, 16 and 48 bytes, leave two or three registers for another compiler's allocation
    and stay far below what a ring that no longer fits spills (an 8-row ring at 9..16 rows:
    196-236 bytes).

Exit 0: all hold; 1: one fails (the table is printed); 2: bad input.
Usage: decode_registers.py PTXAS_LOG
"""
import re
import sys

# (MB8, pair) -> {grouped: ceiling in bytes of spill stores}
SPILL_CEILING = {(2, True): {True: 16, False: 48}}
EXPECTED = 24

NAME = re.compile(r"marlin_small_m_kernelILi(\d)ELi(\d)ELi(\d)ELb(\d)ELb(\d)ELb(\d)ELb(\d)EE")


def parse(log):
    """(name, spill stores, registers) per compiled entry function of the decode kernel."""
    kernels, current = [], None
    for line in log.splitlines():
        m = re.search(r"Compiling entry function '(\S+)' for 'sm_90'", line)
        if m:
            current = {"name": m.group(1)} if "marlin_small_m_kernel" in m.group(1) else None
            continue
        if current is None:
            continue
        m = re.search(r"(\d+) bytes spill stores", line)
        if m:
            current["spill"] = int(m.group(1))
        m = re.search(r"Used (\d+) registers", line)
        if m:
            current["regs"] = int(m.group(1))
            kernels.append(current)
            current = None
    return kernels


def main():
    if len(sys.argv) != 2:
        print(__doc__.strip().splitlines()[-1])
        return 2
    try:
        log = open(sys.argv[1], encoding="utf-8", errors="replace").read()
    except OSError as e:
        print(f"decode_registers: {e}")
        return 2
    kernels = parse(log)
    failed = False
    rows = []
    for k in kernels:
        m = NAME.search(k["name"])
        if not m or "spill" not in k:
            print(f"decode_registers: unrecognized instantiation {k['name']}")
            return 2
        mb8, ring, warps, grouped, asym, pair, dependent = (int(x) for x in m.groups())
        ceiling = SPILL_CEILING.get((mb8, bool(pair)), {}).get(bool(grouped), 0)
        ok = k["spill"] <= ceiling
        failed |= not ok
        rows.append((mb8, ring, warps, grouped, asym, pair, dependent, k["regs"], k["spill"], ceiling, ok))
    if len(kernels) != EXPECTED:
        print(f"decode_registers: {len(kernels)} decode kernel instantiations in the ptxas log, expected {EXPECTED}")
        failed = True
    print("MB8 ring warps grouped asym pair pdl | registers spill-bytes ceiling")
    for r in sorted(rows):
        print("%3d %4d %5d %7d %4d %4d %3d | %9d %11d %7d %s" % (*r[:10], "" if r[10] else "<- over"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
