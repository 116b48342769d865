/*
 * test_ns.c — Newton–Schulz numerics against an independent float64
 * reference written here (LAPACKE dgesvd: the input's singular vectors and
 * the scalar map evaluated from the published coefficients), plus the
 * options, names and error paths of dmuon/ns.h.
 *
 * Tolerances (FP32): gains of directions with σ/‖X‖_F >= 1e-3 within the
 * Polar Express band [0.729, 1.124] widened by 0.01; |gain − f(σ)| <= 1e-3;
 * Gram vs direct and the 1e-9 / 1e+6 scaled copies within 2e-3 of the
 * largest element.  The shapes are small so the suite runs in seconds.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <cblas.h>
#include <lapacke.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dmuon/ns.h"
#include "ns_engine.h"

/* Amsel et al. 2025 (arXiv:2505.16932) Algorithm 1, first five tuples, and
 * the 1.05 safety factor: written out here, not taken from the library. */
static const double pe_raw[5][3] = {
    {8.28721201814563, -23.595886519098837, 17.300387312530933},
    {4.107059111542203, -2.9478499167379106, 0.5448431082926601},
    {3.9486908534822946, -2.908902115962949, 0.5518191394370137},
    {3.3184196573706015, -2.488488024314874, 0.51004894012372},
    {2.300652019954817, -1.6689039845747493, 0.4188073119525673},
};

static double f_pe5(double x)
{
    for (int k = 0; k < 5; k++) {
        const double y = x / 1.05;   /* p(x/1.05) = a/1.05·x + b/1.05³·x³ + c/1.05⁵·x⁵ */
        x = pe_raw[k][0] * y + pe_raw[k][1] * y * y * y + pe_raw[k][2] * y * y * y * y * y;
    }
    return x;
}

/* ------------------------------------------------------------- helpers -- */

static float *gaussian(int64_t m, int64_t n, unsigned seed)
{
    float *x = malloc((size_t)(m * n) * sizeof *x);
    assert_non_null(x);
    srand(seed);
    for (int64_t i = 0; i < m * n; i += 2) {
        double u1 = (rand() + 1.0) / (RAND_MAX + 2.0), u2 = (rand() + 1.0) / (RAND_MAX + 2.0);
        double r = sqrt(-2.0 * log(u1));
        x[i] = (float)(r * cos(2 * M_PI * u2));
        if (i + 1 < m * n)
            x[i + 1] = (float)(r * sin(2 * M_PI * u2));
    }
    return x;
}

static float *run_ns(const char *variant, const char *dtype, const float *x, int64_t m,
                     int64_t n)
{
    dmuon_ns_opts o;
    dmuon_ns *ns = NULL;
    dmuon_ns_opts_init(&o);
    assert_int_equal(dmuon_ns_opts_set_variant(&o, variant), DMUON_OK);
    assert_int_equal(dmuon_ns_opts_set_dtype(&o, dtype), DMUON_OK);
    assert_int_equal(dmuon_ns_create(DMUON_DEVICE_CPU, -1, &o, &ns), DMUON_OK);
    float *out = malloc((size_t)(m * n) * sizeof *out);
    assert_non_null(out);
    assert_int_equal(dmuon_ns_run(ns, x, m, n, out), DMUON_OK);
    dmuon_ns_free(ns);
    return out;
}

/* Reference: gains of out along x's singular directions (D = Uᵀ·O·V),
 * checked against f_pe5 and the band; returns the number of directions
 * above the floor. */
