/*
 * plan.c — building an owner plan: assignment units from the inventory,
 * costs, owners (assign.c), owner windows, frozen segment tables and the
 * balance report.  The plan file lives in plan_io.c, the checks and the
 * printed report in plan_check.c.
 *
 * Invariants after dmuon_plan_build: units are in forward order (layer, then
 * position of their first member in the layer buffer); members of a unit are
 * in layer-buffer order; every Muon matrix is in exactly one member; the
 * segments of layer i tile [0, layer_bytes[i]) in order.
 */
#include "plan_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "dmuon/device.h"

static const char *const sharding_names[] = {"fsdp", "hsdp"};
static const char *const strategy_names[] = {"lpt", "round-robin"};

const char *dmuon_sharding_name(dmuon_sharding s) { return (unsigned)s < 2 ? sharding_names[s] : "invalid"; }
const char *dmuon_strategy_name(dmuon_strategy s) { return (unsigned)s < 2 ? strategy_names[s] : "invalid"; }

dmuon_rc dmuon_sharding_parse(const char *s, dmuon_sharding *out)
{
    for (int i = 0; i < 2; i++)
        if (s && !strcasecmp(s, sharding_names[i])) {
            *out = (dmuon_sharding)i;
            return DMUON_OK;
        }
    return DMUON_FAIL(DMUON_EINVAL, "sharding '%s': expected fsdp or hsdp", s ? s : "");
}

dmuon_rc dmuon_strategy_parse(const char *s, dmuon_strategy *out)
{
    for (int i = 0; i < 2; i++)
        if (s && !strcasecmp(s, strategy_names[i])) {
            *out = (dmuon_strategy)i;
            return DMUON_OK;
        }
    return DMUON_FAIL(DMUON_EINVAL, "strategy '%s': expected lpt or round-robin", s ? s : "");
}

void dmuon_plan_opts_init(dmuon_plan_opts *o)
{
    memset(o, 0, sizeof *o);
    o->nodes = 1;
    o->gpus_per_node = 8;
    o->sharding = DMUON_SHARD_FSDP;
    o->zero_stage = 3;
    o->strategy = DMUON_STRATEGY_LPT;
    o->cost = DMUON_COST_DB;
    o->epsilon = 0.1;
    o->byte_cap = true;
    o->layer_spread = true;
    o->column_balance = true;
    o->fuse_experts = false;
    o->small_unit_bytes = 16 << 20;
    o->param_dtype = DMUON_BF16;
}

/* ----------------------------------------------------------- lifecycle -- */

void dmuon_plan_free(dmuon_plan *p)
{
    if (!p)
        return;
    for (size_t i = 0; i < sizeof p->strs / sizeof p->strs[0]; i++)
        free(p->strs[i]);
    for (size_t i = 0; i < p->nparams; i++)
        free((char *)p->params[i].name);
    free(p->params);
    for (size_t i = 0; i < p->nlayers; i++)
        free(p->layer_names[i]);
    free(p->layer_names);
    free(p->layer_bytes);
    for (size_t i = 0; i < p->nunits; i++)
        free((char *)p->units[i].name);
    free(p->units);
    free(p->fallback);
    free(p->leaders);
    free(p->members);
    free(p->segs);
    free(p->layer_seg);
    free(p->window);
    free(p);
}

/* Copies the option strings into p so that p->opts outlives the caller's. */
static dmuon_rc own_strings(dmuon_plan *p)
{
    const char **f[] = {&p->opts.model_path, &p->opts.cost_src.db_path, &p->opts.cost_src.device,
                        &p->opts.cost_src.variant, &p->opts.cost_src.dtype};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
        if (!*f[i])
            continue;
        p->strs[i] = strdup(*f[i]);
        if (!p->strs[i])
            return DMUON_FAIL(DMUON_ENOMEM, "out of memory");
        *f[i] = p->strs[i];
    }
    return DMUON_OK;
}

/* --------------------------------------------------------------- units -- */

typedef struct {
    dmuon_plan *p;
    size_t cap_units, cap_members;
} builder;

static dmuon_rc add_unit(builder *b, const char *name, int32_t layer, size_t *out)
{
    dmuon_plan *p = b->p;
    if (p->nunits == b->cap_units) {
        size_t cap = b->cap_units ? 2 * b->cap_units : 256;
        dmuon_plan_unit *u = realloc(p->units, cap * sizeof *u);
        if (!u)
            return DMUON_FAIL(DMUON_ENOMEM, "out of memory for units");
        p->units = u;
        b->cap_units = cap;
    }
    dmuon_plan_unit *u = &p->units[p->nunits];
    memset(u, 0, sizeof *u);
    u->name = strdup(name);
    if (!u->name)
        return DMUON_FAIL(DMUON_ENOMEM, "out of memory for units");
    u->id = (int32_t)p->nunits;
    u->layer = layer;
    u->owner = -1;
    *out = p->nunits++;
    return DMUON_OK;
}

static dmuon_rc add_member(builder *b, int32_t param, int64_t first, int64_t count,
                           int64_t layer_offset)
{
    dmuon_plan *p = b->p;
    if (p->nmembers == b->cap_members) {
        size_t cap = b->cap_members ? 2 * b->cap_members : 256;
        dmuon_plan_member *m = realloc(p->members, cap * sizeof *m);
        if (!m)
            return DMUON_FAIL(DMUON_ENOMEM, "out of memory for units");
        p->members = m;
        b->cap_members = cap;
    }
    p->members[p->nmembers++] = (dmuon_plan_member){param, first, count, layer_offset};
    return DMUON_OK;
}

/* Name of the fused group of a per-expert tensor: the expert number after
 * "experts." replaced by "*". */
