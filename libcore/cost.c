/*
 * cost.c — per-matrix Newton–Schulz costs: the analytic models and the
 * measured cost table read from SQLite (see dmuon/cost.h).
 *
 * Invariant: a dmuon_cost_table holds exactly one median per distinct Muon
 * shape of the model it was loaded for, sorted by (m, n) for bsearch.
 */
#include "dmuon/cost.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
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
        if (s && !strcasecmp(s, kind_names[i])) {
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
    int w;
    /* a model's missing shapes: --model MODEL --missing (dmuon-probe refuses
     * --model together with --shapes); without a model path, the shapes */
    if (model_path) {
        w = snprintf(out, cap, "dmuon-probe --model %s --missing", model_path);
        len = w > 0 ? (size_t)w : 0;
    } else {
        w = snprintf(out, cap, "dmuon-probe --shapes ");
        len = w > 0 ? (size_t)w : 0;
        for (size_t i = 0; i < n && len < cap; i++) {
            w = snprintf(out + len, cap - len, "%s%lldx%lld", i ? "," : "",
                         (long long)shapes[i].m, (long long)shapes[i].n);
            len += w > 0 ? (size_t)w : 0;
        }
    }
    if (len < cap) {
        w = snprintf(out + len, cap - len, " --db %s", r.path);
        len += w > 0 ? (size_t)w : 0;
    }
    /* the kind of device to measure, and whether it is this machine's */
    const char *kind = !strncmp(r.device, "cuda", 4) ? "cuda"
                       : !strncmp(r.device, "cpu", 3) ? "cpu" : NULL;
    bool here = false;
    if (kind) {
        char name[160];
        here = dmuon_device_name(strcmp(kind, "cuda") ? DMUON_DEVICE_CPU : DMUON_DEVICE_CUDA, name,
                                 sizeof name) == DMUON_OK && !strcmp(name, r.device);
        dmuon_err_clear();
        if (len < cap) {
            w = snprintf(out + len, cap - len, " --device %s", kind);
            len += w > 0 ? (size_t)w : 0;
        }
    }
    if (len < cap && (strcmp(r.variant, "gram-pe5") || (src && src->variant))) {
        w = snprintf(out + len, cap - len, " --variant %s", r.variant);
        len += w > 0 ? (size_t)w : 0;
    }
    if (len < cap && strcmp(r.dtype, "fp32")) {
        w = snprintf(out + len, cap - len, " --dtype %s", r.dtype);
        len += w > 0 ? (size_t)w : 0;
    }
    if (len < cap && !here) {
        w = snprintf(out + len, cap - len, "   (run it on a machine whose device is '%s': "
                                           "this machine's %s cannot measure it)",
                     r.device, kind ? kind : "devices");
        len += w > 0 ? (size_t)w : 0;
    }
    if (len >= cap && cap > 4)
        strcpy(out + cap - 4, "...");
}

/* Devices other than r->device whose rows (same variant and dtype) cover
 * some of the k missing shapes: a probe under mpirun stores 'cpu: ... x1'
 * while a plan run alone looks for 'cpu: ... xN'. */
typedef struct {
    const resolved *r;
    const dmuon_shape_count *miss;
    size_t k;
    char cur[128];
    size_t cur_hits;
    char best[128];
    size_t best_hits, devices;
} other_scan;

static void other_close(other_scan *o)
{
    if (o->cur[0] && o->cur_hits) {
        o->devices++;
        if (o->cur_hits > o->best_hits) {
            o->best_hits = o->cur_hits;
            snprintf(o->best, sizeof o->best, "%s", o->cur);
        }
    }
}

static int other_row(const dmuon_cost_row *row, void *ctx)
{
    other_scan *o = ctx;
    if (strcmp(row->device, o->cur)) {   /* rows come ordered by device */
        other_close(o);
        snprintf(o->cur, sizeof o->cur, "%s", row->device);
        o->cur_hits = 0;
    }
    if (!strcmp(row->device, o->r->device) || strcmp(row->variant, o->r->variant) ||
        strcmp(row->dtype, o->r->dtype))
        return 0;
    for (size_t i = 0; i < o->k; i++)
        if (o->miss[i].m == row->m && o->miss[i].n == row->n) {
            o->cur_hits++;
            break;
        }
    return 0;
}

