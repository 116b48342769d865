/*
 * dmuon/ns.h — Newton–Schulz orthogonalisation (paper §2.1, C.3), one API for
 * CPU (OpenBLAS) and GPU (cuBLAS, in builds with CUDA).
 *
 * NS maps an m x n matrix X (row-major: m rows, n columns, PyTorch [out, in])
 * to an approximation of the orthogonal polar factor U·Vᵀ of X = U·Σ·Vᵀ, of
 * the same shape.  Every step applies an odd quintic
 *     X ← a·X + b·(X·Xᵀ)·X + c·(X·Xᵀ)²·X
 * with per-step coefficients (a, b, c).  The input is first divided by its
 * Frobenius norm alone (no additive epsilon), so the result does not depend
 * on the input's scale and an all-zero input gives an all-zero output.  The
 * matrix is transposed internally so that the Gram matrix X·Xᵀ is the small
 * side (s = min(m, n), l = max(m, n)).
 *
 * Methods:
 *   Gram NS (default; Zhang, Amsel, Chen, Dao 2026, "Gram Newton–Schulz",
 *     paper C.3): iterates on R = X·Xᵀ (s x s): Qₖ = a·I + b·R + c·R², the
 *     accumulated factor Q ← Q·Qₖ, R ← Qₖ·R·Qₖ; multiplies back X ← Q·X once
 *     per restart window.  A restart after step k (default: after step 2)
 *     sets X ← Q·X, R ← X·Xᵀ, Q ← I, which bounds the rounding error that
 *     accumulates in R.
 *   Direct NS (Jordan et al. 2024): every step forms X·Xᵀ and multiplies
 *     back into X.  Restart positions do not apply.
 *
 * Coefficient sets:
 *   pe5   Polar Express, degree 5, the first five steps of Amsel, Persson,
 *         Musco, Gower, "The Polar Express: Optimal Matrix Sign Methods and
 *         Their Application to the Muon Algorithm", arXiv:2505.16932 (2025),
 *         Algorithm 1 (designed for σ/‖X‖ in [1e-3, 1]), each divided by the
 *         safety factor 1.05 as (a/1.05, b/1.05³, c/1.05⁵), i.e. step k
 *         evaluates pₖ(x/1.05).
 *   muon5 the classic Muon triple (3.4445, −4.7750, 2.0315) five times
 *         (Jordan et al. 2024, "Muon: An optimizer for hidden layers").
 *   user  any list of 1..DMUON_NS_MAX_STEPS tuples.
 *
 * Precision (dtype): "fp32" — every product in FP32 (OpenBLAS ssyrk for the
 * symmetric products X·Xᵀ and R·R, sgemm otherwise; on CUDA the symmetric
 * products use the kernel chosen per shape, see dmuon_ns_set_costdb).
 * "bf16" — every product's inputs are rounded to BF16 (round to nearest even)
 * and accumulated and stored in FP32, which is the GPU path's mixed
 * precision (cuBLAS GemmEx with CUDA_R_16BF inputs and CUBLAS_COMPUTE_32F).
 * On the CPU the rounded operands go to ssyrk/sgemm, which computes what
 * sbgemm would (a product of two BF16 values is exact in FP32); the
 * system's OpenBLAS 0.3.21 declares cblas_sbgemm but is built without it.
 * Normalisation and the polynomial combinations stay FP32.
 *
 * Variant names, as stored in the cost database's `variant` column:
 *   "gram-pe5" (default), "direct-pe5", "gram-muon5", "direct-muon5";
 *   a Gram variant with other restart positions gets "-r<k,k,...>" or
 *   "-rnone" appended; user coefficients are named "<method>-user-<hex8>"
 *   (hex8: FNV-1a digest of the tuples and restarts).
 *
 * Threads: the CPU path uses OpenBLAS's thread count (OPENBLAS_NUM_THREADS /
 * openblas_set_num_threads).  A dmuon_ns context is used by one thread at a
 * time.
 */
