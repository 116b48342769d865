/*
 * test_ns_kernel.c — the per-shape kernel choice of the GPU Newton–Schulz
 * path without a GPU: the ns_kernel table of the cost database (schema
 * version 2, migration from version 1, read-only version-1 files) and the
 * lookup order memory → database → measurement of libcore/ns_kernel.c,
 * driven by a fake measurement that counts its calls.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dmuon/costdb.h"
#include "ns_kernel.h"

#include "testutil.h"

static int setup(void **state) { return testutil_setup("nskernel"); }
static int teardown(void **state) { return testutil_teardown(); }

/* The fake GPU: answers `answer` and counts the shapes it measured. */
typedef struct {
    int calls;
    const char *answer;
    int64_t last_s, last_k;
} fake;

static dmuon_rc fake_measure(void *ctx, dmuon_dtype dtype, int64_t s, int64_t k,
                             dmuon_kernel_row *row)
{
    fake *f = ctx;
    f->calls++;
    f->last_s = s;
    f->last_k = k;
    snprintf(row->kernel, sizeof row->kernel, "%s", f->answer);
    row->kernel_ms = 1.5;
    row->gemm_ms = 2.5;
    row->max_diff = 1e-6;
    return DMUON_OK;
}

static dmuon_rc failing_measure(void *ctx, dmuon_dtype dtype, int64_t s, int64_t k,
                                dmuon_kernel_row *row)
{
    return DMUON_FAIL(DMUON_EDEVICE, "no GPU in this test");
}

static void test_names(void **state)
{
    ns_sym k;
    for (int i = 0; i < NS_SYM_COUNT; i++) {
        assert_int_equal(ns_sym_parse(ns_sym_name((ns_sym)i), &k), DMUON_OK);
        assert_int_equal(k, i);
    }
    assert_string_equal(ns_sym_name(NS_SYM_TRI), "tri");
    assert_int_equal(ns_sym_parse("cutlass", &k), DMUON_EINVAL);
    assert_int_equal(ns_sym_parse(NULL, &k), DMUON_EINVAL);
}

static void test_table(void **state)
{
    char path[128];
    dmuon_costdb *db;
    dmuon_kernel_row r = {0}, got;
    snprintf(path, sizeof path, "%s/k.sqlite", tmpdir);
    assert_int_equal(dmuon_costdb_open(path, true, 1000, &db), DMUON_OK);
    snprintf(r.device, sizeof r.device, "cuda: Test GPU");
    snprintf(r.dtype, sizeof r.dtype, "bf16");
    snprintf(r.kernel, sizeof r.kernel, "tri");
    r.s = 1536;
    r.k = 8960;
    r.kernel_ms = 0.25;
    r.gemm_ms = 0.4;
    r.max_diff = 3e-7;
    assert_int_equal(dmuon_costdb_put_kernel(db, &r), DMUON_OK);
    assert_int_equal(dmuon_costdb_get_kernel(db, "cuda: Test GPU", "bf16", 1536, 8960, &got),
                     DMUON_OK);
    assert_string_equal(got.kernel, "tri");
    assert_true(got.kernel_ms == 0.25 && got.gemm_ms == 0.4 && got.max_diff == 3e-7);
    assert_true(got.measured_at[0] != '\0');
    /* the key is (device, dtype, s, k): each part misses on its own */
    assert_int_equal(dmuon_costdb_get_kernel(db, "cuda: Other GPU", "bf16", 1536, 8960, &got),
                     DMUON_ENOTFOUND);
    assert_int_equal(dmuon_costdb_get_kernel(db, "cuda: Test GPU", "fp32", 1536, 8960, &got),
                     DMUON_ENOTFOUND);
    assert_int_equal(dmuon_costdb_get_kernel(db, "cuda: Test GPU", "bf16", 8960, 1536, &got),
                     DMUON_ENOTFOUND);
    /* replace keeps one row per key */
    snprintf(r.kernel, sizeof r.kernel, "gemm");
    assert_int_equal(dmuon_costdb_put_kernel(db, &r), DMUON_OK);
    assert_int_equal(dmuon_costdb_get_kernel(db, "cuda: Test GPU", "bf16", 1536, 8960, &got),
                     DMUON_OK);
    assert_string_equal(got.kernel, "gemm");
    /* bad rows are refused */
    r.s = 0;
    assert_int_equal(dmuon_costdb_put_kernel(db, &r), DMUON_EINVAL);
    r.s = 4;
    r.kernel_ms = -1;
    assert_int_equal(dmuon_costdb_put_kernel(db, &r), DMUON_EINVAL);
    dmuon_costdb_close(db);

    char cmd[256];
    snprintf(cmd, sizeof cmd, "sqlite3 %s 'PRAGMA user_version; SELECT count(*) FROM ns_kernel'",
             path);
    FILE *p = popen(cmd, "r");
    int ver = 0, rows = 0;
    assert_int_equal(fscanf(p, "%d %d", &ver, &rows), 2);
    pclose(p);
    assert_int_equal(ver, DMUON_COSTDB_VERSION);
    assert_int_equal(rows, 1);
}

