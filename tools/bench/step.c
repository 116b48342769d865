/*
 * dmuon-bench step — the optimizer step of the runtime, per rank: time of
 * the owner-only updates (busiest rank against the plan's predicted
 * busiest) and optimizer-state bytes (busiest rank against total / N and
 * against one copy per node, paper Table 3).  Runs under mpirun; the model
 * is planned for the running cluster, gradients are synthetic.
 */
#include <getopt.h>
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "bench.h"
#include "common/opt.h"
#include "dmuon/io.h"
#include "dmuon/model.h"
#include "dmuon/plan.h"
#include "dmuon/runtime.h"
#include "dmuon/topo.h"
#include <cblas.h>

static void usage(FILE *f)
{
    fprintf(f,
            "usage: mpirun -np N dmuon-bench step [options]\n\n"
            "Times the runtime's optimizer step on every rank and reports the busiest rank's\n"
            "update time against the plan's prediction and the optimizer-state bytes per rank.\n\n"
            "  --model PATH         a model inventory (config.json, safetensors, YAML); default:\n"
            "                       synthetic Qwen2.5-1.5B-shaped blocks at --width-div 4\n"
            "  --layers N           blocks kept (default 4; embeddings and head are left out)\n"
            "  --width-div D        synthetic model: Qwen2.5-1.5B widths divided by D (default 4)\n"
            "  --line A|B|C|D       runtime line (default D); 'all' runs D, C, B, A in turn\n"
            "  --sharding fsdp|hsdp (default fsdp)\n"
            "  --ranks-per-node K   virtual nodes (default: $DMUON_RANKS_PER_NODE or the host)\n"
            "  --steps S            timed steps after one warm-up step (default 2)\n"
            "  --small-unit-bytes B the planner's merge threshold (default: the planner's,\n"
            "                       divided by width-div^2 for the synthetic model)\n"
            "  --overlap            instead: line D forward passes (one X·Wᵀ product of\n"
            "                       --tokens rows per matrix, on the gathered weights) with\n"
            "                       prefetch on and off: pass time and exposed wait\n"
            "  --tokens T           rows of X for --overlap (default 256)\n"
            "  --json-file FILE     also write the figures as JSON\n"
            "  -h, --help\n\n"
            "Step time = wall time of dmuon_rt_step on each rank (Newton-Schulz of the matrices\n"
            "it owns, AdamW on its shards); the median over the timed steps per rank.\n");
}

/* The blocks kept of the model, as specs (names owned by the caller). */
static dmuon_rc keep_blocks(const dmuon_model *m, int layers, dmuon_model **out)
{
    size_t n = dmuon_model_param_count(m), k = 0;
    dmuon_tensor_spec *t = calloc(n ? n : 1, sizeof *t);
    if (!t)
        return DMUON_FAIL(DMUON_ENOMEM, "out of memory");
    /* the layers outside the numbered blocks: "(root)" or "(embed)" first,
     * "(head)" last (dmuon/model.h) */
    const char *first = dmuon_model_layer_count(m) ? dmuon_model_layer_name(m, 0) : "";
    int has_root = first[0] == '(';
    for (size_t i = 0; i < n; i++) {
        const dmuon_param *p = dmuon_model_param(m, i);
        int block = p->layer - has_root;
        if (dmuon_model_layer_name(m, (size_t)p->layer)[0] == '(' || block >= layers)
            continue;
        t[k].name = p->name;
        t[k].ndim = p->ndim;
        memcpy(t[k].shape, p->shape, sizeof t[k].shape);
        t[k].dtype = p->dtype;
        k++;
    }
    dmuon_rc rc = dmuon_model_build(dmuon_model_source(m), t, k, NULL, out);
    free(t);
    return rc;
}

