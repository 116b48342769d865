"""The PyTorch binding checked against torch.optim.Muon + torch.optim.AdamW.

Run by tests/mpi/66-torch.sh as `mpirun -np N python torch_check.py N DIR`.
Every rank trains a tiny decoder (tiny_decoder.py) through dmuon.torch for
each configuration of its world size; rank 0 also trains the same module in
one process with torch.optim.Muon (adjust_lr_fn="match_rms_adamw", Nesterov)
on the plan's Muon matrices and torch.optim.AdamW on the rest, the same
hyperparameters and LR schedule, and compares the per-step losses.  The
reference runs its Newton-Schulz in FP32 (torch's own casts to BF16): the
binding runs param_dtype f32 and ns direct-muon5, the same iteration.
Prints "ok - NAME" / "not ok - NAME: detail" on rank 0 and appends the
parity rows to DIR/parity.csv.
"""
import math
import os
import statistics
import sys
import warnings

import torch
import torch.optim._muon as torch_muon

import dmuon
import dmuon.torch
import tiny_decoder as td

warnings.filterwarnings("ignore")
torch.set_num_threads(1)
STEPS = 12
LR, ADAMW_LR, WD, ADAMW_WD = 0.03, 3e-3, 0.05, 0.01
TOL = 1e-5          # per-step relative loss difference allowed against the reference
EXACT = 1e-6        # activation checkpointing, accumulation, export: the same arithmetic
HYPER = dict(lr=LR, adamw_lr=ADAMW_LR, momentum=0.95, nesterov=True, weight_decay=WD,
             adamw_betas=(0.9, 0.95), adamw_eps=1e-8, adamw_weight_decay=ADAMW_WD,
             adjust_lr="match_rms_adamw")
BATCHES = td.batches(STEPS)
rank, size = dmuon.world()
N, DIR = int(sys.argv[1]), sys.argv[2]
assert N == size, "launched on %d ranks, expected %d" % (size, N)
passed = failed = 0


def report(ok, name, detail=""):
    global passed, failed
    if rank:
        return
    if ok:
        passed += 1
        print("ok - %s%s" % (name, (": " + detail) if detail else ""), flush=True)
    else:
        failed += 1
        print("not ok - %s: %s" % (name, detail), flush=True)


def sched(step):    # linear warm-up over 4 steps, then flat: exercises param_groups' lr
    return min(1.0, (step + 1) / 4)


def ns_fp32(grad, coeffs, steps, eps):
    """torch.optim._muon._zeropower_via_newtonschulz in FP32 instead of BF16."""
    a, b, c = coeffs
    x = grad.to(torch.float32, copy=True)
    tall = grad.size(0) > grad.size(1)
    if tall:
        x = x.T
    x = x / x.norm().clamp(min=eps)
    for _ in range(steps):
        g = x @ x.T
        x = torch.addmm(x, torch.addmm(g, g, g, beta=b, alpha=c), x, beta=a)
    return x.T if tall else x


TORCH_NS = torch_muon._zeropower_via_newtonschulz   # torch's own (BF16)


def reference(roles, momentum=0.95, steps=STEPS, ns=ns_fp32):
    torch_muon._zeropower_via_newtonschulz = ns   # looked up at each step by torch's Muon
    m = td.make()
    named = dict(m.named_parameters())
    muon = torch.optim.Muon([named[n] for n in named if roles[n] == "muon"], lr=LR,
                            weight_decay=WD, momentum=momentum, nesterov=True,
                            adjust_lr_fn="match_rms_adamw")
    adamw = torch.optim.AdamW([named[n] for n in named if roles[n] == "adamw"], lr=ADAMW_LR,
                              betas=(0.9, 0.95), eps=1e-8, weight_decay=ADAMW_WD)
    assert torch_muon._zeropower_via_newtonschulz is ns
    scheds = [torch.optim.lr_scheduler.LambdaLR(o, sched) for o in (muon, adamw)]
    losses = []
    for x, y in BATCHES[:steps]:
        loss = td.loss_fn(m, x, y)
        loss.backward()
        for o in (muon, adamw):
            o.step()
            o.zero_grad()
        for s in scheds:
            s.step()
        losses.append(loss.item())
    return losses


