"""A small llama-style decoder for examples/torch_train.py and the binding's
tests: token embedding, blocks of RMSNorm + grouped-query causal attention
(q/k/v/o of different shapes) and a SwiGLU MLP, final norm, untied head.
Parameter names follow transformers' Llama (embed_tokens,
layers.N.self_attn.q_proj, ...), so dmuon's plan sees "layers.N" blocks and
an export loads by name.  ckpt=True runs each block under
torch.utils.checkpoint (non-reentrant)."""
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint


class RMSNorm(nn.Module):
    def __init__(self, d, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class Attention(nn.Module):
    def __init__(self, d, heads, kv_heads):
        super().__init__()
        self.h, self.kv, self.hd = heads, kv_heads, d // heads
        self.q_proj = nn.Linear(d, heads * self.hd, bias=False)
        self.k_proj = nn.Linear(d, kv_heads * self.hd, bias=False)
        self.v_proj = nn.Linear(d, kv_heads * self.hd, bias=False)
        self.o_proj = nn.Linear(heads * self.hd, d, bias=False)

    def forward(self, x):
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, self.h, self.hd).transpose(1, 2)
        k = self.k_proj(x).view(B, T, self.kv, self.hd).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.kv, self.hd).transpose(1, 2)
        rep = self.h // self.kv
        k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o_proj(y.transpose(1, 2).reshape(B, T, self.h * self.hd))


class MLP(nn.Module):
    def __init__(self, d, hidden):
        super().__init__()
        self.gate_proj = nn.Linear(d, hidden, bias=False)
        self.up_proj = nn.Linear(d, hidden, bias=False)
        self.down_proj = nn.Linear(hidden, d, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Block(nn.Module):
    def __init__(self, d, heads, kv_heads, hidden):
        super().__init__()
        self.input_layernorm = RMSNorm(d)
        self.self_attn = Attention(d, heads, kv_heads)
        self.post_attention_layernorm = RMSNorm(d)
        self.mlp = MLP(d, hidden)

    def forward(self, x):
        x = x + self.self_attn(self.input_layernorm(x))
        return x + self.mlp(self.post_attention_layernorm(x))


class TinyDecoder(nn.Module):
    def __init__(self, vocab=48, d=32, layers=3, heads=4, kv_heads=2, hidden=40, ckpt=False):
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab, d)
        self.layers = nn.ModuleList(Block(d, heads, kv_heads, hidden) for _ in range(layers))
        self.norm = RMSNorm(d)
        self.lm_head = nn.Linear(d, vocab, bias=False)
        self.ckpt = ckpt

    def forward(self, tokens):
        x = self.embed_tokens(tokens)
        for b in self.layers:
            x = checkpoint(b, x, use_reentrant=False) if self.ckpt else b(x)
        return self.lm_head(self.norm(x))


def make(seed=0, **kw):
    torch.manual_seed(seed)
    m = TinyDecoder(**kw)
    with torch.no_grad():   # norm gains off 1 so that their updates matter
        for n, p in m.named_parameters():
            if p.dim() == 1:
                p.add_(0.1 * torch.randn_like(p))
    return m


def loss_fn(model, tokens, targets):
    logits = model(tokens)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def batches(steps, batch=8, seq=12, vocab=48, seed=1):
    """Fixed batches of a learnable sequence (each token determines the
    next: t -> (5 t + 3) mod vocab, from a random start), so that the loss
    falls and the optimizer's arithmetic shows in it."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(steps):
        x = torch.empty(batch, seq + 1, dtype=torch.long)
        x[:, 0] = torch.randint(0, vocab, (batch,), generator=g)
        for t in range(seq):
            x[:, t + 1] = (5 * x[:, t] + 3) % vocab
        out.append((x[:, :-1].contiguous(), x[:, 1:].contiguous()))
    return out
