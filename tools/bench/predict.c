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
 * layout of dmuon/segshape.h; Table 7: rail 0's units of the model's HSDP plan
 * PLANS/MODEL-RxK.plan in layer order, as --replay-publish posts them).
 * Groups with nodes in --fit-nodes fit the free parameters of the preset;
 * every group gets predicted times and the ratios baseline ÷ ours, with
 * their error against the measured or published ones.  Table 7's rows
 * carrying load_params / load_bytes / load_largest replay that load instead.
 *
 *   dmuon-bench predict --params tools/bench/params/h100.json --plan p.yaml \
 *       [--nodes R] [-g K] [--replay-jobs N]
 *
 * predicts a plan's step from the plan alone; with --nodes / -g the plan's
 * model is planned again for R x K first (dmuon_plan_build with the plan's
 * options, as dmuon-plan plans it).
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../common/opt.h"
#include "bench.h"
#include "dmuon/doc.h"
#include "dmuon/io.h"
#include "dmuon/segshape.h"
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
    int64_t load_params, load_bytes, load_largest;   /* Table 7: the paper's load */
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

/* The largest cell a row may ask for: 1 TiB (the paper's largest is a
 * 7.3 GiB publish); a replay's memory grows with the bytes it chunks. */
#define MAX_CELL_BYTES (INT64_C(1) << 40)

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
        int64_t bytes = 0, nodes = 0, ranks = 0, lp = 0, lb = 0, ll = 0, wrong = 0;
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
        DMUON_TRY_GOTO(rc, dmuon_doc_field_int(&doc, m, "load_params", false, &lp), done);
        DMUON_TRY_GOTO(rc, dmuon_doc_field_int(&doc, m, "load_bytes", false, &lb), done);
        DMUON_TRY_GOTO(rc, dmuon_doc_field_int(&doc, m, "load_largest", false, &ll), done);
        DMUON_TRY_GOTO(rc, dmuon_doc_field_int(&doc, m, "wrong", false, &wrong), done);
        int ln = dmuon_doc_line(m);
        if (wrong != 0) {
            rc = DMUON_FAIL(DMUON_EPARSE, "%s:%d: wrong = %lld: a run whose results were wrong "
                            "is not a measurement (expected 0 or no field)", path, ln,
                            (long long)wrong);
            goto done;
        }
        if (lp && (lp < 1 || lp > 1 << 20 || ll < 1 || lb < ll || (lp == 1 && lb != ll) ||
                   (lp > 1 && lb == ll))) {
            rc = DMUON_FAIL(DMUON_EPARSE, "%s:%d: load_params, load_bytes, load_largest: "
                            "expected a count >= 1 and bytes with largest <= total (and room "
                            "for the others)", path, ln);
            goto done;
        }
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
        const char *field = nodes < 1 || nodes > 1 << 16 ? "nodes"
                          : ranks < nodes || ranks % nodes || ranks > 1 << 16 ? "ranks"
                          : !(us > 0) ? "time_us"
                          : bytes < 0 || (o != DMUON_NET_PUBLISH && bytes < 1) ||
                                    bytes > MAX_CELL_BYTES ? "bytes" : NULL;
        if (field) {
            char val[64];
            if (!strcmp(field, "time_us"))
                snprintf(val, sizeof val, "%g", us);
            else
                snprintf(val, sizeof val, "%lld", (long long)(!strcmp(field, "nodes") ? nodes
                                                              : !strcmp(field, "ranks") ? ranks
                                                              : bytes));
            rc = DMUON_FAIL(DMUON_EPARSE, "%s:%d: %s = %s: expected nodes from 1 to 65536, "
                            "ranks a multiple of nodes up to 65536, bytes from 1 (0 for a "
                            "publish) to 2^40 and time_us > 0", path, ln, field, val);
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
            g->load_params = lp;
            g->load_bytes = lb;
            g->load_largest = ll;
        }
        if (g->meas[l] > 0) {
            rc = DMUON_FAIL(DMUON_EPARSE, "%s:%d: a second row for %s of %lld bytes on %lld "
                            "nodes x %lld ranks, line %s%s%s: expected each cell once", path,
                            ln, op, (long long)bytes, (long long)nodes, (long long)(ranks / nodes),
                            line, model[0] ? ", model " : "", model);
            goto done;
        }
        g->meas[l] = us * 1e-6;
    }
done:
    dmuon_doc_release(&doc);
    return rc;
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
    int64_t total = 0;
    rc = dmuon_plan_rail_publish(p, 0, &g->segs, &g->layer_of, &g->n, &total);
    if (rc != DMUON_OK) {
        char why[512];
        snprintf(why, sizeof why, "%s", dmuon_errmsg());
        rc = DMUON_FAIL(rc, "%s: %s", path, why);
        goto done;
    }
    g->bytes = total;
done:
    dmuon_plan_free(p);
    return rc;
}

/* The paper's own load of one rail (Table 7's subtable titles: parameter
 * count, total bytes, largest parameter): the largest first, the others
 * of equal size (whole BF16 elements, the remainder on the last), owners
 * on the rail's ranks node after node in post order, one parameter per
 * layer (a layer rarely has two parameters on one rail). */
static dmuon_rc paper_load(group *g)
{
    int K = g->ranks / g->nodes, n = (int)g->load_params;
    g->segs = calloc((size_t)n, sizeof *g->segs);
    g->layer_of = calloc((size_t)n, sizeof *g->layer_of);
    if (!g->segs || !g->layer_of)
        return DMUON_FAIL(DMUON_ENOMEM, "out of memory");
    int64_t big = g->load_largest / 2, rest = (g->load_bytes - g->load_largest) / 2, off = 0;
    for (int j = 0; j < n; j++) {
        int64_t cnt = j == 0 ? big : rest / (n - 1) + (j == n - 1 ? rest % (n - 1) : 0);
        g->segs[j] = (dmuon_segment){(int32_t)((j % g->nodes) * K), DMUON_BF16, off, cnt, 0};
        off += cnt * 2;
        g->layer_of[j] = j;
    }
    g->n = n;
    g->bytes = off;
    return DMUON_OK;
}