static void expert_group(const char *name, char *out, size_t cap)
{
    const char *e = strstr(name, "experts.");
    if (!e) {
        snprintf(out, cap, "%s", name);
        return;
    }
    const char *d = e + 8, *end = d;
    while (*end >= '0' && *end <= '9')
        end++;
    if (end == d) {
        snprintf(out, cap, "%s", name);
        return;
    }
    snprintf(out, cap, "%.*s*%s", (int)(d - name), name, end);
}

typedef struct {
    int32_t unit;      /* unit index */
    int32_t param;
    int64_t first, count, offset;
} pending;

static int cmp_pending(const void *x, const void *y)
{
    const pending *a = x, *b = y;
    if (a->unit != b->unit)
        return (a->unit > b->unit) - (a->unit < b->unit);
    return (a->offset > b->offset) - (a->offset < b->offset);
}

/* Builds units and members from the model; members are grouped by unit. */
static dmuon_rc make_units(dmuon_plan *p, const dmuon_model *m, const dmuon_cost_table *ct)
{
    dmuon_rc rc = DMUON_OK;
    builder b = {p, 0, 0};
    size_t dsz = dmuon_dtype_size(p->opts.param_dtype), np = dmuon_model_param_count(m);
    size_t npend = 0, cap_pend = 0;
    pending *pend = NULL;
    /* group name -> unit, for fused per-expert groups and small units;
     * looked up linearly within the current layer (few groups per layer) */
    typedef struct {
        char *name;
        size_t unit;
    } group;
    group *groups = NULL;
    size_t ngroups = 0, cap_groups = 0, layer_first_group = 0;
    size_t *by_layer = malloc((np ? np : 1) * sizeof *by_layer), *lstart = NULL;
    lstart = calloc(p->nlayers + 1, sizeof *lstart);
    if (!by_layer || !lstart) {
        rc = DMUON_FAIL(DMUON_ENOMEM, "out of memory");
        goto out;
    }
    /* parameters grouped by layer, forward order kept (counting sort) */
    for (size_t i = 0; i < np; i++)
        lstart[dmuon_model_param(m, i)->layer + 1]++;
    for (size_t l = 0; l < p->nlayers; l++)
        lstart[l + 1] += lstart[l];
    {
        size_t *fill = calloc(p->nlayers, sizeof *fill);
        if (!fill) {
            rc = DMUON_FAIL(DMUON_ENOMEM, "out of memory");
            goto out;
        }
        for (size_t i = 0; i < np; i++) {
            int32_t l = dmuon_model_param(m, i)->layer;
            by_layer[lstart[l] + fill[l]++] = i;
        }
        free(fill);
    }
    char name[1200];
    for (size_t l = 0; l < p->nlayers; l++) {
        int64_t off = 0;
        layer_first_group = ngroups;
        for (size_t k = lstart[l]; k < lstart[l + 1]; k++) {
            size_t pi = by_layer[k];
            const dmuon_param *q = dmuon_model_param(m, pi);
            if (q->role != DMUON_ROLE_MUON)
                continue;
            int64_t mat_el = q->mat_m * q->mat_n;
            int64_t mat_bytes = mat_el * (int64_t)dsz;
            const char *gname = NULL;
            if (q->expert && !p->opts.fuse_experts) {
                /* each expert matrix its own unit (paper C.5); in a strided
                 * layout (dmuon/model.h) an expert's gate and up share one
                 * unit: the contiguous block that holds both */
                int64_t step = q->layout != DMUON_MAT_CONTIGUOUS ? 2 : 1;
                for (int64_t j = 0; j < q->matrices; j += step) {
                    size_t u;
                    if (step == 2)
                        snprintf(name, sizeof name, "%s[%lld,%lld]", q->name, (long long)j,
                                 (long long)j + 1);
                    else if (q->matrices > 1 || q->ndim == 3)
                        snprintf(name, sizeof name, "%s[%lld]", q->name, (long long)j);
                    else
                        snprintf(name, sizeof name, "%s", q->name);
                    DMUON_TRY_GOTO(rc, add_unit(&b, name, (int32_t)l, &u), out);
                    if (npend == cap_pend) {
                        cap_pend = cap_pend ? 2 * cap_pend : 1024;
                        pending *np2 = realloc(pend, cap_pend * sizeof *np2);
                        if (!np2) {
                            rc = DMUON_FAIL(DMUON_ENOMEM, "out of memory");
                            goto out;
                        }
                        pend = np2;
                    }
                    pend[npend++] = (pending){(int32_t)u, (int32_t)pi, j, step,
                                              off + j * mat_bytes};
                }
                off += q->numel * (int64_t)dsz;
                continue;
            }
            if (q->expert && q->ndim == 2) {
                expert_group(q->name, name, sizeof name);
                gname = name;
            } else if (!q->expert && mat_bytes < p->opts.small_unit_bytes) {
                snprintf(name, sizeof name, "%s.(small)", p->layer_names[l]);
                gname = name;
            }
            size_t u = (size_t)-1;
            if (gname) {
                for (size_t g = layer_first_group; g < ngroups; g++)
                    if (!strcmp(groups[g].name, gname)) {
                        u = groups[g].unit;
                        break;
                    }
            }
            if (u == (size_t)-1) {
                DMUON_TRY_GOTO(rc, add_unit(&b, gname ? gname : q->name, (int32_t)l, &u), out);
                if (gname) {
                    if (ngroups == cap_groups) {
                        cap_groups = cap_groups ? 2 * cap_groups : 64;
                        group *g2 = realloc(groups, cap_groups * sizeof *g2);
                        if (!g2) {
                            rc = DMUON_FAIL(DMUON_ENOMEM, "out of memory");
                            goto out;
                        }
                        groups = g2;
                    }
                    groups[ngroups].name = strdup(gname);
                    if (!groups[ngroups].name) {
                        rc = DMUON_FAIL(DMUON_ENOMEM, "out of memory");
                        goto out;
                    }
                    groups[ngroups++].unit = u;
                }
            }
            if (npend == cap_pend) {
                cap_pend = cap_pend ? 2 * cap_pend : 1024;
                pending *np2 = realloc(pend, cap_pend * sizeof *np2);
                if (!np2) {
                    rc = DMUON_FAIL(DMUON_ENOMEM, "out of memory");
                    goto out;
                }
                pend = np2;
            }
            pend[npend++] = (pending){(int32_t)u, (int32_t)pi, 0, q->matrices, off};
            off += q->numel * (int64_t)dsz;
        }
        p->layer_bytes[l] = off;
    }
    /* members grouped by unit, in layer-buffer order; unit totals */
    qsort(pend, npend, sizeof *pend, cmp_pending);
    for (size_t k = 0; k < npend; k++) {
        dmuon_plan_unit *u = &p->units[pend[k].unit];
        const dmuon_param *q = dmuon_model_param(m, (size_t)pend[k].param);
        if (u->n_members == 0)
            u->first_member = p->nmembers;
        u->n_members++;
        DMUON_TRY_GOTO(rc, add_member(&b, pend[k].param, pend[k].first, pend[k].count,
                                      pend[k].offset), out);
        int64_t el = pend[k].count * q->mat_m * q->mat_n;
        u->elements += el;
        u->bytes += el * (int64_t)dsz;
        u->matrices += pend[k].count;
        double c = ct ? dmuon_cost_table_ms(ct, q->mat_m, q->mat_n)
                      : dmuon_cost_analytic(p->opts.cost, q->mat_m, q->mat_n);
        u->ns_ms += (double)pend[k].count * c;
    }
out:
    for (size_t g = 0; g < ngroups; g++)
        free(groups[g].name);
    free(groups);
    free(pend);
    free(by_layer);
    free(lstart);
    return rc;
}

