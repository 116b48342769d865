/*
 * mpi_algo.c — the MPI backend's per-owner, coalesced and equal algorithms
 * (dmuon/collv.h "algorithm"): MPI's own non-blocking collectives over the
 * group's ranges of the symmetric memory, on a duplicate of the scope's
 * communicator (t->world, or t->node at node scope).  A reduction at node
 * scope over more than one node has a second phase: each owner's result is
 * summed along its rail (MPI_Iallreduce in place on a duplicate of t->rail),
 * posted by the poll that sees the first phase complete.
 *
 *   per-owner  AllGatherV: the owner copies its window into its own buffer,
 *              then one MPI_Ibcast per segment rooted at the owner;
 *              ReduceScatterV: one MPI_Ireduce per segment into the owner's
 *              window.  Every segment's call is posted at start.
 *   coalesced  MPI_Iallgatherv (bytes) / MPI_Ireduce_scatter (elements)
 *              over the owner-ordered table: rank r's block is its segments,
 *              back to back from its first one.
 *   equal      MPI_Iallgather / MPI_Ireduce_scatter_block over the even
 *              table (one segment per rank of the scope, equal counts).
 *
 * BF16 sums go through a user-defined MPI operation (dmuon_mpi_bf16_sum),
 * F32 through MPI_SUM; MPI picks the order.  Start posts the calls; test
 * and wait drive them with MPI_Testall and, in the same loop, move every
 * scheduled call in flight on the memory (dmuon_mpi_progress_inflight).  The
 * deadline runs from wait; past it the group is broken (MPI collectives
 * cannot be cancelled: the calls stay posted until the communicator is
 * freed with the group).
 *
 * Invariants: nothing is allocated per call (requests, counts and
 * displacements are made at create); one call in flight per group.
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "dmuon/bf16.h"
#include "mpi_backend.h"
#include "wait.h"

typedef struct {
    MPI_Comm comm;            /* dup of the scope's communicator */
    MPI_Comm rail;            /* node scope, several nodes: dup of t->rail; else NULL */
    int phase;                /* reduce at node scope: 1 while the rail sums run */
    unsigned char *cur_win;   /* the window of the call in flight */
    int me, parts;            /* this rank and the ranks of the scope */
    MPI_Request *req;         /* per-owner: one per segment; else one */
    int nreq;
    int *bytes, *elems;       /* per rank of the scope: its block (coalesced, equal) */
    int *bdispl, *edispl;     /* block starts, from the first segment */
    int64_t first;            /* layer-buffer offset of the first segment */
    int64_t mywin;            /* window offset of this rank's first segment */
    dmuon_dtype dtype;        /* coalesced, equal: the one element type */
    int kind;                 /* call in flight: DMUON_SCHED_GATHER/_REDUCE; -1 none */
    int broken;
} algo_group;

static void bf16_sum_fn(void *in, void *inout, int *len, MPI_Datatype *type)
{
    dmuon_bf16_add(inout, in, inout, (size_t)*len);
}

MPI_Op dmuon_mpi_bf16_sum(void)
{
    static MPI_Op op = MPI_OP_NULL;
    if (op == MPI_OP_NULL)
        MPI_Op_create(bf16_sum_fn, 1, &op);
    return op;
}

static MPI_Datatype elem_type(dmuon_dtype t)
{
    return t == DMUON_BF16 ? MPI_UINT16_T : MPI_FLOAT;
}

static MPI_Op sum_of(dmuon_dtype t)
{
    return t == DMUON_BF16 ? dmuon_mpi_bf16_sum() : MPI_SUM;
}

static const char *op_name(int kind) { return dmuon_mpi_op_name(kind); }

static dmuon_rc mpi_rc(int err, const char *what)
{
    if (err == MPI_SUCCESS)
        return DMUON_OK;
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0, cls = 0;
    MPI_Error_string(err, msg, &len);
    MPI_Error_class(err, &cls);
    if (cls == MPI_ERR_TRUNCATE)   /* the peers' call was larger: calls differ */
        return DMUON_FAIL(DMUON_EMISMATCH, "%s: %s (the ranks' calls differ: another "
                          "operation's size arrived)", what, msg);
    return DMUON_FAIL(DMUON_ECOMM, "%s: %s", what, msg);
}

