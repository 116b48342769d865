/*
 * bench/loops.c — `dmuon-bench loops`: the element loops of dmuon/bf16.h
 * (the sums of ReduceScatterV, its baselines' MPI operation and the BF16
 * conversions) at the instruction-set width this CPU runs them.
 *
 * Each loop runs on N elements that stay in cache (default 16384: a 32 KiB
 * BF16 array, the size of a reduction chunk's slice); a round is 64 calls,
 * and the row gives the median round over the timed rounds as elements per
 * nanosecond and as bytes read and written per nanosecond (GB/s).  Every
 * output is then checked against the scalar definition in bf16.h; #wrong
 * counts elements that differ (any NaN matches any NaN) and makes the exit
 * code 1.  Single process, no MPI.
 */
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "common/opt.h"
#include "dmuon/bf16.h"
#include "dmuon/io.h"
#include "dmuon/rc.h"
#include "dmuon/timer.h"

static const char *usage_text =
    "usage: dmuon-bench loops [--elements N] [-w W] [-n I] [--json]\n"
    "\n"
    "Times the BF16 and FP32 element loops the reductions run (dmuon/bf16.h) at the\n"
    "vector width this CPU runs them, on arrays that stay in cache, and checks each\n"
    "output against the scalar definition (#wrong; exit 1 if any element differs).\n"
    "\n"
    "  --elements N      elements per array (1 to 16777216, default 16384)\n"
    "  -w, --warmup W    untimed rounds of 64 calls per loop (default 20)\n"
    "  -n, --iters I     timed rounds per loop; the median is shown (default 200)\n"
    "  --json            machine-readable output on stdout\n"
    "  -h, --help        this text\n"
    "\n"
    "The data are finite normal numbers; NaN, infinities, subnormals and ties are\n"
    "checked by the unit tests (tests/unit/test_ops_sched.c), at every width built.\n";

enum { CALLS = 64 };

/* The arrays every loop reads and writes: n elements each. */
typedef struct {
    size_t n;
    uint16_t *a, *b, *c, *o;
    float *f, *g, *r;
} arrays;

typedef struct {
    const char *name;
    int bytes;   /* read and written per element */
    void (*run)(arrays *x);
    int64_t (*wrong)(const arrays *x);
} loop;

static int same_bf16(uint16_t x, uint16_t y)
{
    return x == y || (((x & 0x7fffu) > 0x7f80u) && ((y & 0x7fffu) > 0x7f80u));
}

static int same_f32(float x, float y)
{
    return memcmp(&x, &y, sizeof x) == 0 || (x != x && y != y);
}

static float w(uint16_t h) { return dmuon_bf16_to_f32(h); }
static uint16_t rnd(float f) { return dmuon_f32_to_bf16(f); }

static void run_add(arrays *x) { dmuon_bf16_add(x->o, x->a, x->b, x->n); }
static void run_add_pair(arrays *x) { dmuon_bf16_add_pair(x->o, x->a, x->b, x->c, x->n); }
static void run_add_rounded(arrays *x) { dmuon_bf16_add_rounded(x->o, x->a, x->f, x->n); }
static void run_accum(arrays *x) { dmuon_bf16_accum(x->r, x->a, x->n); }
static void run_from(arrays *x) { dmuon_bf16_from_f32(x->o, x->f, x->n); }
static void run_to(arrays *x) { dmuon_bf16_to_f32_n(x->r, x->a, x->n); }
static void run_f32_add(arrays *x) { dmuon_f32_add(x->r, x->f, x->g, x->n); }

static int64_t wrong_add(const arrays *x)
{
    int64_t k = 0;
    for (size_t i = 0; i < x->n; i++)
        k += !same_bf16(x->o[i], rnd(w(x->a[i]) + w(x->b[i])));
    return k;
}

static int64_t wrong_add_pair(const arrays *x)
{
    int64_t k = 0;
    for (size_t i = 0; i < x->n; i++)
        k += !same_bf16(x->o[i], rnd(w(x->a[i]) + w(rnd(w(x->b[i]) + w(x->c[i])))));
    return k;
}

