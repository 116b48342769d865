/*
 * verify/ns.c — `dmuon-verify ns`: Newton–Schulz numerics against the
 * float64 SVD reference of libcore (dmuon_ns_check_output).
 *
 * Per shape and input kind it runs the chosen variant and reports the gains
 * of the input's singular directions, the Gram-vs-direct difference and the
 * scale invariance; per shape it checks that a zero input gives a zero
 * output, that NaN/Inf inputs are refused and that inputs with ‖X‖_F = 1e-39
 * and 1e38 give the output of the same matrix at norm 1.  The SVD reference costs
 * O(m·n·min(m,n)) on the CPU, so shapes above --max-elements are listed as
 * skipped and every case announces itself on stderr.  Exit 0 when every
 * check passes, 1 when one fails, 2 on bad usage, 3 on a runtime error.
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dmuon/io.h"
#include "dmuon/ns.h"
#include "dmuon/probe.h"
#include "common/opt.h"
#include "verify.h"

static const char *usage_text =
    "usage: dmuon-verify ns [options]\n"
    "\n"
    "Checks Newton-Schulz numerics against a float64 SVD reference (LAPACKE dgesvd):\n"
    "for every input direction with sigma/||X||_F >= the design floor, the output's gain\n"
    "(its singular value along that direction) must lie in the coefficients' band around 1;\n"
    "every gain must match the scalar polynomial map; Gram and direct NS must agree;\n"
    "1e-9 and 1e+6 scaled inputs must give the same output; zero in gives zero out;\n"
    "NaN/Inf in is an error; inputs with ||X||_F = 1e-39 (subnormal) and 1e38 must give\n"
    "the output of the same matrix at norm 1.\n"
    "\n"
    "The float64 SVD reference runs on the CPU whatever --device says and costs\n"
    "O(m*n*min(m,n)) per case (a 1536x8960 case takes minutes), hence --max-elements.\n"
    "Progress goes to stderr, one line per case.\n"
    "\n"
    "  --shapes MxN,...     shapes to check (default: 64x64,32x96,96x32,1x37,37x1,33x97,\n"
    "                       256x1536)\n"
    "  --inputs K,...       gaussian,lowrank,illcond (default: all three)\n"
    "  --variant V          gram-pe5 (default), direct-pe5, gram-muon5, direct-muon5\n"
    "  --dtype D            fp32 (default) or bf16 (products on BF16-rounded inputs)\n"
    "  --coeffs a,b,c;...   user coefficient tuples instead of the variant's\n"
    "  --restarts K,...|none  Gram restart positions (default: 2; Gram variants only)\n"
    "  --floor F            smallest sigma/||X||_F checked (default 1e-3, the Polar Express\n"
    "                       design floor; bf16: 1e-2, BF16 rounding does not resolve less)\n"
    "  --device cpu|cuda    where NS runs (default cpu)\n"
    "  --seed S             input seed, an integer >= 0 (default 1)\n"
    "  --max-elements N     skip shapes with more than N elements (default 2^22 = 4194304);\n"
    "                       skipped shapes are listed\n"
    "  --json               machine-readable output on stdout\n"
    "  -h, --help           this text\n";

static const char *default_shapes = "64x64,32x96,96x32,1x37,37x1,33x97,256x1536";

/* Tolerances, by precision (observed worst cases on the built-in set are
 * about 10x below the FP32 figures).  band_slack widens the scalar band of
 * the gains; model: |gain − f(σ)|; offdiag: mixing of significant
 * directions; residual: output outside the input's singular subspaces;
 * pair: Gram vs direct on the significant directions; gd and scale: max
 * elementwise difference relative to the largest element (Gram vs direct;
 * 1e-9 / 1e+6 scaled inputs).  BF16 rounds the normalised input by about
 * 2^-9·‖X‖_F, above the 1e-3 floor, so its default floor is 1e-2 and the
 * elementwise figures (dominated by unresolved directions) are reported but
 * not gated (gate < 0). */
typedef struct {
    double floor, band_slack, model, offdiag, residual, pair, gd, scale;
} tolerances;
static const tolerances tol_fp32 = {1e-3, 0.01, 1e-3, 1e-3, 1e-3, 1e-3, 2e-3, 1e-3};
static const tolerances tol_bf16 = {1e-2, 0.05, 0.2, 0.15, -1, 0.25, -1, -1};

/* Any coefficient set must map [floor, 1] into this range to count as
 * orthogonalising (pe5: [0.729, 1.124]; muon5: [0.471, 1.202]). */
