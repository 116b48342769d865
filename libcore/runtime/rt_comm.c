/*
 * rt_comm.c — how each line moves a layer's parameters and gradients
 * (dmuon/runtime.h "Lines"), as operators of the communication layer: every
 * layer has up to five groups (dmuon/collv.h) over ranges of the symmetric
 * pool, and the HSDP run one publish (dmuon/publish.h).  A line is a row of
 * the layout's line table (dmuon_line_ops, dmuon/layout.h): the algorithm
 * of its owned region (gather and reduce; the even region is always the
 * equal-length primitive), of its publish, where the HSDP node half comes
 * from, and whether the step gathers directions; the groups' tables are
 * the layout's.
 * Every line runs its gathers and reductions split phase alike: a prefetch
 * starts the next layer's gather, post_backward starts the layer's
 * reduction and a later hook waits for it.
 *
 *                 owned region (Muon, C/D)               even region (all lines)
 *   gather  D     scheduled AllGatherV (FSDP) /           equal: allgather over
 *                 the publish's node load (HSDP)          the shard group (world
 *           C     per-owner (FSDP) / per-owner inside     or node)
 *                 the node from the column's leader
 *   reduce  D     scheduled ReduceScatterV (F32 table)    equal: reduce-scatter-
 *           C     per-owner                               block (+ summed along
 *                                                         the rail under HSDP)
 *   publish D     scheduled, along the rail as posted
 *   (HSDP)  C     per-owner: one broadcast per segment on the rail, at finish
 *   step    B     the Nesterov directions of a layer's Muon parameters,
 *                 F32: equal allgather over the shard group, split phase
 * Every path reads and writes only ranges of the symmetric pool.  Each
 * function is collective over the communicators it uses; all ranks walk the
 * same tables in the same order.  Control decisions (agreement, norms,
 * digests) go through dmuon/ctl.h (rt_ctl_*).
 */
#include "rt_internal.h"

#include <assert.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "dmuon/timer.h"

/* After a communication failure the runtime posts nothing more on world:
 * its calls would match the abandoned ones of the others. */
static dmuon_rc refuse_after_failure(const dmuon_rt *rt, const char *what)
{
    if (!rt->failed)
        return DMUON_OK;
    return DMUON_FAIL(DMUON_ECOMM, "runtime: %s: rank %d: refused after a communication failure "
                      "(a missed deadline leaves the communicator out of step)", what,
                      rt->topo.rank);
}

dmuon_rc rt_ctl_i64(dmuon_rt *rt, int64_t *v, int n, dmuon_ctl_op op, const char *what)
{
    DMUON_TRY(refuse_after_failure(rt, what));
    return rt_fail_comm(rt, dmuon_ctl_topo_allreduce_i64(&rt->topo, v, n, op,
                                                         rt->opts.deadline_ms, what));
}

dmuon_rc rt_ctl_f64(dmuon_rt *rt, double *v, int n, dmuon_ctl_op op, const char *what)
{
    DMUON_TRY(refuse_after_failure(rt, what));
    return rt_fail_comm(rt, dmuon_ctl_topo_allreduce_f64(&rt->topo, v, n, op,
                                                         rt->opts.deadline_ms, what));
}

dmuon_rc rt_ctl_bcast(dmuon_rt *rt, void *data, int bytes, const char *what)
{
    DMUON_TRY(refuse_after_failure(rt, what));
    return rt_fail_comm(rt, dmuon_ctl_topo_bcast(&rt->topo, data, bytes, 0,
                                                 rt->opts.deadline_ms, what));
}

/* ----------------------------------------------------------- the lines -- */

static const dmuon_line_ops *line_of(const dmuon_rt *rt) { return rt->lay->ops; }

/* -------------------------------------------------------------- groups -- */

/* The layout's group kinds (DMUON_GRP_*), and the pending bit of the
 * layer's HSDP node load (line D: the publish's node half, split phase; no
 * group of its own). */
enum { G_OWN_GATHER = DMUON_GRP_OWN_GATHER, G_OWN_REDUCE = DMUON_GRP_OWN_REDUCE,
       G_EVEN_GATHER = DMUON_GRP_EVEN_GATHER, G_EVEN_REDUCE = DMUON_GRP_EVEN_REDUCE,
       G_DIR_GATHER = DMUON_GRP_DIR_GATHER, G_COUNT = DMUON_GRP_KINDS, G_NODE_LOAD = G_COUNT };

