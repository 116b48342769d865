/*
 * table.c — segment tables (dmuon/table.h): the checks of a group's table
 * and of a publish table, the digest, and the agreement of all ranks on one
 * table.  Groups and the publish of every backend call these; nothing here
 * depends on a backend.
 *
 * Invariant: the agreement is collective and every path through it makes
 * the same MPI calls on every rank, so a rank with another table (or no
 * memory) makes all ranks fail alike instead of leaving some waiting.
 */
#include "dmuon/table.h"

#include "dmuon/ctl.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ table ---- */

typedef struct {
    int32_t owner;
    int64_t lo, hi;
    int idx;
} win_span;

static int win_span_cmp(const void *a, const void *b)
{
    const win_span *x = a, *y = b;
    if (x->owner != y->owner)
        return x->owner < y->owner ? -1 : 1;
    if (x->lo != y->lo)
        return x->lo < y->lo ? -1 : 1;
    return x->idx - y->idx;
}

dmuon_rc dmuon_table_check(const dmuon_segment *segs, int n, int nranks,
                           int64_t *layer_bytes, int64_t *window_bytes)
{
    if (n < 0 || (n > 0 && !segs))
        return DMUON_FAIL(DMUON_EINVAL, "segment table: no segments given");
    int64_t end = 0, wmax = 0;
    for (int i = 0; i < n; i++) {
        const dmuon_segment *g = &segs[i];
        size_t es = dmuon_dtype_size(g->dtype);
        if (g->owner < 0 || g->owner >= nranks)
            return DMUON_FAIL(DMUON_EINVAL, "segment %d: owner %d is not a rank of 0..%d",
                              i, (int)g->owner, nranks - 1);
        if (es == 0)
            return DMUON_FAIL(DMUON_EINVAL, "segment %d: unknown element type %d", i,
                              (int)g->dtype);
        if (g->count <= 0 || g->count > (INT64_C(1) << 40))
            return DMUON_FAIL(DMUON_EINVAL, "segment %d: count %lld: expected a positive "
                              "element count", i, (long long)g->count);
        if (g->offset < 0 || g->offset % (int64_t)es)
            return DMUON_FAIL(DMUON_EINVAL, "segment %d: offset %lld: expected a non-negative "
                              "multiple of the element size %zu", i, (long long)g->offset, es);
        if (g->window_offset < 0 || g->window_offset % (int64_t)es)
            return DMUON_FAIL(DMUON_EINVAL, "segment %d: window_offset %lld: expected a "
                              "non-negative multiple of the element size %zu", i,
                              (long long)g->window_offset, es);
        if (g->offset < end)
            return DMUON_FAIL(DMUON_EINVAL, "segment %d: offset %lld overlaps the previous "
                              "segment (which ends at %lld); segments must be in layer order",
                              i, (long long)g->offset, (long long)end);
        end = g->offset + g->count * (int64_t)es;
        int64_t wend = g->window_offset + g->count * (int64_t)es;
        if (wend > wmax)
            wmax = wend;
    }
    if (n > 1) {
        win_span *sp = malloc((size_t)n * sizeof *sp);
        if (!sp)
            return DMUON_FAIL(DMUON_ENOMEM, "out of memory checking %d segments", n);
        for (int i = 0; i < n; i++) {
            sp[i].owner = segs[i].owner;
            sp[i].lo = segs[i].window_offset;
            sp[i].hi = segs[i].window_offset + segs[i].count * (int64_t)dmuon_dtype_size(segs[i].dtype);
            sp[i].idx = i;
        }
        qsort(sp, (size_t)n, sizeof *sp, win_span_cmp);
        for (int i = 1; i < n; i++)
            if (sp[i].owner == sp[i - 1].owner && sp[i].lo < sp[i - 1].hi) {
                int a = sp[i - 1].idx, b = sp[i].idx;
                free(sp);
                return DMUON_FAIL(DMUON_EINVAL, "segments %d and %d: windows overlap in owner "
                                  "%d's window", a < b ? a : b, a < b ? b : a,
                                  (int)segs[a].owner);
            }
        free(sp);
    }
    if (layer_bytes)
        *layer_bytes = end;
    if (window_bytes)
        *window_bytes = wmax;
    return DMUON_OK;
}

