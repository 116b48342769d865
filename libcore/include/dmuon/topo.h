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

/* Frees the communicators (collective); accepts a zeroed or released t. */
void dmuon_topo_release(dmuon_topo *t);

/* Parses a ranks-per-node value ("2"); DMUON_EINVAL unless a positive
 * integer below 2^20 (the message says "too large" with the limit above). */
dmuon_rc dmuon_topo_parse_per_node(const char *text, int *out);

#endif