static int64_t check_gains(const float *x, const float *out, int64_t m, int64_t n, double band_lo,
                           double band_hi, double model_tol, double offdiag_tol)
{
    const int64_t k = m < n ? m : n;
    double *a = malloc((size_t)(m * n) * sizeof *a), *o = malloc((size_t)(m * n) * sizeof *o);
    double *s = malloc((size_t)k * sizeof *s), *u = malloc((size_t)(m * k) * sizeof *u);
    double *vt = malloc((size_t)(k * n) * sizeof *vt), *w = malloc((size_t)(m * k) * sizeof *w);
    double *d = malloc((size_t)(k * k) * sizeof *d), *sb = malloc((size_t)k * sizeof *sb);
    assert_true(a && o && s && u && vt && w && d && sb);
    double fro = 0.0;
    for (int64_t i = 0; i < m * n; i++) {
        a[i] = x[i];
        o[i] = out[i];
        fro += a[i] * a[i];
    }
    fro = sqrt(fro);
    assert_int_equal(LAPACKE_dgesvd(LAPACK_ROW_MAJOR, 'S', 'S', (int)m, (int)n, a, (int)n, s, u,
                                    (int)k, vt, (int)n, sb),
                     0);
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)m, (int)k, (int)n, 1.0, o, (int)n,
                vt, (int)n, 0.0, w, (int)k);
    cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)k, (int)k, (int)m, 1.0, u, (int)k,
                w, (int)k, 0.0, d, (int)k);
    int64_t above = 0;
    for (int64_t i = 0; i < k; i++) {
        const double sig = s[i] / fro, g = d[i * k + i];
        if (sig < 1e-3)
            continue;
        above++;
        if (g < band_lo || g > band_hi || fabs(g - f_pe5(sig)) > model_tol)
            fail_msg("%lldx%lld direction %lld: sigma/||X|| %.3e gain %.5f, f %.5f, band "
                     "[%.3f, %.3f]",
                     (long long)m, (long long)n, (long long)i, sig, g, f_pe5(sig), band_lo,
                     band_hi);
        for (int64_t j = 0; j < k; j++)
            if (j != i && s[j] / fro >= 1e-3 && fabs(d[i * k + j]) > offdiag_tol)
                fail_msg("%lldx%lld: directions %lld and %lld mixed by %.3e", (long long)m,
                         (long long)n, (long long)i, (long long)j, fabs(d[i * k + j]));
    }
    free(a); free(o); free(s); free(u); free(vt); free(w); free(d); free(sb);
    return above;
}

static double max_rel(const float *a, const float *b, int64_t count)
{
    double e = 0.0, big = 0.0;
    for (int64_t i = 0; i < count; i++) {
        e = fmax(e, fabs((double)a[i] - b[i]));
        big = fmax(big, fabs((double)b[i]));
    }
    return e / big;
}

/* --------------------------------------------------------------- options -- */

static void test_opts_defaults(void **state)
{
    dmuon_ns_opts o;
    char name[32];
    dmuon_ns_opts_init(&o);
    assert_int_equal(o.method, DMUON_NS_GRAM);
    assert_int_equal(o.dtype, DMUON_F32);
    assert_int_equal(o.steps, 5);
    for (int k = 0; k < 5; k++) {
        assert_true(fabs(o.coeff[k].a - pe_raw[k][0] / 1.05) < 1e-12);
        assert_true(fabs(o.coeff[k].b - pe_raw[k][1] / (1.05 * 1.05 * 1.05)) < 1e-12);
        assert_true(fabs(o.coeff[k].c - pe_raw[k][2] / pow(1.05, 5)) < 1e-12);
        assert_int_equal(o.restart[k], k == 2);
    }
    dmuon_ns_opts_variant(&o, name, sizeof name);
    assert_string_equal(name, "gram-pe5");
    assert_string_equal(dmuon_ns_opts_dtype_name(&o), "fp32");

    assert_int_equal(dmuon_ns_opts_set_variant(&o, "direct-muon5"), DMUON_OK);
    assert_int_equal(o.method, DMUON_NS_DIRECT);
    for (int k = 0; k < 5; k++) {
        assert_true(o.coeff[k].a == 3.4445 && o.coeff[k].b == -4.7750 && o.coeff[k].c == 2.0315);
    }
    dmuon_ns_opts_variant(&o, name, sizeof name);
    assert_string_equal(name, "direct-muon5");
    assert_int_equal(dmuon_ns_opts_set_variant(&o, "gram-pe7"), DMUON_EINVAL);
    assert_non_null(strstr(dmuon_errmsg(), "'gram-pe7'"));
    assert_int_equal(dmuon_ns_opts_set_dtype(&o, "bf16"), DMUON_OK);
    assert_string_equal(dmuon_ns_opts_dtype_name(&o), "bf16");
    assert_int_equal(dmuon_ns_opts_set_dtype(&o, "fp8"), DMUON_EINVAL);
}

