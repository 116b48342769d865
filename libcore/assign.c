/*
 * assign.c — the owner assignment: the greedy LPT with byte cap and layer
 * spreading (paper §3.3 and Appendix B) over all ranks, then a local search
 * of moves and swaps that lowers the busiest rank and, for HSDP with column
 * balancing (paper §4.3), the heaviest rail (see "local search" below).
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
/* -------------------------------------------------------- local search -- */

/*
 * After LPT, a deterministic local search (paper Appendix B asks for the
 * busiest rank's NS time; LPT only approximates it).  State: per rank its
 * load (cost), bytes and a list of its items; per column its rail bytes;
 * per (rank, layer) the number of the layer's items on the rank (an open
 * addressing table with backward-shift deletion, at most one entry per item).
 *
 * Constraints every step keeps (the plan checks of plan_check.c):
 *   - byte cap: a rank that receives bytes ends at most at the cap, or at
 *     most at its bytes before the step (a swap that lowers them);
 *   - layer spreading: a rank holds at most hi[L] items of layer L
 *     (1 while the layer has no more items than ranks, else the ceiling
 *     of items / ranks);
 *   - items placed as fallbacks over the cap never move (the checker finds
 *     them on the ranks over the cap);
 *   - column mode: no rail rises above the phase's limit.
 *
 * NS phase: while the busiest rank's load can be lowered by a move of one
 * of its items to another rank or (when no move can) a swap with an item
 * of one of the least loaded ranks, do the step that lowers
 * max(busiest, other) most.  Where the receiving rank would pass the byte
 * cap, the step is allowed when that rank first hands one of its items to
 * a third rank that stays under the busiest load.  Rail phase (column mode,
 * after the NS phase): while the heaviest rail can be lowered by a move or
 * swap that raises no rank's load above the busiest rank's, do the one
 * that lowers it most; then the NS phase once more, no rail rising above
 * the heaviest.  Ties go to the first step found in a fixed scan order,
 * loads must fall by more than 1e-9 relative, and the work (candidate steps
 * evaluated) is bounded by LS_BUDGET, so the search is deterministic and
 * finishes in bounded time.
 */

#define LS_BUDGET 40000000.0   /* candidate steps evaluated, all phases */
#define LS_SWAP_RANKS 16       /* least loaded ranks tried as swap partners ... */
#define LS_SMALL 4096          /* ... above this many items (else every rank) */

typedef struct {
    uint64_t *key;   /* (rank << 32 | layer) + 1; 0: empty */
    int32_t *cnt;
    size_t mask;
} lcount;

static size_t lc_home(const lcount *t, uint64_t k)
{
    return (size_t)((k * 0x9E3779B97F4A7C15ull) >> 20) & t->mask;
}

static size_t lc_slot(const lcount *t, uint64_t k)
{
    size_t i = lc_home(t, k);
    while (t->key[i] && t->key[i] != k)
        i = (i + 1) & t->mask;
    return i;
}

static uint64_t lc_key(int32_t rank, int32_t layer)
{
    return (((uint64_t)(uint32_t)rank << 32) | (uint32_t)layer) + 1;
}

static int32_t lc_get(const lcount *t, int32_t rank, int32_t layer)
{
    size_t i = lc_slot(t, lc_key(rank, layer));
    return t->key[i] ? t->cnt[i] : 0;
}

static void lc_add(lcount *t, int32_t rank, int32_t layer, int32_t d)
{
    uint64_t k = lc_key(rank, layer);
    size_t i = lc_slot(t, k);
    if (!t->key[i]) {
        t->key[i] = k;
        t->cnt[i] = 0;
    }
    t->cnt[i] += d;
    if (t->cnt[i] > 0)
        return;
    /* delete: backward shift of the entries after i that may move into it */
    size_t j = i;
    t->key[i] = 0;
    for (;;) {
        j = (j + 1) & t->mask;
        if (!t->key[j])
            break;
        size_t home = lc_home(t, t->key[j]);
        /* can j's entry move to i?  yes when i lies cyclically in [home, j) */
        bool move = i <= j ? (home <= i || home > j) : (home <= i && home > j);
        if (move) {
            t->key[i] = t->key[j];
            t->cnt[i] = t->cnt[j];
            t->key[j] = 0;
            i = j;
        }
    }
}

