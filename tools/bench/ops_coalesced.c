/*
 * ops_coalesced.c — dmuon-bench line "coalesced": one variable-length MPI
 * call per layer.  AllGatherV: MPI_Allgatherv, each rank contributing its
 * owned segments back to back; ReduceScatterV: MPI_Reduce_scatter with each
 * rank's block its owned segments back to back (BF16 through the
 * user-defined sum); publish: per layer, one MPI_Allgatherv on each rail
 * with every node contributing the parameters its rank of that rail owns
 * in the layer.  MPI's counts and displacements must be in rank order, so
 * this line lays the layer out by owner rank (same bytes per owner as the
 * table).  Needs one element type per table.
 */
#include <stdlib.h>
#include <string.h>

#include "ops.h"

typedef struct {
    const bench_case *c;
    int nranks;
    int *counts, *displs;     /* per rank (or per node on a rail) */
    int64_t *pos;             /* segment i: element/byte position in the rank-ordered layout */
    unsigned char *send, *recv;
    int64_t total;            /* bytes (AGV, publish) or elements (RSV) */
    int nlayers;
    int **lcounts, **ldispls; /* publish: per layer, per node */
    int64_t *lrecv, *lsend;   /* publish: per layer, offsets into recv / send */
} co_state;

static int co_supports(const bench_case *c)
{
    for (int i = 1; i < c->n; i++)
        if (c->segs[i].dtype != c->segs[0].dtype)
            return 0;
    return c->n > 0;
}

static void co_teardown(void *st)
{
    co_state *s = st;
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
    free(s->counts);
    free(s->displs);
    free(s->pos);
    free(s->send);
    free(s->recv);
    free(s);
}

static dmuon_rc co_setup(const bench_case *c, void **out)
{
    const dmuon_topo *t = c->topo;
    co_state *s = calloc(1, sizeof *s);
    if (!s)
        return DMUON_FAIL(DMUON_ENOMEM, "out of memory");
    s->c = c;
    dmuon_dtype dt = c->segs[0].dtype;
    int64_t es = (int64_t)dmuon_dtype_size(dt);
    int N = t->size, R = t->nodes, K = t->per_node;
    s->pos = calloc((size_t)c->n, sizeof *s->pos);
    if (!s->pos)
        goto nomem;
    if (c->op == OP_PUB) {
        /* per layer, per node of this rail: bytes; positions inside the layer */
        int nl = 1;
        for (int i = 0; c->layer_of && i < c->n; i++)
            nl = c->layer_of[i] + 1 > nl ? c->layer_of[i] + 1 : nl;
        s->nlayers = nl;
        s->lcounts = calloc((size_t)nl, sizeof *s->lcounts);
        s->ldispls = calloc((size_t)nl, sizeof *s->ldispls);
        if (!s->lcounts || !s->ldispls)
            goto nomem;
        s->lrecv = calloc((size_t)nl + 1, sizeof *s->lrecv);
        s->lsend = calloc((size_t)nl + 1, sizeof *s->lsend);
        if (!s->lrecv || !s->lsend)
            goto nomem;
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
                    off += bench_seg_bytes(g);
                    s->lcounts[l][q] += (int)bench_seg_bytes(g);
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
                for (int64_t k = 0; k < bench_seg_bytes(&c->segs[i]); k++)
                    s->send[s->lsend[l] + s->pos[i] - s->ldispls[l][t->node_id] + k] =
                        bench_agv_byte(i, k);
            }
        *out = s;
        return DMUON_OK;
    }
    s->counts = calloc((size_t)N, sizeof(int));
    s->displs = calloc((size_t)N, sizeof(int));
    if (!s->counts || !s->displs)
        goto nomem;
    int64_t off = 0;   /* in units: bytes for AGV, elements for RSV */
    for (int r = 0; r < N; r++) {
        s->displs[r] = (int)off;
        for (int i = 0; i < c->n; i++)
            if (c->segs[i].owner == r) {
                s->pos[i] = off;
                int64_t u = c->op == OP_AGV ? bench_seg_bytes(&c->segs[i]) : c->segs[i].count;
                off += u;
                s->counts[r] += (int)u;
            }
    }
    s->total = off;
    int64_t unit = c->op == OP_AGV ? 1 : es;
    s->recv = calloc((size_t)(c->op == OP_AGV ? off : s->counts[t->rank]) * unit + 1, 1);
    s->send = calloc((size_t)(c->op == OP_AGV ? s->counts[t->rank] : off) * unit + 1, 1);
    if (!s->recv || !s->send)
        goto nomem;
    for (int i = 0; i < c->n; i++) {
        const dmuon_segment *g = &c->segs[i];
        if (c->op == OP_AGV && g->owner == t->rank)
            for (int64_t k = 0; k < bench_seg_bytes(g); k++)
                s->send[s->pos[i] - s->displs[t->rank] + k] = bench_agv_byte(i, k);
        if (c->op == OP_RSV)
            for (int64_t k = 0; k < g->count; k++)
                bench_store(dt, s->send, s->pos[i] + k, bench_rsv_val(t->rank, i, k));
    }
    *out = s;
    return DMUON_OK;