/* A version-1 database (ns_cost only, as the previous dmuon wrote it) is
 * migrated on a writable open and keeps its rows; read-only it still serves
 * ns_cost and answers kernel lookups with a miss. */
static void test_migration(void **state)
{
    char path[128], cmd[1024];
    dmuon_costdb *db;
    dmuon_cost_row cr;
    dmuon_kernel_row kr;
    snprintf(path, sizeof path, "%s/v1.sqlite", tmpdir);
    snprintf(cmd, sizeof cmd,
             "sqlite3 %s \"CREATE TABLE ns_cost (device TEXT NOT NULL, variant TEXT NOT NULL, "
             "dtype TEXT NOT NULL, m INTEGER NOT NULL, n INTEGER NOT NULL, median_ms REAL NOT "
             "NULL, min_ms REAL NOT NULL, max_ms REAL NOT NULL, samples INTEGER NOT NULL, ranks "
             "INTEGER NOT NULL, libraries TEXT NOT NULL, host TEXT NOT NULL, measured_at TEXT NOT "
             "NULL, PRIMARY KEY (device, variant, dtype, m, n)); INSERT INTO ns_cost VALUES "
             "('cpu: t', 'gram-pe5', 'fp32', 4, 8, 1.0, 0.9, 1.1, 3, 1, 'x', 'h', "
             "'2026-01-01T00:00:00Z'); PRAGMA user_version=1;\"",
             path);
    assert_int_equal(system(cmd), 0);

    /* read-only first (an open without create never changes the file):
     * version 1 is still readable, its kernel lookups miss */
    assert_int_equal(dmuon_costdb_open(path, false, 1000, &db), DMUON_OK);
    assert_true(dmuon_costdb_readonly(db));
    assert_int_equal(dmuon_costdb_get(db, "cpu: t", "gram-pe5", "fp32", 4, 8, &cr), DMUON_OK);
    assert_int_equal(dmuon_costdb_get_kernel(db, "cuda: X", "fp32", 4, 8, &kr), DMUON_ENOTFOUND);
    dmuon_costdb_close(db);
    char q[256];
    snprintf(q, sizeof q, "sqlite3 %s 'PRAGMA user_version'", path);
    FILE *pv = popen(q, "r");
    int before = 0;
    assert_int_equal(fscanf(pv, "%d", &before), 1);
    pclose(pv);
    assert_int_equal(before, 1);   /* the read-only open left it as it was */

    /* a writable open migrates it to the current version, rows kept */
    assert_int_equal(dmuon_costdb_open(path, true, 1000, &db), DMUON_OK);
    assert_false(dmuon_costdb_readonly(db));
    assert_int_equal(dmuon_costdb_get(db, "cpu: t", "gram-pe5", "fp32", 4, 8, &cr), DMUON_OK);
    assert_true(cr.median_ms == 1.0);
    assert_int_equal(dmuon_costdb_get_kernel(db, "cuda: X", "fp32", 4, 8, &kr), DMUON_ENOTFOUND);
    memset(&kr, 0, sizeof kr);
    snprintf(kr.device, sizeof kr.device, "cuda: X");
    snprintf(kr.dtype, sizeof kr.dtype, "fp32");
    snprintf(kr.kernel, sizeof kr.kernel, "syrk");
    kr.s = 4;
    kr.k = 8;
    assert_int_equal(dmuon_costdb_put_kernel(db, &kr), DMUON_OK);
    dmuon_costdb_close(db);
    snprintf(cmd, sizeof cmd, "sqlite3 %s 'PRAGMA user_version'", path);
    FILE *p = popen(cmd, "r");
    int ver = 0;
    assert_int_equal(fscanf(p, "%d", &ver), 1);
    pclose(p);
    assert_int_equal(ver, 2);
}