/* ------------------------------------------------------------- layout -- */

static int cmp_window(const void *x, const void *y, void *ctx)
{
    const dmuon_plan *p = ctx;
    const dmuon_plan_unit *a = &p->units[*(const size_t *)x], *b = &p->units[*(const size_t *)y];
    if (a->owner != b->owner)
        return (a->owner > b->owner) - (a->owner < b->owner);
    return (a->id > b->id) - (a->id < b->id);   /* ids are in forward order */
}

static int cmp_member_offset(const void *x, const void *y, void *ctx)
{
    const dmuon_plan *p = ctx;
    const dmuon_plan_member *a = &p->members[*(const size_t *)x];
    const dmuon_plan_member *b = &p->members[*(const size_t *)y];
    return (a->layer_offset > b->layer_offset) - (a->layer_offset < b->layer_offset);
}

uint64_t dmuon_plan_units_digest(const dmuon_plan *p)
{
    uint64_t h = DMUON_DIGEST_SEED;
    for (size_t i = 0; i < p->nunits; i++) {
        const dmuon_plan_unit *u = &p->units[i];
        int64_t v[9] = {u->id, u->layer, u->owner, u->elements, u->bytes, u->matrices,
                        u->window_offset, (int64_t)u->first_member, (int64_t)u->n_members};
        h = dmuon_digest(u->name, strlen(u->name) + 1, h);
        h = dmuon_digest(v, sizeof v, h);
        h = dmuon_digest(&u->ns_ms, sizeof u->ns_ms, h);
    }
    for (size_t i = 0; i < p->nmembers; i++) {
        const dmuon_plan_member *mb = &p->members[i];
        int64_t v[4] = {mb->param, mb->first_matrix, mb->n_matrices, mb->layer_offset};
        h = dmuon_digest(v, sizeof v, h);
    }
    /* the matrix placement of the parameters, only where it is not the
     * plain one (digests of plans without such parameters stay as they were) */
    for (size_t i = 0; i < p->nparams; i++) {
        const dmuon_plan_param *q = &p->params[i];
        if (q->transposed || q->layout != DMUON_MAT_CONTIGUOUS) {
            int64_t w[3] = {(int64_t)i, q->transposed, q->layout};
            h = dmuon_digest(w, sizeof w, h);
        }
    }
    return h;
}

uint64_t dmuon_plan_segments_digest(const dmuon_plan *p)
{
    uint64_t h = DMUON_DIGEST_SEED;
    for (size_t l = 0; l < p->nlayers; l++) {
        int64_t v[2] = {(int64_t)l, p->layer_bytes[l]};
        h = dmuon_digest(v, sizeof v, h);
        for (size_t s = p->layer_seg[l]; s < p->layer_seg[l + 1]; s++) {
            const dmuon_segment *g = &p->segs[s];
            int64_t w[5] = {g->owner, g->dtype, g->offset, g->count, g->window_offset};
            h = dmuon_digest(w, sizeof w, h);
        }
    }
    return h;
}

uint64_t dmuon_plan_options_digest(const dmuon_plan_opts *o)
{
    /* epsilon with 15 significant digits, as the plan file stores it, so a
     * loaded plan recomputes the same digest */
    char obuf[512];
    int len = snprintf(obuf, sizeof obuf, "%d %d %d %d %d %d %.15g %d %d %d %d %lld %d",
                       o->nodes, o->gpus_per_node, o->sharding, o->zero_stage, o->strategy,
                       o->cost, o->epsilon, o->byte_cap, o->layer_spread, o->column_balance,
                       o->fuse_experts, (long long)o->small_unit_bytes, o->param_dtype);
    return dmuon_digest(obuf, (size_t)len, DMUON_DIGEST_SEED);
}

