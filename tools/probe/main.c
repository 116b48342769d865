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
#include <getopt.h>
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dmuon/costdb.h"
#include "dmuon/io.h"
#include "dmuon/ns.h"
#include "dmuon/probe.h"
#include "common/opt.h"


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
    "  --db PATH            cost database (default $DMUON_DB, else db/dmuon.sqlite of this\n"
"                       build tree, else $XDG_DATA_HOME/dmuon/dmuon.sqlite or\n"
"                       ~/.local/share/dmuon/dmuon.sqlite)\n"
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
    "failing shape is named and the exit code is 3.  SIGINT or SIGTERM stops after the\n"
"current shape and stores the shapes measured so far (a second one quits at once);\n"
"the exit code is then 128 + the signal.  A shape whose slowest iteration took more\n"
"than 10x its fastest is named in a warning (another process was using the device).\n"
"--list and --check only read: they never change the database file.\n"
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

/* --------------------------------------------------------------- signals -- */

/* SIGINT/SIGTERM: the first one asks the probe to stop before the next
 * shape (the library agrees on it across ranks) so the shapes measured so
 * far are stored; a second one ends the process at once. */
static volatile sig_atomic_t stop_requested, stop_signal;

static void on_stop(int sig)
{
    if (stop_requested) {
        signal(sig, SIG_DFL);
        raise(sig);
        return;
    }
    stop_requested = 1;
    stop_signal = sig;
    static const char msg[] = "dmuon-probe: stopping after the current shape; the shapes "
                              "measured so far will be stored (again to quit at once)\n";
    if (write(2, msg, sizeof msg - 1) < 0)
        return;
}

