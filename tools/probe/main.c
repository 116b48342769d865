/*
 * dmuon-probe — measures Newton–Schulz time per matrix shape on this device
 * and stores the figures in the SQLite cost database that dmuon-plan reads.
 *
 * Flags, then libcore, in this order: the device is opened on every rank
 * (dmuon_probe_key) before any file is created; rank 0 opens and reads the
 * database before anything is timed; dmuon_probe_shapes times (median across
 * the ranks of MPI_COMM_WORLD); rank 0 writes all rows of the run in one
 * transaction (dmuon_costdb_put_rows) — when a shape fails part-way, the
 * rows measured before it, then exits 3.  Progress goes to stderr on rank 0;
 * the result table (or --json) to stdout.
 */
#include <errno.h>
#include <getopt.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dmuon/costdb.h"
#include "dmuon/io.h"
#include "dmuon/ns.h"
#include "dmuon/probe.h"


static const char *usage_text =
    "usage: dmuon-probe (--model MODEL | --shapes MxN,...) [options]\n"
    "       dmuon-probe --list [--db PATH] [--json]\n"
    "       dmuon-probe --check [--db PATH]\n"
    "\n"
    "Times Newton-Schulz for each distinct Muon matrix shape of MODEL (or the given\n"
    "shapes) on this device and stores the figures in the cost database.  Under mpirun\n"
    "every rank times on its own device and the median across ranks is stored.\n"
    "\n"
    "  --model MODEL        a Hugging Face config.json, .safetensors / index, or dmuon YAML\n"
    "                       inventory; its distinct Muon shapes are probed\n"
    "  --shapes MxN,...     probe these shapes (M rows x N columns) instead of a model's\n"
    "  --device cpu|cuda    where NS runs (default cpu)\n"
    "  --db PATH            cost database (default $DMUON_DB or db/dmuon.sqlite)\n"
    "  --variant V          gram-pe5 (default), direct-pe5, gram-muon5, direct-muon5\n"
    "  --dtype D            fp32 (default) or bf16\n"
    "  --warmup W           untimed calls per shape (default cpu 1, cuda 5)\n"
    "  --iters I            timed calls per shape (default cpu 3, cuda 20)\n"
    "  --max-elements N     skip shapes with more than N elements (default: none\n"
    "                       skipped); skipped shapes are listed\n"
    "  --missing            probe only shapes the database lacks for this device,\n"
    "                       variant and dtype\n"
    "  --list               print what the database holds and exit\n"
    "  --check              run SQLite's integrity check on the database and exit\n"
    "                       (exit 1 when it reports a problem)\n"
    "  --json               machine-readable output on stdout\n"
    "  -h, --help           this text\n"
    "\n"
    "Rows are keyed by device name, variant, dtype and shape.  The CPU device name is\n"
    "'cpu: <CPU model> x<threads>', the thread count being OpenBLAS's (OPENBLAS_NUM_THREADS):\n"
    "a probe under mpirun with OPENBLAS_NUM_THREADS=1 stores 'cpu: ... x1', and dmuon-plan\n"
    "finds those rows only when run with the same thread count or given that name\n"
    "(--device 'cpu: ... x1').  CUDA devices are 'cuda: <GPU name>'.\n"
    "\n"
    "The device is checked before the database is created, and the database is opened and\n"
    "read before timing starts.  All rows of a run are stored in one transaction; when a\n"
    "shape fails (e.g. out of memory), the shapes measured before it are stored, the\n"
    "failing shape is named and the exit code is 3.\n"
    "\n"
    "Exit: 0 ok, 2 bad input, 3 runtime error (device, database, MPI).\n";

static int rank = 0, nranks = 1;

/* Input errors are the same on every rank: rank 0 reports them.  Runtime
 * errors are reported by each rank that meets one. */
static int error(dmuon_rc rc, const char *msg)
{
    int code = dmuon_rc_exit_code(rc);
    if (rank == 0 || code == 3)
        fprintf(stderr, "dmuon-probe: error: %s\n", msg);
    return code;
}

/* ------------------------------------------------------------------ list -- */

typedef struct {
    dmuon_json *js;
    size_t count;
} list_ctx;