static void test_opts_parse(void **state)
{
    dmuon_ns_opts o;
    char name[32];
    dmuon_ns_opts_init(&o);
    assert_int_equal(dmuon_ns_opts_parse_restarts(&o, "1,3"), DMUON_OK);
    assert_true(o.restart[1] && o.restart[3] && !o.restart[2]);
    dmuon_ns_opts_variant(&o, name, sizeof name);
    assert_string_equal(name, "gram-pe5-r1,3");
    assert_int_equal(dmuon_ns_opts_parse_restarts(&o, "none"), DMUON_OK);
    dmuon_ns_opts_variant(&o, name, sizeof name);
    assert_string_equal(name, "gram-pe5-rnone");
    assert_int_equal(dmuon_ns_opts_parse_restarts(&o, "5"), DMUON_EINVAL);   /* >= steps */
    assert_int_equal(dmuon_ns_opts_parse_restarts(&o, "0"), DMUON_EINVAL);
    assert_int_equal(dmuon_ns_opts_parse_restarts(&o, "2,x"), DMUON_EINVAL);

    assert_int_equal(dmuon_ns_opts_parse_coeffs(&o, "3,-4,2; 1.5,-0.5,0"), DMUON_OK);
    assert_int_equal(o.steps, 2);
    assert_true(o.coeff[1].a == 1.5 && o.coeff[1].b == -0.5 && o.coeff[1].c == 0.0);
    assert_int_equal(dmuon_ns_opts_check(&o), DMUON_OK);
    dmuon_ns_opts_variant(&o, name, sizeof name);
    assert_non_null(strstr(name, "gram-user-"));
    assert_int_equal(dmuon_ns_opts_parse_coeffs(&o, "3,-4"), DMUON_EINVAL);
    assert_non_null(strstr(dmuon_errmsg(), "tuple 1"));
    assert_int_equal(dmuon_ns_opts_parse_coeffs(&o, "3,-4,2;nan,1,1"), DMUON_EINVAL);
    assert_int_equal(dmuon_ns_opts_parse_coeffs(&o, "1,2,3,"), DMUON_EINVAL);
    o.steps = 0;
    assert_int_equal(dmuon_ns_opts_check(&o), DMUON_EINVAL);
}

static void test_flops(void **state)
{
    dmuon_ns_opts o;
    dmuon_ns_opts_init(&o);
    o.method = DMUON_NS_DIRECT;
    /* direct: 5 x (syrk s x l + syrk s x s + gemm s x s x l) with s = 4, l = 10 */
    const double direct = 5 * (4.0 * 5 * 10 + 4.0 * 5 * 4 + 2.0 * 4 * 4 * 10);
    assert_true(fabs(dmuon_ns_flops(&o, 10, 4) - direct) < 1e-9);
    assert_true(fabs(dmuon_ns_flops(&o, 4, 10) - direct) < 1e-9);
    o.method = DMUON_NS_GRAM;
    /* gram, restart after 2: syrk(sl) + step0 [syrk ss + 2 gemm sss] + step1 [syrk ss +
     * gemm sss] + restart [gemm ssl + syrk sl] + step2 [syrk ss + 2 gemm] + step3 [syrk ss
     * + 3 gemm] + step4 [syrk ss + gemm] + final gemm ssl */
    const double sl = 4.0 * 5 * 10, ss = 4.0 * 5 * 4, g3 = 2.0 * 64, gl = 2.0 * 16 * 10;
    const double gram = sl + (ss + 2 * g3) + (ss + g3) + (gl + sl) + (ss + 2 * g3) +
                        (ss + 3 * g3) + (ss + g3) + gl;
    assert_true(fabs(dmuon_ns_flops(&o, 4, 10) - gram) < 1e-9);
    assert_true(dmuon_ns_flops(&o, 0, 10) == 0.0);
}

