/*
 * mpi_symm.c — symmetric memory on the MPI backend: one node-shared window
 * per node (MPI_Win_allocate_shared over t->node, alloc_shared_noncontig),
 * each rank's part rounded up to DMUON_SYMM_ALIGN plus one alignment granule
 * of slack, and the base moved up to the next DMUON_SYMM_ALIGN boundary.
 *
 * Invariants: a shared segment is mapped at page granularity in every
 * process, so an address's offset inside its 4 KiB page is the same in
 * every mapping, and aligning the peer pointers here gives each peer's own
 * base.  The window stays locked (MPI_Win_lock_all, MPI_MODE_NOCHECK) from
 * allocation to free, so MPI_Win_sync may order loads and stores at any
 * time.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dmuon/ctl.h"
#include "mpi_backend.h"

typedef struct {
    MPI_Win win;
    int locked;
    void *inflight;   /* head of the list of group calls in flight (mpi_collv.c) */
} mpi_symm;

static unsigned char *align_up(void *p)
{
    uintptr_t a = (uintptr_t)p;
    return (unsigned char *)((a + DMUON_SYMM_ALIGN - 1) & ~(uintptr_t)(DMUON_SYMM_ALIGN - 1));
}

/* Whether every rank of t's node got its window (MPI_Win_allocate_shared
 * returned mrc there), agreed within the node: then MPI_Win_free over the
 * node cannot wait for a rank that has no window. */
static bool node_all_ok(const dmuon_topo *t, int mrc, int deadline_ms)
{
    int64_t bad = mrc != MPI_SUCCESS;
    return dmuon_ctl_allreduce_i64(t->node, &bad, 1, DMUON_CTL_MAX, deadline_ms,
                                   "symmetric memory (node)") == DMUON_OK && !bad;
}

dmuon_rc dmuon_mpi_symm_alloc(dmuon_symm *s)
{
    const dmuon_topo *t = s->topo;
    int K = t->per_node;
    mpi_symm *m = calloc(1, sizeof *m);
    s->peer = calloc((size_t)K, sizeof *s->peer);
    int64_t fail = !m || !s->peer;
    dmuon_rc rc = dmuon_ctl_topo_allreduce_i64(t, &fail, 1, DMUON_CTL_MAX, s->deadline_ms,
                                               "symmetric memory");
    if (rc != DMUON_OK || fail) {
        free(m);
        free(s->peer);
        s->peer = NULL;
        return rc != DMUON_OK ? rc
                              : DMUON_FAIL(DMUON_ENOMEM, "out of memory creating symmetric memory");
    }
    m->win = MPI_WIN_NULL;
    int64_t part = (s->bytes + DMUON_SYMM_ALIGN - 1) / DMUON_SYMM_ALIGN * DMUON_SYMM_ALIGN +
                   DMUON_SYMM_ALIGN;
    MPI_Info info;
    MPI_Info_create(&info);
    MPI_Info_set(info, "alloc_shared_noncontig", "true");
    void *raw = NULL;
    int mrc = MPI_Win_allocate_shared((MPI_Aint)part, 1, info, t->node, &raw, &m->win);
    MPI_Info_free(&info);
    fail = mrc != MPI_SUCCESS;
    rc = dmuon_ctl_topo_allreduce_i64(t, &fail, 1, DMUON_CTL_MAX, s->deadline_ms,
                                      "symmetric memory");
    if (rc != DMUON_OK || fail) {
        /* MPI_Win_free is collective over the node: called only where
         * every rank of the node holds the window (another node failed);
         * after a missed deadline, or where a rank of this node has no
         * window, the window is left to process exit */
        bool whole = rc == DMUON_OK && node_all_ok(t, mrc, s->deadline_ms);
        if (mrc == MPI_SUCCESS && whole)
            MPI_Win_free(&m->win);
        free(m);
        free(s->peer);
        s->peer = NULL;
        return rc != DMUON_OK ? rc
                              : DMUON_FAIL(DMUON_ENOMEM, "MPI_Win_allocate_shared of %lld bytes "
                                           "per rank failed", (long long)part);
    }
    s->base = align_up(raw);
    for (int j = 0; j < K; j++) {
        MPI_Aint sz;
        int du;
        void *p = NULL;
        MPI_Win_shared_query(m->win, j, &sz, &du, &p);
        s->peer[j] = align_up(p);
    }
    /* zeroed: the whole pages by giving them back (a hole reads as zeros
     * and holds no memory until touched), the rest, or all of it where the
     * mapping refuses, by writing */
    {
        int64_t first = 0, n = dmuon_host_release(s->base, s->bytes, &first);
        memset(s->base, 0, (size_t)first);
        memset(s->base + first + n, 0, (size_t)(s->bytes - first - n));
    }
    MPI_Win_lock_all(MPI_MODE_NOCHECK, m->win);
    m->locked = 1;
    MPI_Win_sync(m->win);
    s->impl = m;
    /* every part zeroed before anyone writes: the agreement is the barrier
     * (after a missed deadline the window is left to process exit: a peer
     * may be gone, and freeing it is collective) */
    rc = dmuon_ctl_topo_agree(t, DMUON_OK, s->deadline_ms);
    if (rc != DMUON_OK) {
        s->impl = NULL;
        free(s->peer);
        s->peer = NULL;
        free(m);   /* the window itself is not freed: a peer may be gone */
    }
    return rc;
}

void dmuon_mpi_symm_free(dmuon_symm *s)
{
    mpi_symm *m = s->impl;
    if (m) {
        if (m->locked)
            MPI_Win_unlock_all(m->win);
        if (m->win != MPI_WIN_NULL)
            MPI_Win_free(&m->win);
        free(m);
    }
    free(s->peer);
    s->peer = NULL;
    s->impl = NULL;
}

MPI_Win dmuon_mpi_symm_win(const dmuon_symm *s)
{
    return ((const mpi_symm *)s->impl)->win;
}

void **dmuon_mpi_symm_inflight(dmuon_symm *s)
{
    return &((mpi_symm *)s->impl)->inflight;
}
