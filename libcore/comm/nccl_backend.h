/*
 * nccl_backend.h — libcore-internal: the two NCCL backends (builds with
 * DMUON_HAVE_NCCL; comm/backend.h).
 *
 *   nccl      NCCL host API.  Symmetric memory on the GPU (nccl_symm.c:
 *             ncclMemAlloc, registered with ncclCommWindowRegister and
 *             NCCL_WIN_COLL_SYMMETRIC); groups of the per-owner algorithm
 *             (the paper's line C: one ncclBroadcast / ncclReduce per segment
 *             from or to its owner, all of a call in one ncclGroupStart/End)
 *             and of the equal algorithm (ncclAllGather / ncclReduceScatter),
 *             at world and node scope, blocking and split phase
 *             (nccl_collv.c); the per-owner publish and its node half
 *             (nccl_publish.c).  Reduction order is NCCL's, not sched.h's.
 *   nccl-dev  NCCL device API (NCCL >= 2.30, DMUON_HAVE_NCCL_DEV).  The same
 *             memory plus a device communicator; AllGatherV / ReduceScatterV
 *             are one kernel each that executes the queues of dmuon/sched.h,
 *             copied to the device as arrays (nccl_dev.c, the kernels in
 *             kernels/nccl_dev.cu behind comm/nccl_dev.h; scope there).
 *
 * Communicators: a memory uses one set (dmuon_nccl_comms) over t->world:
 * the data communicator and the node and rail communicators split off it
 * (on an MPI topology at the first node-scope group or publish over those
 * ranks).
 * Over a topology built by dmuon_topo_init (MPI) the set is created at the
 * first allocation over those ranks (unique id over MPI) and kept by the
 * process; over one handed over by dmuon_topo_init_nccl / _id (nccl_topo.c)
 * it is the topology's, and no MPI call is made.  Each rank uses GPU
 * t->local modulo the visible count, or the handed communicator's device
 * (several ranks on one GPU need NCCL_MULTI_RANK_GPU_ENABLE=1 and NCCL >=
 * 2.30.3).  A deadline or an asynchronous NCCL error aborts every
 * communicator of the set (dmuon_nccl_comms_abort): every memory over it is
 * unusable afterwards (DMUON_ECOMM).
 *
 * None of this has run on a GPU: it is compiled (WERROR) on a machine
 * without one.
 */
#ifndef DMUON_COMM_NCCL_BACKEND_H
#define DMUON_COMM_NCCL_BACKEND_H

#include "backend.h"

#ifdef DMUON_HAVE_NCCL
#include <cuda_runtime_api.h>
#include <nccl.h>

#include "dmuon/ctl.h"

/* The communicators of one set of ranks.  world: the data calls over
 * t->world (rank = t->rank); node: the K ranks of the node (rank = local);
 * rail: the R ranks of the rail (rank = node_id).  After an abort all are
 * NULL and aborted is 1; node and rail are NULL until first needed; the struct itself stays allocated (memories still
 * point at it). */
typedef struct {
    ncclComm_t world, node, rail;
    int device;               /* CUDA device of this rank */
    int aborted;
} dmuon_nccl_comms;

/* The backend state of one symmetric memory (dmuon_symm.impl). */
typedef struct {
    int device;               /* CUDA device of this rank */
    dmuon_nccl_comms *cs;     /* the topology's (handed over) or the process's cache */
    cudaStream_t own_stream;  /* created with the memory */
    cudaStream_t stream;      /* every operator call runs here: own_stream or the
                                 caller's (dmuon_symm_set_stream) */
    void *ptr;                /* ncclMemAlloc, bytes rounded up to DMUON_SYMM_ALIGN */
    size_t bytes;
    ncclWindow_t win;         /* NCCL_WIN_COLL_SYMMETRIC registration of ptr */
    int registered;
    void *dev;                /* nccl-dev: the device communicator (nccl_dev.cu) */
} nccl_symm;

/* The state a handed-over topology carries in t->nccl (nccl_topo.c): its
 * data communicators, the communicator it made or was given, and the
 * control plane (its own communicator and stream, so a control call never
 * interleaves with a data call in flight on another stream). */
typedef struct {
    dmuon_nccl_comms data;
    ncclComm_t owned;         /* made by dmuon_topo_init_nccl_id; NULL when given */
    dmuon_nccl_comms ctl;     /* ctl.world only */
    cudaStream_t ctl_stream;
    cudaEvent_t ctl_event;
    void *ctl_dev;            /* DMUON_CTL_MAX_BYTES of device memory */
    void *ctl_host;           /* DMUON_CTL_MAX_BYTES of pinned host memory */
} dmuon_nccl_topo;

