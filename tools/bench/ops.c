/*
 * ops.c — dmuon-bench's default mode: AllGatherV, ReduceScatterV and the
 * publish against per-owner, coalesced and equal-length MPI baselines, in
 * one table (nccl-tests style).
 *
 *   mpirun -np 8 dmuon-bench --ranks-per-node 2 -b 16K -e 64M -f 2
 *
 * The shared driver: flags, topology, the size loop, timing (barrier, then
 * the slowest rank's time of each iteration; median over iterations, then
 * median over launches; lines interleaved launch by launch so ratios come
 * from the same run), the check after every launch (#wrong, summed over
 * ranks), the table (with nccl-tests' algbw and busbw of ours) and --json /
 * --json-file.  Lines live in ops_<line>.c; plan replay in ops_replay.c.
 *
 * Bandwidths (nccl-tests, doc/PERFORMANCE.md): algbw = bytes / time of ours;
 * busbw = algbw * (N - 1) / N for AllGatherV and ReduceScatterV on N ranks
 * (what each rank's links carry), and algbw * (R - 1) / R for the publish
 * on R nodes (each parameter crosses R - 1 node boundaries).  GB/s = 1e9.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bench.h"
#include "common/opt.h"
#include "dmuon/bf16.h"
#include "dmuon/io.h"
#include "dmuon/layout.h"
#include "dmuon/plan.h"
#include "dmuon/sched.h"
#include "ops.h"
#include "ops_driver.h"

/* ----------------------------------------------------- shared inputs ---- */

float bench_rsv_val(int rank, int seg, int64_t k)
{
    return (float)((int)(((uint64_t)rank * 7 + (uint64_t)seg * 5 + (uint64_t)k * 3) % 9) - 4);
}

float bench_rsv_sum(int nranks, int seg, int64_t k)
{
    int s = 0;
    for (int r = 0; r < nranks; r++)
        s += (int)(((uint64_t)r * 7 + (uint64_t)seg * 5 + (uint64_t)k * 3) % 9) - 4;
    return (float)s;
}

/* ---------------------------------------------------------- timing ---- */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

const bench_line *const bench_lines[BENCH_NLINES] = {&bench_line_ours, &bench_line_per_owner,
                                                     &bench_line_coalesced, &bench_line_equal};
static const char *const op_names[OP_COUNT] = {"agv", "rsv", "publish"};

dmuon_rc bench_measure(bench_opts *o, const bench_case *c, bench_result *res)
{
    const dmuon_topo *t = c->topo;
    int L = o->launches;
    double *per_launch = calloc((size_t)BENCH_NLINES * L, sizeof(double));
    double *iters = calloc((size_t)(o->iters > 0 ? o->iters : 1), sizeof(double));
    if (!per_launch || !iters) {
        free(per_launch);
        free(iters);
        return DMUON_FAIL(DMUON_ENOMEM, "out of memory");
    }
    dmuon_rc rc = DMUON_OK;
    memset(res, 0, sizeof *res);
    for (int l = 0; l < BENCH_NLINES; l++)
        res->ran[l] = (o->lines & (1 << l)) && bench_line_supports(bench_lines[l], c);
    for (int launch = 0; launch < L && rc == DMUON_OK; launch++)
        for (int l = 0; l < BENCH_NLINES && rc == DMUON_OK; l++) {
            if (!res->ran[l])
                continue;
            void *st = NULL;
            DMUON_TRY_GOTO(rc, bench_line_setup(bench_lines[l], c, &st), out);
            for (int w = 0; w < o->warmup && rc == DMUON_OK; w++)
                rc = bench_line_run(bench_lines[l], c, st);
            for (int i = 0; i < o->iters && rc == DMUON_OK; i++) {
                MPI_Barrier(t->world);
                double t0 = MPI_Wtime();
                rc = bench_line_run(bench_lines[l], c, st);
                double dt = MPI_Wtime() - t0;
                MPI_Allreduce(MPI_IN_PLACE, &dt, 1, MPI_DOUBLE, MPI_MAX, t->world);
                iters[i] = dt;
            }
            if (rc != DMUON_OK) {
                dmuon_err_trace_add(rc, __FILE__, __LINE__);
                goto out;   /* no teardown: freeing may be collective */
            }
            long long wrong = (long long)bench_line_check(bench_lines[l], c, st);
            MPI_Allreduce(MPI_IN_PLACE, &wrong, 1, MPI_LONG_LONG, MPI_SUM, t->world);
            res->wrong[l] += wrong;
            bench_line_teardown(bench_lines[l], c, st);
            per_launch[l * L + launch] = median(iters, o->iters);
        }
    for (int l = 0; l < BENCH_NLINES; l++)
        if (res->ran[l])
            res->time_us[l] = 1e6 * median(per_launch + l * L, L);
out:
    free(per_launch);
    free(iters);
    return rc;
}

