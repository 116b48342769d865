/*
 * symm.c — symmetric memory (dmuon/symm.h): agreement on the size, then the
 * backend's allocation.
 *
 * Invariant: every failure is agreed over t->world before returning, so all
 * ranks return the same rc and none is left inside a collective.
 */
#include "dmuon/symm.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "backend.h"
#include "dmuon/ctl.h"

#define SYMM_MAX_BYTES (INT64_C(1) << 46)

dmuon_rc dmuon_symm_alloc(const dmuon_topo *t, int64_t bytes, int deadline_ms, dmuon_symm **out)
{
    dmuon_rc rc = DMUON_OK;
    *out = NULL;
    int64_t mm[2] = {-bytes, bytes};
    if (deadline_ms < 0)
        return DMUON_FAIL(DMUON_EINVAL, "symmetric memory: deadline %d ms: expected 0 (the "
                          "default) or a positive number", deadline_ms);
    DMUON_TRY(dmuon_ctl_topo_allreduce_i64(t, mm, 2, DMUON_CTL_MAX, deadline_ms,
                                           "symmetric memory"));
    if (-mm[0] != mm[1])
        return DMUON_FAIL(DMUON_EMISMATCH, "symmetric memory: ranks asked for different sizes "
                          "(%lld to %lld bytes; this rank %lld)", (long long)-mm[0],
                          (long long)mm[1], (long long)bytes);
    if (bytes <= 0 || bytes > SYMM_MAX_BYTES)
        return DMUON_FAIL(DMUON_EINVAL, "symmetric memory: %lld bytes: expected 1 to 2^46",
                          (long long)bytes);
    const dmuon_comm_ops *ops;
    DMUON_TRY(dmuon_comm_backend_get(t->backend, "symmetric memory", &ops));
    DMUON_COMM_NEED(ops, symm_alloc, "symmetric memory");
    if (t->nccl && !ops->on_device)   /* the same on every rank: the topology's kind */
        return DMUON_FAIL(DMUON_EUNSUPPORTED, "symmetric memory: the %s backend needs a "
                          "topology over MPI (this one was handed over from NCCL)", ops->name);
    dmuon_symm *s = calloc(1, sizeof *s);
    int64_t fail = !s;
    rc = dmuon_ctl_topo_allreduce_i64(t, &fail, 1, DMUON_CTL_MAX, deadline_ms, "symmetric memory");
    if (rc != DMUON_OK) {
        free(s);
        return rc;
    }
    if (fail) {
        free(s);
        return DMUON_FAIL(DMUON_ENOMEM, "out of memory creating symmetric memory");
    }
    s->ops = ops;
    s->backend = t->backend;
    s->topo = t;
    s->bytes = bytes;
    s->deadline_ms = deadline_ms;
    rc = ops->symm_alloc(s);
    if (rc != DMUON_OK) {
        free(s);
        return dmuon_err_trace_add(rc, __FILE__, __LINE__);
    }
    *out = s;
    return DMUON_OK;
}

void dmuon_symm_free(dmuon_symm *s)
{
    if (!s)
        return;
    if (s->ops->symm_free)
        s->ops->symm_free(s);
    free(s);
}

void *dmuon_symm_base(const dmuon_symm *s) { return s->base; }

void *dmuon_symm_peer(const dmuon_symm *s, int local)
{
    if (local < 0 || local >= s->topo->per_node || !s->peer)
        return NULL;
    return s->peer[local];
}

int64_t dmuon_symm_bytes(const dmuon_symm *s) { return s->bytes; }

dmuon_backend dmuon_symm_backend(const dmuon_symm *s) { return s->backend; }

int dmuon_symm_on_device(const dmuon_symm *s) { return s->ops->on_device; }

void *dmuon_symm_stream(const dmuon_symm *s)
{
    return s->ops->symm_stream ? s->ops->symm_stream(s) : NULL;
}

dmuon_rc dmuon_symm_set_stream(dmuon_symm *s, void *stream)
{
    DMUON_COMM_NEED(s->ops, symm_set_stream, "symmetric memory stream");
    return s->ops->symm_set_stream(s, stream);
}

int64_t dmuon_host_release(void *p, int64_t bytes, int64_t *first)
{
    long ps = sysconf(_SC_PAGESIZE);
    const uintptr_t page = ps > 0 ? (uintptr_t)ps : 4096;
    uintptr_t lo = ((uintptr_t)p + page - 1) & ~(page - 1);
    uintptr_t hi = ((uintptr_t)p + (uintptr_t)bytes) & ~(page - 1);
    *first = 0;
    if (bytes <= 0 || hi <= lo)
        return 0;
    /* MADV_REMOVE: the backing pages of a shared mapping are freed (a hole
     * punched in the file); refused on mappings that cannot (then nothing
     * changes) */
    if (madvise((void *)lo, hi - lo, MADV_REMOVE) != 0)
        return 0;
    *first = (int64_t)(lo - (uintptr_t)p);
    return (int64_t)(hi - lo);
}

dmuon_rc dmuon_symm_release(dmuon_symm *s, int64_t offset, int64_t bytes, int64_t *released)
{
    if (released)
        *released = 0;
    if (offset < 0 || bytes < 0 || offset > s->bytes || bytes > s->bytes - offset)
        return DMUON_FAIL(DMUON_EINVAL, "symmetric memory: release of %lld bytes at offset "
                          "%lld: expected a range inside its %lld bytes", (long long)bytes,
                          (long long)offset, (long long)s->bytes);
    if (s->ops->on_device)
        return DMUON_OK;
    int64_t first = 0, n = dmuon_host_release(s->base + offset, bytes, &first);
    if (released)
        *released = n;
    return DMUON_OK;
}

static dmuon_rc check_copy(const dmuon_symm *s, int64_t offset, int64_t bytes)
{
    if (offset < 0 || bytes < 0 || offset > s->bytes || bytes > s->bytes - offset)
        return DMUON_FAIL(DMUON_EINVAL, "symmetric memory: copy of %lld bytes at offset %lld: "
                          "expected a range inside its %lld bytes", (long long)bytes,
                          (long long)offset, (long long)s->bytes);
    return DMUON_OK;
}

dmuon_rc dmuon_symm_put(dmuon_symm *s, int64_t offset, const void *src, int64_t bytes)
{
    DMUON_TRY(check_copy(s, offset, bytes));
    if (s->ops->on_device) {
        DMUON_COMM_NEED(s->ops, symm_put, "symmetric memory copy in");
        return s->ops->symm_put(s, offset, src, bytes);
    }
    memcpy(s->base + offset, src, (size_t)bytes);
    return DMUON_OK;
}

dmuon_rc dmuon_symm_get(const dmuon_symm *s, int64_t offset, void *dst, int64_t bytes)
{
    DMUON_TRY(check_copy(s, offset, bytes));
    if (s->ops->on_device) {
        DMUON_COMM_NEED(s->ops, symm_get, "symmetric memory copy out");
        return s->ops->symm_get(s, offset, dst, bytes);
    }
    memcpy(dst, s->base + offset, (size_t)bytes);
    return DMUON_OK;
}
