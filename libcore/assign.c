/*
 * assign.c — the greedy owner assignment (LPT with byte cap and layer
 * spreading; paper §3.3 and Appendix B) and its HSDP form (columns first,
 * then ranks within each column; paper §4.3).
 *
 * The selection rule, for each item in LPT order: candidates are the bins
 * not yet used by the item's layer in the layer's current round (a round
 * ends when the layer has used every bin once); among them the least loaded
 * (cost, then bin index) whose bytes stay within the cap after receiving the
 * item; if none fits, the candidate with the fewest bytes (then bin index).
 *
 * Speed: two indexed binary min-heaps over the bins, one by (load, bin) and
 * one by (bytes, bin).  The load heap also keeps, per heap node, the fewest
 * bytes in its subtree, so a best-first walk (a small side heap of
 * positions) skips every subtree in which no bin fits under the cap; the
 * walk stops at the first acceptable bin.  A walk that meets more than
 * 64 + 2 x (excluded bins) unacceptable bins gives up, and a linear scan
 * applies the same rule in O(N); both give the same bin.  Layer rounds: per
 * layer, the list of bins used in its current round, marked in a byte map
 * while one item is placed.
 */
#include "plan_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------- indexed heaps -- */

typedef struct {
    int32_t *heap;         /* heap[pos] = bin */
    int32_t *pos;          /* pos[bin] = position */
    const double *key;     /* key[bin] */
    int32_t n;
    double *minb;          /* optional: per position, fewest sub[bin] in the subtree */
    const double *sub;
} iheap;

/* Recomputes minb on the path from position i up to the root. */
static void fix_minb(iheap *h, int32_t i)
{
    if (!h->minb)
        return;
    for (;;) {
        double v = h->sub[h->heap[i]];
        int32_t c = 2 * i + 1;
        if (c < h->n && h->minb[c] < v)
            v = h->minb[c];
        if (c + 1 < h->n && h->minb[c + 1] < v)
            v = h->minb[c + 1];
        h->minb[i] = v;
        if (i == 0)
            break;
        i = (i - 1) / 2;
    }
}

static inline bool less(const iheap *h, int32_t a, int32_t b)
{
    double ka = h->key[a], kb = h->key[b];
    return ka < kb || (ka == kb && a < b);
}

static void sift_down(iheap *h, int32_t i)
{
    int32_t b = h->heap[i];
    for (;;) {
        int32_t c = 2 * i + 1;
        if (c >= h->n)
            break;
        if (c + 1 < h->n && less(h, h->heap[c + 1], h->heap[c]))
            c++;
        if (!less(h, h->heap[c], b))
            break;
        h->heap[i] = h->heap[c];
        h->pos[h->heap[i]] = i;
        i = c;
    }
    h->heap[i] = b;
    h->pos[b] = i;
}

/* Side heap of positions of h, ordered by the bins' keys. */
typedef struct {
    int32_t *v;
    int32_t n;
} side;

static void side_push(side *s, const iheap *h, int32_t p)
{
    int32_t i = s->n++;
    while (i > 0) {
        int32_t par = (i - 1) / 2;
        if (!less(h, h->heap[p], h->heap[s->v[par]]))
            break;
        s->v[i] = s->v[par];
        i = par;
    }
    s->v[i] = p;
}

static int32_t side_pop(side *s, const iheap *h)
{
    int32_t top = s->v[0], last = s->v[--s->n], i = 0;
    for (;;) {
        int32_t c = 2 * i + 1;
        if (c >= s->n)
            break;
        if (c + 1 < s->n && less(h, h->heap[s->v[c + 1]], h->heap[s->v[c]]))
            c++;
        if (!less(h, h->heap[s->v[c]], h->heap[last]))
            break;
        s->v[i] = s->v[c];
        i = c;
    }
    if (s->n > 0)
        s->v[i] = last;
    return top;
}

/* Linear scan: the same rule over all bins, O(N); used when a heap walk
 * would meet too many bins that are excluded or over the cap.  Returns the
 * pick; *none_fits when no candidate fits (the pick is then the candidate
 * with the fewest bytes). */
static int32_t scan(int32_t nbins, const double *load, const double *bytes, const uint8_t *mark,
                    double limit, bool *none_fits)
{
    int32_t best = -1, fewest = -1;
    for (int32_t b = 0; b < nbins; b++) {
        if (mark[b])
            continue;
        if (fewest < 0 || bytes[b] < bytes[fewest])
            fewest = b;
        if (bytes[b] <= limit && (best < 0 || load[b] < load[best]))
            best = b;
    }
    *none_fits = best < 0;
    return best >= 0 ? best : fewest;
}

/* ----------------------------------------------------------------- LPT -- */

static int cmp_items(const void *x, const void *y, void *ctx)
{
    const dmuon_assign_item *it = ctx;
    const dmuon_assign_item *a = &it[*(const size_t *)x], *b = &it[*(const size_t *)y];
    if (a->cost != b->cost)
        return a->cost > b->cost ? -1 : 1;
    if (a->elements != b->elements)
        return a->elements > b->elements ? -1 : 1;
    return strcmp(a->name, b->name);
}

