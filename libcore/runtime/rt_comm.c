/*
 * rt_comm.c — how each line moves a layer's parameters and gradients
 * (dmuon/runtime.h "Lines"), as operators of the communication layer: every
 * layer has up to four groups (dmuon/collv.h) over ranges of the symmetric
 * pool, and the HSDP run one publish (dmuon/publish.h).  A line is a row of
 * line_ops below: the algorithm of its owned region (gather and reduce; the
 * even region is always the equal-length primitive), of its publish, where
 * the HSDP node half comes from, and whether gathers may run ahead.
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
 * Every path reads and writes only ranges of the symmetric pool.  Each
 * function is collective over the communicators it uses; all ranks walk the
 * same tables in the same order.  Control decisions (agreement, norms,
 * digests) go through dmuon/ctl.h (rt_ctl_*).
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

typedef struct {
    dmuon_algo owned;         /* gather and reduce of owned segments; DEFAULT: none */
    dmuon_algo publish;       /* HSDP: the rail half */
    bool node_load;           /* HSDP: the node half is the publish's node load
                                 (else a node-scope group from the column's copy) */
    bool prefetch;            /* FSDP: gathers run ahead split phase */
} rt_line_ops;

static const rt_line_ops line_ops[] = {
    [DMUON_LINE_D] = {DMUON_ALGO_SCHEDULED, DMUON_ALGO_SCHEDULED, true, true},
    [DMUON_LINE_C] = {DMUON_ALGO_PER_OWNER, DMUON_ALGO_PER_OWNER, false, false},
    [DMUON_LINE_B] = {DMUON_ALGO_DEFAULT, DMUON_ALGO_DEFAULT, false, false},
    [DMUON_LINE_A] = {DMUON_ALGO_DEFAULT, DMUON_ALGO_DEFAULT, false, false},
};

static const rt_line_ops *line_of(const dmuon_rt *rt) { return &line_ops[rt->opts.line]; }

/* -------------------------------------------------------------- groups -- */

/* A layer's groups, in the order of their control areas. */
enum { G_OWN_GATHER = 0, G_OWN_REDUCE, G_EVEN_GATHER, G_EVEN_REDUCE, G_COUNT };

static dmuon_group **group_slot(rt_layer *L, int k)
{
    return k == G_OWN_GATHER ? &L->pgrp : k == G_OWN_REDUCE ? &L->ggrp
         : k == G_EVEN_GATHER ? &L->egrp : &L->eggrp;
}

/* Group k of layer L: its table (*segs, *n; *owned_table set when the
 * caller must free it) and options; *n = 0 when the layer has none. */
static dmuon_rc layer_table(const dmuon_rt *rt, const rt_layer *L, int k, dmuon_segment **segs,
                            int *n, dmuon_group_opts *o)
{
    const rt_line_ops *lo = line_of(rt);
    memset(o, 0, sizeof *o);
    o->deadline_ms = rt->opts.deadline_ms;
    *segs = NULL;
    *n = 0;
    if (k == G_OWN_GATHER || k == G_OWN_REDUCE) {
        if (!L->nseg || lo->owned == DMUON_ALGO_DEFAULT)
            return DMUON_OK;
        if (k == G_OWN_GATHER && rt->hsdp && lo->node_load)
            return DMUON_OK;   /* the publish's node load gathers */
        *segs = malloc(L->nseg * sizeof **segs);
        if (!*segs)
            return DMUON_FAIL(DMUON_ENOMEM, "runtime: out of memory for a layer's table");
        memcpy(*segs, k == G_OWN_GATHER ? L->segs : L->gsegs, L->nseg * sizeof **segs);
        o->algorithm = lo->owned;
        if (k == G_OWN_GATHER && rt->hsdp) {
            /* inside the node, from the copy of the column's leader */
            for (size_t s = 0; s < L->nseg; s++) {
                (*segs)[s].owner = L->segs[s].owner % rt->topo.per_node;
                (*segs)[s].window_offset = L->seg_copy[s];
            }
            o->scope = DMUON_SCOPE_NODE;
        }
        *n = (int)L->nseg;
        return DMUON_OK;
    }
    if (!L->shard)
        return DMUON_OK;
    const dmuon_dtype dt = k == G_EVEN_GATHER ? rt->pdt : DMUON_F32;
    const int64_t es = (int64_t)dmuon_dtype_size(dt);
    *segs = malloc((size_t)rt->shard_size * sizeof **segs);
    if (!*segs)
        return DMUON_FAIL(DMUON_ENOMEM, "runtime: out of memory for a layer's table");
    DMUON_TRY(dmuon_table_even(rt->shard_size, L->shard, dt, *segs));
    for (int j = 0; j < rt->shard_size; j++) {
        (*segs)[j].offset += L->own_elems * es;
        (*segs)[j].window_offset = L->even_pos * es;
    }
    o->algorithm = DMUON_ALGO_EQUAL;
    o->scope = rt->hsdp ? DMUON_SCOPE_NODE : DMUON_SCOPE_WORLD;
    *n = rt->shard_size;
    return DMUON_OK;
}

