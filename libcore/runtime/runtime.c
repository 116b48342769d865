/*
 * runtime.c — the training runtime (dmuon/runtime.h): creation from a plan,
 * parameter registration, open, and the layer hooks.
 *
 * Where everything lies is the rank's layout (dmuon/layout.h), built at
 * create from the plan alone: regions, pieces, windows, groups, and every
 * block's offset in the plan's order of one micro-batch, identical on every
 * rank, so the pool is allocated once at open at the size every step needs
 * (the first included).  The hooks make the layout's acquisitions in order:
 * every acquisition is checked against the plan's next one (layer) and
 * against the blocks still live in its space, so a different order, or a
 * release later than the plan's that leaves the range in use, is an error
 * naming the layers, never silent overlap (an earlier release is
 * harmless).  Hooks check their order locally before any data moves, so a
 * wrong call fails on the rank that made it with DMUON_EINVAL; the other
 * ranks then fail at their next collective's deadline.  Until the first
 * step the ranks' hooks are also compared (order_check).
 */
#include "rt_internal.h"

#include <assert.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dmuon/bf16.h"
#include "dmuon/timer.h"
#include "plan_internal.h"

/* ------------------------------------------------------------ options -- */

void dmuon_rt_opts_init(dmuon_rt_opts *o)
{
    memset(o, 0, sizeof *o);
    o->line = DMUON_LINE_D;
    dmuon_optim_opts_init(&o->optim);
    o->prefetch = 1;
}

dmuon_rc rt_fail_comm(dmuon_rt *rt, dmuon_rc rc)
{
    if (rc == DMUON_ETIMEOUT || rc == DMUON_ECOMM)
        rt->failed = true;
    return rc;
}

/* Every rank's rc → an error on every rank when any rank failed
 * (dmuon_agree: the lowest failing rank's rc and message on the others). */
dmuon_rc rt_agree(dmuon_rt *rt, dmuon_rc rc)
{
    if (rt->failed)   /* a missed deadline: no further collective on world */
        return rc != DMUON_OK ? rc : DMUON_FAIL(DMUON_ECOMM, "runtime: rank %d: no agreement "
                                                "after a communication failure", rt->topo.rank);
    return rt_fail_comm(rt, dmuon_ctl_topo_agree(&rt->topo, rc, rt->opts.deadline_ms));
}

/* ------------------------------------------------------------- create -- */

/* The fields of dmuon_rt_opts that must be the same on every rank, as
 * 64-bit keys (doubles by their bits, strings by an FNV-1a hash); the
 * ranks per node are agreed by the topology, backend and device are
 * checked locally against their only accepted value. */
static uint64_t opts_hash(const char *s, size_t cap)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < cap && s[i]; i++)
        h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

static int64_t opts_bits(double d)
{
    int64_t v;
    memcpy(&v, &d, sizeof v);
    return v;
}

#define RT_OPTS_KEYS 15

static dmuon_rc agree_opts(dmuon_rt *rt)
{
    static const char *const name[RT_OPTS_KEYS] = {
        "line", "zero_stage", "prefetch", "deadline_ms", "optim.momentum", "optim.nesterov",
        "optim.muon_weight_decay", "optim.scale", "optim.beta1", "optim.beta2", "optim.eps",
        "optim.adamw_weight_decay", "optim.clip_norm", "optim.ns_variant", "owner_parts"};
    const dmuon_rt_opts *o = &rt->opts;
    int64_t k[RT_OPTS_KEYS] = {
        o->line, rt->zero, o->prefetch != 0, o->deadline_ms, opts_bits(o->optim.momentum),
        o->optim.nesterov, opts_bits(o->optim.muon_weight_decay), o->optim.scale,
        opts_bits(o->optim.beta1), opts_bits(o->optim.beta2), opts_bits(o->optim.eps),
        opts_bits(o->optim.adamw_weight_decay), opts_bits(o->optim.clip_norm),
        (int64_t)opts_hash(o->optim.ns_variant, sizeof o->optim.ns_variant), o->owner_parts};
    int64_t v[2 * RT_OPTS_KEYS];   /* min of k and min of ~k (= ~max) in one reduction */
    for (int i = 0; i < RT_OPTS_KEYS; i++) {
        v[i] = k[i];
        v[RT_OPTS_KEYS + i] = ~k[i];
    }
    DMUON_TRY(rt_ctl_i64(rt, v, 2 * RT_OPTS_KEYS, DMUON_CTL_MIN, "create: options digest"));
    for (int i = 0; i < RT_OPTS_KEYS; i++) {
        int64_t lo = v[i], hi = ~v[RT_OPTS_KEYS + i];
        if (lo == hi)
            continue;
        bool dbl = i >= 4 && i != 5 && i != 7 && i < 13;
        double dlo = 0, dhi = 0;
        memcpy(&dlo, &lo, sizeof dlo);
        memcpy(&dhi, &hi, sizeof dhi);
        if (i == 13)
            return DMUON_FAIL(DMUON_EMISMATCH, "runtime: create: option %s differs between the "
                              "ranks (this rank: '%.63s'): give every rank the same options",
                              name[i], o->optim.ns_variant);
        if (dbl)
            return DMUON_FAIL(DMUON_EMISMATCH, "runtime: create: option %s differs between the "
                              "ranks (%.17g and %.17g): give every rank the same options",
                              name[i], dlo, dhi);
        if (i == 0)
            return DMUON_FAIL(DMUON_EMISMATCH, "runtime: create: option line differs between "
                              "the ranks (%s and %s): give every rank the same options",
                              dmuon_line_name((dmuon_line)lo), dmuon_line_name((dmuon_line)hi));
        return DMUON_FAIL(DMUON_EMISMATCH, "runtime: create: option %s differs between the "
                          "ranks (%lld to %lld): give every rank the same options", name[i],
                          (long long)lo, (long long)hi);
    }
    return DMUON_OK;
}

