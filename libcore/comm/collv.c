/*
 * collv.c — groups and the AllGatherV / ReduceScatterV executors of the MPI
 * backend (dmuon/collv.h), running the schedule of dmuon/sched.h.
 *
 * Layout of each rank's part of the node-shared window (same on every rank):
 *   [0, 64)              arrive: sequence number of the last call entered
 *   [64, 128)            (reserved)
 *   [128, 192)           landed: bytes gathered into this rank's buffer
 *   [192, 256)           read:   bytes read from this rank's owner window
 *   [256, 320)           grad_read: bytes of this rank's buffer reduced
 *   [320, 384)           summed: bytes of final sums written into its window
 *   [384, 384 + B)       layer buffer (B rounded up to 64 bytes)
 *   [384 + B, … + W)     owner window
 * Sequence numbers increase by one per call on every rank and are never
 * reset.  A call stores arrive = seq (release); it reads a peer's input only
 * after that peer shows arrive ≥ seq (acquire), and writes into the node's
 * buffers only once every rank of the node does (ReduceScatterV waits for
 * the whole node first; AllGatherV starts with the owners it needs and
 * catches up on the stores).  Neither waits for the whole node at the end;
 * they count bytes instead.  AllGatherV: whoever stores a chunk into a
 * rank's buffer adds its bytes to that rank's `landed`, whoever copies a
 * chunk out of an owner's window adds to the owner's `read`.
 * ReduceScatterV: whoever sums a chunk adds its bytes to the `grad_read` of
 * every rank it read, whoever writes a final sum adds to the owner's
 * `summed`.  A rank returns when its own sends are done and its counters
 * have grown by this call's known totals: everything meant for its memory
 * has landed and nobody still reads it; the other ranks' sends are not
 * waited for.
 *
 * Across nodes the rank of rail s serves one queue per source node (the
 * group's own duplicate of the rail communicator, tag = kind·R + queue).  A
 * queue is walked strictly in order (MPI's non-overtaking order matches the
 * i-th message of a queue to the i-th receive), queues in whichever order
 * they become ready: local chunks at once, upstream chunks on arrival.
 * Gather receives land directly in the layer buffer; reduce partials land in
 * `slots` staging buffers per incoming stream, re-posted as they are
 * consumed (the ring buffer of paper C.2).
 */
#include "dmuon/collv.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dmuon/bf16.h"
#include "wait.h"

#define CTRL_BYTES 384
/* control words, 64 bytes apart */
enum { W_ARRIVE = 0, W_RESERVED, W_LANDED, W_READ, W_GRAD_READ, W_SUMMED };
#define ALIGN64(x) (((x) + 63) & ~(int64_t)63)

/* One queue as seen by this rank. */
typedef struct {
    int q;                      /* source node (gather) / owner node (reduce) */
    const dmuon_chunk *chunks;
    int n;
    int nin, nout;
    int *in, *out;              /* node ids, R entries each */
    /* per-call state */
    int next;                   /* chunks done */
    int stored;                 /* gather: chunks stored into the node's buffers */
    MPI_Request *rreq;          /* gather: n; reduce: nin × slots */
    unsigned char *rbuf;        /* reduce: nin × slots × slot_bytes */
    MPI_Request *sreq;          /* gather: n × nout; reduce: slots */
    unsigned char *sbuf;        /* reduce: slots × slot_bytes */
} queue_state;

struct dmuon_group {
    const dmuon_topo *topo;
    MPI_Comm rail;              /* duplicate of topo->rail */
    dmuon_segment *segs;
    int nseg;
    dmuon_sched sched[2];
    queue_state *qs[2];         /* R queues per kind */
    int *route_mem;
    int64_t buffer_bytes, window_bytes, stride;
    MPI_Win win;
    int win_locked;
    unsigned char *base;        /* this rank's part */
    unsigned char **peer;       /* K node peers' parts */
    int deadline_ms, slots, fp32_accum, rsv_ok;
    int64_t slot_bytes;
    float *tmp;                 /* chunk-sized binary32 scratch */
    uint64_t seq;
    uint64_t gathers;           /* AllGatherV calls so far */
    uint64_t reduces;           /* ReduceScatterV calls so far */
    int64_t layer_seg_bytes;    /* bytes of all segments */
    int64_t owned_bytes;        /* bytes of this rank's segments */
    int broken;
    MPI_Request *req_mem;
    unsigned char *stage_mem;
};

/* ---------------------------------------------------------- waiting ---- */

dmuon_rc dmuon_deadline_ms(int opt_ms, int *out)
{
    if (opt_ms > 0) {
        *out = opt_ms;
        return DMUON_OK;
    }
    const char *env = getenv("DMUON_DEADLINE_MS");
    if (env && *env) {
        char *end = NULL;
        errno = 0;
        long v = strtol(env, &end, 10);
        if (errno || *end || v < 1 || v > INT_MAX)
            return DMUON_FAIL(DMUON_EINVAL, "DMUON_DEADLINE_MS '%s': expected a positive "
                              "number of milliseconds", env);
        *out = (int)v;
        return DMUON_OK;
    }
    *out = DMUON_DEADLINE_MS_DEFAULT;
    return DMUON_OK;
}