typedef struct {
    const dmuon_assign_item *it;
    size_t n;
    int32_t N, K;
    bool columns, spread;
    double cap;
    int32_t *bin;
    const bool *fixed;
    double *load, *bytes, *rail;
    int32_t *head, *next, *prev;   /* per rank: doubly linked list of items */
    int32_t *hi;                   /* per layer: spreading limit */
    lcount lc;
    int32_t *order, *pos;          /* ranks by (load, rank) ascending; pos[rank] */
    int32_t swap_ranks;            /* least loaded ranks tried as swap partners */
    double work;
} lsearch;

static void ls_unlink(lsearch *s, int32_t i)
{
    int32_t b = s->bin[i];
    if (s->prev[i] >= 0)
        s->next[s->prev[i]] = s->next[i];
    else
        s->head[b] = s->next[i];
    if (s->next[i] >= 0)
        s->prev[s->next[i]] = s->prev[i];
}

static void ls_link(lsearch *s, int32_t i, int32_t b)
{
    s->bin[i] = b;
    s->prev[i] = -1;
    s->next[i] = s->head[b];
    if (s->head[b] >= 0)
        s->prev[s->head[b]] = i;
    s->head[b] = i;
}

static bool ls_before(const lsearch *s, int32_t a, int32_t b)
{
    return s->load[a] < s->load[b] || (s->load[a] == s->load[b] && a < b);
}

/* Moves rank r to its place in order (ascending (load, rank)) after its
 * load changed; the rest of order stays sorted. */
static void ls_place(lsearch *s, int32_t r)
{
    int32_t i = s->pos[r], i0 = i;
    while (i > 0 && ls_before(s, r, s->order[i - 1])) {
        s->order[i] = s->order[i - 1];
        s->pos[s->order[i]] = i;
        i--;
    }
    while (i + 1 < s->N && ls_before(s, s->order[i + 1], r)) {
        s->order[i] = s->order[i + 1];
        s->pos[s->order[i]] = i;
        i++;
    }
    s->order[i] = r;
    s->pos[r] = i;
    s->work += (double)(i > i0 ? i - i0 : i0 - i) / 16;
}

static void ls_move(lsearch *s, int32_t i, int32_t to)
{
    const dmuon_assign_item *u = &s->it[i];
    int32_t from = s->bin[i];
    ls_unlink(s, i);
    /* one load change at a time, each placed, keeps order sorted */
    s->load[from] -= u->cost;
    ls_place(s, from);
    s->load[to] += u->cost;
    ls_place(s, to);
    s->bytes[from] -= (double)u->bytes;
    s->bytes[to] += (double)u->bytes;
    if (s->columns) {
        s->rail[from % s->K] -= (double)u->bytes;
        s->rail[to % s->K] += (double)u->bytes;
    }
    if (s->spread) {
        lc_add(&s->lc, from, u->layer, -1);
        lc_add(&s->lc, to, u->layer, 1);
    }
    ls_link(s, i, to);
}

/* Does rank t keep layer spreading when it takes item add in exchange for
 * item rem (-1: none)? */
static bool ls_spread_ok(const lsearch *s, int32_t t, int32_t add, int32_t rem)
{
    const dmuon_assign_item *a = &s->it[add];
    return !s->spread || (rem >= 0 && s->it[rem].layer == a->layer) ||
           lc_get(&s->lc, t, a->layer) + 1 <= s->hi[a->layer];
}

/* Rank t's bytes after taking item add for item rem (-1: none). */
static double ls_new_bytes(const lsearch *s, int32_t t, int32_t add, int32_t rem)
{
    return s->bytes[t] + (double)s->it[add].bytes - (rem >= 0 ? (double)s->it[rem].bytes : 0);
}

static bool ls_cap_ok(const lsearch *s, int32_t t, double nb)
{
    return s->cap < 0 || nb <= s->cap || nb <= s->bytes[t];
}

/* Can rank t take item add in exchange for item rem (-1: none), for the
 * byte cap and layer spreading? */
static bool ls_fits(const lsearch *s, int32_t t, int32_t add, int32_t rem)
{
    return ls_cap_ok(s, t, ls_new_bytes(s, t, add, rem)) && ls_spread_ok(s, t, add, rem);
}

/* Rail change of moving bytes d from column of rank a to column of rank b
 * keeps both at or under lim (no change within a column). */
