/*
 * predict.c — dmuon-bench predict: the network model (dmuon/netmodel.h)
 * fitted on some measured or published cells and checked on the others.
 *
 *   dmuon-bench predict --preset namespace --cells 2x2.json --cells 4x2.json \
 *       --cells 8x1.json --fit-nodes 2,4 --json-file pred.json --svg pred.svg
 *   dmuon-bench predict --preset h100 --cells tools/bench/paper/tables.json \
 *       --fit-nodes 2 --plans build/paper-plans
 *
 * Cells are dmuon-bench --json rows (op, bytes, dtype, line, ranks, nodes,
 * time_us; the paper's tables in the same form, Table 7's rows with "model"
 * and "sharding").  Rows of one (op, bytes, nodes, ranks, model) are one
 * cell group; its table is rebuilt as the benchmark built it (the node
 * layout of dmuon/layout.h; Table 7: rail 0's units of the model's HSDP plan
 * PLANS/MODEL-RxK.plan in layer order, as --replay-publish posts them).
 * Groups with nodes in --fit-nodes fit the free parameters of the preset;
 * every group gets predicted times and the ratios baseline ÷ ours, with
 * their error against the measured or published ones.
 */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../common/opt.h"
#include "bench.h"
#include "dmuon/doc.h"
#include "dmuon/io.h"
#include "dmuon/layout.h"
#include "dmuon/netmodel.h"
#include "dmuon/plan.h"

#define MAX_FILES 16
#define MAX_FIT 16

typedef struct {
    dmuon_net_op op;
    int64_t bytes;
    int nodes, ranks;
    char model[64], sharding[16];
    double meas[DMUON_NET_LINE_COUNT];   /* seconds; 0 = none */
    double pred[DMUON_NET_LINE_COUNT];
    int fit;
    dmuon_segment *segs;
    int n;
    int *layer_of;
    dmuon_net_case c;
} group;

typedef struct {
    group *g;
    int n;
    const char *prog;
} cells;

static const char *op_name(dmuon_net_op op)
{
    return op == DMUON_NET_AGV ? "agv" : op == DMUON_NET_RSV ? "rsv" : "publish";
}

/* --------------------------------------------------------- reading ---- */

