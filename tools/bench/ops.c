/*
 * ops.c — dmuon-bench's default mode: AllGatherV, ReduceScatterV and the
 * publish against per-owner, coalesced and equal-length MPI baselines, in
 * one table (nccl-tests style).
 *
 *   mpirun -np 8 dmuon-bench --ranks-per-node 2 -b 16K -e 64M -f 2
 *
 * On the operator driver (common/opdrv.h: the flags, the cases, the lines,
 * the check), this file adds the timing (barrier, then the slowest rank's
 * time of each iteration, both through dmuon/ctl.h, whose waits give the CPU
 * away: a rank done early must not spin on a core that a slower rank of the
 * same host still needs; median over iterations, then median over
 * launches; lines interleaved launch by launch so ratios come from the same
 * run), the check after every launch (#wrong, summed over ranks), the table
 * (with nccl-tests' algbw and busbw of ours) and --json / --json-file.
 * One line on one case is ops_group.c; plan replay ops_replay.c.
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
#include "dmuon/ctl.h"
#include "dmuon/io.h"
#include "dmuon/segshape.h"
#include "dmuon/plan.h"
#include "dmuon/sched.h"
#include "ops.h"

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

#define op_names opdrv_op_names

dmuon_rc bench_measure(bench_opts *o, const opdrv_case *c, bench_result *res)
{
    const dmuon_topo *t = c->topo;
    const opdrv_opts *f = &o->opt;
    int L = f->launches;
    memset(res, 0, sizeof *res);
    double *per_launch = calloc((size_t)OPDRV_NLINES * L, sizeof(double));
    double *iters = calloc((size_t)(f->iters > 0 ? f->iters : 1), sizeof(double));
    if (!per_launch || !iters) {
        free(per_launch);
        free(iters);
        return DMUON_FAIL(DMUON_ENOMEM, "out of memory");
    }
    dmuon_rc rc = DMUON_OK;
    for (int l = 0; l < OPDRV_NLINES; l++)
        res->ran[l] = (f->lines & (1 << l)) && opdrv_line_supports(opdrv_lines[l], c);
    for (int launch = 0; launch < L && rc == DMUON_OK; launch++)
        for (int l = 0; l < OPDRV_NLINES && rc == DMUON_OK; l++) {
            if (!res->ran[l])
                continue;
            void *st = NULL;
            DMUON_TRY_GOTO(rc, bench_line_setup(opdrv_lines[l], c, &st), out);
            for (int w = 0; w < f->warmup && rc == DMUON_OK; w++)
                rc = bench_line_run(st);
            rc = dmuon_agree(t->world, rc, 0);   /* a warm-up failed anywhere: all stop */
            for (int i = 0; i < f->iters && rc == DMUON_OK; i++) {
                double zero = 0;
                rc = dmuon_ctl_allreduce_f64(t->world, &zero, 1, DMUON_CTL_MAX, 0,
                                             "dmuon-bench: the barrier before an iteration");
                if (rc != DMUON_OK)
                    break;
                double t0 = MPI_Wtime();
                rc = bench_line_run(st);
                /* every rank takes part, a failed one too, and all stop together */
                double v[2] = {MPI_Wtime() - t0, rc != DMUON_OK};
                dmuon_rc slowest = dmuon_ctl_allreduce_f64(t->world, v, 2, DMUON_CTL_MAX, 0,
                                                           "dmuon-bench: the slowest rank's "
                                                           "time");
                if (rc == DMUON_OK && slowest != DMUON_OK)
                    rc = slowest;
                else if (rc == DMUON_OK && v[1] > 0)
                    rc = DMUON_FAIL(DMUON_ECOMM, "dmuon-bench: the operator call failed on "
                                    "another rank");
                iters[i] = v[0];
            }
            if (rc != DMUON_OK) {
                dmuon_err_trace_add(rc, __FILE__, __LINE__);
                goto out;   /* no teardown: freeing may be collective */
            }
            const char *routes = bench_line_routes(st);
            snprintf(res->routes[l], sizeof res->routes[l], "%s", routes ? routes : "");
            int64_t wrong = (int64_t)bench_line_check(st);
            DMUON_TRY_GOTO(rc, dmuon_ctl_allreduce_i64(t->world, &wrong, 1, DMUON_CTL_SUM, 0,
                                                       "dmuon-bench: the count of wrong "
                                                       "elements"), out);
            res->wrong[l] += wrong;
            bench_line_teardown(st);
            per_launch[l * L + launch] = median(iters, f->iters);
        }
    for (int i = 0; i < OPDRV_NLINES * L; i++)
        per_launch[i] *= 1e6;
