/*
 * cost.c — per-matrix Newton–Schulz costs: the analytic models and the
 * measured cost table read from SQLite (see dmuon/cost.h).
 *
 * Invariant: a dmuon_cost_table holds exactly one median per distinct Muon
 * shape of the model it was loaded for, sorted by (m, n) for bsearch.
 */
#include "dmuon/cost.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dmuon/device.h"

struct dmuon_cost_table {
    dmuon_shape_count *shapes;   /* count field unused after load */
    double *ms;
    size_t n;
    uint64_t digest;
};

static const char *const kind_names[] = {"db", "flops", "elements", "m2n"};

const char *dmuon_cost_kind_name(dmuon_cost_kind k)
{
    return (unsigned)k < 4 ? kind_names[k] : "invalid";
}

dmuon_rc dmuon_cost_kind_parse(const char *s, dmuon_cost_kind *out)
{
    for (int i = 0; i < 4; i++)
        if (s && !strcmp(s, kind_names[i])) {
            *out = (dmuon_cost_kind)i;
            return DMUON_OK;
        }
    return DMUON_FAIL(DMUON_EINVAL, "cost model '%s': expected db, flops, elements or m2n",
                      s ? s : "");
}

/* ------------------------------------------------------------- analytic -- */

double dmuon_cost_gram_flops(int64_t m, int64_t n)
{
    double s = (double)(m < n ? m : n), l = (double)(m < n ? n : m);
    static const int window_steps[2] = {2, 3};   /* restart after step 2 of 5 */
    double f = 0;
    for (int w = 0; w < 2; w++) {
        int k = window_steps[w];
        f += s * (s + 1) * l;          /* R = X X^T, lower triangle */
        f += 2 * s * s * l;            /* X <- Q X */
        f += k * s * (s + 1) * s;      /* R^2 per step, symmetric */
        f += (k - 1) * 2 * s * s * s;  /* Q <- Q Z, all steps but the first */
        f += (k - 1) * 4 * s * s * s;  /* R <- Z R Z, all steps but the last */
    }
    return f;
}

double dmuon_cost_analytic(dmuon_cost_kind k, int64_t m, int64_t n)
{
    double s = (double)(m < n ? m : n), l = (double)(m < n ? n : m);
    switch (k) {
    case DMUON_COST_FLOPS:
        return dmuon_cost_gram_flops(m, n) / 1e9;
    case DMUON_COST_ELEMENTS:
        return s * l / 1e6;
    case DMUON_COST_M2N:
        return s * s * l / 1e9;
    default:
        return -1;
    }
}

/* ------------------------------------------------------------- database -- */

typedef struct {
    const char *device, *variant, *dtype, *path;
    char devbuf[160];
} resolved;

static dmuon_rc resolve(const dmuon_cost_source *src, resolved *r)
{
    memset(r, 0, sizeof *r);
    r->path = src && src->db_path ? src->db_path : dmuon_costdb_default_path();
    r->variant = src && src->variant ? src->variant : "gram-pe5";
    r->dtype = src && src->dtype ? src->dtype : "fp32";
    if (src && src->device) {
        r->device = src->device;
    } else {
        DMUON_TRY(dmuon_device_name(DMUON_DEVICE_CPU, r->devbuf, sizeof r->devbuf));
        r->device = r->devbuf;
    }
    return DMUON_OK;
}

/* Fills ms[i] for each shape (negative when missing); *db_absent when the
 * database file does not exist. */
static dmuon_rc lookup(const resolved *r, const dmuon_shape_count *s, size_t n, double *ms,
                       bool *db_absent)
{
    dmuon_costdb *db = NULL;
    dmuon_rc rc = DMUON_OK;
    *db_absent = false;
    for (size_t i = 0; i < n; i++)
        ms[i] = -1;
    if (access(r->path, F_OK) != 0) {
        *db_absent = true;
        return DMUON_OK;
    }
    DMUON_TRY(dmuon_costdb_open(r->path, false, 5000, &db));
    for (size_t i = 0; i < n; i++) {
        dmuon_cost_row row;
        rc = dmuon_costdb_get(db, r->device, r->variant, r->dtype, s[i].m, s[i].n, &row);
        if (rc == DMUON_OK) {
            ms[i] = row.median_ms;
        } else if (rc == DMUON_ENOTFOUND) {
            rc = DMUON_OK;
        } else {
            dmuon_err_trace_add(rc, __FILE__, __LINE__);
            break;
        }
    }
    dmuon_costdb_close(db);
    return rc;
}

void dmuon_cost_probe_command(const char *model_path, const dmuon_cost_source *src,
                              const dmuon_shape_count *shapes, size_t n, char *out, size_t cap)
{
    resolved r;
    if (cap == 0)
        return;
    if (resolve(src, &r) != DMUON_OK) {
        r.device = "cpu";
        dmuon_err_clear();
    }
    size_t len = 0;
    int w = snprintf(out, cap, "dmuon-probe --model %s --shapes ", model_path ? model_path : "MODEL");
    len = w > 0 ? (size_t)w : 0;
    for (size_t i = 0; i < n && len < cap; i++) {
        w = snprintf(out + len, cap - len, "%s%lldx%lld", i ? "," : "", (long long)shapes[i].m,
                     (long long)shapes[i].n);
        len += w > 0 ? (size_t)w : 0;
    }
    if (len < cap) {
        w = snprintf(out + len, cap - len, " --db %s", r.path);
        len += w > 0 ? (size_t)w : 0;
    }
    if (len < cap && !strncmp(r.device, "cuda", 4)) {
        w = snprintf(out + len, cap - len, " --device cuda");
        len += w > 0 ? (size_t)w : 0;
    }
    if (len < cap && strcmp(r.variant, "gram-pe5")) {
        w = snprintf(out + len, cap - len, " --variant %s", r.variant);
        len += w > 0 ? (size_t)w : 0;
    }
    if (len < cap && strcmp(r.dtype, "fp32")) {
        w = snprintf(out + len, cap - len, " --dtype %s", r.dtype);
        len += w > 0 ? (size_t)w : 0;
    }
    if (len >= cap && cap > 4)
        strcpy(out + cap - 4, "...");
}

