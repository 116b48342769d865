/*
 * ns_check.c — Newton–Schulz numerics against an independent float64
 * reference (LAPACKE dgesvd), the scalar map f of a coefficient set, and
 * deterministic test inputs (see dmuon/ns.h, "numerics").
 *
 * The reference never calls the NS code: it takes the SVD X = U·Σ·Vᵀ in
 * float64, projects the output onto the input's singular vectors
 * (D = Uᵀ·O·V) and compares D with diag(f(σᵢ/‖X‖_F)).  Invariant: every
 * buffer is freed on every path (one cleanup label per function).
 */
#include "dmuon/ns.h"

#include <cblas.h>
#include <lapacke.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------- scalar map f -- */

double dmuon_ns_scalar(const dmuon_ns_opts *o, double x)
{
    for (int k = 0; k < o->steps; k++) {
        const double x2 = x * x;
        x = x * (o->coeff[k].a + x2 * (o->coeff[k].b + x2 * o->coeff[k].c));
    }
    return x;
}

void dmuon_ns_scalar_band(const dmuon_ns_opts *o, double floor, double *lo, double *hi)
{
    const int N = 20000;
    if (!(floor > 0.0) || floor > 1.0)
        floor = floor > 1.0 ? 1.0 : 1e-12;
    const double l0 = log10(floor);
    *lo = *hi = dmuon_ns_scalar(o, 1.0);
    for (int i = 0; i <= N; i++) {
        double f = dmuon_ns_scalar(o, pow(10.0, l0 - l0 * i / N));
        *lo = f < *lo ? f : *lo;
        *hi = f > *hi ? f : *hi;
    }
    double f = dmuon_ns_scalar(o, floor);
    *lo = f < *lo ? f : *lo;
    *hi = f > *hi ? f : *hi;
}

/* ----------------------------------------------------------- the check -- */