#ifndef DMUON_NS_H
#define DMUON_NS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dmuon/costdb.h"
#include "dmuon/device.h"
#include "dmuon/rc.h"
#include "dmuon/types.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DMUON_NS_MAX_STEPS 16

/* Polar Express is designed for singular values σ/‖X‖_F ≥ this floor
 * (Amsel et al. 2025, l = 1e-3); directions below it stay small. */
#define DMUON_NS_PE_FLOOR 1e-3
/* The safety factor applied to the raw Polar Express tuples. */
#define DMUON_NS_PE_SAFETY 1.05

typedef enum { DMUON_NS_GRAM = 0, DMUON_NS_DIRECT } dmuon_ns_method;

/* One step's coefficients: p(x) = a·x + b·x³ + c·x⁵. */
typedef struct {
    double a, b, c;
} dmuon_ns_coeff;

/* The raw Polar Express degree-5 tuples (first five steps, arXiv:2505.16932
 * Algorithm 1), before the safety factor. */
extern const dmuon_ns_coeff dmuon_ns_pe5_raw[5];

/* What one NS call computes.  Fill with dmuon_ns_opts_init, then adjust. */
typedef struct {
    dmuon_ns_method method;
    dmuon_dtype dtype;                    /* DMUON_F32 or DMUON_BF16 */
    int steps;                            /* 1 .. DMUON_NS_MAX_STEPS */
    dmuon_ns_coeff coeff[DMUON_NS_MAX_STEPS];
    bool restart[DMUON_NS_MAX_STEPS];     /* restart[k]: Gram restart after k
                                             steps; only 1 <= k < steps */
} dmuon_ns_opts;

/* Fills *o with the default: Gram NS, FP32, Polar Express 5 steps with the
 * 1.05 safety factor, one restart after step 2. */
void dmuon_ns_opts_init(dmuon_ns_opts *o);

/* Sets method, coefficients and restarts from a variant name ("gram-pe5",
 * "direct-pe5", "gram-muon5", "direct-muon5"); dtype is kept.  Errors:
 * DMUON_EINVAL naming the value and the accepted names. */
dmuon_rc dmuon_ns_opts_set_variant(dmuon_ns_opts *o, const char *variant);

/* Sets the precision from "fp32" or "bf16" (also "f32", "float32",
 * "bfloat16").  Errors: DMUON_EINVAL naming the value. */
dmuon_rc dmuon_ns_opts_set_dtype(dmuon_ns_opts *o, const char *dtype);

/* Sets user coefficients from text "a,b,c;a,b,c;..." (1..DMUON_NS_MAX_STEPS
 * tuples of finite numbers).  Restarts at or beyond the new step count are
 * dropped.  Errors: DMUON_EINVAL naming the tuple and what was expected. */
dmuon_rc dmuon_ns_opts_parse_coeffs(dmuon_ns_opts *o, const char *text);

/* Sets the restart positions from text: "none", or a comma list of step
 * counts k with 1 <= k < steps (e.g. "2" or "2,4").  Errors: DMUON_EINVAL
 * naming the value and the allowed range. */
dmuon_rc dmuon_ns_opts_parse_restarts(dmuon_ns_opts *o, const char *text);

/* Checks *o: method, dtype F32/BF16, 1 <= steps <= max, finite
 * coefficients, restart positions within 1..steps-1.  Errors: DMUON_EINVAL. */
dmuon_rc dmuon_ns_opts_check(const dmuon_ns_opts *o);

/* Writes the variant name of *o (see the header comment) into out (cap
 * bytes, at least 32 recommended; truncated, always NUL-terminated). */
void dmuon_ns_opts_variant(const dmuon_ns_opts *o, char *out, size_t cap);

/* "fp32" or "bf16": the dtype name as stored in the cost database. */
const char *dmuon_ns_opts_dtype_name(const dmuon_ns_opts *o);

