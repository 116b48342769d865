/*
 * nccl_symm.c — symmetric memory of the NCCL backends (nccl_backend.h): the
 * GPU pool of paper §6 / C.1.  Each rank's part is one ncclMemAlloc
 * allocation (cuMem-backed, so NCCL can map it into its peers), zeroed and
 * registered as a symmetric window (ncclCommWindowRegister with
 * NCCL_WIN_COLL_SYMMETRIC); the layout inside it is the callers' (the
 * runtime's pool layout, dmuon/pool.h, or a tool's dmuon_group_span), the
 * same code as on the CPU.  Also the waits every NCCL call of the backends
 * ends in (an event polled until a deadline).
 *
 * Invariants: the base is DMUON_SYMM_ALIGN (4 KiB) aligned, as NCCL's
 * windows require (checked, not assumed); every failure is agreed over the
 * topology (dmuon_ctl_topo_agree: MPI, or NCCL's control communicator of a
 * handed-over topology) before any later collective, so no rank is left
 * inside ncclCommInitRank or the registration; teardown runs in reverse
 * order (window, memory, stream; communicators stay with their owner).
 * Compiled only: no GPU has run this file.
 */
#include "nccl_backend.h"

#include "dmuon/ctl.h"

#ifdef DMUON_HAVE_NCCL

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dmuon/types.h"
#include "wait.h"

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
 * process keeps one set per set of ranks of an MPI topology: the key is this
 * rank and the MPI_COMM_WORLD ranks of the topology's world in order (a
 * digest of them), so a freed and reused MPI handle never picks up the
 * wrong communicators.  Entries are kept to process exit (no collective
 * teardown at exit) unless one was aborted, which removes it.  One thread. */