static void test_choose(void **state)
{
    char path[128];
    dmuon_costdb *db;
    ns_sym_cache cache = {0}, cache2 = {0};
    fake f = {0, "tri", 0, 0};
    ns_sym k;
    ns_sym_source src;
    snprintf(path, sizeof path, "%s/choose.sqlite", tmpdir);
    assert_int_equal(dmuon_costdb_open(path, true, 1000, &db), DMUON_OK);

    /* first use: measured and stored */
    assert_int_equal(ns_sym_choose(&cache, db, "cuda: A", "libs", DMUON_BF16, 256, 1536,
                                   fake_measure, &f, &k, &src), DMUON_OK);
    assert_int_equal(k, NS_SYM_TRI);
    assert_int_equal(src, NS_SYM_MEASURED);
    assert_int_equal(f.calls, 1);
    assert_true(f.last_s == 256 && f.last_k == 1536);
    dmuon_kernel_row kr;
    assert_int_equal(dmuon_costdb_get_kernel(db, "cuda: A", "bf16", 256, 1536, &kr), DMUON_OK);
    assert_string_equal(kr.kernel, "tri");
    assert_string_equal(kr.libraries, "libs");
    assert_true(kr.kernel_ms == 1.5 && kr.gemm_ms == 2.5);
    /* second use: from memory, no measurement */
    assert_int_equal(ns_sym_choose(&cache, db, "cuda: A", "libs", DMUON_BF16, 256, 1536,
                                   fake_measure, &f, &k, &src), DMUON_OK);
    assert_int_equal(src, NS_SYM_FROM_MEMORY);
    assert_int_equal(f.calls, 1);
    /* a new context on the same GPU model: from the database */
    assert_int_equal(ns_sym_choose(&cache2, db, "cuda: A", "libs", DMUON_BF16, 256, 1536,
                                   failing_measure, NULL, &k, &src), DMUON_OK);
    assert_int_equal(src, NS_SYM_FROM_DB);
    assert_int_equal(k, NS_SYM_TRI);
    /* another precision, another shape, another GPU model: measured */
    f.answer = "syrk";
    assert_int_equal(ns_sym_choose(&cache, db, "cuda: A", "libs", DMUON_F32, 256, 1536,
                                   fake_measure, &f, &k, &src), DMUON_OK);
    assert_int_equal(k, NS_SYM_SYRK);
    assert_int_equal(src, NS_SYM_MEASURED);
    assert_int_equal(ns_sym_choose(&cache, db, "cuda: A", "libs", DMUON_BF16, 256, 256,
                                   fake_measure, &f, &k, &src), DMUON_OK);
    ns_sym_cache cache_b = {0};   /* a context on another GPU model */
    assert_int_equal(ns_sym_choose(&cache_b, db, "cuda: B", "libs", DMUON_BF16, 256, 1536,
                                   fake_measure, &f, &k, &src), DMUON_OK);
    assert_int_equal(src, NS_SYM_MEASURED);
    assert_int_equal(f.calls, 4);
    /* a measurement failure is returned and nothing is remembered */
    assert_int_equal(ns_sym_choose(&cache, db, "cuda: A", "libs", DMUON_F32, 7, 7,
                                   failing_measure, NULL, &k, &src), DMUON_EDEVICE);
    assert_int_equal(dmuon_costdb_get_kernel(db, "cuda: A", "fp32", 7, 7, &kr), DMUON_ENOTFOUND);
    /* a stored kernel name this build does not know is measured again */
    snprintf(kr.device, sizeof kr.device, "cuda: C");
    snprintf(kr.dtype, sizeof kr.dtype, "fp32");
    snprintf(kr.kernel, sizeof kr.kernel, "future");
    kr.s = 8;
    kr.k = 8;
    assert_int_equal(dmuon_costdb_put_kernel(db, &kr), DMUON_OK);
    f.answer = "gemm";
    assert_int_equal(ns_sym_choose(&cache, db, "cuda: C", "libs", DMUON_F32, 8, 8, fake_measure,
                                   &f, &k, &src), DMUON_OK);
    assert_int_equal(src, NS_SYM_MEASURED);
    assert_int_equal(k, NS_SYM_GEMM);
    assert_int_equal(dmuon_costdb_get_kernel(db, "cuda: C", "fp32", 8, 8, &kr), DMUON_OK);
    assert_string_equal(kr.kernel, "gemm");
    /* a measurement naming an unknown kernel is an error */
    f.answer = "bogus";
    assert_int_equal(ns_sym_choose(&cache, db, "cuda: C", "libs", DMUON_F32, 9, 9, fake_measure,
                                   &f, &k, &src), DMUON_EINVAL);
    /* without a database: memory only */
    ns_sym_cache mem = {0};
    f.answer = "gemm";
    f.calls = 0;
    for (int i = 0; i < 3; i++)
        assert_int_equal(ns_sym_choose(&mem, NULL, "cuda: A", "", DMUON_F32, 64, 64,
                                       fake_measure, &f, &k, NULL), DMUON_OK);
    assert_int_equal(f.calls, 1);
    /* the memory cache keeps working past its size (oldest overwritten) */
    for (int i = 1; i <= NS_SYM_CACHE_SIZE + 5; i++)
        assert_int_equal(ns_sym_choose(&mem, NULL, "cuda: A", "", DMUON_F32, i, 3, fake_measure,
                                       &f, &k, NULL), DMUON_OK);
    assert_int_equal(mem.count, NS_SYM_CACHE_SIZE);
    int before = f.calls;
    assert_int_equal(ns_sym_choose(&mem, NULL, "cuda: A", "", DMUON_F32, NS_SYM_CACHE_SIZE + 5, 3,
                                   fake_measure, &f, &k, &src), DMUON_OK);
    assert_int_equal(src, NS_SYM_FROM_MEMORY);
    assert_int_equal(f.calls, before);
    assert_int_equal(ns_sym_choose(&mem, NULL, "cuda: A", "", DMUON_F32, 0, 3, fake_measure, &f,
                                   &k, NULL), DMUON_EINVAL);
    dmuon_costdb_close(db);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_table),
        cmocka_unit_test(test_migration),
        cmocka_unit_test(test_choose),
    };
    setup(NULL);
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    teardown(NULL);
    return rc;
}