/* Floating-point operations (multiply and add counted separately) of one NS
 * call on an m x n matrix as this implementation performs it: syrk of
 * s x k counts s·(s+1)·k, gemm of s x k by k x t counts 2·s·k·t;
 * normalisation and polynomial combinations (O(s·l) and O(s²)) are not
 * counted.  For the effective rate reported by dmuon-bench ns.  Returns 0
 * for a non-positive dimension. */
double dmuon_ns_flops(const dmuon_ns_opts *o, int64_t m, int64_t n);

/* Bytes of workspace either engine needs for an m x n input, the larger of
 * the two: with s = min(m, n), l = max(m, n), the CPU engine's 2 (BF16
 * operands: 4) s x l FP32 matrices and 6 s x s FP32 matrices, each padded
 * to 64 bytes; the CUDA engine's 2 s x l and 6 s x s FP32 matrices (BF16:
 * 2 s x l BF16 copies more) padded to 256 bytes, and the pointer arrays of
 * its block-triangular product (3 b(b+1)/2 pointers, b = s / 64 at most),
 * plus 256.  (cuBLAS keeps a workspace of its own, 32 MiB, not counted.)
 * 0 for a non-positive dimension.  Pure. */
int64_t dmuon_ns_workspace_bytes(const dmuon_ns_opts *o, int64_t m, int64_t n);

/* ------------------------------------------------------------ contexts -- */

/* A context: the device, the options, and a workspace that grows to the
 * largest shape run so far (kept until dmuon_ns_free). */
typedef struct dmuon_ns dmuon_ns;

/* Creates a context for kind.  device_index selects the CUDA device
 * (cudaSetDevice; -1 keeps the current one) and is ignored for the CPU.
 * opts is copied.  Errors: DMUON_EINVAL (opts fail dmuon_ns_opts_check),
 * DMUON_EUNSUPPORTED (cuda in a build without CUDA), DMUON_EDEVICE (no CUDA
 * device, device_index out of range, cuBLAS initialisation failed),
 * DMUON_ENOMEM. */
dmuon_rc dmuon_ns_create(dmuon_device_kind kind, int device_index, const dmuon_ns_opts *opts,
                         dmuon_ns **out);

/* Frees the context and its workspace; accepts NULL. */
void dmuon_ns_free(dmuon_ns *ns);

/* Gives the context a workspace of `bytes` at p, memory of its device (host
 * memory for the CPU, device memory for CUDA), 256-byte aligned: from now
 * on dmuon_ns_run works there for every shape whose
 * dmuon_ns_workspace_bytes fits, and in its own (growing) allocation
 * otherwise.  Borrowed: p must stay valid, and nobody else may touch it
 * while a dmuon_ns_run runs, until the context is freed or given another
 * (p NULL: back to its own).  A CUDA context drops the graphs it captured
 * over its previous workspace. */
void dmuon_ns_set_workspace(dmuon_ns *ns, void *p, size_t bytes);

/* The device kind and the options of the context. */
dmuon_device_kind dmuon_ns_device(const dmuon_ns *ns);
const dmuon_ns_opts *dmuon_ns_get_opts(const dmuon_ns *ns);

/* Attaches the cost database whose ns_kernel table caches, per GPU model,
 * which kernel computes the symmetric products of each shape (paper C.3:
 * cuBLAS SYRK, cuBLAS GEMM or the block-triangular batched GEMM, each checked
 * against GEMM and timed once on the shape's first use).  Without a database
 * the choice is made once per context.  db is borrowed: it must stay open
 * until dmuon_ns_free or until replaced (NULL detaches).  CPU contexts
 * always use OpenBLAS ssyrk and ignore it. */
void dmuon_ns_set_costdb(dmuon_ns *ns, dmuon_costdb *db);

