/*
 * collv.c — groups and the variable-length operators (dmuon/collv.h): the
 * backend-independent layer.  It checks and agrees on the table, resolves
 * the options, builds both schedules (dmuon/sched.h), checks the control
 * area and every call's ranges against the symmetric memory, and then
 * dispatches to the backend of the memory (comm/backend.h).
 *
 * Invariant: every decision that can fail at create is taken from inputs all
 * ranks agree on (the table after dmuon_table_agree_topo, allocations
 * after an agreement of dmuon/ctl.h), so all ranks return the same rc.
 */
#include "dmuon/collv.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "dmuon/ctl.h"

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
    if (o->algorithm < DMUON_ALGO_DEFAULT || o->algorithm >= DMUON_ALGO_COUNT)
        return DMUON_FAIL(DMUON_EINVAL, "group: unknown algorithm %d", (int)o->algorithm);
    if (o->scope != DMUON_SCOPE_WORLD && o->scope != DMUON_SCOPE_NODE)
        return DMUON_FAIL(DMUON_EINVAL, "group: unknown scope %d", (int)o->scope);
    if (o->algorithm == DMUON_ALGO_DEFAULT)
        o->algorithm = ops->default_algo;
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

static const char *const algo_names[DMUON_ALGO_COUNT] = {"default", "scheduled", "per-owner",
                                                          "coalesced", "equal"};

const char *dmuon_algo_name(dmuon_algo a)
{
    return a >= 0 && a < DMUON_ALGO_COUNT ? algo_names[a] : "?";
}

dmuon_rc dmuon_algo_parse(const char *text, dmuon_algo *out)
{
    for (int a = 0; a < DMUON_ALGO_COUNT; a++)
        if (text && !strcmp(text, algo_names[a])) {
            *out = (dmuon_algo)a;
            return DMUON_OK;
        }
    return DMUON_FAIL(DMUON_EINVAL, "algorithm '%s': expected default, scheduled, per-owner, "
                      "coalesced or equal", text ? text : "");
}

/* The table rule of the COALESCED and EQUAL algorithms (collv.h): owners
 * non-decreasing, back to back in the layer buffer and in each window, one
 * element type; EQUAL: one segment per rank of the scope, equal counts.
 * Pure: every rank decides alike on the agreed table. */
static dmuon_rc algo_table_ok(const dmuon_topo *t, const dmuon_segment *segs, int n,
                              const dmuon_group_opts *o)
{
    const char *an = dmuon_algo_name(o->algorithm);
    if (o->scope == DMUON_SCOPE_NODE && o->algorithm != DMUON_ALGO_EQUAL &&
        o->algorithm != DMUON_ALGO_PER_OWNER)
        return DMUON_FAIL(DMUON_EINVAL, "group: node scope is for the equal and per-owner "
                          "algorithms, not %s", an);
    if (o->scope == DMUON_SCOPE_NODE)
        for (int i = 0; i < n; i++)
            if (segs[i].owner >= t->per_node)
                return DMUON_FAIL(DMUON_EINVAL, "group: segment %d: owner %d is not a rank of "
                                  "the node (node scope: owners are local ranks 0..%d)", i,
                                  (int)segs[i].owner, t->per_node - 1);
    if (o->fp32_accum && o->algorithm != DMUON_ALGO_SCHEDULED)
        return DMUON_FAIL(DMUON_EUNSUPPORTED, "group: FP32 accumulation of BF16 is offered by "
                          "the scheduled algorithm only, not %s", an);
    if (o->algorithm != DMUON_ALGO_COALESCED && o->algorithm != DMUON_ALGO_EQUAL)
        return DMUON_OK;
    const int parts = o->scope == DMUON_SCOPE_NODE ? t->per_node : t->size;
    if (o->algorithm == DMUON_ALGO_EQUAL && n != parts)
        return DMUON_FAIL(DMUON_EINVAL, "group: the equal algorithm takes one segment per rank "
                          "of its scope (%d), not %d", parts, n);
    for (int i = 0; i < n; i++) {
        const dmuon_segment *a = &segs[i];
        if (o->algorithm == DMUON_ALGO_EQUAL && (a->owner != i || a->count != segs[0].count))
            return DMUON_FAIL(DMUON_EINVAL, "group: segment %d: the equal algorithm takes segment "
                              "j owned by rank j, all of %lld elements (owner %d, %lld elements)",
                              i, (long long)segs[0].count, (int)a->owner, (long long)a->count);
        if ((int64_t)dmuon_dtype_size(a->dtype) * a->count > INT_MAX)
            return DMUON_FAIL(DMUON_EINVAL, "group: segment %d: %lld elements is more than one "
                              "MPI count holds", i, (long long)a->count);
        if (!i)
            continue;
        const dmuon_segment *b = &segs[i - 1];
        const int64_t bb = b->count * (int64_t)dmuon_dtype_size(b->dtype);
        if (a->dtype != b->dtype || a->owner < b->owner || a->offset != b->offset + bb ||
            (a->owner == b->owner && a->window_offset != b->window_offset + bb))
            return DMUON_FAIL(DMUON_EINVAL, "group: segment %d: the %s algorithm takes an "
                              "owner-ordered table of one element type (owners non-decreasing, "
                              "segments back to back in the layer buffer and in each window; "
                              "dmuon_table_owner_ordered makes one)", i, an);
    }
    return DMUON_OK;
}

