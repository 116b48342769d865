/*
 * ns.c — Newton–Schulz contexts and the CPU path through OpenBLAS (see
 * dmuon/ns.h for the mathematics and the contract).  Every device goes
 * through its engine (ns_engine.h): the CPU one is at the end of this file,
 * the CUDA one is kernels/ns_cuda.cu's, referred to weakly.
 *
 * Layout: the working matrix A is always the short-side-first copy of the
 * input, s x l row-major (s = min(m, n), l = max(m, n)), divided by the
 * input's Frobenius norm; the result is written back into the caller's
 * m x n layout by the last product (Gram) or a transposing copy (direct).
 * All s x s matrices are full (both triangles valid): symmetric products are
 * computed by ssyrk into the lower triangle and mirrored.
 *
 * Invariants: the input is read completely before out is written (out may
 * equal x); a NaN/Inf input is reported before any product runs and leaves
 * out untouched; the workspace is one allocation that only grows.
 */
#include "dmuon/timer.h"
#include "dmuon/ns.h"

#include <cblas.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ns_engine.h"
#include "ns_kernel.h"

struct dmuon_ns {
    dmuon_device_kind kind;
    dmuon_ns_opts opts;
    /* CPU workspace: one allocation, pointers into it; or the caller's */
    void *ws;
    size_t ws_bytes;
    void *ext;
    size_t ext_bytes;
    float *a, *a2;            /* s x l */
    float *r, *r2, *p, *q, *qn, *t;   /* s x s */
    float *b1, *b2;           /* BF16-rounded operand copies, s x l each (bf16 only) */
    /* per-shape kernel choice of the symmetric products (GPU; ns_kernel.h) */
    ns_sym_cache sym_cache;
    dmuon_costdb *db;         /* borrowed, may be NULL */
    char device[128], libraries[128];
    const dmuon_ns_engine *eng;
    void *ctx;                /* the engine's context */
};

static const dmuon_ns_engine cpu_engine;

/* ------------------------------------------------------------ contexts -- */

dmuon_rc dmuon_ns_create(dmuon_device_kind kind, int device_index, const dmuon_ns_opts *opts,
                         dmuon_ns **out)
{
    dmuon_rc rc;
    *out = NULL;
    DMUON_TRY(dmuon_ns_opts_check(opts));
    if (kind != DMUON_DEVICE_CPU && kind != DMUON_DEVICE_CUDA)
        return DMUON_FAIL(DMUON_EINVAL, "ns: unknown device kind %d", (int)kind);
    const dmuon_ns_engine *eng = dmuon_ns_engine_for(kind);
    if (!eng)
        return DMUON_FAIL(DMUON_EUNSUPPORTED,
                          "ns: device 'cuda' asked, but this program has no CUDA Newton-Schulz "
                          "engine (dmuon built without CUDA, or a program linked without "
                          "cuBLAS such as dmuon-plan: measure on the GPU with dmuon-probe)");
    dmuon_ns *ns = calloc(1, sizeof *ns);
    if (!ns)
        return DMUON_FAIL(DMUON_ENOMEM, "ns: out of memory for a context");
    ns->kind = kind;
    ns->opts = *opts;
    ns->eng = eng;
    DMUON_TRY_GOTO(rc, eng->create(ns, device_index, &ns->ctx), fail);
    if (kind != DMUON_DEVICE_CPU) {
        DMUON_TRY_GOTO(rc, dmuon_device_name(kind, ns->device, sizeof ns->device), fail);
        dmuon_device_libraries(kind, ns->libraries, sizeof ns->libraries);
    }
    *out = ns;
    return DMUON_OK;
fail:
    dmuon_ns_free(ns);
    return rc;
}

void dmuon_ns_free(dmuon_ns *ns)
{
    if (!ns)
        return;
    if (ns->ctx)
        ns->eng->free(ns->ctx);
    free(ns->ws);
    free(ns);
}

void dmuon_ns_set_workspace(dmuon_ns *ns, void *p, size_t bytes)
{
    ns->eng->set_workspace(ns->ctx, p, bytes);
}

dmuon_device_kind dmuon_ns_device(const dmuon_ns *ns) { return ns->kind; }

void dmuon_ns_set_costdb(dmuon_ns *ns, dmuon_costdb *db) { ns->db = db; }

/* The kernels of the two symmetric products of an m x n NS: A·Aᵀ (s x l)
 * and R·R (s x s).  An engine without a measurement (the CPU) uses ssyrk. */
