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

/* ---------------------------------------------------------- publish ---- */

dmuon_rc dmuon_pub_sched_init(dmuon_pub_sched *s, const dmuon_segment *params, int n, int nodes,
                              int per_node, int64_t chunk_bytes)
{
    memset(s, 0, sizeof *s);
    if (nodes < 1 || per_node < 1 || n < 0 || chunk_bytes < 0)
        return DMUON_FAIL(DMUON_EINVAL, "publish schedule: %d nodes x %d ranks, %d parameters, "
                          "chunk %lld bytes: expected positive sizes", nodes, per_node, n,
                          (long long)chunk_bytes);
    int64_t cb = chunk_bytes > 0 ? chunk_bytes : DMUON_CHUNK_BYTES, total = 0;
    for (int i = 0; i < n; i++) {
        int64_t es = (int64_t)dmuon_dtype_size(params[i].dtype);
        int64_t ce = cb / es > 0 ? cb / es : 1;
        int64_t k = (params[i].count + ce - 1) / ce;
        if (k > INT32_MAX || total + k > INT32_MAX)
            return DMUON_FAIL(DMUON_EINVAL, "publish schedule: parameter %d: too many chunks "
                              "(%lld)", i, (long long)k);
        total += k;
    }
    s->params = malloc((n ? (size_t)n : 1) * sizeof *s->params);
    s->chunks = malloc((total ? (size_t)total : 1) * sizeof *s->chunks);
    s->route_mem = malloc(((size_t)n * nodes + 1) * sizeof *s->route_mem);
    if (!s->params || !s->chunks || !s->route_mem) {
        dmuon_pub_sched_release(s);
        return DMUON_FAIL(DMUON_ENOMEM, "out of memory building the publish schedule of %d "
                          "parameters", n);
    }
    s->nodes = nodes;
    s->per_node = per_node;
    s->chunk_bytes = cb;
    s->nparams = n;
    int c = 0;
    for (int i = 0; i < n; i++) {
        int64_t es = (int64_t)dmuon_dtype_size(params[i].dtype);
        int64_t ce = cb / es > 0 ? cb / es : 1;
        dmuon_pub_param *pp = &s->params[i];
        pp->owner = params[i].owner;
        pp->rail = params[i].owner % per_node;
        pp->first = c;
        int32_t *route = s->route_mem + (size_t)i * nodes;
        for (int h = 0; h < nodes; h++)
            route[h] = (params[i].owner / per_node + h) % nodes;
        pp->route = route;
        for (int64_t e0 = 0, k = 0; e0 < params[i].count; e0 += ce, k++, c++) {
            int64_t cnt = params[i].count - e0 < ce ? params[i].count - e0 : ce;
            s->chunks[c].param = i;
            s->chunks[c].index = (int32_t)k;
            s->chunks[c].offset = params[i].offset + e0 * es;
            s->chunks[c].bytes = cnt * es;
        }
        pp->nchunks = c - pp->first;
    }
    s->nchunks = c;
    return DMUON_OK;
}

void dmuon_pub_sched_release(dmuon_pub_sched *s)
{
    if (!s)
        return;
    free(s->params);
    free(s->chunks);
    free(s->route_mem);
    memset(s, 0, sizeof *s);
}

int dmuon_pub_sched_hop(const dmuon_pub_sched *s, int param, int node, int *prev, int *next)
{
    assert(param >= 0 && param < s->nparams && node >= 0 && node < s->nodes);
    const int32_t *route = s->params[param].route;
    int R = s->nodes, h = (node - route[0] + R) % R;
    assert(route[h] == node);
    *prev = h > 0 ? route[h - 1] : -1;
    *next = h + 1 < R ? route[h + 1] : -1;
    return h;
}

/* Appends node to out (when given) as its *n-th entry. */
static void send_to(int *out, int *n, int node)
{
    if (out)
        out[*n] = node;
    (*n)++;
}

int dmuon_pub_sched_msg(const dmuon_pub_sched *s, int param, dmuon_pub_route route, int m,
                        int node, int *out, int *nout)
{
    assert(m >= 0);
    int prev = -1, next = -1, R = s->nodes;
    int h = dmuon_pub_sched_hop(s, param, node, &prev, &next);
    const int32_t *rt = s->params[param].route;
    *nout = 0;
    if (route == DMUON_PUB_CHAIN || R <= 2) {
        if (next >= 0)
            send_to(out, nout, next);
        return prev;
    }
    const int relay = 1 + m % (R - 1);   /* the hop of the leader relaying m */
    if (h == 0) {   /* the owner's node: m to its relay, or to every leader */
        if (route == DMUON_PUB_RELAY)
            send_to(out, nout, rt[relay]);
        else
            for (int j = 1; j < R; j++)
                send_to(out, nout, rt[j]);
        return -1;
    }
    if (route == DMUON_PUB_FANOUT)
        return rt[0];
    if (h != relay)   /* another leader relays m */
        return rt[relay];
    for (int j = 1; j < R; j++)
        if (j != h)
            send_to(out, nout, rt[j]);
    return rt[0];
}
