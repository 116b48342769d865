/*
 * ops_coalesced.c — dmuon-bench line "coalesced": one variable-length call
 * per layer.  AllGatherV and ReduceScatterV: the coalesced algorithm (one
 * allgatherv / reduce-scatter with per-rank counts) over the case's table
 * laid out by owner rank (dmuon_table_owner_ordered: the same bytes per
 * owner as the case).  Publish, a baseline of this tool only: per layer,
 * one MPI_Allgatherv on each rail with every node contributing the
 * parameters its rank of that rail owns in the layer.  Needs one element
 * type per table.
 */
#include <stdlib.h>
#include <string.h>

#include "ops.h"

static int co_table(const bench_case *c, dmuon_segment **out, int *n)
{
    int64_t bytes = 0;
    *out = NULL;
    if (c->n < 1)
        return 0;
    for (int i = 1; i < c->n; i++)
        if (c->segs[i].dtype != c->segs[0].dtype)
            return 0;
    *out = malloc((size_t)c->n * sizeof **out);
    if (!*out || dmuon_table_owner_ordered(c->segs, c->n, c->topo->size, *out, NULL, &bytes) !=
                     DMUON_OK)
        return 0;
    *n = c->n;
    return 1;
}

/* ------------------------------------------------------------ publish -- */

typedef struct {
    const bench_case *c;
    int64_t *pos;             /* parameter i: byte position inside its layer */
    unsigned char *send, *recv;
    int nlayers;
    int **lcounts, **ldispls; /* per layer, per node of this rail */
    int64_t *lrecv, *lsend;   /* per layer, offsets into recv / send */
} co_pub;

static void co_teardown(void *st)
{
    co_pub *s = st;
    if (!s)
        return;
    for (int l = 0; l < s->nlayers; l++) {
        if (s->lcounts)
            free(s->lcounts[l]);
        if (s->ldispls)
            free(s->ldispls[l]);
    }
    free(s->lcounts);
    free(s->ldispls);
    free(s->lrecv);
    free(s->lsend);
    free(s->pos);
    free(s->send);
    free(s->recv);
    free(s);
}

static dmuon_rc co_setup(const bench_case *c, void **out)
{
    const dmuon_topo *t = c->topo;
    const int R = t->nodes, K = t->per_node;
    co_pub *s = calloc(1, sizeof *s);
    if (!s)
        return DMUON_FAIL(DMUON_ENOMEM, "out of memory");
    s->c = c;
    int nl = 1;
    for (int i = 0; c->layer_of && i < c->n; i++)
        nl = c->layer_of[i] + 1 > nl ? c->layer_of[i] + 1 : nl;
    s->pos = calloc((size_t)(c->n > 0 ? c->n : 1), sizeof *s->pos);
    s->lcounts = calloc((size_t)nl, sizeof *s->lcounts);
    s->ldispls = calloc((size_t)nl, sizeof *s->ldispls);
    s->lrecv = calloc((size_t)nl + 1, sizeof *s->lrecv);
    s->lsend = calloc((size_t)nl + 1, sizeof *s->lsend);
    if (!s->pos || !s->lcounts || !s->ldispls || !s->lrecv || !s->lsend)
        goto nomem;
    s->nlayers = nl;
    for (int l = 0; l < nl; l++) {
        s->lcounts[l] = calloc((size_t)R, sizeof(int));
        s->ldispls[l] = calloc((size_t)R, sizeof(int));
        if (!s->lcounts[l] || !s->ldispls[l])
            goto nomem;
        int64_t off = 0;
        for (int q = 0; q < R; q++) {
            s->ldispls[l][q] = (int)off;
            for (int i = 0; i < c->n; i++) {
                const dmuon_segment *g = &c->segs[i];
                if ((c->layer_of ? c->layer_of[i] : 0) != l || g->owner % K != t->local ||
                    g->owner / K != q)
                    continue;
                s->pos[i] = off;
                off += opdrv_seg_bytes(g);
                s->lcounts[l][q] += (int)opdrv_seg_bytes(g);
            }
        }
        s->lrecv[l + 1] = s->lrecv[l] + off;
        s->lsend[l + 1] = s->lsend[l] + s->lcounts[l][t->node_id];
    }
    s->recv = calloc((size_t)s->lrecv[nl] + 1, 1);
    s->send = calloc((size_t)s->lsend[nl] + 1, 1);
    if (!s->recv || !s->send)
        goto nomem;
    for (int i = 0; i < c->n; i++)   /* this owner's parameters, per layer */
        if (c->segs[i].owner == t->rank) {
            int l = c->layer_of ? c->layer_of[i] : 0;
            for (int64_t k = 0; k < opdrv_seg_bytes(&c->segs[i]); k++)
                s->send[s->lsend[l] + s->pos[i] - s->ldispls[l][t->node_id] + k] =
                    opdrv_byte(BENCH_SEED, i, k);
        }
    *out = s;
    return DMUON_OK;
nomem:
    co_teardown(s);
    return DMUON_FAIL(DMUON_ENOMEM, "out of memory");
}

static dmuon_rc co_run(void *st)
{
    co_pub *s = st;
    const dmuon_topo *t = s->c->topo;
    int rc = MPI_SUCCESS;
    for (int l = 0; l < s->nlayers && rc == MPI_SUCCESS && t->nodes > 1; l++) {
        int any = 0, me = t->node_id;
        for (int q = 0; q < t->nodes; q++)
            any |= s->lcounts[l][q] > 0;
        if (!any)
            continue;
        rc = MPI_Allgatherv(s->send + s->lsend[l], s->lcounts[l][me], MPI_BYTE,
                            s->recv + s->lrecv[l], s->lcounts[l], s->ldispls[l], MPI_BYTE,
                            t->rail);
    }
    return rc == MPI_SUCCESS ? DMUON_OK : DMUON_FAIL(DMUON_ECOMM, "coalesced MPI call failed");
}

static int64_t co_check(void *st)
{
    co_pub *s = st;
    const bench_case *c = s->c;
    const dmuon_topo *t = c->topo;
    int64_t bad = 0;
    for (int i = 0; i < c->n && t->nodes > 1; i++) {
        const dmuon_segment *g = &c->segs[i];
        if (g->owner % t->per_node != t->local)
            continue;
        for (int64_t k = 0; k < opdrv_seg_bytes(g); k++)
            bad += s->recv[s->lrecv[c->layer_of ? c->layer_of[i] : 0] + s->pos[i] + k] !=
                   opdrv_byte(BENCH_SEED, i, k);
    }
    return bad;
}

static const bench_pub_own co_publish = {co_setup, co_run, co_check, co_teardown};

const bench_line bench_line_coalesced = {
    .name = "coalesced",
    .algo = DMUON_ALGO_COALESCED,
    .table = co_table,
    .pub_own = &co_publish,
};