dmuon_rc dmuon_rt_create(const dmuon_plan *plan, MPI_Comm comm, const dmuon_rt_opts *opts,
                         dmuon_rt **out)
{
    dmuon_rc rc = DMUON_OK;
    *out = NULL;
    dmuon_rt *rt = calloc(1, sizeof *rt);
    if (!rt)
        return DMUON_FAIL(DMUON_ENOMEM, "runtime: out of memory");
    rt->plan = plan;
    if (opts)
        rt->opts = *opts;
    else
        dmuon_rt_opts_init(&rt->opts);
    rc = dmuon_optim_opts_check(&rt->opts.optim);
    int zero = rt->opts.zero_stage ? rt->opts.zero_stage : dmuon_plan_zero_stage(plan);
    if (rc == DMUON_OK && zero != 2 && zero != 3)
        rc = DMUON_FAIL(DMUON_EINVAL, "runtime: ZeRO stage %d: expected 2 or 3", zero);
    if (rc == DMUON_OK && (unsigned)rt->opts.line > DMUON_LINE_A)
        rc = DMUON_FAIL(DMUON_EINVAL, "runtime: unknown line %d", (int)rt->opts.line);
    /* backend and device: a pair this build and machine can run
     * (rt_device.c) */
    if (rc == DMUON_OK)
        rc = rt_device_check(rt);
    /* the deadline resolved once, here: < 0 and a bad $DMUON_DEADLINE_MS
     * are refused at create, not at the first call that waits */
    if (rc == DMUON_OK && rt->opts.deadline_ms < 0)
        rc = DMUON_FAIL(DMUON_EINVAL, "runtime: deadline_ms %d: expected 0 ($DMUON_DEADLINE_MS "
                        "or the default) or a positive number of milliseconds",
                        rt->opts.deadline_ms);
    if (rc == DMUON_OK)
        rc = dmuon_deadline_ms(rt->opts.deadline_ms, &rt->opts.deadline_ms);
    rt->zero = zero;
    /* every rank has reached create, within the deadline, before the
     * blocking MPI_Comm_dup / _split of the topology; an option refused on
     * one rank fails create on every rank */
    if (comm != MPI_COMM_NULL) {   /* a NCCL handoff has no MPI communicator */
        dmuon_rc arrived = dmuon_agree(comm, rc, rc == DMUON_OK ? rt->opts.deadline_ms
                                                                : DMUON_DEADLINE_MS_DEFAULT);
        if (arrived == DMUON_ETIMEOUT)
            rc = DMUON_FAIL(DMUON_ETIMEOUT, "runtime: create: not every rank reached "
                            "dmuon_rt_create within the deadline (%d ms)", rt->opts.deadline_ms);
        else
            rc = arrived;
    }
    if (rc != DMUON_OK)
        goto fail;
    int size = 0, wrank = 0;
    /* comm's size and rank (a handed-over NCCL communicator: the options') */
    DMUON_TRY_GOTO(rc, rt_comm_size(rt, comm, &size, &wrank), fail);
    dmuon_err_set_rank(wrank);
    if (size != dmuon_plan_ranks(plan)) {
        rc = DMUON_FAIL(DMUON_EMISMATCH, "runtime: the plan is for %d ranks (%d node%s x %d), "
                        "this run has %d", (int)dmuon_plan_ranks(plan), (int)dmuon_plan_nodes(plan),
                        dmuon_plan_nodes(plan) == 1 ? "" : "s",
                        (int)dmuon_plan_gpus_per_node(plan), size);
        goto fail;
    }
    int rpn = rt->opts.ranks_per_node;
    /* over comm, or over the trainer's NCCL communicator (rt_device.c) */
    DMUON_TRY_GOTO(rc, rt_topo_init(rt, comm, rpn), fail);
    rt->topo_ok = true;
    rt->topo.backend = rt->opts.backend;   /* the pool and the operators' */
    /* an MPI error on the runtime's communicators comes back as a code,
     * not an abort (a message of another layer's size, from hooks in
     * different orders on the ranks, is MPI_ERR_TRUNCATE); the
     * communicators made from these below inherit the handler */
    if (rt->topo.world != MPI_COMM_NULL) {
        MPI_Comm_set_errhandler(rt->topo.world, MPI_ERRORS_RETURN);
        MPI_Comm_set_errhandler(rt->topo.node, MPI_ERRORS_RETURN);
        MPI_Comm_set_errhandler(rt->topo.rail, MPI_ERRORS_RETURN);
    }
    dmuon_err_set_rank(rt->topo.rank);
    if (rt->topo.per_node != dmuon_plan_gpus_per_node(plan)) {
        rc = DMUON_FAIL(DMUON_EMISMATCH, "runtime: the plan has %d ranks per node, this run %d "
                        "(%s): give --ranks-per-node %d (or DMUON_RANKS_PER_NODE=%d), or a "
                        "plan for this layout", (int)dmuon_plan_gpus_per_node(plan),
                        rt->topo.per_node,
                        rt->topo.virtual_nodes ? "virtual nodes" : "MPI_COMM_TYPE_SHARED",
                        (int)dmuon_plan_gpus_per_node(plan), (int)dmuon_plan_gpus_per_node(plan));
        goto fail;
    }
    {   /* the same plan on every rank: the minimum of the digest and of its
         * complement in one reduction, within the deadline */
        uint64_t mine = dmuon_plan_units_digest(plan) ^ (dmuon_plan_segments_digest(plan) << 1);
        int64_t v[2] = {(int64_t)mine, (int64_t)~mine};
        DMUON_TRY_GOTO(rc, rt_ctl_i64(rt, v, 2, DMUON_CTL_MIN, "create: plan digest"), fail);
        uint64_t lo = (uint64_t)v[0], hi = ~(uint64_t)v[1];
        if (lo != hi) {
            rc = DMUON_FAIL(DMUON_EMISMATCH, "runtime: the ranks were given different plans "
                            "(units or segment tables differ): load the same plan file on "
                            "every rank");
            goto fail;
        }
    }
    DMUON_TRY_GOTO(rc, agree_opts(rt), fail);
    rt->hsdp = dmuon_plan_sharding(plan) == DMUON_SHARD_HSDP;
    rt->owners = dmuon_line_ops_of(rt->opts.line)->owners;
    rt->pdt = dmuon_plan_param_dtype(plan);
    rt->dsize = dmuon_dtype_size(rt->pdt);
    if (rt->pdt != DMUON_BF16 && rt->pdt != DMUON_F32) {
        rc = DMUON_FAIL(DMUON_EUNSUPPORTED, "runtime: parameter dtype %s: expected bf16 or f32",
                        dmuon_dtype_name(rt->pdt));
        goto fail;
    }
    rt->shard_comm = rt->hsdp ? rt->topo.node : rt->topo.world;
    {   /* the layout of this rank, from the plan alone: the same offsets on
         * every rank, the pool sized once for every step */
        dmuon_layout_opts lo;
        dmuon_layout_opts_init(&lo);
        lo.line = rt->opts.line;
        lo.zero_stage = rt->zero;
        lo.rank = rt->topo.rank;
        lo.prefetch = rt->opts.prefetch != 0;
        lo.backend = rt->opts.backend;
        lo.owner_parts = rt->opts.owner_parts;
        DMUON_TRY_GOTO(rc, rt_agree(rt, dmuon_layout_build(plan, &lo, &rt->lay)), fail);
        rt->per_layer = rt->lay->opts.owner_parts == DMUON_OWNER_PARTS_PER_LAYER;
        /* the node holds consecutive ranks ordered by local index (dmuon/topo.h) */
        assert(rt->lay->shard_rank == (rt->hsdp ? rt->topo.local : rt->topo.rank));
        assert(rt->lay->shard_size == (rt->hsdp ? rt->topo.per_node : rt->topo.size));
    }

    dmuon_ns_opts nso;
    dmuon_ns_opts_init(&nso);
    DMUON_TRY_GOTO(rc, dmuon_ns_opts_set_variant(&nso, rt->opts.optim.ns_variant), fail);
    /* the GPU (device cuda), the device table and the NS context, agreed:
     * a rank without its GPU fails create on every rank */
    DMUON_TRY_GOTO(rc, rt_agree(rt, rt_device_init(rt, &nso)), fail);

    size_t np = 0;
    const dmuon_plan_param *pp = dmuon_plan_params(plan, &np);
    rt->nparams = np;
    rt->params = calloc(np ? np : 1, sizeof *rt->params);
    rt->nlayers = dmuon_plan_layer_count(plan);
    rt->layers = calloc(rt->nlayers ? rt->nlayers : 1, sizeof *rt->layers);
    if (!rt->params || !rt->layers) {
        rc = DMUON_FAIL(DMUON_ENOMEM, "runtime: out of memory");
        goto fail;
    }
    assert(rt->nlayers == rt->lay->nlayers && np == rt->lay->nparams);
    for (size_t l = 0; l < rt->nlayers; l++)
        rt->layers[l].lay = &rt->lay->layers[l];
    for (size_t i = 0; i < np; i++) {
        rt_param *p = &rt->params[i];
        p->name = pp[i].name;
        p->layer = pp[i].layer;
        p->numel = pp[i].numel;
        p->matrices = pp[i].matrices;
        p->m = pp[i].mat_m;
        p->n = pp[i].mat_n;
        p->transposed = pp[i].transposed;
        p->layout = pp[i].layout;
        p->plan_role = pp[i].role;
        p->role = rt->lay->params[i].role;
        p->owned = rt->lay->params[i].owned;
        p->off = rt->lay->params[i].off;
    }
    /* optimizer state and accumulated gradients: one allocation, zeroed by
     * the device's alloc (on the host calloc's untouched pages: a part no
     * step has used yet holds no memory); registration writes this rank's
     * pieces of the initial values into it.  The step's directions live in
     * the step's block of the working space (rt_step_prepare). */
    {
        const int64_t we = rt->lay->win_elems, ee = rt->lay->even_total;
        void *st = NULL;
        rc = rt->elem->alloc((rt->lay->state_elems + 1) * (int64_t)sizeof *rt->state, &st);
        rt->state = st;
        DMUON_TRY_GOTO(rc, rt_agree(rt, rc), fail);
        float *f = rt->state;
        rt->own_w = f, f += we;
        rt->own_m = f, f += we;
        rt->own_g = f, f += we;
        rt->even_w = f, f += ee;
        rt->even_m = f, f += ee;
        rt->even_v = f, f += ee;
        rt->even_g = f, f += ee;
        assert(f == rt->state + rt->lay->state_elems);
    }
    *out = rt;
    return DMUON_OK;
fail:
    dmuon_rt_free(rt);
    return rc;
}

