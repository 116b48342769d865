/*
 * costdb.c — the SQLite cost table (see dmuon/costdb.h, db/schema.sql).
 *
 * Invariants: every write is one transaction (BEGIN IMMEDIATE ... COMMIT, or
 * ROLLBACK on any failure); the schema text is db/schema.sql compiled in;
 * a database whose user_version is newer than DMUON_COSTDB_VERSION is never
 * written to.
 */
#include "dmuon/costdb.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

struct dmuon_costdb {
    sqlite3 *db;
    char *path;
    bool readonly;
    int version;          /* user_version after open (read-only: may be older) */
};

#define COLUMNS "device, variant, dtype, m, n, median_ms, min_ms, max_ms, samples, ranks, " \
                "libraries, host, measured_at"

static const char schema_sql[] =
#include "schema_sql.h"
    ;

/* The default location, found once: see dmuon_costdb_default_path. */
static char default_path[4096];
static pthread_once_t default_once = PTHREAD_ONCE_INIT;

static void find_default_path(void)
{
    char exe[4096], probe[4200];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = '\0';
        /* a build tree: the executable sits in bin/ (or build/san/bin/) of
         * the folder that holds db/schema.sql */
        for (int up = 0; up < 3; up++) {
            char *slash = strrchr(exe, '/');
            if (!slash || slash == exe)
                break;
            *slash = '\0';
            snprintf(probe, sizeof probe, "%s/../db/schema.sql", exe);
            if (access(probe, R_OK) == 0) {
                char *root = realpath(probe, NULL);
                if (root && strlen(root) > strlen("schema.sql")) {
                    root[strlen(root) - strlen("schema.sql")] = '\0';
                    snprintf(default_path, sizeof default_path, "%sdmuon.sqlite", root);
                    free(root);
                    return;
                }
                free(root);
            }
        }
    }
    const char *xdg = getenv("XDG_DATA_HOME"), *home = getenv("HOME");
    if (xdg && xdg[0] == '/')
        snprintf(default_path, sizeof default_path, "%s/dmuon/dmuon.sqlite", xdg);
    else if (home && *home)
        snprintf(default_path, sizeof default_path, "%s/.local/share/dmuon/dmuon.sqlite", home);
    else
        snprintf(default_path, sizeof default_path, "dmuon.sqlite");
}

const char *dmuon_costdb_default_path(void)
{
    const char *env = getenv("DMUON_DB");
    if (env && *env)
        return env;
    pthread_once(&default_once, find_default_path);
    return default_path;
}

/* mkdir -p of the folder that holds path (for the default location only). */
static void make_parent_dirs(const char *path)
{
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash || slash == dir)
        return;
    *slash = '\0';
    for (char *p = dir + 1; *p; p++)
        if (*p == '/') {
            *p = '\0';
            mkdir(dir, 0755);
            *p = '/';
        }
    mkdir(dir, 0755);
}

static dmuon_rc db_fail(dmuon_costdb *c, const char *what)
{
    /* a file that is not SQLite at all is bad input, as another program's
     * SQLite database is (exit 2), not a runtime error */
    if (sqlite3_errcode(c->db) == SQLITE_NOTADB)
        return DMUON_FAIL(DMUON_EINVAL, "'%s' is not a SQLite database (%s): dmuon leaves it "
                          "unchanged; pass a dmuon cost database or a new file with --db",
                          c->path, sqlite3_errmsg(c->db));
    return DMUON_FAIL(DMUON_EDB, "cost database '%s': %s: %s", c->path, what,
                      sqlite3_errmsg(c->db));
}

static dmuon_rc exec(dmuon_costdb *c, const char *sql, const char *what)
{
    if (sqlite3_exec(c->db, sql, NULL, NULL, NULL) != SQLITE_OK)
        return db_fail(c, what);
    return DMUON_OK;
}

