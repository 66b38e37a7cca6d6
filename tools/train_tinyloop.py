#!/usr/bin/env python3
"""Train the demo TinyLoop model (DESIGN.md architecture) on bytes of the KJV text, on a GPU.

    python3 tools/train_tinyloop.py --train .train/kjv_train.bin --eval data/kjv_eval.u32 --out OUT

Architecture (must match libconvert's CPU forward and the GPU runner exactly):
  embed [V, D] -> n_pre blocks -> n_loop shared blocks applied `loops` times -> RMSNorm -> head.
  Block: x += attn_out(attn(RoPE(split(attn_qkv(rms(x)))))); x += mlp_down(silu(mlp_gate(h)) * mlp_up(h)),
  h = rms(x). Fused qkv output order: q (H*dh), k (Hkv*dh), v (Hkv*dh). RoPE: HF Llama
  rotate_half convention, theta 10000. GQA: q head h reads kv head h // (H / Hkv). No biases.
Export: HF-style fp16 safetensors in two shards + model.safetensors.index.json + config.json
(model_type "tinyloop"); PyTorch [out, in] orientation; q/k/v as separate q_proj/k_proj/v_proj.
Names: model.layers.{i}.* for the n_pre blocks, model.loop_layers.{j}.* for the shared blocks.
"""
import argparse
import json
import math
import os
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class Cfg:
    vocab = 256; d_model = 512; n_heads = 8; n_kv_heads = 4; ffn = 1536
    n_pre = 2; n_loop = 1; loops = 4; norm_eps = 1e-5; rope_theta = 10000.0; max_seq = 512


class RMSNorm(nn.Module):
    def __init__(self, d, eps):
        super().__init__(); self.weight = nn.Parameter(torch.ones(d)); self.eps = eps

    def forward(self, x):
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (xf * self.weight.float()).to(x.dtype)


def rope_tables(seq, dh, theta, device):
    inv = 1.0 / (theta ** (torch.arange(0, dh, 2, device=device).float() / dh))
    f = torch.outer(torch.arange(seq, device=device).float(), inv)
    emb = torch.cat([f, f], dim=-1)
    return emb.cos(), emb.sin()


def rotate_half(x):
    a, b = x.chunk(2, dim=-1)
    return torch.cat([-b, a], dim=-1)


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c; dh = c.d_model // c.n_heads; self.dh = dh
        self.input_layernorm = RMSNorm(c.d_model, c.norm_eps)
        self.q_proj = nn.Linear(c.d_model, c.n_heads * dh, bias=False)
        self.k_proj = nn.Linear(c.d_model, c.n_kv_heads * dh, bias=False)
        self.v_proj = nn.Linear(c.d_model, c.n_kv_heads * dh, bias=False)
        self.o_proj = nn.Linear(c.n_heads * dh, c.d_model, bias=False)
        self.post_attention_layernorm = RMSNorm(c.d_model, c.norm_eps)
        self.gate_proj = nn.Linear(c.d_model, c.ffn, bias=False)
        self.up_proj = nn.Linear(c.d_model, c.ffn, bias=False)
        self.down_proj = nn.Linear(c.ffn, c.d_model, bias=False)

    def forward(self, x, cos, sin):
        B, T, _ = x.shape; c = self.c
        h = self.input_layernorm(x)
        q = self.q_proj(h).view(B, T, c.n_heads, self.dh).transpose(1, 2)
        k = self.k_proj(h).view(B, T, c.n_kv_heads, self.dh).transpose(1, 2)
        v = self.v_proj(h).view(B, T, c.n_kv_heads, self.dh).transpose(1, 2)
        q = q * cos[:T] + rotate_half(q) * sin[:T]
        k = k * cos[:T] + rotate_half(k) * sin[:T]
        rep = c.n_heads // c.n_kv_heads
        k = k.repeat_interleave(rep, dim=1); v = v.repeat_interleave(rep, dim=1)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o_proj(a.transpose(1, 2).reshape(B, T, -1))
        h = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


class TinyLoop(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.embed_tokens = nn.Embedding(c.vocab, c.d_model)
        self.layers = nn.ModuleList([Block(c) for _ in range(c.n_pre)])
        self.loop_layers = nn.ModuleList([Block(c) for _ in range(c.n_loop)])
        self.norm = RMSNorm(c.d_model, c.norm_eps)
        self.lm_head = nn.Linear(c.d_model, c.vocab, bias=False)
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.02)

    def forward(self, idx, cos, sin):
        x = self.embed_tokens(idx)
        for b in self.layers:
            x = b(x, cos, sin)
        for _ in range(self.c.loops):
            for b in self.loop_layers:
                x = b(x, cos, sin)
        return self.lm_head(self.norm(x))


