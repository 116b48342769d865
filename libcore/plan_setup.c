/*
 * plan_setup.c — turning what a user (or a trainer) asks for into planning
 * options, and the ablation set of dmuon-plan --compare (see dmuon/plan.h).
 *
 * Invariants: the cluster derivation accepts exactly the worlds
 * dmuon_plan_build accepts (1 <= nodes * gpus_per_node <= 2^20); the
 * ablation set never holds two variants with the same options, so no two
 * rows of a comparison differ only in their label.
 */
#include "dmuon/plan.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "dmuon/device.h"

/* ------------------------------------------------------------- cluster -- */

dmuon_rc dmuon_plan_cluster_derive(dmuon_plan_opts *o, int64_t ranks, bool have_nodes,
                                   bool have_gpus)
{
    assert(o);
    if (ranks < 0 || ranks > DMUON_PLAN_MAX_RANKS)
        return DMUON_FAIL(DMUON_EINVAL, "--ranks %lld: expected a whole number from 1 to %d",
                          (long long)ranks, DMUON_PLAN_MAX_RANKS);
    if (ranks > 0) {
        if (!have_gpus)
            o->gpus_per_node = ranks < 8 ? (int32_t)ranks : 8;
        if (ranks % o->gpus_per_node)
            return DMUON_FAIL(DMUON_EINVAL, "--ranks %lld is not a multiple of --gpus-per-node "
                              "%d%s", (long long)ranks, o->gpus_per_node,
                              have_gpus ? "" : " (the default; give --gpus-per-node K with K "
                                               "dividing the ranks, or --nodes R)");
        if (have_nodes && o->nodes != ranks / o->gpus_per_node)
            return DMUON_FAIL(DMUON_EINVAL, "--ranks %lld disagrees with --nodes %d x "
                              "--gpus-per-node %d", (long long)ranks, o->nodes,
                              o->gpus_per_node);
        o->nodes = (int32_t)(ranks / o->gpus_per_node);
    }
    if (o->nodes < 1 || o->gpus_per_node < 1 ||
        (int64_t)o->nodes * o->gpus_per_node > DMUON_PLAN_MAX_RANKS)
        return DMUON_FAIL(DMUON_EINVAL, "nodes x gpus-per-node = %lld x %lld: expected 1 to "
                          "%d ranks", (long long)o->nodes, (long long)o->gpus_per_node,
                          DMUON_PLAN_MAX_RANKS);
    return DMUON_OK;
}

/* ----------------------------------------------------------- ablations -- */

void dmuon_plan_variants_free(dmuon_plan_variant *v, size_t n)
{
    if (!v)
        return;
    for (size_t i = 0; i < n; i++)
        dmuon_plan_free(v[i].plan);
    free(v);
}

dmuon_rc dmuon_plan_ablations(const dmuon_model *m, const dmuon_plan_opts *base,
                              dmuon_plan_variant **out, size_t *n_out)
{
    dmuon_model_stats s;
    dmuon_plan_variant *v = calloc(10, sizeof *v);
    size_t nv = 0;
    dmuon_rc rc = DMUON_OK;
    dmuon_plan_opts o;
    *out = NULL;
    *n_out = 0;
    if (!v)
        return DMUON_FAIL(DMUON_ENOMEM, "out of memory");
    dmuon_model_get_stats(m, &s);
    /* the base row: the options as given, named after the ablations in them */
    bool given = !base->byte_cap || !base->layer_spread ||
                 (base->sharding == DMUON_SHARD_HSDP && !base->column_balance) ||
                 base->strategy != DMUON_STRATEGY_LPT || (base->fuse_experts && s.expert_matrices);
#define ADD(cond, label, stmt)                                              \
    do {                                                                    \
        if (!(cond))                                                        \
            break;                                                          \
        o = *base;                                                          \
        stmt;                                                               \
        v[nv].name = label;                                                 \
        DMUON_TRY_GOTO(rc, dmuon_plan_build(m, &o, &v[nv].plan), fail);     \
        nv++;                                                               \
    } while (0)
    ADD(true, given ? "as given" : "default", (void)0);
    ADD(base->byte_cap, "no-byte-cap", o.byte_cap = false);
    ADD(base->layer_spread, "no-layer-spread", o.layer_spread = false);
    ADD(base->sharding == DMUON_SHARD_HSDP && base->column_balance, "no-column-balance",
        o.column_balance = false);
    ADD(s.expert_matrices > 0 && !base->fuse_experts, "fuse-experts", o.fuse_experts = true);
    ADD(base->strategy != DMUON_STRATEGY_ROUND_ROBIN, "round-robin",
        o.strategy = DMUON_STRATEGY_ROUND_ROBIN);
    ADD(base->cost != DMUON_COST_ELEMENTS, "cost elements", o.cost = DMUON_COST_ELEMENTS);
    ADD(base->cost != DMUON_COST_M2N, "cost m2n", o.cost = DMUON_COST_M2N);
#undef ADD
    /* judge every variant by the base cost model (same units unless fused) */
    for (size_t i = 1; i < nv; i++)
        if (dmuon_plan_options(v[i].plan)->cost != base->cost)
            DMUON_TRY_GOTO(rc, dmuon_plan_reevaluate(v[i].plan, v[0].plan), fail);
    *out = v;
    *n_out = nv;
    return DMUON_OK;
fail:
    dmuon_plan_variants_free(v, nv);
    return rc;
}