static bool ls_rail_ok(const lsearch *s, int32_t a, int32_t b, double d, double lim)
{
    if (!s->columns || a % s->K == b % s->K)
        return true;
    return s->rail[b % s->K] + d <= lim && s->rail[a % s->K] - d <= lim;
}

/* Room for a step that leaves rank t with nb bytes, over the cap: an item x
 * of t (not keep, not fixed) that another rank s takes within the cap,
 * spreading and rail_limit (checked on the rails before the step, which
 * only lowers the rails the hand-over raises) with load[s] + cost(x) < lim,
 * such that t ends within the cap.  The least costly such x and, for it, the
 * least loaded s.  Returns x (*to = s), or -1. */
static int32_t ls_shed(lsearch *s, int32_t t, double nb, int32_t keep, double lim,
                       double rail_limit, int32_t *to)
{
    int32_t bx = -1, bs = -1;
    double bc = INFINITY;
    for (int32_t x = s->head[t]; x >= 0; x = s->next[x]) {
        const dmuon_assign_item *u = &s->it[x];
        if (x == keep || s->fixed[x] || u->cost >= bc || nb - (double)u->bytes > s->cap)
            continue;
        for (int32_t k = 0; k < s->N; k++) {
            int32_t r = s->order[k];
            s->work += 1;
            if (s->load[r] + u->cost >= lim)
                break;
            if (r == t || !ls_rail_ok(s, t, r, (double)u->bytes, rail_limit) ||
                !ls_fits(s, r, x, -1))
                continue;
            bx = x;
            bs = r;
            bc = u->cost;
            break;
        }
    }
    *to = bs;
    return bx;
}

static int cmp_rank_load(const void *x, const void *y, void *ctx)
{
    const double *load = ctx;
    int32_t a = *(const int32_t *)x, b = *(const int32_t *)y;
    if (load[a] != load[b])
        return load[a] < load[b] ? -1 : 1;
    return (a > b) - (a < b);
}

static int32_t ls_busiest(const lsearch *s)
{
    return s->order[s->N - 1];
}

/* Heaviest rail's bytes (column mode), else infinity. */
static double ls_rail_limit(const lsearch *s)
{
    double m = s->columns ? 0 : INFINITY;
    for (int32_t c = 0; s->columns && c < s->K; c++)
        if (s->rail[c] > m)
            m = s->rail[c];
    return m;
}

/* NS phase; returns the steps taken. */
static size_t ls_ns(lsearch *s, double rail_limit, size_t max_steps)
{
    size_t steps = 0;
    int32_t N = s->N;
    while (steps < max_steps && s->work < LS_BUDGET) {
        int32_t B = ls_busiest(s);
        double LB = s->load[B], best = LB - 1e-9 * LB;
        int32_t bu = -1, bv = -1, bt = -1, bx = -1, bxs = -1;
        /* moves: each of B's items to the least loaded rank that takes it */
        for (int32_t u = s->head[B]; u >= 0; u = s->next[u]) {
            if (s->fixed[u])
                continue;
            double c = s->it[u].cost;
            for (int32_t k = 0; k < N; k++) {
                int32_t t = s->order[k];
                s->work += 1;
                double v = s->load[t] + c;
                if (v < LB - c)
                    v = LB - c;
                if (v >= best)
                    break;   /* later ranks are loaded at least as much */
                if (t == B || !ls_spread_ok(s, t, u, -1) ||
                    !ls_rail_ok(s, B, t, (double)s->it[u].bytes, rail_limit))
                    continue;
                double nb = ls_new_bytes(s, t, u, -1);
                int32_t x = -1, xs = -1;
                if (!ls_cap_ok(s, t, nb) && (x = ls_shed(s, t, nb, u, best, rail_limit, &xs)) < 0)
                    continue;
                best = v;
                bu = u;
                bt = t;
                bx = x;
                bxs = xs;
                break;
            }
        }
        /* swaps with the items of the least loaded ranks, when no move
         * helps (moves are cheap to find, swaps cost |B| x |t| each) */
        for (int32_t k = 0; bu < 0 && k < N && k < s->swap_ranks; k++) {
            int32_t t = s->order[k];
            if (t == B || s->load[t] >= best)
                break;
            for (int32_t u = s->head[B]; u >= 0; u = s->next[u]) {
                if (s->fixed[u])
                    continue;
                for (int32_t w = s->head[t]; w >= 0; w = s->next[w]) {
                    s->work += 1;
                    double d = s->it[u].cost - s->it[w].cost;
                    if (d <= 0 || s->fixed[w])
                        continue;
                    double v = LB - d > s->load[t] + d ? LB - d : s->load[t] + d;
                    if (v >= best || !ls_spread_ok(s, t, u, w) || !ls_fits(s, B, w, u) ||
                        !ls_rail_ok(s, B, t, (double)(s->it[u].bytes - s->it[w].bytes),
                                    rail_limit))
                        continue;
                    double nb = ls_new_bytes(s, t, u, w);
                    int32_t x = -1, xs = -1;
                    if (!ls_cap_ok(s, t, nb) && (x = ls_shed(s, t, nb, w, best, rail_limit, &xs)) < 0)
                        continue;
                    best = v;
                    bu = u;
                    bv = w;
                    bt = t;
                    bx = x;
                    bxs = xs;
                }
            }
        }
        if (bu < 0)
            break;
        if (bx >= 0)
            ls_move(s, bx, bxs);   /* room on bt first */
        ls_move(s, bu, bt);
        if (bv >= 0)
            ls_move(s, bv, B);
        steps++;
    }
    return steps;
}

