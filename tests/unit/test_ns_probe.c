/*
 * test_ns_probe.c — the probe library without MPI (comm = MPI_COMM_NULL):
 * rows are filled with this machine's key and consistent figures, options
 * are validated, shape lists parse, and rows round-trip through the cost
 * database in one transaction.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dmuon/costdb.h"
#include "dmuon/probe.h"

static size_t progress_calls;

static void progress(size_t done, size_t total, const dmuon_cost_row *row, void *ctx)
{
    assert_int_equal(done, ++progress_calls);
    assert_int_equal(total, *(size_t *)ctx);
    assert_true(row->median_ms >= 0.0);
}

static void test_probe_rows(void **state)
{
    const int64_t shapes[3][2] = {{8, 24}, {24, 8}, {5, 5}};
    size_t total = 3;
    dmuon_cost_row rows[3];
    dmuon_probe_opts o;
    dmuon_probe_opts_init(&o, DMUON_DEVICE_CPU);
    assert_int_equal(o.warmup, 1);
    assert_int_equal(o.iters, 3);
    o.iters = 4;
    o.progress = progress;
    o.progress_ctx = &total;
    progress_calls = 0;
    assert_int_equal(dmuon_probe_shapes(&o, shapes, 3, MPI_COMM_NULL, rows), DMUON_OK);
    assert_int_equal(progress_calls, 3);
    char device[128], variant[32], dtype[8];
    assert_int_equal(dmuon_probe_key(&o, MPI_COMM_NULL, device, variant, dtype), DMUON_OK);
    assert_non_null(strstr(device, "cpu: "));
    for (int i = 0; i < 3; i++) {
        assert_string_equal(rows[i].device, device);
        assert_string_equal(rows[i].variant, "gram-pe5");
        assert_string_equal(rows[i].dtype, "fp32");
        assert_int_equal(rows[i].m, shapes[i][0]);
        assert_int_equal(rows[i].n, shapes[i][1]);
        assert_int_equal(rows[i].samples, 4);
        assert_int_equal(rows[i].ranks, 1);
        assert_true(rows[i].min_ms <= rows[i].median_ms && rows[i].median_ms <= rows[i].max_ms);
        assert_true(rows[i].max_ms > 0.0);
        assert_true(strlen(rows[i].libraries) > 0 && strlen(rows[i].host) > 0);
        assert_string_equal(rows[i].measured_at, "");
    }

    /* round trip through the database: one transaction */
    char dir[] = "/tmp/dmuon-probe-XXXXXX", path[96];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/c.sqlite", dir);
    dmuon_costdb *db = NULL;
    assert_int_equal(dmuon_costdb_open(path, true, 1000, &db), DMUON_OK);
    assert_int_equal(dmuon_costdb_put_rows(db, rows, 3), DMUON_OK);
    dmuon_cost_row back;
    assert_int_equal(dmuon_costdb_get(db, device, "gram-pe5", "fp32", 24, 8, &back), DMUON_OK);
    assert_true(back.median_ms == rows[1].median_ms);
    assert_int_equal(dmuon_costdb_get(db, device, "direct-pe5", "fp32", 24, 8, &back),
                     DMUON_ENOTFOUND);
    dmuon_costdb_close(db);
    unlink(path);
    char wal[128];
    snprintf(wal, sizeof wal, "%s-wal", path);
    unlink(wal);
    snprintf(wal, sizeof wal, "%s-shm", path);
    unlink(wal);
    rmdir(dir);
}

static void test_probe_errors(void **state)
{
    const int64_t good[1][2] = {{4, 4}}, bad[1][2] = {{4, 0}};
    dmuon_cost_row rows[1];
    dmuon_probe_opts o;
    dmuon_probe_opts_init(&o, DMUON_DEVICE_CPU);
    assert_int_equal(dmuon_probe_shapes(&o, bad, 1, MPI_COMM_NULL, rows), DMUON_EINVAL);
    assert_non_null(strstr(dmuon_errmsg(), "4 x 0"));
    o.iters = 0;
    assert_int_equal(dmuon_probe_shapes(&o, good, 1, MPI_COMM_NULL, rows), DMUON_EINVAL);
    dmuon_probe_opts_init(&o, DMUON_DEVICE_CUDA);
    assert_int_equal(o.iters, 20);
    /* no GPU here (or a CPU-only build): refused, never a crash */
    dmuon_rc rc = dmuon_probe_shapes(&o, good, 1, MPI_COMM_NULL, rows);
    if (rc != DMUON_OK)
        assert_true(rc == DMUON_EDEVICE || rc == DMUON_EUNSUPPORTED);
}

static void test_parse_shapes(void **state)
{
    int64_t(*s)[2] = NULL;
    size_t n = 0;
    assert_int_equal(dmuon_probe_parse_shapes("1536x8960,256X1536,7x1", &s, &n), DMUON_OK);
    assert_int_equal(n, 3);
    assert_int_equal(s[0][0], 1536);
    assert_int_equal(s[0][1], 8960);
    assert_int_equal(s[1][0], 256);
    assert_int_equal(s[2][1], 1);
    free(s);
    const char *bad[] = {"", "12", "12x", "x3", "0x5", "3x-2", "3x4,", "3x4y", "3x99999999999",
                         "+3x4"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        s = NULL;
        assert_int_equal(dmuon_probe_parse_shapes(bad[i], &s, &n), DMUON_EINVAL);
        assert_null(s);
        assert_non_null(strstr(dmuon_errmsg(), "expected MxN"));
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_probe_rows),
        cmocka_unit_test(test_probe_errors),
        cmocka_unit_test(test_parse_shapes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
