/*
 * nccl_topo.c — a topology over NCCL without MPI (dmuon/topo.h,
 * dmuon_topo_init_nccl / _id) and the control plane over it (dmuon/ctl.h,
 * dmuon_ctl_topo_*; nccl_backend.h).
 *
 * The topology splits four communicators off the trainer's (ncclCommSplit,
 * in this order on every rank): data world (color 0, key rank), node (color
 * rank / K, key rank % K), rail (color rank % K, key rank / K) and control
 * (color 0, key rank).  A control call copies its values through a pinned
 * host buffer and a device buffer of DMUON_CTL_MAX_BYTES each, on a stream
 * of its own, and polls an event recorded after the copy back
 * (dmuon_nccl_event_wait: deadline, asynchronous errors, abort).
 *
 * Invariants: t->nccl is set only when every split and every control
 * resource exists; a control communicator that was aborted stays NULL and
 * every later control call says so; release destroys exactly what the
 * topology made.  Compiled only: no GPU has run this file.
 */
#include "nccl_backend.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dmuon/collv.h"
#include "dmuon/topo.h"

#ifdef DMUON_HAVE_NCCL

_Static_assert(sizeof(ncclUniqueId) == DMUON_NCCL_UNIQUE_ID_BYTES,
               "DMUON_NCCL_UNIQUE_ID_BYTES is not NCCL's NCCL_UNIQUE_ID_BYTES");

void dmuon_nccl_topo_release(dmuon_topo *t)
{
    dmuon_nccl_topo *h = t->nccl;
    if (!h)
        return;
    cudaSetDevice(h->data.device);
    if (h->ctl_stream)   /* an aborted call's copies finish before the buffers go */
        cudaStreamSynchronize(h->ctl_stream);
    if (h->ctl_dev)
        cudaFree(h->ctl_dev);
    if (h->ctl_host)
        cudaFreeHost(h->ctl_host);
    if (h->ctl_event)
        cudaEventDestroy(h->ctl_event);
    if (h->ctl_stream)
        cudaStreamDestroy(h->ctl_stream);
    ncclComm_t c[5] = {h->ctl.world, h->data.rail, h->data.node, h->data.world, h->owned};
    for (int i = 0; i < 5; i++)
        if (c[i])
            ncclCommDestroy(c[i]);
    free(h);
    t->nccl = NULL;
}

/* The splits and the control resources of h over comm (rank of size, K). */
static dmuon_rc make_parts(dmuon_nccl_topo *h, ncclComm_t comm, int rank, int K)
{
    const int color[4] = {0, rank / K, rank % K, 0}, key[4] = {rank, rank % K, rank / K, rank};
    ncclComm_t *out[4] = {&h->data.world, &h->data.node, &h->data.rail, &h->ctl.world};
    static const char *const names[4] = {"data", "node", "rail", "control"};
    for (int i = 0; i < 4; i++) {
        ncclResult_t r = ncclCommSplit(comm, color[i], key[i], out[i], NULL);
        if (r != ncclSuccess) {
            *out[i] = NULL;
            return DMUON_FAIL(DMUON_ECOMM, "nccl topology: ncclCommSplit (%s communicator) on "
                              "rank %d: %s", names[i], rank, ncclGetErrorString(r));
        }
    }
    cudaError_t e = cudaStreamCreateWithFlags(&h->ctl_stream, cudaStreamNonBlocking);
    if (e == cudaSuccess)
        e = cudaEventCreateWithFlags(&h->ctl_event, cudaEventDisableTiming);
    if (e == cudaSuccess)
        e = cudaMalloc(&h->ctl_dev, DMUON_CTL_MAX_BYTES);
    if (e == cudaSuccess)
        e = cudaMallocHost(&h->ctl_host, DMUON_CTL_MAX_BYTES);
    if (e != cudaSuccess)
        return DMUON_FAIL(e == cudaErrorMemoryAllocation ? DMUON_ENOMEM : DMUON_EDEVICE,
                          "nccl topology: the control plane's stream and buffers on GPU %d: %s",
                          h->data.device, cudaGetErrorString(e));
    return DMUON_OK;
}

