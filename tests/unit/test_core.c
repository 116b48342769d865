/*
 * test_core.c — libcore foundations: error records, YAML/JSON documents,
 * atomic writes, the cost database's transactions and versioning.
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
#include "dmuon/doc.h"
#include "dmuon/io.h"
#include "dmuon/types.h"

#include "testutil.h"

static int setup(void **state) { return testutil_setup("test"); }
static int teardown(void **state) { return testutil_teardown(); }

static void test_doc_json_and_errors(void **state)
{
    dmuon_doc d;
    const char *json = "{\"a\": 3, \"b\": [1, 2], \"c\": \"x\", \"t\": true}";
    assert_int_equal(dmuon_doc_load_buffer(&d, "x.json", json, strlen(json)), DMUON_OK);
    yaml_node_t *top = dmuon_doc_root(&d);
    int64_t a = 0;
    bool t = false;
    const char *c = NULL;
    assert_int_equal(dmuon_doc_field_int(&d, top, "a", true, &a), DMUON_OK);
    assert_int_equal(a, 3);
    assert_int_equal(dmuon_doc_field_bool(&d, top, "t", true, &t), DMUON_OK);
    assert_true(t);
    assert_int_equal(dmuon_doc_field_str(&d, top, "c", true, &c), DMUON_OK);
    assert_string_equal(c, "x");
    assert_int_equal(dmuon_doc_seq_len(dmuon_doc_get(&d, top, "b")), 2);
    /* wrong form: names file, line and field */
    assert_int_equal(dmuon_doc_field_int(&d, top, "c", true, &a), DMUON_EPARSE);
    assert_non_null(strstr(dmuon_errmsg(), "x.json:1: field 'c': expected an integer"));
    assert_int_equal(dmuon_doc_field_int(&d, top, "zz", true, &a), DMUON_ENOTFOUND);
    assert_non_null(strstr(dmuon_errmsg(), "missing required field 'zz'"));
    assert_int_equal(dmuon_doc_field_int(&d, top, "zz", false, &a), DMUON_OK);
    dmuon_doc_release(&d);

    const char *bad = "{\"a\": [1, 2}";
    assert_int_equal(dmuon_doc_load_buffer(&d, "bad.json", bad, strlen(bad)), DMUON_EPARSE);
    assert_non_null(strstr(dmuon_errmsg(), "bad.json:1:"));
    assert_int_equal(dmuon_doc_load_buffer(&d, "empty.yaml", "", 0), DMUON_EPARSE);

    /* a quoted number is a string, not a number */
    const char *q = "{\"h\": \"1536\", \"b\": \"true\"}";
    assert_int_equal(dmuon_doc_load_buffer(&d, "q.json", q, strlen(q)), DMUON_OK);
    assert_int_equal(dmuon_doc_field_int(&d, dmuon_doc_root(&d), "h", true, &a), DMUON_EPARSE);
    assert_non_null(strstr(dmuon_errmsg(), "field 'h': expected an integer"));
    assert_int_equal(dmuon_doc_field_bool(&d, dmuon_doc_root(&d), "b", true, &t), DMUON_EPARSE);
    dmuon_doc_release(&d);

    /* trailing content after the document is refused, with its line */
    const char *trail = "{\"a\": 1}\n\n{\"a\": 2}";
    assert_int_equal(dmuon_doc_load_buffer(&d, "t.json", trail, strlen(trail)), DMUON_EPARSE);
    assert_non_null(strstr(dmuon_errmsg(), "t.json:"));
    const char *junk = "{\"a\": 1} xyz";
    assert_int_equal(dmuon_doc_load_buffer(&d, "j.json", junk, strlen(junk)), DMUON_EPARSE);
}

static dmuon_rc write_hello(FILE *f, void *ctx) { fputs("hello\n", f); return DMUON_OK; }
static dmuon_rc write_fail(FILE *f, void *ctx)
{
    fputs("partial", f);
    return DMUON_FAIL(DMUON_EINVAL, "refused");
}