out:
    if (rc == DMUON_OK) {
        res->launches = L;
        res->launch_us = per_launch;
        rc = bench_result_settle(res);
    } else {
        free(per_launch);
    }
    free(iters);
    return rc;
}

dmuon_rc bench_result_settle(bench_result *r)
{
    double *sorted = calloc(r->launches > 0 ? (size_t)r->launches : 1, sizeof(double));
    if (!sorted)
        return DMUON_FAIL(DMUON_ENOMEM, "out of memory");
    for (int l = 0; l < OPDRV_NLINES; l++)
        if (r->ran[l] && r->launches > 0) {
            memcpy(sorted, r->launch_us + (size_t)l * r->launches,
                   (size_t)r->launches * sizeof *sorted);
            r->time_us[l] = median(sorted, r->launches);   /* sorts in place */
        }
    free(sorted);
    return DMUON_OK;
}

void bench_result_release(bench_result *r)
{
    if (r) {
        free(r->launch_us);
        r->launch_us = NULL;
    }
}

/* ----------------------------------------------------------- report ---- */

void bench_print_header(const bench_opts *o, const dmuon_topo *t, const char *what)
{
    if (t->rank || o->opt.json)
        return;
    printf("# dmuon-bench: %d rank%s as %d node%s x %d%s, %s, -w %d -n %d --launches %d%s\n",
           t->size, t->size == 1 ? "" : "s", t->nodes, t->nodes == 1 ? "" : "s", t->per_node,
           t->virtual_nodes ? " (virtual)" : "", what, o->opt.warmup, o->opt.iters,
           o->opt.launches,
           o->replay_defaults ? " (replay defaults)" : "");
    printf("# time: median over launches of the median over iterations of the slowest rank "
           "(us); xN = baseline time / ours; x_own_range: each launch's x_owner, lowest-highest\n");
    printf("# algbw = bytes / time of ours, busbw = algbw x (N-1)/N (agv, rsv; N ranks) or "
           "x (R-1)/R (publish; R nodes), GB/s\n");
    printf("%-8s %12s %5s %11s %11s %11s %11s %8s %11s %8s %8s %8s %8s %7s%s\n", "#op", "bytes",
           "dtype", "ours", "per_owner", "coalesced", "equal_len", "x_owner", "x_own_range",
           "x_coal", "x_equal", "algbw", "busbw", "#wrong", o->layer_col ? "  layer" : "");
}

/* nccl-tests' bandwidths of ours (see the top of this file), GB/s; 0 when
 * the time is unknown. */
static void bandwidths(const dmuon_topo *t, int op, int64_t bytes, double time_us, double *alg,
                       double *bus)
{
    *alg = time_us > 0 ? (double)bytes / (time_us * 1e3) : 0;
    int n = op == OPDRV_PUB ? t->nodes : t->size;
    *bus = n > 0 ? *alg * (double)(n - 1) / n : 0;
}

