/*
 * publish.c — the HSDP publish (dmuon/publish.h): the backend-independent
 * layer.  It checks and agrees on the table (comm/table.c), resolves the
 * options, builds the publish schedule (sched.c: chunks and routes), checks
 * the copy range against the symmetric memory and
 * dispatches to the memory's backend (comm/backend.h).
 *
 * Invariant: every failure at create is decided from agreed inputs (the
 * table after dmuon_table_agree, the memory that every rank allocated
 * together), so all ranks return the same rc.
 */
#include "dmuon/publish.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dmuon/collv.h"
#include "backend.h"
#include "dmuon/ctl.h"

/* Returns DMUON_EUNSUPPORTED from the calling function when the publish's
 * algorithm has no entry fn on its backend. */
#define PUB_NEED(p, fn, what)                                                                \
    do {                                                                                     \
        if (!(p)->pops || !(p)->pops->fn)                                                    \
            return dmuon_err_set(DMUON_EUNSUPPORTED, __FILE__, __LINE__, "%s: not offered by " \
                                 "the %s backend with the %s algorithm", (what),             \
                                 (p)->ops->name, dmuon_algo_name((p)->algorithm));           \
    } while (0)

dmuon_rc dmuon_publish_layout(int per_node, const dmuon_segment *segs, int n, dmuon_segment *out,
                              int64_t *copy_bytes)
{
    if (per_node < 1 || n < 0 || (n > 0 && (!segs || !out)))
        return DMUON_FAIL(DMUON_EINVAL, "publish layout: %d ranks per node, %d parameters: "
                          "expected K >= 1 and a table", per_node, n);
    int64_t *end = calloc((size_t)per_node, sizeof *end);
    if (!end)
        return DMUON_FAIL(DMUON_ENOMEM, "out of memory laying out %d parameters", n);
    int64_t most = 0;
    for (int i = 0; i < n; i++) {
        int64_t es = (int64_t)dmuon_dtype_size(segs[i].dtype);
        if (segs[i].owner < 0 || !es) {
            free(end);
            return DMUON_FAIL(DMUON_EINVAL, "publish layout: parameter %d: %s", i,
                              segs[i].owner < 0 ? "negative owner" : "unknown element type");
        }
        int64_t *e = &end[segs[i].owner % per_node];
        int64_t off = (*e + es - 1) / es * es;
        out[i] = segs[i];
        out[i].offset = off;
        out[i].window_offset = 0;
        *e = off + segs[i].count * es;
        most = *e > most ? *e : most;
    }
    free(end);
    *copy_bytes = most;
    return DMUON_OK;
}

dmuon_rc dmuon_publish_copy_bytes_needed(const dmuon_topo *t, const dmuon_segment *params, int n,
                                         int64_t *bytes)
{
    DMUON_TRY(dmuon_table_check_publish(params, n, t->size, t->per_node, bytes));
    return DMUON_OK;
}

