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
 * CPU has against the scalar definitions of bf16.h, and `dmuon-bench loops`
 * times each loop at the width in use (and checks it too).
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

/* Bits of a binary32 and back. */
static inline uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* The binary32 bits u rounded to bfloat16, as binary32 bits (low half
 * zero): dmuon_f32_to_bf16 of u, shifted up 16, without a branch.  u with
 * its sign cleared fits an int32_t, so the NaN test is a signed compare,
 * which every x86 vector width has (an unsigned one costs two more
 * instructions a lane). */
static inline uint32_t rnd_bits(uint32_t u)
{
    uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    uint32_t q = (u | 0x400000u) & 0xffff0000u;
    return (int32_t)(u & 0x7fffffffu) > 0x7f800000 ? q : r;
}

/* Branch-free form of dmuon_f32_to_bf16 for vector loops. */
static inline uint16_t to_bf16(float f)
{
    return (uint16_t)(rnd_bits(f32_bits(f)) >> 16);
}

/* Pairs.  The bfloat16 loops take two elements at a time as one 32-bit
 * word w (element 2i in the low half: little-endian only): widening is
 * w << 16 (low) and w & 0xffff0000 (high), and the two rounded results
 * join as lo >> 16 | hi, so every step stays in 32-bit lanes and the
 * compiler needs no widening or narrowing shuffles.  Same bits as one
 * element at a time.  `dmuon-bench loops` (16384 elements, three runs) on
 * an AMD EPYC (Zen 3) at x86-64-v3, elements per ns, element loops then
 * pairs: add 2.49-2.52 then 4.32-5.45, add_pair 1.49-1.56 then 2.53-2.73,
 * add_rounded 1.85-2.02 then 2.33-2.40; from_f32 3.58-4.32 then 5.79-6.14
 * (the signed NaN test). */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define PAIRS(n) ((n) / 2)
#else
#define PAIRS(n) ((size_t)0)   /* element by element */
#endif

static inline uint32_t pair_at(const uint16_t *p, size_t i)
{
    uint32_t w;
    memcpy(&w, p + 2 * i, sizeof w);
    return w;
}

static inline void pair_put(uint16_t *p, size_t i, uint32_t lo, uint32_t hi)
{
    uint32_t w = lo >> 16 | hi;
    memcpy(p + 2 * i, &w, sizeof w);
}

static inline float lo_f32(uint32_t w)
{
    return bits_f32(w << 16);
}

static inline float hi_f32(uint32_t w)
{
    return bits_f32(w & 0xffff0000u);
}

/* bf16(x) widened again, as a float */
static inline float rnd_f32(float x)
{
    return bits_f32(rnd_bits(f32_bits(x)));
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

const char *dmuon_bf16_width_name(void)
{
    const bf16_loops *t = loops();
#if HAVE_LEVELS
    if (t == &v4_table)
        return "x86-64-v4";
    if (t == &v3_table)
        return "x86-64-v3";
#endif
    (void)t;
    return "baseline";
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
