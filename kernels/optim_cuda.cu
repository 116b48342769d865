/*
 * optim_cuda.cu — the CUDA table of the runtime's device operations
 * (libcore/runtime/elem.h): the Muon direction and finishing update, AdamW,
 * the gradient check (first non-finite element, sum of squares), and the
 * memory operations (device allocation, zeroing, copies, gradient
 * accumulation, clipping's scale, BF16 widening and narrowing, strided
 * matrix copies, Newton–Schulz on device pointers).
 *
 * Arithmetic matches the host's (dmuon/optim.h) bit for bit: binary32 on
 * the stored values, scalars rounded from double on the host, and every
 * product and sum rounded on its own (__fmul_rn / __fadd_rn / __fsub_rn /
 * __fdiv_rn / __fsqrt_rn: no fused multiply-add).  The gradient norm is
 * summed in double per block, then over blocks with atomicAdd, so only its
 * summation order differs from the host's.  The first non-finite element
 * is found with atomicMin over unsigned 64-bit indices.
 *
 * Results come back through two __device__ words (no allocation per call);
 * each launcher waits for its stream.  Not thread-safe (the runtime is not).
 *
 * Compiled with warnings as errors for sm_CUDA_ARCH in builds that find
 * CUDA.  NOT RUN: the machines that built it had no GPU, and the runtime
 * uses this table only with device cuda, which dmuon_rt_create refuses for
 * now.
 */
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

extern "C" {   /* libcore's headers are C */
#include "dmuon/ns.h"
#include "dmuon/optim.h"
#include "dmuon/rc.h"
#include "runtime/elem.h"
}

#define CU(call, what)                                                                  \
    do {                                                                                \
        cudaError_t e_ = (call);                                                        \
        if (e_ != cudaSuccess)                                                          \
            return DMUON_FAIL(DMUON_EDEVICE, "optimizer kernels: %s: %s", (what),       \
                              cudaGetErrorString(e_));                                  \
    } while (0)

static const int kThreads = 256;
static const int kMaxBlocks = 1024;

__device__ unsigned long long d_bad;   /* first bad index, or ~0 */
__device__ double d_sumsq;

static int blocks_for(int64_t n)
{
    int64_t b = (n + kThreads - 1) / kThreads;
    return (int)(b < 1 ? 1 : b > kMaxBlocks ? kMaxBlocks : b);
}

static __device__ __forceinline__ bool finite(float x) { return isfinite(x); }

static __device__ __forceinline__ void note_bad(int64_t i)
{
    atomicMin(&d_bad, (unsigned long long)i);
}

/* ------------------------------------------------------------ kernels -- */

__global__ void k_direction(float mu, int nesterov, int64_t n, const float *mom, const float *g,
                            float *u)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        float mi = __fadd_rn(__fmul_rn(mu, mom[i]), g[i]);
        u[i] = nesterov ? __fadd_rn(g[i], __fmul_rn(mu, mi)) : mi;
    }
}

__global__ void k_muon_finish(float mu, float keep, float step, int64_t n, float *w, float *mom,
                              const float *g, const float *o_dir, int write)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        float mi = __fadd_rn(__fmul_rn(mu, mom[i]), g[i]);
        float wi = __fsub_rn(__fmul_rn(w[i], keep), __fmul_rn(step, o_dir[i]));
        if (!write) {
            if (!finite(mi) || !finite(wi))
                note_bad(i);
            continue;
        }
        mom[i] = mi;
        w[i] = wi;
    }
}

