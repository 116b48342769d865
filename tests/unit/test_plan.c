/*
 * test_plan.c — owner plans: the paper's load-balance figures with the
 * analytic flops cost (paper Appendix B and C.5), the assignment against a
 * plain O(U*N) transcription of the stated rule, the plan invariants checked
 * here independently of dmuon_plan_check, plan files (byte-identical,
 * versioned, digests), and measured costs read from a SQLite table.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dmuon/costdb.h"
#include "dmuon/pool.h"
#include "dmuon/layout.h"
#include "dmuon/plan.h"
#include "plan_internal.h"

#include "testutil.h"

static int setup(void **state) { return testutil_setup("plan"); }
static int teardown(void **state) { return testutil_teardown(); }

static dmuon_model *load(const char *rel)
{
    char p[1200];
    dmuon_model *m = NULL;
    snprintf(p, sizeof p, "%s/%s", root, rel);
    assert_int_equal(dmuon_model_load(p, NULL, &m), DMUON_OK);
    return m;
}

static dmuon_plan *plan(const dmuon_model *m, int nodes, int gpus, dmuon_sharding sh,
                        void (*tweak)(dmuon_plan_opts *))
{
    dmuon_plan_opts o;
    dmuon_plan_opts_init(&o);
    o.cost = DMUON_COST_FLOPS;
    o.nodes = nodes;
    o.gpus_per_node = gpus;
    o.sharding = sh;
    if (tweak)
        tweak(&o);
    dmuon_plan *p = NULL;
    dmuon_rc rc = dmuon_plan_build(m, &o, &p);
    if (rc)
        fprintf(stderr, "plan: %s\n", dmuon_errmsg());
    assert_int_equal(rc, DMUON_OK);
    return p;
}

static void no_cap(dmuon_plan_opts *o) { o->byte_cap = false; }
static void fuse(dmuon_plan_opts *o) { o->fuse_experts = true; }
static void no_col(dmuon_plan_opts *o) { o->column_balance = false; }
static void no_spread(dmuon_plan_opts *o) { o->layer_spread = false; }
static void rr(dmuon_plan_opts *o) { o->strategy = DMUON_STRATEGY_ROUND_ROBIN; }

#define MIB (1024.0 * 1024.0)

/* Independent invariant checks (not dmuon_plan_check): coverage, owner
 * range, layer spreading, leaders, windows. */
static void independent_invariants(const dmuon_plan *p, const dmuon_model *m)
{
    size_t nu, nm, np;
    const dmuon_plan_unit *u = dmuon_plan_units(p, &nu);
    const dmuon_plan_member *mb = dmuon_plan_members(p, &nm);
    dmuon_plan_params(p, &np);
    int32_t N = dmuon_plan_ranks(p), K = dmuon_plan_gpus_per_node(p), R = dmuon_plan_nodes(p);
    assert_int_equal(np, dmuon_model_param_count(m));
    /* each Muon matrix of the model in exactly one unit; AdamW in none */
    int64_t **seen = calloc(np, sizeof *seen);
    assert_non_null(seen);
    for (size_t i = 0; i < np; i++) {
        const dmuon_param *q = dmuon_model_param(m, i);
        seen[i] = calloc((size_t)(q->matrices ? q->matrices : 1), sizeof **seen);
    }
    for (size_t k = 0; k < nu; k++) {
        assert_true(u[k].owner >= 0 && u[k].owner < N);
        assert_int_equal(u[k].column, u[k].owner % K);
        for (size_t j = 0; j < u[k].n_members; j++) {
            const dmuon_plan_member *x = &mb[u[k].first_member + j];
            const dmuon_param *q = dmuon_model_param(m, (size_t)x->param);
            assert_int_equal(q->role, DMUON_ROLE_MUON);
            assert_int_equal(q->layer, u[k].layer);
            for (int64_t t = x->first_matrix; t < x->first_matrix + x->n_matrices; t++) {
                assert_true(t >= 0 && t < q->matrices);
                seen[x->param][t]++;
            }
        }
    }
    for (size_t i = 0; i < np; i++) {
        const dmuon_param *q = dmuon_model_param(m, i);
        for (int64_t t = 0; t < q->matrices; t++)
            assert_int_equal(seen[i][t], 1);
        free(seen[i]);
    }
    free(seen);
    /* layer spreading: while a layer has no more units than ranks, no two
     * of its units share a rank */
    if (dmuon_plan_options(p)->layer_spread &&
        dmuon_plan_options(p)->strategy == DMUON_STRATEGY_LPT) {
        for (size_t a = 0; a < nu; a++) {
            size_t in_layer = 0;
            for (size_t b = 0; b < nu; b++)
                in_layer += u[b].layer == u[a].layer;
            if (in_layer > (size_t)N)
                continue;
            for (size_t b = a + 1; b < nu; b++)
                if (u[b].layer == u[a].layer)
                    assert_int_not_equal(u[a].owner, u[b].owner);
        }
    }
    /* HSDP leaders: on every node, the GPU in the owner's column */
    for (size_t k = 0; k < nu; k++)
        for (int32_t r = 0; r < R; r++) {
            int32_t l = dmuon_plan_leader(p, k, r);
            if (dmuon_plan_sharding(p) == DMUON_SHARD_HSDP) {
                assert_int_equal(l / K, r);
                assert_int_equal(l % K, u[k].owner % K);
            }
        }
    /* windows: per owner, units tile [0, window) */
    int64_t *sum = calloc((size_t)N, sizeof *sum);
    for (size_t k = 0; k < nu; k++) {
        assert_true(u[k].window_offset >= 0);
        assert_true(u[k].window_offset + u[k].bytes <= dmuon_plan_window_bytes(p, u[k].owner));
        sum[u[k].owner] += u[k].bytes;
    }
    for (int32_t r = 0; r < N; r++)
        assert_int_equal(sum[r], dmuon_plan_window_bytes(p, r));
    free(sum);
    size_t viol = 99;
    assert_int_equal(dmuon_plan_check(p, &viol), DMUON_OK);
    assert_int_equal(viol, 0);
}

/* ------------------------------------------------------ paper figures -- */

/* Appendix B: Qwen2.5-1.5B on 32 ranks, the byte cap takes the heaviest
 * rank from about 1.34x to about 1.14x the mean bytes. */
static void test_qwen15b_byte_cap(void **state)
{
    dmuon_model *m = load("models/qwen2.5-1.5b.yaml");
    dmuon_plan *with = plan(m, 4, 8, DMUON_SHARD_FSDP, NULL);
    dmuon_plan *without = plan(m, 4, 8, DMUON_SHARD_FSDP, no_cap);
    const dmuon_plan_report *a = dmuon_plan_get_report(with), *b = dmuon_plan_get_report(without);
    fprintf(stderr, "1.5B/32: bytes/mean %.3f with cap, %.3f without; ns/mean %.3f, %.3f\n",
            a->heaviest_bytes_over_mean, b->heaviest_bytes_over_mean, a->busiest_ns_over_mean,
            b->busiest_ns_over_mean);
    assert_true(fabs(b->heaviest_bytes_over_mean - 1.34) <= 0.02);
    assert_true(fabs(a->heaviest_bytes_over_mean - 1.14) <= 0.02);
    /* recompute the heaviest rank's bytes over the mean from the units */
    size_t nu;
    const dmuon_plan_unit *u = dmuon_plan_units(with, &nu);
    double total = 0, max = 0;
    for (size_t i = 0; i < nu; i++)
        total += (double)u[i].bytes;
    for (int32_t r = 0; r < 32; r++) {
        double s = 0;
        for (size_t i = 0; i < nu; i++)
            s += u[i].owner == r ? (double)u[i].bytes : 0;
        max = s > max ? s : max;
    }
    assert_true(fabs(max / (total / 32) - a->heaviest_bytes_over_mean) < 1e-9);
    assert_int_equal(a->muon_matrices, 196);
    independent_invariants(with, m);
    independent_invariants(without, m);
    dmuon_plan_free(with);
    dmuon_plan_free(without);
    dmuon_model_free(m);
}

