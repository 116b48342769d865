"""The C library: finding libdmuon.so, its function signatures, errors.

The library is looked for, in this order: $DMUON_LIBRARY (a path); the
build tree this package sits in (python/dmuon -> ../../build/libdmuon.so,
what `make` built); the directories of an installation (`make install
PREFIX=...`: $PREFIX/lib next to this interpreter's prefix, /usr/local/lib,
/usr/lib) and the dynamic loader's search (ctypes.util.find_library).
library_path() says which file was loaded and how it was found.
"""
import ctypes
import ctypes.util
import os
import sys

_here = os.path.dirname(os.path.abspath(__file__))


def _candidates():
    env = os.environ.get("DMUON_LIBRARY")
    if env:
        yield env, "$DMUON_LIBRARY"
        return
    tree = os.path.normpath(os.path.join(_here, "..", "..", "build", "libdmuon.so"))
    yield tree, "the build tree of this package"
    for d in (os.path.join(sys.prefix, "lib"), "/usr/local/lib", "/usr/lib"):
        yield os.path.join(d, "libdmuon.so"), "installed in " + d
    found = ctypes.util.find_library("dmuon")
    if found:
        yield found, "the dynamic loader's search path"


class DmuonError(RuntimeError):
    """A libdmuon failure: `code` (the dmuon_rc number), `name` ("einval",
    "emismatch", ...) and `message` (the library's one-line message)."""

    def __init__(self, code, name, message):
        super().__init__("dmuon %s: %s" % (name, message))
        self.code = code
        self.name = name
        self.message = message


_lib = None
_path = None
_how = None


def library_path():
    """(path, how) of the loaded libdmuon.so."""
    lib()
    return _path, _how


def lib():
    global _lib, _path, _how
    if _lib is not None:
        return _lib
    tried = []
    for path, how in _candidates():
        if not os.path.exists(path) and os.sep in path:
            tried.append(path)
            continue
        # RTLD_GLOBAL: Open MPI's plugins resolve libmpi's symbols globally.
        try:
            _lib = ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
        except OSError as e:
            tried.append("%s (%s)" % (path, e))
            continue
        _path, _how = path, how
        _declare(_lib)
        return _lib
    raise DmuonError(5, "enotfound", "libdmuon.so not found (tried: %s); run make, or set "
                     "DMUON_LIBRARY to its path" % ", ".join(tried))


_c_int, _c_size, _c_i64, _c_dbl, _c_str, _vp = (ctypes.c_int, ctypes.c_size_t, ctypes.c_int64,
                                                ctypes.c_double, ctypes.c_char_p, ctypes.c_void_p)


