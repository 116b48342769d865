#!/usr/bin/env python3
"""Trains a small llama-style decoder (examples/torch_model.py, byte-level
tokens) on the fortunes text through dmuon.torch, like bin/dmuon-train does
in C.

    mpirun -np 4 build/pyenv/bin/python examples/torch_train.py --line D \\
        --log build/torch-train.csv --plot build/torch-train.svg

Every rank draws the same global batch (the generator is seeded by the
step) and takes its slice, so runs on any rank count see the same tokens.
The log is CSV: step, loss (mean over the global batch), val_loss (every
--eval-every steps), muon_lr, step_s (wall time of the step, max over
ranks, as bin/dmuon-train logs it), tokens_per_s.  --plain-torch trains
the same model in this one process with torch.optim.Muon + AdamW instead
(no dmuon): the baseline for the binding's overhead.  --plot draws loss and val_loss with gnuplot (SVG).
"""
import argparse
import math
import os
import subprocess
import sys
import time

import torch

import dmuon
import dmuon.torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_model import loss_fn, make  # noqa: E402

BLOCK = 4096


def load_text(path, val_every):
    """The text at path (a file, or a directory of files in name order,
    skipping fortune index files *.dat/*.u8, links and hidden files) split
    into training and validation bytes: every val_every-th 4 KiB block is
    held out."""
    if os.path.isdir(path):
        files = [os.path.join(path, f) for f in sorted(os.listdir(path))
                 if not f.startswith(".") and not f.endswith((".dat", ".u8"))]
        files = [f for f in files if os.path.isfile(f) and not os.path.islink(f)]
    else:
        files = [path]
    if not files:
        sys.exit("torch_train: no text files in %s" % path)
    data = b"".join(open(f, "rb").read() for f in files)
    blocks = [data[i:i + BLOCK] for i in range(0, len(data), BLOCK)]
    val = b"".join(b for i, b in enumerate(blocks) if i % val_every == val_every - 1)
    train = b"".join(b for i, b in enumerate(blocks) if i % val_every != val_every - 1)
    return (torch.frombuffer(bytearray(train), dtype=torch.uint8).long(),
            torch.frombuffer(bytearray(val), dtype=torch.uint8).long())