/* C.5: Qwen1.5-MoE-A2.7B on 256 ranks, per-expert units: largest owner
 * window about 110 MiB (1.08x the mean); far larger with fused experts. */
static void test_moe_per_expert_units(void **state)
{
    dmuon_model *m = load("models/qwen1.5-moe-a2.7b.yaml");
    dmuon_plan *p = plan(m, 32, 8, DMUON_SHARD_FSDP, NULL);
    dmuon_plan *f = plan(m, 32, 8, DMUON_SHARD_FSDP, fuse);
    const dmuon_plan_report *a = dmuon_plan_get_report(p), *b = dmuon_plan_get_report(f);
    fprintf(stderr, "MoE/256: max window %.1f MiB (%.3f x mean), fused %.1f MiB\n",
            a->max_owner_bytes / MIB, a->heaviest_bytes_over_mean, b->max_owner_bytes / MIB);
    assert_true(fabs(a->max_owner_bytes / MIB - 110.0) <= 2.0);
    assert_true(fabs(a->heaviest_bytes_over_mean - 1.08) <= 0.01);
    assert_true(b->max_owner_bytes >= 3 * a->max_owner_bytes);
    /* every expert matrix is its own unit: 24 x 180 of them, 5.5 MiB each */
    size_t nu, experts = 0;
    const dmuon_plan_unit *u = dmuon_plan_units(p, &nu);
    for (size_t i = 0; i < nu; i++)
        if (strstr(u[i].name, ".experts.")) {
            experts++;
            assert_int_equal(u[i].matrices, 1);
            assert_int_equal(u[i].bytes, 1408 * 2048 * 2);
        }
    assert_int_equal(experts, 4320);
    independent_invariants(p, m);
    dmuon_plan_free(p);
    dmuon_plan_free(f);
    dmuon_model_free(m);

    /* the same model with fused 3-D expert storage (gate_up_proj [60,2816,2048]):
     * per-expert units give the same windows; one unit per tensor is far worse */
    char path[1200];
    dmuon_model_opts fo = {.fused_experts = true};
    snprintf(path, sizeof path, "%s/models/qwen1.5-moe-a2.7b/config.json", root);
    assert_int_equal(dmuon_model_load(path, &fo, &m), DMUON_OK);
    p = plan(m, 32, 8, DMUON_SHARD_FSDP, NULL);
    f = plan(m, 32, 8, DMUON_SHARD_FSDP, fuse);
    a = dmuon_plan_get_report(p);
    b = dmuon_plan_get_report(f);
    fprintf(stderr, "MoE/256 fused storage: max window %.1f MiB, one unit per tensor %.1f MiB\n",
            a->max_owner_bytes / MIB, b->max_owner_bytes / MIB);
    assert_true(fabs(a->max_owner_bytes / MIB - 110.0) <= 2.0);
    assert_true(b->max_owner_bytes >= 6 * a->max_owner_bytes);
    independent_invariants(p, m);
    independent_invariants(f, m);
    dmuon_plan_free(p);
    dmuon_plan_free(f);
    dmuon_model_free(m);
}

/* Appendix B: on HSDP with 16 nodes x 8 GPUs, the heaviest rail of pi0.5
 * and of Qwen2.5-7B stays within 1.06x the mean. */
static void test_hsdp_rails(void **state)
{
    const char *models[] = {"models/pi05.yaml", "models/qwen2.5-7b.yaml"};
    for (int k = 0; k < 2; k++) {
        dmuon_model *m = load(models[k]);
        dmuon_plan *p = plan(m, 16, 8, DMUON_SHARD_HSDP, NULL);
        const dmuon_plan_report *r = dmuon_plan_get_report(p);
        /* rail bytes recomputed from the units */
        size_t nu;
        const dmuon_plan_unit *u = dmuon_plan_units(p, &nu);
        double rail[8] = {0}, total = 0, max = 0;
        for (size_t i = 0; i < nu; i++) {
            rail[u[i].owner % 8] += (double)u[i].bytes;
            total += (double)u[i].bytes;
        }
        for (int s = 0; s < 8; s++)
            max = rail[s] > max ? rail[s] : max;
        fprintf(stderr, "%s HSDP 16x8: heaviest rail %.3f x mean\n", models[k], max / (total / 8));
        assert_true(fabs(max / (total / 8) - r->heaviest_rail_over_mean) < 1e-9);
        assert_true(r->heaviest_rail_over_mean <= 1.06);
        independent_invariants(p, m);
        dmuon_plan_free(p);
        p = plan(m, 16, 8, DMUON_SHARD_HSDP, no_col);
        independent_invariants(p, m);
        dmuon_plan_free(p);
        dmuon_model_free(m);
    }
}

/* ------------------------------------------------ default vs ablations -- */

/* Busiest rank's NS, heaviest window and heaviest rail, from the units. */
static void figures(const dmuon_plan *p, double *busiest, double *heaviest, double *rail)
{
    size_t nu;
    const dmuon_plan_unit *u = dmuon_plan_units(p, &nu);
    int32_t N = dmuon_plan_ranks(p), K = dmuon_plan_gpus_per_node(p);
    double *ns = calloc((size_t)N, sizeof *ns), *by = calloc((size_t)N, sizeof *by);
    double *rl = calloc((size_t)K, sizeof *rl);
    assert_non_null(ns);
    assert_non_null(by);
    assert_non_null(rl);
    *busiest = *heaviest = *rail = 0;
    for (size_t i = 0; i < nu; i++) {
        ns[u[i].owner] += u[i].ns_ms;
        by[u[i].owner] += (double)u[i].bytes;
        rl[u[i].owner % K] += (double)u[i].bytes;
    }
    for (int32_t r = 0; r < N; r++) {
        *busiest = ns[r] > *busiest ? ns[r] : *busiest;
        *heaviest = by[r] > *heaviest ? by[r] : *heaviest;
    }
    for (int32_t c = 0; c < K; c++)
        *rail = rl[c] > *rail ? rl[c] : *rail;
    free(ns);
    free(by);
    free(rl);
}

/* On dense and MoE models at 2 to 32 nodes x 8, FSDP and HSDP, the default
 * plan's busiest NS is within 1% of no-column-balance's and of
 * round-robin's (whether or not round-robin keeps the byte cap), and its
 * heaviest rail within 1% of no-column-balance's.  Every lower bound
 * stays at or under every variant's busiest rank. */
