/*
 * ops_group.c — what the AllGatherV and ReduceScatterV cases share: one
 * group over symmetric memory of its own (common/opdrv.h), its table agreed
 * first, the calls staged through the host copy on GPU backends.
 */
#include "ops.h"

dmuon_rc vgroup_open(vctx *c, const dmuon_segment *segs, int n, const dmuon_group_opts *o,
                     vgroup *v)
{
    DMUON_TRY(dmuon_table_agree(c->topo.world, segs, n));
    return opdrv_group_open(&c->topo, segs, n, o, v);
}

static dmuon_rc staged(vgroup *v, int agv, int split)
{
    DMUON_TRY(opdrv_group_stage(v, 1));
    DMUON_TRY(opdrv_group_call(v, agv, split));
    return opdrv_group_stage(v, 0);
}

dmuon_rc vgroup_allgatherv(vgroup *v, int split) { return staged(v, 1, split); }

dmuon_rc vgroup_reduce_scatterv(vgroup *v, int split) { return staged(v, 0, split); }
