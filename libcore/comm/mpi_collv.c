/*
 * mpi_collv.c — groups and the AllGatherV / ReduceScatterV executors of the
 * MPI backend (dmuon/collv.h, comm/backend.h), running the schedule of
 * dmuon/sched.h over symmetric memory (mpi_symm.c: one node-shared window).
 *
 * Layout of each rank's control area (at the group's ctrl_offset of the
 * symmetric memory, the same on every rank; zeroed at creation):
 *   [0, 64)              arrive: sequence number of the last call entered
 *   [64, 128)            (reserved)
 *   [128, 192)           landed: bytes gathered into this rank's buffer
 *   [192, 256)           read:   bytes read from this rank's owner window
 *   [256, 320)           grad_read: bytes of this rank's buffer reduced
 *   [320, 384)           summed: bytes of final sums written into its window
 *   [384, …)             this rank's reduce staging slots (only it uses them,
 *                        only inside a ReduceScatterV); with staging_shared
 *                        they lie at the group's staging_offset instead,
 *                        an area the caller may give several groups whose
 *                        calls are never in flight at once
 * Each call's layer buffer and owner window sit at the offsets the call is
 * given.  Sequence numbers increase by one per call on every rank and are
 * never reset.  A call stores arrive = seq (release); it reads a peer's
 * input only after that peer shows arrive ≥ seq (acquire), and writes into
 * the node's buffers only once every rank of the node does (ReduceScatterV
 * waits for the whole node first; AllGatherV starts with the owners it needs
 * and catches up on the stores).  Neither waits for the whole node at the
 * end; they count bytes instead.  AllGatherV: whoever stores a chunk into a
 * rank's buffer adds its bytes to that rank's `landed`, whoever copies a
 * chunk out of an owner's window adds to the owner's `read`.
 * ReduceScatterV: whoever sums a chunk adds its bytes to the `grad_read` of
 * every rank it read, whoever writes a final sum adds to the owner's
 * `summed`.  A rank returns when its own sends are done and its counters
 * have grown by this call's known totals: everything meant for its memory
 * has landed and nobody still reads it; the other ranks' sends are not
 * waited for.  So a rank may reuse its buffer and window ranges (for this
 * or another group) as soon as its call returns.
 *
 * Across nodes the rank of rail s serves one queue per source node (the
 * group's own duplicate of the rail communicator, tag = kind·R + queue).  A
 * queue is walked strictly in order (MPI's non-overtaking order matches the
 * i-th message of a queue to the i-th receive), queues in whichever order
 * they become ready: local chunks at once, upstream chunks on arrival.
 * A pass polls every request the queues' next chunks wait for at once
 * (poll_heads), so a pass that finds nothing enters MPI's progress engine
 * a fixed number of times, however many queues wait (under
 * mpi_yield_when_idle each idle entry also gives the CPU away).
 * Gather receives land directly in the layer buffer; reduce partials land in
 * `slots` staging buffers per incoming stream, re-posted as they are
 * consumed (the ring buffer of paper C.2).
 *
 * Every call is split (start, test, wait; the blocking call is start +
 * wait): a call's state lives in the group, one pass over its queues never
 * blocks, and a call goes through three stages — its queues, its own sends,
 * the counters above.  Calls in flight on one symmetric memory form a list
 * (mpi_symm.c keeps its head); an idle wait loop of any of them moves the
 * others, so ranks that interleave calls of different groups in different
 * orders still progress each other.  A failure noticed while another call
 * moved a group is kept (rc and message) and returned by that group's next
 * test or wait.
 */
#include "dmuon/collv.h"

#include <assert.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dmuon/bf16.h"
#include "mpi_backend.h"
#include "wait.h"

#define CTRL_BYTES 384
/* control words, 64 bytes apart */
enum { W_ARRIVE = 0, W_RESERVED, W_LANDED, W_READ, W_GRAD_READ, W_SUMMED };
#define ALIGN64(x) (((x) + 63) & ~(int64_t)63)
/* Elements a reduction sums per pass over its inputs: two binary32 blocks
 * of scratch (8 KiB) stay in the first-level cache. */
#define REDUCE_BLOCK 1024

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

typedef struct mpi_group {
    const dmuon_topo *topo;
    MPI_Comm rail;              /* duplicate of topo->rail */
    const dmuon_segment *segs;  /* the public group's table */
    dmuon_sched *sched;         /* the public group's two schedules */
    queue_state *qs[2];         /* R queues per kind */
    int *route_mem;
    MPI_Win win;                /* the symmetric memory's window */
    unsigned char **peer;       /* K node peers' symmetric memory */
    int64_t ctrl;               /* control area offset */
    int64_t buf, winoff;        /* this call's layer buffer / owner window offsets */
    int deadline_ms, slots, fp32_accum;
    int64_t slot_bytes;
    float *tmp;                 /* 2 × REDUCE_BLOCK binary32 scratch */
    uint64_t seq;
    uint64_t gathers;           /* AllGatherV calls so far */
    uint64_t reduces;           /* ReduceScatterV calls so far */
    int64_t layer_seg_bytes;    /* bytes of all segments */
    int64_t owned_bytes;        /* bytes of this rank's segments */
    int broken;
    MPI_Request *req_mem;
    /* one poll per pass (poll_heads): copies of the requests the queues'
     * next chunks wait for, where each lives, and MPI_Testsome's indices */
    MPI_Request *poll_req, **poll_src;
    int *poll_idx;
    int npoll_max;
    dmuon_symm *mem;
    /* the call in flight (split phase: start, test, wait) */
    int kind;                   /* -1 none; 0 gather; 1 reduce */
    int stage;                  /* ST_* */
    int node_in;                /* every rank of the node has entered it */
    int active;                 /* queues with chunks left */
    dmuon_waiter w;             /* its deadline */
    struct mpi_group *next_inflight;   /* calls in flight on the same memory */
    dmuon_rc failrc;            /* failed while another call moved it */
    char failmsg[512];
} mpi_group;