def windows(text, starts, seq):
    idx = starts[:, None] + torch.arange(seq + 1)[None, :]
    w = text[idx]
    return w[:, :-1], w[:, 1:]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default="/usr/share/games/fortunes")
    ap.add_argument("--line", default="D", choices="ABCD")
    ap.add_argument("--sharding", default="fsdp", choices=("fsdp", "hsdp"))
    ap.add_argument("--ranks-per-node", type=int, default=None)
    ap.add_argument("--zero", type=int, default=3, choices=(2, 3))
    ap.add_argument("--param-dtype", default="bf16", choices=("bf16", "f32"))
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--ffn", type=int, default=192)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--batch", type=int, default=16, help="sequences per step, all ranks")
    ap.add_argument("--micro-batches", type=int, default=1)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--lr", type=float, default=0.02)
    ap.add_argument("--adamw-lr", type=float, default=0.01)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--clip", type=float, default=1.0)
    ap.add_argument("--recompute", action="store_true", help="torch.utils.checkpoint per block")
    ap.add_argument("--eval-every", type=int, default=50)
    ap.add_argument("--val-windows", type=int, default=64)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--log", help="CSV log")
    ap.add_argument("--plot", help="SVG plot of the log (gnuplot)")
    ap.add_argument("--save", help="checkpoint directory at the end")
    ap.add_argument("--resume", help="checkpoint directory to start from")
    ap.add_argument("--export", help="safetensors file of the final weights")
    ap.add_argument("--plain-torch", action="store_true",
                    help="torch.optim.Muon + AdamW in one process, no dmuon (a baseline)")
    a = ap.parse_args()
    torch.set_num_threads(1)
    rank, size = dmuon.world()
    if a.batch % (size * a.micro_batches):
        sys.exit("torch_train: --batch %d is not a multiple of %d ranks x %d micro-batches"
                 % (a.batch, size, a.micro_batches))
    train_text, val_text = load_text(a.data, 10)
    model = make(seed=a.seed, vocab=256, d=a.dim, layers=a.layers, heads=a.heads,
                 kv_heads=a.kv_heads, hidden=a.ffn, ckpt=a.recompute)
    plan = dmuon.torch.plan(model, ranks_per_node=a.ranks_per_node, sharding=a.sharding,
                            zero=a.zero, param_dtype=a.param_dtype)
    if a.plain_torch:
        if size > 1 or a.resume or a.save or a.export:
            sys.exit("torch_train: --plain-torch runs on one rank, without checkpoints")
        rt, opt = None, PlainTorch(model, plan, a)
    else:
        rt = dmuon.torch.shard(model, plan, line=a.line)
        opt = rt.optimizer(lr=a.lr, adamw_lr=a.adamw_lr, clip_norm=a.clip)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / a.warmup) if s < a.warmup else
        0.1 + 0.45 * (1 + math.cos(math.pi * (s - a.warmup) / max(1, a.steps - a.warmup))))
    start = 0
    if a.resume:
        rt.load(a.resume)
        start = rt.steps
        for _ in range(start):
            sched.step()
    if rank == 0:
        print("torch_train: %d ranks, line %s, %s ZeRO-%d, %d parameters, library %s" % (
            size, a.line, a.sharding, a.zero, sum(p[3] for p in plan.params),
            dmuon.library_path()[0]), flush=True)
    log = open(a.log, "w") if a.log and rank == 0 else None
    if log:
        log.write("step,loss,val_loss,muon_lr,step_s,tokens_per_s\n")
    B, M = a.batch // size, a.micro_batches
    vstarts = torch.linspace(0, len(val_text) - a.seq - 2, a.val_windows).long()

    def validate():
        with torch.no_grad():
            x, y = windows(val_text, vstarts[rank::size], a.seq)
            s = loss_fn(model, x, y).item() * len(x) if len(x) else 0.0
        tot = dmuon.allreduce_sum([s, float(len(x))])
        return tot[0] / tot[1]

    for step in range(start, a.steps):
        g = torch.Generator().manual_seed(a.seed * 1000003 + step)
        starts = torch.randint(0, len(train_text) - a.seq - 1, (a.batch,), generator=g)
        x, y = windows(train_text, starts[rank * B:(rank + 1) * B], a.seq)
        t0 = time.perf_counter()
        tot = 0.0
        for k in range(M):
            mb = slice(k * B // M, (k + 1) * B // M)
            loss = loss_fn(model, x[mb], y[mb]) / M
            loss.backward()
            tot += loss.item()
        lr = opt.param_groups[0]["lr"]
        opt.step()
        opt.zero_grad()
        sched.step()
        dt = time.perf_counter() - t0
        per_rank = [0.0] * size
        per_rank[rank] = dt
        sums = dmuon.allreduce_sum([tot] + per_rank)
        loss_mean, dt_max = sums[0], max(sums[1:])
        val = ""
        if a.eval_every and (step % a.eval_every == 0 or step + 1 == a.steps):
            val = "%.5f" % validate()
        if rank == 0:
            line = "%d,%.5f,%s,%.5g,%.5f,%.0f" % (step, loss_mean / size, val, lr, dt_max,
                                                 a.batch * a.seq / dt_max)
            if log:
                log.write(line + "\n")
                log.flush()
            if step % 10 == 0 or val:
                print(line, flush=True)
    if a.save:
        rt.save(a.save)
    if a.export:
        rt.export(a.export)
    if log:
        log.close()
        if a.plot:
            subprocess.run(["gnuplot", "-e",
                            "set terminal svg size 800,500; set output '%s'; set datafile "
                            "separator ','; set key autotitle columnhead; set xlabel 'step'; "
                            "set ylabel 'loss (nats/byte)'; plot '%s' using 1:2 with lines, "
                            "'' using 1:3 with points pt 7" % (a.plot, a.log)], check=True)
    if rt:
        rt.close()


class PlainTorch(torch.optim.Optimizer):
    """torch.optim.Muon on the plan's Muon matrices and AdamW on the rest,
    with global-norm clipping, behind one optimizer (for the LR schedule)."""

    def __init__(self, model, plan, a):
        roles = {n: r for n, _, r, _ in plan.params}
        named = dict(model.named_parameters())
        mu = [named[n] for n in named if roles[n] == "muon"]
        aw = [named[n] for n in named if roles[n] == "adamw"]
        super().__init__([{"params": mu, "lr": a.lr}, {"params": aw, "lr": a.adamw_lr}], {})
        self.muon = torch.optim.Muon(mu, lr=a.lr, weight_decay=0.0,
                                     adjust_lr_fn="match_rms_adamw")
        self.adamw = torch.optim.AdamW(aw, lr=a.adamw_lr, betas=(0.9, 0.95), weight_decay=0.0)
        self.clip, self.all = a.clip, mu + aw

    def step(self, closure=None):
        if self.clip > 0:
            torch.nn.utils.clip_grad_norm_(self.all, self.clip)
        for mine, theirs in zip(self.param_groups, (self.muon, self.adamw)):
            theirs.param_groups[0]["lr"] = mine["lr"]
            theirs.step()

    def zero_grad(self, set_to_none=True):
        self.muon.zero_grad()
        self.adamw.zero_grad()


if __name__ == "__main__":
    main()