static void test_default_beats_ablations(void **state)
{
    const char *models[] = {"models/qwen2.5-1.5b.yaml",        "models/qwen2.5-7b.yaml",
                            "models/qwen2.5-32b.yaml",         "models/pi05.yaml",
                            "models/wall-oss-0.5.yaml",        "models/qwen2.5-7b/config.json",
                            "tests/data/plan/llama-3-8b.json", "tests/data/plan/mistral-7b.json",
                            "tests/data/plan/qwen3-8b.json",   "tests/data/plan/mixtral-8x7b.json",
                            "models/qwen1.5-moe-a2.7b.yaml"};
    const int nodes[] = {2, 4, 8, 16, 32};
    int cases = 0, worse = 0, excuses = 0;
    for (size_t k = 0; k < sizeof models / sizeof models[0]; k++) {
        dmuon_model *m = load(models[k]);
        for (size_t a = 0; a < sizeof nodes / sizeof nodes[0]; a++)
            for (int h = 0; h < 2; h++) {
                dmuon_sharding sh = h ? DMUON_SHARD_HSDP : DMUON_SHARD_FSDP;
                dmuon_plan *d = plan(m, nodes[a], 8, sh, NULL);
                dmuon_plan *nc = plan(m, nodes[a], 8, sh, no_col);
                dmuon_plan *r = plan(m, nodes[a], 8, sh, rr);
                double db, dh, dr, cb, ch, cr, rb, rh, rrl;
                figures(d, &db, &dh, &dr);
                figures(nc, &cb, &ch, &cr);
                figures(r, &rb, &rh, &rrl);
                const dmuon_plan_report *rep = dmuon_plan_get_report(d);
                double cap = 1.1 * (double)rep->total_bytes / rep->ranks;
                double best = cb < rb ? cb : rb;
                bool bad = db > 1.01 * best || (h && dr > 1.01 * cr);
                /* the one exception, printed: round-robin over the byte cap
                 * beats a default that is proven optimal within the cap (the
                 * byte-cap bound, checked by test_bound_cap and
                 * test_bound_brute_force) */
                bool excused = bad && !(h && dr > 1.01 * cr) && db <= 1.01 * cb &&
                               rh > cap * (1 + 1e-12) && rep->bound_with_cap &&
                               rep->byte_cap_fallbacks == 0 &&
                               db <= rep->lower_bound_ms * (1 + 1e-9);
                if (excused) {
                    fprintf(stderr, "%s %dx8 %s: round-robin %.4g (bytes %.3f x the cap) beats "
                                    "the default %.4g, optimal within the byte cap\n",
                            models[k], nodes[a], h ? "hsdp" : "fsdp", rb, rh / cap, db);
                    bad = false;
                    excuses++;
                }
                /* the bound holds for every plan (within the byte cap, when
                 * it counts the cap) */
                double lb = rep->lower_bound_ms;
                bool rr_in_cap = rh <= cap * (1 + 1e-12);
                assert_true(lb <= db * (1 + 1e-9));
                if (!rep->bound_with_cap || dmuon_plan_get_report(nc)->byte_cap_fallbacks == 0)
                    assert_true(lb <= cb * (1 + 1e-9));
                if (!rep->bound_with_cap || rr_in_cap)
                    assert_true(lb <= rb * (1 + 1e-9));
                if (bad)
                    fprintf(stderr, "%s %dx8 %s: busiest %.4g (no-column-balance %.4g, "
                                    "round-robin %.4g), rail %.4g (no-column-balance %.4g)\n",
                            models[k], nodes[a], h ? "hsdp" : "fsdp", db, cb, rb, dr, cr);
                worse += bad;
                cases++;
                dmuon_plan_free(d);
                dmuon_plan_free(nc);
                dmuon_plan_free(r);
            }
        dmuon_model_free(m);
    }
    fprintf(stderr, "default vs ablations: %d cases, %d worse by more than 1%%, %d excused "
                    "(optimal within the byte cap)\n", cases, worse, excuses);
    assert_int_equal(worse, 0);
}

/* The sharing bound: Qwen2.5-1.5B on 4 x 8 has 112 near-equal units, so
 * some rank holds 4 where the mean is 3.5; the bound sees it. */
static void test_bound_tight(void **state)
{
    dmuon_model *m = load("models/qwen2.5-1.5b.yaml");
    dmuon_plan *p = plan(m, 4, 8, DMUON_SHARD_FSDP, NULL);
    double b, h, r;
    figures(p, &b, &h, &r);
    const dmuon_plan_report *rep = dmuon_plan_get_report(p);
    /* independent: the 4 cheapest of the 97 most costly units */
    size_t nu;
    const dmuon_plan_unit *u = dmuon_plan_units(p, &nu);
    assert_int_equal(nu, 112);
    double *c = malloc(nu * sizeof *c);
    for (size_t i = 0; i < nu; i++)
        c[i] = u[i].ns_ms;
    for (size_t i = 0; i < nu; i++)   /* selection sort, descending */
        for (size_t j = i + 1; j < nu; j++)
            if (c[j] > c[i]) {
                double t = c[i];
                c[i] = c[j];
                c[j] = t;
            }
    double four = c[93] + c[94] + c[95] + c[96];
    assert_true(rep->lower_bound_ms >= four * (1 - 1e-12));
    assert_true(b / rep->lower_bound_ms <= 1.01);
    assert_true(rep->lower_bound_ms <= b * (1 + 1e-12));
    free(c);
    dmuon_plan_free(p);
    dmuon_model_free(m);
}

/* The bound against the optimum: small models of random shapes (every
 * matrix its own unit, each in its own layer), every assignment of their
 * units to 3 ranks enumerated; the bound stays at or under the best
 * busiest rank of all assignments (of those within the byte cap, when the
 * bound counts the cap), and a bound marked optimal is reached. */
static void test_bound_brute_force(void **state)
{
    uint64_t x = 42;
    for (int inst = 0; inst < 40; inst++) {
        dmuon_tensor_spec t[9];
        char names[9][48];
        int nt = 5 + inst % 5;
        for (int i = 0; i < nt; i++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            snprintf(names[i], sizeof names[i], "model.layers.%d.w.weight", i);
            /* odd instances: near-equal sizes, where the cap binds */
            int64_t lo = inst % 2 ? 4 : 1, span = inst % 2 ? 3 : 8;
            t[i] = (dmuon_tensor_spec){names[i], 2, {128 * (lo + (int64_t)((x >> 33) % span)),
                                                     128 * (lo + (int64_t)((x >> 45) % span))},
                                       DMUON_BF16};
        }
        dmuon_model *m = NULL;
        assert_int_equal(dmuon_model_build("brute", t, (size_t)nt, NULL, &m), DMUON_OK);
        dmuon_plan_opts o;
        dmuon_plan_opts_init(&o);
        o.cost = DMUON_COST_FLOPS;
        o.nodes = 1;
        o.gpus_per_node = 3;
        o.small_unit_bytes = 0;
        o.epsilon = 0.1 * (inst % 4);
        dmuon_plan *p = NULL;
        assert_int_equal(dmuon_plan_build(m, &o, &p), DMUON_OK);
        size_t nu;
        const dmuon_plan_unit *u = dmuon_plan_units(p, &nu);
        const dmuon_plan_report *r = dmuon_plan_get_report(p);
        double cap = (1 + o.epsilon) * (double)r->total_bytes / 3;
        double best_all = INFINITY, best_cap = INFINITY;
        int64_t combos = 1;
        for (size_t i = 0; i < nu; i++)
            combos *= 3;
        for (int64_t a = 0; a < combos; a++) {
            double load[3] = {0}, by[3] = {0};
            int64_t v = a;
            for (size_t i = 0; i < nu; i++, v /= 3) {
                load[v % 3] += u[i].ns_ms;
                by[v % 3] += (double)u[i].bytes;
            }
            double mx = fmax(load[0], fmax(load[1], load[2]));
            best_all = fmin(best_all, mx);
            if (by[0] <= cap && by[1] <= cap && by[2] <= cap)
                best_cap = fmin(best_cap, mx);
        }
        double opt = r->bound_with_cap ? best_cap : best_all;
        assert_true(r->lower_bound_ms <= opt * (1 + 1e-9));
        if (r->bound_optimal)
            assert_true(r->busiest_ns_ms <= opt * (1 + 1e-9));
        dmuon_plan_free(p);
        dmuon_model_free(m);
    }
}