static dmuon_rc synthetic(int layers, int div, dmuon_model **out)
{
    const int64_t h = 1536 / div, ff = 8960 / div, kv = 256 / div;
    size_t n = (size_t)layers * 9;
    dmuon_tensor_spec *t = calloc(n, sizeof *t);
    char (*names)[96] = calloc(n, sizeof *names);
    if (!t || !names) {
        free(t);
        free(names);
        return DMUON_FAIL(DMUON_ENOMEM, "out of memory");
    }
    static const char *sfx[] = {"input_layernorm.weight", "self_attn.q_proj.weight",
                                "self_attn.k_proj.weight", "self_attn.v_proj.weight",
                                "self_attn.o_proj.weight", "post_attention_layernorm.weight",
                                "mlp.gate_proj.weight", "mlp.up_proj.weight",
                                "mlp.down_proj.weight"};
    const int64_t shp[9][2] = {{h, 0}, {h, h}, {kv, h}, {kv, h}, {h, h}, {h, 0},
                               {ff, h}, {ff, h}, {h, ff}};
    for (int l = 0, k = 0; l < layers; l++)
        for (int j = 0; j < 9; j++, k++) {
            snprintf(names[k], sizeof names[k], "model.layers.%d.%s", l, sfx[j]);
            t[k].name = names[k];
            t[k].ndim = shp[j][1] ? 2 : 1;
            t[k].shape[0] = shp[j][0];
            t[k].shape[1] = shp[j][1];
            t[k].dtype = DMUON_BF16;
        }
    dmuon_rc rc = dmuon_model_build("synthetic Qwen2.5-1.5B-shaped", t, n, NULL, out);
    free(t);
    free(names);
    return rc;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

typedef struct {
    double step_s, ns_s;
    double matrices, state_bytes;
} rank_fig;

/* Forward passes over the gathered weights: per layer one product
 * X (tokens × n) · Wᵀ for each 2-D parameter — real compute on what the
 * runtime gathered — timing the pass and the time blocked in the hooks
 * (exposed communication).  Returns medians over passes. */
static dmuon_rc forward_passes(dmuon_rt *rt, const dmuon_plan *plan, const dmuon_model *model,
                               int tokens, int passes, double *pass_s, double *wait_s)
{
    size_t np = dmuon_model_param_count(model);
    int64_t maxn = 1, maxm = 1;
    for (size_t i = 0; i < np; i++) {
        const dmuon_param *p = dmuon_model_param(model, i);
        if (p->ndim == 2 && p->shape[1] > maxn)
            maxn = p->shape[1];
        if (p->ndim == 2 && p->shape[0] > maxm)
            maxm = p->shape[0];
    }
    float *x = calloc((size_t)tokens * (size_t)maxn, sizeof *x);
    float *y = calloc((size_t)tokens * (size_t)maxm, sizeof *y);
    double *pt = calloc((size_t)passes, sizeof *pt), *wt = calloc((size_t)passes, sizeof *wt);
    dmuon_rc rc = DMUON_OK;
    if (!x || !y || !pt || !wt) {
        rc = DMUON_FAIL(DMUON_ENOMEM, "out of memory");
        goto done;
    }
    for (int64_t i = 0; i < (int64_t)tokens * maxn; i++)
        x[i] = (float)(i % 7) * 0.01f;
    const size_t L = dmuon_plan_layer_count(plan);
    for (int ps = 0; ps < passes && rc == DMUON_OK; ps++) {
        dmuon_rt_reset_stats(rt);
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        for (size_t l = 0; l < L && rc == DMUON_OK; l++) {
            if ((rc = dmuon_rt_pre_forward(rt, l)) != DMUON_OK)
                break;
            for (size_t i = 0; i < np; i++) {
                const dmuon_param *p = dmuon_model_param(model, i);
                if ((size_t)p->layer != l || p->ndim != 2)
                    continue;
                const float *w = dmuon_rt_weights(rt, (int)i);
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, tokens, (int)p->shape[0],
                            (int)p->shape[1], 1.0f, x, (int)p->shape[1], w, (int)p->shape[1],
                            0.0f, y, (int)p->shape[0]);
            }
            rc = dmuon_rt_post_forward(rt, l);
        }
        pt[ps] = MPI_Wtime() - t0;
        dmuon_rt_stats st;
        dmuon_rt_get_stats(rt, &st);
        wt[ps] = st.comm_wait_s;
        /* end the micro-batch: backward with zero gradients, no step */
        for (size_t l = L; l-- > 0 && rc == DMUON_OK;)
            if ((rc = dmuon_rt_pre_backward(rt, l)) == DMUON_OK)
                rc = dmuon_rt_post_backward(rt, l);
    }
    if (rc == DMUON_OK) {
        qsort(pt, (size_t)passes, sizeof *pt, cmp_d);
        qsort(wt, (size_t)passes, sizeof *wt, cmp_d);
        *pass_s = pt[passes / 2];
        *wait_s = wt[passes / 2];
    }
done:
    free(x);
    free(y);
    free(pt);
    free(wt);
    return rc;
}

