#!/usr/bin/env python3
"""Write a tinyloop calibration file (Hessians) for an HF Llama-family model, on a GPU.

    python3 tools/hf_calibrate.py MODEL_DIR --tokens calib.u32 -o calib.h5 [--seq 512]
        [--samples 128] [--batch 8] [--head] [--device cuda]
    gptq-quantize MODEL_DIR --calib calib.h5 -o model-g128.tinyloop

For models too large for gptq-quantize's own `--calib-tokens` (which runs the CPU forward and
holds the model in float32), this runs the model in PyTorch with forward pre-hooks on its
linear layers and accumulates, per TinyLoop weight, exactly what IST-DASLab/gptq's
`GPTQ.add_batch` does: for every forward call with a batch of B windows,
    H *= n / (n + B);  n += B;  x = sqrt(2 / n) * x;  H += x^T x      (float32)
so H = 2/n * sum x x^T over every token row. File format (docs/format.md): root attributes
format = "tinyloop-calib", format_version = 1; /hessian/<name> float32 [K, K] with attributes
nsamples and K. Names are TinyLoop's: pre.<i>.attn_qkv (the input of q/k/v_proj, which share
it), pre.<i>.attn_out, pre.<i>.mlp_gate and pre.<i>.mlp_up (the same input: one accumulation,
written twice), pre.<i>.mlp_down, and head with --head.

Difference from --calib-tokens: one pass over the unquantized model (every block sees fp16
inputs), not GPTQ's sequential mode (block i+1 calibrated on the quantized outputs of block i).
Tokens: raw little-endian uint32 (.u32 / .bin) or a 1-D .npy of integer ids.
"""
import argparse
import os
import re
import tempfile

import numpy as np


def read_tokens(path):
    if path.endswith(".npy"):
        t = np.load(path)
        if t.ndim != 1 or t.dtype.kind not in "iu":
            raise SystemExit(f"{path}: expected a 1-D integer array")
        return t.astype(np.int64)
    raw = np.fromfile(path, dtype="<u4")
    if raw.size == 0:
        raise SystemExit(f"{path}: empty token file")
    return raw.astype(np.int64)


HF_TO_TL = {"self_attn.q_proj": "attn_qkv", "self_attn.o_proj": "attn_out", "mlp.gate_proj": "mlp_gate",
            "mlp.down_proj": "mlp_down"}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model"); ap.add_argument("--tokens", required=True); ap.add_argument("-o", "--output", required=True)
    ap.add_argument("--seq", type=int, default=512); ap.add_argument("--samples", type=int, default=128)
    ap.add_argument("--batch", type=int, default=8); ap.add_argument("--head", action="store_true")
    ap.add_argument("--device", default="cuda")
    a = ap.parse_args()

    import h5py
    import torch
    from transformers import AutoModelForCausalLM

    tokens = read_tokens(a.tokens)
    n_seq = min(a.samples, tokens.size // a.seq)
    if n_seq < 1:
        raise SystemExit(f"{a.tokens}: fewer than --seq {a.seq} tokens")
    dtype = torch.float16 if a.device.startswith("cuda") else torch.float32
    model = AutoModelForCausalLM.from_pretrained(a.model, torch_dtype=dtype).to(a.device).eval()
    vocab = model.config.vocab_size
    if tokens[: n_seq * a.seq].max() >= vocab or tokens.min() < 0:
        raise SystemExit(f"{a.tokens}: token id outside [0, {vocab})")

    state = {}  # TinyLoop name -> [H (float32, device), n]

    def hook_for(name):
        def hook(module, args):
            x = args[0].detach()
            b = x.shape[0] if x.dim() == 3 else 1
            x = x.reshape(-1, x.shape[-1]).float()
            if name not in state:
                state[name] = [torch.zeros(x.shape[1], x.shape[1], device=x.device), 0]
            h = state[name]
            h[0] *= h[1] / (h[1] + b)
            h[1] += b
            x = (2.0 / h[1]) ** 0.5 * x
            h[0] += x.t() @ x
        return hook

    layer_re = re.compile(r"^model\.layers\.(\d+)\.(.+)$")
    handles = []
    for mname, mod in model.named_modules():
        if not isinstance(mod, torch.nn.Linear):
            continue
        m = layer_re.match(mname)
        if m and m.group(2) in HF_TO_TL:
            handles.append(mod.register_forward_pre_hook(hook_for(f"pre.{m.group(1)}.{HF_TO_TL[m.group(2)]}")))
        elif a.head and mname == "lm_head":
            handles.append(mod.register_forward_pre_hook(hook_for("head")))
    if not handles:
        raise SystemExit(f"{a.model}: no Llama-family linear layers found (model.layers.<i>.self_attn.q_proj, ...)")

    x = torch.from_numpy(tokens[: n_seq * a.seq].reshape(n_seq, a.seq)).to(a.device)
    with torch.no_grad():
        for i in range(0, n_seq, a.batch):
            model(x[i:i + a.batch])
    for h in handles:
        h.remove()

    out_dir = os.path.dirname(os.path.abspath(a.output))
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(a.output) + ".tmp-", dir=out_dir)
    os.close(fd)
    try:
        # HDF5 1.10 format (checksummed metadata: tinyloop-tools refuses files without it) and
        # fixed-length strings (no unchecksummed global heap), as the project's own writers.
        with h5py.File(tmp, "w", libver=("v110", "v110")) as f:
            f.attrs["format"] = np.bytes_("tinyloop-calib")
            f.attrs["format_version"] = np.int64(1)
            f.attrs["producer"] = np.bytes_("tools/hf_calibrate.py")
            g = f.create_group("hessian")
            for name, (H, n) in sorted(state.items()):
                names = [name] + ([name[: -len("gate")] + "up"] if name.endswith(".mlp_gate") else [])
                for nm in names:
                    d = g.create_dataset(nm, data=H.cpu().numpy().astype(np.float32), chunks=True, fletcher32=True)
                    d.attrs["nsamples"] = np.int64(n)
                    d.attrs["K"] = np.int64(H.shape[0])
        os.replace(tmp, a.output)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    print(f"{a.output}: {len(state)} Hessians from {n_seq} windows x {a.seq} tokens")


if __name__ == "__main__":
    main()
