/*
 * pool.c — the pool's layout (dmuon/pool.h): the spaces and window regions
 * from their sizes, and the packing of a space from an acquire/release
 * sequence (dmuon/layout.h gives the plan's).
 *
 * Invariant: two acquisitions whose lifetimes overlap get disjoint byte
 * ranges.  The sequence is known in advance, so the packing is offline, as
 * tensor-arena planners do it: acquisitions in some order, each at the
 * lowest offset that no acquisition placed before it and live at the same
 * time occupies; three orders are tried (largest first; longest-lived
 * first; those live at the tightest moments first, by the most bytes live
 * during their lifetime) and the smallest space kept.  First fit in event
 * order would strand the large blocks of the embedding and the head.
 * O(acquisitions² log + events × acquisitions), small (a few acquisitions
 * per layer).
 */
#include "dmuon/pool.h"

#include <stdlib.h>

const char *dmuon_pool_space_name(int space)
{
    static const char *names[] = {"control", "working", "windows"};
    return space >= 0 && space < DMUON_SPACE_COUNT ? names[space] : "?";
}

void dmuon_pool_lay_out(const dmuon_pool_sizes *in, dmuon_pool_map *out)
{
    int64_t w = 0;
    for (int r = 0; r < DMUON_WIN_COUNT; r++) {
        out->win_off[r] = w;
        w += dmuon_pool_align(in->win[r]);
    }
    const int64_t b[DMUON_SPACE_COUNT] = {in->ctrl, in->work, w};
    int64_t off = 0;
    for (int s = 0; s < DMUON_SPACE_COUNT; s++) {
        out->space_off[s] = off;
        out->space_bytes[s] = b[s];
        off += (b[s] + DMUON_POOL_BASE_ALIGN - 1) / DMUON_POOL_BASE_ALIGN * DMUON_POOL_BASE_ALIGN;
    }
    for (int r = 0; r < DMUON_WIN_COUNT; r++)
        out->win_off[r] += out->space_off[DMUON_SPACE_WINDOW];
    out->total = off;
}

/* One acquisition: its block, its lifetime [start, end) in event indices,
 * its aligned size, the most bytes live at once during its lifetime, its
 * place. */
typedef struct {
    int32_t block;
    size_t start, end;
    int64_t size, pressure, off;
} span;

typedef struct {
    const span *s;
    int key;   /* 0 size, 1 lifetime, 2 pressure */
} order_ctx;

static int by_key(const void *a, const void *b, void *ctx)
{
    const order_ctx *c = ctx;
    const span *x = &c->s[*(const size_t *)a], *y = &c->s[*(const size_t *)b];
    int64_t kx = c->key == 0 ? x->size : c->key == 1 ? (int64_t)(x->end - x->start) : x->pressure;
    int64_t ky = c->key == 0 ? y->size : c->key == 1 ? (int64_t)(y->end - y->start) : y->pressure;
    if (kx != ky)
        return kx > ky ? -1 : 1;
    if (x->size != y->size)
        return x->size > y->size ? -1 : 1;
    if (x->start != y->start)
        return x->start < y->start ? -1 : 1;
    return 0;
}

static int by_off(const void *a, const void *b, void *ctx)
{
    const span *s = ctx;
    int64_t x = s[*(const size_t *)a].off, y = s[*(const size_t *)b].off;
    return (x > y) - (x < y);
}

/* Places the acquisitions in `order`, each at the lowest offset free of
 * the ones placed before it that are live at the same time; the space's
 * bytes. */
static int64_t place(span *sp, const size_t *order, size_t n, size_t *near)
{
    int64_t top = 0;
    for (size_t i = 0; i < n; i++) {
        span *a = &sp[order[i]];
        size_t nn = 0;
        for (size_t j = 0; j < i; j++) {
            const span *o = &sp[order[j]];
            if (o->size > 0 && a->start < o->end && o->start < a->end)
                near[nn++] = order[j];
        }
        qsort_r(near, nn, sizeof *near, by_off, sp);
        int64_t off = 0;
        for (size_t j = 0; j < nn && a->size > 0; j++) {
            const span *o = &sp[near[j]];
            if (o->off - off >= a->size)
                break;
            if (o->off + o->size > off)
                off = o->off + o->size;
        }
        a->off = off;
        if (off + a->size > top)
            top = off + a->size;
    }
    return top;
}