static dmuon_rc read_rows(cells *cs, const char *path)
{
    dmuon_doc doc;
    DMUON_TRY(dmuon_doc_load_file(&doc, path));
    dmuon_rc rc = DMUON_OK;
    yaml_node_t *root = dmuon_doc_root(&doc);
    if (!root || root->type != YAML_SEQUENCE_NODE) {
        rc = DMUON_FAIL(DMUON_EPARSE, "%s: expected a JSON array of rows (dmuon-bench --json)",
                        path);
        goto done;
    }
    for (size_t i = 0; i < dmuon_doc_seq_len(root); i++) {
        yaml_node_t *m = dmuon_doc_seq_at(&doc, root, i);
        const char *op = NULL, *line = NULL, *model = "", *sharding = "", *layer = "";
        int64_t bytes = 0, nodes = 0, ranks = 0;
        double us = 0;
        DMUON_TRY_GOTO(rc, dmuon_doc_field_str(&doc, m, "op", true, &op), done);
        DMUON_TRY_GOTO(rc, dmuon_doc_field_str(&doc, m, "line", true, &line), done);
        DMUON_TRY_GOTO(rc, dmuon_doc_field_int(&doc, m, "bytes", true, &bytes), done);
        DMUON_TRY_GOTO(rc, dmuon_doc_field_int(&doc, m, "nodes", true, &nodes), done);
        DMUON_TRY_GOTO(rc, dmuon_doc_field_int(&doc, m, "ranks", true, &ranks), done);
        DMUON_TRY_GOTO(rc, dmuon_doc_field_double(&doc, m, "time_us", true, &us), done);
        DMUON_TRY_GOTO(rc, dmuon_doc_field_str(&doc, m, "model", false, &model), done);
        DMUON_TRY_GOTO(rc, dmuon_doc_field_str(&doc, m, "sharding", false, &sharding), done);
        DMUON_TRY_GOTO(rc, dmuon_doc_field_str(&doc, m, "layer", false, &layer), done);
        int ln = dmuon_doc_line(m);
        dmuon_net_op o;
        if (!strcmp(op, "agv"))
            o = DMUON_NET_AGV;
        else if (!strcmp(op, "rsv"))
            o = DMUON_NET_RSV;
        else if (!strcmp(op, "publish"))
            o = DMUON_NET_PUBLISH;
        else {
            rc = DMUON_FAIL(DMUON_EPARSE, "%s:%d: op '%s': expected agv, rsv or publish", path,
                            ln, op);
            goto done;
        }
        dmuon_net_line l;
        if (dmuon_net_line_parse(line, &l) != DMUON_OK) {
            rc = DMUON_FAIL(DMUON_EPARSE, "%s:%d: line '%s': expected ours, per_owner, "
                            "coalesced, equal_length or root", path, ln, line);
            goto done;
        }
        if (nodes < 1 || ranks < nodes || ranks % nodes || ranks > 1 << 16 || !(us > 0) ||
            bytes < 0 || (o != DMUON_NET_PUBLISH && bytes < 1)) {
            rc = DMUON_FAIL(DMUON_EPARSE, "%s:%d: expected nodes >= 1 dividing ranks, bytes > 0 "
                            "and time_us > 0", path, ln);
            goto done;
        }
        /* a plan replay without the model's name cannot be rebuilt */
        if (layer[0] && !model[0])
            continue;
        group *g = NULL;
        for (int k = 0; k < cs->n && !g; k++)
            if (cs->g[k].op == o && cs->g[k].bytes == bytes && cs->g[k].nodes == nodes &&
                cs->g[k].ranks == ranks && !strcmp(cs->g[k].model, model))
                g = &cs->g[k];
        if (!g) {
            group *ng = realloc(cs->g, (size_t)(cs->n + 1) * sizeof *ng);
            if (!ng) {
                rc = DMUON_FAIL(DMUON_ENOMEM, "out of memory");
                goto done;
            }
            cs->g = ng;
            g = &cs->g[cs->n++];
            memset(g, 0, sizeof *g);
            g->op = o;
            g->bytes = bytes;
            g->nodes = (int)nodes;
            g->ranks = (int)ranks;
            snprintf(g->model, sizeof g->model, "%s", model);
            snprintf(g->sharding, sizeof g->sharding, "%s", sharding);
        }
        g->meas[l] = us * 1e-6;
    }
done:
    dmuon_doc_release(&doc);
    return rc;
}

typedef struct {
    int unit, layer;
} post;

static int post_cmp(const void *a, const void *b)
{
    const post *x = a, *y = b;
    if (x->layer != y->layer)
        return x->layer < y->layer ? -1 : 1;
    return x->unit - y->unit;
}

/* Rail 0's publish of a plan, in the order --replay-publish posts it. */
static dmuon_rc plan_rail(group *g, const char *dir)
{
    char path[1024];
    int K = g->ranks / g->nodes;
    snprintf(path, sizeof path, "%s/%s-%dx%d.plan", dir, g->model, g->nodes, K);
    if (access(path, R_OK) != 0)
        return DMUON_FAIL(DMUON_ENOTFOUND, "%s: no such plan (tools/bench/paper/plans.sh "
                          "writes the plans of the paper's Table 7)", path);
    dmuon_plan *p = NULL;
    DMUON_TRY(dmuon_plan_load(path, &p));
    dmuon_rc rc = DMUON_OK;
    if (dmuon_plan_nodes(p) != g->nodes || dmuon_plan_gpus_per_node(p) != K) {
        rc = DMUON_FAIL(DMUON_EMISMATCH, "%s: the plan is for %d nodes x %d, the cell for %d x %d",
                        path, (int)dmuon_plan_nodes(p), (int)dmuon_plan_gpus_per_node(p),
                        g->nodes, K);
        goto done;
    }
    size_t nu = 0;
    const dmuon_plan_unit *u = dmuon_plan_units(p, &nu);
    post *order = calloc(nu ? nu : 1, sizeof *order);
    g->segs = calloc(nu ? nu : 1, sizeof *g->segs);
    g->layer_of = calloc(nu ? nu : 1, sizeof *g->layer_of);
    if (!order || !g->segs || !g->layer_of) {
        free(order);
        rc = DMUON_FAIL(DMUON_ENOMEM, "out of memory");
        goto done;
    }
    int n = 0;
    for (size_t i = 0; i < nu; i++)
        if (u[i].column == 0) {
            order[n].unit = (int)i;
            order[n].layer = u[i].layer;
            n++;
        }
    qsort(order, (size_t)n, sizeof *order, post_cmp);
    dmuon_dtype dt = dmuon_plan_param_dtype(p);
    int64_t total = 0;
    for (int j = 0; j < n; j++) {
        const dmuon_plan_unit *x = &u[order[j].unit];
        g->segs[j].owner = x->owner;
        g->segs[j].dtype = dt;
        g->segs[j].count = x->bytes / (int64_t)dmuon_dtype_size(dt);
        g->segs[j].offset = total;
        total += g->segs[j].count * (int64_t)dmuon_dtype_size(dt);
        g->layer_of[j] = order[j].layer;
    }
    free(order);
    g->n = n;
    g->bytes = total;
    if (n == 0)
        rc = DMUON_FAIL(DMUON_EINVAL, "%s: no unit publishes on rail 0", path);
done:
    dmuon_plan_free(p);
    return rc;
}

