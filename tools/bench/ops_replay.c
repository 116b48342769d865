/*
 * ops_replay.c — replaying real plans in dmuon-bench.
 *
 *   --plan PLAN                 every layer's frozen segment table through
 *                               AllGatherV and ReduceScatterV against the
 *                               baselines, one row per layer and a total
 *   --replay-publish PLAN --rail S
 *                               the publish tasks of rail S in one step, in
 *                               the plan's layer order (owners post as they
 *                               finish, paper Table 7); per-owner = one
 *                               broadcast per unit on the rail, coalesced =
 *                               one variable-length call per run of units
 *                               ordered by (layer, owner node): at most one
 *                               per layer
 *
 * The run's topology must be the plan's (ranks, nodes × GPUs per node).
 *
 * The plan reader (dmuon_plan_load, libcore/plan_io.c) joins libdmuon with
 * the planner; a build without that file compiles the replay out and says
 * so at run time.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ops.h"

#include "dmuon/plan.h"

static dmuon_rc load_matching(const char *path, const dmuon_topo *t, dmuon_plan **out)
{
    dmuon_plan *p = NULL;
    if (access(path, F_OK) != 0)
        return DMUON_FAIL(DMUON_ENOTFOUND, "%s: no such plan file", path);
    dmuon_rc lrc = dmuon_plan_load(path, &p);
    int bad = lrc != DMUON_OK;
    MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_MAX, t->world);
    if (lrc != DMUON_OK)
        return lrc;
    if (bad) {
        dmuon_plan_free(p);
        return DMUON_FAIL(DMUON_EIO, "%s: another rank could not load the plan", path);
    }
    if (dmuon_plan_ranks(p) != t->size || dmuon_plan_gpus_per_node(p) != t->per_node) {
        dmuon_rc rc = DMUON_FAIL(DMUON_EMISMATCH, "%s: the plan is for %d ranks as %d node%s x %d, "
                                 "this run has %d ranks as %d node%s x %d (launch %d ranks "
                                 "with --ranks-per-node %d)", path, (int)dmuon_plan_ranks(p),
                                 (int)dmuon_plan_nodes(p), dmuon_plan_nodes(p) == 1 ? "" : "s",
                                 (int)dmuon_plan_gpus_per_node(p), t->size, t->nodes,
                                 t->nodes == 1 ? "" : "s", t->per_node, (int)dmuon_plan_ranks(p),
                                 (int)dmuon_plan_gpus_per_node(p));
        dmuon_plan_free(p);
        return rc;
    }
    *out = p;
    return DMUON_OK;
}

static void case_init(opdrv_case *c, const bench_opts *o, const dmuon_topo *t)
{
    memset(c, 0, sizeof *c);
    c->topo = t;
    c->gopts.path = o->opt.paths[0];
    c->gopts.chunk_bytes = o->opt.chunk_bytes;
    c->gopts.deadline_ms = o->opt.deadline_ms;
    c->gopts.slots = o->opt.slots;
    c->gopts.fp32_accum = o->opt.fp32_accum;
}

static dmuon_rc replay_layers(bench_opts *o, const dmuon_topo *t, int *wrong)
{
    dmuon_plan *p = NULL;
    DMUON_TRY(load_matching(o->opt.plan, t, &p));
    dmuon_rc rc = DMUON_OK;
    /* Layers with segments (an empty "(root)" layer moves nothing), and the
     * --layers window over them. */
    int nonempty = 0;
    for (size_t i = 0; i < dmuon_plan_layer_count(p); i++) {
        size_t n = 0;
        dmuon_plan_layer_segments(p, i, &n);
        nonempty += n > 0;
    }
    int lo = o->opt.layer_lo, hi = o->opt.layer_hi < 0 ? nonempty : o->opt.layer_hi;
    if (lo >= nonempty || hi > nonempty) {
        dmuon_plan_free(p);
        return DMUON_FAIL(DMUON_EINVAL, "--layers %d:%d: %s has %d layers with segments "
                          "(0..%d)", o->opt.layer_lo, o->opt.layer_hi, o->opt.plan, nonempty,
                          nonempty - 1);
    }
    char what[600];
    if (lo > 0 || hi < nonempty)
        snprintf(what, sizeof what, "plan %s (layers %d..%d of %d)", o->opt.plan, lo, hi - 1,
                 nonempty);
    else
        snprintf(what, sizeof what, "plan %s (%d layer%s)", o->opt.plan, nonempty,
                 nonempty == 1 ? "" : "s");
    o->layer_col = 1;
    bench_print_header(o, t, what);
    for (int op = OPDRV_AGV; op <= OPDRV_RSV && rc == DMUON_OK; op++) {
        if (!(o->opt.op_mask & (1 << op)))
            continue;
        bench_result total;
        memset(&total, 0, sizeof total);
        for (int l = 0; l < OPDRV_NLINES; l++)
            total.ran[l] = 1;
        int64_t total_bytes = 0;
        dmuon_dtype dt = dmuon_plan_param_dtype(p);
        int k = -1;   /* index among the layers with segments */
        for (size_t i = 0; i < dmuon_plan_layer_count(p) && rc == DMUON_OK; i++) {
            size_t n = 0;
            const dmuon_segment *segs = dmuon_plan_layer_segments(p, i, &n);
            if (!n)
                continue;
            k++;
            if (k < lo || k >= hi)
                continue;
            opdrv_case c;
            case_init(&c, o, t);
            c.op = op;
            c.segs = segs;
            c.n = (int)n;
            if (t->rank == 0)
                fprintf(stderr, "dmuon-bench: %s layer %d/%d (%s)\n",
                        opdrv_op_names[op], k - lo + 1, hi - lo,
                        dmuon_plan_layer_name(p, i));
            bench_result r;
            rc = bench_measure(o, &c, &r);
            if (rc != DMUON_OK)
                break;
            if (!total.launch_us) {
                total.launches = r.launches;
                total.launch_us = calloc((size_t)OPDRV_NLINES * r.launches, sizeof(double));
                if (!total.launch_us) {
                    bench_result_release(&r);
                    rc = DMUON_FAIL(DMUON_ENOMEM, "out of memory");
                    break;
                }
            }
            /* the same launches on every layer: the total of launch i sums launch i's */
            for (int j = 0; j < OPDRV_NLINES * r.launches; j++)
                total.launch_us[j] += r.launch_us[j];
            char label[64];
            snprintf(label, sizeof label, "%s", dmuon_plan_layer_name(p, i));
            *wrong |= bench_record(o, t, op, label, dmuon_plan_layer_bytes(p, i), segs[0].dtype, &r);
            total_bytes += dmuon_plan_layer_bytes(p, i);
            dt = segs[0].dtype;
            for (int l = 0; l < OPDRV_NLINES; l++) {
                total.ran[l] &= r.ran[l];
                total.wrong[l] += r.wrong[l];
            }
            bench_result_release(&r);
        }
        if (rc == DMUON_OK && total.launch_us)
            rc = bench_result_settle(&total);   /* the median of the per-launch sums */
        if (rc == DMUON_OK)
            *wrong |= bench_record(o, t, op, "(all layers)", total_bytes, dt, &total);
        bench_result_release(&total);
    }
    dmuon_plan_free(p);
    return rc;
}