/* DMUON_OK when a CUDA device is visible, else DMUON_EUNSUPPORTED "the
 * <backend> backend: no GPU found (...)".  Not collective. */
dmuon_rc dmuon_nccl_gpu_check(const char *backend);

/* Aborts every communicator of cs (ncclCommAbort), forgets it in the
 * process's cache, marks it aborted.  Idempotent. */
void dmuon_nccl_comms_abort(dmuon_nccl_comms *cs);

/* Makes cs's node and rail communicators (ncclCommSplit of cs->world) if
 * it has none yet: collective over t->world, called where every rank is
 * (group and publish creation); mine is this rank's result so far, agreed
 * first together with cs being usable, so a rank that failed before never
 * leaves the others inside the split.  A topology handed over from NCCL has
 * them from the start.  deadline_ms bounds each agreement (0: the
 * environment's or the default).  Errors: the agreed ones, DMUON_ECOMM,
 * DMUON_ETIMEOUT. */
dmuon_rc dmuon_nccl_comms_split(const dmuon_topo *t, dmuon_nccl_comms *cs, dmuon_rc mine,
                                int deadline_ms);

/* DMUON_OK when cs is not aborted and its device could be selected, else
 * DMUON_ECOMM / DMUON_EDEVICE naming `what`. */
dmuon_rc dmuon_nccl_usable(const dmuon_nccl_comms *cs, const char *what);

/* A new event for a group or publish of memory m (its communicators
 * usable): DMUON_ECOMM / DMUON_EDEVICE naming `what`; *ev NULL on failure. */
dmuon_rc dmuon_nccl_event_new(const nccl_symm *m, cudaEvent_t *ev, const char *what);

/* Records ev on m's stream after the work just enqueued; a failure aborts
 * m's communicators (the work may be half enqueued): DMUON_EDEVICE. */
dmuon_rc dmuon_nccl_event_record(cudaEvent_t ev, nccl_symm *m, const char *what);

/* One poll of a call that recorded ev after its work: *done 1 when ev
 * completed; 0 while it runs.  An asynchronous error of a communicator of
 * cs aborts cs: DMUON_ECOMM; a CUDA error: DMUON_EDEVICE. */
dmuon_rc dmuon_nccl_event_test(cudaEvent_t ev, dmuon_nccl_comms *cs, int *done,
                               const char *what);

/* Polls ev (dmuon_nccl_event_test) until done or deadline_ms passed; past it
 * aborts cs and returns DMUON_ETIMEOUT naming `what` and the deadline. */
dmuon_rc dmuon_nccl_event_wait(cudaEvent_t ev, dmuon_nccl_comms *cs, int deadline_ms,
                               const char *what);

/* Shared by both backends (nccl_symm.c). */
dmuon_rc dmuon_nccl_symm_alloc(dmuon_symm *s);
void dmuon_nccl_symm_free(dmuon_symm *s);
dmuon_rc dmuon_nccl_symm_put(dmuon_symm *s, int64_t offset, const void *src, int64_t bytes);
dmuon_rc dmuon_nccl_symm_get(const dmuon_symm *s, int64_t offset, void *dst, int64_t bytes);
void *dmuon_nccl_symm_stream(const dmuon_symm *s);
dmuon_rc dmuon_nccl_symm_set_stream(dmuon_symm *s, void *stream);

/* Host API groups (nccl_collv.c); ctrl_bytes is also nccl-dev's. */
dmuon_rc dmuon_nccl_group_ctrl_bytes(const dmuon_topo *t, const dmuon_segment *segs, int n,
                                     const dmuon_group_opts *opts, int64_t *bytes);

/* The publish of the nccl backend (nccl_publish.c). */
extern const dmuon_publish_ops dmuon_nccl_publish_per_owner_ops;

/* The control plane over a handed-over topology (nccl_topo.c; dmuon/ctl.h
 * semantics, t->nccl set): v holds n values of 8 bytes (f64: 1 → double,
 * 0 → int64). */
dmuon_rc dmuon_nccl_ctl_allreduce(const dmuon_topo *t, void *v, int n, int f64, dmuon_ctl_op op,
                                  int deadline_ms, const char *what);
dmuon_rc dmuon_nccl_ctl_bcast(const dmuon_topo *t, void *data, int bytes, int root,
                              int deadline_ms, const char *what);
/* Frees t->nccl (dmuon_topo_release). */
void dmuon_nccl_topo_release(dmuon_topo *t);

#endif

#endif
