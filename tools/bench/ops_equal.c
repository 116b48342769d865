/*
 * ops_equal.c — dmuon-bench line "equal_length": the standard primitives
 * on the same total cut into N equal shards (the equal algorithm:
 * allgather, reduce-scatter-block; MPI's or NCCL's), a reference for what
 * regular layouts cost.  Needs one element type; publish has no
 * equal-length counterpart.
 */
#include <stdlib.h>

#include "ops.h"

static int eq_table(const bench_case *c, dmuon_segment **out, int *n)
{
    const int N = c->topo->size;
    *out = NULL;
    if (c->n < 1)
        return 0;
    int64_t elems = 0;
    for (int i = 0; i < c->n; i++) {
        if (c->segs[i].dtype != c->segs[0].dtype)
            return 0;
        elems += c->segs[i].count;
    }
    *out = malloc((size_t)N * sizeof **out);
    if (!*out || dmuon_table_even(N, (elems + N - 1) / N, c->segs[0].dtype, *out) != DMUON_OK)
        return 0;
    *n = N;
    return 1;
}

const bench_line bench_line_equal = {
    .name = "equal_length",
    .algo = DMUON_ALGO_EQUAL,
    .table = eq_table,
};
