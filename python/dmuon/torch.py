"""dmuon for PyTorch: libdmuon takes over the sharding, communication and
optimizer of every trainable parameter of an nn.Module.

    import dmuon.torch
    plan = dmuon.torch.plan(model)                 # or dmuon.load_plan(path)
    rt = dmuon.torch.shard(model, plan, line="D")
    opt = rt.optimizer(lr=0.02, adamw_lr=1e-3)
    for batch in data:
        loss = loss_fn(model(batch.x), batch.y)    # each rank: mean over its batch
        loss.backward()
        opt.step(); opt.zero_grad()

How it works (CPU tensors; CUDA modules are refused, see docs/python.md):
  * the plan's layers are modules: "(root)" is the module itself (it holds
    the embeddings, final norm and head and brackets the whole forward and
    backward), "layers.N" the submodule of that name;
  * every parameter keeps its Parameter and storage object, but its storage
    is resized to zero bytes except inside its layer's forward and backward
    (FSDP2's trick: tensors saved for backward stay valid).  Forward pre
    hook: dmuon_rt_pre_forward + copy of the gathered weights; forward post
    hook: dmuon_rt_post_forward + free.  Backward: a full backward pre hook
    per block (a tensor hook on the root's outputs for the root) calls
    dmuon_rt_pre_backward and refills; each parameter's
    post-accumulate-grad hook adds its .grad (scaled 1/world for "mean")
    into the runtime's gradient buffer and drops it; when a layer's last
    parameter is in, dmuon_rt_post_backward; an autograd end-of-backward
    callback closes what is left and the root;
  * torch.utils.checkpoint (use_reentrant=False): a forward of a block that
    runs inside backward is a recomputation (dmuon_rt_recompute_begin/end);
  * several backward passes before step() accumulate (the runtime adds each
    micro-batch's reduced gradients); a forward under torch.no_grad (or one
    whose output needs no gradient, or whose backward never comes before
    the next forward or step(): model.eval() without no_grad) is an
    evaluation pass, ended by dmuon_rt_discard: no backward, no
    communication beyond its gathers, not a micro-batch;
  * a forward or backward that raised part way is discarded the same way
    at the next root forward or step() (or rt.discard()); under more than
    one rank an uncaught exception aborts the MPI job (sys.excepthook).
"""
import ctypes
import math
import numbers
import os
import sys

import torch

from . import DmuonError, Plan, _live, _mpi, comm_handle, world
from ._lib import check, cstr, lib

__all__ = ["plan", "shard", "Runtime", "Optimizer"]

_DEADLINE_MAX_S = 2147483.647     # deadline_ms is a C int

# Why a backward of an output is refused, by what became of its forward.
_GONE = {
    "step": "forward was discarded as an evaluation pass (step() came before its backward)",
    "eval": "forward was discarded as an evaluation pass",
    "backward": "forward has had its backward already: a second backward() of the same "
                "output (retain_graph=True) is refused, each forward feeds one backward; run "
                "the forward again",
    "discarded": "micro-batch was discarded (rt.discard(), or at the next forward or step() "
                 "after a forward or backward that raised part way)",
}

_DTYPES = {torch.float32: "f32", torch.bfloat16: "bf16", torch.float16: "f16",
           torch.float64: "f64"}


def _trainable(model):
    return [(n, p) for n, p in model.named_parameters() if p.requires_grad]


def _inventory(named):
    names, ndims, dims, dtypes = [], [], [], []
    for n, p in named:
        if p.dim() == 0:
            raise DmuonError(1, "einval", "parameter '%s': a 0-d tensor (expected >= 1 "
                             "dimension)" % n)
        if p.dtype not in _DTYPES:
            raise DmuonError(1, "einval", "parameter '%s': dtype %s (expected one of %s)"
                             % (n, p.dtype, ", ".join(str(d) for d in _DTYPES)))
        names.append(cstr(n))
        ndims.append(p.dim())
        dims.extend(int(s) for s in p.shape)
        dtypes.append(cstr(_DTYPES[p.dtype]))
    arr = lambda t, xs: (t * len(xs))(*xs)
    return len(names), arr(ctypes.c_char_p, names), arr(ctypes.c_int, ndims), \
        arr(ctypes.c_int64, dims), arr(ctypes.c_char_p, dtypes)


class _PlanOpts:
    def __init__(self, opts):
        L = lib()
        self.p = ctypes.c_void_p()
        check(L.dmuon_capi_plan_opts_new(ctypes.byref(self.p)))
        try:
            for k, v in opts.items():
                for one in (v if isinstance(v, (list, tuple)) else [v]):
                    if isinstance(one, bool):
                        one = int(one)
                    check(L.dmuon_capi_plan_opts_set(self.p, cstr(k), cstr(str(one))))
        except Exception:
            self.close()
            raise

    def close(self):
        if self.p.value:
            lib().dmuon_capi_plan_opts_free(self.p)
            self.p = ctypes.c_void_p()


def _shared(model):
    """Names of the parameters registered under more than one name (a tied
    embedding and head), as lists of the names of each."""
    seen = {}
    for n, p in model.named_parameters(remove_duplicate=False):
        seen.setdefault(id(p), []).append(n)
    return [v for v in seen.values() if len(v) > 1]


