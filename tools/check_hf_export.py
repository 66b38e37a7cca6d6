#!/usr/bin/env python3
"""Loads a tl-export folder (GPTQ or compressed-tensors) in transformers and compares its perplexity
with tl-verify's.

    python3 tools/check_hf_export.py FOLDER --tokens T.u32 --ctx CTX --drift-json FILE.json

FILE.json: tl-verify's drift report of the .tinyloop the folder was exported from (`--tiers e2e
--e2e-mode prefill --tokens T.u32 --ctx CTX`); its path's PPL is the figure to match: fp16 on a
GPU run, the CPU run's one path (`native`, the fp32 forward of W_hat) without one. The script scores the same
windows the same way (non-overlapping windows of CTX tokens, the second half of each scored,
tl-verify's default `--score second-half`) with AutoModelForCausalLM.from_pretrained(FOLDER) --
float16 on a GPU, float32 on the CPU -- and prints both PPLs and their ratio. Exit 0 when they
agree within --max-rel (1e-3), 1 when not, 77 when the folder's loader is not installed here
(compressed-tensors: the compressed_tensors package; GPTQ: gptqmodel, or optimum with auto_gptq):
which packages exist is printed first.
"""
import argparse
import importlib.util
import json
import math
import sys

import numpy as np


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folder")
    ap.add_argument("--tokens", required=True)
    ap.add_argument("--ctx", type=int, required=True)
    ap.add_argument("--drift-json", required=True)
    ap.add_argument("--max-rel", type=float, default=1e-3)
    a = ap.parse_args()

    have = {m: importlib.util.find_spec(m) is not None
            for m in ("transformers", "optimum", "auto_gptq", "gptqmodel", "compressed_tensors", "vllm")}
    print("packages: " + ", ".join(f"{m} {'yes' if v else 'no'}" for m, v in have.items()))
    method = json.load(open(a.folder + "/config.json"))["quantization_config"]["quant_method"]
    if method == "compressed-tensors" and not have["compressed_tensors"]:
        print("no compressed_tensors package here: skipped")
        return 77
    if method == "gptq" and not (have["gptqmodel"] or (have["optimum"] and have["auto_gptq"])):
        print("no GPTQ loader for transformers here: skipped")
        return 77

    import torch
    from transformers import AutoModelForCausalLM

    dev = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = torch.float16 if dev == "cuda" else torch.float32
    model = AutoModelForCausalLM.from_pretrained(a.folder, dtype=dtype).to(dev).eval()
    print(f"loaded {a.folder} ({method}) on {dev} as {dtype}: {type(model).__name__}")
    report = json.load(open(a.drift_json))
    first = int(report["first_scored_position"])  # tl-verify's window plan: targets first .. ctx-1
    tok = np.fromfile(a.tokens, dtype="<u4").astype(np.int64)
    n_win = len(tok) // a.ctx
    nll, count = 0.0, 0
    with torch.no_grad():
        for w in range(n_win):
            ids = torch.tensor(tok[w * a.ctx:(w + 1) * a.ctx], device=dev).unsqueeze(0)
            logits = model(ids).logits.float()[0]
            logp = torch.log_softmax(logits, dim=-1)
            tgt = ids[0, first:]
            nll -= logp[first - 1:a.ctx - 1].gather(1, tgt.unsqueeze(1)).sum().item()
            count += a.ctx - first
    ppl = math.exp(nll / count)
    ours = None
    if count != report["scored_tokens"]:
        print(f"scored {count} tokens, tl-verify {report['scored_tokens']}: not the same windows")
        return 1
    # The GPU's fp16 path; on a CPU-only run the one path there is (the fp32 forward of W_hat).
    prefill = [p for p in report["paths"] if p.get("mode", "prefill") == "prefill"]
    pick = [p for p in prefill if p["name"] == "fp16"] or prefill[:1]
    if not pick:
        print("no prefill path in " + a.drift_json)
        return 1
    ours, path_name = pick[0]["ppl"], pick[0]["name"]
    rel = ppl / ours - 1
    print(f"transformers on {a.folder}: PPL {ppl:.6f} over {count} tokens; tl-verify {path_name} path: {ours:.6f}; "
          f"relative {rel:+.3e} (bound {a.max_rel:g})")
    return 0 if abs(rel) <= a.max_rel else 1


if __name__ == "__main__":
    sys.exit(main())