/* The byte-cap bound on Llama-3-8B at 8 x 8: the cap (1.1 x mean) lets a
 * rank hold two 112 MiB MLP matrices but then nothing else (the smallest
 * unit is 16 MiB), so with 96 of them on 64 ranks, 32 ranks hold exactly two
 * and the other 32 carry everything else: busiest >= (total - 64 MLP) / 32,
 * which the plan reaches. */
static void test_bound_cap(void **state)
{
    dmuon_model *m = load("tests/data/plan/llama-3-8b.json");
    dmuon_plan *p = plan(m, 8, 8, DMUON_SHARD_FSDP, NULL);
    const dmuon_plan_report *r = dmuon_plan_get_report(p);
    size_t nu;
    const dmuon_plan_unit *u = dmuon_plan_units(p, &nu);
    double total = 0, mlp = 0, cap = 1.1 * (double)r->total_bytes / 64, small = INFINITY;
    int nmlp = 0;
    for (size_t i = 0; i < nu; i++) {
        total += u[i].ns_ms;
        if (strstr(u[i].name, ".mlp.")) {
            nmlp++;
            mlp = u[i].ns_ms;
            assert_true(2.0 * (double)u[i].bytes <= cap && 3.0 * (double)u[i].bytes > cap);
        } else if ((double)u[i].bytes < small) {
            small = (double)u[i].bytes;
        }
    }
    assert_int_equal(nmlp, 96);
    assert_true(2.0 * 117440512.0 + small > cap);
    double expect = (total - 64 * mlp) / 32;
    assert_true(r->bound_with_cap);
    assert_true(fabs(r->lower_bound_ms - expect) <= 1e-9 * expect);
    assert_int_equal(r->byte_cap_fallbacks, 0);
    assert_true(r->bound_optimal);
    dmuon_plan_free(p);
    dmuon_model_free(m);
}

/* Memory (dmuon/layout.h): a DeepSeek-V3-shaped config on 64 ranks gathers
 * a layer of more than 20 GiB (its parameters in BF16, counted here from
 * the model); the busiest rank needs the most. */
static void test_memory(void **state)
{
    dmuon_model *m = load("tests/data/plan/deepseek-v3.json");
    dmuon_plan *p = plan(m, 8, 8, DMUON_SHARD_FSDP, NULL);
    dmuon_layout *x = NULL;
    assert_int_equal(dmuon_layout_build_busiest(p, NULL, &x), DMUON_OK);
    const dmuon_layout_memory mem = x->mem;
    int32_t r = x->opts.rank;
    assert_true(mem.largest_layer >= 0);
    int64_t layer = 0;
    for (size_t i = 0; i < dmuon_model_param_count(m); i++)
        if (dmuon_model_param(m, i)->layer == mem.largest_layer)
            layer += dmuon_model_param(m, i)->numel * 2;
    /* padding of the AdamW shards only adds under 64 elements per layer */
    assert_true(mem.largest_layer_bytes >= layer && mem.largest_layer_bytes < layer + 64 * 2);
    assert_true(mem.largest_layer_bytes > ((int64_t)20 << 30));
    assert_int_equal(mem.owner_window_bytes, dmuon_plan_window_bytes(p, r) * 3);
    /* ZeRO-3: at most the largest layer gathered at once (a layer is given
     * back once widened, before the next is prefetched); at least its F32
     * gradient and the one of the reduction in flight */
    assert_int_equal(mem.param_live_bytes, dmuon_pool_align(mem.largest_layer_bytes));
    assert_true(mem.grad_live_bytes >= 2 * mem.largest_layer_bytes);
    assert_true(mem.work_bytes >= mem.live_peak_bytes);
    assert_true(mem.least_bytes <= mem.total_bytes);
    assert_true(mem.least_bytes > ((int64_t)80 << 30));
    /* every rank at or under the busiest */
    for (int32_t k = 0; k < 64; k += 7) {
        assert_int_equal(dmuon_layout_set_rank(x, k), DMUON_OK);
        assert_true(x->mem.total_bytes <= mem.total_bytes);
    }
    dmuon_layout_free(x);
    /* line B: two FP32 buffers of the largest Muon layer's directions, each
     * with this rank's shard (64 ranks) */
    dmuon_layout_opts o;
    dmuon_layout_opts_init(&o);
    o.line = DMUON_LINE_B;
    assert_int_equal(dmuon_layout_build(p, &o, &x), DMUON_OK);
    int64_t e = 0;
    for (size_t l = 0; l < x->nlayers; l++)
        if (x->layers[l].muon_even && x->layers[l].even_pad > e)
            e = x->layers[l].even_pad;
    assert_true(e > 0);
    assert_true(x->mem.dir_bytes == 2 * (dmuon_pool_align(e * 4) + dmuon_pool_align(e / 64 * 4)));
    dmuon_layout_free(x);
    dmuon_plan_free(p);
    dmuon_model_free(m);
}

static void test_ablations_keep_invariants(void **state)
{
    dmuon_model *m = load("models/wall-oss-0.5.yaml");
    void (*tw[])(dmuon_plan_opts *) = {NULL, no_cap, no_spread, rr, fuse};
    for (size_t k = 0; k < sizeof tw / sizeof tw[0]; k++) {
        dmuon_plan *p = plan(m, 2, 8, DMUON_SHARD_FSDP, tw[k]);
        independent_invariants(p, m);
        if (tw[k] == rr) {
            size_t nu;
            const dmuon_plan_unit *u = dmuon_plan_units(p, &nu);
            for (size_t i = 0; i < nu; i++)
                assert_int_equal(u[i].owner, (int32_t)(i % 16));
        }
        dmuon_plan_free(p);
    }
    dmuon_model_free(m);
}

/* ---------------------------------------- the rule, transcribed plainly -- */

static int cmp_ref(const void *x, const void *y, void *ctx)
{
    const dmuon_assign_item *it = ctx;
    const dmuon_assign_item *a = &it[*(const size_t *)x], *b = &it[*(const size_t *)y];
    if (a->cost != b->cost)
        return a->cost > b->cost ? -1 : 1;
    if (a->elements != b->elements)
        return a->elements > b->elements ? -1 : 1;
    return strcmp(a->name, b->name);
}

/* O(U*N) reference: candidates = bins with the fewest units of the layer;
 * least load among those under the cap, else fewest bytes (ties: index). */
static void reference_lpt(const dmuon_assign_item *it, size_t n, int nb, double cap, bool spread,
                          int32_t *bin, bool *fb)
{
    size_t *ord = malloc(n * sizeof *ord);
    double *load = calloc((size_t)nb, sizeof *load), *bytes = calloc((size_t)nb, sizeof *bytes);
    int *cnt = calloc((size_t)nb * 64, sizeof *cnt);   /* layers < 64 in these tests */
    for (size_t i = 0; i < n; i++)
        ord[i] = i;
    qsort_r(ord, n, sizeof *ord, cmp_ref, (void *)it);
    for (size_t k = 0; k < n; k++) {
        size_t i = ord[k];
        int L = it[i].layer, minc = 1 << 30, pick = -1, few = -1;
        for (int b = 0; b < nb; b++)
            minc = cnt[L * nb + b] < minc ? cnt[L * nb + b] : minc;
        for (int b = 0; b < nb; b++) {
            if (spread && cnt[L * nb + b] != minc)
                continue;
            if (few < 0 || bytes[b] < bytes[few])
                few = b;
            if ((cap < 0 || bytes[b] + (double)it[i].bytes <= cap) &&
                (pick < 0 || load[b] < load[pick]))
                pick = b;
        }
        fb[i] = pick < 0 && cap >= 0;
        if (pick < 0)
            pick = few;
        bin[i] = pick;
        load[pick] += it[i].cost;
        bytes[pick] += (double)it[i].bytes;
        cnt[L * nb + pick]++;
    }
    free(ord);
    free(load);
    free(bytes);
    free(cnt);
}