__global__ void k_adamw(float b1, float b2, float step, float rc2, float eps, float keep,
                        int64_t n, float *w, float *m, float *v, const float *g, int write)
{
    const float c1 = __fsub_rn(1.0f, b1), c2 = __fsub_rn(1.0f, b2);
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        float mi = __fadd_rn(__fmul_rn(b1, m[i]), __fmul_rn(c1, g[i]));
        float vi = __fadd_rn(__fmul_rn(b2, v[i]), __fmul_rn(__fmul_rn(c2, g[i]), g[i]));
        float den = __fadd_rn(__fmul_rn(__fsqrt_rn(vi), rc2), eps);
        float wi = __fsub_rn(__fmul_rn(w[i], keep), __fdiv_rn(__fmul_rn(step, mi), den));
        if (!write) {
            if (!finite(mi) || !finite(vi) || !finite(wi))
                note_bad(i);
            continue;
        }
        m[i] = mi;
        v[i] = vi;
        w[i] = wi;
    }
}

/* Pass 1: the first non-finite index.  Pass 2 (grad_check below): the
 * squares of the elements before it, per block in double, then atomicAdd. */
__global__ void k_first_bad(int64_t n, const float *g)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        if (!finite(g[i]))
            note_bad(i);
}

__global__ void k_sumsq(int64_t n, const float *g)
{
    __shared__ double part[kThreads];
    unsigned long long lim = d_bad;
    double s = 0;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        if ((unsigned long long)i < lim)
            s += (double)g[i] * (double)g[i];
    part[threadIdx.x] = s;
    __syncthreads();
    for (int k = blockDim.x / 2; k > 0; k /= 2) {
        if ((int)threadIdx.x < k)
            part[threadIdx.x] += part[threadIdx.x + k];
        __syncthreads();
    }
    if (threadIdx.x == 0)
        atomicAdd(&d_sumsq, part[0]);
}

__global__ void k_accum(int64_t n, float *acc, const float *x)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        acc[i] = __fadd_rn(acc[i], x[i]);
}

__global__ void k_scale(int64_t n, float *x, float c)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        x[i] = __fmul_rn(x[i], c);
}

/* The bit operations of dmuon/bf16.h (widening exact; narrowing to
 * nearest even, NaN kept a quiet NaN), so host and device agree. */
__global__ void k_widen_bf16(int64_t n, float *dst, const uint16_t *src)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        dst[i] = __uint_as_float((unsigned)src[i] << 16);
}

__global__ void k_narrow_bf16(int64_t n, uint16_t *dst, const float *src)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        unsigned u = __float_as_uint(src[i]);
        if ((u & 0x7fffffffu) > 0x7f800000u)
            dst[i] = (uint16_t)((u >> 16) | 0x40u);
        else
            dst[i] = (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    }
}

__global__ void k_strided(int64_t rows, int64_t cols, int64_t rs, int64_t cs, float *mat,
                          float *st, int back)
{
    const int64_t n = rows * cols;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = i / cols, c = i % cols;
        float *s = &st[r * rs + c * cs];
        if (back)
            *s = mat[i];
        else
            mat[i] = *s;
    }
}

/* ---------------------------------------------------------- launchers -- */

static dmuon_rc reset(cudaStream_t s)
{
    const unsigned long long none = ~0ull;
    const double zero = 0;
    CU(cudaMemcpyToSymbolAsync(d_bad, &none, sizeof none, 0, cudaMemcpyHostToDevice, s),
       "reset the result");
    CU(cudaMemcpyToSymbolAsync(d_sumsq, &zero, sizeof zero, 0, cudaMemcpyHostToDevice, s),
       "reset the result");
    return DMUON_OK;
}

static dmuon_rc result(cudaStream_t s, int64_t *bad, double *sumsq)
{
    unsigned long long b = 0;
    double q = 0;
    CU(cudaMemcpyFromSymbolAsync(&b, d_bad, sizeof b, 0, cudaMemcpyDeviceToHost, s),
       "read the result");
    CU(cudaMemcpyFromSymbolAsync(&q, d_sumsq, sizeof q, 0, cudaMemcpyDeviceToHost, s),
       "read the result");
    CU(cudaStreamSynchronize(s), "wait for the stream");
    *bad = b == ~0ull ? -1 : (int64_t)b;
    if (sumsq)
        *sumsq = q;
    return DMUON_OK;
}

