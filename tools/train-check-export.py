#!/usr/bin/env python3
"""Checks weights exported by dmuon-train --export against an independent reader.

    train-check-export.py WEIGHTS.safetensors CONFIG.json [--data PATH --seq T
                          --val-windows N --val-every K --expect-val LOSS --tol REL]

1. The Python `safetensors` library loads the file (exit 77 when it is not
   importable: the caller skips); every tensor the Hugging Face llama layout
   of CONFIG.json names is there with its shape and finite values, and no
   other tensor.
2. With torch and transformers importable, the weights go into
   transformers' LlamaForCausalLM (strict loading) and the mean
   cross-entropy over the trainer's validation windows (the same split and
   windows as tools/train/data.c) is computed; with --expect-val it must be
   within REL (relative) of the trainer's own figure.  Without them that
   step is skipped with a note.
Exit: 0 ok, 1 a check failed, 2 usage, 77 safetensors not importable.
"""
import argparse
import json
import math
import os
import stat
import sys


def expected_tensors(cfg):
    D, F = cfg["hidden_size"], cfg["intermediate_size"]
    hd = cfg.get("head_dim", D // cfg["num_attention_heads"])
    q, kv, V = cfg["num_attention_heads"] * hd, cfg["num_key_value_heads"] * hd, cfg["vocab_size"]
    t = {"model.embed_tokens.weight": (V, D), "model.norm.weight": (D,)}
    for l in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{l}."
        t.update({p + "self_attn.q_proj.weight": (q, D), p + "self_attn.k_proj.weight": (kv, D),
                  p + "self_attn.v_proj.weight": (kv, D), p + "self_attn.o_proj.weight": (D, q),
                  p + "mlp.gate_proj.weight": (F, D), p + "mlp.up_proj.weight": (F, D),
                  p + "mlp.down_proj.weight": (D, F), p + "input_layernorm.weight": (D,),
                  p + "post_attention_layernorm.weight": (D,)})
    if not cfg.get("tie_word_embeddings", False):
        t["lm_head.weight"] = (V, D)
    return t


def read_text(path):
    """The bytes dmuon-train reads (tools/train/data.c td_load)."""
    if os.path.isdir(path):
        out = b""
        for n in sorted(os.listdir(path)):
            if n.startswith(".") or n.endswith(".dat") or n.endswith(".u8"):
                continue
            f = os.path.join(path, n)
            if stat.S_ISREG(os.lstat(f).st_mode):
                with open(f, "rb") as fh:
                    out += fh.read()
        return out
    with open(path, "rb") as fh:
        return fh.read()


def val_text(data, every, block=4096):
    return b"".join(data[a:a + block] for b, a in enumerate(range(0, len(data), block))
                    if b % every == every - 1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("weights")
    ap.add_argument("config")
    ap.add_argument("--data", default="/usr/share/games/fortunes")
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--val-windows", type=int, default=64)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--val-every", type=int, default=10)
    ap.add_argument("--expect-val", type=float)
    ap.add_argument("--tol", type=float, default=1e-3)
    a = ap.parse_args()
    try:
        from safetensors.numpy import load_file
        import numpy as np
    except ImportError as e:
        print(f"skip: python safetensors/numpy not importable ({e})")
        return 77
    with open(a.config) as fh:
        cfg = json.load(fh)
    w = load_file(a.weights)
    exp = expected_tensors(cfg)
    bad = 0
    for n, shp in exp.items():
        if n not in w:
            print(f"not ok: {n} missing"); bad += 1
        elif tuple(w[n].shape) != shp:
            print(f"not ok: {n} shape {w[n].shape}, expected {shp}"); bad += 1
        elif not np.all(np.isfinite(w[n])):
            print(f"not ok: {n} has non-finite values"); bad += 1
    for n in w:
        if n not in exp:
            print(f"not ok: unexpected tensor {n}"); bad += 1
    print(f"safetensors: {len(w)} tensors, {sum(v.size for v in w.values())} elements, "
          f"dtypes {sorted({str(v.dtype) for v in w.values()})}")
    try:
        import torch
        from transformers import LlamaConfig, LlamaForCausalLM
    except ImportError as e:
        print(f"note: torch/transformers not importable ({e}); the loss check is skipped")
        return 1 if bad else 0
    model = LlamaForCausalLM(LlamaConfig(**{k: v for k, v in cfg.items()
                                            if k not in ("architectures", "torch_dtype")}))
    sd = {k: torch.from_numpy(v.astype(np.float32)) for k, v in w.items()}
    missing, unexpected = model.load_state_dict(sd, strict=False)
    missing = [m for m in missing if not (cfg.get("tie_word_embeddings") and m == "lm_head.weight")]
    if missing or unexpected:
        print(f"not ok: transformers loading: missing {missing}, unexpected {unexpected}")
        return 1
    if cfg.get("tie_word_embeddings"):
        model.tie_weights()
    model.eval()
    val = val_text(read_text(a.data), a.val_every)
    T = a.seq
    passes = (a.val_windows + a.batch - 1) // a.batch
    total = passes * a.batch
    span = len(val) - T - 1
    starts = [int(float(i) * float(span) / float(total)) for i in range(total)]
    x = torch.tensor([list(val[s:s + T]) for s in starts], dtype=torch.long)
    y = torch.tensor([list(val[s + 1:s + T + 1]) for s in starts], dtype=torch.long)
    with torch.no_grad():
        logits = model(input_ids=x).logits.double()
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                                 y.reshape(-1)).item()
    print(f"transformers LlamaForCausalLM: validation loss {loss:.6f} over {total} windows of {T}")
    if a.expect_val is not None:
        rel = abs(loss - a.expect_val) / abs(a.expect_val)
        print(f"trainer's validation loss {a.expect_val:.6f}: relative difference {rel:.2e} "
              f"(tolerance {a.tol:g})")
        if not rel <= a.tol:
            print("not ok: the losses differ"); bad += 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
