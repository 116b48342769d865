/*
 * probe.c — timing Newton–Schulz per shape and combining the ranks' figures
 * (see dmuon/probe.h; paper Appendix B, "Measurement protocol").
 *
 * Invariants: every rank runs the same sequence of collectives whatever
 * happens locally (a local failure is turned into a flag that all ranks
 * agree on after each phase), so a failing rank never leaves the others
 * waiting; rows_out is filled identically on every rank; nothing is printed.
 */
#include "dmuon/timer.h"
#include "dmuon/ctl.h"
#include "dmuon/model.h"
#include "dmuon/probe.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ns_engine.h"

void dmuon_probe_opts_init(dmuon_probe_opts *o, dmuon_device_kind device)
{
    memset(o, 0, sizeof *o);
    o->device = device;
    o->device_index = -1;
    dmuon_ns_opts_init(&o->ns);
    o->warmup = device == DMUON_DEVICE_CUDA ? 5 : 1;
    o->iters = device == DMUON_DEVICE_CUDA ? 20 : 3;
    o->seed = 1;
}

/* ------------------------------------------------------------- helpers -- */

/* Node-local rank of this process in comm (0 without MPI). */
static dmuon_rc local_rank(MPI_Comm comm, int *out)
{
    *out = 0;
    if (comm == MPI_COMM_NULL)
        return DMUON_OK;
    MPI_Comm node;
    if (MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) != MPI_SUCCESS)
        return DMUON_FAIL(DMUON_ECOMM, "probe: MPI_Comm_split_type failed");
    MPI_Comm_rank(node, out);
    MPI_Comm_free(&node);
    return DMUON_OK;
}

/* Deterministic uniform values in [-1, 1) (xorshift64*). */
static void fill_input(float *x, size_t count, uint64_t seed)
{
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < count; i++) {
        s ^= s >> 12;
        s ^= s << 25;
        s ^= s >> 27;
        uint64_t r = s * 0x2545F4914F6CDD1Dull;
        x[i] = (float)((double)(r >> 11) * (2.0 / 9007199254740992.0) - 1.0);
    }
}

static dmuon_rc check_opts(const dmuon_probe_opts *o)
{
    DMUON_TRY(dmuon_ns_opts_check(&o->ns));
    if (o->warmup < 0)
        return DMUON_FAIL(DMUON_EINVAL, "probe: warmup %d (expected >= 0)", o->warmup);
    if (o->iters < 1)
        return DMUON_FAIL(DMUON_EINVAL, "probe: iters %d (expected >= 1)", o->iters);
    if (o->device != DMUON_DEVICE_CPU && o->device != DMUON_DEVICE_CUDA)
        return DMUON_FAIL(DMUON_EINVAL, "probe: unknown device kind %d", (int)o->device);
    return DMUON_OK;
}

/* Creates the NS context on this rank's device and names the key. */
static dmuon_rc open_device(const dmuon_probe_opts *o, MPI_Comm comm, dmuon_ns **ns,
                            char device[128])
{
    int lr = 0, index = -1;
    *ns = NULL;
    DMUON_TRY(local_rank(comm, &lr));
    const dmuon_ns_engine *eng = dmuon_ns_engine_for(o->device);
    if (eng && o->device != DMUON_DEVICE_CPU) {
        int count = eng->device_count();
        if (o->device_index >= 0)
            index = o->device_index;
        else if (count > 0)
            index = lr % count;   /* no device: dmuon_ns_create reports it */
    }
    DMUON_TRY(dmuon_ns_create(o->device, index, &o->ns, ns));
    dmuon_rc rc = dmuon_device_name(o->device, device, 128);
    if (rc != DMUON_OK) {
        dmuon_ns_free(*ns);
        *ns = NULL;
        return dmuon_err_trace_add(rc, __FILE__, __LINE__);
    }
    return DMUON_OK;
}

/* ----------------------------------------------------------------- API -- */

