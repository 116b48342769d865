/*
 * dmuon/topo.h — the two-level topology the operators route over (paper §2.3,
 * §5.2): R nodes of K ranks each, N = R·K.  Rank (r, s) is global rank
 * r·K + s; local index s is its column, and the ranks with the same s on all
 * nodes form rail s.
 *
 * A node is what MPI_COMM_TYPE_SHARED returns, unless a ranks-per-node value
 * K (argument, or environment variable DMUON_RANKS_PER_NODE) makes virtual
 * nodes of K consecutive ranks (for tests on one host).  Either way every
 * node has the same size and holds consecutive global ranks; anything else
 * is an error on every rank, never a hang.
 */
#ifndef DMUON_TOPO_H
#define DMUON_TOPO_H

#include <mpi.h>

#include "dmuon/rc.h"

/* The communication backend that symmetric memory, groups and publishes
 * built over a topology use (comm/backend.h).  MPI is always built; the NCCL
 * backends only in builds with CUDA and NCCL (nccl-dev: NCCL >= 2.30), and
 * anything built over a topology that selects a missing one fails with
 * DMUON_EUNSUPPORTED.  The NCCL backends put symmetric memory on the GPU
 * (device memory: use dmuon_symm_put / dmuon_symm_get from the host). */
typedef enum {
    DMUON_BACKEND_MPI = 0,     /* node-shared MPI windows + point-to-point on rails */
    DMUON_BACKEND_NCCL,        /* NCCL host API (not in this build) */
    DMUON_BACKEND_NCCL_DEV,    /* NCCL device API kernels (not in this build) */
    DMUON_BACKEND_COUNT
} dmuon_backend;

/* "mpi", "nccl", "nccl-dev"; "?" for another value. */
const char *dmuon_backend_name(dmuon_backend b);

/* Parses "mpi", "nccl" or "nccl-dev".  Errors: DMUON_EINVAL naming the value
 * and the names. */
dmuon_rc dmuon_backend_parse(const char *text, dmuon_backend *out);

/* Whether backend b can run here (not collective): DMUON_OK, or
 * DMUON_EUNSUPPORTED with a message saying why ("built without GPU support",
 * "built with NCCL x.y.z, the device API needs >= 2.30", "no GPU found"). */
dmuon_rc dmuon_backend_check(dmuon_backend b);

typedef struct {
    MPI_Comm world;   /* duplicate of the communicator given to init */
    MPI_Comm node;    /* the K ranks of this node, ordered by local index */
    MPI_Comm rail;    /* the R ranks of this rail, ordered by node */
    int rank, size;   /* global rank and N */
    int nodes;        /* R */
    int per_node;     /* K */
    int node_id;      /* r = rank / K */
    int local;        /* s = rank % K, also the rail index */
    int virtual_nodes;/* 1 when K came from an argument or the environment */
    dmuon_backend backend; /* DMUON_BACKEND_MPI after init; a caller may set
                              another before building memory over t */
    void *nccl;       /* NULL after dmuon_topo_init; set by dmuon_topo_init_nccl
                         and _id: the NCCL communicators and control plane of a
                         topology without MPI (opaque; freed by release) */
} dmuon_topo;

/* 1 when this rank leads a parameter owned by rank `owner` in the HSDP
 * publish: the owner is on this rank's rail (same local rank) but another
 * node, so the parameter arrives here and this rank serves it to its node.
 * Pure. */
static inline int dmuon_topo_leads(const dmuon_topo *t, int owner)
{
    return owner % t->per_node == t->local && owner != t->rank;
}

/* Global rank of (node, local) in a topology of per_node ranks per node. */
static inline int dmuon_topo_rank_of(int per_node, int node, int local)
{
    return node * per_node + local;
}

/* Builds the topology over comm (collective over comm).  ranks_per_node > 0
 * makes virtual nodes of that many consecutive ranks; 0 reads
 * DMUON_RANKS_PER_NODE and, when unset, uses MPI_COMM_TYPE_SHARED.
 * Errors (returned on every rank): DMUON_EINVAL (K does not divide N, K < 1,
 * DMUON_RANKS_PER_NODE not a positive integer, shared-memory nodes of
 * different sizes or not consecutive ranks, a virtual node spanning hosts),
 * DMUON_EMISMATCH (ranks were given different K), DMUON_ECOMM (an MPI call
 * failed).  On failure nothing is left to release. */
dmuon_rc dmuon_topo_init(dmuon_topo *t, MPI_Comm comm, int ranks_per_node);

