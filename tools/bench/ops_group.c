/*
 * ops_group.c — one line on one case (ops.h): the line's group of its
 * algorithm over its table, or its publish, through the operator driver
 * (common/opdrv.h).  One setup fills the inputs, one check counts what is
 * wrong, for every line alike:
 *   AGV: byte k of the line's segment i is opdrv_byte(BENCH_SEED, i, k),
 *        written in its owner's window and expected in every rank's layer
 *        buffer;
 *   RSV: layer element e on rank r is opdrv_rsv_int(r, e), the owner's
 *        window expected to hold opdrv_rsv_sum (exact in any order);
 *   publish: byte k of parameter i is opdrv_byte(BENCH_SEED, i, k),
 *        expected in the copy of every leader.
 * Staging through a host copy on a GPU backend stays outside the timed
 * calls.
 */
#include <stdlib.h>
#include <string.h>

#include "ops.h"

#define BENCH_SEED 0x5bu

typedef struct {
    const opdrv_case *c;
    dmuon_segment *segs;      /* the line's table */
    int n;
    opdrv_group grp;          /* AGV, RSV */
    opdrv_pub pub;            /* publish */
    int64_t step;
} bench_state;

void bench_line_teardown(void *st)
{
    bench_state *s = st;
    if (!s)
        return;
    opdrv_group_close(&s->grp);
    opdrv_pub_close(&s->pub);
    free(s->segs);
    free(s);
}

dmuon_rc bench_line_setup(const opdrv_line *l, const opdrv_case *c, void **out)
{
    const dmuon_topo *t = c->topo;
    bench_state *s = calloc(1, sizeof *s);
    if (!s)
        return DMUON_FAIL(DMUON_ENOMEM, "out of memory");
    s->c = c;
    dmuon_rc rc = DMUON_OK;
    if (!l->table(c, &s->segs, &s->n)) {
        rc = DMUON_FAIL(DMUON_ENOMEM, "line %s: cannot make its table", l->column);
        goto fail;
    }
    if (c->op == OPDRV_PUB) {
        dmuon_publish_opts po = {.deadline_ms = c->gopts.deadline_ms,
                                 .chunk_bytes = c->gopts.chunk_bytes, .algorithm = l->pub_algo};
        DMUON_TRY_GOTO(rc, opdrv_pub_open(t, s->segs, s->n, &po, &s->pub), fail);
        opdrv_pub_fill(&s->pub, t->rank, BENCH_SEED);
        *out = s;
        return DMUON_OK;
    }
    dmuon_group_opts o = c->gopts;
    o.algorithm = l->algo;
    if (l->algo != DMUON_ALGO_DEFAULT && l->algo != DMUON_ALGO_SCHEDULED)
        o.fp32_accum = 0;   /* --fp32-accum is ours' */
    DMUON_TRY_GOTO(rc, opdrv_group_open(t, s->segs, s->n, &o, &s->grp), fail);
    if (c->op == OPDRV_AGV)
        opdrv_agv_fill(s->segs, s->n, t->rank, s->grp.win, BENCH_SEED);
    else
        for (int i = 0; i < s->n; i++) {
            const dmuon_segment *g = &s->segs[i];
            const int64_t e0 = g->offset / (int64_t)dmuon_dtype_size(g->dtype);
            for (int64_t k = 0; k < g->count; k++)
                opdrv_store(g->dtype, s->grp.buf + g->offset, k, opdrv_rsv_int(t->rank, e0 + k));
        }
    DMUON_TRY_GOTO(rc, opdrv_group_stage(&s->grp, 1), fail);
    *out = s;
    return DMUON_OK;
fail:
    bench_line_teardown(s);
    return rc;
}

dmuon_rc bench_line_run(void *st)
{
    bench_state *s = st;
    if (s->c->op == OPDRV_PUB)
        return opdrv_pub_step(&s->pub, s->c->topo, ++s->step);
    return opdrv_group_call(&s->grp, s->c->op == OPDRV_AGV, 0);
}

const char *bench_line_routes(void *st)
{
    bench_state *s = st;
    return s->c->op == OPDRV_PUB ? dmuon_publish_routes(s->pub.p) : NULL;
}

int64_t bench_line_check(void *st)
{
    bench_state *s = st;
    const dmuon_topo *t = s->c->topo;
    if (s->c->op == OPDRV_PUB)
        return opdrv_pub_wrong(&s->pub, t, -1, BENCH_SEED);
    if (opdrv_group_stage(&s->grp, 0) != DMUON_OK)
        return 1 + s->n;   /* the results could not be read back: all wrong */
    if (s->c->op == OPDRV_AGV)
        return opdrv_agv_wrong(s->segs, s->n, t->rank, s->grp.buf, BENCH_SEED, 0);
    int64_t bad = 0;
    for (int i = 0; i < s->n; i++) {
        const dmuon_segment *g = &s->segs[i];
        const int64_t e0 = g->offset / (int64_t)dmuon_dtype_size(g->dtype);
        if (g->owner == t->rank)
            for (int64_t k = 0; k < g->count; k++)
                bad += opdrv_load(g->dtype, s->grp.win + g->window_offset, k) !=
                       opdrv_rsv_sum(t->size, e0 + k);
    }
    return bad;
}
