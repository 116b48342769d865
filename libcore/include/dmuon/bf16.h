/*
 * dmuon/bf16.h — bfloat16 conversions and the element loops the reduction
 * operators and their baselines share.
 *
 * A bfloat16 value is the upper 16 bits of an IEEE binary32.  Conversion to
 * binary32 is exact; conversion from binary32 rounds to nearest, ties to
 * even, and keeps NaN a (quiet) NaN.  Every arithmetic step below works in
 * binary32 and rounds once to bfloat16 where the function says so, which is
 * what a GPU's bf16 add (and multimem.ld_reduce on bf16) does.  The loops
 * run at the widest vector width the CPU has (libcore/bf16.c); every width
 * gives the same bits, except which NaN a NaN input becomes.
 */
#ifndef DMUON_BF16_H
#define DMUON_BF16_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* Exact widening of a bfloat16 bit pattern to float. */
static inline float dmuon_bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Rounds f to the nearest bfloat16 (ties to even); NaN stays NaN. */
static inline uint16_t dmuon_f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* dst[i] = bf16(a[i] + b[i]) for n elements (each sum in binary32, rounded
 * once).  dst may alias a or b. */
void dmuon_bf16_add(uint16_t *dst, const uint16_t *a, const uint16_t *b, size_t n);

/* dst[i] = a[i] + b[i] in binary32 for n elements; dst may alias a or b. */
void dmuon_f32_add(float *dst, const float *a, const float *b, size_t n);

/* acc[i] += x[i] (x widened exactly) for n elements, in binary32. */
void dmuon_bf16_accum(float *acc, const uint16_t *x, size_t n);

/* dst[i] = bf16(a[i] + bf16(l[i])): adds a node sum l (binary32, rounded to
 * bfloat16 first) to a bfloat16 partial a, rounding the result once more.
 * dst may alias a. */
void dmuon_bf16_add_rounded(uint16_t *dst, const uint16_t *a, const float *l, size_t n);

/* dst[i] = bf16(a[i] + bf16(x0[i] + x1[i])) for n elements, the sums in
 * binary32: the bits of dmuon_bf16_add_rounded(dst, a, l, n) with
 * l = x0 + x1 widened, in one pass (ReduceScatterV on a node of two ranks:
 * the summation order of docs/operators.md).  All four arrays are the
 * caller's, n elements each, nothing kept; dst may alias a, x0 and x1 are
 * only read.  No errors. */
void dmuon_bf16_add_pair(uint16_t *dst, const uint16_t *a, const uint16_t *x0,
                         const uint16_t *x1, size_t n);

/* Converts n floats to bfloat16 (nearest even) and back (exact). */
void dmuon_bf16_from_f32(uint16_t *dst, const float *src, size_t n);
void dmuon_bf16_to_f32_n(float *dst, const uint16_t *src, size_t n);

/* The instruction-set width the loops above run at in this process:
 * "baseline", "x86-64-v3" or "x86-64-v4" (a static string; chosen on the
 * first call of any loop, or of this function).  No errors. */
const char *dmuon_bf16_width_name(void);

#endif