static dmuon_rc build_case(group *g, const char *plans, const dmuon_sched_opts *so)
{
    int K = g->ranks / g->nodes;
    if (g->model[0]) {
        if (!plans)
            return DMUON_FAIL(DMUON_EINVAL, "the cells of model %s need --plans DIR", g->model);
        DMUON_TRY(plan_rail(g, plans));
    } else {
        DMUON_TRY(dmuon_layout_make(DMUON_LAYOUT_NODE, g->bytes, DMUON_BF16, g->nodes, K, &g->segs,
                                    &g->n));
    }
    g->c.op = g->op;
    g->c.nodes = g->nodes;
    g->c.per_node = K;
    g->c.segs = g->segs;
    g->c.n = g->n;
    g->c.layer_of = g->layer_of;
    g->c.sched_opts = so;
    return DMUON_OK;
}

/* ---------------------------------------------------------- output ---- */

typedef struct {
    const char *preset;
    const dmuon_net_params *p;
    const cells *cs;
    const int *fit_nodes;
    int nfit;
    double rms;
    int nfit_cells;
} report;

static double ratio_err(const group *g, int l, double *meas, double *pred)
{
    *meas = g->meas[l] / g->meas[DMUON_NET_OURS];
    *pred = g->pred[l] / g->pred[DMUON_NET_OURS];
    return *pred / *meas - 1;
}

static int has_ratio(const group *g, int l)
{
    return l != DMUON_NET_OURS && g->meas[l] > 0 && g->meas[DMUON_NET_OURS] > 0;
}