static void inflight_remove(mpi_group *g);
static void sched_group_free(dmuon_group *pub);
static void drop_requests(mpi_group *g);

/* ---------------------------------------------------------- waiting ---- */

static volatile uint64_t *ctrl_word(const mpi_group *g, int local, int which)
{
    return (volatile uint64_t *)(g->peer[local] + g->ctrl + 64 * which);
}

/* Announces that this rank entered the call (its inputs are in place). */
static void node_post(mpi_group *g)
{
    MPI_Win_sync(g->win);
    __atomic_store_n(ctrl_word(g, g->topo->local, W_ARRIVE), g->seq, __ATOMIC_RELEASE);
}

/* ------------------------------------------------------------ group ---- */

static unsigned char *peer_buffer(const mpi_group *g, int local)
{
    return g->peer[local] + g->buf;
}

static unsigned char *peer_window(const mpi_group *g, int local)
{
    return g->peer[local] + g->winoff;
}

/* Staging slots of the reduce queues of node `node`: slots × (nin + 1) per
 * queue. */
static int64_t stage_slots(const dmuon_sched *red, int R, int node, int slots, int *scratch)
{
    int64_t n = 0;
    for (int q = 0; q < R; q++) {
        int nout;
        int nin = dmuon_sched_route(red, q, node, scratch, scratch + R, &nout);
        n += (int64_t)slots * (nin + 1);
    }
    return n;
}

/* Bytes of the reduce staging slots: the most any node's rank needs. */
static int64_t staging_bytes_of(const dmuon_sched *red, int R, int slots, int *scratch)
{
    int64_t most = 0;
    for (int r = 0; r < R; r++) {
        int64_t n = stage_slots(red, R, r, slots, scratch);
        if (n > most)
            most = n;
    }
    return ALIGN64(most * red->chunk_bytes * 2);
}

static dmuon_rc sched_group_staging_bytes(const dmuon_topo *t, const dmuon_segment *segs,
                                          int n, const dmuon_group_opts *opts, int64_t *bytes)
{
    dmuon_sched red = {0};
    dmuon_sched_opts so = {opts->path, opts->chunk_bytes, opts->star_max_bytes};
    DMUON_TRY(dmuon_sched_init(&red, segs, n, t->nodes, t->per_node, DMUON_SCHED_REDUCE, &so));
    int *scratch = malloc((size_t)2 * t->nodes * sizeof *scratch);
    if (!scratch) {
        dmuon_sched_release(&red);
        return DMUON_FAIL(DMUON_ENOMEM, "out of memory sizing a group's staging");
    }
    *bytes = staging_bytes_of(&red, t->nodes, opts->slots > 0 ? opts->slots : 4, scratch);
    free(scratch);
    dmuon_sched_release(&red);
    return DMUON_OK;
}

/* The control words, and the staging after them unless it is shared. */
static dmuon_rc sched_group_ctrl_bytes(const dmuon_topo *t, const dmuon_segment *segs, int n,
                                       const dmuon_group_opts *opts, int64_t *bytes)
{
    int64_t st = 0;
    if (!opts->staging_shared)
        DMUON_TRY(sched_group_staging_bytes(t, segs, n, opts, &st));
    *bytes = ALIGN64(CTRL_BYTES) + st;
    return DMUON_OK;
}

