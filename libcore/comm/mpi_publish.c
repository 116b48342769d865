/*
 * mpi_publish.c — the HSDP cross-node publish on the MPI backend
 * (dmuon/publish.h, comm/backend.h), over the copy range of symmetric memory
 * the public layer (publish.c) checked.
 *
 * The route and the chunks come from the publish schedule (sched.c,
 * dmuon_pub_sched); this file only moves them.
 *
 * Wire format, per parameter p of rail s, on the publish's own duplicate of
 * the rail communicator with tag p: the chunks of p in increasing offset;
 * the last chunk travels with the step number appended (8 bytes), so a
 * parameter of one chunk costs one message per hop.  Each hop receives the
 * chunks straight into its copy, the last one into a small per-parameter
 * tail buffer (receives armed by begin), and forwards every chunk the moment
 * it has arrived; MPI's non-overtaking order matches the i-th message to the
 * i-th receive, so the step can only complete a round after every chunk of
 * that round.
 * The arrival flag is set from the flag message only when the whole round
 * is in, and a wait compares it with the step it wants: equal is accepted,
 * anything else is not (an older flag keeps it waiting; a completed round
 * carrying another step is reported as stale).
 *
 * Invariant: between begin(t) and end(t) every parameter this rank leads
 * has exactly one armed round; end(t) leaves no request outstanding.
 */
#include "dmuon/publish.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dmuon/collv.h"
#include "dmuon/sched.h"
#include "mpi_backend.h"
#include "wait.h"

typedef struct {
    int idx;                 /* parameter index in the table */
    int owner_node;
    int lead;                /* 1: this rank receives it; 0: this rank owns it */
    int prev, next;          /* rail ranks (= node ids); next −1 when last */
    int nchunks;
    const dmuon_pub_chunk *chunks;   /* its chunks in the schedule */
    /* per-step state */
    int got;                 /* chunks received (lead) */
    int round_done;
    int64_t flag;            /* arrival flag: step of the last complete round */
    int64_t in_step;
    unsigned char *tail;     /* last chunk + 8-byte step */
    int tail_bytes;          /* data bytes of the last chunk */
    MPI_Request *rreq;       /* nchunks + 1 (lead) */
    MPI_Request *sreq;       /* nchunks + 1 (if next ≥ 0) */
} param_state;

typedef struct {
    const dmuon_topo *topo;
    MPI_Comm rail;
    MPI_Comm node;           /* the node half (node_load): a duplicate of t->node */
    dmuon_symm *mem;         /* the publish's memory: node peers' copies */
    int64_t copy_offset;
    const dmuon_segment *params;   /* the public publish's table */
    const dmuon_pub_sched *sched;  /* the public publish's schedule */
    int n;
    param_state *mine;       /* parameters of this rank's rail: owned or led */
    int nmine;
    int *slot_of;            /* param index → index in mine, or −1 */
    unsigned char *copy;
    int64_t copy_bytes, chunk_bytes;
    int deadline_ms;
    int64_t step;            /* current step (0 before the first) */
    int open;                /* between begin and end */
    int broken;
    MPI_Request *req_mem;
} mpi_pub;

static void mpi_publish_free(dmuon_publish *pub);

