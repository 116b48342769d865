/*
 * nccl_publish.c — the HSDP publish on the nccl backend (dmuon/publish.h,
 * comm/backend.h): the per-owner algorithm and its node half, over the copy
 * range the public layer (publish.c) checked.
 *
 * Rail half (end): one ncclBroadcast per parameter of this rank's rail
 * (owner mod K = local), in table order, root = the owner's node (its rank
 * on the rail communicator), in place in the copy at the parameter's offset,
 * all in one NCCL group on the memory's stream; an event after them is
 * polled until the deadline (dmuon_nccl_event_wait: asynchronous errors and
 * the deadline abort the memory's communicators).  begin and post only keep
 * the step: nothing moves before end, as on MPI.
 *
 * Node half (node_load, after end of the step): one ncclBroadcast per listed
 * parameter on the node communicator, root = the column that leads it
 * (owner mod K), from the root's copy to dst_offset + segs[j].offset on every
 * rank of the node (the root's own destination included), one NCCL group,
 * waited for as above.  Every rank of the node passes the same list, so the
 * broadcasts match in order; NCCL's stream order keeps a later end from
 * overwriting a copy before the node's broadcast has read it.
 *
 * Not offered: the scheduled algorithm (per-parameter chunks as posted need
 * matched rooted calls on every rail rank in one order, which posts in any
 * order cannot give on NCCL's host API) and wait (nothing is known to have
 * arrived before end).  Compiled only: no GPU has run this file.
 *
 * Invariants: flags only grow (a parameter's flag is the step of its last
 * completed broadcast); ended is the last step whose end returned DMUON_OK.
 */
#include "nccl_backend.h"

#include "dmuon/ctl.h"

#ifdef DMUON_HAVE_NCCL

#include <stdlib.h>

typedef struct {
    cudaEvent_t ev;
    int64_t *flag;            /* per parameter: the step of its last broadcast */
    int64_t step, ended;
    int open;
} nccl_pub;

static void pub_free(dmuon_publish *pub)
{
    nccl_pub *q = pub->impl;
    if (q) {
        if (q->ev)
            cudaEventDestroy(q->ev);
        free(q->flag);
        free(q);
    }
    pub->impl = NULL;
}

static dmuon_rc pub_create(dmuon_publish *pub)
{
    nccl_pub *q = calloc(1, sizeof *q);
    if (q)
        q->flag = calloc((size_t)(pub->n > 0 ? pub->n : 1), sizeof *q->flag);
    pub->impl = q;
    nccl_symm *m = pub->mem->impl;
    dmuon_rc rc = q && q->flag ? dmuon_nccl_event_new(m, &q->ev, "publish")
                               : DMUON_FAIL(DMUON_ENOMEM, "out of memory creating a publish");
    rc = dmuon_nccl_comms_split(pub->topo, m->cs, rc, pub->deadline_ms);   /* agreed */
    if (rc != DMUON_OK)
        pub_free(pub);
    return rc;
}

static dmuon_rc pub_begin(dmuon_publish *pub, int64_t step)
{
    nccl_pub *q = pub->impl;
    nccl_symm *m = pub->mem->impl;
    DMUON_TRY(dmuon_nccl_usable(m->cs, "publish_begin"));
    return dmuon_pub_step_begin(&q->step, &q->open, step);
}

static dmuon_rc pub_post(dmuon_publish *pub, int param, int64_t step)
{
    const nccl_pub *q = pub->impl;
    return dmuon_pub_step_post(pub, q->step, q->open, param, step);
}

static dmuon_rc pub_progress(dmuon_publish *pub) { return DMUON_OK; }

/* Records the event after the work enqueued and waits for it. */
static dmuon_rc pub_finish(dmuon_publish *pub, const char *what)
{
    nccl_pub *q = pub->impl;
    nccl_symm *m = pub->mem->impl;
    DMUON_TRY(dmuon_nccl_event_record(q->ev, m, what));
    return dmuon_nccl_event_wait(q->ev, m->cs, pub->deadline_ms, what);
}