static dmuon_rc sched_group_create(dmuon_group *pub)
{
    dmuon_rc rc = DMUON_OK;
    const dmuon_topo *t = pub->topo;
    const dmuon_segment *segs = pub->segs;
    int n = pub->nseg;
    mpi_group *g = calloc(1, sizeof *g);
    int fail = !g;
    MPI_Allreduce(MPI_IN_PLACE, &fail, 1, MPI_INT, MPI_MAX, t->world);
    if (fail) {
        free(g);
        return DMUON_FAIL(DMUON_ENOMEM, "out of memory creating a group");
    }
    pub->impl = g;
    g->topo = t;
    g->rail = MPI_COMM_NULL;
    g->segs = segs;
    g->sched = pub->sched;
    g->win = dmuon_mpi_symm_win(pub->mem);
    g->peer = pub->mem->peer;
    g->mem = pub->mem;
    g->kind = -1;
    g->ctrl = pub->ctrl_offset;
    g->deadline_ms = pub->opts.deadline_ms;
    g->slots = pub->opts.slots;
    g->fp32_accum = pub->opts.fp32_accum != 0;
    for (int i = 0; i < n; i++) {
        int64_t b = segs[i].count * (int64_t)dmuon_dtype_size(segs[i].dtype);
        g->layer_seg_bytes += b;
        if (segs[i].owner == t->rank)
            g->owned_bytes += b;
    }

    /* Local allocations; agreed below so a failure on one rank fails all. */
    int R = t->nodes;
    g->qs[0] = calloc((size_t)R, sizeof(queue_state));
    g->qs[1] = calloc((size_t)R, sizeof(queue_state));
    g->route_mem = malloc((size_t)4 * R * R * sizeof(int));
    g->slot_bytes = g->sched[0].chunk_bytes * 2;   /* bf16 chunk carried as binary32 */
    g->tmp = malloc(2 * REDUCE_BLOCK * sizeof(float));
    fail = !g->qs[0] || !g->qs[1] || !g->route_mem || !g->tmp;
    size_t nreq = 0, nstage = 0, npoll[2] = {0, 0};
    if (!fail) {
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
                    npoll[0] += qs->nin > 0;
                } else {
                    nreq += (size_t)g->slots * (qs->nin + 1);
                    nstage += (size_t)g->slots * (qs->nin + 1);
                    npoll[1] += (size_t)qs->nin + 1;
                }
            }
        g->req_mem = malloc((nreq ? nreq : 1) * sizeof(MPI_Request));
        g->npoll_max = (int)(npoll[0] > npoll[1] ? npoll[0] : npoll[1]);
        size_t np = g->npoll_max ? (size_t)g->npoll_max : 1;
        g->poll_req = malloc(np * sizeof *g->poll_req);
        g->poll_src = malloc(np * sizeof *g->poll_src);
        g->poll_idx = malloc(np * sizeof *g->poll_idx);
        fail = !g->req_mem || !g->poll_req || !g->poll_src || !g->poll_idx;
    }
    MPI_Allreduce(MPI_IN_PLACE, &fail, 1, MPI_INT, MPI_MAX, t->world);
    if (fail) {
        rc = DMUON_FAIL(DMUON_ENOMEM, "out of memory creating a group of %d segments", n);
        goto fail;
    }
    /* the public layer sized the area (or the shared staging) with the
     * same schedule */
    assert(pub->opts.staging_shared
               ? (int64_t)nstage * g->slot_bytes <= pub->staging_bytes
               : CTRL_BYTES + (int64_t)nstage * g->slot_bytes <= pub->ctrl_bytes);
    for (size_t i = 0; i < nreq; i++)
        g->req_mem[i] = MPI_REQUEST_NULL;
    {
        MPI_Request *r = g->req_mem;
        unsigned char *st = pub->mem->base + (pub->opts.staging_shared ? pub->staging_offset
                                                                        : g->ctrl + CTRL_BYTES);
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
    fail = MPI_Comm_dup(t->rail, &g->rail) != MPI_SUCCESS;
    MPI_Allreduce(MPI_IN_PLACE, &fail, 1, MPI_INT, MPI_MAX, t->world);
    if (fail) {
        rc = DMUON_FAIL(DMUON_ECOMM, "MPI_Comm_dup of the rail communicator failed");
        goto fail;
    }
    /* Zero this rank's control area; nobody touches a peer's before the
     * barrier. */
    memset(pub->mem->base + g->ctrl, 0, (size_t)pub->ctrl_bytes);
    MPI_Win_sync(g->win);
    MPI_Barrier(t->world);
    return DMUON_OK;
fail:
    sched_group_free(pub);
    return rc;
}

static void sched_group_free(dmuon_group *pub)
{
    mpi_group *g = pub->impl;
    if (!g)
        return;
    if (g->kind >= 0) {
        inflight_remove(g);
        drop_requests(g);
    }
    if (g->rail != MPI_COMM_NULL)
        MPI_Comm_free(&g->rail);
    free(g->qs[0]);
    free(g->qs[1]);
    free(g->route_mem);
    free(g->tmp);
    free(g->req_mem);
    free(g->poll_req);
    free(g->poll_src);
    free(g->poll_idx);
    free(g);
    pub->impl = NULL;
}

/* ------------------------------------------------------- call state ---- */

/* Stages of one call: its queues, then its own sends, then the counters
 * that say the rest of the node is done with this rank's memory. */
enum { ST_QUEUES = 0, ST_SENDS, ST_COUNTS, ST_DONE };

const char *dmuon_mpi_op_name(int kind)
{
    return kind == DMUON_SCHED_GATHER ? "allgatherv" : "reducescatterv";
}

dmuon_rc dmuon_mpi_call_admit(int broken, int in_flight, int kind)
{
    const char *op = dmuon_mpi_op_name(kind);
    if (broken)
        return DMUON_FAIL(DMUON_ECOMM, "%s: the group failed in an earlier call and cannot "
                          "be used", op);
    if (in_flight >= 0)
        return DMUON_FAIL(DMUON_EINVAL, "%s: the group's %s started before is not finished "
                          "(wait for it first)", op, dmuon_mpi_op_name(in_flight));
    return DMUON_OK;
}

static const char *op_name(int kind) { return dmuon_mpi_op_name(kind); }

/* The list of calls in flight on one symmetric memory, so that whoever
 * waits also moves the others (mpi_symm.c keeps the head). */
static void inflight_add(mpi_group *g)
{
    mpi_group **head = (mpi_group **)dmuon_mpi_symm_inflight(g->mem);
    g->next_inflight = *head;
    *head = g;
}

static void inflight_remove(mpi_group *g)
{
    mpi_group **p = (mpi_group **)dmuon_mpi_symm_inflight(g->mem);
    for (; *p; p = &(*p)->next_inflight)
        if (*p == g) {
            *p = g->next_inflight;
            break;
        }
    g->next_inflight = NULL;
}

/* Drops every outstanding request after a failure: receives are cancelled,
 * sends released (MPI completes them in the background or at finalize). */
static void drop_requests(mpi_group *g)
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

/* Marks the group failed: nothing in flight any more. */
static dmuon_rc call_fail(mpi_group *g, dmuon_rc rc)
{
    g->broken = 1;
    if (g->kind >= 0)
        inflight_remove(g);
    g->kind = -1;
    drop_requests(g);
    return rc;
}

/* Non-blocking: *done when every send of the call's queues has completed;
 * else *which names a queue still sending. */