static dmuon_rc sym_kernels(dmuon_ns *ns, int64_t m, int64_t n, ns_sym kern[2])
{
    const int64_t s = m < n ? m : n, l = m < n ? n : m;
    kern[0] = kern[1] = NS_SYM_SYRK;
    if (ns->eng->measure_sym) {
        const int64_t k[2] = {l, s};
        for (int i = 0; i < 2; i++)
            DMUON_TRY(ns_sym_choose(&ns->sym_cache, ns->db, ns->device, ns->libraries,
                                    ns->opts.dtype, s, k[i], ns->eng->measure_sym, ns->ctx,
                                    &kern[i], NULL));
    }
    return DMUON_OK;
}

dmuon_rc dmuon_ns_kernels(dmuon_ns *ns, int64_t m, int64_t n, const char **gram,
                          const char **square)
{
    ns_sym kern[2];
    if (m < 1 || n < 1)
        return DMUON_FAIL(DMUON_EINVAL, "ns: shape %lld x %lld (expected positive dimensions)",
                          (long long)m, (long long)n);
    DMUON_TRY(sym_kernels(ns, m, n, kern));
    *gram = ns_sym_name(kern[0]);
    *square = ns_sym_name(kern[1]);
    return DMUON_OK;
}
const dmuon_ns_opts *dmuon_ns_get_opts(const dmuon_ns *ns) { return &ns->opts; }

/* ------------------------------------------------------------- memory -- */

dmuon_rc dmuon_ns_mem_alloc(dmuon_ns *ns, size_t count, float **out)
{
    return ns->eng->alloc(ns->ctx, count, out);
}

void dmuon_ns_mem_free(dmuon_ns *ns, float *p)
{
    if (p)
        ns->eng->mem_free(ns->ctx, p);
}

dmuon_rc dmuon_ns_mem_put(dmuon_ns *ns, float *dst, const float *src_host, size_t count)
{
    return ns->eng->put(ns->ctx, dst, src_host, count);
}

dmuon_rc dmuon_ns_mem_get(dmuon_ns *ns, float *dst_host, const float *src, size_t count)
{
    return ns->eng->get(ns->ctx, dst_host, src, count);
}

/* The CPU engine's workspace for shape s x l (cpu_reserve carves it). */
static size_t cpu_ws_bytes(size_t s, size_t l, bool bf)
{
    const size_t big = s * l, sq = s * s;
    /* floats: 2 big + 6 square (+ 2 big for BF16 operands); 64-byte aligned parts */
    return (2 + (bf ? 2 : 0)) * (big * 4 + 64) + 6 * (sq * 4 + 64);
}

int64_t dmuon_ns_workspace_bytes(const dmuon_ns_opts *o, int64_t m, int64_t n)
{
    if (m < 1 || n < 1)
        return 0;
    const int64_t s = m < n ? m : n, l = m < n ? n : m;
    const int64_t big = s * l, sq = s * s, b = s / 64;
    const bool bf = o->dtype == DMUON_BF16;
    const int64_t cpu = (int64_t)cpu_ws_bytes((size_t)s, (size_t)l, bf);
    /* kernels/ns_cuda.cu reserve() */
    const int64_t cuda = 2 * (big * 4 + 256) + 6 * (sq * 4 + 256) +
                         (bf ? 2 * (big * 2 + 256) : 0) + 3 * (b * (b + 1) / 2) * 8 + 256;
    return cpu > cuda ? cpu : cuda;
}

/* Grows the CPU workspace to hold shape s x l. */
static dmuon_rc cpu_reserve(dmuon_ns *ns, size_t s, size_t l)
{
    const bool bf = ns->opts.dtype == DMUON_BF16;
    const size_t big = s * l, sq = s * s;
    const size_t need = cpu_ws_bytes(s, l, bf);
    char *p;
    if (ns->ext && need <= ns->ext_bytes) {   /* the caller's (dmuon_ns_set_workspace) */
        p = ns->ext;
        goto carve;
    }
    if (need > ns->ws_bytes) {
        void *w = NULL;
        if (posix_memalign(&w, 64, need) != 0)
            return DMUON_FAIL(DMUON_ENOMEM, "ns: out of memory for the workspace of a %zu x %zu "
                              "matrix (%zu MiB)", s, l, need >> 20);
        free(ns->ws);
        ns->ws = w;
        ns->ws_bytes = need;
    }
    p = ns->ws;
carve:
#define CARVE(ptr, type, cnt)                                            \
    do {                                                                 \
        (ptr) = (type *)(void *)p;                                       \
        p += (((cnt) * sizeof(type) + 63) / 64) * 64;                    \
    } while (0)
    CARVE(ns->a, float, big);
    CARVE(ns->a2, float, big);
    CARVE(ns->r, float, sq);
    CARVE(ns->r2, float, sq);
    CARVE(ns->p, float, sq);
    CARVE(ns->q, float, sq);
    CARVE(ns->qn, float, sq);
    CARVE(ns->t, float, sq);
    ns->b1 = ns->b2 = NULL;
    if (bf) {
        CARVE(ns->b1, float, big);
        CARVE(ns->b2, float, big);
    }
#undef CARVE
    return DMUON_OK;
}

