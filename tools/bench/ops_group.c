/*
 * ops_group.c — what the lines share (ops.h): AllGatherV and ReduceScatterV
 * through a group of the line's algorithm over the line's table (each line
 * says only which algorithm and where segment i of its result lies), and
 * the library publish of a given algorithm.  One setup fills the inputs, one
 * check counts wrong elements, for every line alike:
 *   AGV: byte k of the line's segment i is opdrv_byte(BENCH_SEED, i, k),
 *        written in its owner's window and expected in every rank's layer
 *        buffer (opdrv_agv_fill, opdrv_agv_wrong);
 *   RSV: element k of segment i on rank r is bench_rsv_val(r, i, k), the
 *        owner's window expected to hold bench_rsv_sum (exact in any order);
 *   publish: byte k of parameter i is opdrv_byte(BENCH_SEED, i, k),
 *        expected in the copy of every rank of the owner's rail.
 * The group, its memory and its staging through a host copy on a GPU
 * backend (outside the timed calls) are common/opdrv.h's.
 */
#include <stdlib.h>
#include <string.h>

#include "ops.h"

typedef struct {
    const bench_case *c;
    dmuon_segment *segs;      /* the line's table */
    int n;
    opdrv_group grp;          /* AGV, RSV */
    dmuon_symm *mem;          /* the publish's memory */
    dmuon_publish *p;
    int64_t step;
} bench_group;

static void group_teardown(void *st)
{
    bench_group *s = st;
    if (!s)
        return;
    opdrv_group_close(&s->grp);
    dmuon_publish_free(s->p);
    dmuon_symm_free(s->mem);
    free(s->segs);
    free(s);
}

static dmuon_rc group_setup(const bench_case *c, dmuon_algo algo, dmuon_segment *segs, int n,
                             void **out)
{
    const dmuon_topo *t = c->topo;
    bench_group *s = calloc(1, sizeof *s);
    if (!s) {
        free(segs);
        return DMUON_FAIL(DMUON_ENOMEM, "out of memory");
    }
    s->c = c;
    s->segs = segs;
    s->n = n;
    dmuon_rc rc = DMUON_OK;
    dmuon_group_opts o = c->gopts;
    o.algorithm = algo;
    if (algo != DMUON_ALGO_DEFAULT && algo != DMUON_ALGO_SCHEDULED)
        o.fp32_accum = 0;   /* --fp32-accum is ours' */
    DMUON_TRY_GOTO(rc, opdrv_group_open(t, segs, n, &o, &s->grp), fail);
    if (c->op == OP_AGV)
        opdrv_agv_fill(segs, n, t->rank, s->grp.win, BENCH_SEED);
    else
        for (int i = 0; i < n; i++)
            for (int64_t k = 0; k < segs[i].count; k++)
                opdrv_store(segs[i].dtype, s->grp.buf + segs[i].offset, k,
                            bench_rsv_val(t->rank, i, k));
    DMUON_TRY_GOTO(rc, opdrv_group_stage(&s->grp, 1), fail);
    *out = s;
    return DMUON_OK;
fail:
    group_teardown(s);
    return rc;
}

static dmuon_rc publish_setup(const bench_case *c, dmuon_algo algo, void **out)
{
    const dmuon_topo *t = c->topo;
    bench_group *s = calloc(1, sizeof *s);
    if (!s)
        return DMUON_FAIL(DMUON_ENOMEM, "out of memory");
    s->c = c;
    dmuon_rc rc = DMUON_OK;
    s->segs = malloc((size_t)(c->n > 0 ? c->n : 1) * sizeof *s->segs);
    if (!s->segs) {
        rc = DMUON_FAIL(DMUON_ENOMEM, "out of memory");
        goto fail;
    }
    s->n = c->n;
    int64_t copy_bytes = 0;
    DMUON_TRY_GOTO(rc, dmuon_publish_layout(t->per_node, c->segs, c->n, s->segs, &copy_bytes),
                   fail);
    dmuon_publish_opts po = {.deadline_ms = c->gopts.deadline_ms,
                             .chunk_bytes = c->gopts.chunk_bytes, .algorithm = algo};
    DMUON_TRY_GOTO(rc, dmuon_symm_alloc(t, copy_bytes > 0 ? copy_bytes : 1, &s->mem), fail);
    DMUON_TRY_GOTO(rc, dmuon_publish_create(t, s->segs, c->n, &po, s->mem, 0, &s->p), fail);
    unsigned char *copy = dmuon_publish_copy(s->p);
    for (int i = 0; i < c->n; i++)
        if (s->segs[i].owner == t->rank)
            for (int64_t k = 0; k < opdrv_seg_bytes(&s->segs[i]); k++)
                copy[s->segs[i].offset + k] = opdrv_byte(BENCH_SEED, i, k);
    *out = s;
    return DMUON_OK;
fail:
    group_teardown(s);
    return rc;
}