static volatile uint64_t *ctrl_word(const dmuon_group *g, int local, int which)
{
    return (volatile uint64_t *)(g->peer[local] + 64 * which);
}

/* Waits until every rank of the node has entered this call. */
static dmuon_rc node_wait(dmuon_group *g, const char *op, dmuon_waiter *w)
{
    const dmuon_topo *t = g->topo;
    for (int j = 0; j < t->per_node; j++) {
        while (__atomic_load_n(ctrl_word(g, j, W_ARRIVE), __ATOMIC_ACQUIRE) < g->seq) {
            if (dmuon_waiter_expired(w))
                return DMUON_FAIL(DMUON_ETIMEOUT, "%s: rank %d of this node (node %d) did not "
                                  "enter call %llu within the %d ms deadline", op,
                                  dmuon_topo_rank_of(t->per_node, t->node_id, j), t->node_id,
                                  (unsigned long long)g->seq, g->deadline_ms);
            dmuon_waiter_idle(w);
        }
    }
    MPI_Win_sync(g->win);
    return DMUON_OK;
}

/* Announces that this rank entered the call (its inputs are in place). */
static void node_post(dmuon_group *g)
{
    MPI_Win_sync(g->win);
    __atomic_store_n(ctrl_word(g, g->topo->local, W_ARRIVE), g->seq, __ATOMIC_RELEASE);
}

/* ------------------------------------------------------------ group ---- */

static void seg_encode(const dmuon_segment *s, int64_t v[5])
{
    v[0] = s->owner;
    v[1] = s->dtype;
    v[2] = s->offset;
    v[3] = s->count;
    v[4] = s->window_offset;
}

/* Exchanges table digests; on disagreement finds the first segment that
 * differs from rank 0's table and fails on every rank. */
dmuon_rc dmuon_table_agree(MPI_Comm comm, const dmuon_segment *segs, int n)
{
    int rank, size;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    uint64_t mine = dmuon_table_digest(segs, n);
    uint64_t *all = malloc((size_t)size * sizeof *all);
    int bad_alloc = !all, any = 0;
    MPI_Allreduce(MPI_IN_PLACE, &bad_alloc, 1, MPI_INT, MPI_MAX, comm);
    if (bad_alloc) {
        free(all);
        return DMUON_FAIL(DMUON_ENOMEM, "out of memory exchanging table digests");
    }
    MPI_Allgather(&mine, 1, MPI_UINT64_T, all, 1, MPI_UINT64_T, comm);
    for (int i = 1; i < size; i++)
        any |= all[i] != all[0];
    free(all);
    if (!any)
        return DMUON_OK;

    int n0 = n;
    MPI_Bcast(&n0, 1, MPI_INT, 0, comm);
    int64_t *ref = malloc(((size_t)n0 * 5 + 1) * sizeof *ref);
    bad_alloc = !ref;
    MPI_Allreduce(MPI_IN_PLACE, &bad_alloc, 1, MPI_INT, MPI_MAX, comm);
    if (bad_alloc) {
        free(ref);
        return DMUON_FAIL(DMUON_ENOMEM, "out of memory comparing segment tables");
    }
    if (rank == 0)
        for (int i = 0; i < n0; i++)
            seg_encode(&segs[i], ref + 5 * i);
    MPI_Bcast(ref, n0 * 5, MPI_INT64_T, 0, comm);
    int first = INT_MAX;
    int lim = n < n0 ? n : n0;
    for (int i = 0; i < lim && first == INT_MAX; i++) {
        int64_t v[5];
        seg_encode(&segs[i], v);
        if (memcmp(v, ref + 5 * i, sizeof v))
            first = i;
    }
    if (first == INT_MAX && n != n0)
        first = lim;
    struct { int idx, rank; } loc = {first, rank}, glob;
    MPI_Allreduce(&loc, &glob, 1, MPI_2INT, MPI_MINLOC, comm);
    /* Every rank reports the differing rank's segment (sent by that rank)
     * next to rank 0's, so the message is the same everywhere and shows the
     * two segments that actually differ. */
    int64_t theirs[6] = {0};   /* has-segment flag, then the encoded segment */
    int theirs_n = n;
    if (rank == glob.rank && glob.idx < n) {
        theirs[0] = 1;
        seg_encode(&segs[glob.idx], theirs + 1);
    }
    MPI_Bcast(theirs, 6, MPI_INT64_T, glob.rank, comm);
    MPI_Bcast(&theirs_n, 1, MPI_INT, glob.rank, comm);
    char what[320] = "";
    if (theirs[0]) {
        const int64_t *v = theirs + 1;
        snprintf(what, sizeof what, "; rank %d's segment %d is {owner %lld, %s, offset %lld, "
                 "count %lld, window_offset %lld}", glob.rank, glob.idx, (long long)v[0],
                 dmuon_dtype_name((dmuon_dtype)v[1]), (long long)v[2], (long long)v[3],
                 (long long)v[4]);
    } else {
        snprintf(what, sizeof what, "; rank %d's table has only %d segments", glob.rank,
                 theirs_n);
    }
    if (glob.idx < n0) {
        const int64_t *v = ref + 5 * glob.idx;
        size_t l = strlen(what);
        snprintf(what + l, sizeof what - l, ", rank 0's is {owner %lld, %s, offset %lld, "
                 "count %lld, window_offset %lld}", (long long)v[0],
                 dmuon_dtype_name((dmuon_dtype)v[1]), (long long)v[2], (long long)v[3],
                 (long long)v[4]);
    } else {
        size_t l = strlen(what);
        snprintf(what + l, sizeof what - l, ", rank 0's table has only %d segments", n0);
    }
    free(ref);
    return DMUON_FAIL(DMUON_EMISMATCH, "segment tables differ across ranks: first difference "
                      "at segment %d (rank %d against rank 0; %d and %d segments)%s",
                      glob.idx, glob.rank, theirs_n, n0, what);
}

