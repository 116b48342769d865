"""dmuon: owner-sharded Muon and AdamW (libdmuon) from Python.

    import dmuon            plans, the C library, MPI (no torch needed)
    import dmuon.torch      trains a torch.nn.Module through libdmuon

MPI: libdmuon initialises MPI on first use when nobody has (run under
`mpirun -np N python ...`; a plain `python ...` is a world of one) and
finalizes it at exit; when mpi4py is imported first, its MPI is used and
left to it, and a communicator may be passed as comm= (mpi4py Comm).
"""
import atexit
import ctypes
import weakref

from . import _lib as _libmod
from ._lib import DmuonError, check, cstr, lib, library_path

__all__ = ["DmuonError", "Plan", "library_path", "load_plan", "world", "comm_handle", "allreduce_sum"]

_mpi = {"up": False, "ours": False, "rank": 0, "size": 1}
_live = weakref.WeakSet()   # runtimes to free before MPI_Finalize


def _mpi_init():
    if not _mpi["up"]:
        L = lib()
        ini, rank, size = ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
        check(L.dmuon_capi_mpi_init(ctypes.byref(ini), ctypes.byref(rank), ctypes.byref(size)))
        _mpi.update(up=True, ours=bool(ini.value), rank=rank.value, size=size.value)
        L.dmuon_err_set_rank(rank.value if size.value > 1 else -1)
        atexit.register(_at_exit)


def _at_exit():
    for rt in list(_live):
        rt.close()
    if _mpi["ours"]:
        lib().dmuon_capi_mpi_finalize()


def comm_handle(comm=None):
    """The Fortran handle libdmuon takes for comm: None is MPI_COMM_WORLD;
    an mpi4py communicator gives comm.py2f(); an int is taken as a handle."""
    _mpi_init()
    if comm is None:
        return lib().dmuon_capi_comm_world()
    if isinstance(comm, int):
        return comm
    if hasattr(comm, "py2f"):
        return int(comm.py2f())
    raise DmuonError(1, "einval", "comm: expected None, an mpi4py communicator or a Fortran "
                     "handle, got %r" % type(comm).__name__)


def world(comm=None):
    """(rank, size) of comm (default MPI_COMM_WORLD), initialising MPI."""
    h = comm_handle(comm)
    rank, size = ctypes.c_int(), ctypes.c_int()
    check(lib().dmuon_capi_comm_info(h, ctypes.byref(rank), ctypes.byref(size)))
    return rank.value, size.value


def allreduce_sum(values, comm=None):
    """The element-wise sum over the ranks of comm of a list of floats
    (collective), e.g. to log the mean loss: allreduce_sum([loss])[0] / size."""
    vals = [float(v) for v in values]
    buf = (ctypes.c_double * len(vals))(*vals)
    check(lib().dmuon_capi_allreduce_sum(comm_handle(comm), buf, len(vals)))
    return list(buf)


class Plan:
    """An owner plan (dmuon/plan.h).  Attributes: ranks, nodes,
    gpus_per_node, sharding ("fsdp"/"hsdp"), zero, param_dtype ("bf16",
    "f32", ...), layers (names in forward order, "(root)" for tensors
    outside numbered blocks), params (list of (name, layer index, role
    "muon"/"adamw", numel)).  save(path) writes the plan file."""

    def __init__(self, ptr, source, rebuild=None):
        self._ptr = ctypes.c_void_p(ptr)
        self.source = source
        self._rebuild = rebuild   # plan_opts -> Plan, for plans made from a module
        L = lib()
        p = self._ptr
        self.ranks = L.dmuon_plan_ranks(p)
        self.nodes = L.dmuon_plan_nodes(p)
        self.gpus_per_node = L.dmuon_plan_gpus_per_node(p)
        self.sharding = "hsdp" if L.dmuon_plan_sharding(p) == 1 else "fsdp"
        self.zero = L.dmuon_plan_zero_stage(p)
        self.param_dtype = L.dmuon_dtype_name(L.dmuon_plan_param_dtype(p)).decode()
        self.layers = [L.dmuon_plan_layer_name(p, i).decode()
                       for i in range(L.dmuon_plan_layer_count(p))]
        self.params = []
        name, layer = ctypes.c_char_p(), ctypes.c_int32()
        role, numel = ctypes.c_int(), ctypes.c_int64()
        for i in range(L.dmuon_capi_plan_param_count(p)):
            check(L.dmuon_capi_plan_param(p, i, ctypes.byref(name), ctypes.byref(layer),
                                          ctypes.byref(role), ctypes.byref(numel)))
            self.params.append((name.value.decode(), layer.value,
                                "muon" if role.value else "adamw", numel.value))
        # name -> (Muon matrices, m, n); (0, 0, 0) for AdamW
        self._matrix = {}
        c, m, n = ctypes.c_int64(), ctypes.c_int64(), ctypes.c_int64()
        for i, prm in enumerate(self.params):
            check(L.dmuon_capi_plan_param_matrix(p, i, ctypes.byref(c), ctypes.byref(m),
                                                 ctypes.byref(n)))
            self._matrix[prm[0]] = (c.value, m.value, n.value)

    def save(self, path):
        """Writes the plan file (YAML) atomically, as dmuon-plan does."""
        check(lib().dmuon_plan_write(self._ptr, cstr(str(path))))

    def __repr__(self):
        return "<dmuon.Plan %s: %d ranks (%d x %d) %s ZeRO-%d %s, %d params, %d layers>" % (
            self.source, self.ranks, self.nodes, self.gpus_per_node, self.sharding, self.zero,
            self.param_dtype, len(self.params), len(self.layers))

    def __del__(self):
        L = _libmod._lib
        if getattr(self, "_ptr", None) and self._ptr.value and L is not None:
            L.dmuon_plan_free(self._ptr)
            self._ptr = ctypes.c_void_p()


def load_plan(path):
    """Reads a dmuon-plan file (dmuon_plan_load checks it without trusting
    it; errors name the file and field)."""
    p = ctypes.c_void_p()
    check(lib().dmuon_plan_load(cstr(str(path)), ctypes.byref(p)))
    return Plan(p.value, str(path))
