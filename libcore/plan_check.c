/*
 * plan_check.c — the plan's invariants (dmuon_plan_check, used by
 * dmuon-verify --plan) and the balance report in human and JSON form.
 *
 * The checks read only what the plan holds, so they apply equally to a
 * freshly built plan and to a file someone edited; each violation is counted
 * and the first one is kept as the message.
 */
#include "plan_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    size_t count;
    char first[512];
    char *list;   /* optional: the first DMUON_PLAN_CHECK_LIST, one a line */
    size_t cap, len;
} viol;

static void bad(viol *v, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void bad(viol *v, const char *fmt, ...)
{
    va_list ap;
    if (v->count == 0) {
        va_start(ap, fmt);
        vsnprintf(v->first, sizeof v->first, fmt, ap);
        va_end(ap);
    }
    if (v->list && v->count < DMUON_PLAN_CHECK_LIST && v->len + 1 < v->cap) {
        va_start(ap, fmt);
        int k = vsnprintf(v->list + v->len, v->cap - v->len, fmt, ap);
        va_end(ap);
        if (k > 0)
            v->len += (size_t)k < v->cap - v->len ? (size_t)k : v->cap - v->len - 1;
        if (v->len + 1 < v->cap) {
            v->list[v->len++] = '\n';
            v->list[v->len] = 0;
        }
    }
    v->count++;
}

typedef struct {
    int64_t off, len, win;
    int32_t owner, param;
    int64_t first, count;
} span;

static int cmp_span_param(const void *x, const void *y)
{
    const span *a = x, *b = y;
    if (a->param != b->param)
        return (a->param > b->param) - (a->param < b->param);
    return (a->first > b->first) - (a->first < b->first);
}

static int cmp_span_off(const void *x, const void *y)
{
    const span *a = x, *b = y;
    return (a->off > b->off) - (a->off < b->off);
}

static int cmp_unit_win(const void *x, const void *y, void *ctx)
{
    const dmuon_plan *p = ctx;
    const dmuon_plan_unit *a = &p->units[*(const size_t *)x], *b = &p->units[*(const size_t *)y];
    if (a->owner != b->owner)
        return (a->owner > b->owner) - (a->owner < b->owner);
    return (a->window_offset > b->window_offset) - (a->window_offset < b->window_offset);
}

/* 1. coverage: every Muon matrix in exactly one member, no AdamW member;
 *    unit totals agree with their members. */
static void check_coverage(const dmuon_plan *p, span *sp, viol *v)
{
    size_t dsz = dmuon_dtype_size(p->opts.param_dtype);
    for (size_t u = 0; u < p->nunits; u++) {
        const dmuon_plan_unit *un = &p->units[u];
        int64_t el = 0, mats = 0, w = un->window_offset;
        if (un->first_member + un->n_members > p->nmembers) {
            bad(v, "unit %zu '%s': members out of range", u, un->name);
            continue;
        }
        for (size_t k = 0; k < un->n_members; k++) {
            const dmuon_plan_member *mb = &p->members[un->first_member + k];
            const dmuon_plan_param *q = &p->params[mb->param];
            int64_t e = mb->n_matrices * q->mat_m * q->mat_n;
            sp[un->first_member + k] = (span){mb->layer_offset, e * (int64_t)dsz, w, un->owner,
                                              mb->param, mb->first_matrix, mb->n_matrices};
            w += e * (int64_t)dsz;
            el += e;
            mats += mb->n_matrices;
            if (q->role != DMUON_ROLE_MUON)
                bad(v, "unit '%s' holds AdamW parameter '%s'", un->name, q->name);
            if (q->layer != un->layer)
                bad(v, "unit '%s' (layer %d) holds '%s' of layer %d", un->name, un->layer, q->name,
                    q->layer);
            if (q->layout != DMUON_MAT_CONTIGUOUS && (mb->first_matrix % 2 || mb->n_matrices % 2))
                bad(v, "unit '%s' splits the gate/up pair of '%s' (layout %s: matrices [%lld, "
                       "+%lld))", un->name, q->name, dmuon_mat_layout_name(q->layout),
                    (long long)mb->first_matrix, (long long)mb->n_matrices);
        }
        if (el != un->elements || mats != un->matrices || el * (int64_t)dsz != un->bytes)
            bad(v, "unit '%s': elements/bytes/matrices %lld/%lld/%lld do not match its members "
                   "(%lld/%lld/%lld)",
                un->name, (long long)un->elements, (long long)un->bytes, (long long)un->matrices,
                (long long)el, (long long)(el * (int64_t)dsz), (long long)mats);
    }
    qsort(sp, p->nmembers, sizeof *sp, cmp_span_param);
    size_t k = 0;
    for (size_t i = 0; i < p->nparams; i++) {
        const dmuon_plan_param *q = &p->params[i];
        int64_t next = 0;
        bool overlap = false;
        for (; k < p->nmembers && sp[k].param == (int32_t)i; k++) {
            if (sp[k].first != next)
                overlap = true;
            next = sp[k].first + sp[k].count;
        }
        if (q->role == DMUON_ROLE_MUON && (overlap || next != q->matrices))
            bad(v, "parameter '%s': its %lld matrices are not each in exactly one unit", q->name,
                (long long)q->matrices);
    }
}

/* 2-3, 5-6 for owners, windows, leaders, cap and spreading. */
static void check_owners(const dmuon_plan *p, viol *v)
{
    int32_t N = p->ranks, K = p->opts.gpus_per_node, R = p->opts.nodes;
    for (size_t u = 0; u < p->nunits; u++) {
        const dmuon_plan_unit *un = &p->units[u];
        if (un->owner < 0 || un->owner >= N)
            bad(v, "unit '%s': owner %d outside [0, %d)", un->name, un->owner, N);
        if (un->node != un->owner / K || un->column != un->owner % K)
            bad(v, "unit '%s': node/column %d/%d do not match owner %d", un->name, un->node,
                un->column, un->owner);
        if (p->opts.sharding == DMUON_SHARD_HSDP && p->leaders) {
            for (int32_t r = 0; r < R; r++) {
                int32_t l = p->leaders[u * (size_t)R + (size_t)r];
                if (l / K != r || l % K != un->column)
                    bad(v, "unit '%s': leader on node %d is rank %d, not in the owner's column %d "
                           "of that node",
                        un->name, r, l, un->column);
            }
        }
    }
    if (p->opts.sharding == DMUON_SHARD_HSDP && !p->leaders)
        bad(v, "HSDP plan without row leaders");
}

static void check_windows(const dmuon_plan *p, viol *v)
{
    size_t *idx = malloc((p->nunits ? p->nunits : 1) * sizeof *idx);
    if (!idx) {
        bad(v, "out of memory checking windows");
        return;
    }
    for (size_t i = 0; i < p->nunits; i++)
        idx[i] = i;
    qsort_r(idx, p->nunits, sizeof *idx, cmp_unit_win, (void *)p);
    int32_t owner = -1;
    int64_t end = 0;
    for (size_t k = 0; k < p->nunits; k++) {
        const dmuon_plan_unit *u = &p->units[idx[k]];
        if (u->owner != owner) {
            owner = u->owner;
            end = 0;
        }
        if (u->window_offset != end)
            bad(v, "rank %d: unit '%s' sits at window offset %lld, expected %lld (overlap or gap)",
                owner, u->name, (long long)u->window_offset, (long long)end);
        end = u->window_offset + u->bytes;
    }
    free(idx);
}

/* Segment tables tile each layer buffer and agree with the members. */
static void check_segments(const dmuon_plan *p, span *sp, viol *v)
{
    size_t dsz = dmuon_dtype_size(p->opts.param_dtype);
    int64_t *lb = calloc(p->nlayers + 1, sizeof *lb);
    if (!lb) {
        bad(v, "out of memory checking segments");
        return;
    }
    for (size_t i = 0; i < p->nparams; i++)
        if (p->params[i].role == DMUON_ROLE_MUON)
            lb[p->params[i].layer] += p->params[i].numel * (int64_t)dsz;
    /* spans by layer: members know their layer through the parameter */
    qsort(sp, p->nmembers, sizeof *sp, cmp_span_off);
    for (size_t l = 0; l < p->nlayers; l++) {
        if (lb[l] != p->layer_bytes[l])
            bad(v, "layer '%s': buffer of %lld bytes, its Muon parameters need %lld",
                p->layer_names[l], (long long)p->layer_bytes[l], (long long)lb[l]);
        int64_t end = 0;
        size_t s0 = p->layer_seg[l], s1 = p->layer_seg[l + 1];
        for (size_t s = s0; s < s1; s++) {
            const dmuon_segment *g = &p->segs[s];
            if (g->offset != end || g->count <= 0)
                bad(v, "layer '%s': segment %zu starts at %lld, expected %lld", p->layer_names[l],
                    s - s0, (long long)g->offset, (long long)end);
            end = g->offset + g->count * (int64_t)dsz;
        }
        if (end != p->layer_bytes[l])
            bad(v, "layer '%s': segments cover %lld of %lld bytes", p->layer_names[l],
                (long long)end, (long long)p->layer_bytes[l]);
    }
    /* every member's bytes lie in one segment with its owner and window */
    for (size_t k = 0; k < p->nmembers; k++) {
        const span *a = &sp[k];
        size_t l = (size_t)p->params[a->param].layer;
        size_t lo = p->layer_seg[l], hi = p->layer_seg[l + 1];
        while (lo < hi) {   /* last segment with offset <= a->off */
            size_t mid = (lo + hi) / 2;
            if (p->segs[mid].offset <= a->off)
                lo = mid + 1;
            else
                hi = mid;
        }
        if (lo == p->layer_seg[l]) {
            bad(v, "parameter '%s': no segment holds its bytes", p->params[a->param].name);
            continue;
        }
        const dmuon_segment *g = &p->segs[lo - 1];
        int64_t gend = g->offset + g->count * (int64_t)dsz;
        if (a->off + a->len > gend || g->owner != a->owner ||
            g->window_offset + (a->off - g->offset) != a->win)
            bad(v, "parameter '%s' (matrices from %lld): segment at %lld says owner %d window "
                   "%lld, its unit says owner %d window %lld",
                p->params[a->param].name, (long long)a->first, (long long)g->offset, g->owner,
                (long long)(g->window_offset + (a->off - g->offset)), a->owner, (long long)a->win);
    }
    free(lb);
}

static void check_spread(const dmuon_plan *p, viol *v)
{
    if (!p->opts.layer_spread || p->opts.strategy != DMUON_STRATEGY_LPT)
        return;
    int32_t N = p->ranks;
    int32_t *cnt = calloc((size_t)N, sizeof *cnt);
    if (!cnt) {
        bad(v, "out of memory checking layer spreading");
        return;
    }
    for (size_t i = 0, j; i < p->nunits; i = j) {
        for (j = i; j < p->nunits && p->units[j].layer == p->units[i].layer; j++)
            cnt[p->units[j].owner]++;
        size_t n = j - i;
        int32_t lo = (int32_t)(n / (size_t)N), hi = lo + (n % (size_t)N ? 1 : 0);
        for (size_t a = i; a < j; a++) {
            int32_t c = cnt[p->units[a].owner];
            if (c > hi || (n <= (size_t)N && c > 1)) {
                bad(v, "layer '%s': rank %d holds %d of its %zu units (at most %d allowed with "
                       "layer spreading)",
                    p->layer_names[p->units[i].layer], p->units[a].owner, c, n, hi);
                break;
            }
        }
        for (size_t a = i; a < j; a++)
            cnt[p->units[a].owner] = 0;
    }
    free(cnt);
}

/* The byte cap and the fallbacks: a bin over its cap must hold a unit that
 * was placed when no candidate fitted; the replay below confirms the flags. */
static void check_cap(const dmuon_plan *p, viol *v)
{
    const dmuon_plan_opts *o = &p->opts;
    if (!o->byte_cap || o->strategy != DMUON_STRATEGY_LPT)
        return;
    int32_t N = p->ranks, K = o->gpus_per_node;
    bool hsdp = o->sharding == DMUON_SHARD_HSDP && o->column_balance && K > 1;
    double *col = calloc((size_t)K, sizeof *col);
    double *rank = calloc((size_t)N, sizeof *rank);
    bool *colfb = calloc((size_t)K, sizeof *colfb), *rankfb = calloc((size_t)N, sizeof *rankfb);
    if (!col || !rank || !colfb || !rankfb) {
        bad(v, "out of memory checking the byte cap");
        goto out;
    }
    double total = 0;
    for (size_t i = 0; i < p->nunits; i++) {
        const dmuon_plan_unit *u = &p->units[i];
        col[u->column] += (double)u->bytes;
        rank[u->owner] += (double)u->bytes;
        total += (double)u->bytes;
        colfb[u->column] |= p->fallback[i];
        rankfb[u->owner] |= p->fallback[i];
    }
    double eps = 1.0 + o->epsilon;
    for (int32_t r = 0; r < N; r++) {
        double cap = eps * total / N;
        if (rank[r] > cap * (1 + 1e-12) && !rankfb[r])
            bad(v, "rank %d holds %.0f bytes, over the cap of %.0f, with no unit placed as a "
                   "fallback",
                r, rank[r], cap);
    }
    for (int32_t s = 0; hsdp && s < K; s++)
        if (col[s] > eps * total / K * (1 + 1e-12) && !colfb[s])
            bad(v, "column %d holds %.0f bytes, over the column cap of %.0f", s, col[s],
                eps * total / K);
out:
    free(col);
    free(rank);
    free(colfb);
    free(rankfb);
}

/* Re-running the assignment on the plan's units gives the same owners and
 * fallback flags (the plan is a pure function of its inputs). */
static void check_replay(const dmuon_plan *p, viol *v)
{
    dmuon_plan q = *p;
    q.units = malloc((p->nunits ? p->nunits : 1) * sizeof *q.units);
    q.fallback = malloc((p->nunits ? p->nunits : 1) * sizeof *q.fallback);
    if (!q.units || !q.fallback) {
        bad(v, "out of memory replaying the assignment");
        goto out;
    }
    memcpy(q.units, p->units, p->nunits * sizeof *q.units);
    if (dmuon_plan_assign_owners(&q) != DMUON_OK) {
        bad(v, "replaying the assignment failed: %s", dmuon_errmsg());
        goto out;
    }
    for (size_t i = 0; i < p->nunits; i++)
        if (q.units[i].owner != p->units[i].owner || q.fallback[i] != p->fallback[i]) {
            bad(v, "unit '%s': owner %d%s, but the assignment rule gives %d%s", p->units[i].name,
                p->units[i].owner, p->fallback[i] ? " (fallback)" : "", q.units[i].owner,
                q.fallback[i] ? " (fallback)" : "");
            break;
        }
out:
    free(q.units);
    free(q.fallback);
}

dmuon_rc dmuon_plan_check(const dmuon_plan *p, size_t *violations)
{
    return dmuon_plan_check_list(p, violations, NULL, 0);
}

dmuon_rc dmuon_plan_check_list(const dmuon_plan *p, size_t *violations, char *list, size_t cap)
{
    viol v = {.list = cap ? list : NULL, .cap = cap};
    if (v.list)
        v.list[0] = 0;
    span *sp = malloc((p->nmembers ? p->nmembers : 1) * sizeof *sp);
    if (!sp)
        return DMUON_FAIL(DMUON_ENOMEM, "out of memory");
    for (size_t u = 1; u < p->nunits; u++)
        if (p->units[u].layer < p->units[u - 1].layer) {
            bad(&v, "units are not in layer order at unit %zu '%s'", u, p->units[u].name);
            break;
        }
    check_coverage(p, sp, &v);
    check_owners(p, &v);
    check_windows(p, &v);
    check_segments(p, sp, &v);
    check_spread(p, &v);
    check_cap(p, &v);
    check_replay(p, &v);
    if (p->loaded) {
        if (dmuon_plan_units_digest(p) != p->rec_units_digest)
            bad(&v, "digest of the units differs from the one recorded in the file");
        if (dmuon_plan_segments_digest(p) != p->rec_segments_digest)
            bad(&v, "digest of the segment tables differs from the one recorded in the file");
    }
    free(sp);
    if (violations)
        *violations = v.count;
    if (v.count)
        return DMUON_FAIL(DMUON_ECHECK, "plan violates %zu invariant check%s; first: %s", v.count,
                          v.count == 1 ? "" : "s", v.first);
    return DMUON_OK;
}

/* -------------------------------------------------------------- report -- */

static double mib(int64_t b) { return (double)b / (1024.0 * 1024.0); }

/* The unit of NS figures for a cost kind. */
static const char *ns_unit(dmuon_cost_kind k)
{
    switch (k) {
    case DMUON_COST_DB:
        return "ms (measured)";
    case DMUON_COST_FLOPS:
        return "ms at the nominal 1 TFLOP/s";
    case DMUON_COST_ELEMENTS:
        return "(m*n / 1e6)";
    case DMUON_COST_M2N:
        return "(min^2*max / 1e9)";
    }
    return "";
}

static int64_t largest_unit_bytes(const dmuon_plan *p)
{
    int64_t b = 0;
    for (size_t i = 0; i < p->nunits; i++)
        if (p->units[i].bytes > b)
            b = p->units[i].bytes;
    return b;
}

static int64_t smallest_unit_bytes(const dmuon_plan *p)
{
    int64_t b = INT64_MAX;
    for (size_t i = 0; i < p->nunits; i++)
        if (p->units[i].bytes < b)
            b = p->units[i].bytes;
    return p->nunits ? b : 0;
}

void dmuon_plan_print_report(const dmuon_plan *p, FILE *f)
{
    const dmuon_plan_report *r = &p->report;
    const dmuon_plan_opts *o = &p->opts;
    fprintf(f, "plan: %s  (%s)\n", o->model_path ? o->model_path : "?", p->model_format);
    fprintf(f, "cluster: %d rank%s = %d node%s x %d GPU%s, %s ZeRO-%d\n", p->ranks,
            p->ranks == 1 ? "" : "s", o->nodes, o->nodes == 1 ? "" : "s", o->gpus_per_node,
            o->gpus_per_node == 1 ? "" : "s", o->sharding == DMUON_SHARD_HSDP ? "HSDP" : "FSDP", o->zero_stage);
    fprintf(f, "assignment: %s, byte cap %s (epsilon %.3g), layer spreading %s%s, %s experts\n",
            dmuon_strategy_name(o->strategy), o->byte_cap ? "on" : "off", o->epsilon,
            o->layer_spread ? "on" : "off",
            o->sharding == DMUON_SHARD_HSDP ? (o->column_balance ? ", column balancing on"
                                                                 : ", column balancing off")
                                            : "",
            o->fuse_experts ? "fused" : "per-matrix");
    fprintf(f, "cost: %s\n", p->cost_source);
    fprintf(f, "units: %zu (%lld Muon matrices), %zu layers, %.1f MiB of Muon parameters "
               "(%s)\n\n",
            r->units, (long long)r->muon_matrices, p->nlayers, mib(r->total_bytes),
            dmuon_dtype_name(o->param_dtype));
    fprintf(f, "  %-34s %12s\n", "figure", "value");
    fprintf(f, "  %-34s %12.3f   rank %d\n", "busiest NS / mean", r->busiest_ns_over_mean,
            r->busiest_rank);
    fprintf(f, "  %-34s %12.3f   bound %.4g %s%s\n", "busiest NS / lower bound",
            r->busiest_ns_over_lower_bound, r->lower_bound_ms, ns_unit(o->cost),
            !r->bound_optimal ? ""
            : r->bound_with_cap ? " (optimal: no plan within the byte cap has a less busy rank)"
                                : " (optimal: no plan has a less busy rank)");
    fprintf(f, "  %-34s %12.3f   rank %d\n", "heaviest bytes / mean", r->heaviest_bytes_over_mean,
            r->heaviest_rank);
    fprintf(f, "  %-34s %12.1f\n", "largest owner window (MiB)", mib(r->max_owner_bytes));
    fprintf(f, "  %-34s %12.3f   rail %d\n", "heaviest rail / mean", r->heaviest_rail_over_mean,
            r->heaviest_rail);
    fprintf(f, "  %-34s %12lld\n", "max matrices per rank", (long long)r->max_matrices_per_rank);
    fprintf(f, "  %-34s %12.3f   %s\n", "layer root / largest unit",
            r->layer_root_over_largest_unit,
            r->worst_layer >= 0 ? p->layer_names[r->worst_layer] : "-");
    fprintf(f, "  %-34s %12zu\n", "units placed over the byte cap", r->byte_cap_fallbacks);
    fprintf(f, "\n  layer root: the rank holding the most of a layer's bytes; it sends or\n"
               "  receives that share in the layer's gather and reduction, so 1.00 (no rank\n"
               "  holds more than the layer's largest unit) keeps every layer's root short.\n");
    if (o->byte_cap) {
        double cap = (1 + o->epsilon) * (double)r->total_bytes / r->ranks;
        fprintf(f, "  byte cap: a target, not a guarantee: %.1f MiB per rank ((1 + %.3g) x "
                   "mean)", mib((int64_t)cap), o->epsilon);
        size_t big = 0, fbig = 0;   /* units larger than the cap by themselves */
        for (size_t i = 0; i < p->nunits; i++) {
            big += (double)p->units[i].bytes > cap;
            fbig += (double)p->units[i].bytes > cap && p->fallback[i];
        }
        size_t rest = r->byte_cap_fallbacks - fbig;
        if (r->byte_cap_fallbacks && big == p->nunits)
            fprintf(f, ";\n  every unit is larger than the cap by itself (smallest %lld "
                       "bytes), so every rank holding one is over it",
                    (long long)smallest_unit_bytes(p));
        else if (r->byte_cap_fallbacks) {
            fprintf(f, ";\n  %zu unit%s placed over it (largest unit %.1f MiB)", r->byte_cap_fallbacks,
                    r->byte_cap_fallbacks == 1 ? "" : "s", mib(largest_unit_bytes(p)));
            if (fbig)
                fprintf(f, ":\n  %zu larger than the cap by %s", fbig,
                        fbig == 1 ? "itself" : "themselves");
            if (rest)
                fprintf(f, "%s  %zu for which no rank %shad room", fbig ? ";\n" : ":\n", rest,
                        o->layer_spread ? "that layer spreading allowed " : "");
        }
        fprintf(f, "\n");
    }
}

void dmuon_plan_report_json(const dmuon_plan *p, dmuon_json *w)
{
    const dmuon_plan_report *r = &p->report;
    const dmuon_plan_opts *o = &p->opts;
    dmuon_json_kstr(w, "model", o->model_path ? o->model_path : "");
    dmuon_json_kint(w, "ranks", p->ranks);
    dmuon_json_kint(w, "nodes", o->nodes);
    dmuon_json_kint(w, "gpus_per_node", o->gpus_per_node);
    dmuon_json_kstr(w, "sharding", dmuon_sharding_name(o->sharding));
    dmuon_json_kint(w, "zero_stage", o->zero_stage);
    dmuon_json_kstr(w, "strategy", dmuon_strategy_name(o->strategy));
    dmuon_json_kbool(w, "byte_cap", o->byte_cap);
    dmuon_json_kdouble(w, "epsilon", o->epsilon);
    dmuon_json_kbool(w, "layer_spread", o->layer_spread);
    dmuon_json_kbool(w, "column_balance", o->column_balance);
    dmuon_json_kbool(w, "fuse_experts", o->fuse_experts);
    dmuon_json_kint(w, "units", (int64_t)r->units);
    dmuon_json_kint(w, "muon_matrices", r->muon_matrices);
    dmuon_json_kint(w, "layers", (int64_t)p->nlayers);
    dmuon_json_kstr(w, "cost", dmuon_cost_kind_name(o->cost));
    dmuon_json_kstr(w, "cost_source", p->cost_source);
    dmuon_json_kdouble(w, "total_ns_ms", r->total_ns_ms);
    dmuon_json_kdouble(w, "busiest_ns_ms", r->busiest_ns_ms);
    dmuon_json_kdouble(w, "busiest_ns_over_mean", r->busiest_ns_over_mean);
    dmuon_json_kdouble(w, "lower_bound_ms", r->lower_bound_ms);
    dmuon_json_kdouble(w, "busiest_ns_over_lower_bound", r->busiest_ns_over_lower_bound);
    dmuon_json_kint(w, "total_bytes", r->total_bytes);
    dmuon_json_kdouble(w, "heaviest_bytes_over_mean", r->heaviest_bytes_over_mean);
    dmuon_json_kint(w, "max_owner_bytes", r->max_owner_bytes);
    dmuon_json_kdouble(w, "heaviest_rail_over_mean", r->heaviest_rail_over_mean);
    dmuon_json_kint(w, "max_rail_bytes", r->max_rail_bytes);
    dmuon_json_kint(w, "max_matrices_per_rank", r->max_matrices_per_rank);
    dmuon_json_kdouble(w, "layer_root_over_largest_unit", r->layer_root_over_largest_unit);
    dmuon_json_kstr(w, "worst_layer", r->worst_layer >= 0 ? p->layer_names[r->worst_layer] : "");
    dmuon_json_kint(w, "byte_cap_fallbacks", (int64_t)r->byte_cap_fallbacks);
    dmuon_json_kbool(w, "bound_optimal", r->bound_optimal);
    dmuon_json_kbool(w, "bound_with_cap", r->bound_with_cap);
    dmuon_json_kstr(w, "ns_unit", ns_unit(o->cost));
    /* the keys ending in _ms carry the cost model's unit, ms only for db
     * and flops */
    dmuon_json_kstr(w, "ms_keys_unit", o->cost == DMUON_COST_ELEMENTS ? "m*n/1e6"
                                       : o->cost == DMUON_COST_M2N    ? "min^2*max/1e9"
                                                                      : "ms");
}
