/*
 * ns.cu — the CUDA Newton–Schulz path: the same algorithm as libcore/ns.c
 * (see dmuon/ns.h) on cuBLAS, behind the C interface of libcore/ns_cuda.h.
 *
 * Layout: cuBLAS is column-major.  The working matrix A is the short-side-
 * first copy of the input, s x l column-major (ld s), produced from the
 * caller's row-major m x n buffer (which is column-major n x m) by one
 * kernel that scales by 1/‖X‖_F (in double) and transposes when m <= n.  s x s
 * matrices are full; symmetric products run as cublasSsyrk into the lower
 * triangle (FP32) or cublasGemmEx on BF16 operands (BF16), then a kernel
 * mirrors the lower triangle.
 *
 * Normalisation without a host round trip: a kernel sums squares in double
 * (atomicAdd), a one-thread kernel turns the sum into the device-side scale,
 * kept in double like the CPU path's, so ‖X‖_F = 1e-39 and 1e38 work (0 for
 * a zero or non-finite sum, so a zero input flows through to a zero
 * output), and the sum plus a finiteness flag of the output are read back
 * once at the end, where NaN/Inf input becomes DMUON_ENUMERIC.
 *
 * Invariants: every CUDA and cuBLAS call is checked; the context's stream
 * carries all work; the workspace only grows.  This file compiles wherever
 * the toolkit is installed; it runs only on a machine with a GPU.
 */
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

extern "C" {   /* libcore's headers are C; ns_cuda.h wraps only its own part */
#include "dmuon/device.h"
#include "dmuon/rc.h"
#include "dmuon/types.h"
}
#include "ns_cuda.h"
#include "ns_engine.h"
#include "ns_kernel.h"

/* A captured NS of one shape and set of options (paper C.3: the whole NS
 * of a shape is one CUDA Graph from its second use on).  The graph holds the
 * addresses of x, out and the workspace: a call with other x/out updates the
 * executable graph; a workspace that grows drops every graph. */
struct ns_graph {
    int64_t m, n;
    uint64_t key;             /* digest of the options and the kernel choices */
    const float *x;
    float *out;
    int uses;
    bool failed;              /* capture failed once: run this one eagerly */
    cudaGraphExec_t exec;
};
#define NS_GRAPHS 16
#define BLAS_WS_BYTES (32u << 20)   /* cuBLAS's recommendation for Hopper */

struct dmuon_ns_cuda {
    int device;
    cudaStream_t stream;
    cublasHandle_t blas;
    void *ws;                 /* one allocation */
    size_t ws_bytes;
    void *ext;                /* the caller's workspace (dmuon_ns_set_workspace) */
    size_t ext_bytes;
    void *ws_base;            /* the workspace the captured graphs use */
    float *a, *a2, *r, *r2, *p, *q, *qn, *t;
    __nv_bfloat16 *b1, *b2;
    void **tri_ptrs;          /* device: pointer arrays of the block-triangular product */
    double *sumsq;            /* device: sum of squares of the input */
    double *scale;            /* device: 1/‖X‖_F (or 0) */
    int *bad;                 /* device: count of non-finite outputs */
    float *diff;              /* device: [max |C − C_gemm|, max |C_gemm|] (bit patterns) */
    void *blas_ws;            /* cuBLAS workspace, so graph capture allocates nothing */
    ns_graph graphs[NS_GRAPHS];
    int ngraphs, next_graph;
};

/* ------------------------------------------------------------- errors -- */

#define CU(call, what)                                                                  \
    do {                                                                                \
        cudaError_t e_ = (call);                                                        \
        if (e_ != cudaSuccess)                                                          \
            return DMUON_FAIL(DMUON_EDEVICE, "cuda: %s: %s", (what), cudaGetErrorString(e_)); \
    } while (0)

#define CB(call, what)                                                                  \
    do {                                                                                \
        cublasStatus_t s_ = (call);                                                     \
        if (s_ != CUBLAS_STATUS_SUCCESS)                                                \
            return DMUON_FAIL(DMUON_EDEVICE, "cublas: %s: %s", (what),                  \
                              cublasGetStatusString(s_));                               \
    } while (0)

/* ------------------------------------------------------------- kernels -- */

__global__ void k_sumsq(const float *x, size_t count, double *out)
{
    double acc = 0.0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count;
         i += (size_t)gridDim.x * blockDim.x)
        acc += (double)x[i] * (double)x[i];
    for (int off = 16; off > 0; off >>= 1)
        acc += __shfl_down_sync(0xffffffffu, acc, off);
    __shared__ double warp[32];
    if ((threadIdx.x & 31) == 0)
        warp[threadIdx.x >> 5] = acc;
    __syncthreads();
    if (threadIdx.x < 32) {
        acc = threadIdx.x < (blockDim.x + 31) / 32 ? warp[threadIdx.x] : 0.0;
        for (int off = 16; off > 0; off >>= 1)
            acc += __shfl_down_sync(0xffffffffu, acc, off);
        if (threadIdx.x == 0)
            atomicAdd(out, acc);
    }
}

/* The scale 1/‖X‖_F stays in double: in FP32 it overflows for ‖X‖_F below
 * about 3e-39 and loses precision near FLT_MAX; 0 for a zero or non-finite
 * sum (a zero input flows through to a zero output). */
