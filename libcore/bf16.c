/*
 * bf16.c — element loops over bfloat16 and binary32 arrays (dmuon/bf16.h).
 * Plain loops the compiler vectorises; no state.
 */
#include "dmuon/bf16.h"

void dmuon_bf16_add(uint16_t *dst, const uint16_t *a, const uint16_t *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = dmuon_f32_to_bf16(dmuon_bf16_to_f32(a[i]) + dmuon_bf16_to_f32(b[i]));
}

void dmuon_f32_add(float *dst, const float *a, const float *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = a[i] + b[i];
}

void dmuon_bf16_from_f32(uint16_t *dst, const float *src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = dmuon_f32_to_bf16(src[i]);
}

void dmuon_bf16_to_f32_n(float *dst, const uint16_t *src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = dmuon_bf16_to_f32(src[i]);
}
