/*
 * bf16_width.h — which instruction-set width the loops of dmuon/bf16.h run
 * at (bf16.c).  Internal to libdmuon: the library picks the widest the CPU
 * has on its own; tests pin each width to check it against the scalar
 * definitions.
 */
#ifndef DMUON_BF16_WIDTH_H
#define DMUON_BF16_WIDTH_H

enum {
    DMUON_BF16_WIDTH_AUTO = 0,   /* the widest this CPU has */
    DMUON_BF16_WIDTH_BASE = 1,   /* the build's baseline (x86-64: SSE2) */
    DMUON_BF16_WIDTH_V3 = 3,     /* x86-64-v3: AVX2 (GCC 12+ on x86-64 only) */
    DMUON_BF16_WIDTH_V4 = 4      /* x86-64-v4: AVX-512 (GCC 12+ on x86-64 only) */
};

/* Makes every later call of the bf16.h loops run at width (one of the
 * above).  Returns the width now in use, or −1 when width is unknown, not
 * built, or not supported by this CPU (the width in use is then unchanged).
 * Not synchronised with loops running in other threads: call it before
 * they start. */
int dmuon_bf16_width_set(int width);

#endif