/* ----------------------------------------------------------- report ---- */

void bench_print_header(const bench_opts *o, const dmuon_topo *t, const char *what)
{
    if (t->rank || o->json_stdout)
        return;
    printf("# dmuon-bench: %d rank%s as %d node%s x %d%s, %s, -w %d -n %d --launches %d%s\n",
           t->size, t->size == 1 ? "" : "s", t->nodes, t->nodes == 1 ? "" : "s", t->per_node,
           t->virtual_nodes ? " (virtual)" : "", what, o->warmup, o->iters, o->launches,
           o->replay_defaults ? " (replay defaults)" : "");
    printf("# time: median over launches of the median over iterations of the slowest rank "
           "(us); xN = baseline time / ours\n");
    printf("# algbw = bytes / time of ours, busbw = algbw x (N-1)/N (agv, rsv; N ranks) or "
           "x (R-1)/R (publish; R nodes), GB/s\n");
    printf("%-8s %12s %5s %11s %11s %11s %11s %8s %8s %8s %8s %8s %7s%s\n", "#op", "bytes",
           "dtype", "ours", "per_owner", "coalesced", "equal_len", "x_owner", "x_coal", "x_equal",
           "algbw", "busbw", "#wrong", o->layer_col ? "  layer" : "");
}

/* nccl-tests' bandwidths of ours (see the top of this file), GB/s; 0 when
 * the time is unknown. */
static void bandwidths(const dmuon_topo *t, int op, int64_t bytes, double time_us, double *alg,
                       double *bus)
{
    *alg = time_us > 0 ? (double)bytes / (time_us * 1e3) : 0;
    int n = op == OP_PUB ? t->nodes : t->size;
    *bus = n > 0 ? *alg * (double)(n - 1) / n : 0;
}

int bench_record(bench_opts *o, const dmuon_topo *t, int op, const char *label, int64_t bytes,
                 dmuon_dtype dt, const bench_result *r)
{
    long long wrong = 0;
    for (int l = 0; l < BENCH_NLINES; l++)
        wrong += r->wrong[l];
    if (t->rank == 0) {
        char cell[BENCH_NLINES][16], ratio[BENCH_NLINES][16];
        for (int l = 0; l < BENCH_NLINES; l++) {
            if (r->ran[l])
                snprintf(cell[l], 16, "%.1f", r->time_us[l]);
            else
                snprintf(cell[l], 16, "n/a");
            if (r->ran[l] && r->ran[0] && r->time_us[0] > 0)
                snprintf(ratio[l], 16, "%.2f", r->time_us[l] / r->time_us[0]);
            else
                snprintf(ratio[l], 16, "n/a");
        }
        double alg = 0, bus = 0;
        char bw[2][16];
        bandwidths(t, op, bytes, r->ran[0] ? r->time_us[0] : 0, &alg, &bus);
        snprintf(bw[0], 16, r->ran[0] ? "%.3f" : "n/a", alg);
        snprintf(bw[1], 16, r->ran[0] ? "%.3f" : "n/a", bus);
        if (o->json_stdout)
            ;   /* rows only, as JSON at the end */
        else if (o->layer_col)
            printf("%-8s %12lld %5s %11s %11s %11s %11s %8s %8s %8s %8s %8s %7lld  %s\n",
                   op_names[op], (long long)bytes, dmuon_dtype_name(dt), cell[0], cell[1],
                   cell[2], cell[3], ratio[1], ratio[2], ratio[3], bw[0], bw[1], wrong,
                   label ? label : "");
        else
            printf("%-8s %12lld %5s %11s %11s %11s %11s %8s %8s %8s %8s %8s %7lld\n",
                   label ? label : op_names[op], (long long)bytes, dmuon_dtype_name(dt), cell[0],
                   cell[1], cell[2], cell[3], ratio[1], ratio[2], ratio[3], bw[0], bw[1], wrong);
        fflush(stdout);
        for (int l = 0; l < BENCH_NLINES; l++) {
            if (!r->ran[l])
                continue;
            bench_row *row = realloc(o->rows, (size_t)(o->nrows + 1) * sizeof *row);
            if (!row)
                break;
            o->rows = row;
            row = &o->rows[o->nrows++];
            row->op = op;
            row->bytes = bytes;
            row->dtype = dt;
            row->line = l;
            row->ranks = t->size;
            row->nodes = t->nodes;
            row->time_us = r->time_us[l];
            row->wrong = r->wrong[l];
            bandwidths(t, op, bytes, r->time_us[l], &row->algbw, &row->busbw);
            snprintf(row->label, sizeof row->label, "%s", label ? label : "");
        }
    }
    return wrong != 0;
}

