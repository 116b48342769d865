/*
 * ops_per_owner.c — dmuon-bench line "per_owner": one MPI call per segment,
 * rooted at its owner: MPI_Bcast for AllGatherV (the owner first copies its
 * window into the layer buffer), MPI_Reduce into the owner's window for
 * ReduceScatterV (BF16 through the user-defined sum), and for publish one
 * MPI_Bcast per parameter on the owner's rail, in post order.
 */
#include <stdlib.h>
#include <string.h>

#include "ops.h"

typedef struct {
    const bench_case *c;
    unsigned char *buf, *win;
    int64_t buf_bytes, win_bytes;
    dmuon_segment *pub;      /* publish: the table in the publish copy layout */
} po_state;

static int po_supports(const bench_case *c) { return 1; }

static dmuon_rc po_setup(const bench_case *c, void **out)
{
    const dmuon_topo *t = c->topo;
    po_state *s = calloc(1, sizeof *s);
    if (!s)
        return DMUON_FAIL(DMUON_ENOMEM, "out of memory");
    s->c = c;
    s->pub = malloc(((size_t)c->n + 1) * sizeof *s->pub);
    for (int i = 0; i < c->n; i++) {
        const dmuon_segment *g = &c->segs[i];
        int64_t e = g->offset + bench_seg_bytes(g), w = g->window_offset + bench_seg_bytes(g);
        s->buf_bytes = e > s->buf_bytes ? e : s->buf_bytes;
        s->win_bytes = w > s->win_bytes ? w : s->win_bytes;
    }
    if (s->pub) {
        int64_t copy_bytes = 0;
        dmuon_rc rc = dmuon_publish_layout(t->per_node, c->segs, c->n, s->pub, &copy_bytes);
        if (rc != DMUON_OK) {
            free(s->pub);
            free(s);
            return rc;
        }
        if (c->op == OP_PUB)
            s->buf_bytes = copy_bytes;
    }
    s->buf = calloc((size_t)s->buf_bytes + 1, 1);
    s->win = calloc((size_t)s->win_bytes + 1, 1);
    if (!s->pub || !s->buf || !s->win) {
        free(s->pub);
        free(s->buf);
        free(s->win);
        free(s);
        return DMUON_FAIL(DMUON_ENOMEM, "out of memory");
    }
    for (int i = 0; i < c->n; i++) {
        const dmuon_segment *g = &c->segs[i];
        if (c->op == OP_AGV && g->owner == t->rank)
            for (int64_t k = 0; k < bench_seg_bytes(g); k++)
                s->win[g->window_offset + k] = bench_agv_byte(i, k);
        if (c->op == OP_PUB && g->owner == t->rank)
            for (int64_t k = 0; k < bench_seg_bytes(g); k++)
                s->buf[s->pub[i].offset + k] = bench_agv_byte(i, k);
        if (c->op == OP_RSV)
            for (int64_t k = 0; k < g->count; k++)
                bench_store(g->dtype, s->buf + g->offset, k, bench_rsv_val(t->rank, i, k));
    }
    *out = s;
    return DMUON_OK;
}

static dmuon_rc po_run(void *st)
{
    po_state *s = st;
    const bench_case *c = s->c;
    const dmuon_topo *t = c->topo;
    for (int j = 0; j < c->n; j++) {
        int i = c->op == OP_PUB && c->post_order ? c->post_order[j] : j;
        const dmuon_segment *g = &c->segs[i];
        int rc;
        if (c->op == OP_AGV) {
            if (g->owner == t->rank)
                memcpy(s->buf + g->offset, s->win + g->window_offset, (size_t)bench_seg_bytes(g));
            rc = MPI_Bcast(s->buf + g->offset, (int)bench_seg_bytes(g), MPI_BYTE, g->owner,
                           t->world);
        } else if (c->op == OP_RSV) {
            rc = MPI_Reduce(s->buf + g->offset, s->win + g->window_offset, (int)g->count,
                            bench_mpi_type(g->dtype), bench_mpi_sum(c, g->dtype), g->owner,
                            t->world);
        } else {
            if (g->owner % t->per_node != t->local || t->nodes == 1)
                continue;
            rc = MPI_Bcast(s->buf + s->pub[i].offset, (int)bench_seg_bytes(g), MPI_BYTE,
                           g->owner / t->per_node, t->rail);
        }
        if (rc != MPI_SUCCESS)
            return DMUON_FAIL(DMUON_ECOMM, "per-owner MPI call failed");
    }
    return DMUON_OK;
}

static int64_t po_check(void *st)
{
    po_state *s = st;
    const bench_case *c = s->c;
    const dmuon_topo *t = c->topo;
    int64_t bad = 0;
    for (int i = 0; i < c->n; i++) {
        const dmuon_segment *g = &c->segs[i];
        if (c->op == OP_AGV)
            for (int64_t k = 0; k < bench_seg_bytes(g); k++)
                bad += s->buf[g->offset + k] != bench_agv_byte(i, k);
        else if (c->op == OP_PUB && g->owner % t->per_node == t->local)
            for (int64_t k = 0; k < bench_seg_bytes(g); k++)
                bad += s->buf[s->pub[i].offset + k] != bench_agv_byte(i, k);
        else if (c->op == OP_RSV && g->owner == t->rank)
            for (int64_t k = 0; k < g->count; k++)
                bad += bench_load(g->dtype, s->win + g->window_offset, k) !=
                       bench_rsv_sum(t->size, i, k);
    }
    return bad;
}

static void po_teardown(void *st)
{
    po_state *s = st;
    if (!s)
        return;
    free(s->pub);
    free(s->buf);
    free(s->win);
    free(s);
}

const bench_line bench_line_per_owner = {"per_owner", po_supports, po_setup, po_run, po_check,
                                         po_teardown};
