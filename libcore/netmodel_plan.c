/*
 * netmodel_plan.c — a plan's communication under the network model
 * (dmuon/netmodel.h): each layer's gather and reduction, each rail's
 * publish, and a step's totals for lines A, C, D, from the plan alone.
 */
#include "dmuon/netmodel.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static double dmin(double a, double b) { return a < b ? a : b; }

/* Jobs one replayed call of a plan may take (dmuon_net_case.max_jobs): a
 * plan has tens of calls per step, so each gets a quarter of the default. */
#define PLAN_CALL_JOBS (DMUON_NET_REPLAY_JOBS / 4)

void dmuon_net_plan_pred_free(dmuon_net_plan_pred *r)
{
    if (!r)
        return;
    free(r->layers);
    free(r->rail_bytes);
    free(r->rail);
    memset(r, 0, sizeof *r);
}

/* Every line of op on case c into t[]; the publish has no equal-length
 * and root lines (left 0). */
static dmuon_rc all_lines(const dmuon_net_params *p, const dmuon_net_case *c, double *t)
{
    for (int l = 0; l < DMUON_NET_LINE_COUNT; l++) {
        t[l] = 0;
        if (c->op == DMUON_NET_PUBLISH && l > DMUON_NET_COALESCED)
            continue;
        DMUON_TRY(dmuon_net_predict(p, c, (dmuon_net_line)l, &t[l]));
    }
    return DMUON_OK;
}

dmuon_rc dmuon_net_plan_predict(const dmuon_plan *plan, const dmuon_net_params *p,
                                const dmuon_sched_opts *sched_opts, dmuon_net_plan_pred *out)
{
    return dmuon_net_plan_predict_jobs(plan, p, sched_opts, 0, out);
}