/* -------------------------------------------------------------- numerics -- */

static void test_numerics_shapes(void **state)
{
    /* square, wide, tall, 1 x n, n x 1, dimensions not multiples of 8 */
    static const int64_t shapes[][2] = {{24, 24}, {16, 40}, {40, 16}, {1, 9}, {9, 1}, {13, 29},
                                        {29, 13}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const int64_t m = shapes[i][0], n = shapes[i][1];
        float *x = gaussian(m, n, 11 + (unsigned)i);
        float *g = run_ns("gram-pe5", "fp32", x, m, n);
        float *d = run_ns("direct-pe5", "fp32", x, m, n);
        int64_t above = check_gains(x, g, m, n, 0.729 - 0.01, 1.124 + 0.01, 1e-3, 1e-3);
        assert_true(above >= 1);
        check_gains(x, d, m, n, 0.729 - 0.01, 1.124 + 0.01, 1e-3, 1e-3);
        double gd = max_rel(g, d, m * n);
        if (gd > 2e-3)
            fail_msg("%lldx%lld: gram vs direct %.3e > 2e-3", (long long)m, (long long)n, gd);
        free(x); free(g); free(d);
    }
}

static void test_numerics_inputs(void **state)
{
    /* gradient-like (low rank + noise) and badly conditioned (σ down to 1e-6):
     * directions below the 1e-3 floor are skipped by check_gains */
    static const dmuon_ns_input kinds[] = {DMUON_NS_INPUT_LOWRANK, DMUON_NS_INPUT_ILLCOND};
    static const int64_t shapes[][2] = {{32, 80}, {80, 32}, {48, 48}};
    for (size_t k = 0; k < 2; k++)
        for (size_t i = 0; i < 3; i++) {
            const int64_t m = shapes[i][0], n = shapes[i][1];
            float *x = malloc((size_t)(m * n) * sizeof *x);
            assert_int_equal(dmuon_ns_test_input(kinds[k], m, n, 5 + i, x), DMUON_OK);
            float *g = run_ns("gram-pe5", "fp32", x, m, n);
            float *d = run_ns("direct-pe5", "fp32", x, m, n);
            int64_t above = check_gains(x, g, m, n, 0.719, 1.134, 1e-3, 1e-3);
            assert_true(above >= 4 && above < (m < n ? m : n));   /* some below the floor */
            assert_true(max_rel(g, d, m * n) <= 2e-3);
            free(x); free(g); free(d);
        }
}

static void test_scale_invariance(void **state)
{
    const int64_t m = 20, n = 52;
    float *x = gaussian(m, n, 3), *xs = malloc((size_t)(m * n) * sizeof *xs);
    float *ref = run_ns("gram-pe5", "fp32", x, m, n);
    const float scales[] = {1e-9f, 1e+6f};
    for (int k = 0; k < 2; k++) {
        for (int64_t i = 0; i < m * n; i++)
            xs[i] = x[i] * scales[k];
        float *o = run_ns("gram-pe5", "fp32", xs, m, n);
        if (max_rel(o, ref, m * n) > 1e-3)
            fail_msg("scale %g changes the result by %.3e", (double)scales[k],
                     max_rel(o, ref, m * n));
        free(o);
    }
    free(x); free(xs); free(ref);
}

/* Inputs at the ends of FP32's range: ‖X‖_F = 1e-39 (every element
 * subnormal) and 1e38 (the sum of squares far beyond FLT_MAX).  The result
 * must follow the float64 SVD reference of that very input (the subnormal
 * elements carry fewer bits, so it is not compared with the unscaled input),
 * and equal the result of the same matrix rescaled to norm 1 in double. */
