"""One rank of the memory benchmark (tools/memory-bench.sh runs it under
mpirun, one variant per launch): a decoder of --blocks blocks of
Linear(dim, 4 dim) + Linear(4 dim, dim) without bias (residual, GELU),
embedding and untied head of --vocab x dim, trained --steps steps on a
fixed batch of --batch x --seq tokens per rank, and this rank's peak
memory over its baseline (the model built, before any sharding): resident
(VmHWM, reset through /proc/self/clear_refs, read after the last step) and
proportional (Pss of /proc/self/smaps_rollup, sampled every --sample-ms by
a thread: a page shared by k processes counts 1/k in each, so the node's
shared pool counts once over the node; the kernel keeps no peak of it, so
a shorter peak between two samples can be missed).

Variants: dmuon-B|C|D-fsdp|hsdp (dmuon.torch, ZeRO-3; hsdp: 2 ranks per
node) and fsdp2-adamw (torch's fully_shard per block and on the root,
AdamW, gloo; the rendezvous from Open MPI's environment).  Writes one JSON
object per rank (--out, or a line on stdout): rank, variant, baseline and
peak bytes, and for dmuon the runtime's figures (rt.stats()) beside the
plan's (dmuon-plan show --json of the same plan, rank 0 only).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

import torch


def status_kb(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key):
                return int(line.split()[1])
    raise RuntimeError("no %s in /proc/self/status" % key)


def pss_kb():
    with open("/proc/self/smaps_rollup") as f:
        for line in f:
            if line.startswith("Pss:"):
                return int(line.split()[1])
    raise RuntimeError("no Pss in /proc/self/smaps_rollup")


class PssPeak:
    """The most Pss seen by a thread sampling every `ms` milliseconds."""

    def __init__(self, ms):
        self.ms, self.peak, self.samples = ms, pss_kb(), 0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self):
        while not self._stop.is_set():
            v = pss_kb()
            self.peak = max(self.peak, v)
            self.samples += 1
            time.sleep(self.ms / 1000)

    def stop(self):
        self._stop.set()
        self._t.join()
        self.peak = max(self.peak, pss_kb())
        return self.peak


class Block(torch.nn.Module):
    def __init__(self, d):
        super().__init__()
        self.up = torch.nn.Linear(d, 4 * d, bias=False)
        self.down = torch.nn.Linear(4 * d, d, bias=False)

    def forward(self, x):
        return x + self.down(torch.nn.functional.gelu(self.up(x)))


class Net(torch.nn.Module):
    def __init__(self, vocab, d, blocks):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, d)
        self.layers = torch.nn.ModuleList(Block(d) for _ in range(blocks))
        self.lm_head = torch.nn.Linear(d, vocab, bias=False)

    def forward(self, x):
        h = self.embed(x)
        for b in self.layers:
            h = b(h)
        return self.lm_head(h)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--variant", required=True)
    ap.add_argument("--blocks", type=int, default=16)
    ap.add_argument("--dim", type=int, default=512)
    ap.add_argument("--vocab", type=int, default=512)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=32)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--plan-tool", default="bin/dmuon-plan")
    ap.add_argument("--sample-ms", type=float, default=2.0, help="Pss sampling period")
    ap.add_argument("--out", help="write this rank's JSON to OUT.RANK.json (else stdout)")
    a = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", "0"))
    size = int(os.environ.get("OMPI_COMM_WORLD_SIZE", "1"))
    model = Net(a.vocab, a.dim, a.blocks)
    # torch's one-time costs before the baseline, the same for every
    # variant: an optimizer's first construction imports and sets up
    # torch.optim and its compile hooks (about 150 MB here), a first
    # forward and backward the autograd engine
    warm = torch.nn.Linear(4, 4)
    torch.optim.AdamW(warm.parameters()).step()
    warm(torch.ones(1, 4)).sum().backward()
    g = torch.Generator().manual_seed(1 + rank)
    x = torch.randint(0, a.vocab, (a.batch, a.seq), generator=g)
    y = torch.randint(0, a.vocab, (a.batch, a.seq), generator=g)
    out = {"rank": rank, "ranks": size, "variant": a.variant,
           "params": sum(p.numel() for p in model.parameters())}
    if a.variant.startswith("dmuon-"):
        import dmuon
        import dmuon.torch
        _, line, sharding = a.variant.split("-")
        dmuon.world()   # MPI up before the baseline (its buffers are not the model's)
        base, pbase = status_kb("VmRSS:"), pss_kb()
        open("/proc/self/clear_refs", "w").write("5")
        sampler = PssPeak(a.sample_ms)
        plan = dmuon.torch.plan(model, ranks_per_node=2 if sharding == "hsdp" else None,
                                sharding=sharding)
        rt = dmuon.torch.shard(model, plan, line=line)
        opt = rt.optimizer(lr=0.02, adamw_lr=1e-3)
        for _ in range(a.steps):
            loss = torch.nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten())
            loss.backward()
            opt.step()
            opt.zero_grad()
        hwm = status_kb("VmHWM:")
        ppeak = sampler.stop()
        st = rt.stats()
        out.update(baseline_bytes=base * 1024, peak_bytes=(hwm - base) * 1024,
                   pss_peak_bytes=(ppeak - pbase) * 1024, pss_samples=sampler.samples,
                   runtime={k: st[k] for k in ("pool_bytes", "ctrl_bytes", "work_bytes",
                                               "window_bytes", "state_bytes", "total_bytes")})
        if rank == 0:
            with tempfile.TemporaryDirectory() as d:
                path = os.path.join(d, "plan.yaml")
                plan.save(path)
                show = json.loads(subprocess.run(
                    [a.plan_tool, "show", path, "--json", "--ranks", "--line", line],
                    check=True, capture_output=True, text=True).stdout)
                mem = json.loads(subprocess.run(
                    [a.plan_tool, "show", path, "--json", "--line", line],
                    check=True, capture_output=True, text=True).stdout)["memory"]
            out["plan"] = {"pool_bytes": mem["pool_bytes"], "ctrl_bytes": mem["ctrl_bytes"],
                           "work_bytes": mem["work_bytes"],
                           "window_bytes": mem["window_space_bytes"],
                           "ranks": {r["rank"]: [r["state_bytes"], r["total_bytes"]]
                                     for r in show["ranks_detail"]}}
        rt.close()
    elif a.variant == "fsdp2-adamw":
        import torch.distributed as dist
        from torch.distributed.fsdp import fully_shard
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        dist.init_process_group("gloo", rank=rank, world_size=size)
        base, pbase = status_kb("VmRSS:"), pss_kb()
        open("/proc/self/clear_refs", "w").write("5")
        sampler = PssPeak(a.sample_ms)
        for b in model.layers:
            fully_shard(b)
        fully_shard(model)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        for _ in range(a.steps):
            loss = torch.nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten())
            loss.backward()
            opt.step()
            opt.zero_grad()
        hwm = status_kb("VmHWM:")
        ppeak = sampler.stop()
        out.update(baseline_bytes=base * 1024, peak_bytes=(hwm - base) * 1024,
                   pss_peak_bytes=(ppeak - pbase) * 1024, pss_samples=sampler.samples)
        dist.destroy_process_group()
    else:
        sys.exit("memory-bench.py: unknown variant '%s' (dmuon-B|C|D-fsdp|hsdp, fsdp2-adamw)"
                 % a.variant)
    if a.out:
        with open("%s.%d.json" % (a.out, rank), "w") as f:
            json.dump(out, f)
    else:
        print("MEMORY " + json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