/* A runtime for plan with every parameter of model registered from one
 * pseudo-random vector (*init: the largest parameter's size, kept for the
 * synthetic gradients; the caller frees it) and opened. */
static dmuon_rc open_runtime(const dmuon_plan *plan, const dmuon_model *model, dmuon_line line,
                             int rpn, int prefetch, dmuon_rt **out, float **init, int64_t *maxn)
{
    dmuon_rt_opts ro;
    dmuon_rt_opts_init(&ro);
    ro.line = line;
    ro.ranks_per_node = rpn;
    ro.prefetch = prefetch;
    *out = NULL;
    *init = NULL;
    size_t np = dmuon_model_param_count(model);
    *maxn = 1;
    for (size_t i = 0; i < np; i++)
        if (dmuon_model_param(model, i)->numel > *maxn)
            *maxn = dmuon_model_param(model, i)->numel;
    float *v = malloc((size_t)*maxn * sizeof *v);
    if (!v)
        return DMUON_FAIL(DMUON_ENOMEM, "out of memory");
    uint32_t x = 12345;
    for (int64_t i = 0; i < *maxn; i++) {
        x = x * 1664525u + 1013904223u;
        v[i] = ((float)(x >> 8) / 16777216.0f - 0.5f) * 0.02f;
    }
    dmuon_rt *rt = NULL;
    dmuon_rc rc = dmuon_rt_create(plan, MPI_COMM_WORLD, &ro, &rt);
    for (size_t i = 0; i < np && rc == DMUON_OK; i++) {
        const dmuon_param *p = dmuon_model_param(model, i);
        rc = dmuon_rt_register(rt, p->name, p->ndim, p->shape, v);
    }
    if (rc == DMUON_OK)
        rc = dmuon_rt_open(rt);
    if (rc != DMUON_OK) {
        dmuon_rt_free(rt);
        free(v);
        return rc;
    }
    *out = rt;
    *init = v;
    return DMUON_OK;
}