int bench_record(bench_opts *o, const dmuon_topo *t, int op, const char *label, int64_t bytes,
                 dmuon_dtype dt, const bench_result *r)
{
    long long wrong = 0;
    for (int l = 0; l < OPDRV_NLINES; l++)
        wrong += r->wrong[l];
    if (t->rank == 0) {
        char cell[OPDRV_NLINES][16], ratio[OPDRV_NLINES][16];
        for (int l = 0; l < OPDRV_NLINES; l++) {
            if (r->ran[l])
                snprintf(cell[l], 16, "%.1f", r->time_us[l]);
            else
                snprintf(cell[l], 16, "n/a");
            if (r->ran[l] && r->ran[0] && r->time_us[0] > 0)
                snprintf(ratio[l], 16, "%.2f", r->time_us[l] / r->time_us[0]);
            else
                snprintf(ratio[l], 16, "n/a");
        }
        /* the spread of x_owner: each launch's per_owner / ours, lowest-highest */
        char spread[32] = "n/a";
        if (r->ran[0] && r->ran[1] && r->launches > 0) {
            double lo = 0, hi = 0;
            for (int i = 0; i < r->launches; i++) {
                double x0 = r->launch_us[i], x1 = r->launch_us[r->launches + i];
                double x = x0 > 0 ? x1 / x0 : 0;
                lo = i == 0 || x < lo ? x : lo;
                hi = i == 0 || x > hi ? x : hi;
            }
            snprintf(spread, sizeof spread, "%.2f-%.2f", lo, hi);
        }
        double alg = 0, bus = 0;
        char bw[2][16];
        bandwidths(t, op, bytes, r->ran[0] ? r->time_us[0] : 0, &alg, &bus);
        snprintf(bw[0], 16, r->ran[0] ? "%.3f" : "n/a", alg);
        snprintf(bw[1], 16, r->ran[0] ? "%.3f" : "n/a", bus);
        /* ours' publish routes, said above the rows whenever they change */
        if (!o->opt.json && r->ran[0] && r->routes[0][0] && strcmp(r->routes[0], o->routes_said)) {
            printf("# publish routes of ours: %s\n", r->routes[0]);
            snprintf(o->routes_said, sizeof o->routes_said, "%s", r->routes[0]);
        }
        if (o->opt.json)
            ;   /* rows only, as JSON at the end */
        else if (o->layer_col)
            printf("%-8s %12lld %5s %11s %11s %11s %11s %8s %11s %8s %8s %8s %8s %7lld  %s\n",
                   op_names[op], (long long)bytes, dmuon_dtype_name(dt), cell[0], cell[1],
                   cell[2], cell[3], ratio[1], spread, ratio[2], ratio[3], bw[0], bw[1], wrong,
                   label ? label : "");
        else
            printf("%-8s %12lld %5s %11s %11s %11s %11s %8s %11s %8s %8s %8s %8s %7lld\n",
                   label ? label : op_names[op], (long long)bytes, dmuon_dtype_name(dt), cell[0],
                   cell[1], cell[2], cell[3], ratio[1], spread, ratio[2], ratio[3], bw[0], bw[1],
                   wrong);
        fflush(stdout);
        for (int l = 0; l < OPDRV_NLINES; l++) {
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
            snprintf(row->routes, sizeof row->routes, "%s", r->routes[l]);
            row->warmup = o->opt.warmup;
            row->iters = o->opt.iters;
            row->launches = 0;
            row->launch_us = r->launches ? malloc((size_t)r->launches * sizeof(double)) : NULL;
            if (row->launch_us) {
                row->launches = r->launches;
                memcpy(row->launch_us, r->launch_us + (size_t)l * r->launches,
                       (size_t)r->launches * sizeof(double));
            }
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
        dmuon_json_kstr(&w, "line", opdrv_lines[r->line]->column);
        dmuon_json_kint(&w, "ranks", r->ranks);
        dmuon_json_kint(&w, "nodes", r->nodes);
        dmuon_json_kdouble(&w, "time_us", r->time_us);
        dmuon_json_kdouble(&w, "algbw_gbps", r->algbw);
        dmuon_json_kdouble(&w, "busbw_gbps", r->busbw);
        dmuon_json_kint(&w, "wrong", r->wrong);
        dmuon_json_kint(&w, "warmup", r->warmup);
        dmuon_json_kint(&w, "iters", r->iters);
        dmuon_json_kint(&w, "launches", r->launches);
        dmuon_json_key(&w, "launch_us");
        dmuon_json_begin_array(&w);
        for (int k = 0; k < r->launches; k++)
            dmuon_json_double(&w, r->launch_us[k]);
        dmuon_json_end_array(&w);
        if (r->label[0])
            dmuon_json_kstr(&w, "layer", r->label);
        if (r->routes[0])
            dmuon_json_kstr(&w, "routes", r->routes);
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
"per-owner calls (one Bcast / Reduce per segment or parameter), coalesced\n"
"variable-length calls (MPI_Allgatherv / MPI_Reduce_scatter) and equal-length primitives of\n"
"the same total (MPI_Allgather / MPI_Reduce_scatter_block), in one table.\n"
"Every launch checks its result (#wrong, summed over ranks; exit 1 if any).\n"
"\n"
"  -b, --minbytes B       smallest layer (default 16K; sizes: 16K = 16KB = 16KiB,\n"
"                         1G = 1GiB; 1 B to 1 TiB)\n"
"  -e, --maxbytes B       largest layer (default 64M)\n"
"  -f, --stepfactor F     size factor between rows (2 to 1024, default 2)\n""      --sizes LIST       the sizes as a list instead (2K,96K,1M+6; not with -b/-e/-f)\n"
"  -w, --warmup N         warm-up iterations per launch (0 to 1000000, default 20)\n"
"  -n, --iters N          timed iterations per launch (1 to 1000000, default 30;\n"
"                         as in nccl-tests: -n is not the rank count)\n"
"      --launches N       launches, median taken (1 to 10000, default 5)\n"
"      --ranks-per-node K virtual nodes of K consecutive ranks (with --plan or\n"
"                         --replay-publish, default: the plan's gpus_per_node)\n"
"      --backend B        ours on mpi (default), nccl (NCCL host API, GPU) or\n"
"                         nccl-dev (NCCL device API, GPU, one node); on a GPU\n"
"                         backend ours and equal_length (ncclAllGather /\n"
"                         ncclReduceScatter) run unless --lines says otherwise\n"
"                         (per_owner and coalesced run where the backend\n"
"                         offers them, when --lines names them; the publish\n"
"                         is timed on mpi only)\n"
"      --dtype T          bf16 or f32 (default bf16)\n"
"      --op OP            agv, rsv, publish or all (default all)\n"
"      --layout L         node (one owner per node, lengths 1:2:3; default),\n"
"                         rank, sparse or tiny\n"
"      --lines LIST       lines to run: ours,per_owner,coalesced,equal_length\n"
"                         (or all; --line, per-owner and equal are the same);\n"
"                         the publish runs on ours, per_owner and coalesced\n"
"                         (the library's; equal_length has no publish form)\n"
"      --path P           auto, chain or star for ours (default auto)\n"
"      --chunk-bytes B    chunk size of ours (default: the backend's, MPI 64K-128, NCCL 64K; a multiple of 8,\n"
"                         at least 256)\n"
"      --slots S          ring slots per incoming reduce stream of ours (default 4)\n"
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
"are refused before any timing.  dmuon-verify's flags (--fault, --steps, -v) are\n"
"refused.\n");
}

/* How many of the lines asked for have a publish form. */
static int publish_lines(const opdrv_opts *f)
{
    int n = 0;
    for (int l = 0; l < OPDRV_NLINES; l++)
        n += (f->lines & (1 << l)) && opdrv_lines[l]->pub_algo != DMUON_ALGO_DEFAULT;
    return n;
}

/* The checks of flags that go together (the option table has parsed each
 * flag on its own); bad filled on the first error. */
static void flags_check(opdrv_opts *f, void *ctx, char *bad, size_t cap)
{
    bench_opts *o = ctx;
    const int op_publish = f->op_mask == 1 << OPDRV_PUB;
    if (f->plan && f->replay_publish)
        snprintf(bad, cap, "--plan and --replay-publish exclude each other (run one, then the "
                 "other)");
    else if (f->plan && (op_publish || f->size_flag || f->dtype_flag || f->layout_flag))
        snprintf(bad, cap, "%s does not apply to --plan (the plan fixes the layers, their "
                 "sizes, types and layout%s)", op_publish ? "--op publish" : f->size_flag
                 ? f->size_flag : f->dtype_flag ? f->dtype_flag : f->layout_flag,
                 op_publish ? "; use --replay-publish PLAN --rail S" : "");
    else if (f->replay_publish && (f->size_flag || f->dtype_flag || f->layout_flag))
        snprintf(bad, cap, "%s does not apply to --replay-publish", f->size_flag ? f->size_flag
                 : f->dtype_flag ? f->dtype_flag : f->layout_flag);
    else if (f->replay_publish && f->op_mask != (1 << OPDRV_NOPS) - 1 && !op_publish)
        snprintf(bad, cap, "--op %s does not apply to --replay-publish (it replays the "
                 "publish; --plan replays the gathers and reductions)",
                 f->op_mask == 1 << OPDRV_AGV ? "agv" : "rsv");
    else if (f->layer_hi >= 0 && !f->plan)
        snprintf(bad, cap, "--layers goes with --plan");
    else if (f->nlayouts > 1)
        snprintf(bad, cap, "%s: dmuon-bench runs one layout (its table has no layout column)",
                 f->layout_flag);
    else if ((op_publish || f->replay_publish) && !publish_lines(f))
        snprintf(bad, cap, "--lines: the publish runs on ours, per_owner and coalesced; "
                 "equal_length has no publish form, so nothing would be timed");
    else if (f->json_file)
        json_path_check(f->json_file, bad, cap);
    if (bad[0])
        return;
    if ((f->plan || f->replay_publish) && f->timing_given != 7) {
        /* the replay defaults for whichever of -w, -n, --launches is not given */
        if (!(f->timing_given & 1))
            f->warmup = 2;
        if (!(f->timing_given & 2))
            f->iters = 5;
        if (!(f->timing_given & 4))
            f->launches = 1;
        o->replay_defaults = 1;
    }
    if (f->replay_publish && f->rail < 0)
        snprintf(bad, cap, "--replay-publish needs --rail S");
    else if (f->rail >= 0 && !f->replay_publish)
        snprintf(bad, cap, "--rail goes with --replay-publish");
}

int bench_ops_main(int argc, char **argv)
{
    bench_opts o;
    memset(&o, 0, sizeof o);
    opdrv_opts *f = &o.opt;
    int code = opdrv_init(OPDRV_BENCH, &argc, &argv, f, usage, flags_check, &o);
    if (code >= 0)
        return code;
    int wrank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &wrank);

    /* a replayed plan knows its ranks per node; a publish replay of an FSDP
     * plan is said to be one (its units replayed as if HSDP published them) */
    const char *env_rpn = getenv("DMUON_RANKS_PER_NODE");
    const char *replayed = f->plan ? f->plan : f->replay_publish;
    if (replayed) {
        dmuon_plan *pl = NULL;
        int wsize = 1;
        MPI_Comm_size(MPI_COMM_WORLD, &wsize);
        if (dmuon_plan_load(replayed, &pl) == DMUON_OK) {
            if (f->per_node == 0 && !(env_rpn && *env_rpn) && dmuon_plan_ranks(pl) == wsize &&
                dmuon_plan_nodes(pl) > 1) {
                f->per_node = dmuon_plan_gpus_per_node(pl);
                if (wrank == 0)
                    fprintf(stderr, "dmuon-bench: %d rank%s per node, from the plan (give "
                            "--ranks-per-node to override)\n", f->per_node,
                            f->per_node == 1 ? "" : "s");
            }
            if (f->replay_publish && dmuon_plan_sharding(pl) != DMUON_SHARD_HSDP && wrank == 0)
                fprintf(stderr, "dmuon-bench: note: %s has sharding %s, which publishes "
                        "nothing in training; its units are replayed as an HSDP publish would "
                        "move them\n", replayed, dmuon_sharding_name(dmuon_plan_sharding(pl)));
        }
        dmuon_plan_free(pl);
        dmuon_err_clear();   /* a plan that does not load fails in the replay, with its message */
    }
    if (f->backend != DMUON_BACKEND_MPI && !f->lines_given)
        f->lines = 1 | 8;   /* ours and equal_length (NCCL's primitives on the GPU) */
    dmuon_topo t;
    if ((code = opdrv_topo_init(f, &t, !f->plan && !f->replay_publish)) >= 0)
        return code;
    dmuon_rc rc = DMUON_OK;
    int wrong = 0;

    if (f->plan || f->replay_publish) {
        rc = bench_replay(&o, &t, &wrong);
    } else {
        char what[128];
        const dmuon_segshape layout = f->layouts[0];
        snprintf(what, sizeof what, "layout %s%s", dmuon_segshape_name(layout),
                 layout == DMUON_SEGSHAPE_NODE ? " (one owner per node, lengths 1:2:3)" : "");
        bench_print_header(&o, &t, what);
        if ((f->op_mask & (1 << OPDRV_PUB)) && !publish_lines(f)) {
            if (t.rank == 0 && !o.opt.json)
                printf("# skip publish: no line of --lines has a publish form (equal_length "
                       "has none)\n");
            f->op_mask &= ~(1 << OPDRV_PUB);
        }
        opdrv_cursor k = {.first = 1};
        int skipped = 0, tried = 0;
        while (rc == DMUON_OK && opdrv_case_next(f, &k)) {
            dmuon_segment *segs = NULL;
            opdrv_case c;
            rc = opdrv_case_make(f, &t, &k, &c, &segs);
            if (rc == DMUON_EINVAL) {
                /* a size this layout cannot hold: the same on every rank */
                if (t.rank == 0)
                    printf("# skip %s bytes=%lld dtype=%s (%s %s): %s\n", op_names[k.op],
                           (long long)f->sizes[k.size], dmuon_dtype_name(f->dtypes[k.dtype]),
                           f->size_flag ? f->size_flag : "--sizes", f->layout_flag ?
                           f->layout_flag : "--layout", opdrv_errmsg_shared());
                skipped++;
                rc = DMUON_OK;
                continue;
            }
            if (rc != DMUON_OK)
                break;
            tried++;
            /* the bytes moved: the tiny layout ignores the size asked for */
            const int64_t bytes = opdrv_case_bytes(&c);
            if (t.rank == 0)
                fprintf(stderr, "dmuon-bench: %s %lld bytes\n", op_names[c.op],
                        (long long)bytes);
            bench_result r;
            rc = bench_measure(&o, &c, &r);
            if (rc == DMUON_OK)
                wrong |= bench_record(&o, &t, c.op, NULL, bytes, f->dtypes[k.dtype], &r);
            bench_result_release(&r);
            free(segs);
        }
        if (rc == DMUON_OK && tried == 0)
            rc = DMUON_FAIL(DMUON_EINVAL, "%s: no size fits layout %s (%d cases skipped): "
                            "nothing was timed", f->size_flag ? f->size_flag : "--sizes",
                            dmuon_segshape_name(layout), skipped);
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
            fprintf(stderr, "dmuon-bench: error: %s\n", opdrv_errmsg_shared());
        fflush(stderr);
    } else if (t.rank == 0) {
        if (f->json)
            write_rows(stdout, &o);
        dmuon_rc jr = f->json_file ? dmuon_write_atomic(f->json_file, write_rows, &o) : DMUON_OK;
        if (jr != DMUON_OK) {
            fprintf(stderr, "dmuon-bench: error: %s\n", dmuon_errmsg());
            rc = jr;
        }
    }
    code = rc != DMUON_OK ? dmuon_rc_exit_code(rc) : wrong ? 1 : 0;
    MPI_Allreduce(MPI_IN_PLACE, &code, 1, MPI_INT, MPI_MAX, t.world);
    for (int i = 0; i < o.nrows; i++)
        free(o.rows[i].launch_us);
    free(o.rows);
    dmuon_topo_release(&t);
    MPI_Finalize();
    return code;
}