#define OUTER_LO 0.4
#define OUTER_HI 1.3

static int fail(const char *msg) { fprintf(stderr, "dmuon-verify: error: %s\n", msg); return 2; }

static double max_rel_diff(const float *a, const float *b, size_t count)
{
    double d = 0.0, big = 0.0;
    for (size_t i = 0; i < count; i++) {
        double e = fabs((double)a[i] - (double)b[i]);
        d = e > d ? e : d;
        big = fabs((double)b[i]) > big ? fabs((double)b[i]) : big;
    }
    return big > 0.0 ? d / big : d;
}

typedef struct {
    dmuon_ns *ns, *other;
    const dmuon_ns_opts *opts;
    tolerances tol;
    double floor, band_lo, band_hi;
    dmuon_json *js;
    int failed, checks;
} run_state;

static void verdict(run_state *st, bool ok, const char *what, char *notes, size_t cap)
{
    st->checks++;
    if (!ok) {
        st->failed++;
        size_t len = strlen(notes);
        snprintf(notes + len, cap - len, "%s%s", len ? "," : "", what);
    }
}

/* One shape x input kind.  Returns a dmuon_rc for runtime errors. */
static dmuon_rc check_case(run_state *st, int64_t m, int64_t n, dmuon_ns_input kind,
                           uint64_t seed)
{
    dmuon_rc rc = DMUON_OK;
    const size_t count = (size_t)(m * n);
    float *x = malloc(count * sizeof *x), *o = malloc(count * sizeof *o),
          *o2 = malloc(count * sizeof *o2), *xs = malloc(count * sizeof *xs);
    if (!x || !o || !o2 || !xs) {
        rc = DMUON_FAIL(DMUON_ENOMEM, "out of memory for a %lld x %lld case", (long long)m,
                        (long long)n);
        goto done;
    }
    DMUON_TRY_GOTO(rc, dmuon_ns_test_input(kind, m, n, seed, x), done);
    DMUON_TRY_GOTO(rc, dmuon_ns_run_host(st->ns, x, m, n, o), done);
    dmuon_ns_check c;
    DMUON_TRY_GOTO(rc, dmuon_ns_run_host(st->other, x, m, n, o2), done);
    DMUON_TRY_GOTO(rc, dmuon_ns_check_output(st->opts, x, m, n, o, o2, st->floor, &c), done);
    const double gd = max_rel_diff(o, o2, count);
    double sc = 0.0;
    const float scales[2] = {1e-9f, 1e+6f};
    for (int i = 0; i < 2; i++) {
        for (size_t j = 0; j < count; j++)
            xs[j] = x[j] * scales[i];
        DMUON_TRY_GOTO(rc, dmuon_ns_run_host(st->ns, xs, m, n, o2), done);
        double d = max_rel_diff(o2, o, count);
        sc = d > sc ? d : sc;
    }
    const tolerances *t = &st->tol;
    char notes[128] = "";
    /* the gains must follow the coefficients' band, and that band must be
     * "around 1": within [OUTER_LO, OUTER_HI] */
    verdict(st, st->band_lo >= OUTER_LO && st->band_hi <= OUTER_HI &&
                    (c.above_floor == 0 || (c.gain_lo >= st->band_lo - t->band_slack &&
                                            c.gain_hi <= st->band_hi + t->band_slack)),
            "band", notes, sizeof notes);
    verdict(st, c.worst_model <= t->model, "model", notes, sizeof notes);
    verdict(st, c.worst_offdiag <= t->offdiag, "offdiag", notes, sizeof notes);
    verdict(st, t->residual < 0 || c.worst_residual <= t->residual, "residual", notes,
            sizeof notes);
    verdict(st, c.worst_pair <= t->pair, "gram-vs-direct", notes, sizeof notes);
    verdict(st, t->gd < 0 || gd <= t->gd, "gram-vs-direct-elementwise", notes, sizeof notes);
    verdict(st, t->scale < 0 || sc <= t->scale, "scale", notes, sizeof notes);
    char shape[48];
    snprintf(shape, sizeof shape, "%lldx%lld", (long long)m, (long long)n);
    if (st->js) {
        dmuon_json *w = st->js;
        dmuon_json_begin_object(w);
        dmuon_json_kstr(w, "shape", shape);
        dmuon_json_kint(w, "m", m);
        dmuon_json_kint(w, "n", n);
        dmuon_json_kstr(w, "input", dmuon_ns_input_name(kind));
        dmuon_json_kint(w, "directions", c.directions);
        dmuon_json_kint(w, "above_floor", c.above_floor);
        dmuon_json_kdouble(w, "gain_lo", c.gain_lo);
        dmuon_json_kdouble(w, "gain_hi", c.gain_hi);
        dmuon_json_kdouble(w, "worst_sigma_dev", c.worst_sigma);
        dmuon_json_kdouble(w, "worst_model_dev", c.worst_model);
        dmuon_json_kdouble(w, "worst_offdiag", c.worst_offdiag);
        dmuon_json_kdouble(w, "residual", c.worst_residual);
        dmuon_json_kdouble(w, "gram_vs_direct", c.worst_pair);
        dmuon_json_kdouble(w, "gram_vs_direct_elementwise", gd);
        dmuon_json_kdouble(w, "scale_dev", sc);
        dmuon_json_kbool(w, "ok", notes[0] == '\0');
        dmuon_json_kstr(w, "failed", notes);
        dmuon_json_end_object(w);
    } else {
        printf("%-11s %-8s %5lld/%-5lld %6.3f %6.3f %9.2e %9.2e %9.2e %9.2e %9.2e %9.2e  %s%s\n",
               shape, dmuon_ns_input_name(kind), (long long)c.above_floor,
               (long long)c.directions, c.gain_lo, c.gain_hi, c.worst_sigma, c.worst_model,
               c.worst_offdiag, c.worst_pair, gd, sc, notes[0] ? "FAIL " : "ok", notes);
        fflush(stdout);   /* rows appear as cases finish, also into a file */
    }
done:
    free(x);
    free(o);
    free(o2);
    free(xs);
    return rc;
}