/* Frees the communicators (collective); accepts a zeroed or released t.
 * On a topology from dmuon_topo_init_nccl / _id: destroys the NCCL
 * communicators it made (ncclCommDestroy, collective over them; skipped for
 * those aborted by a failed call) and frees its control-plane buffers; the
 * trainer's communicator is left alone.  Every symmetric memory, group and
 * publish over t must be freed first. */
void dmuon_topo_release(dmuon_topo *t);

/*
 * A topology over NCCL without MPI (communicator handoff): a trainer that
 * already runs NCCL gives the comm layer its communicator, or an
 * ncclUniqueId it distributed itself, plus the facts NCCL cannot tell
 * (ranks per node).  Nothing here calls MPI, and nothing built over such a
 * topology does: symmetric memory, groups and the publish of the nccl and
 * nccl-dev backends, table agreement and the control plane (dmuon/ctl.h,
 * dmuon_ctl_topo_*) all run over NCCL.  MPI_Init is not needed; the library
 * still links libmpi (the MPI backend and the MPI_Comm functions are in the
 * same library), and the MPI backend cannot run over such a topology
 * (world, node and rail are MPI_COMM_NULL; symmetric memory on it is
 * DMUON_EUNSUPPORTED).
 *
 * Layout facts: rank r of size N; ranks_per_node K divides N and node r/K
 * holds the consecutive ranks r/K·K … r/K·K + K − 1 (the caller's launch
 * must place them so: nothing without MPI can check which ranks share a
 * host; nccl-dev checks NCCL's LSA team against it at allocation).
 *
 * The topology makes its own communicators with ncclCommSplit (collective
 * over every rank of comm, in the same order): a data communicator over all
 * N ranks, the node and the rail communicators, and a control communicator,
 * so a call that passes its deadline aborts only those (ncclCommAbort) and
 * never the trainer's; a control call runs on a stream of its own and never
 * interleaves with a data call in flight.  Device: the communicator's
 * (ncclCommCuDevice).  Cost: four communicators and 2 MiB (1 MiB device, 1
 * MiB pinned host) for the control plane.
 *
 * Errors (every rank gets the same code where it can reach the others):
 * DMUON_EUNSUPPORTED (built without NCCL; no GPU visible), DMUON_EINVAL
 * (comm or unique_id NULL; size < 1, rank outside 0..size−1, K < 1 or not
 * dividing size; rank or size different from the communicator's own, before
 * any collective), DMUON_ECOMM (an NCCL call failed: init, split; the
 * message names it), DMUON_EDEVICE (a CUDA call failed), DMUON_ENOMEM.  A
 * failure before the control communicator exists (bad arguments, a failed
 * split or stream) is local: the other ranks fail in their own split or at
 * their deadline.  On failure t is zeroed, world/node/rail MPI_COMM_NULL,
 * nothing left to release.  Not thread-safe; one topology per communicator
 * at a time.  Compiled, never run: no GPU where it was written.
 */

/* The size of an ncclUniqueId (NCCL_UNIQUE_ID_BYTES; checked at build). */
#define DMUON_NCCL_UNIQUE_ID_BYTES 128

struct ncclComm;   /* ncclComm_t is struct ncclComm *: pass the trainer's as is */

/* Over the trainer's communicator comm (rank, size: this rank's and the
 * count, as in ncclCommUserRank / ncclCommCount; checked).  comm must stay
 * alive, and not be aborted or destroyed, until dmuon_topo_release(t). */
dmuon_rc dmuon_topo_init_nccl(dmuon_topo *t, struct ncclComm *comm, int rank, int size,
                              int ranks_per_node);

/* Bootstraps a communicator from unique_id (DMUON_NCCL_UNIQUE_ID_BYTES bytes:
 * an ncclUniqueId from ncclGetUniqueId on one rank, the same bytes on
 * every rank; read, not kept) with ncclCommInitRank(size, id, rank) on CUDA
 * device `device` (≥ 0; −1: (rank mod K) mod the visible count, as the MPI
 * path picks), then as dmuon_topo_init_nccl over it.  The topology owns that
 * communicator and destroys it at release. */
dmuon_rc dmuon_topo_init_nccl_id(dmuon_topo *t, const void *unique_id, int rank, int size,
                                 int ranks_per_node, int device);

/* Parses a ranks-per-node value ("2"); DMUON_EINVAL unless a positive
 * integer below 2^20 (the message says "too large" with the limit above). */
dmuon_rc dmuon_topo_parse_per_node(const char *text, int *out);

#endif