/* ----------------------------------------------------------- products -- */

/* Rounds an FP32 value to the nearest BF16 (ties to even), kept in FP32
 * storage.  NaN/Inf never reach here (inputs are checked first). */
static inline float round_bf16(float v)
{
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    u += 0x7FFFu + ((u >> 16) & 1u);
    u &= 0xFFFF0000u;
    memcpy(&v, &u, sizeof v);
    return v;
}

/* dst = BF16-rounded copy of rows x cols of src (leading dimension ld). */
static const float *to_bf16(const float *src, int rows, int cols, int ld, float *dst)
{
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < cols; j++)
            dst[(size_t)i * ld + j] = round_bf16(src[(size_t)i * ld + j]);
    return dst;
}

/* C (p x q, row-major, ldc) = alpha·op(A)·op(B) + beta·C with op(A) p x k,
 * op(B) k x q.
 *
 * BF16: both operands are rounded to BF16 first and multiplied by sgemm.
 * This is what sbgemm computes (the product of two BF16 values is exact in
 * FP32, accumulation is FP32); Debian's OpenBLAS 0.3.21 declares
 * cblas_sbgemm but is built without BFLOAT16, so the library lacks it. */
static void mm(dmuon_ns *ns, bool ta, bool tb, int p, int q, int k, float alpha, const float *A,
               int lda, const float *B, int ldb, float beta, float *C, int ldc)
{
    const enum CBLAS_TRANSPOSE oa = ta ? CblasTrans : CblasNoTrans;
    const enum CBLAS_TRANSPOSE ob = tb ? CblasTrans : CblasNoTrans;
    if (ns->opts.dtype == DMUON_BF16) {
        const float *a16 = to_bf16(A, ta ? k : p, ta ? p : k, lda, ns->b1);
        B = B == A ? a16 : to_bf16(B, tb ? q : k, tb ? k : q, ldb, ns->b2);
        A = a16;
    }
    cblas_sgemm(CblasRowMajor, oa, ob, p, q, k, alpha, A, lda, B, ldb, beta, C, ldc);
}

/* C (s x s, full) = A·Aᵀ for A s x k (row-major, lda). */
static void sym(dmuon_ns *ns, int s, int k, const float *A, int lda, float *C)
{
    if (ns->opts.dtype == DMUON_BF16)
        A = to_bf16(A, s, k, lda, ns->b1);
    cblas_ssyrk(CblasRowMajor, CblasLower, CblasNoTrans, s, k, 1.0f, A, lda, 0.0f, C, s);
    for (int i = 0; i < s; i++)
        for (int j = i + 1; j < s; j++)
            C[(size_t)i * s + j] = C[(size_t)j * s + i];
}

/* P = a·I + b·R + c·R2 (all s x s). */
static void poly(int s, dmuon_ns_coeff co, const float *R, const float *R2, float *P)
{
    const float a = (float)co.a, b = (float)co.b, c = (float)co.c;
    for (size_t i = 0; i < (size_t)s * s; i++)
        P[i] = b * R[i] + c * R2[i];
    for (int i = 0; i < s; i++)
        P[(size_t)i * s + i] += a;
}

#define SWAP(x, y)            \
    do {                      \
        float *tmp_ = (x);    \
        (x) = (y);            \
        (y) = tmp_;           \
    } while (0)

/* ----------------------------------------------------------- the CPU run -- */

/* Finds the first non-finite element of x for the error message. */
static dmuon_rc nonfinite(const float *x, int64_t m, int64_t n)
{
    for (int64_t i = 0; i < m * n; i++)
        if (!isfinite(x[i]))
            return DMUON_FAIL(DMUON_ENUMERIC,
                              "ns: input element [%lld, %lld] of the %lld x %lld matrix is %s",
                              (long long)(i / n), (long long)(i % n), (long long)m, (long long)n,
                              isnan(x[i]) ? "NaN" : "Inf");
    return DMUON_FAIL(DMUON_ENUMERIC, "ns: the %lld x %lld input's norm is not finite",
                      (long long)m, (long long)n);
}