static int list_row(const dmuon_cost_row *r, void *ctx)
{
    list_ctx *l = ctx;
    if (l->js) {
        dmuon_json *w = l->js;
        dmuon_json_begin_object(w);
        dmuon_json_kstr(w, "device", r->device);
        dmuon_json_kstr(w, "variant", r->variant);
        dmuon_json_kstr(w, "dtype", r->dtype);
        dmuon_json_kint(w, "m", r->m);
        dmuon_json_kint(w, "n", r->n);
        dmuon_json_kdouble(w, "median_ms", r->median_ms);
        dmuon_json_kdouble(w, "min_ms", r->min_ms);
        dmuon_json_kdouble(w, "max_ms", r->max_ms);
        dmuon_json_kint(w, "samples", r->samples);
        dmuon_json_kint(w, "ranks", r->ranks);
        dmuon_json_kstr(w, "libraries", r->libraries);
        dmuon_json_kstr(w, "host", r->host);
        dmuon_json_kstr(w, "measured_at", r->measured_at);
        dmuon_json_end_object(w);
    } else {
        if (l->count == 0)
            printf("%-44s %-14s %-5s %13s %11s %11s %11s %5s %5s  %s\n", "device", "variant",
                   "dtype", "shape", "median_ms", "min_ms", "max_ms", "iters", "ranks",
                   "measured_at");
        char shape[48];
        snprintf(shape, sizeof shape, "%lldx%lld", (long long)r->m, (long long)r->n);
        printf("%-44.44s %-14s %-5s %13s %11.4f %11.4f %11.4f %5lld %5lld  %s\n", r->device,
               r->variant, r->dtype, shape, r->median_ms, r->min_ms, r->max_ms,
               (long long)r->samples, (long long)r->ranks, r->measured_at);
    }
    l->count++;
    return 0;
}

static int do_list(const char *db_path, bool json)
{
    dmuon_costdb *db = NULL;
    dmuon_rc rc = dmuon_costdb_open(db_path, false, 10000, &db);
    if (rc != DMUON_OK)
        return error(rc, dmuon_errmsg());
    dmuon_json w;
    list_ctx l = {json ? &w : NULL, 0};
    if (json) {
        dmuon_json_init(&w, stdout, true);
        dmuon_json_begin_object(&w);
        dmuon_json_kstr(&w, "db", db_path);
        dmuon_json_key(&w, "rows");
        dmuon_json_begin_array(&w);
    }
    rc = dmuon_costdb_each(db, NULL, list_row, &l);
    if (json) {
        dmuon_json_end_array(&w);
        dmuon_json_end_object(&w);
        fputc('\n', stdout);
    } else if (rc == DMUON_OK) {
        printf("# %zu rows in %s\n", l.count, db_path);
    }
    dmuon_costdb_close(db);
    return rc == DMUON_OK ? 0 : error(rc, dmuon_errmsg());
}

static int do_check(const char *db_path)
{
    dmuon_costdb *db = NULL;
    dmuon_rc rc = dmuon_costdb_open(db_path, false, 10000, &db);
    if (rc == DMUON_OK)
        rc = dmuon_costdb_check(db);
    dmuon_costdb_close(db);
    if (rc != DMUON_OK)
        return error(rc, dmuon_errmsg());
    printf("%s: integrity check ok\n", db_path);
    return 0;
}

/* -------------------------------------------------------------- progress -- */

static void progress(size_t done, size_t total, const dmuon_cost_row *r, void *ctx)
{
    if (rank != 0)
        return;
    fprintf(stderr, "dmuon-probe: [%zu/%zu] %lldx%lld  median %.4f ms (min %.4f, max %.4f, "
            "%lld rank%s)\n", done, total, (long long)r->m, (long long)r->n, r->median_ms,
            r->min_ms, r->max_ms, (long long)r->ranks, r->ranks == 1 ? "" : "s");
}

/* ------------------------------------------------------------ shape list -- */

/* Removes repeated shapes, keeping the first occurrence. */
static void dedupe(int64_t (*s)[2], size_t *n)
{
    size_t k = 0;
    for (size_t i = 0; i < *n; i++) {
        bool seen = false;
        for (size_t j = 0; j < k && !seen; j++)
            seen = s[j][0] == s[i][0] && s[j][1] == s[i][1];
        if (!seen) {
            s[k][0] = s[i][0];
            s[k][1] = s[i][1];
            k++;
        }
    }
    *n = k;
}

/* Moves the shapes with more than max_el elements (max_el >= 0) from
 * s[0..*n) to skip[0..*nskip), keeping the order of both. */
