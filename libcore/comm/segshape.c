/*
 * segshape.c — generated segment tables, the shapes of the tools' --layout
 * (dmuon/segshape.h).  Segments are laid out back to back in the layer
 * buffer; each owner's segments sit back to back in its window from
 * offset 0.
 */
#include "dmuon/segshape.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

static const char *const names[DMUON_SEGSHAPE_COUNT] = {"node", "rank", "sparse", "tiny"};

const char *dmuon_segshape_name(dmuon_segshape l)
{
    return ((int)l >= 0 && l < DMUON_SEGSHAPE_COUNT) ? names[l] : "invalid";
}

dmuon_rc dmuon_segshape_parse(const char *name, dmuon_segshape *out)
{
    for (int i = 0; i < DMUON_SEGSHAPE_COUNT; i++)
        if (name && !strcasecmp(name, names[i])) {
            *out = (dmuon_segshape)i;
            return DMUON_OK;
        }
    return DMUON_FAIL(DMUON_EINVAL, "unknown layout '%s' (expected node, rank, sparse or tiny)",
                      name ? name : "(null)");
}

dmuon_rc dmuon_segshape_make(dmuon_segshape l, int64_t total_bytes, dmuon_dtype dt, int nodes,
                           int per_node, dmuon_segment **segs, int *n)
{
    *segs = NULL;
    *n = 0;
    int64_t es = (int64_t)dmuon_dtype_size(dt);
    int N = nodes * per_node;
    if (nodes < 1 || per_node < 1)
        return DMUON_FAIL(DMUON_EINVAL, "layout: %d nodes × %d ranks: expected at least 1 × 1",
                          nodes, per_node);
    if (!es)
        return DMUON_FAIL(DMUON_EINVAL, "layout: unknown element type");
    if ((int)l < 0 || l >= DMUON_SEGSHAPE_COUNT)
        return DMUON_FAIL(DMUON_EINVAL, "layout: unknown layout %d", (int)l);
    int64_t elems = total_bytes / es;
    int cnt;
    int32_t owners[7];
    switch (l) {
    case DMUON_SEGSHAPE_NODE: cnt = nodes; break;
    case DMUON_SEGSHAPE_SPARSE:
        cnt = 7;
        {
            int32_t o[7] = {N - 1, 0, N / 2, 0, N - 1, 0, N / 2};
            memcpy(owners, o, sizeof o);
        }
        break;
    default: cnt = N; break;
    }
    if (l != DMUON_SEGSHAPE_TINY && elems < cnt)
        return DMUON_FAIL(DMUON_EINVAL, "layout %s: %lld bytes cannot hold %d segments of %s",
                          names[l], (long long)total_bytes, cnt, dmuon_dtype_name(dt));
    dmuon_segment *s = calloc((size_t)cnt, sizeof *s);
    int64_t *wend = calloc((size_t)N, sizeof *wend);
    if (!s || !wend) {
        free(s);
        free(wend);
        return DMUON_FAIL(DMUON_ENOMEM, "layout: out of memory for %d segments", cnt);
    }
    int64_t wsum = 0;
    for (int i = 0; i < cnt; i++)
        wsum += l == DMUON_SEGSHAPE_SPARSE ? (i % 2 ? 1 : 3) : i % 3 + 1;
    int64_t off = 0, left = elems;
    for (int i = 0; i < cnt; i++) {
        dmuon_segment *g = &s[i];
        int w = l == DMUON_SEGSHAPE_SPARSE ? (i % 2 ? 1 : 3) : i % 3 + 1;
        switch (l) {
        case DMUON_SEGSHAPE_NODE: g->owner = i * per_node + i % per_node; break;
        case DMUON_SEGSHAPE_SPARSE: g->owner = owners[i]; break;
        default: g->owner = i; break;
        }
        if (l == DMUON_SEGSHAPE_TINY) {
            g->count = per_node > 1 ? 1 + i % (per_node - 1) : 1;
        } else {
            g->count = i == cnt - 1 ? left : elems * w / wsum;
            if (g->count < 1)
                g->count = 1;
            left -= g->count;
        }
        g->dtype = dt;
        g->offset = off;
        g->window_offset = wend[g->owner];
        off += g->count * es;
        wend[g->owner] += g->count * es;
    }
    free(wend);
    *segs = s;
    *n = cnt;
    return DMUON_OK;
}
