/*
 * collv.c — groups and the variable-length operators (dmuon/collv.h): the
 * backend-independent layer.  It checks and agrees on the table, resolves
 * the options, builds both schedules (dmuon/sched.h), checks the control
 * area and every call's ranges against the symmetric memory, and then
 * dispatches to the backend of the memory (comm/backend.h).
 *
 * Invariant: every decision that can fail at create is taken from inputs all
 * ranks agree on (the table after dmuon_table_agree, sizes after an
 * MPI_Allreduce), so all ranks return the same rc.
 */
#include "dmuon/collv.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"

dmuon_rc dmuon_deadline_ms(int opt_ms, int *out)
{
    if (opt_ms > 0) {
        *out = opt_ms;
        return DMUON_OK;
    }
    const char *env = getenv("DMUON_DEADLINE_MS");
    if (env && *env) {
        char *end = NULL;
        errno = 0;
        long v = strtol(env, &end, 10);
        if (errno || *end || v < 1 || v > INT_MAX)
            return DMUON_FAIL(DMUON_EINVAL, "DMUON_DEADLINE_MS '%s': expected a positive "
                              "number of milliseconds", env);
        *out = (int)v;
        return DMUON_OK;
    }
    *out = DMUON_DEADLINE_MS_DEFAULT;
    return DMUON_OK;
}

/* Resolves opts (NULL = defaults) into *o for the backend ops (its chunk
 * when the options say 0); checks chunk size and path. */
static dmuon_rc resolve_opts(const dmuon_comm_ops *ops, const dmuon_group_opts *opts,
                             dmuon_group_opts *o)
{
    memset(o, 0, sizeof *o);
    if (opts)
        *o = *opts;
    if (o->path < DMUON_PATH_AUTO || o->path > DMUON_PATH_STAR)
        return DMUON_FAIL(DMUON_EINVAL, "group: unknown path %d", (int)o->path);
    if (o->slots < 0)
        return DMUON_FAIL(DMUON_EINVAL, "group: %d reduce slots: expected 0 (default) or more",
                          o->slots);
    DMUON_TRY(dmuon_chunk_bytes_check(o->chunk_bytes));
    DMUON_TRY(dmuon_deadline_ms(o->deadline_ms, &o->deadline_ms));
    if (o->slots == 0)
        o->slots = 4;
    if (o->chunk_bytes == 0)
        o->chunk_bytes = ops->chunk_bytes > 0 ? ops->chunk_bytes : DMUON_CHUNK_BYTES;
    return DMUON_OK;
}

dmuon_rc dmuon_group_ctrl_bytes(const dmuon_topo *t, const dmuon_segment *segs, int n,
                                const dmuon_group_opts *opts, int64_t *bytes)
{
    const dmuon_comm_ops *ops;
    dmuon_group_opts o;
    DMUON_TRY(dmuon_comm_backend_get(t->backend, "group", &ops));
    DMUON_COMM_NEED(ops, group_ctrl_bytes, "group");
    DMUON_TRY(dmuon_table_check(segs, n, t->size, NULL, NULL));
    DMUON_TRY(resolve_opts(ops, opts, &o));
    DMUON_TRY(ops->group_ctrl_bytes(t, segs, n, &o, bytes));
    return DMUON_OK;
}

static int64_t align_symm(int64_t x)
{
    return (x + DMUON_SYMM_ALIGN - 1) / DMUON_SYMM_ALIGN * DMUON_SYMM_ALIGN;
}

dmuon_rc dmuon_group_span_of(const dmuon_topo *t, const dmuon_segment *segs, int n,
                             const dmuon_group_opts *opts, dmuon_group_span *out)
{
    int64_t ctrl, buf, win;
    DMUON_TRY(dmuon_group_ctrl_bytes(t, segs, n, opts, &ctrl));
    DMUON_TRY(dmuon_table_check(segs, n, t->size, &buf, &win));
    out->ctrl_offset = 0;
    out->buffer_offset = align_symm(ctrl);
    out->window_offset = out->buffer_offset + align_symm(buf);
    out->bytes = out->window_offset + align_symm(win > 0 ? win : 1);
    return DMUON_OK;
}

/* A range [off, off + len) of mem: inside, aligned. */
static dmuon_rc check_range(const dmuon_symm *mem, const char *op, const char *what,
                            int64_t off, int64_t len, int64_t align)
{
    if (off < 0 || off % align || off > mem->bytes || len > mem->bytes - off)
        return DMUON_FAIL(DMUON_EINVAL, "%s: %s at offset %lld (%lld bytes): expected a "
                          "multiple of %lld inside the %lld bytes of symmetric memory", op, what,
                          (long long)off, (long long)len, (long long)align,
                          (long long)mem->bytes);
    return DMUON_OK;
}

