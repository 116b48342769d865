/*
 * dmuon/probe.h — measuring Newton–Schulz time per matrix shape for the cost
 * database (paper §3.3, Appendix B "Why NS time is measured", "Measurement
 * protocol").
 *
 * Every rank of a communicator times each shape on its own device: `warmup`
 * untimed calls, then `iters` timed calls of dmuon_ns_run on a fixed
 * pseudo-random input (NS time does not depend on the values).  Each rank
 * takes the median of its iterations; the stored figure is the median of the
 * ranks' medians (the mean of the two middle ones for an even count), so
 * noise on one device hardly moves it.  min_ms / max_ms are the smallest and
 * largest single iteration on any rank.  Every rank receives the same rows.
 *
 * The library never prints: progress is reported through a callback.
 * Storing is the caller's: dmuon_costdb_put_rows writes all rows of a run in
 * one transaction (on one rank).
 */
#ifndef DMUON_PROBE_H
#define DMUON_PROBE_H

#include <mpi.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dmuon/costdb.h"
#include "dmuon/device.h"
#include "dmuon/ns.h"
#include "dmuon/rc.h"

/* Called on every rank after each shape is measured and combined across
 * ranks: done shapes of total so far, and the combined row. */
typedef void (*dmuon_probe_progress_fn)(size_t done, size_t total, const dmuon_cost_row *row,
                                        void *ctx);

typedef struct {
    dmuon_device_kind device;   /* cpu or cuda */
    int device_index;           /* CUDA device; -1: the node-local rank modulo
                                   the device count; ignored for cpu */
    dmuon_ns_opts ns;           /* variant and dtype to time */
    int warmup;                 /* untimed calls per shape, >= 0 */
    int iters;                  /* timed calls per shape, >= 1 */
    uint64_t seed;              /* input generator seed */
    dmuon_probe_progress_fn progress;   /* may be NULL */
    void *progress_ctx;
    volatile sig_atomic_t *stop;  /* may be NULL; non-zero on any rank before a shape:
                                     stop there (agreed across ranks), DMUON_EINTR */
} dmuon_probe_opts;

/* Defaults for device: gram-pe5 fp32; cpu warmup 1, iters 3 (one NS on a
 * large shape takes seconds on a CPU); cuda warmup 5, iters 20; seed 1;
 * device_index -1; no progress callback. */
void dmuon_probe_opts_init(dmuon_probe_opts *o, dmuon_device_kind device);

/* The cost database key that a probe with *o writes on this rank: the
 * device name (dmuon/device.h; for cuda the device that device_index
 * selects on this rank, comm being used to find the node-local rank), the
 * variant and the dtype names.  comm may be MPI_COMM_NULL (no MPI calls:
 * node-local rank 0).  Errors: DMUON_EUNSUPPORTED (cuda without CUDA),
 * DMUON_EDEVICE (no device), DMUON_ECOMM. */
dmuon_rc dmuon_probe_key(const dmuon_probe_opts *o, MPI_Comm comm, char device[128],
                         char variant[32], char dtype[8]);

/* Times each of the n shapes (shapes[i][0] = m rows, shapes[i][1] = n
 * columns) and fills rows_out[0..n) (caller-allocated, n entries): device,
 * variant, dtype, m, n, median/min/max in milliseconds per NS call, samples
 * (= iters), ranks (= size of comm), libraries, host; measured_at is left
 * empty (dmuon_costdb_put_rows stamps it).  Collective over comm: every rank
 * must call it with the same shapes and options; comm may be MPI_COMM_NULL
 * for a single process without MPI.  Failures are agreed across ranks after
 * each shape, so no rank is left waiting.  On failure, rows_out[0..k) hold
 * the k shapes measured before the failing one (identical on every rank)
 * and rows_out[k..n) are zeroed (m == 0 marks a shape not measured), so a
 * caller can still store what was measured.  Errors: DMUON_EINVAL (bad
 * options, a non-positive dimension, more than INT_MAX elements in one
 * shape; nothing timed), DMUON_EUNSUPPORTED,
 * DMUON_EDEVICE, DMUON_ENOMEM, DMUON_ENUMERIC (from dmuon_ns_run),
 * DMUON_EMISMATCH (ranks measure under different device names or options),
 * DMUON_ECOMM (MPI failed, or another rank failed: the message names it),
 * DMUON_EINTR (opts->stop was set; the shapes before it are measured). */
dmuon_rc dmuon_probe_shapes(const dmuon_probe_opts *opts, const int64_t (*shapes)[2], size_t n,
                            MPI_Comm comm, dmuon_cost_row *rows_out);

/* Checks that each of the n shapes (m rows, n columns) has positive
 * dimensions and at most INT_MAX elements (the BLAS integer range that
 * dmuon_ns_run accepts).  Errors: DMUON_EINVAL naming the shape's position
 * (1-based) and its dimensions. */
