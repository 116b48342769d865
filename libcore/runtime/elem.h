/*
 * elem.h — libcore-internal: the runtime's operations on the memory of one
 * device, as one table the runtime calls through: the optimizer step's
 * element operations, and every other read or write of the pool, of the
 * optimizer state, of the step's scratch and of the FP32 views (zeroing,
 * gradient accumulation, widening a gathered block to FP32, narrowing
 * masters into the windows, strided matrix copies, copies to and from the
 * host, Newton–Schulz).  The runtime itself never loads or stores that
 * memory: with device cuda it is device memory.  Tables: the host's
 * (elem.c, the arithmetic of dmuon/optim.h), CUDA's (kernels/optim_cuda.cu)
 * and a checking host table for tests (elem.c, rt_elem_check_enable).
 * Host and CUDA compute in binary32 on the stored values with the scalars
 * rounded from double, without fused multiply-adds, so the two agree bit
 * for bit; only the gradient norm's summation order differs (the host sums
 * in element order, the device per block, then over blocks).
 *
 * The CUDA table is compiled (with warnings as errors) in builds that find
 * CUDA, but it has not run: the machines that built it had no GPU.
 *
 * Every operation works on memory of its device (pointers the table's
 * alloc gave, or the pool through adopt), in order on `stream` (a
 * cudaStream_t for CUDA; ignored by the host) and returns when its result
 * is known (CUDA: it synchronises the stream).  *bad: the index of the
 * first element whose result is not finite, or -1.
 */
#ifndef DMUON_RT_ELEM_H
#define DMUON_RT_ELEM_H

#include <stdint.h>

#include "dmuon/ns.h"
#include "dmuon/optim.h"
#include "dmuon/rc.h"
#include "dmuon/types.h"

/* Directions of rt_elem_ops.copy. */
typedef enum { RT_H2D = 0, RT_D2H, RT_D2D } rt_copy_kind;

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

    /* ---- memory (every other access of the pool, state, scratch, views) */
    /* bytes of zeroed memory of the device (bytes 0 gives a valid pointer);
     * DMUON_ENOMEM / DMUON_EDEVICE */
    dmuon_rc (*alloc)(int64_t bytes, void **out);
    void (*free)(void *p);    /* accepts NULL */
    /* the address the runtime uses for memory the comm layer allocated
     * (the pool's base): the pointer itself, except in the checking table */
    void *(*adopt)(void *p);
    /* waits for the work the caller ordered on stream (the trainer's) */
    dmuon_rc (*sync)(void *stream);
    dmuon_rc (*zero)(void *p, int64_t bytes, void *stream);
    /* bytes from src to dst; H2D / D2H: one side is host memory */
    dmuon_rc (*copy)(void *dst, const void *src, int64_t bytes, rt_copy_kind kind,
                     void *stream);
    /* acc[i] += x[i] (binary32) */
    dmuon_rc (*accum)(float *acc, const float *x, int64_t n, void *stream);
    /* x[i] *= c (binary32) */
    dmuon_rc (*scale)(float *x, int64_t n, float c, void *stream);
    /* dst[i] = src[i] in FP32 from dtype dt (F32: a copy; BF16: exact) */
    dmuon_rc (*widen)(float *dst, const void *src, dmuon_dtype dt, int64_t n, void *stream);
    /* dst[i] = src[i] in dtype dt (BF16: nearest even, NaN stays NaN, as
     * dmuon_f32_to_bf16) */
    dmuon_rc (*narrow)(void *dst, const float *src, dmuon_dtype dt, int64_t n, void *stream);
    /* a matrix of rows x cols between row-major mat and storage st, where
     * element (r, c) is st[r * rs + c * cs]: back 0 reads st into mat,
     * back 1 writes mat into st */
    dmuon_rc (*strided)(float *mat, float *st, int64_t rows, int64_t cols, int64_t rs,
                        int64_t cs, int back, void *stream);
    /* dmuon_ns_run on memory of this device (ns: a context of its kind) */
    dmuon_rc (*ns_run)(dmuon_ns *ns, const float *x, int64_t m, int64_t n, float *out);
    /* dmuon_ns_set_workspace with memory of this device (p NULL: none) */
    void (*ns_workspace)(dmuon_ns *ns, void *p, int64_t bytes);
} rt_elem_ops;

/* The host table; the CUDA table, or NULL in a build without CUDA. */
const rt_elem_ops *rt_elem_host(void);
const rt_elem_ops *rt_elem_cuda(void);

/* Tests only: the checking host table.  It works on host memory like the
 * host table but hands the runtime disguised addresses (the real address
 * plus 2^62, outside every mapping): memory from its alloc, and the pool
 * through adopt.  Any load or store the runtime made itself, past the
 * table, would fault, so a run that matches the host run shows that every
 * host access of pool, state, scratch and views went through the table.
 * rt_elem_check_enable(1) makes dmuon_rt_create with device cpu use it
 * (process-wide, before create; 0 restores the host table);
 * rt_elem_check_reveal gives the real address of a disguised one (what the
 * trainer of such a test uses for dmuon_rt_weights / dmuon_rt_grad);
 * rt_elem_check_calls counts the table's calls so far. */
const rt_elem_ops *rt_elem_check(void);
void rt_elem_check_enable(int on);
int rt_elem_check_enabled(void);
void *rt_elem_check_reveal(const void *p);
int64_t rt_elem_check_calls(void);

#endif