static void test_assign_matches_reference(void **state)
{
    uint64_t x = 99;
    char names[400][16];
    dmuon_assign_item it[400];
    int32_t b1[400], b2[400];
    bool f1[400], f2[400];
    for (int trial = 0; trial < 300; trial++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        size_t n = 1 + (x >> 33) % 400;
        int nb = 1 + (int)((x >> 20) % 90);
        int layers = 1 + (int)((x >> 40) % 60);
        bool spread = (x >> 50) & 1;
        for (size_t i = 0; i < n; i++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            snprintf(names[i], sizeof names[i], "u%03zu", (n * 7 + i * 13) % 1000);
            /* few distinct values, so ties in cost and elements are common */
            it[i] = (dmuon_assign_item){(double)(1 + (x >> 33) % 6), (int64_t)(1 + (x >> 40) % 9),
                                        (int64_t)(1 + (x >> 45) % 3), (int32_t)((x >> 52) % (uint64_t)layers),
                                        names[i]};
        }
        double total = 0;
        for (size_t i = 0; i < n; i++)
            total += (double)it[i].bytes;
        double cap = (trial % 3 == 0) ? -1 : (1.0 + 0.1 * (trial % 5)) * total / nb;
        assert_int_equal(dmuon_assign_lpt(it, n, nb, cap, spread, b1, f1), DMUON_OK);
        reference_lpt(it, n, nb, cap, spread, b2, f2);
        for (size_t i = 0; i < n; i++) {
            if (b1[i] != b2[i] || f1[i] != f2[i])
                fprintf(stderr, "trial %d (n %zu, bins %d, cap %g, spread %d): item %zu bin %d/%d\n",
                        trial, n, nb, cap, spread, i, b1[i], b2[i]);
            assert_int_equal(b1[i], b2[i]);
            assert_int_equal(f1[i], f2[i]);
        }
    }
}

/* The byte cap holds whenever a feasible choice exists: many small equal
 * units always fit. */
static void test_cap_holds_when_feasible(void **state)
{
    enum { n = 3000, nb = 64 };
    static dmuon_assign_item it[n];
    static char names[n][12];
    int32_t bin[n];
    bool fb[n];
    uint64_t x = 7;
    double total = 0;
    for (size_t i = 0; i < n; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        snprintf(names[i], sizeof names[i], "v%05zu", i);
        it[i] = (dmuon_assign_item){(double)((x >> 33) % 1000) / 7.0, (int64_t)(1 + (x >> 40) % 50),
                                    1, (int32_t)(i / 10), names[i]};
        total += (double)it[i].bytes;
    }
    double cap = 1.1 * total / nb;
    assert_int_equal(dmuon_assign_lpt(it, n, nb, cap, true, bin, fb), DMUON_OK);
    double bytes[nb] = {0};
    for (size_t i = 0; i < n; i++) {
        bytes[bin[i]] += (double)it[i].bytes;
        assert_false(fb[i]);
    }
    for (int b = 0; b < nb; b++)
        assert_true(bytes[b] <= cap);
}

/* ----------------------------------------------------------- plan files -- */

static void read_all(const char *path, char **buf, size_t *len)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    *len = (size_t)ftell(f);
    rewind(f);
    *buf = malloc(*len + 1);
    assert_int_equal(fread(*buf, 1, *len, f), *len);
    (*buf)[*len] = 0;
    fclose(f);
}

static void test_plan_file_roundtrip(void **state)
{
    dmuon_model *m = load("models/qwen1.5-moe-a2.7b.yaml");
    char a[256], b[256], c[256];
    snprintf(a, sizeof a, "%s/a.yaml", tmpdir);
    snprintf(b, sizeof b, "%s/b.yaml", tmpdir);
    snprintf(c, sizeof c, "%s/c.yaml", tmpdir);
    dmuon_plan *p1 = plan(m, 4, 4, DMUON_SHARD_HSDP, NULL);
    dmuon_plan *p2 = plan(m, 4, 4, DMUON_SHARD_HSDP, NULL);
    assert_int_equal(dmuon_plan_write(p1, a), DMUON_OK);
    assert_int_equal(dmuon_plan_write(p2, b), DMUON_OK);
    char *x, *y;
    size_t lx, ly;
    read_all(a, &x, &lx);
    read_all(b, &y, &ly);
    assert_int_equal(lx, ly);
    assert_memory_equal(x, y, lx);
    /* reload, rewrite: the same bytes; the same segments and report */
    dmuon_plan *q;
    assert_int_equal(dmuon_plan_load(a, &q), DMUON_OK);
    assert_int_equal(dmuon_plan_write(q, c), DMUON_OK);
    free(y);
    read_all(c, &y, &ly);
    assert_int_equal(lx, ly);
    assert_memory_equal(x, y, lx);
    assert_int_equal(dmuon_plan_check(q, NULL), DMUON_OK);
    assert_int_equal(dmuon_plan_match_model(q, m), DMUON_OK);
    assert_int_equal(dmuon_plan_layer_count(q), dmuon_plan_layer_count(p1));
    for (size_t l = 0; l < dmuon_plan_layer_count(q); l++) {
        size_t n1, n2;
        const dmuon_segment *s1 = dmuon_plan_layer_segments(p1, l, &n1);
        const dmuon_segment *s2 = dmuon_plan_layer_segments(q, l, &n2);
        assert_int_equal(n1, n2);
        int64_t end = 0;
        for (size_t s = 0; s < n1; s++) {
            assert_int_equal(s1[s].owner, s2[s].owner);
            assert_int_equal(s1[s].offset, s2[s].offset);
            assert_int_equal(s1[s].count, s2[s].count);
            assert_int_equal(s1[s].window_offset, s2[s].window_offset);
            assert_int_equal(s1[s].offset, end);   /* tiles the layer buffer */
            end += s1[s].count * 2;
        }
        assert_int_equal(end, dmuon_plan_layer_bytes(p1, l));
    }
    assert_true(dmuon_plan_get_report(q)->heaviest_rail_over_mean ==
                dmuon_plan_get_report(p1)->heaviest_rail_over_mean);

    /* an edited owner: strict load names the digest; the check names it too
     * (a unit's owner: the segment tables before the units also hold "owner:") */
    char *e = strstr(strstr(x, "\nunits:\n"), "owner: 3,");
    assert_non_null(e);
    e[7] = '2';
    FILE *f = fopen(b, "wb");
    fwrite(x, 1, lx, f);
    fclose(f);
    dmuon_plan *t;
    assert_int_equal(dmuon_plan_load(b, &t), DMUON_EMISMATCH);
    assert_non_null(strstr(dmuon_errmsg(), "digests.units"));
    assert_int_equal(dmuon_plan_load_ex(b, DMUON_PLAN_LOAD_NO_DIGESTS, &t), DMUON_OK);
    size_t v = 0;
    assert_int_equal(dmuon_plan_check(t, &v), DMUON_ECHECK);
    assert_true(v >= 2);
    dmuon_plan_free(t);

    /* another version */
    char *ver = strstr(x, "dmuon_plan: 1");
    ver[12] = '7';
    f = fopen(b, "wb");
    fwrite(x, 1, lx, f);
    fclose(f);
    assert_int_equal(dmuon_plan_load(b, &t), DMUON_EVERSION);
    assert_non_null(strstr(dmuon_errmsg(), "version 7"));
    free(x);
    free(y);
    dmuon_plan_free(q);
    dmuon_plan_free(p1);
    dmuon_plan_free(p2);
    dmuon_model_free(m);
}