static dmuon_rc write_json(FILE *f, void *ctx)
{
    const report *r = ctx;
    dmuon_json w;
    dmuon_json_init(&w, f, true);
    dmuon_json_begin_object(&w);
    dmuon_json_kstr(&w, "preset", r->preset);
    dmuon_json_key(&w, "params");
    dmuon_json_begin_object(&w);
    for (int i = 0; i < DMUON_NP_COUNT; i++)
        dmuon_json_kdouble(&w, dmuon_net_param_name(i), r->p->v[i]);
    dmuon_json_kbool(&w, "mcast", r->p->mcast);
    dmuon_json_end_object(&w);
    dmuon_json_key(&w, "fit");
    dmuon_json_begin_object(&w);
    dmuon_json_key(&w, "nodes");
    dmuon_json_begin_array(&w);
    for (int i = 0; i < r->nfit; i++)
        dmuon_json_int(&w, r->fit_nodes[i]);
    dmuon_json_end_array(&w);
    dmuon_json_kint(&w, "cells", r->nfit_cells);
    dmuon_json_kdouble(&w, "rms_log_error", r->rms);
    dmuon_json_end_object(&w);
    dmuon_json_key(&w, "cells");
    dmuon_json_begin_array(&w);
    for (int k = 0; k < r->cs->n; k++) {
        const group *g = &r->cs->g[k];
        for (int l = 0; l < DMUON_NET_LINE_COUNT; l++) {
            if (!(g->meas[l] > 0))
                continue;
            dmuon_json_begin_object(&w);
            dmuon_json_kstr(&w, "op", op_name(g->op));
            dmuon_json_kint(&w, "bytes", g->bytes);
            dmuon_json_kint(&w, "nodes", g->nodes);
            dmuon_json_kint(&w, "ranks", g->ranks);
            if (g->model[0])
                dmuon_json_kstr(&w, "model", g->model);
            dmuon_json_kstr(&w, "line", dmuon_net_line_name((dmuon_net_line)l));
            dmuon_json_kdouble(&w, "measured_us", g->meas[l] * 1e6);
            dmuon_json_kdouble(&w, "predicted_us", g->pred[l] * 1e6);
            dmuon_json_kdouble(&w, "error", g->pred[l] / g->meas[l] - 1);
            dmuon_json_kbool(&w, "fit", g->fit);
            dmuon_json_end_object(&w);
        }
    }
    dmuon_json_end_array(&w);
    dmuon_json_key(&w, "ratios");
    dmuon_json_begin_array(&w);
    for (int k = 0; k < r->cs->n; k++) {
        const group *g = &r->cs->g[k];
        for (int l = 1; l < DMUON_NET_LINE_COUNT; l++) {
            if (!has_ratio(g, l))
                continue;
            double m, pr, e = ratio_err(g, l, &m, &pr);
            dmuon_json_begin_object(&w);
            dmuon_json_kstr(&w, "op", op_name(g->op));
            dmuon_json_kint(&w, "bytes", g->bytes);
            dmuon_json_kint(&w, "nodes", g->nodes);
            dmuon_json_kint(&w, "ranks", g->ranks);
            if (g->model[0])
                dmuon_json_kstr(&w, "model", g->model);
            dmuon_json_kstr(&w, "baseline", dmuon_net_line_name((dmuon_net_line)l));
            dmuon_json_kdouble(&w, "measured", m);
            dmuon_json_kdouble(&w, "predicted", pr);
            dmuon_json_kdouble(&w, "error", e);
            dmuon_json_kbool(&w, "fit", g->fit);
            dmuon_json_end_object(&w);
        }
    }
    dmuon_json_end_array(&w);
    dmuon_json_end_object(&w);
    fputc('\n', f);
    return ferror(f) ? DMUON_FAIL(DMUON_EIO, "write failed") : DMUON_OK;
}

/* The ratio plot: predicted against measured, log-log, y = x and ±25%,
 * fitted and held-out cells apart; drawn by gnuplot into svg (atomically:
 * gnuplot writes a temporary file that is renamed). */
static int plot_svg(const report *r, const char *svg, const char *prog)
{
    char dat[4200], gp[4200], tmp[4200];
    snprintf(dat, sizeof dat, "%s.dat", svg);
    snprintf(gp, sizeof gp, "%s.gp", svg);
    snprintf(tmp, sizeof tmp, "%s.tmp", svg);
    FILE *f = fopen(dat, "w");
    if (!f) {
        fprintf(stderr, "%s: error: %s: cannot write the plot data\n", prog, dat);
        return 3;
    }
    for (int pass = 0; pass < 2; pass++) {
        fprintf(f, "# %s: measured predicted\n", pass ? "held out" : "fitted");
        for (int k = 0; k < r->cs->n; k++) {
            const group *g = &r->cs->g[k];
            if (g->fit != !pass)
                continue;
            for (int l = 1; l < DMUON_NET_LINE_COUNT; l++)
                if (has_ratio(g, l)) {
                    double m, pr;
                    ratio_err(g, l, &m, &pr);
                    fprintf(f, "%g %g\n", m, pr);
                }
        }
        fprintf(f, "\n\n");
    }
    char err[4400];
    if (tool_close_file(f, dat, err, sizeof err)) {
        fprintf(stderr, "%s: error: %s\n", prog, err);
        return 3;
    }
    f = fopen(gp, "w");
    if (!f) {
        fprintf(stderr, "%s: error: %s: cannot write the plot script\n", prog, gp);
        return 3;
    }
    fprintf(f, "set terminal svg size 640,560 dynamic enhanced font 'sans,11'\n"
               "set output '%s'\n"
               "set title 'baseline / ours: predicted vs measured (preset %s)'\n"
               "set logscale xy\nset xlabel 'measured or published ratio'\n"
               "set ylabel 'predicted ratio'\nset key top left\nset grid\n"
               "plot x title 'y = x' lw 1 lc rgb '#777777', 1.25*x title '+/-25%%' dt 2 "
               "lc rgb '#999999', 0.75*x notitle dt 2 lc rgb '#999999', "
               "'%s' index 0 title 'fitted' pt 7 ps 0.6 lc rgb '#1f77b4', "
               "'%s' index 1 title 'held out' pt 5 ps 0.6 lc rgb '#d62728'\n",
            tmp, r->preset, dat, dat);
    if (tool_close_file(f, gp, err, sizeof err)) {
        fprintf(stderr, "%s: error: %s\n", prog, err);
        return 3;
    }
    char cmd[9000];
    snprintf(cmd, sizeof cmd, "gnuplot '%s'", gp);
    int st = system(cmd);
    if (st != 0 || rename(tmp, svg) != 0) {
        fprintf(stderr, "%s: error: gnuplot %s failed (is gnuplot installed? make deps)\n", prog,
                gp);
        unlink(tmp);
        return 3;
    }
    return 0;
}