/* Transposing copy: dst (cols x rows, row-major) = src (rows x cols)ᵀ. */
static void transpose(const float *src, int64_t rows, int64_t cols, float *dst, double scale)
{
    const int64_t B = 32;
    for (int64_t i0 = 0; i0 < rows; i0 += B)
        for (int64_t j0 = 0; j0 < cols; j0 += B)
            for (int64_t i = i0; i < i0 + B && i < rows; i++)
                for (int64_t j = j0; j < j0 + B && j < cols; j++)
                    dst[j * rows + i] = (float)(src[i * cols + j] * scale);
}

static dmuon_rc cpu_run(dmuon_ns *ns, const float *x, int64_t m, int64_t n, float *out)
{
    const dmuon_ns_opts *o = &ns->opts;
    const bool tr = m > n;
    const int s = (int)(tr ? n : m), l = (int)(tr ? m : n);

    double sumsq = 0.0;
    for (int64_t i = 0; i < m * n; i++)
        sumsq += (double)x[i] * (double)x[i];
    if (!isfinite(sumsq))
        return nonfinite(x, m, n);
    if (sumsq == 0.0) {
        memset(out, 0, (size_t)(m * n) * sizeof(float));
        return DMUON_OK;
    }
    DMUON_TRY(cpu_reserve(ns, (size_t)s, (size_t)l));
    float *A = ns->a, *A2 = ns->a2, *R = ns->r, *R2 = ns->r2, *P = ns->p, *Q = ns->q,
          *Qn = ns->qn, *T = ns->t;

    const double scale = 1.0 / sqrt(sumsq);
    if (tr)
        transpose(x, m, n, A, scale);
    else
        for (int64_t i = 0; i < m * n; i++)
            A[i] = (float)(x[i] * scale);

    if (o->method == DMUON_NS_DIRECT) {
        for (int k = 0; k < o->steps; k++) {
            sym(ns, s, l, A, l, R);               /* R = A·Aᵀ */
            sym(ns, s, s, R, s, R2);              /* R2 = R·R */
            dmuon_ns_coeff co = o->coeff[k];
            co.a = 0.0;
            poly(s, co, R, R2, P);                /* P = b·R + c·R² */
            memcpy(A2, A, (size_t)s * l * sizeof(float));
            mm(ns, false, false, s, l, s, 1.0f, P, s, A, l, (float)o->coeff[k].a, A2, l);
            SWAP(A, A2);                          /* A = a·A + P·A */
        }
        if (tr)
            transpose(A, s, l, out, 1.0);
        else
            memcpy(out, A, (size_t)s * l * sizeof(float));
    } else {
        bool have_q = false;
        sym(ns, s, l, A, l, R);
        for (int k = 0; k < o->steps; k++) {
            if (k > 0 && o->restart[k]) {
                mm(ns, false, false, s, l, s, 1.0f, Q, s, A, l, 0.0f, A2, l);
                SWAP(A, A2);                      /* A = Q·A */
                sym(ns, s, l, A, l, R);           /* R = A·Aᵀ */
                have_q = false;
            }
            sym(ns, s, s, R, s, R2);              /* R2 = R·R */
            poly(s, o->coeff[k], R, R2, P);       /* P = Qₖ */
            if (k + 1 < o->steps && !o->restart[k + 1]) {
                mm(ns, false, false, s, s, s, 1.0f, R, s, P, s, 0.0f, T, s);   /* T = R·Qₖ */
                mm(ns, false, false, s, s, s, 1.0f, P, s, T, s, 0.0f, R2, s);  /* Qₖ·R·Qₖ */
                for (int i = 0; i < s; i++)       /* symmetrise into R */
                    for (int j = 0; j <= i; j++) {
                        float v = 0.5f * (R2[(size_t)i * s + j] + R2[(size_t)j * s + i]);
                        R[(size_t)i * s + j] = R[(size_t)j * s + i] = v;
                    }
            }
            if (!have_q) {
                SWAP(Q, P);
                have_q = true;
            } else {
                mm(ns, false, false, s, s, s, 1.0f, Q, s, P, s, 0.0f, Qn, s);  /* Q = Q·Qₖ */
                SWAP(Q, Qn);
            }
        }
        if (tr)   /* out (l x s) = (Q·A)ᵀ = Aᵀ·Qᵀ */
            mm(ns, true, true, l, s, s, 1.0f, A, l, Q, s, 0.0f, out, s);
        else
            mm(ns, false, false, s, l, s, 1.0f, Q, s, A, l, 0.0f, out, l);
    }
    for (int64_t i = 0; i < m * n; i++)
        if (!isfinite(out[i]))
            return DMUON_FAIL(DMUON_ENUMERIC,
                              "ns: the result for the %lld x %lld input is not finite at "
                              "element [%lld, %lld]",
                              (long long)m, (long long)n, (long long)(i / n), (long long)(i % n));
    return DMUON_OK;
}

