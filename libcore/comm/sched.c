/*
 * sched.c — the operators' schedule (dmuon/sched.h): slicing by rail,
 * 64 KiB chunks, one queue per source node per rail, chain and star routes.
 * Pure functions; the only resources are the two arrays of a dmuon_sched.
 * (Table checks and digests live in table.c.)
 *
 * Invariant: for every queue (q, s) the chunks are in table order and, inside
 * a segment, in increasing offset, so both ends of a rail walk a queue in
 * the same sequence and chunk positions need no negotiation (paper C.2).
 */
#include "dmuon/sched.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

/* --------------------------------------------------------- schedule ---- */

/* Visits every chunk of queue (q, s) in order; with out == NULL only counts. */
static int cut_queue(const dmuon_segment *segs, int n, int per_node, int q, int s,
                     int64_t chunk_bytes, dmuon_chunk *out)
{
    int count = 0;
    for (int i = 0; i < n; i++) {
        if (segs[i].owner / per_node != q)
            continue;
        int64_t es = (int64_t)dmuon_dtype_size(segs[i].dtype);
        int64_t per_chunk = chunk_bytes / es;
        int64_t lo = segs[i].count * s / per_node;
        int64_t hi = segs[i].count * (s + 1) / per_node;
        for (int64_t e = lo; e < hi; e += per_chunk) {
            int64_t c = hi - e < per_chunk ? hi - e : per_chunk;
            if (out) {
                dmuon_chunk *k = &out[count];
                k->seg = i;
                k->owner = segs[i].owner;
                k->offset = segs[i].offset + e * es;
                k->win_offset = segs[i].window_offset + e * es;
                k->count = c;
                k->bytes = c * es;
            }
            count++;
        }
    }
    return count;
}

dmuon_rc dmuon_chunk_bytes_check(int64_t chunk_bytes)
{
    if (chunk_bytes == 0)
        return DMUON_OK;
    if (chunk_bytes < DMUON_CHUNK_MIN_BYTES || chunk_bytes % DMUON_CHUNK_ALIGN_BYTES)
        return DMUON_FAIL(DMUON_EINVAL, "chunk of %lld bytes: expected a multiple of %d bytes, "
                          "at least %d", (long long)chunk_bytes, DMUON_CHUNK_ALIGN_BYTES,
                          DMUON_CHUNK_MIN_BYTES);
    return DMUON_OK;
}

dmuon_rc dmuon_sched_init(dmuon_sched *s, const dmuon_segment *segs, int n, int nodes,
                          int per_node, dmuon_sched_kind kind, const dmuon_sched_opts *opts)
{
    memset(s, 0, sizeof *s);
    if (nodes < 1 || per_node < 1)
        return DMUON_FAIL(DMUON_EINVAL, "schedule: %d nodes × %d ranks: expected at least 1 × 1",
                          nodes, per_node);
    dmuon_sched_opts o = {0};
    if (opts)
        o = *opts;
    if (o.chunk_bytes == 0)
        o.chunk_bytes = DMUON_CHUNK_BYTES;
    if (o.star_max_bytes == 0)
        o.star_max_bytes = 256 * 1024;
    for (int i = 0; i < n; i++)
        if (o.chunk_bytes < (int64_t)dmuon_dtype_size(segs[i].dtype))
            return DMUON_FAIL(DMUON_EINVAL, "schedule: chunk of %lld bytes is smaller than an "
                              "element of segment %d", (long long)o.chunk_bytes, i);
    if (o.path == DMUON_PATH_STAR && nodes > DMUON_STAR_MAX_NODES)
        return DMUON_FAIL(DMUON_EINVAL, "schedule: the star path serves at most %d nodes, "
                          "not %d", DMUON_STAR_MAX_NODES, nodes);

    int64_t *src_bytes = calloc((size_t)nodes, sizeof *src_bytes);
    s->first = malloc(((size_t)nodes * per_node + 1) * sizeof *s->first);
    if (!src_bytes || !s->first) {
        free(src_bytes);
        dmuon_sched_release(s);
        return DMUON_FAIL(DMUON_ENOMEM, "out of memory building a schedule");
    }
    for (int i = 0; i < n; i++)
        src_bytes[segs[i].owner / per_node] += segs[i].count * (int64_t)dmuon_dtype_size(segs[i].dtype);
    for (int q = 0; q < nodes; q++)
        if (src_bytes[q] > s->max_source_bytes)
            s->max_source_bytes = src_bytes[q];
    free(src_bytes);

    int total = 0;
    for (int q = 0; q < nodes; q++)
        for (int r = 0; r < per_node; r++) {
            s->first[q * per_node + r] = total;
            total += cut_queue(segs, n, per_node, q, r, o.chunk_bytes, NULL);
        }
    s->first[nodes * per_node] = total;
    s->chunks = calloc(total ? (size_t)total : 1, sizeof *s->chunks);
    if (!s->chunks) {
        dmuon_sched_release(s);
        return DMUON_FAIL(DMUON_ENOMEM, "out of memory building a schedule of %d chunks", total);
    }
    for (int q = 0; q < nodes; q++)
        for (int r = 0; r < per_node; r++)
            cut_queue(segs, n, per_node, q, r, o.chunk_bytes,
                      s->chunks + s->first[q * per_node + r]);
    s->nodes = nodes;
    s->per_node = per_node;
    s->kind = kind;
    s->chunk_bytes = o.chunk_bytes;
    s->nchunks = total;
    if (o.path == DMUON_PATH_AUTO)
        o.path = (nodes <= DMUON_STAR_MAX_NODES && s->max_source_bytes <= o.star_max_bytes)
                     ? DMUON_PATH_STAR : DMUON_PATH_CHAIN;
    s->path = o.path;
    return DMUON_OK;
}

void dmuon_sched_release(dmuon_sched *s)
{
    if (!s)
        return;
    free(s->chunks);
    free(s->first);
    s->chunks = NULL;
    s->first = NULL;
    s->nchunks = 0;
}

const dmuon_chunk *dmuon_sched_queue(const dmuon_sched *s, int q, int rail, int *n)
{
    assert(q >= 0 && q < s->nodes && rail >= 0 && rail < s->per_node);
    int i = q * s->per_node + rail;
    *n = s->first[i + 1] - s->first[i];
    return *n ? s->chunks + s->first[i] : NULL;
}

int dmuon_sched_route(const dmuon_sched *s, int q, int node, int *in, int *out, int *nout)
{
    int R = s->nodes, nin = 0;
    *nout = 0;
    if (R == 1)
        return 0;
    if (s->kind == DMUON_SCHED_GATHER) {
        if (s->path == DMUON_PATH_STAR) {
            if (node == q)
                for (int h = 1; h < R; h++)
                    out[(*nout)++] = (q + h) % R;
            else
                in[nin++] = q;
        } else {
            if (node != q)
                in[nin++] = (node - 1 + R) % R;
            if ((node + 1) % R != q)
                out[(*nout)++] = (node + 1) % R;
        }
    } else {
        int first = (q + 1) % R;
        if (s->path == DMUON_PATH_STAR) {
            if (node == q)
                for (int h = 1; h < R; h++)
                    in[nin++] = (q + h) % R;
            else
                out[(*nout)++] = q;
        } else {
            if (node != first)
                in[nin++] = (node - 1 + R) % R;
            if (node != q)
                out[(*nout)++] = (node + 1) % R;
        }
    }
    return nin;
}

int dmuon_sched_depth(const dmuon_sched *s)
{
    if (s->nodes <= 1)
        return 0;
    return s->path == DMUON_PATH_STAR ? 1 : s->nodes - 1;
}