/* Writes text (with the first occurrence of from replaced by to, or the
 * whole line holding it removed when to is NULL) to path and loads it
 * strictly. */
static dmuon_rc load_edited(const char *path, const char *text, const char *from, const char *to,
                            dmuon_plan **out)
{
    const char *at = strstr(text, from);
    assert_non_null(at);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    if (to) {
        fwrite(text, 1, (size_t)(at - text), f);
        fputs(to, f);
        fputs(at + strlen(from), f);
    } else {
        const char *bol = at, *eol = strchr(at, '\n');
        while (bol > text && bol[-1] != '\n')
            bol--;
        fwrite(text, 1, (size_t)(bol - text), f);
        fputs(eol + 1, f);
    }
    fclose(f);
    *out = NULL;
    return dmuon_plan_load(path, out);
}

/* Writes p to tmpdir/name (its path into path[cap]) and reads the file's
 * text into *text (the caller frees it). */
static void written(const dmuon_plan *p, const char *name, char *path, size_t cap, char **text)
{
    size_t len;
    snprintf(path, cap, "%s/%s", tmpdir, name);
    assert_int_equal(dmuon_plan_write(p, path), DMUON_OK);
    read_all(path, text, &len);
}

/* The matrix placement of transposed and strided expert tensors travels
 * through the plan file; a file without it is the plain placement. */
static void test_plan_file_layouts(void **state)
{
    dmuon_tensor_spec t[] = {
        {"m.layers.0.mlp.experts.gate_up_proj", 3, {2, 8, 12}, DMUON_BF16},   /* gpt_oss */
        {"m.layers.0.mlp.experts.gate_up_proj_bias", 2, {2, 12}, DMUON_BF16},
        {"m.layers.0.mlp.experts.down_proj", 3, {2, 6, 8}, DMUON_BF16},
        {"m.layers.1.ff.experts.gate_up_proj", 3, {2, 8, 12}, DMUON_BF16},    /* llama4_text */
        {"m.layers.1.ff.experts.down_proj", 3, {2, 6, 8}, DMUON_BF16},
        {"m.layers.1.o_proj.weight", 2, {8, 8}, DMUON_BF16},
    };
    dmuon_model *m = NULL;
    assert_int_equal(dmuon_model_build("t", t, sizeof t / sizeof t[0], NULL, &m), DMUON_OK);
    dmuon_plan *p = plan(m, 1, 4, DMUON_SHARD_FSDP, NULL), *q;
    char a[256], b[256];
    snprintf(b, sizeof b, "%s/lay2.yaml", tmpdir);
    char *x;
    written(p, "lay.yaml", a, sizeof a, &x);
    assert_non_null(strstr(x, "\"m.layers.0.mlp.experts.gate_up_proj\", layer: 0, role: muon, "
                              "numel: 192, matrices: 4, m: 6, n: 8, transposed: true, "
                              "layout: interleaved}"));
    assert_non_null(strstr(x, "\"m.layers.1.ff.experts.gate_up_proj\", layer: 1, role: muon, "
                              "numel: 192, matrices: 4, m: 6, n: 8, transposed: true, "
                              "layout: halves}"));
    assert_non_null(strstr(x, "\"m.layers.0.mlp.experts.down_proj\", layer: 0, role: muon, "
                              "numel: 96, matrices: 2, m: 8, n: 6, transposed: true}"));
    assert_non_null(strstr(x, "\"m.layers.1.o_proj.weight\", layer: 1, role: muon, numel: 64, "
                              "matrices: 1, m: 8, n: 8}"));
    assert_int_equal(load_edited(b, x, "dmuon_plan: 1", "dmuon_plan: 1", &q), DMUON_OK);
    size_t np, nq;
    const dmuon_plan_param *pp = dmuon_plan_params(p, &np), *qq = dmuon_plan_params(q, &nq);
    assert_int_equal(np, nq);
    for (size_t i = 0; i < np; i++) {
        assert_int_equal(pp[i].transposed, qq[i].transposed);
        assert_int_equal(pp[i].layout, qq[i].layout);
        assert_int_equal(pp[i].transposed, dmuon_model_param(m, i)->transposed);
        assert_int_equal(pp[i].layout, dmuon_model_param(m, i)->layout);
    }
    assert_int_equal(dmuon_plan_match_model(q, m), DMUON_OK);
    dmuon_plan_free(q);
    /* an edited placement: the units digest covers it */
    assert_int_equal(load_edited(b, x, "layout: interleaved", "layout: halves", &q),
                     DMUON_EMISMATCH);
    assert_non_null(strstr(dmuon_errmsg(), "digests.units"));
    assert_int_equal(load_edited(b, x, "layout: interleaved", "layout: diagonal", &q),
                     DMUON_EPARSE);
    assert_non_null(strstr(dmuon_errmsg(), "'diagonal', expected contiguous, halves or "
                                           "interleaved"));
    assert_int_equal(load_edited(b, x, "transposed: true, layout: halves", "layout: halves", &q),
                     DMUON_EPARSE);
    assert_non_null(strstr(dmuon_errmsg(), "needs transposed: true"));
    /* a member that splits a gate/up pair */
    const char *mem = strstr(x, "name: \"m.layers.0.mlp.experts.gate_up_proj[0,1]\"");
    assert_non_null(mem);
    const char *mb = strstr(mem, "members: [[0, 0, 2, ");
    assert_non_null(mb);
    assert_int_equal(load_edited(b, x, "members: [[0, 0, 2, ", "members: [[0, 0, 1, ", &q),
                     DMUON_EPARSE);
    assert_non_null(strstr(dmuon_errmsg(), "split a gate/up pair"));
    free(x);
    /* a plain model's plan file has neither field, and loads as the plain placement */
    dmuon_model *m2 = load("models/qwen2.5-1.5b.yaml");
    dmuon_plan *p2 = plan(m2, 1, 8, DMUON_SHARD_FSDP, NULL);
    written(p2, "plain.yaml", a, sizeof a, &x);
    assert_null(strstr(x, "transposed"));
    assert_null(strstr(x, "layout:"));
    free(x);
    assert_int_equal(dmuon_plan_load(a, &q), DMUON_OK);
    pp = dmuon_plan_params(q, &np);
    for (size_t i = 0; i < np; i++)
        assert_true(!pp[i].transposed && pp[i].layout == DMUON_MAT_CONTIGUOUS);
    dmuon_plan_free(q);
    dmuon_plan_free(p2);
    dmuon_model_free(m2);
    dmuon_plan_free(p);
    dmuon_model_free(m);
}

