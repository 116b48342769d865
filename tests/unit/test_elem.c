/*
 * test_elem.c — the runtime's device tables (libcore/runtime/elem.h) on the
 * host: the memory operations of the host table give the values written
 * out here (BF16 rounding to nearest even with a tie each way, NaN kept
 * quiet; exact widening; a strided transpose and its way back; the
 * accumulation and scale in binary32); the checking table gives the same
 * results on disguised addresses, which are no host address (2^62 away),
 * and counts its calls.  Expected values are written out from the rules,
 * not taken from the functions under test.  The CUDA table cannot run
 * here (no GPU).
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "runtime/elem.h"

static void test_host_memory_ops(void **state)
{
    (void)state;
    const rt_elem_ops *h = rt_elem_host();
    /* 1 + 2^-8 is a tie between bf16 1.0 (0x3f80) and 1 + 2^-7 (0x3f81):
     * to even, 0x3f80; 1 + 3·2^-8 is a tie between 0x3f81 and 0x3f82: to
     * even, 0x3f82; NaN 0x7fa00000 keeps its payload bits and gets the
     * quiet bit: 0x7fe0 */
    uint32_t bits[4] = {0x3f808000u, 0x3f818000u, 0x7fa00000u, 0xc0400000u};
    float f[4];
    memcpy(f, bits, sizeof f);
    uint16_t b[4];
    assert_int_equal(h->narrow(b, f, DMUON_BF16, 4, NULL), DMUON_OK);
    assert_int_equal(b[0], 0x3f80);
    assert_int_equal(b[1], 0x3f82);
    assert_int_equal(b[2], 0x7fe0);
    assert_int_equal(b[3], 0xc040);   /* -3.0 exactly */
    float w[4];
    assert_int_equal(h->widen(w, b, DMUON_BF16, 4, NULL), DMUON_OK);
    assert_true(w[0] == 1.0f && w[1] == 1.0f + 2.0f / 128 && isnan(w[2]) && w[3] == -3.0f);

    /* a 2 x 3 matrix read from storage held transposed (3 x 2: rs 1, cs 2) */
    float st[6] = {0, 1, 2, 3, 4, 5}, mat[6];
    assert_int_equal(h->strided(mat, st, 2, 3, 1, 2, 0, NULL), DMUON_OK);
    const float want[6] = {0, 2, 4, 1, 3, 5};
    assert_memory_equal(mat, want, sizeof want);
    float back[6] = {0};
    assert_int_equal(h->strided(mat, back, 2, 3, 1, 2, 1, NULL), DMUON_OK);
    assert_memory_equal(back, st, sizeof st);

    float acc[3] = {1, 2, 3};
    const float x[3] = {0.5f, -2, 1e-8f};
    assert_int_equal(h->accum(acc, x, 3, NULL), DMUON_OK);
    assert_true(acc[0] == 1.5f && acc[1] == 0 && acc[2] == 3.0f);   /* 3 + 1e-8 rounds to 3 */
    assert_int_equal(h->scale(acc, 3, 2.0f, NULL), DMUON_OK);
    assert_true(acc[0] == 3 && acc[1] == 0 && acc[2] == 6);
    assert_int_equal(h->zero(acc, sizeof acc, NULL), DMUON_OK);
    assert_true(acc[0] == 0 && acc[1] == 0 && acc[2] == 0);
    void *p = NULL;
    assert_int_equal(h->alloc(0, &p), DMUON_OK);
    assert_non_null(p);
    assert_ptr_equal(h->adopt(p), p);
    h->free(p);
}

static void test_checking_table(void **state)
{
    (void)state;
    const rt_elem_ops *c = rt_elem_check();
    assert_ptr_not_equal(c, rt_elem_host());
    int64_t calls0 = rt_elem_check_calls();
    void *p = NULL;
    assert_int_equal(c->alloc(4 * sizeof(float), &p), DMUON_OK);
    float *real = rt_elem_check_reveal(p);
    assert_true((uintptr_t)p - (uintptr_t)real == (uintptr_t)1 << 62);
    assert_true(real[0] == 0 && real[3] == 0);   /* zeroed */
    const float in[4] = {1, 2, 3, 4};
    assert_int_equal(c->copy(p, in, sizeof in, RT_H2D, NULL), DMUON_OK);
    assert_memory_equal(real, in, sizeof in);
    assert_int_equal(c->scale(p, 4, 0.5f, NULL), DMUON_OK);
    float out[4];
    assert_int_equal(c->copy(out, p, sizeof out, RT_D2H, NULL), DMUON_OK);
    const float half[4] = {0.5f, 1, 1.5f, 2};
    assert_memory_equal(out, half, sizeof half);
    int64_t bad = 0;
    double sumsq = 0;
    assert_int_equal(c->grad_check(p, 4, &bad, &sumsq, NULL), DMUON_OK);
    assert_int_equal(bad, -1);
    assert_true(sumsq == 0.25 + 1 + 2.25 + 4);
    unsigned char buf[64];
    assert_ptr_equal(rt_elem_check_reveal(c->adopt(buf)), buf);
    assert_true(rt_elem_check_calls() - calls0 == 5);   /* alloc, 2 copies, scale, check */
    c->free(p);
    rt_elem_check_enable(1);
    assert_true(rt_elem_check_enabled());
    rt_elem_check_enable(0);
    assert_false(rt_elem_check_enabled());
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_host_memory_ops),
        cmocka_unit_test(test_checking_table),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
