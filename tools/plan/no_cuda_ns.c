/*
 * no_cuda_ns.c — dmuon-plan links without cuBLAS: these definitions take the
 * place of the CUDA Newton–Schulz path (kernels/ns_cuda.cu) in this binary
 * only, so the linker never pulls that object (and libcublas) out of
 * libdmuon.a.  The planner reads measured costs; measuring on a GPU is
 * dmuon-probe's (`dmuon-plan --probe-missing --device cuda` says so).
 */
#include "ns_cuda.h"

#define NO_CUDA_NS                                                                       \
    DMUON_FAIL(DMUON_EUNSUPPORTED, "dmuon-plan does not time Newton-Schulz on a GPU (it " \
               "links without cuBLAS): measure with dmuon-probe --model MODEL --missing "  \
               "--device cuda, then plan")

int dmuon_ns_cuda_device_count(void) { return 0; }
dmuon_rc dmuon_ns_cuda_create(int device_index, dmuon_ns_cuda **out)
{
    *out = NULL;
    return NO_CUDA_NS;
}
void dmuon_ns_cuda_free(dmuon_ns_cuda *c) {}
dmuon_rc dmuon_ns_cuda_run(dmuon_ns_cuda *c, const dmuon_ns_opts *o, const float *dev_x,
                           int64_t m, int64_t n, float *dev_out, const int kern[2])
{
    return NO_CUDA_NS;
}
dmuon_rc dmuon_ns_cuda_measure_sym(void *ctx, dmuon_dtype dtype, int64_t s, int64_t k,
                                   dmuon_kernel_row *row)
{
    return NO_CUDA_NS;
}
dmuon_rc dmuon_ns_cuda_gemm_bf16(dmuon_ns_cuda *c, int p, int q, int k, const float *dev_a,
                                 const float *dev_b, float *dev_c)
{
    return NO_CUDA_NS;
}
dmuon_rc dmuon_ns_cuda_sgemm(dmuon_ns_cuda *c, int p, int q, int k, const float *dev_a,
                             const float *dev_b, float *dev_c)
{
    return NO_CUDA_NS;
}
dmuon_rc dmuon_ns_cuda_alloc(dmuon_ns_cuda *c, size_t count, float **out) { return NO_CUDA_NS; }
void dmuon_ns_cuda_mem_free(dmuon_ns_cuda *c, float *p) {}
dmuon_rc dmuon_ns_cuda_put(dmuon_ns_cuda *c, float *dev_dst, const float *src, size_t count)
{
    return NO_CUDA_NS;
}
dmuon_rc dmuon_ns_cuda_get(dmuon_ns_cuda *c, float *dst, const float *dev_src, size_t count)
{
    return NO_CUDA_NS;
}
