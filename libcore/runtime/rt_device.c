/*
 * rt_device.c — where the runtime's memory lives (dmuon_rt_opts.backend and
 * .device): the checks of the pair at create, the GPU and Newton–Schulz
 * context of device cuda, the table of device operations (elem.h) the
 * runtime reads and writes all its memory through, and the host staging of
 * what only the host can use (checkpoint pieces, digests).
 *
 * Memory by device:
 *   cpu   pool: the MPI backend's node-shared windows; state, scratch, views:
 *         malloc'd; the host table (or, in tests, the checking table, whose
 *         disguised addresses fault on any access outside it).
 *   cuda  pool: the NCCL backends' ncclMemAlloc window on GPU (node-local
 *         rank modulo the visible GPUs, as comm/nccl_symm.c picks it);
 *         state, scratch, views: cudaMalloc on that GPU; the CUDA table
 *         (kernels/optim_cuda.cu) and a CUDA Newton–Schulz context.
 * Host accesses of that memory, all through the table or a staging copy:
 *   register → open: the initial values copied in (copy H2D);
 *   views: the gathered block widened to FP32 (widen), per bracket;
 *   gradients: zeroed at pre_backward (zero), accumulated from the windows
 *     after each reduction (accum), cleared after a step (zero), clipped
 *     (scale);
 *   step: directions (direction, strided, ns_run), checks and updates
 *     (grad_check, muon_finish, adamw_step), masters into the windows
 *     (narrow);
 *   checkpoints: save / export read a host copy of the state, load writes
 *     one and copies it in (rt_state_to_host / rt_state_from_host);
 *   dmuon_rt_state_digest: chunks copied out (rt_digest_mem).
 * Communicators: comm (MPI; the NCCL backends bootstrap over it), or the
 * trainer's NCCL communicator or unique id (dmuon_topo_init_nccl / _id: no
 * MPI call; the control plane runs over the topology, dmuon_ctl_topo_*).
 * The CUDA paths are compiled with warnings as errors but have NOT RUN: no
 * GPU was available where they were written (tests/gpu/run.sh runs them).
 */
#include "rt_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if DMUON_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif
#if DMUON_HAVE_NCCL
#include <nccl.h>
#endif

bool rt_on_host(const dmuon_rt *rt) { return rt->elem == rt_elem_host(); }

/* The pair (backend, device) and the options that go with it; local and
 * the same on every rank (same options). */
dmuon_rc rt_device_check(const dmuon_rt *rt)
{
    const dmuon_rt_opts *o = &rt->opts;
    const char *b = dmuon_backend_name(o->backend);
    if ((unsigned)o->backend >= DMUON_BACKEND_COUNT)
        return DMUON_FAIL(DMUON_EINVAL, "runtime: unknown backend %d: expected mpi, nccl or "
                          "nccl-dev", (int)o->backend);
    if (o->device != DMUON_DEVICE_CPU && o->device != DMUON_DEVICE_CUDA)
        return DMUON_FAIL(DMUON_EINVAL, "runtime: unknown device %d: expected cpu or cuda",
                          (int)o->device);
    if (o->backend != DMUON_BACKEND_MPI && o->device == DMUON_DEVICE_CPU)
        return DMUON_FAIL(DMUON_EINVAL, "runtime: backend %s with device cpu: the %s backend's "
                          "pool is GPU memory; use device cuda (or backend mpi)", b, b);
    if (o->backend == DMUON_BACKEND_MPI && o->device == DMUON_DEVICE_CUDA)
        return DMUON_FAIL(DMUON_EINVAL, "runtime: device cuda with backend mpi: the MPI "
                          "backend's pool is host memory; use backend nccl or nccl-dev");
    if (o->nccl_comm && o->nccl_id)
        return DMUON_FAIL(DMUON_EINVAL, "runtime: both nccl_comm and nccl_id given: hand over "
                          "a communicator or a unique id, not both");
    if ((o->nccl_comm || o->nccl_id) && o->backend == DMUON_BACKEND_MPI)
        return DMUON_FAIL(DMUON_EINVAL, "runtime: %s given with backend mpi: a NCCL handle "
                          "needs backend nccl or nccl-dev", o->nccl_comm ? "nccl_comm" : "nccl_id");
    if (o->device == DMUON_DEVICE_CUDA && !rt_elem_cuda())
        return DMUON_FAIL(DMUON_EUNSUPPORTED, "runtime: device cuda: this build has no CUDA "
                          "(no element kernels); use device cpu");
    if (o->backend != DMUON_BACKEND_MPI) {
        dmuon_rc rc = dmuon_backend_check(o->backend);
        if (rc != DMUON_OK) {
            char msg[512];
            snprintf(msg, sizeof msg, "%s", dmuon_errmsg());
            return DMUON_FAIL(rc, "runtime: backend %s: %s", b, msg);
        }
    }
    return DMUON_OK;
}