static void test_atomic_write(void **state)
{
    char path[128], *buf;
    size_t len;
    snprintf(path, sizeof path, "%s/out.txt", tmpdir);
    assert_int_equal(dmuon_write_atomic(path, write_hello, NULL), DMUON_OK);
    assert_int_equal(dmuon_read_file(path, 1 << 20, &buf, &len), DMUON_OK);
    assert_string_equal(buf, "hello\n");
    free(buf);
    /* a failing writer leaves the old content and no temporary file */
    assert_int_equal(dmuon_write_atomic(path, write_fail, NULL), DMUON_EINVAL);
    assert_int_equal(dmuon_read_file(path, 1 << 20, &buf, &len), DMUON_OK);
    assert_string_equal(buf, "hello\n");
    free(buf);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "ls %s | grep -q tmp", tmpdir);
    assert_int_not_equal(system(cmd), 0);

    /* a link is written through: the link stays, its target changes */
    char link[160], target[160], fifo[160];
    snprintf(target, sizeof target, "%s/target.txt", tmpdir);
    snprintf(link, sizeof link, "%s/link.txt", tmpdir);
    assert_int_equal(symlink(target, link), 0);
    assert_int_equal(dmuon_write_atomic(link, write_hello, NULL), DMUON_OK);
    struct stat st;
    assert_int_equal(lstat(link, &st), 0);
    assert_true(S_ISLNK(st.st_mode));
    assert_int_equal(dmuon_read_file(target, 1 << 20, &buf, &len), DMUON_OK);
    assert_string_equal(buf, "hello\n");
    free(buf);
    /* a FIFO or a directory is never replaced; an empty path is refused */
    snprintf(fifo, sizeof fifo, "%s/fifo", tmpdir);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    assert_int_equal(dmuon_write_atomic(fifo, write_hello, NULL), DMUON_EINVAL);
    assert_non_null(strstr(dmuon_errmsg(), "not a regular file"));
    assert_int_equal(lstat(fifo, &st), 0);
    assert_true(S_ISFIFO(st.st_mode));
    assert_int_equal(dmuon_write_atomic(tmpdir, write_hello, NULL), DMUON_EINVAL);
    assert_int_equal(dmuon_write_atomic("", write_hello, NULL), DMUON_EINVAL);
}

static dmuon_cost_row row(int64_t m, int64_t n, double ms)
{
    dmuon_cost_row r;
    memset(&r, 0, sizeof r);
    snprintf(r.device, sizeof r.device, "test-cpu");
    snprintf(r.variant, sizeof r.variant, "gram-pe5");
    snprintf(r.dtype, sizeof r.dtype, "fp32");
    r.m = m; r.n = n;
    r.median_ms = ms; r.min_ms = ms * 0.9; r.max_ms = ms * 1.1;
    r.samples = 5; r.ranks = 1;
    snprintf(r.libraries, sizeof r.libraries, "test");
    snprintf(r.host, sizeof r.host, "h");
    return r;
}

static int count_rows(const dmuon_cost_row *r, void *ctx) { (*(int *)ctx)++; return 0; }