static dmuon_group **group_slot(rt_layer *L, int k)
{
    return k == G_OWN_GATHER ? &L->pgrp : k == G_OWN_REDUCE ? &L->ggrp
         : k == G_EVEN_GATHER ? &L->egrp : k == G_EVEN_REDUCE ? &L->eggrp : &L->dgrp;
}

/* The layout's groups of every layer, each with its control area and,
 * where it stages, its staging in the control space's shared part. */
dmuon_rc rt_groups_create(dmuon_rt *rt)
{
    int64_t ctrl = rt->space_off[DMUON_SPACE_CTRL];
    for (size_t l = 0; l < rt->nlayers; l++)
        for (int k = 0; k < G_COUNT; k++) {
            rt_layer *L = &rt->layers[l];
            const dmuon_layout_group *g = &L->lay->group[k];
            if (!g->n)
                continue;
            dmuon_group_opts o = g->opts;
            o.deadline_ms = rt->opts.deadline_ms;
            if (o.staging_shared)   /* the layout's offset is in the staging space */
                o.staging_offset += ctrl + rt->lay->staging_base;
            dmuon_rc rc = dmuon_group_create(&rt->topo, g->segs, g->n, &o, rt->symm,
                                             ctrl + g->ctrl_off, group_slot(L, k));
            DMUON_TRY(rt_fail_comm(rt, rc));
        }
    if (rt->hsdp && rt->lay->npub && line_of(rt)->publish != DMUON_ALGO_DEFAULT) {
        dmuon_publish_opts po;
        memset(&po, 0, sizeof po);
        po.deadline_ms = rt->opts.deadline_ms;
        po.algorithm = line_of(rt)->publish;
        DMUON_TRY(rt_fail_comm(rt, dmuon_publish_create(&rt->topo, rt->lay->pub_table, rt->lay->npub, &po,
                                                        rt->symm, rt->copy_off, &rt->pub)));
    }
    return DMUON_OK;
}

void rt_groups_free(dmuon_rt *rt)
{
    for (size_t l = 0; l < rt->nlayers; l++)
        for (int k = 0; k < G_COUNT; k++) {
            dmuon_group **g = group_slot(&rt->layers[l], k);
            dmuon_group_free(*g);
            *g = NULL;
        }
    dmuon_publish_free(rt->pub);
    rt->pub = NULL;
    rt->pub_open = false;
}

/* ------------------------------------------------------------- publish -- */

static dmuon_rc node_load_settle(dmuon_rt *rt);

dmuon_rc rt_pub_begin(dmuon_rt *rt)
{
    if (!rt->hsdp || !rt->owners)
        return DMUON_OK;
    DMUON_TRY(node_load_settle(rt));   /* a node load of the last round is done first */
    rt->pub_round++;
    if (rt->pub) {
        DMUON_TRY(rt_fail_comm(rt, dmuon_publish_begin(rt->pub, rt->pub_round)));
        rt->pub_open = true;
    }
    return DMUON_OK;
}

/* Owner side: segment s of layer l is complete in this rank's copy. */
dmuon_rc rt_pub_post(dmuon_rt *rt, size_t l, size_t s)
{
    if (!rt->pub)
        return DMUON_OK;
    DMUON_TRY(rt_fail_comm(rt, dmuon_publish_post(rt->pub, rt->layers[l].lay->seg_pub[s],
                                                  rt->pub_round)));
    return rt_fail_comm(rt, dmuon_publish_progress(rt->pub));
}

/* After every update: a publish that moves nothing before its end (the
 * per-owner one) ends now, so the next gathers find the copies complete. */
dmuon_rc rt_pub_finish(dmuon_rt *rt)
{
    if (!rt->pub || !rt->pub_open || dmuon_publish_algo(rt->pub) != DMUON_ALGO_PER_OWNER)
        return DMUON_OK;
    rt->pub_open = false;
    return rt_fail_comm(rt, dmuon_publish_end(rt->pub, rt->pub_round));
}

dmuon_rc rt_pub_end(dmuon_rt *rt)
{
    if (!rt->pub || !rt->pub_open)
        return DMUON_OK;
    DMUON_TRY(node_load_settle(rt));
    double t0 = dmuon_now_ms() / 1e3;   /* no MPI call: a handoff may run without MPI */
    dmuon_rc rc = dmuon_publish_end(rt->pub, rt->pub_round);
    rt->stats.publish_wait_s += dmuon_now_ms() / 1e3 - t0;
    rt->pub_open = false;
    return rt_fail_comm(rt, rc);
}

