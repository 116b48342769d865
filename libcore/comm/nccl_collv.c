/*
 * nccl_collv.c — the NCCL host-API backend (nccl_backend.h): groups of the
 * per-owner algorithm (the paper's line C, this backend's default), the
 * coalesced one (world scope) and the equal one, at world and node scope,
 * blocking and split phase; and the backend's ops table.
 *
 * Per-owner AllGatherV: one ncclBroadcast per segment, root = its owner,
 * from the owner's window (window_offset + segment.window_offset) to every
 * rank's layer buffer (buffer_offset + segment.offset), as bytes.
 * ReduceScatterV: one ncclReduce per segment (ncclSum, BF16 or F32), root =
 * its owner, from every rank's layer buffer to the owner's window.  Equal:
 * ncclAllGather of segment 0's bytes per rank from this rank's window into
 * the layer buffer, ncclReduceScatter of its elements from the layer buffer
 * into this rank's window.  Coalesced: per-owner over each owner's run of
 * back-to-back segments (one call per owner).  World scope runs over the data communicator;
 * node scope over the node communicator (owners are local ranks), and its
 * ReduceScatterV then sums each owned segment along the rail (ncclAllReduce
 * in place on the rail communicator, a second NCCL group on the same stream)
 * so every node's owner holds the world sum (dmuon/collv.h "Scope").
 *
 * Every call: the segments of one step go into one ncclGroupStart/End on the
 * memory's stream (dmuon_symm_stream), then a CUDA event is recorded after
 * them.  start returns there; test queries the event (cudaEventQuery and
 * ncclCommGetAsyncError); wait polls it until the group's deadline_ms, past
 * which every communicator of the memory is aborted (ncclCommAbort) and the
 * call returns DMUON_ETIMEOUT.  The blocking calls are start + wait.  NCCL
 * chooses its own reduction order, so ReduceScatterV equals sched.h's
 * documented order only where every order gives the same bits
 * (integer-valued inputs).  Compiled only: no GPU has run this file.
 *
 * Invariants: the schedule of dmuon/sched.h is not used (NCCL routes);
 * nothing is allocated per call; at most one call per group is in flight
 * (inflight is its kind, −1 when none).
 */
#include "nccl_backend.h"

#include "dmuon/collv.h"
#include "dmuon/ctl.h"

#ifdef DMUON_HAVE_NCCL

#include <stdlib.h>

typedef struct nccl_group nccl_group;
/* Enqueues one call of kind (DMUON_SCHED_GATHER / _REDUCE) on the stream. */
typedef dmuon_rc (*enqueue_fn)(dmuon_group *g, int kind, int64_t buffer_offset,
                               int64_t window_offset);

struct nccl_group {
    enqueue_fn enqueue;
    cudaEvent_t ev;           /* recorded after each call's work */
    int inflight;             /* kind of the call in flight, −1 none */
};

static ncclDataType_t nccl_type(dmuon_dtype t)
{
    return t == DMUON_BF16 ? ncclBfloat16 : ncclFloat32;
}

static const char *op_name(int kind)
{
    return kind == DMUON_SCHED_GATHER ? "allgatherv" : "reducescatterv";
}

/* The result of an NCCL group (r: the first failing call inside, e: the
 * group end); a failure aborts the memory's communicators (part of the call
 * may be enqueued: the peers then fail at their deadline). */
static dmuon_rc group_done(nccl_symm *m, ncclResult_t r, ncclResult_t e, const char *what,
                           const char *calls)
{
    if (r == ncclSuccess && e == ncclSuccess)
        return DMUON_OK;
    dmuon_nccl_comms_abort(m->cs);
    return DMUON_FAIL(DMUON_ECOMM, "%s: %s: %s (NCCL communicators aborted)", what, calls,
                      ncclGetErrorString(r != ncclSuccess ? r : e));
}

/* Node scope, ReduceScatterV: the segments this rank's column owns, summed
 * along the rail in place in the window. */
static dmuon_rc rail_sum(dmuon_group *g, int64_t window_offset)
{
    nccl_symm *m = g->mem->impl;
    const dmuon_topo *t = g->topo;
    if (g->opts.scope != DMUON_SCOPE_NODE || t->nodes == 1)
        return DMUON_OK;
    unsigned char *base = g->mem->base;
    ncclResult_t r = ncclGroupStart();
    for (int i = 0; i < g->nseg && r == ncclSuccess; i++) {
        const dmuon_segment *sg = &g->segs[i];
        if (sg->owner != t->local)
            continue;
        void *w = base + window_offset + sg->window_offset;
        r = ncclAllReduce(w, w, (size_t)sg->count, nccl_type(sg->dtype), ncclSum, m->cs->rail,
                          m->stream);
    }
    return group_done(m, r, ncclGroupEnd(), "reducescatterv", "ncclAllReduce along the rail");
}

