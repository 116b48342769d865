/*
 * backend.h — libcore-internal: the one interface every communication
 * backend fills (docs/design.md "Communication"), and the objects the public
 * functions of dmuon/symm.h, dmuon/collv.h and dmuon/publish.h hand to it.
 *
 * The public layer (symm.c, collv.c, publish.c) checks arguments, agrees on
 * tables and ranges across ranks and fills the backend-independent fields
 * below; then it calls the backend, which keeps its own state behind the
 * `impl` pointer.  A backend never re-checks a table and holds no routing
 * logic: it executes dmuon/sched.h.  A new backend (NCCL host API, NCCL
 * device API) is a new file filling a dmuon_comm_ops plus one line in
 * backend.c.
 *
 * Contracts for every operation: collective where the public function is;
 * errors recorded with DMUON_FAIL; a create that fails leaves impl NULL or
 * releasable by the matching free, and fails identically on every rank.
 */
#ifndef DMUON_COMM_BACKEND_H
#define DMUON_COMM_BACKEND_H

#include <stdint.h>

#include "dmuon/collv.h"
#include "dmuon/publish.h"
#include "dmuon/symm.h"
#include "dmuon/topo.h"

typedef struct dmuon_comm_ops dmuon_comm_ops;

struct dmuon_symm {
    const dmuon_comm_ops *ops;
    dmuon_backend backend;
    const dmuon_topo *topo;
    int64_t bytes;            /* as requested (same on every rank) */
    unsigned char *base;      /* this rank's part, DMUON_SYMM_ALIGN-aligned */
    unsigned char **peer;     /* per_node entries: node peers' parts, mapped here
                                 (a backend without loads/stores sets NULLs) */
    void *impl;
};

struct dmuon_group {
    const dmuon_comm_ops *ops;
    const dmuon_topo *topo;
    dmuon_symm *mem;
    int64_t ctrl_offset, ctrl_bytes;
    dmuon_segment *segs;      /* copy of the table, checked and agreed */
    int nseg;
    int64_t buffer_bytes, window_bytes;
    dmuon_group_opts opts;    /* resolved: deadline_ms and slots filled in */
    dmuon_sched sched[2];     /* gather, reduce */
    int rsv_ok;               /* every element type can be reduced */
    void *impl;
};

struct dmuon_publish {
    const dmuon_comm_ops *ops;
    const dmuon_topo *topo;
    dmuon_symm *mem;
    int64_t copy_offset, copy_bytes;
    unsigned char *copy;      /* mem->base + copy_offset */
    dmuon_segment *params;    /* copy of the table, checked and agreed */
    int n;
    int deadline_ms;          /* resolved */
    int64_t chunk_bytes;      /* resolved: > 0 */
    dmuon_pub_sched sched;    /* routes and chunks (sched.c) */
    void *impl;
};

struct dmuon_comm_ops {
    const char *name;
    /* The chunk of a group or publish whose options say 0 (bytes; passes
     * dmuon_chunk_bytes_check): what suits the backend's transport; 0 for
     * DMUON_CHUNK_BYTES (the paper's 64 KiB). */
    int64_t chunk_bytes;
    /* Symmetric memory: fill base, peer and impl of s (topo, bytes set). */
    dmuon_rc (*symm_alloc)(dmuon_symm *s);
    void (*symm_free)(dmuon_symm *s);
    /* Device memory only (NULL for host memory, which symm.c memcpys):
     * synchronous copies host → part / part → host of a checked range. */
    dmuon_rc (*symm_put)(dmuon_symm *s, int64_t offset, const void *src, int64_t bytes);
    dmuon_rc (*symm_get)(const dmuon_symm *s, int64_t offset, void *dst, int64_t bytes);

    /* Groups: control-area bytes for a checked table (not collective);
     * create over the filled-in g (control area at g->ctrl_offset, zeroed
     * by the backend); free. */
    dmuon_rc (*group_ctrl_bytes)(const dmuon_topo *t, const dmuon_segment *segs, int n,
                                 const dmuon_group_opts *opts, int64_t *bytes);
    dmuon_rc (*group_create)(dmuon_group *g);
    void (*group_free)(dmuon_group *g);
    /* Blocking operators over checked ranges. */
    dmuon_rc (*allgatherv)(dmuon_group *g, int64_t buffer_offset, int64_t window_offset);
    dmuon_rc (*reduce_scatterv)(dmuon_group *g, int64_t buffer_offset, int64_t window_offset);
    /* Split phase (collv.h): kind is DMUON_SCHED_GATHER or _REDUCE. */
    dmuon_rc (*start)(dmuon_group *g, int kind, int64_t buffer_offset, int64_t window_offset);
    dmuon_rc (*test)(dmuon_group *g, int kind, int *done);
    dmuon_rc (*wait)(dmuon_group *g, int kind);

    /* Publish: create over the filled-in p; the rest as in publish.h with
     * arguments already checked where the public layer can. */
    dmuon_rc (*publish_create)(dmuon_publish *p);
    void (*publish_free)(dmuon_publish *p);
    dmuon_rc (*publish_begin)(dmuon_publish *p, int64_t step);
    dmuon_rc (*publish_post)(dmuon_publish *p, int param, int64_t step);
    dmuon_rc (*publish_progress)(dmuon_publish *p);
    dmuon_rc (*publish_wait)(dmuon_publish *p, int param, int64_t step);
    dmuon_rc (*publish_end)(dmuon_publish *p, int64_t step);
    int64_t (*publish_flag)(const dmuon_publish *p, int param);
};

/* The operations of backend b, or NULL when b is not built (the caller
 * reports DMUON_EUNSUPPORTED). */
const dmuon_comm_ops *dmuon_comm_backend(dmuon_backend b);

/* Same as dmuon_comm_backend, recording DMUON_EUNSUPPORTED (naming the
 * backend and `what`) when it is not built. */
dmuon_rc dmuon_comm_backend_get(dmuon_backend b, const char *what, const dmuon_comm_ops **out);

/* The MPI backend (mpi_symm.c, mpi_collv.c, mpi_publish.c). */
extern const dmuon_comm_ops dmuon_mpi_ops;
/* The NCCL backends (nccl_backend.h), in builds with NCCL. */
extern const dmuon_comm_ops dmuon_nccl_ops, dmuon_nccl_dev_ops;

#endif