static dmuon_rc algo_ctrl_bytes(const dmuon_topo *t, const dmuon_segment *segs, int n,
                                const dmuon_group_opts *opts, int64_t *bytes)
{
    *bytes = DMUON_GROUP_CTRL_ALIGN;   /* nothing of its own; non-empty keeps spans uniform */
    return DMUON_OK;
}

static void algo_release(algo_group *a)
{
    if (!a)
        return;
    if (a->comm != MPI_COMM_NULL)
        MPI_Comm_free(&a->comm);
    if (a->rail != MPI_COMM_NULL)
        MPI_Comm_free(&a->rail);
    free(a->req);
    free(a->bytes);
    free(a->elems);
    free(a->bdispl);
    free(a->edispl);
    free(a);
}

static dmuon_rc algo_create(dmuon_group *g)
{
    const dmuon_topo *t = g->topo;
    const int node = g->opts.scope == DMUON_SCOPE_NODE;
    algo_group *a = calloc(1, sizeof *a);
    if (a) {
        a->comm = MPI_COMM_NULL;
        a->rail = MPI_COMM_NULL;
        a->kind = -1;
        a->parts = node ? t->per_node : t->size;
        a->me = node ? t->local : t->rank;
        a->nreq = g->opts.algorithm == DMUON_ALGO_PER_OWNER ? (g->nseg > 0 ? g->nseg : 1) : 1;
        a->req = malloc((size_t)a->nreq * sizeof *a->req);
        a->bytes = calloc((size_t)a->parts, sizeof(int));
        a->elems = calloc((size_t)a->parts, sizeof(int));
        a->bdispl = calloc((size_t)a->parts, sizeof(int));
        a->edispl = calloc((size_t)a->parts, sizeof(int));
    }
    int fail = !a || !a->req || !a->bytes || !a->elems || !a->bdispl || !a->edispl;
    /* the owner-ordered blocks (the table rule was checked in collv.c) */
    int64_t run_b = 0, run_e = 0;
    for (int i = 0; !fail && i < g->nseg; i++) {
        const dmuon_segment *s = &g->segs[i];
        const int64_t sb = s->count * (int64_t)dmuon_dtype_size(s->dtype);
        if (!i) {
            a->first = s->offset;
            a->dtype = s->dtype;
        }
        if (i == 0 || s->owner != g->segs[i - 1].owner) {
            a->bdispl[s->owner] = (int)run_b;
            a->edispl[s->owner] = (int)run_e;
            if (s->owner == a->me)
                a->mywin = s->window_offset;
        }
        run_b += sb;
        run_e += s->count;
        if (run_b > INT_MAX)
            fail = 3;
        else {
            a->bytes[s->owner] += (int)sb;
            a->elems[s->owner] += (int)s->count;
        }
    }
    /* fail: 1 out of memory, 2 MPI_Comm_dup failed, 3 too large (same on every rank) */
    if (!fail)
        fail = MPI_Comm_dup(node ? t->node : t->world, &a->comm) != MPI_SUCCESS ? 2 : 0;
    if (!fail && node && t->nodes > 1)
        fail = MPI_Comm_dup(t->rail, &a->rail) != MPI_SUCCESS ? 2 : 0;
    MPI_Allreduce(MPI_IN_PLACE, &fail, 1, MPI_INT, MPI_MAX, t->world);
    if (fail) {
        algo_release(a);
        const char *an = dmuon_algo_name(g->opts.algorithm);
        if (fail == 3)
            return DMUON_FAIL(DMUON_EINVAL, "group: the %s algorithm: a layer of more than "
                              "2^31 - 1 bytes does not fit MPI's counts", an);
        if (fail == 2)
            return DMUON_FAIL(DMUON_ECOMM, "group: the %s algorithm: MPI_Comm_dup failed on a "
                              "rank", an);
        return DMUON_FAIL(DMUON_ENOMEM, "out of memory creating a group (%s algorithm)", an);
    }
    for (int i = 0; i < a->nreq; i++)
        a->req[i] = MPI_REQUEST_NULL;
    g->impl = a;
    return DMUON_OK;
}