static void test_costdb(void **state)
{
    char path[128];
    dmuon_costdb *db;
    dmuon_cost_row got;
    snprintf(path, sizeof path, "%s/c.sqlite", tmpdir);
    assert_int_equal(dmuon_costdb_open(path, false, 1000, &db), DMUON_ENOTFOUND);
    assert_int_equal(dmuon_costdb_open(path, true, 1000, &db), DMUON_OK);
    dmuon_cost_row rows[2] = {row(1536, 8960, 3.0), row(256, 1536, 0.5)};
    assert_int_equal(dmuon_costdb_put_rows(db, rows, 2), DMUON_OK);
    assert_int_equal(dmuon_costdb_get(db, "test-cpu", "gram-pe5", "fp32", 1536, 8960, &got), DMUON_OK);
    assert_true(got.median_ms == 3.0);
    assert_true(got.measured_at[0] != '\0');
    /* replace keeps one row per key */
    rows[0].median_ms = 4.0;
    assert_int_equal(dmuon_costdb_put_rows(db, rows, 1), DMUON_OK);
    assert_int_equal(dmuon_costdb_get(db, "test-cpu", "gram-pe5", "fp32", 1536, 8960, &got), DMUON_OK);
    assert_true(got.median_ms == 4.0);
    /* a bad row fails the whole batch: nothing of it is stored */
    dmuon_cost_row batch[2] = {row(7, 7, 1.0), row(0, 7, 1.0)};
    assert_int_equal(dmuon_costdb_put_rows(db, batch, 2), DMUON_EINVAL);
    assert_int_equal(dmuon_costdb_get(db, "test-cpu", "gram-pe5", "fp32", 7, 7, &got), DMUON_ENOTFOUND);
    int n = 0;
    assert_int_equal(dmuon_costdb_each(db, NULL, count_rows, &n), DMUON_OK);
    assert_int_equal(n, 2);
    assert_int_equal(dmuon_costdb_check(db), DMUON_OK);
    dmuon_costdb_close(db);

    /* a newer schema version is refused */
    char cmd[256];
    snprintf(cmd, sizeof cmd, "sqlite3 %s 'PRAGMA user_version=99'", path);
    assert_int_equal(system(cmd), 0);
    assert_int_equal(dmuon_costdb_open(path, false, 1000, &db), DMUON_EVERSION);
    assert_non_null(strstr(dmuon_errmsg(), "newer"));
    /* a non-database file is bad input (as a foreign SQLite database is), named */
    snprintf(path, sizeof path, "%s/junk.sqlite", tmpdir);
    FILE *f = fopen(path, "w");
    fputs("this is not a database, just some text that is long enough to matter\n", f);
    fclose(f);
    assert_int_equal(dmuon_costdb_open(path, false, 1000, &db), DMUON_EINVAL);
    assert_non_null(strstr(dmuon_errmsg(), "junk.sqlite"));
    assert_non_null(strstr(dmuon_errmsg(), "is not a SQLite database"));
    /* an empty path, a directory, a missing directory */
    assert_int_equal(dmuon_costdb_open("", true, 1000, &db), DMUON_EINVAL);
    assert_int_equal(dmuon_costdb_open(tmpdir, true, 1000, &db), DMUON_EINVAL);
    assert_non_null(strstr(dmuon_errmsg(), "not a regular file"));
    snprintf(path, sizeof path, "%s/no/such/dir/c.sqlite", tmpdir);
    assert_int_equal(dmuon_costdb_open(path, true, 1000, &db), DMUON_EIO);
    assert_non_null(strstr(dmuon_errmsg(), "directory"));
    /* a database whose ns_cost table has another layout fails at open */
    snprintf(path, sizeof path, "%s/foreign.sqlite", tmpdir);
    snprintf(cmd, sizeof cmd, "sqlite3 %s 'CREATE TABLE ns_cost (x INTEGER); PRAGMA user_version=1'", path);
    assert_int_equal(system(cmd), 0);
    assert_int_equal(dmuon_costdb_open(path, false, 1000, &db), DMUON_EDB);
    assert_non_null(strstr(dmuon_errmsg(), "layout"));
}

static void test_dtype_digest(void **state)
{
    dmuon_dtype t;
    assert_int_equal(dmuon_dtype_parse("BF16", &t), DMUON_OK);
    assert_int_equal(t, DMUON_BF16);
    assert_int_equal(dmuon_dtype_size(t), 2);
    assert_int_equal(dmuon_dtype_parse("q4", &t), DMUON_EINVAL);
    /* FNV-1a 64 of "a" is 0xaf63dc4c8601ec8c (published test vector) */
    assert_true(dmuon_digest("a", 1, DMUON_DIGEST_SEED) == UINT64_C(0xaf63dc4c8601ec8c));
}

static void test_size_parse(void **state)
{
    static const struct { const char *text; int64_t bytes; } good[] = {
        {"0", 0}, {"4096", 4096}, {"16K", 16384}, {"16kb", 16384}, {"16KiB", 16384},
        {"1M", 1048576}, {"1M+1", 1048577}, {"2g", INT64_C(2) << 30}, {"1TiB", INT64_C(1) << 40},
        {"8388607T", INT64_C(8388607) << 40},
    };
    for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
        int64_t v = -1;
        assert_int_equal(dmuon_size_parse(good[i].text, &v), DMUON_OK);
        assert_true(v == good[i].bytes);
    }
    static const char *const bad[] = {"", "-1", "1.5M", "1 M", "1Q", "M", "1M+", "1M+-1",
                                      "+1", "8388608T", "9223372036854775807+1", NULL};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        int64_t v = 7;
        assert_int_equal(dmuon_size_parse(bad[i], &v), DMUON_EINVAL);
        assert_true(v == 7);
        assert_non_null(strstr(dmuon_errmsg(), "16KiB"));
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_doc_json_and_errors),
        cmocka_unit_test(test_atomic_write),
        cmocka_unit_test_setup_teardown(test_costdb, setup, teardown),
        cmocka_unit_test(test_dtype_digest),
        cmocka_unit_test(test_size_parse),
    };
    int rc;
    setup(NULL);
    rc = cmocka_run_group_tests(tests, NULL, NULL);
    teardown(NULL);
    return rc;
}
