/*
 * nccl_symm.c — symmetric memory of the NCCL backends (nccl_backend.h): the
 * GPU pool of paper §6 / C.1.  Each rank's part is one ncclMemAlloc
 * allocation (cuMem-backed, so NCCL can map it into its peers), zeroed and
 * registered as a symmetric window (ncclCommWindowRegister with
 * NCCL_WIN_COLL_SYMMETRIC); the layout inside it is the callers' (the
 * runtime's pool layout, dmuon/pool.h, or a tool's dmuon_group_span), the
 * same code as on the CPU.
 *
 * Invariants: the base is DMUON_SYMM_ALIGN (4 KiB) aligned, as NCCL's
 * windows require (checked, not assumed); every failure is agreed over
 * t->world before any later collective, so no rank is left inside
 * ncclCommInitRank or the registration; teardown runs in reverse order
 * (window, memory, stream, communicator).
 */
#include "nccl_backend.h"

#include "dmuon/ctl.h"

#ifdef DMUON_HAVE_NCCL

#include <stdint.h>
#include <stdio.h>

#include "dmuon/types.h"
#include <stdlib.h>
#include <string.h>

dmuon_rc dmuon_nccl_gpu_check(const char *backend)
{
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0)
        return DMUON_FAIL(DMUON_EUNSUPPORTED, "the %s backend: no GPU found (%s)", backend,
                          e != cudaSuccess ? cudaGetErrorString(e) : "no CUDA device visible");
    return DMUON_OK;
}

/* ---------------------------------------------------- communicators -- */

/* NCCL communicators are costly to create (seconds with many ranks), and a
 * tool allocates symmetric memory many times over one topology, so each
 * process keeps one communicator per set of ranks: the key is this rank and
 * the MPI_COMM_WORLD ranks of the topology's world in order (a digest of
 * them), so a freed and reused MPI handle never picks up the wrong
 * communicator.  Entries are kept to process exit (no collective teardown
 * at exit) unless one failed, which removes it.  One thread. */
#define NCCL_COMMS 8
static struct {
    int used, size, rank;
    uint64_t members;
    ncclComm_t comm;
} comms[NCCL_COMMS];

static uint64_t members_digest(const dmuon_topo *t)
{
    MPI_Group g, wg;
    int *in = malloc((size_t)t->size * sizeof *in), *out = malloc((size_t)t->size * sizeof *out);
    uint64_t h = DMUON_DIGEST_SEED;
    if (in && out) {
        MPI_Comm_group(t->world, &g);
        MPI_Comm_group(MPI_COMM_WORLD, &wg);
        for (int i = 0; i < t->size; i++)
            in[i] = i;
        MPI_Group_translate_ranks(g, t->size, in, wg, out);
        MPI_Group_free(&g);
        MPI_Group_free(&wg);
        h = dmuon_digest(out, (size_t)t->size * sizeof *out, h);
    }
    free(in);
    free(out);
    return h;
}

/* The cached communicator of t, or NULL. */
static ncclComm_t comm_find(const dmuon_topo *t, uint64_t members)
{
    for (int i = 0; i < NCCL_COMMS; i++)
        if (comms[i].used && comms[i].size == t->size && comms[i].rank == t->rank &&
            comms[i].members == members)
            return comms[i].comm;
    return NULL;
}

static void comm_keep(const dmuon_topo *t, uint64_t members, ncclComm_t c)
{
    for (int i = 0; i < NCCL_COMMS; i++)
        if (!comms[i].used) {
            comms[i].used = 1;
            comms[i].size = t->size;
            comms[i].rank = t->rank;
            comms[i].members = members;
            comms[i].comm = c;
            return;
        }
    /* full: not cached; the memory owns it (m->own_comm) */
}

static int comm_cached(ncclComm_t c)
{
    for (int i = 0; i < NCCL_COMMS; i++)
        if (comms[i].used && comms[i].comm == c)
            return 1;
    return 0;
}