static dmuon_rc sends_done(mpi_group *g, int *done, int *which)
{
    int kind = g->kind;
    for (int q = 0; q < g->topo->nodes; q++) {
        queue_state *qs = &g->qs[kind][q];
        int ns = kind == 0 ? qs->n * qs->nout : g->slots;
        int all = 0;
        if (ns && MPI_Testall(ns, qs->sreq, &all, MPI_STATUSES_IGNORE) != MPI_SUCCESS)
            return DMUON_FAIL(DMUON_ECOMM, "%s: MPI_Testall on sends failed", op_name(kind));
        if (ns && !all) {
            *done = 0;
            *which = q;
            return DMUON_OK;
        }
    }
    *done = 1;
    return DMUON_OK;
}

/* This rank's control word `which` and the value it must reach. */
static uint64_t count_of(const mpi_group *g, int which, uint64_t *target, int64_t *per)
{
    uint64_t calls = which == W_LANDED || which == W_READ ? g->gathers : g->reduces;
    *per = which == W_LANDED || which == W_GRAD_READ ? g->layer_seg_bytes : g->owned_bytes;
    *target = calls * (uint64_t)*per;
    return __atomic_load_n(ctrl_word(g, g->topo->local, which), __ATOMIC_ACQUIRE);
}

static int counts_reached(const mpi_group *g)
{
    int a = g->kind == 0 ? W_LANDED : W_GRAD_READ, b = g->kind == 0 ? W_READ : W_SUMMED;
    uint64_t ta, tb;
    int64_t pa, pb;
    return count_of(g, a, &ta, &pa) >= ta && count_of(g, b, &tb, &pb) >= tb;
}

/* ---------------------------------------------------------- polling ---- */

static void poll_add(mpi_group *g, int *n, MPI_Request *r)
{
    if (*r == MPI_REQUEST_NULL)   /* complete already */
        return;
    g->poll_src[*n] = r;
    g->poll_req[(*n)++] = *r;
}

/* One poll of every request the queues' next chunks wait for (kind 0: the
 * receive of each gather queue's next chunk; 1: the partials of each
 * reduce queue's next chunk and the send of its staging slot), by
 * MPI_Testsome over all of them: a pass that finds nothing runs MPI's
 * progress engine twice (and, under mpi_yield_when_idle, gives the CPU
 * away twice) however many queues wait, where one MPI_Test per waiting
 * queue ran it once per queue.  A completed request is set to
 * MPI_REQUEST_NULL where it lives, which is what the passes test; a chunk
 * polled in no pass yet waits for the next one. */
static dmuon_rc poll_heads(mpi_group *g, int kind)
{
    int n = 0, S = g->slots;
    for (int q = 0; q < g->topo->nodes; q++) {
        queue_state *qs = &g->qs[kind][q];
        if (qs->next >= qs->n)
            continue;
        if (kind == 0) {
            if (qs->nin)
                poll_add(g, &n, &qs->rreq[qs->next]);
            continue;
        }
        int slot = qs->next % S;
        for (int i = 0; i < qs->nin; i++)
            poll_add(g, &n, &qs->rreq[i * S + slot]);
        if (qs->nout)
            poll_add(g, &n, &qs->sreq[slot]);
    }
    assert(n <= g->npoll_max);
    if (!n)
        return DMUON_OK;
    /* MPI_Testsome enters the progress engine only when it finds nothing
     * complete, and does not look again after it: a second one sees what
     * that progress completed (MPI_Test's own recheck) and progresses again
     * only if still nothing is. */
    int out = 0;
    for (int round = 0; round < 2 && out == 0; round++)
        if (MPI_Testsome(n, g->poll_req, &out, g->poll_idx, MPI_STATUSES_IGNORE) !=
            MPI_SUCCESS)
            return DMUON_FAIL(DMUON_ECOMM, "%s: MPI_Testsome failed", op_name(kind));
    for (int i = 0; i < n; i++)
        *g->poll_src[i] = g->poll_req[i];
    return DMUON_OK;
}

/* -------------------------------------------------------- AllGatherV ---- */

/* Non-blocking: 1 when rank `local` of this node has entered the call. */
static int peer_arrived(const mpi_group *g, int local)
{
    return __atomic_load_n(ctrl_word(g, local, W_ARRIVE), __ATOMIC_ACQUIRE) >= g->seq;
}

/* Stores chunks [stored, next) of a gather queue into the node's other
 * buffers (they sit in this rank's buffer already). */
static void gather_flush(mpi_group *g, queue_state *qs)
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


/* Arms the gather receives: they land directly in the layer buffer. */
static dmuon_rc gather_arm(mpi_group *g)
{
    unsigned char *mybuf = peer_buffer(g, g->topo->local);
    for (int q = 0; q < g->topo->nodes; q++) {
        queue_state *qs = &g->qs[0][q];
        qs->next = qs->stored = 0;
        for (int k = 0; k < qs->n && qs->nin; k++) {
            const dmuon_chunk *c = &qs->chunks[k];
            if (MPI_Irecv(mybuf + c->offset, (int)c->bytes, MPI_BYTE, qs->in[0], q, g->rail,
                          &qs->rreq[k]) != MPI_SUCCESS)
                return DMUON_FAIL(DMUON_ECOMM, "allgatherv: MPI_Irecv failed");
        }
        g->active += qs->n > 0;
    }
    return DMUON_OK;
}

/* One non-blocking pass over the gather queues.  A rank does not wait for
 * its whole node before it starts: it needs only the owner's arrival to
 * read a local chunk, and sends every chunk on along its rail at once; the
 * stores into the other ranks' buffers wait until every rank of the node
 * has entered (their buffers are free), and are then caught up. */
