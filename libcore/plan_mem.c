/*
 * plan_mem.c — what each rank needs in device memory under a plan: the
 * optimizer state it keeps, its owner window, the largest layer it gathers
 * and that layer's FP32 gradient buffer, and the symmetric pool the runtime
 * allocates (dmuon/pool.h).
 *
 * The pool figure is the runtime's first (no-reuse) layout, laid out by the
 * runtime's own function (dmuon_pool_lay_out): per layer, the layer's Muon
 * bytes plus its AdamW elements padded to a multiple of the shard group (N
 * ranks for FSDP, K for HSDP) in param dtype, and the same elements in FP32
 * for gradients; then the windows: the largest owner window in param dtype
 * and in FP32, the even shards in param dtype and FP32, and the HSDP publish
 * copy (dmuon_publish_layout, the runtime's own function).  Line B's
 * direction region (rt_dir_bytes's rule) is given apart.  The operators'
 * control words depend on the topology and are not counted (sizes.ctrl 0).
 */
#include "plan_internal.h"

#include <stdlib.h>

#include "dmuon/pool.h"
#include "dmuon/publish.h"

dmuon_rc dmuon_plan_rank_memory(const dmuon_plan *p, int32_t rank, dmuon_plan_memory *out)
{
    const dmuon_plan_opts *o = &p->opts;
    int64_t dsz = (int64_t)dmuon_dtype_size(o->param_dtype);
    int64_t S = o->sharding == DMUON_SHARD_HSDP ? o->gpus_per_node : p->ranks;
    dmuon_rc rc = DMUON_OK;
    if (rank < 0 || rank >= p->ranks)
        return DMUON_FAIL(DMUON_EINVAL, "rank %d outside [0, %d)", rank, p->ranks);
    int64_t *even = calloc(p->nlayers ? p->nlayers : 1, sizeof *even);
    if (!even)
        return DMUON_FAIL(DMUON_ENOMEM, "out of memory");
    *out = (dmuon_plan_memory){0};
    out->gathered_layer = -1;
    for (size_t i = 0; i < p->nparams; i++)
        if (p->params[i].role != DMUON_ROLE_MUON && p->params[i].layer >= 0 &&
            (size_t)p->params[i].layer < p->nlayers)
            even[p->params[i].layer] += p->params[i].numel;
    int64_t even_total = 0, pspace = 0, gspace = 0, all_layers = 0, max_win = 0, dir_pad = 0;
    int64_t gb1 = 0, gb2 = 0;   /* the two largest gradient blocks */
    for (size_t l = 0; l < p->nlayers; l++) {
        int64_t own = p->layer_bytes[l] / dsz, pad = (even[l] + S - 1) / S * S;
        int64_t pb = (own + pad) * dsz, gb = (own + pad) * 4;
        even_total += pad / S;
        pspace += dmuon_pool_align(pb);
        gspace += dmuon_pool_align(gb);
        all_layers += pb;
        if (pb > out->gathered_layer_bytes) {
            out->gathered_layer_bytes = pb;
            out->gathered_grad_bytes = gb;
            out->gathered_layer = (int32_t)l;
        }
        if (gb > gb1) {
            gb2 = gb1;
            gb1 = gb;
        } else if (gb > gb2) {
            gb2 = gb;
        }
        /* line B: every parameter in the even region, Muon ones included */
        int64_t bpad = (own + even[l] + S - 1) / S * S;
        if (own > 0 && bpad > dir_pad)
            dir_pad = bpad;
    }
    /* as the runtime's rt_dir_bytes: two buffers of the whole and a shard */
    out->line_b_dir_bytes =
        dir_pad ? 2 * (dmuon_pool_align(dir_pad * 4) + dmuon_pool_align(dir_pad / S * 4)) : 0;
    out->overlap_grad_bytes = p->nlayers > 1 ? gb2 : 0;
    for (int32_t r = 0; r < p->ranks; r++)
        if (p->window[r] > max_win)
            max_win = p->window[r];
    int64_t win = p->window[rank] / dsz;
    /* FP32 master + momentum per owned Muon element; FP32 master and two
     * moments per AdamW shard element */
    out->optimizer_bytes = win * 8 + even_total * 12;
    out->window_bytes = p->window[rank] + win * 4;
    int64_t copy = 0;
    if (o->sharding == DMUON_SHARD_HSDP && p->nsegs > 0) {
        dmuon_segment *tab = malloc(p->nsegs * sizeof *tab);
        if (!tab) {
            rc = DMUON_FAIL(DMUON_ENOMEM, "out of memory");
            goto out;
        }
        rc = dmuon_publish_layout(o->gpus_per_node, p->segs, (int)p->nsegs, tab, &copy);
        free(tab);
        if (rc)
            goto out;
    }
    dmuon_pool_sizes sz = {.param = pspace, .grad = gspace};
    sz.win[DMUON_WIN_PARAM] = max_win / dsz * dsz;
    sz.win[DMUON_WIN_GRAD] = max_win / dsz * 4;
    sz.win[DMUON_WIN_EVEN] = even_total * dsz;
    sz.win[DMUON_WIN_EVEN_GRAD] = even_total * 4;
    sz.win[DMUON_WIN_COPY] = copy;
    dmuon_pool_map map;
    dmuon_pool_lay_out(&sz, &map);
    out->pool_bytes = map.total;
    int64_t w = map.space_bytes[DMUON_SPACE_WINDOW];
    /* the least the rank holds at a step: its state and windows, plus one
     * gathered layer and its gradient buffer (ZeRO-3 with reuse); ZeRO-2
     * keeps every layer's parameters gathered */
    int64_t gathered = o->zero_stage == 2 ? all_layers : out->gathered_layer_bytes;
    out->least_bytes =
        out->optimizer_bytes + w + gathered + out->gathered_grad_bytes + out->overlap_grad_bytes;
    out->windows_bytes = w;
    out->first_step_bytes = out->optimizer_bytes + out->pool_bytes;
out:
    free(even);
    return rc;
}

dmuon_rc dmuon_plan_busiest_memory(const dmuon_plan *p, int32_t *rank, dmuon_plan_memory *out)
{
    /* only the window differs between ranks, and every figure grows with
     * it: the rank with the largest window (the report's heaviest rank) */
    int32_t r = 0;
    for (int32_t k = 1; k < p->ranks; k++)
        if (p->window[k] > p->window[r])
            r = k;
    *rank = r;
    return dmuon_plan_rank_memory(p, r, out);
}