static void split_large(int64_t (*s)[2], size_t *n, int64_t (*skip)[2], size_t *nskip,
                        long long max_el)
{
    size_t k = 0;
    *nskip = 0;
    for (size_t i = 0; i < *n; i++) {
        if (max_el >= 0 && s[i][0] * s[i][1] > max_el) {
            skip[*nskip][0] = s[i][0];
            skip[*nskip][1] = s[i][1];
            (*nskip)++;
        } else {
            s[k][0] = s[i][0];
            s[k][1] = s[i][1];
            k++;
        }
    }
    *n = k;
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

/* After dmuon_probe_shapes failed (rc): reports the failure, and when shapes
 * were measured before it (their rows have m > 0, see dmuon/probe.h), rank 0
 * stores those rows in one transaction and names them.  Returns the exit
 * code: 3 when anything was measured, else rc's. */
static int stored_before_failure(dmuon_rc rc, dmuon_costdb *db, const char *db_path,
                                 int64_t (*shapes)[2], dmuon_cost_row *rows, size_t n)
{
    char first[1024], list[512] = "";
    size_t k = 0;
    while (k < n && rows[k].m > 0)
        k++;
    snprintf(first, sizeof first, "%s", dmuon_errmsg());
    int code = error(rc, first);
    if (k == 0) {
        if (rank == 0)
            fprintf(stderr, "dmuon-probe: no shape was measured; %s is unchanged\n", db_path);
        return code;
    }
    if (rank != 0)
        return 3;
    for (size_t i = 0, len = 0; i < k && len < sizeof list; i++)
        len += (size_t)snprintf(list + len, sizeof list - len, "%s%lldx%lld", i ? ", " : "",
                                (long long)rows[i].m, (long long)rows[i].n);
    stamp_rows(rows, k);
    dmuon_rc s = dmuon_costdb_put_rows(db, rows, k);
    if (s != DMUON_OK) {
        error(s, dmuon_errmsg());
        fprintf(stderr, "dmuon-probe: the %zu shape%s measured before %lldx%lld failed (%s) "
                "could not be stored; %s is unchanged\n", k, k == 1 ? "" : "s",
                (long long)shapes[k][0], (long long)shapes[k][1], list, db_path);
        return 3;
    }
    fprintf(stderr, "dmuon-probe: %lldx%lld failed; the %zu shape%s measured before it (%s) "
            "%s stored in %s; rerun with --missing to measure the rest\n",
            (long long)shapes[k][0], (long long)shapes[k][1], k, k == 1 ? "" : "s", list,
            k == 1 ? "is" : "are", db_path);
    return 3;
}

/* ------------------------------------------------------------------ main -- */

static int run(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"model", required_argument, NULL, 'm'}, {"shapes", required_argument, NULL, 's'},
        {"device", required_argument, NULL, 'd'}, {"db", required_argument, NULL, 'b'},
        {"variant", required_argument, NULL, 'v'}, {"dtype", required_argument, NULL, 't'},
        {"warmup", required_argument, NULL, 'w'}, {"iters", required_argument, NULL, 'i'},
        {"missing", no_argument, NULL, 'M'}, {"list", no_argument, NULL, 'l'},
        {"check", no_argument, NULL, 'C'}, {"max-elements", required_argument, NULL, 'x'},
        {"json", no_argument, NULL, 'j'}, {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0}};
    const char *model = NULL, *shapes_text = NULL, *db_path = dmuon_costdb_default_path();
    const char *variant = "gram-pe5", *dtype = "fp32";
    int warmup = -1, iters = -1;
    long long max_el = -1;
    bool list = false, json = false, missing = false, check = false;
    dmuon_device_kind dev = DMUON_DEVICE_CPU;
    char msg[512];
    int c;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        char *end;
        long v;
        switch (c) {
        case 'm': model = optarg; break;
        case 's': shapes_text = optarg; break;
        case 'd':
            if (dmuon_device_parse(optarg, &dev) != DMUON_OK)
                return error(DMUON_EINVAL, dmuon_errmsg());
            break;
        case 'b': db_path = optarg; break;
        case 'v': variant = optarg; break;
        case 't': dtype = optarg; break;
        case 'w':
        case 'i':
            v = strtol(optarg, &end, 10);
            if (*end || !*optarg || v < (c == 'w' ? 0 : 1) || v > 1000000) {
                snprintf(msg, sizeof msg, "--%s '%s': expected an integer %s", 
                         c == 'w' ? "warmup" : "iters", optarg,
                         c == 'w' ? ">= 0" : ">= 1");
                return error(DMUON_EINVAL, msg);
            }
            if (c == 'w')
                warmup = (int)v;
            else
                iters = (int)v;
            break;
        case 'x': {
            errno = 0;
            long long e = strtoll(optarg, &end, 10);
            if (*end || !*optarg || *optarg == '-' || errno || e < 1) {
                snprintf(msg, sizeof msg, "--max-elements '%s': expected an integer >= 1",
                         optarg);
                return error(DMUON_EINVAL, msg);
            }
            max_el = e;
            break;
        }
        case 'M': missing = true; break;
        case 'l': list = true; break;
        case 'C': check = true; break;
        case 'j': json = true; break;
        case 'h':
            if (rank == 0)
                fputs(usage_text, stdout);
            return 0;
        default:
            if (rank == 0)
                fputs(usage_text, stderr);
            return 2;
        }
    }
    if (optind < argc) {
        snprintf(msg, sizeof msg, "unexpected argument '%s' (see --help)", argv[optind]);
        return error(DMUON_EINVAL, msg);
    }
    if (list && check)
        return error(DMUON_EINVAL, "--list and --check exclude each other: give one");
    if (check)
        return rank == 0 ? do_check(db_path) : 0;
    if (list)
        return rank == 0 ? do_list(db_path, json) : 0;
    if (model && shapes_text)
        return error(DMUON_EINVAL, "--model and --shapes exclude each other: give one (probe "
                     "two sets with two runs)");
    if (!model && !shapes_text)
        return error(DMUON_EINVAL, "nothing to probe: give --model MODEL or --shapes MxN,...");

    dmuon_probe_opts po;
    dmuon_probe_opts_init(&po, dev);
    if (dmuon_ns_opts_set_variant(&po.ns, variant) != DMUON_OK ||
        dmuon_ns_opts_set_dtype(&po.ns, dtype) != DMUON_OK)
        return error(DMUON_EINVAL, dmuon_errmsg());
    if (warmup >= 0)
        po.warmup = warmup;
    if (iters >= 1)
        po.iters = iters;
    po.progress = progress;

    int64_t(*shapes)[2] = NULL, (*skipped)[2] = NULL;
    size_t n = 0, nskipped = 0;
    dmuon_rc rc = shapes_text ? dmuon_probe_parse_shapes(shapes_text, &shapes, &n)
                              : dmuon_probe_model_shapes(model, &shapes, &n);
    if (rc != DMUON_OK)
        return error(rc, dmuon_errmsg());
    dedupe(shapes, &n);
    if ((rc = dmuon_probe_check_shapes((const int64_t(*)[2])shapes, n)) != DMUON_OK) {
        free(shapes);
        return error(rc, dmuon_errmsg());
    }
    skipped = malloc((n ? n : 1) * sizeof *skipped);
    if (!skipped) {
        free(shapes);
        return error(DMUON_ENOMEM, "out of memory");
    }
    split_large(shapes, &n, skipped, &nskipped, max_el);

    dmuon_costdb *db = NULL;
    dmuon_cost_row *rows = NULL;
    char device[128] = "", var[32] = "", dt[8] = "";
    int code = 0, ok;

    /* 1. the device on every rank, before any file is created: a missing
     *    GPU leaves no empty database behind */
    rc = dmuon_probe_key(&po, MPI_COMM_WORLD, device, var, dt);
    ok = rc == DMUON_OK;
    MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (!ok) {
        code = rc != DMUON_OK ? error(rc, dmuon_errmsg()) : 3;
        goto done;
    }

    /* 2. rank 0 opens the database and reads it once, so a bad path or a
     *    database of another schema fails before minutes of timing */
    if (rank == 0) {
        rc = dmuon_costdb_open(db_path, true, 30000, &db);
        if (rc == DMUON_OK && dmuon_costdb_readonly(db))
            rc = DMUON_FAIL(DMUON_EIO, "cost database '%s' is read-only (file or directory not "
                            "writable): nothing would be stored; pass a writable --db", db_path);
        if (rc == DMUON_OK) {
            dmuon_cost_row probe_row;
            dmuon_rc g = dmuon_costdb_get(db, device, var, dt, 1, 1, &probe_row);
            rc = g == DMUON_ENOTFOUND ? DMUON_OK : g;
        }
    }
    ok = rc == DMUON_OK;
    MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (!ok) {
        code = rank == 0 ? error(rc, dmuon_errmsg()) : 3;
        goto done;
    }
    if (missing) {
        size_t k = 0;
        if (rank == 0) {
            for (size_t i = 0; i < n && rc == DMUON_OK; i++) {
                dmuon_cost_row row;
                dmuon_rc g = dmuon_costdb_get(db, device, var, dt, shapes[i][0], shapes[i][1],
                                              &row);
                if (g == DMUON_ENOTFOUND) {
                    shapes[k][0] = shapes[i][0];
                    shapes[k][1] = shapes[i][1];
                    k++;
                } else if (g != DMUON_OK) {
                    rc = g;
                }
            }
        }
        unsigned long long kk = k;
        ok = rc == DMUON_OK;
        MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
        if (!ok) {
            code = rc != DMUON_OK ? error(rc, dmuon_errmsg()) : 3;
            goto done;
        }
        MPI_Bcast(&kk, 1, MPI_UNSIGNED_LONG_LONG, 0, MPI_COMM_WORLD);
        n = (size_t)kk;
        MPI_Bcast(shapes, (int)(2 * n), MPI_INT64_T, 0, MPI_COMM_WORLD);
        if (rank == 0)
            fprintf(stderr, "dmuon-probe: %zu shape%s missing for '%s' %s %s\n", n,
                    n == 1 ? "" : "s", device, var, dt);
    }
    if (rank == 0)
        for (size_t i = 0; i < nskipped; i++)
            fprintf(stderr, "dmuon-probe: skipping %lldx%lld: %lld elements > --max-elements "
                    "%lld\n", (long long)skipped[i][0], (long long)skipped[i][1],
                    (long long)(skipped[i][0] * skipped[i][1]), max_el);
    rows = calloc(n ? n : 1, sizeof *rows);
    if (!rows) {
        code = error(DMUON_ENOMEM, "out of memory");
        goto done;
    }

    /* 3. time; on a failure part-way, the shapes measured before it are
     *    still stored (one transaction), then the run fails */
    if (n > 0) {
        rc = dmuon_probe_shapes(&po, (const int64_t(*)[2])shapes, n, MPI_COMM_WORLD, rows);
        if (rc != DMUON_OK) {
            code = stored_before_failure(rc, db, db_path, shapes, rows, n);
            goto done;
        }
    }
    if (rank == 0) {
        stamp_rows(rows, n);
        rc = dmuon_costdb_put_rows(db, rows, n);
        if (rc != DMUON_OK) {
            code = error(rc, dmuon_errmsg());
            goto done;
        }
        if (json) {
            dmuon_json w;
            list_ctx l = {&w, 0};
            dmuon_json_init(&w, stdout, true);
            dmuon_json_begin_object(&w);
            dmuon_json_kstr(&w, "db", db_path);
            dmuon_json_kint(&w, "probed", (int64_t)n);
            dmuon_json_key(&w, "rows");
            dmuon_json_begin_array(&w);
            for (size_t i = 0; i < n; i++)
                list_row(&rows[i], &l);
            dmuon_json_end_array(&w);
            dmuon_json_key(&w, "skipped");
            dmuon_json_begin_array(&w);
            for (size_t i = 0; i < nskipped; i++) {
                dmuon_json_begin_object(&w);
                dmuon_json_kint(&w, "m", skipped[i][0]);
                dmuon_json_kint(&w, "n", skipped[i][1]);
                dmuon_json_end_object(&w);
            }
            dmuon_json_end_array(&w);
            dmuon_json_end_object(&w);
            fputc('\n', stdout);
        } else {
            list_ctx l = {NULL, 0};
            for (size_t i = 0; i < n; i++)
                list_row(&rows[i], &l);
            for (size_t i = 0; i < nskipped; i++)
                printf("# %lldx%lld skipped: %lld elements > --max-elements %lld\n",
                       (long long)skipped[i][0], (long long)skipped[i][1],
                       (long long)(skipped[i][0] * skipped[i][1]), max_el);
            printf("# %zu shape%s probed on %d rank%s, stored in %s\n", n, n == 1 ? "" : "s",
                   nranks, nranks == 1 ? "" : "s", db_path);
        }
    }
done:
    dmuon_costdb_close(db);
    free(rows);
    free(shapes);
    free(skipped);
    return code;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    if (nranks > 1)
        dmuon_err_set_rank(rank);
    int code = run(argc, argv);
    /* a rank that failed alone must not leave the others waiting */
    int worst = code;
    MPI_Allreduce(&code, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Finalize();
    return code ? code : worst;
}