void dmuon_nccl_comm_forget(ncclComm_t c)
{
    for (int i = 0; i < NCCL_COMMS; i++)
        if (comms[i].used && comms[i].comm == c)
            memset(&comms[i], 0, sizeof comms[i]);
}

static void release(nccl_symm *m)
{
    if (!m)
        return;
    cudaSetDevice(m->device);
    if (m->registered && m->comm)
        ncclCommWindowDeregister(m->comm, m->win);
    if (m->ptr)
        ncclMemFree(m->ptr);
    if (m->stream)
        cudaStreamDestroy(m->stream);
    if (m->comm && !comm_cached(m->comm))
        ncclCommDestroy(m->comm);
    free(m);
}

dmuon_rc dmuon_nccl_symm_alloc(dmuon_symm *s)
{
    const dmuon_topo *t = s->topo;
    const char *name = dmuon_backend_name(s->backend);
    dmuon_rc rc;
    int count = 0;
    nccl_symm *m = calloc(1, sizeof *m);
    int bad = !m;
    if (bad)
        DMUON_FAIL(DMUON_ENOMEM, "out of memory creating symmetric memory");
    DMUON_TRY_GOTO(rc, dmuon_agree(t->world, bad ? DMUON_ENOMEM : DMUON_OK, 0), fail);
    bad = dmuon_nccl_gpu_check(name) != DMUON_OK;
    DMUON_TRY_GOTO(rc, dmuon_agree(t->world, bad ? DMUON_EUNSUPPORTED : DMUON_OK, 0), fail);
    cudaGetDeviceCount(&count);
    m->device = t->local % count;
    cudaError_t ce = cudaSetDevice(m->device);
    if (ce == cudaSuccess)
        ce = cudaStreamCreateWithFlags(&m->stream, cudaStreamNonBlocking);
    bad = ce != cudaSuccess;
    if (bad)
        DMUON_FAIL(DMUON_EDEVICE, "%s: cuda device %d: %s", name, m->device,
                   cudaGetErrorString(ce));
    DMUON_TRY_GOTO(rc, dmuon_agree(t->world, bad ? DMUON_EDEVICE : DMUON_OK, 0), fail);

    /* the communicator: cached per set of ranks, else rank 0's unique id
     * over MPI and ncclCommInitRank */
    const uint64_t members = members_digest(t);
    m->comm = comm_find(t, members);
    int have = m->comm != NULL, all_have = have;
    MPI_Allreduce(&have, &all_have, 1, MPI_INT, MPI_MIN, t->world);
    if (!all_have) {
        if (have) {   /* some rank lost its entry: all make a new one */
            dmuon_nccl_comm_forget(m->comm);
            m->comm = NULL;
        }
        ncclUniqueId id;
        memset(&id, 0, sizeof id);
        ncclResult_t nr = t->rank == 0 ? ncclGetUniqueId(&id) : ncclSuccess;
        int idfail = nr != ncclSuccess;
        MPI_Bcast(&idfail, 1, MPI_INT, 0, t->world);
        if (idfail) {
            rc = DMUON_FAIL(DMUON_ECOMM, "%s: ncclGetUniqueId failed on rank 0%s%s", name,
                            t->rank == 0 ? ": " : "", t->rank == 0 ? ncclGetErrorString(nr) : "");
            goto fail;
        }
        MPI_Bcast(&id, (int)sizeof id, MPI_BYTE, 0, t->world);
        nr = ncclCommInitRank(&m->comm, t->size, id, t->rank);
        bad = nr != ncclSuccess;
        if (bad) {
            m->comm = NULL;
            DMUON_FAIL(DMUON_ECOMM, "%s: ncclCommInitRank (rank %d of %d, GPU %d): %s%s", name,
                       t->rank, t->size, m->device, ncclGetErrorString(nr),
                       count < t->per_node ? " (several ranks per GPU need "
                                             "NCCL_MULTI_RANK_GPU_ENABLE=1 and NCCL >= 2.30.3)"
                                           : "");
        }
        DMUON_TRY_GOTO(rc, dmuon_agree(t->world, bad ? DMUON_ECOMM : DMUON_OK, 0), fail);
        comm_keep(t, members, m->comm);
    }
    ncclResult_t nr;

    /* the part: ncclMemAlloc, zeroed, 4 KiB aligned, registered symmetric */
    m->bytes = (size_t)((s->bytes + DMUON_SYMM_ALIGN - 1) / DMUON_SYMM_ALIGN * DMUON_SYMM_ALIGN);
    nr = ncclMemAlloc(&m->ptr, m->bytes);
    bad = nr != ncclSuccess || !m->ptr || ((uintptr_t)m->ptr % DMUON_SYMM_ALIGN) != 0;
    if (bad) {
        if (nr == ncclSuccess && m->ptr) {
            ncclMemFree(m->ptr);
            m->ptr = NULL;
        }
        DMUON_FAIL(DMUON_ENOMEM, "%s: ncclMemAlloc of %zu bytes: %s", name, m->bytes,
                   nr != ncclSuccess ? ncclGetErrorString(nr) : "not 4 KiB aligned");
    }
    DMUON_TRY_GOTO(rc, dmuon_agree(t->world, bad ? DMUON_ENOMEM : DMUON_OK, 0), fail);
    ce = cudaMemset(m->ptr, 0, m->bytes);
    if (ce == cudaSuccess)
        ce = cudaDeviceSynchronize();
    bad = ce != cudaSuccess;
    if (bad)
        DMUON_FAIL(DMUON_EDEVICE, "%s: zeroing %zu bytes: %s", name, m->bytes,
                   cudaGetErrorString(ce));
    DMUON_TRY_GOTO(rc, dmuon_agree(t->world, bad ? DMUON_EDEVICE : DMUON_OK, 0), fail);
    nr = ncclCommWindowRegister(m->comm, m->ptr, m->bytes, &m->win, NCCL_WIN_COLL_SYMMETRIC);
    bad = nr != ncclSuccess;
    m->registered = !bad;
    if (bad)
        DMUON_FAIL(DMUON_ECOMM, "%s: ncclCommWindowRegister (symmetric) of %zu bytes: %s", name,
                   m->bytes, ncclGetErrorString(nr));
    DMUON_TRY_GOTO(rc, dmuon_agree(t->world, bad ? DMUON_ECOMM : DMUON_OK, 0), fail);
    s->base = m->ptr;
    s->peer = NULL;            /* device memory: no host loads and stores */
    s->impl = m;
    MPI_Barrier(t->world);     /* every part zeroed before anyone writes */
    return DMUON_OK;
fail:
    release(m);
    return rc;
}