static dmuon_rc write_rows(FILE *f, void *ctx)
{
    const bench_opts *o = ctx;
    dmuon_json w;
    dmuon_json_init(&w, f, true);
    dmuon_json_begin_array(&w);
    for (int i = 0; i < o->nrows; i++) {
        const bench_row *r = &o->rows[i];
        dmuon_json_begin_object(&w);
        dmuon_json_kstr(&w, "op", op_names[r->op]);
        dmuon_json_kint(&w, "bytes", r->bytes);
        dmuon_json_kstr(&w, "dtype", dmuon_dtype_name(r->dtype));
        dmuon_json_kstr(&w, "line", bench_lines[r->line]->name);
        dmuon_json_kint(&w, "ranks", r->ranks);
        dmuon_json_kint(&w, "nodes", r->nodes);
        dmuon_json_kdouble(&w, "time_us", r->time_us);
        dmuon_json_kdouble(&w, "algbw_gbps", r->algbw);
        dmuon_json_kdouble(&w, "busbw_gbps", r->busbw);
        dmuon_json_kint(&w, "wrong", r->wrong);
        if (r->label[0])
            dmuon_json_kstr(&w, "layer", r->label);
        dmuon_json_end_object(&w);
    }
    dmuon_json_end_array(&w);
    fputc('\n', f);
    return ferror(f) ? DMUON_FAIL(DMUON_EIO, "write failed") : DMUON_OK;
}

/* ------------------------------------------------------------- main ---- */

/* Refuses a --json path that cannot be written before any timing: a
 * directory, a missing or unwritable parent folder, an unwritable file.  The
 * rows are still written atomically at the end. */
static void json_path_check(const char *path, char *bad, size_t n)
{
    struct stat st;
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash)
        snprintf(dir, sizeof dir, ".");
    else if (slash == dir)
        dir[1] = '\0';
    else
        *slash = '\0';
    if (!*path)
        snprintf(bad, n, "--json-file: expected a file name");
    else if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
        snprintf(bad, n, "--json-file %.200s: is a directory, expected a file", path);
    else if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        snprintf(bad, n, "--json-file %.200s: folder %.200s does not exist", path, dir);
    else if (access(dir, W_OK | X_OK) != 0)
        snprintf(bad, n, "--json-file %.200s: folder %.200s is not writable", path, dir);
    else if (access(path, F_OK) == 0 && access(path, W_OK) != 0)
        snprintf(bad, n, "--json-file %.200s: the file is not writable", path);
}