dmuon_rc dmuon_table_owner_ordered(const dmuon_segment *segs, int n, int nranks,
                                   dmuon_segment *out, int *from, int64_t *buffer_bytes)
{
    if (n < 0 || (n > 0 && (!segs || !out)) || nranks < 1)
        return DMUON_FAIL(DMUON_EINVAL, "owner-ordered table: %d segments over %d ranks: "
                          "expected a table and at least one rank", n, nranks);
    for (int i = 0; i < n; i++) {
        if (segs[i].owner < 0 || segs[i].owner >= nranks)
            return DMUON_FAIL(DMUON_EINVAL, "segment %d: owner %d is not a rank of 0..%d", i,
                              (int)segs[i].owner, nranks - 1);
        if (!dmuon_dtype_size(segs[i].dtype))
            return DMUON_FAIL(DMUON_EINVAL, "segment %d: unknown element type %d", i,
                              (int)segs[i].dtype);
    }
    int64_t *wend = calloc((size_t)nranks, sizeof *wend);
    if (!wend)
        return DMUON_FAIL(DMUON_ENOMEM, "out of memory ordering %d segments", n);
    int64_t off = 0;
    int k = 0;
    for (int r = 0; r < nranks; r++)
        for (int i = 0; i < n; i++) {
            if (segs[i].owner != r)
                continue;
            const int64_t es = (int64_t)dmuon_dtype_size(segs[i].dtype);
            off = (off + es - 1) / es * es;
            out[k] = segs[i];
            out[k].offset = off;
            out[k].window_offset = (wend[r] + es - 1) / es * es;
            wend[r] = out[k].window_offset + segs[i].count * es;
            off += segs[i].count * es;
            if (from)
                from[k] = i;
            k++;
        }
    free(wend);
    *buffer_bytes = off;
    return DMUON_OK;
}

dmuon_rc dmuon_table_even(int parts, int64_t count, dmuon_dtype dtype, dmuon_segment *out)
{
    const int64_t es = (int64_t)dmuon_dtype_size(dtype);
    if (parts < 1 || count < 1 || !es || !out)
        return DMUON_FAIL(DMUON_EINVAL, "even table: %d shards of %lld elements of type %d: "
                          "expected at least one shard of at least one element of a known "
                          "type", parts, (long long)count, (int)dtype);
    for (int j = 0; j < parts; j++) {
        memset(&out[j], 0, sizeof out[j]);
        out[j].owner = j;
        out[j].dtype = dtype;
        out[j].count = count;
        out[j].offset = j * count * es;
        out[j].window_offset = 0;
    }
    return DMUON_OK;
}

static uint64_t digest_i64(uint64_t h, int64_t v)
{
    unsigned char b[8];
    for (int i = 0; i < 8; i++)
        b[i] = (unsigned char)((uint64_t)v >> (8 * i));
    return dmuon_digest(b, 8, h);
}

uint64_t dmuon_table_digest(const dmuon_segment *segs, int n)
{
    uint64_t h = digest_i64(DMUON_DIGEST_SEED, n);
    for (int i = 0; i < n; i++) {
        h = digest_i64(h, segs[i].owner);
        h = digest_i64(h, segs[i].dtype);
        h = digest_i64(h, segs[i].offset);
        h = digest_i64(h, segs[i].count);
        h = digest_i64(h, segs[i].window_offset);
    }
    return h;
}

/* ---------------------------------------------------- publish table ---- */

typedef struct {
    int64_t lo, hi;
    int rail, idx;
} span;

static int span_cmp(const void *a, const void *b)
{
    const span *x = a, *y = b;
    if (x->rail != y->rail)
        return x->rail - y->rail;
    if (x->lo != y->lo)
        return x->lo < y->lo ? -1 : 1;
    return x->idx - y->idx;
}

