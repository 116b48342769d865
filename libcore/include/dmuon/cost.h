/*
 * dmuon/cost.h — the Newton–Schulz cost of a Muon matrix, per cost model.
 *
 * The planner balances owners by the NS time of each assignment unit (paper
 * §3.3, Appendix B).  The default source is measured: the cost table of
 * dmuon/costdb.h, keyed (device, variant, dtype, m, n).  The analytic models
 * exist for comparison and ablation, and report relative time:
 *   flops    — the operation count of Gram Newton–Schulz (paper C.3; Zhang
 *              et al. 2026) on the matrix, see dmuon_cost_gram_flops; the
 *              plan's ns_ms is flops / 1e9, i.e. ms at a nominal 1 TFLOP/s,
 *              an estimate only;
 *   elements — m * n (the estimate of prior work the paper argues against,
 *              Appendix B); ns_ms = elements / 1e6;
 *   m2n      — min(m,n)^2 * max(m,n) (paper §2.1); ns_ms = m2n / 1e9.
 */
#ifndef DMUON_COST_H
#define DMUON_COST_H

#include <stddef.h>
#include <stdint.h>

#include "dmuon/costdb.h"
#include "dmuon/device.h"
#include "dmuon/model.h"
#include "dmuon/rc.h"

typedef enum {
    DMUON_COST_DB = 0,    /* measured, from the cost table */
    DMUON_COST_FLOPS,     /* analytic Gram-NS operation count */
    DMUON_COST_ELEMENTS,  /* m * n */
    DMUON_COST_M2N,       /* min^2 * max */
} dmuon_cost_kind;

/* Name of a cost model ("db", "flops", "elements", "m2n"); parse the same
 * names (DMUON_EINVAL naming the value and listing the valid ones). */
const char *dmuon_cost_kind_name(dmuon_cost_kind k);
dmuon_rc dmuon_cost_kind_parse(const char *s, dmuon_cost_kind *out);

/* Where measured costs come from (used with DMUON_COST_DB). */
typedef struct {
    const char *db_path;   /* NULL: dmuon_costdb_default_path() */
    const char *device;    /* full device name as stored (see dmuon/device.h) */
    const char *variant;   /* NULL: "gram-pe5" */
    const char *dtype;     /* NULL: "fp32" */
} dmuon_cost_source;

/*
 * Floating-point operations of one Gram Newton–Schulz call on an m x n
 * matrix, as dmuon's NS runs it (docs/design.md "Newton–Schulz"): with
 * s = min(m,n), l = max(m,n), 5 Polar Express steps, one restart after step 2
 * (two restart windows of 2 and 3 steps):
 *   Gram products X Xᵀ (SYRK, lower triangle): 2 windows * s(s+1) l
 *   multiply back Q X:                          2 windows * 2 s^2 l
 *   per step, on s x s: R^2 (SYRK) s(s+1) s, Q <- Q Z 2 s^3 (not on a
 *   window's first step, where Q = Z), R <- Z R Z 4 s^3 (not on a window's
 *   last step).
 * Normalisation and the polynomial's scalar terms (O(s l) and O(s^2)) are
 * left out.  Returns the count as a double (exact below 2^53).
 */
double dmuon_cost_gram_flops(int64_t m, int64_t n);

/* Cost of one m x n matrix under an analytic model, in ns_ms units (see the
 * top of this file).  k must not be DMUON_COST_DB. */
double dmuon_cost_analytic(dmuon_cost_kind k, int64_t m, int64_t n);

/* A lookup table of per-shape costs (ms) for one model, read once from the
 * cost table. */
typedef struct dmuon_cost_table dmuon_cost_table;

/* Opens the database of src, reads the row of every distinct Muon shape of
 * model for (device, variant, dtype), and fills *out.  When shapes are
 * missing, fails with DMUON_ENOTFOUND and a message that lists them (up to
 * 16, then a count) and gives the command that would measure them:
 *   dmuon-probe --model MODEL --shapes MxN,MxN --db PATH [--device DEV]
 * Errors: DMUON_ENOTFOUND (database file or shapes missing), DMUON_EDB,
 * DMUON_EVERSION, DMUON_ENOMEM. */