int dmuon_rt_param_index(const dmuon_rt *rt, const char *name)
{
    for (size_t i = 0; i < rt->nparams; i++)
        if (strcmp(rt->params[i].name, name) == 0)
            return (int)i;
    return -1;
}

dmuon_rc dmuon_rt_register(dmuon_rt *rt, const char *name, int ndim, const int64_t *shape,
                           const float *init)
{
    if (rt->opened)
        return DMUON_FAIL(DMUON_EINVAL, "runtime: register '%s' after open", name ? name : "");
    if (!init || !name || ndim < 1 || !shape)
        return DMUON_FAIL(DMUON_EINVAL, "runtime: register '%s': name, shape and initial "
                          "values are required", name ? name : "(null)");
    int i = dmuon_rt_param_index(rt, name);
    if (i < 0) {   /* reported by open together with every other problem */
        char **u = realloc(rt->unknown, (rt->nunknown + 1) * sizeof *u);
        if (!u || !(u[rt->nunknown] = strdup(name)))
            return DMUON_FAIL(DMUON_ENOMEM, "runtime: out of memory");
        rt->unknown = u;
        rt->nunknown++;
        return DMUON_OK;
    }
    rt_param *p = &rt->params[i];
    int64_t numel = 1;
    for (int d = 0; d < ndim; d++)
        numel = shape[d] > 0 && numel <= INT64_MAX / shape[d] ? numel * shape[d] : -1;
    p->reg_numel = numel;
    p->reg_count++;
    /* a 2-D Muon matrix must come as the plan's m x n (the element count
     * alone would accept its transpose) */
    p->bad_shape = p->matrices == 1 && p->m > 0 && ndim == 2 &&
                   (shape[0] != p->m || shape[1] != p->n);
    {
        size_t len = 0;
        p->reg_shape_text[0] = 0;
        for (int d = 0; d < ndim && len + 24 < sizeof p->reg_shape_text; d++)
            len += (size_t)snprintf(p->reg_shape_text + len, sizeof p->reg_shape_text - len,
                                    "%s%lld", d ? " x " : "", (long long)shape[d]);
    }
    p->ndim = ndim < 8 ? ndim : 8;
    for (int d = 0; d < p->ndim; d++)
        p->shape[d] = shape[d];
    p->registered = true;
    if (numel != p->numel)
        return DMUON_OK;   /* open names it */
    /* only what this rank holds is kept: its pieces of the parameter, into
     * the masters (device memory with device cuda) */
    for (size_t k = 0; k < rt->lay->npieces; k++) {
        const rt_piece *pc = &rt->lay->pieces[k];
        if (pc->param != i)
            continue;
        float *dst = pc->owned ? rt->own_w : rt->even_w;
        DMUON_TRY(rt->elem->copy(dst + pc->pos, init + pc->lo,
                                 (pc->hi - pc->lo) * (int64_t)sizeof(float), RT_H2D, rt->stream));
    }
    return DMUON_OK;
}

/* --------------------------------------------------------------- open -- */

/* Collects every registration problem into one message. */
static dmuon_rc check_registrations(dmuon_rt *rt)
{
    char msg[1024];
    size_t len = 0, problems = 0;
    msg[0] = 0;
#define ADD(...)                                                                   \
    do {                                                                           \
        if (problems++ < 6 && len < sizeof msg)                                    \
            len += (size_t)snprintf(msg + len, sizeof msg - len, __VA_ARGS__);     \
    } while (0)
    for (size_t i = 0; i < rt->nunknown; i++)
        ADD("%s'%s' is not a parameter of the plan", len ? "; " : "", rt->unknown[i]);
    for (size_t i = 0; i < rt->nparams; i++) {
        const rt_param *p = &rt->params[i];
        if (!p->registered)
            ADD("%s'%s' was never registered", len ? "; " : "", p->name);
        else if (p->reg_numel != p->numel)
            ADD("%s'%s' has %lld elements, the plan %lld", len ? "; " : "", p->name,
                (long long)p->reg_numel, (long long)p->numel);
        else if (p->bad_shape)
            ADD("%s'%s' is registered as %s, the plan's matrix is %lld x %lld", len ? "; " : "",
                p->name, p->reg_shape_text, (long long)p->m, (long long)p->n);
        if (p->registered && p->reg_count > 1)
            ADD("%s'%s' was registered %d times", len ? "; " : "", p->name, p->reg_count);
    }
#undef ADD
    if (!problems)
        return DMUON_OK;
    return DMUON_FAIL(DMUON_EINVAL, "runtime: %zu registration problem%s: %s%s", problems,
                      problems == 1 ? "" : "s", msg, problems > 6 ? "; ..." : "");
}

/* Widens / narrows between F32 and the parameter dtype (device table). */
static dmuon_rc to_pdt(const dmuon_rt *rt, unsigned char *dst, const float *src, int64_t n)
{
    return rt->elem->narrow(dst, src, rt->pdt, n, rt->stream);
}

static dmuon_rc from_pdt(const dmuon_rt *rt, float *dst, const unsigned char *src, int64_t n)
{
    return rt->elem->widen(dst, src, rt->pdt, n, rt->stream);
}

/* Writes a piece's master values, in the parameter dtype, where the gathers
 * read them between steps: the owner window (FSDP, persistent owner
 * parts), the rail's publish copy (HSDP owned pieces) or the even shard
 * window.  With per-layer owner parts FSDP's owned pieces have no such
 * place: each gather narrows them into its layer's source (rt_gather_start). */
dmuon_rc rt_store_param(dmuon_rt *rt, const rt_piece *pc, unsigned char *base)
{
    int64_t n = pc->hi - pc->lo;
    if (!pc->owned)
        return to_pdt(rt, base + rt->ewin_off + pc->pos * (int64_t)rt->dsize, rt->even_w + pc->pos,
                      n);
    if (!rt->hsdp && rt->per_layer)
        return DMUON_OK;
    if (!rt->hsdp)
        return to_pdt(rt, base + rt->pwin_off + pc->pos * (int64_t)rt->dsize, rt->own_w + pc->pos,
                      n);
    const rt_layer *L = &rt->layers[pc->layer];
    const dmuon_segment *s = &L->lay->segs[pc->seg];
    int64_t in_seg = pc->pos * (int64_t)rt->dsize - s->window_offset;
    return to_pdt(rt, base + rt->copy_off + L->lay->seg_copy[pc->seg] + in_seg, rt->own_w + pc->pos, n);
}

dmuon_rc rt_write_windows(dmuon_rt *rt)
{
    for (size_t i = 0; i < rt->lay->npieces; i++)
        DMUON_TRY(rt_store_param(rt, &rt->lay->pieces[i], rt->base));
    return DMUON_OK;
}

unsigned char *rt_pblock(const dmuon_rt *rt, const rt_layer *L)
{
    return rt->base + rt->space_off[DMUON_SPACE_WORK] + L->poff;
}

float *rt_gblock(const dmuon_rt *rt, const rt_layer *L)
{
    return (float *)(rt->base + rt->space_off[DMUON_SPACE_WORK] + L->goff);
}

/* Rank 0's offset table against every rank's: the first differing entry is
 * named on every rank.  The layout is a pure function of the plan and the
 * options, which create agreed; this is the check that it is. */