/* Loading recomputes from the units and options what the file records. */
static void test_plan_load_recomputes(void **state)
{
    dmuon_model *m = load("models/qwen2.5-1.5b.yaml");
    dmuon_plan *p = plan(m, 1, 8, DMUON_SHARD_FSDP, NULL), *q;
    char a[256], b[256];
    snprintf(a, sizeof a, "%s/r.yaml", tmpdir);
    snprintf(b, sizeof b, "%s/r2.yaml", tmpdir);
    assert_int_equal(dmuon_plan_write(p, a), DMUON_OK);
    char *x;
    size_t lx;
    read_all(a, &x, &lx);
    /* labelled segments with their element type */
    assert_non_null(strstr(x, "segments: [{owner: "));
    assert_non_null(strstr(x, ", dtype: bf16, offset: 0, count: "));
    assert_non_null(strstr(x, ", window_offset: "));
    assert_int_equal(load_edited(b, x, "dmuon_plan: 1", "dmuon_plan: 1", &q), DMUON_OK);
    dmuon_plan_free(q);

    /* a segment's owner, first segment of its layer */
    size_t n;
    const dmuon_segment *sg = dmuon_plan_layer_segments(p, 1, &n);
    char from[128], to[128], msg[128];
    snprintf(from, sizeof from, "segments: [{owner: %d, dtype: bf16, offset: 0,", sg[0].owner);
    snprintf(to, sizeof to, "segments: [{owner: %d, dtype: bf16, offset: 0,",
             (sg[0].owner + 1) % 8);
    assert_int_equal(load_edited(b, x, from, to, &q), DMUON_EMISMATCH);
    snprintf(msg, sizeof msg, "layer 1 '%s': segment 0 differs", dmuon_plan_layer_name(p, 1));
    assert_non_null(strstr(dmuon_errmsg(), msg));
    /* a segment count, in the layer's last segment */
    sg = dmuon_plan_layer_segments(p, 1, &n);
    snprintf(from, sizeof from, "count: %lld, window_offset: %lld}]}", (long long)sg[n - 1].count,
             (long long)sg[n - 1].window_offset);
    snprintf(to, sizeof to, "count: %lld, window_offset: %lld}]}", (long long)sg[n - 1].count - 1,
             (long long)sg[n - 1].window_offset);
    assert_int_equal(load_edited(b, x, from, to, &q), DMUON_EMISMATCH);
    snprintf(msg, sizeof msg, "segment %zu differs", n - 1);
    assert_non_null(strstr(dmuon_errmsg(), msg));
    /* a segment of another element type */
    assert_int_equal(load_edited(b, x, "dtype: bf16, offset: 0", "dtype: f32, offset: 0", &q),
                     DMUON_EPARSE);
    assert_non_null(strstr(dmuon_errmsg(), "field 'dtype'"));
    /* the summary */
    const dmuon_plan_report *r = dmuon_plan_get_report(p);
    snprintf(from, sizeof from, "busiest_ns_over_mean: %.6f", r->busiest_ns_over_mean);
    assert_int_equal(load_edited(b, x, from, "busiest_ns_over_mean: 1.000000", &q),
                     DMUON_EMISMATCH);
    assert_non_null(strstr(dmuon_errmsg(), "summary.busiest_ns_over_mean"));
    snprintf(from, sizeof from, "max_owner_bytes: %lld", (long long)r->max_owner_bytes);
    assert_int_equal(load_edited(b, x, from, "max_owner_bytes: 1", &q), DMUON_EMISMATCH);
    assert_non_null(strstr(dmuon_errmsg(), "summary.max_owner_bytes"));
    /* the options (recorded digest no longer matches) */
    assert_int_equal(load_edited(b, x, "epsilon: 0.1,", "epsilon: 0.3,", &q), DMUON_EMISMATCH);
    assert_non_null(strstr(dmuon_errmsg(), "inputs.options_digest"));
    assert_int_equal(load_edited(b, x, "small_unit_bytes: 16777216",
                                 "small_unit_bytes: 99999999999999", &q), DMUON_EPARSE);
    assert_non_null(strstr(dmuon_errmsg(), "small_unit_bytes"));
    /* the cluster */
    assert_int_equal(load_edited(b, x, "ranks: 8,", "ranks: 16,", &q), DMUON_EMISMATCH);
    assert_non_null(strstr(dmuon_errmsg(), "cluster.ranks"));
    /* a deleted unit line */
    size_t nu;
    dmuon_plan_units(p, &nu);
    assert_int_equal(load_edited(b, x, "  - {id: 5,", NULL, &q), DMUON_EMISMATCH);
    snprintf(msg, sizeof msg, "expected %zu units", nu);
    assert_non_null(strstr(dmuon_errmsg(), msg));
    snprintf(msg, sizeof msg, "found %zu", nu - 1);
    assert_non_null(strstr(dmuon_errmsg(), msg));
    /* an owner out of range: bad input for a strict load, a violation for verify */
    char *u = strstr(x, "\nunits:\n");
    assert_non_null(u);
    char *ow = strstr(u, "owner: ");
    snprintf(from, sizeof from, "%.*s", (int)(strchr(ow, ',') - ow + 1), ow);
    assert_int_equal(load_edited(b, x, from, "owner: 99,", &q), DMUON_EPARSE);
    assert_non_null(strstr(dmuon_errmsg(), "outside [0, 8)"));
    assert_int_equal(dmuon_plan_load_ex(b, DMUON_PLAN_LOAD_NO_DIGESTS, &q), DMUON_ECHECK);
    /* a missing section names no line 0 */
    assert_int_equal(load_edited(b, x, "digests: {", NULL, &q), DMUON_ENOTFOUND);
    assert_non_null(strstr(dmuon_errmsg(), "missing required field 'digests'"));
    assert_null(strstr(dmuon_errmsg(), ":0:"));
    /* an unknown key is refused, naming it, wherever it is */
    assert_int_equal(load_edited(b, x, "digests: {", "digestz: {", &q), DMUON_EPARSE);
    assert_non_null(strstr(dmuon_errmsg(), "unknown key 'digestz' in the plan"));
    assert_int_equal(load_edited(b, x, "cluster: {", "cluster: {rank: 3, ", &q), DMUON_EPARSE);
    assert_non_null(strstr(dmuon_errmsg(), "unknown key 'rank' in 'cluster'"));
    /* a repeated key is refused, naming both lines */
    assert_int_equal(load_edited(b, x, "digests: {", "units: []\ndigests: {", &q), DMUON_EPARSE);
    assert_non_null(strstr(dmuon_errmsg(), "duplicate key 'units'"));
    assert_non_null(strstr(dmuon_errmsg(), "(first at line"));
    free(x);
    dmuon_plan_free(p);
    dmuon_model_free(m);
}

/* Each invariant check catches its own kind of damage. */
static void expect_violation(dmuon_plan *p, const char *needle)
{
    size_t v = 0;
    assert_int_equal(dmuon_plan_check(p, &v), DMUON_ECHECK);
    assert_true(v >= 1);
    if (!strstr(dmuon_errmsg(), needle))
        fprintf(stderr, "expected '%s' in: %s\n", needle, dmuon_errmsg());
    assert_non_null(strstr(dmuon_errmsg(), needle));
}

static void test_check_catches_damage(void **state)
{
    dmuon_model *m = load("models/qwen2.5-7b.yaml");
    dmuon_plan *p = plan(m, 2, 4, DMUON_SHARD_HSDP, NULL);
    assert_int_equal(dmuon_plan_check(p, NULL), DMUON_OK);
    /* a leader outside the owner's column */
    int32_t keep = p->leaders[1];
    p->leaders[1] = (p->leaders[1] / 4) * 4 + (p->leaders[1] + 1) % 4;
    expect_violation(p, "not in the owner's column");
    p->leaders[1] = keep;
    /* overlapping windows */
    int64_t w = p->units[5].window_offset;
    p->units[5].window_offset += 2;
    expect_violation(p, "window offset");
    p->units[5].window_offset = w;
    /* a segment with the wrong owner */
    int32_t so = p->segs[3].owner;
    p->segs[3].owner = (so + 1) % p->ranks;
    expect_violation(p, "segment at");
    p->segs[3].owner = so;
    /* a matrix in no unit */
    int64_t nmat = p->members[0].n_matrices;
    p->members[0].n_matrices = 0;
    expect_violation(p, "do not match its members");
    p->members[0].n_matrices = nmat;
    p->members[0].first_matrix = 1;   /* matrix 0 in no unit, matrix 1 does not exist */
    expect_violation(p, "not each in exactly one unit");
    p->members[0].first_matrix = 0;
    /* two units of one layer on one rank (and an owner the rule would not give) */
    int32_t o1 = p->units[1].owner;
    p->units[1].owner = p->units[0].owner;
    p->units[1].node = p->units[0].node;
    p->units[1].column = p->units[0].column;
    size_t v = 0;
    assert_int_equal(dmuon_plan_check(p, &v), DMUON_ECHECK);
    assert_true(v >= 2);
    p->units[1].owner = o1;
    p->units[1].node = o1 / 4;
    p->units[1].column = o1 % 4;
    assert_int_equal(dmuon_plan_check(p, NULL), DMUON_OK);
    dmuon_plan_free(p);

    /* the cap: a rank over it with no fallback unit */
    p = plan(m, 4, 8, DMUON_SHARD_FSDP, NULL);
    assert_int_equal(dmuon_plan_check(p, NULL), DMUON_OK);
    size_t nu;
    dmuon_plan_units(p, &nu);
    bool any = false;
    for (size_t i = 0; i < nu; i++)
        if (p->fallback[i]) {
            p->fallback[i] = false;
            any = true;
        }
    if (any)
        expect_violation(p, "over the cap");
    dmuon_plan_free(p);
    dmuon_model_free(m);
}

