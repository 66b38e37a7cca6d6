#!/usr/bin/env python3
"""Writes the model-family fixtures of tests/data/families with transformers' own classes.

    python3 tools/make_family_fixtures.py [--out tests/data/families] [--only NAME ...]

Needs torch and transformers (the GPU machine has both; a CPU wheel does the same). For every
family feature the tools model, one tiny checkpoint:

    NAME/                 config.json + model.safetensors (fp16), written by save_pretrained
    NAME.ref.safetensors  tokens  I32 [windows, ctx]    random ids (seeded)
                          logits  F32 [windows * ctx, vocab]  transformers' forward, float32
                                  (eager attention) of the saved checkpoint loaded as float32
                          nll     F64 [windows, ctx - 1]      -log p(token t | tokens < t)
                          metadata: ppl_all (exp of the mean nll, tl-verify's --score all),
                                    transformers / torch versions, the feature

Every weight is drawn at random with a spread that makes its feature matter: biases N(0, 0.3),
norm gains 1 + N(0, 0.1), q/k norm gains 1 + N(0, 0.2); the sliding windows (16) are shorter
than the scored window (64); llama3 RoPE's original context (32) puts head frequencies in all
three of its bands. tests/convert/test_model_families.cpp compares the project's forward with
these and checks that each comparison fails with the feature switched off.
"""
import argparse
import json
import os

import numpy as np

CTX, WINDOWS = 64, 2


def base(**kw):
    d = dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
             rms_norm_eps=1e-5, tie_word_embeddings=False, initializer_range=0.08)
    d.update(kw)
    return d


def rope(kind, **params):
    return dict(rope_type=kind, rope_theta=10000.0, **params)


# name -> (model_type, config kwargs, feature)
FIXTURES = {
    "llama-rope-llama3": ("llama", base(rope_parameters=rope("llama3", factor=8.0, low_freq_factor=1.0,
                                                               high_freq_factor=4.0,
                                                               original_max_position_embeddings=32)),
                          "rope_type llama3"),
    "llama-rope-linear": ("llama", base(rope_parameters=rope("linear", factor=4.0)), "rope_type linear"),
    "llama-head-dim": ("llama", base(head_dim=32), "explicit head_dim 32 (hidden 64 / 4 heads = 16)"),
    "llama-bias-tied": ("llama", base(attention_bias=True, mlp_bias=True, tie_word_embeddings=True),
                        "attention_bias, mlp_bias, tied head"),
    "mistral-window": ("mistral", base(sliding_window=16), "sliding_window 16 < ctx 64"),
    "qwen2-bias-tied": ("qwen2", base(tie_word_embeddings=True, use_sliding_window=False), "q/k/v biases, tied head"),
    "qwen2-window": ("qwen2", base(use_sliding_window=True, sliding_window=16, max_window_layers=1),
                     "sliding window 16 on layers >= max_window_layers 1"),
    "qwen3": ("qwen3", base(head_dim=32, attention_bias=False, use_sliding_window=False), "q_norm / k_norm, head_dim 32"),
}


def make_config(model_type, kw):
    import transformers
    cls = {"llama": transformers.LlamaConfig, "mistral": transformers.MistralConfig,
           "qwen2": transformers.Qwen2Config, "qwen3": transformers.Qwen3Config}[model_type]
    kw = dict(kw)
    rp = kw.pop("rope_parameters", None)
    if rp is not None and int(transformers.__version__.split(".")[0]) < 5:
        rp = {k: v for k, v in rp.items() if k != "rope_theta"}
        kw["rope_scaling"] = rp  # transformers 4: rope_scaling (rope_theta is its own key)
    elif rp is not None:
        kw["rope_parameters"] = rp
    cfg = cls(**kw)
    cfg._attn_implementation = "eager"
    return cfg


def randomize(model, torch, gen):
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("q_norm.weight") or name.endswith("k_norm.weight"):
                p.copy_(1 + 0.2 * torch.randn(p.shape, generator=gen))
            elif name.endswith("norm.weight"):
                p.copy_(1 + 0.1 * torch.randn(p.shape, generator=gen))
            elif name.endswith(".bias"):
                p.copy_(0.3 * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(0.08 * torch.randn(p.shape, generator=gen))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="tests/data/families")
    ap.add_argument("--only", nargs="*")
    a = ap.parse_args()

    import torch
    import transformers
    from safetensors.torch import save_file

    os.makedirs(a.out, exist_ok=True)
    for i, (name, (model_type, kw, feature)) in enumerate(FIXTURES.items()):
        if a.only and name not in a.only:
            continue
        gen = torch.Generator().manual_seed(1000 + i)
        cfg = make_config(model_type, kw)
        model = transformers.AutoModelForCausalLM.from_config(cfg)
        randomize(model, torch, gen)
        model = model.half()
        d = os.path.join(a.out, name)
        model.save_pretrained(d, safe_serialization=True)
        # The saved checkpoint as a user loads it, in float32 (model.float() of the fp16 model
        # would keep RoPE's inv_freq buffer rounded to fp16).
        dtype_kw = "dtype" if int(transformers.__version__.split(".")[0]) >= 5 else "torch_dtype"
        model = transformers.AutoModelForCausalLM.from_pretrained(d, attn_implementation="eager",
                                                                  **{dtype_kw: torch.float32}).eval()
        tokens = torch.randint(0, cfg.vocab_size, (WINDOWS, CTX), generator=gen, dtype=torch.int64)
        with torch.no_grad():
            logits = model(tokens).logits.float()  # [W, ctx, V]
        logp = torch.log_softmax(logits.double(), dim=-1)
        nll = -logp[:, :-1, :].gather(-1, tokens[:, 1:, None]).squeeze(-1)  # [W, ctx - 1]
        ppl = float(torch.exp(nll.mean()))
        meta = {"ppl_all": repr(ppl), "feature": feature, "model_type": model_type,
                "transformers": transformers.__version__, "torch": torch.__version__}
        save_file({"tokens": tokens.to(torch.int32).contiguous(),
                   "logits": logits.reshape(WINDOWS * CTX, -1).contiguous(),
                   "nll": nll.contiguous()}, os.path.join(a.out, name + ".ref.safetensors"), metadata=meta)
        with open(os.path.join(a.out, name + ".tokens.u32"), "wb") as f:
            f.write(tokens.numpy().astype("<u4").tobytes())
        size = sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))
        print(f"{name:20s} {model_type:8s} ppl_all {ppl:.6f}  {size / 1024:.0f} KB  ({feature})")


if __name__ == "__main__":
    main()