/* ----------------------------------------------------------- dispatch -- */

static dmuon_rc check_args(const float *x, int64_t m, int64_t n, const float *out)
{
    if (!x || !out)
        return DMUON_FAIL(DMUON_EINVAL, "ns: NULL matrix pointer");
    if (m < 1 || n < 1)
        return DMUON_FAIL(DMUON_EINVAL, "ns: shape %lld x %lld (expected positive dimensions)",
                          (long long)m, (long long)n);
    if (m > INT_MAX || n > INT_MAX || m > INT64_MAX / n || m * n > (int64_t)INT_MAX)
        return DMUON_FAIL(DMUON_EINVAL,
                          "ns: shape %lld x %lld exceeds the BLAS integer range (%d elements)",
                          (long long)m, (long long)n, INT_MAX);
    return DMUON_OK;
}

dmuon_rc dmuon_ns_run(dmuon_ns *ns, const float *x, int64_t m, int64_t n, float *out)
{
    DMUON_TRY(check_args(x, m, n, out));
    ns_sym kern[2];
    DMUON_TRY(sym_kernels(ns, m, n, kern));
    const int k2[2] = {(int)kern[0], (int)kern[1]};
    DMUON_TRY(ns->eng->run(ns->ctx, &ns->opts, x, m, n, out, k2));
    return DMUON_OK;
}

dmuon_rc dmuon_ns_run_host(dmuon_ns *ns, const float *x, int64_t m, int64_t n, float *out)
{
    dmuon_rc rc = DMUON_OK;
    DMUON_TRY(check_args(x, m, n, out));
    if (ns->kind == DMUON_DEVICE_CPU) {
        DMUON_TRY(cpu_run(ns, x, m, n, out));
        return DMUON_OK;
    }
    float *dx = NULL;
    const size_t count = (size_t)(m * n);
    DMUON_TRY_GOTO(rc, dmuon_ns_mem_alloc(ns, count, &dx), done);
    DMUON_TRY_GOTO(rc, dmuon_ns_mem_put(ns, dx, x, count), done);
    DMUON_TRY_GOTO(rc, dmuon_ns_run(ns, dx, m, n, dx), done);
    DMUON_TRY_GOTO(rc, dmuon_ns_mem_get(ns, out, dx, count), done);
done:
    dmuon_ns_mem_free(ns, dx);
    return rc;
}

/* ------------------------------------------------------ sgemm reference -- */

dmuon_rc dmuon_ns_time_sgemm(dmuon_ns *ns, int64_t p, int64_t q, int64_t k, int warmup,
                             int iters, double *median_ms)
{
    return dmuon_ns_time_gemm(ns, DMUON_F32, p, q, k, warmup, iters, median_ms);
}