def plan(model, ranks_per_node=None, sharding="fsdp", zero=3, cost="flops", comm=None,
         root="auto", **plan_opts):
    """Plans model's trainable named_parameters() for the running world
    (comm: None = MPI_COMM_WORLD, or an mpi4py communicator).

    ranks_per_node: ranks of one node (K; None: $DMUON_RANKS_PER_NODE, else
    the ranks sharing this host); nodes = world size / K.  sharding "fsdp" or
    "hsdp", zero 2 or 3, cost "flops" (analytic), "elements", "m2n" or "db"
    (measured: give cost_db= and device=).  plan_opts: the other planning
    options of dmuon/capi.h (param_dtype="bf16"|"f32", epsilon,
    small_unit_bytes, strategy, byte_cap, layer_spread, column_balance,
    muon=[patterns], adamw=[patterns]).  Roles follow dmuon/model.h: 2-D
    tensors are Muon matrices except names with "embed" or "lm_head".
    root: the layers of the parameters outside the numbered blocks
    (dmuon/model.h): "split" gives those registered before the blocks the
    layer "(embed)" and those after them "(head)", each gathered only for
    its own modules' forward and backward (registration order must be
    forward order, as in Hugging Face and torchtitan models); "one" puts
    them in one "(root)" layer, the module itself, gathered for the whole
    forward and backward; "auto" (default) splits unless a parameter is
    shared between modules (a tied head).  Collective (every rank calls it
    with the same module)."""
    if ranks_per_node is not None and not (isinstance(ranks_per_node, int) and
                                           ranks_per_node > 0):
        raise ValueError("ranks_per_node %r: expected an integer > 0 (or None)"
                         % (ranks_per_node,))
    h = comm_handle(comm)
    _, size = world(comm)
    nodes, per = ctypes.c_int(), ctypes.c_int()
    check(lib().dmuon_capi_comm_nodes(h, int(ranks_per_node or 0), ctypes.byref(nodes),
                                      ctypes.byref(per)))
    if root not in ("auto", "one", "split"):
        raise ValueError("root %r: expected 'auto', 'one' or 'split'" % (root,))
    shared = _shared(model)
    if root == "split" and shared:
        raise DmuonError(1, "einval", "root='split': parameter %s is shared by %s, used at both "
                         "ends of the forward: plan with root='one' (or 'auto')" % (
                             shared[0][0], " and ".join(shared[0])))
    opts = dict(plan_opts)
    opts.update(nodes=nodes.value, gpus_per_node=per.value, sharding=sharding, zero=zero,
                cost=cost, root="one" if root == "one" or shared else "split")
    return _plan_named(_trainable(model), opts, type(model).__name__)


def _plan_named(named, opts, source):
    n, names, ndims, dims, dtypes = _inventory(named)
    po = _PlanOpts(opts)
    try:
        p = ctypes.c_void_p()
        check(lib().dmuon_capi_plan_tensors(cstr(source), n, names, ndims, dims, dtypes, po.p,
                                            ctypes.byref(p), None))
    finally:
        po.close()
    return Plan(p.value, source, rebuild=lambda **kw: _plan_named(named, {**opts, **kw}, source))


def shard(model, plan, line="D", param_dtype=None, ns="gram-pe5", deadline_s=None, zero=None,
          grad_reduce="mean", prefetch=True, comm=None, owner_parts="auto"):
    """Takes over every trainable parameter of model under plan; returns the
    Runtime.  line "D" (dmuon's collectives), "C" (per-owner MPI), "B"
    (gather-then-replicate Muon), "A" (AdamW everywhere).  param_dtype: the
    dtype parameters are gathered in ("bf16", "f32"); None keeps the plan's
    (bf16 unless planned otherwise); a plan made by dmuon.torch.plan is
    re-planned for another, a loaded one must match.  ns: the Newton–Schulz
    variant ("gram-pe5", "direct-muon5", ...).  deadline_s: per
    communication call (None: $DMUON_DEADLINE_MS or 10 minutes).  zero: 2 or 3
    (None: the plan's).  grad_reduce "mean" (like DDP: each rank's loss is
    the mean over its local batch) or "sum".  owner_parts: where the owners
    keep a layer's gather source and reduce destination, "persistent" (owner
    windows), "per-layer" (working memory while that layer's gather or
    reduction runs) or "auto" (the smaller, as dmuon-plan reports).  The
    parameters are freed when the runtime opens: at rt.optimizer(), or at
    the first forward."""
    return Runtime(model, plan, line, param_dtype, ns, deadline_s, zero, grad_reduce, prefetch,
                   comm, owner_parts)


class _Layer:
    __slots__ = ("index", "name", "module", "parts", "seen", "params", "need", "got", "phase",
                 "recompute")

    def __init__(self, index, name, module, parts=None):
        self.index, self.name, self.module = index, name, module
        self.parts = parts    # "(embed)", "(head)": the modules owning its parameters
        self.seen = None      # parts whose forward ran in this forward (None: closed)
        self.params = []      # (runtime index, Parameter)
        self.need = 0         # parameters whose gradient ends the layer's backward
        self.got = 0
        self.phase = 0        # 0 idle, 1 backward open, 2 backward done
        self.recompute = False