static dmuon_rc user_version(dmuon_costdb *c, int *v)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(c->db, "PRAGMA user_version", -1, &st, NULL) != SQLITE_OK)
        return db_fail(c, "cannot read the schema version (is it a SQLite database?)");
    if (sqlite3_step(st) != SQLITE_ROW) {
        sqlite3_finalize(st);
        return db_fail(c, "cannot read the schema version");
    }
    *v = sqlite3_column_int(st, 0);
    sqlite3_finalize(st);
    return DMUON_OK;
}

/* Switches to WAL.  Another process opening the same new database at the
 * same moment can make this answer SQLITE_BUSY without consulting the busy
 * handler, so it is retried until busy_ms have passed. */
static dmuon_rc set_wal(dmuon_costdb *c, int busy_ms)
{
    for (int waited = 0;; waited += 10) {
        int r = sqlite3_exec(c->db, "PRAGMA journal_mode=WAL", NULL, NULL, NULL);
        if (r == SQLITE_OK)
            return DMUON_OK;
        if ((r != SQLITE_BUSY && r != SQLITE_LOCKED) || waited >= busy_ms)
            return db_fail(c, "not a usable SQLite database");
        usleep(10000);
    }
}

/* A database at user_version 0 that already holds tables belongs to another
 * program: dmuon changes nothing in it (not even the journal mode). */
static dmuon_rc refuse_foreign(dmuon_costdb *c)
{
    int v = 0, tables = 0;
    sqlite3_stmt *st;
    dmuon_rc rc;
    /* one read transaction: another process creating the schema at this
     * moment is seen either entirely or not at all */
    DMUON_TRY(exec(c, "BEGIN", "cannot start a read transaction"));
    DMUON_TRY_GOTO(rc, user_version(c, &v), out);
    if (v == 0) {
        if (sqlite3_prepare_v2(c->db, "SELECT count(*) FROM sqlite_master", -1, &st, NULL) !=
            SQLITE_OK) {
            rc = db_fail(c, "not a usable SQLite database");
            goto out;
        }
        if (sqlite3_step(st) == SQLITE_ROW)
            tables = sqlite3_column_int(st, 0);
        sqlite3_finalize(st);
    }
out:
    sqlite3_exec(c->db, "COMMIT", NULL, NULL, NULL);
    if (rc != DMUON_OK)
        return rc;
    if (tables > 0)
        return DMUON_FAIL(DMUON_EINVAL, "'%s' is a SQLite database of another program (%d "
                          "table%s without dmuon's schema version): dmuon leaves it unchanged; "
                          "pass a dmuon cost database or a new file with --db", c->path, tables,
                          tables == 1 ? "" : "s");
    return DMUON_OK;
}

/* Creates the schema in a fresh database or migrates an older one, in one
 * transaction. */
static dmuon_rc migrate(dmuon_costdb *c)
{
    int v = 0;
    dmuon_rc rc;
    DMUON_TRY(user_version(c, &v));
    if (v == DMUON_COSTDB_VERSION)
        return DMUON_OK;
    if (v > DMUON_COSTDB_VERSION)
        return DMUON_FAIL(DMUON_EVERSION, "cost database '%s' has schema version %d, newer than "
                          "this dmuon's %d: upgrade dmuon or use another --db", c->path, v,
                          DMUON_COSTDB_VERSION);
    DMUON_TRY(exec(c, "BEGIN IMMEDIATE", "cannot start the schema transaction"));
    /* another process may have created the schema while this one waited */
    DMUON_TRY_GOTO(rc, user_version(c, &v), rollback);
    if (v == DMUON_COSTDB_VERSION)
        return exec(c, "COMMIT", "cannot commit");
    /* Any older version (0: a fresh database): the schema's statements are
     * idempotent, so running them creates what is missing (1 -> 2: the
     * ns_kernel table) and sets the version.  A version that changes an
     * existing table adds its ALTERs here, guarded by v. */
    DMUON_TRY_GOTO(rc, exec(c, schema_sql, v ? "cannot migrate the schema" : "cannot create the schema"),
                   rollback);
    DMUON_TRY_GOTO(rc, exec(c, "COMMIT", "cannot commit the schema"), rollback);
    return DMUON_OK;
rollback:
    sqlite3_exec(c->db, "ROLLBACK", NULL, NULL, NULL);
    return rc;
}