dmuon_rc dmuon_ns_time_gemm(dmuon_ns *ns, dmuon_dtype dtype, int64_t p, int64_t q, int64_t k,
                            int warmup, int iters, double *median_ms)
{
    dmuon_rc rc = DMUON_OK;
    float *host = NULL, *a = NULL, *b = NULL, *c = NULL;
    double *t = NULL;
    if (p < 1 || q < 1 || k < 1 || p > INT_MAX || q > INT_MAX || k > INT_MAX || iters < 1 ||
        warmup < 0)
        return DMUON_FAIL(DMUON_EINVAL, "sgemm timing: %lld x %lld x %lld, %d iterations "
                          "(expected positive sizes within the BLAS range)",
                          (long long)p, (long long)q, (long long)k, iters);
    const size_t na = (size_t)(p * k), nb = (size_t)(k * q), nc = (size_t)(p * q);
    const size_t most = na > nb ? (na > nc ? na : nc) : (nb > nc ? nb : nc);
    host = malloc(most * sizeof *host);
    t = malloc((size_t)iters * sizeof *t);
    if (!host || !t) {
        rc = DMUON_FAIL(DMUON_ENOMEM, "sgemm timing: out of memory");
        goto done;
    }
    for (size_t i = 0; i < most; i++)
        host[i] = (float)((i * 2654435761u) % 1000) * 1e-3f - 0.5f;
    DMUON_TRY_GOTO(rc, dmuon_ns_mem_alloc(ns, na, &a), done);
    DMUON_TRY_GOTO(rc, dmuon_ns_mem_alloc(ns, nb, &b), done);
    DMUON_TRY_GOTO(rc, dmuon_ns_mem_alloc(ns, nc, &c), done);
    DMUON_TRY_GOTO(rc, dmuon_ns_mem_put(ns, a, host, na), done);
    DMUON_TRY_GOTO(rc, dmuon_ns_mem_put(ns, b, host, nb), done);
    for (int i = 0; i < warmup + iters; i++) {
        double t0 = dmuon_now_ms();
        DMUON_TRY_GOTO(rc, ns->eng->gemm(ns->ctx, dtype, (int)p, (int)q, (int)k, a, b, c), done);
        if (i >= warmup)
            t[i - warmup] = dmuon_now_ms() - t0;
    }
    *median_ms = dmuon_median(t, (size_t)iters);
done:
    dmuon_ns_mem_free(ns, a);
    dmuon_ns_mem_free(ns, b);
    dmuon_ns_mem_free(ns, c);
    free(host);
    free(t);
    return rc;
}

/* ---------------------------------------------------------- engines -- */

static int cpu_device_count(void) { return 1; }

static dmuon_rc cpu_create(dmuon_ns *owner, int device_index, void **ctx)
{
    *ctx = owner;   /* the workspace lives in the dmuon_ns */
    return DMUON_OK;
}

static void cpu_free(void *ctx) {}

static dmuon_rc cpu_engine_run(void *ctx, const dmuon_ns_opts *o, const float *x, int64_t m,
                               int64_t n, float *out, const int kern[2])
{
    return cpu_run(ctx, x, m, n, out);
}

/* The CPU reference product is FP32 for either dtype (OpenBLAS has no BF16
 * GEMM here; dmuon/ns.h's dmuon_ns_time_gemm says so). */
static dmuon_rc cpu_gemm(void *ctx, dmuon_dtype dtype, int p, int q, int k, const float *a,
                         const float *b, float *c)
{
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, p, q, k, 1.0f, a, k, b, q, 0.0f, c,
                q);
    return DMUON_OK;
}

static dmuon_rc cpu_alloc(void *ctx, size_t count, float **out)
{
    *out = malloc((count ? count : 1) * sizeof(float));
    if (!*out)
        return DMUON_FAIL(DMUON_ENOMEM, "ns: out of memory for %zu floats", count);
    return DMUON_OK;
}

static void cpu_mem_free(void *ctx, float *p) { free(p); }

static dmuon_rc cpu_copy(void *ctx, float *dst, const float *src, size_t count)
{
    memmove(dst, src, count * sizeof(float));
    return DMUON_OK;
}

static void cpu_set_workspace(void *ctx, void *p, size_t bytes)
{
    dmuon_ns *ns = ctx;
    ns->ext = p;
    ns->ext_bytes = p ? bytes : 0;
}

static const dmuon_ns_engine cpu_engine = {
    .name = "cpu",
    .device_count = cpu_device_count,
    .create = cpu_create,
    .free = cpu_free,
    .run = cpu_engine_run,
    .measure_sym = NULL,
    .gemm = cpu_gemm,
    .alloc = cpu_alloc,
    .mem_free = cpu_mem_free,
    .put = cpu_copy,
    .get = cpu_copy,
    .set_workspace = cpu_set_workspace,
};

/* Weak: a static link pulls kernels/ns_cuda.cu (and cuBLAS) only when the
 * program names the symbol (ns_engine.h); unresolved, it is NULL. */
extern const dmuon_ns_engine dmuon_ns_cuda_engine __attribute__((weak));

const dmuon_ns_engine *dmuon_ns_engine_for(dmuon_device_kind kind)
{
    if (kind == DMUON_DEVICE_CPU)
        return &cpu_engine;
    if (kind == DMUON_DEVICE_CUDA)
        return &dmuon_ns_cuda_engine ? &dmuon_ns_cuda_engine : NULL;
    return NULL;
}