def local(x, micro=1, k=0):
    B = x.shape[0] // size
    part = x[rank * B:(rank + 1) * B]
    b = B // micro
    return part[k * b:(k + 1) * b]


def train(line="D", sharding="fsdp", rpn=None, zero=3, steps=STEPS, micro=1, ckpt=False,
          save_at=None, resume=None, start=0, grad_reduce="mean", export=None,
          param_dtype="f32", ns="direct-muon5", plan=None, comm=None, eval_every=0,
          eval_grad=False, eval_mid=False, owner_parts="auto"):
    """Losses (mean over ranks) of steps [start, steps); optional save after
    save_at steps, resume from a checkpoint, export at the end (returns the
    eval loss of the sharded module on batch 0 too).  eval_every: an
    evaluation forward after every eval_every-th step, under no_grad, or
    with eval_grad under model.eval() with gradients on and no backward;
    eval_mid: a no_grad forward between the micro-batches of every step."""
    m = td.make(ckpt=ckpt)
    p = plan or dmuon.torch.plan(m, ranks_per_node=rpn, sharding=sharding, zero=zero,
                                 comm=comm)
    rt = dmuon.torch.shard(m, p, line=line, param_dtype=param_dtype, ns=ns, deadline_s=60,
                           grad_reduce=grad_reduce, comm=comm, owner_parts=owner_parts)
    opt = rt.optimizer(**HYPER)
    sc = torch.optim.lr_scheduler.LambdaLR(opt, sched)
    if resume:
        rt.load(resume)
        for _ in range(start):
            sc.step()
    losses = []
    for s in range(start, steps):
        x, y = BATCHES[s]
        tot = 0.0
        for k in range(micro):
            loss = td.loss_fn(m, local(x, micro, k), local(y, micro, k)) / micro
            if grad_reduce == "sum":
                (loss / size).backward()
            else:
                loss.backward()
            tot += loss.item()
            if eval_mid and k + 1 < micro:
                with torch.no_grad():
                    td.loss_fn(m, local(x), local(y))
        opt.step()
        opt.zero_grad()
        sc.step()
        losses.append(dmuon.allreduce_sum([tot])[0] / size)
        if eval_every and s % eval_every == 0 and eval_grad:
            m.eval()
            td.loss_fn(m, local(x), local(y))   # no backward: discarded at the next forward
            m.train()
        elif eval_every and s % eval_every == 0:
            with torch.no_grad():
                td.loss_fn(m, local(x), local(y))
        if save_at is not None and s + 1 == save_at:
            rt.save(save_at_dir(save_at))
    out = {"losses": losses, "roles": {n: r for n, _, r, _ in p.params},
           "recomputations": rt.recomputations}
    if export:
        with torch.no_grad():
            out["eval"] = td.loss_fn(m, *BATCHES[0]).item()
        rt.export(export)
    rt.close()
    return out


def save_at_dir(k):
    return os.path.join(DIR, "ckpt-n%d-s%d" % (size, k))


def rel(a, b):
    return [abs(x - y) / abs(y) for x, y in zip(a, b)]


def parity(name, got, ref, ctrl, tol=TOL, cfg=""):
    d, dc = rel(got, ref), rel(ctrl, ref)
    mx, md, cmx = max(d), statistics.median(d), max(rel(got, ctrl))
    report(mx <= tol, "parity %s" % name, "max rel %.2e, median %.2e (tolerance %.0e)" %
           (mx, md, tol))
    if rank == 0:
        with open(os.path.join(DIR, "parity.csv"), "a") as f:
            f.write("%d,%s,%.3e,%.3e,%.3e\n" % (size, cfg or name, mx, md, cmx))
    return dc


