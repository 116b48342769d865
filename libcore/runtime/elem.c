/*
 * elem.c — the host table of the step's element operations (elem.h): thin
 * wrappers of dmuon/optim.h, so the runtime's step and the single-process
 * reference run one arithmetic.  In a build without CUDA, rt_elem_cuda
 * says there is no device table.
 */
#include "elem.h"

#include <math.h>
#include <stddef.h>

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

static const rt_elem_ops host_ops = {"cpu", host_direction, host_muon_finish, host_adamw_step,
                                     host_grad_check};

const rt_elem_ops *rt_elem_host(void) { return &host_ops; }

#if !DMUON_HAVE_CUDA
const rt_elem_ops *rt_elem_cuda(void) { return NULL; }
#endif
