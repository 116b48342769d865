/*
 * bf16.c — element loops over bfloat16 and binary32 arrays (dmuon/bf16.h).
 * Plain loops the compiler vectorises; no state.
 */
#include "dmuon/bf16.h"

/* These loops carry the reductions' arithmetic; let the compiler vectorise
 * them (the scalar helpers are branch-free for that reason). */
#pragma GCC optimize("O3")

/* Branch-free form of dmuon_f32_to_bf16 for vector loops. */
static inline uint16_t to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    uint32_t q = (u >> 16) | 0x40u;
    return (uint16_t)(((u & 0x7fffffffu) > 0x7f800000u) ? q : r);
}

void dmuon_bf16_add(uint16_t *dst, const uint16_t *a, const uint16_t *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = to_bf16(dmuon_bf16_to_f32(a[i]) + dmuon_bf16_to_f32(b[i]));
}

void dmuon_f32_add(float *dst, const float *a, const float *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = a[i] + b[i];
}

void dmuon_bf16_from_f32(uint16_t *dst, const float *src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = to_bf16(src[i]);
}

void dmuon_bf16_to_f32_n(float *dst, const uint16_t *src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = dmuon_bf16_to_f32(src[i]);
}

void dmuon_bf16_accum(float *acc, const uint16_t *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        acc[i] += dmuon_bf16_to_f32(x[i]);
}

void dmuon_bf16_add_rounded(uint16_t *dst, const uint16_t *a, const float *l, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = to_bf16(dmuon_bf16_to_f32(a[i]) + dmuon_bf16_to_f32(to_bf16(l[i])));
}