/* ------------------------------------------------------------- main ---- */

static void usage(FILE *f)
{
    fprintf(f,
"usage: dmuon-bench predict --preset namespace|h100 --cells FILE... [options]\n"
"Fits the network model (dmuon/netmodel.h) to the cells of the fitting\n"
"nodes and predicts every cell: ours replayed chunk by chunk from the\n"
"operators' schedules, the baselines as NCCL runs them.  Prints per cell\n"
"group the predicted and measured ratios baseline / ours and their error.\n"
"\n"
"      --preset P         parameter set: namespace (this machine's namespace\n"
"                         hosts) or h100 (H100 nodes, 400 Gb/s rails)\n"
"      --cells FILE       rows as dmuon-bench --json writes them (repeatable);\n"
"                         tools/bench/paper/tables.json holds Tables 5-7\n"
"      --fit-nodes LIST   node counts whose cells fit the model (e.g. 2,4);\n"
"                         none: the preset's values as they are\n"
"      --plans DIR        plans DIR/MODEL-RxK.plan for cells with a model\n"
"                         (Table 7; tools/bench/paper/plans.sh writes them)\n"
"      --chunk-bytes B    chunk size of ours (default 64K)\n"
"      --max-evals N      fit evaluations (default 400)\n"
"      --json             parameters, cells and ratios as JSON on stdout\n"
"                         instead of the table\n"
"      --json-file FILE   also write that JSON to FILE\n"
"      --svg FILE         ratio plot (gnuplot)\n"
"  -h, --help             this text\n");
}