void *dmuon_group_buffer(const dmuon_group *g) { return g->base + CTRL_BYTES; }
int64_t dmuon_group_buffer_bytes(const dmuon_group *g) { return g->buffer_bytes; }
void *dmuon_group_window(const dmuon_group *g)
{
    return g->base + CTRL_BYTES + ALIGN64(g->buffer_bytes);
}
int64_t dmuon_group_window_bytes(const dmuon_group *g) { return g->window_bytes; }
const dmuon_sched *dmuon_group_sched(const dmuon_group *g, dmuon_sched_kind kind)
{
    return &g->sched[kind];
}

static unsigned char *peer_buffer(const dmuon_group *g, int local)
{
    return g->peer[local] + CTRL_BYTES;
}

static unsigned char *peer_window(const dmuon_group *g, int local)
{
    return g->peer[local] + CTRL_BYTES + ALIGN64(g->buffer_bytes);
}

dmuon_rc dmuon_group_create(const dmuon_topo *t, const dmuon_segment *segs, int n,
                            const dmuon_group_opts *opts, dmuon_group **out)
{
    dmuon_rc rc = DMUON_OK;
    *out = NULL;
    dmuon_group_opts o = {0};
    if (opts)
        o = *opts;
    dmuon_group *g = calloc(1, sizeof *g);
    int fail = !g;
    MPI_Allreduce(MPI_IN_PLACE, &fail, 1, MPI_INT, MPI_MAX, t->world);
    if (fail) {
        free(g);
        return DMUON_FAIL(DMUON_ENOMEM, "out of memory creating a group");
    }
    g->topo = t;
    g->rail = MPI_COMM_NULL;
    g->win = MPI_WIN_NULL;
    DMUON_TRY_GOTO(rc, dmuon_table_agree(t->world, segs, n), fail);
    /* From here on every rank holds the same table, so table-driven
     * decisions agree without another exchange. */
    DMUON_TRY_GOTO(rc, dmuon_table_check(segs, n, t->size, &g->buffer_bytes, &g->window_bytes),
                   fail);
    DMUON_TRY_GOTO(rc, dmuon_deadline_ms(o.deadline_ms, &g->deadline_ms), fail);
    DMUON_TRY_GOTO(rc, dmuon_chunk_bytes_check(o.chunk_bytes), fail);
    g->slots = o.slots > 0 ? o.slots : 4;
    for (int i = 0; i < n; i++) {
        int64_t b = segs[i].count * (int64_t)dmuon_dtype_size(segs[i].dtype);
        g->layer_seg_bytes += b;
        if (segs[i].owner == t->rank)
            g->owned_bytes += b;
    }
    g->fp32_accum = o.fp32_accum != 0;
    g->rsv_ok = 1;
    for (int i = 0; i < n; i++)
        if (segs[i].dtype != DMUON_BF16 && segs[i].dtype != DMUON_F32)
            g->rsv_ok = 0;
    dmuon_sched_opts so = {o.path, o.chunk_bytes, o.star_max_bytes};
    DMUON_TRY_GOTO(rc, dmuon_sched_init(&g->sched[0], segs, n, t->nodes, t->per_node,
                                        DMUON_SCHED_GATHER, &so), fail);
    DMUON_TRY_GOTO(rc, dmuon_sched_init(&g->sched[1], segs, n, t->nodes, t->per_node,
                                        DMUON_SCHED_REDUCE, &so), fail);

    /* Local allocations; agreed below so a failure on one rank fails all. */
    int R = t->nodes, K = t->per_node;
    g->nseg = n;
    g->segs = malloc((n ? (size_t)n : 1) * sizeof *g->segs);
    g->qs[0] = calloc((size_t)R, sizeof(queue_state));
    g->qs[1] = calloc((size_t)R, sizeof(queue_state));
    g->route_mem = malloc((size_t)4 * R * R * sizeof(int));
    g->peer = calloc((size_t)K, sizeof *g->peer);
    g->slot_bytes = g->sched[0].chunk_bytes * 2;   /* bf16 chunk carried as binary32 */
    g->tmp = malloc((size_t)g->slot_bytes * 2);
    fail = !g->segs || !g->qs[0] || !g->qs[1] || !g->route_mem || !g->peer || !g->tmp;
    size_t nreq = 0, nstage = 0;
    if (!fail) {
        memcpy(g->segs, segs, (size_t)n * sizeof *segs);
        for (int kind = 0; kind < 2; kind++)
            for (int q = 0; q < R; q++) {
                queue_state *qs = &g->qs[kind][q];
                qs->q = q;
                qs->chunks = dmuon_sched_queue(&g->sched[kind], q, t->local, &qs->n);
                qs->in = g->route_mem + (size_t)((kind * R + q) * 2) * R;
                qs->out = qs->in + R;
                qs->nin = dmuon_sched_route(&g->sched[kind], q, t->node_id, qs->in, qs->out,
                                            &qs->nout);
                if (kind == 0) {
                    nreq += (size_t)qs->n * (1 + qs->nout);
                } else {
                    nreq += (size_t)g->slots * (qs->nin + 1);
                    nstage += (size_t)g->slots * (qs->nin + 1);
                }
            }
        g->req_mem = malloc((nreq ? nreq : 1) * sizeof(MPI_Request));
        g->stage_mem = malloc((nstage ? nstage : 1) * (size_t)g->slot_bytes);
        fail = !g->req_mem || !g->stage_mem;
    }
    MPI_Allreduce(MPI_IN_PLACE, &fail, 1, MPI_INT, MPI_MAX, t->world);
    if (fail) {
        rc = DMUON_FAIL(DMUON_ENOMEM, "out of memory creating a group of %d segments", n);
        goto fail;
    }
    for (size_t i = 0; i < nreq; i++)
        g->req_mem[i] = MPI_REQUEST_NULL;
    {
        MPI_Request *r = g->req_mem;
        unsigned char *st = g->stage_mem;
        for (int kind = 0; kind < 2; kind++)
            for (int q = 0; q < R; q++) {
                queue_state *qs = &g->qs[kind][q];
                if (kind == 0) {
                    qs->rreq = r;
                    r += qs->n;
                    qs->sreq = r;
                    r += (size_t)qs->n * qs->nout;
                } else {
                    qs->rreq = r;
                    r += (size_t)g->slots * qs->nin;
                    qs->sreq = r;
                    r += g->slots;
                    qs->rbuf = st;
                    st += (size_t)g->slots * qs->nin * g->slot_bytes;
                    qs->sbuf = st;
                    st += (size_t)g->slots * g->slot_bytes;
                }
            }
    }

    if (MPI_Comm_dup(t->rail, &g->rail) != MPI_SUCCESS) {
        rc = DMUON_FAIL(DMUON_ECOMM, "MPI_Comm_dup of the rail communicator failed");
        goto fail;
    }
    g->stride = CTRL_BYTES + ALIGN64(g->buffer_bytes) + ALIGN64(g->window_bytes);
    MPI_Info info;
    MPI_Info_create(&info);
    MPI_Info_set(info, "alloc_shared_noncontig", "true");
    void *base = NULL;
    int mrc = MPI_Win_allocate_shared((MPI_Aint)g->stride, 1, info, t->node, &base, &g->win);
    MPI_Info_free(&info);
    fail = mrc != MPI_SUCCESS;
    MPI_Allreduce(MPI_IN_PLACE, &fail, 1, MPI_INT, MPI_MAX, t->world);
    if (fail) {
        rc = DMUON_FAIL(DMUON_ENOMEM, "MPI_Win_allocate_shared of %lld bytes per rank failed",
                        (long long)g->stride);
        goto fail;
    }
    g->base = base;
    for (int j = 0; j < K; j++) {
        MPI_Aint sz;
        int du;
        void *p = NULL;
        MPI_Win_shared_query(g->win, j, &sz, &du, &p);
        g->peer[j] = p;
    }
    memset(g->base, 0, (size_t)g->stride);
    MPI_Win_lock_all(MPI_MODE_NOCHECK, g->win);
    g->win_locked = 1;
    MPI_Win_sync(g->win);
    MPI_Barrier(t->world);
    *out = g;
    return DMUON_OK;
fail:
    dmuon_group_free(g);
    return rc;
}