#define NCCL_COMMS 8
static struct {
    int used, size, rank;
    uint64_t members;
    dmuon_nccl_comms *cs;
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

static dmuon_nccl_comms *comm_find(const dmuon_topo *t, uint64_t members)
{
    for (int i = 0; i < NCCL_COMMS; i++)
        if (comms[i].used && comms[i].size == t->size && comms[i].rank == t->rank &&
            comms[i].members == members)
            return comms[i].cs;
    return NULL;
}

/* 0 when the cache is full (the caller then owns cs). */
static int comm_keep(const dmuon_topo *t, uint64_t members, dmuon_nccl_comms *cs)
{
    for (int i = 0; i < NCCL_COMMS; i++)
        if (!comms[i].used) {
            comms[i].used = 1;
            comms[i].size = t->size;
            comms[i].rank = t->rank;
            comms[i].members = members;
            comms[i].cs = cs;
            return 1;
        }
    return 0;
}

static int comm_cached(const dmuon_nccl_comms *cs)
{
    for (int i = 0; i < NCCL_COMMS; i++)
        if (comms[i].used && comms[i].cs == cs)
            return 1;
    return 0;
}

void dmuon_nccl_comms_abort(dmuon_nccl_comms *cs)
{
    if (!cs || cs->aborted)
        return;
    for (int i = 0; i < NCCL_COMMS; i++)
        if (comms[i].used && comms[i].cs == cs)
            memset(&comms[i], 0, sizeof comms[i]);
    ncclComm_t *c[3] = {&cs->world, &cs->node, &cs->rail};
    for (int i = 0; i < 3; i++)
        if (*c[i]) {
            ncclCommAbort(*c[i]);
            *c[i] = NULL;
        }
    cs->aborted = 1;
}

static void comms_destroy(dmuon_nccl_comms *cs)
{
    if (!cs)
        return;
    ncclComm_t c[3] = {cs->rail, cs->node, cs->world};
    for (int i = 0; i < 3; i++)
        if (c[i])
            ncclCommDestroy(c[i]);
    free(cs);
}

dmuon_rc dmuon_nccl_usable(const dmuon_nccl_comms *cs, const char *what)
{
    if (!cs || cs->aborted || !cs->world)
        return DMUON_FAIL(DMUON_ECOMM, "%s: the NCCL communicator was aborted by an earlier "
                          "failure", what);
    if (cudaSetDevice(cs->device) != cudaSuccess)
        return DMUON_FAIL(DMUON_EDEVICE, "%s: cannot select GPU %d", what, cs->device);
    return DMUON_OK;
}

dmuon_rc dmuon_nccl_event_new(const nccl_symm *m, cudaEvent_t *ev, const char *what)
{
    *ev = NULL;
    DMUON_TRY(dmuon_nccl_usable(m->cs, what));
    cudaError_t e = cudaEventCreateWithFlags(ev, cudaEventDisableTiming);
    if (e != cudaSuccess) {
        *ev = NULL;
        return DMUON_FAIL(DMUON_EDEVICE, "%s: cudaEventCreate: %s", what, cudaGetErrorString(e));
    }
    return DMUON_OK;
}

dmuon_rc dmuon_nccl_event_record(cudaEvent_t ev, nccl_symm *m, const char *what)
{
    cudaError_t e = cudaEventRecord(ev, m->stream);
    if (e == cudaSuccess)
        return DMUON_OK;
    dmuon_nccl_comms_abort(m->cs);
    return DMUON_FAIL(DMUON_EDEVICE, "%s: cudaEventRecord: %s (NCCL communicators aborted)", what,
                      cudaGetErrorString(e));
}

dmuon_rc dmuon_nccl_event_test(cudaEvent_t ev, dmuon_nccl_comms *cs, int *done,
                               const char *what)
{
    *done = 0;
    if (cs->aborted)   /* an aborted call's event may complete: it proves nothing */
        return DMUON_FAIL(DMUON_ECOMM, "%s: the NCCL communicator was aborted by an earlier "
                          "failure", what);
    cudaError_t e = cudaEventQuery(ev);
    if (e == cudaSuccess) {
        *done = 1;
        return DMUON_OK;
    }
    if (e != cudaErrorNotReady)
        return DMUON_FAIL(DMUON_EDEVICE, "%s: %s", what, cudaGetErrorString(e));
    ncclComm_t c[3] = {cs->world, cs->node, cs->rail};
    for (int i = 0; i < 3; i++) {
        ncclResult_t async = ncclSuccess;
        if (c[i])
            ncclCommGetAsyncError(c[i], &async);
        if (async != ncclSuccess && async != ncclInProgress) {
            dmuon_nccl_comms_abort(cs);
            return DMUON_FAIL(DMUON_ECOMM, "%s: NCCL: %s (communicators aborted)", what,
                              ncclGetErrorString(async));
        }
    }
    return DMUON_OK;
}

dmuon_rc dmuon_nccl_event_wait(cudaEvent_t ev, dmuon_nccl_comms *cs, int deadline_ms,
                               const char *what)
{
    dmuon_waiter w;
    dmuon_waiter_start(&w, deadline_ms);
    for (;;) {
        int done = 0;
        DMUON_TRY(dmuon_nccl_event_test(ev, cs, &done, what));
        if (done)
            return DMUON_OK;
        if (dmuon_waiter_expired(&w)) {
            dmuon_nccl_comms_abort(cs);
            return DMUON_FAIL(DMUON_ETIMEOUT, "%s: not done after the deadline of %d ms (NCCL "
                              "communicators aborted)", what, deadline_ms);
        }
        dmuon_waiter_idle(&w);
    }
}

/* The communicators of an MPI topology: cached, else rank 0's unique id over
 * MPI and ncclCommInitRank (collective over t->world; agreed); the node and
 * rail communicators come later, when first needed (dmuon_nccl_comms_split).  *out is the cached set, or one the memory then owns
 * (*owned 1, cache full). */
static dmuon_rc mpi_comms(const dmuon_topo *t, int device, int gpus, int deadline_ms,
                          dmuon_nccl_comms **out, int *owned)
{
    const char *name = dmuon_backend_name(t->backend);
    const uint64_t members = members_digest(t);
    dmuon_nccl_comms *cs = comm_find(t, members);
    int64_t all_have = cs != NULL;
    *out = NULL;
    *owned = 0;
    DMUON_TRY(dmuon_ctl_topo_allreduce_i64(t, &all_have, 1, DMUON_CTL_MIN, deadline_ms, "nccl comm"));
    if (all_have) {
        *out = cs;
        return DMUON_OK;
    }
    if (cs)   /* some rank lost its entry: all make a new set (the old stays in use) */
        for (int i = 0; i < NCCL_COMMS; i++)
            if (comms[i].cs == cs)
                memset(&comms[i], 0, sizeof comms[i]);
    cs = calloc(1, sizeof *cs);
    dmuon_rc rc = cs ? DMUON_OK : DMUON_FAIL(DMUON_ENOMEM, "out of memory");
    DMUON_TRY_GOTO(rc, dmuon_ctl_topo_agree(t, rc, deadline_ms), fail);
    cs->device = device;
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    ncclResult_t nr = t->rank == 0 ? ncclGetUniqueId(&id) : ncclSuccess;
    if (nr != ncclSuccess)
        rc = DMUON_FAIL(DMUON_ECOMM, "%s: ncclGetUniqueId failed: %s", name,
                        ncclGetErrorString(nr));
    DMUON_TRY_GOTO(rc, dmuon_ctl_topo_agree(t, rc, deadline_ms), fail);
    DMUON_TRY_GOTO(rc, dmuon_ctl_topo_bcast(t, &id, (int)sizeof id, 0, deadline_ms, "nccl unique id"),
                   fail);
    nr = ncclCommInitRank(&cs->world, t->size, id, t->rank);
    if (nr != ncclSuccess) {
        cs->world = NULL;
        rc = DMUON_FAIL(DMUON_ECOMM, "%s: ncclCommInitRank (rank %d of %d, GPU %d): %s%s", name,
                        t->rank, t->size, device, ncclGetErrorString(nr),
                        gpus < t->per_node ? " (several ranks per GPU need "
                                             "NCCL_MULTI_RANK_GPU_ENABLE=1 and NCCL >= 2.30.3)"
                                           : "");
    }
    DMUON_TRY_GOTO(rc, dmuon_ctl_topo_agree(t, rc, deadline_ms), fail);
    *owned = !comm_keep(t, members, cs);
    *out = cs;
    return DMUON_OK;
fail:
    comms_destroy(cs);
    return rc;
}

dmuon_rc dmuon_nccl_comms_split(const dmuon_topo *t, dmuon_nccl_comms *cs, dmuon_rc mine,
                                int deadline_ms)
{
    if (mine == DMUON_OK)
        mine = dmuon_nccl_usable(cs, "nccl node and rail communicators");
    DMUON_TRY(dmuon_ctl_topo_agree(t, mine, deadline_ms));   /* every rank can split */
    /* sets are made together, so they normally agree; a rank whose set is
     * its memory's own (cache full) may lack them: then every rank splits
     * again (a rank that had them keeps the old ones alive, unused) */
    int64_t need = !(cs->node && cs->rail);
    DMUON_TRY(dmuon_ctl_topo_allreduce_i64(t, &need, 1, DMUON_CTL_MAX, deadline_ms, "nccl split"));
    if (!need)
        return DMUON_OK;
    ncclComm_t node = NULL, rail = NULL;
    ncclResult_t nr = ncclCommSplit(cs->world, t->node_id, t->local, &node, NULL);
    if (nr == ncclSuccess)
        nr = ncclCommSplit(cs->world, t->local, t->node_id, &rail, NULL);
    dmuon_rc rc = DMUON_OK;
    if (nr == ncclSuccess) {
        cs->node = node;
        cs->rail = rail;
    } else {
        rc = DMUON_FAIL(DMUON_ECOMM, "ncclCommSplit (node and rail communicators): %s",
                        ncclGetErrorString(nr));
    }
    return dmuon_ctl_topo_agree(t, rc, deadline_ms);
}

static void release(nccl_symm *m, int owns_comms)
{
    if (!m)
        return;
    cudaSetDevice(m->device);
    if (m->registered && m->cs && !m->cs->aborted)
        ncclCommWindowDeregister(m->cs->world, m->win);
    if (m->ptr)
        ncclMemFree(m->ptr);
    if (m->own_stream)
        cudaStreamDestroy(m->own_stream);
    if (owns_comms && m->cs && !m->cs->aborted)
        comms_destroy(m->cs);
    free(m);
}

/* Whether the memory owns its communicators: an MPI topology's set that the
 * full cache could not take. */
static int owns_comms(const dmuon_symm *s, const nccl_symm *m)
{
    return m && m->cs && !s->topo->nccl && !comm_cached(m->cs);
}

dmuon_rc dmuon_nccl_symm_alloc(dmuon_symm *s)
{
    const dmuon_topo *t = s->topo;
    dmuon_nccl_topo *ht = t->nccl;
    const char *name = dmuon_backend_name(s->backend);
    dmuon_rc rc;
    int count = 0, owned = 0;
    nccl_symm *m = calloc(1, sizeof *m);
    rc = m ? DMUON_OK : DMUON_FAIL(DMUON_ENOMEM, "out of memory creating symmetric memory");
    DMUON_TRY_GOTO(rc, dmuon_ctl_topo_agree(t, rc, s->deadline_ms), fail);
    DMUON_TRY_GOTO(rc, dmuon_ctl_topo_agree(t, dmuon_nccl_gpu_check(name), s->deadline_ms), fail);
    cudaGetDeviceCount(&count);
    m->device = ht ? ht->data.device : t->local % count;
    cudaError_t ce = cudaSetDevice(m->device);
    if (ce == cudaSuccess)
        ce = cudaStreamCreateWithFlags(&m->own_stream, cudaStreamNonBlocking);
    m->stream = m->own_stream;
    rc = ce == cudaSuccess ? DMUON_OK
       : DMUON_FAIL(DMUON_EDEVICE, "%s: cuda device %d: %s", name, m->device,
                    cudaGetErrorString(ce));
    DMUON_TRY_GOTO(rc, dmuon_ctl_topo_agree(t, rc, s->deadline_ms), fail);

    if (ht) {   /* a handed-over topology: its communicators, no MPI */
        m->cs = &ht->data;
        rc = dmuon_nccl_usable(m->cs, name);
        DMUON_TRY_GOTO(rc, dmuon_ctl_topo_agree(t, rc, s->deadline_ms), fail);
    } else {
        DMUON_TRY_GOTO(rc, mpi_comms(t, m->device, count, s->deadline_ms, &m->cs, &owned), fail);
    }

    /* the part: ncclMemAlloc, zeroed, 4 KiB aligned, registered symmetric */
    m->bytes = (size_t)((s->bytes + DMUON_SYMM_ALIGN - 1) / DMUON_SYMM_ALIGN * DMUON_SYMM_ALIGN);
    ncclResult_t nr = ncclMemAlloc(&m->ptr, m->bytes);
    int bad = nr != ncclSuccess || !m->ptr || ((uintptr_t)m->ptr % DMUON_SYMM_ALIGN) != 0;
    if (bad && nr == ncclSuccess && m->ptr) {
        ncclMemFree(m->ptr);
        m->ptr = NULL;
    }
    rc = !bad ? DMUON_OK
       : DMUON_FAIL(DMUON_ENOMEM, "%s: ncclMemAlloc of %zu bytes: %s", name, m->bytes,
                    nr != ncclSuccess ? ncclGetErrorString(nr) : "not 4 KiB aligned");
    DMUON_TRY_GOTO(rc, dmuon_ctl_topo_agree(t, rc, s->deadline_ms), fail);
    ce = cudaMemset(m->ptr, 0, m->bytes);
    if (ce == cudaSuccess)
        ce = cudaDeviceSynchronize();
    rc = ce == cudaSuccess ? DMUON_OK
       : DMUON_FAIL(DMUON_EDEVICE, "%s: zeroing %zu bytes: %s", name, m->bytes,
                    cudaGetErrorString(ce));
    DMUON_TRY_GOTO(rc, dmuon_ctl_topo_agree(t, rc, s->deadline_ms), fail);
    nr = ncclCommWindowRegister(m->cs->world, m->ptr, m->bytes, &m->win,
                                NCCL_WIN_COLL_SYMMETRIC);
    m->registered = nr == ncclSuccess;
    rc = m->registered ? DMUON_OK
       : DMUON_FAIL(DMUON_ECOMM, "%s: ncclCommWindowRegister (symmetric) of %zu bytes: %s",
                    name, m->bytes, ncclGetErrorString(nr));
    DMUON_TRY_GOTO(rc, dmuon_ctl_topo_agree(t, rc, s->deadline_ms), fail);
    s->base = m->ptr;
    s->peer = NULL;            /* device memory: no host loads and stores */
    s->impl = m;
    /* every part zeroed before anyone writes: the agreement is the barrier */
    return dmuon_ctl_topo_agree(t, DMUON_OK, s->deadline_ms);
fail:
    release(m, owned);
    return rc;
}

void dmuon_nccl_symm_free(dmuon_symm *s)
{
    nccl_symm *m = s->impl;
    release(m, owns_comms(s, m));
    s->impl = NULL;
    s->base = NULL;
}

dmuon_rc dmuon_nccl_symm_put(dmuon_symm *s, int64_t offset, const void *src, int64_t bytes)
{
    nccl_symm *m = s->impl;
    cudaError_t e = cudaSetDevice(m->device);
    if (e == cudaSuccess)   /* after the memory's stream's work, as the caller ordered it */
        e = cudaStreamSynchronize(m->stream);
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
        e = cudaStreamSynchronize(m->stream);
    if (e == cudaSuccess)
        e = cudaMemcpy(dst, s->base + offset, (size_t)bytes, cudaMemcpyDeviceToHost);
    if (e != cudaSuccess)
        return DMUON_FAIL(DMUON_EDEVICE, "symmetric memory: copy of %lld bytes from the GPU: "
                          "%s", (long long)bytes, cudaGetErrorString(e));
    return DMUON_OK;
}

void *dmuon_nccl_symm_stream(const dmuon_symm *s)
{
    const nccl_symm *m = s->impl;
    return m ? (void *)m->stream : NULL;
}

dmuon_rc dmuon_nccl_symm_set_stream(dmuon_symm *s, void *stream)
{
    nccl_symm *m = s->impl;
    m->stream = stream ? (cudaStream_t)stream : m->own_stream;
    return DMUON_OK;
}

#else
typedef int dmuon_nccl_symm_unused;   /* built without NCCL */
#endif
