/*
 * nccl_collv.c — the NCCL host-API backend (nccl_backend.h): groups,
 * AllGatherV and ReduceScatterV as the paper's line C (the per-owner
 * algorithm, this backend's default), and the equal algorithm.
 *
 * AllGatherV: one ncclBroadcast per segment, root = its owner, from the
 * owner's window (window_offset + segment.window_offset) to every rank's
 * layer buffer (buffer_offset + segment.offset), as bytes.  ReduceScatterV:
 * one ncclReduce per segment (ncclSum, BF16 or F32), root = its owner, from
 * every rank's layer buffer to the owner's window.  All segments of a call go
 * into one ncclGroupStart/ncclGroupEnd on the memory's stream, then the call
 * waits for the stream (deadline: the group's deadline_ms, polling
 * ncclCommGetAsyncError; past it the communicator is aborted and the group
 * is unusable).  NCCL chooses its own reduction order, so ReduceScatterV here
 * equals sched.h's documented order only where every order gives the same
 * bits (integer-valued inputs); FP32 accumulation of BF16 is not offered
 * (DMUON_EUNSUPPORTED at create).
 *
 * Invariants: the schedule of dmuon/sched.h is not used (NCCL routes);
 * nothing is allocated per call; the group keeps no state of its own.
 */
#include "nccl_backend.h"

#include "dmuon/collv.h"

#ifdef DMUON_HAVE_NCCL

#include <stdio.h>
#include <time.h>
#include <unistd.h>

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

dmuon_rc dmuon_nccl_wait(nccl_symm *m, int deadline_ms, const char *what)
{
    const double end = now_ms() + deadline_ms;
    for (;;) {
        cudaError_t e = cudaStreamQuery(m->stream);
        if (e == cudaSuccess)
            return DMUON_OK;
        if (e != cudaErrorNotReady)
            return DMUON_FAIL(DMUON_EDEVICE, "%s: %s", what, cudaGetErrorString(e));
        ncclResult_t async = ncclSuccess;
        ncclCommGetAsyncError(m->comm, &async);
        if (async != ncclSuccess && async != ncclInProgress) {
            dmuon_nccl_comm_forget(m->comm);
            ncclCommAbort(m->comm);
            m->comm = NULL;
            return DMUON_FAIL(DMUON_ECOMM, "%s: NCCL: %s", what, ncclGetErrorString(async));
        }
        if (now_ms() > end) {
            dmuon_nccl_comm_forget(m->comm);
            ncclCommAbort(m->comm);
            m->comm = NULL;
            return DMUON_FAIL(DMUON_ETIMEOUT, "%s: not done after the deadline of %d ms (NCCL "
                              "communicator aborted)", what, deadline_ms);
        }
        usleep(50);
    }
}

static dmuon_rc usable(const nccl_symm *m, const char *what)
{
    if (!m->comm)
        return DMUON_FAIL(DMUON_ECOMM, "%s: the NCCL communicator was aborted by an earlier "
                          "failure", what);
    if (cudaSetDevice(m->device) != cudaSuccess)
        return DMUON_FAIL(DMUON_EDEVICE, "%s: cannot select GPU %d", what, m->device);
    return DMUON_OK;
}

/* -------------------------------------------------------------- groups -- */

dmuon_rc dmuon_nccl_group_ctrl_bytes(const dmuon_topo *t, const dmuon_segment *segs, int n,
                                     const dmuon_group_opts *opts, int64_t *bytes)
{
    *bytes = DMUON_GROUP_CTRL_ALIGN;   /* nothing of its own; a non-empty area keeps spans uniform */
    return DMUON_OK;
}

dmuon_rc dmuon_nccl_group_create(dmuon_group *g)
{
    if (g->opts.fp32_accum)   /* the nccl-dev kernel's scheduled algorithm comes here too */
        return DMUON_FAIL(DMUON_EUNSUPPORTED, "group: the %s backend reduces in NCCL's "
                          "order and precision; FP32 accumulation of BF16 is not offered",
                          g->ops->name);
    g->impl = g->mem->impl;   /* no state of its own (group_free does nothing) */
    return DMUON_OK;
}

void dmuon_nccl_group_free(dmuon_group *g) { g->impl = NULL; }

static ncclDataType_t nccl_type(dmuon_dtype t)
{
    return t == DMUON_BF16 ? ncclBfloat16 : ncclFloat32;
}

dmuon_rc dmuon_nccl_allgatherv(dmuon_group *g, int64_t buffer_offset, int64_t window_offset)
{
    nccl_symm *m = g->mem->impl;
    unsigned char *base = g->mem->base;
    DMUON_TRY(usable(m, "allgatherv"));
    ncclResult_t r = ncclGroupStart();
    for (int i = 0; i < g->nseg && r == ncclSuccess; i++) {
        const dmuon_segment *sg = &g->segs[i];
        const size_t bytes = (size_t)sg->count * dmuon_dtype_size(sg->dtype);
        r = ncclBroadcast(base + window_offset + sg->window_offset, base + buffer_offset + sg->offset,
                          bytes, ncclUint8, sg->owner, m->comm, m->stream);
    }
    ncclResult_t e = ncclGroupEnd();
    if (r != ncclSuccess || e != ncclSuccess)
        return DMUON_FAIL(DMUON_ECOMM, "allgatherv: ncclBroadcast group of %d segments: %s",
                          g->nseg, ncclGetErrorString(r != ncclSuccess ? r : e));
    return dmuon_nccl_wait(m, g->opts.deadline_ms, "allgatherv");
}

