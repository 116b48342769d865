/*
 * ns_cuda.h — the C interface of the CUDA Newton–Schulz path in
 * kernels/ns_cuda.cu (internal to libcore; see dmuon/ns.h for the contract).
 *
 * Built only when the Makefile finds CUDA (DMUON_HAVE_CUDA); ns.c reaches it
 * through the engine table dmuon_ns_cuda_engine (ns_engine.h).  The
 * functions record their errors with DMUON_FAIL like any libcore function.
 * All pointers named dev_* are device memory of the context's device.
 */
#ifndef DMUON_NS_CUDA_H
#define DMUON_NS_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "dmuon/costdb.h"
#include "dmuon/ns.h"
#include "dmuon/rc.h"
#include "dmuon/types.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dmuon_ns_cuda dmuon_ns_cuda;

/* Number of visible CUDA devices (0 when none or the runtime fails). */
int dmuon_ns_cuda_device_count(void);

/* Selects device_index (-1: keep the current device), creates a stream and a
 * cuBLAS handle.  Errors: DMUON_EDEVICE. */
dmuon_rc dmuon_ns_cuda_create(int device_index, dmuon_ns_cuda **out);
void dmuon_ns_cuda_free(dmuon_ns_cuda *c);

/* NS of dev_x (m x n row-major FP32) into dev_out; synchronises before it
 * returns.  kern[0], kern[1]: the ns_sym kernels (ns_kernel.h) of the
 * symmetric products of shape s x l and s x s (s = min(m, n), l = max).
 * The first call of a shape and options runs eagerly; from the second on the
 * whole NS runs as one CUDA Graph (captured then, re-captured when dev_x or
 * dev_out change; a failed capture falls back to eager runs).  Errors as
 * dmuon_ns_run. */
dmuon_rc dmuon_ns_cuda_run(dmuon_ns_cuda *c, const dmuon_ns_opts *o, const float *dev_x,
                           int64_t m, int64_t n, float *dev_out, const int kern[2]);

/* An ns_sym_measure_fn (ns_kernel.h) with ctx = the dmuon_ns_cuda context:
 * checks every candidate for C = A·Aᵀ (A s x k) against cuBLAS GEMM on the
 * same deterministic operands (gate 1e-3 of the largest element) and times
 * one call of each after one warm-up; fills row->kernel with the fastest
 * that passes (GEMM when none beats it) and its figures.  Uses the
 * context's workspace.  Errors: DMUON_EDEVICE, DMUON_ENOMEM. */
dmuon_rc dmuon_ns_cuda_measure_sym(void *ctx, dmuon_dtype dtype, int64_t s, int64_t k,
                                   dmuon_kernel_row *row);

/* One synchronised BF16 product: row-major C (p x q, FP32) = A (p x k) ·
 * B (k x q), both rounded to BF16 first, FP32 accumulation (cublasGemmEx,
 * CUBLAS_COMPUTE_32F).  Uses the context's workspace for the BF16 copies. */
dmuon_rc dmuon_ns_cuda_gemm_bf16(dmuon_ns_cuda *c, int p, int q, int k, const float *dev_a,
                                 const float *dev_b, float *dev_c);

/* One synchronised cuBLAS Sgemm: row-major C (p x q) = A (p x k) · B (k x q). */
dmuon_rc dmuon_ns_cuda_sgemm(dmuon_ns_cuda *c, int p, int q, int k, const float *dev_a,
                             const float *dev_b, float *dev_c);

dmuon_rc dmuon_ns_cuda_alloc(dmuon_ns_cuda *c, size_t count, float **out);
void dmuon_ns_cuda_mem_free(dmuon_ns_cuda *c, float *p);
dmuon_rc dmuon_ns_cuda_put(dmuon_ns_cuda *c, float *dev_dst, const float *src, size_t count);
dmuon_rc dmuon_ns_cuda_get(dmuon_ns_cuda *c, float *dst, const float *dev_src, size_t count);

#ifdef __cplusplus
}
#endif

#endif