static dmuon_rc gather_pass(mpi_group *g, int *progressed)
{
    const dmuon_topo *t = g->topo;
    int R = t->nodes, K = t->per_node, me = t->local;
    unsigned char *mybuf = peer_buffer(g, me);
    if (!g->node_in) {
        g->node_in = 1;
        for (int j = 0; j < K && g->node_in; j++)
            g->node_in = peer_arrived(g, j);
        if (g->node_in) {
            MPI_Win_sync(g->win);
            for (int q = 0; q < R; q++)
                gather_flush(g, &g->qs[0][q]);
            *progressed = 1;
        }
    }
    DMUON_TRY(poll_heads(g, 0));
    for (int q = 0; q < R; q++) {
        queue_state *qs = &g->qs[0][q];
        /* walk a queue as far as it goes: chunks of one queue are in order */
        while (qs->next < qs->n) {
            int k = qs->next;
            const dmuon_chunk *c = &qs->chunks[k];
            if (qs->nin) {
                if (qs->rreq[k] != MPI_REQUEST_NULL)   /* not arrived, or not polled yet */
                    break;
            } else {
                int owner = c->owner % K;
                if (owner != me && !g->node_in && !peer_arrived(g, owner))
                    break;
                memcpy(mybuf + c->offset, peer_window(g, owner) + c->win_offset,
                       (size_t)c->bytes);
                __atomic_fetch_add(ctrl_word(g, owner, W_READ), (uint64_t)c->bytes,
                                   __ATOMIC_RELEASE);
            }
            __atomic_fetch_add(ctrl_word(g, me, W_LANDED), (uint64_t)c->bytes, __ATOMIC_RELEASE);
            for (int o = 0; o < qs->nout; o++)
                if (MPI_Isend(mybuf + c->offset, (int)c->bytes, MPI_BYTE, qs->out[o], q, g->rail,
                              &qs->sreq[k * qs->nout + o]) != MPI_SUCCESS)
                    return DMUON_FAIL(DMUON_ECOMM, "allgatherv: MPI_Isend failed");
            qs->next++;
            if (g->node_in)
                gather_flush(g, qs);
            g->active -= qs->next == qs->n;
            *progressed = 1;
        }
    }
    return DMUON_OK;
}

/* The deadline message of a gather still running its queues. */
static dmuon_rc gather_late(mpi_group *g)
{
    const dmuon_topo *t = g->topo;
    int K = t->per_node, me = t->local;
    for (int j = 0; j < K && !g->node_in; j++)
        if (!peer_arrived(g, j))
            return DMUON_FAIL(DMUON_ETIMEOUT, "allgatherv: rank %d of this node (node %d) did "
                              "not enter call %llu within the %d ms deadline",
                              dmuon_topo_rank_of(K, t->node_id, j), t->node_id,
                              (unsigned long long)g->seq, g->deadline_ms);
    for (int q = 0; q < t->nodes; q++) {
        queue_state *qs = &g->qs[0][q];
        if (qs->next < qs->n && qs->nin)
            return DMUON_FAIL(DMUON_ETIMEOUT, "allgatherv: chunk %d of %d of the queue of source "
                              "node %d (rail %d) did not arrive from rank %d (node %d) within "
                              "the %d ms deadline", qs->next + 1, qs->n, q, me,
                              dmuon_topo_rank_of(K, qs->in[0], me), qs->in[0], g->deadline_ms);
    }
    return DMUON_FAIL(DMUON_ETIMEOUT, "allgatherv: no progress within the %d ms deadline",
                      g->deadline_ms);
}

/* ---------------------------------------------------- ReduceScatterV ---- */

/* The nin ≥ 1 incoming BF16 partials of n elements from `at`, summed
 * a = in_0; a = rnd(a + in_i) in scratch (n elements): in_0 itself when
 * there is one. */
static const uint16_t *bf16_partials(unsigned char *const *in, int nin, int64_t at, int64_t n,
                                     uint16_t *scratch)
{
    const uint16_t *i0 = (const uint16_t *)in[0] + at;
    if (nin == 1)
        return i0;
    memcpy(scratch, i0, (size_t)n * 2);
    for (int i = 1; i < nin; i++)
        dmuon_bf16_add(scratch, scratch, (const uint16_t *)in[i] + at, (size_t)n);
    return scratch;
}

/* Computes n elements of a chunk, starting `at` elements into it: dst =
 * the documented sum of the node's K inputs and the nin incoming partials
 * (binary32 partials when f32p).  Block by block (reduce_chunk) so the
 * binary32 scratch stays in the first-level cache: the sum is element-wise,
 * so the bits do not depend on the block size. */