int rt_layer_groups(const dmuon_rt *rt, size_t l)
{
    int count = 0;
    for (int k = 0; k < G_COUNT; k++) {
        dmuon_segment *segs = NULL;
        int n = 0;
        dmuon_group_opts o;
        if (layer_table(rt, &rt->layers[l], k, &segs, &n, &o) == DMUON_OK && n)
            count++;
        free(segs);
    }
    return count;
}

dmuon_rc rt_groups_size(dmuon_rt *rt)
{
    rt->ctrl_per_group = 0;
    for (size_t l = 0; l < rt->nlayers; l++)
        for (int k = 0; k < G_COUNT; k++) {
            dmuon_segment *segs = NULL;
            int n = 0;
            dmuon_group_opts o;
            int64_t b = 0;
            dmuon_rc rc = layer_table(rt, &rt->layers[l], k, &segs, &n, &o);
            if (rc == DMUON_OK && n)
                rc = dmuon_group_ctrl_bytes(&rt->topo, segs, n, &o, &b);
            free(segs);
            DMUON_TRY(rc);
            if (b > rt->ctrl_per_group)
                rt->ctrl_per_group = b;
        }
    rt->ctrl_per_group = dmuon_pool_align(rt->ctrl_per_group);
    return DMUON_OK;
}