static void list_shapes(const dmuon_cost_row *rows, size_t k, char *out, size_t cap)
{
    out[0] = '\0';
    for (size_t i = 0, len = 0; i < k && len < cap; i++)
        len += (size_t)snprintf(out + len, cap - len, "%s%lldx%lld", i ? ", " : "",
                                (long long)rows[i].m, (long long)rows[i].n);
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
        {"version", no_argument, NULL, 'V'}, {NULL, 0, NULL, 0}};
    const char *model = NULL, *shapes_text = NULL, *db_path = dmuon_costdb_default_path();
    const char *variant = "gram-pe5", *dtype = "fp32";
    int warmup = -1, iters = -1;
    int64_t max_el = -1;
    bool list = false, json = false, missing = false, check = false;
    dmuon_device_kind dev = DMUON_DEVICE_CPU;
    char msg[512];
    int c;
    opterr = 0;   /* our message (with a suggestion) */
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        int64_t v;
        switch (c) {
        case 'm': model = optarg; break;
        case 's': shapes_text = optarg; break;
        case 'd':
            if (dmuon_device_parse(optarg, &dev) != DMUON_OK)
                return error(DMUON_EINVAL, dmuon_errmsg());
            break;
        case 'b': db_path = optarg; break;
        case 'v': variant = tool_lower(optarg); break;
        case 't': dtype = tool_lower(optarg); break;
        case 'w':
        case 'i':
            if (tool_parse_int(c == 'w' ? "--warmup" : "--iters", optarg, c == 'w' ? 0 : 1,
                               1000000, &v, msg, sizeof msg))
                return error(DMUON_EINVAL, msg);
            if (c == 'w')
                warmup = (int)v;
            else
                iters = (int)v;
            break;
        case 'x':
            if (tool_parse_int("--max-elements", optarg, 1, INT64_MAX, &v, msg, sizeof msg))
                return error(DMUON_EINVAL, msg);
            max_el = v;
            break;
        case 'V':
            if (rank == 0)
                tool_print_version("dmuon-probe", argc, argv);
            return 0;
        case 'M': missing = true; break;
        case 'l': list = true; break;
        case 'C': check = true; break;
        case 'j': json = true; break;
        case 'h':
            if (rank == 0)
                fputs(usage_text, stdout);
            return 0;
        default:
            if (rank == 0) {
                tool_unknown_option("dmuon-probe", argv[optind - 1], longopts);
                fputs(usage_text, stderr);
            }
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
    po.stop = &stop_requested;

    int64_t(*shapes)[2] = NULL;
    size_t n = 0;
    dmuon_rc rc = shapes_text ? dmuon_probe_parse_shapes(shapes_text, &shapes, &n)
                              : dmuon_probe_model_shapes(model, &shapes, &n);
    if (rc != DMUON_OK)
        return error(rc, dmuon_errmsg());
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);

    dmuon_probe_run_opts ro = {db_path, missing, max_el};
    dmuon_probe_result r;
    rc = dmuon_probe_run(&po, &ro, (const int64_t(*)[2])shapes, n, MPI_COMM_WORLD, &r);
    free(shapes);
    int code = 0;
    if (rank == 0 && missing && r.rows)
        fprintf(stderr, "dmuon-probe: %zu shape%s missing for '%s' %s %s\n", r.n,
                r.n == 1 ? "" : "s", r.device, r.variant, r.dtype);
    if (rank == 0)
        for (size_t i = 0; i < r.nskipped; i++)
            fprintf(stderr, "dmuon-probe: skipping %lldx%lld: %lld elements > --max-elements "
                    "%lld\n", (long long)r.skipped[i][0], (long long)r.skipped[i][1],
                    (long long)(r.skipped[i][0] * r.skipped[i][1]), (long long)max_el);
    if (rank == 0)
        for (size_t i = 0; i < r.measured; i++)
            if (dmuon_probe_spread(&r.rows[i]) > DMUON_PROBE_NOISY_SPREAD)
                fprintf(stderr, "dmuon-probe: warning: %lldx%lld: the slowest iteration took "
                        "%.0fx the fastest (%.4g to %.4g ms): another process was probably "
                        "using the device; re-probe it on an idle machine\n",
                        (long long)r.rows[i].m, (long long)r.rows[i].n,
                        dmuon_probe_spread(&r.rows[i]), r.rows[i].min_ms, r.rows[i].max_ms);
    if (rc != DMUON_OK) {
        char done_list[512];
        code = rc == DMUON_EINTR ? 128 + (int)stop_signal : error(rc, r.error[0] ? r.error
                                                                             : dmuon_errmsg());
        if (rc == DMUON_EINTR && rank == 0)
            fprintf(stderr, "dmuon-probe: interrupted (%s)\n", r.error);
        list_shapes(r.rows, r.measured, done_list, sizeof done_list);
        if (rank == 0 && r.measured == 0 && r.rows)
            fprintf(stderr, "dmuon-probe: no shape was measured; %s is unchanged\n", db_path);
        else if (rank == 0 && r.stored == r.measured && r.measured > 0 && r.measured < r.n)
            fprintf(stderr, "dmuon-probe: %lldx%lld %s; the %zu shape%s measured before it (%s) "
                    "%s stored in %s; rerun with --missing to measure the rest\n",
                    (long long)r.shapes[r.measured][0], (long long)r.shapes[r.measured][1],
                    rc == DMUON_EINTR ? "was not measured" : "failed", r.measured,
                    r.measured == 1 ? "" : "s", done_list, r.measured == 1 ? "is" : "are",
                    db_path);
        else if (rank == 0 && r.measured > 0)
            fprintf(stderr, "dmuon-probe: the %zu shape%s measured before it (%s) could not be "
                    "stored (%s); %s is unchanged\n", r.measured, r.measured == 1 ? "" : "s",
                    done_list, r.store_error, db_path);
        if (code != 2 && r.measured > 0 && rc != DMUON_EINTR)
            code = 3;
        goto done;
    }
    if (rank == 0) {
        if (json) {
            dmuon_json w;
            list_ctx l = {&w, 0};
            dmuon_json_init(&w, stdout, true);
            dmuon_json_begin_object(&w);
            dmuon_json_kstr(&w, "db", db_path);
            dmuon_json_kint(&w, "probed", (int64_t)r.n);
            dmuon_json_key(&w, "rows");
            dmuon_json_begin_array(&w);
            for (size_t i = 0; i < r.n; i++)
                list_row(&r.rows[i], &l);
            dmuon_json_end_array(&w);
            dmuon_json_key(&w, "skipped");
            dmuon_json_begin_array(&w);
            for (size_t i = 0; i < r.nskipped; i++) {
                dmuon_json_begin_object(&w);
                dmuon_json_kint(&w, "m", r.skipped[i][0]);
                dmuon_json_kint(&w, "n", r.skipped[i][1]);
                dmuon_json_end_object(&w);
            }
            dmuon_json_end_array(&w);
            dmuon_json_end_object(&w);
            fputc('\n', stdout);
        } else {
            list_ctx l = {NULL, 0};
            for (size_t i = 0; i < r.n; i++)
                list_row(&r.rows[i], &l);
            for (size_t i = 0; i < r.nskipped; i++)
                printf("# %lldx%lld skipped: %lld elements > --max-elements %lld\n",
                       (long long)r.skipped[i][0], (long long)r.skipped[i][1],
                       (long long)(r.skipped[i][0] * r.skipped[i][1]), (long long)max_el);
            printf("# %zu shape%s probed on %d rank%s, stored in %s\n", r.n, r.n == 1 ? "" : "s",
                   nranks, nranks == 1 ? "" : "s", db_path);
        }
        if (r.n > 0 && dev == DMUON_DEVICE_CPU)
            fprintf(stderr, "dmuon-probe: rows stored under device '%s': dmuon-plan reads them "
                    "when run with the same OpenBLAS thread count%s, or with --device '%s'\n",
                    r.device, getenv("OPENBLAS_NUM_THREADS") ? " (OPENBLAS_NUM_THREADS)"
                    : " (OPENBLAS_NUM_THREADS unset: the cores this process may use)", r.device);
    }
done:
    dmuon_probe_result_release(&r);
    return code;
}

static int tool_main(int argc, char **argv)
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

/* every exit goes through here: output that did not arrive is exit 3 */
int main(int argc, char **argv) { return tool_finish_stdout("dmuon-probe", tool_main(argc, argv)); }
