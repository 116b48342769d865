/*
 * ops_ours.c — dmuon-bench line "ours": dmuon_allgatherv /
 * dmuon_reduce_scatterv on a group built from the case's table, and the
 * streaming publish (begin, every owner posts its parameters in post order
 * without waiting, every leader waits for its parameters, end).
 */
#include <stdlib.h>
#include <string.h>

#include "ops.h"

typedef struct {
    const bench_case *c;
    dmuon_symm *mem;          /* the group's or the publish's memory */
    dmuon_group *g;
    dmuon_group_span sp;
    unsigned char *buf, *win; /* this rank's layer buffer and owner window (a host
                                 copy when the memory is on the GPU) */
    unsigned char *host;      /* that host copy of the span (GPU backends) */
    dmuon_publish *p;
    dmuon_segment *params;
    int64_t step;
} ours_state;

/* publish runs on the MPI backend only */
static int ours_supports(const bench_case *c)
{
    return c->op != OP_PUB || c->topo->backend == DMUON_BACKEND_MPI;
}

/* Host copy ↔ GPU of the layer buffer and owner window (no-op on host memory). */
static dmuon_rc ours_stage(ours_state *s, int in)
{
    const int64_t off[2] = {s->sp.buffer_offset, s->sp.window_offset};
    const int64_t len[2] = {dmuon_group_buffer_bytes(s->g), dmuon_group_window_bytes(s->g)};
    for (int i = 0; i < 2 && s->host; i++)
        DMUON_TRY(in ? dmuon_symm_put(s->mem, off[i], s->host + off[i], len[i])
                     : dmuon_symm_get(s->mem, off[i], s->host + off[i], len[i]));
    return DMUON_OK;
}

static dmuon_rc ours_setup(const bench_case *c, void **out)
{
    const dmuon_topo *t = c->topo;
    ours_state *s = calloc(1, sizeof *s);
    if (!s)
        return DMUON_FAIL(DMUON_ENOMEM, "out of memory");
    s->c = c;
    dmuon_rc rc = DMUON_OK;
    if (c->op == OP_PUB) {
        s->params = malloc((size_t)c->n * sizeof *s->params);
        if (!s->params) {
            rc = DMUON_FAIL(DMUON_ENOMEM, "out of memory");
            goto fail;
        }
        int64_t copy_bytes = 0;
        DMUON_TRY_GOTO(rc, dmuon_publish_layout(t->per_node, c->segs, c->n, s->params,
                                                &copy_bytes), fail);
        dmuon_publish_opts po = {.deadline_ms = c->gopts.deadline_ms,
                                  .chunk_bytes = c->gopts.chunk_bytes};
        DMUON_TRY_GOTO(rc, dmuon_symm_alloc(t, copy_bytes > 0 ? copy_bytes : 1, &s->mem), fail);
        DMUON_TRY_GOTO(rc, dmuon_publish_create(t, s->params, c->n, &po, s->mem, 0, &s->p), fail);
        unsigned char *copy = dmuon_publish_copy(s->p);
        for (int i = 0; i < c->n; i++)
            if (s->params[i].owner == t->rank)
                for (int64_t k = 0; k < bench_seg_bytes(&s->params[i]); k++)
                    copy[s->params[i].offset + k] = bench_agv_byte(i, k);
    } else {
        DMUON_TRY_GOTO(rc, dmuon_group_span_of(t, c->segs, c->n, &c->gopts, &s->sp), fail);
        DMUON_TRY_GOTO(rc, dmuon_symm_alloc(t, s->sp.bytes, &s->mem), fail);
        DMUON_TRY_GOTO(rc, dmuon_group_create(t, c->segs, c->n, &c->gopts, s->mem,
                                              s->sp.ctrl_offset, &s->g), fail);
        unsigned char *base = dmuon_symm_base(s->mem);
        if (dmuon_symm_on_device(s->mem)) {
            s->host = calloc(1, (size_t)s->sp.bytes);
            if (!s->host) {
                rc = DMUON_FAIL(DMUON_ENOMEM, "out of memory for the host copy");
                goto fail;
            }
            base = s->host;
        }
        unsigned char *buf = s->buf = base + s->sp.buffer_offset;
        unsigned char *win = s->win = base + s->sp.window_offset;
        for (int i = 0; i < c->n; i++) {
            const dmuon_segment *g = &c->segs[i];
            if (c->op == OP_AGV) {
                if (g->owner == t->rank)
                    for (int64_t k = 0; k < bench_seg_bytes(g); k++)
                        win[g->window_offset + k] = bench_agv_byte(i, k);
            } else {
                for (int64_t k = 0; k < g->count; k++)
                    bench_store(g->dtype, buf + g->offset, k, bench_rsv_val(t->rank, i, k));
            }
        }
        DMUON_TRY_GOTO(rc, ours_stage(s, 1), fail);
    }
    *out = s;
    return DMUON_OK;
fail:
    dmuon_symm_free(s->mem);
    free(s->params);
    free(s->host);
    free(s);
    return rc;
}