/* True if the directory that holds path can take new files (SQLite's WAL
 * and shared-memory files live next to the database). */
static bool dir_writable(const char *path)
{
    const char *slash = strrchr(path, '/');
    if (!slash)
        return access(".", W_OK) == 0;
    if (slash == path)
        return access("/", W_OK) == 0;
    char dir[4096];
    snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    return access(dir, W_OK) == 0;
}

/* "file:PATH?mode=ro[&immutable=1]" with PATH percent-encoded where URI
 * syntax needs it (%, ?, #). */
static dmuon_rc readonly_uri(const char *path, bool immutable, char **out)
{
    size_t len = strlen(path);
    char *u = malloc(3 * len + 40), *p = u;
    if (!u)
        return DMUON_FAIL(DMUON_ENOMEM, "out of memory opening '%s'", path);
    p += sprintf(p, "file:");
    for (const char *q = path; *q; q++)
        p += (*q == '%' || *q == '?' || *q == '#') ? sprintf(p, "%%%02X", (unsigned char)*q)
                                                   : sprintf(p, "%c", *q);
    sprintf(p, "?mode=ro%s", immutable ? "&immutable=1" : "");
    *out = u;
    return DMUON_OK;
}

/* The ns_cost table has the columns this build reads and writes. */
static dmuon_rc check_layout(dmuon_costdb *c)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(c->db, "SELECT " COLUMNS " FROM ns_cost LIMIT 0", -1, &st, NULL) !=
        SQLITE_OK)
        return DMUON_FAIL(DMUON_EDB, "cost database '%s': table ns_cost does not have the "
                          "layout of db/schema.sql version %d: %s", c->path,
                          DMUON_COSTDB_VERSION, sqlite3_errmsg(c->db));
    sqlite3_finalize(st);
    return DMUON_OK;
}

/* After a failed first open of a database this call created (a full disk, a
 * foreign lock): removes the file when it is still empty and no journal of
 * another process's transaction sits beside it, so a failure leaves no
 * 0-byte database behind.  A process creating the same database at the same
 * moment has written its schema (file or journal not empty) and keeps it. */
static void remove_if_unused(const char *path)
{
    struct stat st;
    static const char *const side[] = {"-wal", "-journal"};
    char buf[4096];
    if (stat(path, &st) != 0 || st.st_size != 0)
        return;
    for (size_t i = 0; i < sizeof side / sizeof *side; i++) {
        if (snprintf(buf, sizeof buf, "%s%s", path, side[i]) >= (int)sizeof buf)
            return;
        if (stat(buf, &st) == 0 && st.st_size != 0)
            return;
    }
    for (size_t i = 0; i < sizeof side / sizeof *side; i++) {
        snprintf(buf, sizeof buf, "%s%s", path, side[i]);
        unlink(buf);
    }
    snprintf(buf, sizeof buf, "%s-shm", path);
    unlink(buf);
    unlink(path);
}