dmuon_rc dmuon_table_check_publish(const dmuon_segment *ps, int n, int nranks, int K,
                                   int64_t *bytes)
{
    if (n < 0 || (n > 0 && !ps))
        return DMUON_FAIL(DMUON_EINVAL, "publish table: no parameters given");
    int64_t ext = 0;
    span *sp = malloc((n ? (size_t)n : 1) * sizeof *sp);
    if (!sp)
        return DMUON_FAIL(DMUON_ENOMEM, "out of memory checking %d parameters", n);
    for (int i = 0; i < n; i++) {
        size_t es = dmuon_dtype_size(ps[i].dtype);
        dmuon_rc rc = DMUON_OK;
        if (ps[i].owner < 0 || ps[i].owner >= nranks)
            rc = DMUON_FAIL(DMUON_EINVAL, "parameter %d: owner %d is not a rank of 0..%d", i,
                            (int)ps[i].owner, nranks - 1);
        else if (!es)
            rc = DMUON_FAIL(DMUON_EINVAL, "parameter %d: unknown element type", i);
        else if (ps[i].count <= 0 || ps[i].count > (INT64_C(1) << 40))
            rc = DMUON_FAIL(DMUON_EINVAL, "parameter %d: count %lld: expected a positive "
                            "element count", i, (long long)ps[i].count);
        else if (ps[i].offset < 0 || ps[i].offset % (int64_t)es)
            rc = DMUON_FAIL(DMUON_EINVAL, "parameter %d: offset %lld: expected a non-negative "
                            "multiple of %zu", i, (long long)ps[i].offset, es);
        if (rc != DMUON_OK) {
            free(sp);
            return rc;
        }
        sp[i].lo = ps[i].offset;
        sp[i].hi = ps[i].offset + ps[i].count * (int64_t)es;
        sp[i].rail = ps[i].owner % K;
        sp[i].idx = i;
        if (sp[i].hi > ext)
            ext = sp[i].hi;
    }
    qsort(sp, (size_t)n, sizeof *sp, span_cmp);
    for (int i = 1; i < n; i++)
        if (sp[i].rail == sp[i - 1].rail && sp[i].lo < sp[i - 1].hi) {
            int a = sp[i - 1].idx, b = sp[i].idx, r = sp[i].rail;
            free(sp);
            return DMUON_FAIL(DMUON_EINVAL, "parameters %d and %d overlap in the copy of rail %d",
                              a < b ? a : b, a < b ? b : a, r);
        }
    free(sp);
    *bytes = ext;
    return DMUON_OK;
}

/* -------------------------------------------------------- agreement ---- */

static void seg_encode(const dmuon_segment *s, int64_t v[5])
{
    v[0] = s->owner;
    v[1] = s->dtype;
    v[2] = s->offset;
    v[3] = s->count;
    v[4] = s->window_offset;
}

/* Exchanges table digests; on disagreement finds the first segment that
 * differs from rank 0's table and fails on every rank.  Every exchange is a
 * control call (dmuon/ctl.h) over the topology, so it has a deadline and
 * runs on whatever carries t. */
