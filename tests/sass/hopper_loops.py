#!/usr/bin/env python3
"""The Hopper kernel's main loops, as the compiler emitted them (nvdisasm of an sm_90a cubin).

For every tile variant of marlin_hopper_kernel (32, 64, 128 tokens) it finds the loops that issue
the stage's wgmmas (a backward branch whose body holds >= 4 HGMMA and < 600 instructions) and
checks the two properties the kernel's speed at M <= 64 rests on (docs/kernels.md, "Instructions
per stage, uniform registers"):

  * no R2UR in any of them: the stage walk is warp-uniform to the compiler, so the wgmma
    descriptors come from uniform registers. A branch it takes for divergent before a loop
    (the epilogue's shuffles under a per-thread condition, 2026-12-02) moves the
    descriptors to vector registers: 32 R2UR per stage at 32 tokens, 299 -> 337 instructions.
  * at most MAX_PER_STAGE instructions per loop: 274-279 per column and 294-304 with groups at
    32 and 64 tokens (a loop per scale form, a kernel per split kind) and 205 at
    128 with nvcc 13.0; the bounds leave ~4 % above the largest for another compiler's
    scheduling and stay below the 330-337 of the regression above.

Exit 0: all hold; 1: one fails (the loops are printed); 2: bad input.
Usage: hopper_loops.py NVDISASM CUBIN
"""
import re
import subprocess
import sys

MAX_PER_STAGE = {32: 315, 64: 315, 128: 220}


def functions(nvdisasm, cubin):
    out = subprocess.run([nvdisasm, "-c", cubin], capture_output=True, text=True, check=True).stdout
    funcs, name, ins, labels = {}, None, [], {}
    for line in out.splitlines():
        m = re.match(r"\s*\.text\.(\S+):", line)
        if m:
            if name:
                funcs[name] = (ins, labels)
            name, ins, labels = m.group(1), [], {}
            continue
        m = re.match(r"^(\.L_x_\d+):", line.strip())
        if m and name:
            labels[m.group(1)] = len(ins)
            continue
        m = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;", line)
        if m and name:
            ins.append(m.group(2))
    if name:
        funcs[name] = (ins, labels)
    return funcs


def main_loops(ins, labels):
    loops = []
    for i, text in enumerate(ins):
        m = re.search(r"BRA\s+`\((\.L_x_\d+)\)", text)
        if m and m.group(1) in labels and labels[m.group(1)] <= i:
            body = ins[labels[m.group(1)]:i + 1]
            if sum("HGMMA" in x for x in body) >= 4 and len(body) < 600:
                loops.append((len(body), sum(bool(re.search(r"\bR2UR\b", x)) for x in body)))
    return loops


def main():
    if len(sys.argv) != 3:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    try:
        funcs = functions(sys.argv[1], sys.argv[2])
    except (OSError, subprocess.CalledProcessError) as e:
        print(f"hopper_loops: cannot disassemble {sys.argv[2]}: {e}", file=sys.stderr)
        return 2
    seen, bad = set(), []
    for name, (ins, labels) in sorted(funcs.items()):
        m = re.search(r"marlin_hopper_kernelILi(\d+)E", name)
        if not m:
            continue
        rows = int(m.group(1))
        loops = main_loops(ins, labels)
        seen.add(rows)
        print(f"{rows}-token tiles: main loops (instructions per stage, R2UR) {sorted(loops)}")
        if not loops:
            bad.append(f"{rows}-token tiles: no main loop found")
        for n, r2ur in loops:
            if r2ur:
                bad.append(f"{rows}-token tiles: a main loop has {r2ur} R2UR (descriptors off the uniform datapath)")
            if n > MAX_PER_STAGE[rows]:
                bad.append(f"{rows}-token tiles: a main loop of {n} instructions (bound {MAX_PER_STAGE[rows]})")
    for rows in MAX_PER_STAGE:
        if rows not in seen:
            bad.append(f"{rows}-token tiles: kernel not in the cubin")
    for b in bad:
        print("FAIL: " + b)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