static dmuon_rc replay_publish(bench_opts *o, const dmuon_topo *t, int *wrong)
{
    dmuon_plan *p = NULL;
    DMUON_TRY(load_matching(o->opt.replay_publish, t, &p));
    dmuon_rc rc = DMUON_OK;
    dmuon_segment *params = NULL;
    int *layer_of = NULL;
    int n = 0;
    int64_t off = 0;
    if (o->opt.rail >= t->per_node) {
        rc = DMUON_FAIL(DMUON_EINVAL, "--rail %d: out of range, the plan has rails 0..%d",
                        o->opt.rail, t->per_node - 1);
        goto done;
    }
    /* Owners update (and post) in the layer order of the forward pass. */
    rc = dmuon_plan_rail_publish(p, o->opt.rail, &params, &layer_of, &n, &off);
    if (rc != DMUON_OK) {
        char why[512];
        snprintf(why, sizeof why, "%s", dmuon_errmsg());
        rc = DMUON_FAIL(rc, "%s: %s", o->opt.replay_publish, why);
        goto done;
    }
    dmuon_dtype dt = params[0].dtype;
    int layer = layer_of[n - 1];
    char what[512];
    snprintf(what, sizeof what, "publish replay of %s, rail %d (%d units, %d layers)",
             o->opt.replay_publish, o->opt.rail, n, layer + 1);
    bench_print_header(o, t, what);
    if (t->rank == 0)
        fprintf(stderr, "dmuon-bench: publish replay of rail %d: %d units\n", o->opt.rail, n);
    opdrv_case c;
    case_init(&c, o, t);
    c.op = OPDRV_PUB;
    c.segs = params;
    c.n = n;
    c.layer_of = layer_of;
    bench_result r;
    rc = bench_measure(o, &c, &r);
    if (rc == DMUON_OK) {
        char label[32];
        snprintf(label, sizeof label, "rail%d", o->opt.rail);
        *wrong |= bench_record(o, t, OPDRV_PUB, label, off, dt, &r);
    }
    bench_result_release(&r);
done:
    free(params);
    free(layer_of);
    dmuon_plan_free(p);
    return rc;
}

dmuon_rc bench_replay(bench_opts *o, const dmuon_topo *t, int *wrong)
{
    if (o->opt.plan)
        DMUON_TRY(replay_layers(o, t, wrong));
    if (o->opt.replay_publish)
        DMUON_TRY(replay_publish(o, t, wrong));
    return DMUON_OK;
}
