#!/usr/bin/env python3
"""Build the demo model's training / evaluation / calibration tokens from a Debian package.

Source: the King James Version text in Debian's `bible-kjv-text` (4.38), read through the
`bible` program of `bible-kjv` (4.38): `apt-get install bible-kjv`. The 1611 translation is in
the public domain (see data/README.md). Tokens are bytes (vocab 256), so the C++ side needs no
tokenizer: a token id is the byte value.

Split: chapters whose index % 20 == 7 are held out (evaluation); the rest is training text.
Outputs (raw little-endian uint32 token files, the format formats/token_file.h reads):
  data/kjv_eval.u32   first 65536 tokens of the held-out text
  data/kjv_calib.u32  128 windows x 512 tokens drawn (seed 1234) from the training text
  <out>/kjv_train.bin the whole training text as bytes (not shipped; the trainer reads it)
"""
import argparse
import os
import re
import subprocess

import numpy as np


def read_verses():
    text = subprocess.run(["bible", "-f", "Genesis 1:1-Revelation 22:21"], check=True,
                          capture_output=True, text=True).stdout
    verses = []
    for line in text.splitlines():
        m = re.match(r"^([1-3]?[A-Za-z]+)(\d+):(\d+) (.*)$", line)
        if m:
            verses.append((m.group(1), int(m.group(2)), m.group(4).strip()))
    if len(verses) < 31000:
        raise SystemExit(f"expected ~31102 verses, parsed {len(verses)}")
    return verses


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--data", default=os.path.join(os.path.dirname(__file__), "..", "data"))
    ap.add_argument("--train-out", default="/tmp")
    args = ap.parse_args()
    verses = read_verses()
    train, held = [], []
    chapter_index, last = -1, None
    for book, chap, text in verses:
        if (book, chap) != last:
            chapter_index += 1
            last = (book, chap)
        (held if chapter_index % 20 == 7 else train).append(text)
    to_tokens = lambda lines: np.frombuffer(("\n".join(lines) + "\n").encode("ascii", "replace"),
                                            dtype=np.uint8).astype(np.uint32)
    train_t, held_t = to_tokens(train), to_tokens(held)
    rng = np.random.default_rng(1234)
    starts = rng.integers(0, len(train_t) - 512, size=128)
    calib = np.concatenate([train_t[s:s + 512] for s in starts])
    eval_t = held_t[:65536]
    os.makedirs(args.data, exist_ok=True)
    eval_t.astype("<u4").tofile(os.path.join(args.data, "kjv_eval.u32"))
    calib.astype("<u4").tofile(os.path.join(args.data, "kjv_calib.u32"))
    train_t.astype(np.uint8).tofile(os.path.join(args.train_out, "kjv_train.bin"))
    print(f"verses {len(verses)}  train {len(train_t)} tokens  held-out {len(held_t)}  "
          f"eval {len(eval_t)}  calib {len(calib)}")


if __name__ == "__main__":
    main()
