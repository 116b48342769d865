/*
 * test_ops_sched.c — the operators' pure parts: BF16 rounding, segment table
 * checks and digests, slicing by rail into chunks, chain and star routes,
 * the publish schedule and copy layout, generated layouts.  No MPI.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "dmuon/bf16.h"
#include "bf16_width.h"
#include "dmuon/segshape.h"
#include "dmuon/publish.h"
#include "dmuon/sched.h"
#include "dmuon/topo.h"

static uint16_t bits_to_bf16(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return dmuon_f32_to_bf16(f);
}

static void test_bf16_rounding(void **state)
{
    /* IEEE round to nearest, ties to even, on the 16 dropped bits */
    assert_int_equal(bits_to_bf16(0x3f800000u), 0x3f80);   /* 1.0 exact */
    assert_int_equal(bits_to_bf16(0x3f808000u), 0x3f80);   /* tie, even stays */
    assert_int_equal(bits_to_bf16(0x3f818000u), 0x3f82);   /* tie, odd rounds up */
    assert_int_equal(bits_to_bf16(0x3f808001u), 0x3f81);   /* above half */
    assert_int_equal(bits_to_bf16(0x3f807fffu), 0x3f80);   /* below half */
    assert_int_equal(bits_to_bf16(0x7f7fffffu), 0x7f80);   /* FLT_MAX rounds to inf */
    assert_int_equal(bits_to_bf16(0xff800000u), 0xff80);   /* -inf */
    assert_int_equal(bits_to_bf16(0x80000000u), 0x8000);   /* -0 */
    uint16_t nan = bits_to_bf16(0x7f800001u);               /* NaN stays NaN */
    assert_true((nan & 0x7f80) == 0x7f80 && (nan & 0x7f) != 0);
    assert_true(dmuon_bf16_to_f32(0x4040) == 3.0f);
    /* 256 + 1 is not representable: ties to even gives 256; 256 + 3 → 260 */
    uint16_t a = dmuon_f32_to_bf16(256.0f), b = dmuon_f32_to_bf16(1.0f), r;
    dmuon_bf16_add(&r, &a, &b, 1);
    assert_true(dmuon_bf16_to_f32(r) == 256.0f);
    b = dmuon_f32_to_bf16(3.0f);
    dmuon_bf16_add(&r, &a, &b, 1);
    assert_true(dmuon_bf16_to_f32(r) == 260.0f);
}

/* Random bit patterns: every class of value (NaN, ±inf, subnormals, ties)
 * turns up; one in eight bfloat16 inputs is forced to a NaN or an inf. */
static uint32_t next_bits(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(*s >> 32);
}

static uint16_t any_bf16(uint64_t *s)
{
    uint32_t u = next_bits(s);
    if ((u & 7) == 0)
        return (uint16_t)(((u >> 8) & 1 ? 0x7f80u : 0xff80u) | ((u >> 9) & 1 ? 0x41u : 0));
    return (uint16_t)(u >> 16);
}