/* Builds t over comm; owned: comm was made here (destroyed at release). */
static dmuon_rc setup(dmuon_topo *t, ncclComm_t comm, int owned, int rank, int size, int K)
{
    dmuon_rc rc = DMUON_OK;
    int n = 0, r = 0, dev = 0;
    if (ncclCommCount(comm, &n) != ncclSuccess || ncclCommUserRank(comm, &r) != ncclSuccess ||
        ncclCommCuDevice(comm, &dev) != ncclSuccess)
        return DMUON_FAIL(DMUON_ECOMM, "nccl topology: the communicator does not answer its "
                          "rank, size and device");
    if (n != size || r != rank)
        return DMUON_FAIL(DMUON_EINVAL, "nccl topology: rank %d of %d given, but the "
                          "communicator says rank %d of %d", rank, size, r, n);
    if (cudaSetDevice(dev) != cudaSuccess)
        return DMUON_FAIL(DMUON_EDEVICE, "nccl topology: cannot select GPU %d", dev);
    dmuon_nccl_topo *h = calloc(1, sizeof *h);
    if (!h)
        return DMUON_FAIL(DMUON_ENOMEM, "nccl topology: out of memory");
    h->data.device = h->ctl.device = dev;
    h->owned = owned ? comm : NULL;
    rc = make_parts(h, comm, rank, K);
    t->nccl = h;
    t->rank = rank;
    t->size = size;
    t->per_node = K;
    t->nodes = size / K;
    t->node_id = rank / K;
    t->local = rank % K;
    t->virtual_nodes = 1;
    if (rc == DMUON_OK && h->ctl.world)
        rc = dmuon_ctl_topo_agree(t, DMUON_OK, 0);   /* every rank got here */
    if (rc != DMUON_OK) {
        h->owned = NULL;   /* the caller destroys what it made on failure */
        dmuon_nccl_topo_release(t);
    }
    return rc;
}

static void topo_zero(dmuon_topo *t)
{
    memset(t, 0, sizeof *t);
    t->world = t->node = t->rail = MPI_COMM_NULL;
    t->backend = DMUON_BACKEND_NCCL;
}

static dmuon_rc topo_args(dmuon_topo *t, const void *p, int rank, int size, int K)
{
    topo_zero(t);
    if (!p)
        return DMUON_FAIL(DMUON_EINVAL, "nccl topology: no communicator or unique id given");
    if (size < 1 || rank < 0 || rank >= size || K < 1 || size % K)
        return DMUON_FAIL(DMUON_EINVAL, "nccl topology: rank %d of %d ranks, %d per node: "
                          "expected 0 <= rank < size and ranks per node dividing size", rank,
                          size, K);
    return dmuon_nccl_gpu_check("nccl");
}

dmuon_rc dmuon_topo_init_nccl(dmuon_topo *t, struct ncclComm *comm, int rank, int size,
                              int ranks_per_node)
{
    DMUON_TRY(topo_args(t, comm, rank, size, ranks_per_node));
    dmuon_rc rc = setup(t, comm, 0, rank, size, ranks_per_node);
    if (rc != DMUON_OK)
        topo_zero(t);
    return rc;
}

dmuon_rc dmuon_topo_init_nccl_id(dmuon_topo *t, const void *unique_id, int rank, int size,
                                 int ranks_per_node, int device)
{
    DMUON_TRY(topo_args(t, unique_id, rank, size, ranks_per_node));
    int count = 0;
    cudaGetDeviceCount(&count);
    if (device < 0)
        device = (rank % ranks_per_node) % count;
    if (device >= count || cudaSetDevice(device) != cudaSuccess)
        return DMUON_FAIL(DMUON_EINVAL, "nccl topology: GPU %d: expected one of the %d visible",
                          device, count);
    ncclUniqueId id;
    memcpy(&id, unique_id, sizeof id);
    ncclComm_t comm = NULL;
    ncclResult_t r = ncclCommInitRank(&comm, size, id, rank);
    if (r != ncclSuccess)
        return DMUON_FAIL(DMUON_ECOMM, "nccl topology: ncclCommInitRank (rank %d of %d, GPU "
                          "%d): %s%s", rank, size, device, ncclGetErrorString(r),
                          count < ranks_per_node ? " (several ranks per GPU need "
                          "NCCL_MULTI_RANK_GPU_ENABLE=1 and NCCL >= 2.30.3)" : "");
    dmuon_rc rc = setup(t, comm, 1, rank, size, ranks_per_node);
    if (rc != DMUON_OK) {
        ncclCommDestroy(comm);
        topo_zero(t);
    }
    return rc;
}

/* ------------------------------------------------------ control plane -- */

/* Runs one control call already enqueued on the control stream up to its
 * copy back: records the event and waits within the deadline. */