static dmuon_rc mpi_publish_create(dmuon_publish *pub)
{
    dmuon_rc rc = DMUON_OK;
    const dmuon_topo *t = pub->topo;
    const dmuon_segment *params = pub->params;
    int n = pub->n;
    mpi_pub *p = calloc(1, sizeof *p);
    int fail = !p;
    MPI_Allreduce(MPI_IN_PLACE, &fail, 1, MPI_INT, MPI_MAX, t->world);
    if (fail) {
        free(p);
        return DMUON_FAIL(DMUON_ENOMEM, "out of memory creating a publish");
    }
    pub->impl = p;
    p->topo = t;
    p->rail = MPI_COMM_NULL;
    p->node = MPI_COMM_NULL;
    p->mem = pub->mem;
    p->copy_offset = pub->copy_offset;
    p->params = params;
    p->sched = &pub->sched;
    p->n = n;
    p->copy = pub->copy;
    p->copy_bytes = pub->copy_bytes;
    p->chunk_bytes = pub->chunk_bytes;
    p->deadline_ms = pub->deadline_ms;
    int tag_ub = 32767, *tub = NULL, flag = 0;
    MPI_Comm_get_attr(t->world, MPI_TAG_UB, &tub, &flag);
    if (flag && tub)
        tag_ub = *tub;
    if (n > tag_ub) {
        rc = DMUON_FAIL(DMUON_EINVAL, "%d parameters exceed this MPI's %d message tags", n, tag_ub);
        goto fail;
    }

    int R = t->nodes, K = t->per_node, s = t->local, r = t->node_id;
    p->slot_of = malloc((n ? (size_t)n : 1) * sizeof *p->slot_of);
    p->mine = calloc(n ? (size_t)n : 1, sizeof *p->mine);
    fail = !p->slot_of || !p->mine;
    size_t nreq = 0;
    if (!fail) {
        for (int i = 0; i < n; i++) {
            p->slot_of[i] = -1;
            if (params[i].owner % K != s || R == 1)
                continue;
            param_state *ps = &p->mine[p->nmine];
            ps->idx = i;
            ps->owner_node = params[i].owner / K;
            ps->lead = ps->owner_node != r;
            dmuon_pub_sched_hop(p->sched, i, r, &ps->prev, &ps->next);
            ps->nchunks = p->sched->params[i].nchunks;
            ps->chunks = p->sched->chunks + p->sched->params[i].first;
            nreq += (size_t)(ps->nchunks + 1) * 2;
            p->slot_of[i] = p->nmine++;
        }
        p->req_mem = malloc((nreq ? nreq : 1) * sizeof(MPI_Request));
        fail = !p->req_mem;
        for (int i = 0; i < p->nmine && !fail; i++) {
            param_state *ps = &p->mine[i];
            ps->tail_bytes = (int)ps->chunks[ps->nchunks - 1].bytes;
            ps->tail = malloc((size_t)ps->tail_bytes + 8);
            fail = !ps->tail;
        }
    }
    MPI_Allreduce(MPI_IN_PLACE, &fail, 1, MPI_INT, MPI_MAX, t->world);
    if (fail) {
        rc = DMUON_FAIL(DMUON_ENOMEM, "out of memory creating a publish of %d parameters", n);
        goto fail;
    }
    MPI_Request *rq = p->req_mem;
    for (size_t i = 0; i < nreq; i++)
        rq[i] = MPI_REQUEST_NULL;
    for (int i = 0; i < p->nmine; i++) {
        p->mine[i].rreq = rq;
        rq += p->mine[i].nchunks + 1;
        p->mine[i].sreq = rq;
        rq += p->mine[i].nchunks + 1;
    }
    fail = MPI_Comm_dup(t->rail, &p->rail) != MPI_SUCCESS ||
           MPI_Comm_dup(t->node, &p->node) != MPI_SUCCESS;
    MPI_Allreduce(MPI_IN_PLACE, &fail, 1, MPI_INT, MPI_MAX, t->world);
    if (fail) {
        rc = DMUON_FAIL(DMUON_ECOMM, "MPI_Comm_dup of the rail or node communicator failed");
        goto fail;
    }
    return DMUON_OK;
fail:
    mpi_publish_free(pub);
    return rc;
}

static void pub_free(mpi_pub *p)
{
    if (!p)
        return;
    for (int i = 0; i < p->nmine; i++) {
        param_state *ps = &p->mine[i];
        for (int k = 0; k <= ps->nchunks; k++) {
            if (ps->rreq && ps->rreq[k] != MPI_REQUEST_NULL) {
                MPI_Cancel(&ps->rreq[k]);
                MPI_Request_free(&ps->rreq[k]);
            }
            if (ps->sreq && ps->sreq[k] != MPI_REQUEST_NULL)
                MPI_Request_free(&ps->sreq[k]);
        }
    }
    if (p->rail != MPI_COMM_NULL)
        MPI_Comm_free(&p->rail);
    if (p->node != MPI_COMM_NULL)
        MPI_Comm_free(&p->node);
    for (int i = 0; p->mine && i < p->n; i++)
        free(p->mine[i].tail);
    free(p->slot_of);
    free(p->mine);
    free(p->req_mem);
    free(p);
}