dmuon_rc dmuon_probe_key(const dmuon_probe_opts *o, MPI_Comm comm, char device[128],
                         char variant[32], char dtype[8])
{
    dmuon_ns *ns = NULL;
    DMUON_TRY(check_opts(o));
    DMUON_TRY(open_device(o, comm, &ns, device));
    dmuon_ns_free(ns);
    dmuon_ns_opts_variant(&o->ns, variant, 32);
    snprintf(dtype, 8, "%s", dmuon_ns_opts_dtype_name(&o->ns));
    return DMUON_OK;
}

/* Times one shape on this rank: fills t[0..iters) with milliseconds. */
static dmuon_rc time_shape(dmuon_ns *ns, const dmuon_probe_opts *o, int64_t m, int64_t n,
                           double *t)
{
    dmuon_rc rc = DMUON_OK;
    const size_t count = (size_t)m * (size_t)n;
    float *host = NULL, *x = NULL, *out = NULL;
    host = malloc(count * sizeof *host);
    if (!host)
        return DMUON_FAIL(DMUON_ENOMEM, "probe: out of memory for a %lld x %lld input",
                          (long long)m, (long long)n);
    fill_input(host, count, o->seed ^ (uint64_t)(m * 1000003 + n));
    DMUON_TRY_GOTO(rc, dmuon_ns_mem_alloc(ns, count, &x), done);
    DMUON_TRY_GOTO(rc, dmuon_ns_mem_alloc(ns, count, &out), done);
    DMUON_TRY_GOTO(rc, dmuon_ns_mem_put(ns, x, host, count), done);
    for (int i = 0; i < o->warmup; i++)
        DMUON_TRY_GOTO(rc, dmuon_ns_run(ns, x, m, n, out), done);
    for (int i = 0; i < o->iters; i++) {
        double t0 = dmuon_now_ms();
        DMUON_TRY_GOTO(rc, dmuon_ns_run(ns, x, m, n, out), done);
        t[i] = dmuon_now_ms() - t0;
    }
done:
    dmuon_ns_mem_free(ns, x);
    dmuon_ns_mem_free(ns, out);
    free(host);
    return rc;
}

