/*
 * nccl_backend.h — libcore-internal: the two NCCL backends (builds with
 * DMUON_HAVE_NCCL; comm/backend.h).
 *
 *   nccl      NCCL host API.  Symmetric memory on the GPU (nccl_symm.c:
 *             ncclMemAlloc, registered with ncclCommWindowRegister and
 *             NCCL_WIN_COLL_SYMMETRIC); AllGatherV / ReduceScatterV as the
 *             paper's line C: one ncclBroadcast / ncclReduce per segment from
 *             or to its owner, all of a layer in one ncclGroupStart/End
 *             (nccl_collv.c).  Reduction order is NCCL's, not sched.h's.
 *   nccl-dev  NCCL device API (NCCL >= 2.30, DMUON_HAVE_NCCL_DEV).  The same
 *             memory plus a device communicator; AllGatherV / ReduceScatterV
 *             are one kernel each that executes the queues of dmuon/sched.h,
 *             copied to the device as arrays (nccl_dev.c, the kernels in
 *             kernels/nccl_dev.cu behind comm/nccl_dev.h; scope there).
 *
 * One NCCL communicator per set of ranks (t->world), created at the first
 * allocation over it and kept by the process; each rank uses GPU t->local modulo the visible count (several
 * ranks on one GPU need NCCL_MULTI_RANK_GPU_ENABLE=1 and NCCL >= 2.30.3).
 * Publish and the split-phase calls are not offered on either: their ops
 * entries are NULL and the public layer returns DMUON_EUNSUPPORTED.
 */
#ifndef DMUON_COMM_NCCL_BACKEND_H
#define DMUON_COMM_NCCL_BACKEND_H

#include "backend.h"

#ifdef DMUON_HAVE_NCCL
#include <cuda_runtime_api.h>
#include <nccl.h>

/* The backend state of one symmetric memory (dmuon_symm.impl). */
typedef struct {
    int device;               /* CUDA device of this rank */
    ncclComm_t comm;          /* over t->world */
    cudaStream_t stream;      /* every operator call runs here */
    void *ptr;                /* ncclMemAlloc, bytes rounded up to DMUON_SYMM_ALIGN */
    size_t bytes;
    ncclWindow_t win;         /* NCCL_WIN_COLL_SYMMETRIC registration of ptr */
    int registered;
    void *dev;                /* nccl-dev: the device communicator (nccl_dev.cu) */
} nccl_symm;

/* DMUON_OK when a CUDA device is visible, else DMUON_EUNSUPPORTED "the
 * <backend> backend: no GPU found (...)".  Not collective. */
dmuon_rc dmuon_nccl_gpu_check(const char *backend);

/* Shared by both backends (nccl_symm.c).  The communicator of a memory is
 * shared by every memory over the same ranks (cached per process); a
 * backend that aborts it calls dmuon_nccl_comm_forget first. */
void dmuon_nccl_comm_forget(ncclComm_t comm);
dmuon_rc dmuon_nccl_symm_alloc(dmuon_symm *s);
void dmuon_nccl_symm_free(dmuon_symm *s);
dmuon_rc dmuon_nccl_symm_put(dmuon_symm *s, int64_t offset, const void *src, int64_t bytes);
dmuon_rc dmuon_nccl_symm_get(const dmuon_symm *s, int64_t offset, void *dst, int64_t bytes);

/* Host API operators (nccl_collv.c). */
dmuon_rc dmuon_nccl_group_ctrl_bytes(const dmuon_topo *t, const dmuon_segment *segs, int n,
                                     const dmuon_group_opts *opts, int64_t *bytes);
dmuon_rc dmuon_nccl_group_create(dmuon_group *g);
void dmuon_nccl_group_free(dmuon_group *g);
dmuon_rc dmuon_nccl_allgatherv(dmuon_group *g, int64_t buffer_offset, int64_t window_offset);
dmuon_rc dmuon_nccl_reduce_scatterv(dmuon_group *g, int64_t buffer_offset,
                                    int64_t window_offset);
/* Waits for the memory's stream until deadline_ms, polling NCCL's
 * asynchronous error; on a deadline aborts the communicator.  Errors:
 * DMUON_ETIMEOUT, DMUON_ECOMM (NCCL error), DMUON_EDEVICE. */
dmuon_rc dmuon_nccl_wait(nccl_symm *m, int deadline_ms, const char *what);

#endif

#endif