dmuon_rc dmuon_costdb_open(const char *path, bool create, int busy_ms, dmuon_costdb **out)
{
    dmuon_costdb *c;
    dmuon_rc rc = DMUON_OK;
    struct stat st;
    bool readonly = false, created = false;
    *out = NULL;
    if (!path || !*path)
        return DMUON_FAIL(DMUON_EINVAL, "empty cost database path (expected a file name for --db)");
    if (create && !strcmp(path, dmuon_costdb_default_path()))
        make_parent_dirs(path);   /* the default folder may not exist yet */
    if (stat(path, &st) == 0) {
        if (!S_ISREG(st.st_mode))
            return DMUON_FAIL(DMUON_EINVAL, "cost database '%s' is not a regular file", path);
        if (!create && st.st_size == 0)
            return DMUON_FAIL(DMUON_EINVAL, "cost database '%s' is an empty file, not a dmuon "
                              "cost database (dmuon leaves it unchanged; dmuon-probe creates "
                              "one)", path);
        /* A database the caller may not write (a shared, read-only copy) is
         * opened read-only: lookups work, writes fail with a clear message.
         * Without create (lists, checks, lookups) every database is opened
         * read-only: reading never changes a file. */
        readonly = !create || access(path, W_OK) != 0 || !dir_writable(path);
    } else if (!create) {
        return DMUON_FAIL(DMUON_ENOTFOUND, "cost database '%s' does not exist (run dmuon-probe "
                          "to measure, or pass --db)", path);
    } else if (!dir_writable(path)) {
        return DMUON_FAIL(DMUON_EIO, "cannot create cost database '%s': its directory does not "
                          "exist or is not writable", path);
    }
    created = !readonly && stat(path, &st) != 0;
    c = calloc(1, sizeof *c);
    if (!c || !(c->path = strdup(path))) {
        free(c);
        return DMUON_FAIL(DMUON_ENOMEM, "out of memory opening '%s'", path);
    }
    c->readonly = readonly;
    int flags = readonly ? SQLITE_OPEN_READONLY | SQLITE_OPEN_URI
                         : SQLITE_OPEN_READWRITE | (create ? SQLITE_OPEN_CREATE : 0);
    char *uri = NULL;
    if (readonly) {
        /* Without a writable directory SQLite cannot create the WAL's
         * shared-memory file; such a database is opened as immutable. */
        DMUON_TRY_GOTO(rc, readonly_uri(path, !dir_writable(path), &uri), fail);
    }
    int orc = sqlite3_open_v2(uri ? uri : path, &c->db, flags, NULL);
    free(uri);
    if (orc != SQLITE_OK) {
        rc = DMUON_FAIL(DMUON_EDB, "cannot open cost database '%s': %s", path,
                        c->db ? sqlite3_errmsg(c->db) : "out of memory");
        goto fail;
    }
    sqlite3_busy_timeout(c->db, busy_ms > 0 ? busy_ms : 10000);
    if (readonly) {
        int v = 0;
        DMUON_TRY_GOTO(rc, user_version(c, &v), fail);
        if (v == 0) {
            rc = DMUON_FAIL(DMUON_EINVAL, "'%s' is not a dmuon cost database (a SQLite file "
                            "without dmuon's schema; dmuon leaves it unchanged): pass the "
                            "database dmuon-probe wrote with --db", path);
            goto fail;
        }
        c->version = v;
        /* version 1 lacks only ns_kernel: its lookups miss */
        if (v < 1 || v > DMUON_COSTDB_VERSION) {
            rc = DMUON_FAIL(v > DMUON_COSTDB_VERSION ? DMUON_EVERSION : DMUON_EDB,
                            "cost database '%s' (opened read-only) has schema version %d, %s "
                            "this dmuon's %d%s", path, v, v > DMUON_COSTDB_VERSION ? "newer than"
                            : "older than", DMUON_COSTDB_VERSION, v > DMUON_COSTDB_VERSION ?
                            ": upgrade dmuon or use another --db" : ": run dmuon-probe on it "
                            "once to migrate it");
            goto fail;
        }
    } else {
        DMUON_TRY_GOTO(rc, refuse_foreign(c), fail);
        DMUON_TRY_GOTO(rc, set_wal(c, busy_ms > 0 ? busy_ms : 10000), fail);
        DMUON_TRY_GOTO(rc, exec(c, "PRAGMA synchronous=NORMAL", "cannot set synchronous"), fail);
        DMUON_TRY_GOTO(rc, migrate(c), fail);
        c->version = DMUON_COSTDB_VERSION;
    }
    DMUON_TRY_GOTO(rc, check_layout(c), fail);
    *out = c;
    return DMUON_OK;
fail:
    dmuon_costdb_close(c);
    if (created)
        remove_if_unused(path);
    return rc;
}

bool dmuon_costdb_readonly(const dmuon_costdb *c) { return c->readonly; }

void dmuon_costdb_close(dmuon_costdb *c)
{
    if (!c)
        return;
    sqlite3_close(c->db);
    free(c->path);
    free(c);
}