static void reduce_block(mpi_group *g, const dmuon_chunk *c, int64_t at, int64_t n,
                         dmuon_dtype dt, int f32p, unsigned char *const *in, int nin,
                         unsigned char *dst, int dst_f32)
{
    int K = g->topo->per_node;
    int64_t es = dmuon_dtype_size(dt), ps = f32p ? 4 : 2, off = c->offset + at * es;
    float *l = g->tmp;
    if (!f32p && K == 2) {
        /* BF16 at every level, two ranks a node: the bits of the general
         * form below (bf16(L) = bf16(x_0 + x_1)), in one pass */
        const uint16_t *x0 = (const uint16_t *)(peer_buffer(g, 0) + off);
        const uint16_t *x1 = (const uint16_t *)(peer_buffer(g, 1) + off);
        uint16_t *o = (uint16_t *)dst + at;
        if (!nin) {
            dmuon_bf16_add(o, x0, x1, (size_t)n);
            return;
        }
        dmuon_bf16_add_pair(o, bf16_partials(in, nin, at, n, (uint16_t *)(l + REDUCE_BLOCK)),
                            x0, x1, (size_t)n);
        return;
    }
    /* L = Σ_j x_j in binary32, local-rank order */
    if (dt == DMUON_F32) {
        memcpy(l, peer_buffer(g, 0) + off, (size_t)n * 4);
        for (int j = 1; j < K; j++)
            dmuon_f32_add(l, l, (const float *)(peer_buffer(g, j) + off), (size_t)n);
    } else {
        dmuon_bf16_to_f32_n(l, (const uint16_t *)(peer_buffer(g, 0) + off), (size_t)n);
        for (int j = 1; j < K; j++)
            dmuon_bf16_accum(l, (const uint16_t *)(peer_buffer(g, j) + off), (size_t)n);
    }
    if (f32p) {
        dst += at * (dst_f32 ? 4 : 2);
        if (nin) {
            /* a = ((in_0 + in_1) + …) + L, all binary32 */
            float *a = l + REDUCE_BLOCK;
            memcpy(a, in[0] + at * ps, (size_t)n * 4);
            for (int i = 1; i < nin; i++)
                dmuon_f32_add(a, a, (const float *)(in[i] + at * ps), (size_t)n);
            dmuon_f32_add(l, a, l, (size_t)n);
        }
        if (dst_f32)
            memcpy(dst, l, (size_t)n * 4);
        else
            dmuon_bf16_from_f32((uint16_t *)dst, l, (size_t)n);
        return;
    }
    /* BF16 at every level: L = rnd(Σ); a = in_0; a = rnd(a + in_i); rnd(a + L) */
    uint16_t *o = (uint16_t *)dst + at;
    if (!nin) {
        dmuon_bf16_from_f32(o, l, (size_t)n);
        return;
    }
    dmuon_bf16_add_rounded(o, bf16_partials(in, nin, at, n, (uint16_t *)(l + REDUCE_BLOCK)), l,
                           (size_t)n);
}

/* Computes one chunk (reduce_block over its blocks). */
static void reduce_chunk(mpi_group *g, const dmuon_chunk *c, dmuon_dtype dt, int f32p,
                         unsigned char *const *in, int nin, void *dst, int dst_f32)
{
    for (int64_t at = 0; at < c->count; at += REDUCE_BLOCK) {
        int64_t n = c->count - at < REDUCE_BLOCK ? c->count - at : REDUCE_BLOCK;
        reduce_block(g, c, at, n, dt, f32p, in, nin, dst, dst_f32);
    }
}

static int partial_size(const mpi_group *g, dmuon_dtype dt, int *f32p)
{
    *f32p = dt == DMUON_F32 || g->fp32_accum;
    return *f32p ? 4 : 2;
}

static dmuon_rc post_partial_recv(mpi_group *g, queue_state *qs, int i, int k)
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

/* Arms the first `slots` partial receives of every incoming stream: they
 * land in private staging, so this needs no node agreement. */
static dmuon_rc reduce_arm(mpi_group *g)
{
    for (int q = 0; q < g->topo->nodes; q++) {
        queue_state *qs = &g->qs[1][q];
        qs->next = 0;
        for (int i = 0; i < qs->nin; i++)
            for (int k = 0; k < qs->n && k < g->slots; k++)
                DMUON_TRY(post_partial_recv(g, qs, i, k));
        g->active += qs->n > 0;
    }
    return DMUON_OK;
}

/* One non-blocking pass over the reduce queues; nothing is summed before
 * every rank of the node has entered (its gradients are in place). */
static dmuon_rc reduce_pass(mpi_group *g, int *progressed)
{
    const dmuon_topo *t = g->topo;
    int R = t->nodes, K = t->per_node, S = g->slots;
    if (!g->node_in) {
        for (int j = 0; j < K; j++)
            if (!peer_arrived(g, j))
                return DMUON_OK;
        MPI_Win_sync(g->win);
        g->node_in = 1;
        *progressed = 1;
    }
    unsigned char *inp[DMUON_STAR_MAX_NODES > 64 ? DMUON_STAR_MAX_NODES : 64];
    DMUON_TRY(poll_heads(g, 1));
    for (int q = 0; q < R; q++) {
        queue_state *qs = &g->qs[1][q];
        while (qs->next < qs->n) {
            int k = qs->next, slot = k % S, ready = 1;
            const dmuon_chunk *c = &qs->chunks[k];
            /* its partials arrived and its staging slot's last send is done
             * (or they were not polled yet) */
            for (int i = 0; i < qs->nin && ready; i++)
                ready = qs->rreq[i * S + slot] == MPI_REQUEST_NULL;
            if (ready && qs->nout)
                ready = qs->sreq[slot] == MPI_REQUEST_NULL;
            if (!ready)
                break;
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
                          &qs->sreq[slot]) != MPI_SUCCESS)
                return DMUON_FAIL(DMUON_ECOMM, "reducescatterv: MPI_Isend failed");
            if (k + S < qs->n)
                for (int i = 0; i < qs->nin; i++)
                    DMUON_TRY(post_partial_recv(g, qs, i, k + S));
            qs->next++;
            g->active -= qs->next == qs->n;
            *progressed = 1;
        }
    }
    return DMUON_OK;
}