static dmuon_rc pool_agree(dmuon_rt *rt)
{
    int64_t mine[DMUON_SPACE_COUNT * 2 + 7], ref[DMUON_SPACE_COUNT * 2 + 7];
    static const char *extra[] = {"owner window", "gradient window", "even shards",
                                  "even gradient shards", "publish copy", "pool size",
                                  "spaces' order (layout digest)"};
    int n = 0;
    for (int s = 0; s < DMUON_SPACE_COUNT; s++) {
        mine[n++] = rt->space_off[s];
        mine[n++] = rt->space_bytes[s];
    }
    mine[n++] = rt->pwin_off;
    mine[n++] = rt->gwin_off;
    mine[n++] = rt->ewin_off;
    mine[n++] = rt->egwin_off;
    mine[n++] = rt->copy_off;
    mine[n++] = dmuon_symm_bytes(rt->symm);
    mine[n++] = (int64_t)dmuon_layout_digest(rt->lay);
    memcpy(ref, mine, sizeof ref);
    DMUON_TRY(rt_ctl_bcast(rt, ref, n * (int)sizeof *ref, "pool: layout table"));
    int first = n;
    for (int i = 0; i < n; i++)
        if (mine[i] != ref[i]) {
            first = i;
            break;
        }
    /* the lowest differing entry, then the lowest rank with it */
    int64_t key = (int64_t)first * rt->topo.size + rt->topo.rank;
    DMUON_TRY(rt_ctl_i64(rt, &key, 1, DMUON_CTL_MIN, "pool: layout check"));
    int got[2] = {(int)(key / rt->topo.size), (int)(key % rt->topo.size)};
    if (got[0] == n)
        return DMUON_OK;
    const char *what = got[0] < DMUON_SPACE_COUNT * 2 ? dmuon_pool_space_name(got[0] / 2)
                                                      : extra[got[0] - DMUON_SPACE_COUNT * 2];
    return DMUON_FAIL(DMUON_EMISMATCH, "pool: layout entry %d (%s %s) differs between rank 0 "
                      "and rank %d", got[0], what,
                      got[0] < DMUON_SPACE_COUNT * 2 ? (got[0] % 2 ? "bytes" : "offset") : "offset",
                      got[1]);
}

/* Allocates the pool at the layout's size (collective over the node),
 * checks that every rank has the same map, and builds the operators over
 * it. */
dmuon_rc rt_pool_build(dmuon_rt *rt)
{
    const dmuon_pool_map *map = &rt->lay->map;
    for (int s = 0; s < DMUON_SPACE_COUNT; s++) {
        rt->space_off[s] = map->space_off[s];
        rt->space_bytes[s] = map->space_bytes[s];
    }
    rt->pwin_off = map->win_off[DMUON_WIN_PARAM];
    rt->gwin_off = map->win_off[DMUON_WIN_GRAD];
    rt->ewin_off = map->win_off[DMUON_WIN_EVEN];
    rt->egwin_off = map->win_off[DMUON_WIN_EVEN_GRAD];
    rt->copy_off = map->win_off[DMUON_WIN_COPY];
    rt->dir_off = map->win_off[DMUON_WIN_DIR];
    DMUON_TRY(rt_fail_comm(rt, dmuon_symm_alloc(&rt->topo, map->total, rt->opts.deadline_ms,
                                                &rt->symm)));
    rt->base = rt->elem->adopt(dmuon_symm_base(rt->symm));
    DMUON_TRY(pool_agree(rt));
    return rt_groups_create(rt);
}

void rt_pool_drop(dmuon_rt *rt)
{
    rt_groups_free(rt);
    dmuon_symm_free(rt->symm);
    rt->symm = NULL;
    rt->base = NULL;
}

dmuon_rc dmuon_rt_open(dmuon_rt *rt)
{
    if (rt->opened)
        return DMUON_FAIL(DMUON_EINVAL, "runtime: open called twice");
    DMUON_TRY(rt_agree(rt, check_registrations(rt)));
    /* one allocation at the layout's size: the blocks, views and the step's
     * memory are ranges of it; nothing is allocated per gather or per step */
    DMUON_TRY(rt_agree(rt, rt_pool_build(rt)));
    rt_step_prepare(rt);
    rt->opened = true;
    DMUON_TRY(rt_write_windows(rt));
    DMUON_TRY(rt_pub_round(rt));
    return DMUON_OK;
}

/* ---------------------------------------------------------- the hooks -- */

/* Prefixes the recorded message of a failed operator call with the layer
 * (the operators name rank, peer and queue, not the layer).  A mismatch
 * seen by an operator (the ranks' calls differ) leaves the communicators
 * out of step like a missed deadline: the runtime is failed. */
static dmuon_rc in_layer(dmuon_rt *rt, dmuon_rc rc, const char *what, size_t l)
{
    if (rc == DMUON_OK)
        return rc;
    if (rc == DMUON_EMISMATCH)
        rt->failed = true;
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", dmuon_errmsg());
    return DMUON_FAIL(rc, "%s of layer '%s': %s", what, dmuon_plan_layer_name(rt->plan, l), msg);
}

static dmuon_rc usable(const dmuon_rt *rt, const char *hook, size_t l)
{
    if (!rt->opened)
        return DMUON_FAIL(DMUON_EINVAL, "runtime: %s before open", hook);
    if (rt->failed)
        return DMUON_FAIL(DMUON_ECOMM, "runtime: %s after a communication failure", hook);
    if (l >= rt->nlayers)
        return DMUON_FAIL(DMUON_EINVAL, "runtime: %s(%zu): the plan has %zu layers", hook, l,
                          rt->nlayers);
    /* device memory: the trainer's work on its stream is done first */
    return rt->elem->sync(rt->opts.stream);
}

static void micro_begin(dmuon_rt *rt)
{
    if (rt->in_micro)
        return;
    rt->in_micro = true;
    rt->bwd_count = 0;
    for (int k = 0; k < RT_SPACES; k++)
        rt->acq_index[k] = 0;
    for (size_t l = 0; l < rt->nlayers; l++) {
        if (rt->layers[l].phase == RT_DONE)
            rt->layers[l].phase = RT_IDLE;
        rt->layers[l].acq_now = false;
    }
}

/* The working space's first byte (blocks and views are ranges of it). */
static unsigned char *work_base(const dmuon_rt *rt)
{
    return rt->base + rt->space_off[DMUON_SPACE_WORK];
}

/* Bytes of layer l's block in `space`, as the layout packed it. */
static int64_t block_bytes(const dmuon_rt *rt, int space, size_t l)
{
    return dmuon_pool_align(rt->layers[l].lay->bytes[space]);
}

/* Whether layer l holds a block in `space` now, and where: the parameter
 * block from acquisition to release, the gradient block inside the
 * backward bracket and while its reduction runs, the view while it is open
 * (in the view arena: none when the view is the parameter block), the
 * reduce staging while the reduction runs. */
static bool block_live(const dmuon_rt *rt, int space, size_t l, int64_t *off)
{
    const rt_layer *L = &rt->layers[l];
    if (space == RT_STAGING) {
        *off = L->lay->staging_off;
        return L->reducing;
    }
    if (space == RT_SOURCE) {
        *off = L->soff;
        return L->src_live;
    }
    if (space == RT_RECV) {
        *off = L->roff;
        return L->reducing && L->lay->bytes[RT_RECV] > 0;
    }
    if (space == RT_PARAM) {
        *off = L->poff;
        return L->pblock != RT_BLOCK_NONE;
    }
    if (space == RT_GRAD) {
        *off = L->goff;
        return L->phase == RT_BWD || L->phase == RT_BWD_FWD || L->reducing;
    }
    *off = L->w && !rt->lay->view_alias ? (int64_t)((unsigned char *)L->w - work_base(rt)) : 0;
    return L->w != NULL && !rt->lay->view_alias;
}

/* The layer whose live block overlaps the range that the next acquisition
 * in `space` (the plan's k-th, layer l's) would hand out, or -1; *kind
 * the overlapping block's kind.  Parameter, gradient and view blocks share
 * the working space, so each is checked against the live blocks of all
 * three; the staging against the staging.  The layout keeps the plan's
 * order's live ranges apart; a micro-batch that releases in another order
 * (a block held past the release the plan's order makes) would otherwise
 * get a range still in use. */