/* At open and after a load: every owned segment published as it stands. */
dmuon_rc rt_pub_round(dmuon_rt *rt)
{
    if (!rt->hsdp || !rt->owners)
        return DMUON_OK;
    DMUON_TRY(rt_pub_end(rt));
    DMUON_TRY(rt_pub_begin(rt));
    for (size_t l = 0; l < rt->nlayers; l++)
        for (size_t s = 0; s < rt->layers[l].lay->nseg; s++)
            if (rt->layers[l].lay->segs[s].owner == rt->topo.rank)
                DMUON_TRY(rt_pub_post(rt, l, s));
    return rt_pub_finish(rt);
}

/* -------------------------------------------------------------- gather -- */

static int64_t pblock_off(const dmuon_rt *rt, const rt_layer *L)
{
    return rt->space_off[DMUON_SPACE_WORK] + L->poff;
}

static int64_t gblock_off(const dmuon_rt *rt, const rt_layer *L)
{
    return rt->space_off[DMUON_SPACE_WORK] + L->goff;
}

/* The owners' part of layer L in the working space (the layout's tables
 * give window offsets from each owner's first byte in the layer). */
static int64_t work_off(const dmuon_rt *rt, int64_t off)
{
    return rt->space_off[DMUON_SPACE_WORK] + off;
}

/* FSDP: this rank's owned pieces of layer l, narrowed from the masters
 * into the layer's gather source (the plan's next source acquisition). */
static dmuon_rc source_fill(dmuon_rt *rt, size_t l)
{
    rt_layer *L = &rt->layers[l];
    DMUON_TRY(rt_acquire(rt, RT_SOURCE, l));
    const dmuon_segment *rel = L->lay->group[DMUON_GRP_OWN_GATHER].segs;
    unsigned char *src = rt->base + work_off(rt, L->soff);
    for (size_t i = 0; i < rt->lay->npieces; i++) {
        const rt_piece *pc = &rt->lay->pieces[i];
        if (!pc->owned || (size_t)pc->layer != l)
            continue;
        /* element pos of the owner window, less the owner's first byte in l */
        int64_t at = pc->pos * (int64_t)rt->dsize -
                     (L->lay->segs[pc->seg].window_offset - rel[pc->seg].window_offset);
        DMUON_TRY(rt->elem->narrow(src + at, rt->own_w + pc->pos, rt->pdt, pc->hi - pc->lo,
                                   rt->stream));
    }
    return DMUON_OK;
}

/* -------------------------------------------------- split-phase calls -- */

/* Group k of layer L runs its calls split phase: bit k of L->pending is set
 * from a successful start until the test that sees the call complete or
 * the wait (the wait has the group's deadline).  A failed start leaves the
 * peers inside the call: the runtime is failed (no further collective; its
 * pool is kept, so the abandoned call's memory stays valid). */
static bool reduce_group(int k) { return k == G_OWN_REDUCE || k == G_EVEN_REDUCE; }

static dmuon_rc grp_start(dmuon_rt *rt, rt_layer *L, int k, int64_t buf, int64_t win)
{
    dmuon_group *g = *group_slot(L, k);
    dmuon_rc rc = reduce_group(k) ? dmuon_reduce_scatterv_start(g, buf, win)
                                  : dmuon_allgatherv_start(g, buf, win);
    if (rc != DMUON_OK) {
        rt->failed = true;
        return rc;
    }
    L->pending |= 1u << k;
    return DMUON_OK;
}

/* Pending bit k's test (G_NODE_LOAD: the publish's node load). */
static dmuon_rc call_test(rt_layer *L, int k, dmuon_rt *rt, int *done)
{
    if (k == G_NODE_LOAD)
        return dmuon_publish_node_load_test(rt->pub, done);
    dmuon_group *g = *group_slot(L, k);
    return reduce_group(k) ? dmuon_reduce_scatterv_test(g, done) : dmuon_allgatherv_test(g, done);
}

static dmuon_rc call_wait(rt_layer *L, int k, dmuon_rt *rt)
{
    if (k == G_NODE_LOAD) {
        double t0 = dmuon_now_ms() / 1e3;
        dmuon_rc rc = dmuon_publish_node_load_wait(rt->pub);
        rt->stats.publish_wait_s += dmuon_now_ms() / 1e3 - t0;
        return rc;
    }
    dmuon_group *g = *group_slot(L, k);
    return reduce_group(k) ? dmuon_reduce_scatterv_wait(g) : dmuon_allgatherv_wait(g);
}