dmuon_rc dmuon_nccl_reduce_scatterv(dmuon_group *g, int64_t buffer_offset,
                                    int64_t window_offset)
{
    nccl_symm *m = g->mem->impl;
    unsigned char *base = g->mem->base;
    DMUON_TRY(usable(m, "reducescatterv"));
    ncclResult_t r = ncclGroupStart();
    for (int i = 0; i < g->nseg && r == ncclSuccess; i++) {
        const dmuon_segment *sg = &g->segs[i];
        r = ncclReduce(base + buffer_offset + sg->offset, base + window_offset + sg->window_offset,
                       (size_t)sg->count, nccl_type(sg->dtype), ncclSum, sg->owner, m->comm,
                       m->stream);
    }
    ncclResult_t e = ncclGroupEnd();
    if (r != ncclSuccess || e != ncclSuccess)
        return DMUON_FAIL(DMUON_ECOMM, "reducescatterv: ncclReduce group of %d segments: %s",
                          g->nseg, ncclGetErrorString(r != ncclSuccess ? r : e));
    return dmuon_nccl_wait(m, g->opts.deadline_ms, "reducescatterv");
}

/* The equal algorithm (collv.h; world scope): ncclAllGather of segment
 * 0's bytes per rank from this rank's window into the layer buffer, and
 * ncclReduceScatter of its elements from the layer buffer into this rank's
 * window, on the memory's stream, waited for within the deadline. */
static dmuon_rc equal_create(dmuon_group *g)
{
    if (g->opts.scope != DMUON_SCOPE_WORLD)
        return DMUON_FAIL(DMUON_EUNSUPPORTED, "group: the equal algorithm over one node is not "
                          "offered by the %s backend (world scope only)", g->ops->name);
    return dmuon_nccl_group_create(g);
}

static dmuon_rc equal_allgatherv(dmuon_group *g, int64_t buffer_offset, int64_t window_offset)
{
    nccl_symm *m = g->mem->impl;
    const dmuon_segment *s0 = &g->segs[0], *mine = &g->segs[g->topo->rank];
    unsigned char *base = g->mem->base;
    DMUON_TRY(usable(m, "allgatherv"));
    ncclResult_t r = ncclAllGather(base + window_offset + mine->window_offset,
                                   base + buffer_offset + s0->offset,
                                   (size_t)s0->count * dmuon_dtype_size(s0->dtype), ncclUint8,
                                   m->comm, m->stream);
    if (r != ncclSuccess)
        return DMUON_FAIL(DMUON_ECOMM, "allgatherv (equal): ncclAllGather: %s",
                          ncclGetErrorString(r));
    return dmuon_nccl_wait(m, g->opts.deadline_ms, "allgatherv (equal)");
}

static dmuon_rc equal_reduce_scatterv(dmuon_group *g, int64_t buffer_offset,
                                      int64_t window_offset)
{
    nccl_symm *m = g->mem->impl;
    const dmuon_segment *s0 = &g->segs[0], *mine = &g->segs[g->topo->rank];
    unsigned char *base = g->mem->base;
    DMUON_TRY(usable(m, "reducescatterv"));
    ncclResult_t r = ncclReduceScatter(base + buffer_offset + s0->offset,
                                       base + window_offset + mine->window_offset,
                                       (size_t)s0->count, nccl_type(s0->dtype), ncclSum, m->comm,
                                       m->stream);
    if (r != ncclSuccess)
        return DMUON_FAIL(DMUON_ECOMM, "reducescatterv (equal): ncclReduceScatter: %s",
                          ncclGetErrorString(r));
    return dmuon_nccl_wait(m, g->opts.deadline_ms, "reducescatterv (equal)");
}

/* Per-owner: one ncclBroadcast / ncclReduce per segment, grouped (the
 * backend's default).  Blocking only: the split-phase entries are NULL. */
static const dmuon_group_ops per_owner_ops = {
    .ctrl_bytes = dmuon_nccl_group_ctrl_bytes,
    .create = dmuon_nccl_group_create,
    .free = dmuon_nccl_group_free,
    .allgatherv = dmuon_nccl_allgatherv,
    .reduce_scatterv = dmuon_nccl_reduce_scatterv,
};

static const dmuon_group_ops equal_ops = {
    .ctrl_bytes = dmuon_nccl_group_ctrl_bytes,
    .create = equal_create,
    .free = dmuon_nccl_group_free,
    .allgatherv = equal_allgatherv,
    .reduce_scatterv = equal_reduce_scatterv,
};

/* Entries left NULL (the scheduled and coalesced algorithms, split phase,
 * publish) are not offered: the public layer says so (backend.h). */
const dmuon_comm_ops dmuon_nccl_ops = {
    .name = "nccl",
    .on_device = 1,
    .symm_alloc = dmuon_nccl_symm_alloc,
    .symm_free = dmuon_nccl_symm_free,
    .symm_put = dmuon_nccl_symm_put,
    .symm_get = dmuon_nccl_symm_get,
    .default_algo = DMUON_ALGO_PER_OWNER,
    .group = {
        [DMUON_ALGO_PER_OWNER] = &per_owner_ops,
        [DMUON_ALGO_EQUAL] = &equal_ops,
    },
};

#endif