/* Rail phase (column mode); returns the steps taken. */
static size_t ls_rails(lsearch *s, size_t max_steps)
{
    size_t steps = 0;
    int32_t N = s->N, K = s->K;
    while (steps < max_steps && s->work < LS_BUDGET) {
        double busy = s->load[ls_busiest(s)];
        int32_t C = 0, L = 0;
        for (int32_t c = 1; c < K; c++) {
            if (s->rail[c] > s->rail[C])
                C = c;
            if (s->rail[c] < s->rail[L])
                L = c;
        }
        double RC = s->rail[C], best = RC - 0.5;
        int32_t bu = -1, bv = -1, bt = -1;
        if (C == L)
            break;
        for (int32_t a = C; a < N; a += K) {
            for (int32_t u = s->head[a]; u >= 0; u = s->next[u]) {
                if (s->fixed[u])
                    continue;
                double bu_b = (double)s->it[u].bytes;
                /* moves to any rank of another column */
                for (int32_t t = 0; t < N; t++) {
                    s->work += 1;
                    if (t % K == C)
                        continue;
                    double v = s->rail[t % K] + bu_b;
                    if (v < RC - bu_b)
                        v = RC - bu_b;
                    if (v >= best || s->load[t] + s->it[u].cost > busy || !ls_fits(s, t, u, -1))
                        continue;
                    best = v;
                    bu = u;
                    bv = -1;
                    bt = t;
                }
                /* swaps with items of the lightest column */
                for (int32_t t = L; t < N; t += K)
                    for (int32_t w = s->head[t]; w >= 0; w = s->next[w]) {
                        s->work += 1;
                        double d = bu_b - (double)s->it[w].bytes;
                        if (d <= 0 || s->fixed[w])
                            continue;
                        double v = RC - d > s->rail[L] + d ? RC - d : s->rail[L] + d;
                        double dc = s->it[u].cost - s->it[w].cost;
                        if (v >= best || s->load[t] + dc > busy || s->load[a] - dc > busy ||
                            !ls_fits(s, t, u, w) || !ls_fits(s, a, w, u))
                            continue;
                        best = v;
                        bu = u;
                        bv = w;
                        bt = t;
                    }
            }
        }
        if (bu < 0)
            break;
        int32_t from = s->bin[bu];
        ls_move(s, bu, bt);
        if (bv >= 0)
            ls_move(s, bv, from);
        steps++;
    }
    return steps;
}