void dmuon_group_free(dmuon_group *g)
{
    if (!g)
        return;
    if (g->win_locked)
        MPI_Win_unlock_all(g->win);
    if (g->win != MPI_WIN_NULL)
        MPI_Win_free(&g->win);
    if (g->rail != MPI_COMM_NULL)
        MPI_Comm_free(&g->rail);
    dmuon_sched_release(&g->sched[0]);
    dmuon_sched_release(&g->sched[1]);
    free(g->qs[0]);
    free(g->qs[1]);
    free(g->route_mem);
    free(g->peer);
    free(g->tmp);
    free(g->req_mem);
    free(g->stage_mem);
    free(g->segs);
    free(g);
}

/* Drops every outstanding request after a failure: receives are cancelled,
 * sends released (MPI completes them in the background or at finalize). */
static void drop_requests(dmuon_group *g)
{
    for (int kind = 0; kind < 2; kind++)
        for (int q = 0; q < g->topo->nodes; q++) {
            queue_state *qs = &g->qs[kind][q];
            int nr = kind == 0 ? qs->n : g->slots * qs->nin;
            int ns = kind == 0 ? qs->n * qs->nout : g->slots;
            for (int i = 0; i < nr; i++)
                if (qs->rreq && qs->rreq[i] != MPI_REQUEST_NULL) {
                    MPI_Cancel(&qs->rreq[i]);
                    MPI_Request_free(&qs->rreq[i]);
                }
            for (int i = 0; i < ns; i++)
                if (qs->sreq && qs->sreq[i] != MPI_REQUEST_NULL)
                    MPI_Request_free(&qs->sreq[i]);
        }
}


