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
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

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

dmuon_rc dmuon_mpi_symm_alloc(dmuon_symm *s)
{
    const dmuon_topo *t = s->topo;
    int K = t->per_node;
    mpi_symm *m = calloc(1, sizeof *m);
    s->peer = calloc((size_t)K, sizeof *s->peer);
    int fail = !m || !s->peer;
    MPI_Allreduce(MPI_IN_PLACE, &fail, 1, MPI_INT, MPI_MAX, t->world);
    if (fail) {
        free(m);
        free(s->peer);
        s->peer = NULL;
        return DMUON_FAIL(DMUON_ENOMEM, "out of memory creating symmetric memory");
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
    MPI_Allreduce(MPI_IN_PLACE, &fail, 1, MPI_INT, MPI_MAX, t->world);
    if (fail) {
        if (mrc == MPI_SUCCESS)
            MPI_Win_free(&m->win);
        free(m);
        free(s->peer);
        s->peer = NULL;
        return DMUON_FAIL(DMUON_ENOMEM, "MPI_Win_allocate_shared of %lld bytes per rank failed",
                          (long long)part);
    }
    s->base = align_up(raw);
    for (int j = 0; j < K; j++) {
        MPI_Aint sz;
        int du;
        void *p = NULL;
        MPI_Win_shared_query(m->win, j, &sz, &du, &p);
        s->peer[j] = align_up(p);
    }
    memset(s->base, 0, (size_t)s->bytes);
    MPI_Win_lock_all(MPI_MODE_NOCHECK, m->win);
    m->locked = 1;
    MPI_Win_sync(m->win);
    MPI_Barrier(t->world);
    s->impl = m;
    return DMUON_OK;
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