static void usage(FILE *f)
{
    fprintf(f,
"usage: mpirun -np N dmuon-bench [options]\n"
"Times AllGatherV, ReduceScatterV and the HSDP publish (ours) against\n"
"per-owner calls (one Bcast / Reduce per segment), coalesced variable-length\n"
"calls (MPI_Allgatherv / MPI_Reduce_scatter) and equal-length primitives of\n"
"the same total (MPI_Allgather / MPI_Reduce_scatter_block), in one table.\n"
"Every launch checks its result (#wrong, summed over ranks; exit 1 if any).\n"
"\n"
"  -b, --minbytes B       smallest layer (default 16K; sizes: 16K = 16KB = 16KiB,\n"
"                         1G = 1GiB; 1 B to 1 TiB)\n"
"  -e, --maxbytes B       largest layer (default 64M)\n"
"  -f, --stepfactor F     size factor between rows (2 to 1024, default 2)\n"
"  -w, --warmup N         warm-up iterations per launch (0 to 1000000, default 20)\n"
"  -n, --iters N          timed iterations per launch (1 to 1000000, default 30;\n"
"                         as in nccl-tests: -n is not the rank count)\n"
"      --launches N       launches, median taken (1 to 10000, default 5)\n"
"      --ranks-per-node K virtual nodes of K consecutive ranks (with --plan,\n"
"                         default: the plan's gpus_per_node)\n"
"      --backend B        ours on mpi (default), nccl (NCCL host API, GPU) or\n"
"                         nccl-dev (NCCL device API, GPU, one node); on a GPU\n"
"                         backend ours and equal_length (ncclAllGather /\n"
"                         ncclReduceScatter) run unless --lines says otherwise\n"
"                         (per_owner and coalesced are MPI on host memory)\n"
"      --dtype T          bf16 or f32 (default bf16)\n"
"      --op OP            agv, rsv, publish or all (default all)\n"
"      --layout L         node (one owner per node, lengths 1:2:3; default),\n"
"                         rank, sparse or tiny\n"
"      --lines LIST       lines to run: ours,per_owner,coalesced,equal_length\n"
"      --path P           auto, chain or star for ours (default auto)\n"
"      --chunk-bytes B    chunk size of ours (default: the backend's, MPI 64K-128, NCCL 64K; a multiple of 8,\n"
"                         at least 256)\n"
"      --fp32-accum       ours: BF16 reduction with binary32 partials\n"
"      --deadline-ms MS   deadline of one operator call (default\n"
"                         $DMUON_DEADLINE_MS or 600000 (10 min))\n"
"      --json             the rows as one JSON array on stdout instead of the table\n"
"      --json-file FILE   also write the rows as a JSON array to FILE\n"
"      --version          print the dmuon version\n"
"      --plan PLAN        replay every layer of a plan file (agv and rsv; not\n"
"                         with --op publish, -b/-e/-f, --dtype or --layout)\n"
"      --layers A:B       with --plan: only layers A..B-1 (0-based, counting\n"
"                         layers that have segments)\n"
"      --replay-publish PLAN --rail S   replay one rail's publish of a step\n"
"                         (not with --plan)\n"
"  With --plan or --replay-publish, -w/-n/--launches default to 2, 5 and 1\n"
"  (a real plan has hundreds of layers); progress goes to stderr.\n"
"  -h, --help             this text\n"
"Columns: ours / per_owner / coalesced / equal_len are times (us); x_* = baseline\n"
"time / ours; algbw = bytes / time of ours and busbw = algbw x (N-1)/N for agv and\n"
"rsv on N ranks, x (R-1)/R for publish on R nodes (nccl-tests' definitions), in GB/s.\n"
"Sizes the host cannot hold (2 x the largest size per rank, more than MemAvailable)\n"
"are refused before any timing.\n");
}