/* The end of an NCCL group of broadcasts; a failure aborts the
 * communicators (part of the group may be enqueued). */
static dmuon_rc group_end(nccl_symm *m, ncclResult_t r, const char *what)
{
    ncclResult_t e = ncclGroupEnd();
    if (r == ncclSuccess && e == ncclSuccess)
        return DMUON_OK;
    dmuon_nccl_comms_abort(m->cs);
    return DMUON_FAIL(DMUON_ECOMM, "%s: ncclBroadcast group: %s (NCCL communicators aborted)",
                      what, ncclGetErrorString(r != ncclSuccess ? r : e));
}

static dmuon_rc pub_end(dmuon_publish *pub, int64_t step)
{
    nccl_pub *q = pub->impl;
    nccl_symm *m = pub->mem->impl;
    const dmuon_topo *t = pub->topo;
    const int K = t->per_node;
    DMUON_TRY(dmuon_pub_step_end(q->step, &q->open, step));
    DMUON_TRY(dmuon_nccl_usable(m->cs, "publish_end"));
    if (t->nodes > 1) {
        ncclResult_t r = ncclGroupStart();
        for (int i = 0; i < pub->n && r == ncclSuccess; i++) {
            const dmuon_segment *s = &pub->params[i];
            if (s->owner % K != t->local)
                continue;
            void *at = pub->copy + s->offset;
            r = ncclBroadcast(at, at, (size_t)s->count * dmuon_dtype_size(s->dtype), ncclUint8,
                              s->owner / K, m->cs->rail, m->stream);
        }
        DMUON_TRY(group_end(m, r, "publish (per-owner)"));
        DMUON_TRY(pub_finish(pub, "publish (per-owner)"));
    }
    for (int i = 0; i < pub->n; i++)
        if (pub->params[i].owner % K == t->local)
            q->flag[i] = step;
    q->ended = step;
    return DMUON_OK;
}

static dmuon_rc pub_node_load(dmuon_publish *pub, const dmuon_segment *segs, const int *params,
                              int n, int64_t dst_offset, int64_t step)
{
    nccl_pub *q = pub->impl;
    nccl_symm *m = pub->mem->impl;
    const int K = pub->topo->per_node;
    if (q->open || step != q->ended)
        return DMUON_FAIL(DMUON_EINVAL, "publish node load: step %lld: on the nccl backend the "
                          "per-owner publish's node half follows the end of its step (last "
                          "ended: %lld%s)", (long long)step, (long long)q->ended,
                          q->open ? ", a step is open" : "");
    DMUON_TRY(dmuon_nccl_usable(m->cs, "publish node load"));
    ncclResult_t r = ncclGroupStart();
    for (int j = 0; j < n && r == ncclSuccess; j++) {
        const dmuon_segment *s = &pub->params[params[j]];
        r = ncclBroadcast(pub->copy + s->offset, pub->mem->base + dst_offset + segs[j].offset,
                          (size_t)s->count * dmuon_dtype_size(s->dtype), ncclUint8,
                          s->owner % K, m->cs->node, m->stream);
    }
    DMUON_TRY(group_end(m, r, "publish node load"));
    return pub_finish(pub, "publish node load");
}

static int64_t pub_flag(const dmuon_publish *pub, int param)
{
    const nccl_pub *q = pub->impl;
    return param >= 0 && param < pub->n ? q->flag[param] : 0;
}

const dmuon_publish_ops dmuon_nccl_publish_per_owner_ops = {
    .create = pub_create,
    .free = pub_free,
    .begin = pub_begin,
    .post = pub_post,
    .progress = pub_progress,
    .end = pub_end,
    .flag = pub_flag,
    .node_load = pub_node_load,
};

#else
typedef int dmuon_nccl_publish_unused;   /* built without NCCL */
#endif