/* The kernels the context uses for an m x n input's symmetric products
 * X·Xᵀ (*gram) and R·R (*square): "syrk", "gemm" or "tri" (static strings;
 * measured now if not yet known, as dmuon_ns_run would).  Errors:
 * DMUON_EINVAL (m or n < 1), DMUON_EDEVICE, DMUON_ENOMEM, DMUON_EDB. */
dmuon_rc dmuon_ns_kernels(dmuon_ns *ns, int64_t m, int64_t n, const char **gram,
                          const char **square);

/* Runs NS on x (m x n, row-major FP32) and writes the result (m x n,
 * row-major FP32) to out.  Pointers are in the context's memory: host memory
 * for the CPU, device memory (dmuon_ns_mem_alloc) for CUDA.  out may equal x;
 * otherwise x is not modified.  Returns when the result is complete (CUDA:
 * the stream is synchronised).  Errors: DMUON_EINVAL (m or n < 1, NULL
 * pointer, m·n beyond the BLAS integer range), DMUON_ENUMERIC (x holds a NaN
 * or an Inf, or the result is not finite; out is then unspecified: the CPU
 * leaves it untouched when the input is at fault), DMUON_ENOMEM (workspace),
 * DMUON_EDEVICE (a CUDA or cuBLAS call failed). */
dmuon_rc dmuon_ns_run(dmuon_ns *ns, const float *x, int64_t m, int64_t n, float *out);

/* dmuon_ns_run with host pointers on any device (CUDA: copies in and out
 * through device buffers).  Same errors. */
dmuon_rc dmuon_ns_run_host(dmuon_ns *ns, const float *x, int64_t m, int64_t n, float *out);

/* Memory in the context's space: count floats (CPU: malloc; CUDA:
 * cudaMalloc).  Errors: DMUON_ENOMEM, DMUON_EDEVICE. */
dmuon_rc dmuon_ns_mem_alloc(dmuon_ns *ns, size_t count, float **out);
/* Frees memory from dmuon_ns_mem_alloc; accepts NULL. */
void dmuon_ns_mem_free(dmuon_ns *ns, float *p);
/* Copies count floats host → context memory and back.  Errors: DMUON_EDEVICE. */
dmuon_rc dmuon_ns_mem_put(dmuon_ns *ns, float *dst, const float *src_host, size_t count);
dmuon_rc dmuon_ns_mem_get(dmuon_ns *ns, float *dst_host, const float *src, size_t count);

/* Times the plain FP32 product C (p x q) = A (p x k) · B (k x q), row-major,
 * on the context's device (OpenBLAS sgemm / cuBLAS Sgemm, synchronised):
 * warmup untimed calls, then iters timed ones; *median_ms is the median in
 * milliseconds.  For the effective-rate comparison of dmuon-bench ns.
 * Errors: DMUON_EINVAL (non-positive size, iters < 1), DMUON_ENOMEM,
 * DMUON_EDEVICE. */
dmuon_rc dmuon_ns_time_sgemm(dmuon_ns *ns, int64_t p, int64_t q, int64_t k, int warmup,
                             int iters, double *median_ms);

/* dmuon_ns_time_sgemm at a product precision: DMUON_F32 as above; DMUON_BF16
 * on CUDA rounds both operands to BF16 and runs cublasGemmEx with FP32
 * accumulation (the rate BF16 NS is held to); on the CPU BF16 times sgemm
 * (OpenBLAS here lacks sbgemm, see the header comment).  Same errors. */
dmuon_rc dmuon_ns_time_gemm(dmuon_ns *ns, dmuon_dtype dtype, int64_t p, int64_t q, int64_t k,
                            int warmup, int iters, double *median_ms);

/* ------------------------------------------------------------ numerics -- */

/* The scalar map of NS: f(x) = pₖ(…p₁(x)), with pₖ(x) = aₖx + bₖx³ + cₖx⁵.
 * In exact arithmetic NS maps each singular value σ of the normalised input
 * (σ/‖X‖_F, in (0, 1]) to f(σ/‖X‖_F) and keeps the singular vectors; Gram
 * and direct NS and restarts do not change f. */