dmuon_rc dmuon_probe_shapes(const dmuon_probe_opts *opts, const int64_t (*shapes)[2], size_t n,
                            MPI_Comm comm, dmuon_cost_row *rows_out)
{
    dmuon_rc rc = DMUON_OK;
    dmuon_ns *ns = NULL;
    double *t = NULL, *all = NULL, *med = NULL;
    int nranks = 1;
    char device[128] = "", variant[32], host[64] = "", libs[128];

    if (n > 0)
        memset(rows_out, 0, n * sizeof *rows_out);   /* m == 0: not measured */
    DMUON_TRY(check_opts(opts));
    DMUON_TRY(dmuon_probe_check_shapes(shapes, n));
    if (comm != MPI_COMM_NULL && MPI_Comm_size(comm, &nranks) != MPI_SUCCESS)
        return DMUON_FAIL(DMUON_ECOMM, "probe: MPI_Comm_size failed");

    /* open the device on every rank, then agree */
    rc = open_device(opts, comm, &ns, device);
    if (rc == DMUON_OK) {
        t = malloc((size_t)opts->iters * sizeof *t);
        all = malloc((size_t)nranks * 3 * sizeof *all);
        med = malloc((size_t)nranks * sizeof *med);
        if (!t || !all || !med)
            rc = DMUON_FAIL(DMUON_ENOMEM, "probe: out of memory");
    }
    DMUON_TRY_GOTO(rc, dmuon_agree(comm, rc, 0), done);

    /* every rank must measure the same thing under the same name */
    dmuon_ns_opts_variant(&opts->ns, variant, sizeof variant);
    if (comm != MPI_COMM_NULL) {
        uint64_t d = dmuon_digest(device, strlen(device), DMUON_DIGEST_SEED);
        d = dmuon_digest(variant, strlen(variant), d);
        d = dmuon_digest(&opts->ns.dtype, sizeof opts->ns.dtype, d);
        unsigned long long mine[2] = {d, ~d}, red[2];
        if (MPI_Allreduce(mine, red, 2, MPI_UNSIGNED_LONG_LONG, MPI_MAX, comm) != MPI_SUCCESS)
            DMUON_TRY_GOTO(rc, DMUON_FAIL(DMUON_ECOMM, "probe: MPI_Allreduce failed"), done);
        if (red[0] != d || red[1] != ~d)
            DMUON_TRY_GOTO(rc, DMUON_FAIL(DMUON_EMISMATCH,
                                          "probe: ranks measure different devices or variants "
                                          "(this rank: '%s', %s %s); run one probe per device "
                                          "type",
                                          device, variant, dmuon_ns_opts_dtype_name(&opts->ns)),
                           done);
    }
    gethostname(host, sizeof host - 1);
    dmuon_device_libraries(opts->device, libs, sizeof libs);

    for (size_t i = 0; i < n; i++) {
        const int64_t m = shapes[i][0], k = shapes[i][1];
        /* a stop request on any rank stops every rank before this shape */
        int stop = opts->stop && *opts->stop;
        if (comm != MPI_COMM_NULL)
            MPI_Allreduce(MPI_IN_PLACE, &stop, 1, MPI_INT, MPI_MAX, comm);
        if (stop) {
            rc = DMUON_FAIL(DMUON_EINTR, "probe: stopped on request before %lldx%lld (%zu of "
                            "%zu shapes measured)", (long long)m, (long long)k, i, n);
            goto done;
        }
        rc = time_shape(ns, opts, m, k, t);
        DMUON_TRY_GOTO(rc, dmuon_agree(comm, rc, 0), done);
        double mine[3], lo = t[0], hi = t[0];
        for (int j = 1; j < opts->iters; j++) {
            lo = t[j] < lo ? t[j] : lo;
            hi = t[j] > hi ? t[j] : hi;
        }
        mine[0] = dmuon_median(t, (size_t)opts->iters);
        mine[1] = lo;
        mine[2] = hi;
        if (comm != MPI_COMM_NULL) {
            if (MPI_Allgather(mine, 3, MPI_DOUBLE, all, 3, MPI_DOUBLE, comm) != MPI_SUCCESS)
                DMUON_TRY_GOTO(rc, DMUON_FAIL(DMUON_ECOMM, "probe: MPI_Allgather failed"), done);
        } else {
            memcpy(all, mine, sizeof mine);
        }
        dmuon_cost_row *row = &rows_out[i];
        row->min_ms = all[1];
        row->max_ms = all[2];
        for (int r = 0; r < nranks; r++) {
            med[r] = all[3 * r];
            row->min_ms = all[3 * r + 1] < row->min_ms ? all[3 * r + 1] : row->min_ms;
            row->max_ms = all[3 * r + 2] > row->max_ms ? all[3 * r + 2] : row->max_ms;
        }
        row->median_ms = dmuon_median(med, (size_t)nranks);
        snprintf(row->device, sizeof row->device, "%s", device);
        snprintf(row->variant, sizeof row->variant, "%s", variant);
        snprintf(row->dtype, sizeof row->dtype, "%s", dmuon_ns_opts_dtype_name(&opts->ns));
        snprintf(row->libraries, sizeof row->libraries, "%s", libs);
        snprintf(row->host, sizeof row->host, "%s", host);
        row->m = m;
        row->n = k;
        row->samples = opts->iters;
        row->ranks = nranks;
        if (opts->progress)
            opts->progress(i + 1, n, row, opts->progress_ctx);
    }
done:
    dmuon_ns_free(ns);
    free(t);
    free(all);
    free(med);
    return rc;
}

/* ------------------------------------------------------------- parsing -- */