static bool handoff(const dmuon_rt *rt) { return rt->opts.nccl_comm || rt->opts.nccl_id; }

/* The size of the run and this rank: comm's, or with a NCCL handoff the
 * options' (comm must then be MPI_COMM_NULL).  Local. */
dmuon_rc rt_comm_size(const dmuon_rt *rt, MPI_Comm comm, int *size, int *rank)
{
    if (handoff(rt)) {
        if (comm != MPI_COMM_NULL)
            return DMUON_FAIL(DMUON_EINVAL, "runtime: %s given together with an MPI "
                              "communicator: give MPI_COMM_NULL as comm to run over NCCL alone, "
                              "or no NCCL handle", rt->opts.nccl_comm ? "nccl_comm" : "nccl_id");
        if (rt->opts.nccl_size < 1 || rt->opts.nccl_rank < 0 ||
            rt->opts.nccl_rank >= rt->opts.nccl_size)
            return DMUON_FAIL(DMUON_EINVAL, "runtime: nccl_rank %d of nccl_size %d: expected a "
                              "rank in 0..size-1", rt->opts.nccl_rank, rt->opts.nccl_size);
        *size = rt->opts.nccl_size;
        *rank = rt->opts.nccl_rank;
        return DMUON_OK;
    }
    if (comm == MPI_COMM_NULL || MPI_Comm_size(comm, size) != MPI_SUCCESS ||
        MPI_Comm_rank(comm, rank) != MPI_SUCCESS)
        return DMUON_FAIL(DMUON_ECOMM, "runtime: create: the communicator is not usable "
                          "(MPI_COMM_NULL, or MPI_Comm_size / MPI_Comm_rank failed)");
    return DMUON_OK;
}

/* The topology: over comm (dmuon_topo_init), or over the trainer's NCCL
 * communicator or unique id with ranks_per_node K (0: the plan's, since
 * nothing without MPI can see which ranks share a host). */
dmuon_rc rt_topo_init(dmuon_rt *rt, MPI_Comm comm, int ranks_per_node)
{
    if (!handoff(rt))
        return dmuon_topo_init(&rt->topo, comm, ranks_per_node);
    int k = ranks_per_node > 0 ? ranks_per_node : (int)dmuon_plan_gpus_per_node(rt->plan);
    if (rt->opts.nccl_comm)
        return dmuon_topo_init_nccl(&rt->topo, (struct ncclComm *)rt->opts.nccl_comm,
                                    rt->opts.nccl_rank, rt->opts.nccl_size, k);
    return dmuon_topo_init_nccl_id(&rt->topo, rt->opts.nccl_id, rt->opts.nccl_rank,
                                   rt->opts.nccl_size, k, -1);
}

/* Checkpoints are MPI collectives (dmuon/ckpt.h): refused, by name, on a
 * runtime over a handed-over NCCL communicator. */
dmuon_rc rt_ckpt_usable(const dmuon_rt *rt, const char *what)
{
    if (rt->topo.world != MPI_COMM_NULL)
        return DMUON_OK;
    return DMUON_FAIL(DMUON_EUNSUPPORTED, "runtime: %s over a handed-over NCCL communicator: "
                      "the checkpoint files are written with MPI collectives (dmuon/ckpt.h); "
                      "create the runtime over an MPI communicator to save, load or export",
                      what);
}

/* The device table, the GPU and the Newton–Schulz context (after the
 * topology: the GPU is the node-local rank's).  Local; create agrees it. */
dmuon_rc rt_device_init(dmuon_rt *rt, const dmuon_ns_opts *nso)
{
    rt->gpu = -1;
    rt->stream = NULL;
    if (rt->opts.device == DMUON_DEVICE_CPU) {
        rt->elem = rt_elem_check_enabled() ? rt_elem_check() : rt_elem_host();
        return dmuon_ns_create(DMUON_DEVICE_CPU, -1, nso, &rt->ns);
    }
#if DMUON_HAVE_CUDA
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count < 1)
        return DMUON_FAIL(DMUON_EDEVICE, "runtime: device cuda: no GPU visible on rank %d (%s)",
                          rt->topo.rank, e != cudaSuccess ? cudaGetErrorString(e) : "none");
    rt->gpu = rt->topo.local % count;   /* the NCCL pool's choice (comm/nccl_symm.c) */