class Runtime:
    """libdmuon's runtime over a module (see dmuon.torch.shard)."""

    def __init__(self, model, plan, line, param_dtype, ns, deadline_s, zero, grad_reduce,
                 prefetch, comm, owner_parts="auto"):
        if not isinstance(plan, Plan):
            raise DmuonError(1, "einval", "plan: expected a dmuon.Plan (dmuon.torch.plan or "
                             "dmuon.load_plan), got %r" % type(plan).__name__)
        if deadline_s is not None and not (
                isinstance(deadline_s, numbers.Real) and not isinstance(deadline_s, bool) and
                math.isfinite(deadline_s) and 0 < deadline_s <= _DEADLINE_MAX_S):
            raise ValueError("deadline_s %r: expected a finite number of seconds in (0, %.3f] "
                             "(or None)" % (deadline_s, _DEADLINE_MAX_S))
        if param_dtype is not None and param_dtype not in ("bf16", "f32"):
            raise ValueError("param_dtype %r: expected 'bf16', 'f32' or None (the plan's)"
                             % (param_dtype,))
        if grad_reduce not in ("mean", "sum"):
            raise DmuonError(1, "einval", "grad_reduce '%s': expected mean or sum" % grad_reduce)
        if param_dtype is not None and param_dtype != plan.param_dtype:
            if plan._rebuild is None:
                raise DmuonError(7, "emismatch", "param_dtype '%s': the plan %s gathers %s "
                                 "(plan again with --param-dtype %s)" % (
                                     param_dtype, plan.source, plan.param_dtype, param_dtype))
            plan = plan._rebuild(param_dtype=param_dtype)
        self.model, self.plan = model, plan
        self.rank, self.world = world(comm)
        self._comm = comm_handle(comm)
        self._scale = 1.0 / self.world if grad_reduce == "mean" else 1.0
        self._grad_reduce = grad_reduce
        self._opts = {"line": line, "ns": ns, "prefetch": int(bool(prefetch)),
                      "ranks_per_node": plan.gpus_per_node, "owner_parts": owner_parts}
        if deadline_s is not None:
            self._opts["deadline_ms"] = max(1, int(round(deadline_s * 1000)))
        if zero is not None:
            self._opts["zero"] = zero
        ro = ctypes.c_void_p()      # line, ns, zero, deadline: refused here, not at opening
        check(lib().dmuon_capi_rt_opts_new(ctypes.byref(ro)))
        try:
            for k, v in self._opts.items():
                check(lib().dmuon_capi_rt_opts_set(ro, cstr(k), cstr(str(v))))
        finally:
            lib().dmuon_capi_rt_opts_free(ro)
        self._rt = ctypes.c_void_p()
        self._optimizer = None
        self._hooks = []
        self._bwd = False        # a micro-batch's backward began and has not ended
        self._bwd_task = -1      # autograd's graph task running that backward
        self.recomputations = 0  # layer forwards run inside backward (checkpointing)
        self._fwd_grad = False
        self._fwd_open = False   # a forward began and has not ended
        self._awaiting = False   # a forward ended whose backward has not begun
        self._gen = 0            # forwards so far (outputs of an older one are stale)
        self._fate = "open"      # what became of forward _gen (a key of _GONE, or not)
        self._dropped = False    # a discard since the last step dropped its gradients
        named = dict(_trainable(model))
        planned = {n: (layer, numel) for n, layer, _, numel in plan.params}
        missing = [n for n in planned if n not in named]
        extra = [n for n in named if n not in planned]
        wrong = [n for n in planned if n in named and named[n].numel() != planned[n][1]]
        # a single 2-D Muon matrix must come as the plan's m x n (the runtime
        # would refuse its transpose at opening, after the module is freed)
        for n in planned:
            c, mm, nn = plan._matrix.get(n, (0, 0, 0))
            if n in named and n not in wrong and c == 1 and mm > 0 and \
                    named[n].dim() == 2 and tuple(named[n].shape) != (mm, nn):
                wrong.append(n)
        if missing or extra or wrong:
            parts = []
            for what, ns_ in (("in the plan, not trainable in the module", missing),
                              ("trainable in the module, not in the plan", extra),
                              ("of another size than the plan's", wrong)):
                if ns_:
                    parts.append("%d %s: %s%s" % (len(ns_), what, ", ".join(ns_[:8]),
                                                  " ..." if len(ns_) > 8 else ""))
            raise DmuonError(7, "emismatch", "plan %s and module %s differ: %s" % (
                plan.source, type(model).__name__, "; ".join(parts)))
        for n, p in named.items():
            if p.device.type != "cpu":
                raise DmuonError(13, "eunsupported", "parameter '%s' is on %s: this binding "
                                 "takes CPU modules only (CUDA modules are untested and "
                                 "refused)" % (n, p.device))
            if not p.is_contiguous() or p.storage_offset() != 0 or \
                    p.untyped_storage().nbytes() != p.numel() * p.element_size():
                raise DmuonError(1, "einval", "parameter '%s' does not own its whole storage "
                                 "(a view or shared tensor): dmuon needs one storage per "
                                 "parameter" % n)
        self._layers = []
        owners = {}   # plan layer -> the modules owning its parameters, in order
        for n, layer, _, _ in plan.params:
            mname = n.rpartition(".")[0]
            mods = owners.setdefault(layer, [])
            mod = model.get_submodule(mname) if mname else model
            if all(m is not mod for m in mods):
                mods.append(mod)
        for i, lname in enumerate(plan.layers):
            parts = None
            if lname == "(root)":
                mod = model
            elif lname in ("(embed)", "(head)"):
                mod, parts = None, owners.get(i, [])
                if any(m is model for m in parts):
                    raise DmuonError(1, "einval", "plan layer '%s': parameter %s is the root "
                                     "module's own, which runs around every layer: plan with "
                                     "root='one'" % (lname, next(
                                         n for n, L, _, _ in plan.params
                                         if L == i and "." not in n)))
            else:
                try:
                    mod = model.get_submodule(lname)
                except AttributeError:
                    raise DmuonError(5, "enotfound", "plan layer '%s': the module has no "
                                     "submodule of that name" % lname) from None
            self._layers.append(_Layer(i, lname, mod, parts))
        self._root = next((L for L in self._layers if L.name == "(root)"), None)
        self._names = []
        for n, layer, _, _ in plan.params:
            self._layers[layer].params.append((len(self._names), named[n]))
            self._names.append(n)
        for L in self._layers:
            L.need = len(L.params)
        self._install()

    # ------------------------------------------------------------ opening --
    def _open(self, optim):
        if self._rt.value:
            return
        L = lib()
        ro = ctypes.c_void_p()
        check(L.dmuon_capi_rt_opts_new(ctypes.byref(ro)))
        try:
            for k, v in {**self._opts, **optim}.items():
                check(L.dmuon_capi_rt_opts_set(ro, cstr(k), cstr(str(v))))
            check(L.dmuon_capi_rt_create(self.plan._ptr, self._comm, ro, ctypes.byref(self._rt)))
        finally:
            L.dmuon_capi_rt_opts_free(ro)
        # each parameter's storage is given back as soon as the runtime has
        # its pieces (the module and this rank's share never both whole):
        # every check of the module against the plan ran at shard()
        handed = 0
        try:
            for layer in self._layers:
                for k, (_, p) in enumerate(layer.params):
                    name = self._names[layer.params[k][0]]
                    init = p.detach().to(torch.float32).contiguous()
                    shape = (ctypes.c_int64 * p.dim())(*p.shape)
                    check(L.dmuon_rt_register(self._rt, cstr(name), p.dim(), shape,
                                              ctypes.c_void_p(init.data_ptr())))
                    del init
                    p.untyped_storage().resize_(0)
                    handed += 1
            check(L.dmuon_rt_open(self._rt))
            self._idx = [L.dmuon_rt_param_index(self._rt, cstr(n)) for n in self._names]
        except DmuonError as e:
            L.dmuon_rt_free(self._rt)
            self._rt = ctypes.c_void_p()
            if handed:
                raise DmuonError(e.code, e.name, e.message + (
                    " (opening failed after %d parameters were handed over: the module's "
                    "parameters are empty; build it again)" % handed)) from e
            raise
        except Exception:
            L.dmuon_rt_free(self._rt)
            self._rt = ctypes.c_void_p()
            raise
        for layer in self._layers:
            for i, p in layer.params:
                p._dmuon_name = self._names[i]
                p.__class__ = ShardedParameter
        _live.add(self)
        if world()[1] > 1:
            _abort_on_exception()

    def _ensure_open(self):
        if not self._rt.value:
            self._open(self._optim_opts(self._default_kw()))

    # ---------------------------------------------------------- parameters --
    def _fill(self, layer):
        L = lib()
        for i, p in layer.params:
            ptr = L.dmuon_rt_weights(self._rt, self._idx[i])
            if not ptr:
                raise DmuonError(1, "einval", "layer '%s': parameter '%s' is not gathered"
                                 % (layer.name, self._names[i]))
            st = p.untyped_storage()
            nbytes = p.numel() * p.element_size()
            if st.nbytes() != nbytes:
                st.resize_(nbytes)
            if p.dtype == torch.float32:
                ctypes.memmove(p.data_ptr(), ptr, nbytes)
            else:
                with torch.no_grad():
                    p.data.view(-1).copy_(_f32(ptr, p.numel()))

    @staticmethod
    def _free(layer):
        for _, p in layer.params:
            p.untyped_storage().resize_(0)

    # --------------------------------------------------------------- hooks --
    def _state_dict_refused(self, *args):
        if self._rt.value:
            raise DmuonError(1, "einval", "state_dict() of a module sharded by dmuon: its "
                             "parameters hold no values outside their layer's forward and "
                             "backward; rt.export(path) writes the full weights (safetensors, "
                             "the module's names), rt.save(dir) the optimizer checkpoint")

    def _install(self):
        self._hooks.append(self.model.register_state_dict_pre_hook(self._state_dict_refused))
        for layer in self._layers:
            if layer.parts is not None:
                # "(embed)", "(head)": the bracket opens at the first of its
                # modules' forwards and closes after the last one
                for m in layer.parts:
                    self._hooks.append(m.register_forward_pre_hook(
                        lambda mod, args, layer=layer: self._pre_forward_part(layer)))
                    self._hooks.append(m.register_forward_hook(
                        lambda mod, args, out, layer=layer: self._post_forward_part(
                            layer, mod, out)))
                    # the layer that ends the forward ("(head)") begins the
                    # backward from the tensor hook on its output (_post_forward:
                    # a module's backward pre hook would run before it)
                    if layer is not self._layers[-1]:
                        self._hooks.append(m.register_full_backward_pre_hook(
                            lambda mod, gout, layer=layer: self._pre_backward(layer)))
            else:
                m = layer.module
                self._hooks.append(m.register_forward_pre_hook(
                    lambda mod, args, layer=layer: self._pre_forward(layer)))
                self._hooks.append(m.register_forward_hook(
                    lambda mod, args, out, layer=layer: self._post_forward(layer, out)))
                if layer is not self._root:
                    self._hooks.append(m.register_full_backward_pre_hook(
                        lambda mod, gout, layer=layer: self._pre_backward(layer)))
            for i, p in layer.params:
                self._hooks.append(p.register_post_accumulate_grad_hook(
                    lambda p, layer=layer, i=i: self._grad_ready(layer, i, p)))

    def _call(self, fn, *args):
        check(getattr(lib(), fn)(self._rt, *args))

    def _in_backward(self):
        """The backward begun by _root_backward is running (a forward now is
        a recomputation); False once it ended, or raised part way."""
        return self._bwd and torch._C._current_graph_task_id() == self._bwd_task

    def _pre_forward(self, layer):
        self._ensure_open()
        if self._in_backward():  # a forward inside backward: recomputation
            self._close_recompute()
            if layer.phase != 1:
                self._pre_backward(layer)
            self._call("dmuon_rt_recompute_begin")
            self.recomputations += 1
            self._call("dmuon_rt_pre_forward", layer.index)
            layer.recompute = True
            return
        if layer is (self._root or self._layers[0]):
            self._agree(0)
            self._gen += 1
            self._fate = "open"
            self._fwd_grad = torch.is_grad_enabled()
            self._fwd_open = True
        self._call("dmuon_rt_pre_forward", layer.index)
        self._fill(layer)

    def _pre_forward_part(self, layer):
        if layer.seen is not None or self._in_backward():
            return
        # the plan's order: "(embed)" before every block, "(head)" after
        first = layer is self._layers[0]
        if (not first and self._fwd_open is False) or (first and any(
                L.seen is not None for L in self._layers if L is not layer)):
            raise DmuonError(1, "einval", "plan layer '%s' (%s) ran %s: its parameters are "
                             "not registered in forward order; plan with root='one'" % (
                                 layer.name, ", ".join(type(m).__name__ for m in layer.parts),
                                 "before the first layer" if not first else "inside another"))
        self._pre_forward(layer)
        layer.seen = []

    def _post_forward_part(self, layer, mod, out):
        if layer.seen is None or self._in_backward():
            return
        if all(m is not mod for m in layer.seen):
            layer.seen.append(mod)
        if len(layer.seen) == len(layer.parts):
            layer.seen = None
            self._post_forward(layer, out)

    def _post_forward(self, layer, out):
        if layer.recompute:
            self._close_recompute()
            return
        self._call("dmuon_rt_post_forward", layer.index)
        self._free(layer)
        if layer is not (self._root or self._layers[-1]):   # not the forward's end
            return
        self._fwd_open = False
        if not self._fwd_grad:
            self._call("dmuon_rt_discard")   # evaluation: no backward
            self._fate = "eval"
            return
        hooked = []
        for t in _tensors(out):
            if t.requires_grad:
                hooked.append(t.register_hook(
                    lambda g, gen=self._gen: self._root_backward(gen)))
        if hooked:
            self._awaiting = True
        else:
            self._call("dmuon_rt_discard")
            self._fate = "eval"

    def _unfinished(self):
        """This rank's micro-batch is not complete: a forward that raised part
        way, a forward whose backward never began (model.eval() with
        gradients enabled, a loss never backpropagated: an evaluation
        pass), or a backward that raised part way."""
        return self._fwd_open or self._awaiting or (self._bwd and not self._in_backward())

    def _end_unfinished(self, awaiting_fate):
        """dmuon_rt_discard of the micro-batch in progress (collective), and
        the binding's side of it: weights freed, brackets and stray .grad
        dropped.  A backward that had begun drops every gradient
        accumulated since the last step (dmuon/runtime.h).  awaiting_fate:
        what a forward whose backward never began becomes (a key of _GONE)."""
        if self._awaiting:
            self._fate = awaiting_fate
        elif self._fwd_open or self._bwd:
            self._fate = "discarded"
        dropped = self._bwd
        self._fwd_open = self._awaiting = self._bwd = False
        try:
            self._call("dmuon_rt_discard")
        finally:
            for L in self._layers:
                L.phase, L.got, L.recompute, L.seen = 0, 0, False, None
                self._free(L)
                for _, p in L.params:
                    p.grad = None
        self._dropped = self._dropped or dropped

    def discard(self):
        """Ends the micro-batch in progress without counting it
        (dmuon_rt_discard), e.g. after catching an exception raised inside
        its forward or backward; the next forward starts clean.  A
        micro-batch whose backward had begun drops every gradient
        accumulated since the last step.  Outside a micro-batch nothing
        changes.  Collective: every rank calls it at the same point."""
        self._ensure_open()
        self._end_unfinished("discarded")

    def _root_backward(self, gen=None):
        if self._in_backward():
            return
        if gen is not None and gen != self._gen:
            raise DmuonError(1, "einval", "backward of an output of an earlier forward: a "
                             "later forward began before its backward, so that forward was "
                             "taken as an evaluation pass and discarded (run each forward's "
                             "backward before the next forward)")
        if gen is not None and self._bwd:
            raise DmuonError(1, "einval", "backward of an output whose backward already began "
                             "and raised part way: its micro-batch is discarded at the next "
                             "forward, step() or rt.discard(); run the forward again")
        if gen is not None and not self._awaiting:
            raise DmuonError(1, "einval", "backward of an output whose " + _GONE.get(
                self._fate, "forward was discarded as an evaluation pass"))
        self._awaiting = False
        self._fate = "backward"
        self._bwd = True
        self._bwd_task = torch._C._current_graph_task_id()
        for L in self._layers:
            L.phase, L.got, L.recompute = 0, 0, False
        if self._root is not None:
            self._pre_backward(self._root)
        elif self._layers[-1].parts is not None:
            self._pre_backward(self._layers[-1])
        torch.autograd.Variable._execution_engine.queue_callback(self._end_backward)

    def _pre_backward(self, layer):
        if not self._in_backward():
            self._root_backward()
        self._close_recompute()
        if layer.phase:
            return
        # the backward reached this layer: the layers after it in forward
        # order are done, gradients that never come included (a parameter
        # the forward did not use); the plan's order (dmuon/layout.h) ends
        # them before this one begins
        if layer is not self._root:
            for L in reversed(self._layers):
                if L.index <= layer.index:
                    break
                if L is not self._root and L.phase == 1:
                    self._post_backward(L)
        self._call("dmuon_rt_pre_backward", layer.index)
        layer.phase = 1
        self._fill(layer)

    def _close_recompute(self):
        """Ends a recomputation; torch.utils.checkpoint may stop a recomputed
        forward early, before the module's forward hook runs."""
        for L in self._layers:
            if L.recompute:
                L.recompute = False
                self._call("dmuon_rt_post_forward", L.index)
                self._call("dmuon_rt_recompute_end")

    def _grad_ready(self, layer, i, p):
        if layer.phase != 1:
            self._pre_backward(layer)
        self._close_recompute()
        ptr = lib().dmuon_rt_grad(self._rt, self._idx[i])
        if not ptr and layer.phase == 2:
            raise DmuonError(1, "einval", "parameter '%s': its gradient arrived after the "
                             "backward of its layer '%s' ended (the backward had begun an "
                             "earlier layer): a parameter used by a later layer's forward "
                             "too (shared between layers) cannot be sharded by layer"
                             % (self._names[i], layer.name))
        if not ptr:
            raise DmuonError(1, "einval", "parameter '%s': no gradient buffer (its layer '%s' "
                             "is not in backward)" % (self._names[i], layer.name))
        g = p.grad
        if g is not None:
            _f32(ptr, p.numel()).add_(g.detach().reshape(-1).to(torch.float32),
                                      alpha=self._scale)
            p.grad = None
        layer.got += 1
        if layer is not self._root and layer.got == layer.need:
            self._post_backward(layer)

    def _post_backward(self, layer):
        self._call("dmuon_rt_post_backward", layer.index)
        layer.phase = 2
        self._free(layer)

    def _end_backward(self):
        self._close_recompute()
        try:
            for L in reversed(self._layers):
                if L is self._root:
                    continue
                if L.phase == 0:
                    self._pre_backward(L)
                if L.phase == 1:
                    self._post_backward(L)
            if self._root is not None:
                self._post_backward(self._root)
        finally:
            self._bwd = False

    # ------------------------------------------------------------ optimizer --
    @staticmethod
    def _optim_opts(kw):
        out = {}
        names = {"momentum": "momentum", "nesterov": "nesterov", "weight_decay": "weight_decay",
                 "adamw_eps": "eps", "adamw_weight_decay": "adamw_weight_decay",
                 "adjust_lr": "adjust_lr", "clip_norm": "clip_norm"}
        for k, v in kw.items():
            if k == "adamw_betas":
                out["beta1"], out["beta2"] = v
            elif k in names:
                out[names[k]] = int(v) if isinstance(v, bool) else v
        if out.get("adjust_lr") is None:
            out["adjust_lr"] = "original"
        for k in list(out):
            if isinstance(out[k], float):
                out[k] = repr(out[k])
        return out

    def optimizer(self, lr=0.02, adamw_lr=1e-3, momentum=0.95, nesterov=True, weight_decay=0.0,
                  adamw_betas=(0.9, 0.95), adamw_eps=1e-8, adamw_weight_decay=0.0,
                  adjust_lr="match_rms_adamw", clip_norm=0.0):
        """The torch.optim.Optimizer whose step() is dmuon_rt_step.  Names as in
        torch.optim.Muon (lr, momentum, nesterov, weight_decay, adjust_lr as
        adjust_lr_fn: "match_rms_adamw" or "original"/None) and
        torch.optim.AdamW (adamw_lr, adamw_betas, adamw_eps,
        adamw_weight_decay); clip_norm > 0 clips the global gradient norm.
        param_groups: {"role": "muon", "lr": lr} and {"role": "adamw", "lr":
        adamw_lr} (LR schedulers scale both).  Opens the runtime (frees the
        module's parameters); the hyperparameters are fixed from then on."""
        for name, v in (("lr", lr), ("adamw_lr", adamw_lr), ("clip_norm", clip_norm),
                        ("weight_decay", weight_decay), ("adamw_weight_decay", adamw_weight_decay)):
            if not (isinstance(v, (int, float)) and v >= 0 and v == v and v != float("inf")):
                raise ValueError("%s %r: expected a finite number >= 0" % (name, v))
        kw = dict(momentum=momentum, nesterov=nesterov, weight_decay=weight_decay,
                  adamw_betas=adamw_betas, adamw_eps=adamw_eps,
                  adamw_weight_decay=adamw_weight_decay, adjust_lr=adjust_lr,
                  clip_norm=clip_norm)
        if self._rt.value and self._optimizer is None and kw != self._default_kw():
            raise DmuonError(1, "einval", "rt.optimizer(): the runtime was opened (by a forward, "
                             "save, load or export) with the default hyperparameters; call "
                             "rt.optimizer() first")
        if self._optimizer is not None:
            raise DmuonError(1, "einval", "rt.optimizer(): called twice (the runtime holds one "
                             "optimizer state)")
        self._open(self._optim_opts(kw))
        self._optimizer = Optimizer(self, lr, adamw_lr)
        return self._optimizer

    @staticmethod
    def _default_kw():
        import inspect
        sig = inspect.signature(Runtime.optimizer)
        return {k: v.default for k, v in sig.parameters.items()
                if k not in ("self", "lr", "adamw_lr")}

    # ------------------------------------------------------------- the rest --
    def step(self, lr, adamw_lr):
        """dmuon_rt_step with these learning rates (Optimizer.step calls it)."""
        self._ensure_open()
        self._agree(1)
        try:
            check(lib().dmuon_capi_rt_step(self._rt, float(lr), float(adamw_lr)))
        except DmuonError as e:
            if not self._dropped or e.name != "einval":
                raise
            raise DmuonError(e.code, e.name, e.message + " (a micro-batch discarded after "
                             "its backward had begun dropped the gradients accumulated since "
                             "the last step)") from None
        self._dropped = False

    def _agree(self, what):
        """Every rank begins a micro-batch (what 0) or steps (1) together: one
        small sum over the ranks, so that ranks running different numbers
        of micro-batches fail here, all of them with the same DmuonError,
        instead of pairing a gradient reduction with a step's collectives.
        When any rank's micro-batch is unfinished (an evaluation pass, or a
        forward or backward that raised), every rank discards it first.
        The same sum compares grad_reduce: ranks that scale their gradients
        differently would step on a sum no rank asked for."""
        v = (ctypes.c_double * 4)(1.0 if what == 0 else 0.0, 1.0 if what == 1 else 0.0,
                                  1.0 if self._unfinished() else 0.0,
                                  1.0 if self._grad_reduce == "mean" else 0.0)
        check(lib().dmuon_capi_allreduce_sum(self._comm, v, 4))
        if v[2]:
            self._end_unfinished("step" if what == 1 else "eval")
        if v[3] not in (0.0, float(self.world)):
            raise DmuonError(7, "emismatch", "grad_reduce differs between the ranks: %d rank(s) "
                             "gave 'mean', %d 'sum'; every rank must give the same" % (
                                 int(v[3]), self.world - int(v[3])))
        if v[what] != self.world:
            raise DmuonError(7, "emismatch", "%d rank(s) began a micro-batch while %d called "
                             "step(): every rank must run the same number of micro-batches "
                             "(forwards, no_grad ones included) between steps" % (
                                 int(v[0]), int(v[1])))

    def save(self, path):
        """Saves the optimizer state (masters, momenta, moments) this rank
        owns into the checkpoint directory path (collective)."""
        self._ensure_open()
        self._call("dmuon_rt_save", cstr(str(path)))

    def load(self, path):
        """Loads a checkpoint saved under any plan of this model (other rank
        counts, FSDP/HSDP), before the first step (collective)."""
        self._ensure_open()
        self._call("dmuon_rt_load", cstr(str(path)))

    def export(self, path):
        """Writes the full FP32 master weights with the module's names as one
        safetensors file (collective), with what else module.state_dict()
        holds: frozen (requires_grad=False) parameters and persistent
        buffers in their own dtype, tied aliases (lm_head.weight = embed
        weight) under each name; load it with safetensors.torch.load_file +
        module.load_state_dict (strict).  With such extras the runtime
        writes PATH.dmuon-part and rank 0 rewrites it into PATH (temp file,
        rename)."""
        self._ensure_open()
        extra = self._export_extras()
        if not extra:
            self._call("dmuon_rt_export", cstr(str(path)))
            return
        path = str(path)
        part = path + ".dmuon-part"
        self._call("dmuon_rt_export", cstr(part))
        err = ""
        if self.rank == 0:
            try:
                from safetensors.torch import load_file, save_file
                sd = load_file(part)
                for name, (src, t) in extra.items():
                    sd[name] = sd[src].clone() if src else t
                tmp = path + ".tmp"
                save_file(sd, tmp)
                os.replace(tmp, path)
            except Exception as e:      # every rank raises the same below
                err = "%s: %s" % (type(e).__name__, e)
            finally:
                if os.path.exists(part):
                    os.remove(part)
        flag = (ctypes.c_double * 1)(1.0 if err else 0.0)   # a failure on rank 0 fails all
        check(lib().dmuon_capi_allreduce_sum(self._comm, flag, 1))
        if flag[0]:
            raise DmuonError(3, "eio", "export '%s': adding the frozen parameters, aliases and "
                             "buffers on rank 0 failed%s" % (path, (": " + err) if err else ""))

    def _export_extras(self):
        """What load_state_dict needs besides the trained parameters: tied
        aliases (name -> (the exported name, None)), frozen parameters and
        persistent buffers (name -> (None, a copy of the values))."""
        trained = set(self._names)
        canon = {}
        for n, p in self.model.named_parameters():
            canon[id(p)] = n
        out = {}
        for n, p in self.model.named_parameters(remove_duplicate=False):
            if n in trained:
                continue
            c = canon.get(id(p))
            if c in trained:
                out[n] = (c, None)
            else:
                with torch._C.DisableTorchFunctionSubclass():
                    out[n] = (None, p.detach().to("cpu").clone().contiguous())
        for mn, mod in self.model.named_modules():
            for bn, b in mod._buffers.items():
                if b is not None and bn not in mod._non_persistent_buffers_set:
                    out[(mn + "." if mn else "") + bn] = (None, b.detach().clone().contiguous())
        return out

    def stats(self):
        """This rank's figures as a dict: every field of dmuon_rt_stats
        (dmuon/runtime.h), with steps and grad_norm.  The byte figures are
        the rank's layout, fixed for the run (dmuon-plan --json prints the
        same under "memory"); optim_s, ns_s and ns_matrices are the last
        step's; comm_wait_s, publish_wait_s, gather_s and reduce_s add up
        since the last reset_stats()."""
        self._ensure_open()
        L = lib()
        keys = []
        while L.dmuon_capi_rt_stats_name(len(keys)) is not None:
            keys.append(L.dmuon_capi_rt_stats_name(len(keys)).decode())
        v = (ctypes.c_double * len(keys))()
        L.dmuon_capi_rt_stats(self._rt, v)
        return {k: (int(x) if k.endswith(("bytes", "matrices")) or k == "steps" else x)
                for k, x in zip(keys, v)}

    def reset_stats(self):
        """Zeroes the times that add up (comm_wait_s, publish_wait_s,
        gather_s, reduce_s; dmuon_rt_reset_stats)."""
        self._ensure_open()
        lib().dmuon_rt_reset_stats(self._rt)

    @property
    def steps(self):
        return lib().dmuon_rt_steps(self._rt) if self._rt.value else 0

    def close(self):
        """Frees the runtime (collective) and removes the hooks; the module's
        parameters stay empty (load an export to use it again)."""
        for h in self._hooks:
            h.remove()
        self._hooks = []
        if self._rt.value:
            lib().dmuon_rt_free(self._rt)
            self._rt = ctypes.c_void_p()
            for layer in self._layers:
                for _, p in layer.params:
                    st = p.untyped_storage()
                    if st.nbytes() != p.numel() * p.element_size():
                        st.resize_(p.numel() * p.element_size())
                    ctypes.memset(p.data_ptr(), 0, p.numel() * p.element_size())
                    p.__class__ = torch.nn.Parameter


