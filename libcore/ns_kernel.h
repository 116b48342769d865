/*
 * ns_kernel.h — the per-shape kernel choice of the GPU Newton–Schulz path
 * (paper C.3), internal to libcore: which kernel computes the symmetric
 * products C = A·Aᵀ (A s x k, C s x s) for one GPU model, precision and
 * shape.  Implemented in libcore/ns_kernel.c; the measurement itself is
 * kernels/ns_cuda.cu's (dmuon_ns_cuda_measure_sym), passed in as a function
 * so that the cache logic runs and is tested without a GPU.
 *
 * Lookup order: the context's memory (ns_sym_cache), then the cost
 * database's ns_kernel table (when a database is attached), then one
 * measurement, whose result goes into both (a read-only database keeps only
 * the memory entry).  A database entry naming a kernel this build does not
 * know is measured again and replaced.
 */
#ifndef DMUON_NS_KERNEL_H
#define DMUON_NS_KERNEL_H

#include <stdint.h>

#include "dmuon/costdb.h"
#include "dmuon/ns.h"
#include "dmuon/rc.h"
#include "dmuon/types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Candidates for C = A·Aᵀ: cuBLAS SYRK (FP32 only: cuBLAS has no BF16
 * SYRK), cuBLAS GEMM on the full square, and the block-triangular batched
 * GEMM of kernels/ns_cuda.cu (lower blocks only). */
typedef enum { NS_SYM_SYRK = 0, NS_SYM_GEMM, NS_SYM_TRI, NS_SYM_COUNT } ns_sym;

/* "syrk", "gemm", "tri". */
const char *ns_sym_name(ns_sym k);
/* Parses a name of ns_sym_name; DMUON_EINVAL (no message) for another. */
dmuon_rc ns_sym_parse(const char *name, ns_sym *out);

/* Measures the candidates for (dtype, s, k) and fills row->kernel and the
 * figures (device, libraries and measured_at are the caller's).  Errors: the
 * measurement's (DMUON_EDEVICE, DMUON_ENOMEM). */
typedef dmuon_rc (*ns_sym_measure_fn)(void *ctx, dmuon_dtype dtype, int64_t s, int64_t k,
                                      dmuon_kernel_row *row);

/* One context's memory of choices; a context has one device, so entries
 * are keyed by precision and shape only.  Zero-initialise. */
#define NS_SYM_CACHE_SIZE 32
typedef struct {
    struct {
        dmuon_dtype dtype;
        int64_t s, k;
        ns_sym kernel;
    } e[NS_SYM_CACHE_SIZE];
    int count, next;          /* entries used; next slot to overwrite when full */
} ns_sym_cache;

/* Where ns_sym_choose found its answer. */
typedef enum { NS_SYM_FROM_MEMORY = 0, NS_SYM_FROM_DB, NS_SYM_MEASURED } ns_sym_source;

/* The kernel for (dtype, s, k) on device (its dmuon_device_name), in the
 * lookup order of the file comment.  db may be NULL (memory only); libraries
 * is stored with a new measurement.  *source (may be NULL) says where the
 * answer came from.  Errors: DMUON_EINVAL (s or k < 1), the measurement's,
 * DMUON_EDB (a database failure other than a miss). */
dmuon_rc ns_sym_choose(ns_sym_cache *cache, dmuon_costdb *db, const char *device,
                       const char *libraries, dmuon_dtype dtype, int64_t s, int64_t k,
                       ns_sym_measure_fn measure, void *ctx, ns_sym *out,
                       ns_sym_source *source);

#ifdef __cplusplus
}
#endif

#endif
