/*
 * test_pool.c — the pool's layout (dmuon/pool.h): dmuon_pool_lay_out places
 * the spaces at 4 KiB multiples and the window regions at 64-byte multiples
 * in enum order, disjoint, with the sizes given; dmuon_pool_pack shares
 * bytes between blocks never live together and refuses bad sequences.
 * Expected values are written out from the alignment rules, not taken from
 * the functions under test.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "dmuon/pool.h"

static void test_lay_out_values(void **state)
{
    (void)state;
    dmuon_pool_sizes sz = {.ctrl = 100, .work = 5000, .win = {10, 64, 65, 0, 1, 200}};
    dmuon_pool_map m;
    memset(&m, 0xff, sizeof m);
    dmuon_pool_lay_out(&sz, &m);
    /* control [0, 100) → working space at 4096, 5000 bytes → 8192 + 4096 =
     * 12288: the windows */
    assert_int_equal(m.space_off[DMUON_SPACE_CTRL], 0);
    assert_int_equal(m.space_bytes[DMUON_SPACE_CTRL], 100);
    assert_int_equal(m.space_off[DMUON_SPACE_WORK], 4096);
    assert_int_equal(m.space_bytes[DMUON_SPACE_WORK], 5000);
    assert_int_equal(m.space_off[DMUON_SPACE_WINDOW], 12288);
    /* regions: 10 → 64, 64 → 64, 65 → 128, 0 → 0, 1 → 64, 200 → 256 */
    assert_int_equal(m.win_off[DMUON_WIN_PARAM], 12288);
    assert_int_equal(m.win_off[DMUON_WIN_GRAD], 12288 + 64);
    assert_int_equal(m.win_off[DMUON_WIN_EVEN], 12288 + 128);
    assert_int_equal(m.win_off[DMUON_WIN_EVEN_GRAD], 12288 + 256);
    assert_int_equal(m.win_off[DMUON_WIN_COPY], 12288 + 256);
    assert_int_equal(m.win_off[DMUON_WIN_DIR], 12288 + 320);
    assert_int_equal(m.space_bytes[DMUON_SPACE_WINDOW], 576);
    assert_int_equal(m.total, 12288 + 4096);
}

static void test_lay_out_invariants(void **state)
{
    (void)state;
    for (int64_t k = 0; k < 200; k++) {
        dmuon_pool_sizes sz = {.ctrl = k * 977 % 9000, .work = k * 7919 % 70000};
        for (int r = 0; r < DMUON_WIN_COUNT; r++)
            sz.win[r] = (k * 31 + r * 1009) % 3000;
        dmuon_pool_map m, again;
        dmuon_pool_lay_out(&sz, &m);
        dmuon_pool_lay_out(&sz, &again);
        assert_memory_equal(&m, &again, sizeof m);   /* pure */
        int64_t end = 0;
        for (int s = 0; s < DMUON_SPACE_COUNT; s++) {
            assert_int_equal(m.space_off[s] % DMUON_POOL_BASE_ALIGN, 0);
            assert_true(m.space_off[s] >= end);
            end = m.space_off[s] + m.space_bytes[s];
        }
        assert_true(m.total >= end);
        int64_t w = m.space_off[DMUON_SPACE_WINDOW];
        for (int r = 0; r < DMUON_WIN_COUNT; r++) {
            assert_int_equal(m.win_off[r] % DMUON_POOL_ALIGN, 0);
            assert_true(m.win_off[r] >= w);
            w = m.win_off[r] + sz.win[r];
        }
        assert_true(w <= m.space_off[DMUON_SPACE_WINDOW] + m.space_bytes[DMUON_SPACE_WINDOW]);
    }
}

static void test_pack(void **state)
{
    (void)state;
    /* block 0 live throughout, 1 and 2 one after the other: 2 reuses 1's bytes */
    const dmuon_pool_event ev[] = {{0, 1}, {1, 1}, {1, 0}, {2, 1}, {2, 0}, {0, 0}};
    const int64_t sizes[] = {100, 200, 150};
    int64_t off[3] = {-1, -1, -1}, total = -1;
    assert_int_equal(dmuon_pool_pack(ev, 6, sizes, 3, off, &total), DMUON_OK);
    /* largest first: 1 (256 bytes aligned) at 0, then 2 (192) at 0 too (1 is
     * gone by then), then 0 (128), live beside both, after them */
    assert_int_equal(off[1], 0);
    assert_int_equal(off[2], 0);
    assert_int_equal(off[0], 256);
    assert_int_equal(total, 256 + 128);
    /* the live peak is reached where blocks of falling sizes come and go:
     * 4 blocks of 4, 3, 2, 1 units, each beside the next (first fit in
     * event order would need 4 + 3 + 2 = 9 units for a peak of 7) */
    const dmuon_pool_event st[] = {{0, 1}, {1, 1}, {0, 0}, {2, 1}, {1, 0}, {3, 1}, {2, 0},
                                   {0, 1}, {3, 0}, {0, 0}};
    const int64_t u[] = {4 * 64, 3 * 64, 2 * 64, 1 * 64};
    int64_t o2[5];
    assert_int_equal(dmuon_pool_pack(st, 10, u, 4, o2, &total), DMUON_OK);
    assert_true(total <= 7 * 64);
    for (int i = 0; i < 5; i++)
        assert_true(o2[i] % 64 == 0 && o2[i] >= 0);
    const dmuon_pool_event twice[] = {{0, 1}, {0, 1}};
    assert_int_equal(dmuon_pool_pack(twice, 2, sizes, 3, off, &total), DMUON_EINVAL);
    const dmuon_pool_event dead[] = {{1, 0}};
    assert_int_equal(dmuon_pool_pack(dead, 1, sizes, 3, off, &total), DMUON_EINVAL);
    const dmuon_pool_event range[] = {{3, 1}};
    assert_int_equal(dmuon_pool_pack(range, 1, sizes, 3, off, &total), DMUON_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lay_out_values),
        cmocka_unit_test(test_lay_out_invariants),
        cmocka_unit_test(test_pack),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