def _abort_on_exception():
    """Chains a sys.excepthook that, after the traceback, ends the whole MPI
    job (MPI_Abort of MPI_COMM_WORLD, exit status 1), as `python -m mpi4py`
    does: a rank ending on an uncaught exception would otherwise free its
    runtimes at exit (collective) and wait for the other ranks, which wait
    for it in their next collective, each up to the deadline.  Installed
    once, when the first runtime opens under more than one rank, unless
    $DMUON_ABORT_ON_EXCEPTION is 0."""
    prev = sys.excepthook
    if getattr(prev, "_dmuon_abort", False) or \
            os.environ.get("DMUON_ABORT_ON_EXCEPTION", "1").strip() == "0":
        return

    def hook(tp, value, tb):
        try:
            prev(tp, value, tb)
        finally:
            sys.stderr.write("dmuon: rank %d of %d ended on an uncaught %s: aborting the MPI "
                             "job (MPI_Abort, exit status 1; DMUON_ABORT_ON_EXCEPTION=0 waits "
                             "for the other ranks instead)\n" % (_mpi["rank"], _mpi["size"],
                                                                  tp.__name__))
            for f in (sys.stdout, sys.stderr):
                try:
                    f.flush()
                except Exception:
                    pass
            lib().dmuon_capi_abort(1)     # returns only when MPI is already finalized

    hook._dmuon_abort = True
    sys.excepthook = hook