dmuon_rc dmuon_cost_missing(const dmuon_model *model, const dmuon_cost_source *src,
                            dmuon_shape_count **missing, size_t *nmissing)
{
    dmuon_shape_count *s = NULL;
    double *ms = NULL;
    size_t n = 0, k = 0;
    dmuon_rc rc = DMUON_OK;
    resolved r;
    bool absent;
    *missing = NULL;
    *nmissing = 0;
    DMUON_TRY(resolve(src, &r));
    DMUON_TRY(dmuon_model_muon_shapes(model, &s, &n));
    ms = malloc((n ? n : 1) * sizeof *ms);
    if (!ms) {
        rc = DMUON_FAIL(DMUON_ENOMEM, "out of memory");
        goto out;
    }
    DMUON_TRY_GOTO(rc, lookup(&r, s, n, ms, &absent), out);
    for (size_t i = 0; i < n; i++)
        if (ms[i] < 0)
            s[k++] = s[i];
    if (k == 0) {
        free(s);
        s = NULL;
    }
    *missing = s;
    *nmissing = k;
    s = NULL;
out:
    free(s);
    free(ms);
    return rc;
}

dmuon_rc dmuon_cost_table_load(const dmuon_model *model, const dmuon_cost_source *src,
                               dmuon_cost_table **out)
{
    dmuon_rc rc = DMUON_OK;
    resolved r;
    bool absent;
    *out = NULL;
    DMUON_TRY(resolve(src, &r));
    dmuon_cost_table *t = calloc(1, sizeof *t);
    if (!t)
        return DMUON_FAIL(DMUON_ENOMEM, "out of memory");
    DMUON_TRY_GOTO(rc, dmuon_model_muon_shapes(model, &t->shapes, &t->n), fail);
    t->ms = malloc((t->n ? t->n : 1) * sizeof *t->ms);
    if (!t->ms) {
        rc = DMUON_FAIL(DMUON_ENOMEM, "out of memory");
        goto fail;
    }
    DMUON_TRY_GOTO(rc, lookup(&r, t->shapes, t->n, t->ms, &absent), fail);
    size_t nmiss = 0;
    for (size_t i = 0; i < t->n; i++)
        nmiss += t->ms[i] < 0;
    if (nmiss) {
        dmuon_shape_count *miss = malloc(nmiss * sizeof *miss);
        if (!miss) {
            rc = DMUON_FAIL(DMUON_ENOMEM, "out of memory");
            goto fail;
        }
        char list[1024] = "", cmd[4096];
        size_t k = 0, len = 0;
        for (size_t i = 0; i < t->n; i++) {
            if (t->ms[i] >= 0)
                continue;
            miss[k] = t->shapes[i];
            if (k < 16 && len < sizeof list)
                len += (size_t)snprintf(list + len, sizeof list - len, "%s%lldx%lld",
                                        k ? ", " : "", (long long)miss[k].m,
                                        (long long)miss[k].n);
            k++;
        }
        if (k > 16 && len < sizeof list)
            snprintf(list + len, sizeof list - len, " and %zu more", k - 16);
        dmuon_cost_probe_command(dmuon_model_source(model), src, miss, k, cmd, sizeof cmd);
        free(miss);
        rc = DMUON_FAIL(DMUON_ENOTFOUND,
                        "cost database '%s'%s has no %s/%s time on device '%s' for %zu of the "
                        "model's %zu Muon shapes: %s; measure them with: %s   (or plan with "
                        "--cost flops for an analytic estimate, or --probe-missing)",
                        r.path, absent ? " does not exist and" : "", r.variant, r.dtype, r.device,
                        nmiss, t->n, list, cmd);
        goto fail;
    }
    uint64_t h = dmuon_digest(r.device, strlen(r.device) + 1, DMUON_DIGEST_SEED);
    h = dmuon_digest(r.variant, strlen(r.variant) + 1, h);
    h = dmuon_digest(r.dtype, strlen(r.dtype) + 1, h);
    for (size_t i = 0; i < t->n; i++) {
        int64_t mn[2] = {t->shapes[i].m, t->shapes[i].n};
        h = dmuon_digest(mn, sizeof mn, h);
        h = dmuon_digest(&t->ms[i], sizeof t->ms[i], h);
    }
    t->digest = h;
    *out = t;
    return DMUON_OK;
fail:
    dmuon_cost_table_free(t);
    return rc;
}

void dmuon_cost_table_free(dmuon_cost_table *t)
{
    if (!t)
        return;
    free(t->shapes);
    free(t->ms);
    free(t);
}

double dmuon_cost_table_ms(const dmuon_cost_table *t, int64_t m, int64_t n)
{
    size_t lo = 0, hi = t->n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        const dmuon_shape_count *s = &t->shapes[mid];
        if (s->m < m || (s->m == m && s->n < n))
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < t->n && t->shapes[lo].m == m && t->shapes[lo].n == n)
        return t->ms[lo];
    return -1;
}

uint64_t dmuon_cost_table_digest(const dmuon_cost_table *t) { return t->digest; }