static dmuon_rc ctl_finish(dmuon_nccl_topo *h, const dmuon_topo *t, ncclResult_t r,
                           size_t bytes, int deadline_ms, const char *what)
{
    char w[160];
    snprintf(w, sizeof w, "%s: rank %d", what, t->rank);
    if (r != ncclSuccess)
        return DMUON_FAIL(DMUON_ECOMM, "%s: NCCL: %s", w, ncclGetErrorString(r));
    cudaError_t e = cudaMemcpyAsync(h->ctl_host, h->ctl_dev, bytes,
                                    cudaMemcpyDeviceToHost, h->ctl_stream);
    if (e == cudaSuccess)
        e = cudaEventRecord(h->ctl_event, h->ctl_stream);
    if (e != cudaSuccess)
        return DMUON_FAIL(DMUON_EDEVICE, "%s: %s", w, cudaGetErrorString(e));
    int ms = 0;
    DMUON_TRY(dmuon_deadline_ms(deadline_ms, &ms));
    return dmuon_nccl_event_wait(h->ctl_event, &h->ctl, ms, w);
}

/* Copies bytes of src to the device buffer on the control stream. */
static dmuon_rc ctl_start(dmuon_nccl_topo *h, const void *src, size_t bytes, const char *what)
{
    DMUON_TRY(dmuon_nccl_usable(&h->ctl, what));
    memcpy(h->ctl_host, src, bytes);
    cudaError_t e = cudaMemcpyAsync(h->ctl_dev, h->ctl_host, bytes, cudaMemcpyHostToDevice,
                                    h->ctl_stream);
    if (e != cudaSuccess)
        return DMUON_FAIL(DMUON_EDEVICE, "%s: %s", what, cudaGetErrorString(e));
    return DMUON_OK;
}

dmuon_rc dmuon_nccl_ctl_allreduce(const dmuon_topo *t, void *v, int n, int f64, dmuon_ctl_op op,
                                  int deadline_ms, const char *what)
{
    dmuon_nccl_topo *h = t->nccl;
    const size_t bytes = (size_t)n * 8;
    DMUON_TRY(ctl_start(h, v, bytes, what));
    const ncclRedOp_t rop = op == DMUON_CTL_MIN ? ncclMin : op == DMUON_CTL_MAX ? ncclMax : ncclSum;
    ncclResult_t r = ncclAllReduce(h->ctl_dev, h->ctl_dev, (size_t)n,
                                   f64 ? ncclFloat64 : ncclInt64, rop, h->ctl.world,
                                   h->ctl_stream);
    DMUON_TRY(ctl_finish(h, t, r, bytes, deadline_ms, what));
    memcpy(v, h->ctl_host, bytes);
    return DMUON_OK;
}

dmuon_rc dmuon_nccl_ctl_bcast(const dmuon_topo *t, void *data, int bytes, int root,
                              int deadline_ms, const char *what)
{
    dmuon_nccl_topo *h = t->nccl;
    if (bytes == 0)
        return DMUON_OK;
    DMUON_TRY(ctl_start(h, data, (size_t)bytes, what));
    ncclResult_t r = ncclBroadcast(h->ctl_dev, h->ctl_dev, (size_t)bytes, ncclUint8, root,
                                   h->ctl.world, h->ctl_stream);
    DMUON_TRY(ctl_finish(h, t, r, (size_t)bytes, deadline_ms, what));
    memcpy(data, h->ctl_host, (size_t)bytes);
    return DMUON_OK;
}

#else   /* built without NCCL: the handoff is refused, saying why */

static dmuon_rc no_nccl(dmuon_topo *t)
{
    memset(t, 0, sizeof *t);
    t->world = t->node = t->rail = MPI_COMM_NULL;
    return DMUON_FAIL(DMUON_EUNSUPPORTED, "nccl topology: this dmuon was built without GPU "
                      "support (CUDA toolkit and NCCL not found at build time)");
}

dmuon_rc dmuon_topo_init_nccl(dmuon_topo *t, struct ncclComm *comm, int rank, int size,
                              int ranks_per_node)
{
    (void)comm, (void)rank, (void)size, (void)ranks_per_node;
    return no_nccl(t);
}

dmuon_rc dmuon_topo_init_nccl_id(dmuon_topo *t, const void *unique_id, int rank, int size,
                                 int ranks_per_node, int device)
{
    (void)unique_id, (void)rank, (void)size, (void)ranks_per_node, (void)device;
    return no_nccl(t);
}

#endif
