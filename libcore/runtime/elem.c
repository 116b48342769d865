/*
 * elem.c — the host table of the runtime's device operations (elem.h): thin
 * wrappers of dmuon/optim.h, so the runtime's step and the single-process
 * reference run one arithmetic, and plain loops and memcpy for the memory
 * operations; then the checking table, which runs the host table on
 * disguised addresses (tests).  In a build without CUDA, rt_elem_cuda says
 * there is no device table.
 */
#include "elem.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dmuon/bf16.h"

static dmuon_rc host_direction(const dmuon_optim_opts *o, int64_t n, const float *mom,
                               const float *g, float *u, void *stream)
{
    (void)stream;
    dmuon_muon_direction(o, n, mom, g, u);
    return DMUON_OK;
}

static dmuon_rc host_muon_finish(const dmuon_optim_opts *o, double lr, double scale, int64_t n,
                                 float *w, float *mom, const float *g, const float *o_dir,
                                 int write, int64_t *bad, void *stream)
{
    (void)stream;
    *bad = dmuon_muon_finish(o, lr, scale, n, w, mom, g, o_dir, write);
    return DMUON_OK;
}

static dmuon_rc host_adamw_step(const dmuon_optim_opts *o, double lr, double decay, int64_t t,
                                int64_t n, float *w, float *m, float *v, const float *g,
                                int write, int64_t *bad, void *stream)
{
    (void)stream;
    *bad = dmuon_adamw_step(o, lr, decay, t, n, w, m, v, g, write);
    return DMUON_OK;
}

static dmuon_rc host_grad_check(const float *g, int64_t n, int64_t *bad, double *sumsq,
                                void *stream)
{
    (void)stream;
    double s = 0;
    *bad = -1;
    for (int64_t k = 0; k < n; k++) {
        if (!isfinite(g[k])) {
            *bad = k;
            break;
        }
        s += (double)g[k] * g[k];
    }
    *sumsq = s;
    return DMUON_OK;
}

static dmuon_rc host_alloc(int64_t bytes, void **out)
{
    *out = calloc((size_t)(bytes > 0 ? bytes : 1), 1);
    if (!*out)
        return DMUON_FAIL(DMUON_ENOMEM, "runtime: out of memory for %lld bytes", (long long)bytes);
    return DMUON_OK;
}

static void host_free(void *p) { free(p); }

static void *host_adopt(void *p) { return p; }

static dmuon_rc host_sync(void *stream)
{
    (void)stream;
    return DMUON_OK;
}

static dmuon_rc host_zero(void *p, int64_t bytes, void *stream)
{
    (void)stream;
    memset(p, 0, (size_t)bytes);
    return DMUON_OK;
}

static dmuon_rc host_copy(void *dst, const void *src, int64_t bytes, rt_copy_kind kind,
                          void *stream)
{
    (void)kind;
    (void)stream;
    if (bytes > 0)
        memmove(dst, src, (size_t)bytes);
    return DMUON_OK;
}

static dmuon_rc host_accum(float *acc, const float *x, int64_t n, void *stream)
{
    (void)stream;
    for (int64_t i = 0; i < n; i++)
        acc[i] += x[i];
    return DMUON_OK;
}

static dmuon_rc host_scale(float *x, int64_t n, float c, void *stream)
{
    (void)stream;
    for (int64_t i = 0; i < n; i++)
        x[i] *= c;
    return DMUON_OK;
}

static dmuon_rc host_widen(float *dst, const void *src, dmuon_dtype dt, int64_t n, void *stream)
{
    (void)stream;
    if (dt == DMUON_F32) {
        memmove(dst, src, (size_t)n * 4);
        return DMUON_OK;
    }
    dmuon_bf16_to_f32_n(dst, src, (size_t)n);
    return DMUON_OK;
}

static dmuon_rc host_narrow(void *dst, const float *src, dmuon_dtype dt, int64_t n, void *stream)
{
    (void)stream;
    if (dt == DMUON_F32) {
        memmove(dst, src, (size_t)n * 4);
        return DMUON_OK;
    }
    dmuon_bf16_from_f32(dst, src, (size_t)n);
    return DMUON_OK;
}

static dmuon_rc host_strided(float *mat, float *st, int64_t rows, int64_t cols, int64_t rs,
                             int64_t cs, int back, void *stream)
{
    (void)stream;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) {
            float *s = &st[r * rs + c * cs], *d = &mat[r * cols + c];
            if (back)
                *s = *d;
            else
                *d = *s;
        }
    return DMUON_OK;
}

static dmuon_rc host_ns_run(dmuon_ns *ns, const float *x, int64_t m, int64_t n, float *out)
{
    return dmuon_ns_run(ns, x, m, n, out);
}

static void host_ns_workspace(dmuon_ns *ns, void *p, int64_t bytes)
{
    dmuon_ns_set_workspace(ns, p, (size_t)bytes);
}

static const rt_elem_ops host_ops = {
    "cpu",        host_direction, host_muon_finish, host_adamw_step, host_grad_check,
    host_alloc,   host_free,      host_adopt,       host_sync,       host_zero,
    host_copy,    host_accum,     host_scale,       host_widen,      host_narrow,
    host_strided, host_ns_run,    host_ns_workspace};