/* Appends "; the database holds N of these shapes for device 'D' ..." to
 * out when another device has rows for them; best effort (errors ignored). */
static void other_devices(const resolved *r, const dmuon_shape_count *miss, size_t k, char *out,
                          size_t cap)
{
    dmuon_costdb *db = NULL;
    other_scan o = {.r = r, .miss = miss, .k = k};
    out[0] = '\0';
    if (access(r->path, F_OK) != 0 || dmuon_costdb_open(r->path, false, 5000, &db) != DMUON_OK) {
        dmuon_err_clear();
        return;
    }
    if (dmuon_costdb_each(db, NULL, other_row, &o) == DMUON_OK) {
        other_close(&o);
        if (o.best_hits)
            snprintf(out, cap, "; the database holds %zu of these shapes for device '%s'%s "
                     "(a probe under mpirun or with another OPENBLAS_NUM_THREADS stores another "
                     "thread count): plan with --device '%s' to use them", o.best_hits, o.best,
                     o.devices > 1 ? " and others" : "", o.best);
    }
    dmuon_err_clear();
    dmuon_costdb_close(db);
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
        char other[512];
        dmuon_cost_probe_command(dmuon_model_source(model), src, miss, k, cmd, sizeof cmd);
        other_devices(&r, miss, k, other, sizeof other);
        free(miss);
        rc = DMUON_FAIL(DMUON_ENOTFOUND,
                        "cost database '%s'%s has no %s/%s time on device '%s' for %zu of the "
                        "model's %zu Muon shapes: %s%s; measure them with: %s   (or plan with "
                        "--cost flops for an analytic estimate, or --probe-missing)",
                        r.path, absent ? " does not exist and" : "", r.variant, r.dtype, r.device,
                        nmiss, t->n, list, other, cmd);
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

/* ------------------------------------------------------ device names -- */

typedef struct {
    const char *want;
    bool found;
    char list[512];
    size_t len, n;
    char last[128];
} device_scan;

static int scan_device(const dmuon_cost_row *row, void *ctx)
{
    device_scan *s = ctx;
    if (!strcmp(row->device, s->want)) {
        s->found = true;
        return 1;
    }
    if (strcmp(row->device, s->last)) {   /* rows come ordered by device */
        snprintf(s->last, sizeof s->last, "%s", row->device);
        if (s->len < sizeof s->list)
            s->len += (size_t)snprintf(s->list + s->len, sizeof s->list - s->len, "%s'%s'",
                                       s->n ? ", " : "", row->device);
        s->n++;
    }
    return 0;
}

dmuon_rc dmuon_cost_device_check(const char *db_path, const char *device)
{
    const char *path = db_path ? db_path : dmuon_costdb_default_path();
    if (access(path, F_OK) != 0)
        return DMUON_FAIL(DMUON_ENOTFOUND, "device '%s': the cost database '%s' does not exist "
                                           "(expected --device cpu, cuda, or a device name "
                                           "stored in the database)", device, path);
    dmuon_costdb *db;
    DMUON_TRY(dmuon_costdb_open(path, false, 5000, &db));
    device_scan s = {.want = device};
    dmuon_rc rc = dmuon_costdb_each(db, NULL, scan_device, &s);
    dmuon_costdb_close(db);
    DMUON_TRY(rc);
    if (!s.found)
        return DMUON_FAIL(DMUON_ENOTFOUND, "device '%s' has no rows in the cost database '%s' "
                                           "(expected --device cpu, cuda, or one of the stored "
                                           "devices: %s)", device, path,
                          s.n ? s.list : "none");
    return DMUON_OK;
}

dmuon_rc dmuon_cost_device_resolve(const char *arg, const char *db_path, char out[160],
                                   dmuon_device_kind *kind, bool *local)
{
    dmuon_device_kind k = DMUON_DEVICE_CPU;
    if (!arg || dmuon_device_parse(arg, &k) == DMUON_OK) {
        DMUON_TRY(dmuon_device_name(k, out, 160));
        *kind = k;
        *local = true;
        return DMUON_OK;
    }
    dmuon_err_clear();
    DMUON_TRY(dmuon_cost_device_check(db_path, arg));
    snprintf(out, 160, "%s", arg);
    *kind = !strncmp(arg, "cuda", 4) ? DMUON_DEVICE_CUDA : DMUON_DEVICE_CPU;
    *local = false;
    return DMUON_OK;
}