dmuon_rc dmuon_publish_create(const dmuon_topo *t, const dmuon_segment *params, int n,
                              const dmuon_publish_opts *opts, dmuon_symm *mem,
                              int64_t copy_offset, dmuon_publish **out)
{
    dmuon_rc rc = DMUON_OK;
    *out = NULL;
    dmuon_publish_opts o = {0};
    if (opts)
        o = *opts;
    dmuon_publish *p = calloc(1, sizeof *p);
    if (p)
        p->params = malloc((n > 0 ? (size_t)n : 1) * sizeof *p->params);
    rc = p && p->params ? DMUON_OK : DMUON_FAIL(DMUON_ENOMEM, "out of memory creating a publish");
    rc = dmuon_ctl_topo_agree(t, rc, o.deadline_ms);   /* the caller's deadline */
    if (rc != DMUON_OK) {
        if (p)
            free(p->params);
        free(p);
        return rc;
    }
    p->topo = t;
    p->mem = mem;
    p->copy_offset = copy_offset;
    DMUON_TRY_GOTO(rc, dmuon_table_agree_topo(t, params, n, o.deadline_ms), fail);
    DMUON_TRY_GOTO(rc, dmuon_table_check_publish(params, n, t->size, t->per_node,
                                                 &p->copy_bytes), fail);
    DMUON_TRY_GOTO(rc, dmuon_deadline_ms(o.deadline_ms, &p->deadline_ms), fail);
    DMUON_TRY_GOTO(rc, dmuon_chunk_bytes_check(o.chunk_bytes), fail);
    DMUON_TRY_GOTO(rc, dmuon_comm_backend_get(t->backend, "publish", &p->ops), fail);
    if (o.algorithm < DMUON_ALGO_DEFAULT || o.algorithm >= DMUON_ALGO_COUNT) {
        rc = DMUON_FAIL(DMUON_EINVAL, "publish: unknown algorithm %d", (int)o.algorithm);
        goto fail;
    }
    p->algorithm = o.algorithm == DMUON_ALGO_DEFAULT ? DMUON_ALGO_SCHEDULED : o.algorithm;
    p->pops = p->ops->publish[p->algorithm];
    if (!p->pops || !p->pops->create || !p->pops->free) {
        rc = DMUON_FAIL(DMUON_EUNSUPPORTED, "publish: the %s algorithm is not offered by the %s "
                        "backend", dmuon_algo_name(p->algorithm), p->ops->name);
        p->pops = NULL;
        goto fail;
    }
    p->chunk_bytes = o.chunk_bytes > 0 ? o.chunk_bytes
                   : p->ops->chunk_bytes > 0 ? p->ops->chunk_bytes : DMUON_CHUNK_BYTES;
    DMUON_TRY_GOTO(rc, dmuon_pub_sched_init(&p->sched, params, n, t->nodes, t->per_node,
                                            p->chunk_bytes), fail);
    if (!mem || mem->topo != t || mem->backend != t->backend) {
        rc = DMUON_FAIL(DMUON_EINVAL, "publish: the symmetric memory was not allocated over "
                        "this topology and its backend");
        goto fail;
    }
    if (copy_offset < 0 || copy_offset % 8 || copy_offset > mem->bytes ||
        p->copy_bytes > mem->bytes - copy_offset) {
        rc = DMUON_FAIL(DMUON_EINVAL, "publish: copy buffer at offset %lld (%lld bytes): "
                        "expected a multiple of 8 inside the %lld bytes of symmetric memory",
                        (long long)copy_offset, (long long)p->copy_bytes,
                        (long long)mem->bytes);
        goto fail;
    }
    memcpy(p->params, params, (size_t)n * sizeof *params);
    p->n = n;
    p->copy = mem->base + copy_offset;
    if (t->nodes == 1)
        snprintf(p->routes, sizeof p->routes, "none (one node)");
    else if (p->algorithm == DMUON_ALGO_SCHEDULED)
        snprintf(p->routes, sizeof p->routes, "chain");
    else
        snprintf(p->routes, sizeof p->routes, "%s", dmuon_algo_name(p->algorithm));
    DMUON_TRY_GOTO(rc, p->pops->create(p), fail);
    *out = p;
    return DMUON_OK;
fail:
    dmuon_publish_free(p);
    return rc;
}

void dmuon_publish_free(dmuon_publish *p)
{
    if (!p)
        return;
    if (p->pops && p->impl)
        p->pops->free(p);
    dmuon_pub_sched_release(&p->sched);
    free(p->params);
    free(p);
}

void *dmuon_publish_copy(const dmuon_publish *p) { return p->copy; }
int64_t dmuon_publish_copy_bytes(const dmuon_publish *p) { return p->copy_bytes; }
const dmuon_pub_sched *dmuon_publish_sched(const dmuon_publish *p) { return &p->sched; }
const char *dmuon_publish_routes(const dmuon_publish *p) { return p->routes; }
dmuon_algo dmuon_publish_algo(const dmuon_publish *p) { return p->algorithm; }

dmuon_rc dmuon_publish_begin(dmuon_publish *p, int64_t step)
{
    PUB_NEED(p, begin, "publish_begin");
    DMUON_TRY(p->pops->begin(p, step));
    return DMUON_OK;
}

dmuon_rc dmuon_publish_post(dmuon_publish *p, int param, int64_t step)
{
    PUB_NEED(p, post, "publish_post");
    DMUON_TRY(p->pops->post(p, param, step));
    return DMUON_OK;
}

dmuon_rc dmuon_publish_progress(dmuon_publish *p)
{
    PUB_NEED(p, progress, "publish_progress");
    DMUON_TRY(p->pops->progress(p));
    return DMUON_OK;
}

dmuon_rc dmuon_publish_wait(dmuon_publish *p, int param, int64_t step)
{
    PUB_NEED(p, wait, "publish_wait");
    DMUON_TRY(p->pops->wait(p, param, step));
    return DMUON_OK;
}

dmuon_rc dmuon_publish_end(dmuon_publish *p, int64_t step)
{
    PUB_NEED(p, end, "publish_end");
    DMUON_TRY(p->pops->end(p, step));
    return DMUON_OK;
}

