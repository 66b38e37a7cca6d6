#!/usr/bin/env python3
"""Writes tests/data/interop: a small AWQ (GEMM) folder and the compressed-tensors folder that the
compressed-tensors package's own AutoAWQConverter makes of it, so that our two readers are checked
against an independent implementation of both layouts (tests/convert/test_quant_checkpoint.cpp).

    python3 tools/make_interop_fixtures.py tests/data/interop

Needs numpy, torch, safetensors and compressed-tensors (pip). Deterministic (seeded). The AWQ
folder is packed here with numpy from AutoAWQ's description of its GEMM layout (qweight [K, N/8],
nibble i of word c = column 8c + order[i], order = 0 2 4 6 1 3 5 7); the library's converter
unpacks it with its own reverse order and repacks with pack_to_int32: if the two disagreed about
the order, the two folders would not read back to the same weights.
"""
import json
import os
import sys

import numpy as np
import torch
from safetensors.torch import save_file

ORDER = [0, 2, 4, 6, 1, 3, 5, 7]
LAYERS = [("model.layers.0.self_attn.o_proj", 256, 64), ("model.layers.0.mlp.down_proj", 384, 32)]
GROUP = 128


def awq_pack(v):
    rows, n = v.shape
    out = np.zeros((rows, n // 8), dtype=np.uint32)
    for c in range(n // 8):
        for i in range(8):
            out[:, c] |= v[:, 8 * c + ORDER[i]].astype(np.uint32) << np.uint32(4 * i)
    return out.view(np.int32)


def main():
    out = sys.argv[1]
    rng = np.random.default_rng(2026)
    tensors = {}
    for name, k, n in LAYERS:
        g = k // GROUP
        q = rng.integers(0, 16, (k, n), dtype=np.int64)
        z = rng.integers(0, 16, (g, n), dtype=np.int64)
        z[0, 0], z[0, 1] = 0, 15
        s = np.exp2(rng.uniform(-10, -3, (g, n))).astype(np.float16)
        tensors[name + ".qweight"] = torch.from_numpy(awq_pack(q))
        tensors[name + ".qzeros"] = torch.from_numpy(awq_pack(z))
        tensors[name + ".scales"] = torch.from_numpy(s)
    tensors["model.norm.weight"] = torch.ones(8, dtype=torch.float16)
    qc = {"quant_method": "awq", "bits": 4, "group_size": GROUP, "zero_point": True, "version": "gemm"}

    from compressed_tensors.entrypoints.convert.converters.autoawq import AutoAWQConverter
    import compressed_tensors
    conv = AutoAWQConverter.from_autoawq_config(qc)
    ct = conv.process({k: v.clone() for k, v in tensors.items()})
    ct_qc = conv.update_config(None).model_dump(exclude_none=False)
    ct_qc["quant_method"] = "compressed-tensors"

    for sub, ts, q in (("awq", tensors, qc), ("ct", ct, ct_qc)):
        d = os.path.join(out, sub)
        os.makedirs(d, exist_ok=True)
        save_file({k: v.contiguous() for k, v in ts.items()}, os.path.join(d, "model.safetensors"),
                  metadata={"format": "pt"})
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump({"model_type": "llama", "quantization_config": q}, f, indent=1, default=str)
    print(f"wrote {out}/awq and {out}/ct (compressed-tensors {compressed_tensors.__version__}, "
          f"torch {torch.__version__}): " + ", ".join(sorted(ct)))


if __name__ == "__main__":
    main()
