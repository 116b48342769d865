/*
 * bf16_loops.h — the element loops of dmuon/bf16.h, included by bf16.c once
 * per instruction-set width.  Before each inclusion bf16.c defines
 * LOOP_ATTR (the function attribute: a target level, or nothing) and
 * LOOP(name) (the width's name for a loop); the inclusion defines the seven
 * loops and LOOP(table), their row of bf16_loops.  No include guard: it is
 * meant to be included several times.
 */
LOOP_ATTR static void LOOP(add)(uint16_t *dst, const uint16_t *a, const uint16_t *b, size_t n)
{
    size_t m = PAIRS(n);
    for (size_t i = 0; i < m; i++) {
        uint32_t wa = pair_at(a, i), wb = pair_at(b, i);
        pair_put(dst, i, rnd_bits(f32_bits(lo_f32(wa) + lo_f32(wb))),
                 rnd_bits(f32_bits(hi_f32(wa) + hi_f32(wb))));
    }
    for (size_t i = 2 * m; i < n; i++)
        dst[i] = to_bf16(dmuon_bf16_to_f32(a[i]) + dmuon_bf16_to_f32(b[i]));
}

LOOP_ATTR static void LOOP(f32_add)(float *dst, const float *a, const float *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = a[i] + b[i];
}

LOOP_ATTR static void LOOP(from_f32)(uint16_t *dst, const float *src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = to_bf16(src[i]);
}

LOOP_ATTR static void LOOP(to_f32)(float *dst, const uint16_t *src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = dmuon_bf16_to_f32(src[i]);
}

LOOP_ATTR static void LOOP(accum)(float *acc, const uint16_t *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        acc[i] += dmuon_bf16_to_f32(x[i]);
}

LOOP_ATTR static void LOOP(add_rounded)(uint16_t *dst, const uint16_t *a, const float *l, size_t n)
{
    size_t m = PAIRS(n);
    for (size_t i = 0; i < m; i++) {
        uint32_t wa = pair_at(a, i);
        pair_put(dst, i, rnd_bits(f32_bits(lo_f32(wa) + rnd_f32(l[2 * i]))),
                 rnd_bits(f32_bits(hi_f32(wa) + rnd_f32(l[2 * i + 1]))));
    }
    for (size_t i = 2 * m; i < n; i++)
        dst[i] = to_bf16(dmuon_bf16_to_f32(a[i]) + rnd_f32(l[i]));
}

LOOP_ATTR static void LOOP(add_pair)(uint16_t *dst, const uint16_t *a, const uint16_t *x0,
                                     const uint16_t *x1, size_t n)
{
    size_t m = PAIRS(n);
    for (size_t i = 0; i < m; i++) {
        uint32_t wa = pair_at(a, i), w0 = pair_at(x0, i), w1 = pair_at(x1, i);
        float llo = rnd_f32(lo_f32(w0) + lo_f32(w1)), lhi = rnd_f32(hi_f32(w0) + hi_f32(w1));
        pair_put(dst, i, rnd_bits(f32_bits(lo_f32(wa) + llo)),
                 rnd_bits(f32_bits(hi_f32(wa) + lhi)));
    }
    for (size_t i = 2 * m; i < n; i++) {
        float l = dmuon_bf16_to_f32(x0[i]) + dmuon_bf16_to_f32(x1[i]);
        dst[i] = to_bf16(dmuon_bf16_to_f32(a[i]) + rnd_f32(l));
    }
}

static const bf16_loops LOOP(table) = {LOOP(add),   LOOP(f32_add), LOOP(from_f32),
                                       LOOP(to_f32), LOOP(accum),  LOOP(add_rounded),
                                       LOOP(add_pair)};