static long acq_conflict_ex(const dmuon_rt *rt, int space, size_t l, int *kind, unsigned skip);

static long acq_conflict(const dmuon_rt *rt, int space, size_t l, int *kind)
{
    return acq_conflict_ex(rt, space, l, kind, 0);
}

/* skip: bit k leaves layer l's own block of kind k out (it is given back
 * before this acquisition, checked ahead of it: see use_check). */
static long acq_conflict_ex(const dmuon_rt *rt, int space, size_t l, int *kind, unsigned skip)
{
    const dmuon_layout_space *sp = &rt->lay->space[space];
    size_t k = rt->in_micro ? rt->acq_index[space] : 0;
    int64_t lo = sp->acq_off[k], hi = lo + block_bytes(rt, space, l);
    const bool staging = space == RT_STAGING;
    for (int s = 0; s < RT_SPACES; s++) {
        if (s == DMUON_BLOCK_STEP || (s == RT_STAGING) != staging)
            continue;
        for (size_t j = 0; j < rt->nlayers; j++) {
            int64_t o = 0;
            if ((j != l || s != space) && (j != l || !(skip & (1u << s))) &&
                block_live(rt, s, j, &o) && o < hi && lo < o + block_bytes(rt, s, j)) {
                *kind = s;
                return (long)j;
            }
        }
    }
    return -1;
}

/* Whether the next acquisition in `space` (the first of a micro-batch not
 * begun yet) may be layer l's, as in the plan's order (dmuon/layout.h),
 * and whether its range is free: DMUON_EINVAL naming the layers when not.
 * Changes nothing, so a hook checks its acquisitions before it makes any
 * and a refused call has no effect. */
static dmuon_rc acq_check_ex(const dmuon_rt *rt, int space, size_t l, unsigned skip);

static dmuon_rc acq_check(const dmuon_rt *rt, int space, size_t l)
{
    return acq_check_ex(rt, space, l, 0);
}

dmuon_rc rt_acq_check(const dmuon_rt *rt, int space, size_t l)
{
    return acq_check(rt, space, l);
}

static dmuon_rc acq_check_ex(const dmuon_rt *rt, int space, size_t l, unsigned skip)
{
    const dmuon_layout_space *sp = &rt->lay->space[space];
    size_t k = rt->in_micro ? rt->acq_index[space] : 0;
    if (k >= sp->nacq || (size_t)sp->acq_layer[k] != l)
        return DMUON_FAIL(DMUON_EINVAL, "runtime: %s acquisition %zu of this micro-batch is "
                          "layer '%s'; the plan's order acquires %s%s%s there (the hooks run "
                          "the plan's layers in forward order, then backward in reverse, "
                          "every micro-batch: dmuon/runtime.h)",
                          dmuon_block_name(space), k, dmuon_plan_layer_name(rt->plan, l),
                          k < sp->nacq ? "layer '" : "nothing",
                          k < sp->nacq ? dmuon_plan_layer_name(rt->plan, (size_t)sp->acq_layer[k])
                                       : "",
                          k < sp->nacq ? "'" : "");
    int jk = 0;
    long j = acq_conflict_ex(rt, space, l, &jk, skip);
    if (j >= 0)
        return DMUON_FAIL(DMUON_EINVAL, "runtime: %s acquisition %zu of this micro-batch (layer "
                          "'%s') would take memory that layer '%s' still holds (its %s block): "
                          "the plan's order has released it by then (the hooks must release in "
                          "that order too: end '%s' first)",
                          dmuon_block_name(space), k, dmuon_plan_layer_name(rt->plan, l),
                          dmuon_plan_layer_name(rt->plan, (size_t)j), dmuon_block_name(jk),
                          dmuon_plan_layer_name(rt->plan, (size_t)j));
    return DMUON_OK;
}

/* Gives layer l's block in `space` the offset of the plan's next
 * acquisition (checked by acq_check first). */
dmuon_rc rt_acquire(dmuon_rt *rt, int space, size_t l)
{
    rt_layer *L = &rt->layers[l];
    DMUON_TRY(acq_check(rt, space, l));
    const dmuon_layout_space *sp = &rt->lay->space[space];
    size_t k = rt->acq_index[space]++;
    if (space == RT_PARAM) {
        L->poff = sp->acq_off[k];
        L->pblock = RT_BLOCK_LIVE;
        L->acq_now = true;
    } else if (space == RT_GRAD) {
        L->goff = sp->acq_off[k];
    } else if (space == RT_VIEW) {
        L->w = (float *)(work_base(rt) + sp->acq_off[k]);
    } else if (space == RT_SOURCE) {
        L->soff = sp->acq_off[k];
        L->src_live = true;
    } else if (space == RT_RECV) {
        L->roff = sp->acq_off[k];
    } else {
        assert(sp->acq_off[k] == L->lay->staging_off);   /* bound at group creation */
    }
    return DMUON_OK;
}

static dmuon_rc release(dmuon_rt *rt, int space, size_t l);

/* The F32 view of layer l's gathered block, when a bracket opens: the
 * parameter block itself (parameter dtype F32), or a range of the view
 * arena widened from it.  Under ZeRO-3 the widened block is given back at
 * once: the view holds the values for the bracket, and the layout lets the
 * next gather (a prefetch) reuse the block's range. */
static dmuon_rc view_open(dmuon_rt *rt, size_t l)
{
    rt_layer *L = &rt->layers[l];
    assert(!L->w && L->pblock == RT_BLOCK_GATHERED);
    if (rt->lay->view_alias) {
        L->w = (float *)rt_pblock(rt, L);
        return DMUON_OK;
    }
    DMUON_TRY(rt_acquire(rt, RT_VIEW, l));
    DMUON_TRY(from_pdt(rt, L->w, rt_pblock(rt, L), L->lay->own_elems));
    DMUON_TRY(from_pdt(rt, L->w + L->lay->own_elems,
                       rt_pblock(rt, L) + L->lay->own_elems * (int64_t)rt->dsize,
                       L->lay->even_elems));
    if (rt->zero == 3) {
        /* the widening has read the block before anything reuses it */
        DMUON_TRY(rt->elem->sync(rt->stream));
        DMUON_TRY(release(rt, RT_PARAM, l));
    }
    return DMUON_OK;
}

/* The bracket closes: the view goes (and, aliased under ZeRO-3, its
 * parameter block with it). */
static dmuon_rc view_close(dmuon_rt *rt, size_t l)
{
    rt_layer *L = &rt->layers[l];
    if (!L->w)
        return DMUON_OK;
    L->w = NULL;
    if (rt->lay->view_alias && rt->zero == 3 && L->pblock != RT_BLOCK_NONE)
        DMUON_TRY(release(rt, RT_PARAM, l));
    return DMUON_OK;
}

static dmuon_rc release(dmuon_rt *rt, int space, size_t l)
{
    rt_layer *L = &rt->layers[l];
    if (space == RT_PARAM) {
        if (L->inflight)
            DMUON_TRY(rt_fail_comm(rt, rt_gather_finish(rt, l)));
        if (rt->lay->view_alias && L->w)
            L->w = NULL;   /* the view was the block */
        L->pblock = RT_BLOCK_NONE;
    }
    return DMUON_OK;
}

/* Gathers layer l (acquiring its block unless a prefetch did) and opens
 * its view, unless the view is open already (a recomputed forward inside
 * the layer's backward).  A prefetch only acquires and starts the gather
 * (split phase); the use that follows waits for it and widens the block
 * into the view (ZeRO-2 keeps the block through the micro-batch but not
 * the view: it is widened again at pre_backward).  Time blocked here is
 * exposed communication. */