static int64_t pub_flag(const mpi_pub *p, int param)
{
    if (param < 0 || param >= p->n || p->slot_of[param] < 0)
        return 0;
    return p->mine[p->slot_of[param]].flag;
}

static dmuon_rc pub_progress(mpi_pub *p);

static void chunk_span(const mpi_pub *p, const param_state *ps, int k, unsigned char **ptr,
                       int *bytes)
{
    *ptr = p->copy + ps->chunks[k].offset;
    *bytes = (int)ps->chunks[k].bytes;
}

static dmuon_rc pub_begin(mpi_pub *p, int64_t step)
{
    if (p->broken)
        return DMUON_FAIL(DMUON_ECOMM, "publish: failed in an earlier call and cannot be used");
    if (p->open)
        return DMUON_FAIL(DMUON_EINVAL, "publish: step %lld began before step %lld ended",
                          (long long)step, (long long)p->step);
    if (step <= p->step)
        return DMUON_FAIL(DMUON_EINVAL, "publish: step %lld does not follow step %lld",
                          (long long)step, (long long)p->step);
    p->step = step;
    p->open = 1;
    for (int i = 0; i < p->nmine; i++) {
        param_state *ps = &p->mine[i];
        ps->got = 0;
        ps->round_done = 0;
        if (!ps->lead)
            continue;
        for (int k = 0; k < ps->nchunks - 1; k++) {
            unsigned char *ptr;
            int bytes;
            chunk_span(p, ps, k, &ptr, &bytes);
            if (MPI_Irecv(ptr, bytes, MPI_BYTE, ps->prev, ps->idx, p->rail, &ps->rreq[k]) !=
                MPI_SUCCESS)
                goto comm;
        }
        if (MPI_Irecv(ps->tail, ps->tail_bytes + 8, MPI_BYTE, ps->prev, ps->idx, p->rail,
                      &ps->rreq[ps->nchunks - 1]) != MPI_SUCCESS)
            goto comm;
    }
    return DMUON_OK;
comm:
    p->broken = 1;
    return DMUON_FAIL(DMUON_ECOMM, "publish: MPI_Irecv failed");
}

static dmuon_rc pub_post(mpi_pub *p, int param, int64_t step)
{
    if (param < 0 || param >= p->n)
        return DMUON_FAIL(DMUON_EINVAL, "publish: parameter %d is not in the table of %d", param,
                          p->n);
    if (p->params[param].owner != p->topo->rank)
        return DMUON_FAIL(DMUON_EINVAL, "publish: parameter %d belongs to rank %d, not to this "
                          "rank", param, (int)p->params[param].owner);
    if (!p->open || step > p->step)
        return DMUON_FAIL(DMUON_EINVAL, "publish: parameter %d posted for step %lld outside "
                          "step %lld", param, (long long)step, (long long)p->step);
    if (p->slot_of[param] < 0)
        return DMUON_OK; /* one node: nobody to publish to */
    param_state *ps = &p->mine[p->slot_of[param]];
    if (ps->round_done)
        return DMUON_FAIL(DMUON_EINVAL, "publish: parameter %d posted twice in step %lld", param,
                          (long long)p->step);
    unsigned char *ptr;
    int bytes;
    for (int k = 0; k < ps->nchunks - 1; k++) {
        chunk_span(p, ps, k, &ptr, &bytes);
        if (MPI_Isend(ptr, bytes, MPI_BYTE, ps->next, ps->idx, p->rail, &ps->sreq[k]) !=
            MPI_SUCCESS)
            goto comm;
    }
    chunk_span(p, ps, ps->nchunks - 1, &ptr, &bytes);
    memcpy(ps->tail, ptr, (size_t)bytes);
    memcpy(ps->tail + bytes, &step, 8);
    if (MPI_Isend(ps->tail, bytes + 8, MPI_BYTE, ps->next, ps->idx, p->rail,
                  &ps->sreq[ps->nchunks - 1]) != MPI_SUCCESS)
        goto comm;
    ps->round_done = 1;
    ps->flag = step;
    return pub_progress(p);
comm:
    p->broken = 1;
    return DMUON_FAIL(DMUON_ECOMM, "publish: MPI_Isend failed");
}