static dmuon_rc grp_test(dmuon_rt *rt, rt_layer *L, int k)
{
    if (!(L->pending & (1u << k)))
        return DMUON_OK;
    int done = 0;
    dmuon_rc rc = call_test(L, k, rt, &done);
    if (rc != DMUON_OK || done)
        L->pending &= ~(1u << k);
    return rt_fail_comm(rt, rc);
}

static dmuon_rc grp_wait(dmuon_rt *rt, rt_layer *L, int k)
{
    if (!(L->pending & (1u << k)))
        return DMUON_OK;
    L->pending &= ~(1u << k);
    return rt_fail_comm(rt, call_wait(L, k, rt));
}

/* The publish runs one node load at a time: waits for the one in flight,
 * whichever layer started it (a prefetch of several layers; the publish's
 * end or next begin). */
static dmuon_rc node_load_settle(dmuon_rt *rt)
{
    for (size_t m = 0; m < rt->nlayers; m++)
        DMUON_TRY(grp_wait(rt, &rt->layers[m], G_NODE_LOAD));
    return DMUON_OK;
}

/* -------------------------------------------------------------- gather -- */

/* Starts layer l's gathers split phase: the HSDP node load of the publish
 * (line D: waits in the layer's own finish, as the groups do; a node load
 * of another layer still in flight is waited for first), then the owned and
 * even groups.  A failed start fails the runtime, as grp_start. */
dmuon_rc rt_gather_start(dmuon_rt *rt, size_t l)
{
    rt_layer *L = &rt->layers[l];
    if (L->lay->nseg && rt->hsdp && rt->pub && line_of(rt)->node_load) {
        DMUON_TRY(node_load_settle(rt));
        dmuon_rc rc = dmuon_publish_node_load_start(rt->pub, L->lay->segs, L->lay->seg_pub, (int)L->lay->nseg,
                                                    pblock_off(rt, L), rt->pub_round);
        if (rc != DMUON_OK) {
            rt->failed = true;
            return rc;
        }
        L->pending |= 1u << G_NODE_LOAD;
    }
    if (L->pgrp && rt->hsdp) {   /* from the copy of the column's leader */
        DMUON_TRY(grp_start(rt, L, G_OWN_GATHER, pblock_off(rt, L), rt->copy_off));
    } else if (L->pgrp && rt->per_layer) {
        DMUON_TRY(source_fill(rt, l));
        DMUON_TRY(grp_start(rt, L, G_OWN_GATHER, pblock_off(rt, L), work_off(rt, L->soff)));
    } else if (L->pgrp) {   /* from the owner windows */
        DMUON_TRY(grp_start(rt, L, G_OWN_GATHER, pblock_off(rt, L), rt->pwin_off));
    }
    if (L->egrp)
        DMUON_TRY(grp_start(rt, L, G_EVEN_GATHER, pblock_off(rt, L), rt->ewin_off));
    L->inflight = true;
    return DMUON_OK;
}

dmuon_rc rt_gather_finish(dmuon_rt *rt, size_t l)
{
    rt_layer *L = &rt->layers[l];
    if (!L->inflight)
        return DMUON_OK;
    L->inflight = false;
    DMUON_TRY(grp_wait(rt, L, G_NODE_LOAD));
    DMUON_TRY(grp_wait(rt, L, G_OWN_GATHER));
    L->src_live = false;   /* every peer has read it */
    return grp_wait(rt, L, G_EVEN_GATHER);
}

dmuon_rc rt_gather_test(dmuon_rt *rt, size_t l)
{
    rt_layer *L = &rt->layers[l];
    DMUON_TRY(grp_test(rt, L, G_NODE_LOAD));
    DMUON_TRY(grp_test(rt, L, G_OWN_GATHER));
    return grp_test(rt, L, G_EVEN_GATHER);
}

dmuon_rc rt_gather(dmuon_rt *rt, size_t l)
{
    DMUON_TRY(rt_gather_start(rt, l));
    return rt_gather_finish(rt, l);
}

/* Waits for every split-phase call still in flight (a runtime freed in the
 * middle of a micro-batch), within the deadline: the first error, after
 * which the runtime is failed and keeps its pool. */