static void algo_free(dmuon_group *g)
{
    algo_release(g->impl);
    g->impl = NULL;
}

static dmuon_rc post(dmuon_group *g, algo_group *a, int kind, unsigned char *buf,
                     unsigned char *win)
{
    const int gather = kind == DMUON_SCHED_GATHER;
    switch (g->opts.algorithm) {
    case DMUON_ALGO_PER_OWNER:
        for (int i = 0; i < g->nseg; i++) {
            const dmuon_segment *s = &g->segs[i];
            const int mine = s->owner == a->me;
            int err;
            if (gather) {
                const int64_t sb = s->count * (int64_t)dmuon_dtype_size(s->dtype);
                if (mine)
                    memcpy(buf + s->offset, win + s->window_offset, (size_t)sb);
                err = MPI_Ibcast(buf + s->offset, (int)sb, MPI_BYTE, s->owner, a->comm,
                                 &a->req[i]);
            } else {
                err = MPI_Ireduce(buf + s->offset, mine ? win + s->window_offset : NULL,
                                  (int)s->count, elem_type(s->dtype), sum_of(s->dtype),
                                  s->owner, a->comm, &a->req[i]);
            }
            DMUON_TRY(mpi_rc(err, gather ? "MPI_Ibcast" : "MPI_Ireduce"));
        }
        return DMUON_OK;
    case DMUON_ALGO_COALESCED:
        if (gather)
            return mpi_rc(MPI_Iallgatherv(win + a->mywin, a->bytes[a->me], MPI_BYTE,
                                          buf + a->first, a->bytes, a->bdispl, MPI_BYTE, a->comm,
                                          &a->req[0]), "MPI_Iallgatherv");
        return mpi_rc(MPI_Ireduce_scatter(buf + a->first, win + a->mywin, a->elems,
                                          elem_type(a->dtype), sum_of(a->dtype), a->comm,
                                          &a->req[0]), "MPI_Ireduce_scatter");
    default:   /* DMUON_ALGO_EQUAL */
        if (gather)
            return mpi_rc(MPI_Iallgather(win + a->mywin, a->bytes[0], MPI_BYTE, buf + a->first,
                                         a->bytes[0], MPI_BYTE, a->comm, &a->req[0]),
                          "MPI_Iallgather");
        return mpi_rc(MPI_Ireduce_scatter_block(buf + a->first, win + a->mywin, a->elems[0],
                                                elem_type(a->dtype), sum_of(a->dtype), a->comm,
                                                &a->req[0]), "MPI_Ireduce_scatter_block");
    }
}

/* The second phase of a node-scope reduction: this rank's results summed
 * along its rail (every rank of a rail owns the same segments). */
static dmuon_rc post_rail(dmuon_group *g, algo_group *a)
{
    int k = 0;
    for (int i = 0; i < g->nseg; i++) {
        const dmuon_segment *s = &g->segs[i];
        if (s->owner != a->me)
            continue;
        DMUON_TRY(mpi_rc(MPI_Iallreduce(MPI_IN_PLACE, a->cur_win + s->window_offset,
                                        (int)s->count, elem_type(s->dtype), sum_of(s->dtype),
                                        a->rail, &a->req[k++]), "MPI_Iallreduce (rail)"));
        if (k == a->nreq)
            break;
    }
    a->phase = 1;
    return DMUON_OK;
}