static int overlap(int64_t a, int64_t alen, int64_t b, int64_t blen)
{
    return alen > 0 && blen > 0 && a < b + blen && b < a + alen;
}

dmuon_rc dmuon_group_create(const dmuon_topo *t, const dmuon_segment *segs, int n,
                            const dmuon_group_opts *opts, dmuon_symm *mem, int64_t ctrl_offset,
                            dmuon_group **out)
{
    dmuon_rc rc = DMUON_OK;
    *out = NULL;
    dmuon_group *g = calloc(1, sizeof *g);
    if (g)
        g->segs = malloc((n > 0 ? (size_t)n : 1) * sizeof *g->segs);
    int fail = !g || !g->segs;
    MPI_Allreduce(MPI_IN_PLACE, &fail, 1, MPI_INT, MPI_MAX, t->world);
    if (fail) {
        if (g)
            free(g->segs);
        free(g);
        return DMUON_FAIL(DMUON_ENOMEM, "out of memory creating a group");
    }
    g->topo = t;
    g->mem = mem;
    g->ctrl_offset = ctrl_offset;
    DMUON_TRY_GOTO(rc, dmuon_table_agree(t->world, segs, n), fail);
    /* From here on every rank holds the same table, so table-driven
     * decisions agree without another exchange. */
    DMUON_TRY_GOTO(rc, dmuon_table_check(segs, n, t->size, &g->buffer_bytes, &g->window_bytes),
                   fail);
    DMUON_TRY_GOTO(rc, dmuon_comm_backend_get(t->backend, "group", &g->ops), fail);
    if (!g->ops->group_ctrl_bytes || !g->ops->group_create || !g->ops->group_free) {
        rc = dmuon_comm_unsupported(g->ops, "group", __FILE__, __LINE__);
        goto fail;
    }
    DMUON_TRY_GOTO(rc, resolve_opts(g->ops, opts, &g->opts), fail);
    if (!mem || mem->topo != t || mem->backend != t->backend) {
        rc = DMUON_FAIL(DMUON_EINVAL, "group: the symmetric memory was not allocated over "
                        "this topology and its backend");
        goto fail;
    }
    memcpy(g->segs, segs, (size_t)n * sizeof *segs);
    g->nseg = n;
    g->rsv_ok = 1;
    for (int i = 0; i < n; i++)
        if (segs[i].dtype != DMUON_BF16 && segs[i].dtype != DMUON_F32)
            g->rsv_ok = 0;
    dmuon_sched_opts so = {g->opts.path, g->opts.chunk_bytes, g->opts.star_max_bytes};
    DMUON_TRY_GOTO(rc, dmuon_sched_init(&g->sched[0], segs, n, t->nodes, t->per_node,
                                        DMUON_SCHED_GATHER, &so), fail);
    DMUON_TRY_GOTO(rc, dmuon_sched_init(&g->sched[1], segs, n, t->nodes, t->per_node,
                                        DMUON_SCHED_REDUCE, &so), fail);
    DMUON_TRY_GOTO(rc, g->ops->group_ctrl_bytes(t, segs, n, &g->opts, &g->ctrl_bytes), fail);
    DMUON_TRY_GOTO(rc, check_range(mem, "group", "control area", ctrl_offset, g->ctrl_bytes,
                                   DMUON_GROUP_CTRL_ALIGN), fail);
    DMUON_TRY_GOTO(rc, g->ops->group_create(g), fail);
    *out = g;
    return DMUON_OK;
fail:
    /* every failure above is agreed (same table, same sizes, same memory) */
    dmuon_group_free(g);
    return rc;
}

void dmuon_group_free(dmuon_group *g)
{
    if (!g)
        return;
    if (g->ops && g->impl && g->ops->group_free)
        g->ops->group_free(g);
    dmuon_sched_release(&g->sched[0]);
    dmuon_sched_release(&g->sched[1]);
    free(g->segs);
    free(g);
}

int64_t dmuon_group_buffer_bytes(const dmuon_group *g) { return g->buffer_bytes; }
int64_t dmuon_group_window_bytes(const dmuon_group *g) { return g->window_bytes; }

const dmuon_sched *dmuon_group_sched(const dmuon_group *g, dmuon_sched_kind kind)
{
    return &g->sched[kind];
}

/* A call's two ranges: inside the memory, aligned, apart from each other
 * and from the control area. */