/* The backend's operations for the resolved algorithm of o. */
static dmuon_rc group_ops_of(const dmuon_comm_ops *ops, const dmuon_group_opts *o,
                             const dmuon_group_ops **out)
{
    *out = ops->group[o->algorithm];
    if (!*out || !(*out)->ctrl_bytes || !(*out)->create || !(*out)->free)
        return DMUON_FAIL(DMUON_EUNSUPPORTED, "group: the %s algorithm is not offered by the %s "
                          "backend", dmuon_algo_name(o->algorithm), ops->name);
    return DMUON_OK;
}

dmuon_rc dmuon_group_staging_bytes(const dmuon_topo *t, const dmuon_segment *segs, int n,
                                   const dmuon_group_opts *opts, int64_t *bytes)
{
    const dmuon_comm_ops *ops;
    const dmuon_group_ops *gops;
    dmuon_group_opts o;
    *bytes = 0;
    DMUON_TRY(dmuon_comm_backend_get(t->backend, "group", &ops));
    DMUON_TRY(dmuon_table_check(segs, n, t->size, NULL, NULL));
    DMUON_TRY(resolve_opts(ops, opts, &o));
    DMUON_TRY(group_ops_of(ops, &o, &gops));
    DMUON_TRY(algo_table_ok(t, segs, n, &o));
    if (gops->staging_bytes)
        DMUON_TRY(gops->staging_bytes(t, segs, n, &o, bytes));
    return DMUON_OK;
}