def _declare(L):
    P = ctypes.POINTER
    sig = {
        "dmuon_rc_name": (_c_str, [_c_int]),
        "dmuon_errmsg": (_c_str, []),
        "dmuon_err_set_rank": (None, [_c_int]),
        "dmuon_capi_mpi_init": (_c_int, [P(_c_int), P(_c_int), P(_c_int)]),
        "dmuon_capi_mpi_finalize": (None, []),
        "dmuon_capi_abort": (_c_int, [_c_int]),
        "dmuon_capi_comm_world": (_c_int, []),
        "dmuon_capi_comm_info": (_c_int, [_c_int, P(_c_int), P(_c_int)]),
        "dmuon_capi_comm_nodes": (_c_int, [_c_int, _c_int, P(_c_int), P(_c_int)]),
        "dmuon_capi_allreduce_sum": (_c_int, [_c_int, P(_c_dbl), _c_size]),
        "dmuon_capi_plan_opts_new": (_c_int, [P(_vp)]),
        "dmuon_capi_plan_opts_free": (None, [_vp]),
        "dmuon_capi_plan_opts_set": (_c_int, [_vp, _c_str, _c_str]),
        "dmuon_capi_plan_tensors": (_c_int, [_c_str, _c_size, P(_c_str), P(_c_int), P(_c_i64),
                                             P(_c_str), _vp, P(_vp), P(_vp)]),
        "dmuon_capi_model_tensors": (_c_int, [_c_str, _c_size, P(_c_str), P(_c_int), P(_c_i64),
                                              P(_c_str), _vp, P(_vp)]),
        "dmuon_capi_plan_param_count": (_c_size, [_vp]),
        "dmuon_capi_plan_param": (_c_int, [_vp, _c_size, P(_c_str), P(ctypes.c_int32),
                                           P(_c_int), P(_c_i64)]),
        "dmuon_capi_plan_param_matrix": (_c_int, [_vp, _c_size, P(_c_i64), P(_c_i64),
                                                  P(_c_i64)]),
        "dmuon_capi_rt_opts_new": (_c_int, [P(_vp)]),
        "dmuon_capi_rt_opts_free": (None, [_vp]),
        "dmuon_capi_rt_opts_set": (_c_int, [_vp, _c_str, _c_str]),
        "dmuon_capi_rt_create": (_c_int, [_vp, _c_int, _vp, P(_vp)]),
        "dmuon_capi_rt_step": (_c_int, [_vp, _c_dbl, _c_dbl]),
        "dmuon_capi_rt_stats": (None, [_vp, P(_c_dbl)]),
        "dmuon_capi_rt_stats_name": (_c_str, [_c_int]),
        "dmuon_rt_reset_stats": (None, [_vp]),
        "dmuon_plan_load": (_c_int, [_c_str, P(_vp)]),
        "dmuon_plan_write": (_c_int, [_vp, _c_str]),
        "dmuon_plan_free": (None, [_vp]),
        "dmuon_plan_match_model": (_c_int, [_vp, _vp]),
        "dmuon_model_free": (None, [_vp]),
        "dmuon_plan_ranks": (ctypes.c_int32, [_vp]),
        "dmuon_plan_nodes": (ctypes.c_int32, [_vp]),
        "dmuon_plan_gpus_per_node": (ctypes.c_int32, [_vp]),
        "dmuon_plan_sharding": (_c_int, [_vp]),
        "dmuon_plan_zero_stage": (_c_int, [_vp]),
        "dmuon_plan_param_dtype": (_c_int, [_vp]),
        "dmuon_dtype_name": (_c_str, [_c_int]),
        "dmuon_plan_layer_count": (_c_size, [_vp]),
        "dmuon_plan_layer_name": (_c_str, [_vp, _c_size]),
        "dmuon_rt_register": (_c_int, [_vp, _c_str, _c_int, P(_c_i64), _vp]),
        "dmuon_rt_open": (_c_int, [_vp]),
        "dmuon_rt_pre_forward": (_c_int, [_vp, _c_size]),
        "dmuon_rt_post_forward": (_c_int, [_vp, _c_size]),
        "dmuon_rt_pre_backward": (_c_int, [_vp, _c_size]),
        "dmuon_rt_post_backward": (_c_int, [_vp, _c_size]),
        "dmuon_rt_discard": (_c_int, [_vp]),
        "dmuon_rt_recompute_begin": (_c_int, [_vp]),
        "dmuon_rt_recompute_end": (_c_int, [_vp]),
        "dmuon_rt_param_index": (_c_int, [_vp, _c_str]),
        "dmuon_rt_weights": (_vp, [_vp, _c_int]),
        "dmuon_rt_grad": (_vp, [_vp, _c_int]),
        "dmuon_rt_steps": (_c_i64, [_vp]),
        "dmuon_rt_save": (_c_int, [_vp, _c_str]),
        "dmuon_rt_load": (_c_int, [_vp, _c_str]),
        "dmuon_rt_export": (_c_int, [_vp, _c_str]),
        "dmuon_rt_free": (None, [_vp]),
    }
    for name, (res, args) in sig.items():
        f = getattr(L, name)
        f.restype = res
        f.argtypes = args


def check(rc):
    """Raises DmuonError for a failing dmuon_rc, with the library's message."""
    if rc:
        L = lib()
        raise DmuonError(rc, L.dmuon_rc_name(rc).decode(), L.dmuon_errmsg().decode())


def cstr(s):
    return s.encode() if isinstance(s, str) else s