def hf_state_dict(model):
    sd = {"model.embed_tokens.weight": model.embed_tokens.weight,
          "model.norm.weight": model.norm.weight, "lm_head.weight": model.lm_head.weight}
    for prefix, blocks in (("model.layers", model.layers), ("model.loop_layers", model.loop_layers)):
        for i, b in enumerate(blocks):
            p = f"{prefix}.{i}."
            sd[p + "input_layernorm.weight"] = b.input_layernorm.weight
            sd[p + "post_attention_layernorm.weight"] = b.post_attention_layernorm.weight
            for n in ("q_proj", "k_proj", "v_proj", "o_proj"):
                sd[p + f"self_attn.{n}.weight"] = getattr(b, n).weight
            for n in ("gate_proj", "up_proj", "down_proj"):
                sd[p + f"mlp.{n}.weight"] = getattr(b, n).weight
    return {k: v.detach().to(torch.float16).cpu().contiguous() for k, v in sd.items()}


@torch.no_grad()
def eval_ppl(model, tokens, ctx, cos, sin):
    """llama.cpp-style: windows of ctx tokens, stride ctx, score the second half of each."""
    nll, count = 0.0, 0
    windows = [tokens[s:s + ctx] for s in range(0, len(tokens) - ctx + 1, ctx)]
    x = torch.stack(windows)
    for i in range(0, len(x), 32):
        chunk = x[i:i + 32]
        logits = model(chunk, cos, sin).float()
        first = ctx // 2
        lp = F.log_softmax(logits[:, first - 1:-1], dim=-1)
        tgt = chunk[:, first:]
        nll -= lp.gather(-1, tgt.unsqueeze(-1)).sum().item()
        count += tgt.numel()
    return math.exp(nll / count), count


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--train", required=True); ap.add_argument("--eval", required=True)
    ap.add_argument("--out", required=True); ap.add_argument("--steps", type=int, default=2500)
    ap.add_argument("--batch", type=int, default=64); ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    torch.manual_seed(a.seed); np.random.seed(a.seed)
    dev = "cuda"; c = Cfg()
    train = torch.from_numpy(np.fromfile(a.train, dtype=np.uint8).astype(np.int64)).to(dev)
    evalt = torch.from_numpy(np.fromfile(a.eval, dtype="<u4").astype(np.int64)).to(dev)
    model = TinyLoop(c).to(dev)
    nparams = sum(p.numel() for p in model.parameters())
    cos, sin = rope_tables(c.max_seq, c.d_model // c.n_heads, c.rope_theta, dev)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}], lr=a.lr, betas=(0.9, 0.95))
    warm = 100
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / warm) *
                                              (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(s, a.steps) / a.steps))))
    t0 = time.time(); ctx = c.max_seq
    for step in range(a.steps):
        ix = torch.randint(0, len(train) - ctx - 1, (a.batch,), device=dev)
        xb = torch.stack([train[i:i + ctx] for i in ix]); yb = torch.stack([train[i + 1:i + ctx + 1] for i in ix])
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(xb, cos, sin)
        loss = F.cross_entropy(logits.float().view(-1, c.vocab), yb.view(-1))
        opt.zero_grad(set_to_none=True); loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0); opt.step(); sched.step()
        if step % 250 == 0 or step == a.steps - 1:
            print(f"step {step:5d} loss {loss.item():.4f} lr {sched.get_last_lr()[0]:.2e} {time.time() - t0:.0f}s", flush=True)
    model.eval()
    ppl32, n = eval_ppl(model, evalt, ctx, cos, sin)
    half = TinyLoop(c).to(dev).half(); half.load_state_dict({k: v.half() for k, v in model.state_dict().items()})
    ppl16, _ = eval_ppl(half, evalt, ctx, cos.half(), sin.half())
    os.makedirs(a.out, exist_ok=True)
    from safetensors.torch import save_file
    sd = hf_state_dict(model); names = list(sd)
    shards = [names[: len(names) // 2], names[len(names) // 2:]]
    weight_map = {}
    for i, part in enumerate(shards):
        fn = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        save_file({k: sd[k] for k in part}, os.path.join(a.out, fn), metadata={"format": "pt"})
        weight_map.update({k: fn for k in part})
    total = sum(v.numel() * 2 for v in sd.values())
    with open(os.path.join(a.out, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=1)
    cfg = {"model_type": "tinyloop", "architectures": ["TinyLoopForCausalLM"], "vocab_size": c.vocab,
           "hidden_size": c.d_model, "num_attention_heads": c.n_heads, "num_key_value_heads": c.n_kv_heads,
           "head_dim": c.d_model // c.n_heads, "intermediate_size": c.ffn, "n_pre": c.n_pre,
           "n_loop": c.n_loop, "loops": c.loops, "num_hidden_layers": c.n_pre, "rms_norm_eps": c.norm_eps,
           "rope_theta": c.rope_theta, "max_position_embeddings": c.max_seq, "tie_word_embeddings": False,
           "torch_dtype": "float16", "tokenizer": "bytes"}
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    summary = {"params": nparams, "steps": a.steps, "batch": a.batch, "ctx": ctx, "train_seconds": time.time() - t0,
               "final_loss": loss.item(), "eval_tokens_scored": n, "eval_ppl_fp32": ppl32, "eval_ppl_fp16": ppl16,
               "gpu": torch.cuda.get_device_name(), "torch": torch.__version__}
    with open(os.path.join(a.out, "train_summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
