/*
 * dmuon/costdb.h — the SQLite cost table of measured Newton–Schulz times.
 *
 * Schema: db/schema.sql (version DMUON_COSTDB_VERSION, PRAGMA user_version).
 * The database runs in WAL mode with a busy timeout, so a reader and several
 * probes may use it at once.  dmuon_costdb_put_rows writes all rows of one
 * run in a single transaction that replaces rows with the same key; a process
 * killed mid-run leaves the database as it was before the run.
 * Default location (never relative to the working directory): $DMUON_DB,
 * else db/dmuon.sqlite of the build tree the program runs from (the folder
 * up to three levels above the executable that holds db/schema.sql), else
 * $XDG_DATA_HOME/dmuon/dmuon.sqlite, else ~/.local/share/dmuon/dmuon.sqlite.
 */
#ifndef DMUON_COSTDB_H
#define DMUON_COSTDB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dmuon/rc.h"

/* Schema versions: 1 ns_cost; 2 adds ns_kernel (read-only databases of
 * version 1 still serve ns_cost lookups; their kernel lookups miss). */
#define DMUON_COSTDB_VERSION 2

typedef struct dmuon_costdb dmuon_costdb;

/* One measured shape.  m x n is rows x columns of the matrix as stored
 * (PyTorch [out, in]); times are milliseconds per NS call. */
typedef struct {
    char device[128];
    char variant[32];
    char dtype[8];
    int64_t m, n;
    double median_ms, min_ms, max_ms;
    int64_t samples;
    int64_t ranks;
    char libraries[128];
    char host[64];
    char measured_at[32];   /* filled by put_rows when empty */
} dmuon_cost_row;

/* Default database path (see the top of this file); absolute unless HOME
 * is unset too.  Never NULL; the string lives as long as the process
 * (or, for $DMUON_DB, as the environment entry).  Thread-safe. */
const char *dmuon_costdb_default_path(void);

/* Opens (and with create=true creates) the database at path, enables WAL and
 * a busy timeout of busy_ms milliseconds, creates or migrates the schema and
 * checks the ns_cost table's layout.  A database whose file or directory the
 * caller cannot write is opened read-only: lookups work, put_rows fails.
 * With create=false the file is always opened read-only and never changed
 * (no WAL switch, no schema): an empty file or a SQLite database without
 * dmuon's schema is DMUON_EINVAL.  With create=true a database that holds
 * another program's tables is DMUON_EINVAL too, and nothing is added to it;
 * so is, either way, a file that is not a SQLite database at all.
 * Creating the default database creates its folder.
 * Errors: DMUON_EINVAL (empty path, or path is a directory or other
 * non-regular file, a file that is not SQLite, a foreign SQLite database), DMUON_ENOTFOUND (file missing and !create), DMUON_EIO
 * (create asked but the directory is missing or not writable),
 * DMUON_EVERSION (user_version newer than this build's; message says to
 * upgrade dmuon), DMUON_EDB (corrupt, foreign table layout,
 * read-only with an older schema, locked past the timeout; message names
 * path). */
dmuon_rc dmuon_costdb_open(const char *path, bool create, int busy_ms, dmuon_costdb **out);

/* True if the database was opened read-only (see dmuon_costdb_open). */
bool dmuon_costdb_readonly(const dmuon_costdb *db);

/* Closes the database; accepts NULL. */
void dmuon_costdb_close(dmuon_costdb *db);

/* Inserts or replaces n rows in one transaction (all or nothing).  Errors:
 * DMUON_EINVAL (a row with m, n, samples or ranks <= 0, negative or
 * non-finite time), DMUON_EIO (database opened read-only), DMUON_EDB. */
dmuon_rc dmuon_costdb_put_rows(dmuon_costdb *db, const dmuon_cost_row *rows, size_t n);

/* Looks up one shape.  Returns DMUON_OK and fills *row, or DMUON_ENOTFOUND
 * (no message recorded: a miss is an ordinary answer), or DMUON_EDB. */
dmuon_rc dmuon_costdb_get(dmuon_costdb *db, const char *device, const char *variant,
                          const char *dtype, int64_t m, int64_t n, dmuon_cost_row *row);

/* Calls fn for every row (ordered by device, variant, dtype, m, n), optionally
 * restricted to device (NULL: all).  Stops early if fn returns non-zero.
 * Errors: DMUON_EDB. */
dmuon_rc dmuon_costdb_each(dmuon_costdb *db, const char *device,
                           int (*fn)(const dmuon_cost_row *row, void *ctx), void *ctx);

/* ------------------------------------------------- NS kernel choices -- */

/* The kernel chosen for C = A·Aᵀ (A s x k row-major as NS stores it, C s x s)
 * on one GPU model and product precision (table ns_kernel). */
typedef struct {
    char device[128];       /* "cuda: <GPU name>" */
    char dtype[8];          /* "fp32" | "bf16" */
    int64_t s, k;
    char kernel[16];        /* dmuon_ns_sym_kernel_name: "syrk" | "gemm" | "tri" */
    double kernel_ms, gemm_ms;   /* one timed call each, milliseconds */
    double max_diff;        /* max |C − C_gemm| / max |C_gemm| */
    char libraries[128];
    char measured_at[32];   /* filled by put_kernel when empty */
} dmuon_kernel_row;

/* Inserts or replaces one choice (one transaction).  Errors: DMUON_EINVAL
 * (s or k <= 0, empty device/dtype/kernel, negative or non-finite figure),
 * DMUON_EIO (read-only database), DMUON_EDB. */
dmuon_rc dmuon_costdb_put_kernel(dmuon_costdb *db, const dmuon_kernel_row *row);

/* Looks one choice up.  Returns DMUON_OK and fills *row, or DMUON_ENOTFOUND
 * (no message recorded; also for a read-only version-1 database without the
 * table), or DMUON_EDB. */
dmuon_rc dmuon_costdb_get_kernel(dmuon_costdb *db, const char *device, const char *dtype,
                                 int64_t s, int64_t k, dmuon_kernel_row *row);

/* Runs PRAGMA integrity_check; DMUON_OK if it answers "ok", else DMUON_ECHECK
 * with the first problem in the message. */
dmuon_rc dmuon_costdb_check(dmuon_costdb *db);

#endif
