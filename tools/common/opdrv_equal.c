/*
 * opdrv_equal.c — the line "equal": the standard primitives on the case's
 * total cut into N equal shards (allgather, reduce-scatter-block; MPI's or
 * NCCL's), a reference for what regular layouts cost.  Needs one element
 * type.  The equal-length primitive has no publish form.
 */
#include <stdlib.h>

#include "common/opdrv.h"

static int eq_table(const opdrv_case *c, dmuon_segment **out, int *n)
{
    const int N = c->topo->size;
    *out = NULL;
    if (c->n < 1 || c->op == OPDRV_PUB)
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

const opdrv_line opdrv_line_equal = {
    .name = "equal",
    .column = "equal_length",
    .algo = DMUON_ALGO_EQUAL,
    .pub_algo = DMUON_ALGO_DEFAULT,
    .table = eq_table,
};