dmuon_rc rt_drain(dmuon_rt *rt)
{
    dmuon_rc rc = DMUON_OK;
    for (size_t l = 0; l < rt->nlayers && rc == DMUON_OK; l++) {
        rt_layer *L = &rt->layers[l];
        L->inflight = false;
        for (int k = 0; k <= G_NODE_LOAD && rc == DMUON_OK; k++)
            rc = grp_wait(rt, L, k);
        if (rc == DMUON_OK)
            L->src_live = false;
    }
    if (rc != DMUON_OK)
        rt->failed = true;
    return rc;
}

/* -------------------------------------------------------------- reduce -- */

dmuon_rc rt_reduce_start(dmuon_rt *rt, size_t l)
{
    rt_layer *L = &rt->layers[l];
    if (L->ggrp)   /* into the owner window, or the layer's reduce destination
                    * (post_backward took it) */
        DMUON_TRY(grp_start(rt, L, G_OWN_REDUCE, gblock_off(rt, L),
                            rt->per_layer ? work_off(rt, L->roff) : rt->gwin_off));
    if (L->eggrp)
        DMUON_TRY(grp_start(rt, L, G_EVEN_REDUCE, gblock_off(rt, L), rt->egwin_off));
    return DMUON_OK;
}

dmuon_rc rt_reduce_test(dmuon_rt *rt, size_t l)
{
    rt_layer *L = &rt->layers[l];
    DMUON_TRY(grp_test(rt, L, G_OWN_REDUCE));
    return grp_test(rt, L, G_EVEN_REDUCE);
}

/* Waits for layer l's reductions (a call a test saw complete is not waited
 * again) and adds what arrived in this rank's windows to the accumulated
 * gradients: its owned segments, and its even shard (at node scope, HSDP,
 * summed along the rail). */
dmuon_rc rt_reduce_finish(dmuon_rt *rt, size_t l)
{
    rt_layer *L = &rt->layers[l];
    if (L->ggrp) {
        DMUON_TRY(grp_wait(rt, L, G_OWN_REDUCE));
        /* what arrived, at the table's window offsets: from the layer's
         * destination, or from the gradient window (offsets the own_g's) */
        const float *recv = (const float *)(rt->base + (rt->per_layer ? work_off(rt, L->roff)
                                                                       : rt->gwin_off));
        const dmuon_segment *at = L->lay->group[DMUON_GRP_OWN_REDUCE].segs;
        for (size_t s = 0; s < L->lay->nseg; s++) {
            const dmuon_segment *g = &L->lay->gsegs[s];
            if (g->owner != rt->topo.rank)
                continue;
            DMUON_TRY(rt->elem->accum(rt->own_g + g->window_offset / 4,
                                      recv + at[s].window_offset / 4, g->count, rt->stream));
        }
    }
    if (L->eggrp) {
        DMUON_TRY(grp_wait(rt, L, G_EVEN_REDUCE));
        const float *dst = (const float *)(rt->base + rt->egwin_off) + L->lay->even_pos;
        DMUON_TRY(rt->elem->accum(rt->even_g + L->lay->even_pos, dst, L->lay->shard, rt->stream));
    }
    return DMUON_OK;
}

/* ---------------------------------------------- line B: directions -- */

float *rt_dir_full(const dmuon_rt *rt, int b)
{
    return (float *)(rt->base + rt->dir_off + b * rt->lay->dir_buf);
}

float *rt_dir_mine(const dmuon_rt *rt, int b)
{
    return (float *)(rt->base + rt->dir_off + b * rt->lay->dir_buf + rt->lay->dir_shard);
}

dmuon_rc rt_dir_start(dmuon_rt *rt, size_t l, int b)
{
    int64_t buf = rt->dir_off + b * rt->lay->dir_buf;
    return grp_start(rt, &rt->layers[l], G_DIR_GATHER, buf, buf + rt->lay->dir_shard);
}

dmuon_rc rt_dir_test(dmuon_rt *rt, size_t l)
{
    return grp_test(rt, &rt->layers[l], G_DIR_GATHER);
}

dmuon_rc rt_dir_wait(dmuon_rt *rt, size_t l)
{
    double t0 = dmuon_now_ms() / 1e3;
    dmuon_rc rc = grp_wait(rt, &rt->layers[l], G_DIR_GATHER);
    rt->stats.comm_wait_s += dmuon_now_ms() / 1e3 - t0;
    return rc;
}
