/*
 * ns_cuda.h — the C interface of the CUDA Newton–Schulz path in
 * kernels/ns_cuda.cu (internal to libcore; see dmuon/ns.h for the contract).
 *
 * Built and linked only when the Makefile finds CUDA (DMUON_HAVE_CUDA); the
 * functions record their errors with DMUON_FAIL like any libcore function.
 * All pointers named dev_* are device memory of the context's device.
 */
#ifndef DMUON_NS_CUDA_H
#define DMUON_NS_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "dmuon/ns.h"
#include "dmuon/rc.h"

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
 * returns.  Errors as dmuon_ns_run. */
dmuon_rc dmuon_ns_cuda_run(dmuon_ns_cuda *c, const dmuon_ns_opts *o, const float *dev_x,
                           int64_t m, int64_t n, float *dev_out);

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
