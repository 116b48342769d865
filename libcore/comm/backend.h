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
 * In an ops table NULL means "not offered by this backend": the public
 * layer checks each pointer before it calls it and returns
 * DMUON_EUNSUPPORTED naming the backend and the operation
 * (DMUON_COMM_NEED), on every rank alike (every rank runs the same backend).
 * A backend never fills an entry with a stub that only refuses.
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

/* Frees the whole pages inside [p, p + bytes) of a shared host mapping
 * (madvise MADV_REMOVE: they read as zeros afterwards); returns the bytes
 * freed, which start *first bytes after p; 0 where the mapping refuses
 * (nothing changed then).  symm.c. */
int64_t dmuon_host_release(void *p, int64_t bytes, int64_t *first);

typedef struct dmuon_comm_ops dmuon_comm_ops;
typedef struct dmuon_group_ops dmuon_group_ops;
typedef struct dmuon_publish_ops dmuon_publish_ops;

struct dmuon_symm {
    const dmuon_comm_ops *ops;
    dmuon_backend backend;
    const dmuon_topo *topo;
    int64_t bytes;            /* as requested (same on every rank) */
    int deadline_ms;          /* the caller's, for the backend's setup exchanges
                                 (0: $DMUON_DEADLINE_MS or the default) */
    unsigned char *base;      /* this rank's part, DMUON_SYMM_ALIGN-aligned */
    unsigned char **peer;     /* per_node entries: node peers' parts, mapped here
                                 (a backend without loads/stores sets NULLs) */
    void *impl;
};

struct dmuon_group {
    const dmuon_comm_ops *ops;
    const dmuon_group_ops *gops;   /* ops->group[opts.algorithm] */
    const dmuon_topo *topo;
    dmuon_symm *mem;
    int64_t ctrl_offset, ctrl_bytes;
    int64_t staging_offset, staging_bytes;  /* the reduce staging when shared
                                 (opts.staging_shared), else 0, 0 */
    dmuon_segment *segs;      /* copy of the table, checked and agreed */
    int nseg;
    int64_t buffer_bytes, window_bytes;
    dmuon_group_opts opts;    /* resolved: deadline_ms, slots and algorithm filled in */
    dmuon_sched sched[2];     /* gather, reduce */
    int rsv_ok;               /* every element type can be reduced */
    void *impl;
};

struct dmuon_publish {
    const dmuon_comm_ops *ops;
    const dmuon_publish_ops *pops;   /* ops->publish[algorithm] */
    dmuon_algo algorithm;            /* resolved */
    const dmuon_topo *topo;
    dmuon_symm *mem;
    int64_t copy_offset, copy_bytes;
    unsigned char *copy;      /* mem->base + copy_offset */
    dmuon_segment *params;    /* copy of the table, checked and agreed */
    int n;
    int deadline_ms;          /* resolved */
    int64_t chunk_bytes;      /* resolved: > 0 */
    dmuon_pub_sched sched;    /* routes and chunks (sched.c) */
    char routes[160];         /* how parameters travel, for reports
                                 (dmuon_publish_routes): the public layer
                                 writes a default, create may refine it */
    void *impl;
};

struct dmuon_comm_ops {
    const char *name;
    /* 1: symmetric memory lives on a device and is reached through
     * symm_put/symm_get; 0: host memory that the public layer memcpys. */
    int on_device;
    /* The chunk of a group or publish whose options say 0 (bytes; passes
     * dmuon_chunk_bytes_check): what suits the backend's transport; 0 for
     * DMUON_CHUNK_BYTES (the paper's 64 KiB). */
    int64_t chunk_bytes;
    /* Symmetric memory: fill base, peer and impl of s (topo, bytes set). */
    dmuon_rc (*symm_alloc)(dmuon_symm *s);
    void (*symm_free)(dmuon_symm *s);
    /* Device memory only (on_device; host memory is memcpy'd by symm.c):
     * synchronous copies host → part / part → host of a checked range. */
    dmuon_rc (*symm_put)(dmuon_symm *s, int64_t offset, const void *src, int64_t bytes);
    dmuon_rc (*symm_get)(const dmuon_symm *s, int64_t offset, void *dst, int64_t bytes);
    /* Device memory only: the stream operators enqueue on, and setting it
     * (dmuon_symm_stream / dmuon_symm_set_stream). */
    void *(*symm_stream)(const dmuon_symm *s);
    dmuon_rc (*symm_set_stream)(dmuon_symm *s, void *stream);

    /* Groups, one table per algorithm (dmuon/collv.h); NULL where the
     * backend does not offer it.  default_algo is what DMUON_ALGO_DEFAULT
     * means here. */
    dmuon_algo default_algo;
    const dmuon_group_ops *group[DMUON_ALGO_COUNT];

    /* Publish, one table per algorithm (SCHEDULED, PER_OWNER; dmuon/publish.h);
     * NULL where not offered. */
    const dmuon_publish_ops *publish[DMUON_ALGO_COUNT];
};

/* The group operations of one algorithm of one backend.  The public layer
 * has checked the table against the algorithm's rule (collv.c) and every
 * call's ranges before it calls these. */
