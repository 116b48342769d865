/*
 * opdrv_coalesced.c — the line "coalesced": one variable-length call per
 * layer.  AllGatherV and ReduceScatterV: the coalesced algorithm (one
 * allgatherv / reduce-scatter with per-rank counts) over the case's table
 * laid out by owner rank (dmuon_table_owner_ordered: the same bytes per
 * owner as the case); needs one element type.  The publish: the library's
 * coalesced publish (one in-place allgatherv per owner-ordered run of each
 * rail) over the case's parameters, stably ordered by (layer, owner node)
 * when the case has layers, so that a layer is never cut into several calls;
 * in table order otherwise (the library cuts the runs).
 */
#include <stdlib.h>
#include <string.h>

#include "common/opdrv.h"

/* The publish's parameters by (layer, owner node), stable (an insertion
 * sort: a rail has a few hundred units). */
static int pub_table(const opdrv_case *c, dmuon_segment **out, int *n)
{
    const int K = c->topo->per_node;
    int *idx = malloc((size_t)(c->n > 0 ? c->n : 1) * sizeof *idx);
    *out = malloc((size_t)(c->n > 0 ? c->n : 1) * sizeof **out);
    if (!idx || !*out) {
        free(idx);
        return 0;
    }
    for (int i = 0; i < c->n; i++) {
        int j = i;
        for (; c->layer_of && j > 0; j--) {
            int a = idx[j - 1], la = c->layer_of[a], li = c->layer_of[i];
            if (la < li || (la == li && c->segs[a].owner / K <= c->segs[i].owner / K))
                break;
            idx[j] = a;
        }
        idx[j] = i;
    }
    for (int i = 0; i < c->n; i++)
        (*out)[i] = c->segs[idx[i]];
    free(idx);
    *n = c->n;
    return 1;
}

static int co_table(const opdrv_case *c, dmuon_segment **out, int *n)
{
    int64_t bytes = 0;
    *out = NULL;
    if (c->op == OPDRV_PUB)
        return pub_table(c, out, n);
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

const opdrv_line opdrv_line_coalesced = {
    .name = "coalesced",
    .column = "coalesced",
    .algo = DMUON_ALGO_COALESCED,
    .pub_algo = DMUON_ALGO_COALESCED,
    .table = co_table,
};