const rt_elem_ops *rt_elem_host(void) { return &host_ops; }

/* ------------------------------------------------- the checking table -- */

/* Disguised addresses: the real one plus 2^62, which is no canonical
 * x86-64 (or AArch64) user address, so a load or store through one faults. */
#define CHECK_OFFSET ((uintptr_t)1 << 62)

static int check_on;
static int64_t check_calls;

void rt_elem_check_enable(int on) { check_on = on != 0; }
int rt_elem_check_enabled(void) { return check_on; }
int64_t rt_elem_check_calls(void) { return check_calls; }

void *rt_elem_check_reveal(const void *p)
{
    return p ? (void *)((uintptr_t)p - CHECK_OFFSET) : NULL;
}

static void *disguise(void *p) { return p ? (void *)((uintptr_t)p + CHECK_OFFSET) : NULL; }

#define R(p) rt_elem_check_reveal(p)

static dmuon_rc chk_direction(const dmuon_optim_opts *o, int64_t n, const float *mom,
                              const float *g, float *u, void *stream)
{
    check_calls++;
    return host_direction(o, n, R(mom), R(g), R(u), stream);
}

static dmuon_rc chk_muon_finish(const dmuon_optim_opts *o, double lr, double scale, int64_t n,
                                float *w, float *mom, const float *g, const float *o_dir,
                                int write, int64_t *bad, void *stream)
{
    check_calls++;
    return host_muon_finish(o, lr, scale, n, R(w), R(mom), R(g), R(o_dir), write, bad, stream);
}

static dmuon_rc chk_adamw_step(const dmuon_optim_opts *o, double lr, double decay, int64_t t,
                               int64_t n, float *w, float *m, float *v, const float *g,
                               int write, int64_t *bad, void *stream)
{
    check_calls++;
    return host_adamw_step(o, lr, decay, t, n, R(w), R(m), R(v), R(g), write, bad, stream);
}

static dmuon_rc chk_grad_check(const float *g, int64_t n, int64_t *bad, double *sumsq,
                               void *stream)
{
    check_calls++;
    return host_grad_check(R(g), n, bad, sumsq, stream);
}

static dmuon_rc chk_alloc(int64_t bytes, void **out)
{
    check_calls++;
    DMUON_TRY(host_alloc(bytes, out));
    *out = disguise(*out);
    return DMUON_OK;
}

static void chk_free(void *p) { free(R(p)); }

static void *chk_adopt(void *p) { return disguise(p); }

static dmuon_rc chk_zero(void *p, int64_t bytes, void *stream)
{
    check_calls++;
    return host_zero(R(p), bytes, stream);
}

static dmuon_rc chk_copy(void *dst, const void *src, int64_t bytes, rt_copy_kind kind,
                         void *stream)
{
    check_calls++;
    return host_copy(kind == RT_D2H ? dst : R(dst), kind == RT_H2D ? src : R(src), bytes, kind,
                     stream);
}

static dmuon_rc chk_accum(float *acc, const float *x, int64_t n, void *stream)
{
    check_calls++;
    return host_accum(R(acc), R(x), n, stream);
}

static dmuon_rc chk_scale(float *x, int64_t n, float c, void *stream)
{
    check_calls++;
    return host_scale(R(x), n, c, stream);
}

static dmuon_rc chk_widen(float *dst, const void *src, dmuon_dtype dt, int64_t n, void *stream)
{
    check_calls++;
    return host_widen(R(dst), R(src), dt, n, stream);
}

static dmuon_rc chk_narrow(void *dst, const float *src, dmuon_dtype dt, int64_t n, void *stream)
{
    check_calls++;
    return host_narrow(R(dst), R(src), dt, n, stream);
}

static dmuon_rc chk_strided(float *mat, float *st, int64_t rows, int64_t cols, int64_t rs,
                            int64_t cs, int back, void *stream)
{
    check_calls++;
    /* st may point before the piece's first element by the matrix's base
     * within its storage block: reveal keeps the offset */
    return host_strided(R(mat), R(st), rows, cols, rs, cs, back, stream);
}

static dmuon_rc chk_ns_run(dmuon_ns *ns, const float *x, int64_t m, int64_t n, float *out)
{
    check_calls++;
    return dmuon_ns_run(ns, R(x), m, n, R(out));
}

static void chk_ns_workspace(dmuon_ns *ns, void *p, int64_t bytes)
{
    check_calls++;
    dmuon_ns_set_workspace(ns, p ? (void *)R(p) : NULL, (size_t)bytes);
}

#undef R

static const rt_elem_ops check_ops = {
    "cpu (checking)", chk_direction, chk_muon_finish, chk_adamw_step, chk_grad_check,
    chk_alloc,        chk_free,      chk_adopt,       host_sync,      chk_zero,
    chk_copy,         chk_accum,     chk_scale,       chk_widen,      chk_narrow,
    chk_strided,      chk_ns_run,    chk_ns_workspace};

const rt_elem_ops *rt_elem_check(void) { return &check_ops; }

#if !DMUON_HAVE_CUDA
const rt_elem_ops *rt_elem_cuda(void) { return NULL; }
#endif