double dmuon_ns_scalar(const dmuon_ns_opts *o, double x);

/* The band [*lo, *hi] of f over [floor, 1] (log-spaced grid of 20001
 * points plus both ends).  For pe5 over [1e-3, 1]: [0.729, 1.124]; for
 * muon5: [0.471, 1.202] (values from this function). */
void dmuon_ns_scalar_band(const dmuon_ns_opts *o, double floor, double *lo, double *hi);

/* What dmuon_ns_check_output measured.  With X = U·Σ·Vᵀ (float64 SVD,
 * LAPACKE dgesvd) and D = Uᵀ·O·V (k x k, k = min(m, n)), the gain of
 * direction i is D_ii; for an exact NS, D is diagonal with D_ii = f(σᵢ/‖X‖_F). */
typedef struct {
    int64_t directions;     /* k = min(m, n) */
    int64_t above_floor;    /* directions with σᵢ/‖X‖_F >= floor */
    double gain_lo, gain_hi;  /* smallest / largest D_ii over above-floor directions */
    double worst_sigma;     /* max |D_ii − 1| over above-floor directions */
    double worst_model;     /* max |D_ii − f(σᵢ/‖X‖_F)| over above-floor directions */
    double worst_offdiag;   /* max |D_ij|, i != j, both above the floor (the output
                               mixes significant directions) */
    double worst_residual;  /* ‖O − U·D·Vᵀ‖_F / √k: output outside span(U) ⊗ span(V) */
    double worst_pair;      /* with out2: max |D_ij − D2_ij| over above-floor i, j
                               (two outputs agree on the significant directions) */
} dmuon_ns_check;

/* Compares out = NS(x) (both m x n row-major FP32, host memory) with the
 * float64 SVD of x, as described above; floor is the design floor of
 * σ/‖X‖_F (DMUON_NS_PE_FLOOR for pe5).  out2 (may be NULL) is a second
 * output of the same input (e.g. the other method), compared in the basis
 * of the input's significant directions (worst_pair).  An all-zero x yields all-zero
 * figures (then out must be zero: worst_residual is ‖out‖_F).  Cost: one
 * dgesvd of m x n and two dgemm in float64.  Errors: DMUON_EINVAL (bad
 * shape, NULL), DMUON_ENOMEM, DMUON_ENUMERIC (x or out not finite, or the
 * SVD did not converge). */
dmuon_rc dmuon_ns_check_output(const dmuon_ns_opts *o, const float *x, int64_t m, int64_t n,
                               const float *out, const float *out2, double floor,
                               dmuon_ns_check *res);

/* Kinds of test input for dmuon_ns_test_input. */
typedef enum {
    DMUON_NS_INPUT_GAUSSIAN = 0,  /* i.i.d. standard normal */
    DMUON_NS_INPUT_LOWRANK,       /* rank max(1, k/8) product of Gaussians plus 1e-2 noise
                                     (gradient-like: a few dominant directions) */
    DMUON_NS_INPUT_ILLCOND,       /* U·diag(σ)·Vᵀ, random orthonormal U, V (QR of
                                     Gaussians), σᵢ = 10^(−6·i/(k−1)): half the
                                     directions below the 1e-3 floor */
    DMUON_NS_INPUT_COUNT
} dmuon_ns_input;

/* "gaussian", "lowrank", "illcond". */
const char *dmuon_ns_input_name(dmuon_ns_input kind);

/* Fills x (m x n row-major, host) with a deterministic input of kind from
 * seed.  Errors: DMUON_EINVAL, DMUON_ENOMEM, DMUON_ENUMERIC (QR failed). */
dmuon_rc dmuon_ns_test_input(dmuon_ns_input kind, int64_t m, int64_t n, uint64_t seed, float *x);

#ifdef __cplusplus
}
#endif

#endif
