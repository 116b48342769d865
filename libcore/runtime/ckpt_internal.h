/*
 * ckpt_internal.h — what the checkpoint protocols share (ckpt.c): the
 * parameter table, piece records, the deadline-bounded agreement, the
 * safetensors header builder.  Used by ckpt_save.c, ckpt_load.c and
 * ckpt_export.c only; not installed.
 */
#ifndef DMUON_CKPT_INTERNAL_H
#define DMUON_CKPT_INTERNAL_H

#include <mpi.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "dmuon/ckpt.h"
#include "dmuon/io.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "checkpoint files hold host floats as little-endian data: a big-endian host needs swaps"
#endif

#define CKPT_FORMAT "dmuon-checkpoint"
#define CKPT_MANIFEST "manifest.json"
#define CKPT_PATH_MAX 4096
#define CKPT_NAME_MAX 64          /* hyperparameter names, bytes with the NUL */
#define CKPT_CHUNK (8u << 20)     /* bytes per read/convert step */

/* "master", "momentum", "exp_avg", "exp_avg_sq" */
extern const char *const ckpt_kind_names[];
#define NKINDS 4

/* Parameter table with a sorted index for lookups by name. */
typedef struct {
    const dmuon_ckpt_param *p;
    size_t np;
    size_t *order;      /* indices sorted by name */
    int64_t *numel;     /* per parameter */
} ptable;

/* A header being built: JSON object written into memory. */
typedef struct {
    FILE *f;
    char *buf;
    size_t len;
    dmuon_json w;
} hdr_buf;

/* One saved or requested piece, in numbers (sent between ranks). */
typedef struct {
    int64_t param, kind, lo, hi;
    int64_t offset;     /* byte offset of its data in its file */
    int64_t rank;       /* the rank that holds it */
    int64_t idx;        /* local: index in the caller's pieces; manifest: index of its file */
    uint64_t digest;    /* FNV-1a of its bytes */
} rec;
#define REC_WORDS ((int)(sizeof(rec) / sizeof(int64_t)))

/* Index of kind k in ckpt_kind_names, or -1. */
int ckpt_kind_index(const char *k);

/* Frees what ckpt_ptable_init allocated (t may be zeroed, never initialised). */
void ckpt_ptable_release(ptable *t);

/* Checks the table (names present and unique, 0..8 dimensions, positive
 * extents, sizes that fit int64) and indexes it.  DMUON_EINVAL, ENOMEM. */
dmuon_rc ckpt_ptable_init(ptable *t, const dmuon_ckpt_param *params, size_t np);

/* Index of the parameter named name, or -1. */
long ckpt_ptable_find(const ptable *t, const char *name);

/* Completes a collective started non-blocking (err: what starting it
 * returned) within ms: a peer that is slow (a long fsync), stalled or dead
 * makes this rank fail with DMUON_ETIMEOUT instead of waiting for it (a
 * blocking MPI call has no deadline).  MPI cannot cancel the call: after a
 * timeout the communicator is out of step, and the caller must treat it as
 * failed and issue no further collective on it.  *kept becomes true when
 * the call was posted and did not complete (the deadline, or MPI_Test
 * failed): it may still read and write its buffers whenever the late peers
 * arrive, so every buffer given to it is heap memory that the caller then
 * keeps allocated for good (never a stack variable, never freed). */
dmuon_rc ckpt_wait(int err, MPI_Request *q, int ms, const char *what, bool *kept);

/* Every rank learns whether any failed: DMUON_OK when none did; a failing
 * rank returns its own rc and message ("rank R: " added when missing); the
 * others return the lowest failing rank's rc with its message.  Each round
 * has the deadline ms.  When none failed, a second round that needs every
 * rank confirms it: a rank that arrives after the others gave up at the
 * deadline (its first round completes against their abandoned calls) times
 * out there instead of going on alone. */
dmuon_rc ckpt_agree(MPI_Comm comm, int ms, dmuon_rc mine);

/* *a = dmuon_digest(data, len, *a) and *b = dmuon_digest(data, len, *b) in
 * one pass: the two FNV-1a chains are independent, so they run side by side
 * (a file digest and a piece digest for the price of one). */
void ckpt_digest2(const void *data, size_t len, uint64_t *a, uint64_t *b);

/* snprintf into a CKPT_PATH_MAX buffer; callers keep names short enough
 * (ckpt_clean_dir leaves room), so truncation only shortens a message. */
void ckpt_fmt_path(char out[CKPT_PATH_MAX], const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* The parent directory of path (for fsync after a rename), into out. */
void ckpt_parent_of(const char *path, char out[CKPT_PATH_MAX]);

/* dir without trailing slashes, into out.  DMUON_EINVAL when empty or too long. */
dmuon_rc ckpt_clean_dir(const char *dir, char out[CKPT_PATH_MAX]);

/* Broadcasts a NUL-terminated path buffer from rank 0. */
dmuon_rc ckpt_bcast_path(MPI_Comm comm, int ms, char path[CKPT_PATH_MAX]);

/* Starts a safetensors header in memory with "__metadata__" from nmeta
 * key/value pairs (meta[2i], meta[2i+1]).  DMUON_ENOMEM. */
dmuon_rc ckpt_hdr_begin(hdr_buf *h, const char *const *meta, size_t nmeta);

/* Adds tensor name (dtype dt, shape, data bytes [begin, end)). */
void ckpt_hdr_tensor(hdr_buf *h, const char *name, dmuon_dtype dt, int ndim,
                     const int64_t *shape, uint64_t begin, uint64_t end);

/* Closes the object and frames it: out = 8-byte LE length + JSON padded with
 * spaces to a multiple of 8 (the writer's closing newline replaced).
 * *out is malloc'ed; *out_len = 8 + L. */
dmuon_rc ckpt_hdr_end(hdr_buf *h, unsigned char **out, size_t *out_len);

/* Name of a saved piece's tensor: "<param>/<kind>/<lo>-<hi>". */
void ckpt_piece_tensor_name(char *out, size_t cap, const char *param, const char *kind,
                            int64_t lo, int64_t hi);

/* qsort order of records: parameter, kind, lo, hi, rank. */
int ckpt_cmp_rec(const void *a, const void *b);

/* Checks pieces against the table; fills r[i] (param, kind, lo, hi, rank).
 * only_kind >= 0 skips pieces of other kinds (r gets only the kept ones,
 * *nr their count).  DMUON_EINVAL naming the piece. */
dmuon_rc ckpt_check_pieces(const ptable *t, const dmuon_ckpt_piece *pieces, size_t n,
                           int rank, int only_kind, rec *r, size_t *nr);

/* Sorted records: a record that repeats the range of the one before it is a
 * replica (dropped when keep is set: the lowest rank stays); any other
 * overlap is DMUON_EINVAL naming both.  Compacts r in place to *nr. */
dmuon_rc ckpt_dedupe(const ptable *t, rec *r, size_t *nr, const char *what);

#endif