static dmuon_rc per_owner_enqueue(dmuon_group *g, int kind, int64_t buffer_offset,
                                  int64_t window_offset)
{
    nccl_symm *m = g->mem->impl;
    ncclComm_t c = g->opts.scope == DMUON_SCOPE_NODE ? m->cs->node : m->cs->world;
    unsigned char *base = g->mem->base;
    ncclResult_t r = ncclGroupStart();
    for (int i = 0; i < g->nseg && r == ncclSuccess; i++) {
        const dmuon_segment *sg = &g->segs[i];
        unsigned char *buf = base + buffer_offset + sg->offset;
        unsigned char *win = base + window_offset + sg->window_offset;
        r = kind == DMUON_SCHED_GATHER
          ? ncclBroadcast(win, buf, (size_t)sg->count * dmuon_dtype_size(sg->dtype), ncclUint8,
                          sg->owner, c, m->stream)
          : ncclReduce(buf, win, (size_t)sg->count, nccl_type(sg->dtype), ncclSum, sg->owner, c,
                       m->stream);
    }
    DMUON_TRY(group_done(m, r, ncclGroupEnd(), op_name(kind),
                         kind == DMUON_SCHED_GATHER ? "ncclBroadcast per segment"
                                                    : "ncclReduce per segment"));
    return kind == DMUON_SCHED_REDUCE ? rail_sum(g, window_offset) : DMUON_OK;
}

/* Coalesced (an owner-ordered table, one element type, world scope): one
 * ncclBroadcast / ncclReduce per owner over its run of back-to-back
 * segments, all in one NCCL group: the variable-length call as NCCL has
 * it (NCCL has no allgatherv of its own). */
static dmuon_rc coalesced_enqueue(dmuon_group *g, int kind, int64_t buffer_offset,
                                  int64_t window_offset)
{
    nccl_symm *m = g->mem->impl;
    unsigned char *base = g->mem->base;
    ncclResult_t r = ncclGroupStart();
    for (int i = 0, j; i < g->nseg && r == ncclSuccess; i = j) {
        const dmuon_segment *sg = &g->segs[i];
        int64_t count = 0;
        for (j = i; j < g->nseg && g->segs[j].owner == sg->owner; j++)
            count += g->segs[j].count;
        unsigned char *buf = base + buffer_offset + sg->offset;
        unsigned char *win = base + window_offset + sg->window_offset;
        r = kind == DMUON_SCHED_GATHER
          ? ncclBroadcast(win, buf, (size_t)count * dmuon_dtype_size(sg->dtype), ncclUint8,
                          sg->owner, m->cs->world, m->stream)
          : ncclReduce(buf, win, (size_t)count, nccl_type(sg->dtype), ncclSum, sg->owner,
                       m->cs->world, m->stream);
    }
    return group_done(m, r, ncclGroupEnd(), op_name(kind),
                      kind == DMUON_SCHED_GATHER ? "ncclBroadcast per owner"
                                                 : "ncclReduce per owner");
}

static dmuon_rc equal_enqueue(dmuon_group *g, int kind, int64_t buffer_offset,
                              int64_t window_offset)
{
    nccl_symm *m = g->mem->impl;
    const int node = g->opts.scope == DMUON_SCOPE_NODE;
    ncclComm_t c = node ? m->cs->node : m->cs->world;
    const dmuon_segment *s0 = &g->segs[0], *mine = &g->segs[node ? g->topo->local : g->topo->rank];
    unsigned char *buf = g->mem->base + buffer_offset + s0->offset;
    unsigned char *win = g->mem->base + window_offset + mine->window_offset;
    ncclResult_t r = kind == DMUON_SCHED_GATHER
        ? ncclAllGather(win, buf, (size_t)s0->count * dmuon_dtype_size(s0->dtype), ncclUint8, c,
                        m->stream)
        : ncclReduceScatter(buf, win, (size_t)s0->count, nccl_type(s0->dtype), ncclSum, c,
                            m->stream);
    DMUON_TRY(group_done(m, r, ncclSuccess, op_name(kind),
                         kind == DMUON_SCHED_GATHER ? "ncclAllGather" : "ncclReduceScatter"));
    return kind == DMUON_SCHED_REDUCE ? rail_sum(g, window_offset) : DMUON_OK;
}

/* -------------------------------------------------------------- groups -- */

dmuon_rc dmuon_nccl_group_ctrl_bytes(const dmuon_topo *t, const dmuon_segment *segs, int n,
                                     const dmuon_group_opts *opts, int64_t *bytes)
{
    *bytes = DMUON_GROUP_CTRL_ALIGN;   /* nothing of its own; a non-empty area keeps spans uniform */
    return DMUON_OK;
}

static void group_free(dmuon_group *g)
{
    nccl_group *x = g->impl;
    if (x && x->ev)
        cudaEventDestroy(x->ev);   /* released once pending work completes */
    free(x);
    g->impl = NULL;
}