/* Window offsets and per-rank window sizes. */
dmuon_rc dmuon_plan_layout_windows(dmuon_plan *p)
{
    size_t *idx = malloc((p->nunits ? p->nunits : 1) * sizeof *idx);
    free(p->window);
    p->window = calloc((size_t)p->ranks, sizeof *p->window);
    if (!idx || !p->window) {
        free(idx);
        return DMUON_FAIL(DMUON_ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < p->nunits; i++)
        idx[i] = i;
    qsort_r(idx, p->nunits, sizeof *idx, cmp_window, p);
    for (size_t k = 0; k < p->nunits; k++) {
        dmuon_plan_unit *u = &p->units[idx[k]];
        u->window_offset = p->window[u->owner];
        p->window[u->owner] += u->bytes;
    }
    free(idx);
    return DMUON_OK;
}

/* Frozen segment tables: per layer, members by layer offset, merged runs. */
dmuon_rc dmuon_plan_layout_segments(dmuon_plan *p)
{
    dmuon_rc rc = DMUON_OK;
    size_t nm = p->nmembers, dsz = dmuon_dtype_size(p->opts.param_dtype);
    size_t *idx = malloc((nm ? nm : 1) * sizeof *idx);
    int32_t *unit_of = malloc((nm ? nm : 1) * sizeof *unit_of);
    int64_t *win_of = malloc((nm ? nm : 1) * sizeof *win_of);
    size_t *lcount = calloc(p->nlayers + 1, sizeof *lcount);
    free(p->segs);
    free(p->layer_seg);
    p->segs = malloc((nm ? nm : 1) * sizeof *p->segs);
    p->layer_seg = calloc(p->nlayers + 1, sizeof *p->layer_seg);
    p->nsegs = 0;
    if (!idx || !unit_of || !win_of || !lcount || !p->segs || !p->layer_seg) {
        rc = DMUON_FAIL(DMUON_ENOMEM, "out of memory");
        goto out;
    }
    /* each member's unit and window offset */
    for (size_t u = 0; u < p->nunits; u++) {
        int64_t w = p->units[u].window_offset;
        for (size_t k = 0; k < p->units[u].n_members; k++) {
            size_t mi = p->units[u].first_member + k;
            const dmuon_plan_member *mb = &p->members[mi];
            const dmuon_plan_param *q = &p->params[mb->param];
            unit_of[mi] = (int32_t)u;
            win_of[mi] = w;
            w += mb->n_matrices * q->mat_m * q->mat_n * (int64_t)dsz;
        }
    }
    /* members grouped by layer (counting sort), then by offset */
    for (size_t i = 0; i < nm; i++)
        lcount[p->units[unit_of[i]].layer + 1]++;
    for (size_t l = 0; l < p->nlayers; l++)
        lcount[l + 1] += lcount[l];
    {
        size_t *fill = calloc(p->nlayers + 1, sizeof *fill);
        if (!fill) {
            rc = DMUON_FAIL(DMUON_ENOMEM, "out of memory");
            goto out;
        }
        for (size_t i = 0; i < nm; i++) {
            int32_t l = p->units[unit_of[i]].layer;
            idx[lcount[l] + fill[l]++] = i;
        }
        free(fill);
    }
    for (size_t l = 0; l < p->nlayers; l++) {
        qsort_r(idx + lcount[l], lcount[l + 1] - lcount[l], sizeof *idx, cmp_member_offset, p);
        p->layer_seg[l] = p->nsegs;
        for (size_t k = lcount[l]; k < lcount[l + 1]; k++) {
            size_t mi = idx[k];
            const dmuon_plan_member *mb = &p->members[mi];
            const dmuon_plan_param *q = &p->params[mb->param];
            int64_t count = mb->n_matrices * q->mat_m * q->mat_n;
            int32_t owner = p->units[unit_of[mi]].owner;
            dmuon_segment *last = p->nsegs > p->layer_seg[l] ? &p->segs[p->nsegs - 1] : NULL;
            if (last && last->owner == owner &&
                last->offset + last->count * (int64_t)dsz == mb->layer_offset &&
                last->window_offset + last->count * (int64_t)dsz == win_of[mi]) {
                last->count += count;
                continue;
            }
            p->segs[p->nsegs++] = (dmuon_segment){owner, p->opts.param_dtype, mb->layer_offset,
                                                  count, win_of[mi]};
        }
    }
    p->layer_seg[p->nlayers] = p->nsegs;
out:
    free(idx);
    free(unit_of);
    free(win_of);
    free(lcount);
    return rc;
}

static dmuon_rc layout_leaders(dmuon_plan *p)
{
    free(p->leaders);
    p->leaders = NULL;
    if (p->opts.sharding != DMUON_SHARD_HSDP)
        return DMUON_OK;
    size_t R = (size_t)p->opts.nodes;
    p->leaders = malloc((p->nunits ? p->nunits : 1) * R * sizeof *p->leaders);
    if (!p->leaders)
        return DMUON_FAIL(DMUON_ENOMEM, "out of memory for leaders");
    for (size_t u = 0; u < p->nunits; u++)
        for (size_t r = 0; r < R; r++)
            p->leaders[u * R + r] = (int32_t)r * p->opts.gpus_per_node + p->units[u].column;
    return DMUON_OK;
}

/* -------------------------------------------------------------- report -- */

static int cmp_desc(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return (a < b) - (a > b);
}

/* The sharing bound for identical machines: for every k >= 1 with more than
 * k*N units, the k*N + 1 most costly units put k + 1 of them on one rank, so
 * that rank's load is at least the sum of the k + 1 cheapest of them,
 * c[kN-k] + ... + c[kN] (costs sorted descending, 0-based; k = 1 is the
 * classic c[N-1] + c[N]).  Raises *lb to the largest such sum.  It bounds
 * every assignment, so every constrained one too (byte cap, spreading,
 * rails); those constraints can only raise the optimum above it. */
static dmuon_rc sharing_bound(const dmuon_plan *p, double *lb)
{
    size_t n = p->nunits, N = (size_t)p->ranks;
    if (n <= N)
        return DMUON_OK;
    double *c = malloc(n * sizeof *c), *pre = malloc((n + 1) * sizeof *pre);
    if (!c || !pre) {
        free(c);
        free(pre);
        return DMUON_FAIL(DMUON_ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < n; i++)
        c[i] = p->units[i].ns_ms;
    qsort(c, n, sizeof *c, cmp_desc);
    pre[0] = 0;
    for (size_t i = 0; i < n; i++)
        pre[i + 1] = pre[i] + c[i];
    for (size_t k = 1; k * N < n; k++) {
        double v = pre[k * N + 1] - pre[k * N - k];
        if (v > *lb)
            *lb = v;
    }
    free(c);
    free(pre);
    return DMUON_OK;
}

typedef struct {
    double cost, bytes;
} cb_unit;

static int cmp_cb_bytes(const void *x, const void *y)
{
    const cb_unit *a = x, *b = y;
    return (a->bytes < b->bytes) - (a->bytes > b->bytes);
}

/* The byte-cap bound, for plans that keep the cap C on every rank (no unit
 * placed over it).  For j >= 1, the m_j units of more than C/(j+1) bytes
 * fit at most j to a rank, so at least f_min = m_j - (j-1)N ranks hold j of
 * them ("full" ranks), and at most m_j / j can.  A full rank has room for at
 * most R = C - (the j smallest such units' bytes) more bytes, of units of at
 * most C/(j+1) bytes, whose NS per byte is at most D; so f full ranks carry
 * at most U(f) = (the jf most costly of the m_j units) + f R D.  The busiest
 * rank carries at least max(j cheapest of the m_j, (total - U(f)) / (N - f))
 * for the true f, so at least the least of that over f in [f_min,
 * min(N - 1, m_j / j)] (and the mean when every rank can be full).  Raises
 * *lb to the largest over j <= 16.  Work: O(n log n) per j with f_min > 0. */
static dmuon_rc cap_bound(const dmuon_plan *p, double *lb)
{
    const dmuon_plan_opts *o = &p->opts;
    size_t n = p->nunits, N = (size_t)p->ranks;
    if (!o->byte_cap || o->strategy != DMUON_STRATEGY_LPT || n <= N)
        return DMUON_OK;
    double total_b = 0, total_c = 0;
    for (size_t i = 0; i < n; i++) {
        if (p->fallback[i])
            return DMUON_OK;   /* the cap does not hold: the bound does not apply */
        total_b += (double)p->units[i].bytes;
        total_c += p->units[i].ns_ms;
    }
    double C = (1 + o->epsilon) * total_b / (double)N;
    cb_unit *u = malloc(n * sizeof *u);
    double *c = malloc(n * sizeof *c), *pre = malloc((n + 1) * sizeof *pre);
    if (!u || !c || !pre) {
        free(u);
        free(c);
        free(pre);
        return DMUON_FAIL(DMUON_ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < n; i++)
        u[i] = (cb_unit){p->units[i].ns_ms, (double)p->units[i].bytes};
    qsort(u, n, sizeof *u, cmp_cb_bytes);   /* bytes descending */
    for (size_t j = 1; j <= 16; j++) {
        double t = C / (double)(j + 1);
        size_t m = 0;
        while (m < n && u[m].bytes > t)
            m++;
        if (m <= (j - 1) * N || m < j)
            continue;
        size_t fmin = m - (j - 1) * N, fmax = m / j;
        if (fmax > N)
            fmax = N;
        if (fmin > fmax)
            continue;
        double room = C;
        for (size_t k = m - j; k < m; k++)   /* the j smallest of the m */
            room -= u[k].bytes;
        double dens = 0;
        for (size_t k = m; k < n; k++)
            if (u[k].bytes <= room && u[k].bytes > 0 && u[k].cost / u[k].bytes > dens)
                dens = u[k].cost / u[k].bytes;
        for (size_t k = 0; k < m; k++)
            c[k] = u[k].cost;
        qsort(c, m, sizeof *c, cmp_desc);
        pre[0] = 0;
        for (size_t k = 0; k < m; k++)
            pre[k + 1] = pre[k] + c[k];
        double jmin = pre[m] - pre[m - j], best = INFINITY;
        for (size_t f = fmin; f <= fmax; f++) {
            double v;
            if (f == N)
                v = total_c / (double)N;
            else
                v = (total_c - pre[j * f] - (double)f * room * dens) / (double)(N - f);
            if (v < jmin)
                v = jmin;
            if (v < best)
                best = v;
        }
        if (best > *lb && isfinite(best))
            *lb = best;
    }
    free(u);
    free(c);
    free(pre);
    return DMUON_OK;
}

dmuon_rc dmuon_plan_compute_report(dmuon_plan *p)
{
    dmuon_plan_report *r = &p->report;
    int32_t N = p->ranks, K = p->opts.gpus_per_node;
    double *load = calloc((size_t)N, sizeof *load);
    int64_t *mats = calloc((size_t)N, sizeof *mats);
    int64_t *rail = calloc((size_t)K, sizeof *rail);
    int64_t *acc = calloc((size_t)N, sizeof *acc);
    dmuon_rc rc = DMUON_OK;
    if (!load || !mats || !rail || !acc) {
        rc = DMUON_FAIL(DMUON_ENOMEM, "out of memory");
        goto out;
    }
    memset(r, 0, sizeof *r);
    r->ranks = N;
    r->nodes = p->opts.nodes;
    r->gpus_per_node = K;
    r->units = p->nunits;
    r->worst_layer = -1;
    double largest = 0;
    for (size_t i = 0; i < p->nunits; i++) {
        const dmuon_plan_unit *u = &p->units[i];
        load[u->owner] += u->ns_ms;
        mats[u->owner] += u->matrices;
        rail[u->column] += u->bytes;
        r->muon_matrices += u->matrices;
        r->total_ns_ms += u->ns_ms;
        r->total_bytes += u->bytes;
        if (u->ns_ms > largest)
            largest = u->ns_ms;
        r->byte_cap_fallbacks += p->fallback[i];
    }
    for (int32_t k = 0; k < N; k++) {
        if (k == 0 || load[k] > r->busiest_ns_ms) {
            r->busiest_ns_ms = load[k];
            r->busiest_rank = k;
        }
        if (k == 0 || p->window[k] > r->max_owner_bytes) {
            r->max_owner_bytes = p->window[k];
            r->heaviest_rank = k;
        }
        if (mats[k] > r->max_matrices_per_rank)
            r->max_matrices_per_rank = mats[k];
    }
    for (int32_t s = 0; s < K; s++)
        if (rail[s] > r->max_rail_bytes || s == 0) {
            r->max_rail_bytes = rail[s];
            r->heaviest_rail = s;
        }
    double mean_ns = r->total_ns_ms / N, mean_b = (double)r->total_bytes / N;
    r->busiest_ns_over_mean = mean_ns > 0 ? r->busiest_ns_ms / mean_ns : 0;
    r->lower_bound_ms = largest > mean_ns ? largest : mean_ns;
    DMUON_TRY_GOTO(rc, sharing_bound(p, &r->lower_bound_ms), out);
    double plain = r->lower_bound_ms;
    DMUON_TRY_GOTO(rc, cap_bound(p, &r->lower_bound_ms), out);
    r->bound_with_cap = r->lower_bound_ms > plain;
    r->bound_optimal = r->busiest_ns_ms <= r->lower_bound_ms * (1 + 1e-9);
    r->busiest_ns_over_lower_bound = r->lower_bound_ms > 0 ? r->busiest_ns_ms / r->lower_bound_ms : 0;
    r->heaviest_bytes_over_mean = mean_b > 0 ? (double)r->max_owner_bytes / mean_b : 0;
    double mean_rail = (double)r->total_bytes / K;
    r->heaviest_rail_over_mean = mean_rail > 0 ? (double)r->max_rail_bytes / mean_rail : 0;
    /* per layer: heaviest root's bytes in the layer over the layer's largest
     * unit; units are grouped by layer, acc[] is zero between layers */
    for (size_t i = 0, j; i < p->nunits; i = j) {
        int64_t big = 0, root = 0;
        for (j = i; j < p->nunits && p->units[j].layer == p->units[i].layer; j++) {
            acc[p->units[j].owner] += p->units[j].bytes;
            if (p->units[j].bytes > big)
                big = p->units[j].bytes;
        }
        for (size_t a = i; a < j; a++) {
            if (acc[p->units[a].owner] > root)
                root = acc[p->units[a].owner];
        }
        for (size_t a = i; a < j; a++)
            acc[p->units[a].owner] = 0;
        double ratio = big > 0 ? (double)root / (double)big : 0;
        if (ratio > r->layer_root_over_largest_unit) {
            r->layer_root_over_largest_unit = ratio;
            r->worst_layer = p->units[i].layer;
        }
    }
out:
    free(load);
    free(mats);
    free(rail);
    free(acc);
    return rc;
}

dmuon_rc dmuon_plan_finish(dmuon_plan *p)
{
    DMUON_TRY(dmuon_plan_layout_windows(p));
    DMUON_TRY(dmuon_plan_layout_segments(p));
    DMUON_TRY(layout_leaders(p));
    DMUON_TRY(dmuon_plan_compute_report(p));
    return DMUON_OK;
}

void dmuon_plan_describe_cost(dmuon_plan *p)
{
    const dmuon_plan_opts *o = &p->opts;
    switch (o->cost) {
    case DMUON_COST_DB:
        snprintf(p->cost_source, sizeof p->cost_source, "db: %s, %s/%s (measured, ms)",
                 o->cost_src.device ? o->cost_src.device : "?",
                 o->cost_src.variant ? o->cost_src.variant : "gram-pe5",
                 o->cost_src.dtype ? o->cost_src.dtype : "fp32");
        break;
    case DMUON_COST_FLOPS:
        snprintf(p->cost_source, sizeof p->cost_source,
                 "flops (estimate: Gram NS operation count, ms at a nominal 1 TFLOP/s)");
        break;
    case DMUON_COST_ELEMENTS:
        snprintf(p->cost_source, sizeof p->cost_source, "elements (estimate: m*n / 1e6)");
        break;
    case DMUON_COST_M2N:
        snprintf(p->cost_source, sizeof p->cost_source, "m2n (estimate: min^2*max / 1e9)");
        break;
    }
}

/* --------------------------------------------------------------- build -- */

dmuon_rc dmuon_plan_build(const dmuon_model *m, const dmuon_plan_opts *opts, dmuon_plan **out)
{
    dmuon_rc rc = DMUON_OK;
    dmuon_cost_table *ct = NULL;
    char devbuf[160];
    *out = NULL;
    if (opts->nodes < 1 || opts->gpus_per_node < 1 ||
        (int64_t)opts->nodes * opts->gpus_per_node > DMUON_PLAN_MAX_RANKS)
        return DMUON_FAIL(DMUON_EINVAL,
                          "cluster of %d nodes x %d GPUs: expected at least 1 x 1 and at most "
                          "%d ranks in all",
                          opts->nodes, opts->gpus_per_node, DMUON_PLAN_MAX_RANKS);
    if (!isfinite(opts->epsilon) || opts->epsilon < 0 || opts->epsilon > 100)
        return DMUON_FAIL(DMUON_EINVAL, "epsilon %g: expected a number from 0 to 100",
                          opts->epsilon);
    if (opts->small_unit_bytes < 0 || opts->small_unit_bytes > DMUON_PLAN_MAX_SMALL_UNIT_BYTES)
        return DMUON_FAIL(DMUON_EINVAL, "small-unit threshold %lld bytes: expected 0 to 2^46",
                          (long long)opts->small_unit_bytes);
    if (opts->zero_stage != 2 && opts->zero_stage != 3)
        return DMUON_FAIL(DMUON_EINVAL, "ZeRO stage %d: expected 2 or 3", opts->zero_stage);
    if (dmuon_dtype_size(opts->param_dtype) == 0)
        return DMUON_FAIL(DMUON_EINVAL, "invalid parameter dtype");
    dmuon_model_stats st;
    dmuon_model_get_stats(m, &st);
    if (st.muon_matrices == 0)
        return DMUON_FAIL(DMUON_EINVAL, "model '%s' has no Muon matrix to assign (every "
                                        "parameter has role adamw; check the --muon/--adamw "
                                        "patterns)", dmuon_model_source(m));
    dmuon_plan *p = calloc(1, sizeof *p);
    if (!p)
        return DMUON_FAIL(DMUON_ENOMEM, "out of memory");
    p->opts = *opts;
    if (p->opts.cost == DMUON_COST_DB && !p->opts.cost_src.device) {
        DMUON_TRY_GOTO(rc, dmuon_device_name(DMUON_DEVICE_CPU, devbuf, sizeof devbuf), fail);
        p->opts.cost_src.device = devbuf;
    }
    if (!p->opts.model_path)
        p->opts.model_path = dmuon_model_source(m);
    DMUON_TRY_GOTO(rc, own_strings(p), fail);
    p->ranks = opts->nodes * opts->gpus_per_node;
    p->model_digest = dmuon_model_digest(m);
    snprintf(p->model_format, sizeof p->model_format, "%s", dmuon_model_format(m));
    if (p->opts.cost == DMUON_COST_DB) {
        DMUON_TRY_GOTO(rc, dmuon_cost_table_load(m, &p->opts.cost_src, &ct), fail);
        p->cost_digest = dmuon_cost_table_digest(ct);
    } else {
        const char *k = dmuon_cost_kind_name(p->opts.cost);
        p->cost_digest = dmuon_digest(k, strlen(k), DMUON_DIGEST_SEED);
    }
    dmuon_plan_describe_cost(p);
    /* parameters and layers */
    p->nparams = dmuon_model_param_count(m);
    p->nlayers = dmuon_model_layer_count(m);
    p->params = calloc(p->nparams ? p->nparams : 1, sizeof *p->params);
    p->layer_names = calloc(p->nlayers ? p->nlayers : 1, sizeof *p->layer_names);
    p->layer_bytes = calloc(p->nlayers ? p->nlayers : 1, sizeof *p->layer_bytes);
    if (!p->params || !p->layer_names || !p->layer_bytes) {
        rc = DMUON_FAIL(DMUON_ENOMEM, "out of memory");
        goto fail;
    }
    for (size_t i = 0; i < p->nparams; i++) {
        const dmuon_param *q = dmuon_model_param(m, i);
        p->params[i] = (dmuon_plan_param){strdup(q->name), q->layer,      q->role,
                                          q->numel,        q->matrices,   q->mat_m,
                                          q->mat_n,        q->transposed, q->layout};
        if (!p->params[i].name) {
            rc = DMUON_FAIL(DMUON_ENOMEM, "out of memory");
            goto fail;
        }
    }
    for (size_t l = 0; l < p->nlayers; l++) {
        p->layer_names[l] = strdup(dmuon_model_layer_name(m, l));
        if (!p->layer_names[l]) {
            rc = DMUON_FAIL(DMUON_ENOMEM, "out of memory");
            goto fail;
        }
    }
    DMUON_TRY_GOTO(rc, make_units(p, m, ct), fail);
    p->fallback = calloc(p->nunits ? p->nunits : 1, sizeof *p->fallback);
    if (!p->fallback) {
        rc = DMUON_FAIL(DMUON_ENOMEM, "out of memory");
        goto fail;
    }
    DMUON_TRY_GOTO(rc, dmuon_plan_assign_owners(p), fail);
    DMUON_TRY_GOTO(rc, dmuon_plan_finish(p), fail);
    p->options_digest = dmuon_plan_options_digest(&p->opts);
    dmuon_cost_table_free(ct);
    *out = p;
    return DMUON_OK;
fail:
    dmuon_cost_table_free(ct);
    dmuon_plan_free(p);
    return rc;
}

/* ----------------------------------------------------------- accessors -- */

int32_t dmuon_plan_ranks(const dmuon_plan *p) { return p->ranks; }
int32_t dmuon_plan_nodes(const dmuon_plan *p) { return p->opts.nodes; }
int32_t dmuon_plan_gpus_per_node(const dmuon_plan *p) { return p->opts.gpus_per_node; }
dmuon_sharding dmuon_plan_sharding(const dmuon_plan *p) { return p->opts.sharding; }
int dmuon_plan_zero_stage(const dmuon_plan *p) { return p->opts.zero_stage; }
dmuon_dtype dmuon_plan_param_dtype(const dmuon_plan *p) { return p->opts.param_dtype; }
const char *dmuon_plan_cost_source(const dmuon_plan *p) { return p->cost_source; }
const dmuon_plan_opts *dmuon_plan_options(const dmuon_plan *p) { return &p->opts; }
size_t dmuon_plan_layer_count(const dmuon_plan *p) { return p->nlayers; }
const dmuon_plan_report *dmuon_plan_get_report(const dmuon_plan *p) { return &p->report; }

const char *dmuon_plan_layer_name(const dmuon_plan *p, size_t i)
{
    return i < p->nlayers ? p->layer_names[i] : NULL;
}

int64_t dmuon_plan_layer_bytes(const dmuon_plan *p, size_t i)
{
    return i < p->nlayers ? p->layer_bytes[i] : 0;
}

const dmuon_segment *dmuon_plan_layer_segments(const dmuon_plan *p, size_t i, size_t *n)
{
    if (i >= p->nlayers) {
        *n = 0;
        return NULL;
    }
    *n = p->layer_seg[i + 1] - p->layer_seg[i];
    return p->segs + p->layer_seg[i];
}

const dmuon_plan_unit *dmuon_plan_units(const dmuon_plan *p, size_t *n)
{
    *n = p->nunits;
    return p->units;
}

const dmuon_plan_member *dmuon_plan_members(const dmuon_plan *p, size_t *n)
{
    *n = p->nmembers;
    return p->members;
}

const dmuon_plan_param *dmuon_plan_params(const dmuon_plan *p, size_t *n)
{
    *n = p->nparams;
    return p->params;
}

typedef struct {
    size_t unit;
    int32_t layer;
} rail_post;

static int rail_post_cmp(const void *a, const void *b)
{
    const rail_post *x = a, *y = b;
    if (x->layer != y->layer)
        return x->layer < y->layer ? -1 : 1;
    return x->unit < y->unit ? -1 : x->unit > y->unit;
}

dmuon_rc dmuon_plan_rail_publish(const dmuon_plan *p, int rail, dmuon_segment **segs,
                                 int **layer_of, int *n, int64_t *bytes)
{
    *segs = NULL;
    *layer_of = NULL;
    *n = 0;
    *bytes = 0;
    if (rail < 0 || rail >= p->opts.gpus_per_node)
        return DMUON_FAIL(DMUON_EINVAL, "rail %d: out of range, the plan has rails 0..%d", rail,
                          (int)p->opts.gpus_per_node - 1);
    size_t k = 0;
    for (size_t i = 0; i < p->nunits; i++)
        k += p->units[i].column == rail;
    if (k == 0)
        return DMUON_FAIL(DMUON_EINVAL, "no unit publishes on rail %d", rail);
    rail_post *order = malloc(k * sizeof *order);
    dmuon_segment *s = calloc(k, sizeof *s);
    int *lo = calloc(k, sizeof *lo);
    if (!order || !s || !lo) {
        free(order);
        free(s);
        free(lo);
        return DMUON_FAIL(DMUON_ENOMEM, "out of memory for the publish table of rail %d", rail);
    }
    k = 0;
    for (size_t i = 0; i < p->nunits; i++)
        if (p->units[i].column == rail)
            order[k++] = (rail_post){i, p->units[i].layer};
    qsort(order, k, sizeof *order, rail_post_cmp);
    dmuon_dtype dt = p->opts.param_dtype;
    int64_t es = (int64_t)dmuon_dtype_size(dt), off = 0;
    int layer = 0;
    for (size_t j = 0; j < k; j++) {
        const dmuon_plan_unit *u = &p->units[order[j].unit];
        s[j].owner = u->owner;
        s[j].dtype = dt;
        s[j].count = u->bytes / es;
        s[j].offset = off;
        off += s[j].count * es;
        if (j > 0 && order[j].layer != order[j - 1].layer)
            layer++;
        lo[j] = layer;
    }
    free(order);
    *segs = s;
    *layer_of = lo;
    *n = (int)k;
    *bytes = off;
    return DMUON_OK;
}

int64_t dmuon_plan_window_bytes(const dmuon_plan *p, int32_t rank)
{
    return rank >= 0 && rank < p->ranks ? p->window[rank] : 0;
}

int32_t dmuon_plan_leader(const dmuon_plan *p, size_t u, int32_t node)
{
    if (u >= p->nunits || node < 0 || node >= p->opts.nodes)
        return -1;
    if (p->opts.sharding != DMUON_SHARD_HSDP)
        return p->units[u].owner;
    return p->leaders[u * (size_t)p->opts.nodes + (size_t)node];
}

dmuon_rc dmuon_plan_reevaluate(dmuon_plan *p, const dmuon_plan *ref)
{
    if (p->nunits != ref->nunits)
        return DMUON_FAIL(DMUON_EMISMATCH, "plans have %zu and %zu units", p->nunits,
                          ref->nunits);
    for (size_t i = 0; i < p->nunits; i++)
        if (strcmp(p->units[i].name, ref->units[i].name))
            return DMUON_FAIL(DMUON_EMISMATCH, "unit %zu differs: '%s' and '%s'", i,
                              p->units[i].name, ref->units[i].name);
    char was[64];
    snprintf(was, sizeof was, "%s", dmuon_cost_kind_name(p->opts.cost));
    for (size_t i = 0; i < p->nunits; i++)
        p->units[i].ns_ms = ref->units[i].ns_ms;
    DMUON_TRY(dmuon_plan_compute_report(p));
    char src[sizeof p->cost_source];
    memcpy(src, ref->cost_source, sizeof src);
    src[200] = '\0';
    snprintf(p->cost_source, sizeof p->cost_source, "assigned by %s, evaluated by %.200s", was,
             src);
    return DMUON_OK;
}