dmuon_rc dmuon_net_plan_predict_jobs(const dmuon_plan *plan, const dmuon_net_params *p,
                                     const dmuon_sched_opts *sched_opts, int64_t max_jobs,
                                     dmuon_net_plan_pred *out)
{
    int64_t jobs = max_jobs > 0 ? max_jobs : PLAN_CALL_JOBS;
    memset(out, 0, sizeof *out);
    int R = dmuon_plan_nodes(plan), K = dmuon_plan_gpus_per_node(plan);
    int hsdp = dmuon_plan_sharding(plan) == DMUON_SHARD_HSDP && R > 1;
    out->nodes = R;
    out->per_node = K;
    out->zero_stage = dmuon_plan_zero_stage(plan);
    out->hsdp = hsdp;
    size_t nl = dmuon_plan_layer_count(plan), maxseg = 1;
    for (size_t i = 0; i < nl; i++) {
        size_t n = 0;
        dmuon_plan_layer_segments(plan, i, &n);
        maxseg = n > maxseg ? n : maxseg;
    }
    out->layers = calloc(nl ? nl : 1, sizeof *out->layers);
    dmuon_segment *local = malloc(maxseg * sizeof *local);
    dmuon_rc rc = DMUON_OK;
    if (!out->layers || !local) {
        rc = DMUON_FAIL(DMUON_ENOMEM, "network model: out of memory for %zu layers", nl);
        goto fail;
    }
    double gathers = out->zero_stage == 3 ? 2 : 1;
    for (size_t i = 0; i < nl && rc == DMUON_OK; i++) {
        size_t n = 0;
        const dmuon_segment *segs = dmuon_plan_layer_segments(plan, i, &n);
        if (!n)
            continue;
        dmuon_net_layer_pred *L = &out->layers[out->nlayers++];
        L->name = dmuon_plan_layer_name(plan, i);
        L->bytes = dmuon_plan_layer_bytes(plan, i);
        dmuon_net_case g = {DMUON_NET_AGV, R, K, segs, (int)n, NULL, sched_opts, NULL,
                            jobs};
        if (hsdp) {
            /* the node's gather from each owner's row leader on it */
            for (size_t j = 0; j < n; j++) {
                local[j] = segs[j];
                local[j].owner = segs[j].owner % K;
            }
            g.nodes = 1;
            g.segs = local;
        }
        rc = all_lines(p, &g, L->gather);
        dmuon_net_case r = {DMUON_NET_RSV, R, K, segs, (int)n, NULL, sched_opts, NULL,
                            jobs};
        if (rc == DMUON_OK)
            rc = all_lines(p, &r, L->reduce);
        if (rc != DMUON_OK)
            break;
        out->step[DMUON_NET_STEP_A] += gathers * L->gather[DMUON_NET_EQUAL] +
                                       L->reduce[DMUON_NET_EQUAL];
        out->step[DMUON_NET_STEP_C] +=
            gathers * L->gather[hsdp ? DMUON_NET_COALESCED : DMUON_NET_PER_OWNER] +
            L->reduce[DMUON_NET_PER_OWNER];
        out->step[DMUON_NET_STEP_D] += gathers * L->gather[DMUON_NET_OURS] +
                                       L->reduce[DMUON_NET_OURS];
    }
    if (rc != DMUON_OK)
        goto fail;
    if (hsdp) {
        out->nrails = K;
        out->rail_bytes = calloc((size_t)K, sizeof *out->rail_bytes);
        out->rail = calloc((size_t)K, sizeof *out->rail);
        if (!out->rail_bytes || !out->rail) {
            rc = DMUON_FAIL(DMUON_ENOMEM, "network model: out of memory for %d rails", K);
            goto fail;
        }
        double pub_c = 0, pub_d = 0;
        for (int s = 0; s < K && rc == DMUON_OK; s++) {
            dmuon_segment *ps = NULL;
            int *layer_of = NULL, np = 0;
            if (dmuon_plan_rail_publish(plan, s, &ps, &layer_of, &np, &out->rail_bytes[s]) !=
                DMUON_OK)
                continue;   /* a rail without units publishes nothing */
            dmuon_net_case c = {DMUON_NET_PUBLISH, R, K, ps, np, layer_of, sched_opts, NULL,
                                jobs};
            double t[DMUON_NET_LINE_COUNT];
            rc = all_lines(p, &c, t);
            if (rc == DMUON_OK) {
                for (int l = 0; l < 3; l++)
                    out->rail[s][l] = t[l];
                pub_d = fmax(pub_d, t[DMUON_NET_OURS]);
                pub_c = fmax(pub_c, dmin(t[DMUON_NET_PER_OWNER], t[DMUON_NET_COALESCED]));
            }
            free(ps);
            free(layer_of);
        }
        out->step[DMUON_NET_STEP_C] += pub_c;
        out->step[DMUON_NET_STEP_D] += pub_d;
    }
    if (rc != DMUON_OK)
        goto fail;
    for (int k = 0; k < 3; k++)
        if (!isfinite(out->step[k])) {
            rc = DMUON_FAIL(DMUON_ENUMERIC, "network model: the step's communication of line %c "
                            "is not finite (a parameter too large?)", "ACD"[k]);
            goto fail;
        }
    free(local);
    return DMUON_OK;
fail:
    free(local);
    dmuon_net_plan_pred_free(out);
    return rc;
}

