/*
 * ops_group.c — what the AllGatherV and ReduceScatterV cases share: one
 * group over symmetric memory of its own (control area, layer buffer, owner
 * window; dmuon_group_span_of).
 */
#include <stdlib.h>
#include <string.h>

#include "ops.h"

dmuon_rc vgroup_open(vctx *c, const dmuon_segment *segs, int n, const dmuon_group_opts *o,
                     vgroup *v)
{
    dmuon_rc rc = DMUON_OK;
    memset(v, 0, sizeof *v);
    DMUON_TRY(dmuon_table_agree(c->topo.world, segs, n));
    DMUON_TRY(dmuon_group_span_of(&c->topo, segs, n, o, &v->sp));
    DMUON_TRY(dmuon_symm_alloc(&c->topo, v->sp.bytes, &v->mem));
    DMUON_TRY_GOTO(rc, dmuon_group_create(&c->topo, segs, n, o, v->mem, v->sp.ctrl_offset,
                                          &v->g), fail);
    unsigned char *base = dmuon_symm_base(v->mem);
    if (dmuon_symm_on_device(v->mem)) {   /* GPU memory: cases work on a host copy */
        v->host = calloc(1, (size_t)v->sp.bytes);
        if (!v->host) {
            rc = DMUON_FAIL(DMUON_ENOMEM, "out of memory for the host copy of a group");
            dmuon_group_free(v->g);
            v->g = NULL;
            goto fail;
        }
        base = v->host;
    }
    v->buf = base + v->sp.buffer_offset;
    v->win = base + v->sp.window_offset;
    return DMUON_OK;
fail:
    dmuon_symm_free(v->mem);
    v->mem = NULL;
    return rc;
}

void vgroup_close(vgroup *v)
{
    dmuon_group_free(v->g);
    dmuon_symm_free(v->mem);
    free(v->host);
    memset(v, 0, sizeof *v);
}

/* Host copy ↔ GPU of the layer buffer and owner window (no-op on host memory). */
static dmuon_rc stage(vgroup *v, int in)
{
    if (!v->host)
        return DMUON_OK;
    return dmuon_group_host_copy(v->g, v->sp.buffer_offset, v->sp.window_offset, v->host, in);
}

/* split: start, one test, wait (host memory only: the GPU backends have
 * no split phase); else the blocking call. */
dmuon_rc vgroup_allgatherv(vgroup *v, int split)
{
    DMUON_TRY(stage(v, 1));
    if (split && !v->host) {
        int done = 0;
        DMUON_TRY(dmuon_allgatherv_start(v->g, v->sp.buffer_offset, v->sp.window_offset));
        DMUON_TRY(dmuon_allgatherv_test(v->g, &done));
        if (!done)
            DMUON_TRY(dmuon_allgatherv_wait(v->g));
    } else {
        DMUON_TRY(dmuon_allgatherv(v->g, v->sp.buffer_offset, v->sp.window_offset));
    }
    return stage(v, 0);
}

dmuon_rc vgroup_reduce_scatterv(vgroup *v, int split)
{
    DMUON_TRY(stage(v, 1));
    if (split && !v->host) {
        int done = 0;
        DMUON_TRY(dmuon_reduce_scatterv_start(v->g, v->sp.buffer_offset, v->sp.window_offset));
        DMUON_TRY(dmuon_reduce_scatterv_test(v->g, &done));
        if (!done)
            DMUON_TRY(dmuon_reduce_scatterv_wait(v->g));
    } else {
        DMUON_TRY(dmuon_reduce_scatterv(v->g, v->sp.buffer_offset, v->sp.window_offset));
    }
    return stage(v, 0);
}
