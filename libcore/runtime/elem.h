/*
 * elem.h — libcore-internal: the optimizer step's element operations on the
 * memory of one device, as one table the runtime calls through: the host's
 * (elem.c, the arithmetic of dmuon/optim.h) and CUDA's
 * (kernels/optim_cuda.cu).  Both compute in binary32 on the stored values
 * with the scalars rounded from double, without fused multiply-adds, so the
 * two agree bit for bit; only the gradient norm's summation order differs
 * (the host sums in element order, the device per block, then over blocks).
 *
 * The CUDA table is compiled (with warnings as errors) in builds that find
 * CUDA, but it has not run: the machines that built it have no GPU, and the
 * runtime reaches it only with device cuda, which dmuon_rt_create refuses
 * (DMUON_EUNSUPPORTED) until the pool lives in device memory.
 *
 * Every operation works on n elements of memory of its device, in order on
 * `stream` (a cudaStream_t for CUDA; ignored by the host) and returns when
 * its result is known.  *bad: the index of the first element whose result
 * is not finite, or -1.
 */
#ifndef DMUON_RT_ELEM_H
#define DMUON_RT_ELEM_H

#include <stdint.h>

#include "dmuon/optim.h"
#include "dmuon/rc.h"

typedef struct {
    const char *name;          /* "cpu", "cuda" */
    /* u = the Nesterov direction of (mom, g), mom unchanged
     * (dmuon_muon_direction) */
    dmuon_rc (*direction)(const dmuon_optim_opts *o, int64_t n, const float *mom, const float *g,
                          float *u, void *stream);
    /* dmuon_muon_finish: write 0 checks, write 1 stores */
    dmuon_rc (*muon_finish)(const dmuon_optim_opts *o, double lr, double scale, int64_t n,
                            float *w, float *mom, const float *g, const float *o_dir, int write,
                            int64_t *bad, void *stream);
    /* dmuon_adamw_step: write 0 checks, write 1 stores */
    dmuon_rc (*adamw_step)(const dmuon_optim_opts *o, double lr, double decay, int64_t t,
                           int64_t n, float *w, float *m, float *v, const float *g, int write,
                           int64_t *bad, void *stream);
    /* the gradient check: *bad the first non-finite element, *sumsq the sum
     * of squares (double) of the elements before it */
    dmuon_rc (*grad_check)(const float *g, int64_t n, int64_t *bad, double *sumsq, void *stream);
} rt_elem_ops;

/* The host table; the CUDA table, or NULL in a build without CUDA. */
const rt_elem_ops *rt_elem_host(void);
const rt_elem_ops *rt_elem_cuda(void);

#endif
