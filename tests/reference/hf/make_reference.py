#!/usr/bin/env python3
"""Reference inventories of Hugging Face transformers for dmuon's model tests.

For every case in CASES (a tiny config.json of one model family) this script
writes, under the directory of this file:

  configs/CASE.json         the config.json given to dmuon (the case's dict as
                            written here: optional fields left out on purpose
                            where the case tests the config class's defaults)
  params/CASE.json          named_parameters() of the model transformers builds
                            from that config on the meta device (tied weights
                            once), with names, shapes and dtypes
  st/CASE/                  for cases with "save": a tiny real model written by
                            save_pretrained: model.safetensors (single file) and
                            sharded/ (model.safetensors.index.json + shards,
                            max_shard_size small), each cut to its header
                            (8-byte length + JSON header) so the files stay
                            small; config.json as save_pretrained wrote it
  files/CASE.json           the tensors of those files as the safetensors
                            library lists them (name, shape, dtype), single and
                            sharded

It is not run by the tests: the tests read the committed output.  Run it in a
virtual environment outside the repository:

  python3 -m venv $HOME/venv-hf
  $HOME/venv-hf/bin/pip install torch transformers safetensors
  $HOME/venv-hf/bin/python tests/reference/hf/make_reference.py

The versions used are written to versions.json.
"""
import json
import os
import shutil
import struct
import sys
import tempfile

import safetensors
import torch
import transformers
from safetensors import safe_open
from transformers import AutoConfig, AutoModelForCausalLM

HERE = os.path.dirname(os.path.abspath(__file__))

TINY = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, vocab_size=128, pad_token_id=0, bos_token_id=1,
            eos_token_id=2, dtype="bfloat16")


def tiny(**kw):
    d = dict(TINY)
    for k, v in kw.items():
        if v is DROP:
            d.pop(k, None)
        else:
            d[k] = v
    return d


DROP = object()
# the fields a "defaults" case keeps: everything else comes from the config class
# (num_attention_heads is chosen unlike the class's num_key_value_heads default,
# so that a wrong default changes a shape)
MINIMAL = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
           "vocab_size", "pad_token_id", "bos_token_id", "eos_token_id")


def minimal(**kw):
    d = {k: TINY[k] for k in MINIMAL}
    d.update(kw)
    return d