/* Advances one led parameter as far as its arrivals allow; *moved is set
 * when anything happened. */
static dmuon_rc advance(mpi_pub *p, param_state *ps, int *moved)
{
    while (ps->got < ps->nchunks) {
        int done = 0;
        if (MPI_Test(&ps->rreq[ps->got], &done, MPI_STATUS_IGNORE) != MPI_SUCCESS)
            return DMUON_FAIL(DMUON_ECOMM, "publish: MPI_Test failed");
        if (!done)
            return DMUON_OK;
        *moved = 1;
        if (ps->got < ps->nchunks - 1) {
            if (ps->next >= 0) {
                unsigned char *ptr;
                int bytes;
                chunk_span(p, ps, ps->got, &ptr, &bytes);
                if (MPI_Isend(ptr, bytes, MPI_BYTE, ps->next, ps->idx, p->rail,
                              &ps->sreq[ps->got]) != MPI_SUCCESS)
                    return DMUON_FAIL(DMUON_ECOMM, "publish: MPI_Isend failed");
            }
        } else {
            unsigned char *ptr;
            int bytes;
            chunk_span(p, ps, ps->got, &ptr, &bytes);
            memcpy(ptr, ps->tail, (size_t)bytes);
            memcpy(&ps->in_step, ps->tail + bytes, 8);
            if (ps->next >= 0 &&
                MPI_Isend(ps->tail, bytes + 8, MPI_BYTE, ps->next, ps->idx, p->rail,
                          &ps->sreq[ps->got]) != MPI_SUCCESS)
                return DMUON_FAIL(DMUON_ECOMM, "publish: MPI_Isend failed");
            ps->flag = ps->in_step;
            ps->round_done = 1;
        }
        ps->got++;
    }
    return DMUON_OK;
}

static dmuon_rc pub_progress(mpi_pub *p)
{
    if (!p->open)
        return DMUON_OK;
    for (int i = 0; i < p->nmine; i++) {
        int moved = 0;
        if (p->mine[i].lead) {
            dmuon_rc rc = advance(p, &p->mine[i], &moved);
            if (rc != DMUON_OK) {
                p->broken = 1;
                return rc;
            }
        }
    }
    return DMUON_OK;
}

static dmuon_rc stale(const mpi_pub *p, const param_state *ps, int64_t step)
{
    return DMUON_FAIL(DMUON_ECHECK, "publish: parameter %d (rail %d, owner rank %d) arrived "
                      "with step %lld, expected step %lld: stale arrival flag not accepted",
                      ps->idx, p->topo->local, (int)p->params[ps->idx].owner,
                      (long long)ps->flag, (long long)step);
}

static dmuon_rc late(const mpi_pub *p, const param_state *ps, int64_t step)
{
    const dmuon_topo *t = p->topo;
    return DMUON_FAIL(DMUON_ETIMEOUT, "publish: parameter %d (rail %d, owner rank %d) of step "
                      "%lld: %d of %d chunks arrived from rank %d (node %d) within the %d ms "
                      "deadline; the arrival flag holds step %lld", ps->idx, t->local,
                      (int)p->params[ps->idx].owner, (long long)step,
                      ps->got < ps->nchunks ? ps->got : ps->nchunks, ps->nchunks,
                      dmuon_topo_rank_of(t->per_node, ps->prev, t->local), ps->prev,
                      p->deadline_ms, (long long)ps->flag);
}