static void test_bad_cluster(void **state)
{
    dmuon_model *m = load("models/qwen2.5-1.5b.yaml");
    dmuon_plan_opts o;
    dmuon_plan *p;
    dmuon_plan_opts_init(&o);
    o.cost = DMUON_COST_FLOPS;
    o.nodes = 0;
    assert_int_equal(dmuon_plan_build(m, &o, &p), DMUON_EINVAL);
    o.nodes = 1 << 16;
    o.gpus_per_node = 1 << 16;
    assert_int_equal(dmuon_plan_build(m, &o, &p), DMUON_EINVAL);
    assert_non_null(strstr(dmuon_errmsg(), "ranks"));
    dmuon_model_free(m);
}

/* ---------------------------------------------------------- cost table -- */

static void test_cost_db(void **state)
{
    dmuon_model *m = load("models/qwen2.5-1.5b.yaml");
    char db[256];
    snprintf(db, sizeof db, "%s/costs.sqlite", tmpdir);
    dmuon_costdb *c;
    assert_int_equal(dmuon_costdb_open(db, true, 1000, &c), DMUON_OK);
    /* three of the four shapes */
    int64_t sh[3][2] = {{256, 1536}, {1536, 1536}, {8960, 1536}};
    double ms[3] = {0.5, 1.25, 3.0};
    dmuon_cost_row rows[3];
    memset(rows, 0, sizeof rows);
    for (int i = 0; i < 3; i++) {
        snprintf(rows[i].device, sizeof rows[i].device, "test-device");
        snprintf(rows[i].variant, sizeof rows[i].variant, "gram-pe5");
        snprintf(rows[i].dtype, sizeof rows[i].dtype, "fp32");
        rows[i].m = sh[i][0];
        rows[i].n = sh[i][1];
        rows[i].median_ms = rows[i].min_ms = rows[i].max_ms = ms[i];
        rows[i].samples = rows[i].ranks = 1;
        snprintf(rows[i].libraries, sizeof rows[i].libraries, "test");
        snprintf(rows[i].host, sizeof rows[i].host, "test");
    }
    assert_int_equal(dmuon_costdb_put_rows(c, rows, 3), DMUON_OK);
    dmuon_plan_opts o;
    dmuon_plan_opts_init(&o);
    o.nodes = 4;
    o.cost_src.db_path = db;
    o.cost_src.device = "test-device";
    dmuon_plan *p;
    assert_int_equal(dmuon_plan_build(m, &o, &p), DMUON_ENOTFOUND);
    assert_non_null(strstr(dmuon_errmsg(), "1536x8960"));
    assert_non_null(strstr(dmuon_errmsg(), "dmuon-probe --model"));
    assert_non_null(strstr(dmuon_errmsg(), "--missing --db"));
    /* the hint is a command dmuon-probe accepts: never --model with --shapes */
    assert_null(strstr(dmuon_errmsg(), "--shapes"));
    dmuon_shape_count *miss;
    size_t nmiss;
    assert_int_equal(dmuon_cost_missing(m, &o.cost_src, &miss, &nmiss), DMUON_OK);
    assert_int_equal(nmiss, 1);
    assert_int_equal(miss[0].m, 1536);
    assert_int_equal(miss[0].n, 8960);
    assert_int_equal(miss[0].count, 28);
    free(miss);
    rows[0].m = 1536;
    rows[0].n = 8960;
    rows[0].median_ms = 2.0;
    assert_int_equal(dmuon_costdb_put_rows(c, rows, 1), DMUON_OK);
    dmuon_costdb_close(c);
    assert_int_equal(dmuon_plan_build(m, &o, &p), DMUON_OK);
    /* every unit's time is the sum of its matrices' medians */
    size_t nu, nm;
    const dmuon_plan_unit *u = dmuon_plan_units(p, &nu);
    const dmuon_plan_member *mb = dmuon_plan_members(p, &nm);
    double total = 0;
    for (size_t i = 0; i < nu; i++) {
        double want = 0;
        for (size_t j = 0; j < u[i].n_members; j++) {
            const dmuon_param *q = dmuon_model_param(m, (size_t)mb[u[i].first_member + j].param);
            double t = q->mat_m == 256 ? 0.5 : q->mat_m == 8960 ? 3.0 : q->mat_n == 8960 ? 2.0 : 1.25;
            want += t * (double)mb[u[i].first_member + j].n_matrices;
        }
        assert_true(fabs(u[i].ns_ms - want) < 1e-12);
        total += u[i].ns_ms;
    }
    /* 28 layers x (2 x 0.5 + 2 x 1.25 + 2 x 3.0 + 2.0) */
    assert_true(fabs(total - 28 * 11.5) < 1e-9);
    assert_non_null(strstr(dmuon_plan_cost_source(p), "test-device"));
    independent_invariants(p, m);
    dmuon_plan_free(p);
    dmuon_model_free(m);
}

static void test_flops_formula(void **state)
{
    /* by hand from the documented count, s = l = 2: windows of 2 and 3 steps:
     * (12 + 16 + 24 + 16 + 32) + (12 + 16 + 36 + 32 + 64) = 260 */
    assert_true(dmuon_cost_gram_flops(2, 2) == 260.0);
    assert_true(dmuon_cost_gram_flops(1536, 8960) == dmuon_cost_gram_flops(8960, 1536));
    /* growing the long side grows only the terms linear in it */
    double a = dmuon_cost_gram_flops(4, 8), b = dmuon_cost_gram_flops(4, 16);
    assert_true(fabs((b - a) - 8 * 2 * (4 * 5 + 2 * 16)) < 1e-9);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_qwen15b_byte_cap),
        cmocka_unit_test(test_moe_per_expert_units),
        cmocka_unit_test(test_hsdp_rails),
        cmocka_unit_test(test_ablations_keep_invariants),
        cmocka_unit_test(test_default_beats_ablations),
        cmocka_unit_test(test_bound_tight),
        cmocka_unit_test(test_bound_brute_force),
        cmocka_unit_test(test_bound_cap),
        cmocka_unit_test(test_memory),
        cmocka_unit_test(test_assign_matches_reference),
        cmocka_unit_test(test_cap_holds_when_feasible),
        cmocka_unit_test(test_plan_file_roundtrip),
        cmocka_unit_test(test_plan_file_layouts),
        cmocka_unit_test(test_plan_load_recomputes),
        cmocka_unit_test(test_check_catches_damage),
        cmocka_unit_test(test_bad_cluster),
        cmocka_unit_test(test_cost_db),
        cmocka_unit_test(test_flops_formula),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