/* The public layer's checks of a node load's list (dmuon_publish_node_load):
 * DMUON_EINVAL naming the entry, before any communication. */
static dmuon_rc node_load_check(const dmuon_publish *p, const dmuon_segment *segs,
                                const int *params, int n, int64_t dst_offset)
{
    if (n < 0 || (n > 0 && (!segs || !params)))
        return DMUON_FAIL(DMUON_EINVAL, "publish node load: %d parameters: expected a list", n);
    for (int j = 0; j < n; j++) {
        if (params[j] < 0 || params[j] >= p->n)
            return DMUON_FAIL(DMUON_EINVAL, "publish node load: entry %d: parameter %d is not "
                              "in the table of %d", j, params[j], p->n);
        const dmuon_segment *q = &p->params[params[j]];
        const int64_t bytes = q->count * (int64_t)dmuon_dtype_size(q->dtype);
        const int64_t at = dst_offset + segs[j].offset;
        if (at < 0 || segs[j].offset < 0 || at > p->mem->bytes || bytes > p->mem->bytes - at ||
            (at < p->copy_offset + p->copy_bytes && p->copy_offset < at + bytes))
            return DMUON_FAIL(DMUON_EINVAL, "publish node load: entry %d (parameter %d): "
                              "destination [%lld, +%lld) is outside the %lld bytes of symmetric "
                              "memory or overlaps the copy", j, params[j], (long long)at,
                              (long long)bytes, (long long)p->mem->bytes);
    }
    return DMUON_OK;
}

dmuon_rc dmuon_publish_node_load(dmuon_publish *p, const dmuon_segment *segs, const int *params,
                                 int n, int64_t dst_offset, int64_t step)
{
    PUB_NEED(p, node_load, "publish_node_load");
    DMUON_TRY(node_load_check(p, segs, params, n, dst_offset));
    DMUON_TRY(p->pops->node_load(p, segs, params, n, dst_offset, step));
    return DMUON_OK;
}

dmuon_rc dmuon_publish_node_load_start(dmuon_publish *p, const dmuon_segment *segs,
                                       const int *params, int n, int64_t dst_offset,
                                       int64_t step)
{
    PUB_NEED(p, node_load_start, "publish_node_load_start");
    DMUON_TRY(node_load_check(p, segs, params, n, dst_offset));
    DMUON_TRY(p->pops->node_load_start(p, segs, params, n, dst_offset, step));
    return DMUON_OK;
}

dmuon_rc dmuon_publish_node_load_test(dmuon_publish *p, int *done)
{
    PUB_NEED(p, node_load_test, "publish_node_load_test");
    if (!done)
        return DMUON_FAIL(DMUON_EINVAL, "publish node load test: no place for the result");
    DMUON_TRY(p->pops->node_load_test(p, done));
    return DMUON_OK;
}

dmuon_rc dmuon_publish_node_load_wait(dmuon_publish *p)
{
    PUB_NEED(p, node_load_wait, "publish_node_load_wait");
    DMUON_TRY(p->pops->node_load_wait(p));
    return DMUON_OK;
}

dmuon_rc dmuon_pub_step_begin(int64_t *cur, int *open, int64_t step)
{
    if (*open || step <= *cur)
        return DMUON_FAIL(DMUON_EINVAL, "publish: begin of step %lld after step %lld%s",
                          (long long)step, (long long)*cur, *open ? " (not ended)" : "");
    *cur = step;
    *open = 1;
    return DMUON_OK;
}

dmuon_rc dmuon_pub_step_post(const dmuon_publish *p, int64_t cur, int open, int param,
                             int64_t step)
{
    if (param < 0 || param >= p->n || p->params[param].owner != p->topo->rank)
        return DMUON_FAIL(DMUON_EINVAL, "publish: this rank does not own parameter %d", param);
    if (!open || step != cur)
        return DMUON_FAIL(DMUON_EINVAL, "publish: post of step %lld, but step %lld is open",
                          (long long)step, (long long)cur);
    return DMUON_OK;
}

dmuon_rc dmuon_pub_step_end(int64_t cur, int *open, int64_t step)
{
    if (!*open || step != cur)
        return DMUON_FAIL(DMUON_EINVAL, "publish: end of step %lld, but step %lld is open",
                          (long long)step, (long long)cur);
    *open = 0;
    return DMUON_OK;
}

int64_t dmuon_publish_flag(const dmuon_publish *p, int param)
{
    if (!p->pops || !p->pops->flag)
        return -1;
    return p->pops->flag(p, param);
}