static dmuon_rc ours_run(void *st)
{
    ours_state *s = st;
    const bench_case *c = s->c;
    if (c->op == OP_AGV)
        return dmuon_allgatherv(s->g, s->sp.buffer_offset, s->sp.window_offset);
    if (c->op == OP_RSV)
        return dmuon_reduce_scatterv(s->g, s->sp.buffer_offset, s->sp.window_offset);
    const dmuon_topo *t = c->topo;
    s->step++;
    DMUON_TRY(dmuon_publish_begin(s->p, s->step));
    for (int j = 0; j < c->n; j++) {
        int i = c->post_order ? c->post_order[j] : j;
        if (s->params[i].owner == t->rank)
            DMUON_TRY(dmuon_publish_post(s->p, i, s->step));
    }
    if (t->nodes > 1)
        for (int j = 0; j < c->n; j++) {
            int i = c->post_order ? c->post_order[j] : j;
            if (s->params[i].owner % t->per_node == t->local && s->params[i].owner != t->rank)
                DMUON_TRY(dmuon_publish_wait(s->p, i, s->step));
        }
    return dmuon_publish_end(s->p, s->step);
}

static int64_t ours_check(void *st)
{
    ours_state *s = st;
    const bench_case *c = s->c;
    const dmuon_topo *t = c->topo;
    int64_t bad = 0;
    if (c->op == OP_PUB) {
        const unsigned char *copy = dmuon_publish_copy(s->p);
        for (int i = 0; i < c->n; i++)
            if (s->params[i].owner % t->per_node == t->local)
                for (int64_t k = 0; k < bench_seg_bytes(&s->params[i]); k++)
                    bad += copy[s->params[i].offset + k] != bench_agv_byte(i, k);
        return bad;
    }
    if (ours_stage(s, 0) != DMUON_OK)
        return 1 + c->n;   /* the results could not be read back: all wrong */
    const unsigned char *buf = s->buf, *win = s->win;
    for (int i = 0; i < c->n; i++) {
        const dmuon_segment *g = &c->segs[i];
        if (c->op == OP_AGV) {
            for (int64_t k = 0; k < bench_seg_bytes(g); k++)
                bad += buf[g->offset + k] != bench_agv_byte(i, k);
        } else if (g->owner == t->rank) {
            for (int64_t k = 0; k < g->count; k++)
                bad += bench_load(g->dtype, win + g->window_offset, k) !=
                       bench_rsv_sum(t->size, i, k);
        }
    }
    return bad;
}

static void ours_teardown(void *st)
{
    ours_state *s = st;
    if (!s)
        return;
    dmuon_group_free(s->g);
    dmuon_publish_free(s->p);
    dmuon_symm_free(s->mem);
    free(s->params);
    free(s->host);
    free(s);
}

const bench_line bench_line_ours = {"ours", ours_supports, ours_setup, ours_run, ours_check,
                                    ours_teardown};