dmuon_rc rt_groups_create(dmuon_rt *rt)
{
    int64_t ctrl = rt->space_off[DMUON_SPACE_CTRL];
    for (size_t l = 0; l < rt->nlayers; l++)
        for (int k = 0; k < G_COUNT; k++) {
            rt_layer *L = &rt->layers[l];
            dmuon_segment *segs = NULL;
            int n = 0;
            dmuon_group_opts o;
            dmuon_rc rc = layer_table(rt, L, k, &segs, &n, &o);
            if (rc == DMUON_OK && n) {
                rc = dmuon_group_create(&rt->topo, segs, n, &o, rt->symm, ctrl, group_slot(L, k));
                ctrl += rt->ctrl_per_group;
            }
            free(segs);
            DMUON_TRY(rt_fail_comm(rt, rc));
        }
    if (rt->hsdp && rt->npub && line_of(rt)->publish != DMUON_ALGO_DEFAULT) {
        dmuon_publish_opts po;
        memset(&po, 0, sizeof po);
        po.deadline_ms = rt->opts.deadline_ms;
        po.algorithm = line_of(rt)->publish;
        DMUON_TRY(rt_fail_comm(rt, dmuon_publish_create(&rt->topo, rt->pub_table, rt->npub, &po,
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

static int64_t pblock_off(const dmuon_rt *rt, const rt_layer *L)
{
    return rt->space_off[DMUON_SPACE_PARAM] + L->poff;
}

static int64_t gblock_off(const dmuon_rt *rt, const rt_layer *L)
{
    return rt->space_off[DMUON_SPACE_GRAD] + L->goff;
}

/* The owned gather's window: the owner windows (FSDP), or the publish copy
 * of the column's leader (HSDP, a node-scope group). */
static int64_t pgrp_window(const dmuon_rt *rt)
{
    return rt->hsdp ? rt->copy_off : rt->pwin_off;
}

dmuon_rc rt_gather(dmuon_rt *rt, size_t l)
{
    rt_layer *L = &rt->layers[l];
    if (L->nseg && rt->hsdp && rt->pub && line_of(rt)->node_load) {
        /* the publish's node half: waits for what this rank leads, then
         * loads from the leaders of the node */
        double t0 = MPI_Wtime();
        dmuon_rc rc = dmuon_publish_node_load(rt->pub, L->segs, L->seg_pub, (int)L->nseg,
                                              pblock_off(rt, L), rt->pub_round);
        rt->stats.publish_wait_s += MPI_Wtime() - t0;
        DMUON_TRY(rt_fail_comm(rt, rc));
    }
    if (L->pgrp)
        DMUON_TRY(rt_fail_comm(rt, dmuon_allgatherv(L->pgrp, pblock_off(rt, L),
                                                    pgrp_window(rt))));
    if (L->egrp)
        DMUON_TRY(rt_fail_comm(rt, dmuon_allgatherv(L->egrp, pblock_off(rt, L), rt->ewin_off)));
    return DMUON_OK;
}

/* -------------------------------------------------------------- reduce -- */

dmuon_rc rt_reduce(dmuon_rt *rt, size_t l)
{
    rt_layer *L = &rt->layers[l];
    float *gwin = (float *)(rt->base + rt->gwin_off);
    if (L->ggrp) {
        DMUON_TRY(rt_fail_comm(rt, dmuon_reduce_scatterv(L->ggrp, gblock_off(rt, L),
                                                         rt->gwin_off)));
        for (size_t s = 0; s < L->nseg; s++) {
            const dmuon_segment *g = &L->gsegs[s];
            if (g->owner != rt->topo.rank)
                continue;
            int64_t w0 = g->window_offset / 4;
            DMUON_TRY(rt->elem->accum(rt->own_g + w0, gwin + w0, g->count, rt->stream));
        }
    }
    if (L->eggrp) {
        /* at node scope (HSDP) the shard comes back summed along the rail */
        DMUON_TRY(rt_fail_comm(rt, dmuon_reduce_scatterv(L->eggrp, gblock_off(rt, L),
                                                         rt->egwin_off)));
        const float *dst = (const float *)(rt->base + rt->egwin_off) + L->even_pos;
        DMUON_TRY(rt->elem->accum(rt->even_g + L->even_pos, dst, L->shard, rt->stream));
    }
    return DMUON_OK;
}

/* ---------------------------------------------------------- prefetch -- */

static bool split(const dmuon_rt *rt)
{
    return line_of(rt)->prefetch && !rt->hsdp;
}

/* Starts layer l's gathers split phase; where the line does not run ahead,
 * the gather runs now. */
dmuon_rc rt_gather_start(dmuon_rt *rt, size_t l)
{
    rt_layer *L = &rt->layers[l];
    if (!split(rt)) {
        DMUON_TRY(rt_gather(rt, l));
        return DMUON_OK;
    }
    if (L->pgrp)
        DMUON_TRY(dmuon_allgatherv_start(L->pgrp, pblock_off(rt, L), pgrp_window(rt)));
    if (L->egrp)
        DMUON_TRY(dmuon_allgatherv_start(L->egrp, pblock_off(rt, L), rt->ewin_off));
    L->inflight = true;
    return DMUON_OK;
}

dmuon_rc rt_gather_finish(dmuon_rt *rt, size_t l)
{
    rt_layer *L = &rt->layers[l];
    if (!L->inflight)
        return DMUON_OK;
    L->inflight = false;
    if (L->pgrp)
        DMUON_TRY(dmuon_allgatherv_wait(L->pgrp));
    if (L->egrp)
        DMUON_TRY(dmuon_allgatherv_wait(L->egrp));
    return DMUON_OK;
}

dmuon_rc rt_gather_test(dmuon_rt *rt, size_t l)
{
    rt_layer *L = &rt->layers[l];
    if (!L->inflight)
        return DMUON_OK;
    int done = 0;
    if (L->pgrp)
        DMUON_TRY(dmuon_allgatherv_test(L->pgrp, &done));
    if (L->egrp)
        DMUON_TRY(dmuon_allgatherv_test(L->egrp, &done));
    return DMUON_OK;
}