static void test_norm_extremes(void **state)
{
    const int64_t shapes[2][2] = {{20, 52}, {52, 20}};   /* wide and tall (transposed) */
    const double norms[2] = {1e-39, 1e38};
    for (int sh = 0; sh < 2; sh++) {
        const int64_t m = shapes[sh][0], n = shapes[sh][1];
        float *x = gaussian(m, n, 11 + (unsigned)sh), *xe = malloc((size_t)(m * n) * sizeof *xe),
              *xn = malloc((size_t)(m * n) * sizeof *xn);
        assert_true(xe && xn);
        double fro = 0.0;
        for (int64_t i = 0; i < m * n; i++)
            fro += (double)x[i] * x[i];
        for (int k = 0; k < 2; k++) {
            double fe = 0.0;
            for (int64_t i = 0; i < m * n; i++) {
                xe[i] = (float)(x[i] * (norms[k] / sqrt(fro)));
                fe += (double)xe[i] * xe[i];
            }
            assert_true(fabs(sqrt(fe) / norms[k] - 1.0) < 1e-3);   /* the norm asked for */
            if (k == 0)
                assert_true(fabsf(xe[0]) < 1.17549435e-38f);          /* subnormal */
            for (int64_t i = 0; i < m * n; i++)
                xn[i] = (float)(xe[i] / sqrt(fe));
            float *o = run_ns("gram-pe5", "fp32", xe, m, n);
            float *on = run_ns("gram-pe5", "fp32", xn, m, n);
            check_gains(xe, o, m, n, 0.719, 1.134, 1e-3, 1e-3);
            if (max_rel(o, on, m * n) > 1e-5)
                fail_msg("%lldx%lld at norm %g differs from norm 1 by %.3e", (long long)m,
                         (long long)n, norms[k], max_rel(o, on, m * n));
            free(o); free(on);
        }
        free(x); free(xe); free(xn);
    }
}

static void test_zero_nan_inf(void **state)
{
    const int64_t m = 7, n = 11;
    dmuon_ns_opts o;
    dmuon_ns *ns = NULL;
    dmuon_ns_opts_init(&o);
    assert_int_equal(dmuon_ns_create(DMUON_DEVICE_CPU, -1, &o, &ns), DMUON_OK);
    float x[77] = {0}, out[77];
    for (int i = 0; i < 77; i++)
        out[i] = NAN;
    assert_int_equal(dmuon_ns_run(ns, x, m, n, out), DMUON_OK);
    for (int i = 0; i < 77; i++)
        assert_true(out[i] == 0.0f);
    for (int i = 0; i < 77; i++)
        x[i] = (float)(i % 5) - 2.0f;
    const float bad[2] = {NAN, INFINITY};
    for (int k = 0; k < 2; k++) {
        x[40] = k ? -bad[k] : bad[k];
        for (int i = 0; i < 77; i++)
            out[i] = 42.0f;
        assert_int_equal(dmuon_ns_run(ns, x, m, n, out), DMUON_ENUMERIC);
        assert_non_null(strstr(dmuon_errmsg(), "[3, 7]"));   /* element 40 of 7 x 11 */
        for (int i = 0; i < 77; i++)
            assert_true(out[i] == 42.0f);                     /* untouched */
    }
    assert_int_equal(dmuon_ns_run(ns, x, 0, n, out), DMUON_EINVAL);
    assert_int_equal(dmuon_ns_run(ns, NULL, m, n, out), DMUON_EINVAL);
    /* in place */
    for (int i = 0; i < 77; i++)
        x[i] = (float)((i * 37) % 11) - 5.0f;
    float copy[77];
    memcpy(copy, x, sizeof x);
    assert_int_equal(dmuon_ns_run(ns, copy, m, n, out), DMUON_OK);
    assert_int_equal(dmuon_ns_run(ns, x, m, n, x), DMUON_OK);
    assert_memory_equal(x, out, sizeof out);
    dmuon_ns_free(ns);
    dmuon_ns_free(NULL);
}