dmuon_rc dmuon_ns_check_output(const dmuon_ns_opts *o, const float *x, int64_t m, int64_t n,
                               const float *out, const float *out2, double floor,
                               dmuon_ns_check *res)
{
    dmuon_rc rc = DMUON_OK;
    double *a = NULL;
    memset(res, 0, sizeof *res);
    if (!x || !out || !o)
        return DMUON_FAIL(DMUON_EINVAL, "ns check: NULL argument");
    if (m < 1 || n < 1 || m > 65536 || n > 65536)
        return DMUON_FAIL(DMUON_EINVAL, "ns check: shape %lld x %lld (expected 1..65536 each)",
                          (long long)m, (long long)n);
    const int64_t k = m < n ? m : n;
    const size_t mn = (size_t)(m * n);
    /* one allocation: a (m·n), o64 (m·n), s (k), u (m·k), vt (k·n), w (m·k),
     * d (k·k), rec (m·k), superb (k), d2 (k·k) */
    const size_t total = 2 * mn + (size_t)k + 3 * (size_t)(m * k) + (size_t)(k * n) +
                         2 * (size_t)(k * k) + (size_t)k;
    a = malloc(total * sizeof *a);
    if (!a)
        return DMUON_FAIL(DMUON_ENOMEM, "ns check: out of memory for a %lld x %lld reference",
                          (long long)m, (long long)n);
    double *o64 = a + mn, *s = o64 + mn, *u = s + k, *vt = u + m * k, *w = vt + k * n,
           *d = w + m * k, *rec = d + k * k, *superb = rec + m * k,
           *d2 = superb + k;

    double fro2 = 0.0;
    for (size_t i = 0; i < mn; i++) {
        if (!isfinite(x[i]) || !isfinite(out[i]) || (out2 && !isfinite(out2[i]))) {
            rc = DMUON_FAIL(DMUON_ENUMERIC, "ns check: %s element %zu is not finite",
                            isfinite(x[i]) ? "output" : "input", i);
            goto done;
        }
        a[i] = x[i];
        o64[i] = out[i];
        fro2 += a[i] * a[i];
    }
    res->directions = k;
    if (fro2 == 0.0) {   /* zero in: the output must be zero */
        double r = 0.0;
        for (size_t i = 0; i < mn; i++)
            r += o64[i] * o64[i];
        res->worst_residual = sqrt(r);
        goto done;
    }
    lapack_int info = LAPACKE_dgesvd(LAPACK_ROW_MAJOR, 'S', 'S', (lapack_int)m, (lapack_int)n, a,
                                     (lapack_int)n, s, u, (lapack_int)k, vt, (lapack_int)n,
                                     superb);
    if (info != 0) {
        rc = DMUON_FAIL(DMUON_ENUMERIC, "ns check: dgesvd of the %lld x %lld input failed (info %d)",
                        (long long)m, (long long)n, (int)info);
        goto done;
    }
    const double fro = sqrt(fro2);
    /* w = O·V (m x k), d = Uᵀ·w (k x k) */
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)m, (int)k, (int)n, 1.0, o64, (int)n,
                vt, (int)n, 0.0, w, (int)k);
    cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)k, (int)k, (int)m, 1.0, u, (int)k, w,
                (int)k, 0.0, d, (int)k);
    if (out2) {   /* D2 = Uᵀ·O2·V, into d2 (rec is free until the residual) */
        for (size_t i = 0; i < mn; i++)
            a[i] = out2[i];   /* a's SVD input is no longer needed */
        cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)m, (int)k, (int)n, 1.0, a,
                    (int)n, vt, (int)n, 0.0, rec, (int)k);
        cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)k, (int)k, (int)m, 1.0, u,
                    (int)k, rec, (int)k, 0.0, d2, (int)k);
    }
    res->gain_lo = INFINITY;
    res->gain_hi = -INFINITY;
    for (int64_t i = 0; i < k; i++) {
        const double sig = s[i] / fro, g = d[i * k + i];
        const double dev = fabs(g - dmuon_ns_scalar(o, sig));
        if (sig >= floor) {
            res->worst_model = dev > res->worst_model ? dev : res->worst_model;
            res->above_floor++;
            res->gain_lo = g < res->gain_lo ? g : res->gain_lo;
            res->gain_hi = g > res->gain_hi ? g : res->gain_hi;
            res->worst_sigma = fabs(g - 1.0) > res->worst_sigma ? fabs(g - 1.0) : res->worst_sigma;
        }
        for (int64_t j = 0; j < k; j++) {
            if (sig < floor || s[j] / fro < floor)
                continue;
            if (j != i && fabs(d[i * k + j]) > res->worst_offdiag)
                res->worst_offdiag = fabs(d[i * k + j]);
            if (out2 && fabs(d[i * k + j] - d2[i * k + j]) > res->worst_pair)
                res->worst_pair = fabs(d[i * k + j] - d2[i * k + j]);
        }
    }
    if (res->above_floor == 0)
        res->gain_lo = res->gain_hi = 0.0;
    /* residual: O − U·D·Vᵀ; rec = U·D (m x k), then O − rec·Vᵀ in place */
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)m, (int)k, (int)k, 1.0, u, (int)k,
                d, (int)k, 0.0, rec, (int)k);
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)m, (int)n, (int)k, -1.0, rec,
                (int)k, vt, (int)n, 1.0, o64, (int)n);
    double r = 0.0;
    for (size_t i = 0; i < mn; i++)
        r += o64[i] * o64[i];
    res->worst_residual = sqrt(r / (double)k);
done:
    free(a);
    return rc;
}

/* --------------------------------------------------------- test inputs -- */

const char *dmuon_ns_input_name(dmuon_ns_input kind)
{
    switch (kind) {
    case DMUON_NS_INPUT_GAUSSIAN: return "gaussian";
    case DMUON_NS_INPUT_LOWRANK: return "lowrank";
    case DMUON_NS_INPUT_ILLCOND: return "illcond";
    default: return "?";
    }
}

typedef struct {
    uint64_t s;
    bool have;
    double spare;
} rng;

static double uniform(rng *g)   /* (0, 1) */
{
    g->s ^= g->s >> 12;
    g->s ^= g->s << 25;
    g->s ^= g->s >> 27;
    return ((double)((g->s * 0x2545F4914F6CDD1Dull) >> 11) + 0.5) / 9007199254740992.0;
}