#if DMUON_HAVE_NCCL
    if (rt->opts.nccl_comm && ncclCommCuDevice((ncclComm_t)rt->opts.nccl_comm, &rt->gpu) != ncclSuccess)
        return DMUON_FAIL(DMUON_ECOMM, "runtime: device cuda: ncclCommCuDevice of the given "
                          "nccl_comm failed on rank %d", rt->topo.rank);
#endif
    e = cudaSetDevice(rt->gpu);
    if (e != cudaSuccess)
        return DMUON_FAIL(DMUON_EDEVICE, "runtime: device cuda: rank %d cannot select GPU %d: %s",
                          rt->topo.rank, rt->gpu, cudaGetErrorString(e));
    rt->elem = rt_elem_cuda();
    rt->stream = rt->opts.stream;
    DMUON_TRY(dmuon_ns_create(DMUON_DEVICE_CUDA, rt->gpu, nso, &rt->ns));
    /* the per-shape kernel choice of the CUDA engine, cached per GPU model */
    if (rt->opts.ns_costdb)
        dmuon_ns_set_costdb(rt->ns, rt->opts.ns_costdb);
    return DMUON_OK;
#else
    return DMUON_FAIL(DMUON_EUNSUPPORTED, "runtime: device cuda: this build has no CUDA");
#endif
}

/* ------------------------------------------------ host staging -------- */

/* The optimizer state as the host sees it: the state itself on the host
 * table, else the staging copy (valid between rt_state_to_host and
 * rt_state_drop). */
float *rt_host_of(const dmuon_rt *rt, float *state_ptr)
{
    if (!rt->state_host)
        return state_ptr;
    return rt->state_host + (state_ptr - rt->state);
}

/* A host copy of the whole optimizer state (checkpoint save / export read
 * it, load writes it).  copy_out 0: allocated only (load fills it).  No-op
 * on the host table. */
dmuon_rc rt_state_to_host(dmuon_rt *rt, bool copy_out)
{
    if (rt_on_host(rt))
        return DMUON_OK;
    rt_state_drop(rt);
    size_t bytes = (size_t)(rt->lay->state_elems ? rt->lay->state_elems : 1) * sizeof(float);
    rt->state_host = malloc(bytes);
    if (!rt->state_host)
        return DMUON_FAIL(DMUON_ENOMEM, "runtime: out of memory for a %zu-byte host copy of the "
                          "optimizer state", bytes);
    if (copy_out)
        return rt->elem->copy(rt->state_host, rt->state, rt->lay->state_elems * 4, RT_D2H, rt->stream);
    return DMUON_OK;
}

/* Copies the pieces' state back from the host copy (after a load). */
dmuon_rc rt_state_from_host(dmuon_rt *rt)
{
    if (!rt->state_host)
        return DMUON_OK;
    return rt->elem->copy(rt->state, rt->state_host, rt->lay->state_elems * 4, RT_H2D, rt->stream);
}

/* Frees the host copy, unless a communication failure left a call that
 * may still read or write it (kept for good, like the pool). */
void rt_state_drop(dmuon_rt *rt)
{
    if (rt->failed)
        return;
    free(rt->state_host);
    rt->state_host = NULL;
}

/* dmuon_digest of bytes of device memory at p, copied out in chunks (the
 * digest is a byte stream, so the chunks give the same value).  A copy that
 * fails digests what was read so far and a marker, so the value cannot
 * equal a healthy one by accident. */
uint64_t rt_digest_mem(const dmuon_rt *rt, const void *p, int64_t bytes, uint64_t d)
{
    if (rt_on_host(rt))
        return dmuon_digest(p, (size_t)bytes, d);
    unsigned char buf[16384];
    for (int64_t at = 0; at < bytes; at += (int64_t)sizeof buf) {
        int64_t n = bytes - at < (int64_t)sizeof buf ? bytes - at : (int64_t)sizeof buf;
        if (rt->elem->copy(buf, (const unsigned char *)p + at, n, RT_D2H, rt->stream) != DMUON_OK)
            return dmuon_digest("copy failed", 11, d);
        d = dmuon_digest(buf, (size_t)n, d);
    }
    return d;
}