static dmuon_rc build_case(group *g, const char *plans, const dmuon_sched_opts *so)
{
    int K = g->ranks / g->nodes;
    if (g->load_params && !plans) {
        DMUON_TRY(paper_load(g));
    } else if (g->model[0]) {
        if (!plans)
            return DMUON_FAIL(DMUON_EINVAL, "the cells of model %s need --plans DIR", g->model);
        DMUON_TRY(plan_rail(g, plans));
    } else {
        DMUON_TRY(dmuon_segshape_make(DMUON_SEGSHAPE_NODE, g->bytes, DMUON_BF16, g->nodes, K, &g->segs,
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
    const char *params_file;   /* --params FILE, or NULL (the preset's values) */
    const dmuon_net_params *p;
    const cells *cs;
    const int *fit_nodes;      /* the in-sample node counts: --fit-nodes or --fitted-nodes */
    int nfit;
    double rms;                /* rms log error of the in-sample cells' times */
    int nfit_cells;
    int fitted_here;           /* 1: fitted in this run (--fit-nodes) */
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

/* Held-out accuracy of a set of predictions: the symmetric test
 * |log(p/m)| <= log 1.25 and the geometric-mean bias exp(mean log(p/m)). */
typedef struct {
    int n, within;
    double sumlog, worst;
} accuracy;

static void acc_add(accuracy *a, double pred, double meas)
{
    double e = log(pred / meas);
    a->n++;
    a->within += fabs(e) <= log(1.25) + 1e-12;
    a->sumlog += e;
    if (fabs(e) > a->worst)
        a->worst = fabs(e);
}

static double acc_bias(const accuracy *a) { return a->n ? exp(a->sumlog / a->n) : 1; }

/* Held-out ratios baseline / ours (line l, or all lines with l < 0) on
 * nodes (all with nodes 0) of op (all with op < 0). */
static accuracy acc_ratios(const cells *cs, int op, int l, int nodes)
{
    accuracy a = {0, 0, 0, 0};
    for (int k = 0; k < cs->n; k++) {
        const group *g = &cs->g[k];
        if (g->fit || (op >= 0 && (int)g->op != op) || (nodes && g->nodes != nodes))
            continue;
        for (int j = 1; j < DMUON_NET_LINE_COUNT; j++)
            if ((l < 0 || j == l) && has_ratio(g, j)) {
                double m, pr;
                ratio_err(g, j, &m, &pr);
                acc_add(&a, pr, m);
            }
    }
    return a;
}

/* Held-out times of line l. */
static accuracy acc_times(const cells *cs, int l)
{
    accuracy a = {0, 0, 0, 0};
    for (int k = 0; k < cs->n; k++)
        if (!cs->g[k].fit && cs->g[k].meas[l] > 0)
            acc_add(&a, cs->g[k].pred[l], cs->g[k].meas[l]);
    return a;
}

/* held_out, within_25 and bias (null when nothing is held out). */
static void json_acc(dmuon_json *w, const accuracy *a)
{
    dmuon_json_kint(w, "held_out", a->n);
    dmuon_json_kint(w, "within_25", a->within);
    dmuon_json_key(w, "bias");
    if (a->n)
        dmuon_json_double(w, acc_bias(a));
    else
        dmuon_json_null(w);
}

/* "preset", "params_file" (null for a preset's values) and "params":
 * where the parameters came from and their values, in every JSON. */
static void json_params(dmuon_json *w, const char *preset, const char *file,
                        const dmuon_net_params *p)
{
    dmuon_json_kstr(w, "preset", preset);
    dmuon_json_key(w, "params_file");
    if (file)
        dmuon_json_str(w, file);
    else
        dmuon_json_null(w);
    dmuon_json_key(w, "params");
    dmuon_json_begin_object(w);
    for (int i = 0; i < DMUON_NP_COUNT; i++)
        dmuon_json_kdouble(w, dmuon_net_param_name(i), p->v[i]);
    dmuon_json_kbool(w, "mcast", p->mcast);
    dmuon_json_end_object(w);
}

/* Node counts of the held-out cells, ascending, into nodes[]; returns how many. */
static int held_nodes(const cells *cs, int *nodes, int max)
{
    int n = 0;
    for (int k = 0; k < cs->n; k++) {
        int x = cs->g[k].nodes, i = 0;
        if (cs->g[k].fit)
            continue;
        while (i < n && nodes[i] < x)
            i++;
        if ((i < n && nodes[i] == x) || n == max)
            continue;
        memmove(nodes + i + 1, nodes + i, (size_t)(n - i) * sizeof *nodes);
        nodes[i] = x;
        n++;
    }
    return n;
}

/* The cells' keys of the JSON: fit (rms_log_error null when nothing was
 * fitted), cells, ratios and accuracy; written inside an open object. */
static void json_cells(dmuon_json *w, const report *r)
{
    dmuon_json_key(w, "fit");
    dmuon_json_begin_object(w);
    dmuon_json_key(w, "nodes");
    dmuon_json_begin_array(w);
    for (int i = 0; i < r->nfit; i++)
        dmuon_json_int(w, r->fit_nodes[i]);
    dmuon_json_end_array(w);
    dmuon_json_kint(w, "cells", r->nfit_cells);
    dmuon_json_kbool(w, "fitted_here", r->fitted_here);
    dmuon_json_key(w, "rms_log_error");
    if (r->nfit_cells)
        dmuon_json_double(w, r->rms);
    else
        dmuon_json_null(w);
    dmuon_json_end_object(w);
    dmuon_json_key(w, "cells");
    dmuon_json_begin_array(w);
    for (int k = 0; k < r->cs->n; k++) {
        const group *g = &r->cs->g[k];
        for (int l = 0; l < DMUON_NET_LINE_COUNT; l++) {
            if (!(g->meas[l] > 0))
                continue;
            dmuon_json_begin_object(w);
            dmuon_json_kstr(w, "op", op_name(g->op));
            dmuon_json_kint(w, "bytes", g->bytes);
            dmuon_json_kint(w, "nodes", g->nodes);
            dmuon_json_kint(w, "ranks", g->ranks);
            if (g->model[0])
                dmuon_json_kstr(w, "model", g->model);
            dmuon_json_kstr(w, "line", dmuon_net_line_name((dmuon_net_line)l));
            dmuon_json_kdouble(w, "measured_us", g->meas[l] * 1e6);
            dmuon_json_kdouble(w, "predicted_us", g->pred[l] * 1e6);
            dmuon_json_kdouble(w, "error", g->pred[l] / g->meas[l] - 1);
            dmuon_json_kbool(w, "fit", g->fit);
            dmuon_json_end_object(w);
        }
    }
    dmuon_json_end_array(w);
    dmuon_json_key(w, "ratios");
    dmuon_json_begin_array(w);
    for (int k = 0; k < r->cs->n; k++) {
        const group *g = &r->cs->g[k];
        for (int l = 1; l < DMUON_NET_LINE_COUNT; l++) {
            if (!has_ratio(g, l))
                continue;
            double m, pr, e = ratio_err(g, l, &m, &pr);
            dmuon_json_begin_object(w);
            dmuon_json_kstr(w, "op", op_name(g->op));
            dmuon_json_kint(w, "bytes", g->bytes);
            dmuon_json_kint(w, "nodes", g->nodes);
            dmuon_json_kint(w, "ranks", g->ranks);
            if (g->model[0])
                dmuon_json_kstr(w, "model", g->model);
            dmuon_json_kstr(w, "baseline", dmuon_net_line_name((dmuon_net_line)l));
            dmuon_json_kdouble(w, "measured", m);
            dmuon_json_kdouble(w, "predicted", pr);
            dmuon_json_kdouble(w, "error", e);
            dmuon_json_kbool(w, "fit", g->fit);
            dmuon_json_end_object(w);
        }
    }
    dmuon_json_end_array(w);
    dmuon_json_key(w, "accuracy");
    dmuon_json_begin_object(w);
    accuracy all = acc_ratios(r->cs, -1, -1, 0);
    dmuon_json_key(w, "ratios");
    dmuon_json_begin_object(w);
    json_acc(w, &all);
    dmuon_json_end_object(w);
    dmuon_json_key(w, "times");
    dmuon_json_begin_object(w);
    for (int l = 0; l < DMUON_NET_LINE_COUNT; l++) {
        accuracy a = acc_times(r->cs, l);
        if (!a.n)
            continue;
        dmuon_json_key(w, dmuon_net_line_name((dmuon_net_line)l));
        dmuon_json_begin_object(w);
        json_acc(w, &a);
        dmuon_json_end_object(w);
    }
    dmuon_json_end_object(w);
    dmuon_json_key(w, "by_cell");
    dmuon_json_begin_array(w);
    int nodes[64], nn = held_nodes(r->cs, nodes, 64);
    for (int op = 0; op <= DMUON_NET_PUBLISH; op++)
        for (int l = 1; l < DMUON_NET_LINE_COUNT; l++)
            for (int i = 0; i < nn; i++) {
                accuracy a = acc_ratios(r->cs, op, l, nodes[i]);
                if (!a.n)
                    continue;
                dmuon_json_begin_object(w);
                dmuon_json_kstr(w, "op", op_name((dmuon_net_op)op));
                dmuon_json_kstr(w, "baseline", dmuon_net_line_name((dmuon_net_line)l));
                dmuon_json_kint(w, "nodes", nodes[i]);
                json_acc(w, &a);
                dmuon_json_end_object(w);
            }
    dmuon_json_end_array(w);
    dmuon_json_end_object(w);
}

static dmuon_rc write_json(FILE *f, void *ctx)
{
    const report *r = ctx;
    dmuon_json w;
    dmuon_json_init(&w, f, true);
    dmuon_json_begin_object(&w);
    json_params(&w, r->preset, r->params_file, r->p);
    json_cells(&w, r);
    dmuon_json_end_object(&w);
    fputc('\n', f);
    return ferror(f) ? DMUON_FAIL(DMUON_EIO, "write failed") : DMUON_OK;
}

/* A plot is one gnuplot script (its data inline as datablocks) and
 * gnuplot's output, both temporary files next to the SVG (mkstemp, so no
 * file of the user's is touched) and both removed whatever happens; the
 * SVG itself appears by a rename, never half-written.  Nothing else is
 * left beside it. */
typedef struct {
    char gp[4200], tmp[4200];
    FILE *f;
} plot;

/* Removes a plot's temporary files (those that were made). */
static void plot_release(plot *pl)
{
    if (pl->f)
        fclose(pl->f);
    pl->f = NULL;
    if (pl->gp[0])
        unlink(pl->gp);
    if (pl->tmp[0])
        unlink(pl->tmp);
    pl->gp[0] = pl->tmp[0] = '\0';
}

/* Makes the temporary files of a plot of svg; pl->f is the script, open
 * for writing.  0, or 3 with a message (nothing left). */
static int plot_begin(plot *pl, const char *svg, const char *prog)
{
    pl->f = NULL;
    snprintf(pl->gp, sizeof pl->gp, "%s.gp.XXXXXX", svg);
    snprintf(pl->tmp, sizeof pl->tmp, "%s.tmp.XXXXXX", svg);
    int fg = mkstemp(pl->gp), ft = fg >= 0 ? mkstemp(pl->tmp) : -1;
    if (fg < 0)
        pl->gp[0] = '\0';
    if (ft < 0)
        pl->tmp[0] = '\0';
    else
        close(ft);
    if (fg >= 0 && ft >= 0)
        pl->f = fdopen(fg, "w");
    if (fg >= 0 && !pl->f)
        close(fg);
    if (!pl->f) {
        fprintf(stderr, "%s: error: --svg '%s': cannot create the plot's temporary files: %s\n",
                prog, svg, strerror(errno));
        plot_release(pl);
        return 3;
    }
    return 0;
}

/* Writes s as a gnuplot single-quoted string (a quote inside doubled). */
static void gp_quoted(FILE *f, const char *s)
{
    fputc('\'', f);
    for (; *s; s++) {
        if (*s == '\'')
            fputc('\'', f);
        fputc(*s, f);
    }
    fputc('\'', f);
}

/* A plot's title line (title quoted for gnuplot). */
static void plot_title(plot *pl, const char *title)
{
    fprintf(pl->f, "set title ");
    gp_quoted(pl->f, title);
    fputc('\n', pl->f);
}

/* The terminal and output lines of a plot: an SVG of w x h into pl->tmp. */
static void plot_head(plot *pl, int w, int h)
{
    fprintf(pl->f, "set terminal svg size %d,%d dynamic enhanced font 'sans,11'\nset output ", w, h);
    gp_quoted(pl->f, pl->tmp);
    fputc('\n', pl->f);
}

/* Closes the script, runs gnuplot on it and renames its output to svg;
 * the temporary files are removed.  0, or 3 with a message. */
static int plot_finish(plot *pl, const char *svg, const char *prog)
{
    char err[4400];
    int code = 0;
    FILE *f = pl->f;
    pl->f = NULL;
    if (tool_close_file(f, pl->gp, err, sizeof err)) {
        fprintf(stderr, "%s: error: %s\n", prog, err);
        code = 3;
    }
    if (!code) {
        char *argv[] = {"gnuplot", pl->gp, NULL};
        pid_t pid;
        int st = 0;
        mode_t mask = umask(0);
        umask(mask);
        if (posix_spawnp(&pid, "gnuplot", NULL, NULL, argv, environ) != 0 ||
            waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0 ||
            chmod(pl->tmp, 0666 & ~mask) != 0 || rename(pl->tmp, svg) != 0) {
            fprintf(stderr, "%s: error: --svg '%s': gnuplot failed (is gnuplot installed? make "
                    "deps)\n", prog, svg);
            code = 3;
        } else {
            pl->tmp[0] = '\0';   /* renamed: it is the SVG now */
        }
    }
    plot_release(pl);
    return code;
}

/* Whether an executable name lies on $PATH (gnuplot for --svg, looked for
 * before any work). */
static bool on_path(const char *name)
{
    const char *path = getenv("PATH");
    char dir[4096], file[4400];
    while (path && *path) {
        size_t n = strcspn(path, ":");
        snprintf(dir, sizeof dir, "%.*s", (int)n, path);
        snprintf(file, sizeof file, "%s/%s", n ? dir : ".", name);
        if (access(file, X_OK) == 0)
            return true;
        path += n + (path[n] == ':');
    }
    return false;
}

/* The ratio plot: predicted against measured, log-log, y = x and the
 * accuracy test's band (a factor 1.25 either way: x * 1.25 and x / 1.25),
 * fitted and held-out cells apart; drawn by gnuplot into svg. */
static int plot_svg(const report *r, const char *svg, const char *prog)
{
    plot pl;
    int npts[2] = {0, 0};
    if (plot_begin(&pl, svg, prog))
        return 3;
    plot_head(&pl, 640, 560);
    for (int pass = 0; pass < 2; pass++) {
        fprintf(pl.f, "$%s << EOD\n# measured predicted\n", pass ? "held" : "fitted");
        for (int k = 0; k < r->cs->n; k++) {
            const group *g = &r->cs->g[k];
            if (g->fit != !pass)
                continue;
            for (int l = 1; l < DMUON_NET_LINE_COUNT; l++)
                if (has_ratio(g, l)) {
                    double m, pr;
                    ratio_err(g, l, &m, &pr);
                    fprintf(pl.f, "%.17g %.17g\n", m, pr);
                    npts[pass]++;
                }
        }
        fprintf(pl.f, "EOD\n");
    }
    if (!npts[0] && !npts[1]) {
        fprintf(stderr, "%s: error: --svg '%s': no cell has a ratio baseline / ours to plot\n",
                prog, svg);
        plot_release(&pl);
        return 2;
    }
    char title[256];
    snprintf(title, sizeof title, "baseline / ours: predicted vs measured (preset %s)", r->preset);
    plot_title(&pl, title);
    fprintf(pl.f, "set logscale xy\nset xlabel 'measured or published ratio'\n"
                  "set ylabel 'predicted ratio'\nset key top left\nset grid\n"
                  "plot x title 'y = x' lw 1 lc rgb '#777777', x*1.25 title 'x 1.25 and x / 1.25 "
                  "(within)' dt 2 lc rgb '#999999', x/1.25 notitle dt 2 lc rgb '#999999'");
    if (npts[0])
        fprintf(pl.f, ", $fitted title 'fitted' pt 7 ps 0.6 lc rgb '#1f77b4'");
    if (npts[1])
        fprintf(pl.f, ", $held title 'held out' pt 5 ps 0.6 lc rgb '#d62728'");
    fputc('\n', pl.f);
    return plot_finish(&pl, svg, prog);
}

/* ------------------------------------------------------------- main ---- */

/* ------------------------------------------------------- --plan ---- */

typedef struct {
    const dmuon_net_plan_pred *r;
    const dmuon_net_params *p;
    const char *preset, *params_file, *plan;
    const report *cells;   /* with --cells too: their keys follow the plan's; else NULL */
} plan_report;

static dmuon_rc write_plan_json(FILE *f, void *ctx)
{
    const plan_report *pr = ctx;
    dmuon_json w;
    dmuon_json_init(&w, f, true);
    dmuon_json_begin_object(&w);
    dmuon_json_kstr(&w, "plan", pr->plan);
    json_params(&w, pr->preset, pr->params_file, pr->p);
    dmuon_net_plan_json(pr->r, &w);
    if (pr->cells)
        json_cells(&w, pr->cells);
    dmuon_json_end_object(&w);
    fputc('\n', f);
    return ferror(f) ? DMUON_FAIL(DMUON_EIO, "write failed") : DMUON_OK;
}

/* Per-layer communication of lines A, C, D (gathers of a step and the
 * reduction), drawn by gnuplot into svg. */
static int plan_svg(const plan_report *pr, const char *svg, const char *prog)
{
    const dmuon_net_plan_pred *r = pr->r;
    double g = r->zero_stage == 3 ? 2 : 1;
    int cg = r->hsdp ? DMUON_NET_COALESCED : DMUON_NET_PER_OWNER;
    plot pl;
    if (plot_begin(&pl, svg, prog))
        return 3;
    plot_head(&pl, 800, 480);
    fprintf(pl.f, "$layers << EOD\n# layer A C D (us)\n");
    for (int i = 0; i < r->nlayers; i++) {
        const dmuon_net_layer_pred *L = &r->layers[i];
        fprintf(pl.f, "%d %.17g %.17g %.17g\n", i,
                1e6 * (g * L->gather[DMUON_NET_EQUAL] + L->reduce[DMUON_NET_EQUAL]),
                1e6 * (g * L->gather[cg] + L->reduce[DMUON_NET_PER_OWNER]),
                1e6 * (g * L->gather[DMUON_NET_OURS] + L->reduce[DMUON_NET_OURS]));
    }
    char title[256];
    snprintf(title, sizeof title, "predicted gather + reduction per layer, %d x %d (%s)", r->nodes,
             r->per_node, pr->preset);
    fprintf(pl.f, "EOD\n");
    plot_title(&pl, title);
    fprintf(pl.f, "set xlabel 'layer'\nset ylabel 'us'\nset logscale y\nset key top left\n"
                  "set grid\nplot $layers using 1:2 with linespoints title 'A (equal length)', "
                  "$layers using 1:3 with linespoints title 'C (NCCL, owners)', "
                  "$layers using 1:4 with linespoints title 'D (ours)'\n");
    return plot_finish(&pl, svg, prog);
}

/* --nodes / -g: the plan's model planned again, as dmuon-plan plans it, for
 * nodes x gpus (0: the plan's value), with the plan's own options and cost
 * source; the model file the plan names must still be the one it was made
 * from.  *plan is replaced by the new plan. */
static dmuon_rc replan(dmuon_plan **plan, const char *path, int nodes, int gpus)
{
    dmuon_plan_opts o = *dmuon_plan_options(*plan);
    if (nodes > 0)
        o.nodes = nodes;
    if (gpus > 0)
        o.gpus_per_node = gpus;
    dmuon_model *m = NULL;
    dmuon_plan *np = NULL;
    char why[1024], beside[4096];
    /* a relative model path is the one dmuon-plan was given, from the
     * directory it ran in; failing that, try it beside the plan */
    if (o.model_path && o.model_path[0] != '/' && access(o.model_path, F_OK) != 0) {
        const char *slash = strrchr(path, '/');
        if (slash && snprintf(beside, sizeof beside, "%.*s/%s", (int)(slash - path), path,
                              o.model_path) < (int)sizeof beside && access(beside, F_OK) == 0)
            o.model_path = beside;
    }
    dmuon_rc rc = dmuon_model_load(o.model_path, NULL, &m);
    if (rc == DMUON_OK)
        rc = dmuon_plan_match_model(*plan, m);
    if (rc == DMUON_OK)
        rc = dmuon_plan_build(m, &o, &np);
    if (rc != DMUON_OK) {
        snprintf(why, sizeof why, "%s", dmuon_errmsg());
        rc = DMUON_FAIL(rc, "%s: planning its model %s again for %d x %d: %s%s", path,
                        o.model_path ? o.model_path : "(none)", (int)o.nodes,
                        (int)o.gpus_per_node, why,
                        o.model_path && o.model_path[0] != '/' && access(o.model_path, F_OK)
                            ? " (a relative model path is read from the current directory or "
                              "the plan's: run from where dmuon-plan ran)"
                            : "");
    } else {
        dmuon_plan_free(*plan);
        *plan = np;
    }
    dmuon_model_free(m);
    return rc;
}

/* --plan: the plan's step under p, no measured rows (with nodes or gpus
 * > 0 the plan's model planned again for that cluster first); with
 * --cells, cells_r is their report, whose keys the JSON adds (else NULL). */
static int plan_run(const char *prog, const char *path, const dmuon_net_params *p,
                    const char *preset, const char *params_file, const report *cells_r,
                    const dmuon_sched_opts *so, int nodes, int gpus, int64_t jobs,
                    int json_stdout, const char *json, const char *svg)
{
    dmuon_plan *plan = NULL;
    if (access(path, F_OK) != 0) {
        fprintf(stderr, "%s: error: --plan %s: no such plan file\n", prog, path);
        return 2;
    }
    dmuon_rc rc = dmuon_plan_load(path, &plan);
    int was_hsdp = rc == DMUON_OK && dmuon_plan_sharding(plan) == DMUON_SHARD_HSDP;
    if (rc == DMUON_OK && (nodes > 0 || gpus > 0))
        rc = replan(&plan, path, nodes, gpus);
    if (rc == DMUON_OK && was_hsdp && dmuon_plan_nodes(plan) == 1)
        fprintf(stderr, "%s: warning: HSDP on one node has no replicas: predicted as %d x %d "
                "without a publish\n", prog, dmuon_plan_nodes(plan),
                dmuon_plan_gpus_per_node(plan));
    if (rc != DMUON_OK) {
        fprintf(stderr, "%s: error: %s\n", prog, dmuon_errmsg());
        dmuon_plan_free(plan);
        return dmuon_rc_exit_code(rc);
    }
    dmuon_net_plan_pred r;
    rc = dmuon_net_plan_predict_jobs(plan, p, so, jobs, &r);
    int code = 0;
    if (rc != DMUON_OK) {
        fprintf(stderr, "%s: error: %s: %s\n", prog, path, dmuon_errmsg());
        dmuon_plan_free(plan);
        return dmuon_rc_exit_code(rc);
    }
    plan_report pr = {&r, p, preset, params_file, path, cells_r};
    if (json_stdout) {
        rc = write_plan_json(stdout, &pr);
    } else {
        printf("# dmuon-bench predict: plan %s%s, %d x %d, parameters %s%s%s\n", path,
               nodes > 0 || gpus > 0 ? " planned again" : "", r.nodes, r.per_node, preset,
               params_file ? " from " : " (the preset's starting values)",
               params_file ? params_file : "");
        dmuon_net_plan_print(&r, stdout);
    }
    if (rc == DMUON_OK && json)
        rc = dmuon_write_atomic(json, write_plan_json, &pr);
    if (rc != DMUON_OK) {
        fprintf(stderr, "%s: error: %s\n", prog, dmuon_errmsg());
        code = 3;
    } else if (svg) {
        code = plan_svg(&pr, svg, prog);
    }
    dmuon_net_plan_pred_free(&r);
    dmuon_plan_free(plan);
    return code;
}

/* Whether paths a and b name one existing file (the same device and inode,
 * whatever the spelling). */
static bool same_file(const char *a, const char *b)
{
    struct stat x, y;
    return stat(a, &x) == 0 && stat(b, &y) == 0 && x.st_dev == y.st_dev && x.st_ino == y.st_ino;
}

/* Whether two output paths, existing or not, would be one file: the same
 * file, or the same name in the same directory however spelt. */
static bool same_output(const char *a, const char *b)
{
    if (!strcmp(a, b) || same_file(a, b))
        return true;
    const char *sa = strrchr(a, '/'), *sb = strrchr(b, '/');
    const char *na = sa ? sa + 1 : a, *nb = sb ? sb + 1 : b;
    if (strcmp(na, nb))
        return false;
    char da[4096], db[4096], ra[PATH_MAX], rb[PATH_MAX];
    snprintf(da, sizeof da, "%.*s", sa ? (int)(sa - a) + 1 : 1, sa ? a : ".");
    snprintf(db, sizeof db, "%.*s", sb ? (int)(sb - b) + 1 : 1, sb ? b : ".");
    return realpath(da, ra) && realpath(db, rb) && !strcmp(ra, rb);
}

/* Refuses, before any work (a fit takes minutes), an output that could
 * not be written after it: out[] are --save-params, --json-file and --svg
 * (NULL: not given; "-": standard output, always writable), each checked
 * by tool_check_output_path, no two on one file and none on an input of
 * in[0..nin) (the --cells files, --plan, then --params last, which
 * --save-params alone may name).  A reason goes to
 * bad[0..n) (left as it is when every output can be written). */
static void check_outputs(const char *const out[3], const char *const *in, int nin, char *bad,
                          size_t n)
{
    static const char *const flag[3] = {"--save-params", "--json-file", "--svg"};
    for (int i = 0; i < 3 && !bad[0]; i++) {
        if (!out[i] || !strcmp(out[i], "-"))
            continue;
        for (const char *c = out[i]; *c; c++)
            if ((unsigned char)*c < 0x20 || *c == 0x7f) {
                snprintf(bad, n, "%s: the file name has a control character (a newline?): "
                         "expected a plain file name", flag[i]);
                return;
            }
        if (tool_check_output_path(flag[i], out[i], false, bad, n))
            return;
        for (int j = 0; j < i && !bad[0]; j++)
            if (out[j] && strcmp(out[j], "-") && same_output(out[i], out[j]))
                snprintf(bad, n, "%s '%s': the same file as %s", flag[i], out[i], flag[j]);
        /* in[nin - 1] is --params: --save-params may rewrite it (a refit) */
        for (int j = 0; j < nin - (i == 0) && !bad[0]; j++)
            if (in[j] && same_file(out[i], in[j]))
                snprintf(bad, n, "%s '%s': the same file as the input '%s': it would be "
                         "overwritten", flag[i], out[i], in[j]);
    }
}

/* A node-count list of --fit-nodes or --fitted-nodes ("2,4"): whole
 * numbers 1..65536 (a cell's most), comma separated, none twice, at most
 * MAX_FIT; a later flag replaces an earlier one, as every flag does.  On a
 * bad list, bad says so. */
static void parse_nodes(const char *flag, const char *arg, int *out, int *n, char *bad,
                        size_t bad_size)
{
    *n = 0;
    const char *t = arg;
    for (;;) {
        size_t len = strspn(t, "0123456789");
        long v = len && len <= 5 ? strtol(t, NULL, 10) : 0;
        bool dup = false;
        for (int i = 0; i < *n; i++)
            dup |= out[i] == v;
        if (v < 1 || v > 65536 || (t[len] != ',' && t[len] != '\0') || dup || *n == MAX_FIT) {
            char why[64] = "";
            if (dup)
                snprintf(why, sizeof why, ": %ld is given twice", v);
            snprintf(bad, bad_size, "%s '%s': expected distinct node counts from 1 to 65536, "
                     "comma separated, at most %d (such as 2,4)%s", flag, arg, MAX_FIT, why);
            *n = 0;
            return;
        }
        out[(*n)++] = (int)v;
        if (!t[len])
            return;
        t += len + 1;
    }
}

/* Every count of a --fit-nodes / --fitted-nodes list must have a measured
 * cell: else bad names the first that has none and the counts there are. */
static void check_nodes_present(const char *flag, const int *list, int n, const cells *cs,
                                char *bad, size_t bad_size)
{
    for (int i = 0; i < n; i++) {
        bool found = false;
        for (int k = 0; k < cs->n && !found; k++)
            found = cs->g[k].nodes == list[i];
        if (found)
            continue;
        int w = snprintf(bad, bad_size, "%s: no cell has %d node%s (the cells have", flag,
                         list[i], list[i] == 1 ? "" : "s");
        int last = 0;   /* the node counts present, ascending */
        for (;;) {
            int next = 0;
            for (int k = 0; k < cs->n; k++)
                if (cs->g[k].nodes > last && (!next || cs->g[k].nodes < next))
                    next = cs->g[k].nodes;
            if (!next || w >= (int)bad_size)
                break;
            w += snprintf(bad + w, bad_size - (size_t)w, " %d", next);
            last = next;
        }
        if (w < (int)bad_size)
            snprintf(bad + w, bad_size - (size_t)w, ")");
        return;
    }
}

/* fitted_on says "not fitted" (any case, blanks around it). */
static bool says_not_fitted(const char *f)
{
    while (*f == ' ' || *f == '\t')
        f++;
    size_t n = strlen(f);
    while (n && (f[n - 1] == ' ' || f[n - 1] == '\t'))
        n--;
    return n == 10 && !strncasecmp(f, "not fitted", 10);
}

/* A note when a file's fitted_on, as --save-params writes it ("N cells of
 * nodes 2,8 of FILE ..."), names other node counts than --fitted-nodes, or
 * names none (fitted_on is free text) or is missing. */
static void note_fitted_on(const char *prog, const char *file, const char *fitted_on,
                           const int *list, int n)
{
    const char *at = strstr(fitted_on, " of nodes ");
    if (!at) {
        fprintf(stderr, "%s: note: %s %s: nothing to check --fitted-nodes against\n", prog,
                file, fitted_on[0] ? "names no node counts in its fitted_on"
                                   : "has no fitted_on");
        return;
    }
    at += strlen(" of nodes ");
    size_t len = strspn(at, "0123456789,");
    char names[256];
    snprintf(names, sizeof names, "%.*s", (int)(len < 255 ? len : 255), at);
    int theirs[MAX_FIT], nt = 0;
    char bad[256] = "";
    parse_nodes("fitted_on", names, theirs, &nt, bad, sizeof bad);
    bool same = !bad[0] && nt == n;
    for (int i = 0; i < n && same; i++) {
        bool found = false;
        for (int j = 0; j < nt; j++)
            found |= theirs[j] == list[i];
        same = found;
    }
    if (!same)
        fprintf(stderr, "%s: note: --fitted-nodes differs from what %s says it was fitted on "
                "(nodes %s)\n", prog, file, names);
}

static void usage(FILE *f)
{
    fprintf(f,
"usage: dmuon-bench predict --preset namespace|h100 --cells FILE... [options]\n"
"       dmuon-bench predict --params FILE --plan PLAN [--nodes R] [-g K]\n"
"                           [--json | --json-file F] [--svg F]\n"
"Fits the network model (dmuon/netmodel.h) to the cells of the fitting\n"
"nodes and predicts every cell: ours replayed chunk by chunk from the\n"
"operators' schedules, the baselines as NCCL runs them.  Prints per cell\n"
"group the predicted and measured ratios baseline / ours and their error.\n"
"\n"
"      --preset P         parameter set: namespace (this machine's namespace\n"
"                         hosts) or h100 (H100 nodes, 400 Gb/s rails)\n"
"      --params FILE      parameters from a file --save-params wrote (instead of\n"
"                         --preset; tools/bench/params/ holds fitted ones)\n"
"      --save-params FILE write the (fitted) parameters to FILE (JSON)\n"
"      --plan PLAN        predict the plan's step: per layer gather and reduction\n"
"                         of ours and the baselines, the publish per rail, the\n"
"                         communication of lines A, C, D (no measured rows)\n"
"      --nodes R          with --plan: plan the plan's model again (its options,\n"
"                         its cost source) for R nodes before predicting\n"
"  -g, --gpus-per-node K  with --plan: the same, for K GPUs per node\n"
"      --replay-jobs N    with --plan: replay each call of ours in at most N\n"
"                         chunk-node jobs, merging consecutive chunks past it\n"
"                         (default 2^20; 0: chunk by chunk, slow at scale)\n"
"      --cells FILE       rows as dmuon-bench --json writes them (repeatable);\n"
"                         tools/bench/paper/tables.json holds Tables 5-7\n"
"      --fit-nodes LIST   node counts whose cells fit the model (e.g. 2,4; at\n"
"                         most 16 counts, each 1 to 65536); without it the\n"
"                         parameters are used as they are\n"
"      --fitted-nodes LIST  without --fit-nodes: node counts whose cells the\n"
"                         parameters were fitted on elsewhere (what --params\n"
"                         FILE's fitted_on names); they are scored as in-sample,\n"
"                         not held out, as in the run that fitted them\n"
"      --plans DIR        with --cells: plans DIR/MODEL-RxK.plan for cells with\n"
"                         a model (Table 7; tools/bench/paper/plans.sh writes them)\n"
"      --chunk-bytes B    chunk size of ours (default 64K)\n"
"      --max-evals N      with --fit-nodes: fit evaluations (default 400)\n"
"      --json             parameters, cells and ratios (or the plan's\n"
"                         prediction; with --plan and --cells both, one object)\n"
"                         as JSON on stdout instead of the table\n"
"      --json-file FILE   also write that JSON to FILE ('-': standard output,\n"
"                         after the table)\n"
"      --svg FILE         draw with gnuplot into FILE (nothing else is left\n"
"                         beside it): with --cells the ratio plot, predicted\n"
"                         against measured; with --plan the communication of\n"
"                         lines A, C, D per layer (with both, the plan's)\n"
"  -h, --help             this text\n"
"\n"
"A flag a combination would ignore is refused; --save-params, --json-file and\n"
"--svg paths are checked before any work (exit 2 when one cannot be written).\n"
"\n"
"exit: 0 ok, 2 bad input or usage, 3 runtime error (a write or gnuplot failed)\n");
}

int bench_predict_main(int argc, char **argv)
{
    const char *prog = argv[0], *preset = NULL, *plans = NULL, *json = NULL, *svg = NULL;
    const char *params_in = NULL, *params_out = NULL, *plan_path = NULL;
    int json_stdout = 0;
    const char *files[MAX_FILES];
    int nfiles = 0, fit_nodes[MAX_FIT], nfit = 0, max_evals = 400, max_evals_set = 0;
    int fitted[MAX_FIT], nfitted = 0;   /* --fitted-nodes */
    int64_t chunk = 0;
    char bad[512] = "";
    static const struct option opts[] = {
        {"preset", required_argument, 0, 'p'}, {"cells", required_argument, 0, 'c'},
        {"fit-nodes", required_argument, 0, 'F'}, {"plans", required_argument, 0, 'P'},
        {"chunk-bytes", required_argument, 0, 'B'}, {"max-evals", required_argument, 0, 'E'},
        {"json", no_argument, 0, 'J'}, {"json-file", required_argument, 0, 'j'},
        {"svg", required_argument, 0, 's'}, {"params", required_argument, 0, 'q'},
        {"save-params", required_argument, 0, 'S'}, {"plan", required_argument, 0, 'L'},
        {"nodes", required_argument, 0, 'n'}, {"gpus-per-node", required_argument, 0, 'g'},
        {"replay-jobs", required_argument, 0, 'R'}, {"fitted-nodes", required_argument, 0, 'D'},
        {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    int opt, rnodes = 0, rgpus = 0;
    int64_t jobs = 0;
    opterr = 0;   /* our message, once */
    while (!bad[0] && (opt = getopt_long(argc, argv, "hg:", opts, NULL)) != -1) {
        switch (opt) {
        case 'p': preset = tool_lower(optarg); break;
        case 'q': params_in = optarg; break;
        case 'S': params_out = optarg; break;
        case 'L': plan_path = optarg; break;
        case 'c':
            if (nfiles == MAX_FILES)
                snprintf(bad, sizeof bad, "--cells: at most %d files", MAX_FILES);
            else
                files[nfiles++] = optarg;
            break;
        case 'F': parse_nodes("--fit-nodes", optarg, fit_nodes, &nfit, bad, sizeof bad); break;
        case 'D': parse_nodes("--fitted-nodes", optarg, fitted, &nfitted, bad, sizeof bad); break;
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
            max_evals_set = 1;
            break;
        }
        case 'n':
        case 'g': {
            int64_t v = 0;
            tool_parse_int(opt == 'n' ? "--nodes" : "--gpus-per-node", optarg, 1,
                           DMUON_PLAN_MAX_RANKS, &v, bad, sizeof bad);
            *(opt == 'n' ? &rnodes : &rgpus) = (int)v;
            break;
        }
        case 'R':
            if (tool_parse_int("--replay-jobs", optarg, 0, INT64_MAX, &jobs, bad, sizeof bad) == 0 &&
                jobs == 0)
                jobs = INT64_MAX;
            break;
        case 'J': json_stdout = 1; break;
        case 'j': json = optarg; break;
        case 's': svg = optarg; break;
        case 'h': usage(stdout); return 0;
        default: {
            char msg[400];
            snprintf(bad, sizeof bad, "%s (see --help)",
                     tool_bad_option(argv[optind - 1], opts, "hg:", msg, sizeof msg));
        }
        }
    }
    if (!bad[0] && optind < argc)
        snprintf(bad, sizeof bad, "unexpected argument '%s' (see --help)", argv[optind]);
    if (!bad[0] && jobs && !plan_path)
        snprintf(bad, sizeof bad, "--replay-jobs bounds a plan's replay: give --plan PLAN");
    if (!bad[0] && (rnodes || rgpus) && !plan_path)
        snprintf(bad, sizeof bad, "--nodes and --gpus-per-node re-plan a plan: give --plan PLAN");
    if (!bad[0] && !preset && !params_in)
        snprintf(bad, sizeof bad, "--preset is required (namespace or h100), or --params FILE");
    if (!bad[0] && preset && params_in)
        snprintf(bad, sizeof bad, "--preset and --params: give one");
    if (!bad[0] && !nfiles && !plan_path && !params_out)
        snprintf(bad, sizeof bad, "--cells FILE is required (or --plan PLAN, or --save-params)");
    if (!bad[0] && nfit && !nfiles)
        snprintf(bad, sizeof bad, "--fit-nodes needs --cells");
    if (!bad[0] && nfitted && !nfiles)
        snprintf(bad, sizeof bad, "--fitted-nodes marks --cells rows: give --cells");
    if (!bad[0] && nfitted && nfit)
        snprintf(bad, sizeof bad, "--fitted-nodes and --fit-nodes: a fit marks the cells it "
                 "fits; give one");
    if (!bad[0] && nfitted && !params_in)
        snprintf(bad, sizeof bad, "--fitted-nodes marks the cells a parameter file was fitted "
                 "on: give --params FILE (a preset's values were not fitted)");
    if (!bad[0] && plans && !nfiles)
        snprintf(bad, sizeof bad, "--plans DIR holds the plans of --cells rows with a model: give "
                 "--cells%s, or drop --plans", plan_path ? " (--plan PLAN predicts one plan)" : "");
    if (!bad[0] && max_evals_set && !nfit)
        snprintf(bad, sizeof bad, "--max-evals bounds the fit of --fit-nodes: give --fit-nodes, "
                 "or drop --max-evals (nothing is fitted)");
    if (!bad[0] && !nfiles && !plan_path && (json_stdout || json || svg))
        snprintf(bad, sizeof bad, "%s reports the cells or a plan: give --cells or --plan (with "
                 "--save-params alone nothing is predicted)",
                 json_stdout ? "--json" : json ? "--json-file" : "--svg");
    if (!bad[0] && json_stdout && json && !strcmp(json, "-"))
        snprintf(bad, sizeof bad, "--json and --json-file -: both write the JSON on standard "
                 "output: give one");
    if (!bad[0] && svg && !strcmp(svg, "-"))
        snprintf(bad, sizeof bad, "--svg -: the plot cannot go to standard output (gnuplot "
                 "writes a file): give a file name");
    if (!bad[0] && svg && !on_path("gnuplot"))
        snprintf(bad, sizeof bad, "--svg '%s': gnuplot is not on PATH (make deps installs "
                 "gnuplot-nox)", svg);
    if (!bad[0]) {
        const char *out[3] = {params_out, json, svg};
        const char *in[MAX_FILES + 2];
        int nin = 0;
        for (int i = 0; i < nfiles; i++)
            in[nin++] = files[i];
        in[nin++] = plan_path;
        in[nin++] = params_in;
        check_outputs(out, in, nin, bad, sizeof bad);
    }
    dmuon_net_params p;
    unsigned mask = 0;
    char pname[64] = "";
    if (!bad[0] && preset && dmuon_net_preset(preset, &p, &mask) != DMUON_OK)
        snprintf(bad, sizeof bad, "--preset: %s", dmuon_errmsg());
    if (bad[0]) {
        fprintf(stderr, "%s: error: %s\n", prog, bad);
        return 2;
    }
    if (params_in) {
        dmuon_rc lrc = dmuon_net_params_load(params_in, &p, &mask, pname, sizeof pname);
        if (lrc != DMUON_OK) {
            fprintf(stderr, "%s: error: --params: %s\n", prog, dmuon_errmsg());
            return dmuon_rc_exit_code(lrc);
        }
        preset = pname[0] ? pname : params_in;
        if (nfitted && says_not_fitted(p.fitted_on)) {
            fprintf(stderr, "%s: error: --fitted-nodes: %s says it was not fitted (fitted_on "
                    "'%s'): no cell is in-sample\n", prog, params_in, p.fitted_on);
            return 2;
        }
    }
    /* what --save-params writes when nothing is fitted here */
    const char *keep_fitted_on = p.fitted_on[0] ? p.fitted_on
                               : params_in ? "not stated in the file it was read from"
                               : "not fitted";
    dmuon_sched_opts so = {DMUON_PATH_AUTO, chunk, 0};
    if (!nfiles) {
        int code = 0;
        if (plan_path && !params_in)
            fprintf(stderr, "%s: note: --preset %s predicts with the preset's starting values, "
                    "not fitted ones; tools/bench/params/%s.json holds the shipped parameters "
                    "(--params)\n", prog, preset, preset);
        if (plan_path)
            code = plan_run(prog, plan_path, &p, preset, params_in, NULL, &so, rnodes, rgpus,
                            jobs, json_stdout, json, svg);
        if (!code && params_out) {   /* after the plan: a failed run saves nothing */
            if (dmuon_net_params_save(params_out, &p, mask, preset,
                                      keep_fitted_on) != DMUON_OK) {
                fprintf(stderr, "%s: error: --save-params: %s\n", prog, dmuon_errmsg());
                return 3;
            }
        }
        return code;
    }

    cells cs = {NULL, 0, prog};
    dmuon_rc rc = DMUON_OK;
    int code = 0;
    dmuon_net_case *fc = NULL;
    dmuon_net_line *fl = NULL;
    double *fm = NULL;
    for (int i = 0; i < nfiles && rc == DMUON_OK; i++) {
        rc = read_rows(&cs, files[i]);
        if (rc != DMUON_OK) {
            char why[512];
            snprintf(why, sizeof why, "%s", dmuon_errmsg());
            rc = DMUON_FAIL(rc, "--cells: %s", why);
        }
    }
    for (int k = 0; k < cs.n && rc == DMUON_OK; k++) {
        rc = build_case(&cs.g[k], plans, &so);
        for (int i = 0; i < nfit; i++)
            cs.g[k].fit |= cs.g[k].nodes == fit_nodes[i];
    }
    if (rc == DMUON_OK && cs.n == 0)
        rc = DMUON_FAIL(DMUON_EINVAL, "the --cells files hold no cells");
    if (rc == DMUON_OK) {
        char nb[512] = "";
        check_nodes_present("--fit-nodes", fit_nodes, nfit, &cs, nb, sizeof nb);
        if (!nb[0])
            check_nodes_present("--fitted-nodes", fitted, nfitted, &cs, nb, sizeof nb);
        if (nb[0])
            rc = DMUON_FAIL(DMUON_EINVAL, "%s", nb);
        else if (nfitted)
            note_fitted_on(prog, params_in, p.fitted_on, fitted, nfitted);
    }
    int nmodel = 0;
    for (int k = 0; k < cs.n; k++)
        nmodel += cs.g[k].model[0] != 0;
    if (rc == DMUON_OK && plans && !nmodel)   /* a script may pass --plans for any table */
        fprintf(stderr, "%s: note: --plans %s: no cell has a model, no plan read\n", prog, plans);
    int nf = 0;
    for (int k = 0; k < cs.n; k++)
        for (int l = 0; l < DMUON_NET_LINE_COUNT; l++)
            nf += cs.g[k].fit && cs.g[k].meas[l] > 0;
    double rms = 0;
    if (rc == DMUON_OK && nf) {
        fc = malloc((size_t)nf * sizeof *fc);
        fl = malloc((size_t)nf * sizeof *fl);
        fm = malloc((size_t)nf * sizeof *fm);
        if (!fc || !fl || !fm)
            rc = DMUON_FAIL(DMUON_ENOMEM, "out of memory");
        /* Two fits: ours' parameters on ours' cells, then the baselines'
         * other parameters on the baselines' cells (ours is the costly
         * replay; the baselines do not move ours). */
        double sq = 0;
        for (int pass = 0; pass < 2 && rc == DMUON_OK; pass++) {
            int j = 0;
            for (int k = 0; k < cs.n; k++)
                for (int l = 0; l < DMUON_NET_LINE_COUNT; l++)
                    if (cs.g[k].fit && cs.g[k].meas[l] > 0 && (l == DMUON_NET_OURS) == !pass) {
                        fc[j] = cs.g[k].c;
                        fl[j] = (dmuon_net_line)l;
                        fm[j] = cs.g[k].meas[l];
                        j++;
                    }
            unsigned m = pass ? mask & ~DMUON_NP_OURS_MASK : mask & DMUON_NP_OURS_MASK;
            double r1 = 0;
            if (j == 0)
                continue;
            fprintf(stderr, "%s: fitting %d cells of %s ...\n", prog, j,
                    pass ? "the baselines" : "ours");
            rc = dmuon_net_fit(&p, m, fc, fl, fm, j, max_evals, &r1);
            sq += r1 * r1 * j;
        }
        rms = sqrt(sq / nf);
    }
    for (int k = 0; k < cs.n && rc == DMUON_OK; k++)
        for (int l = 0; l < DMUON_NET_LINE_COUNT && rc == DMUON_OK; l++)
            if (cs.g[k].meas[l] > 0)
                rc = dmuon_net_predict(&p, &cs.g[k].c, (dmuon_net_line)l, &cs.g[k].pred[l]);
    /* --fitted-nodes: the cells the parameters were fitted on elsewhere are
     * in-sample here too, and the rms log error is theirs, as a fit reports */
    int nin = 0;
    double insq = 0;
    for (int k = 0; k < cs.n && rc == DMUON_OK; k++) {
        for (int i = 0; i < nfitted; i++)
            cs.g[k].fit |= cs.g[k].nodes == fitted[i];
        for (int l = 0; l < DMUON_NET_LINE_COUNT && nfitted && cs.g[k].fit; l++)
            if (cs.g[k].meas[l] > 0) {
                double e = log(cs.g[k].pred[l] / cs.g[k].meas[l]);
                insq += e * e;
                nin++;
            }
    }
    double in_rms = nin ? sqrt(insq / nin) : 0;
    if (rc != DMUON_OK) {
        fprintf(stderr, "%s: error: %s\n", prog, dmuon_errmsg());
        code = dmuon_rc_exit_code(rc);
        goto out;
    }

    if (params_out) {
        char what[512];
        int w = snprintf(what, sizeof what, "%d cells of nodes", nf);
        for (int i = 0; i < nfit && w < (int)sizeof what; i++)
            w += snprintf(what + w, sizeof what - (size_t)w, "%s%d", i ? "," : " ", fit_nodes[i]);
        for (int i = 0; i < nfiles && w < (int)sizeof what; i++)
            w += snprintf(what + w, sizeof what - (size_t)w, "%s%s", i ? ", " : " of ", files[i]);
        if (w < (int)sizeof what)
            snprintf(what + w, sizeof what - (size_t)w, " (rms log error %.3f)", rms);
        rc = dmuon_net_params_save(params_out, &p, mask, preset,
                                   nf ? what : keep_fitted_on);
        if (rc != DMUON_OK) {
            fprintf(stderr, "%s: error: --save-params: %s\n", prog, dmuon_errmsg());
            code = 3;
            goto out;
        }
    }
    report r = {preset, params_in, &p, &cs, nfitted ? fitted : fit_nodes, nfitted ? nfitted : nfit,
                nfitted ? in_rms : rms, nfitted ? nin : nf, nfit > 0};
    if (json_stdout && !plan_path) {
        rc = write_json(stdout, &r);
        if (rc != DMUON_OK) {
            fprintf(stderr, "%s: error: %s\n", prog, dmuon_errmsg());
            code = 3;
            goto out;
        }
        goto files;
    }
    if (json_stdout)
        goto files;   /* the plan's JSON alone on stdout */
    printf("# dmuon-bench predict: preset %s, %d cell groups, ", preset, cs.n);
    if (nf) {
        printf("fitted on nodes");
        for (int i = 0; i < nfit; i++)
            printf("%s%d", i ? "," : " ", fit_nodes[i]);
        printf(" (%d cells, rms log error %.3f)\n", nf, rms);
    } else if (params_in) {
        bool said = p.fitted_on[0] && !says_not_fitted(p.fitted_on);
        printf("not fitted here: parameters from %s%s%s%s\n", params_in,
               said ? " (fitted on " : p.fitted_on[0] ? " (the file says it was not fitted"
                                                      : " (the file does not say what it was "
                                                        "fitted on",
               said ? p.fitted_on : "", ")");
    } else {
        printf("not fitted: the preset's values\n");
    }
    if (nfitted) {
        printf("# in-sample (--fitted-nodes): nodes");
        for (int i = 0; i < nfitted; i++)
            printf("%s%d", i ? "," : " ", fitted[i]);
        int hn[64];
        printf(" (%d cells, rms log error %.3f); %s\n", nin, in_rms,
               held_nodes(&cs, hn, 64) ? "the other cells are held out" : "no cell is held out");
    } else if (!nf) {
        printf("# no cell is in-sample: every cell is scored as held out, also any the "
               "parameters were fitted on (--fitted-nodes LIST marks those)\n");
    }
    printf("# params:");
    for (int i = 0; i < DMUON_NP_COUNT; i++)
        printf(" %s=%.4g", dmuon_net_param_name(i), p.v[i]);
    printf(" mcast=%d\n", p.mcast);
    printf("# ratio = baseline time / ours; err = predicted / measured - 1; fit: cell used for "
           "fitting\n");
    printf("%-8s %12s %5s %6s %-14s %-13s %9s %9s %8s %4s\n", "#op", "bytes", "nodes", "ranks",
           "model", "baseline", "measured", "predicted", "err", "fit");
    for (int k = 0; k < cs.n; k++) {
        const group *g = &cs.g[k];
        for (int l = 1; l < DMUON_NET_LINE_COUNT; l++) {
            if (!has_ratio(g, l))
                continue;
            double m, pr, e = ratio_err(g, l, &m, &pr);
            printf("%-8s %12lld %5d %6d %-14s %-13s %9.3f %9.3f %+7.1f%% %4s\n", op_name(g->op),
                   (long long)g->bytes, g->nodes, g->ranks, g->model[0] ? g->model : "-",
                   dmuon_net_line_name((dmuon_net_line)l), m, pr, 100 * e, g->fit ? "yes" : "no");
        }
    }
    int nodes[64], nn = held_nodes(&cs, nodes, 64);
    if (!nn) {
        printf("# held-out: none (every cell's node count is in %s: nothing checks the "
               "fit)\n", nfitted ? "--fitted-nodes" : "--fit-nodes");
        goto files;
    }
    printf("# held-out accuracy (within: |log(predicted/measured)| <= log 1.25; bias: "
           "geometric mean of predicted/measured)\n");
    printf("%-9s %-13s %5s %5s %6s %6s\n", "#op", "baseline", "nodes", "cells", "within", "bias");
    for (int op = 0; op <= DMUON_NET_PUBLISH; op++)
        for (int l = 1; l < DMUON_NET_LINE_COUNT; l++)
            for (int i = 0; i < nn; i++) {
                accuracy a = acc_ratios(&cs, op, l, nodes[i]);
                if (a.n)
                    printf("%-9s %-13s %5d %5d %6d %6.3f\n", op_name((dmuon_net_op)op),
                           dmuon_net_line_name((dmuon_net_line)l), nodes[i], a.n, a.within,
                           acc_bias(&a));
            }
    for (int l = 0; l < DMUON_NET_LINE_COUNT; l++) {
        accuracy a = acc_times(&cs, l);
        if (a.n)
            printf("# held-out times, %s: %d, within +/-25%%: %d (%.0f%%), bias %.3f\n",
                   dmuon_net_line_name((dmuon_net_line)l), a.n, a.within,
                   100.0 * a.within / a.n, acc_bias(&a));
    }
    accuracy all = acc_ratios(&cs, -1, -1, 0);
    if (all.n)
        printf("# held-out ratios: %d, within +/-25%%: %d (%.0f%%), bias %.3f, worst |log error| "
               "%.3f\n", all.n, all.within, 100.0 * all.within / all.n, acc_bias(&all),
               all.worst);
    else
        printf("# held-out ratios: none (no held-out cell has ours and a baseline)\n");
files:
    if (plan_path) {
        code = plan_run(prog, plan_path, &p, preset, params_in, &r, &so, rnodes, rgpus, jobs,
                        json_stdout, json, svg);
        goto out;
    }
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