static void test_bf16(void **state)
{
    /* BF16 operands: the gains of well-resolved directions (σ/‖X‖_F >= 1e-2
     * for a Gaussian 24 x 64, all of them) stay in the band within 0.05 */
    const int64_t m = 24, n = 64;
    float *x = gaussian(m, n, 9);
    float *g = run_ns("gram-pe5", "bf16", x, m, n);
    float *f = run_ns("gram-pe5", "fp32", x, m, n);
    check_gains(x, g, m, n, 0.729 - 0.05, 1.124 + 0.05, 0.1, 0.15);
    double diff = max_rel(g, f, m * n);
    assert_true(diff > 0.0);     /* really a different precision */
    assert_true(diff < 0.2);
    free(x); free(g); free(f);
}

static void test_check_detects_wrong_output(void **state)
{
    /* the library's check (used by dmuon-verify ns) must flag an output that
     * is not orthogonalised: the normalised input itself */
    const int64_t m = 12, n = 30;
    dmuon_ns_opts o;
    dmuon_ns_check c;
    dmuon_ns_opts_init(&o);
    float *x = gaussian(m, n, 21), *good = run_ns("gram-pe5", "fp32", x, m, n);
    assert_int_equal(dmuon_ns_check_output(&o, x, m, n, good, NULL, 1e-3, &c), DMUON_OK);
    assert_true(c.gain_lo > 0.72 && c.gain_hi < 1.13 && c.worst_model < 1e-3);
    assert_true(c.worst_offdiag < 1e-3 && c.worst_residual < 1e-3);
    assert_int_equal(c.above_floor, 12);
    double band_lo, band_hi;
    dmuon_ns_scalar_band(&o, 1e-3, &band_lo, &band_hi);
    assert_true(fabs(band_lo - f_pe5(1e-3)) < 1e-6 && fabs(band_hi - 1.1236) < 1e-3);
    float *bad = malloc((size_t)(m * n) * sizeof *bad);
    for (int64_t i = 0; i < m * n; i++)
        bad[i] = x[i] * 0.01f;
    assert_int_equal(dmuon_ns_check_output(&o, x, m, n, bad, good, 1e-3, &c), DMUON_OK);
    assert_true(c.worst_sigma > 0.5 && c.worst_model > 0.5 && c.worst_pair > 0.5);
    bad[3] = NAN;
    assert_int_equal(dmuon_ns_check_output(&o, x, m, n, bad, NULL, 1e-3, &c), DMUON_ENUMERIC);
    free(x); free(good); free(bad);
}

/* The engine table: the CPU engine always; the CUDA one exactly when this
 * build has CUDA (this test's link names it, as every program's but
 * dmuon-plan's does); a build without it refuses a CUDA context with a
 * message instead of linking stubs. */
static void test_engines(void **state)
{
    const dmuon_ns_engine *cpu = dmuon_ns_engine_for(DMUON_DEVICE_CPU);
    assert_non_null(cpu);
    assert_string_equal(cpu->name, "cpu");
    assert_null(cpu->measure_sym);
    assert_null(dmuon_ns_engine_for((dmuon_device_kind)7));
    const dmuon_ns_engine *cuda = dmuon_ns_engine_for(DMUON_DEVICE_CUDA);
#ifdef DMUON_HAVE_CUDA
    assert_non_null(cuda);
    assert_string_equal(cuda->name, "cuda");
    assert_non_null(cuda->measure_sym);
#else
    assert_null(cuda);
    dmuon_ns_opts o;
    dmuon_ns_opts_init(&o);
    dmuon_ns *ns = NULL;
    assert_int_equal(dmuon_ns_create(DMUON_DEVICE_CUDA, -1, &o, &ns), DMUON_EUNSUPPORTED);
    assert_null(ns);
    assert_non_null(strstr(dmuon_errmsg(), "no CUDA Newton-Schulz engine"));
#endif
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_opts_defaults),
        cmocka_unit_test(test_engines),
        cmocka_unit_test(test_opts_parse),
        cmocka_unit_test(test_flops),
        cmocka_unit_test(test_numerics_shapes),
        cmocka_unit_test(test_numerics_inputs),
        cmocka_unit_test(test_scale_invariance),
        cmocka_unit_test(test_norm_extremes),
        cmocka_unit_test(test_zero_nan_inf),
        cmocka_unit_test(test_bf16),
        cmocka_unit_test(test_check_detects_wrong_output),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
