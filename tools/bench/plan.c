/*
 * dmuon-bench plan — how long planning takes, on a real and a synthetic model.
 *
 *   1. Qwen1.5-MoE-A2.7B (4416 units with per-expert units) on 256 ranks;
 *   2. a synthetic model of 100,000 units (1000 layers x 100 matrices of
 *      varied shapes, every matrix its own unit) on 16,384 ranks (both
 *      settable, for a quick run).
 * Each case times dmuon_plan_build (units, costs, LPT owners, windows,
 * segment tables, report) with the analytic flops cost, so no database is
 * needed; the median of several runs is reported.  Every plan is then
 * checked with dmuon_plan_check, and violations are reported in the #wrong
 * column (non-zero exit when any).  Targets: under 1 s and under 10 s.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"
#include "common/opt.h"
#include "dmuon/io.h"
#include "dmuon/model.h"
#include "dmuon/plan.h"

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* layers x 100 matrices (1000 layers by default), shapes from a fixed linear congruential
 * sequence (multiples of 128 between 256 and 8192). */
static dmuon_rc synthetic(size_t layers, size_t per_layer, dmuon_model **out)
{
    size_t n = layers * per_layer;
    dmuon_tensor_spec *t = calloc(n, sizeof *t);
    char *names = malloc(n * 48);
    if (!t || !names) {
        free(t);
        free(names);
        return DMUON_FAIL(DMUON_ENOMEM, "out of memory");
    }
    uint64_t x = 12345;
    for (size_t l = 0, k = 0; l < layers; l++)
        for (size_t j = 0; j < per_layer; j++, k++) {
            char *nm = names + k * 48;
            snprintf(nm, 48, "synth.layers.%zu.w%zu.weight", l, j);
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            int64_t m = 128 * (int64_t)(2 + (x >> 33) % 63);
            int64_t c = 128 * (int64_t)(2 + (x >> 45) % 63);
            t[k] = (dmuon_tensor_spec){nm, 2, {m, c}, DMUON_BF16};
        }
    dmuon_rc rc = dmuon_model_build("synthetic", t, n, NULL, out);
    free(t);
    free(names);
    return rc;
}

typedef struct {
    const char *name;
    int32_t nodes, gpus;
    int64_t small;
    int reps;
    double target_s;
} bcase;

