#!/usr/bin/env python3
"""Cross-check our model runner against HF transformers' LlamaForCausalLM (run on the GPU machine).

    python3 tools/hf_llama_crosscheck.py --tl-verify build-sm90/apps/tl-verify [--out DIR]

Builds a small random LlamaForCausalLM with GQA (4 query heads, 2 KV heads, head_dim 64, RoPE
theta 10000, untied head), saves it with save_pretrained (safetensors, float32), writes random
token ids as raw little-endian uint32, computes transformers' logits in float32 (eager attention),
then runs

    tl-verify MODEL_DIR --tokens TOKENS --ctx CTX --dump-logits OUT.npy --dump-windows N

which writes float32 [paths, N * CTX, vocab] with paths "cpu" (libconvert's fp32 forward) and,
on a GPU, "gpu-fp16" (libverify's runner, every linear through tl::cuda::quant_gemm's fp16 path).
Each path is compared with transformers' logits:

  cpu       relative Frobenius error <= 1e-4: both sides are fp32 with the same RoPE angles
            (HF's float32 inv_freq); only summation order differs (~1e-6 relative per dot
            product, amplified by the depth)
  gpu-fp16  relative Frobenius error <= 1e-2: fp16 activations at every GEMM input (see
            tests/cuda/test_model_gpu.cpp for the derivation), top-1 agreement >= 99 %

Exit 0 when every path is within its bound, 1 otherwise. Prints one line per path.
"""
import argparse
import json
import os
import subprocess
import sys

import numpy as np

BOUNDS = {"cpu": 1e-4, "gpu-fp16": 1e-2}
MIN_TOP1 = {"cpu": 0.999, "gpu-fp16": 0.99}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tl-verify", required=True, help="path to the tl-verify binary")
    ap.add_argument("--out", default="build/hf_crosscheck", help="scratch folder")
    ap.add_argument("--ctx", type=int, default=96)
    ap.add_argument("--windows", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()

    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(a.seed)
    cfg = LlamaConfig(vocab_size=384, hidden_size=256, intermediate_size=512, num_hidden_layers=3,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                      rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False,
                      initializer_range=0.08, attn_implementation="eager")
    model = LlamaForCausalLM(cfg).float().eval()
    # Non-trivial norm gains (HF initialises them to 1, which would hide a missing gain).
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.add_(0.1 * torch.randn_like(p))
    os.makedirs(a.out, exist_ok=True)
    model_dir = os.path.join(a.out, "llama-random")
    model.save_pretrained(model_dir, safe_serialization=True)

    n = a.ctx * a.windows
    tokens = torch.randint(0, cfg.vocab_size, (n,), generator=torch.Generator().manual_seed(a.seed + 1))
    tok_path = os.path.join(a.out, "tokens.u32")
    tokens.numpy().astype("<u4").tofile(tok_path)

    with torch.no_grad():
        ref = model(tokens.view(a.windows, a.ctx)).logits.float().reshape(n, -1).numpy().astype(np.float64)

    out_npy = os.path.join(a.out, "ours.npy")
    cmd = [a.tl_verify, model_dir, "--tokens", tok_path, "--ctx", str(a.ctx), "--dump-logits", out_npy,
           "--dump-windows", str(a.windows)]
    print("running:", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)
    ours = np.load(out_npy)
    names = ["cpu", "gpu-fp16"][: ours.shape[0]]
    ok = True
    summary = {"torch": torch.__version__, "ctx": a.ctx, "windows": a.windows, "paths": {}}
    for i, name in enumerate(names):
        x = ours[i].astype(np.float64)
        rel = float(np.linalg.norm(x - ref) / np.linalg.norm(ref))
        mx = float(np.abs(x - ref).max())
        top1 = float((x.argmax(-1) == ref.argmax(-1)).mean())
        good = rel <= BOUNDS[name] and top1 >= MIN_TOP1[name]
        ok &= good
        summary["paths"][name] = {"rel_fro": rel, "max_abs": mx, "top1": top1, "bound": BOUNDS[name], "ok": good}
        print(f"{name:9s} vs transformers: rel {rel:.3e} (bound {BOUNDS[name]:.0e}), max |diff| {mx:.3e}, "
              f"top-1 {100 * top1:.2f} %  {'ok' if good else 'FAIL'}")
    with open(os.path.join(a.out, "crosscheck.json"), "w") as f:
        json.dump(summary, f, indent=1)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