dmuon_rc dmuon_table_agree_topo(const dmuon_topo *t, const dmuon_segment *segs, int n,
                                int deadline_ms)
{
    static const char *const w = "segment table agreement";
    const int rank = t->rank, size = t->size;
    uint64_t mine = dmuon_table_digest(segs, n);
    uint64_t ref_digest = mine;
    DMUON_TRY(dmuon_ctl_topo_bcast(t, &ref_digest, (int)sizeof ref_digest, 0, deadline_ms, w));
    int64_t any = ref_digest != mine;
    DMUON_TRY(dmuon_ctl_topo_allreduce_i64(t, &any, 1, DMUON_CTL_MAX, deadline_ms, w));
    if (!any)
        return DMUON_OK;

    int64_t n0 = n;
    DMUON_TRY(dmuon_ctl_topo_bcast(t, &n0, (int)sizeof n0, 0, deadline_ms, w));
    int64_t *ref = malloc(((size_t)n0 * 5 + 1) * sizeof *ref);
    DMUON_TRY(dmuon_ctl_topo_agree(t, ref ? DMUON_OK : DMUON_FAIL(DMUON_ENOMEM, "out of memory "
                                   "comparing segment tables"), deadline_ms));
    if (rank == 0)
        for (int64_t i = 0; i < n0; i++)
            seg_encode(&segs[i], ref + 5 * i);
    const int64_t total = n0 * 5 * (int64_t)sizeof *ref;
    for (int64_t off = 0; off < total; off += DMUON_CTL_MAX_BYTES) {
        const int64_t len = total - off < DMUON_CTL_MAX_BYTES ? total - off : DMUON_CTL_MAX_BYTES;
        dmuon_rc rc = dmuon_ctl_topo_bcast(t, (char *)ref + off, (int)len, 0, deadline_ms, w);
        if (rc != DMUON_OK) {
            free(ref);
            return rc;
        }
    }
    int first = INT_MAX;
    int lim = n < n0 ? n : (int)n0;
    for (int i = 0; i < lim && first == INT_MAX; i++) {
        int64_t v[5];
        seg_encode(&segs[i], v);
        if (memcmp(v, ref + 5 * i, sizeof v))
            first = i;
    }
    if (first == INT_MAX && n != n0)
        first = lim;
    /* the lowest (index, rank) pair: one minimum over index · size + rank */
    int64_t key = (int64_t)first * size + rank;
    dmuon_rc rc = dmuon_ctl_topo_allreduce_i64(t, &key, 1, DMUON_CTL_MIN, deadline_ms, w);
    if (rc != DMUON_OK) {
        free(ref);
        return rc;
    }
    struct { int idx, rank; } glob = {(int)(key / size), (int)(key % size)};
    /* Every rank reports the differing rank's segment (sent by that rank)
     * next to rank 0's, so the message is the same everywhere and shows the
     * two segments that actually differ. */
    int64_t theirs[7] = {0};   /* has-segment flag, the encoded segment, its count */
    theirs[6] = n;
    if (rank == glob.rank && glob.idx < n) {
        theirs[0] = 1;
        seg_encode(&segs[glob.idx], theirs + 1);
    }
    rc = dmuon_ctl_topo_bcast(t, theirs, (int)sizeof theirs, glob.rank, deadline_ms, w);
    if (rc != DMUON_OK) {
        free(ref);
        return rc;
    }
    const int theirs_n = (int)theirs[6];
    char what[320] = "";
    if (theirs[0]) {
        const int64_t *v = theirs + 1;
        snprintf(what, sizeof what, "; rank %d's segment %d is {owner %lld, %s, offset %lld, "
                 "count %lld, window_offset %lld}", glob.rank, glob.idx, (long long)v[0],
                 dmuon_dtype_name((dmuon_dtype)v[1]), (long long)v[2], (long long)v[3],
                 (long long)v[4]);
    } else {
        snprintf(what, sizeof what, "; rank %d's table has only %d segments", glob.rank,
                 theirs_n);
    }
    if (glob.idx < n0) {
        const int64_t *v = ref + 5 * glob.idx;
        size_t l = strlen(what);
        snprintf(what + l, sizeof what - l, ", rank 0's is {owner %lld, %s, offset %lld, "
                 "count %lld, window_offset %lld}", (long long)v[0],
                 dmuon_dtype_name((dmuon_dtype)v[1]), (long long)v[2], (long long)v[3],
                 (long long)v[4]);
    } else {
        size_t l = strlen(what);
        snprintf(what + l, sizeof what - l, ", rank 0's table has only %d segments", (int)n0);
    }
    free(ref);
    return DMUON_FAIL(DMUON_EMISMATCH, "segment tables differ across ranks: first difference "
                      "at segment %d (rank %d against rank 0; %d and %d segments)%s",
                      glob.idx, glob.rank, theirs_n, (int)n0, what);
}

dmuon_rc dmuon_table_agree(MPI_Comm comm, const dmuon_segment *segs, int n, int deadline_ms)
{
    /* a topology that is only its world: the control calls use nothing else */
    dmuon_topo t;
    memset(&t, 0, sizeof t);
    t.world = comm;
    t.node = t.rail = MPI_COMM_NULL;
    t.size = 1;
    if (comm != MPI_COMM_NULL) {
        MPI_Comm_rank(comm, &t.rank);
        MPI_Comm_size(comm, &t.size);
    }
    return dmuon_table_agree_topo(&t, segs, n, deadline_ms);
}