int bench_plan_main(int argc, char **argv)
{
    static const struct option opts[] = {{"model", required_argument, 0, 'm'},
                                         {"reps", required_argument, 0, 'r'},
                                         {"units", required_argument, 0, 'u'},
                                         {"synthetic-ranks", required_argument, 0, 's'},
                                         {"json", no_argument, 0, 'j'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    const char *moe = "models/qwen1.5-moe-a2.7b.yaml";
    int reps = 0, ch;
    long units_wanted = 100000, sranks = 16384;
    bool json = false;
    opterr = 0;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (ch) {
        case 'm':
            moe = optarg;
            break;
        case 'r':
        {
            int64_t v;
            char msg[256];
            if (tool_parse_int("--reps", optarg, 1, 100, &v, msg, sizeof msg)) {
                fprintf(stderr, "dmuon-bench: error: %s\n", msg);
                return 2;
            }
            reps = (int)v;
        }
            break;
        case 'u':
        case 's': {
            int64_t v = 0;
            char msg[256];
            int64_t lo = ch == 'u' ? 100 : 8, hi = ch == 'u' ? 10000000 : 1 << 20;
            if (tool_parse_int(ch == 'u' ? "--units" : "--synthetic-ranks", optarg, lo, hi, &v,
                               msg, sizeof msg) || (ch == 's' && v % 8)) {
                fprintf(stderr, "dmuon-bench: error: %s%s\n", v % 8 ? "" : msg,
                        v % 8 ? "--synthetic-ranks: expected a multiple of 8" : "");
                return 2;
            }
            if (ch == 'u')
                units_wanted = v;
            else
                sranks = v;
            break;
        }
        case 'j':
            json = true;
            break;
        case 'h':
            printf("usage: dmuon-bench plan [--model MOE_MODEL] [--reps R] [--json]\n"
                   "                        [--units U] [--synthetic-ranks N]\n"
                   "Times planning %s on 256 ranks and a synthetic model of U units\n"
                   "(default 100,000) on N ranks (default 16,384), --cost flops, and checks\n"
                   "each plan (#wrong: invariant violations).\n", moe);
            return 0;
        default:
            tool_unknown_option("dmuon-bench", argv[optind - 1], opts);
            return 2;
        }
    }
    bcase cases[2] = {{"qwen1.5-moe-a2.7b", 32, 8, 16 << 20, reps ? reps : 5, 1.0},
                      {"synthetic", (int32_t)(sranks / 8), 8, 0, reps ? reps : 3, 10.0}};
    dmuon_json w;
    if (json) {
        dmuon_json_init(&w, stdout, false);
        dmuon_json_begin_object(&w);
        dmuon_json_key(&w, "plan");
        dmuon_json_begin_array(&w);
    } else {
        printf("%-20s %7s %8s %10s %10s %10s %8s %7s\n", "model", "units", "ranks", "median s",
               "min s", "target s", "meets", "#wrong");
    }
    int exit_code = 0;
    for (int c = 0; c < 2; c++) {
        dmuon_model *m = NULL;
        dmuon_rc rc = c == 0 ? dmuon_model_load(moe, NULL, &m) : synthetic((size_t)(units_wanted + 99) / 100, 100, &m);
        if (rc) {
            fprintf(stderr, "dmuon-bench: error: %s\n", dmuon_errmsg());
            return dmuon_rc_exit_code(rc);
        }
        dmuon_plan_opts o;
        dmuon_plan_opts_init(&o);
        o.cost = DMUON_COST_FLOPS;
        o.nodes = cases[c].nodes;
        o.gpus_per_node = cases[c].gpus;
        o.small_unit_bytes = cases[c].small;
        double t[100];
        dmuon_plan *p = NULL;
        for (int r = 0; r < cases[c].reps; r++) {
            fprintf(stderr, "dmuon-bench: plan %s on %d ranks, run %d/%d\n", cases[c].name,
                    o.nodes * o.gpus_per_node, r + 1, cases[c].reps);
            dmuon_plan_free(p);
            double t0 = now_s();
            rc = dmuon_plan_build(m, &o, &p);
            t[r] = now_s() - t0;
            if (rc) {
                fprintf(stderr, "dmuon-bench: error: %s\n", dmuon_errmsg());
                dmuon_model_free(m);
                return dmuon_rc_exit_code(rc);
            }
        }
        size_t wrong = 0, units = 0;
        if (dmuon_plan_check(p, &wrong) != DMUON_OK)
            fprintf(stderr, "dmuon-bench: %s: %s\n", cases[c].name, dmuon_errmsg());
        dmuon_plan_units(p, &units);
        qsort(t, (size_t)cases[c].reps, sizeof *t, cmp_d);
        double med = t[cases[c].reps / 2];
        bool meets = med < cases[c].target_s;
        if (wrong)
            exit_code = 1;
        if (json) {
            dmuon_json_begin_object(&w);
            dmuon_json_kstr(&w, "model", cases[c].name);
            dmuon_json_kint(&w, "units", (int64_t)units);
            dmuon_json_kint(&w, "ranks", dmuon_plan_ranks(p));
            dmuon_json_kdouble(&w, "median_s", med);
            dmuon_json_kdouble(&w, "min_s", t[0]);
            dmuon_json_kint(&w, "runs", cases[c].reps);
            dmuon_json_kdouble(&w, "target_s", cases[c].target_s);
            dmuon_json_kbool(&w, "meets_target", meets);
            dmuon_json_kint(&w, "wrong", (int64_t)wrong);
            dmuon_json_end_object(&w);
        } else {
            printf("%-20s %7zu %8d %10.4f %10.4f %10.1f %8s %7zu\n", cases[c].name, units,
                   dmuon_plan_ranks(p), med, t[0], cases[c].target_s, meets ? "yes" : "NO",
                   wrong);
        }
        dmuon_plan_free(p);
        dmuon_model_free(m);
    }
    if (json) {
        dmuon_json_end_array(&w);
        dmuon_json_end_object(&w);
    }
    return exit_code;
}