static dmuon_rc fetch(dmuon_rt *rt, size_t l, bool may_acquire, bool prefetch)
{
    rt_layer *L = &rt->layers[l];
    if (L->w)
        return DMUON_OK;
    if (L->pblock == RT_BLOCK_NONE) {
        if (!may_acquire)
            return DMUON_FAIL(DMUON_EINVAL, "runtime: recomputing layer '%s' before its "
                              "pre_backward", dmuon_plan_layer_name(rt->plan, l));
        DMUON_TRY(rt_acquire(rt, RT_PARAM, l));
    }
    if (L->pblock == RT_BLOCK_GATHERED)
        return prefetch ? DMUON_OK : view_open(rt, l);
    double t0 = dmuon_now_ms();
    dmuon_rc rc;
    if (prefetch) {
        rc = L->inflight ? DMUON_OK : rt_gather_start(rt, l);
        rt->stats.gather_s += (dmuon_now_ms() - t0) / 1e3;
        DMUON_TRY(rt_fail_comm(rt, in_layer(rt, rc, "gather", l)));
        if (L->inflight)
            return DMUON_OK;
    } else {
        rc = L->inflight ? rt_gather_finish(rt, l) : rt_gather(rt, l);
        double dt = (dmuon_now_ms() - t0) / 1e3;
        rt->stats.gather_s += dt;
        rt->stats.comm_wait_s += dt;
        DMUON_TRY(rt_fail_comm(rt, in_layer(rt, rc, "gather", l)));
    }
    L->pblock = RT_BLOCK_GATHERED;
    return prefetch ? DMUON_OK : view_open(rt, l);
}

dmuon_rc dmuon_rt_progress(dmuon_rt *rt)
{
    if (!rt->opened || rt->failed)
        return DMUON_OK;
    for (size_t l = 0; l < rt->nlayers; l++) {
        DMUON_TRY(in_layer(rt, rt_gather_test(rt, l), "gather", l));
        DMUON_TRY(in_layer(rt, rt_reduce_test(rt, l), "gradient reduction", l));
    }
    return DMUON_OK;
}

/* Finishes layer l's gradient reduction (started by its post_backward) and
 * gives its gradient block back.  Time blocked here is exposed
 * communication. */
static dmuon_rc reduce_finish(dmuon_rt *rt, size_t l)
{
    double t0 = dmuon_now_ms();
    dmuon_rc rc = rt_reduce_finish(rt, l);
    double dt = (dmuon_now_ms() - t0) / 1e3;
    rt->stats.reduce_s += dt;
    rt->stats.comm_wait_s += dt;
    rt->layers[l].reducing = false;
    return rt_fail_comm(rt, in_layer(rt, rc, "gradient reduction", l));
}

static bool in_fwd(const rt_layer *L) { return L->phase == RT_FWD || L->phase == RT_BWD_FWD; }
static bool in_bwd(const rt_layer *L) { return L->phase == RT_BWD || L->phase == RT_BWD_FWD; }

/* Layer L is done in this micro-batch (one not begun yet has none done). */
static bool done_now(const dmuon_rt *rt, const rt_layer *L)
{
    return rt->in_micro && L->phase == RT_DONE;
}

/* The acquisitions a use of layer l (fetch, then its view) would make,
 * checked before any is made. */
static dmuon_rc use_check(const dmuon_rt *rt, size_t l)
{
    const rt_layer *L = &rt->layers[l];
    if (L->w)
        return DMUON_OK;
    if (L->pblock == RT_BLOCK_NONE)
        DMUON_TRY(acq_check(rt, RT_PARAM, l));
    if (L->pblock != RT_BLOCK_GATHERED && !L->inflight && L->lay->bytes[RT_SOURCE] > 0)
        DMUON_TRY(acq_check(rt, RT_SOURCE, l));
    /* the view comes once the gather is waited for: its source is gone */
    if (!rt->lay->view_alias)
        DMUON_TRY(acq_check_ex(rt, RT_VIEW, l, 1u << RT_SOURCE));
    return DMUON_OK;
}

/* A prefetch of layer nx is only a hint: skipped, not an error, when the
 * plan's order has another layer next or nx's range is still held (the
 * hook that uses nx reports, or finds it free by then). */
static bool prefetch_ok(const dmuon_rt *rt, int nx)
{
    if (nx < 0)
        return false;
    const rt_layer *L = &rt->layers[nx];
    if (L->pblock != RT_BLOCK_NONE || L->w || L->phase == RT_DONE)
        return false;
    const dmuon_layout_space *sp = &rt->lay->space[RT_PARAM];
    size_t k = rt->acq_index[RT_PARAM];
    int jk;
    if (!(k < sp->nacq && sp->acq_layer[k] == nx && acq_conflict(rt, RT_PARAM, (size_t)nx, &jk) < 0))
        return false;
    if (L->lay->bytes[RT_SOURCE] == 0)
        return true;
    const dmuon_layout_space *ss = &rt->lay->space[RT_SOURCE];
    size_t ks = rt->acq_index[RT_SOURCE];
    return ks < ss->nacq && ss->acq_layer[ks] == nx &&
           acq_conflict(rt, RT_SOURCE, (size_t)nx, &jk) < 0;
}

/* The invariants between a layer's phase and its blocks, after each hook
 * (rt_layer): inside a bracket the view exists; outside, no view; ZeRO-3
 * keeps a parameter block outside a bracket only for a prefetch, and
 * inside one only as the view itself (F32); a gather in flight has a
 * block. */
static void layer_assert(const dmuon_rt *rt, const rt_layer *L)
{
    bool open = in_fwd(L) || in_bwd(L);
    assert(!open || L->w);
    assert(open || !L->w);
    assert(!L->inflight || L->pblock == RT_BLOCK_LIVE);
    assert(!L->reducing || L->phase == RT_DONE);
    assert(rt->zero != 3 || !open || rt->lay->view_alias ? true : L->pblock == RT_BLOCK_NONE);
    assert(!rt->lay->view_alias || !L->w || L->pblock == RT_BLOCK_GATHERED);
    (void)rt;
}

/* Before the first step the ranks' transfers are matched by their order
 * alone (lines A/B/C call collectives of equal sizes for layers of equal
 * sizes): a rank calling the hooks of another layer than the others would
 * exchange another layer's data silently.  So until the first step every
 * hook first compares its kind and layer across the ranks (one small
 * reduction within the deadline); a difference is DMUON_EMISMATCH on every
 * rank, naming the hooks, with nothing acquired or started
 * (dmuon_rt_discard then ends the micro-batch).  From the first step on,
 * the plan's order, which every rank has followed once, is checked
 * locally by acq_check. */
enum { RT_HOOK_PRE_FORWARD, RT_HOOK_PRE_BACKWARD, RT_HOOK_POST_BACKWARD, RT_HOOK_DISCARD,
       RT_HOOK_STEP, RT_HOOK_KINDS = 8 };

static const char *hook_call(const dmuon_rt *rt, int64_t key, char *buf, size_t cap)
{
    static const char *const name[] = {"pre_forward", "pre_backward", "post_backward",
                                       "dmuon_rt_discard", "dmuon_rt_step"};
    const int hook = (int)(key % RT_HOOK_KINDS);
    if (hook >= RT_HOOK_DISCARD)
        snprintf(buf, cap, "%s", name[hook]);
    else
        snprintf(buf, cap, "%s('%s')", name[hook],
                 dmuon_plan_layer_name(rt->plan, (size_t)(key / RT_HOOK_KINDS)));
    return buf;
}

static dmuon_rc order_check(dmuon_rt *rt, int hook, size_t l)
{
    if (rt->order_agreed)
        return DMUON_OK;
    assert(hook >= 0 && hook < RT_HOOK_KINDS);
    int64_t key = (int64_t)l * RT_HOOK_KINDS + hook, v[2] = {key, -key};
    DMUON_TRY(rt_ctl_i64(rt, v, 2, DMUON_CTL_MIN, "hook order"));
    if (v[0] == -v[1])
        return DMUON_OK;
    char a[160], b[160], me[160];
    return DMUON_FAIL(DMUON_EMISMATCH, "runtime: the ranks call different hooks at the same "
                      "point of the micro-batch (%s and %s among them; this rank: %s): every "
                      "rank must call the layer hooks, dmuon_rt_discard and dmuon_rt_step in "
                      "the same order; nothing was exchanged (dmuon_rt_discard ends this "
                      "micro-batch)",
                      hook_call(rt, v[0], a, sizeof a), hook_call(rt, -v[1], b, sizeof b),
                      hook_call(rt, key, me, sizeof me));
}