void dmuon_nccl_symm_free(dmuon_symm *s)
{
    release(s->impl);
    s->impl = NULL;
    s->base = NULL;
}

dmuon_rc dmuon_nccl_symm_put(dmuon_symm *s, int64_t offset, const void *src, int64_t bytes)
{
    nccl_symm *m = s->impl;
    cudaError_t e = cudaSetDevice(m->device);
    if (e == cudaSuccess)
        e = cudaMemcpy(s->base + offset, src, (size_t)bytes, cudaMemcpyHostToDevice);
    if (e != cudaSuccess)
        return DMUON_FAIL(DMUON_EDEVICE, "symmetric memory: copy of %lld bytes to the GPU: %s",
                          (long long)bytes, cudaGetErrorString(e));
    return DMUON_OK;
}

dmuon_rc dmuon_nccl_symm_get(const dmuon_symm *s, int64_t offset, void *dst, int64_t bytes)
{
    const nccl_symm *m = s->impl;
    cudaError_t e = cudaSetDevice(m->device);
    if (e == cudaSuccess)
        e = cudaMemcpy(dst, s->base + offset, (size_t)bytes, cudaMemcpyDeviceToHost);
    if (e != cudaSuccess)
        return DMUON_FAIL(DMUON_EDEVICE, "symmetric memory: copy of %lld bytes from the GPU: "
                          "%s", (long long)bytes, cudaGetErrorString(e));
    return DMUON_OK;
}

#else
typedef int dmuon_nccl_symm_unused;   /* built without NCCL */
#endif