__global__ void k_scale(const double *sumsq, double *scale)
{
    double v = *sumsq;
    *scale = (v > 0.0 && isfinite(v)) ? 1.0 / sqrt(v) : 0.0;
}

/* A = scale·src, or its transpose, with the product in double and one
 * rounding to FP32 (as the CPU path).  src is column-major rows x cols
 * (ld rows); trans: A is cols x rows (ld cols), else rows x cols (ld rows).
 * 32 x 32 tiles through shared memory so reads and writes coalesce. */
__global__ void k_normalise(const float *src, int rows, int cols, const double *scale, bool trans,
                            float *A)
{
    __shared__ float tile[32][33];
    const double sc = *scale;
    const int r0 = blockIdx.x * 32, c0 = blockIdx.y * 32;
    for (int j = threadIdx.y; j < 32; j += blockDim.y) {
        int r = r0 + threadIdx.x, c = c0 + j;
        if (r < rows && c < cols) {
            float v = (float)((double)src[(size_t)c * rows + r] * sc);
            if (trans)
                tile[j][threadIdx.x] = v;
            else
                A[(size_t)c * rows + r] = v;
        }
    }
    if (!trans)
        return;
    __syncthreads();
    for (int j = threadIdx.y; j < 32; j += blockDim.y) {
        int c = c0 + threadIdx.x, r = r0 + j;   /* A(c, r), ld cols */
        if (r < rows && c < cols)
            A[(size_t)r * cols + c] = tile[threadIdx.x][j];
    }
}

__global__ void k_count_bad(const float *x, size_t count, int *bad)
{
    int local = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count;
         i += (size_t)gridDim.x * blockDim.x)
        local += !isfinite(x[i]);
    if (local)
        atomicAdd(bad, local);
}

/* P = a·I + b·R + c·R2 (s x s) */
__global__ void k_poly(int s, float a, float b, float c, const float *R, const float *R2, float *P)
{
    size_t n = (size_t)s * s;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float v = b * R[i] + c * R2[i];
        if (i % (size_t)(s + 1) == 0)
            v += a;
        P[i] = v;
    }
}

/* Column-major s x s: upper (row < col) takes the lower (col, row). */
__global__ void k_mirror(int s, float *C)
{
    size_t n = (size_t)s * s;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t row = i % s, col = i / s;
        if (row < col)
            C[i] = C[row * s + col];
    }
}

/* R = (S + Sᵀ)/2 */
__global__ void k_symmetrise(int s, const float *S, float *R)
{
    size_t n = (size_t)s * s;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t row = i % s, col = i / s;
        R[i] = 0.5f * (S[i] + S[row * s + col]);
    }
}

__global__ void k_to_bf16(const float *x, size_t count, __nv_bfloat16 *y)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count;
         i += (size_t)gridDim.x * blockDim.x)
        y[i] = __float2bfloat16_rn(x[i]);
}

/* Deterministic test operand in [-1, 1) (a hash of the index). */
__global__ void k_fill(float *x, size_t count, uint32_t seed)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count;
         i += (size_t)gridDim.x * blockDim.x) {
        uint32_t h = (uint32_t)i * 2654435761u ^ seed;
        h ^= h >> 15;
        h *= 2246822519u;
        h ^= h >> 13;
        x[i] = (float)(h >> 8) * (2.0f / 16777216.0f) - 1.0f;
    }
}

/* out[0] = max |a − b|, out[1] = max |b| over count elements, as the bit
 * patterns of non-negative floats (which order like unsigned integers);
 * out must be zeroed first.  NaN differences count as +Inf. */
__global__ void k_maxdiff(const float *a, const float *b, size_t count, unsigned *out)
{
    float d = 0.0f, m = 0.0f;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count;
         i += (size_t)gridDim.x * blockDim.x) {
        float e = fabsf(a[i] - b[i]);
        d = fmaxf(d, isnan(e) ? INFINITY : e);
        m = fmaxf(m, fabsf(b[i]));
    }
    atomicMax(&out[0], __float_as_uint(d));
    atomicMax(&out[1], __float_as_uint(m));
}

/* Pointer arrays of the block-triangular product: the nb·(nb+1)/2 blocks
 * (i >= j) of C (ldc) = A·Aᵀ with A's block rows i, j (b rows each, lda,
 * elements of esz bytes).  pa, pb, pc: three arrays of that many pointers. */
__global__ void k_tri_ptrs(const char *A, size_t esz, int lda, float *C, int ldc, int b, int nb,
                           void **ptrs)
{
    const int nblk = nb * (nb + 1) / 2;
    for (int t = blockIdx.x * blockDim.x + threadIdx.x; t < nblk; t += gridDim.x * blockDim.x) {
        int i = (int)((sqrt(8.0 * t + 1.0) - 1.0) / 2.0);
        while (i * (i + 1) / 2 > t)
            i--;
        while ((i + 1) * (i + 2) / 2 <= t)
            i++;
        const int j = t - i * (i + 1) / 2;
        ptrs[t] = (void *)(A + (size_t)i * b * esz);
        ptrs[nblk + t] = (void *)(A + (size_t)j * b * esz);
        ptrs[2 * nblk + t] = (void *)(C + (size_t)i * b + (size_t)j * b * ldc);
    }
    (void)lda;
}

static unsigned grid_for(size_t n)
{
    size_t g = (n + 255) / 256;
    return (unsigned)(g > 4096 ? 4096 : (g ? g : 1));
}