dmuon_rc dmuon_probe_check_shapes(const int64_t (*shapes)[2], size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (shapes[i][0] < 1 || shapes[i][1] < 1)
            return DMUON_FAIL(DMUON_EINVAL, "probe: shape %zu is %lld x %lld (expected positive "
                              "dimensions)", i + 1, (long long)shapes[i][0],
                              (long long)shapes[i][1]);
        /* dmuon_ns_run's limit, checked before any input is allocated */
        if (shapes[i][0] > INT_MAX / shapes[i][1])
            return DMUON_FAIL(DMUON_EINVAL, "probe: shape %zu is %lld x %lld, more than the "
                              "%d elements one NS call supports", i + 1,
                              (long long)shapes[i][0], (long long)shapes[i][1], INT_MAX);
    }
    return DMUON_OK;
}

dmuon_rc dmuon_probe_parse_shapes(const char *text, int64_t (**shapes)[2], size_t *n)
{
    *shapes = NULL;
    *n = 0;
    const char *p = text ? text : "";
    size_t cap = 1;
    for (const char *q = p; *q; q++)
        cap += *q == ',';
    int64_t(*out)[2] = malloc(cap * sizeof *out);
    if (!out)
        return DMUON_FAIL(DMUON_ENOMEM, "shapes: out of memory");
    size_t count = 0;
    for (;;) {
        long long v[2];
        const char *item = p;
        for (int i = 0; i < 2; i++) {
            char *end;
            errno = 0;
            v[i] = strtoll(p, &end, 10);
            if (end == p || errno || v[i] < 1 || v[i] > INT_MAX || *p == '+' || *p == '-' ||
                (i == 0 && *end != 'x' && *end != 'X') ||
                (i == 1 && *end != ',' && *end != '\0')) {
                int len = (int)strcspn(item, ",");
                free(out);
                return DMUON_FAIL(DMUON_EINVAL,
                                  "shapes: item %zu '%.*s': expected MxN with positive integers "
                                  "(rows x columns, e.g. 1536x8960)",
                                  count + 1, len, item);
            }
            p = end + (i == 0);
        }
        out[count][0] = v[0];
        out[count][1] = v[1];
        count++;
        if (*p == '\0')
            break;
        p++;   /* ',' */
    }
    *shapes = out;
    *n = count;
    return DMUON_OK;
}

dmuon_rc dmuon_probe_model_shapes(const char *path, int64_t (**shapes)[2], size_t *n)
{
    dmuon_model *m = NULL;
    dmuon_shape_count *sc = NULL;
    size_t k = 0;
    *shapes = NULL;
    *n = 0;
    DMUON_TRY(dmuon_model_load(path, NULL, &m));
    dmuon_rc rc = dmuon_model_muon_shapes(m, &sc, &k);
    dmuon_model_free(m);
    if (rc != DMUON_OK)
        return rc;
    if (k == 0) {
        free(sc);
        return DMUON_FAIL(DMUON_EINVAL, "model '%s' has no Muon matrices", path);
    }
    *shapes = malloc(k * sizeof **shapes);
    if (!*shapes) {
        free(sc);
        return DMUON_FAIL(DMUON_ENOMEM, "out of memory listing the shapes of '%s'", path);
    }
    for (size_t i = 0; i < k; i++) {
        (*shapes)[i][0] = sc[i].m;
        (*shapes)[i][1] = sc[i].n;
    }
    *n = k;
    free(sc);
    return DMUON_OK;
}

/* ---------------------------------------------------- the protocol ------ */

double dmuon_probe_spread(const dmuon_cost_row *row)
{
    return row->min_ms > 0 ? row->max_ms / row->min_ms : 1.0;
}