dmuon_rc dmuon_assign_lpt(const dmuon_assign_item *items, size_t n, int32_t nbins, double cap,
                          bool spread, int32_t *bin, bool *fallback)
{
    dmuon_rc rc = DMUON_OK;
    int32_t maxlayer = 0;
    for (size_t i = 0; i < n; i++)
        if (items[i].layer > maxlayer)
            maxlayer = items[i].layer;
    size_t *order = malloc((n ? n : 1) * sizeof *order);
    double *load = calloc((size_t)nbins, sizeof *load);
    double *bytes = calloc((size_t)nbins, sizeof *bytes);
    int32_t *mem = malloc(6 * (size_t)nbins * sizeof *mem + sizeof *mem);
    double *minb = calloc((size_t)nbins, sizeof *minb);
    uint8_t *mark = calloc((size_t)nbins, 1);
    /* per layer: the bins used in its current round (lbins[loff[L] ..]) */
    size_t *loff = calloc((size_t)maxlayer + 2, sizeof *loff);
    int32_t *inround = calloc((size_t)maxlayer + 1, sizeof *inround);
    int32_t *lbins = malloc((n ? n : 1) * sizeof *lbins);
    double *saved = malloc(((size_t)nbins + 1) * sizeof *saved);
    if (!saved || !order || !load || !bytes || !mem || !minb || !mark || !loff || !inround || !lbins) {
        rc = DMUON_FAIL(DMUON_ENOMEM, "out of memory assigning %zu units to %d ranks", n, nbins);
        goto out;
    }
    for (size_t i = 0; i < n; i++)
        loff[items[i].layer + 1]++;
    for (int32_t l = 0; l <= maxlayer; l++)
        loff[l + 1] += loff[l];
    iheap ht = {mem, mem + nbins, load, nbins, minb, bytes};
    iheap hb = {mem + 2 * (size_t)nbins, mem + 3 * (size_t)nbins, bytes, nbins, NULL, NULL};
    side sd = {mem + 4 * (size_t)nbins, 0};
    for (int32_t b = 0; b < nbins; b++) {
        ht.heap[b] = hb.heap[b] = b;
        ht.pos[b] = hb.pos[b] = b;
    }
    for (size_t i = 0; i < n; i++)
        order[i] = i;
    qsort_r(order, n, sizeof *order, cmp_items, (void *)items);

    for (size_t k = 0; k < n; k++) {
        size_t i = order[k];
        const dmuon_assign_item *it = &items[i];
        int32_t L = it->layer;
        int32_t *used = lbins + loff[L];
        int32_t nused = spread ? inround[L] : 0;
        double limit = cap < 0 ? INFINITY : cap - (double)it->bytes;
        int32_t pick = -1, budget = 64 + 2 * nused;
        bool none_fits = false;
        for (int32_t j = 0; j < nused; j++) {
            mark[used[j]] = 1;
            saved[j] = bytes[used[j]];
        }
        /* fewest bytes among candidates: decides whether anything fits */
        int32_t fewest = -1;
        sd.n = 0;
        side_push(&sd, &hb, 0);
        while (sd.n > 0 && budget > 0) {
            int32_t p = side_pop(&sd, &hb), b = hb.heap[p];
            budget--;
            if (!mark[b]) {
                fewest = b;
                break;
            }
            if (2 * p + 1 < nbins)
                side_push(&sd, &hb, 2 * p + 1);
            if (2 * p + 2 < nbins)
                side_push(&sd, &hb, 2 * p + 2);
        }
        if (fewest >= 0 && bytes[fewest] > limit) {
            pick = fewest;   /* nothing fits: fewest bytes */
            none_fits = true;
        } else if (fewest >= 0) {
            sd.n = 0;
            if (minb[0] <= limit)
                side_push(&sd, &ht, 0);
            while (sd.n > 0 && budget > 0) {
                int32_t p = side_pop(&sd, &ht), b = ht.heap[p];
                budget--;
                if (!mark[b] && bytes[b] <= limit) {
                    pick = b;
                    break;
                }
                if (2 * p + 1 < nbins && minb[2 * p + 1] <= limit)
                    side_push(&sd, &ht, 2 * p + 1);
                if (2 * p + 2 < nbins && minb[2 * p + 2] <= limit)
                    side_push(&sd, &ht, 2 * p + 2);
            }
        }
        if (pick < 0 && fewest >= 0) {
            /* the load walk ran out of budget, and some bin fits: scan for
             * the least loaded bin that fits, excluded bins hidden by an
             * infinite byte count while scanning */
            for (int32_t j = 0; j < nused; j++)
                bytes[used[j]] = INFINITY;
            double bl = INFINITY;
            for (int32_t b = 0; b < nbins; b++)
                if (bytes[b] <= limit && load[b] < bl) {
                    bl = load[b];
                    pick = b;
                }
            for (int32_t j = 0; j < nused; j++)
                bytes[used[j]] = saved[j];
        }
        if (pick < 0)   /* the walks ran out of budget: the whole rule, by scanning */
            pick = scan(nbins, load, bytes, mark, limit, &none_fits);
        for (int32_t j = 0; j < nused; j++)
            mark[used[j]] = 0;
        if (pick < 0) {   /* cannot happen: a round always leaves a bin free */
            rc = DMUON_FAIL(DMUON_ECHECK, "internal error: no rank for unit '%s'", it->name);
            goto out;
        }
        fallback[i] = none_fits && cap >= 0;
        bin[i] = pick;
        load[pick] += it->cost;
        bytes[pick] += (double)it->bytes;
        sift_down(&ht, ht.pos[pick]);
        fix_minb(&ht, ht.pos[pick]);
        sift_down(&hb, hb.pos[pick]);
        if (spread) {
            used[inround[L]++] = pick;
            if (inround[L] == nbins)
                inround[L] = 0;   /* every bin used once: a new round */
        }
    }
out:
    free(order);
    free(load);
    free(bytes);
    free(mem);
    free(minb);
    free(mark);
    free(loff);
    free(inround);
    free(lbins);
    free(saved);
    return rc;
}
/* ------------------------------------------------------------- owners -- */