static dmuon_rc check_row(const dmuon_cost_row *r)
{
    if (r->m <= 0 || r->n <= 0 || r->samples <= 0 || r->ranks <= 0 || !isfinite(r->median_ms) ||
        !isfinite(r->min_ms) || !isfinite(r->max_ms) || r->median_ms < 0 || r->min_ms < 0 ||
        r->max_ms < 0 || !r->device[0] || !r->variant[0] || !r->dtype[0])
        return DMUON_FAIL(DMUON_EINVAL, "cost row %lldx%lld for '%s': expected positive shape, "
                          "samples and ranks and finite non-negative times",
                          (long long)r->m, (long long)r->n, r->device);
    return DMUON_OK;
}

dmuon_rc dmuon_costdb_put_rows(dmuon_costdb *c, const dmuon_cost_row *rows, size_t n)
{
    static const char sql[] =
        "INSERT OR REPLACE INTO ns_cost (device, variant, dtype, m, n, median_ms, min_ms, max_ms,"
        " samples, ranks, libraries, host, measured_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)";
    sqlite3_stmt *st = NULL;
    dmuon_rc rc = DMUON_OK;
    char now[32];
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(now, sizeof now, "%Y-%m-%dT%H:%M:%SZ", &tm);

    for (size_t i = 0; i < n; i++)
        DMUON_TRY(check_row(&rows[i]));
    if (c->readonly)
        return DMUON_FAIL(DMUON_EIO, "cost database '%s' is read-only (file or directory not "
                          "writable): cannot store %zu row(s)", c->path, n);
    DMUON_TRY(exec(c, "BEGIN IMMEDIATE", "cannot start a write transaction"));
    if (sqlite3_prepare_v2(c->db, sql, -1, &st, NULL) != SQLITE_OK) {
        rc = db_fail(c, "cannot prepare the insert");
        goto rollback;
    }
    for (size_t i = 0; i < n; i++) {
        const dmuon_cost_row *r = &rows[i];
        sqlite3_reset(st);
        sqlite3_bind_text(st, 1, r->device, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 2, r->variant, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 3, r->dtype, -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 4, r->m);
        sqlite3_bind_int64(st, 5, r->n);
        sqlite3_bind_double(st, 6, r->median_ms);
        sqlite3_bind_double(st, 7, r->min_ms);
        sqlite3_bind_double(st, 8, r->max_ms);
        sqlite3_bind_int64(st, 9, r->samples);
        sqlite3_bind_int64(st, 10, r->ranks);
        sqlite3_bind_text(st, 11, r->libraries, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 12, r->host, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 13, r->measured_at[0] ? r->measured_at : now, -1, SQLITE_STATIC);
        if (sqlite3_step(st) != SQLITE_DONE) {
            rc = db_fail(c, "cannot store a row");
            goto rollback;
        }
    }
    sqlite3_finalize(st);
    st = NULL;
    DMUON_TRY_GOTO(rc, exec(c, "COMMIT", "cannot commit"), rollback);
    return DMUON_OK;
rollback:
    sqlite3_finalize(st);
    sqlite3_exec(c->db, "ROLLBACK", NULL, NULL, NULL);
    return rc;
}

static void copy_text(char *dst, size_t cap, const unsigned char *src)
{
    snprintf(dst, cap, "%s", src ? (const char *)src : "");
}

static void read_row(sqlite3_stmt *st, dmuon_cost_row *r)
{
    memset(r, 0, sizeof *r);
    copy_text(r->device, sizeof r->device, sqlite3_column_text(st, 0));
    copy_text(r->variant, sizeof r->variant, sqlite3_column_text(st, 1));
    copy_text(r->dtype, sizeof r->dtype, sqlite3_column_text(st, 2));
    r->m = sqlite3_column_int64(st, 3);
    r->n = sqlite3_column_int64(st, 4);
    r->median_ms = sqlite3_column_double(st, 5);
    r->min_ms = sqlite3_column_double(st, 6);
    r->max_ms = sqlite3_column_double(st, 7);
    r->samples = sqlite3_column_int64(st, 8);
    r->ranks = sqlite3_column_int64(st, 9);
    copy_text(r->libraries, sizeof r->libraries, sqlite3_column_text(st, 10));
    copy_text(r->host, sizeof r->host, sqlite3_column_text(st, 11));
    copy_text(r->measured_at, sizeof r->measured_at, sqlite3_column_text(st, 12));
}


