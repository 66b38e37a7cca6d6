#!/usr/bin/env python3
"""Write the slimmed copies of ../shared/golden/gptq_*.h5 that tests/convert/test_gptq_golden.cpp
and test_minmax_golden.cpp read (the tests never read /work/shared).

What is kept, and why (everything else of the originals is dropped):
  gptq_<KxN>_calib.h5   H (the add_batch Hessian: quantizer input and the layer-output error,
                        ||X E||^2 = nsamples/2 * tr(E^T H E)); X only for 256x128 (the Hessian
                        accumulator test); W, identical in every case file of that shape
                        (checked below), stored once here; root attributes nsamples, seq,
                        dead_features, edge_col_*.
  gptq_<case>.h5        q, z, scale_f32, zero_f32, scale, zero, g_idx, perm (act-order), Hinv
                        (K <= 256 only, identical for act0 files / act1 files: kept in each so a
                        case file stands alone), rtn/{q, z, scale_f32, zero_f32, scale, zero};
                        root attributes K, N, G, group_size, group_size_effective, blocksize,
                        percdamp, damp, actorder, static_groups, nsamples, err_out_gptq,
                        err_out_rtn, gptq_error_sum_losses, upstream_commit, calib_file.
Datasets are written with shuffle + gzip(9), in the HDF5 1.10 file format (libver v110:
checksummed metadata, which the project's readers require).  Usage: gptq_slim.py SRC_DIR DST_DIR
"""
import glob
import os
import sys

import h5py
import numpy as np

CASE_ATTRS = ["K", "N", "G", "group_size", "group_size_effective", "blocksize", "percdamp",
              "damp", "actorder", "static_groups", "nsamples", "err_out_gptq", "err_out_rtn",
              "gptq_error_sum_losses", "upstream_commit", "upstream_repo", "calib_file"]
CALIB_ATTRS = ["K", "N", "nsamples", "seq", "dead_features", "upstream_commit", "upstream_repo"]
CASE_SETS = ["q", "z", "scale_f32", "zero_f32", "scale", "zero", "g_idx", "perm", "Hinv",
             "rtn/q", "rtn/z", "rtn/scale_f32", "rtn/zero_f32", "rtn/scale", "rtn/zero"]


def put(dst, name, data):
    dst.create_dataset(name, data=data, shuffle=True, compression="gzip", compression_opts=9)


def main(src, dst):
    os.makedirs(dst, exist_ok=True)
    for calib in sorted(glob.glob(os.path.join(src, "gptq_*_calib.h5"))):
        shape = os.path.basename(calib)[len("gptq_"):-len("_calib.h5")]
        cases = sorted(glob.glob(os.path.join(src, f"gptq_{shape}_*act*.h5")))
        with h5py.File(cases[0], "r") as c0:
            W = c0["W"][:]
            edge = {k: c0.attrs[k] for k in c0.attrs if k.startswith("edge_col_")}
        for c in cases:
            with h5py.File(c, "r") as f:
                assert np.array_equal(f["W"][:], W), f"{c}: W differs between case files"
        with h5py.File(calib, "r") as s, h5py.File(os.path.join(dst, os.path.basename(calib)), "w", libver=("v110", "v110")) as d:
            for k in CALIB_ATTRS:
                d.attrs[k] = s.attrs[k]
            for k, v in edge.items():
                d.attrs[k] = v
            d.attrs["slimmed_from"] = os.path.basename(calib) + " (+ W of " + os.path.basename(cases[0]) + ")"
            put(d, "H", s["H"][:])
            put(d, "W", W)
            if s.attrs["K"] <= 256:
                put(d, "X", s["X"][:])
        for c in cases:
            with h5py.File(c, "r") as s, h5py.File(os.path.join(dst, os.path.basename(c)), "w", libver=("v110", "v110")) as d:
                for k in CASE_ATTRS:
                    d.attrs[k] = s.attrs[k]
                d.attrs["slimmed_from"] = os.path.basename(c)
                for name in CASE_SETS:
                    if name in s:
                        put(d, name, s[name][:])


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