/* ------------------------------------------------------------ context -- */

extern "C" int dmuon_ns_cuda_device_count(void)
{
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess)
        return 0;
    return count;
}

extern "C" dmuon_rc dmuon_ns_cuda_create(int device_index, dmuon_ns_cuda **out)
{
    *out = NULL;
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0)
        return DMUON_FAIL(DMUON_EDEVICE, "cuda: no CUDA device is visible on this machine");
    if (device_index >= count)
        return DMUON_FAIL(DMUON_EDEVICE, "cuda: device %d asked, but only %d visible",
                          device_index, count);
    if (device_index >= 0)
        CU(cudaSetDevice(device_index), "cudaSetDevice");
    dmuon_ns_cuda *c = (dmuon_ns_cuda *)calloc(1, sizeof *c);
    if (!c)
        return DMUON_FAIL(DMUON_ENOMEM, "ns: out of memory for a CUDA context");
    *out = c;   /* dmuon_ns_cuda_free cleans up a half-built context */
    CU(cudaGetDevice(&c->device), "cudaGetDevice");
    CU(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking), "cudaStreamCreate");
    CB(cublasCreate(&c->blas), "cublasCreate");
    CB(cublasSetStream(c->blas, c->stream), "cublasSetStream");
    CB(cublasSetMathMode(c->blas, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
    void *small = NULL;
    CU(cudaMalloc(&small, 256), "cudaMalloc (scalars)");
    c->sumsq = (double *)small;
    c->scale = (double *)((char *)small + 64);
    c->bad = (int *)((char *)small + 192);
    c->diff = (float *)((char *)small + 128);
    CU(cudaMemset(small, 0, 256), "cudaMemset");
    CU(cudaMalloc(&c->blas_ws, BLAS_WS_BYTES), "cudaMalloc (cuBLAS workspace)");
    CB(cublasSetWorkspace(c->blas, c->blas_ws, BLAS_WS_BYTES), "cublasSetWorkspace");
    return DMUON_OK;
}

static void drop_graphs(dmuon_ns_cuda *c)
{
    for (int i = 0; i < c->ngraphs; i++)
        if (c->graphs[i].exec)
            cudaGraphExecDestroy(c->graphs[i].exec);
    memset(c->graphs, 0, sizeof c->graphs);
    c->ngraphs = c->next_graph = 0;
}

extern "C" void dmuon_ns_cuda_free(dmuon_ns_cuda *c)
{
    if (!c)
        return;
    cudaSetDevice(c->device);
    drop_graphs(c);
    if (c->blas)
        cublasDestroy(c->blas);
    cudaFree(c->blas_ws);
    if (c->stream)
        cudaStreamDestroy(c->stream);
    cudaFree(c->ws);
    cudaFree(c->sumsq);
    free(c);
}

extern "C" dmuon_rc dmuon_ns_cuda_sgemm(dmuon_ns_cuda *c, int p, int q, int k, const float *a,
                                        const float *b, float *out)
{
    const float one = 1.0f, zero = 0.0f;
    CU(cudaSetDevice(c->device), "cudaSetDevice");
    /* row-major C = A·B is column-major Cᵀ = Bᵀ·Aᵀ */
    CB(cublasSgemm(c->blas, CUBLAS_OP_N, CUBLAS_OP_N, q, p, k, &one, b, q, a, k, &zero, out, q),
       "sgemm");
    CU(cudaStreamSynchronize(c->stream), "synchronise");
    return DMUON_OK;
}

extern "C" dmuon_rc dmuon_ns_cuda_alloc(dmuon_ns_cuda *c, size_t count, float **out)
{
    CU(cudaSetDevice(c->device), "cudaSetDevice");
    if (cudaMalloc((void **)out, (count ? count : 1) * sizeof(float)) != cudaSuccess)
        return DMUON_FAIL(DMUON_ENOMEM, "cuda: out of device memory for %zu floats", count);
    return DMUON_OK;
}

extern "C" void dmuon_ns_cuda_mem_free(dmuon_ns_cuda *c, float *p)
{
    if (p) {
        cudaSetDevice(c->device);
        cudaFree(p);
    }
}

extern "C" dmuon_rc dmuon_ns_cuda_put(dmuon_ns_cuda *c, float *dst, const float *src, size_t count)
{
    CU(cudaSetDevice(c->device), "cudaSetDevice");
    CU(cudaMemcpy(dst, src, count * sizeof(float), cudaMemcpyHostToDevice), "copy to device");
    return DMUON_OK;
}

extern "C" dmuon_rc dmuon_ns_cuda_get(dmuon_ns_cuda *c, float *dst, const float *src, size_t count)
{
    CU(cudaSetDevice(c->device), "cudaSetDevice");
    CU(cudaMemcpy(dst, src, count * sizeof(float), cudaMemcpyDeviceToHost), "copy to host");
    return DMUON_OK;
}

/* The block size of the block-triangular product for order s: the largest
 * of 512, 256, 128, 64 that divides s into at least 2 blocks; 0 when none
 * does (then the kernel is not a candidate). */
static int tri_block(int64_t s)
{
    static const int sizes[4] = {512, 256, 128, 64};
    for (int i = 0; i < 4; i++)
        if (s % sizes[i] == 0 && s / sizes[i] >= 2)
            return sizes[i];
    return 0;
}

static size_t tri_ptr_count(int64_t s)
{
    const int b = tri_block(s);
    const size_t nb = b ? (size_t)(s / b) : 0;
    return 3 * (nb * (nb + 1) / 2);
}

/* Carves the workspace for shape s x l; a growing workspace is a new
 * allocation, so every captured graph is dropped. */
static dmuon_rc reserve(dmuon_ns_cuda *c, size_t s, size_t l, bool bf)
{
    const size_t big = s * l, sq = s * s, np = tri_ptr_count((int64_t)s);
    /* dmuon_ns_workspace_bytes (ns.c) gives at least this */
    const size_t need = 2 * (big * 4 + 256) + 6 * (sq * 4 + 256) +
                        (bf ? 2 * (big * 2 + 256) : 0) + np * sizeof(void *) + 256;
    char *p;
    if (c->ext && need <= c->ext_bytes) {
        p = (char *)c->ext;
    } else {
        if (need > c->ws_bytes) {
            drop_graphs(c);
            cudaFree(c->ws);
            c->ws = NULL;
            c->ws_bytes = 0;
            c->ws_base = NULL;
            if (cudaMalloc(&c->ws, need) != cudaSuccess)
                return DMUON_FAIL(DMUON_ENOMEM, "cuda: out of device memory for the workspace "
                                  "of a %zu x %zu matrix (%zu MiB)", s, l, need >> 20);
            c->ws_bytes = need;
        }
        p = (char *)c->ws;
    }
    if (p != c->ws_base) {   /* graphs captured over another workspace */
        drop_graphs(c);
        c->ws_base = p;
    }
    auto carve = [&p](size_t bytes) {
        void *r = p;
        p += ((bytes + 255) / 256) * 256;
        return r;
    };
    c->a = (float *)carve(big * 4);
    c->a2 = (float *)carve(big * 4);
    c->r = (float *)carve(sq * 4);
    c->r2 = (float *)carve(sq * 4);
    c->p = (float *)carve(sq * 4);
    c->q = (float *)carve(sq * 4);
    c->qn = (float *)carve(sq * 4);
    c->t = (float *)carve(sq * 4);
    c->b1 = c->b2 = NULL;
    if (bf) {
        c->b1 = (__nv_bfloat16 *)carve(big * 2);
        c->b2 = (__nv_bfloat16 *)carve(big * 2);
    }
    c->tri_ptrs = (void **)carve(np * sizeof(void *));
    return DMUON_OK;
}

/* ----------------------------------------------------------- products -- */

struct run_ctx {
    dmuon_ns_cuda *c;
    bool bf;
};

/* Column-major C (p x q, ldc) = alpha·op(A)·op(B) + beta·C; op(A) p x k with
 * stored extent lda x (ta ? p : k). */
static dmuon_rc mm(run_ctx &x, bool ta, bool tb, int p, int q, int k, float alpha,
                   const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc)
{
    cublasOperation_t oa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, ob = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    if (!x.bf) {
        CB(cublasSgemm(x.c->blas, oa, ob, p, q, k, &alpha, A, lda, B, ldb, &beta, C, ldc),
           "sgemm");
        return DMUON_OK;
    }
    size_t na = (size_t)lda * (ta ? p : k), nb = (size_t)ldb * (tb ? k : q);
    k_to_bf16<<<grid_for(na), 256, 0, x.c->stream>>>(A, na, x.c->b1);
    const __nv_bfloat16 *bb = x.c->b1;
    if (B != A || nb != na) {
        k_to_bf16<<<grid_for(nb), 256, 0, x.c->stream>>>(B, nb, x.c->b2);
        bb = x.c->b2;
    }
    CU(cudaGetLastError(), "bf16 conversion kernel");
    CB(cublasGemmEx(x.c->blas, oa, ob, p, q, k, &alpha, x.c->b1, CUDA_R_16BF, lda, bb,
                    CUDA_R_16BF, ldb, &beta, C, CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F,
                    CUBLAS_GEMM_DEFAULT),
       "gemmex bf16");
    return DMUON_OK;
}

/* C (s x s, full) = A·Aᵀ for column-major A s x k (lda) with kernel kern
 * (ns_kernel.h): SYRK into the lower triangle (FP32 only), GEMM of the full
 * square, or the block-triangular batched GEMM (lower blocks of tri_block(s)
 * rows); SYRK and tri are completed by mirroring the lower triangle.  A kind
 * that cannot serve this shape or precision falls back to GEMM. */
static dmuon_rc sym(run_ctx &x, ns_sym kern, int s, int k, const float *A, int lda, float *C)
{
    const int b = tri_block(s);
    if ((kern == NS_SYM_SYRK && x.bf) || (kern == NS_SYM_TRI && !b))
        kern = NS_SYM_GEMM;
    if (kern == NS_SYM_GEMM)
        return mm(x, false, true, s, s, k, 1.0f, A, lda, A, lda, 0.0f, C, s);
    const float one = 1.0f, zero = 0.0f;
    if (kern == NS_SYM_SYRK) {
        CB(cublasSsyrk(x.c->blas, CUBLAS_FILL_MODE_LOWER, CUBLAS_OP_N, s, k, &one, A, lda, &zero,
                       C, s),
           "ssyrk");
    } else {
        const int nb = s / b, nblk = nb * (nb + 1) / 2;
        const void *src = A;
        size_t esz = sizeof(float);
        if (x.bf) {
            const size_t na = (size_t)lda * k;
            k_to_bf16<<<grid_for(na), 256, 0, x.c->stream>>>(A, na, x.c->b1);
            src = x.c->b1;
            esz = sizeof(__nv_bfloat16);
        }
        k_tri_ptrs<<<(nblk + 127) / 128, 128, 0, x.c->stream>>>((const char *)src, esz, lda, C,
                                                                s, b, nb, x.c->tri_ptrs);
        CU(cudaGetLastError(), "block-triangular pointer kernel");
        void **P = x.c->tri_ptrs;
        const cudaDataType_t t = x.bf ? CUDA_R_16BF : CUDA_R_32F;
        CB(cublasGemmBatchedEx(x.c->blas, CUBLAS_OP_N, CUBLAS_OP_T, b, b, k, &one,
                               (const void *const *)P, t, lda, (const void *const *)(P + nblk), t,
                               lda, &zero, P + 2 * nblk, CUDA_R_32F, s, nblk, CUBLAS_COMPUTE_32F,
                               CUBLAS_GEMM_DEFAULT),
           "block-triangular gemm");
    }
    k_mirror<<<grid_for((size_t)s * s), 256, 0, x.c->stream>>>(s, C);
    CU(cudaGetLastError(), "mirror kernel");
    return DMUON_OK;
}

static dmuon_rc poly(run_ctx &x, int s, float a, float b, float c, const float *R,
                     const float *R2, float *P)
{
    k_poly<<<grid_for((size_t)s * s), 256, 0, x.c->stream>>>(s, a, b, c, R, R2, P);
    CU(cudaGetLastError(), "polynomial kernel");
    return DMUON_OK;
}

/* ---------------------------------------------------------------- run -- */

/* Enqueues one whole NS on the context's stream (no host synchronisation,
 * nothing allocated: capturable into a graph).  The workspace is reserved. */
static dmuon_rc enqueue(dmuon_ns_cuda *c, const dmuon_ns_opts *o, const float *x, int64_t m,
                        int64_t n, float *out, const ns_sym kern[2])
{
    const bool wide = m <= n;              /* row-major m x n is column-major n x m */
    const int s = (int)(wide ? m : n), l = (int)(wide ? n : m);
    const size_t count = (size_t)m * (size_t)n;
    run_ctx rx = {c, o->dtype == DMUON_BF16};
    const ns_sym kl = kern[0], ks = kern[1];   /* for A·Aᵀ (s x l) and R·R (s x s) */
    float *A = c->a, *A2 = c->a2, *R = c->r, *R2 = c->r2, *P = c->p, *Q = c->q, *Qn = c->qn,
          *T = c->t;

    /* normalise: A (s x l, ld s) = x / ‖x‖_F, transposed when m <= n */
    CU(cudaMemsetAsync(c->sumsq, 0, sizeof(double), c->stream), "memset");
    CU(cudaMemsetAsync(c->bad, 0, sizeof(int), c->stream), "memset");
    k_sumsq<<<grid_for(count), 256, 0, c->stream>>>(x, count, c->sumsq);
    k_scale<<<1, 1, 0, c->stream>>>(c->sumsq, c->scale);
    /* x as stored is column-major n x m (ld n); wide: A = (that)ᵀ */
    k_normalise<<<dim3((unsigned)((n + 31) / 32), (unsigned)((m + 31) / 32)), dim3(32, 8), 0,
                  c->stream>>>(x, (int)n, (int)m, c->scale, wide, A);
    CU(cudaGetLastError(), "norm kernels");

    if (o->method == DMUON_NS_DIRECT) {
        for (int k = 0; k < o->steps; k++) {
            DMUON_TRY(sym(rx, kl, s, l, A, s, R));
            DMUON_TRY(sym(rx, ks, s, s, R, s, R2));
            DMUON_TRY(poly(rx, s, 0.0f, (float)o->coeff[k].b, (float)o->coeff[k].c, R, R2, P));
            CU(cudaMemcpyAsync(A2, A, (size_t)s * l * sizeof(float), cudaMemcpyDeviceToDevice,
                               c->stream),
               "copy");
            DMUON_TRY(mm(rx, false, false, s, l, s, 1.0f, P, s, A, s, (float)o->coeff[k].a, A2, s));
            std::swap(A, A2);
        }
        if (wide) {   /* out (column-major n x m = l x s) = Aᵀ */
            const float one = 1.0f, zero = 0.0f;
            CU(cudaMemsetAsync(out, 0, count * sizeof(float), c->stream), "memset");
            CB(cublasSgeam(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, l, s, &one, A, s, &zero, out, l,
                           out, l),
               "sgeam (transpose out)");
        } else {
            CU(cudaMemcpyAsync(out, A, count * sizeof(float), cudaMemcpyDeviceToDevice,
                               c->stream),
               "copy out");
        }
    } else {
        bool have_q = false;
        DMUON_TRY(sym(rx, kl, s, l, A, s, R));
        for (int k = 0; k < o->steps; k++) {
            if (k > 0 && o->restart[k]) {
                DMUON_TRY(mm(rx, false, false, s, l, s, 1.0f, Q, s, A, s, 0.0f, A2, s));
                std::swap(A, A2);
                DMUON_TRY(sym(rx, kl, s, l, A, s, R));
                have_q = false;
            }
            DMUON_TRY(sym(rx, ks, s, s, R, s, R2));
            DMUON_TRY(poly(rx, s, (float)o->coeff[k].a, (float)o->coeff[k].b,
                           (float)o->coeff[k].c, R, R2, P));
            if (k + 1 < o->steps && !o->restart[k + 1]) {
                DMUON_TRY(mm(rx, false, false, s, s, s, 1.0f, R, s, P, s, 0.0f, T, s));
                DMUON_TRY(mm(rx, false, false, s, s, s, 1.0f, P, s, T, s, 0.0f, R2, s));
                k_symmetrise<<<grid_for((size_t)s * s), 256, 0, c->stream>>>(s, R2, R);
                CU(cudaGetLastError(), "symmetrise kernel");
            }
            if (!have_q) {
                std::swap(Q, P);
                have_q = true;
            } else {
                DMUON_TRY(mm(rx, false, false, s, s, s, 1.0f, Q, s, P, s, 0.0f, Qn, s));
                std::swap(Q, Qn);
            }
        }
        if (wide)   /* out (column-major l x s) = (Q·A)ᵀ = Aᵀ·Qᵀ */
            DMUON_TRY(mm(rx, true, true, l, s, s, 1.0f, A, s, Q, s, 0.0f, out, l));
        else        /* out (column-major s x l) = Q·A */
            DMUON_TRY(mm(rx, false, false, s, l, s, 1.0f, Q, s, A, s, 0.0f, out, s));
    }
    k_count_bad<<<grid_for(count), 256, 0, c->stream>>>(out, count, c->bad);
    CU(cudaGetLastError(), "finiteness kernel");
    return DMUON_OK;
}

/* The options and kernel choices as one digest (the graph key besides the
 * shape). */
static uint64_t opts_key(const dmuon_ns_opts *o, const ns_sym kern[2])
{
    uint64_t h = DMUON_DIGEST_SEED;
    const int head[5] = {(int)o->method, (int)o->dtype, o->steps, (int)kern[0], (int)kern[1]};
    h = dmuon_digest(head, sizeof head, h);
    for (int k = 0; k < o->steps; k++) {
        const double co[3] = {o->coeff[k].a, o->coeff[k].b, o->coeff[k].c};
        const unsigned char r = o->restart[k];
        h = dmuon_digest(co, sizeof co, h);
        h = dmuon_digest(&r, 1, h);
    }
    return h;
}

/* The graph entry of (m, n, key), created (uses 0) when missing; the oldest
 * is replaced when all NS_GRAPHS are taken. */
static ns_graph *graph_for(dmuon_ns_cuda *c, int64_t m, int64_t n, uint64_t key)
{
    for (int i = 0; i < c->ngraphs; i++)
        if (c->graphs[i].m == m && c->graphs[i].n == n && c->graphs[i].key == key)
            return &c->graphs[i];
    int slot;
    if (c->ngraphs < NS_GRAPHS) {
        slot = c->ngraphs++;
    } else {
        slot = c->next_graph;
        c->next_graph = (c->next_graph + 1) % NS_GRAPHS;
        if (c->graphs[slot].exec)
            cudaGraphExecDestroy(c->graphs[slot].exec);
    }
    ns_graph *g = &c->graphs[slot];
    memset(g, 0, sizeof *g);
    g->m = m;
    g->n = n;
    g->key = key;
    return g;
}

/* Captures enqueue() into g's executable graph (updated in place when the
 * topology allows, else instantiated anew).  On failure the capture is ended,
 * the error cleared and false returned: the caller runs eagerly. */
static bool capture(dmuon_ns_cuda *c, ns_graph *g, const dmuon_ns_opts *o, const float *x,
                    int64_t m, int64_t n, float *out, const ns_sym kern[2])
{
    cudaGraph_t graph = NULL;
    if (cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
        cudaGetLastError();
        return false;
    }
    dmuon_rc rc = enqueue(c, o, x, m, n, out, kern);
    cudaError_t e = cudaStreamEndCapture(c->stream, &graph);
    bool ok = rc == DMUON_OK && e == cudaSuccess && graph;
    if (ok && g->exec) {
        cudaGraphExecUpdateResultInfo info;
        if (cudaGraphExecUpdate(g->exec, graph, &info) != cudaSuccess) {
            cudaGetLastError();
            cudaGraphExecDestroy(g->exec);
            g->exec = NULL;
        }
    }
    if (ok && !g->exec)
        ok = cudaGraphInstantiate(&g->exec, graph, 0) == cudaSuccess;
    if (graph)
        cudaGraphDestroy(graph);
    if (!ok) {
        cudaGetLastError();
        dmuon_err_clear();
        if (g->exec)
            cudaGraphExecDestroy(g->exec);
        g->exec = NULL;
        return false;
    }
    g->x = x;
    g->out = out;
    return true;
}

extern "C" dmuon_rc dmuon_ns_cuda_run(dmuon_ns_cuda *c, const dmuon_ns_opts *o, const float *x,
                                      int64_t m, int64_t n, float *out, const int kern_in[2])
{
    CU(cudaSetDevice(c->device), "cudaSetDevice");
    const bool wide = m <= n;
    const size_t s = (size_t)(wide ? m : n), l = (size_t)(wide ? n : m);
    const ns_sym kern[2] = {(ns_sym)kern_in[0], (ns_sym)kern_in[1]};
    DMUON_TRY(reserve(c, s, l, o->dtype == DMUON_BF16));
    ns_graph *g = graph_for(c, m, n, opts_key(o, kern));
    g->uses++;
    bool launched = false;
    if (g->uses >= 2 && !g->failed) {
        if ((g->exec && g->x == x && g->out == out) || capture(c, g, o, x, m, n, out, kern)) {
            CU(cudaGraphLaunch(g->exec, c->stream), "graph launch");
            launched = true;
        } else {
            g->failed = true;
        }
    }
    if (!launched)
        DMUON_TRY(enqueue(c, o, x, m, n, out, kern));
    double sumsq = 0.0;
    int bad = 0;
    CU(cudaMemcpyAsync(&sumsq, c->sumsq, sizeof sumsq, cudaMemcpyDeviceToHost, c->stream),
       "read norm");
    CU(cudaMemcpyAsync(&bad, c->bad, sizeof bad, cudaMemcpyDeviceToHost, c->stream),
       "read flag");
    CU(cudaStreamSynchronize(c->stream), "synchronise");
    if (!std::isfinite(sumsq))
        return DMUON_FAIL(DMUON_ENUMERIC,
                          "ns: the %lld x %lld input holds NaN or Inf (its sum of squares is %g)",
                          (long long)m, (long long)n, sumsq);
    if (bad)
        return DMUON_FAIL(DMUON_ENUMERIC,
                          "ns: the result for the %lld x %lld input has %d non-finite elements",
                          (long long)m, (long long)n, bad);
    return DMUON_OK;
}

/* ------------------------------------------------ kernel choice (C.3) -- */

/* Times one call of sym() with kind on the context's stream (events). */
static dmuon_rc time_sym(run_ctx &x, ns_sym kind, int s, int k, const float *A, float *C,
                         double *ms)
{
    cudaEvent_t e0 = NULL, e1 = NULL;
    dmuon_rc rc = DMUON_OK;
    float t = 0.0f;
    CU(cudaEventCreate(&e0), "event");
    if (cudaEventCreate(&e1) != cudaSuccess) {
        cudaEventDestroy(e0);
        return DMUON_FAIL(DMUON_EDEVICE, "cuda: cannot create an event");
    }
    DMUON_TRY_GOTO(rc, sym(x, kind, s, k, A, s, C), done);   /* warm-up (cuBLAS heuristics) */
    if (cudaEventRecord(e0, x.c->stream) != cudaSuccess) {
        rc = DMUON_FAIL(DMUON_EDEVICE, "cuda: event record failed");
        goto done;
    }
    DMUON_TRY_GOTO(rc, sym(x, kind, s, k, A, s, C), done);
    if (cudaEventRecord(e1, x.c->stream) != cudaSuccess ||
        cudaEventSynchronize(e1) != cudaSuccess || cudaEventElapsedTime(&t, e0, e1) != cudaSuccess) {
        rc = DMUON_FAIL(DMUON_EDEVICE, "cuda: timing a %d x %d product failed", s, k);
        goto done;
    }
    *ms = t;
done:
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    return rc;
}

/* max |C − Cref| / max |Cref| of two s x s device matrices. */
static dmuon_rc rel_diff(dmuon_ns_cuda *c, const float *C, const float *Cref, size_t count,
                         double *out)
{
    unsigned bits[2] = {0, 0};
    CU(cudaMemsetAsync(c->diff, 0, 2 * sizeof(unsigned), c->stream), "memset");
    k_maxdiff<<<grid_for(count), 256, 0, c->stream>>>(C, Cref, count, (unsigned *)c->diff);
    CU(cudaGetLastError(), "difference kernel");
    CU(cudaMemcpyAsync(bits, c->diff, sizeof bits, cudaMemcpyDeviceToHost, c->stream), "read");
    CU(cudaStreamSynchronize(c->stream), "synchronise");
    float d, big;
    memcpy(&d, &bits[0], sizeof d);
    memcpy(&big, &bits[1], sizeof big);
    *out = big > 0.0f ? (double)d / big : (double)d;
    return DMUON_OK;
}

/* A candidate passes when it is within this of GEMM on the same operands
 * (both accumulate in FP32; only the summation order differs). */
#define SYM_GATE 1e-3

extern "C" dmuon_rc dmuon_ns_cuda_measure_sym(void *ctx, dmuon_dtype dtype, int64_t s64,
                                              int64_t k64, dmuon_kernel_row *row)
{
    dmuon_ns_cuda *c = (dmuon_ns_cuda *)ctx;
    const int s = (int)s64, k = (int)k64;
    run_ctx rx = {c, dtype == DMUON_BF16};
    CU(cudaSetDevice(c->device), "cudaSetDevice");
    /* A (s x k) in the workspace's A, GEMM's C in R, the candidate's in R2 */
    DMUON_TRY(reserve(c, (size_t)s, (size_t)(k > s ? k : s), rx.bf));
    const size_t na = (size_t)s * k, nc = (size_t)s * s;
    k_fill<<<grid_for(na), 256, 0, c->stream>>>(c->a, na, 0x9e3779b9u);
    CU(cudaGetLastError(), "fill kernel");
    double gemm_ms = 0.0;
    DMUON_TRY(time_sym(rx, NS_SYM_GEMM, s, k, c->a, c->r, &gemm_ms));
    ns_sym best = NS_SYM_GEMM;
    double best_ms = gemm_ms, best_diff = 0.0;
    for (int kind = 0; kind < NS_SYM_COUNT; kind++) {
        if (kind == NS_SYM_GEMM || (kind == NS_SYM_SYRK && rx.bf) ||
            (kind == NS_SYM_TRI && !tri_block(s)))
            continue;
        double ms = 0.0, d = 0.0;
        DMUON_TRY(time_sym(rx, (ns_sym)kind, s, k, c->a, c->r2, &ms));
        DMUON_TRY(rel_diff(c, c->r2, c->r, nc, &d));
        if (d <= SYM_GATE && ms < best_ms) {
            best = (ns_sym)kind;
            best_ms = ms;
            best_diff = d;
        }
    }
    snprintf(row->kernel, sizeof row->kernel, "%s", ns_sym_name(best));
    row->kernel_ms = best_ms;
    row->gemm_ms = gemm_ms;
    row->max_diff = best_diff;
    return DMUON_OK;
}

extern "C" dmuon_rc dmuon_ns_cuda_gemm_bf16(dmuon_ns_cuda *c, int p, int q, int k,
                                            const float *a, const float *b, float *out)
{
    const float one = 1.0f, zero = 0.0f;
    CU(cudaSetDevice(c->device), "cudaSetDevice");
    DMUON_TRY(reserve(c, (size_t)(p > k ? p : k), (size_t)(q > k ? q : k), true));
    const size_t na = (size_t)p * k, nb = (size_t)k * q;
    k_to_bf16<<<grid_for(na), 256, 0, c->stream>>>(a, na, c->b1);
    k_to_bf16<<<grid_for(nb), 256, 0, c->stream>>>(b, nb, c->b2);
    CU(cudaGetLastError(), "bf16 conversion kernel");
    /* row-major C = A·B is column-major Cᵀ = Bᵀ·Aᵀ */
    CB(cublasGemmEx(c->blas, CUBLAS_OP_N, CUBLAS_OP_N, q, p, k, &one, c->b2, CUDA_R_16BF, q,
                    c->b1, CUDA_R_16BF, k, &zero, out, CUDA_R_32F, q, CUBLAS_COMPUTE_32F,
                    CUBLAS_GEMM_DEFAULT),
       "gemmex bf16");
    CU(cudaStreamSynchronize(c->stream), "synchronise");
    return DMUON_OK;
}

/* ------------------------------------------------------------- engine -- */

/* The CUDA entries of the engine table (ns_engine.h): ctx is a dmuon_ns_cuda. */
static dmuon_rc eng_create(dmuon_ns *, int device_index, void **ctx)
{
    dmuon_ns_cuda *c = NULL;
    dmuon_rc rc = dmuon_ns_cuda_create(device_index, &c);
    *ctx = c;   /* a half-built context too: dmuon_ns_free frees it */
    return rc;
}
static void eng_free(void *ctx) { dmuon_ns_cuda_free((dmuon_ns_cuda *)ctx); }
static dmuon_rc eng_run(void *ctx, const dmuon_ns_opts *o, const float *x, int64_t m, int64_t n,
                        float *out, const int kern[2])
{
    return dmuon_ns_cuda_run((dmuon_ns_cuda *)ctx, o, x, m, n, out, kern);
}
static dmuon_rc eng_gemm(void *ctx, dmuon_dtype dtype, int p, int q, int k, const float *a,
                         const float *b, float *c)
{
    dmuon_ns_cuda *cu = (dmuon_ns_cuda *)ctx;
    return dtype == DMUON_BF16 ? dmuon_ns_cuda_gemm_bf16(cu, p, q, k, a, b, c)
                               : dmuon_ns_cuda_sgemm(cu, p, q, k, a, b, c);
}
static dmuon_rc eng_alloc(void *ctx, size_t count, float **out)
{
    return dmuon_ns_cuda_alloc((dmuon_ns_cuda *)ctx, count, out);
}
static void eng_mem_free(void *ctx, float *p) { dmuon_ns_cuda_mem_free((dmuon_ns_cuda *)ctx, p); }
static dmuon_rc eng_put(void *ctx, float *dst, const float *src, size_t count)
{
    return dmuon_ns_cuda_put((dmuon_ns_cuda *)ctx, dst, src, count);
}
static dmuon_rc eng_get(void *ctx, float *dst, const float *src, size_t count)
{
    return dmuon_ns_cuda_get((dmuon_ns_cuda *)ctx, dst, src, count);
}

/* Named by the link (-Wl,-u,dmuon_ns_cuda_engine) of every program that
 * runs NS on a GPU; ns.c refers to it weakly (ns_engine.h). */
static void eng_set_workspace(void *ctx, void *dev_p, size_t bytes)
{
    dmuon_ns_cuda *c = (dmuon_ns_cuda *)ctx;
    c->ext = dev_p;
    c->ext_bytes = dev_p ? bytes : 0;
}

extern "C" const dmuon_ns_engine dmuon_ns_cuda_engine = {
    "cuda", dmuon_ns_cuda_device_count, eng_create, eng_free, eng_run,
    dmuon_ns_cuda_measure_sym, eng_gemm, eng_alloc, eng_mem_free, eng_put, eng_get,
    eng_set_workspace,
};