# name -> (model_type, fields, save a tiny real model with save_pretrained)
CASES = {
    # llama: optional biases on attention and MLP
    "llama": ("llama", tiny(attention_bias=True, mlp_bias=True), True),
    "llama_defaults": ("llama", minimal(), False),
    # mistral: its modeling code has no attention biases even when the field is set
    "mistral": ("mistral", tiny(attention_bias=True, head_dim=32), True),
    "mistral_defaults": ("mistral", minimal(num_attention_heads=16), False),
    # null fields take the __post_init__ fallbacks
    "llama_nulls": ("llama", tiny(num_key_value_heads=None, head_dim=None), False),
    # a head_dim the config class does not declare is still used by the module
    "qwen2_head_dim": ("qwen2", tiny(head_dim=8), False),
    # qwen2: the older torch_dtype field, tied embeddings
    "qwen2": ("qwen2", tiny(dtype=DROP, torch_dtype="float32", tie_word_embeddings=True), True),
    "qwen2_defaults": ("qwen2", minimal(num_attention_heads=64), False),
    "qwen2_moe": ("qwen2_moe", tiny(num_hidden_layers=4, qkv_bias=False, num_experts=4,
                                    num_experts_per_tok=2, moe_intermediate_size=32,
                                    shared_expert_intermediate_size=48, decoder_sparse_step=2,
                                    mlp_only_layers=[3]), True),
    "qwen2_moe_defaults": ("qwen2_moe", minimal(num_attention_heads=32), False),
    "gemma": ("gemma", tiny(head_dim=16), True),
    "gemma_defaults": ("gemma", minimal(num_attention_heads=32), False),
    "gemma2": ("gemma2", tiny(head_dim=16, tie_word_embeddings=False), True),
    "gemma2_defaults": ("gemma2", minimal(num_attention_heads=8), False),
    "qwen3": ("qwen3", tiny(head_dim=16, attention_bias=True, tie_word_embeddings=True), True),
    "qwen3_defaults": ("qwen3", minimal(num_attention_heads=64), False),
    "qwen3_moe": ("qwen3_moe", tiny(num_hidden_layers=3, head_dim=16, num_experts=4,
                                    num_experts_per_tok=2, moe_intermediate_size=32,
                                    mlp_only_layers=[1]), True),
    "qwen3_moe_defaults": ("qwen3_moe", minimal(num_attention_heads=8), False),
    # the attribute name instead of the num_experts alias; every other layer sparse
    "qwen3_moe_local": ("qwen3_moe", tiny(num_hidden_layers=4, num_local_experts=4,
                                          num_experts_per_tok=2, moe_intermediate_size=32,
                                          decoder_sparse_step=2), False),
    "mixtral": ("mixtral", tiny(num_local_experts=4, num_experts_per_tok=2, head_dim=None), True),
    "mixtral_defaults": ("mixtral", minimal(num_attention_heads=16), False),
    "phi3": ("phi3", tiny(), True),
    "phi3_defaults": ("phi3", minimal(), False),
    "deepseek_v3": ("deepseek_v3", tiny(num_hidden_layers=3, first_k_dense_replace=1,
                                        n_routed_experts=4, num_experts_per_tok=2, n_group=2,
                                        topk_group=1, moe_intermediate_size=32,
                                        n_shared_experts=2, kv_lora_rank=16, q_lora_rank=24,
                                        qk_rope_head_dim=8, qk_nope_head_dim=16,
                                        v_head_dim=12), True),
    # no query compression (q_proj), attention biases
    "deepseek_v3_noqlora": ("deepseek_v3", tiny(num_hidden_layers=2, first_k_dense_replace=1,
                                                n_routed_experts=4, num_experts_per_tok=2,
                                                n_group=2, topk_group=1, moe_intermediate_size=32,
                                                kv_lora_rank=16, q_lora_rank=None,
                                                qk_rope_head_dim=8, qk_nope_head_dim=16,
                                                v_head_dim=16, attention_bias=True), True),
    "deepseek_v3_defaults": ("deepseek_v3", minimal(num_hidden_layers=4, num_attention_heads=8),
                             False),
    # query compression with attention biases (q_a_proj, kv_a_proj_with_mqa, o_proj)
    "deepseek_v3_bias": ("deepseek_v3", tiny(num_hidden_layers=2, first_k_dense_replace=0,
                                             n_routed_experts=4, num_experts_per_tok=2,
                                             n_group=2, topk_group=1, moe_intermediate_size=32,
                                             kv_lora_rank=16, q_lora_rank=24, qk_rope_head_dim=8,
                                             qk_nope_head_dim=16, v_head_dim=16,
                                             attention_bias=True), False),
    "olmo2": ("olmo2", tiny(), True),
    "olmo2_defaults": ("olmo2", minimal(), False),
    "gemma3_text": ("gemma3_text", tiny(head_dim=16), True),
    "gemma3_text_defaults": ("gemma3_text", minimal(num_attention_heads=8), False),
    "llama4_text": ("llama4_text", tiny(num_hidden_layers=4, head_dim=16, num_local_experts=4,
                                        num_experts_per_tok=1, intermediate_size_mlp=80,
                                        interleave_moe_layer_step=2), True),
    "llama4_text_defaults": ("llama4_text", minimal(num_attention_heads=16), False),
    "llama4_text_moe_layers": ("llama4_text", tiny(num_hidden_layers=3, num_local_experts=2,
                                                   num_experts_per_tok=1, moe_layers=[0, 2],
                                                   intermediate_size_mlp=80), False),
    "gpt_oss": ("gpt_oss", tiny(head_dim=16, num_local_experts=4, num_experts_per_tok=2), True),
    "gpt_oss_defaults": ("gpt_oss", minimal(num_attention_heads=16), False),
    "gpt_oss_nobias": ("gpt_oss", tiny(head_dim=16, num_local_experts=2, num_experts_per_tok=1,
                                       attention_bias=False), False),
}