/* One line's run: fills per-rank figures on rank 0 (figs: size entries). */
static dmuon_rc run_line(const dmuon_plan *plan, const dmuon_model *model, dmuon_line line,
                         int rpn, int steps, rank_fig *figs)
{
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    dmuon_rt *rt = NULL;
    float *init = NULL;
    int64_t maxn = 1;
    size_t np = dmuon_model_param_count(model);
    double *times = calloc((size_t)steps + 1, sizeof *times);
    dmuon_rc rc = times ? open_runtime(plan, model, line, rpn, 1, &rt, &init, &maxn)
                        : DMUON_FAIL(DMUON_ENOMEM, "out of memory");
    const size_t L = dmuon_plan_layer_count(plan);
    double ns_s = 0, mats = 0;
    for (int s = 0; s <= steps && rc == DMUON_OK; s++) {
        for (size_t l = 0; l < L && rc == DMUON_OK; l++)
            if ((rc = dmuon_rt_pre_forward(rt, l)) == DMUON_OK)
                rc = dmuon_rt_post_forward(rt, l);
        for (size_t l = L; l-- > 0 && rc == DMUON_OK;) {
            if ((rc = dmuon_rt_pre_backward(rt, l)) != DMUON_OK)
                break;
            for (size_t i = 0; i < np; i++) {
                const dmuon_param *p = dmuon_model_param(model, i);
                if ((size_t)p->layer != l)
                    continue;
                float *g = dmuon_rt_grad(rt, (int)i);
                for (int64_t e = 0; e < p->numel; e++)
                    g[e] = init[(e * 7 + (int64_t)rank + s) % maxn];
            }
            rc = dmuon_rt_post_backward(rt, l);
        }
        if (rc != DMUON_OK)
            break;
        dmuon_rt_lrs lrs = {0.02, 0.001};
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        rc = dmuon_rt_step(rt, &lrs);
        times[s] = MPI_Wtime() - t0;
        dmuon_rt_stats st;
        dmuon_rt_get_stats(rt, &st);
        if (s > 0) {
            ns_s += st.ns_s;
            mats = (double)st.ns_matrices;
        }
    }
    if (rc == DMUON_OK) {
        qsort(times + 1, (size_t)steps, sizeof *times, cmp_d);
        dmuon_rt_stats st;
        dmuon_rt_get_stats(rt, &st);
        rank_fig mine = {times[1 + steps / 2], ns_s / steps, mats, (double)st.state_bytes};
        MPI_Gather(&mine, 4, MPI_DOUBLE, figs, 4, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    }
    free(init);
    free(times);
    dmuon_rt_free(rt);
    return rc;
}

/* Line D forward passes with and without prefetch; the slowest rank's
 * pass time and exposed wait (medians over passes) on rank 0. */
static dmuon_rc run_overlap(const dmuon_plan *plan, const dmuon_model *model, int rpn,
                            int prefetch, int tokens, int passes, double out[2])
{
    dmuon_rt *rt = NULL;
    float *init = NULL;
    int64_t maxn = 1;
    dmuon_rc rc = open_runtime(plan, model, DMUON_LINE_D, rpn, prefetch, &rt, &init, &maxn);
    double mine[2] = {0, 0};
    if (rc == DMUON_OK)
        rc = forward_passes(rt, plan, model, tokens, passes, &mine[0], &mine[1]);
    if (rc == DMUON_OK)
        MPI_Reduce(mine, out, 2, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    free(init);
    dmuon_rt_free(rt);
    return rc;
}

int bench_step_main(int argc, char **argv)
{
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_SINGLE, &provided);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const char *model_path = NULL, *line_s = "D", *sharding = "fsdp", *json = NULL;
    int layers = 4, div = 4, rpn = 0, steps = 2, rc_exit = 0, json_fail = 0, overlap = 0, tokens = 256;
    long long small_unit = -1;
    static const struct option lo[] = {
        {"model", 1, 0, 'm'},     {"layers", 1, 0, 'L'}, {"width-div", 1, 0, 'w'},
        {"line", 1, 0, 'l'},      {"sharding", 1, 0, 's'}, {"ranks-per-node", 1, 0, 'k'},
        {"steps", 1, 0, 'n'},     {"json-file", 1, 0, 'j'},   {"help", 0, 0, 'h'},
        {"small-unit-bytes", 1, 0, 'u'}, {"overlap", 0, 0, 'o'}, {"tokens", 1, 0, 'T'},
        {0, 0, 0, 0}};
    int c;
    char *end;
    opterr = 0;   /* our message (with a suggestion) */
    while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
        long v = 0;
        if (optarg && strchr("LwknT", c)) {
            v = strtol(optarg, &end, 10);
            if (*end || v < 1 || v > 100000) {
                if (rank == 0)
                    fprintf(stderr, "%s: --%s %s: expected an integer from 1 to 100000\n",
                            argv[0], c == 'L' ? "layers" : c == 'w' ? "width-div"
                                             : c == 'k' ? "ranks-per-node" : c == 'T' ? "tokens" : "steps", optarg);
                MPI_Finalize();
                return 2;
            }
        }
        switch (c) {
        case 'm': model_path = optarg; break;
        case 'L': layers = (int)v; break;
        case 'w': div = (int)v; break;
        case 'l': line_s = optarg; break;
        case 's': sharding = optarg; break;
        case 'k': rpn = (int)v; break;
        case 'n': steps = (int)v; break;
        case 'j': json = optarg; break;
        case 'o': overlap = 1; break;
        case 'T': tokens = (int)v; break;
        case 'u': {   /* a size, in the grammar of every tool */
            char err[256];
            int64_t b;
            if (tool_parse_size("--small-unit-bytes", optarg, 0, DMUON_PLAN_MAX_SMALL_UNIT_BYTES,
                                &b, err, sizeof err)) {
                if (rank == 0)
                    fprintf(stderr, "%s: error: %s\n", argv[0], err);
                MPI_Finalize();
                return 2;
            }
            small_unit = b;
            break;
        }
        case 'h':
            if (rank == 0)
                usage(stdout);
            MPI_Finalize();
            return 0;
        default:
            if (rank == 0) {
                tool_unknown_option(argv[0], argv[optind - 1], lo);
                usage(stderr);
            }
            MPI_Finalize();
            return 2;
        }
    }
    dmuon_line lines[4];
    int nlines = 0;
    dmuon_rc rc = DMUON_OK;
    if (!strcasecmp(line_s, "all")) {
        for (int i = 0; i < 4; i++)
            lines[nlines++] = (dmuon_line)i;
    } else {
        rc = dmuon_line_parse(line_s, &lines[0]);
        nlines = 1;
    }
    dmuon_plan_opts po;
    dmuon_plan_opts_init(&po);
    if (rc == DMUON_OK)
        rc = dmuon_sharding_parse(sharding, &po.sharding);
    if (rc != DMUON_OK) {
        if (rank == 0)
            fprintf(stderr, "%s: %s\n", argv[0], dmuon_errmsg());
        MPI_Finalize();
        return 2;
    }
    dmuon_topo topo;
    rc = dmuon_topo_init(&topo, MPI_COMM_WORLD, rpn);
    if (rc != DMUON_OK) {
        if (rank == 0)
            fprintf(stderr, "%s: %s\n", argv[0], dmuon_errmsg());
        MPI_Finalize();
        return dmuon_rc_exit_code(rc);
    }
    po.nodes = topo.nodes;
    po.gpus_per_node = topo.per_node;
    po.cost = DMUON_COST_FLOPS;
    /* the synthetic model keeps the real one's unit structure: the planner's
     * merge threshold scales with the matrices (width² / div²) */
    if (!model_path)
        po.small_unit_bytes /= (int64_t)div * div;
    if (small_unit >= 0)
        po.small_unit_bytes = small_unit;
    rpn = topo.per_node;
    dmuon_topo_release(&topo);
    dmuon_model *full = NULL, *model = NULL;
    dmuon_plan *plan = NULL;
    rank_fig *figs = calloc((size_t)size, sizeof *figs);
    if (model_path) {
        rc = dmuon_model_load(model_path, NULL, &full);
        if (rc == DMUON_OK)
            rc = keep_blocks(full, layers, &model);
    } else {
        rc = synthetic(layers, div, &model);
    }
    if (rc == DMUON_OK)
        rc = dmuon_plan_build(model, &po, &plan);
    if (rc != DMUON_OK || !figs) {
        if (rank == 0)
            fprintf(stderr, "%s: %s\n", argv[0], figs ? dmuon_errmsg() : "out of memory");
        rc_exit = figs ? dmuon_rc_exit_code(rc) : 3;
        goto out;
    }
    const dmuon_plan_report *rep = dmuon_plan_get_report(plan);
    FILE *jf = NULL;
    dmuon_json jw;
    if (rank == 0) {
        printf("# dmuon-bench step: %s, %d blocks, %d ranks (%d nodes x %d), %s; %d timed steps\n",
               dmuon_model_source(model), layers, size, size / rpn, rpn, sharding, steps);
        printf("# plan (%s costs): busiest rank's NS / mean %.3f, units %zu, Muon matrices %lld\n",
               dmuon_plan_cost_source(plan), rep->busiest_ns_over_mean, rep->units,
               (long long)rep->muon_matrices);
        if (json && !(jf = fopen(json, "w"))) {
            fprintf(stderr, "%s: --json-file %s: cannot write\n", argv[0], json);
            json_fail = 1;
        }
        if (jf) {
            dmuon_json_init(&jw, jf, true);
            dmuon_json_begin_object(&jw);
            dmuon_json_kint(&jw, "ranks", size);
            dmuon_json_kint(&jw, "ranks_per_node", rpn);
            dmuon_json_kstr(&jw, "sharding", sharding);
            dmuon_json_kdouble(&jw, "plan_busiest_ns_over_mean", rep->busiest_ns_over_mean);
            if (!overlap) {
                dmuon_json_key(&jw, "lines");
                dmuon_json_begin_array(&jw);
            }
        }
    }
    if (overlap) {
        double on[2] = {0, 0}, off[2] = {0, 0};
        int passes = steps < 3 ? 5 : steps;
        for (int rep2 = 0; rep2 < 2 && rc_exit == 0; rep2++) {   /* interleaved: off, on, off, on */
            double a[2] = {0, 0}, b[2] = {0, 0};
            rc = run_overlap(plan, model, rpn, 0, tokens, passes, a);
            if (rc == DMUON_OK)
                rc = run_overlap(plan, model, rpn, 1, tokens, passes, b);
            if (rc != DMUON_OK) {
                fprintf(stderr, "%s: overlap: %s\n", argv[0], dmuon_errmsg());
                rc_exit = dmuon_rc_exit_code(rc);
                break;
            }
            if (rank == 0)
                printf("run %d: forward pass %.4f s, exposed wait %.4f s without prefetch; "
                       "%.4f s, %.4f s with prefetch\n", rep2 + 1, a[0], a[1], b[0], b[1]);
            off[0] += a[0] / 2;
            off[1] += a[1] / 2;
            on[0] += b[0] / 2;
            on[1] += b[1] / 2;
        }
        if (rank == 0 && rc_exit == 0) {
            printf("overlap (slowest rank, median of %d passes, mean of 2 runs): exposed wait "
                   "%.4f s -> %.4f s with prefetch (%.0f%% hidden); pass %.4f s -> %.4f s\n",
                   passes, off[1], on[1], off[1] > 0 ? 100.0 * (1 - on[1] / off[1]) : 0, off[0],
                   on[0]);
            if (jf) {
                dmuon_json_key(&jw, "overlap");
                dmuon_json_begin_object(&jw);
                dmuon_json_kint(&jw, "tokens", tokens);
                dmuon_json_kdouble(&jw, "wait_no_prefetch_s", off[1]);
                dmuon_json_kdouble(&jw, "wait_prefetch_s", on[1]);
                dmuon_json_kdouble(&jw, "pass_no_prefetch_s", off[0]);
                dmuon_json_kdouble(&jw, "pass_prefetch_s", on[0]);
                dmuon_json_end_object(&jw);
            }
        }
        nlines = 0;
    }
    for (int li = 0; li < nlines && rc_exit == 0; li++) {
        if (rank == 0)
            fprintf(stderr, "%s: line %s ...\n", argv[0], dmuon_line_name(lines[li]));
        rc = run_line(plan, model, lines[li], rpn, steps, figs);
        if (rc != DMUON_OK) {
            fprintf(stderr, "%s: line %s: %s\n", argv[0], dmuon_line_name(lines[li]),
                    dmuon_errmsg());
            rc_exit = dmuon_rc_exit_code(rc);
            break;
        }
        if (rank != 0)
            continue;
        double busiest = 0, sum = 0, st_max = 0, st_sum = 0, ns_max = 0;
        int br = 0;
        printf("\nline %s\n%6s %10s %12s %12s %14s\n", dmuon_line_name(lines[li]), "rank",
               "matrices", "NS s", "step s", "state MiB");
        for (int r = 0; r < size; r++) {
            printf("%6d %10.0f %12.4f %12.4f %14.2f\n", r, figs[r].matrices, figs[r].ns_s,
                   figs[r].step_s, figs[r].state_bytes / 1048576.0);
            if (figs[r].step_s > busiest) {
                busiest = figs[r].step_s;
                br = r;
            }
            sum += figs[r].step_s;
            st_sum += figs[r].state_bytes;
            if (figs[r].state_bytes > st_max)
                st_max = figs[r].state_bytes;
            if (figs[r].ns_s > ns_max)
                ns_max = figs[r].ns_s;
        }
        double mean = sum / size, per_node = st_sum / rpn;
        /* lines A and B hold each shard's state once; C and D each matrix's
         * state once: st_sum is one copy of the cluster's state either way */
        printf("busiest step %.4f s (rank %d) = %.3f x the mean %.4f s", busiest, br,
               mean > 0 ? busiest / mean : 0, mean);
        if (lines[li] == DMUON_LINE_C || lines[li] == DMUON_LINE_D)
            printf(" (the plan predicts %.3f x for its owners)", rep->busiest_ns_over_mean);
        printf("\n");
        printf("state: busiest rank %.2f MiB = %.3f x total/N (%.2f MiB); one copy per node "
               "would be %.2f MiB per rank\n", st_max / 1048576.0,
               st_sum > 0 ? st_max / (st_sum / size) : 0, st_sum / size / 1048576.0,
               per_node / 1048576.0);
        if (jf) {
            dmuon_json_begin_object(&jw);
            dmuon_json_kstr(&jw, "line", dmuon_line_name(lines[li]));
            dmuon_json_kdouble(&jw, "busiest_step_s", busiest);
            dmuon_json_kdouble(&jw, "mean_step_s", mean);
            dmuon_json_kdouble(&jw, "busiest_ns_s", ns_max);
            dmuon_json_kdouble(&jw, "busiest_state_bytes", st_max);
            dmuon_json_kdouble(&jw, "total_state_bytes", st_sum);
            dmuon_json_kdouble(&jw, "one_copy_per_node_bytes_per_rank", per_node);
            dmuon_json_key(&jw, "ranks");
            dmuon_json_begin_array(&jw);
            for (int r = 0; r < size; r++) {
                dmuon_json_begin_object(&jw);
                dmuon_json_kint(&jw, "rank", r);
                dmuon_json_kdouble(&jw, "step_s", figs[r].step_s);
                dmuon_json_kdouble(&jw, "ns_s", figs[r].ns_s);
                dmuon_json_kdouble(&jw, "matrices", figs[r].matrices);
                dmuon_json_kdouble(&jw, "state_bytes", figs[r].state_bytes);
                dmuon_json_end_object(&jw);
            }
            dmuon_json_end_array(&jw);
            dmuon_json_end_object(&jw);
        }
    }
    if (jf) {
        if (!overlap)
            dmuon_json_end_array(&jw);
        dmuon_json_end_object(&jw);
        fputc('\n', jf);
        char err[4400];
        if (tool_close_file(jf, json, err, sizeof err)) {
            fprintf(stderr, "%s: %s\n", argv[0], err);
            json_fail = 1;
        }
    }
    if (json_fail && rc_exit == 0)
        rc_exit = 3;
out:
    free(figs);
    dmuon_plan_free(plan);
    dmuon_model_free(model);
    dmuon_model_free(full);
    MPI_Finalize();
    return rc_exit;
}