static dmuon_rc cuda_direction(const dmuon_optim_opts *o, int64_t n, const float *mom,
                               const float *g, float *u, void *stream)
{
    cudaStream_t s = (cudaStream_t)stream;
    k_direction<<<blocks_for(n), kThreads, 0, s>>>((float)o->momentum, o->nesterov, n, mom, g, u);
    CU(cudaGetLastError(), "launch the direction kernel");
    CU(cudaStreamSynchronize(s), "wait for the stream");
    return DMUON_OK;
}

static dmuon_rc cuda_muon_finish(const dmuon_optim_opts *o, double lr, double scale, int64_t n,
                                 float *w, float *mom, const float *g, const float *o_dir,
                                 int write, int64_t *bad, void *stream)
{
    cudaStream_t s = (cudaStream_t)stream;
    DMUON_TRY(reset(s));
    k_muon_finish<<<blocks_for(n), kThreads, 0, s>>>(
        (float)o->momentum, (float)(1.0 - lr * o->muon_weight_decay), (float)(lr * scale), n, w,
        mom, g, o_dir, write);
    CU(cudaGetLastError(), "launch the Muon update kernel");
    return result(s, bad, NULL);
}

static dmuon_rc cuda_adamw_step(const dmuon_optim_opts *o, double lr, double decay, int64_t t,
                                int64_t n, float *w, float *m, float *v, const float *g,
                                int write, int64_t *bad, void *stream)
{
    cudaStream_t s = (cudaStream_t)stream;
    const double c1 = 1.0 - pow(o->beta1, (double)t), c2 = 1.0 - pow(o->beta2, (double)t);
    DMUON_TRY(reset(s));
    k_adamw<<<blocks_for(n), kThreads, 0, s>>>(
        (float)o->beta1, (float)o->beta2, (float)(lr / c1), (float)(1.0 / sqrt(c2)),
        (float)o->eps, (float)(1.0 - lr * decay), n, w, m, v, g, write);
    CU(cudaGetLastError(), "launch the AdamW kernel");
    return result(s, bad, NULL);
}

static dmuon_rc cuda_grad_check(const float *g, int64_t n, int64_t *bad, double *sumsq,
                                void *stream)
{
    cudaStream_t s = (cudaStream_t)stream;
    DMUON_TRY(reset(s));
    k_first_bad<<<blocks_for(n), kThreads, 0, s>>>(n, g);
    CU(cudaGetLastError(), "launch the gradient check");
    k_sumsq<<<blocks_for(n), kThreads, 0, s>>>(n, g);
    CU(cudaGetLastError(), "launch the gradient norm");
    return result(s, bad, sumsq);
}

static dmuon_rc cuda_alloc(int64_t bytes, void **out)
{
    *out = NULL;
    size_t b = (size_t)(bytes > 0 ? bytes : 1);
    if (cudaMalloc(out, b) != cudaSuccess) {
        *out = NULL;
        return DMUON_FAIL(DMUON_ENOMEM, "runtime: out of device memory for %zu bytes", b);
    }
    CU(cudaMemset(*out, 0, b), "zero device memory");
    return DMUON_OK;
}

static void cuda_free(void *p)
{
    if (p)
        cudaFree(p);
}

static void *cuda_adopt(void *p) { return p; }

static dmuon_rc cuda_sync(void *stream)
{
    CU(cudaStreamSynchronize((cudaStream_t)stream), "wait for the caller's stream");
    return DMUON_OK;
}

static dmuon_rc cuda_zero(void *p, int64_t bytes, void *stream)
{
    cudaStream_t s = (cudaStream_t)stream;
    if (bytes <= 0)
        return DMUON_OK;
    CU(cudaMemsetAsync(p, 0, (size_t)bytes, s), "zero device memory");
    CU(cudaStreamSynchronize(s), "wait for the stream");
    return DMUON_OK;
}