static dmuon_rc pub_wait(mpi_pub *p, int param, int64_t step)
{
    if (param < 0 || param >= p->n)
        return DMUON_FAIL(DMUON_EINVAL, "publish: parameter %d is not in the table of %d", param,
                          p->n);
    if (p->slot_of[param] < 0 || !p->mine[p->slot_of[param]].lead)
        return DMUON_FAIL(DMUON_EINVAL, "publish: this rank does not lead parameter %d", param);
    param_state *ps = &p->mine[p->slot_of[param]];
    dmuon_waiter w;
    dmuon_waiter_start(&w, p->deadline_ms);
    for (;;) {
        if (ps->flag == step)
            return DMUON_OK;
        if (ps->round_done && p->open && step == p->step)
            return stale(p, ps, step);
        DMUON_TRY(pub_progress(p));
        if (ps->flag == step)
            return DMUON_OK;
        if (dmuon_waiter_expired(&w)) {
            p->broken = 1;
            return late(p, ps, step);
        }
        dmuon_waiter_idle(&w);
    }
}

static dmuon_rc pub_end(mpi_pub *p, int64_t step)
{
    if (!p->open || step != p->step)
        return DMUON_FAIL(DMUON_EINVAL, "publish: end of step %lld, but step %lld is open",
                          (long long)step, (long long)p->step);
    dmuon_waiter w;
    dmuon_waiter_start(&w, p->deadline_ms);
    for (int i = 0; i < p->nmine; i++) {
        param_state *ps = &p->mine[i];
        for (;;) {
            DMUON_TRY(pub_progress(p));
            int done = ps->lead ? ps->round_done : 1;
            if (done && ps->next >= 0 && (ps->lead || ps->round_done)) {
                int all = 0;
                if (MPI_Testall(ps->nchunks + 1, ps->sreq, &all, MPI_STATUSES_IGNORE) !=
                    MPI_SUCCESS) {
                    p->broken = 1;
                    return DMUON_FAIL(DMUON_ECOMM, "publish: MPI_Testall failed");
                }
                done = all;
            }
            if (!ps->lead && !ps->round_done) {
                p->broken = 1;
                return DMUON_FAIL(DMUON_EINVAL, "publish: step %lld ended before this rank "
                                  "posted its parameter %d", (long long)step, ps->idx);
            }
            if (done)
                break;
            if (dmuon_waiter_expired(&w)) {
                p->broken = 1;
                if (ps->lead && !ps->round_done)
                    return late(p, ps, step);
                const dmuon_topo *t = p->topo;
                return DMUON_FAIL(DMUON_ETIMEOUT, "publish: parameter %d (rail %d) could not be "
                                  "forwarded to rank %d (node %d) within the %d ms deadline",
                                  ps->idx, t->local,
                                  dmuon_topo_rank_of(t->per_node, ps->next, t->local), ps->next,
                                  p->deadline_ms);
            }
            dmuon_waiter_idle(&w);
        }
    }
    p->open = 0;
    for (int i = 0; i < p->nmine; i++)
        if (p->mine[i].lead && p->mine[i].flag != step)
            return stale(p, &p->mine[i], step);
    return DMUON_OK;
}

/* The node's ranks meet (a barrier within the deadline), moving the
 * publish meanwhile so that no peer waits on this rank's forwarding. */