dmuon_rc dmuon_costdb_get(dmuon_costdb *c, const char *device, const char *variant,
                          const char *dtype, int64_t m, int64_t n, dmuon_cost_row *row)
{
    static const char sql[] = "SELECT " COLUMNS " FROM ns_cost WHERE device=? AND variant=? "
                              "AND dtype=? AND m=? AND n=?";
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(c->db, sql, -1, &st, NULL) != SQLITE_OK)
        return db_fail(c, "cannot prepare a lookup");
    sqlite3_bind_text(st, 1, device, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, variant, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 3, dtype, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 4, m);
    sqlite3_bind_int64(st, 5, n);
    int s = sqlite3_step(st);
    if (s == SQLITE_ROW) {
        read_row(st, row);
        sqlite3_finalize(st);
        return DMUON_OK;
    }
    sqlite3_finalize(st);
    if (s == SQLITE_DONE)
        return DMUON_ENOTFOUND;
    return db_fail(c, "lookup failed");
}

dmuon_rc dmuon_costdb_each(dmuon_costdb *c, const char *device,
                           int (*fn)(const dmuon_cost_row *row, void *ctx), void *ctx)
{
    const char *sql = device
        ? "SELECT " COLUMNS " FROM ns_cost WHERE device=? ORDER BY device, variant, dtype, m, n"
        : "SELECT " COLUMNS " FROM ns_cost ORDER BY device, variant, dtype, m, n";
    sqlite3_stmt *st;
    dmuon_cost_row r;
    int s;
    if (sqlite3_prepare_v2(c->db, sql, -1, &st, NULL) != SQLITE_OK)
        return db_fail(c, "cannot prepare the listing");
    if (device)
        sqlite3_bind_text(st, 1, device, -1, SQLITE_STATIC);
    while ((s = sqlite3_step(st)) == SQLITE_ROW) {
        read_row(st, &r);
        if (fn(&r, ctx))
            break;
    }
    sqlite3_finalize(st);
    if (s != SQLITE_ROW && s != SQLITE_DONE)
        return db_fail(c, "listing failed");
    return DMUON_OK;
}

/* ------------------------------------------------- NS kernel choices -- */

#define KCOLUMNS "device, dtype, s, k, kernel, kernel_ms, gemm_ms, max_diff, libraries, measured_at"

