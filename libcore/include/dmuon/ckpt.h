/*
 * dmuon/ckpt.h — checkpoints of the optimizer state that re-shard on load,
 * and full-weight export (paper §6; docs/design.md "Checkpoints").
 *
 * The unit of a checkpoint is a *piece*: a contiguous element range
 * [lo, hi) of one kind of state of one parameter, in the parameter's
 * flattened row-major storage (elements of binary32).  Kinds are short
 * names: "master" (FP32 master weights), "momentum" (Muon), "exp_avg" and
 * "exp_avg_sq" (AdamW).  A rank saves the pieces it owns (whole Muon
 * matrices of the units it owns; its even shard of the other parameters) and
 * loads the pieces it owns under the plan in use at load time, which may be
 * another plan (other rank count, FSDP or HSDP, other owners): a piece to
 * load is filled from whichever saved pieces overlap it, in any number of
 * files.  With HSDP several ranks hold the same replicated piece; they may
 * all save it (the manifest keeps one copy of each range per kind: the one
 * saved by the lowest rank) or save only one replica.
 *
 * On disk (directory DIR):
 *   DIR/rank-00000.safetensors ...   one file per saving rank: safetensors
 *       (8-byte little-endian header length, JSON header, data), tensors
 *       named "<param>/<kind>/<lo>-<hi>" of dtype F32 and shape [hi - lo];
 *       header "__metadata__" carries the format version.
 *   DIR/manifest.json               format version (DMUON_CKPT_VERSION),
 *       the meta below, the parameter table (name, shape, role), every file
 *       with its size and digest, every piece (param, kind, lo, hi, file,
 *       byte offset).  Written last.
 * Saving writes into DIR.tmp.<unique> and renames it to DIR once every
 * file is complete (an existing DIR is replaced only then); an interrupted
 * save leaves no DIR and removes its temporary directory where it can.
 *
 * Every function is collective over comm (every rank calls it, same
 * arguments except its own pieces); errors are agreed: when any rank fails,
 * every rank returns an error (its own, or DMUON_ECOMM/…, with a message
 * naming the failing rank, file and tensor), and a failed load leaves every
 * piece's destination unchanged on every rank.
 *
 * Deadlines: every collective of these functions (agreements included)
 * completes within deadline_ms (0: $DMUON_DEADLINE_MS or 60000; a bad value
 * of the variable is DMUON_EINVAL) or fails with DMUON_ETIMEOUT.  A rank
 * slow in its own file I/O (a long fsync) makes the others return
 * DMUON_ETIMEOUT one deadline after they reached the wait; the slow rank
 * returns DMUON_ETIMEOUT at its next collective, at most one deadline after
 * its I/O ended.  After DMUON_ETIMEOUT, comm is out of step (MPI cannot
 * cancel a started collective): do not use it for further collectives.
 */
#ifndef DMUON_CKPT_H
#define DMUON_CKPT_H

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>

#include "dmuon/rc.h"
#include "dmuon/types.h"

#define DMUON_CKPT_VERSION 1
#define DMUON_CKPT_MAX_HPARAMS 32

/* One piece of state.  For save, data is read (hi - lo floats); for load it
 * is written.  name and kind are borrowed for the call. */
typedef struct {
    const char *name;     /* parameter name (as in the model inventory) */
    const char *kind;     /* "master", "momentum", "exp_avg", "exp_avg_sq" */
    int64_t lo, hi;       /* element range of the flattened parameter, lo < hi */
    float *data;          /* hi - lo elements */
} dmuon_ckpt_piece;

/* One parameter of the model (for the manifest and for export). */
typedef struct {
    const char *name;
    int ndim;
    int64_t shape[8];
    dmuon_dtype dtype;    /* the type export writes for it (F32, BF16 or F16;
                             others refused); dmuon_rt_export passes F32 for
                             every parameter, so the runtime's exports are FP32 */
    int role;             /* dmuon_role */
} dmuon_ckpt_param;

/* What a checkpoint records besides the tensors.  Hyperparameters are
 * name/value pairs written as strings with 17 significant digits. */