nomem:
    co_teardown(s);
    return DMUON_FAIL(DMUON_ENOMEM, "out of memory");
}

static dmuon_rc co_run(void *st)
{
    co_state *s = st;
    const bench_case *c = s->c;
    const dmuon_topo *t = c->topo;
    dmuon_dtype dt = c->segs[0].dtype;
    int rc = MPI_SUCCESS;
    if (c->op == OP_AGV) {
        rc = MPI_Allgatherv(s->send, s->counts[t->rank], MPI_BYTE, s->recv, s->counts, s->displs,
                            MPI_BYTE, t->world);
    } else if (c->op == OP_RSV) {
        rc = MPI_Reduce_scatter(s->send, s->recv, s->counts, bench_mpi_type(dt),
                                bench_mpi_sum(c, dt), t->world);
    } else if (t->nodes > 1) {
        for (int l = 0; l < s->nlayers && rc == MPI_SUCCESS; l++) {
            int any = 0, me = t->node_id;
            for (int q = 0; q < t->nodes; q++)
                any |= s->lcounts[l][q] > 0;
            if (!any)
                continue;
            rc = MPI_Allgatherv(s->send + s->lsend[l], s->lcounts[l][me], MPI_BYTE,
                                s->recv + s->lrecv[l], s->lcounts[l],
                                s->ldispls[l], MPI_BYTE, t->rail);
        }
    }
    return rc == MPI_SUCCESS ? DMUON_OK : DMUON_FAIL(DMUON_ECOMM, "coalesced MPI call failed");
}

static int64_t co_check(void *st)
{
    co_state *s = st;
    const bench_case *c = s->c;
    const dmuon_topo *t = c->topo;
    int64_t bad = 0;
    for (int i = 0; i < c->n; i++) {
        const dmuon_segment *g = &c->segs[i];
        if (c->op == OP_AGV)
            for (int64_t k = 0; k < bench_seg_bytes(g); k++)
                bad += s->recv[s->pos[i] + k] != bench_agv_byte(i, k);
        else if (c->op == OP_RSV && g->owner == t->rank)
            for (int64_t k = 0; k < g->count; k++)
                bad += bench_load(g->dtype, s->recv, s->pos[i] - s->displs[t->rank] + k) !=
                       bench_rsv_sum(t->size, i, k);
        else if (c->op == OP_PUB && t->nodes > 1 && g->owner % t->per_node == t->local)
            for (int64_t k = 0; k < bench_seg_bytes(g); k++)
                bad += s->recv[s->lrecv[c->layer_of ? c->layer_of[i] : 0] + s->pos[i] + k] !=
                       bench_agv_byte(i, k);
    }
    return bad;
}

const bench_line bench_line_coalesced = {"coalesced", co_supports, co_setup, co_run, co_check,
                                         co_teardown};
