/*
 * nccl_dev.h — libcore-internal: the device-API kernels of the nccl-dev
 * backend (kernels/nccl_dev.cu, C++) behind a C interface free of MPI, so the
 * CUDA file needs only NCCL's and dmuon's MPI-free headers.  The backend's
 * glue (groups, agreement, the ops table) is comm/nccl_dev.c.
 *
 * What the kernels execute: the queues of dmuon/sched.h, copied to the
 * device once per group (dmuon_ncclx_queues).  Inside a node they load and
 * store through LSA pointers into the peers' symmetric windows
 * (ncclGetLsaPointer): AllGatherV stores each chunk of this rank's rail
 * queue from the owner's window into every node peer's layer buffer;
 * ReduceScatterV sums each chunk of its rail queue over the node in binary32
 * in local-rank order (sched.h's L_r) and writes the rounded sum into the
 * owner's window.  One LSA barrier per block brackets each call (all inputs
 * in place before any load; all stores done before any rank returns), with
 * a timeout that sets an error word instead of hanging.
 *
 * Across nodes (AllGatherV only): the rail's rank of a node forwards each
 * chunk it holds (its own node's, or one received) to the next nodes of the
 * queue's route (sched.h: chain or star) with a GIN put along the rail into
 * the same offsets of their layer buffers, each put carrying a strong
 * signal increment; signal q·16 + b counts the chunks of source node q that
 * block b received, ever (a device counter keeps the base, so sequence
 * numbers only grow across calls and are never reset).  A receiver waits
 * for its count before storing a chunk into its node peers and forwarding
 * it.  Before its first put of a call a sender waits for the receiver's
 * "ready" signal of that call (16·R + receiver·16 + b), which every rank
 * sends upstream when it enters a call, so no put lands in a buffer still in
 * use by the previous call.  ReduceScatterV across nodes (ring slots with
 * acknowledgement counters) and multimem are not built (DMUON_EUNSUPPORTED
 * at the call), nor the persistent publish kernel.  At most
 * DMUON_NCCLX_BLOCKS blocks, the same count on every rank (from the
 * schedule).  Nothing of the cross-node path has run: it needs GPUs on
 * several nodes with GPUDirect-RDMA NICs.
 */
#ifndef DMUON_COMM_NCCL_DEV_H
#define DMUON_COMM_NCCL_DEV_H

#include <stdint.h>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "dmuon/rc.h"
#include "dmuon/sched.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DMUON_NCCLX_BLOCKS 16   /* paper C.2: at most 16 blocks */

typedef struct dmuon_ncclx_comm dmuon_ncclx_comm;

/* Creates the device communicator of comm (ncclDevCommCreate with
 * DMUON_NCCLX_BLOCKS LSA barriers; with nodes > 1 also one GIN context and
 * 2·16·nodes signals over rail connections) and checks that NCCL's LSA team
 * is the node of per_node ranks with this rank at index local, and its rail
 * team the nodes with this rank at index node.  Collective over comm.
 * Errors: DMUON_ECOMM (NCCL; e.g. no GIN-capable network across nodes),
 * DMUON_EUNSUPPORTED (the teams are not the topology's: e.g. ranks of one
 * node on GPUs without peer access), DMUON_ENOMEM. */
dmuon_rc dmuon_ncclx_comm_create(ncclComm_t comm, int nodes, int node, int per_node, int local,
                                 dmuon_ncclx_comm **out);
/* Destroys it (before the window and the communicator); accepts NULL. */
void dmuon_ncclx_comm_free(ncclComm_t comm, dmuon_ncclx_comm *d);

/* A schedule's queues on the device: chunks[] and first[] as in dmuon_sched,
 * plus the block count every call of this schedule launches. */
typedef struct {
    dmuon_chunk *chunks;      /* device, nchunks entries */
    int *first;               /* device, nqueues + 1 entries */
    int nchunks, nqueues, nodes;
    int blocks;               /* min(DMUON_NCCLX_BLOCKS, longest queue), >= 1 */
    int *err;                 /* device word: a barrier or signal timed out */
    /* this rank's node's part of the routes (device): per source node q the
     * node it receives q's chunks from (-1: it is q) and the nodes it sends
     * them to (route_n[q] entries at route[q·R]); the distinct upstream and
     * downstream nodes */
    int *in_node, *route_n, *route, *ups, *downs;
    int nups, ndowns;
    uint64_t *base;           /* device, R·16: chunks received ever, per (q, block) */
    uint64_t *calls;          /* device, 16: calls made, per block */
} dmuon_ncclx_queues;

/* Copies s's queues and this node's routes to the device.  Errors:
 * DMUON_EDEVICE, DMUON_ENOMEM. */
dmuon_rc dmuon_ncclx_queues_upload(const dmuon_sched *s, int node, dmuon_ncclx_queues *q);
void dmuon_ncclx_queues_free(dmuon_ncclx_queues *q);

/* One call on stream st over window win (the symmetric memory's
 * registration; offsets are bytes into every rank's part).  Returns after
 * the call finished (stream synchronised, bounded by deadline_ms).  Errors:
 * DMUON_ETIMEOUT (a barrier or the stream passed the deadline), DMUON_EDEVICE. */
dmuon_rc dmuon_ncclx_allgatherv(dmuon_ncclx_comm *d, ncclWindow_t win, const dmuon_ncclx_queues *q,
                                int node, int per_node, int local, int64_t buffer_offset,
                                int64_t window_offset, int deadline_ms, cudaStream_t st);
dmuon_rc dmuon_ncclx_reduce_scatterv(dmuon_ncclx_comm *d, ncclWindow_t win,
                                     const dmuon_ncclx_queues *q, int per_node, int local,
                                     int64_t buffer_offset, int64_t window_offset,
                                     int deadline_ms, cudaStream_t st);

#ifdef __cplusplus
}
#endif

#endif