/* The deadline message of a reduce still running its queues. */
static dmuon_rc reduce_late(mpi_group *g)
{
    const dmuon_topo *t = g->topo;
    int K = t->per_node, me = t->local, S = g->slots;
    for (int j = 0; j < K && !g->node_in; j++)
        if (!peer_arrived(g, j))
            return DMUON_FAIL(DMUON_ETIMEOUT, "reducescatterv: rank %d of this node (node %d) "
                              "did not enter call %llu within the %d ms deadline",
                              dmuon_topo_rank_of(K, t->node_id, j), t->node_id,
                              (unsigned long long)g->seq, g->deadline_ms);
    for (int q = 0; q < t->nodes; q++) {
        queue_state *qs = &g->qs[1][q];
        if (qs->next == qs->n)
            continue;
        int slot = qs->next % S;
        for (int i = 0; i < qs->nin; i++) {
            int done = 0;
            MPI_Test(&qs->rreq[i * S + slot], &done, MPI_STATUS_IGNORE);
            if (!done)
                return DMUON_FAIL(DMUON_ETIMEOUT, "reducescatterv: the partial sum of chunk %d "
                                  "of %d of the queue of owner node %d (rail %d) did not arrive "
                                  "from rank %d (node %d) within the %d ms deadline",
                                  qs->next + 1, qs->n, q, me,
                                  dmuon_topo_rank_of(K, qs->in[i], me), qs->in[i],
                                  g->deadline_ms);
        }
        return DMUON_FAIL(DMUON_ETIMEOUT, "reducescatterv: chunk %d of %d of the queue of owner "
                          "node %d (rail %d) could not be sent to rank %d (node %d) within the "
                          "%d ms deadline", qs->next + 1, qs->n, q, me,
                          dmuon_topo_rank_of(K, qs->out[0], me), qs->out[0], g->deadline_ms);
    }
    return DMUON_FAIL(DMUON_ETIMEOUT, "reducescatterv: no progress within the %d ms deadline",
                      g->deadline_ms);
}

/* --------------------------------------------------- one call, split ---- */

/* Moves the call in flight as far as it goes without blocking; *done once
 * it has completed (then nothing of it is in flight any more). */
static dmuon_rc call_progress(mpi_group *g, int *progressed, int *done)
{
    *done = 0;
    if (g->stage == ST_QUEUES) {
        DMUON_TRY(g->kind == 0 ? gather_pass(g, progressed) : reduce_pass(g, progressed));
        if (g->active == 0 && g->node_in) {
            if (g->kind == 0)   /* stores still owed to the node */
                for (int q = 0; q < g->topo->nodes; q++)
                    gather_flush(g, &g->qs[0][q]);
            g->stage = ST_SENDS;
            *progressed = 1;
        }
    }
    if (g->stage == ST_SENDS) {
        int all = 0, q = 0;
        DMUON_TRY(sends_done(g, &all, &q));
        if (all) {
            g->stage = ST_COUNTS;
            *progressed = 1;
        }
    }
    if (g->stage == ST_COUNTS && counts_reached(g)) {
        MPI_Win_sync(g->win);
        g->stage = ST_DONE;
        inflight_remove(g);
        *progressed = 1;
    }
    *done = g->stage == ST_DONE;
    return DMUON_OK;
}

/* The deadline message for the stage the call is in. */
static dmuon_rc call_late(mpi_group *g)
{
    const dmuon_topo *t = g->topo;
    const char *op = op_name(g->kind);
    if (g->stage == ST_QUEUES)
        return g->kind == 0 ? gather_late(g) : reduce_late(g);
    if (g->stage == ST_SENDS) {
        int all = 0, q = 0;
        DMUON_TRY(sends_done(g, &all, &q));
        queue_state *qs = &g->qs[g->kind][q];
        return DMUON_FAIL(DMUON_ETIMEOUT, "%s: a send of the queue of node %d (rail %d) to node "
                          "%d was not taken within the %d ms deadline", op, q, t->local,
                          qs->nout ? qs->out[0] : -1, g->deadline_ms);
    }
    int which[2] = {g->kind == 0 ? W_LANDED : W_GRAD_READ, g->kind == 0 ? W_READ : W_SUMMED};
    for (int i = 0; i < 2; i++) {
        uint64_t target, v;
        int64_t per;
        v = count_of(g, which[i], &target, &per);
        if (v < target)
            return DMUON_FAIL(DMUON_ETIMEOUT, "%s: only %lld of %lld bytes %s within the %d ms "
                              "deadline (the rail ranks of node %d did not finish)", op,
                              (long long)(per - (int64_t)(target - v)), (long long)per,
                              which[i] == W_LANDED ? "of the layer reached this rank's buffer"
                              : which[i] == W_READ ? "of this rank's window were read"
                              : which[i] == W_GRAD_READ ? "of this rank's buffer were reduced"
                                                        : "of sums reached this rank's window",
                              g->deadline_ms, t->node_id);
    }
    return DMUON_FAIL(DMUON_ETIMEOUT, "%s: no progress within the %d ms deadline", op,
                      g->deadline_ms);
}

/* Moves every other call in flight on the same memory (never blocks).  A
 * failure there marks that group failed; its own test or wait reports it. */
static void progress_all_but(dmuon_symm *mem, const mpi_group *g)
{
    mpi_group *h = *(mpi_group **)dmuon_mpi_symm_inflight(mem);
    while (h) {
        mpi_group *next = h->next_inflight;
        if (h != g) {
            int progressed = 0, done = 0;
            dmuon_rc rc = call_progress(h, &progressed, &done);
            if (rc != DMUON_OK) {
                snprintf(h->failmsg, sizeof h->failmsg, "%s", dmuon_errmsg());
                h->failrc = rc;
                call_fail(h, rc);
            }
        }
        h = next;
    }
}

