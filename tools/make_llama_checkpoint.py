#!/usr/bin/env python3
"""Writes a Llama-architecture HF checkpoint of random weights, for sizes and timings at real scale.

    tools/make_llama_checkpoint.py OUT_DIR [--shape 7b|13b|70b|405b|1b|tiny] [--dtype bf16|fp16]
                                           [--shard-gb 5] [--seed 0] [--layers N]

--layers keeps the shape's layer sizes with fewer (or more) layers: a 70B-shaped model of 2
layers (4.5 GB) times one 70B block where the disk cannot hold the 138 GB of the whole model.

OUT_DIR gets config.json, model-0000i-of-0000n.safetensors and model.safetensors.index.json with
the tensor names and [out, in] orientations of transformers' LlamaForCausalLM (the importer's
input: libconvert/checkpoint_import.h). Weights are N(0, 0.02) (norms 1), so quantized sizes,
kernel shapes and the tools' memory and time are those of the real model; the values mean
nothing (perplexity on them is ~vocab). Only numpy is needed. The 7B shape is 13.5 GB in bf16:
the write streams tensor by tensor (memory: one tensor), and the shard plan is made first, so a
full disk fails before anything large is written.
"""
import argparse
import json
import os
import shutil
import struct
import sys

import numpy as np

SHAPES = {
    # hidden, intermediate, layers, heads, kv heads, vocab
    "tiny": (256, 768, 2, 4, 4, 512),
    "1b": (2048, 8192, 16, 16, 16, 32000),  # a 67 M-parameter layer: the CLI memory test's
    "7b": (4096, 11008, 32, 32, 32, 32000),
    "13b": (5120, 13824, 40, 40, 40, 32000),
    "70b": (8192, 28672, 80, 64, 8, 32000),
    "405b": (16384, 53248, 126, 128, 8, 128256),  # Llama-3.1-405B's shape (use --layers)
}


def tensors(shape):
    """(name, [rows, cols] or [n]) in the order of an HF Llama state dict."""
    d, f, layers, heads, kv, vocab = shape
    hd = d // heads
    out = [("model.embed_tokens.weight", [vocab, d])]
    for i in range(layers):
        p = f"model.layers.{i}."
        out += [
            (p + "self_attn.q_proj.weight", [heads * hd, d]),
            (p + "self_attn.k_proj.weight", [kv * hd, d]),
            (p + "self_attn.v_proj.weight", [kv * hd, d]),
            (p + "self_attn.o_proj.weight", [d, heads * hd]),
            (p + "mlp.gate_proj.weight", [f, d]),
            (p + "mlp.up_proj.weight", [f, d]),
            (p + "mlp.down_proj.weight", [d, f]),
            (p + "input_layernorm.weight", [d]),
            (p + "post_attention_layernorm.weight", [d]),
        ]
    out += [("model.norm.weight", [d]), ("lm_head.weight", [vocab, d])]
    return out


def random_half(rng, n, dtype, is_norm, fast=False):
    """n values as 16-bit words: bf16 (top half of float32) or IEEE fp16. fast: bf16 words of a
    random sign and mantissa at exponent 2^-6 (|w| in [0.0156, 0.031)), drawn as integers: ~10x
    faster than normals, for sizes and timings where the values do not matter."""
    if fast and not is_norm and dtype == "bf16":
        return (rng.integers(0, 1 << 16, n, dtype=np.uint16) & np.uint16(0x807F)) | np.uint16(0x3C80)
    if is_norm:
        x = np.ones(n, dtype=np.float32)
    else:
        x = rng.standard_normal(n, dtype=np.float32)
        x *= 0.02
    if dtype == "fp16":
        return x.astype(np.float16).view(np.uint16)
    return (x.view(np.uint32) >> 16).astype(np.uint16)  # truncation is fine for random data


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--shape", choices=sorted(SHAPES), default="7b")
    ap.add_argument("--dtype", choices=["bf16", "fp16"], default="bf16")
    ap.add_argument("--shard-gb", type=float, default=5.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--layers", type=int, default=0, help="number of layers (0: the shape's)")
    ap.add_argument("--vocab", type=int, default=0, help="vocabulary size (0: the shape's; 50257: GPT-2's)")
    ap.add_argument("--fast", action="store_true", help="bf16 values drawn as integers (sizes and timings only)")
    a = ap.parse_args()
    shape = SHAPES[a.shape]
    if a.layers > 0:
        shape = shape[:2] + (a.layers,) + shape[3:]
    if a.vocab > 0:
        shape = shape[:5] + (a.vocab,)
    d, f, layers, heads, kv, vocab = shape
    plan, shard, size = [[]], 0, 0
    limit = int(a.shard_gb * 1e9)
    for name, dims in tensors(shape):
        nbytes = int(np.prod(dims)) * 2
        if plan[-1] and size + nbytes > limit:
            plan.append([])
            size = 0
        plan[-1].append((name, dims, nbytes))
        size += nbytes
    total = sum(n for s in plan for _, _, n in s)
    os.makedirs(a.out, exist_ok=True)
    free = shutil.disk_usage(a.out).free
    if free < total + (1 << 28):
        sys.exit(f"make_llama_checkpoint: {a.out}: needs {total / 1e9:.1f} GB, {free / 1e9:.1f} GB free")
    config = {
        "model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": d,
        "intermediate_size": f, "num_hidden_layers": layers, "num_attention_heads": heads,
        "num_key_value_heads": kv, "vocab_size": vocab, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
        "max_position_embeddings": 4096, "tie_word_embeddings": False,
        "torch_dtype": "bfloat16" if a.dtype == "bf16" else "float16",
    }
    with open(os.path.join(a.out, "config.json"), "w") as fh:
        json.dump(config, fh, indent=1)
    rng = np.random.default_rng(a.seed)
    weight_map = {}
    st_dtype = "BF16" if a.dtype == "bf16" else "F16"
    for i, entries in enumerate(plan):
        fname = f"model-{i + 1:05d}-of-{len(plan):05d}.safetensors"
        header, off = {"__metadata__": {"format": "pt"}}, 0
        for name, dims, nbytes in entries:
            header[name] = {"dtype": st_dtype, "shape": dims, "data_offsets": [off, off + nbytes]}
            off += nbytes
            weight_map[name] = fname
        hb = json.dumps(header, separators=(",", ":")).encode()
        hb += b" " * (-len(hb) % 8)
        with open(os.path.join(a.out, fname), "wb") as fh:
            fh.write(struct.pack("<Q", len(hb)) + hb)
            for name, dims, nbytes in entries:
                fh.write(random_half(rng, nbytes // 2, a.dtype, name.endswith("norm.weight"), a.fast).tobytes())
        print(f"make_llama_checkpoint: {fname}: {len(entries)} tensors, {off / 1e9:.2f} GB", file=sys.stderr)
    with open(os.path.join(a.out, "model.safetensors.index.json"), "w") as fh:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, fh, indent=1)
    print(f"make_llama_checkpoint: {a.out}: {a.shape} {a.dtype}, {total / 1e9:.2f} GB in {len(plan)} shard(s)",
          file=sys.stderr)


if __name__ == "__main__":
    main()