dmuon_rc dmuon_probe_check_shapes(const int64_t (*shapes)[2], size_t n);

/* The distinct Muon matrix shapes of the model at path (any input form of
 * dmuon_model_load; m rows x n columns as stored), as a malloc'ed array
 * *shapes of *n pairs (caller free()s).  Errors: those of dmuon_model_load,
 * DMUON_EINVAL (the model has no Muon matrix; message names the path),
 * DMUON_ENOMEM. */
dmuon_rc dmuon_probe_model_shapes(const char *path, int64_t (**shapes)[2], size_t *n);

/* Parses "MxN,MxN,..." (M rows, N columns, each 1..2^31-1; 'x' or 'X')
 * into a malloc'ed array *shapes of *n pairs (caller free()s).  Errors:
 * DMUON_EINVAL naming the item and what was expected, DMUON_ENOMEM. */
dmuon_rc dmuon_probe_parse_shapes(const char *text, int64_t (**shapes)[2], size_t *n);

/* ---------------------------------------------------- the probe protocol -- */

/* Where and what a probe run stores (dmuon_probe_run). */
typedef struct {
    const char *db_path;      /* NULL: dmuon_costdb_default_path() */
    bool missing;             /* measure only the shapes the database lacks */
    int64_t max_elements;     /* skip shapes with more elements; < 0: none */
} dmuon_probe_run_opts;

/* What a probe run did; release with dmuon_probe_result_release.  The same
 * on every rank (rank 0's figures are broadcast). */
typedef struct {
    char device[128], variant[32], dtype[8];   /* the rows' database key */
    int64_t (*shapes)[2];     /* the shapes to measure, in order: given, without
                                 repeats, without skipped ones, with --missing
                                 only the missing ones */
    size_t n;
    int64_t (*skipped)[2];    /* shapes above max_elements, in order */
    size_t nskipped;
    size_t considered;        /* shapes before the missing filter */
    dmuon_cost_row *rows;     /* n rows; rows[0..measured) were measured */
    size_t measured;          /* shapes measured (n on success) */
    size_t stored;            /* rows stored in the database */
    char error[1024];         /* the failure's message ("" on success), kept even
                                 when storing the measured rows failed after it */
    char store_error[512];    /* why the measured rows could not be stored, or "" */
} dmuon_probe_result;

/* The measurement protocol of dmuon-probe and dmuon-plan --probe-missing
 * (paper Appendix B "Measurement protocol"), collective over comm (or
 * MPI_COMM_NULL for one process), in this order, so that nothing is timed
 * before every input is known good and nothing measured is lost:
 *   1. the n shapes lose repeats and are checked (dmuon_probe_check_shapes);
 *      shapes above ro->max_elements are set aside (res->skipped);
 *   2. every rank opens its device and computes the key (dmuon_probe_key)
 *      before any file is created: a missing GPU leaves no database behind;
 *   3. rank 0 opens (creates) the database and reads it once: a bad path, a
 *      read-only or foreign database fails before minutes of timing;
 *   4. with ro->missing, rank 0 keeps only the shapes the database lacks
 *      for the key (dmuon_probe_filter_missing) and sends them to all;
 *   5. the shapes are timed (dmuon_probe_shapes);
 *   6. rank 0 stores every measured row in one transaction — on success all
 *      of them, on a failure or a stop part-way the ones measured before it.
 * Returns DMUON_OK or the first failure's rc (res->error keeps its message;
 * res->measured and res->stored say what was kept).  Errors: those of the
 * functions named above; DMUON_EIO (a read-only database); DMUON_EINTR. */
dmuon_rc dmuon_probe_run(const dmuon_probe_opts *po, const dmuon_probe_run_opts *ro,
                         const int64_t (*shapes)[2], size_t n, MPI_Comm comm,
                         dmuon_probe_result *res);

/* Frees the arrays of res; accepts a zeroed or released result. */
void dmuon_probe_result_release(dmuon_probe_result *res);

/* The missing-shape filter (the one every caller uses): keeps in
 * shapes[0..*n) only those without a row for (device, variant, dtype) in db,
 * in order, and updates *n.  Errors: DMUON_EDB. */
dmuon_rc dmuon_probe_filter_missing(dmuon_costdb *db, const char *device, const char *variant,
                                    const char *dtype, int64_t (*shapes)[2], size_t *n);

/* The spread of a measured row, max_ms / min_ms (1 when min_ms is 0).  A
 * spread above DMUON_PROBE_NOISY_SPREAD means another process was using the
 * device while it was timed (concurrent probes: 100x seen), and the median
 * is suspect. */
#define DMUON_PROBE_NOISY_SPREAD 10.0
double dmuon_probe_spread(const dmuon_cost_row *row);

#endif