/* Inputs at the ends of FP32's range, ‖X‖_F = 1e-39 (subnormal elements)
 * and 1e38 (sum of squares beyond FLT_MAX): NS must succeed and equal NS of
 * the same matrix rescaled to norm 1 in double, within the scale tolerance
 * (BF16: NORM_BF16, the rounding of a few elements to BF16 may flip).
 * Uses the caller's buffers x, o (count floats each) and two of its own. */
#define NORM_BF16 0.1
static dmuon_rc check_norms(run_state *st, int64_t m, int64_t n, float *x, float *o,
                            int *bad_special)
{
    dmuon_rc rc = DMUON_OK;
    const size_t count = (size_t)(m * n);
    const double norms[2] = {1e-39, 1e38};
    const double gate = st->opts->dtype == DMUON_BF16 ? NORM_BF16 : st->tol.scale;
    float *xn = malloc(count * sizeof *xn), *on = malloc(count * sizeof *on);
    if (!xn || !on) {
        rc = DMUON_FAIL(DMUON_ENOMEM, "out of memory");
        goto done;
    }
    for (int k = 0; k < 2; k++) {
        DMUON_TRY_GOTO(rc, dmuon_ns_test_input(DMUON_NS_INPUT_GAUSSIAN, m, n, 7, x), done);
        double fro = 0.0, fe = 0.0;
        for (size_t j = 0; j < count; j++)
            fro += (double)x[j] * x[j];
        for (size_t j = 0; j < count; j++) {
            x[j] = (float)(x[j] * (norms[k] / sqrt(fro)));
            fe += (double)x[j] * x[j];
        }
        for (size_t j = 0; j < count; j++)
            xn[j] = (float)(x[j] / sqrt(fe));
        DMUON_TRY_GOTO(rc, dmuon_ns_run_host(st->ns, xn, m, n, on), done);
        dmuon_rc r = dmuon_ns_run_host(st->ns, x, m, n, o);
        const double d = r == DMUON_OK ? max_rel_diff(o, on, count) : INFINITY;
        st->checks++;
        if (r != DMUON_OK || !(d <= gate)) {
            st->failed++;
            (*bad_special)++;
            if (r != DMUON_OK)
                fprintf(stderr, "dmuon-verify: ns %lldx%lld: the input with ||X||_F = %g gave "
                        "'%s': %s\n", (long long)m, (long long)n, norms[k], dmuon_rc_name(r),
                        dmuon_errmsg());
            else
                fprintf(stderr, "dmuon-verify: ns %lldx%lld: the input with ||X||_F = %g "
                        "differs from the same matrix at norm 1 by %.3e (gate %g)\n",
                        (long long)m, (long long)n, norms[k], d, gate);
            dmuon_err_clear();
        } else {
            fprintf(stderr, "dmuon-verify: ns %lldx%lld: ||X||_F = %g ok (%.2e from norm 1)\n",
                    (long long)m, (long long)n, norms[k], d);
        }
    }
done:
    free(xn);
    free(on);
    return rc;
}