dmuon_rc dmuon_probe_filter_missing(dmuon_costdb *db, const char *device, const char *variant,
                                    const char *dtype, int64_t (*shapes)[2], size_t *n)
{
    size_t k = 0;
    for (size_t i = 0; i < *n; i++) {
        dmuon_cost_row row;
        dmuon_rc g = dmuon_costdb_get(db, device, variant, dtype, shapes[i][0], shapes[i][1],
                                      &row);
        if (g == DMUON_ENOTFOUND) {
            shapes[k][0] = shapes[i][0];
            shapes[k][1] = shapes[i][1];
            k++;
        } else if (g != DMUON_OK) {
            return dmuon_err_trace_add(g, __FILE__, __LINE__);
        }
    }
    *n = k;
    return DMUON_OK;
}

void dmuon_probe_result_release(dmuon_probe_result *res)
{
    if (!res)
        return;
    free(res->shapes);
    free(res->skipped);
    free(res->rows);
    memset(res, 0, sizeof *res);
}

static void stamp_rows(dmuon_cost_row *rows, size_t n)
{
    char stamp[32];
    time_t now = time(NULL);
    struct tm tm;
    strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&now, &tm));
    for (size_t i = 0; i < n; i++)
        snprintf(rows[i].measured_at, sizeof rows[i].measured_at, "%s", stamp);
}

/* rank 0's rc, agreed: every rank returns it (others with rank 0's message
 * copied into res->error). */
static dmuon_rc from_root(MPI_Comm comm, int rank, dmuon_rc rc, dmuon_probe_result *res)
{
    if (rank == 0 && rc != DMUON_OK)
        snprintf(res->error, sizeof res->error, "%s", dmuon_errmsg());
    if (comm == MPI_COMM_NULL)
        return rc;
    int code = (int)rc;
    MPI_Bcast(&code, 1, MPI_INT, 0, comm);
    MPI_Bcast(res->error, (int)sizeof res->error, MPI_CHAR, 0, comm);
    if (rank != 0 && code != DMUON_OK)
        return DMUON_FAIL((dmuon_rc)code, "%s", res->error);
    return (dmuon_rc)code;
}