static double gauss(rng *g)      /* Box–Muller */
{
    if (g->have) {
        g->have = false;
        return g->spare;
    }
    double u1 = uniform(g), u2 = uniform(g), r = sqrt(-2.0 * log(u1));
    g->spare = r * sin(2.0 * M_PI * u2);
    g->have = true;
    return r * cos(2.0 * M_PI * u2);
}

/* q (rows x cols, row-major, rows >= cols) = orthonormal columns. */
static dmuon_rc orthonormal(rng *g, int64_t rows, int64_t cols, double *q, double *tau)
{
    for (int64_t i = 0; i < rows * cols; i++)
        q[i] = gauss(g);
    if (LAPACKE_dgeqrf(LAPACK_ROW_MAJOR, (lapack_int)rows, (lapack_int)cols, q, (lapack_int)cols,
                       tau) != 0 ||
        LAPACKE_dorgqr(LAPACK_ROW_MAJOR, (lapack_int)rows, (lapack_int)cols, (lapack_int)cols, q,
                       (lapack_int)cols, tau) != 0)
        return DMUON_FAIL(DMUON_ENUMERIC, "ns test input: QR of a %lld x %lld matrix failed",
                          (long long)rows, (long long)cols);
    return DMUON_OK;
}

dmuon_rc dmuon_ns_test_input(dmuon_ns_input kind, int64_t m, int64_t n, uint64_t seed, float *x)
{
    dmuon_rc rc = DMUON_OK;
    double *buf = NULL;
    rng g = {seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull, false, 0.0};
    if (m < 1 || n < 1 || m > 65536 || n > 65536 || !x)
        return DMUON_FAIL(DMUON_EINVAL, "ns test input: shape %lld x %lld (expected 1..65536)",
                          (long long)m, (long long)n);
    const int64_t k = m < n ? m : n;
    if (kind == DMUON_NS_INPUT_GAUSSIAN) {
        for (int64_t i = 0; i < m * n; i++)
            x[i] = (float)gauss(&g);
        return DMUON_OK;
    }
    if (kind == DMUON_NS_INPUT_LOWRANK) {
        const int64_t r = k / 8 > 1 ? k / 8 : 1;
        buf = malloc((size_t)(m * r + r * n + m * n) * sizeof *buf);
        if (!buf)
            return DMUON_FAIL(DMUON_ENOMEM, "ns test input: out of memory");
        double *l = buf, *rt = l + m * r, *p = rt + r * n;
        for (int64_t i = 0; i < m * r + r * n; i++)
            buf[i] = gauss(&g);
        cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)m, (int)n, (int)r,
                    1.0 / sqrt((double)r), l, (int)r, rt, (int)n, 0.0, p, (int)n);
        for (int64_t i = 0; i < m * n; i++)
            x[i] = (float)(p[i] + 1e-2 * gauss(&g));
        goto done;
    }
    if (kind == DMUON_NS_INPUT_ILLCOND) {
        /* U (m x k), V (n x k) orthonormal; x = U·diag(σ)·Vᵀ */
        buf = malloc((size_t)(m * k + n * k + k + m * n) * sizeof *buf);
        if (!buf)
            return DMUON_FAIL(DMUON_ENOMEM, "ns test input: out of memory");
        double *U = buf, *V = U + m * k, *tau = V + n * k, *p = tau + k;
        DMUON_TRY_GOTO(rc, orthonormal(&g, m, k, U, tau), done);
        DMUON_TRY_GOTO(rc, orthonormal(&g, n, k, V, tau), done);
        for (int64_t j = 0; j < k; j++) {
            const double sig = k > 1 ? pow(10.0, -6.0 * (double)j / (double)(k - 1)) : 1.0;
            for (int64_t i = 0; i < m; i++)
                U[i * k + j] *= sig;
        }
        cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)m, (int)n, (int)k, 1.0, U,
                    (int)k, V, (int)k, 0.0, p, (int)n);
        for (int64_t i = 0; i < m * n; i++)
            x[i] = (float)p[i];
        goto done;
    }
    return DMUON_FAIL(DMUON_EINVAL, "ns test input: unknown kind %d", (int)kind);
done:
    free(buf);
    return rc;
}