class Optimizer(torch.optim.Optimizer):
    """torch.optim.Optimizer over a dmuon Runtime: step() is dmuon_rt_step
    with each group's current lr; zero_grad() drops any .grad left (the
    runtime keeps the accumulated gradients itself and clears them at
    step).  The optimizer state lives in libdmuon: checkpoint it with
    rt.save/rt.load; state_dict() holds the learning rates only."""

    def __init__(self, rt, lr, adamw_lr):
        self._rt = rt
        roles = {n: r for n, _, r, _ in rt.plan.params}
        named = dict(_trainable(rt.model))
        groups = []
        for role, glr in (("muon", lr), ("adamw", adamw_lr)):
            ps = [named[n] for n in rt._names if roles[n] == role]
            if ps:
                groups.append({"params": ps, "lr": glr, "role": role})
        super().__init__(groups, {"lr": lr})
        self._lrs = {"muon": lr, "adamw": adamw_lr}

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for g in self.param_groups:
            self._lrs[g["role"]] = g["lr"]
        self._rt.step(self._lrs["muon"], self._lrs["adamw"])
        return loss

    def zero_grad(self, set_to_none=True):
        for g in self.param_groups:
            for p in g["params"]:
                p.grad = None

    def discard(self):
        """Runtime.discard(): ends the micro-batch in progress (collective)."""
        self._rt.discard()