/* Waits for every send of every queue of kind to complete. */
static dmuon_rc wait_sends(dmuon_group *g, int kind, const char *op, dmuon_waiter *w)
{
    const dmuon_topo *t = g->topo;
    for (int q = 0; q < t->nodes; q++) {
        queue_state *qs = &g->qs[kind][q];
        int ns = kind == 0 ? qs->n * qs->nout : g->slots;
        for (int i = 0; i < ns; i++) {
            for (;;) {
                int done = 0;
                if (MPI_Test(&qs->sreq[i], &done, MPI_STATUS_IGNORE) != MPI_SUCCESS)
                    return DMUON_FAIL(DMUON_ECOMM, "%s: MPI_Test on a send failed", op);
                if (done)
                    break;
                if (dmuon_waiter_expired(w))
                    return DMUON_FAIL(DMUON_ETIMEOUT, "%s: a send of the queue of node %d (rail "
                                      "%d) to node %d was not taken within the %d ms deadline",
                                      op, q, t->local, qs->nout ? qs->out[0] : -1,
                                      g->deadline_ms);
                dmuon_waiter_idle(w);
            }
        }
    }
    return DMUON_OK;
}

/* -------------------------------------------------------- AllGatherV ---- */

/* Non-blocking: 1 when rank `local` of this node has entered the call. */
static int peer_arrived(const dmuon_group *g, int local)
{
    return __atomic_load_n(ctrl_word(g, local, W_ARRIVE), __ATOMIC_ACQUIRE) >= g->seq;
}

/* Stores chunks [stored, next) of a gather queue into the node's other
 * buffers (they sit in this rank's buffer already). */
static void gather_flush(dmuon_group *g, queue_state *qs)
{
    int K = g->topo->per_node, me = g->topo->local;
    const unsigned char *mybuf = peer_buffer(g, me);
    for (; qs->stored < qs->next; qs->stored++) {
        const dmuon_chunk *c = &qs->chunks[qs->stored];
        for (int j = 0; j < K; j++)
            if (j != me) {
                memcpy(peer_buffer(g, j) + c->offset, mybuf + c->offset, (size_t)c->bytes);
                __atomic_fetch_add(ctrl_word(g, j, W_LANDED), (uint64_t)c->bytes,
                                   __ATOMIC_RELEASE);
            }
    }
}

/* Waits until this rank's control word `which` reaches target (bytes); per
 * is what one call adds, for the message. */
static dmuon_rc wait_count(dmuon_group *g, int which, uint64_t target, int64_t per,
                           const char *op, dmuon_waiter *w)
{
    const dmuon_topo *t = g->topo;
    volatile uint64_t *word = ctrl_word(g, t->local, which);
    uint64_t v;
    while ((v = __atomic_load_n(word, __ATOMIC_ACQUIRE)) < target) {
        if (dmuon_waiter_expired(w))
            return DMUON_FAIL(DMUON_ETIMEOUT, "%s: only %lld of %lld bytes %s within the %d ms "
                              "deadline (the rail ranks of node %d did not finish)", op,
                              (long long)(per - (int64_t)(target - v)), (long long)per,
                              which == W_LANDED ? "of the layer reached this rank's buffer"
                              : which == W_READ ? "of this rank's window were read"
                              : which == W_GRAD_READ ? "of this rank's buffer were reduced"
                                                     : "of sums reached this rank's window",
                              g->deadline_ms, t->node_id);
        dmuon_waiter_idle(w);
    }
    return DMUON_OK;
}

/* AllGatherV.  A rank does not wait for its whole node before it starts:
 * it needs only the owner's arrival to read a local chunk, and sends every
 * chunk on along its rail at once; the stores into the other ranks' buffers
 * wait until every rank of the node has entered (their buffers are free),
 * and are then caught up. */