static float any_f32(uint64_t *s)
{
    uint32_t u = next_bits(s);
    if ((u & 3) == 0)
        u = (u & 0xffff0000u) | 0x8000u;              /* a tie */
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static int f32_same(float a, float b)
{
    uint32_t x, y;
    memcpy(&x, &a, 4);
    memcpy(&y, &b, 4);
    return x == y || (a != a && b != b);   /* NaN: any NaN */
}

static int bf16_same(uint16_t a, uint16_t b)
{
    return a == b || (((a & 0x7fffu) > 0x7f80u) && ((b & 0x7fffu) > 0x7f80u));
}

/* The scalar definitions of dmuon_bf16_add and dmuon_bf16_add_rounded
 * (bf16.h), checked against o[0..n). */
static void check_add(const uint16_t *o, const uint16_t *a, const uint16_t *b, int n)
{
    for (int i = 0; i < n; i++)
        assert_true(bf16_same(o[i], dmuon_f32_to_bf16(dmuon_bf16_to_f32(a[i]) +
                                                      dmuon_bf16_to_f32(b[i]))));
}

static void check_add_rounded(const uint16_t *o, const uint16_t *a, const float *l, int n)
{
    for (int i = 0; i < n; i++)
        assert_true(bf16_same(o[i], dmuon_f32_to_bf16(dmuon_bf16_to_f32(a[i]) +
                                                      dmuon_bf16_to_f32(dmuon_f32_to_bf16(l[i])))));
}

/* dmuon_bf16_add_pair's scalar definition (bf16.h). */
static void check_add_pair(const uint16_t *o, const uint16_t *a, const uint16_t *x0,
                           const uint16_t *x1, int n)
{
    for (int i = 0; i < n; i++) {
        float l = dmuon_bf16_to_f32(x0[i]) + dmuon_bf16_to_f32(x1[i]);
        assert_true(bf16_same(o[i], dmuon_f32_to_bf16(dmuon_bf16_to_f32(a[i]) +
                                                      dmuon_bf16_to_f32(dmuon_f32_to_bf16(l)))));
    }
}

static void check_f32_add(const float *r, const float *a, const float *b, int n)
{
    for (int i = 0; i < n; i++)
        assert_true(f32_same(r[i], a[i] + b[i]));
}

/* Each built width of the element loops against the scalar definitions of
 * bf16.h, for lengths across every vector remainder, misaligned starts and
 * dst aliasing an input. */
static void test_bf16_widths(void **state)
{
    enum { MAXN = 4099 + 3 };
    uint16_t *a = malloc(MAXN * 2), *b = malloc(MAXN * 2), *c = malloc(MAXN * 2);
    uint16_t *o = malloc(MAXN * 2);
    float *f = malloc(MAXN * 4), *g = malloc(MAXN * 4), *r = malloc(MAXN * 4);
    assert_non_null(a && b && c && o && f && g && r);
    const int widths[] = {DMUON_BF16_WIDTH_BASE, DMUON_BF16_WIDTH_V3, DMUON_BF16_WIDTH_V4};
    const char *names[] = {"baseline", "x86-64-v3", "x86-64-v4"};
    int tested = 0;
    uint64_t seed = 12345;
    for (int w = 0; w < 3; w++) {
        if (dmuon_bf16_width_set(widths[w]) != widths[w]) {
            print_message("# skip: bf16 loops at %s: not built or not supported by this CPU\n",
                          names[w]);
            continue;
        }
        tested++;
        long checked = 0;
        for (int n = 0; n < 4100; n = n < 70 ? n + 1 : n * 2 + 1)
            for (int at = 0; at < 4; at++) {
                for (int i = 0; i < n + at; i++) {
                    a[i] = any_bf16(&seed);
                    b[i] = any_bf16(&seed);
                    c[i] = any_bf16(&seed);
                    f[i] = any_f32(&seed);
                    g[i] = any_f32(&seed);
                }
                uint16_t *A = a + at, *B = b + at, *C = c + at, *O = o + at;
                float *F = f + at, *G = g + at, *Rr = r + at;
                dmuon_bf16_add(O, A, B, (size_t)n);
                check_add(O, A, B, n);
                dmuon_f32_add(Rr, F, G, (size_t)n);
                check_f32_add(Rr, F, G, n);
                dmuon_bf16_from_f32(O, F, (size_t)n);
                for (int i = 0; i < n; i++)
                    assert_true(bf16_same(O[i], dmuon_f32_to_bf16(F[i])));
                dmuon_bf16_to_f32_n(Rr, A, (size_t)n);
                for (int i = 0; i < n; i++)
                    assert_true(f32_same(Rr[i], dmuon_bf16_to_f32(A[i])));
                memcpy(Rr, G, (size_t)n * 4);
                dmuon_bf16_accum(Rr, A, (size_t)n);
                for (int i = 0; i < n; i++)
                    assert_true(f32_same(Rr[i], G[i] + dmuon_bf16_to_f32(A[i])));
                dmuon_bf16_add_rounded(O, A, F, (size_t)n);
                check_add_rounded(O, A, F, n);
                /* the pair form against add_rounded of the widened pair sum */
                dmuon_bf16_add_pair(O, A, B, C, (size_t)n);
                check_add_pair(O, A, B, C, n);
                /* dst aliasing the first input, as the reductions call them */
                memcpy(O, A, (size_t)n * 2);
                dmuon_bf16_add(O, O, B, (size_t)n);
                check_add(O, A, B, n);
                memcpy(O, A, (size_t)n * 2);
                dmuon_bf16_add_rounded(O, O, F, (size_t)n);
                check_add_rounded(O, A, F, n);
                memcpy(O, A, (size_t)n * 2);
                dmuon_bf16_add_pair(O, O, B, B, (size_t)n);
                check_add_pair(O, A, B, B, n);
                memcpy(Rr, F, (size_t)n * 4);
                dmuon_f32_add(Rr, Rr, G, (size_t)n);
                check_f32_add(Rr, F, G, n);
                checked += n;
            }
        print_message("# bf16 loops at %s: %ld elements per loop match the scalar definitions\n",
                      names[w], checked);
    }
    assert_int_equal(dmuon_bf16_width_set(DMUON_BF16_WIDTH_AUTO) > 0, 1);
    assert_int_equal(dmuon_bf16_width_set(2), -1);   /* no such width */
    assert_true(tested >= 1);
    free(a), free(b), free(c), free(o), free(f), free(g), free(r);
}

static void test_table_check(void **state)
{
    dmuon_segment s[3] = {
        {0, DMUON_BF16, 0, 10, 0}, {1, DMUON_BF16, 20, 5, 0}, {0, DMUON_BF16, 40, 4, 20}};
    int64_t lb = 0, wb = 0;
    assert_int_equal(dmuon_table_check(s, 3, 2, &lb, &wb), DMUON_OK);
    assert_int_equal(lb, 48);
    assert_int_equal(wb, 28);
    s[1].owner = 2;
    assert_int_equal(dmuon_table_check(s, 3, 2, NULL, NULL), DMUON_EINVAL);
    assert_non_null(strstr(dmuon_errmsg(), "segment 1: owner 2 is not a rank of 0..1"));
    s[1].owner = 1;
    s[1].offset = 18;
    assert_int_equal(dmuon_table_check(s, 3, 2, NULL, NULL), DMUON_EINVAL);
    assert_non_null(strstr(dmuon_errmsg(), "segment 1: offset 18 overlaps"));
    s[1].offset = 21;
    assert_int_equal(dmuon_table_check(s, 3, 2, NULL, NULL), DMUON_EINVAL);
    assert_non_null(strstr(dmuon_errmsg(), "segment 1: offset 21: expected a non-negative multiple"));
    s[1].offset = 20;
    s[2].window_offset = 18;
    assert_int_equal(dmuon_table_check(s, 3, 2, NULL, NULL), DMUON_EINVAL);
    assert_non_null(strstr(dmuon_errmsg(), "segments 0 and 2: windows overlap in owner 0's window"));
    s[2].window_offset = 20;
    s[0].count = 0;
    assert_int_equal(dmuon_table_check(s, 3, 2, NULL, NULL), DMUON_EINVAL);
    assert_non_null(strstr(dmuon_errmsg(), "segment 0: count 0"));
}

static void test_table_digest(void **state)
{
    dmuon_segment a[2] = {{0, DMUON_BF16, 0, 10, 0}, {1, DMUON_F32, 20, 5, 8}}, b[2];
    memcpy(b, a, sizeof a);
    assert_true(dmuon_table_digest(a, 2) == dmuon_table_digest(b, 2));
    b[1].window_offset = 12;
    assert_true(dmuon_table_digest(a, 2) != dmuon_table_digest(b, 2));
    assert_true(dmuon_table_digest(a, 1) != dmuon_table_digest(a, 2));
}

/* Every byte of every segment is carried by exactly one chunk, of the queue
 * of its owner's node and of the rail of its slice. */
static void check_cover(const dmuon_segment *segs, int n, int R, int K, int64_t chunk)
{
    for (int kind = 0; kind < 2; kind++) {
        dmuon_sched s;
        dmuon_sched_opts o = {DMUON_PATH_CHAIN, chunk, 0};
        assert_int_equal(dmuon_sched_init(&s, segs, n, R, K, (dmuon_sched_kind)kind, &o), DMUON_OK);
        int64_t lb = 0;
        assert_int_equal(dmuon_table_check(segs, n, R * K, &lb, NULL), DMUON_OK);
        unsigned char *hit = calloc((size_t)lb + 1, 1);
        assert_non_null(hit);
        for (int q = 0; q < R; q++)
            for (int r = 0; r < K; r++) {
                int nc = 0;
                const dmuon_chunk *c = dmuon_sched_queue(&s, q, r, &nc);
                int64_t last_seg = -1, last_off = -1;
                for (int i = 0; i < nc; i++) {
                    const dmuon_segment *g = &segs[c[i].seg];
                    int64_t es = (int64_t)dmuon_dtype_size(g->dtype);
                    assert_int_equal(g->owner / K, q);
                    assert_true(c[i].bytes <= chunk && c[i].bytes == c[i].count * es);
                    int64_t e = (c[i].offset - g->offset) / es;
                    assert_true(e >= g->count * r / K);
                    assert_true(e + c[i].count <= g->count * (r + 1) / K);
                    assert_int_equal(c[i].win_offset - g->window_offset, c[i].offset - g->offset);
                    /* table order, increasing offset */
                    assert_true(c[i].seg > last_seg || (c[i].seg == last_seg && c[i].offset > last_off));
                    last_seg = c[i].seg;
                    last_off = c[i].offset;
                    for (int64_t b = 0; b < c[i].bytes; b++)
                        hit[c[i].offset + b]++;
                }
            }
        for (int i = 0; i < n; i++) {
            int64_t b = segs[i].count * (int64_t)dmuon_dtype_size(segs[i].dtype);
            for (int64_t k = 0; k < b; k++)
                assert_int_equal(hit[segs[i].offset + k], 1);
        }
        free(hit);
        dmuon_sched_release(&s);
    }
}

static void test_sched_cover(void **state)
{
    for (int l = 0; l < DMUON_SEGSHAPE_COUNT; l++) {
        dmuon_segment *segs;
        int n;
        assert_int_equal(dmuon_segshape_make((dmuon_segshape)l, 300000 + 6, DMUON_BF16, 4, 2, &segs, &n),
                         DMUON_OK);
        check_cover(segs, n, 4, 2, 65536);
        check_cover(segs, n, 4, 2, 1000);
        free(segs);
        assert_int_equal(dmuon_segshape_make((dmuon_segshape)l, 4096, DMUON_F32, 3, 4, &segs, &n),
                         DMUON_OK);
        check_cover(segs, n, 3, 4, 64);
        free(segs);
    }
}

/* Follows the routes of every queue: gather reaches every node once; reduce
 * passes every node once and ends at the queue's node; in[] mirrors out[]. */
static void check_routes(int R, dmuon_path path)
{
    dmuon_segment seg = {0, DMUON_BF16, 0, 16, 0};
    for (int kind = 0; kind < 2; kind++) {
        dmuon_sched s;
        dmuon_sched_opts o = {path, 0, 0};
        assert_int_equal(dmuon_sched_init(&s, &seg, 1, R, 2, (dmuon_sched_kind)kind, &o), DMUON_OK);
        int in[32], out[32], nout;
        for (int q = 0; q < R; q++) {
            int recv_count[32] = {0}, nin_of[32] = {0}, sends = 0;
            for (int node = 0; node < R; node++) {
                int nin = dmuon_sched_route(&s, q, node, in, out, &nout);
                sends += nout;
                for (int i = 0; i < nout; i++) {
                    assert_true(out[i] != node && out[i] >= 0 && out[i] < R);
                    recv_count[out[i]]++;
                    /* the receiver lists this node among its inputs */
                    int in2[32], out2[32], n2, found = 0;
                    int ni2 = dmuon_sched_route(&s, q, out[i], in2, out2, &n2);
                    for (int k = 0; k < ni2; k++)
                        found |= in2[k] == node;
                    assert_true(found);
                }
                nin_of[node] = nin;
            }
            for (int node = 0; node < R; node++)   /* every input has a sender */
                assert_int_equal(recv_count[node], nin_of[node]);
            assert_int_equal(sends, R - 1);   /* one transfer into each other node */
            if (kind == DMUON_SCHED_GATHER) {
                for (int node = 0; node < R; node++)
                    assert_int_equal(recv_count[node], node == q ? 0 : 1);
            } else {
                int nin = dmuon_sched_route(&s, q, q, in, out, &nout);
                assert_int_equal(nout, 0);            /* the owner node ends it */
                if (path == DMUON_PATH_STAR)
                    for (int k = 0; k < nin; k++)     /* added in chain order */
                        assert_int_equal(in[k], (q + 1 + k) % R);
            }
        }
        assert_int_equal(dmuon_sched_depth(&s), R == 1 ? 0 : path == DMUON_PATH_STAR ? 1 : R - 1);
        dmuon_sched_release(&s);
    }
}

static void test_sched_routes(void **state)
{
    for (int R = 1; R <= 9; R++) {
        check_routes(R, DMUON_PATH_CHAIN);
        check_routes(R, DMUON_PATH_STAR);
    }
}

static void test_sched_auto_path(void **state)
{
    dmuon_segment *segs;
    int n;
    dmuon_sched s;
    assert_int_equal(dmuon_segshape_make(DMUON_SEGSHAPE_NODE, 64 * 1024, DMUON_BF16, 4, 2, &segs, &n), DMUON_OK);
    assert_int_equal(dmuon_sched_init(&s, segs, n, 4, 2, DMUON_SCHED_GATHER, NULL), DMUON_OK);
    assert_int_equal(s.path, DMUON_PATH_STAR);
    dmuon_sched_release(&s);
    free(segs);
    assert_int_equal(dmuon_segshape_make(DMUON_SEGSHAPE_NODE, 8 << 20, DMUON_BF16, 4, 2, &segs, &n), DMUON_OK);
    assert_int_equal(dmuon_sched_init(&s, segs, n, 4, 2, DMUON_SCHED_GATHER, NULL), DMUON_OK);
    assert_int_equal(s.path, DMUON_PATH_CHAIN);
    dmuon_sched_release(&s);
    free(segs);
    assert_int_equal(dmuon_segshape_make(DMUON_SEGSHAPE_NODE, 4096, DMUON_BF16, 17, 1, &segs, &n), DMUON_OK);
    assert_int_equal(dmuon_sched_init(&s, segs, n, 17, 1, DMUON_SCHED_REDUCE, NULL), DMUON_OK);
    assert_int_equal(s.path, DMUON_PATH_CHAIN);   /* more than 16 nodes */
    dmuon_sched_release(&s);
    dmuon_sched_opts o = {DMUON_PATH_STAR, 0, 0};
    assert_int_equal(dmuon_sched_init(&s, segs, n, 17, 1, DMUON_SCHED_REDUCE, &o), DMUON_EINVAL);
    assert_non_null(strstr(dmuon_errmsg(), "star path serves at most 16 nodes"));
    free(segs);
}

/* Operator chunk sizes: 0 (default) or a multiple of 8 of at least 256;
 * the message names the size and both limits. */
static void test_chunk_bytes_check(void **state)
{
    (void)state;
    assert_int_equal(dmuon_chunk_bytes_check(0), DMUON_OK);
    assert_int_equal(dmuon_chunk_bytes_check(256), DMUON_OK);
    assert_int_equal(dmuon_chunk_bytes_check(1024), DMUON_OK);
    assert_int_equal(dmuon_chunk_bytes_check(DMUON_CHUNK_BYTES), DMUON_OK);
    int64_t bad[] = {6, 10, 248, 255, 257, 1020, 65537, -8};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_int_equal(dmuon_chunk_bytes_check(bad[i]), DMUON_EINVAL);
    assert_int_equal(dmuon_chunk_bytes_check(6), DMUON_EINVAL);
    assert_non_null(strstr(dmuon_errmsg(), "chunk of 6 bytes"));
    assert_non_null(strstr(dmuon_errmsg(), "multiple of 8"));
    assert_non_null(strstr(dmuon_errmsg(), "at least 256"));
}

/* Ranks per node: a positive integer below 2^20; too large says so. */
static void test_parse_per_node(void **state)
{
    (void)state;
    int k = 0;
    assert_int_equal(dmuon_topo_parse_per_node("2", &k), DMUON_OK);
    assert_int_equal(k, 2);
    assert_int_equal(dmuon_topo_parse_per_node("1048575", &k), DMUON_OK);
    assert_int_equal(k, 1048575);
    assert_int_equal(dmuon_topo_parse_per_node("1048576", &k), DMUON_EINVAL);
    assert_non_null(strstr(dmuon_errmsg(), "too large (at most 1048575)"));
    assert_int_equal(dmuon_topo_parse_per_node("99999999999999999999999", &k), DMUON_EINVAL);
    assert_non_null(strstr(dmuon_errmsg(), "too large"));
    const char *bad[] = {"0", "-3", "two", "", "2x", "-99999999999999999999999"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(dmuon_topo_parse_per_node(bad[i], &k), DMUON_EINVAL);
        assert_non_null(strstr(dmuon_errmsg(), "expected a positive integer"));
    }
}

static void test_layout_node(void **state)
{
    dmuon_segment *segs;
    int n;
    assert_int_equal(dmuon_segshape_make(DMUON_SEGSHAPE_NODE, 6 * 1000 * 2, DMUON_BF16, 4, 2, &segs, &n), DMUON_OK);
    assert_int_equal(n, 4);
    int64_t total = 0;
    for (int i = 0; i < n; i++) {
        assert_int_equal(segs[i].owner / 2, i);          /* one owner per node */
        total += segs[i].count;
    }
    assert_int_equal(total, 6000);
    /* lengths cycle 1:2:3 (the last takes the remainder) */
    assert_int_equal(segs[1].count, 2 * segs[0].count);
    assert_int_equal(segs[2].count, 3 * segs[0].count);
    assert_int_equal(dmuon_table_check(segs, n, 8, NULL, NULL), DMUON_OK);
    free(segs);
    dmuon_segshape l;
    assert_int_equal(dmuon_segshape_parse("diagonal", &l), DMUON_EINVAL);
    assert_non_null(strstr(dmuon_errmsg(), "unknown layout 'diagonal'"));
}

/* The publish schedule: chunks cover every parameter exactly once, in
 * increasing offset, with the documented sizes; routes start at the
 * owner's node and walk the nodes in order. */
static void test_pub_sched(void **state)
{
    /* 3 nodes x 2 ranks; chunk 256 bytes = 128 bf16 / 64 f32 elements */
    dmuon_segment ps[] = {
        {5, DMUON_BF16, 0, 300, 0},     /* owner node 2, rail 1: 128+128+44 */
        {0, DMUON_F32, 0, 64, 0},       /* node 0, rail 0: exactly one chunk */
        {3, DMUON_F32, 600, 1, 0},      /* node 1, rail 1: one element */
    };
    dmuon_pub_sched s;
    assert_int_equal(dmuon_pub_sched_init(&s, ps, 3, 3, 2, 256), DMUON_OK);
    assert_int_equal(s.nparams, 3);
    assert_int_equal(s.nchunks, 5);
    int64_t want_bytes[] = {256, 256, 88, 256, 4};
    int64_t want_off[] = {0, 256, 512, 0, 600};
    int want_param[] = {0, 0, 0, 1, 2};
    for (int c = 0; c < 5; c++) {
        assert_int_equal(s.chunks[c].bytes, want_bytes[c]);
        assert_int_equal(s.chunks[c].offset, want_off[c]);
        assert_int_equal(s.chunks[c].param, want_param[c]);
    }
    assert_int_equal(s.params[0].first, 0);
    assert_int_equal(s.params[0].nchunks, 3);
    assert_int_equal(s.params[0].rail, 1);
    assert_int_equal(s.chunks[2].index, 2);
    /* owner node 2: route 2 → 0 → 1 */
    assert_int_equal(s.params[0].route[0], 2);
    assert_int_equal(s.params[0].route[1], 0);
    assert_int_equal(s.params[0].route[2], 1);
    int prev, next;
    assert_int_equal(dmuon_pub_sched_hop(&s, 0, 2, &prev, &next), 0);
    assert_int_equal(prev, -1);
    assert_int_equal(next, 0);
    assert_int_equal(dmuon_pub_sched_hop(&s, 0, 0, &prev, &next), 1);
    assert_int_equal(prev, 2);
    assert_int_equal(next, 1);
    assert_int_equal(dmuon_pub_sched_hop(&s, 0, 1, &prev, &next), 2);
    assert_int_equal(prev, 0);
    assert_int_equal(next, -1);
    dmuon_pub_sched_release(&s);
    dmuon_pub_sched_release(&s);   /* released twice is harmless */
    /* one node: the route is the owner's node only */
    dmuon_segment one[] = {{1, DMUON_BF16, 0, 10, 0}};
    assert_int_equal(dmuon_pub_sched_init(&s, one, 1, 1, 4, 0), DMUON_OK);
    assert_int_equal(s.chunk_bytes, DMUON_CHUNK_BYTES);
    assert_int_equal(dmuon_pub_sched_hop(&s, 0, 0, &prev, &next), 0);
    assert_int_equal(next, -1);
    dmuon_pub_sched_release(&s);
    assert_int_equal(dmuon_pub_sched_init(&s, one, 1, 0, 4, 0), DMUON_EINVAL);
}

/* Checks message m of parameter 0 by route at node: its source and the
 * nodes it goes on to (want: nw entries), also with out NULL. */
static void check_msg(const dmuon_pub_sched *s, dmuon_pub_route route, int m, int node,
                      int from, const int *want, int nw)
{
    int out[8] = {-9, -9, -9, -9, -9, -9, -9, -9}, nout = -1;
    assert_int_equal(dmuon_pub_sched_msg(s, 0, route, m, node, out, &nout), from);
    assert_int_equal(nout, nw);
    for (int i = 0; i < nw; i++)
        assert_int_equal(out[i], want[i]);
    assert_int_equal(out[nw], -9);   /* nothing written past them */
    nout = -1;
    assert_int_equal(dmuon_pub_sched_msg(s, 0, route, m, node, NULL, &nout), from);
    assert_int_equal(nout, nw);
}

/* The publish routes (dmuon_pub_sched_msg): a parameter of owner node 2 on
 * 4 nodes (route 2, 3, 0, 1).  Chain: hop by hop; fan-out: the owner's
 * node sends to 3, 0, 1; relay: message m goes to route[1 + m mod 3] and
 * on from there to the two other leaders in route order.  Every leader
 * receives each message exactly once.  On 2 nodes every route is the one
 * hop. */
static void test_pub_routes(void **state)
{
    dmuon_segment ps[] = {{4, DMUON_BF16, 0, 300, 0}};   /* rank 4 of 4 x 2: node 2 */
    dmuon_pub_sched s;
    assert_int_equal(dmuon_pub_sched_init(&s, ps, 1, 4, 2, 256), DMUON_OK);
    const int none[1] = {0}, to3[] = {3}, to0[] = {0}, to1[] = {1}, fan[] = {3, 0, 1};
    const int r0[] = {0, 1}, r1[] = {3, 1}, r2[] = {3, 0};
    for (int m = 0; m < 5; m++) {
        check_msg(&s, DMUON_PUB_CHAIN, m, 2, -1, to3, 1);
        check_msg(&s, DMUON_PUB_CHAIN, m, 3, 2, to0, 1);
        check_msg(&s, DMUON_PUB_CHAIN, m, 0, 3, to1, 1);
        check_msg(&s, DMUON_PUB_CHAIN, m, 1, 0, none, 0);
        check_msg(&s, DMUON_PUB_FANOUT, m, 2, -1, fan, 3);
        for (int node = 0; node < 4; node++)
            if (node != 2)
                check_msg(&s, DMUON_PUB_FANOUT, m, node, 2, none, 0);
    }
    /* relay: m = 0 and 3 via node 3, m = 1 and 4 via node 0, m = 2 via node 1 */
    for (int m = 0; m < 5; m++) {
        const int relay = m % 3 == 0 ? 3 : m % 3 == 1 ? 0 : 1;
        const int *on = m % 3 == 0 ? r0 : m % 3 == 1 ? r1 : r2;
        const int one[1] = {relay};
        check_msg(&s, DMUON_PUB_RELAY, m, 2, -1, one, 1);
        for (int node = 0; node < 4; node++)
            if (node == relay)
                check_msg(&s, DMUON_PUB_RELAY, m, node, 2, on, 2);
            else if (node != 2)
                check_msg(&s, DMUON_PUB_RELAY, m, node, relay, none, 0);
    }
    dmuon_pub_sched_release(&s);
    /* two nodes: the fan-out and the relay are the chain's single hop */
    assert_int_equal(dmuon_pub_sched_init(&s, ps, 1, 2, 4, 256), DMUON_OK);   /* node 1 */
    for (int r = DMUON_PUB_CHAIN; r <= DMUON_PUB_RELAY; r++) {
        check_msg(&s, (dmuon_pub_route)r, 3, 1, -1, to0, 1);
        check_msg(&s, (dmuon_pub_route)r, 3, 0, 1, none, 0);
    }
    dmuon_pub_sched_release(&s);
}

/* The publish copy layout: each rail's parameters back to back, aligned to
 * their element size, from 0 on every rail. */
static void test_publish_layout(void **state)
{
    dmuon_segment in[] = {
        {0, DMUON_BF16, 100, 3, 7},   /* rail 0 at 0, 6 bytes */
        {1, DMUON_F32, 0, 5, 0},      /* rail 1 at 0, 20 bytes */
        {2, DMUON_F32, 0, 2, 0},      /* rail 0: 6 rounds up to 8, ends at 16 */
        {3, DMUON_BF16, 0, 1, 0},     /* rail 1 at 20, ends at 22 */
    };
    dmuon_segment out[4];
    int64_t bytes = -1;
    assert_int_equal(dmuon_publish_layout(2, in, 4, out, &bytes), DMUON_OK);
    int64_t want[] = {0, 0, 8, 20};
    for (int i = 0; i < 4; i++) {
        assert_int_equal(out[i].offset, want[i]);
        assert_int_equal(out[i].window_offset, 0);
        assert_int_equal(out[i].owner, in[i].owner);
        assert_int_equal(out[i].count, in[i].count);
    }
    assert_int_equal(bytes, 22);
    assert_int_equal(dmuon_table_check_publish(out, 4, 4, 2, &bytes), DMUON_OK);
    assert_int_equal(bytes, 22);
    /* in place gives the same */
    assert_int_equal(dmuon_publish_layout(2, in, 4, in, &bytes), DMUON_OK);
    assert_memory_equal(in, out, sizeof out);
    assert_int_equal(dmuon_publish_layout(0, in, 4, out, &bytes), DMUON_EINVAL);
    assert_int_equal(dmuon_publish_layout(2, in, 0, out, &bytes), DMUON_OK);
    assert_int_equal(bytes, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bf16_rounding),   cmocka_unit_test(test_bf16_widths),
        cmocka_unit_test(test_table_check),
        cmocka_unit_test(test_table_digest),    cmocka_unit_test(test_sched_cover),
        cmocka_unit_test(test_sched_routes),    cmocka_unit_test(test_sched_auto_path),
        cmocka_unit_test(test_layout_node),     cmocka_unit_test(test_chunk_bytes_check),
        cmocka_unit_test(test_parse_per_node),  cmocka_unit_test(test_pub_sched),
        cmocka_unit_test(test_pub_routes),
        cmocka_unit_test(test_publish_layout),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