static dmuon_rc cuda_copy(void *dst, const void *src, int64_t bytes, rt_copy_kind kind,
                          void *stream)
{
    cudaStream_t s = (cudaStream_t)stream;
    if (bytes <= 0)
        return DMUON_OK;
    cudaMemcpyKind k = kind == RT_H2D ? cudaMemcpyHostToDevice
                     : kind == RT_D2H ? cudaMemcpyDeviceToHost : cudaMemcpyDeviceToDevice;
    CU(cudaMemcpyAsync(dst, src, (size_t)bytes, k, s), "copy");
    CU(cudaStreamSynchronize(s), "wait for the stream");
    return DMUON_OK;
}

static dmuon_rc launched(cudaStream_t s, const char *what)
{
    CU(cudaGetLastError(), what);
    CU(cudaStreamSynchronize(s), "wait for the stream");
    return DMUON_OK;
}

static dmuon_rc cuda_accum(float *acc, const float *x, int64_t n, void *stream)
{
    cudaStream_t s = (cudaStream_t)stream;
    if (n <= 0)
        return DMUON_OK;
    k_accum<<<blocks_for(n), kThreads, 0, s>>>(n, acc, x);
    return launched(s, "launch the gradient accumulation");
}

static dmuon_rc cuda_scale(float *x, int64_t n, float c, void *stream)
{
    cudaStream_t s = (cudaStream_t)stream;
    if (n <= 0)
        return DMUON_OK;
    k_scale<<<blocks_for(n), kThreads, 0, s>>>(n, x, c);
    return launched(s, "launch the gradient scale");
}

static dmuon_rc cuda_widen(float *dst, const void *src, dmuon_dtype dt, int64_t n, void *stream)
{
    if (dt == DMUON_F32)
        return cuda_copy(dst, src, n * 4, RT_D2D, stream);
    cudaStream_t s = (cudaStream_t)stream;
    if (n <= 0)
        return DMUON_OK;
    k_widen_bf16<<<blocks_for(n), kThreads, 0, s>>>(n, dst, (const uint16_t *)src);
    return launched(s, "launch the BF16 widening");
}

static dmuon_rc cuda_narrow(void *dst, const float *src, dmuon_dtype dt, int64_t n, void *stream)
{
    if (dt == DMUON_F32)
        return cuda_copy(dst, src, n * 4, RT_D2D, stream);
    cudaStream_t s = (cudaStream_t)stream;
    if (n <= 0)
        return DMUON_OK;
    k_narrow_bf16<<<blocks_for(n), kThreads, 0, s>>>(n, (uint16_t *)dst, src);
    return launched(s, "launch the BF16 narrowing");
}

static dmuon_rc cuda_strided(float *mat, float *st, int64_t rows, int64_t cols, int64_t rs,
                             int64_t cs, int back, void *stream)
{
    cudaStream_t s = (cudaStream_t)stream;
    if (rows <= 0 || cols <= 0)
        return DMUON_OK;
    k_strided<<<blocks_for(rows * cols), kThreads, 0, s>>>(rows, cols, rs, cs, mat, st, back);
    return launched(s, "launch the strided matrix copy");
}

/* The NS context is a CUDA one (its own stream, synchronised by the call). */
static dmuon_rc cuda_ns_run(dmuon_ns *ns, const float *x, int64_t m, int64_t n, float *out)
{
    return dmuon_ns_run(ns, x, m, n, out);
}

static void cuda_ns_workspace(dmuon_ns *ns, void *p, int64_t bytes)
{
    dmuon_ns_set_workspace(ns, p, (size_t)bytes);
}

static const rt_elem_ops cuda_ops = {
    "cuda",       cuda_direction, cuda_muon_finish, cuda_adamw_step, cuda_grad_check,
    cuda_alloc,   cuda_free,      cuda_adopt,       cuda_sync,       cuda_zero,
    cuda_copy,    cuda_accum,     cuda_scale,       cuda_widen,      cuda_narrow,
    cuda_strided, cuda_ns_run,    cuda_ns_workspace};

extern "C" const rt_elem_ops *rt_elem_cuda(void) { return &cuda_ops; }