static dmuon_rc algo_start(dmuon_group *g, int kind, int64_t buffer_offset,
                           int64_t window_offset)
{
    algo_group *a = g->impl;
    DMUON_TRY(dmuon_mpi_call_admit(a->broken, a->kind, kind));
    unsigned char *base = g->mem->base;
    dmuon_rc rc = post(g, a, kind, base + buffer_offset, base + window_offset);
    if (rc != DMUON_OK) {
        a->broken = 1;   /* some calls may be posted: the group cannot be reused */
        return dmuon_err_trace_add(rc, __FILE__, __LINE__);
    }
    a->kind = kind;
    a->phase = 0;
    a->cur_win = base + window_offset;
    return DMUON_OK;
}

static dmuon_rc in_flight(algo_group *a, int kind, const char *what)
{
    if (a->broken)
        return DMUON_FAIL(DMUON_ECOMM, "%s_%s: the group failed in an earlier call and cannot "
                          "be used", op_name(kind), what);
    if (a->kind != kind)
        return DMUON_FAIL(DMUON_EINVAL, "%s_%s: no %s was started on this group",
                          op_name(kind), what, op_name(kind));
    return DMUON_OK;
}

/* One poll of the call's requests (and of the memory's scheduled calls). */
static dmuon_rc poll(dmuon_group *g, algo_group *a, int *done)
{
    int err = MPI_Testall(a->nreq, a->req, done, MPI_STATUSES_IGNORE);
    if (err != MPI_SUCCESS) {
        a->broken = 1;
        return mpi_rc(err, "MPI_Testall");
    }
    if (*done && a->kind == DMUON_SCHED_REDUCE && a->rail != MPI_COMM_NULL && !a->phase) {
        dmuon_rc rc = post_rail(g, a);
        if (rc != DMUON_OK) {
            a->broken = 1;
            return dmuon_err_trace_add(rc, __FILE__, __LINE__);
        }
        *done = 0;
    }
    if (*done)
        a->kind = -1;
    else
        dmuon_mpi_progress_inflight(g->mem);
    return DMUON_OK;
}

static dmuon_rc algo_test(dmuon_group *g, int kind, int *done)
{
    algo_group *a = g->impl;
    *done = 0;
    DMUON_TRY(in_flight(a, kind, "test"));
    DMUON_TRY(poll(g, a, done));
    return DMUON_OK;
}

static dmuon_rc algo_wait(dmuon_group *g, int kind)
{
    algo_group *a = g->impl;
    DMUON_TRY(in_flight(a, kind, "wait"));
    dmuon_waiter w;
    dmuon_waiter_start(&w, g->opts.deadline_ms);
    for (;;) {
        int done = 0;
        DMUON_TRY(poll(g, a, &done));
        if (done)
            return DMUON_OK;
        if (dmuon_waiter_expired(&w)) {
            a->broken = 1;
            return DMUON_FAIL(DMUON_ETIMEOUT, "%s (%s algorithm): rank %d: not complete within "
                              "the %d ms deadline (a peer stalled or died)", op_name(kind),
                              dmuon_algo_name(g->opts.algorithm), g->topo->rank,
                              g->opts.deadline_ms);
        }
        dmuon_waiter_idle(&w);
    }
}

static dmuon_rc algo_allgatherv(dmuon_group *g, int64_t buffer_offset, int64_t window_offset)
{
    DMUON_TRY(algo_start(g, DMUON_SCHED_GATHER, buffer_offset, window_offset));
    DMUON_TRY(algo_wait(g, DMUON_SCHED_GATHER));
    return DMUON_OK;
}

static dmuon_rc algo_reduce_scatterv(dmuon_group *g, int64_t buffer_offset,
                                     int64_t window_offset)
{
    DMUON_TRY(algo_start(g, DMUON_SCHED_REDUCE, buffer_offset, window_offset));
    DMUON_TRY(algo_wait(g, DMUON_SCHED_REDUCE));
    return DMUON_OK;
}

const dmuon_group_ops dmuon_mpi_baseline_ops = {
    .ctrl_bytes = algo_ctrl_bytes,
    .create = algo_create,
    .free = algo_free,
    .allgatherv = algo_allgatherv,
    .reduce_scatterv = algo_reduce_scatterv,
    .start = algo_start,
    .test = algo_test,
    .wait = algo_wait,
};