dmuon_rc dmuon_cost_table_load(const dmuon_model *model, const dmuon_cost_source *src,
                               dmuon_cost_table **out);

/* Frees a table; accepts NULL. */
void dmuon_cost_table_free(dmuon_cost_table *t);

/* Median ms of shape m x n (must be one of the model's shapes).  Returns a
 * negative value for a shape the table does not hold. */
double dmuon_cost_table_ms(const dmuon_cost_table *t, int64_t m, int64_t n);

/* Digest of the rows used (shape, median), for the plan's input digests. */
uint64_t dmuon_cost_table_digest(const dmuon_cost_table *t);

/* The Muon shapes of model that the database at src lacks, sorted like
 * dmuon_model_muon_shapes (count = matrices of that shape).  A database file
 * that does not exist lacks every shape.  *missing is malloc'ed (NULL when
 * *n is 0); the caller free()s it.  Errors: DMUON_EDB, DMUON_EVERSION,
 * DMUON_ENOMEM. */
dmuon_rc dmuon_cost_missing(const dmuon_model *model, const dmuon_cost_source *src,
                            dmuon_shape_count **missing, size_t *n);

/* Formats the dmuon-probe command that measures the given shapes into out
 * (cap bytes, NUL-terminated, truncated with "..." if too long):
 *   dmuon-probe --model MODEL --missing --db PATH --device cpu|cuda [--variant V] [--dtype T]
 * or, when model_path is NULL,
 *   dmuon-probe --shapes 1536x8960,256x1536 --db PATH --device cpu|cuda ...
 * (--variant whenever src names one; dmuon-probe refuses --model with
 * --shapes, and --missing measures exactly the shapes the database lacks).  When src's device is not this
 * machine's CPU or CUDA device, a note says to run it on a machine with that
 * device. */
void dmuon_cost_probe_command(const char *model_path, const dmuon_cost_source *src,
                              const dmuon_shape_count *shapes, size_t n, char *out, size_t cap);

/* Checks that device (an explicit device name as stored, e.g. "cuda: NVIDIA
 * H200") has rows in the database at db_path (NULL: the default path).
 * Errors: DMUON_ENOTFOUND (no database, or no row for that device: the
 * message lists the stored devices), DMUON_EDB. */
dmuon_rc dmuon_cost_device_check(const char *db_path, const char *device);

/* Resolves a --device argument for --cost db: NULL, "cpu" or "cuda" is this
 * machine's device of that kind (its name as dmuon/device.h gives it,
 * *local = true); anything else is a device name as stored in the database
 * at db_path (NULL: the default), checked to have rows there (*local =
 * false: this machine cannot measure it).  Writes the name into out (160
 * bytes) and the kind into *kind.  Errors: those of dmuon_device_name and
 * dmuon_cost_device_check. */
dmuon_rc dmuon_cost_device_resolve(const char *arg, const char *db_path, char out[160],
                                   dmuon_device_kind *kind, bool *local);

/* Measures the shapes the database lacks (dmuon-plan --probe-missing).
 * Times every Muon shape of model missing from src's database for this
 * process's device of kind (dmuon_probe_shapes on one process, without MPI;
 * variant and dtype from src, defaults gram-pe5 / fp32), stores the rows in
 * one transaction (creating the database if needed), and writes the device
 * name the rows are stored under into device_out (the key --cost db must
 * use; src->device is ignored).  progress (may be NULL) is called after
 * each shape.  *probed receives the number of shapes measured (0 when none
 * was missing).  Errors: those of dmuon_probe_shapes, dmuon_costdb_open and
 * dmuon_costdb_put_rows; DMUON_EINVAL for an unknown variant or dtype. */
typedef void (*dmuon_cost_progress_fn)(size_t done, size_t total, const dmuon_cost_row *row,
                                       void *ctx);
dmuon_rc dmuon_cost_probe_missing(const dmuon_model *model, const dmuon_cost_source *src,
                                  dmuon_device_kind kind, dmuon_cost_progress_fn progress,
                                  void *ctx, char device_out[128], size_t *probed);

#endif