dmuon_rc dmuon_pool_pack(const dmuon_pool_event *ev, size_t nev, const int64_t *sizes,
                         size_t nblocks, int64_t *offsets, int64_t *total)
{
    dmuon_rc rc = DMUON_OK;
    size_t nacq = 0;
    for (size_t e = 0; e < nev; e++)
        nacq += ev[e].acquire ? 1 : 0;
    const size_t na = nacq ? nacq : 1;
    span *sp = malloc(na * sizeof *sp);
    size_t *open = malloc((nblocks ? nblocks : 1) * sizeof *open);   /* live acquisition + 1 */
    size_t *order = malloc(na * sizeof *order);
    size_t *near = malloc(na * sizeof *near);
    int64_t *live = malloc((nev + 1) * sizeof *live);
    int64_t *best = malloc(na * sizeof *best);
    if (!sp || !open || !order || !near || !live || !best) {
        rc = DMUON_FAIL(DMUON_ENOMEM, "pool layout: out of memory");
        goto done;
    }
    for (size_t b = 0; b < nblocks; b++)
        open[b] = 0;
    /* the lifetimes: each acquisition until its block's release (or the end) */
    size_t k = 0;
    for (size_t e = 0; e < nev; e++) {
        int32_t b = ev[e].block;
        if (b < 0 || (size_t)b >= nblocks) {
            rc = DMUON_FAIL(DMUON_EINVAL, "pool layout: event %zu names block %d of %zu", e,
                            (int)b, nblocks);
            goto done;
        }
        if (!ev[e].acquire) {
            if (!open[b]) {
                rc = DMUON_FAIL(DMUON_EINVAL, "pool layout: event %zu releases block %d, "
                                "which is not live", e, (int)b);
                goto done;
            }
            sp[open[b] - 1].end = e;
            open[b] = 0;
            continue;
        }
        if (open[b]) {
            rc = DMUON_FAIL(DMUON_EINVAL, "pool layout: event %zu acquires block %d, "
                            "which is live already", e, (int)b);
            goto done;
        }
        sp[k] = (span){b, e, nev, dmuon_pool_align(sizes[b]), 0, -1};
        open[b] = ++k;
    }
    /* the bytes live after each event, and each lifetime's most */
    for (size_t e = 0; e <= nev; e++)
        live[e] = 0;
    for (size_t i = 0; i < nacq; i++)
        for (size_t e = sp[i].start; e < sp[i].end; e++)
            live[e] += sp[i].size;
    for (size_t i = 0; i < nacq; i++)
        for (size_t e = sp[i].start; e < sp[i].end; e++)
            if (live[e] > sp[i].pressure)
                sp[i].pressure = live[e];
    /* three orders, the smallest space kept (ties: the earlier order):
     * largest first; longest-lived first; those live at the tightest
     * moments first */
    int64_t top = -1;
    for (int key = 0; key < 3; key++) {
        for (size_t i = 0; i < nacq; i++)
            order[i] = i;
        order_ctx c = {sp, key};
        qsort_r(order, nacq, sizeof *order, by_key, &c);
        int64_t t = place(sp, order, nacq, near);
        if (top < 0 || t < top) {
            top = t;
            for (size_t i = 0; i < nacq; i++)
                best[i] = sp[i].off;
        }
    }
    for (size_t i = 0; i < nacq; i++)
        offsets[i] = best[i];
    *total = top < 0 ? 0 : top;
done:
    free(sp);
    free(open);
    free(order);
    free(near);
    free(live);
    free(best);
    return rc;
}