dmuon_rc dmuon_rt_pre_forward(dmuon_rt *rt, size_t l)
{
    DMUON_TRY(usable(rt, "pre_forward", l));
    rt_layer *L = &rt->layers[l];
    if (in_fwd(L))
        return DMUON_FAIL(DMUON_EINVAL, "runtime: pre_forward('%s') twice without post_forward",
                          dmuon_plan_layer_name(rt->plan, l));
    if (rt->recompute) {
        DMUON_TRY(fetch(rt, l, false, false));
        L->phase = L->phase == RT_BWD ? RT_BWD_FWD : RT_FWD;
        layer_assert(rt, L);
        return DMUON_OK;
    }
    DMUON_TRY(order_check(rt, RT_HOOK_PRE_FORWARD, l));
    if (done_now(rt, L))
        return DMUON_FAIL(DMUON_EINVAL, "runtime: pre_forward('%s') after its backward in this "
                          "micro-batch (missing post_backward of other layers?)",
                          dmuon_plan_layer_name(rt->plan, l));
    DMUON_TRY(use_check(rt, l));
    micro_begin(rt);
    DMUON_TRY(fetch(rt, l, true, false));
    L->phase = L->phase == RT_BWD ? RT_BWD_FWD : RT_FWD;
    layer_assert(rt, L);
    int nx = L->lay->next_fwd;
    if (rt->opts.prefetch && prefetch_ok(rt, nx))
        DMUON_TRY(fetch(rt, (size_t)nx, true, true));
    return DMUON_OK;
}

dmuon_rc dmuon_rt_post_forward(dmuon_rt *rt, size_t l)
{
    DMUON_TRY(usable(rt, "post_forward", l));
    rt_layer *L = &rt->layers[l];
    if (!in_fwd(L))
        return DMUON_FAIL(DMUON_EINVAL, "runtime: post_forward('%s') without pre_forward",
                          dmuon_plan_layer_name(rt->plan, l));
    L->phase = L->phase == RT_BWD_FWD ? RT_BWD : RT_IDLE;
    if (L->phase == RT_IDLE)
        DMUON_TRY(view_close(rt, l));
    layer_assert(rt, L);
    return DMUON_OK;
}

dmuon_rc dmuon_rt_pre_backward(dmuon_rt *rt, size_t l)
{
    DMUON_TRY(usable(rt, "pre_backward", l));
    rt_layer *L = &rt->layers[l];
    if (rt->recompute)
        return DMUON_FAIL(DMUON_EINVAL, "runtime: pre_backward('%s') inside a recomputation",
                          dmuon_plan_layer_name(rt->plan, l));
    DMUON_TRY(order_check(rt, RT_HOOK_PRE_BACKWARD, l));
    if (in_bwd(L) || done_now(rt, L))
        return DMUON_FAIL(DMUON_EINVAL, "runtime: pre_backward('%s') twice in one micro-batch",
                          dmuon_plan_layer_name(rt->plan, l));
    DMUON_TRY(use_check(rt, l));
    /* checked now, so that a refused call changes nothing; the layer's
     * parameter block, if a prefetch holds it, is given back once widened,
     * before this acquisition (ZeRO-3, dmuon/layout.h) */
    DMUON_TRY(acq_check_ex(rt, RT_GRAD, l,
                           1u << RT_SOURCE |
                               (rt->zero == 3 && !rt->lay->view_alias ? 1u << RT_PARAM : 0)));
    micro_begin(rt);
    DMUON_TRY(fetch(rt, l, true, false));
    int nx = L->lay->next_bwd;
    if (rt->zero == 3 && rt->opts.prefetch && prefetch_ok(rt, nx))
        DMUON_TRY(fetch(rt, (size_t)nx, true, true));
    DMUON_TRY(rt_acquire(rt, RT_GRAD, l));
    DMUON_TRY(rt->elem->zero(rt_gblock(rt, L), L->lay->bytes[RT_GRAD], rt->stream));
    L->phase = L->phase == RT_FWD ? RT_BWD_FWD : RT_BWD;
    layer_assert(rt, L);
    return DMUON_OK;
}

dmuon_rc dmuon_rt_post_backward(dmuon_rt *rt, size_t l)
{
    DMUON_TRY(usable(rt, "post_backward", l));
    rt_layer *L = &rt->layers[l];
    DMUON_TRY(order_check(rt, RT_HOOK_POST_BACKWARD, l));
    if (!in_bwd(L))
        return DMUON_FAIL(DMUON_EINVAL, "runtime: post_backward('%s') without pre_backward",
                          dmuon_plan_layer_name(rt->plan, l));
    if (L->phase == RT_BWD_FWD)
        return DMUON_FAIL(DMUON_EINVAL, "runtime: post_backward('%s') inside its recomputed "
                          "forward", dmuon_plan_layer_name(rt->plan, l));
    /* the reduction runs while the backward of the layer before goes on:
     * the next post_backward (or the end of the micro-batch) finishes it;
     * its staging and destination are the plan's, free of the reduction
     * still in flight (both checked before either is taken) */
    DMUON_TRY(acq_check(rt, RT_STAGING, l));
    if (L->lay->bytes[RT_RECV] > 0)
        DMUON_TRY(acq_check(rt, RT_RECV, l));
    DMUON_TRY(rt_acquire(rt, RT_STAGING, l));
    if (L->lay->bytes[RT_RECV] > 0)
        DMUON_TRY(rt_acquire(rt, RT_RECV, l));
    double t0 = dmuon_now_ms();
    dmuon_rc rc = rt_reduce_start(rt, l);
    rt->stats.reduce_s += (dmuon_now_ms() - t0) / 1e3;
    DMUON_TRY(rt_fail_comm(rt, in_layer(rt, rc, "gradient reduction", l)));
    L->reducing = true;
    L->phase = RT_DONE;
    DMUON_TRY(view_close(rt, l));
    layer_assert(rt, L);
    bool last = rt->bwd_count + 1 == rt->nlayers;
    for (size_t j = 0; j < rt->nlayers; j++)
        if (rt->layers[j].reducing && (j != l || last))
            DMUON_TRY(reduce_finish(rt, j));
    if (++rt->bwd_count == rt->nlayers) {
        rt->in_micro = false;
        rt->micro++;
    }
    return DMUON_OK;
}

dmuon_rc dmuon_rt_recompute_begin(dmuon_rt *rt)
{
    if (rt->recompute)
        return DMUON_FAIL(DMUON_EINVAL, "runtime: recompute_begin twice");
    rt->recompute = true;
    return DMUON_OK;
}

dmuon_rc dmuon_rt_recompute_end(dmuon_rt *rt)
{
    if (!rt->recompute)
        return DMUON_FAIL(DMUON_EINVAL, "runtime: recompute_end without recompute_begin");
    for (size_t l = 0; l < rt->nlayers; l++)
        if (rt->layers[l].phase == RT_FWD)
            return DMUON_FAIL(DMUON_EINVAL, "runtime: recompute_end inside the recomputed "
                              "forward of '%s'", dmuon_plan_layer_name(rt->plan, l));
    rt->recompute = false;
    return DMUON_OK;
}