DTYPES = {torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16"}


def config_of(model_type, fields):
    kw = dict(fields)
    if "torch_dtype" in kw:
        kw["dtype"] = kw.pop("torch_dtype")
    return AutoConfig.for_model(model_type, **kw)


def model_dtype(fields):
    name = fields.get("dtype", fields.get("torch_dtype"))
    return getattr(torch, name) if name else torch.float32


def params_of(model):
    return [{"name": n, "shape": list(p.shape), "dtype": DTYPES[p.dtype]}
            for n, p in model.named_parameters()]


def header_only(path):
    """Cuts a safetensors file after its header (8-byte length + JSON)."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        head = f.read(n)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", n))
        f.write(head)


def file_tensors(path):
    out = []
    with safe_open(path, framework="pt") as f:
        for k in f.keys():
            sl = f.get_slice(k)
            out.append({"name": k, "shape": list(sl.get_shape()), "dtype": sl.get_dtype()})
    return out


def compact(obj, depth=0):
    """JSON with one tensor (or one scalar field) a line."""
    if isinstance(obj, dict) and depth < 1:
        items = [f"{json.dumps(k)}: {compact(v, depth + 1)}" for k, v in obj.items()]
        return "{\n" + ",\n".join(items) + "\n}"
    if isinstance(obj, list) and obj and isinstance(obj[0], dict):
        return "[\n" + ",\n".join(json.dumps(x) for x in obj) + "\n]"
    return json.dumps(obj)


def write_json(rel, obj):
    path = os.path.join(HERE, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".tmp", "w") as f:
        f.write(compact(obj))
        f.write("\n")
    os.replace(path + ".tmp", path)


def main():
    only = set(sys.argv[1:])
    for case, (model_type, fields, save) in CASES.items():
        if only and case not in only:
            continue
        cfg_json = dict(fields, model_type=model_type)
        write_json(f"configs/{case}.json", cfg_json)
        cfg = config_of(model_type, fields)
        dt = model_dtype(fields)
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(cfg, dtype=dt)
        write_json(f"params/{case}.json", {"model_type": model_type,
                                           "class": type(model).__name__,
                                           "params": params_of(model)})
        if not save:
            continue
        torch.manual_seed(0)
        real = AutoModelForCausalLM.from_config(cfg, dtype=dt)
        dst = os.path.join(HERE, "st", case)
        shutil.rmtree(dst, ignore_errors=True)
        with tempfile.TemporaryDirectory() as tmp:
            one, shards = os.path.join(tmp, "one"), os.path.join(tmp, "sharded")
            real.save_pretrained(one)
            real.save_pretrained(shards, max_shard_size="100KB")
            single = file_tensors(os.path.join(one, "model.safetensors"))
            idx = json.load(open(os.path.join(shards, "model.safetensors.index.json")))
            sharded = []
            for shard in sorted(set(idx["weight_map"].values())):
                sharded += file_tensors(os.path.join(shards, shard))
            os.makedirs(os.path.join(dst, "sharded"))
            shutil.copy(os.path.join(one, "config.json"), os.path.join(dst, "config.json"))
            shutil.copy(os.path.join(one, "model.safetensors"), dst)
            header_only(os.path.join(dst, "model.safetensors"))
            for fn in os.listdir(shards):
                if fn.endswith(".safetensors") or fn.endswith(".index.json"):
                    shutil.copy(os.path.join(shards, fn), os.path.join(dst, "sharded", fn))
                    if fn.endswith(".safetensors"):
                        header_only(os.path.join(dst, "sharded", fn))
        write_json(f"files/{case}.json", {"single": single, "sharded": sharded,
                                          "shards": len(set(idx["weight_map"].values()))})
        print(case, len(single), "tensors,", len(set(idx["weight_map"].values())), "shards")
    write_json("versions.json", {"transformers": transformers.__version__,
                                 "torch": torch.__version__.split("+")[0],
                                 "safetensors": safetensors.__version__})


if __name__ == "__main__":
    main()
