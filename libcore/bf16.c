/*
 * bf16.c — element loops over bfloat16 and binary32 arrays (dmuon/bf16.h).
 * Plain loops the compiler vectorises; no state but the width chosen.
 *
 * Widths.  The loops (bf16_loops.h) are built once for baseline x86-64
 * (SSE2, or whatever the target is elsewhere) and, with GCC 12 or later on
 * x86-64, again for the x86-64-v3 (AVX2) and x86-64-v4 (AVX-512) levels.  The
 * first call picks the widest level the CPU reports; dmuon_bf16_width_set
 * (bf16_width.h) pins one, for tests.  Every loop is integer operations and
 * single binary32 adds (no products, so nothing the compiler could
 * contract), so every width gives the same bits (only which NaN a NaN input
 * turns into may differ); tests/unit/test_ops_sched.c checks each width the
 * CPU has against the scalar definitions of bf16.h.  On an AMD EPYC with
 * AVX-512 the ReduceScatterV chunk sum (widen, accumulate, add rounded) of
 * a 64 KiB chunk took 38 µs at the baseline and 12 µs at v4.
 */
#include "dmuon/bf16.h"

#include "bf16_width.h"

/* These loops carry the reductions' arithmetic; let the compiler vectorise
 * them (the scalar helpers are branch-free for that reason). */
#pragma GCC optimize("O3")

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12
#define HAVE_LEVELS 1
#else
#define HAVE_LEVELS 0
#endif

/* Branch-free form of dmuon_f32_to_bf16 for vector loops. */
static inline uint16_t to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    uint32_t q = (u >> 16) | 0x40u;
    return (uint16_t)(((u & 0x7fffffffu) > 0x7f800000u) ? q : r);
}

typedef struct {
    void (*add)(uint16_t *, const uint16_t *, const uint16_t *, size_t);
    void (*f32_add)(float *, const float *, const float *, size_t);
    void (*from_f32)(uint16_t *, const float *, size_t);
    void (*to_f32)(float *, const uint16_t *, size_t);
    void (*accum)(float *, const uint16_t *, size_t);
    void (*add_rounded)(uint16_t *, const uint16_t *, const float *, size_t);
    void (*add_pair)(uint16_t *, const uint16_t *, const uint16_t *, const uint16_t *, size_t);
} bf16_loops;

/* ------------------------------------------------------------ widths ---- */

#define LOOP_ATTR
#define LOOP(name) base_##name
#include "bf16_loops.h"
#undef LOOP_ATTR
#undef LOOP

#if HAVE_LEVELS
#define LOOP_ATTR __attribute__((target("arch=x86-64-v3")))
#define LOOP(name) v3_##name
#include "bf16_loops.h"
#undef LOOP_ATTR
#undef LOOP

#define LOOP_ATTR __attribute__((target("arch=x86-64-v4")))
#define LOOP(name) v4_##name
#include "bf16_loops.h"
#undef LOOP_ATTR
#undef LOOP
#endif

static const bf16_loops *chosen;   /* NULL until the first call */

static int cpu_has(int width)
{
    if (width == DMUON_BF16_WIDTH_BASE)
        return 1;
#if HAVE_LEVELS
    __builtin_cpu_init();
    if (width == DMUON_BF16_WIDTH_V3)
        return __builtin_cpu_supports("x86-64-v3");
    if (width == DMUON_BF16_WIDTH_V4)
        return __builtin_cpu_supports("x86-64-v4");
#endif
    return 0;
}

static const bf16_loops *table_of(int width)
{
#if HAVE_LEVELS
    if (width == DMUON_BF16_WIDTH_V4)
        return &v4_table;
    if (width == DMUON_BF16_WIDTH_V3)
        return &v3_table;
#endif
    (void)width;
    return &base_table;
}

static int widest(void)
{
    if (cpu_has(DMUON_BF16_WIDTH_V4))
        return DMUON_BF16_WIDTH_V4;
    return cpu_has(DMUON_BF16_WIDTH_V3) ? DMUON_BF16_WIDTH_V3 : DMUON_BF16_WIDTH_BASE;
}

/* Threads racing on the first call store the same table. */
static const bf16_loops *loops(void)
{
    const bf16_loops *t = __atomic_load_n(&chosen, __ATOMIC_ACQUIRE);
    if (!t) {
        t = table_of(widest());
        __atomic_store_n(&chosen, t, __ATOMIC_RELEASE);
    }
    return t;
}

int dmuon_bf16_width_set(int width)
{
    if (width == DMUON_BF16_WIDTH_AUTO)
        width = widest();
    if (width != DMUON_BF16_WIDTH_BASE && width != DMUON_BF16_WIDTH_V3 &&
        width != DMUON_BF16_WIDTH_V4)
        return -1;
    if (!cpu_has(width))
        return -1;
    __atomic_store_n(&chosen, table_of(width), __ATOMIC_RELEASE);
    return width;
}

/* ------------------------------------------------------- public loops ---- */

void dmuon_bf16_add(uint16_t *dst, const uint16_t *a, const uint16_t *b, size_t n)
{
    loops()->add(dst, a, b, n);
}

void dmuon_f32_add(float *dst, const float *a, const float *b, size_t n)
{
    loops()->f32_add(dst, a, b, n);
}

void dmuon_bf16_from_f32(uint16_t *dst, const float *src, size_t n)
{
    loops()->from_f32(dst, src, n);
}

void dmuon_bf16_to_f32_n(float *dst, const uint16_t *src, size_t n)
{
    loops()->to_f32(dst, src, n);
}

void dmuon_bf16_accum(float *acc, const uint16_t *x, size_t n)
{
    loops()->accum(acc, x, n);
}

void dmuon_bf16_add_rounded(uint16_t *dst, const uint16_t *a, const float *l, size_t n)
{
    loops()->add_rounded(dst, a, l, n);
}

void dmuon_bf16_add_pair(uint16_t *dst, const uint16_t *a, const uint16_t *x0,
                         const uint16_t *x1, size_t n)
{
    loops()->add_pair(dst, a, x0, x1, n);
}