dmuon_rc dmuon_assign_improve(const dmuon_assign_item *items, size_t n, int32_t nbins,
                              int32_t columns, double cap, bool spread, const bool *fixed,
                              int32_t *bin)
{
    dmuon_rc rc = DMUON_OK;
    if (n < 2 || nbins < 2)
        return DMUON_OK;
    if (n > INT32_MAX / 2)
        return DMUON_FAIL(DMUON_EINVAL, "%zu units: more than the local search handles", n);
    int32_t maxlayer = 0;
    for (size_t i = 0; i < n; i++)
        if (items[i].layer > maxlayer)
            maxlayer = items[i].layer;
    lsearch s = {.it = items, .n = n, .N = nbins, .K = columns > 1 ? columns : 1,
                 .columns = columns > 1, .spread = spread, .cap = cap, .bin = bin,
                 .fixed = fixed};
    size_t tsize = 16;
    while (tsize < 2 * n)
        tsize *= 2;
    s.load = calloc((size_t)nbins, sizeof *s.load);
    s.bytes = calloc((size_t)nbins, sizeof *s.bytes);
    s.rail = calloc((size_t)s.K, sizeof *s.rail);
    s.head = malloc((size_t)nbins * sizeof *s.head);
    s.order = malloc((size_t)nbins * sizeof *s.order);
    s.pos = malloc((size_t)nbins * sizeof *s.pos);
    s.next = malloc(n * sizeof *s.next);
    s.prev = malloc(n * sizeof *s.prev);
    s.hi = calloc((size_t)maxlayer + 1, sizeof *s.hi);
    s.lc.key = spread ? calloc(tsize, sizeof *s.lc.key) : NULL;
    s.lc.cnt = spread ? malloc(tsize * sizeof *s.lc.cnt) : NULL;
    s.lc.mask = tsize - 1;
    if (!s.load || !s.bytes || !s.rail || !s.head || !s.order || !s.pos || !s.next || !s.prev || !s.hi ||
        (spread && (!s.lc.key || !s.lc.cnt))) {
        rc = DMUON_FAIL(DMUON_ENOMEM, "out of memory improving the assignment of %zu units", n);
        goto out;
    }
    for (int32_t b = 0; b < nbins; b++)
        s.head[b] = -1;
    for (size_t i = n; i-- > 0;) {   /* lists in item order */
        const dmuon_assign_item *u = &items[i];
        s.load[bin[i]] += u->cost;
        s.bytes[bin[i]] += (double)u->bytes;
        s.rail[bin[i] % s.K] += (double)u->bytes;
        s.hi[u->layer]++;
        if (spread)
            lc_add(&s.lc, bin[i], u->layer, 1);
        ls_link(&s, (int32_t)i, bin[i]);
    }
    for (int32_t l = 0; l <= maxlayer; l++)
        s.hi[l] = s.hi[l] <= nbins ? 1 : (s.hi[l] + nbins - 1) / nbins;
    for (int32_t r = 0; r < nbins; r++)
        s.order[r] = r;
    qsort_r(s.order, (size_t)nbins, sizeof *s.order, cmp_rank_load, s.load);
    for (int32_t k = 0; k < nbins; k++)
        s.pos[s.order[k]] = k;
    size_t max_steps = 4 * n + 64;
    s.swap_ranks = n > LS_SMALL ? LS_SWAP_RANKS : nbins;
    ls_ns(&s, INFINITY, max_steps);
    if (s.columns) {
        ls_rails(&s, max_steps);
        ls_ns(&s, ls_rail_limit(&s), max_steps);
    }
out:
    free(s.load);
    free(s.bytes);
    free(s.rail);
    free(s.head);
    free(s.order);
    free(s.pos);
    free(s.next);
    free(s.prev);
    free(s.hi);
    free(s.lc.key);
    free(s.lc.cnt);
    return rc;
}

/* ------------------------------------------------------- extra starts -- */

/*
 * The local search only walks from its start, so the LPT start alone can
 * stay well off a plan that keeps every constraint (single moves and pair
 * swaps under layer spreading miss plans that need longer exchange chains;
 * e.g. Qwen2.5-32B at 8 x 8 stays at 1.125 x the mean while the cyclic start
 * below reaches 1.000).  So two more starts, each kept only when it already
 * meets layer spreading and the byte cap (the cap only where LPT met it: else
 * the largest unit of each rank over the cap counts as placed over it), are
 * improved by the same search:
 *   - cyclic: item t of layer L (t counted in item order) on rank (L + t) mod N;
 *   - round-robin: item i on rank i mod N (the baseline of the ablations).
 * The plan kept is the best by (busiest load, bytes over the cap, heaviest
 * column), the LPT start winning ties: deterministic.  Above LS_MULTI_MAX
 * items only the LPT start runs (the search dominates the time there).
 */

#define LS_MULTI_MAX 65536

/* Does start bin meet the byte cap (cap < 0: none) and layer spreading
 * (a rank holds at most 1 item of a layer with no more items than ranks,
 * else the ceiling of items / ranks)? */