static dmuon_rc node_meet(mpi_pub *p)
{
    MPI_Request q;
    if (MPI_Ibarrier(p->node, &q) != MPI_SUCCESS) {
        p->broken = 1;
        return DMUON_FAIL(DMUON_ECOMM, "publish node load: MPI_Ibarrier failed");
    }
    dmuon_waiter w;
    dmuon_waiter_start(&w, p->deadline_ms);
    for (;;) {
        int done = 0;
        if (MPI_Test(&q, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
            p->broken = 1;
            return DMUON_FAIL(DMUON_ECOMM, "publish node load: MPI_Test failed");
        }
        if (done)
            return DMUON_OK;
        if (p->open)
            DMUON_TRY(pub_progress(p));
        if (dmuon_waiter_expired(&w)) {
            p->broken = 1;
            return DMUON_FAIL(DMUON_ETIMEOUT, "publish node load: rank %d: the ranks of node %d "
                              "did not all arrive within the %d ms deadline", p->topo->rank,
                              p->topo->node_id, p->deadline_ms);
        }
        dmuon_waiter_idle(&w);
    }
}

static dmuon_rc pub_node_load(mpi_pub *p, const dmuon_segment *segs, const int *params, int n,
                              int64_t dst_offset, int64_t step)
{
    const int K = p->topo->per_node;
    if (!p->mem->peer)
        return DMUON_FAIL(DMUON_EUNSUPPORTED, "publish node load: the node's memory is not "
                          "mapped here");
    for (int j = 0; j < n; j++) {
        const int idx = params[j];
        if (p->slot_of[idx] >= 0 && p->mine[p->slot_of[idx]].lead)
            DMUON_TRY(pub_wait(p, idx, step));
    }
    DMUON_TRY(node_meet(p));
    for (int j = 0; j < n; j++) {
        const dmuon_segment *q = &p->params[params[j]];
        const unsigned char *src = p->mem->peer[q->owner % K] + p->copy_offset + q->offset;
        memcpy(p->mem->base + dst_offset + segs[j].offset, src,
               (size_t)(q->count * (int64_t)dmuon_dtype_size(q->dtype)));
    }
    /* nobody changes its copy before every rank of the node has read it */
    return node_meet(p);
}

/* ------------------------------------------------- backend entries ---- */

static void mpi_publish_free(dmuon_publish *pub)
{
    if (pub->impl)
        pub_free(pub->impl);
    pub->impl = NULL;
}

static dmuon_rc mpi_publish_begin(dmuon_publish *pub, int64_t step)
{
    return pub_begin(pub->impl, step);
}

static dmuon_rc mpi_publish_post(dmuon_publish *pub, int param, int64_t step)
{
    return pub_post(pub->impl, param, step);
}

static dmuon_rc mpi_publish_progress(dmuon_publish *pub)
{
    return pub_progress(pub->impl);
}

static dmuon_rc mpi_publish_wait(dmuon_publish *pub, int param, int64_t step)
{
    return pub_wait(pub->impl, param, step);
}

static dmuon_rc mpi_publish_end(dmuon_publish *pub, int64_t step)
{
    return pub_end(pub->impl, step);
}

static int64_t mpi_publish_flag(const dmuon_publish *pub, int param)
{
    return pub_flag(pub->impl, param);
}

static dmuon_rc mpi_publish_node_load(dmuon_publish *pub, const dmuon_segment *segs,
                                      const int *params, int n, int64_t dst_offset, int64_t step)
{
    return pub_node_load(pub->impl, segs, params, n, dst_offset, step);
}

const dmuon_publish_ops dmuon_mpi_publish_scheduled_ops = {
    .create = mpi_publish_create,
    .free = mpi_publish_free,
    .begin = mpi_publish_begin,
    .post = mpi_publish_post,
    .progress = mpi_publish_progress,
    .wait = mpi_publish_wait,
    .end = mpi_publish_end,
    .flag = mpi_publish_flag,
    .node_load = mpi_publish_node_load,
};

/* ------------------------------------------------ the per-owner publish --
 * One MPI_Ibcast per parameter of this rank's rail, rooted at the owner's
 * node, from and into the copy at the parameter's offset, all posted by end
 * in table order and completed within the deadline; begin and post only
 * keep the step (nothing streams while the caller computes). */

typedef struct {
    MPI_Comm rail;           /* duplicate of t->rail */
    MPI_Request *req;        /* one per parameter */
    int64_t *flag;           /* per parameter: the step of its last broadcast */
    int64_t step;
    int open, broken;
} po_pub;

static void po_free(dmuon_publish *pub)
{
    po_pub *q = pub->impl;
    if (q) {
        if (q->rail != MPI_COMM_NULL)
            MPI_Comm_free(&q->rail);
        free(q->req);
        free(q->flag);
        free(q);
    }
    pub->impl = NULL;
}

static dmuon_rc po_create(dmuon_publish *pub)
{
    const dmuon_topo *t = pub->topo;
    po_pub *q = calloc(1, sizeof *q);
    int fail = !q;
    if (q) {
        q->rail = MPI_COMM_NULL;
        q->req = malloc((size_t)(pub->n > 0 ? pub->n : 1) * sizeof *q->req);
        q->flag = calloc((size_t)(pub->n > 0 ? pub->n : 1), sizeof *q->flag);
        fail = !q->req || !q->flag;
    }
    for (int i = 0; !fail && i < pub->n; i++)
        if (pub->params[i].count * (int64_t)dmuon_dtype_size(pub->params[i].dtype) > INT_MAX)
            fail = 3;
    if (!fail)
        fail = MPI_Comm_dup(t->rail, &q->rail) != MPI_SUCCESS ? 2 : 0;
    MPI_Allreduce(MPI_IN_PLACE, &fail, 1, MPI_INT, MPI_MAX, t->world);
    pub->impl = q;
    if (fail) {
        po_free(pub);
        return fail == 3 ? DMUON_FAIL(DMUON_EINVAL, "publish (per-owner): a parameter of more "
                                      "than 2^31 - 1 bytes does not fit one MPI broadcast")
             : fail == 2 ? DMUON_FAIL(DMUON_ECOMM, "publish (per-owner): MPI_Comm_dup of the "
                                      "rail failed")
                         : DMUON_FAIL(DMUON_ENOMEM, "out of memory creating a publish");
    }
    for (int i = 0; i < pub->n; i++)
        q->req[i] = MPI_REQUEST_NULL;
    return DMUON_OK;
}

static dmuon_rc po_begin(dmuon_publish *pub, int64_t step)
{
    po_pub *q = pub->impl;
    if (q->broken)
        return DMUON_FAIL(DMUON_ECOMM, "publish: failed in an earlier step");
    return dmuon_pub_step_begin(&q->step, &q->open, step);
}

static dmuon_rc po_post(dmuon_publish *pub, int param, int64_t step)
{
    const po_pub *q = pub->impl;
    return dmuon_pub_step_post(pub, q->step, q->open, param, step);
}

static dmuon_rc po_progress(dmuon_publish *pub) { return DMUON_OK; }

static dmuon_rc po_end(dmuon_publish *pub, int64_t step)
{
    po_pub *q = pub->impl;
    const dmuon_topo *t = pub->topo;
    const int K = t->per_node;
    DMUON_TRY(dmuon_pub_step_end(q->step, &q->open, step));
    int k = 0;
    for (int i = 0; i < pub->n && t->nodes > 1; i++) {
        const dmuon_segment *s = &pub->params[i];
        if (s->owner % K != t->local)
            continue;
        if (MPI_Ibcast(pub->copy + s->offset,
                       (int)(s->count * (int64_t)dmuon_dtype_size(s->dtype)), MPI_BYTE,
                       s->owner / K, q->rail, &q->req[k++]) != MPI_SUCCESS) {
            q->broken = 1;
            return DMUON_FAIL(DMUON_ECOMM, "publish (per-owner): MPI_Ibcast of parameter %d "
                              "failed", i);
        }
    }
    dmuon_waiter w;
    dmuon_waiter_start(&w, pub->deadline_ms);
    for (;;) {
        int done = 0;
        if (MPI_Testall(k, q->req, &done, MPI_STATUSES_IGNORE) != MPI_SUCCESS) {
            q->broken = 1;
            return DMUON_FAIL(DMUON_ECOMM, "publish (per-owner): MPI_Testall failed");
        }
        if (done)
            break;
        if (dmuon_waiter_expired(&w)) {
            q->broken = 1;
            return DMUON_FAIL(DMUON_ETIMEOUT, "publish (per-owner): rank %d: the broadcasts of "
                              "step %lld on rail %d were not complete within the %d ms deadline",
                              t->rank, (long long)step, t->local, pub->deadline_ms);
        }
        dmuon_waiter_idle(&w);
    }
    for (int i = 0; i < pub->n; i++)
        if (pub->params[i].owner % K == t->local)
            q->flag[i] = step;
    return DMUON_OK;
}

static int64_t po_flag(const dmuon_publish *pub, int param)
{
    const po_pub *q = pub->impl;
    return param >= 0 && param < pub->n ? q->flag[param] : 0;
}

/* wait and node_load are not offered: nothing is known to have arrived
 * before end. */
const dmuon_publish_ops dmuon_mpi_publish_per_owner_ops = {
    .create = po_create,
    .free = po_free,
    .begin = po_begin,
    .post = po_post,
    .progress = po_progress,
    .end = po_end,
    .flag = po_flag,
};