static dmuon_rc run(const dmuon_plan *p, const size_t *ids, size_t n, int32_t nbins,
                    double total_bytes, int32_t *bin, bool *fb)
{
    const dmuon_plan_opts *o = &p->opts;
    dmuon_rc rc = DMUON_OK;
    dmuon_assign_item *it = malloc((n ? n : 1) * sizeof *it);
    if (!it)
        return DMUON_FAIL(DMUON_ENOMEM, "out of memory");
    for (size_t k = 0; k < n; k++) {
        const dmuon_plan_unit *u = &p->units[ids[k]];
        it[k] = (dmuon_assign_item){u->ns_ms, u->bytes, u->elements, u->layer, u->name};
    }
    double cap = o->byte_cap ? (1.0 + o->epsilon) * total_bytes / nbins : -1;
    rc = dmuon_assign_lpt(it, n, nbins, cap, o->layer_spread, bin, fb);
    free(it);
    return rc;
}

dmuon_rc dmuon_plan_assign_owners(dmuon_plan *p)
{
    const dmuon_plan_opts *o = &p->opts;
    size_t n = p->nunits;
    int32_t K = o->gpus_per_node, R = o->nodes, N = p->ranks;
    dmuon_rc rc = DMUON_OK;
    size_t *ids = malloc((n ? n : 1) * sizeof *ids);
    int32_t *bin = malloc((n ? n : 1) * sizeof *bin);
    int32_t *bin2 = malloc((n ? n : 1) * sizeof *bin2);
    bool *fb2 = malloc((n ? n : 1) * sizeof *fb2);
    if (!ids || !bin || !bin2 || !fb2) {
        rc = DMUON_FAIL(DMUON_ENOMEM, "out of memory");
        goto out;
    }
    double total = 0;
    for (size_t i = 0; i < n; i++) {
        ids[i] = i;
        total += (double)p->units[i].bytes;
        p->fallback[i] = false;
    }
    if (o->strategy == DMUON_STRATEGY_ROUND_ROBIN) {
        /* the no-balancing baseline: units in forward order, rank i mod N */
        for (size_t i = 0; i < n; i++)
            bin[i] = (int32_t)(i % (size_t)N);
    } else if (o->sharding == DMUON_SHARD_HSDP && o->column_balance && K > 1) {
        /* columns first (one rail each), then the R ranks of each column */
        DMUON_TRY_GOTO(rc, run(p, ids, n, K, total, bin2, p->fallback), out);
        for (int32_t s = 0; s < K; s++) {
            size_t m = 0;
            double col = 0;
            for (size_t i = 0; i < n; i++)
                if (bin2[i] == s) {
                    ids[m++] = i;
                    col += (double)p->units[i].bytes;
                }
            int32_t *rb = bin + 0;   /* scratch for this column, indexed by k */
            bool *fb = fb2;
            DMUON_TRY_GOTO(rc, run(p, ids, m, R, col, rb, fb), out);
            /* rb[k] is the node of ids[k]; move to the unit (ids ascending) */
            for (size_t k = m; k-- > 0;) {
                size_t i = ids[k];
                int32_t node = rb[k];
                p->units[i].owner = node * K + s;
                p->fallback[i] = p->fallback[i] || fb[k];
            }
        }
        goto fill;
    } else {
        DMUON_TRY_GOTO(rc, run(p, ids, n, N, total, bin, p->fallback), out);
    }
    for (size_t i = 0; i < n; i++)
        p->units[i].owner = bin[i];
fill:
    for (size_t i = 0; i < n; i++) {
        p->units[i].node = p->units[i].owner / K;
        p->units[i].column = p->units[i].owner % K;
    }
out:
    free(ids);
    free(bin);
    free(bin2);
    free(fb2);
    return rc;
}