dmuon_rc dmuon_allgatherv(dmuon_group *g)
{
    const char *op = "allgatherv";
    const dmuon_topo *t = g->topo;
    int R = t->nodes, K = t->per_node, me = t->local;
    unsigned char *mybuf = peer_buffer(g, me);
    dmuon_waiter w;
    dmuon_rc rc;
    if (g->broken)
        return DMUON_FAIL(DMUON_ECOMM, "%s: the group failed in an earlier call and cannot "
                          "be used", op);
    g->seq++;
    g->gathers++;
    dmuon_waiter_start(&w, g->deadline_ms);
    node_post(g);
    int node_in = 0;   /* every rank of the node has entered */
    int active = 0;
    for (int q = 0; q < R; q++) {
        queue_state *qs = &g->qs[0][q];
        qs->next = qs->stored = 0;
        for (int k = 0; k < qs->n && qs->nin; k++) {
            const dmuon_chunk *c = &qs->chunks[k];
            if (MPI_Irecv(mybuf + c->offset, (int)c->bytes, MPI_BYTE, qs->in[0], q, g->rail,
                          &qs->rreq[k]) != MPI_SUCCESS) {
                rc = DMUON_FAIL(DMUON_ECOMM, "%s: MPI_Irecv failed", op);
                goto fail;
            }
        }
        active += qs->n > 0;
    }
    for (;;) {
        int progressed = 0;
        if (!node_in) {
            node_in = 1;
            for (int j = 0; j < K && node_in; j++)
                node_in = peer_arrived(g, j);
            if (node_in) {
                MPI_Win_sync(g->win);
                for (int q = 0; q < R; q++)
                    gather_flush(g, &g->qs[0][q]);
                progressed = 1;
            }
        }
        if (!active && node_in)
            break;
        for (int q = 0; q < R; q++) {
            queue_state *qs = &g->qs[0][q];
            if (qs->next == qs->n)
                continue;
            int k = qs->next;
            const dmuon_chunk *c = &qs->chunks[k];
            if (qs->nin) {
                int done = 0;
                if (MPI_Test(&qs->rreq[k], &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
                    rc = DMUON_FAIL(DMUON_ECOMM, "%s: MPI_Test on a receive failed", op);
                    goto fail;
                }
                if (!done)
                    continue;
            } else {
                int owner = c->owner % K;
                if (owner != me && !node_in && !peer_arrived(g, owner))
                    continue;
                memcpy(mybuf + c->offset, peer_window(g, owner) + c->win_offset,
                       (size_t)c->bytes);
                __atomic_fetch_add(ctrl_word(g, owner, W_READ), (uint64_t)c->bytes,
                                   __ATOMIC_RELEASE);
            }
            __atomic_fetch_add(ctrl_word(g, me, W_LANDED), (uint64_t)c->bytes, __ATOMIC_RELEASE);
            for (int o = 0; o < qs->nout; o++)
                if (MPI_Isend(mybuf + c->offset, (int)c->bytes, MPI_BYTE, qs->out[o], q, g->rail,
                              &qs->sreq[k * qs->nout + o]) != MPI_SUCCESS) {
                    rc = DMUON_FAIL(DMUON_ECOMM, "%s: MPI_Isend failed", op);
                    goto fail;
                }
            qs->next++;
            if (node_in)
                gather_flush(g, qs);
            active -= qs->next == qs->n;
            progressed = 1;
        }
        if (progressed) {
            w.idle = 0;
            continue;
        }
        if (dmuon_waiter_expired(&w)) {
            for (int j = 0; j < K && !node_in; j++)
                if (!peer_arrived(g, j)) {
                    rc = DMUON_FAIL(DMUON_ETIMEOUT, "%s: rank %d of this node (node %d) did not "
                                    "enter call %llu within the %d ms deadline", op,
                                    dmuon_topo_rank_of(K, t->node_id, j), t->node_id,
                                    (unsigned long long)g->seq, g->deadline_ms);
                    goto fail;
                }
            for (int q = 0; q < R; q++) {
                queue_state *qs = &g->qs[0][q];
                if (qs->next < qs->n && qs->nin) {
                    rc = DMUON_FAIL(DMUON_ETIMEOUT, "%s: chunk %d of %d of the queue of source "
                                    "node %d (rail %d) did not arrive from rank %d (node %d) "
                                    "within the %d ms deadline", op, qs->next + 1, qs->n, q, me,
                                    dmuon_topo_rank_of(K, qs->in[0], me), qs->in[0],
                                    g->deadline_ms);
                    goto fail;
                }
            }
            rc = DMUON_FAIL(DMUON_ETIMEOUT, "%s: no progress within the %d ms deadline", op,
                            g->deadline_ms);
            goto fail;
        }
        dmuon_waiter_idle(&w);
    }
    DMUON_TRY_GOTO(rc, wait_sends(g, 0, op, &w), fail);
    DMUON_TRY_GOTO(rc, wait_count(g, W_LANDED, g->gathers * (uint64_t)g->layer_seg_bytes,
                                  g->layer_seg_bytes, op, &w), fail);
    DMUON_TRY_GOTO(rc, wait_count(g, W_READ, g->gathers * (uint64_t)g->owned_bytes,
                                  g->owned_bytes, op, &w), fail);
    MPI_Win_sync(g->win);
    return DMUON_OK;
fail:
    g->broken = 1;
    drop_requests(g);
    return rc;
}

/* ---------------------------------------------------- ReduceScatterV ---- */

/* Computes one chunk: dst = the documented sum of the node's K inputs and
 * the nin incoming partials (binary32 partials when f32p). */
static void reduce_chunk(dmuon_group *g, const dmuon_chunk *c, dmuon_dtype dt, int f32p,
                         unsigned char *const *in, int nin, void *dst, int dst_f32)
{
    int K = g->topo->per_node;
    int64_t n = c->count;
    float *l = g->tmp;
    /* L = Σ_j x_j in binary32, local-rank order */
    if (dt == DMUON_F32) {
        memcpy(l, peer_buffer(g, 0) + c->offset, (size_t)n * 4);
        for (int j = 1; j < K; j++)
            dmuon_f32_add(l, l, (const float *)(peer_buffer(g, j) + c->offset), (size_t)n);
    } else {
        dmuon_bf16_to_f32_n(l, (const uint16_t *)(peer_buffer(g, 0) + c->offset), (size_t)n);
        for (int j = 1; j < K; j++)
            dmuon_bf16_accum(l, (const uint16_t *)(peer_buffer(g, j) + c->offset), (size_t)n);
    }
    if (f32p) {
        if (nin) {
            /* a = ((in_0 + in_1) + …) + L, all binary32 */
            float *a = l + n;
            memcpy(a, in[0], (size_t)n * 4);
            for (int i = 1; i < nin; i++)
                dmuon_f32_add(a, a, (const float *)in[i], (size_t)n);
            dmuon_f32_add(l, a, l, (size_t)n);
        }
        if (dst_f32)
            memcpy(dst, l, (size_t)n * 4);
        else
            dmuon_bf16_from_f32(dst, l, (size_t)n);
        return;
    }
    /* BF16 at every level: L = rnd(Σ); a = in_0; a = rnd(a + in_i); rnd(a + L) */
    uint16_t *o = dst;
    if (!nin) {
        dmuon_bf16_from_f32(o, l, (size_t)n);
        return;
    }
    const uint16_t *i0 = (const uint16_t *)in[0];
    if (nin == 1) {
        dmuon_bf16_add_rounded(o, i0, l, (size_t)n);
        return;
    }
    uint16_t *a = (uint16_t *)(l + n);
    memcpy(a, i0, (size_t)n * 2);
    for (int i = 1; i < nin; i++)
        dmuon_bf16_add(a, a, (const uint16_t *)in[i], (size_t)n);
    dmuon_bf16_add_rounded(o, a, l, (size_t)n);
}

static int partial_size(const dmuon_group *g, dmuon_dtype dt, int *f32p)
{
    *f32p = dt == DMUON_F32 || g->fp32_accum;
    return *f32p ? 4 : 2;
}

static dmuon_rc post_partial_recv(dmuon_group *g, queue_state *qs, int i, int k)
{
    const dmuon_chunk *c = &qs->chunks[k];
    int f32p, ps = partial_size(g, g->segs[c->seg].dtype, &f32p);
    int slot = k % g->slots;
    unsigned char *buf = qs->rbuf + ((size_t)i * g->slots + slot) * g->slot_bytes;
    if (MPI_Irecv(buf, (int)(c->count * ps), MPI_BYTE, qs->in[i], g->topo->nodes + qs->q,
                  g->rail, &qs->rreq[i * g->slots + slot]) != MPI_SUCCESS)
        return DMUON_FAIL(DMUON_ECOMM, "reducescatterv: MPI_Irecv failed");
    return DMUON_OK;
}

dmuon_rc dmuon_reduce_scatterv(dmuon_group *g)
{
    const char *op = "reducescatterv";
    const dmuon_topo *t = g->topo;
    int R = t->nodes, K = t->per_node, me = t->local, S = g->slots;
    dmuon_waiter w;
    dmuon_rc rc;
    if (!g->rsv_ok)
        return DMUON_FAIL(DMUON_EUNSUPPORTED, "%s: element types other than bf16 and f32 "
                          "cannot be reduced", op);
    if (g->broken)
        return DMUON_FAIL(DMUON_ECOMM, "%s: the group failed in an earlier call and cannot "
                          "be used", op);
    g->seq++;
    g->reduces++;
    dmuon_waiter_start(&w, g->deadline_ms);
    node_post(g);
    /* Receives land in private staging: arm them before waiting for the node. */
    int active = 0;
    for (int q = 0; q < R; q++) {
        queue_state *qs = &g->qs[1][q];
        qs->next = 0;
        for (int i = 0; i < qs->nin; i++)
            for (int k = 0; k < qs->n && k < S; k++)
                DMUON_TRY_GOTO(rc, post_partial_recv(g, qs, i, k), fail);
        active += qs->n > 0;
    }
    DMUON_TRY_GOTO(rc, node_wait(g, op, &w), fail);
    unsigned char *inp[DMUON_STAR_MAX_NODES > 64 ? DMUON_STAR_MAX_NODES : 64];
    while (active) {
        int progressed = 0;
        for (int q = 0; q < R; q++) {
            queue_state *qs = &g->qs[1][q];
            if (qs->next == qs->n)
                continue;
            int k = qs->next, slot = k % S, ready = 1;
            const dmuon_chunk *c = &qs->chunks[k];
            for (int i = 0; i < qs->nin && ready; i++) {
                int done = 0;
                if (MPI_Test(&qs->rreq[i * S + slot], &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
                    rc = DMUON_FAIL(DMUON_ECOMM, "%s: MPI_Test on a receive failed", op);
                    goto fail;
                }
                ready = done;
            }
            if (ready && qs->nout) {
                int done = 0;
                MPI_Test(&qs->sreq[slot], &done, MPI_STATUS_IGNORE);
                ready = done;
            }
            if (!ready)
                continue;
            dmuon_dtype dt = g->segs[c->seg].dtype;
            int f32p, ps = partial_size(g, dt, &f32p);
            for (int i = 0; i < qs->nin; i++)
                inp[i] = qs->rbuf + ((size_t)i * S + slot) * g->slot_bytes;
            void *dst;
            int dst_f32;
            if (qs->nout) {
                dst = qs->sbuf + (size_t)slot * g->slot_bytes;
                dst_f32 = f32p;
            } else {
                dst = peer_window(g, c->owner % K) + c->win_offset;
                dst_f32 = dt == DMUON_F32;
            }
            reduce_chunk(g, c, dt, f32p, inp, qs->nin, dst, dst_f32);
            for (int j = 0; j < K; j++)
                __atomic_fetch_add(ctrl_word(g, j, W_GRAD_READ), (uint64_t)c->bytes,
                                   __ATOMIC_RELEASE);
            if (!qs->nout)
                __atomic_fetch_add(ctrl_word(g, c->owner % K, W_SUMMED), (uint64_t)c->bytes,
                                   __ATOMIC_RELEASE);
            if (qs->nout &&
                MPI_Isend(dst, (int)(c->count * ps), MPI_BYTE, qs->out[0], R + q, g->rail,
                          &qs->sreq[slot]) != MPI_SUCCESS) {
                rc = DMUON_FAIL(DMUON_ECOMM, "%s: MPI_Isend failed", op);
                goto fail;
            }
            if (k + S < qs->n)
                for (int i = 0; i < qs->nin; i++)
                    DMUON_TRY_GOTO(rc, post_partial_recv(g, qs, i, k + S), fail);
            qs->next++;
            active -= qs->next == qs->n;
            progressed = 1;
        }
        if (progressed) {
            w.idle = 0;
            continue;
        }
        if (dmuon_waiter_expired(&w)) {
            for (int q = 0; q < R; q++) {
                queue_state *qs = &g->qs[1][q];
                if (qs->next == qs->n)
                    continue;
                int slot = qs->next % S;
                for (int i = 0; i < qs->nin; i++) {
                    int done = 0;
                    MPI_Test(&qs->rreq[i * S + slot], &done, MPI_STATUS_IGNORE);
                    if (!done) {
                        rc = DMUON_FAIL(DMUON_ETIMEOUT, "%s: the partial sum of chunk %d of %d "
                                        "of the queue of owner node %d (rail %d) did not arrive "
                                        "from rank %d (node %d) within the %d ms deadline", op,
                                        qs->next + 1, qs->n, q, me,
                                        dmuon_topo_rank_of(K, qs->in[i], me), qs->in[i],
                                        g->deadline_ms);
                        goto fail;
                    }
                }
                rc = DMUON_FAIL(DMUON_ETIMEOUT, "%s: chunk %d of %d of the queue of owner node "
                                "%d (rail %d) could not be sent to rank %d (node %d) within the "
                                "%d ms deadline", op, qs->next + 1, qs->n, q, me,
                                dmuon_topo_rank_of(K, qs->out[0], me), qs->out[0],
                                g->deadline_ms);
                goto fail;
            }
        }
        dmuon_waiter_idle(&w);
    }
    DMUON_TRY_GOTO(rc, wait_sends(g, 1, op, &w), fail);
    DMUON_TRY_GOTO(rc, wait_count(g, W_GRAD_READ, g->reduces * (uint64_t)g->layer_seg_bytes,
                                  g->layer_seg_bytes, op, &w), fail);
    DMUON_TRY_GOTO(rc, wait_count(g, W_SUMMED, g->reduces * (uint64_t)g->owned_bytes,
                                  g->owned_bytes, op, &w), fail);
    MPI_Win_sync(g->win);
    return DMUON_OK;
fail:
    g->broken = 1;
    drop_requests(g);
    return rc;
}