static int64_t wrong_add_rounded(const arrays *x)
{
    int64_t k = 0;
    for (size_t i = 0; i < x->n; i++)
        k += !same_bf16(x->o[i], rnd(w(x->a[i]) + w(rnd(x->f[i]))));
    return k;
}

/* accum ran on r = g, once: the check sets that up itself (below) */
static int64_t wrong_accum(const arrays *x)
{
    int64_t k = 0;
    for (size_t i = 0; i < x->n; i++)
        k += !same_f32(x->r[i], x->g[i] + w(x->a[i]));
    return k;
}

static int64_t wrong_from(const arrays *x)
{
    int64_t k = 0;
    for (size_t i = 0; i < x->n; i++)
        k += !same_bf16(x->o[i], rnd(x->f[i]));
    return k;
}

static int64_t wrong_to(const arrays *x)
{
    int64_t k = 0;
    for (size_t i = 0; i < x->n; i++)
        k += !same_f32(x->r[i], w(x->a[i]));
    return k;
}

static int64_t wrong_f32_add(const arrays *x)
{
    int64_t k = 0;
    for (size_t i = 0; i < x->n; i++)
        k += !same_f32(x->r[i], x->f[i] + x->g[i]);
    return k;
}

static const loop loops[] = {
    {"add", 6, run_add, wrong_add},
    {"add_pair", 8, run_add_pair, wrong_add_pair},
    {"add_rounded", 8, run_add_rounded, wrong_add_rounded},
    {"accum", 10, run_accum, wrong_accum},
    {"from_f32", 6, run_from, wrong_from},
    {"to_f32", 6, run_to, wrong_to},
    {"f32_add", 12, run_f32_add, wrong_f32_add},
};

/* Gradient-like values: signs mixed, magnitudes over a few octaves around
 * 1e-3, no NaN, infinity or subnormal (they would time the CPU's slow
 * paths, not the loops).  A fixed sequence: every run times the same data. */
static float value(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    uint32_t u = (uint32_t)(*s >> 33);
    float m = 1.0f + (float)(u & 0xffffu) / 65536.0f;
    float f = m * (1.0f / 1024.0f) * (float)(1u << ((u >> 16) & 7u)) / 16.0f;
    return (u >> 24) & 1u ? -f : f;
}

static int arrays_init(arrays *x, size_t n)
{
    memset(x, 0, sizeof *x);
    x->n = n;
    /* one allocation: four BF16 arrays, then three FP32 ones */
    unsigned char *m = malloc(n * (4 * sizeof(uint16_t) + 3 * sizeof(float)));
    if (!m)
        return -1;
    x->f = (float *)m;
    x->g = x->f + n;
    x->r = x->g + n;
    x->a = (uint16_t *)(x->r + n);
    x->b = x->a + n;
    x->c = x->b + n;
    x->o = x->c + n;
    uint64_t s = 12345;
    for (size_t i = 0; i < n; i++) {
        x->a[i] = rnd(value(&s));
        x->b[i] = rnd(value(&s));
        x->c[i] = rnd(value(&s));
        x->f[i] = value(&s);
        x->g[i] = value(&s);
    }
    return 0;
}

static void arrays_release(arrays *x)
{
    free(x->f);   /* the one allocation */
    memset(x, 0, sizeof *x);
}

/* Median round of loop l in ns per element; its output checked into *wrong. */
static double time_loop(const loop *l, arrays *x, int warmup, int iters, double *rounds,
                        int64_t *wrong)
{
    for (int r = 0; r < warmup; r++)
        for (int c = 0; c < CALLS; c++)
            l->run(x);
    for (int r = 0; r < iters; r++) {
        double t0 = dmuon_now_ms();
        for (int c = 0; c < CALLS; c++)
            l->run(x);
        rounds[r] = (dmuon_now_ms() - t0) * 1e6 / ((double)CALLS * (double)x->n);
    }
    /* one call from known contents (accum adds into r) */
    memcpy(x->r, x->g, x->n * sizeof(float));
    l->run(x);
    *wrong = l->wrong(x);
    return dmuon_median(rounds, (size_t)iters);
}