typedef struct {
    int64_t step;                 /* optimizer steps taken */
    uint64_t model_digest;        /* dmuon_model_digest / runtime's parameter table digest */
    uint64_t plan_digest;         /* digest of the plan that saved it (informational on load) */
    int world_size;               /* ranks that saved it */
    const char *sharding;         /* "fsdp" or "hsdp" */
    int n_hparams;
    const char *hparam_names[DMUON_CKPT_MAX_HPARAMS];
    double hparam_values[DMUON_CKPT_MAX_HPARAMS];
    const char *ns_variant;       /* Newton–Schulz variant name, or NULL (not recorded) */
} dmuon_ckpt_meta;

/* Saves every rank's pieces into directory dir (see the layout above).
 * params/np: the whole parameter table (same on every rank).  Pieces may be
 * empty on some ranks; pieces of one (name, kind) across all ranks must not
 * overlap except for identical replicated ranges.  Errors (agreed):
 * DMUON_EINVAL (a piece naming an unknown parameter or kind, lo/hi outside
 * the parameter, overlapping non-identical pieces), DMUON_EIO (naming the
 * file), DMUON_ENOMEM, DMUON_ECOMM, DMUON_ETIMEOUT. */
dmuon_rc dmuon_ckpt_save(MPI_Comm comm, int deadline_ms, const char *dir,
                         const dmuon_ckpt_meta *meta, const dmuon_ckpt_param *params, size_t np,
                         const dmuon_ckpt_piece *pieces, size_t n);

/* Reads dir's manifest and fills every piece of this rank from the saved
 * pieces that cover it.  expect->model_digest must equal the saved one
 * (DMUON_EMISMATCH otherwise, naming both); the parameter table must match
 * params (names, shapes; DMUON_EMISMATCH naming the first difference).
 * Resume check: every hyperparameter in expect must have been saved with
 * the same value, and expect->ns_variant (when not NULL) must equal the
 * saved variant when the manifest records one (manifests written before
 * the variant was recorded have none): otherwise DMUON_EMISMATCH naming the
 * field and both values.  A caller that means to change a setting leaves it
 * out of expect.  expect may be NULL (nothing compared).  On
 * success *meta_out (may be NULL) receives the saved meta; its strings point
 * into storage valid until the next call of dmuon_ckpt_load on this thread.
 * Errors (agreed, nothing written on any rank): DMUON_ENOTFOUND (no
 * manifest; a range of a piece not covered by any saved piece: names the
 * parameter, kind and range), DMUON_EVERSION, DMUON_EPARSE (malformed
 * manifest or safetensors header: names the file and field), DMUON_ECHECK
 * (a file's size or digest differs from the manifest: names the file;
 * a truncated file), DMUON_EMISMATCH, DMUON_EIO, DMUON_ENOMEM, DMUON_ECOMM,
 * DMUON_ETIMEOUT. */
dmuon_rc dmuon_ckpt_load(MPI_Comm comm, int deadline_ms, const char *dir,
                         const dmuon_ckpt_meta *expect, const dmuon_ckpt_param *params, size_t np,
                         dmuon_ckpt_piece *pieces, size_t n, dmuon_ckpt_meta *meta_out);

/* Writes the full weights as one safetensors file at path (atomically: temp
 * file + rename) with the original tensor names, shapes and each param's
 * dtype (F32 master values rounded to nearest even for BF16/F16).  Every
 * element of every parameter must be covered by the pieces of kind "master"
 * of some rank (replicas allowed).  Readable by the Python safetensors
 * library.  Errors (agreed): DMUON_EINVAL (an element not covered: names the
 * parameter; an unsupported dtype), DMUON_EIO, DMUON_ENOMEM, DMUON_ECOMM,
 * DMUON_ETIMEOUT. */
dmuon_rc dmuon_ckpt_export(MPI_Comm comm, int deadline_ms, const char *path,
                           const dmuon_ckpt_param *params, size_t np,
                           const dmuon_ckpt_piece *pieces, size_t n);

#endif