/* Zero in → zero out; NaN / Inf in → DMUON_ENUMERIC; the norm extremes of
 * check_norms.  Returns runtime rc. */
static dmuon_rc check_special(run_state *st, int64_t m, int64_t n, int *bad_special)
{
    dmuon_rc rc = DMUON_OK;
    const size_t count = (size_t)(m * n);
    float *x = calloc(count, sizeof *x), *o = malloc(count * sizeof *o);
    if (!x || !o) {
        rc = DMUON_FAIL(DMUON_ENOMEM, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < count; i++)
        o[i] = NAN;
    DMUON_TRY_GOTO(rc, dmuon_ns_run_host(st->ns, x, m, n, o), done);
    bool zero = true;
    for (size_t i = 0; i < count; i++)
        zero = zero && o[i] == 0.0f;
    st->checks++;
    if (!zero) {
        st->failed++;
        (*bad_special)++;
        fprintf(stderr, "dmuon-verify: ns %lldx%lld: zero input did not give a zero output\n",
                (long long)m, (long long)n);
    }
    const float specials[2] = {NAN, INFINITY};
    for (int i = 0; i < 2; i++) {
        for (size_t j = 0; j < count; j++)
            x[j] = (float)((j % 7) + 1);
        x[count / 2] = specials[i];
        dmuon_rc r = dmuon_ns_run_host(st->ns, x, m, n, o);
        st->checks++;
        if (r != DMUON_ENUMERIC) {
            st->failed++;
            (*bad_special)++;
            fprintf(stderr, "dmuon-verify: ns %lldx%lld: a %s input gave '%s' instead of a "
                    "numeric error\n", (long long)m, (long long)n, i ? "Inf" : "NaN",
                    dmuon_rc_name(r));
        }
        dmuon_err_clear();
    }
    DMUON_TRY_GOTO(rc, check_norms(st, m, n, x, o, bad_special), done);
done:
    free(x);
    free(o);
    return rc;
}

int verify_ns_main(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"shapes", required_argument, NULL, 's'}, {"inputs", required_argument, NULL, 'i'},
        {"variant", required_argument, NULL, 'v'}, {"dtype", required_argument, NULL, 't'},
        {"coeffs", required_argument, NULL, 'c'}, {"restarts", required_argument, NULL, 'r'},
        {"floor", required_argument, NULL, 'f'}, {"device", required_argument, NULL, 'd'},
        {"seed", required_argument, NULL, 'S'}, {"json", no_argument, NULL, 'j'},
        {"max-elements", required_argument, NULL, 'x'},
        {"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0}};
    const char *shapes_text = default_shapes, *inputs_text = "gaussian,lowrank,illcond";
    const char *restarts = NULL, *coeffs = NULL;
    double floor = -1.0;   /* default: by precision */
    unsigned long long seed = 1;
    long long max_el = 1LL << 22;
    bool json = false;
    dmuon_device_kind dev = DMUON_DEVICE_CPU;
    dmuon_ns_opts opts;
    dmuon_ns_opts_init(&opts);
    char msg[512];
    int c;
    optind = 1;
    opterr = 0;   /* our message (with a suggestion) */
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        char *end;
        switch (c) {
        case 's': shapes_text = optarg; break;
        case 'i': inputs_text = optarg; break;
        case 'v':
            if (dmuon_ns_opts_set_variant(&opts, optarg) != DMUON_OK)
                return fail(dmuon_errmsg());
            break;
        case 't':
            if (dmuon_ns_opts_set_dtype(&opts, optarg) != DMUON_OK)
                return fail(dmuon_errmsg());
            break;
        case 'c': coeffs = optarg; break;
        case 'r': restarts = optarg; break;
        case 'f':
            floor = strtod(optarg, &end);
            if (*end || !(floor > 0.0 && floor < 1.0)) {
                snprintf(msg, sizeof msg, "--floor '%s': expected a number in (0, 1)", optarg);
                return fail(msg);
            }
            break;
        case 'd':
            if (dmuon_device_parse(optarg, &dev) != DMUON_OK)
                return fail(dmuon_errmsg());
            break;
        case 'S':
            errno = 0;
            seed = strtoull(optarg, &end, 10);
            if (*end || !*optarg || *optarg < '0' || *optarg > '9' || errno) {
                snprintf(msg, sizeof msg, "--seed '%s': expected a non-negative integer", optarg);
                return fail(msg);
            }
            break;
        case 'x': {
            int64_t v;
            if (tool_parse_int("--max-elements", optarg, 1, INT64_MAX, &v, msg, sizeof msg))
                return fail(msg);
            max_el = v;
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
        snprintf(msg, sizeof msg, "unexpected argument '%s' (see --help)", argv[optind]);
        return fail(msg);
    }
    if (coeffs && dmuon_ns_opts_parse_coeffs(&opts, coeffs) != DMUON_OK)
        return fail(dmuon_errmsg());
    if (restarts && opts.method != DMUON_NS_GRAM)
        return fail("--restarts: restarts apply to Gram variants only (gram-pe5, gram-muon5), "
                    "not to direct NS");
    if (restarts && dmuon_ns_opts_parse_restarts(&opts, restarts) != DMUON_OK)
        return fail(dmuon_errmsg());

    int64_t(*shapes)[2] = NULL;
    size_t nshapes = 0;
    if (dmuon_probe_parse_shapes(shapes_text, &shapes, &nshapes) != DMUON_OK)
        return fail(dmuon_errmsg());
    if (dmuon_probe_check_shapes((const int64_t(*)[2])shapes, nshapes) != DMUON_OK) {
        free(shapes);
        return fail(dmuon_errmsg());
    }
    bool use[DMUON_NS_INPUT_COUNT] = {false};
    {
        char *dup = strdup(inputs_text), *save = NULL;
        for (char *tok = strtok_r(dup, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
            int k = 0;
            while (k < DMUON_NS_INPUT_COUNT && strcmp(tok, dmuon_ns_input_name((dmuon_ns_input)k)))
                k++;
            if (k == DMUON_NS_INPUT_COUNT) {
                snprintf(msg, sizeof msg,
                         "--inputs: unknown kind '%s' (expected gaussian, lowrank or illcond)",
                         tok);
                free(dup);
                free(shapes);
                return fail(msg);
            }
            use[k] = true;
        }
        free(dup);
    }
    int ninputs = 0;
    for (int k = 0; k < DMUON_NS_INPUT_COUNT; k++)
        ninputs += use[k];
    if (ninputs == 0) {
        free(shapes);
        return fail("--inputs: expected one or more of gaussian, lowrank, illcond");
    }
    size_t ncases = 0, done_cases = 0, nskipped = 0;
    for (size_t i = 0; i < nshapes; i++)
        ncases += shapes[i][0] * shapes[i][1] > max_el ? 0 : (size_t)ninputs;
    if (ncases == 0) {
        long long smallest = -1;
        for (size_t i = 0; i < nshapes; i++)
            if (smallest < 0 || shapes[i][0] * shapes[i][1] < smallest)
                smallest = (long long)(shapes[i][0] * shapes[i][1]);
        free(shapes);
        snprintf(msg, sizeof msg, "every shape has more than --max-elements %lld elements (the "
                 "smallest has %lld): nothing would be checked; raise --max-elements (the "
                 "float64 SVD reference costs O(m n min(m, n)))", max_el, smallest);
        return fail(msg);
    }

    run_state st = {0};
    dmuon_ns_opts other = opts;
    other.method = opts.method == DMUON_NS_GRAM ? DMUON_NS_DIRECT : DMUON_NS_GRAM;
    st.opts = &opts;
    st.tol = opts.dtype == DMUON_BF16 ? tol_bf16 : tol_fp32;
    st.floor = floor > 0.0 ? floor : st.tol.floor;
    floor = st.floor;
    dmuon_ns_scalar_band(&opts, floor, &st.band_lo, &st.band_hi);
    dmuon_rc rc = dmuon_ns_create(dev, -1, &opts, &st.ns);
    if (rc == DMUON_OK)
        rc = dmuon_ns_create(dev, -1, &other, &st.other);
    char variant[32];
    dmuon_ns_opts_variant(&opts, variant, sizeof variant);
    dmuon_json w;
    if (rc == DMUON_OK && json) {
        st.js = &w;
        dmuon_json_init(&w, stdout, true);
        dmuon_json_begin_object(&w);
        dmuon_json_kstr(&w, "variant", variant);
        dmuon_json_kstr(&w, "dtype", dmuon_ns_opts_dtype_name(&opts));
        dmuon_json_kstr(&w, "device", dev == DMUON_DEVICE_CUDA ? "cuda" : "cpu");
        dmuon_json_kdouble(&w, "floor", floor);
        dmuon_json_kdouble(&w, "band_lo", st.band_lo);
        dmuon_json_kdouble(&w, "band_hi", st.band_hi);
        dmuon_json_key(&w, "cases");
        dmuon_json_begin_array(&w);
    } else if (rc == DMUON_OK) {
        printf("# dmuon-verify ns: %s %s on %s; gains of directions with sigma/||X||_F >= %g "
               "must lie in [%.3f, %.3f] +- %.2f\n",
               variant, dmuon_ns_opts_dtype_name(&opts), dev == DMUON_DEVICE_CUDA ? "cuda" : "cpu",
               floor, st.band_lo, st.band_hi, st.tol.band_slack);
        if (st.band_lo < OUTER_LO || st.band_hi > OUTER_HI)
            printf("# the coefficients map [%g, 1] to [%.3f, %.3f], outside [%.1f, %.1f]: they "
                   "do not orthogonalise; every band check fails\n",
                   floor, st.band_lo, st.band_hi, OUTER_LO, OUTER_HI);
        printf("# tolerances: |gain-f(sigma)| <= %g, offdiag <= %g, gram-vs-direct (significant "
               "directions) <= %g; elementwise gram-vs-direct <= %g, scale <= %g (relative to "
               "the largest element; < 0: reported only)\n",
               st.tol.model, st.tol.offdiag, st.tol.pair, st.tol.gd, st.tol.scale);
        printf("%-11s %-8s %11s %6s %6s %9s %9s %9s %9s %9s %9s  %s\n", "shape", "input",
               "above/dirs", "gainlo", "gainhi", "|sig-1|", "|g-f|", "offdiag", "gram-dir",
               "elemwise", "scale", "result");
    }
    int bad_special = 0;
    for (size_t i = 0; rc == DMUON_OK && i < nshapes; i++) {
        const int64_t m = shapes[i][0], n = shapes[i][1];
        if (m * n > max_el) {
            nskipped++;
            fprintf(stderr, "dmuon-verify: ns skipping %lldx%lld: %lld elements > "
                    "--max-elements %lld\n", (long long)m, (long long)n, (long long)(m * n),
                    max_el);
            if (st.js) {
                dmuon_json_begin_object(&w);
                dmuon_json_kint(&w, "m", m);
                dmuon_json_kint(&w, "n", n);
                dmuon_json_kbool(&w, "skipped", true);
                dmuon_json_end_object(&w);
            } else {
                printf("%lldx%-*lld skipped: %lld elements > --max-elements %lld\n",
                       (long long)m, 10 - snprintf(NULL, 0, "%lld", (long long)m),
                       (long long)n, (long long)(m * n), max_el);
            }
            continue;
        }
        for (int k = 0; rc == DMUON_OK && k < DMUON_NS_INPUT_COUNT; k++)
            if (use[k]) {
                fprintf(stderr, "dmuon-verify: ns [%zu/%zu] %lldx%lld %s\n", ++done_cases,
                        ncases, (long long)m, (long long)n,
                        dmuon_ns_input_name((dmuon_ns_input)k));
                rc = check_case(&st, m, n, (dmuon_ns_input)k, seed + 7919 * i + k);
            }
        if (rc == DMUON_OK)
            rc = check_special(&st, shapes[i][0], shapes[i][1], &bad_special);
    }
    if (st.js && rc == DMUON_OK) {
        dmuon_json_end_array(&w);
        dmuon_json_kint(&w, "special_failures", bad_special);
        dmuon_json_kint(&w, "skipped", (int64_t)nskipped);
        dmuon_json_kint(&w, "checks", st.checks);
        dmuon_json_kint(&w, "failed", st.failed);
        dmuon_json_end_object(&w);   /* ends the line */
    }
    dmuon_ns_free(st.ns);
    dmuon_ns_free(st.other);
    free(shapes);
    if (rc != DMUON_OK) {
        fprintf(stderr, "dmuon-verify: error: %s\n", dmuon_errmsg());
        return dmuon_rc_exit_code(rc);
    }
    if (!json) {
        printf("# %d checks, %d failed (zero/NaN/Inf/norm-extreme checks: %d failed)\n", st.checks, st.failed,
               bad_special);
        if (nskipped)
            printf("# %zu shape%s skipped (more than --max-elements %lld elements)\n", nskipped,
                   nskipped == 1 ? "" : "s", max_el);
    }
    if (st.failed)
        fprintf(stderr, "dmuon-verify: ns: %d of %d checks failed\n", st.failed, st.checks);
    return st.failed ? 1 : 0;
}