dmuon_rc dmuon_group_ctrl_bytes(const dmuon_topo *t, const dmuon_segment *segs, int n,
                                const dmuon_group_opts *opts, int64_t *bytes)
{
    const dmuon_comm_ops *ops;
    const dmuon_group_ops *gops;
    dmuon_group_opts o;
    DMUON_TRY(dmuon_comm_backend_get(t->backend, "group", &ops));
    DMUON_TRY(dmuon_table_check(segs, n, t->size, NULL, NULL));
    DMUON_TRY(resolve_opts(ops, opts, &o));
    DMUON_TRY(group_ops_of(ops, &o, &gops));
    DMUON_TRY(algo_table_ok(t, segs, n, &o));
    DMUON_TRY(gops->ctrl_bytes(t, segs, n, &o, bytes));
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
    rc = g && g->segs ? DMUON_OK : DMUON_FAIL(DMUON_ENOMEM, "out of memory creating a group");
    /* the create-time exchanges have the caller's deadline too */
    const int deadline_ms = opts ? opts->deadline_ms : 0;
    rc = dmuon_ctl_topo_agree(t, rc, deadline_ms);
    if (rc != DMUON_OK) {
        if (g)
            free(g->segs);
        free(g);
        return rc;
    }
    g->topo = t;
    g->mem = mem;
    g->ctrl_offset = ctrl_offset;
    DMUON_TRY_GOTO(rc, dmuon_table_agree_topo(t, segs, n, deadline_ms), fail);
    /* From here on every rank holds the same table, so table-driven
     * decisions agree without another exchange. */
    DMUON_TRY_GOTO(rc, dmuon_table_check(segs, n, t->size, &g->buffer_bytes, &g->window_bytes),
                   fail);
    DMUON_TRY_GOTO(rc, dmuon_comm_backend_get(t->backend, "group", &g->ops), fail);
    DMUON_TRY_GOTO(rc, resolve_opts(g->ops, opts, &g->opts), fail);
    DMUON_TRY_GOTO(rc, group_ops_of(g->ops, &g->opts, &g->gops), fail);
    DMUON_TRY_GOTO(rc, algo_table_ok(t, segs, n, &g->opts), fail);
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
    DMUON_TRY_GOTO(rc, g->gops->ctrl_bytes(t, segs, n, &g->opts, &g->ctrl_bytes), fail);
    DMUON_TRY_GOTO(rc, check_range(mem, "group", "control area", ctrl_offset, g->ctrl_bytes,
                                   DMUON_GROUP_CTRL_ALIGN), fail);
    if (g->opts.staging_shared && g->gops->staging_bytes) {
        DMUON_TRY_GOTO(rc, g->gops->staging_bytes(t, segs, n, &g->opts, &g->staging_bytes),
                       fail);
        g->staging_offset = g->opts.staging_offset;
        DMUON_TRY_GOTO(rc, check_range(mem, "group", "staging area", g->staging_offset,
                                       g->staging_bytes, DMUON_GROUP_CTRL_ALIGN), fail);
        if (overlap(g->staging_offset, g->staging_bytes, ctrl_offset, g->ctrl_bytes)) {
            rc = DMUON_FAIL(DMUON_EINVAL, "group: the staging area [%lld, %lld) overlaps the "
                            "control area [%lld, %lld)", (long long)g->staging_offset,
                            (long long)(g->staging_offset + g->staging_bytes),
                            (long long)ctrl_offset, (long long)(ctrl_offset + g->ctrl_bytes));
            goto fail;
        }
    }
    DMUON_TRY_GOTO(rc, g->gops->create(g), fail);
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
    if (g->gops && g->impl)
        g->gops->free(g);
    dmuon_sched_release(&g->sched[0]);
    dmuon_sched_release(&g->sched[1]);
    free(g->segs);
    free(g);
}

int64_t dmuon_group_buffer_bytes(const dmuon_group *g) { return g->buffer_bytes; }
int64_t dmuon_group_window_bytes(const dmuon_group *g) { return g->window_bytes; }

dmuon_rc dmuon_group_host_copy(const dmuon_group *g, int64_t buffer_offset,
                               int64_t window_offset, unsigned char *host, int to_memory)
{
    const int64_t off[2] = {buffer_offset, window_offset};
    const int64_t len[2] = {g->buffer_bytes, g->window_bytes};
    for (int i = 0; i < 2; i++)
        DMUON_TRY(to_memory ? dmuon_symm_put(g->mem, off[i], host + off[i], len[i])
                            : dmuon_symm_get(g->mem, off[i], host + off[i], len[i]));
    return DMUON_OK;
}

int dmuon_group_algo_offered(dmuon_backend b, dmuon_algo a)
{
    const dmuon_comm_ops *ops = dmuon_comm_backend(b);
    if (!ops || a < DMUON_ALGO_DEFAULT || a >= DMUON_ALGO_COUNT)
        return 0;
    return ops->group[a == DMUON_ALGO_DEFAULT ? ops->default_algo : a] != NULL;
}

dmuon_algo dmuon_group_algo(const dmuon_group *g) { return g->opts.algorithm; }

const dmuon_sched *dmuon_group_sched(const dmuon_group *g, dmuon_sched_kind kind)
{
    return &g->sched[kind];
}

/* Returns DMUON_EUNSUPPORTED from the calling function when the group's
 * algorithm has no entry fn on its backend. */