struct dmuon_group_ops {
    /* Control-area bytes for a checked table (not collective); create over
     * the filled-in g (control area at g->ctrl_offset, zeroed by the
     * backend; collective); free (collective). */
    dmuon_rc (*ctrl_bytes)(const dmuon_topo *t, const dmuon_segment *segs, int n,
                           const dmuon_group_opts *opts, int64_t *bytes);
    /* Bytes of the reduce staging (dmuon_group_staging_bytes); NULL: none.
     * With opts->staging_shared, ctrl_bytes leaves it out and create finds
     * it at g->staging_offset. */
    dmuon_rc (*staging_bytes)(const dmuon_topo *t, const dmuon_segment *segs, int n,
                              const dmuon_group_opts *opts, int64_t *bytes);
    dmuon_rc (*create)(dmuon_group *g);
    void (*free)(dmuon_group *g);
    /* Blocking operators over checked ranges. */
    dmuon_rc (*allgatherv)(dmuon_group *g, int64_t buffer_offset, int64_t window_offset);
    dmuon_rc (*reduce_scatterv)(dmuon_group *g, int64_t buffer_offset, int64_t window_offset);
    /* Split phase (collv.h): kind is DMUON_SCHED_GATHER or _REDUCE. */
    dmuon_rc (*start)(dmuon_group *g, int kind, int64_t buffer_offset, int64_t window_offset);
    dmuon_rc (*test)(dmuon_group *g, int kind, int *done);
    dmuon_rc (*wait)(dmuon_group *g, int kind);
};

/* The publish operations of one algorithm of one backend: create over the
 * filled-in p; the rest as in publish.h with arguments already checked where
 * the public layer can. */
struct dmuon_publish_ops {
    dmuon_rc (*create)(dmuon_publish *p);
    void (*free)(dmuon_publish *p);
    dmuon_rc (*begin)(dmuon_publish *p, int64_t step);
    dmuon_rc (*post)(dmuon_publish *p, int param, int64_t step);
    dmuon_rc (*progress)(dmuon_publish *p);
    dmuon_rc (*wait)(dmuon_publish *p, int param, int64_t step);
    dmuon_rc (*end)(dmuon_publish *p, int64_t step);
    int64_t (*flag)(const dmuon_publish *p, int param);
    /* dmuon_publish_node_load, ranges checked. */
    dmuon_rc (*node_load)(dmuon_publish *p, const dmuon_segment *segs, const int *params, int n,
                          int64_t dst_offset, int64_t step);
    /* dmuon_publish_node_load_start/_test/_wait, ranges checked (start) and
     * done non-NULL (test). */
    dmuon_rc (*node_load_start)(dmuon_publish *p, const dmuon_segment *segs, const int *params,
                                int n, int64_t dst_offset, int64_t step);
    dmuon_rc (*node_load_test)(dmuon_publish *p, int *done);
    dmuon_rc (*node_load_wait)(dmuon_publish *p);
};

/* The step rules of a publish whose data moves only at end (the per-owner
 * algorithm on every backend; publish.c): begin(step) needs step > *cur and
 * no open step, then opens it; post needs this rank to own param and step
 * to be the open one; end needs the open step and closes it.  DMUON_EINVAL
 * with the same messages on every backend otherwise. */
dmuon_rc dmuon_pub_step_begin(int64_t *cur, int *open, int64_t step);
dmuon_rc dmuon_pub_step_post(const dmuon_publish *p, int64_t cur, int open, int param,
                             int64_t step);
dmuon_rc dmuon_pub_step_end(int64_t cur, int *open, int64_t step);

/* Records DMUON_EUNSUPPORTED "<what>: not offered by the <backend>
 * backend" at file:line and returns it.  Use DMUON_COMM_NEED. */
dmuon_rc dmuon_comm_unsupported(const dmuon_comm_ops *ops, const char *what, const char *file,
                                int line);

/* Returns DMUON_EUNSUPPORTED from the calling function when the entry fn of
 * ops is NULL (what names the operation for the message). */
#define DMUON_COMM_NEED(ops, fn, what)                                      \
    do {                                                                    \
        if (!(ops)->fn)                                                     \
            return dmuon_comm_unsupported((ops), (what), __FILE__, __LINE__); \
    } while (0)

/* The operations of backend b, or NULL when b is not built (the caller
 * reports DMUON_EUNSUPPORTED). */
const dmuon_comm_ops *dmuon_comm_backend(dmuon_backend b);

/* Same as dmuon_comm_backend, recording DMUON_EUNSUPPORTED (naming the
 * backend and `what`) when it is not built. */
dmuon_rc dmuon_comm_backend_get(dmuon_backend b, const char *what, const dmuon_comm_ops **out);

/* The MPI backend (mpi_symm.c, mpi_collv.c, mpi_algo.c, mpi_publish.c). */
extern const dmuon_comm_ops dmuon_mpi_ops;
/* The NCCL backends (nccl_backend.h), in builds with NCCL. */
extern const dmuon_comm_ops dmuon_nccl_ops, dmuon_nccl_dev_ops;

#endif