static bool start_ok(const dmuon_assign_item *it, size_t n, int32_t N, bool spread,
                     const int32_t *bin, const size_t *loff, const size_t *byl, double cap,
                     int32_t maxlayer, int32_t *cnt, double *bytes)
{
    bool ok = true;
    for (int32_t r = 0; r < N; r++)
        bytes[r] = 0;
    for (size_t i = 0; i < n; i++)
        bytes[bin[i]] += (double)it[i].bytes;
    for (int32_t r = 0; cap >= 0 && r < N; r++)
        if (bytes[r] > cap)
            return false;
    for (int32_t l = 0; spread && ok && l <= maxlayer; l++) {
        size_t nl = loff[l + 1] - loff[l];
        int32_t hi = nl <= (size_t)N ? 1 : (int32_t)((nl + (size_t)N - 1) / (size_t)N);
        for (size_t k = loff[l]; k < loff[l + 1]; k++)
            if (++cnt[bin[byl[k]]] > hi)
                ok = false;
        for (size_t k = loff[l]; k < loff[l + 1]; k++)
            cnt[bin[byl[k]]] = 0;
    }
    return ok;
}

/* (busiest load, bytes over the cap, heaviest column) of bin. */
static void start_score(const dmuon_assign_item *it, size_t n, int32_t N, int32_t K, double cap,
                        const int32_t *bin, double *load, double *bytes, double *rail,
                        double score[3])
{
    for (int32_t r = 0; r < N; r++)
        load[r] = bytes[r] = 0;
    for (int32_t c = 0; c < K; c++)
        rail[c] = 0;
    for (size_t i = 0; i < n; i++) {
        load[bin[i]] += it[i].cost;
        bytes[bin[i]] += (double)it[i].bytes;
        rail[bin[i] % K] += (double)it[i].bytes;
    }
    score[0] = score[1] = score[2] = 0;
    for (int32_t r = 0; r < N; r++) {
        score[0] = fmax(score[0], load[r]);
        if (cap >= 0)
            score[1] = fmax(score[1], bytes[r] - cap);
    }
    for (int32_t c = 0; c < K; c++)
        score[2] = fmax(score[2], rail[c]);
}

static bool score_better(const double a[3], const double b[3])
{
    double tol = 1e-9 * fmax(fabs(a[0]), fabs(b[0]));
    if (fabs(a[0] - b[0]) > tol)
        return a[0] < b[0];
    if (a[1] != b[1])
        return a[1] < b[1];
    return a[2] < b[2] * (1 - 1e-12);
}

/* LPT, the local search, and the extra starts above; bin and fallback as
 * for dmuon_assign_lpt. */