#define GROUP_NEED(g, fn, what)                                                              \
    do {                                                                                     \
        if (!(g)->gops || !(g)->gops->fn)                                                    \
            return dmuon_err_set(DMUON_EUNSUPPORTED, __FILE__, __LINE__, "%s: not offered by " \
                                 "the %s backend with the %s algorithm", (what),             \
                                 (g)->ops->name, dmuon_algo_name((g)->opts.algorithm));      \
    } while (0)

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
    if (overlap(buf, B, g->staging_offset, g->staging_bytes) ||
        overlap(win, W, g->staging_offset, g->staging_bytes))
        return DMUON_FAIL(DMUON_EINVAL, "%s: the %s overlaps the group's staging area [%lld, "
                          "%lld)", op, overlap(buf, B, g->staging_offset, g->staging_bytes)
                          ? "layer buffer" : "owner window", (long long)g->staging_offset,
                          (long long)(g->staging_offset + g->staging_bytes));
    return DMUON_OK;
}

dmuon_rc dmuon_allgatherv(dmuon_group *g, int64_t buffer_offset, int64_t window_offset)
{
    GROUP_NEED(g, allgatherv, "allgatherv");
    DMUON_TRY(check_call(g, "allgatherv", buffer_offset, window_offset));
    DMUON_TRY(g->gops->allgatherv(g, buffer_offset, window_offset));
    return DMUON_OK;
}

dmuon_rc dmuon_reduce_scatterv(dmuon_group *g, int64_t buffer_offset, int64_t window_offset)
{
    GROUP_NEED(g, reduce_scatterv, "reducescatterv");
    if (!g->rsv_ok)
        return DMUON_FAIL(DMUON_EUNSUPPORTED, "reducescatterv: element types other than bf16 "
                          "and f32 cannot be reduced");
    DMUON_TRY(check_call(g, "reducescatterv", buffer_offset, window_offset));
    DMUON_TRY(g->gops->reduce_scatterv(g, buffer_offset, window_offset));
    return DMUON_OK;
}

dmuon_rc dmuon_allgatherv_start(dmuon_group *g, int64_t buffer_offset, int64_t window_offset)
{
    GROUP_NEED(g, start, "allgatherv_start");
    DMUON_TRY(check_call(g, "allgatherv_start", buffer_offset, window_offset));
    DMUON_TRY(g->gops->start(g, DMUON_SCHED_GATHER, buffer_offset, window_offset));
    return DMUON_OK;
}

dmuon_rc dmuon_allgatherv_test(dmuon_group *g, int *done)
{
    GROUP_NEED(g, test, "allgatherv_test");
    DMUON_TRY(g->gops->test(g, DMUON_SCHED_GATHER, done));
    return DMUON_OK;
}

dmuon_rc dmuon_allgatherv_wait(dmuon_group *g)
{
    GROUP_NEED(g, wait, "allgatherv_wait");
    DMUON_TRY(g->gops->wait(g, DMUON_SCHED_GATHER));
    return DMUON_OK;
}

dmuon_rc dmuon_reduce_scatterv_start(dmuon_group *g, int64_t buffer_offset, int64_t window_offset)
{
    GROUP_NEED(g, start, "reducescatterv_start");
    if (!g->rsv_ok)
        return DMUON_FAIL(DMUON_EUNSUPPORTED, "reducescatterv: element types other than bf16 "
                          "and f32 cannot be reduced");
    DMUON_TRY(check_call(g, "reducescatterv_start", buffer_offset, window_offset));
    DMUON_TRY(g->gops->start(g, DMUON_SCHED_REDUCE, buffer_offset, window_offset));
    return DMUON_OK;
}

dmuon_rc dmuon_reduce_scatterv_test(dmuon_group *g, int *done)
{
    GROUP_NEED(g, test, "reducescatterv_test");
    DMUON_TRY(g->gops->test(g, DMUON_SCHED_REDUCE, done));
    return DMUON_OK;
}

dmuon_rc dmuon_reduce_scatterv_wait(dmuon_group *g)
{
    GROUP_NEED(g, wait, "reducescatterv_wait");
    DMUON_TRY(g->gops->wait(g, DMUON_SCHED_REDUCE));
    return DMUON_OK;
}