static dmuon_rc check_call(const dmuon_group *g, const char *op, int64_t buf, int64_t win)
{
    int64_t B = g->buffer_bytes, W = g->window_bytes;
    DMUON_TRY(check_range(g->mem, op, "layer buffer", buf, B, DMUON_GROUP_RANGE_ALIGN));
    DMUON_TRY(check_range(g->mem, op, "owner window", win, W, DMUON_GROUP_RANGE_ALIGN));
    if (overlap(buf, B, win, W))
        return DMUON_FAIL(DMUON_EINVAL, "%s: the layer buffer [%lld, %lld) and the owner window "
                          "[%lld, %lld) overlap", op, (long long)buf, (long long)(buf + B),
                          (long long)win, (long long)(win + W));
    if (overlap(buf, B, g->ctrl_offset, g->ctrl_bytes) ||
        overlap(win, W, g->ctrl_offset, g->ctrl_bytes))
        return DMUON_FAIL(DMUON_EINVAL, "%s: the %s overlaps the group's control area [%lld, "
                          "%lld)", op, overlap(buf, B, g->ctrl_offset, g->ctrl_bytes)
                          ? "layer buffer" : "owner window", (long long)g->ctrl_offset,
                          (long long)(g->ctrl_offset + g->ctrl_bytes));
    return DMUON_OK;
}

dmuon_rc dmuon_allgatherv(dmuon_group *g, int64_t buffer_offset, int64_t window_offset)
{
    DMUON_COMM_NEED(g->ops, allgatherv, "allgatherv");
    DMUON_TRY(check_call(g, "allgatherv", buffer_offset, window_offset));
    DMUON_TRY(g->ops->allgatherv(g, buffer_offset, window_offset));
    return DMUON_OK;
}

dmuon_rc dmuon_reduce_scatterv(dmuon_group *g, int64_t buffer_offset, int64_t window_offset)
{
    DMUON_COMM_NEED(g->ops, reduce_scatterv, "reducescatterv");
    if (!g->rsv_ok)
        return DMUON_FAIL(DMUON_EUNSUPPORTED, "reducescatterv: element types other than bf16 "
                          "and f32 cannot be reduced");
    DMUON_TRY(check_call(g, "reducescatterv", buffer_offset, window_offset));
    DMUON_TRY(g->ops->reduce_scatterv(g, buffer_offset, window_offset));
    return DMUON_OK;
}

dmuon_rc dmuon_allgatherv_start(dmuon_group *g, int64_t buffer_offset, int64_t window_offset)
{
    DMUON_COMM_NEED(g->ops, start, "allgatherv_start");
    DMUON_TRY(check_call(g, "allgatherv_start", buffer_offset, window_offset));
    DMUON_TRY(g->ops->start(g, DMUON_SCHED_GATHER, buffer_offset, window_offset));
    return DMUON_OK;
}

dmuon_rc dmuon_allgatherv_test(dmuon_group *g, int *done)
{
    DMUON_COMM_NEED(g->ops, test, "allgatherv_test");
    DMUON_TRY(g->ops->test(g, DMUON_SCHED_GATHER, done));
    return DMUON_OK;
}

dmuon_rc dmuon_allgatherv_wait(dmuon_group *g)
{
    DMUON_COMM_NEED(g->ops, wait, "allgatherv_wait");
    DMUON_TRY(g->ops->wait(g, DMUON_SCHED_GATHER));
    return DMUON_OK;
}

dmuon_rc dmuon_reduce_scatterv_start(dmuon_group *g, int64_t buffer_offset, int64_t window_offset)
{
    DMUON_COMM_NEED(g->ops, start, "reducescatterv_start");
    if (!g->rsv_ok)
        return DMUON_FAIL(DMUON_EUNSUPPORTED, "reducescatterv: element types other than bf16 "
                          "and f32 cannot be reduced");
    DMUON_TRY(check_call(g, "reducescatterv_start", buffer_offset, window_offset));
    DMUON_TRY(g->ops->start(g, DMUON_SCHED_REDUCE, buffer_offset, window_offset));
    return DMUON_OK;
}

dmuon_rc dmuon_reduce_scatterv_test(dmuon_group *g, int *done)
{
    DMUON_COMM_NEED(g->ops, test, "reducescatterv_test");
    DMUON_TRY(g->ops->test(g, DMUON_SCHED_REDUCE, done));
    return DMUON_OK;
}

dmuon_rc dmuon_reduce_scatterv_wait(dmuon_group *g)
{
    DMUON_COMM_NEED(g->ops, wait, "reducescatterv_wait");
    DMUON_TRY(g->ops->wait(g, DMUON_SCHED_REDUCE));
    return DMUON_OK;
}