static dmuon_rc assign_best(const dmuon_assign_item *it, size_t n, int32_t N, int32_t K,
                            bool columns, double cap, bool spread, int32_t *bin, bool *fallback)
{
    dmuon_rc rc = DMUON_OK;
    DMUON_TRY(dmuon_assign_lpt(it, n, N, cap, spread, bin, fallback));
    DMUON_TRY(dmuon_assign_improve(it, n, N, columns ? K : 1, cap, spread, fallback, bin));
    if (n > LS_MULTI_MAX || n < 2 || N < 2)
        return DMUON_OK;
    int32_t maxlayer = 0;
    for (size_t i = 0; i < n; i++)
        if (it[i].layer > maxlayer)
            maxlayer = it[i].layer;
    int32_t *alt = malloc(n * sizeof *alt);
    bool *nofix = calloc(n, sizeof *nofix);
    size_t *loff = calloc((size_t)maxlayer + 2, sizeof *loff);
    size_t *byl = malloc(n * sizeof *byl);
    int32_t *cnt = calloc((size_t)N, sizeof *cnt);
    double *load = malloc((size_t)N * sizeof *load);
    double *bytes = malloc((size_t)N * sizeof *bytes);
    double *rail = malloc((size_t)K * sizeof *rail);
    if (!alt || !nofix || !loff || !byl || !cnt || !load || !bytes || !rail) {
        rc = DMUON_FAIL(DMUON_ENOMEM, "out of memory assigning %zu units to %d ranks", n, N);
        goto out;
    }
    /* items grouped by layer, in item order (byl[loff[L] ..]) */
    for (size_t i = 0; i < n; i++)
        loff[it[i].layer + 1]++;
    for (int32_t l = 0; l <= maxlayer; l++)
        loff[l + 1] += loff[l];
    for (size_t i = 0; i < n; i++)
        byl[loff[it[i].layer]++] = i;
    for (int32_t l = maxlayer; l >= 0; l--)   /* loff back to the starts */
        loff[l + 1] = loff[l];
    loff[0] = 0;
    bool over = false;   /* did LPT place units over the cap? */
    for (size_t i = 0; i < n; i++)
        over |= fallback[i];
    double best[3];
    start_score(it, n, N, K, cap, bin, load, bytes, rail, best);
    for (int start = 0; start < 2; start++) {
        if (start == 0) {
            for (int32_t l = 0; l <= maxlayer; l++)
                for (size_t k = loff[l]; k < loff[l + 1]; k++)
                    alt[byl[k]] = (int32_t)(((size_t)l + (k - loff[l])) % (size_t)N);
        } else {
            for (size_t i = 0; i < n; i++)
                alt[i] = (int32_t)(i % (size_t)N);
        }
        if (!start_ok(it, n, N, spread, alt, loff, byl, over ? -1 : cap, maxlayer, cnt, bytes))
            continue;
        /* a start over the cap (only where LPT placed units over it too):
         * on each rank over the cap its largest unit counts as placed over
         * it, and stays there */
        memset(nofix, 0, n * sizeof *nofix);
        for (int32_t r = 0; over && r < N; r++)
            cnt[r] = -1;
        for (size_t i = 0; over && i < n; i++) {
            int32_t r = alt[i];
            if (bytes[r] > cap && (cnt[r] < 0 || it[i].bytes > it[cnt[r]].bytes))
                cnt[r] = (int32_t)i;
        }
        for (int32_t r = 0; over && r < N; r++) {
            if (cnt[r] >= 0)
                nofix[cnt[r]] = true;
            cnt[r] = 0;
        }
        DMUON_TRY_GOTO(rc, dmuon_assign_improve(it, n, N, columns ? K : 1, cap, spread, nofix, alt),
                       out);
        double sc[3];
        start_score(it, n, N, K, cap, alt, load, bytes, rail, sc);
        if (score_better(sc, best)) {
            memcpy(best, sc, sizeof best);
            memcpy(bin, alt, n * sizeof *bin);
            memcpy(fallback, nofix, n * sizeof *fallback);
        }
    }
out:
    free(alt);
    free(nofix);
    free(loff);
    free(byl);
    free(cnt);
    free(load);
    free(bytes);
    free(rail);
    return rc;
}

/* ------------------------------------------------------------- owners -- */

dmuon_rc dmuon_plan_assign_owners(dmuon_plan *p)
{
    const dmuon_plan_opts *o = &p->opts;
    size_t n = p->nunits;
    int32_t K = o->gpus_per_node, N = p->ranks;
    dmuon_rc rc = DMUON_OK;
    int32_t *bin = malloc((n ? n : 1) * sizeof *bin);
    dmuon_assign_item *it = malloc((n ? n : 1) * sizeof *it);
    if (!bin || !it) {
        rc = DMUON_FAIL(DMUON_ENOMEM, "out of memory");
        goto out;
    }
    double total = 0;
    for (size_t i = 0; i < n; i++) {
        const dmuon_plan_unit *u = &p->units[i];
        it[i] = (dmuon_assign_item){u->ns_ms, u->bytes, u->elements, u->layer, u->name};
        total += (double)u->bytes;
        p->fallback[i] = false;
    }
    if (o->strategy == DMUON_STRATEGY_ROUND_ROBIN) {
        /* the no-balancing baseline: units in forward order, rank i mod N */
        for (size_t i = 0; i < n; i++)
            bin[i] = (int32_t)(i % (size_t)N);
    } else {
        /* one LPT over all ranks and two more starts, each followed by the
         * local search; HSDP with column balancing adds the rail phase and
         * the rail limit */
        double cap = o->byte_cap ? (1.0 + o->epsilon) * total / N : -1;
        bool columns = o->sharding == DMUON_SHARD_HSDP && o->column_balance && K > 1;
        DMUON_TRY_GOTO(rc, assign_best(it, n, N, K, columns, cap, o->layer_spread, bin, p->fallback),
                       out);
    }
    for (size_t i = 0; i < n; i++) {
        p->units[i].owner = bin[i];
        p->units[i].node = bin[i] / K;
        p->units[i].column = bin[i] % K;
    }
out:
    free(bin);
    free(it);
    return rc;
}