# Tensor functions that read only a tensor's metadata (or set its hooks and
# gradient): allowed on a sharded parameter that holds no values.
_META = {"untyped_storage", "numel", "dim", "size", "element_size", "data_ptr", "is_contiguous",
         "storage_offset", "register_hook", "register_post_accumulate_grad_hook", "__get__",
         "__set__", "__delete__", "stride", "nelement", "is_floating_point", "is_complex",
         "type", "__hash__", "__eq__", "requires_grad_", "__format__", "__reduce_ex__"}


class ShardedParameter(torch.nn.Parameter):
    """A parameter taken over by a dmuon Runtime (its class from rt opening
    to rt.close()).  Outside its layer's forward and backward its storage
    holds no bytes: any torch function that would read or write its values
    there (printing, norms, .to(), .detach() in state_dict(), copy_) raises
    DmuonError instead of reading freed memory."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        with torch._C.DisableTorchFunctionSubclass():
            if getattr(func, "__name__", "") not in _META:
                for a in _args(args, kwargs):
                    if type(a) is cls and a.numel() and a.untyped_storage().nbytes() == 0:
                        raise DmuonError(1, "einval", "parameter '%s' is sharded by dmuon: "
                                         "outside its layer's forward and backward it holds "
                                         "no values (%s refused); the full weights: "
                                         "rt.export(path) (safetensors), checkpoints: "
                                         "rt.save(dir)" % (getattr(a, "_dmuon_name", "?"),
                                                            getattr(func, "__name__", func)))
            return func(*args, **kwargs)


def _args(args, kwargs):
    for a in list(args) + list(kwargs.values()):
        if isinstance(a, (list, tuple)):
            yield from a
        else:
            yield a


def _f32(ptr, n):
    """A float32 tensor viewing n floats of library memory at ptr (no copy)."""
    return torch.frombuffer((ctypes.c_float * n).from_address(ptr), dtype=torch.float32)


def _tensors(x):
    if isinstance(x, torch.Tensor):
        yield x
    elif isinstance(x, (list, tuple)):
        for y in x:
            yield from _tensors(y)
    elif isinstance(x, dict):
        for y in x.values():
            yield from _tensors(y)
    elif hasattr(x, "__dataclass_fields__"):
        for k in x.__dataclass_fields__:
            yield from _tensors(getattr(x, k))
