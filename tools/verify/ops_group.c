/*
 * ops_group.c — what the AllGatherV and ReduceScatterV cases share: one
 * group over symmetric memory of its own (control area, layer buffer, owner
 * window; dmuon_group_span_of).
 */
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
    memset(v, 0, sizeof *v);
}
