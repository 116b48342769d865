/*
 * rt_comm.c — how each line moves a layer's parameters and gradients
 * (dmuon/runtime.h "Lines").
 *
 *                 owned region (Muon, C/D)               even region (all lines)
 *   gather  D     AllGatherV (FSDP) / publish wait +     MPI_Allgather over the
 *                 node-shared loads from the column's     shard group (world or
 *                 leader (HSDP)                           node)
 *           C     MPI_Bcast per segment (FSDP) / per
 *                 segment MPI_Bcast inside the node
 *                 from the column's leader (HSDP)
 *   reduce  D     ReduceScatterV (F32 table)              MPI_Reduce_scatter_block
 *           C     MPI_Reduce per segment                  (+ MPI_Allreduce on the
 *                                                         rail under HSDP)
 *   publish D     dmuon_publish along the rail
 *   (HSDP)  C     MPI_Bcast per segment on the rail
 * Every path reads and writes only ranges of the symmetric pool.  Each
 * function is collective over the communicators it uses; all ranks walk the
 * same tables in the same order.
 */
#include "rt_internal.h"

#include "comm/wait.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

static dmuon_rc mpi_ok(int err, const char *what, const dmuon_rt *rt)
{
    if (err == MPI_SUCCESS)
        return DMUON_OK;
    char s[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(err, s, &len);
    return DMUON_FAIL(DMUON_ECOMM, "runtime: %s failed on rank %d: %s", what, rt->topo.rank, s);
}

static dmuon_rc count_ok(int64_t n, const char *what)
{
    if (n > INT_MAX)
        return DMUON_FAIL(DMUON_EUNSUPPORTED, "runtime: %s of %lld elements exceeds one MPI call",
                          what, (long long)n);
    return DMUON_OK;
}

/* Completes a non-blocking MPI call within the runtime's deadline: a peer
 * that stalls or died makes this rank fail with DMUON_ETIMEOUT instead of
 * hanging (MPI collectives have no deadline of their own). */
dmuon_rc rt_mpi_wait(dmuon_rt *rt, int err, MPI_Request *req, const char *what, size_t l)
{
    if (err != MPI_SUCCESS)
        return rt_fail_comm(rt, mpi_ok(err, what, rt));
    int ms = 0;
    if (dmuon_deadline_ms(rt->opts.deadline_ms, &ms) != DMUON_OK)
        ms = DMUON_DEADLINE_MS_DEFAULT;
    dmuon_waiter w;
    dmuon_waiter_start(&w, ms);
    for (;;) {
        int done = 0;
        err = MPI_Test(req, &done, MPI_STATUS_IGNORE);
        if (err != MPI_SUCCESS)
            return rt_fail_comm(rt, mpi_ok(err, what, rt));
        if (done)
            return DMUON_OK;
        if (dmuon_waiter_expired(&w)) {
            rt->failed = true;
            return DMUON_FAIL(DMUON_ETIMEOUT, "runtime: %s%s%s%s did not complete within the "
                              "%d ms deadline (a peer stalled or died)", what,
                              l < rt->nlayers ? " of layer '" : "",
                              l < rt->nlayers ? dmuon_plan_layer_name(rt->plan, l) : "",
                              l < rt->nlayers ? "'" : "", ms);
        }
        dmuon_waiter_idle(&w);
    }
}

dmuon_rc rt_ctl_i64(dmuon_rt *rt, int64_t *v, int n, dmuon_ctl_op op, const char *what)
{
    return rt_fail_comm(rt, dmuon_ctl_allreduce_i64(rt->topo.world, v, n, op,
                                                    rt->opts.deadline_ms, what));
}

dmuon_rc rt_ctl_f64(dmuon_rt *rt, double *v, int n, dmuon_ctl_op op, const char *what)
{
    return rt_fail_comm(rt, dmuon_ctl_allreduce_f64(rt->topo.world, v, n, op,
                                                    rt->opts.deadline_ms, what));
}

dmuon_rc rt_ctl_bcast(dmuon_rt *rt, void *data, int bytes, const char *what)
{
    return rt_fail_comm(rt, dmuon_ctl_bcast(rt->topo.world, data, bytes, 0,
                                            rt->opts.deadline_ms, what));
}

static MPI_Datatype pdt_mpi(const dmuon_rt *rt)
{
    return rt->pdt == DMUON_F32 ? MPI_FLOAT : MPI_UINT16_T;
}

/* -------------------------------------------------------------- groups -- */

static dmuon_group_opts group_opts(const dmuon_rt *rt)
{
    dmuon_group_opts o;
    memset(&o, 0, sizeof o);
    o.deadline_ms = rt->opts.deadline_ms;
    return o;
}

dmuon_rc rt_groups_size(dmuon_rt *rt)
{
    rt->ctrl_per_group = 0;
    if (rt->opts.line != DMUON_LINE_D)
        return DMUON_OK;
    dmuon_group_opts o = group_opts(rt);
    for (size_t l = 0; l < rt->nlayers; l++) {
        const rt_layer *L = &rt->layers[l];
        if (!L->nseg)
            continue;
        int64_t a = 0, b = 0;
        DMUON_TRY(dmuon_group_ctrl_bytes(&rt->topo, L->segs, (int)L->nseg, &o, &a));
        DMUON_TRY(dmuon_group_ctrl_bytes(&rt->topo, L->gsegs, (int)L->nseg, &o, &b));
        if (a > rt->ctrl_per_group)
            rt->ctrl_per_group = a;
        if (b > rt->ctrl_per_group)
            rt->ctrl_per_group = b;
    }
    rt->ctrl_per_group = dmuon_pool_align(rt->ctrl_per_group);
    return DMUON_OK;
}

dmuon_rc rt_groups_create(dmuon_rt *rt)
{
    if (rt->opts.line == DMUON_LINE_D) {
        dmuon_group_opts o = group_opts(rt);
        int64_t ctrl = rt->space_off[DMUON_SPACE_CTRL];
        for (size_t l = 0; l < rt->nlayers; l++) {
            rt_layer *L = &rt->layers[l];
            if (!L->nseg)
                continue;
            DMUON_TRY(rt_fail_comm(rt, dmuon_group_create(&rt->topo, L->segs, (int)L->nseg, &o,
                                                          rt->symm, ctrl, &L->pgrp)));
            ctrl += rt->ctrl_per_group;
            DMUON_TRY(rt_fail_comm(rt, dmuon_group_create(&rt->topo, L->gsegs, (int)L->nseg, &o,
                                                          rt->symm, ctrl, &L->ggrp)));
            ctrl += rt->ctrl_per_group;
        }
        if (rt->hsdp && rt->npub) {
            dmuon_publish_opts po;
            memset(&po, 0, sizeof po);
            po.deadline_ms = rt->opts.deadline_ms;
            DMUON_TRY(rt_fail_comm(rt, dmuon_publish_create(&rt->topo, rt->pub_table, rt->npub,
                                                            &po, rt->symm, rt->copy_off,
                                                            &rt->pub)));
        }
    }
    return DMUON_OK;
}

void rt_groups_free(dmuon_rt *rt)
{
    for (size_t l = 0; l < rt->nlayers; l++) {
        dmuon_group_free(rt->layers[l].pgrp);
        dmuon_group_free(rt->layers[l].ggrp);
        rt->layers[l].pgrp = rt->layers[l].ggrp = NULL;
    }
    dmuon_publish_free(rt->pub);
    rt->pub = NULL;
    rt->pub_open = false;
}

/* ------------------------------------------------------------- publish -- */

dmuon_rc rt_pub_begin(dmuon_rt *rt)
{
    if (!rt->hsdp || !rt->owners)
        return DMUON_OK;
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
    DMUON_TRY(rt_fail_comm(rt, dmuon_publish_post(rt->pub, rt->layers[l].seg_pub[s],
                                                  rt->pub_round)));
    return rt_fail_comm(rt, dmuon_publish_progress(rt->pub));
}

/* Line C: the round's broadcasts, rail by rail, after every update. */
dmuon_rc rt_pub_finish(dmuon_rt *rt)
{
    if (!rt->hsdp || rt->opts.line != DMUON_LINE_C)
        return DMUON_OK;
    const int K = rt->topo.per_node;
    for (size_t l = 0; l < rt->nlayers; l++) {
        const rt_layer *L = &rt->layers[l];
        for (size_t s = 0; s < L->nseg; s++) {
            if (L->segs[s].owner % K != rt->topo.local)
                continue;
            DMUON_TRY(count_ok(L->segs[s].count, "a published segment"));
            MPI_Request q;
            DMUON_TRY(rt_mpi_wait(rt, MPI_Ibcast(rt->base + rt->copy_off + L->seg_copy[s],
                                                 (int)L->segs[s].count, pdt_mpi(rt),
                                                 L->segs[s].owner / K, rt->topo.rail, &q),
                                  &q, "MPI_Ibcast (publish)", l));
        }
    }
    return DMUON_OK;
}

dmuon_rc rt_pub_end(dmuon_rt *rt)
{
    if (!rt->pub || !rt->pub_open)
        return DMUON_OK;
    double t0 = MPI_Wtime();
    dmuon_rc rc = dmuon_publish_end(rt->pub, rt->pub_round);
    rt->stats.publish_wait_s += MPI_Wtime() - t0;
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
        for (size_t s = 0; s < rt->layers[l].nseg; s++)
            if (rt->layers[l].segs[s].owner == rt->topo.rank)
                DMUON_TRY(rt_pub_post(rt, l, s));
    return rt_pub_finish(rt);
}

/* -------------------------------------------------------------- gather -- */

static dmuon_rc gather_owned(dmuon_rt *rt, rt_layer *L)
{
    unsigned char *blk = rt_pblock(rt, L);
    const int K = rt->topo.per_node;
    if (!rt->hsdp && rt->opts.line == DMUON_LINE_D)
        return dmuon_allgatherv(L->pgrp, rt->space_off[DMUON_SPACE_PARAM] + L->poff,
                                rt->pwin_off);
    if (!rt->hsdp) {   /* line C, FSDP */
        for (size_t s = 0; s < L->nseg; s++) {
            const dmuon_segment *g = &L->segs[s];
            if (g->owner == rt->topo.rank)
                memcpy(blk + g->offset, rt->base + rt->pwin_off + g->window_offset,
                       (size_t)g->count * rt->dsize);
            DMUON_TRY(count_ok(g->count, "a segment"));
            MPI_Request q;
            DMUON_TRY(rt_mpi_wait(rt, MPI_Ibcast(blk + g->offset, (int)g->count, pdt_mpi(rt),
                                                 g->owner, rt->topo.world, &q),
                                  &q, "MPI_Ibcast", L - rt->layers));
        }
        return DMUON_OK;
    }
    if (rt->opts.line == DMUON_LINE_C) {   /* HSDP: from the column's leader */
        for (size_t s = 0; s < L->nseg; s++) {
            const dmuon_segment *g = &L->segs[s];
            int col = g->owner % K;
            if (col == rt->topo.local)
                memcpy(blk + g->offset, rt->base + rt->copy_off + L->seg_copy[s],
                       (size_t)g->count * rt->dsize);
            DMUON_TRY(count_ok(g->count, "a segment"));
            MPI_Request q;
            DMUON_TRY(rt_mpi_wait(rt, MPI_Ibcast(blk + g->offset, (int)g->count, pdt_mpi(rt), col,
                                                 rt->topo.node, &q),
                                  &q, "MPI_Ibcast (node)", L - rt->layers));
        }
        return DMUON_OK;
    }
    /* line D, HSDP: the publish's node half (waits for what this rank
     * leads, then loads from the leaders of the node) */
    double t0 = MPI_Wtime();
    dmuon_rc rc = dmuon_publish_node_load(rt->pub, L->segs, L->seg_pub, (int)L->nseg,
                                          blk - rt->base, rt->pub_round);
    rt->stats.publish_wait_s += MPI_Wtime() - t0;
    return rt_fail_comm(rt, rc);
}

dmuon_rc rt_gather(dmuon_rt *rt, size_t l)
{
    rt_layer *L = &rt->layers[l];
    if (L->nseg)
        DMUON_TRY(gather_owned(rt, L));
    if (L->shard) {
        DMUON_TRY(count_ok(L->shard, "an even shard"));
        MPI_Request q;
        DMUON_TRY(rt_mpi_wait(rt, MPI_Iallgather(rt->base + rt->ewin_off +
                                                     L->even_pos * (int64_t)rt->dsize,
                                                 (int)L->shard, pdt_mpi(rt),
                                                 rt_pblock(rt, L) +
                                                     L->own_elems * (int64_t)rt->dsize,
                                                 (int)L->shard, pdt_mpi(rt), rt->shard_comm, &q),
                              &q, "MPI_Iallgather", l));
    }
    return DMUON_OK;
}

/* -------------------------------------------------------------- reduce -- */

dmuon_rc rt_reduce(dmuon_rt *rt, size_t l)
{
    rt_layer *L = &rt->layers[l];
    float *blk = rt_gblock(rt, L);
    float *gwin = (float *)(rt->base + rt->gwin_off);
    if (L->nseg) {
        if (rt->opts.line == DMUON_LINE_D) {
            DMUON_TRY(dmuon_reduce_scatterv(L->ggrp, rt->space_off[DMUON_SPACE_GRAD] + L->goff,
                                            rt->gwin_off));
        } else {
            for (size_t s = 0; s < L->nseg; s++) {
                const dmuon_segment *g = &L->gsegs[s];
                bool mine = g->owner == rt->topo.rank;
                DMUON_TRY(count_ok(g->count, "a segment"));
                MPI_Request q;
                DMUON_TRY(rt_mpi_wait(rt, MPI_Ireduce((unsigned char *)blk + g->offset,
                                                      mine ? (unsigned char *)gwin + g->window_offset
                                                           : NULL,
                                                      (int)g->count, MPI_FLOAT, MPI_SUM, g->owner,
                                                      rt->topo.world, &q),
                                      &q, "MPI_Ireduce", l));
            }
        }
        for (size_t s = 0; s < L->nseg; s++) {
            const dmuon_segment *g = &L->gsegs[s];
            if (g->owner != rt->topo.rank)
                continue;
            int64_t w0 = g->window_offset / 4;
            for (int64_t i = 0; i < g->count; i++)
                rt->own_g[w0 + i] += gwin[w0 + i];
        }
    }
    if (L->shard) {
        float *dst = (float *)(rt->base + rt->egwin_off) + L->even_pos;
        DMUON_TRY(count_ok(L->shard, "an even shard"));
        MPI_Request q;
        DMUON_TRY(rt_mpi_wait(rt, MPI_Ireduce_scatter_block(blk + L->own_elems, dst, (int)L->shard,
                                                            MPI_FLOAT, MPI_SUM, rt->shard_comm, &q),
                              &q, "MPI_Ireduce_scatter_block", l));
        if (rt->hsdp && rt->topo.nodes > 1)
            DMUON_TRY(rt_mpi_wait(rt, MPI_Iallreduce(MPI_IN_PLACE, dst, (int)L->shard, MPI_FLOAT,
                                                     MPI_SUM, rt->topo.rail, &q),
                                  &q, "MPI_Iallreduce (rail)", l));
        float *acc = rt->even_g + L->even_pos;
        for (int64_t i = 0; i < L->shard; i++)
            acc[i] += dst[i];
    }
    return DMUON_OK;
}

/* ---------------------------------------------------------- prefetch -- */

static bool split(const dmuon_rt *rt)
{
    return rt->opts.line == DMUON_LINE_D && !rt->hsdp;
}

/* Starts layer l's gather: AllGatherV start and the even region's
 * MPI_Iallgather; where the path has no split phase (line C, HSDP), the
 * gather runs now. */
dmuon_rc rt_gather_start(dmuon_rt *rt, size_t l)
{
    rt_layer *L = &rt->layers[l];
    if (!split(rt)) {
        DMUON_TRY(rt_gather(rt, l));
        return DMUON_OK;
    }
    if (L->nseg)
        DMUON_TRY(dmuon_allgatherv_start(L->pgrp, rt->space_off[DMUON_SPACE_PARAM] + L->poff,
                                         rt->pwin_off));
    L->even_req = MPI_REQUEST_NULL;
    if (L->shard) {
        DMUON_TRY(count_ok(L->shard, "an even shard"));
        DMUON_TRY(mpi_ok(MPI_Iallgather(rt->base + rt->ewin_off + L->even_pos * (int64_t)rt->dsize,
                                        (int)L->shard, pdt_mpi(rt),
                                        rt_pblock(rt, L) + L->own_elems * (int64_t)rt->dsize,
                                        (int)L->shard, pdt_mpi(rt), rt->shard_comm,
                                        &L->even_req), "MPI_Iallgather", rt));
    }
    L->inflight = true;
    return DMUON_OK;
}

dmuon_rc rt_gather_finish(dmuon_rt *rt, size_t l)
{
    rt_layer *L = &rt->layers[l];
    if (!L->inflight)
        return DMUON_OK;
    L->inflight = false;
    if (L->nseg)
        DMUON_TRY(dmuon_allgatherv_wait(L->pgrp));
    if (L->even_req != MPI_REQUEST_NULL)
        DMUON_TRY(rt_mpi_wait(rt, MPI_SUCCESS, &L->even_req, "MPI_Iallgather", l));
    return DMUON_OK;
}

dmuon_rc rt_gather_test(dmuon_rt *rt, size_t l)
{
    rt_layer *L = &rt->layers[l];
    if (!L->inflight)
        return DMUON_OK;
    int done = 0;
    if (L->nseg)
        DMUON_TRY(dmuon_allgatherv_test(L->pgrp, &done));
    if (L->even_req != MPI_REQUEST_NULL)
        DMUON_TRY(mpi_ok(MPI_Test(&L->even_req, &done, MPI_STATUS_IGNORE), "MPI_Test", rt));
    return DMUON_OK;
}