void dmuon_net_plan_print(const dmuon_net_plan_pred *r, FILE *f)
{
    fprintf(f, "# predicted communication (us): %d nodes x %d, %s ZeRO-%d; gather%s and "
            "reduction per layer\n", r->nodes, r->per_node, r->hsdp ? "HSDP" : "FSDP",
            r->zero_stage, r->hsdp ? " inside a node" : "");
    fprintf(f, "%-28s %12s | %9s %9s %9s %9s %9s | %9s %9s %9s %9s %9s\n", "#layer", "bytes",
            "g.ours", "g.owner", "g.coal", "g.equal", "g.root", "r.ours", "r.owner", "r.coal",
            "r.equal", "r.root");
    for (int i = 0; i < r->nlayers; i++) {
        const dmuon_net_layer_pred *L = &r->layers[i];
        fprintf(f, "%-28.28s %12lld |", L->name, (long long)L->bytes);
        for (int l = 0; l < DMUON_NET_LINE_COUNT; l++)
            fprintf(f, " %9.1f", L->gather[l] * 1e6);
        fprintf(f, " |");
        for (int l = 0; l < DMUON_NET_LINE_COUNT; l++)
            fprintf(f, " %9.1f", L->reduce[l] * 1e6);
        fprintf(f, "\n");
    }
    if (r->nrails) {
        fprintf(f, "%-8s %14s %11s %11s %11s\n", "#rail", "bytes", "ours", "per_owner",
                "coalesced");
        for (int s = 0; s < r->nrails; s++)
            fprintf(f, "rail%-4d %14lld %11.1f %11.1f %11.1f\n", s, (long long)r->rail_bytes[s],
                    r->rail[s][0] * 1e6, r->rail[s][1] * 1e6, r->rail[s][2] * 1e6);
    }
    char dc[32] = "-", da[32] = "-";   /* no ratio to a line that moves nothing */
    if (r->step[1] > 0)
        snprintf(dc, sizeof dc, "%.3f", r->step[2] / r->step[1]);
    if (r->step[0] > 0)
        snprintf(da, sizeof da, "%.3f", r->step[2] / r->step[0]);
    fprintf(f, "# step communication (us, operators added, no overlap): A %.1f  C %.1f  D %.1f"
            "  (D/C %s, D/A %s)\n", r->step[0] * 1e6, r->step[1] * 1e6, r->step[2] * 1e6, dc,
            da);
}

void dmuon_net_plan_json(const dmuon_net_plan_pred *r, dmuon_json *w)
{
    dmuon_json_kint(w, "nodes", r->nodes);
    dmuon_json_kint(w, "gpus_per_node", r->per_node);
    dmuon_json_kstr(w, "sharding", r->hsdp ? "hsdp" : "fsdp");
    dmuon_json_kint(w, "zero", r->zero_stage);
    dmuon_json_key(w, "layers");
    dmuon_json_begin_array(w);
    for (int i = 0; i < r->nlayers; i++) {
        const dmuon_net_layer_pred *L = &r->layers[i];
        dmuon_json_begin_object(w);
        dmuon_json_kstr(w, "layer", L->name);
        dmuon_json_kint(w, "bytes", L->bytes);
        for (int pass = 0; pass < 2; pass++) {
            dmuon_json_key(w, pass ? "reduce_us" : "gather_us");
            dmuon_json_begin_object(w);
            for (int l = 0; l < DMUON_NET_LINE_COUNT; l++)
                dmuon_json_kdouble(w, dmuon_net_line_name((dmuon_net_line)l),
                                   (pass ? L->reduce[l] : L->gather[l]) * 1e6);
            dmuon_json_end_object(w);
        }
        dmuon_json_end_object(w);
    }
    dmuon_json_end_array(w);
    dmuon_json_key(w, "rails");
    dmuon_json_begin_array(w);
    for (int s = 0; s < r->nrails; s++) {
        dmuon_json_begin_object(w);
        dmuon_json_kint(w, "rail", s);
        dmuon_json_kint(w, "bytes", r->rail_bytes[s]);
        for (int l = 0; l < 3; l++)
            dmuon_json_kdouble(w, dmuon_net_line_name((dmuon_net_line)l), r->rail[s][l] * 1e6);
        dmuon_json_end_object(w);
    }
    dmuon_json_end_array(w);
    dmuon_json_key(w, "step_us");
    dmuon_json_begin_object(w);
    dmuon_json_kdouble(w, "A", r->step[0] * 1e6);
    dmuon_json_kdouble(w, "C", r->step[1] * 1e6);
    dmuon_json_kdouble(w, "D", r->step[2] * 1e6);
    dmuon_json_end_object(w);
}