CONFIGS = {
    1: [("D", "fsdp", None, 3), ("C", "fsdp", None, 3), ("B", "fsdp", None, 3),
        ("D", "fsdp", None, 2)],
    2: [("D", "fsdp", None, 3), ("C", "fsdp", None, 3), ("B", "fsdp", None, 3),
        ("D", "fsdp", None, 2), ("D", "hsdp", 1, 3), ("C", "hsdp", 1, 2)],
    4: [("D", "fsdp", None, 3), ("C", "fsdp", None, 3), ("B", "fsdp", None, 3),
        ("D", "hsdp", 2, 3), ("C", "hsdp", 2, 3), ("D", "hsdp", 2, 2), ("B", "hsdp", 2, 3)],
    8: [("D", "fsdp", None, 3), ("D", "hsdp", 4, 3), ("C", "hsdp", 2, 3), ("B", "fsdp", None, 3),
        ("D", "hsdp", 2, 2)],
}


def main():
    first = train(*CONFIGS[N][0])
    ref = reference(first["roles"]) if rank == 0 else None
    ctrl = reference(first["roles"], momentum=0.9) if rank == 0 else None
    runs = [first] + [train(*c) for c in CONFIGS[N][1:]]
    for c, r in zip(CONFIGS[N], runs):
        line, sh, rpn, zero = c
        cfg = "%s,%s%s,zero%d" % (line, sh, "(%dx%d)" % (size // rpn, rpn) if rpn else "", zero)
        if rank == 0:
            dc = parity(cfg, r["losses"], ref, ctrl, cfg=cfg)
            report(max(dc) > TOL, "control %s: mu = 0.9 reference exceeds the tolerance" % cfg,
                   "max rel %.2e" % max(dc))
    # the defaults (BF16 gathers, Polar Express gram-pe5: another polynomial,
    # so another trajectory): the loss falls as the reference's does
    d = train("D", param_dtype="bf16", ns="gram-pe5")["losses"]
    if rank == 0:
        report(all(math.isfinite(x) for x in d) and d[-1] < 0.6 * d[0] and ref[-1] < 0.6 * ref[0],
               "defaults (bf16, gram-pe5): loss falls by 40% like the reference's",
               "%.3f -> %.3f (reference %.3f -> %.3f; max rel to it %.2e)" % (
                   d[0], d[-1], ref[0], ref[-1], max(rel(d, ref))))
    plain = first["losses"]
    if N in (1, 2):
        ck = train("D", ckpt=True)
        mx = max(rel(ck["losses"], plain))
        want = STEPS * len(td.make().layers)
        report(mx <= EXACT and ck["recomputations"] == want,
               "activation checkpointing equals the plain run",
               "max rel %.2e, %d recomputed block forwards (expected %d)" % (
                   mx, ck["recomputations"], want))
        acc = train("D", micro=2)["losses"]
        mx = max(rel(acc, plain))
        report(mx <= EXACT * 10, "2 micro-batches equal one batch", "max rel %.2e" % mx)
        ex = os.path.join(DIR, "export-n%d.safetensors" % size)
        r = train("D", export=ex)
        if rank == 0:
            from safetensors.torch import load_file
            fresh = td.make(seed=5)
            fresh.load_state_dict(load_file(ex), strict=True)
            with torch.no_grad():
                got = td.loss_fn(fresh, *BATCHES[0]).item()
            report(abs(got - r["eval"]) <= EXACT * abs(got),
                   "export loads into the module and gives the sharded module's loss",
                   "%.7f vs %.7f" % (got, r["eval"]))
            try:
                import transformers  # noqa: F401
                print("note: transformers imports; LlamaForCausalLM check not written")
            except ImportError:
                print("note: transformers is not installed: the LlamaForCausalLM load of the "
                      "export did not run")
    if N == 2:
        ev = train("D", eval_every=3)["losses"]
        report(ev == plain, "no_grad forwards between steps leave the training run unchanged")
        ev = train("D", eval_every=2, eval_grad=True)["losses"]
        report(ev == plain, "model.eval() forwards with gradients on and no backward, between "
               "steps, leave the training run unchanged")
        two = train("B", zero=2, micro=2)["losses"]
        ev = train("B", zero=2, micro=2, eval_mid=True)["losses"]
        report(ev == two, "no_grad forwards between micro-batches leave the training run "
               "unchanged (line B, ZeRO-2)")
        s = train("D", grad_reduce="sum")["losses"]
        mx = max(rel(s, plain))
        report(mx <= EXACT, "grad_reduce=sum with loss/world equals mean", "max rel %.2e" % mx)
        k = STEPS // 2
        train("D", steps=k, save_at=k)
        resumed = train("D", resume=save_at_dir(k), start=k)["losses"]
        report(resumed == plain[k:], "resume at step %d is bit-identical to the unbroken run" % k,
               "first %r vs %r" % (resumed[0], plain[k]))
        p = dmuon.torch.plan(td.make(), param_dtype="f32")
        path = os.path.join(DIR, "plan-r%d.yaml" % rank)
        p.save(path)
        lp = train("D", plan=dmuon.load_plan(path))["losses"]
        report(lp == plain, "a saved and loaded plan trains as the in-memory one")
        try:
            from mpi4py import MPI
        except ImportError:
            MPI = None
            if rank == 0:
                print("note: mpi4py is not installed: the comm= path did not run")
        if MPI is not None:
            sub = MPI.COMM_WORLD.Dup()
            viac = train("D", comm=sub)["losses"]
            sub.Free()
            report(viac == plain, "an mpi4py communicator (comm=) trains as MPI_COMM_WORLD")
    if N == 4 and os.path.isdir(os.path.join(DIR, "ckpt-n2-s%d" % (STEPS // 2))):
        k = STEPS // 2
        resumed = train("D", resume=os.path.join(DIR, "ckpt-n2-s%d" % k), start=k)["losses"]
        if rank == 0:
            mx = max(rel(resumed, ref[k:]))
            report(mx <= TOL, "a 2-rank checkpoint resumed on 4 ranks stays at the reference",
                   "max rel %.2e" % mx)
    if N == 4:   # owner windows or per-layer owner parts: the same bytes move
        for parts in ("persistent", "per-layer"):
            got = train("D", owner_parts=parts)["losses"]
            if rank == 0:
                mx = max(rel(got, plain))
                report(mx <= EXACT, "owner parts %s equal the default run" % parts,
                       "max rel %.2e" % mx)
    if N in (1, 4):
        storage()
    if N in (1, 2):
        misuse()
        recovery()
    if N == 1:
        errors()
    if rank == 0:
        print("%d passed, %d failed" % (passed, failed))
    return failed


def storage():
    """Parameters hold values only inside their layer's forward and backward
    (ZeRO-3): inside block 1's forward, its parameters are full and block
    0's empty; after the step every parameter is empty."""
    m = td.make()
    rt = dmuon.torch.shard(m, dmuon.torch.plan(m), param_dtype="f32")
    opt = rt.optimizer(**HYPER)
    seen = {}

    def nbytes(block):
        return [p.untyped_storage().nbytes() for p in block.parameters()]

    def look(mod, args):
        seen["own"] = nbytes(m.layers[1]) == [p.numel() * 4 for p in m.layers[1].parameters()]
        seen["other"] = set(nbytes(m.layers[0])) == {0}

    h = m.layers[1].register_forward_pre_hook(look)
    x, y = BATCHES[0]
    td.loss_fn(m, local(x), local(y)).backward()
    opt.step()
    h.remove()
    after = {p.untyped_storage().nbytes() for p in m.parameters()}
    report(seen == {"own": True, "other": True} and after == {0},
           "ZeRO-3: a block's parameters hold values only inside its forward/backward",
           "inside block 1: %r; sizes after the step: %r" % (seen, sorted(after)))
    rt.close()


class OddBlock(torch.nn.Module):
    """A block whose gradients do not all arrive: an unused matrix (its
    layer's backward closes only at the end of backward) and a frozen
    scale (requires_grad=False)."""

    def __init__(self, d=16):
        super().__init__()
        self.up = torch.nn.Linear(d, 2 * d)
        self.down = torch.nn.Linear(2 * d, d, bias=False)
        self.scale = torch.nn.Parameter(1 + 0.1 * torch.randn(d), requires_grad=False)
        self.unused = torch.nn.Parameter(0.1 * torch.randn(d, d))

    def forward(self, x):
        return x + self.down(torch.nn.functional.silu(self.up(x * self.scale)))


class OddNet(torch.nn.Module):
    def __init__(self, v=32, d=16, layers=3, tied=False):
        super().__init__()
        self.embed = torch.nn.Embedding(v, d)
        self.layers = torch.nn.ModuleList(OddBlock(d) for _ in range(layers))
        self.norm = torch.nn.RMSNorm(d)
        self.lm_head = torch.nn.Linear(d, v, bias=False)
        if tied:
            self.lm_head.weight = self.embed.weight

    def forward(self, x):
        h = self.embed(x)
        for b in self.layers:
            h = b(h)
        return self.lm_head(self.norm(h))


def odd_full(s, v=32):
    g = torch.Generator().manual_seed(100 + s)
    x = torch.randint(0, v, (4 * size, 8), generator=g)
    return x, (3 * x + 1) % v


def odd_batch(s):
    return tuple(local(t) for t in odd_full(s))


def odd_loss(m, x, y):
    return torch.nn.functional.cross_entropy(m(x).flatten(0, 1), y.flatten())


def odd_train(evals=(), steps=5, tied=False, noroot=False):
    """evals: steps preceded by a no_grad forward (noroot: also one with
    gradients that is never backpropagated).  noroot: the embedding, norm
    and head frozen, so the plan has no "(root)" layer and the last block
    ends the forward."""
    torch.manual_seed(0)
    m = OddNet(tied=tied)
    for mod in ((m.embed, m.norm, m.lm_head) if noroot else ()):
        for p in mod.parameters():
            p.requires_grad_(False)
    rt = dmuon.torch.shard(m, dmuon.torch.plan(m), param_dtype="f32", ns="direct-muon5")
    opt = rt.optimizer(**HYPER)
    losses = []
    for s in range(steps):
        x, y = odd_batch(s)
        if s in evals:
            with torch.no_grad():
                odd_loss(m, x, y)
            if noroot:
                odd_loss(m, x, y)
        loss = odd_loss(m, x, y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(dmuon.allreduce_sum([loss.item()])[0] / size)
    return m, rt, losses


class Boom(Exception):
    pass


def boom(*args):
    raise Boom("raised on purpose")


def odd_micro(m, s, k):
    """Half k (0 or 1) of this rank's batch of step s, its loss halved."""
    x, y = odd_batch(s)
    b = x.shape[0] // 2
    return odd_loss(m, x[k * b:(k + 1) * b], y[k * b:(k + 1) * b]) / 2


def failing_micro(m, mode, s):
    """A micro-batch that raises part way, caught: inside block 1's forward
    ("fwd_inner"), from a forward hook on block 1 after the binding's
    ("fwd"), or from a full-backward hook on block 0 during backward, when
    the head and blocks 2 and 1 have their gradients ("bwd").  True when it
    raised."""
    hooks = []
    if mode == "fwd_inner":
        up = m.layers[1].up

        def bad(x):
            del up.forward       # once: the instance attribute shadows Linear.forward
            boom()
        up.forward = bad
    elif mode == "fwd":
        hooks.append(m.layers[1].register_forward_hook(boom))
    else:
        hooks.append(m.layers[0].register_full_backward_hook(boom))
    try:
        odd_micro(m, s, 0).backward()
        return False
    except Boom:
        return True
    finally:
        for h in hooks:
            h.remove()


def recover_train(events, steps=4):
    """OddNet trained over 2 micro-batches a step ("A", "C": the halves of
    the step's batch); events: step -> the step's sequence instead, where
    a failure mode (failing_micro) runs a micro-batch that raises,
    "discard" calls rt.discard() and "step!" a step() that must raise.
    Gives the losses of each step's last micro-batch (mean over ranks), the
    failures that raised and the messages of the refused steps."""
    torch.manual_seed(0)
    m = OddNet()
    rt = dmuon.torch.shard(m, dmuon.torch.plan(m), param_dtype="f32", ns="direct-muon5")
    opt = rt.optimizer(**HYPER)
    losses, raised, refused = [], 0, []
    for s in range(steps):
        last = 0.0
        for e in events.get(s, ("A", "C")):
            if e in ("A", "C"):
                loss = odd_micro(m, s, "AC".index(e))
                loss.backward()
                last = loss.item()
            elif e == "discard":
                rt.discard()
            elif e == "step!":
                try:
                    opt.step()
                    refused.append("")
                except dmuon.DmuonError as err:
                    refused.append(err.message)
            else:
                raised += failing_micro(m, e, s)
        opt.step()
        opt.zero_grad()
        losses.append(dmuon.allreduce_sum([last])[0] / size)
    rt.close()
    return losses, raised, refused


def recovery():
    """Every rank catches an exception raised inside a forward or backward
    and trains on: the next forward (or rt.discard()) discards the
    unfinished micro-batch.  A forward-only failure drops nothing; one
    whose backward had begun drops the gradients accumulated since the
    last step (dmuon/runtime.h), so the step is its later micro-batches'."""
    plain, _, _ = recover_train({})
    for mode in ("fwd_inner", "fwd", "bwd"):
        got, raised, _ = recover_train({0: (mode, "A", "C"), 2: (mode, "A", "C")})
        report(raised == 2 and got == plain, "%s: a micro-batch that raised before the first "
               "step and before step 2 leaves training unchanged" % mode,
               "%d raised; losses %r vs %r" % (raised, got[-2:], plain[-2:]))
        got, raised, _ = recover_train({2: ("A", mode, "C")})
        want, _, _ = recover_train({2: ("C",) if mode == "bwd" else ("A", "C")})
        report(raised == 1 and got == want, "%s: a failure between two micro-batches of a step "
               "%s" % (mode, "drops the earlier one's gradients" if mode == "bwd" else
                       "keeps the earlier one"), "losses %r vs %r" % (got[-2:], want[-2:]))
    got, raised, _ = recover_train({1: ("A", "fwd", "discard", "C")})
    report(raised == 1 and got == plain, "rt.discard() after a forward that raised: training "
           "unchanged", "losses %r vs %r" % (got[-2:], plain[-2:]))
    want, _, _ = recover_train({2: ("C",)})
    got, raised, refused = recover_train({2: ("A", "bwd", "discard", "step!", "C")})
    report(raised == 1 and got == want and len(refused) == 1 and "dropped" in refused[0],
           "rt.discard() after a backward that raised: step() refused until a new "
           "micro-batch, then the step is that micro-batch's", "refused %r; losses %r vs %r" % (
               refused, got[-2:], want[-2:]))


def misuse():
    """What a user does with the module around the runtime."""
    _, rt, plain = odd_train(steps=4, noroot=True)
    root = rt._root
    rt.close()
    _, rt, ev = odd_train(evals=(0, 2), steps=4, noroot=True)
    rt.close()
    report(root is None and ev == plain, "a model without a root layer: evaluation forwards "
           "(no_grad, and with gradients but no backward) leave training unchanged",
           "losses %r vs %r" % (ev[-2:], plain[-2:]))
    _, rt, plain = odd_train()
    rt.close()
    _, rt, first = odd_train(evals=(0,))
    rt.close()
    report(first == plain, "a no_grad forward before the first step leaves training unchanged "
           "(a block with an unused parameter)", "losses %r vs %r" % (first[-2:], plain[-2:]))
    for tied in (False, True):
        m, rt, _ = odd_train(steps=2, tied=tied)
        x, y = odd_batch(0)
        with torch.no_grad():
            want = dmuon.allreduce_sum([odd_loss(m, x, y).item()])[0]
        ex = os.path.join(DIR, "odd-n%d-t%d.safetensors" % (size, tied))
        rt.export(ex)
        rt.close()
        if rank == 0:
            from safetensors.torch import load_file
            torch.manual_seed(7)
            fresh = OddNet(tied=tied)
            try:
                fresh.load_state_dict(load_file(ex), strict=True)
                fx, fy = odd_full(0)
                with torch.no_grad():
                    got = sum(odd_loss(fresh, fx[4 * r:4 * r + 4], fy[4 * r:4 * r + 4]).item()
                              for r in range(size))
                report(abs(got - want) <= EXACT * abs(want), "export with frozen parameters%s "
                       "loads strictly and gives the sharded module's loss" % (
                           " and a tied head" if tied else ""), "%.7f vs %.7f" % (got, want))
            except RuntimeError as e:
                report(False, "export with frozen parameters loads strictly", str(e)[:200])
    if size > 1:        # rank 1 runs two micro-batches, the others one
        m, rt, _ = odd_train(steps=1)
        opt = rt._optimizer
        msg = ""
        try:
            for k in range(2 if rank == 1 else 1):
                x, y = odd_batch(k)
                odd_loss(m, x, y).backward()
            opt.step()
        except dmuon.DmuonError as e:
            msg = e.message
        raised = dmuon.allreduce_sum([1.0 if "same number of micro-batches" in msg else 0.0])[0]
        report(raised == size, "ranks running different numbers of micro-batches all raise "
               "DmuonError", "%d of %d: %s" % (raised, size, msg[:90]))
        rt.close()
    if size > 1:        # rank 1 sums its gradients, the others average them
        torch.manual_seed(0)
        m = OddNet()
        rt = dmuon.torch.shard(m, dmuon.torch.plan(m), param_dtype="f32", ns="direct-muon5",
                               grad_reduce="sum" if rank == 1 else "mean")
        opt = rt.optimizer(**HYPER)
        msg = ""
        try:
            x, y = odd_batch(0)
            odd_loss(m, x, y).backward()
            opt.step()
        except dmuon.DmuonError as e:
            msg = e.message if e.name == "emismatch" else ""
        rt.close()
        raised = dmuon.allreduce_sum([1.0 if "grad_reduce differs" in msg else 0.0])[0]
        report(raised == size, "ranks given different grad_reduce all raise DmuonError "
               "emismatch before the first step", "%d of %d: %s" % (raised, size, msg[:90]))
    # a forward whose backward never came is discarded at the next forward;
    # backpropagating its output later is refused, the newer one trains
    m, rt, _ = odd_train(steps=1)
    x, y = odd_batch(1)
    stale = odd_loss(m, x, y)
    fresh = odd_loss(m, x, y)
    msg = ""
    try:
        stale.backward()
    except dmuon.DmuonError as e:
        msg = e.message
    report("earlier forward" in msg, "backward of a discarded forward's output raises "
           "DmuonError", msg[:90])
    try:
        fresh.backward()
        rt._optimizer.step()
        msg = ""
    except dmuon.DmuonError as e:
        msg = e.message
    report(msg == "" and rt.steps == 2, "the newer forward's backward and step then work",
           msg[:90])
    x, y = odd_batch(2)
    loss = odd_loss(m, x, y)
    loss.backward(retain_graph=True)
    try:
        loss.backward()
        msg = ""
    except dmuon.DmuonError as e:
        msg = e.message
    report("second backward() of the same output" in msg and "step()" not in msg,
           "a second backward of the same loss raises DmuonError saying so", msg[:100])
    rt._optimizer.step()
    report(rt.steps == 3, "the step after it uses the first backward", "steps %d" % rt.steps)
    rt.close()
    _, rt, _ = odd_train(steps=1)
    m = rt.model
    w = m.layers[0].up.weight
    for what, use, want in (("w.sum()", lambda: w.sum(), "layers.0.up.weight"),
                            ("repr(w)", lambda: repr(w), "layers.0.up.weight"),
                            ("a norm of the parameters", lambda: sum(
                                p.norm() for p in m.parameters() if p.requires_grad), "sharded"),
                            ("module.to(float64)", lambda: m.to(torch.float64), "sharded"),
                            ("torch.save(state_dict())", lambda: torch.save(
                                m.state_dict(), os.path.join(DIR, "sd-r%d.pt" % rank)),
                             "rt.export")):
        try:
            use()
            report(False, "%s of a sharded parameter raises DmuonError" % what, "no exception")
        except dmuon.DmuonError as e:
            report(want in e.message, "%s of a sharded parameter raises DmuonError" % what,
                   e.message[:100])
    report(not os.path.exists(os.path.join(DIR, "sd-r%d.pt" % rank)),
           "torch.save(state_dict()) wrote no file")
    rt.close()


def errors():
    small = dmuon.torch.plan(td.make(layers=2))
    try:
        dmuon.torch.shard(td.make(), small)
        report(False, "plan/model mismatch is an error", "no exception")
    except dmuon.DmuonError as e:
        report(e.name == "emismatch" and "layers.2.mlp.up_proj.weight" in e.message,
               "plan/model mismatch names the parameters", e.message[:120])
    try:
        dmuon.torch.shard(td.make(), dmuon.torch.plan(td.make()), line="E").optimizer()
        report(False, "line E is an error", "no exception")
    except dmuon.DmuonError as e:
        report(e.name == "einval" and "line 'E'" in e.message and e.code == 1,
               "line E: DmuonError einval naming the line", e.message)
    for kw, want in ((dict(line="E"), "line 'E'"), (dict(ns="foo"), "NS variant 'foo'"),
                     (dict(param_dtype="float16"), "param_dtype 'float16'"),
                     (dict(deadline_s=0), "deadline_s 0"),
                     (dict(owner_parts="windows"), "owner_parts' = 'windows'")):
        try:
            dmuon.torch.shard(td.make(), dmuon.torch.plan(td.make()), **kw)
            report(False, "shard(%r) raises at shard()" % kw, "no exception")
        except (ValueError, dmuon.DmuonError) as e:
            report(want in str(e), "shard(%r) raises at shard()" % kw, str(e))
    for bad in (-1, float("nan"), float("inf"), "5", True, 1e12):
        try:
            dmuon.torch.shard(td.make(), dmuon.torch.plan(td.make()), deadline_s=bad)
            report(False, "shard(deadline_s=%r) raises ValueError" % (bad,), "no exception")
        except ValueError as e:
            report(str(e).startswith("deadline_s %r: expected a finite number of seconds" %
                                     (bad,)), "shard(deadline_s=%r) raises ValueError" % (bad,),
                   str(e))
        except Exception as e:
            report(False, "shard(deadline_s=%r) raises ValueError" % (bad,),
                   "%s: %s" % (type(e).__name__, e))
    for kw in (dict(lr=-1.0), dict(clip_norm=-0.5), dict(adamw_lr=float("nan"))):
        rt = dmuon.torch.shard(td.make(), dmuon.torch.plan(td.make()))
        try:
            rt.optimizer(**kw)
            report(False, "optimizer(%r) raises ValueError" % kw, "no exception")
        except ValueError as e:
            report(list(kw)[0] in str(e), "optimizer(%r) raises ValueError" % kw, str(e))
        rt.close()
    try:
        dmuon.torch.plan(td.make(), ranks_per_node=0)
        report(False, "plan(ranks_per_node=0) raises ValueError", "no exception")
    except ValueError as e:
        report("ranks_per_node 0" in str(e), "plan(ranks_per_node=0) raises ValueError", str(e))
    try:
        dmuon.load_plan(os.path.join(DIR, "missing.yaml"))
        report(False, "a missing plan file is an error", "no exception")
    except dmuon.DmuonError as e:
        report("missing.yaml" in e.message, "a missing plan file names the file", e.message)


if __name__ == "__main__":
    sys.exit(1 if main() else 0)