/* One create for every algorithm: the enqueue of g's algorithm. */
static dmuon_rc group_create(dmuon_group *g)
{
    nccl_group *x = calloc(1, sizeof *x);
    g->impl = x;
    nccl_symm *m = g->mem->impl;
    dmuon_rc rc = x ? dmuon_nccl_event_new(m, &x->ev, "group")
                    : DMUON_FAIL(DMUON_ENOMEM, "group: out of memory");
    if (g->opts.scope == DMUON_SCOPE_NODE)   /* the same on every rank */
        rc = dmuon_nccl_comms_split(g->topo, m->cs, rc, g->opts.deadline_ms);
    if (x) {
        const dmuon_algo a = g->opts.algorithm;
        x->enqueue = a == DMUON_ALGO_EQUAL       ? equal_enqueue
                   : a == DMUON_ALGO_COALESCED   ? coalesced_enqueue
                                                 : per_owner_enqueue;
        x->inflight = -1;
    }
    rc = dmuon_ctl_topo_agree(g->topo, rc, g->opts.deadline_ms);
    if (rc != DMUON_OK)
        group_free(g);
    return rc;
}

static dmuon_rc group_start(dmuon_group *g, int kind, int64_t buffer_offset,
                            int64_t window_offset)
{
    nccl_group *x = g->impl;
    nccl_symm *m = g->mem->impl;
    const char *what = op_name(kind);
    if (x->inflight >= 0)
        return DMUON_FAIL(DMUON_EINVAL, "%s: a %s of this group is still in flight (wait for it "
                          "first)", what, op_name(x->inflight));
    DMUON_TRY(dmuon_nccl_usable(m->cs, what));
    DMUON_TRY(x->enqueue(g, kind, buffer_offset, window_offset));
    DMUON_TRY(dmuon_nccl_event_record(x->ev, m, what));
    x->inflight = kind;
    return DMUON_OK;
}

static dmuon_rc in_flight(const nccl_group *x, int kind, const char *call)
{
    if (x->inflight != kind)
        return DMUON_FAIL(DMUON_EINVAL, "%s_%s: nothing started on this group", op_name(kind),
                          call);
    return DMUON_OK;
}

static dmuon_rc group_test(dmuon_group *g, int kind, int *done)
{
    nccl_group *x = g->impl;
    nccl_symm *m = g->mem->impl;
    DMUON_TRY(in_flight(x, kind, "test"));
    int d = 0;
    dmuon_rc rc = dmuon_nccl_event_test(x->ev, m->cs, &d, op_name(kind));
    if (rc != DMUON_OK || d)
        x->inflight = -1;
    *done = rc == DMUON_OK && d;
    return rc;
}

static dmuon_rc group_wait(dmuon_group *g, int kind)
{
    nccl_group *x = g->impl;
    nccl_symm *m = g->mem->impl;
    DMUON_TRY(in_flight(x, kind, "wait"));
    x->inflight = -1;
    return dmuon_nccl_event_wait(x->ev, m->cs, g->opts.deadline_ms, op_name(kind));
}

static dmuon_rc group_allgatherv(dmuon_group *g, int64_t buffer_offset, int64_t window_offset)
{
    DMUON_TRY(group_start(g, DMUON_SCHED_GATHER, buffer_offset, window_offset));
    return group_wait(g, DMUON_SCHED_GATHER);
}

static dmuon_rc group_reduce_scatterv(dmuon_group *g, int64_t buffer_offset,
                                      int64_t window_offset)
{
    DMUON_TRY(group_start(g, DMUON_SCHED_REDUCE, buffer_offset, window_offset));
    return group_wait(g, DMUON_SCHED_REDUCE);
}

/* Every algorithm of the backend shares these entries (the algorithm's
 * enqueue is chosen at create). */
static const dmuon_group_ops group_ops = {
    .ctrl_bytes = dmuon_nccl_group_ctrl_bytes,
    .create = group_create,
    .free = group_free,
    .allgatherv = group_allgatherv,
    .reduce_scatterv = group_reduce_scatterv,
    .start = group_start,
    .test = group_test,
    .wait = group_wait,
};

/* Entries left NULL (the scheduled algorithm, the scheduled
 * publish) are not offered: the public layer says so (backend.h). */
const dmuon_comm_ops dmuon_nccl_ops = {
    .name = "nccl",
    .on_device = 1,
    .symm_alloc = dmuon_nccl_symm_alloc,
    .symm_free = dmuon_nccl_symm_free,
    .symm_put = dmuon_nccl_symm_put,
    .symm_get = dmuon_nccl_symm_get,
    .symm_stream = dmuon_nccl_symm_stream,
    .symm_set_stream = dmuon_nccl_symm_set_stream,
    .default_algo = DMUON_ALGO_PER_OWNER,
    .group = {
        [DMUON_ALGO_PER_OWNER] = &group_ops,
        [DMUON_ALGO_COALESCED] = &group_ops,
        [DMUON_ALGO_EQUAL] = &group_ops,
    },
    .publish = {
        [DMUON_ALGO_PER_OWNER] = &dmuon_nccl_publish_per_owner_ops,
    },
};

#endif