int bench_loops_main(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"elements", required_argument, NULL, 'e'}, {"warmup", required_argument, NULL, 'w'},
        {"iters", required_argument, NULL, 'n'},    {"json", no_argument, NULL, 'j'},
        {"help", no_argument, NULL, 'h'},           {NULL, 0, NULL, 0}};
    int64_t n = 16384, warmup = 20, iters = 200;
    bool json = false;
    char msg[256];
    int c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "hw:n:", longopts, NULL)) != -1) {
        switch (c) {
        case 'e':
        case 'w':
        case 'n': {
            const char *flag = c == 'e' ? "--elements" : c == 'w' ? "--warmup" : "--iters";
            int64_t lo = c == 'w' ? 0 : 1, hi = c == 'e' ? (1 << 24) : 1000000;
            if (tool_parse_int(flag, optarg, lo, hi, c == 'e' ? &n : c == 'w' ? &warmup : &iters,
                               msg, sizeof msg)) {
                fprintf(stderr, "%s: error: %s\n", argv[0], msg);
                return 2;
            }
            break;
        }
        case 'j': json = true; break;
        case 'h': fputs(usage_text, stdout); return 0;
        default:
            tool_unknown_option(argv[0], argv[optind - 1], longopts);
            fputs(usage_text, stderr);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "%s: error: unexpected argument '%s' (see --help)\n", argv[0],
                argv[optind]);
        return 2;
    }
    arrays x;
    double *rounds = malloc((size_t)iters * sizeof *rounds);
    if (!rounds || arrays_init(&x, (size_t)n)) {
        free(rounds);
        fprintf(stderr, "%s: error: out of memory for %lld elements\n", argv[0], (long long)n);
        return dmuon_rc_exit_code(DMUON_ENOMEM);
    }
    const char *width = dmuon_bf16_width_name();
    dmuon_json jw;
    if (json) {
        dmuon_json_init(&jw, stdout, true);
        dmuon_json_begin_object(&jw);
        dmuon_json_kstr(&jw, "width", width);
        dmuon_json_kint(&jw, "elements", n);
        dmuon_json_kint(&jw, "warmup", warmup);
        dmuon_json_kint(&jw, "iters", iters);
        dmuon_json_kint(&jw, "calls_per_round", CALLS);
        dmuon_json_key(&jw, "loops");
        dmuon_json_begin_array(&jw);
    } else {
        printf("# dmuon-bench loops: %lld elements per array, width %s, -w %lld -n %lld "
               "(median round of %d calls)\n", (long long)n, width, (long long)warmup,
               (long long)iters, CALLS);
        printf("# elem/ns = elements per nanosecond; GB/s = bytes read and written per "
               "nanosecond; #wrong = elements that differ from bf16.h's scalar definition\n");
        printf("%-12s %9s %9s %7s\n", "loop", "elem/ns", "GB/s", "#wrong");
    }
    int64_t wrong = 0;
    for (size_t i = 0; i < sizeof loops / sizeof loops[0]; i++) {
        int64_t bad = 0;
        double ns = time_loop(&loops[i], &x, (int)warmup, (int)iters, rounds, &bad);
        double rate = ns > 0 ? 1.0 / ns : 0.0;
        wrong += bad;
        if (json) {
            dmuon_json_begin_object(&jw);
            dmuon_json_kstr(&jw, "loop", loops[i].name);
            dmuon_json_kdouble(&jw, "elements_per_ns", rate);
            dmuon_json_kdouble(&jw, "gbps", rate * loops[i].bytes);
            dmuon_json_kint(&jw, "wrong", bad);
            dmuon_json_end_object(&jw);
        } else {
            printf("%-12s %9.3f %9.2f %7lld\n", loops[i].name, rate, rate * loops[i].bytes,
                   (long long)bad);
        }
    }
    if (json) {
        dmuon_json_end_array(&jw);
        dmuon_json_kint(&jw, "wrong", wrong);
        dmuon_json_end_object(&jw);
        fputc('\n', stdout);
    }
    arrays_release(&x);
    free(rounds);
    if (wrong) {
        fprintf(stderr, "%s: error: %lld elements differ from the scalar definitions of "
                "dmuon/bf16.h\n", argv[0], (long long)wrong);
        return 1;
    }
    return 0;
}
