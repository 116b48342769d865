/*
 * topo.c — R nodes × K ranks over MPI (dmuon/topo.h).
 *
 * Invariants after init: world/node/rail are valid communicators; rank ==
 * node_id * per_node + local; the node communicator's rank of this process
 * is `local` and the rail communicator's is `node_id`.  Every decision that
 * can fail is agreed through an MPI_Allreduce first, so all ranks return the
 * same rc and nobody waits for a rank that already gave up.
 */
#include "dmuon/topo.h"

#include "nccl_backend.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

dmuon_rc dmuon_topo_parse_per_node(const char *text, int *out)
{
    char *end = NULL;
    errno = 0;
    long v = text ? strtol(text, &end, 10) : 0;
    if (!text || !*text || *end || (!errno && v < 1) || (errno && v != LONG_MAX))
        return DMUON_FAIL(DMUON_EINVAL, "ranks per node '%s': expected a positive integer",
                          text ? text : "(null)");
    if (errno || v >= (1 << 20))
        return DMUON_FAIL(DMUON_EINVAL, "ranks per node '%s': too large (at most %d)", text,
                          (1 << 20) - 1);
    *out = (int)v;
    return DMUON_OK;
}

/* Agrees on a failure code: every rank passes its local rc (0 = fine) and
 * gets the largest one back. */
static int agree_max(MPI_Comm comm, int v)
{
    int out = v;
    MPI_Allreduce(&v, &out, 1, MPI_INT, MPI_MAX, comm);
    return out;
}

dmuon_rc dmuon_topo_init(dmuon_topo *t, MPI_Comm comm, int ranks_per_node)
{
    dmuon_rc rc = DMUON_OK;
    memset(t, 0, sizeof *t);
    t->world = t->node = t->rail = MPI_COMM_NULL;
    t->backend = DMUON_BACKEND_MPI;
    if (MPI_Comm_dup(comm, &t->world) != MPI_SUCCESS)
        return DMUON_FAIL(DMUON_ECOMM, "MPI_Comm_dup failed");
    MPI_Comm_rank(t->world, &t->rank);
    MPI_Comm_size(t->world, &t->size);

    int k = ranks_per_node, bad = 0;
    if (k <= 0) {
        const char *env = getenv("DMUON_RANKS_PER_NODE");
        if (env && *env) {
            if (dmuon_topo_parse_per_node(env, &k) != DMUON_OK) {
                bad = 1;
                k = 0;
            }
        } else {
            k = 0;
        }
    }
    if (agree_max(t->world, bad)) {
        rc = DMUON_FAIL(DMUON_EINVAL, "DMUON_RANKS_PER_NODE: expected a positive integer "
                        "on every rank");
        goto fail;
    }
    int kmin = k, kmax = k;
    MPI_Allreduce(&k, &kmin, 1, MPI_INT, MPI_MIN, t->world);
    MPI_Allreduce(&k, &kmax, 1, MPI_INT, MPI_MAX, t->world);
    if (kmin != kmax) {
        rc = DMUON_FAIL(DMUON_EMISMATCH, "ranks per node differs across ranks (%d to %d): "
                        "give every rank the same --ranks-per-node / DMUON_RANKS_PER_NODE",
                        kmin, kmax);
        goto fail;
    }

    if (k > 0) {
        if (t->size % k != 0) {
            rc = DMUON_FAIL(DMUON_EINVAL, "ranks per node %d does not divide the %d ranks "
                            "(every node must have the same size; set by --ranks-per-node or "
                            "DMUON_RANKS_PER_NODE)", k, t->size);
            goto fail;
        }
        t->virtual_nodes = 1;
        if (MPI_Comm_split(t->world, t->rank / k, t->rank, &t->node) != MPI_SUCCESS) {
            rc = DMUON_FAIL(DMUON_ECOMM, "MPI_Comm_split (virtual node) failed");
            goto fail;
        }
        /* A virtual node must be one shared-memory domain. */
        MPI_Comm shm = MPI_COMM_NULL;
        int shm_size = 0;
        MPI_Comm_split_type(t->node, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &shm);
        MPI_Comm_size(shm, &shm_size);
        MPI_Comm_free(&shm);
        if (agree_max(t->world, shm_size != k)) {
            rc = DMUON_FAIL(DMUON_EINVAL, "a virtual node of %d consecutive ranks spans more "
                            "than one host (--ranks-per-node / DMUON_RANKS_PER_NODE must divide "
                            "each host's ranks)", k);
            goto fail;
        }
    } else {
        if (MPI_Comm_split_type(t->world, MPI_COMM_TYPE_SHARED, t->rank, MPI_INFO_NULL,
                                &t->node) != MPI_SUCCESS) {
            rc = DMUON_FAIL(DMUON_ECOMM, "MPI_Comm_split_type(MPI_COMM_TYPE_SHARED) failed");
            goto fail;
        }
        MPI_Comm_size(t->node, &k);
        int kmin2 = k, kmax2 = k;
        MPI_Allreduce(&k, &kmin2, 1, MPI_INT, MPI_MIN, t->world);
        MPI_Allreduce(&k, &kmax2, 1, MPI_INT, MPI_MAX, t->world);
        if (kmin2 != kmax2) {
            rc = DMUON_FAIL(DMUON_EINVAL, "nodes have different numbers of ranks (%d to %d); "
                            "every node must have the same size", kmin2, kmax2);
            goto fail;
        }
    }
    int local = 0;
    MPI_Comm_rank(t->node, &local);
    if (agree_max(t->world, local != t->rank % k)) {
        rc = DMUON_FAIL(DMUON_EINVAL, "the ranks of a node are not consecutive global ranks "
                        "(launch with one block of %d ranks per host, e.g. --map-by slot)", k);
        goto fail;
    }
    t->per_node = k;
    t->nodes = t->size / k;
    t->node_id = t->rank / k;
    t->local = local;
    if (MPI_Comm_split(t->world, t->local, t->node_id, &t->rail) != MPI_SUCCESS) {
        rc = DMUON_FAIL(DMUON_ECOMM, "MPI_Comm_split (rail) failed");
        goto fail;
    }
    return DMUON_OK;
fail:
    dmuon_topo_release(t);
    return rc;
}

void dmuon_topo_release(dmuon_topo *t)
{
    if (!t)
        return;
#ifdef DMUON_HAVE_NCCL
    dmuon_nccl_topo_release(t);
#endif
    if (t->rail != MPI_COMM_NULL && t->rail != 0)
        MPI_Comm_free(&t->rail);
    if (t->node != MPI_COMM_NULL && t->node != 0)
        MPI_Comm_free(&t->node);
    if (t->world != MPI_COMM_NULL && t->world != 0)
        MPI_Comm_free(&t->world);
    t->rail = t->node = t->world = MPI_COMM_NULL;
}