static void progress_others(mpi_group *g) { progress_all_but(g->mem, g); }

void dmuon_mpi_progress_inflight(dmuon_symm *s) { progress_all_but(s, NULL); }

static dmuon_rc call_start(dmuon_group *pub, int kind, int64_t buffer_offset,
                           int64_t window_offset)
{
    mpi_group *g = pub->impl;
    DMUON_TRY(dmuon_mpi_call_admit(g->broken, g->kind, kind));
    g->buf = buffer_offset;
    g->winoff = window_offset;
    g->seq++;
    if (kind == 0)
        g->gathers++;
    else
        g->reduces++;
    g->kind = kind;
    g->stage = ST_QUEUES;
    g->node_in = 0;
    g->active = 0;
    inflight_add(g);
    dmuon_waiter_start(&g->w, g->deadline_ms);
    node_post(g);
    dmuon_rc rc = kind == 0 ? gather_arm(g) : reduce_arm(g);
    if (rc == DMUON_OK) {
        int progressed = 0, done = 0;
        rc = call_progress(g, &progressed, &done);
    }
    if (rc != DMUON_OK)
        return call_fail(g, dmuon_err_trace_add(rc, __FILE__, __LINE__));
    return DMUON_OK;
}

/* The state a caller finds: the call finished (reset to idle), failed
 * elsewhere (report it), or still running. */
static dmuon_rc call_check(mpi_group *g, int kind, const char *what, int *finished)
{
    *finished = 0;
    if (g->failrc != DMUON_OK) {
        dmuon_rc rc = g->failrc;
        g->failrc = DMUON_OK;
        return DMUON_FAIL(rc, "%s", g->failmsg);
    }
    if (g->broken)
        return DMUON_FAIL(DMUON_ECOMM, "%s: the group failed in an earlier call and cannot "
                          "be used", op_name(kind));
    if (g->kind != kind)
        return DMUON_FAIL(DMUON_EINVAL, "%s_%s: no %s was started on this group", op_name(kind),
                          what, op_name(kind));
    if (g->stage == ST_DONE) {
        g->kind = -1;
        *finished = 1;
    }
    return DMUON_OK;
}

static dmuon_rc call_test(dmuon_group *pub, int kind, int *done)
{
    mpi_group *g = pub->impl;
    int finished;
    *done = 0;
    DMUON_TRY(call_check(g, kind, "test", &finished));
    if (finished) {
        *done = 1;
        return DMUON_OK;
    }
    int progressed = 0, fin = 0;
    dmuon_rc rc = call_progress(g, &progressed, &fin);
    if (rc != DMUON_OK)
        return call_fail(g, dmuon_err_trace_add(rc, __FILE__, __LINE__));
    progress_others(g);
    if (fin) {
        g->kind = -1;
        *done = 1;
    }
    return DMUON_OK;
}

static dmuon_rc call_wait(dmuon_group *pub, int kind, int restart)
{
    mpi_group *g = pub->impl;
    int finished;
    DMUON_TRY(call_check(g, kind, "wait", &finished));
    if (finished)
        return DMUON_OK;
    if (restart)
        dmuon_waiter_start(&g->w, g->deadline_ms);
    for (;;) {
        int progressed = 0, fin = 0;
        dmuon_rc rc = call_progress(g, &progressed, &fin);
        if (rc != DMUON_OK)
            return call_fail(g, dmuon_err_trace_add(rc, __FILE__, __LINE__));
        if (fin) {
            g->kind = -1;
            return DMUON_OK;
        }
        if (progressed) {
            g->w.idle = 0;
            continue;
        }
        progress_others(g);
        if (dmuon_waiter_expired(&g->w))
            return call_fail(g, call_late(g));
        dmuon_waiter_idle(&g->w);
    }
}

/* ------------------------------------------------- backend entries ---- */

static dmuon_rc sched_allgatherv(dmuon_group *pub, int64_t buffer_offset, int64_t window_offset)
{
    DMUON_TRY(call_start(pub, 0, buffer_offset, window_offset));
    DMUON_TRY(call_wait(pub, 0, 0));
    return DMUON_OK;
}

static dmuon_rc sched_reduce_scatterv(dmuon_group *pub, int64_t buffer_offset,
                                      int64_t window_offset)
{
    DMUON_TRY(call_start(pub, 1, buffer_offset, window_offset));
    DMUON_TRY(call_wait(pub, 1, 0));
    return DMUON_OK;
}

static dmuon_rc sched_start(dmuon_group *pub, int kind, int64_t buffer_offset,
                            int64_t window_offset)
{
    DMUON_TRY(call_start(pub, kind, buffer_offset, window_offset));
    return DMUON_OK;
}

static dmuon_rc sched_test(dmuon_group *pub, int kind, int *done)
{
    DMUON_TRY(call_test(pub, kind, done));
    return DMUON_OK;
}

static dmuon_rc sched_wait(dmuon_group *pub, int kind)
{
    DMUON_TRY(call_wait(pub, kind, 1));
    return DMUON_OK;
}

const dmuon_group_ops dmuon_mpi_scheduled_ops = {
    .ctrl_bytes = sched_group_ctrl_bytes,
    .staging_bytes = sched_group_staging_bytes,
    .create = sched_group_create,
    .free = sched_group_free,
    .allgatherv = sched_allgatherv,
    .reduce_scatterv = sched_reduce_scatterv,
    .start = sched_start,
    .test = sched_test,
    .wait = sched_wait,
};
