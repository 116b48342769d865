/*
 * nccl_dev.c — the nccl-dev backend's glue (nccl_backend.h): symmetric
 * memory of nccl_symm.c plus a device communicator, groups whose two
 * schedules are copied to the device, and the ops table.  The kernels are
 * kernels/nccl_dev.cu (comm/nccl_dev.h).
 *
 * Scope of this build: inside a node, loads and stores through LSA pointers
 * (both operators); across nodes AllGatherV with GIN puts along the rails
 * (compiled, never run: it needs several nodes with GIN-capable NICs),
 * ReduceScatterV across nodes DMUON_EUNSUPPORTED at the call; no multimem;
 * publish is not built.
 *
 * Invariants: every decision that can fail is agreed over t->world; a group
 * owns its device queue arrays and frees them; the device communicator is
 * destroyed before the window and the communicator (nccl_symm.c).
 */
#include "nccl_backend.h"

#include "dmuon/ctl.h"

#if defined(DMUON_HAVE_NCCL) && defined(DMUON_HAVE_NCCL_DEV)

#include <stdlib.h>

#include "nccl_dev.h"

typedef struct {
    dmuon_ncclx_queues q[2];  /* gather, reduce */
} ncclx_group;

static dmuon_rc ncclx_symm_alloc(dmuon_symm *s)
{
    DMUON_TRY(dmuon_nccl_symm_alloc(s));
    nccl_symm *m = s->impl;
    dmuon_ncclx_comm *d = NULL;
    const dmuon_topo *t = s->topo;
    dmuon_rc rc = dmuon_ncclx_comm_create(m->cs->world, t->nodes, t->node_id, t->per_node, t->local, &d);
    dmuon_rc agreed = dmuon_ctl_topo_agree(t, rc, s->deadline_ms);
    if (agreed != DMUON_OK) {
        dmuon_ncclx_comm_free(m->cs->world, d);
        dmuon_nccl_symm_free(s);
        return agreed;
    }
    m->dev = d;
    return DMUON_OK;
}

static void ncclx_symm_free(dmuon_symm *s)
{
    nccl_symm *m = s->impl;
    if (m) {
        dmuon_ncclx_comm_free(m->cs->aborted ? NULL : m->cs->world, m->dev);
        m->dev = NULL;
    }
    dmuon_nccl_symm_free(s);
}

static dmuon_rc ncclx_group_create(dmuon_group *g)
{
    const dmuon_topo *t = g->topo;
    ncclx_group *x = calloc(1, sizeof *x);
    int bad = !x;
    dmuon_rc rc = bad ? DMUON_FAIL(DMUON_ENOMEM, "group: out of memory") : DMUON_OK;
    nccl_symm *m = g->mem->impl;
    if (!bad && cudaSetDevice(m->device) != cudaSuccess) {
        bad = 1;
        rc = DMUON_FAIL(DMUON_EDEVICE, "group: cannot select GPU %d", m->device);
    }
    for (int k = 0; k < 2 && !bad; k++) {
        rc = dmuon_ncclx_queues_upload(&g->sched[k], t->node_id, &x->q[k]);
        bad = rc != DMUON_OK;
    }
    rc = dmuon_ctl_topo_agree(t, bad ? rc : DMUON_OK, g->opts.deadline_ms);
    if (rc != DMUON_OK) {
        if (x) {
            dmuon_ncclx_queues_free(&x->q[0]);
            dmuon_ncclx_queues_free(&x->q[1]);
        }
        free(x);
        return rc;
    }
    g->impl = x;
    return DMUON_OK;
}

static void ncclx_group_free(dmuon_group *g)
{
    ncclx_group *x = g->impl;
    if (!x)
        return;
    dmuon_ncclx_queues_free(&x->q[0]);
    dmuon_ncclx_queues_free(&x->q[1]);
    free(x);
    g->impl = NULL;
}

static dmuon_rc ncclx_allgatherv(dmuon_group *g, int64_t buffer_offset, int64_t window_offset)
{
    nccl_symm *m = g->mem->impl;
    ncclx_group *x = g->impl;
    if (cudaSetDevice(m->device) != cudaSuccess)
        return DMUON_FAIL(DMUON_EDEVICE, "allgatherv: cannot select GPU %d", m->device);
    return dmuon_ncclx_allgatherv(m->dev, m->win, &x->q[DMUON_SCHED_GATHER], g->topo->node_id,
                                  g->topo->per_node, g->topo->local, buffer_offset,
                                  window_offset, g->opts.deadline_ms, m->stream);
}

static dmuon_rc ncclx_reduce_scatterv(dmuon_group *g, int64_t buffer_offset,
                                      int64_t window_offset)
{
    nccl_symm *m = g->mem->impl;
    ncclx_group *x = g->impl;
    if (cudaSetDevice(m->device) != cudaSuccess)
        return DMUON_FAIL(DMUON_EDEVICE, "reducescatterv: cannot select GPU %d", m->device);
    return dmuon_ncclx_reduce_scatterv(m->dev, m->win, &x->q[DMUON_SCHED_REDUCE],
                                       g->topo->per_node, g->topo->local, buffer_offset,
                                       window_offset, g->opts.deadline_ms, m->stream);
}

/* The scheduled algorithm: one kernel per call executing sched.h's
 * queues.  Blocking only: the split-phase entries are NULL. */
static const dmuon_group_ops scheduled_ops = {
    .ctrl_bytes = dmuon_nccl_group_ctrl_bytes,
    .create = ncclx_group_create,
    .free = ncclx_group_free,
    .allgatherv = ncclx_allgatherv,
    .reduce_scatterv = ncclx_reduce_scatterv,
};

/* Entries left NULL (the per-owner, coalesced and equal algorithms, split
 * phase, publish) are not offered: the public layer says so (backend.h). */
const dmuon_comm_ops dmuon_nccl_dev_ops = {
    .name = "nccl-dev",
    .on_device = 1,
    .symm_alloc = ncclx_symm_alloc,
    .symm_free = ncclx_symm_free,
    .symm_put = dmuon_nccl_symm_put,
    .symm_get = dmuon_nccl_symm_get,
    .symm_stream = dmuon_nccl_symm_stream,
    .symm_set_stream = dmuon_nccl_symm_set_stream,
    .default_algo = DMUON_ALGO_SCHEDULED,
    .group = {[DMUON_ALGO_SCHEDULED] = &scheduled_ops},
};

#else
typedef int dmuon_nccl_dev_unused;   /* built without NCCL's device API */
#endif