int bench_predict_main(int argc, char **argv)
{
    const char *prog = argv[0], *preset = NULL, *plans = NULL, *json = NULL, *svg = NULL;
    int json_stdout = 0;
    const char *files[MAX_FILES];
    int nfiles = 0, fit_nodes[MAX_FIT], nfit = 0, max_evals = 400;
    int64_t chunk = 0;
    char bad[512] = "";
    static const struct option opts[] = {
        {"preset", required_argument, 0, 'p'}, {"cells", required_argument, 0, 'c'},
        {"fit-nodes", required_argument, 0, 'F'}, {"plans", required_argument, 0, 'P'},
        {"chunk-bytes", required_argument, 0, 'B'}, {"max-evals", required_argument, 0, 'E'},
        {"json", no_argument, 0, 'J'}, {"json-file", required_argument, 0, 'j'},
        {"svg", required_argument, 0, 's'},
        {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    int opt;
    while (!bad[0] && (opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        char *end = NULL;
        switch (opt) {
        case 'p': preset = optarg; break;
        case 'c':
            if (nfiles == MAX_FILES)
                snprintf(bad, sizeof bad, "--cells: at most %d files", MAX_FILES);
            else
                files[nfiles++] = optarg;
            break;
        case 'F': {
            char buf[256];
            snprintf(buf, sizeof buf, "%s", optarg);
            for (char *t = strtok(buf, ","); t && !bad[0]; t = strtok(NULL, ",")) {
                long v = strtol(t, &end, 10);
                if (end == t || *end || v < 1 || v > 4096 || nfit == MAX_FIT)
                    snprintf(bad, sizeof bad, "--fit-nodes '%s': expected node counts such as "
                             "2,4", optarg);
                else
                    fit_nodes[nfit++] = (int)v;
            }
            break;
        }
        case 'P': plans = optarg; break;
        case 'B': {
            int64_t v = 0;
            if (tool_parse_size("--chunk-bytes", optarg, DMUON_CHUNK_MIN_BYTES, INT64_C(1) << 30,
                                &v, bad, sizeof bad) == 0 && dmuon_chunk_bytes_check(v) != DMUON_OK)
                snprintf(bad, sizeof bad, "--chunk-bytes '%s': expected a multiple of %d bytes, "
                         "at least %d", optarg, DMUON_CHUNK_ALIGN_BYTES, DMUON_CHUNK_MIN_BYTES);
            chunk = v;
            break;
        }
        case 'E': {
            int64_t v = 0;
            tool_parse_int("--max-evals", optarg, 1, 100000, &v, bad, sizeof bad);
            max_evals = (int)v;
            break;
        }
        case 'J': json_stdout = 1; break;
        case 'j': json = optarg; break;
        case 's': svg = optarg; break;
        case 'h': usage(stdout); return 0;
        default: {
            char hint[128];
            snprintf(bad, sizeof bad, "unknown option or missing value '%s'%s (see --help)",
                     argv[optind - 1], tool_suggest_option(argv[optind - 1], opts, hint, sizeof hint));
        }
        }
    }
    if (!bad[0] && optind < argc)
        snprintf(bad, sizeof bad, "unexpected argument '%s' (see --help)", argv[optind]);
    if (!bad[0] && !preset)
        snprintf(bad, sizeof bad, "--preset is required (namespace or h100)");
    if (!bad[0] && !nfiles)
        snprintf(bad, sizeof bad, "--cells FILE is required");
    dmuon_net_params p;
    unsigned mask = 0;
    if (!bad[0] && dmuon_net_preset(preset, &p, &mask) != DMUON_OK)
        snprintf(bad, sizeof bad, "--preset: %s", dmuon_errmsg());
    if (bad[0]) {
        fprintf(stderr, "%s: error: %s\n", prog, bad);
        return 2;
    }

    cells cs = {NULL, 0, prog};
    dmuon_rc rc = DMUON_OK;
    int code = 0;
    dmuon_net_case *fc = NULL;
    dmuon_net_line *fl = NULL;
    double *fm = NULL;
    for (int i = 0; i < nfiles && rc == DMUON_OK; i++)
        rc = read_rows(&cs, files[i]);
    dmuon_sched_opts so = {DMUON_PATH_AUTO, chunk, 0};
    for (int k = 0; k < cs.n && rc == DMUON_OK; k++) {
        rc = build_case(&cs.g[k], plans, &so);
        for (int i = 0; i < nfit; i++)
            cs.g[k].fit |= cs.g[k].nodes == fit_nodes[i];
    }
    if (rc == DMUON_OK && cs.n == 0)
        rc = DMUON_FAIL(DMUON_EINVAL, "the --cells files hold no cells");
    int nf = 0;
    for (int k = 0; k < cs.n; k++)
        for (int l = 0; l < DMUON_NET_LINE_COUNT; l++)
            nf += cs.g[k].fit && cs.g[k].meas[l] > 0;
    if (rc == DMUON_OK && nfit && !nf)
        rc = DMUON_FAIL(DMUON_EINVAL, "no cell has the --fit-nodes node counts");
    double rms = 0;
    if (rc == DMUON_OK && nf) {
        fc = malloc((size_t)nf * sizeof *fc);
        fl = malloc((size_t)nf * sizeof *fl);
        fm = malloc((size_t)nf * sizeof *fm);
        if (!fc || !fl || !fm)
            rc = DMUON_FAIL(DMUON_ENOMEM, "out of memory");
        int j = 0;
        for (int k = 0; k < cs.n && rc == DMUON_OK; k++)
            for (int l = 0; l < DMUON_NET_LINE_COUNT; l++)
                if (cs.g[k].fit && cs.g[k].meas[l] > 0) {
                    fc[j] = cs.g[k].c;
                    fl[j] = (dmuon_net_line)l;
                    fm[j] = cs.g[k].meas[l];
                    j++;
                }
        if (rc == DMUON_OK) {
            fprintf(stderr, "%s: fitting %d cells ...\n", prog, nf);
            rc = dmuon_net_fit(&p, mask, fc, fl, fm, nf, max_evals, &rms);
        }
    }
    for (int k = 0; k < cs.n && rc == DMUON_OK; k++)
        for (int l = 0; l < DMUON_NET_LINE_COUNT && rc == DMUON_OK; l++)
            if (cs.g[k].meas[l] > 0)
                rc = dmuon_net_predict(&p, &cs.g[k].c, (dmuon_net_line)l, &cs.g[k].pred[l]);
    if (rc != DMUON_OK) {
        fprintf(stderr, "%s: error: %s\n", prog, dmuon_errmsg());
        code = dmuon_rc_exit_code(rc);
        goto out;
    }

    report r = {preset, &p, &cs, fit_nodes, nfit, rms, nf};
    if (json_stdout) {
        rc = write_json(stdout, &r);
        if (rc != DMUON_OK) {
            fprintf(stderr, "%s: error: %s\n", prog, dmuon_errmsg());
            code = 3;
            goto out;
        }
        goto files;
    }
    printf("# dmuon-bench predict: preset %s, %d cell groups, fitted on nodes", preset, cs.n);
    for (int i = 0; i < nfit; i++)
        printf("%s%d", i ? "," : " ", fit_nodes[i]);
    printf("%s (%d cells, rms log error %.3f)\n", nfit ? "" : " (none)", nf, rms);
    printf("# params:");
    for (int i = 0; i < DMUON_NP_COUNT; i++)
        printf(" %s=%.4g", dmuon_net_param_name(i), p.v[i]);
    printf(" mcast=%d\n", p.mcast);
    printf("# ratio = baseline time / ours; err = predicted / measured - 1; fit: cell used for "
           "fitting\n");
    printf("%-8s %12s %5s %6s %-14s %-13s %9s %9s %8s %4s\n", "#op", "bytes", "nodes", "ranks",
           "model", "baseline", "measured", "predicted", "err", "fit");
    int held = 0, within = 0;
    double worst = 0;
    for (int k = 0; k < cs.n; k++) {
        const group *g = &cs.g[k];
        for (int l = 1; l < DMUON_NET_LINE_COUNT; l++) {
            if (!has_ratio(g, l))
                continue;
            double m, pr, e = ratio_err(g, l, &m, &pr);
            printf("%-8s %12lld %5d %6d %-14s %-13s %9.3f %9.3f %+7.1f%% %4s\n", op_name(g->op),
                   (long long)g->bytes, g->nodes, g->ranks, g->model[0] ? g->model : "-",
                   dmuon_net_line_name((dmuon_net_line)l), m, pr, 100 * e, g->fit ? "yes" : "no");
            if (!g->fit) {
                held++;
                within += fabs(e) <= 0.25;
                if (fabs(e) > worst)
                    worst = fabs(e);
            }
        }
    }
    printf("# held-out ratios: %d, within +/-25%%: %d, worst |err| %.1f%%\n", held, within,
           100 * worst);
files:
    if (json) {
        rc = dmuon_write_atomic(json, write_json, &r);
        if (rc != DMUON_OK) {
            fprintf(stderr, "%s: error: %s\n", prog, dmuon_errmsg());
            code = dmuon_rc_exit_code(rc);
            goto out;
        }
    }
    if (svg)
        code = plot_svg(&r, svg, prog);
out:
    for (int k = 0; k < cs.n; k++) {
        free(cs.g[k].segs);
        free(cs.g[k].layer_of);
    }
    free(cs.g);
    free(fc);
    free(fl);
    free(fm);
    return code;
}
