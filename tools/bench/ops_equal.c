/*
 * ops_equal.c — dmuon-bench line "equal_length": the standard primitives on
 * the same total, cut into N equal blocks (MPI_Allgather,
 * MPI_Reduce_scatter_block; BF16 through the user-defined sum).  A reference
 * for what regular layouts cost; publish has no equal-length counterpart.
 * On a GPU backend (nccl, nccl-dev) the same primitives are NCCL's
 * (ncclAllGather, ncclReduceScatter) on symmetric GPU memory
 * (dmuon_allgather_equal, dmuon_reduce_scatter_equal), filled and checked
 * through host copies.
 */
#include <stdlib.h>
#include <string.h>

#include "ops.h"

typedef struct {
    const bench_case *c;
    dmuon_dtype dt;
    int64_t block;            /* bytes (AGV) or elements (RSV) per rank */
    unsigned char *send, *recv;
    dmuon_symm *mem;          /* GPU backends: [send | recv] on the device */
    int64_t send_bytes, recv_off, recv_bytes;
} eq_state;

static int eq_supports(const bench_case *c)
{
    if (c->op == OP_PUB || c->n < 1)
        return 0;
    for (int i = 1; i < c->n; i++)
        if (c->segs[i].dtype != c->segs[0].dtype)
            return 0;
    return 1;
}

static dmuon_rc eq_setup(const bench_case *c, void **out)
{
    const dmuon_topo *t = c->topo;
    eq_state *s = calloc(1, sizeof *s);
    if (!s)
        return DMUON_FAIL(DMUON_ENOMEM, "out of memory");
    s->c = c;
    s->dt = c->segs[0].dtype;
    int64_t es = (int64_t)dmuon_dtype_size(s->dt), elems = 0;
    for (int i = 0; i < c->n; i++)
        elems += c->segs[i].count;
    int64_t be = (elems + t->size - 1) / t->size;
    s->block = c->op == OP_AGV ? be * es : be;
    size_t one = (size_t)(be * es), all = one * (size_t)t->size;
    s->send = calloc(c->op == OP_AGV ? one : all, 1);
    s->recv = calloc(c->op == OP_AGV ? all : one, 1);
    if (!s->send || !s->recv) {
        free(s->send);
        free(s->recv);
        free(s);
        return DMUON_FAIL(DMUON_ENOMEM, "out of memory");
    }
    if (c->op == OP_AGV)
        for (int64_t k = 0; k < s->block; k++)
            s->send[k] = bench_agv_byte(t->rank, k);
    else
        for (int b = 0; b < t->size; b++)
            for (int64_t k = 0; k < be; k++)
                bench_store(s->dt, s->send, b * be + k, bench_rsv_val(t->rank, b, k));
    if (t->backend != DMUON_BACKEND_MPI) {
        s->send_bytes = (int64_t)(c->op == OP_AGV ? one : all);
        s->recv_bytes = (int64_t)(c->op == OP_AGV ? all : one);
        s->recv_off = (s->send_bytes + 4095) / 4096 * 4096;
        dmuon_rc rc = dmuon_symm_alloc(t, s->recv_off + s->recv_bytes, &s->mem);
        if (rc == DMUON_OK)
            rc = dmuon_symm_put(s->mem, 0, s->send, s->send_bytes);
        if (rc != DMUON_OK) {
            dmuon_symm_free(s->mem);
            free(s->send);
            free(s->recv);
            free(s);
            return rc;
        }
    }
    *out = s;
    return DMUON_OK;
}

static dmuon_rc eq_run(void *st)
{
    eq_state *s = st;
    const bench_case *c = s->c;
    int rc;
    if (s->mem)
        return c->op == OP_AGV
                   ? dmuon_allgather_equal(s->mem, 0, s->recv_off, s->block, c->gopts.deadline_ms)
                   : dmuon_reduce_scatter_equal(s->mem, 0, s->recv_off, s->block, s->dt,
                                                c->gopts.deadline_ms);
    if (c->op == OP_AGV)
        rc = MPI_Allgather(s->send, (int)s->block, MPI_BYTE, s->recv, (int)s->block, MPI_BYTE,
                           c->topo->world);
    else
        rc = MPI_Reduce_scatter_block(s->send, s->recv, (int)s->block, bench_mpi_type(s->dt),
                                      bench_mpi_sum(c, s->dt), c->topo->world);
    return rc == MPI_SUCCESS ? DMUON_OK : DMUON_FAIL(DMUON_ECOMM, "equal-length MPI call failed");
}

static int64_t eq_check(void *st)
{
    eq_state *s = st;
    const dmuon_topo *t = s->c->topo;
    int64_t bad = 0;
    if (s->mem && dmuon_symm_get(s->mem, s->recv_off, s->recv, s->recv_bytes) != DMUON_OK)
        return s->recv_bytes;   /* could not read the result back: count it all wrong */
    if (s->c->op == OP_AGV) {
        for (int r = 0; r < t->size; r++)
            for (int64_t k = 0; k < s->block; k++)
                bad += s->recv[r * s->block + k] != bench_agv_byte(r, k);
    } else {
        for (int64_t k = 0; k < s->block; k++)
            bad += bench_load(s->dt, s->recv, k) != bench_rsv_sum(t->size, t->rank, k);
    }
    return bad;
}

static void eq_teardown(void *st)
{
    eq_state *s = st;
    if (!s)
        return;
    dmuon_symm_free(s->mem);
    free(s->send);
    free(s->recv);
    free(s);
}

const bench_line bench_line_equal = {"equal_length", eq_supports, eq_setup, eq_run, eq_check,
                                     eq_teardown};