int bench_ops_main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int wrank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &wrank);
    bench_opts o;
    memset(&o, 0, sizeof o);
    o.minb = 16 * 1024;
    o.maxb = 64 * 1024 * 1024;
    o.factor = 2;
    o.warmup = 20;
    o.iters = 30;
    o.launches = 5;
    o.dtype = DMUON_BF16;
    o.lines = (1 << BENCH_NLINES) - 1;
    o.rail = -1;
    int op_mask = 7;
    dmuon_layout layout = DMUON_LAYOUT_NODE;
    char bad[640] = "";
    enum { O_LAUNCH = 256, O_RPN, O_DTYPE, O_OP, O_LAYOUT, O_LINES, O_PATH, O_CHUNK, O_DEAD,
           O_JSON, O_PLAN, O_REPLAY, O_RAIL, O_FP32, O_LAYERS, O_JSONF, O_BACKEND };
    opdrv_flags df = {.backend = DMUON_BACKEND_MPI};   /* the flags common/opdrv.h parses */
    int lines_given = 0;
    static const struct option opts[] = {
        {"minbytes", required_argument, 0, 'b'}, {"maxbytes", required_argument, 0, 'e'},
        {"stepfactor", required_argument, 0, 'f'}, {"warmup", required_argument, 0, 'w'},
        {"iters", required_argument, 0, 'n'}, {"launches", required_argument, 0, O_LAUNCH},
        {"ranks-per-node", required_argument, 0, O_RPN}, {"dtype", required_argument, 0, O_DTYPE},
        {"op", required_argument, 0, O_OP}, {"layout", required_argument, 0, O_LAYOUT},
        {"lines", required_argument, 0, O_LINES}, {"path", required_argument, 0, O_PATH},
        {"chunk-bytes", required_argument, 0, O_CHUNK}, {"deadline-ms", required_argument, 0, O_DEAD},
        {"json", no_argument, 0, O_JSON}, {"json-file", required_argument, 0, O_JSONF},
        {"plan", required_argument, 0, O_PLAN},
        {"replay-publish", required_argument, 0, O_REPLAY}, {"rail", required_argument, 0, O_RAIL},
        {"fp32-accum", no_argument, 0, O_FP32}, {"layers", required_argument, 0, O_LAYERS},
        {"backend", required_argument, 0, O_BACKEND},
        {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    int opt;
    /* flags given, for the --plan conflicts and the replay defaults */
    const char *size_flag = NULL, *dtype_flag = NULL, *layout_flag = NULL;
    int timing_given = 0, op_publish = 0;
    opterr = 0;   /* our message (with a suggestion), once */
    o.layer_lo = 0;
    o.layer_hi = -1;
    while ((opt = getopt_long(argc, argv, "b:e:f:w:n:h", opts, NULL)) != -1 && !bad[0]) {
        if ((opt == 'b' || opt == 'e' || opt == 'f') && !size_flag)
            size_flag = opt == 'b' ? "-b" : opt == 'e' ? "-e" : "-f";
        if (opt == 'w' || opt == 'n' || opt == O_LAUNCH)
            timing_given |= opt == 'w' ? 1 : opt == 'n' ? 2 : 4;
        if (opt == O_DTYPE)
            dtype_flag = "--dtype";
        if (opt == O_LAYOUT)
            layout_flag = "--layout";
        int64_t v = 0;
        switch (opt) {
        case 'b':
        case 'e':
            if (tool_parse_size(opt == 'b' ? "-b" : "-e", optarg, 1, (int64_t)1 << 40, &v, bad,
                                sizeof bad))
                ;
            else if (opt == 'b')
                o.minb = v;
            else
                o.maxb = v;
            break;
        case 'f':
        case 'w':
        case 'n':
        case O_LAUNCH:
        case O_DEAD:
        case O_RAIL: {
            int64_t x = 0;
            int64_t lo = opt == 'w' || opt == O_RAIL ? 0 : opt == 'f' ? 2 : 1;
            int64_t hi = opt == 'f' ? 1024 : opt == O_LAUNCH ? 10000 : opt == O_DEAD ? 86400000
                       : opt == O_RAIL ? (1 << 20) - 1 : 1000000;
            if (tool_parse_int(opt == 'f' ? "-f" : opt == 'w' ? "-w" : opt == 'n' ? "-n"
                               : opt == O_LAUNCH ? "--launches" : opt == O_DEAD ? "--deadline-ms"
                               : "--rail", optarg, lo, hi, &x, bad, sizeof bad))
                break;
            if (opt == 'f')
                o.factor = (int)x;
            else if (opt == 'w')
                o.warmup = (int)x;
            else if (opt == 'n')
                o.iters = (int)x;
            else if (opt == O_LAUNCH)
                o.launches = (int)x;
            else if (opt == O_DEAD)
                o.deadline_ms = (int)x;
            else
                o.rail = (int)x;
            break;
        }
        case O_RPN:
        case O_BACKEND:
        case O_CHUNK:
            opdrv_flag(opt == O_RPN ? OPDRV_RPN : opt == O_BACKEND ? OPDRV_BACKEND : OPDRV_CHUNK,
                       optarg, (int64_t)1 << 40, &df, bad, sizeof bad);
            if (opt == O_CHUNK && df.chunk_bytes)
                o.chunk_bytes = df.chunk_bytes;
            break;
        case O_DTYPE:
            if (dmuon_dtype_parse(optarg, &o.dtype) != DMUON_OK ||
                (o.dtype != DMUON_BF16 && o.dtype != DMUON_F32))
                snprintf(bad, sizeof bad, "--dtype '%s': expected bf16 or f32", optarg);
            break;
        case O_OP:
            op_mask = !strcasecmp(optarg, "agv") ? 1 : !strcasecmp(optarg, "rsv") ? 2
                    : !strcasecmp(optarg, "publish") ? 4 : !strcasecmp(optarg, "all") ? 7 : 0;
            if (!op_mask)
                snprintf(bad, sizeof bad, "--op '%s': expected agv, rsv, publish or all", optarg);
            op_publish = op_mask == 4;
            break;
        case O_LAYOUT:
            if (dmuon_layout_parse(optarg, &layout) != DMUON_OK)
                snprintf(bad, sizeof bad, "--layout: %s", dmuon_errmsg());
            break;
        case O_LINES: {
            o.lines = 0;
            lines_given = 1;
            char buf[128];
            snprintf(buf, sizeof buf, "%s", optarg);
            for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
                int found = 0;
                for (int l = 0; l < BENCH_NLINES; l++)
                    if (!strcasecmp(tok, bench_lines[l]->name)) {
                        o.lines |= 1 << l;
                        found = 1;
                    }
                if (!found)
                    snprintf(bad, sizeof bad, "--lines: '%s': expected ours, per_owner, "
                             "coalesced or equal_length", tok);
            }
            break;
        }
        case O_PATH:
            if (!strcasecmp(optarg, "auto"))
                o.path = DMUON_PATH_AUTO;
            else if (!strcasecmp(optarg, "chain"))
                o.path = DMUON_PATH_CHAIN;
            else if (!strcasecmp(optarg, "star"))
                o.path = DMUON_PATH_STAR;
            else
                snprintf(bad, sizeof bad, "--path '%s': expected auto, chain or star", optarg);
            break;
        case O_JSON: o.json_stdout = 1; break;
        case O_JSONF: o.json = optarg; break;
        case O_FP32: o.fp32_accum = 1; break;
        case O_PLAN: o.plan = optarg; break;
        case O_REPLAY: o.replay_publish = optarg; break;
        case O_LAYERS: {
            char a[32] = "", *colon = strchr(optarg, ':');
            int64_t x = 0, y = -1;
            snprintf(a, sizeof a, "%.*s", colon ? (int)(colon - optarg) : 0, optarg);
            if (!colon || tool_parse_int("--layers A", a, 0, 999999999, &x, bad, sizeof bad) ||
                tool_parse_int("--layers B", colon + 1, 1, 1000000000, &y, bad, sizeof bad) ||
                y <= x)
                snprintf(bad, sizeof bad, "--layers '%s': expected A:B with 0 <= A < B <= "
                         "1000000000", optarg);
            o.layer_lo = (int)x;
            o.layer_hi = (int)y;
            break;
        }
        case 'h':
            if (wrank == 0)
                usage(stdout);
            MPI_Finalize();
            return 0;
        default: {
            char hint[128];
            snprintf(bad, sizeof bad, "unknown option or missing value '%s'%s (see --help)",
                     argv[optind - 1], tool_suggest_option(argv[optind - 1], opts, hint, sizeof hint));
        }
        }
    }
    if (!bad[0] && optind < argc)
        snprintf(bad, sizeof bad, "unexpected argument '%s' (see --help)", argv[optind]);
    if (!bad[0] && o.minb > o.maxb)
        snprintf(bad, sizeof bad, "-b %lld is larger than -e %lld", (long long)o.minb,
                 (long long)o.maxb);
    if (!bad[0] && o.plan && o.replay_publish)
        snprintf(bad, sizeof bad, "--plan and --replay-publish exclude each other (run one, "
                 "then the other)");
    if (!bad[0] && o.plan) {
        const char *f = op_publish ? "--op publish" : size_flag ? size_flag : dtype_flag
                      ? dtype_flag : layout_flag;
        if (f)
            snprintf(bad, sizeof bad, "%s does not apply to --plan (the plan fixes the layers, "
                     "their sizes, types and layout%s)", f,
                     op_publish ? "; use --replay-publish PLAN --rail S" : "");
    }
    if (!bad[0] && o.replay_publish) {
        const char *f = size_flag ? size_flag : dtype_flag ? dtype_flag : layout_flag;
        if (f)
            snprintf(bad, sizeof bad, "%s does not apply to --replay-publish", f);
    }
    if (!bad[0] && o.layer_hi >= 0 && !o.plan)
        snprintf(bad, sizeof bad, "--layers goes with --plan");
    if (!bad[0] && o.deadline_ms == 0) {
        int d = 0;
        if (dmuon_deadline_ms(0, &d) != DMUON_OK)
            snprintf(bad, sizeof bad, "%s", dmuon_errmsg());
    }
    if (!bad[0] && o.json)
        json_path_check(o.json, bad, sizeof bad);
    if (!bad[0] && (o.plan || o.replay_publish) && timing_given != 7) {
        /* the replay defaults for whichever of -w, -n, --launches is not given */
        if (!(timing_given & 1))
            o.warmup = 2;
        if (!(timing_given & 2))
            o.iters = 5;
        if (!(timing_given & 4))
            o.launches = 1;
        o.replay_defaults = 1;
    }
    if (!bad[0] && o.replay_publish && o.rail < 0)
        snprintf(bad, sizeof bad, "--replay-publish needs --rail S");
    if (!bad[0] && o.rail >= 0 && !o.replay_publish)
        snprintf(bad, sizeof bad, "--rail goes with --replay-publish");
    if (bad[0]) {
        if (wrank == 0)
            fprintf(stderr, "dmuon-bench: error: %s\n", bad);
        MPI_Finalize();
        return 2;
    }

    /* a replayed plan knows its ranks per node */
    const char *env_rpn = getenv("DMUON_RANKS_PER_NODE");
    if (o.plan && df.per_node == 0 && !(env_rpn && *env_rpn)) {
        dmuon_plan *pl = NULL;
        int wsize = 1;
        MPI_Comm_size(MPI_COMM_WORLD, &wsize);
        if (dmuon_plan_load(o.plan, &pl) == DMUON_OK && dmuon_plan_ranks(pl) == wsize &&
            dmuon_plan_nodes(pl) > 1) {
            df.per_node = dmuon_plan_gpus_per_node(pl);
            if (wrank == 0)
                fprintf(stderr, "dmuon-bench: %d ranks per node, from the plan (give "
                        "--ranks-per-node to override)\n", df.per_node);
        }
        dmuon_plan_free(pl);
        dmuon_err_clear();   /* a plan that does not load fails in the replay, with its message */
    }
    dmuon_topo t;
    dmuon_rc rc = dmuon_topo_init(&t, MPI_COMM_WORLD, df.per_node);
    if (rc != DMUON_OK) {
        if (wrank == 0)
            fprintf(stderr, "dmuon-bench: error: %s\n", dmuon_errmsg());
        MPI_Finalize();
        return dmuon_rc_exit_code(rc);
    }
    dmuon_err_set_rank(t.rank);
    t.backend = df.backend;
    if ((rc = dmuon_backend_check(df.backend)) != DMUON_OK) {   /* the same on every rank */
        if (wrank == 0)
            fprintf(stderr, "dmuon-bench: error: %s\n", dmuon_errmsg());
        dmuon_topo_release(&t);
        MPI_Finalize();
        return dmuon_rc_exit_code(rc);
    }
    if (df.backend != DMUON_BACKEND_MPI && !lines_given)
        o.lines = 1 | 8;   /* ours and equal_length (NCCL's primitives on the GPU) */
    if (!o.plan && !o.replay_publish) {
        char what[160];
        if (tool_check_host_memory(t.world, o.maxb, 2, "-e", what, sizeof what)) {
            if (t.rank == 0)
                fprintf(stderr, "dmuon-bench: error: %s\n", what);
            dmuon_topo_release(&t);
            MPI_Finalize();
            return 2;
        }
    }
    int wrong = 0;

    if (o.plan || o.replay_publish) {
        rc = bench_replay(&o, &t, op_mask, &wrong);
    } else {
        char what[128];
        snprintf(what, sizeof what, "layout %s%s", dmuon_layout_name(layout),
                 layout == DMUON_LAYOUT_NODE ? " (one owner per node, lengths 1:2:3)" : "");
        bench_print_header(&o, &t, what);
        for (int op = 0; op < OP_COUNT && rc == DMUON_OK; op++) {
            if (!(op_mask & (1 << op)))
                continue;
            for (int64_t b = o.minb; b <= o.maxb && rc == DMUON_OK; b *= o.factor) {
                dmuon_segment *segs = NULL;
                int n = 0;
                rc = dmuon_layout_make(layout, b, o.dtype, t.nodes, t.per_node, &segs, &n);
                if (rc != DMUON_OK)
                    break;
                bench_case c = {&t, op, segs, n, NULL, NULL, {0}};
                c.gopts.path = o.path;
                c.gopts.chunk_bytes = o.chunk_bytes;
                c.gopts.deadline_ms = o.deadline_ms;
                c.gopts.fp32_accum = o.fp32_accum;
                if (t.rank == 0)
                    fprintf(stderr, "dmuon-bench: %s %lld bytes\n", op_names[op], (long long)b);
                bench_result r;
                rc = bench_measure(&o, &c, &r);
                if (rc == DMUON_OK)
                    wrong |= bench_record(&o, &t, op, NULL, b, o.dtype, &r);
                free(segs);
            }
        }
    }
    if (rc == DMUON_ETIMEOUT || rc == DMUON_ECOMM) {
        fprintf(stderr, "dmuon-bench: error: %s\n", dmuon_errmsg());
        fflush(stderr);
        MPI_Abort(MPI_COMM_WORLD, 3);
    }
    /* Other errors (plan load, topology, --rail) fail on every rank alike:
     * the lowest failing rank prints. */
    int first_bad = rc != DMUON_OK ? t.rank : t.size;
    MPI_Allreduce(MPI_IN_PLACE, &first_bad, 1, MPI_INT, MPI_MIN, t.world);
    if (rc != DMUON_OK) {
        if (t.rank == first_bad)
            fprintf(stderr, "dmuon-bench: error: %s\n", dmuon_errmsg());
        fflush(stderr);
    } else if (t.rank == 0) {
        if (o.json_stdout)
            write_rows(stdout, &o);
        dmuon_rc jr = o.json ? dmuon_write_atomic(o.json, write_rows, &o) : DMUON_OK;
        if (jr != DMUON_OK) {
            fprintf(stderr, "dmuon-bench: error: %s\n", dmuon_errmsg());
            rc = jr;
        }
    }
    int code = rc != DMUON_OK ? dmuon_rc_exit_code(rc) : wrong ? 1 : 0;
    MPI_Allreduce(MPI_IN_PLACE, &code, 1, MPI_INT, MPI_MAX, t.world);
    free(o.rows);
    dmuon_topo_release(&t);
    MPI_Finalize();
    return code;
}