dmuon_rc dmuon_costdb_put_kernel(dmuon_costdb *c, const dmuon_kernel_row *r)
{
    static const char sql[] = "INSERT OR REPLACE INTO ns_kernel (" KCOLUMNS
                              ") VALUES (?,?,?,?,?,?,?,?,?,?)";
    sqlite3_stmt *st = NULL;
    dmuon_rc rc = DMUON_OK;
    char now[32];
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(now, sizeof now, "%Y-%m-%dT%H:%M:%SZ", &tm);
    if (r->s <= 0 || r->k <= 0 || !r->device[0] || !r->dtype[0] || !r->kernel[0] ||
        !isfinite(r->kernel_ms) || !isfinite(r->gemm_ms) || !isfinite(r->max_diff) ||
        r->kernel_ms < 0 || r->gemm_ms < 0 || r->max_diff < 0)
        return DMUON_FAIL(DMUON_EINVAL, "kernel choice %lldx%lld for '%s': expected positive "
                          "shape, names and finite non-negative figures",
                          (long long)r->s, (long long)r->k, r->device);
    if (c->readonly)
        return DMUON_FAIL(DMUON_EIO, "cost database '%s' is read-only (file or directory not "
                          "writable): cannot store a kernel choice", c->path);
    DMUON_TRY(exec(c, "BEGIN IMMEDIATE", "cannot start a write transaction"));
    if (sqlite3_prepare_v2(c->db, sql, -1, &st, NULL) != SQLITE_OK) {
        rc = db_fail(c, "cannot prepare the kernel insert");
        goto rollback;
    }
    sqlite3_bind_text(st, 1, r->device, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, r->dtype, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 3, r->s);
    sqlite3_bind_int64(st, 4, r->k);
    sqlite3_bind_text(st, 5, r->kernel, -1, SQLITE_STATIC);
    sqlite3_bind_double(st, 6, r->kernel_ms);
    sqlite3_bind_double(st, 7, r->gemm_ms);
    sqlite3_bind_double(st, 8, r->max_diff);
    sqlite3_bind_text(st, 9, r->libraries, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 10, r->measured_at[0] ? r->measured_at : now, -1, SQLITE_STATIC);
    if (sqlite3_step(st) != SQLITE_DONE) {
        rc = db_fail(c, "cannot store a kernel choice");
        goto rollback;
    }
    sqlite3_finalize(st);
    st = NULL;
    DMUON_TRY_GOTO(rc, exec(c, "COMMIT", "cannot commit"), rollback);
    return DMUON_OK;
rollback:
    sqlite3_finalize(st);
    sqlite3_exec(c->db, "ROLLBACK", NULL, NULL, NULL);
    return rc;
}

dmuon_rc dmuon_costdb_get_kernel(dmuon_costdb *c, const char *device, const char *dtype,
                                 int64_t s, int64_t k, dmuon_kernel_row *r)
{
    static const char sql[] = "SELECT " KCOLUMNS " FROM ns_kernel WHERE device=? AND dtype=? "
                              "AND s=? AND k=?";
    sqlite3_stmt *st;
    if (c->version < 2)
        return DMUON_ENOTFOUND;
    if (sqlite3_prepare_v2(c->db, sql, -1, &st, NULL) != SQLITE_OK)
        return db_fail(c, "cannot prepare a kernel lookup");
    sqlite3_bind_text(st, 1, device, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, dtype, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 3, s);
    sqlite3_bind_int64(st, 4, k);
    int step = sqlite3_step(st);
    if (step == SQLITE_ROW) {
        memset(r, 0, sizeof *r);
        copy_text(r->device, sizeof r->device, sqlite3_column_text(st, 0));
        copy_text(r->dtype, sizeof r->dtype, sqlite3_column_text(st, 1));
        r->s = sqlite3_column_int64(st, 2);
        r->k = sqlite3_column_int64(st, 3);
        copy_text(r->kernel, sizeof r->kernel, sqlite3_column_text(st, 4));
        r->kernel_ms = sqlite3_column_double(st, 5);
        r->gemm_ms = sqlite3_column_double(st, 6);
        r->max_diff = sqlite3_column_double(st, 7);
        copy_text(r->libraries, sizeof r->libraries, sqlite3_column_text(st, 8));
        copy_text(r->measured_at, sizeof r->measured_at, sqlite3_column_text(st, 9));
    }
    sqlite3_finalize(st);
    if (step == SQLITE_ROW)
        return DMUON_OK;
    if (step == SQLITE_DONE)
        return DMUON_ENOTFOUND;
    return db_fail(c, "kernel lookup failed");
}

dmuon_rc dmuon_costdb_check(dmuon_costdb *c)
{
    sqlite3_stmt *st;
    dmuon_rc rc = DMUON_OK;
    if (sqlite3_prepare_v2(c->db, "PRAGMA integrity_check", -1, &st, NULL) != SQLITE_OK)
        return db_fail(c, "cannot run integrity_check");
    if (sqlite3_step(st) != SQLITE_ROW)
        rc = db_fail(c, "integrity_check gave no answer");
    else if (strcmp((const char *)sqlite3_column_text(st, 0), "ok") != 0)
        rc = DMUON_FAIL(DMUON_ECHECK, "cost database '%s' fails integrity_check: %s", c->path,
                        (const char *)sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
    return rc;
}