dmuon_rc dmuon_rt_discard(dmuon_rt *rt)
{
    if (!rt->opened)
        return DMUON_FAIL(DMUON_EINVAL, "runtime: discard before open");
    if (rt->failed)
        return DMUON_FAIL(DMUON_ECOMM, "runtime: discard after a communication failure");
    /* before the first step a discard on some ranks only would meet
     * another collective on the others: compared like a hook */
    DMUON_TRY(order_check(rt, RT_HOOK_DISCARD, 0));
    dmuon_rc rc = rt->elem->sync(rt->opts.stream);
    bool backward = false;
    if (rt->in_micro && rc == DMUON_OK) {
        /* what is in flight (a prefetch, a reduction) ends first: the
         * other ranks started the same calls */
        rc = rt_drain(rt);
        for (size_t l = 0; l < rt->nlayers && rc == DMUON_OK; l++) {
            rt_layer *L = &rt->layers[l];
            backward = backward || L->phase == RT_BWD || L->phase == RT_BWD_FWD ||
                       L->phase == RT_DONE;
            L->reducing = false;
            L->phase = RT_IDLE;
            rc = view_close(rt, l);
            /* ZeRO-2 keeps the blocks of the step's earlier micro-batches
             * (their acquisitions were made then); this one's go */
            if (rc == DMUON_OK && L->pblock != RT_BLOCK_NONE && (rt->zero == 3 || L->acq_now))
                rc = release(rt, RT_PARAM, l);
            L->acq_now = false;
        }
        rt->in_micro = false;
        rt->bwd_count = 0;
        rt->recompute = false;
        /* a backward begun has added gradients of this micro-batch to the
         * accumulation: what was accumulated since the last step goes */
        if (rc == DMUON_OK && backward) {
            rc = rt_grads_clear(rt);
            rt->micro = 0;
        }
    }
    return rt_agree(rt, rc);
}

const float *dmuon_rt_weights(dmuon_rt *rt, int p)
{
    if (!rt->opened || p < 0 || (size_t)p >= rt->nparams)
        return NULL;
    const rt_layer *L = &rt->layers[rt->params[p].layer];
    return L->w ? L->w + rt->params[p].off : NULL;
}

float *dmuon_rt_grad(dmuon_rt *rt, int p)
{
    if (!rt->opened || p < 0 || (size_t)p >= rt->nparams)
        return NULL;
    const rt_layer *L = &rt->layers[rt->params[p].layer];
    return in_bwd(L) ? rt_gblock(rt, L) + rt->params[p].off : NULL;
}

/* The local preconditions of a step: every micro-batch ended, at least
 * one since the last step. */
static dmuon_rc step_ready(const dmuon_rt *rt)
{
    if (rt->in_micro) {
        size_t l = 0;
        while (l + 1 < rt->nlayers && rt->layers[l].phase == RT_DONE)
            l++;
        return DMUON_FAIL(DMUON_EINVAL, "runtime: step with a micro-batch not ended: layer '%s' "
                          "has had no post_backward", dmuon_plan_layer_name(rt->plan, l));
    }
    if (rt->micro == 0)
        return DMUON_FAIL(DMUON_EINVAL, "runtime: step with no micro-batch since the last step");
    return DMUON_OK;
}

dmuon_rc dmuon_rt_step(dmuon_rt *rt, const dmuon_rt_lrs *lrs)
{
    if (!rt->opened)
        return DMUON_FAIL(DMUON_EINVAL, "runtime: step before open");
    if (rt->failed)
        return DMUON_FAIL(DMUON_ECOMM, "runtime: step after a communication failure");
    if (!rt->order_agreed) {
        /* before the first step: compared like a hook, and a step refused
         * on one rank is refused on every rank (the others would wait in
         * the step's first collective) */
        DMUON_TRY(order_check(rt, RT_HOOK_STEP, 0));
        DMUON_TRY(rt_agree(rt, step_ready(rt)));
        rt->order_agreed = true;
    } else {
        DMUON_TRY(step_ready(rt));
    }
    DMUON_TRY(rt->elem->sync(rt->opts.stream));
    /* every parameter block is given back before the step (ZeRO-2 keeps
     * them through the micro-batches): the step's memory is the working
     * space's, where nothing else is live now */
    for (size_t l = 0; l < rt->nlayers; l++) {
        if (rt->layers[l].pblock != RT_BLOCK_NONE)
            DMUON_TRY(release(rt, RT_PARAM, l));
        assert(!rt->layers[l].w && !rt->layers[l].reducing &&
               rt->layers[l].pblock == RT_BLOCK_NONE);
    }
    /* the micro-batches are spent whatever the outcome: a failed step
     * dropped their gradients, so a retry needs a new micro-batch */
    rt->micro = 0;
    dmuon_rc rc = rt_step(rt, lrs);
    /* nothing in the working space outlives the step: on host memory its
     * pages go back to the system, and the next micro-batch takes only
     * those its live blocks touch (the layout's size is the most it can
     * take; device memory keeps its allocation).  Not after a
     * communication failure: a peer may still be writing into it. */
    if (!rt->failed)
        (void)dmuon_symm_release(rt->symm, rt->space_off[DMUON_SPACE_WORK],
                                 rt->space_bytes[DMUON_SPACE_WORK], NULL);
    return rc;
}

int64_t dmuon_rt_steps(const dmuon_rt *rt) { return rt->steps; }

uint64_t dmuon_rt_state_digest(const dmuon_rt *rt)
{
    uint64_t d = dmuon_digest(&rt->steps, sizeof rt->steps, DMUON_DIGEST_SEED);
    if (!rt->opened)
        return d;
    const float *st[] = {rt->own_w, rt->own_m, rt->even_w, rt->even_m, rt->even_v};
    const int64_t n[] = {rt->lay->win_elems, rt->lay->win_elems, rt->lay->even_total, rt->lay->even_total,
                         rt->lay->even_total};
    for (int i = 0; i < 5; i++)
        d = rt_digest_mem(rt, st[i], n[i] * (int64_t)sizeof(float), d);
    /* what the next gathers read: the owner window (persistent parts; with
     * per-layer parts each gather narrows the masters), the even shards,
     * the publish copy */
    if (!rt->hsdp && !rt->per_layer)
        d = rt_digest_mem(rt, rt->base + rt->pwin_off, rt->lay->win_elems * (int64_t)rt->dsize,
                          d);
    d = rt_digest_mem(rt, rt->base + rt->ewin_off, rt->lay->even_total * (int64_t)rt->dsize, d);
    return rt_digest_mem(rt, rt->base + rt->copy_off, rt->lay->copy_bytes, d);
}
double dmuon_rt_grad_norm(const dmuon_rt *rt) { return rt->grad_norm; }

void dmuon_rt_get_stats(const dmuon_rt *rt, dmuon_rt_stats *out)
{
    const dmuon_layout_memory *m = &rt->lay->mem;
    *out = rt->stats;
    out->pool_bytes = m->pool_bytes;
    out->ctrl_bytes = m->ctrl_bytes;
    out->work_bytes = m->work_bytes;
    out->window_bytes = m->window_space_bytes;
    out->state_bytes = m->state_bytes;
    out->total_bytes = m->total_bytes;
}

void dmuon_rt_reset_stats(dmuon_rt *rt)
{
    rt->stats.comm_wait_s = rt->stats.publish_wait_s = 0;
    rt->stats.gather_s = rt->stats.reduce_s = 0;
}

void dmuon_rt_free(dmuon_rt *rt)
{
    if (!rt)
        return;
    /* after a communication failure a posted call may still complete into
     * the pool, the scratch, the state or a group's buffers whenever the
     * late peers arrive, and freeing the pool is itself collective: those
     * are kept for good, with the communicators; calls still in flight (a
     * runtime freed inside a micro-batch) are waited for first */
    if (rt->opened && !rt->failed)
        (void)rt_drain(rt);
    /* every rank reached free within the deadline before the blocking
     * collective pool free; a rank missing at the deadline marks the
     * runtime failed and the pool is kept, as above */
    if (rt->opened && !rt->failed)
        (void)rt_agree(rt, DMUON_OK);
    bool keep = rt->failed;
    if (!keep) {
        rt_pool_drop(rt);
        dmuon_publish_free(rt->pub);
        if (rt->elem)
            rt->elem->free(rt->state);
        free(rt->state_host);
        if (rt->topo_ok)
            dmuon_topo_release(&rt->topo);
        /* a failed runtime keeps its publish, which reads the layout's
         * table: the layout is kept with it */
        dmuon_layout_free(rt->lay);
    }
    for (size_t i = 0; i < rt->nunknown; i++)
        free(rt->unknown[i]);
    free(rt->unknown);
    free(rt->params);
    free(rt->layers);
    dmuon_ns_free(rt->ns);
    free(rt);
}