/* The publish: begin; every owner posts its parameters in post order without
 * waiting; where the algorithm streams (scheduled), every leader waits for
 * its parameters; end. */
static dmuon_rc publish_run(bench_group *s)
{
    const bench_case *c = s->c;
    const dmuon_topo *t = c->topo;
    s->step++;
    DMUON_TRY(dmuon_publish_begin(s->p, s->step));
    for (int j = 0; j < c->n; j++) {
        int i = c->post_order ? c->post_order[j] : j;
        if (s->segs[i].owner == t->rank)
            DMUON_TRY(dmuon_publish_post(s->p, i, s->step));
    }
    if (t->nodes > 1 && dmuon_publish_algo(s->p) == DMUON_ALGO_SCHEDULED)
        for (int j = 0; j < c->n; j++) {
            int i = c->post_order ? c->post_order[j] : j;
            if (dmuon_topo_leads(t, s->segs[i].owner))
                DMUON_TRY(dmuon_publish_wait(s->p, i, s->step));
        }
    return dmuon_publish_end(s->p, s->step);
}

static dmuon_rc group_run(void *st)
{
    bench_group *s = st;
    if (s->p)
        return publish_run(s);
    return opdrv_group_call(&s->grp, s->c->op == OP_AGV, 0);
}

static int64_t group_check(void *st)
{
    bench_group *s = st;
    const dmuon_topo *t = s->c->topo;
    int64_t bad = 0;
    if (s->p) {
        const unsigned char *copy = dmuon_publish_copy(s->p);
        for (int i = 0; i < s->n; i++)
            if (s->segs[i].owner % t->per_node == t->local)
                for (int64_t k = 0; k < opdrv_seg_bytes(&s->segs[i]); k++)
                    bad += copy[s->segs[i].offset + k] != opdrv_byte(BENCH_SEED, i, k);
        return bad;
    }
    if (opdrv_group_stage(&s->grp, 0) != DMUON_OK)
        return 1 + s->n;   /* the results could not be read back: all wrong */
    if (s->c->op == OP_AGV)
        return opdrv_agv_wrong(s->segs, s->n, t->rank, s->grp.buf, BENCH_SEED, 0);
    for (int i = 0; i < s->n; i++) {
        const dmuon_segment *g = &s->segs[i];
        if (g->owner == t->rank)
            for (int64_t k = 0; k < g->count; k++)
                bad += opdrv_load(g->dtype, s->grp.win + g->window_offset, k) !=
                       bench_rsv_sum(t->size, i, k);
    }
    return bad;
}

int bench_table_same(const bench_case *c, dmuon_segment **out, int *n)
{
    *out = malloc((size_t)(c->n > 0 ? c->n : 1) * sizeof **out);
    if (!*out)
        return 0;
    memcpy(*out, c->segs, (size_t)c->n * sizeof **out);
    *n = c->n;
    return 1;
}

/* ------------------------------------------------------------ driver -- */

int bench_line_supports(const bench_line *l, const bench_case *c)
{
    const dmuon_backend b = c->topo->backend;
    if (c->op == OP_PUB)   /* the publish runs on the MPI backend */
        return b == DMUON_BACKEND_MPI && (l->pub_own || l->pub_algo != DMUON_ALGO_DEFAULT);
    if (!dmuon_group_algo_offered(b, l->algo))
        return 0;
    dmuon_segment *segs = NULL;
    int n = 0, ok = l->table(c, &segs, &n);
    free(segs);
    return ok;
}

dmuon_rc bench_line_setup(const bench_line *l, const bench_case *c, void **state)
{
    if (c->op == OP_PUB)
        return l->pub_own ? l->pub_own->setup(c, state) : publish_setup(c, l->pub_algo, state);
    dmuon_segment *segs = NULL;
    int n = 0;
    if (!l->table(c, &segs, &n)) {
        free(segs);
        return DMUON_FAIL(DMUON_ENOMEM, "line %s: cannot make its table", l->name);
    }
    return group_setup(c, l->algo, segs, n, state);
}

/* The case's publish runs the line's own code when it has one. */
static int own(const bench_line *l, const bench_case *c)
{
    return c->op == OP_PUB && l->pub_own;
}

dmuon_rc bench_line_run(const bench_line *l, const bench_case *c, void *state)
{
    return own(l, c) ? l->pub_own->run(state) : group_run(state);
}

int64_t bench_line_check(const bench_line *l, const bench_case *c, void *state)
{
    return own(l, c) ? l->pub_own->check(state) : group_check(state);
}

void bench_line_teardown(const bench_line *l, const bench_case *c, void *state)
{
    if (own(l, c))
        l->pub_own->teardown(state);
    else
        group_teardown(state);
}
