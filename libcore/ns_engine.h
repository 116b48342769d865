/*
 * ns_engine.h — the Newton–Schulz engine of one device kind (internal to
 * libcore): a table of operations like the comm backends' (comm/backend.h).
 * ns.c holds the CPU engine (OpenBLAS); kernels/ns_cuda.cu defines the CUDA
 * one, dmuon_ns_cuda_engine, when the build has CUDA.
 *
 * Selection without forcing cuBLAS into every program: ns.c refers to
 * dmuon_ns_cuda_engine weakly, so a static link pulls ns_cuda.o (and
 * libcublas) only when something names the symbol.  The Makefile names it
 * (-Wl,-u,dmuon_ns_cuda_engine, part of LDLIBS and build/link-flags) for
 * every program but dmuon-plan, which reads measured costs and links
 * without cuBLAS; libdmuon.so always holds it.  A program without the
 * engine gets DMUON_EUNSUPPORTED from dmuon_ns_create(DMUON_DEVICE_CUDA).
 *
 * ctx is the engine's context made by create; pointers named dev_* are
 * memory of that context's device.  Every entry is set (no NULL entries).
 */
#ifndef DMUON_NS_ENGINE_H
#define DMUON_NS_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "dmuon/ns.h"
#include "dmuon/rc.h"
#include "ns_kernel.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dmuon_ns_engine {
    const char *name;
    /* Visible devices of this kind (0 when none or the runtime fails). */
    int (*device_count)(void);
    /* A context on device_index (-1: the current device); owner is the
     * dmuon_ns being made (its workspace; the CPU engine's context is the
     * owner itself).  Errors: DMUON_EDEVICE, DMUON_ENOMEM. */
    dmuon_rc (*create)(dmuon_ns *owner, int device_index, void **ctx);
    void (*free)(void *ctx);
    /* NS of dev_x (m x n row-major FP32) into dev_out, synchronised; kern:
     * the ns_sym kernels of the two symmetric products.  Errors as
     * dmuon_ns_run. */
    dmuon_rc (*run)(void *ctx, const dmuon_ns_opts *o, const float *dev_x, int64_t m,
                    int64_t n, float *dev_out, const int kern[2]);
    /* The kernel measurement of ns_sym_choose; NULL: only ssyrk (CPU). */
    ns_sym_measure_fn measure_sym;
    /* One synchronised row-major product C (p x q) = A (p x k) · B (k x q):
     * dtype DMUON_BF16 rounds the operands to BF16 first (FP32 accumulation)
     * where the engine offers it. */
    dmuon_rc (*gemm)(void *ctx, dmuon_dtype dtype, int p, int q, int k, const float *dev_a,
                     const float *dev_b, float *dev_c);
    dmuon_rc (*alloc)(void *ctx, size_t count, float **out);
    void (*mem_free)(void *ctx, float *p);
    dmuon_rc (*put)(void *ctx, float *dev_dst, const float *src, size_t count);
    dmuon_rc (*get)(void *ctx, float *dst, const float *dev_src, size_t count);
    /* dmuon_ns_set_workspace: the caller's workspace (dev_p NULL: none) */
    void (*set_workspace)(void *ctx, void *dev_p, size_t bytes);
} dmuon_ns_engine;

/* The engine of kind, or NULL when this program has none (CUDA not built or
 * not linked in).  Never fails. */
const dmuon_ns_engine *dmuon_ns_engine_for(dmuon_device_kind kind);

#ifdef __cplusplus
}
#endif

#endif