dmuon_rc dmuon_probe_run(const dmuon_probe_opts *po, const dmuon_probe_run_opts *ro,
                         const int64_t (*shapes)[2], size_t n, MPI_Comm comm,
                         dmuon_probe_result *res)
{
    dmuon_rc rc = DMUON_OK;
    dmuon_costdb *db = NULL;
    int rank = 0;
    const char *path = ro && ro->db_path ? ro->db_path : dmuon_costdb_default_path();
    int64_t max_el = ro ? ro->max_elements : -1;
    memset(res, 0, sizeof *res);
    if (comm != MPI_COMM_NULL)
        MPI_Comm_rank(comm, &rank);
    res->shapes = malloc((n ? n : 1) * sizeof *res->shapes);
    res->skipped = malloc((n ? n : 1) * sizeof *res->skipped);
    if (!res->shapes || !res->skipped)
        return DMUON_FAIL(DMUON_ENOMEM, "probe: out of memory");
    /* 1. without repeats (first occurrence kept), checked, large ones aside */
    for (size_t i = 0; i < n; i++) {
        bool seen = false;
        for (size_t j = 0; j < res->n && !seen; j++)
            seen = res->shapes[j][0] == shapes[i][0] && res->shapes[j][1] == shapes[i][1];
        if (!seen) {
            res->shapes[res->n][0] = shapes[i][0];
            res->shapes[res->n][1] = shapes[i][1];
            res->n++;
        }
    }
    DMUON_TRY(dmuon_probe_check_shapes((const int64_t(*)[2])res->shapes, res->n));
    size_t k = 0;
    for (size_t i = 0; i < res->n; i++) {
        if (max_el >= 0 && res->shapes[i][0] * res->shapes[i][1] > max_el) {
            res->skipped[res->nskipped][0] = res->shapes[i][0];
            res->skipped[res->nskipped][1] = res->shapes[i][1];
            res->nskipped++;
        } else {
            res->shapes[k][0] = res->shapes[i][0];
            res->shapes[k][1] = res->shapes[i][1];
            k++;
        }
    }
    res->n = k;
    res->considered = k;
    /* 2. the device on every rank, before any file is created */
    rc = dmuon_probe_key(po, comm, res->device, res->variant, res->dtype);
    DMUON_TRY(dmuon_agree(comm, rc, 0));
    /* 3. rank 0 opens the database and reads it once */
    if (rank == 0) {
        rc = dmuon_costdb_open(path, true, 30000, &db);
        if (rc == DMUON_OK && dmuon_costdb_readonly(db))
            rc = DMUON_FAIL(DMUON_EIO, "cost database '%s' is read-only (file or directory not "
                            "writable): nothing would be stored; pass a writable --db", path);
        if (rc == DMUON_OK) {
            dmuon_cost_row probe_row;
            dmuon_rc g = dmuon_costdb_get(db, res->device, res->variant, res->dtype, 1, 1,
                                          &probe_row);
            rc = g == DMUON_ENOTFOUND ? DMUON_OK : g;
        }
        /* 4. only what the database lacks */
        if (rc == DMUON_OK && ro && ro->missing)
            rc = dmuon_probe_filter_missing(db, res->device, res->variant, res->dtype,
                                            res->shapes, &res->n);
    }
    DMUON_TRY_GOTO(rc, from_root(comm, rank, rc, res), out);
    if (comm != MPI_COMM_NULL && ro && ro->missing) {
        unsigned long long kk = res->n;
        MPI_Bcast(&kk, 1, MPI_UNSIGNED_LONG_LONG, 0, comm);
        res->n = (size_t)kk;
        MPI_Bcast(res->shapes, (int)(2 * res->n), MPI_INT64_T, 0, comm);
    }
    res->rows = calloc(res->n ? res->n : 1, sizeof *res->rows);
    if (!res->rows)
        rc = DMUON_FAIL(DMUON_ENOMEM, "probe: out of memory");
    DMUON_TRY_GOTO(rc, dmuon_agree(comm, rc, 0), out);
    /* 5. time; 6. store what was measured */
    if (res->n > 0)
        rc = dmuon_probe_shapes(po, (const int64_t(*)[2])res->shapes, res->n, comm, res->rows);
    if (rc != DMUON_OK)
        snprintf(res->error, sizeof res->error, "%s", dmuon_errmsg());
    while (res->measured < res->n && res->rows[res->measured].m > 0)
        res->measured++;
    if (rank == 0 && res->measured > 0) {
        stamp_rows(res->rows, res->measured);
        dmuon_rc s = dmuon_costdb_put_rows(db, res->rows, res->measured);
        if (s == DMUON_OK)
            res->stored = res->measured;
        else
            snprintf(res->store_error, sizeof res->store_error, "%s", dmuon_errmsg());
        if (rc == DMUON_OK && s != DMUON_OK) {
            rc = s;
            snprintf(res->error, sizeof res->error, "%s", res->store_error);
        }
    }
    if (comm != MPI_COMM_NULL) {
        unsigned long long st = res->stored;
        int code = (int)rc;
        MPI_Bcast(&st, 1, MPI_UNSIGNED_LONG_LONG, 0, comm);
        res->stored = (size_t)st;
        MPI_Bcast(res->store_error, (int)sizeof res->store_error, MPI_CHAR, 0, comm);
        /* a store failure on rank 0 fails every rank */
        MPI_Allreduce(MPI_IN_PLACE, &code, 1, MPI_INT, MPI_MAX, comm);
        if (rc == DMUON_OK && code != DMUON_OK)
            rc = DMUON_FAIL((dmuon_rc)code, "probe: rank 0 could not store the rows");
    }
    if (rc != DMUON_OK && res->error[0])
        dmuon_err_set(rc, __FILE__, __LINE__, "%s", res->error);
out:
    dmuon_costdb_close(db);
    return rc;
}
