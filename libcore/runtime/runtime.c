/*
 * runtime.c — the training runtime (dmuon/runtime.h): creation from a plan,
 * parameter registration, the pool's layout, and the layer hooks.
 *
 * Layout decisions, made once at open and identical on every rank:
 *   - lines C/D: a layer's Muon parameters form its owned region, laid out
 *     as the plan's layer buffer; every other parameter is in its even
 *     region.  Lines A/B: every parameter is in the even region.
 *   - the even region of a layer is its even parameters concatenated in
 *     forward order, padded to a multiple of the shard group's size S (N for
 *     FSDP, K for HSDP); rank i of the group holds shard i.
 *   - parameter and gradient blocks: during the first micro-batch every
 *     layer has its own range; the acquire/release sequence of that
 *     micro-batch is recorded, and at the first step the spaces are packed
 *     from it (dmuon_pool_pack) and the pool is laid out again.  Later
 *     micro-batches must acquire in the recorded order, and every
 *     acquisition is checked against the blocks still live in its space: a
 *     different order, or a release later than recorded that leaves the
 *     recorded range in use, is an error naming the layers, never silent
 *     overlap (an earlier release is harmless).
 * Hooks check their order locally before any data moves, so a wrong
 * call fails on the rank that made it with DMUON_EINVAL; the other ranks
 * then fail at their next collective's deadline.  Before packing the
 * ranks' hooks are also compared (order_check), since nothing recorded
 * exists yet to check them against.
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

const char *dmuon_line_name(dmuon_line l)
{
    static const char *n[] = {"D", "C", "B", "A"};
    return (unsigned)l < 4 ? n[l] : "?";
}

dmuon_rc dmuon_line_parse(const char *s, dmuon_line *out)
{
    static const char *n[] = {"D", "C", "B", "A"};
    for (int i = 0; i < 4; i++)
        if (s && (s[0] == n[i][0] || s[0] == n[i][0] + 32) && s[1] == 0) {
            *out = (dmuon_line)i;
            return DMUON_OK;
        }
    return DMUON_FAIL(DMUON_EINVAL, "line '%s': expected A, B, C or D", s ? s : "");
}

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

#define RT_OPTS_KEYS 14

static dmuon_rc agree_opts(dmuon_rt *rt)
{
    static const char *const name[RT_OPTS_KEYS] = {
        "line", "zero_stage", "prefetch", "deadline_ms", "optim.momentum", "optim.nesterov",
        "optim.muon_weight_decay", "optim.scale", "optim.beta1", "optim.beta2", "optim.eps",
        "optim.adamw_weight_decay", "optim.clip_norm", "optim.ns_variant"};
    const dmuon_rt_opts *o = &rt->opts;
    int64_t k[RT_OPTS_KEYS] = {
        o->line, rt->zero, o->prefetch != 0, o->deadline_ms, opts_bits(o->optim.momentum),
        o->optim.nesterov, opts_bits(o->optim.muon_weight_decay), o->optim.scale,
        opts_bits(o->optim.beta1), opts_bits(o->optim.beta2), opts_bits(o->optim.eps),
        opts_bits(o->optim.adamw_weight_decay), opts_bits(o->optim.clip_norm),
        (int64_t)opts_hash(o->optim.ns_variant, sizeof o->optim.ns_variant)};
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
        bool dbl = i >= 4 && i != 5 && i != 7 && i != 13;
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
    rt->owners = rt->opts.line == DMUON_LINE_C || rt->opts.line == DMUON_LINE_D;
    rt->pdt = dmuon_plan_param_dtype(plan);
    rt->dsize = dmuon_dtype_size(rt->pdt);
    if (rt->pdt != DMUON_BF16 && rt->pdt != DMUON_F32) {
        rc = DMUON_FAIL(DMUON_EUNSUPPORTED, "runtime: parameter dtype %s: expected bf16 or f32",
                        dmuon_dtype_name(rt->pdt));
        goto fail;
    }
    rt->shard_comm = rt->hsdp ? rt->topo.node : rt->topo.world;
    /* the node holds consecutive ranks ordered by local index (dmuon/topo.h) */
    rt->shard_rank = rt->hsdp ? rt->topo.local : rt->topo.rank;
    rt->shard_size = rt->hsdp ? rt->topo.per_node : rt->topo.size;

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
        p->role = rt->opts.line == DMUON_LINE_A ? DMUON_ROLE_ADAMW : pp[i].role;
        p->owned = rt->owners && pp[i].role == DMUON_ROLE_MUON;
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
    free(p->init);
    p->init = NULL;
    p->registered = true;
    if (numel != p->numel)
        return DMUON_OK;   /* open names it */
    p->init = malloc((size_t)numel * sizeof(float));
    if (!p->init)
        return DMUON_FAIL(DMUON_ENOMEM, "runtime: register '%s': out of memory", name);
    memcpy(p->init, init, (size_t)numel * sizeof(float));
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

/* Owned pieces in layer order, then segment, then window position: the
 * order in which the step updates and publishes them. */
static int piece_order(const void *a, const void *b)
{
    const rt_piece *x = a, *y = b;
    if (x->layer != y->layer)
        return x->layer < y->layer ? -1 : 1;
    if (x->seg != y->seg)
        return x->seg < y->seg ? -1 : 1;
    return x->pos < y->pos ? -1 : x->pos > y->pos;
}

/* Layers' regions, parameter offsets, the pieces this rank holds, the HSDP
 * copy layout.  Pure given the plan and the options. */
static dmuon_rc lay_out(dmuon_rt *rt)
{
    const dmuon_plan *plan = rt->plan;
    const int S = rt->shard_size;
    size_t nu = 0, nm = 0;
    const dmuon_plan_unit *units = dmuon_plan_units(plan, &nu);
    const dmuon_plan_member *mem = dmuon_plan_members(plan, &nm);
    int64_t even_pos = 0;
    for (size_t l = 0; l < rt->nlayers; l++) {
        rt_layer *L = &rt->layers[l];
        L->params = malloc((rt->nparams ? rt->nparams : 1) * sizeof *L->params);
        if (!L->params)
            return DMUON_FAIL(DMUON_ENOMEM, "runtime: out of memory");
        if (rt->owners) {
            L->segs = dmuon_plan_layer_segments(plan, l, &L->nseg);
            L->own_elems = dmuon_plan_layer_bytes(plan, l) / (int64_t)rt->dsize;
        }
        int64_t even = 0;
        for (size_t i = 0; i < rt->nparams; i++) {
            rt_param *p = &rt->params[i];
            if ((size_t)p->layer != l)
                continue;
            L->params[L->np++] = (int)i;
            if (!p->owned) {
                p->off = L->own_elems + even;
                even += p->numel;
            }
        }
        L->even_elems = even;
        L->even_pad = (even + S - 1) / S * S;
        L->shard = L->even_pad / S;
        L->even_pos = even_pos;
        even_pos += L->shard;
        L->pbytes = L->own_elems * (int64_t)rt->dsize + L->even_pad * (int64_t)rt->dsize;
        L->gbytes = (L->own_elems + L->even_pad) * 4;
        if (L->nseg) {
            L->gsegs = malloc(L->nseg * sizeof *L->gsegs);
            if (!L->gsegs)
                return DMUON_FAIL(DMUON_ENOMEM, "runtime: out of memory");
            for (size_t s = 0; s < L->nseg; s++) {
                L->gsegs[s] = L->segs[s];
                L->gsegs[s].dtype = DMUON_F32;
                L->gsegs[s].offset = L->segs[s].offset / (int64_t)rt->dsize * 4;
                L->gsegs[s].window_offset = L->segs[s].window_offset / (int64_t)rt->dsize * 4;
            }
        }
    }
    rt->even_total = even_pos;
    /* owned parameters' offsets from the members */
    if (rt->owners)
        for (size_t k = 0; k < nm; k++) {
            rt_param *p = &rt->params[mem[k].param];
            p->off = mem[k].layer_offset / (int64_t)rt->dsize - mem[k].first_matrix * p->m * p->n;
        }
    /* windows */
    if (rt->owners) {
        rt->win_elems = dmuon_plan_window_bytes(plan, rt->topo.rank) / (int64_t)rt->dsize;
        for (int r = 0; r < rt->topo.size; r++) {
            int64_t w = dmuon_plan_window_bytes(plan, r) / (int64_t)rt->dsize;
            if (w > rt->max_win_elems)
                rt->max_win_elems = w;
        }
    }
    /* pieces: owned members, then even shards */
    size_t cap = nm + rt->nparams + rt->nlayers + 1;
    rt->pieces = calloc(cap, sizeof *rt->pieces);
    if (!rt->pieces)
        return DMUON_FAIL(DMUON_ENOMEM, "runtime: out of memory");
    if (rt->owners)
        for (size_t u = 0; u < nu; u++) {
            if (units[u].owner != rt->topo.rank)
                continue;
            for (size_t k = units[u].first_member; k < units[u].first_member + units[u].n_members;
                 k++) {
                const rt_param *p = &rt->params[mem[k].param];
                const rt_layer *L = &rt->layers[p->layer];
                int64_t mn = p->m * p->n;
                size_t s = 0;
                while (s + 1 < L->nseg && L->segs[s + 1].offset <= mem[k].layer_offset)
                    s++;
                rt_piece *pc = &rt->pieces[rt->npieces++];
                pc->param = mem[k].param;
                pc->lo = mem[k].first_matrix * mn;
                pc->hi = pc->lo + mem[k].n_matrices * mn;
                pc->owned = true;
                pc->pos = (L->segs[s].window_offset + mem[k].layer_offset - L->segs[s].offset) /
                          (int64_t)rt->dsize;
                pc->layer = p->layer;
                pc->seg = (int32_t)s;
                if (L->segs[s].owner != rt->topo.rank || pc->pos < 0 ||
                    pc->pos + (pc->hi - pc->lo) > rt->win_elems)
                    return DMUON_FAIL(DMUON_ECHECK, "runtime: unit '%s' of rank %d does not sit "
                                      "in its owner's window", units[u].name, rt->topo.rank);
                if (p->layout != DMUON_MAT_CONTIGUOUS &&
                    (mem[k].first_matrix % 2 || mem[k].n_matrices % 2))
                    return DMUON_FAIL(DMUON_ECHECK, "runtime: unit '%s' splits the gate/up pair "
                                      "of '%s' (layout %s)", units[u].name, p->name,
                                      dmuon_mat_layout_name(p->layout));
            }
        }
    qsort(rt->pieces, rt->npieces, sizeof *rt->pieces, piece_order);
    for (size_t l = 0; l < rt->nlayers; l++) {
        const rt_layer *L = &rt->layers[l];
        int64_t s0 = L->own_elems + (int64_t)rt->shard_rank * L->shard, s1 = s0 + L->shard;
        for (int j = 0; j < L->np; j++) {
            const rt_param *p = &rt->params[L->params[j]];
            if (p->owned)
                continue;
            int64_t a = p->off > s0 ? p->off : s0, b = p->off + p->numel < s1 ? p->off + p->numel : s1;
            if (a >= b)
                continue;
            if (rt->npieces == cap) {
                rt_piece *np = realloc(rt->pieces, (cap *= 2) * sizeof *np);
                if (!np)
                    return DMUON_FAIL(DMUON_ENOMEM, "runtime: out of memory");
                rt->pieces = np;
            }
            rt_piece *pc = &rt->pieces[rt->npieces++];
            memset(pc, 0, sizeof *pc);
            pc->param = L->params[j];
            pc->lo = a - p->off;
            pc->hi = b - p->off;
            pc->pos = L->even_pos + (a - s0);
            pc->layer = (int32_t)l;
            pc->seg = -1;
        }
    }
    /* HSDP: the publish copy layout of libcore (each rail's segments back to
     * back, in layer order) over every layer's table */
    if (rt->hsdp && rt->owners) {
        int npub = 0;
        for (size_t l = 0; l < rt->nlayers; l++)
            npub += (int)rt->layers[l].nseg;
        rt->pub_table = calloc((size_t)(npub ? npub : 1), sizeof *rt->pub_table);
        if (!rt->pub_table)
            return DMUON_FAIL(DMUON_ENOMEM, "runtime: out of memory");
        for (size_t l = 0; l < rt->nlayers; l++) {
            rt_layer *L = &rt->layers[l];
            if (!L->nseg)
                continue;
            L->seg_copy = calloc(L->nseg, sizeof *L->seg_copy);
            L->seg_pub = calloc(L->nseg, sizeof *L->seg_pub);
            if (!L->seg_copy || !L->seg_pub)
                return DMUON_FAIL(DMUON_ENOMEM, "runtime: out of memory");
            for (size_t s = 0; s < L->nseg; s++) {
                L->seg_pub[s] = rt->npub;
                rt->pub_table[rt->npub++] = L->segs[s];
            }
        }
        DMUON_TRY(dmuon_publish_layout(rt->topo.per_node, rt->pub_table, rt->npub, rt->pub_table,
                                       &rt->copy_bytes));
        for (size_t l = 0; l < rt->nlayers; l++)
            for (size_t s = 0; s < rt->layers[l].nseg; s++)
                rt->layers[l].seg_copy[s] = rt->pub_table[rt->layers[l].seg_pub[s]].offset;
    }
    return DMUON_OK;
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
 * read them: the owner window (FSDP), the rail's publish copy (HSDP owned
 * pieces), or the even shard window. */
dmuon_rc rt_store_param(dmuon_rt *rt, const rt_piece *pc, unsigned char *base)
{
    int64_t n = pc->hi - pc->lo;
    if (!pc->owned)
        return to_pdt(rt, base + rt->ewin_off + pc->pos * (int64_t)rt->dsize, rt->even_w + pc->pos,
                      n);
    if (!rt->hsdp)
        return to_pdt(rt, base + rt->pwin_off + pc->pos * (int64_t)rt->dsize, rt->own_w + pc->pos,
                      n);
    const rt_layer *L = &rt->layers[pc->layer];
    const dmuon_segment *s = &L->segs[pc->seg];
    int64_t in_seg = pc->pos * (int64_t)rt->dsize - s->window_offset;
    return to_pdt(rt, base + rt->copy_off + L->seg_copy[pc->seg] + in_seg, rt->own_w + pc->pos, n);
}

dmuon_rc rt_write_windows(dmuon_rt *rt)
{
    for (size_t i = 0; i < rt->npieces; i++)
        DMUON_TRY(rt_store_param(rt, &rt->pieces[i], rt->base));
    return DMUON_OK;
}

unsigned char *rt_pblock(const dmuon_rt *rt, const rt_layer *L)
{
    return rt->base + rt->space_off[DMUON_SPACE_PARAM] + L->poff;
}

float *rt_gblock(const dmuon_rt *rt, const rt_layer *L)
{
    return (float *)(rt->base + rt->space_off[DMUON_SPACE_GRAD] + L->goff);
}

/* Rank 0's offset table against every rank's: the first differing entry is
 * named on every rank. */
static dmuon_rc pool_agree(dmuon_rt *rt)
{
    int64_t mine[DMUON_SPACE_COUNT * 2 + 6], ref[DMUON_SPACE_COUNT * 2 + 6];
    static const char *extra[] = {"owner window", "gradient window", "even shards",
                                  "even gradient shards", "publish copy", "pool size"};
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

dmuon_rc rt_pool_build(dmuon_rt *rt)
{
    DMUON_TRY(rt_groups_size(rt));
    int ngroups = 0;
    for (size_t l = 0; l < rt->nlayers; l++)
        ngroups += rt_layer_groups(rt, l);
    dmuon_pool_sizes sz = {.ctrl = rt->ctrl_per_group * ngroups};
    if (rt->packed) {
        sz.param = rt->rec[RT_PARAM].total;
        sz.grad = rt->rec[RT_GRAD].total;
    } else {
        for (size_t l = 0; l < rt->nlayers; l++) {
            sz.param += dmuon_pool_align(rt->layers[l].pbytes);
            sz.grad += dmuon_pool_align(rt->layers[l].gbytes);
        }
    }
    sz.win[DMUON_WIN_PARAM] = rt->max_win_elems * (int64_t)rt->dsize;
    sz.win[DMUON_WIN_GRAD] = rt->max_win_elems * 4;
    sz.win[DMUON_WIN_EVEN] = rt->even_total * (int64_t)rt->dsize;
    sz.win[DMUON_WIN_EVEN_GRAD] = rt->even_total * 4;
    sz.win[DMUON_WIN_COPY] = rt->copy_bytes;
    sz.win[DMUON_WIN_DIR] = rt_dir_bytes(rt);
    dmuon_pool_map map;
    dmuon_pool_lay_out(&sz, &map);
    for (int s = 0; s < DMUON_SPACE_COUNT; s++) {
        rt->space_off[s] = map.space_off[s];
        rt->space_bytes[s] = map.space_bytes[s];
    }
    rt->pwin_off = map.win_off[DMUON_WIN_PARAM];
    rt->gwin_off = map.win_off[DMUON_WIN_GRAD];
    rt->ewin_off = map.win_off[DMUON_WIN_EVEN];
    rt->egwin_off = map.win_off[DMUON_WIN_EVEN_GRAD];
    rt->copy_off = map.win_off[DMUON_WIN_COPY];
    rt->dir_off = map.win_off[DMUON_WIN_DIR];
    int64_t off = map.total;
    const int64_t *b = map.space_bytes;
    DMUON_TRY(rt_fail_comm(rt, dmuon_symm_alloc(&rt->topo, off, rt->opts.deadline_ms, &rt->symm)));
    rt->base = rt->elem->adopt(dmuon_symm_base(rt->symm));
    DMUON_TRY(pool_agree(rt));
    /* no-reuse layout: each layer at its own range */
    if (!rt->packed) {
        int64_t po = 0, go = 0;
        for (size_t l = 0; l < rt->nlayers; l++) {
            rt->layers[l].poff = po;
            rt->layers[l].goff = go;
            po += dmuon_pool_align(rt->layers[l].pbytes);
            go += dmuon_pool_align(rt->layers[l].gbytes);
        }
    }
    rt->stats.pool_bytes = off;
    rt->stats.param_space_bytes = b[DMUON_SPACE_PARAM];
    rt->stats.grad_space_bytes = b[DMUON_SPACE_GRAD];
    rt->stats.window_bytes = b[DMUON_SPACE_WINDOW];
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
    dmuon_rc rc = DMUON_OK;
    if (rt->opened)
        return DMUON_FAIL(DMUON_EINVAL, "runtime: open called twice");
    rc = rt_agree(rt, check_registrations(rt));
    if (rc != DMUON_OK)
        return rc;
    rc = lay_out(rt);
    if (rc == DMUON_OK) {
        /* optimizer state, gradients and directions: one allocation */
        int64_t we = rt->win_elems, ee = rt->even_total;
        int64_t eo = rt->opts.line == DMUON_LINE_B ? ee : 0;
        void *st = NULL;
        rc = rt->elem->alloc((4 * we + 4 * ee + eo + 1) * (int64_t)sizeof *rt->state, &st);
        rt->state = st;
        if (rc == DMUON_OK) {
            float *f = rt->state;
            rt->own_w = f, f += we;
            rt->own_m = f, f += we;
            rt->own_g = f, f += we;
            rt->own_o = f, f += we;
            rt->even_w = f, f += ee;
            rt->even_m = f, f += ee;
            rt->even_v = f, f += ee;
            rt->even_g = f, f += ee;
            rt->even_o = f;
            rt->state_elems = 4 * we + 4 * ee + eo;
            rc = rt_step_prepare(rt);
        }
    }
    DMUON_TRY(rt_agree(rt, rc));
    for (size_t i = 0; i < rt->npieces && rc == DMUON_OK; i++) {
        const rt_piece *pc = &rt->pieces[i];
        float *dst = pc->owned ? rt->own_w : rt->even_w;
        rc = rt->elem->copy(dst + pc->pos, rt->params[pc->param].init + pc->lo,
                            (pc->hi - pc->lo) * (int64_t)sizeof(float), RT_H2D, rt->stream);
    }
    DMUON_TRY(rt_agree(rt, rc));
    for (size_t i = 0; i < rt->nparams; i++) {
        free(rt->params[i].init);
        rt->params[i].init = NULL;
    }
    rc = rt_pool_build(rt);
    DMUON_TRY(rt_agree(rt, rc));
    rt->opened = true;
    rt->recording = true;
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
    for (int k = 0; k < RT_SPACES; k++) {
        rt->acq_index[k] = 0;
        rt->rec_mark[k] = rt->rec[k].nev;
    }
    for (size_t l = 0; l < rt->nlayers; l++) {
        if (rt->layers[l].phase == RT_DONE)
            rt->layers[l].phase = RT_IDLE;
        rt->layers[l].acq_now = false;
    }
}

static dmuon_rc record(dmuon_rt *rt, int space, size_t l, int acquire)
{
    rt_space_rec *r = &rt->rec[space];
    if (r->nev == r->cap) {
        size_t cap = r->cap ? 2 * r->cap : 64;
        dmuon_pool_event *e = realloc(r->ev, cap * sizeof *e);
        if (!e)
            return DMUON_FAIL(DMUON_ENOMEM, "runtime: out of memory");
        r->ev = e;
        r->cap = cap;
    }
    r->ev[r->nev++] = (dmuon_pool_event){(int32_t)l, acquire};
    return DMUON_OK;
}

/* Bytes of layer l's block in `space` (as packed by repack). */
static int64_t block_bytes(const dmuon_rt *rt, int space, size_t l)
{
    const rt_layer *L = &rt->layers[l];
    return space == RT_PARAM ? L->pbytes : space == RT_GRAD ? L->gbytes
                                                            : (L->own_elems + L->even_elems) * 4;
}

/* Whether layer l holds a block in `space` now, and where (packed spaces
 * only): the parameter block from acquisition to release, the gradient
 * block inside the backward bracket and while its reduction runs, the view
 * while it is open. */
static bool block_live(const dmuon_rt *rt, int space, size_t l, int64_t *off)
{
    const rt_layer *L = &rt->layers[l];
    if (space == RT_PARAM) {
        *off = L->poff;
        return L->pblock != RT_BLOCK_NONE;
    }
    if (space == RT_GRAD) {
        *off = L->goff;
        return L->phase == RT_BWD || L->phase == RT_BWD_FWD || L->reducing;
    }
    *off = L->w ? (int64_t)((const unsigned char *)L->w - (const unsigned char *)rt->views) : 0;
    return L->w != NULL;
}

/* The layer whose live block in `space` overlaps the range that the next
 * acquisition (recorded as layer l's) would hand out, or -1.  The packing
 * keeps the recorded micro-batch's live ranges apart; a micro-batch that
 * releases in another order (a block held past the release the recording
 * saw) would otherwise get a range still in use. */
static long acq_conflict(const dmuon_rt *rt, int space, size_t l)
{
    const rt_space_rec *r = &rt->rec[space];
    size_t k = rt->in_micro ? rt->acq_index[space] : 0;
    int64_t lo = r->offsets[k], hi = lo + block_bytes(rt, space, l);
    for (size_t j = 0; j < rt->nlayers; j++) {
        int64_t o = 0;
        if (j != l && block_live(rt, space, j, &o) && o < hi && lo < o + block_bytes(rt, space, j))
            return (long)j;
    }
    return -1;
}

/* Whether the next acquisition in `space` (the first of a micro-batch not
 * begun yet) may be layer l's, as recorded, and whether its recorded range
 * is free: DMUON_EINVAL naming the layers when not.  Changes nothing, so a
 * hook checks its acquisitions before it makes any and a refused call has
 * no effect. */
static dmuon_rc acq_check(const dmuon_rt *rt, int space, size_t l)
{
    if (!rt->packed)
        return DMUON_OK;
    const rt_space_rec *r = &rt->rec[space];
    size_t k = rt->in_micro ? rt->acq_index[space] : 0;
    static const char *const what[RT_SPACES] = {"parameter", "gradient", "weight view"};
    if (k >= r->nacq || (size_t)r->acq_block[k] != l)
        return DMUON_FAIL(DMUON_EINVAL, "runtime: %s acquisition %zu of this micro-batch is "
                          "layer '%s'; the recorded micro-batch acquired %s%s%s there (the "
                          "hooks must repeat one order every micro-batch)",
                          what[space], k, dmuon_plan_layer_name(rt->plan, l),
                          k < r->nacq ? "layer '" : "nothing",
                          k < r->nacq ? dmuon_plan_layer_name(rt->plan, (size_t)r->acq_block[k]) : "",
                          k < r->nacq ? "'" : "");
    long j = acq_conflict(rt, space, l);
    if (j >= 0)
        return DMUON_FAIL(DMUON_EINVAL, "runtime: %s acquisition %zu of this micro-batch (layer "
                          "'%s') would take memory that layer '%s' still holds: the recorded "
                          "micro-batch had released '%s' by then (the hooks must release in the "
                          "recorded order too: end '%s' first)",
                          what[space], k, dmuon_plan_layer_name(rt->plan, l),
                          dmuon_plan_layer_name(rt->plan, (size_t)j),
                          dmuon_plan_layer_name(rt->plan, (size_t)j),
                          dmuon_plan_layer_name(rt->plan, (size_t)j));
    return DMUON_OK;
}

/* Gives layer l's block in `space` its offset: its own range before
 * packing, the recorded acquisition's after. */
static dmuon_rc acquire(dmuon_rt *rt, int space, size_t l)
{
    rt_layer *L = &rt->layers[l];
    if (rt->packed) {
        rt_space_rec *r = &rt->rec[space];
        DMUON_TRY(acq_check(rt, space, l));
        size_t k = rt->acq_index[space]++;
        if (space == RT_PARAM)
            L->poff = r->offsets[k];
        else if (space == RT_GRAD)
            L->goff = r->offsets[k];
        else
            L->w = (float *)((unsigned char *)rt->views + r->offsets[k]);
    } else if (rt->recording) {
        DMUON_TRY(record(rt, space, l, 1));
    }
    if (space == RT_PARAM) {
        L->pblock = RT_BLOCK_LIVE;
        L->acq_now = true;
    } else if (space == RT_VIEW && !rt->packed)
        L->w = L->w_own;
    return DMUON_OK;
}

/* The F32 view of layer l's gathered block: acquired (no allocation once
 * packed: a range of the view arena; before, the layer's own buffer,
 * allocated once) and filled from the parameter space. */
static dmuon_rc view_open(dmuon_rt *rt, size_t l)
{
    rt_layer *L = &rt->layers[l];
    if (L->w)
        return DMUON_OK;
    int64_t n = L->own_elems + L->even_elems;
    if (!rt->packed && !L->w_own) {
        void *w = NULL;
        if (rt->elem->alloc(n * (int64_t)sizeof(float), &w) != DMUON_OK)
            return DMUON_FAIL(DMUON_ENOMEM, "runtime: out of memory for layer '%s' weights",
                              dmuon_plan_layer_name(rt->plan, l));
        L->w_own = w;
    }
    DMUON_TRY(acquire(rt, RT_VIEW, l));
    DMUON_TRY(from_pdt(rt, L->w, rt_pblock(rt, L), L->own_elems));
    return from_pdt(rt, L->w + L->own_elems, rt_pblock(rt, L) + L->own_elems * (int64_t)rt->dsize,
                    L->even_elems);
}

static dmuon_rc view_close(dmuon_rt *rt, size_t l)
{
    rt_layer *L = &rt->layers[l];
    if (!L->w)
        return DMUON_OK;
    L->w = NULL;
    if (!rt->packed && rt->recording)
        DMUON_TRY(record(rt, RT_VIEW, l, 0));
    return DMUON_OK;
}

static dmuon_rc release(dmuon_rt *rt, int space, size_t l)
{
    rt_layer *L = &rt->layers[l];
    if (space == RT_PARAM) {
        if (L->inflight)
            DMUON_TRY(rt_fail_comm(rt, rt_gather_finish(rt, l)));
        DMUON_TRY(view_close(rt, l));
        L->pblock = RT_BLOCK_NONE;
    }
    if (!rt->packed && rt->recording)
        DMUON_TRY(record(rt, space, l, 0));
    return DMUON_OK;
}

/* Acquires layer l's parameter block and gathers into it unless the data
 * is there.  A prefetch only starts the gather (split phase); the use that follows waits for it and widens the block into
 * the FP32 view (ZeRO-2 keeps the block through the micro-batch but not
 * the view: it is widened again at pre_backward).  Time blocked here is
 * exposed communication. */
static dmuon_rc fetch(dmuon_rt *rt, size_t l, bool may_acquire, bool prefetch)
{
    rt_layer *L = &rt->layers[l];
    if (L->pblock == RT_BLOCK_NONE) {
        if (!may_acquire)
            return DMUON_FAIL(DMUON_EINVAL, "runtime: recomputing layer '%s' before its "
                              "pre_backward", dmuon_plan_layer_name(rt->plan, l));
        DMUON_TRY(acquire(rt, RT_PARAM, l));
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
    DMUON_TRY(rt_fail_comm(rt, in_layer(rt, rc, "gradient reduction", l)));
    return release(rt, RT_GRAD, l);
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
    if (L->pblock == RT_BLOCK_NONE)
        DMUON_TRY(acq_check(rt, RT_PARAM, l));
    if (!L->w)
        DMUON_TRY(acq_check(rt, RT_VIEW, l));
    return DMUON_OK;
}

/* A prefetch of layer l is only a hint: skipped, not an error, when the
 * recorded order has another layer next or l's recorded range is still
 * held (the hook that uses l reports, or finds it free by then). */
static bool prefetch_ok(const dmuon_rt *rt, size_t l)
{
    const rt_layer *L = &rt->layers[l];
    if (L->pblock != RT_BLOCK_NONE || L->phase == RT_DONE)
        return false;
    const rt_space_rec *r = &rt->rec[RT_PARAM];
    size_t k = rt->acq_index[RT_PARAM];
    return !rt->packed ||
           (k < r->nacq && (size_t)r->acq_block[k] == l && acq_conflict(rt, RT_PARAM, l) < 0);
}

/* The invariants between a layer's phase and its blocks, after each hook
 * (debug builds): inside a bracket the block holds the parameters and the
 * F32 view exists; outside, no view; ZeRO-3 keeps no block outside its
 * brackets except a prefetch. */
static void layer_assert(const dmuon_rt *rt, const rt_layer *L)
{
    bool open = in_fwd(L) || in_bwd(L);
    assert(!open || (L->pblock == RT_BLOCK_GATHERED && L->w));
    assert(open || !L->w);
    assert(!L->inflight || L->pblock == RT_BLOCK_LIVE);
    assert(!L->reducing || L->phase == RT_DONE);
    (void)rt;
}

/* Before packing, the ranks' transfers are matched by their order alone
 * (lines A/B/C call collectives of equal sizes for layers of equal
 * sizes): a rank calling the hooks of another layer than the others would
 * exchange another layer's data silently.  So until the first step every
 * hook first compares its kind and layer across the ranks (one small
 * reduction within the deadline); a difference is DMUON_EMISMATCH on every
 * rank, naming the hooks, with nothing acquired or started
 * (dmuon_rt_discard then ends the micro-batch).  Once packed, the recorded
 * order, agreed at the first step, is checked locally by acq_check. */
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
    if (rt->packed)
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
    if (rt->opts.prefetch && l + 1 < rt->nlayers && prefetch_ok(rt, l + 1))
        DMUON_TRY(fetch(rt, l + 1, true, true));
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
    if (rt->zero == 3 && !rt->recompute && L->phase == RT_IDLE)
        DMUON_TRY(release(rt, RT_PARAM, l));
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
    DMUON_TRY(acq_check(rt, RT_GRAD, l));
    micro_begin(rt);
    DMUON_TRY(fetch(rt, l, true, false));
    if (rt->zero == 3 && rt->opts.prefetch && l > 0 && prefetch_ok(rt, l - 1))
        DMUON_TRY(fetch(rt, l - 1, true, true));
    DMUON_TRY(acquire(rt, RT_GRAD, l));
    DMUON_TRY(rt->elem->zero(rt_gblock(rt, L), L->gbytes, rt->stream));
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
     * the next post_backward (or the end of the micro-batch) finishes it */
    double t0 = dmuon_now_ms();
    dmuon_rc rc = rt_reduce_start(rt, l);
    rt->stats.reduce_s += (dmuon_now_ms() - t0) / 1e3;
    DMUON_TRY(rt_fail_comm(rt, in_layer(rt, rc, "gradient reduction", l)));
    L->reducing = true;
    L->phase = RT_DONE;
    DMUON_TRY(view_close(rt, l));
    if (rt->zero == 3)
        DMUON_TRY(release(rt, RT_PARAM, l));
    layer_assert(rt, L);
    bool last = rt->bwd_count + 1 == rt->nlayers;
    for (size_t j = 0; j < rt->nlayers; j++)
        if (rt->layers[j].reducing && (j != l || last))
            DMUON_TRY(reduce_finish(rt, j));
    if (++rt->bwd_count == rt->nlayers) {
        rt->in_micro = false;
        rt->micro++;
        if (rt->recording && !rt->packed)
            rt->recording = false;   /* one micro-batch recorded: packed at step */
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
             * (their acquisitions are the record's); this one's go */
            if (rc == DMUON_OK && L->pblock != RT_BLOCK_NONE && (rt->zero == 3 || L->acq_now))
                rc = release(rt, RT_PARAM, l);
            L->acq_now = false;
        }
        if (rc == DMUON_OK && !rt->packed)   /* not part of the recorded micro-batch */
            for (int k = 0; k < RT_SPACES; k++)
                rt->rec[k].nev = rt->rec_mark[k];
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

/* Packs the spaces from the recorded micro-batch and lays the pool out
 * again (collective; identical on every rank, since the hooks are). */
static dmuon_rc repack(dmuon_rt *rt)
{
    int64_t *sizes = malloc((rt->nlayers + 1) * 2 * sizeof *sizes);
    if (!sizes)
        return DMUON_FAIL(DMUON_ENOMEM, "runtime: out of memory");
    dmuon_rc rc = DMUON_OK;
    for (int s = 0; s < RT_SPACES && rc == DMUON_OK; s++) {
        rt_space_rec *r = &rt->rec[s];
        for (size_t l = 0; l < rt->nlayers; l++) {
            const rt_layer *L = &rt->layers[l];
            sizes[l] = s == RT_PARAM ? L->pbytes : s == RT_GRAD ? L->gbytes
                                                               : (L->own_elems + L->even_elems) * 4;
        }
        r->nacq = 0;
        for (size_t e = 0; e < r->nev; e++)
            r->nacq += r->ev[e].acquire ? 1 : 0;
        r->offsets = calloc(r->nacq + 1, sizeof *r->offsets);
        r->acq_block = calloc(r->nacq + 1, sizeof *r->acq_block);
        if (!r->offsets || !r->acq_block) {
            rc = DMUON_FAIL(DMUON_ENOMEM, "runtime: out of memory");
            break;
        }
        for (size_t e = 0, k = 0; e < r->nev; e++)
            if (r->ev[e].acquire)
                r->acq_block[k++] = r->ev[e].block;
        rc = dmuon_pool_pack(r->ev, r->nev, sizes, rt->nlayers, r->offsets, &r->total);
    }
    free(sizes);
    DMUON_TRY(rc);
    /* the views move into one arena: the layers' own buffers go */
    void *views = NULL;
    if (rt->elem->alloc(rt->rec[RT_VIEW].total, &views) != DMUON_OK)
        return DMUON_FAIL(DMUON_ENOMEM, "runtime: out of memory for %lld bytes of weight views",
                          (long long)rt->rec[RT_VIEW].total);
    rt->views = views;
    for (size_t l = 0; l < rt->nlayers; l++) {
        rt->elem->free(rt->layers[l].w_own);
        rt->layers[l].w_own = NULL;
    }
    /* every rank must have recorded the same order, or the layouts differ */
    uint64_t d = DMUON_DIGEST_SEED;
    for (int s = 0; s < RT_SPACES; s++)
        d = dmuon_digest(rt->rec[s].ev, rt->rec[s].nev * sizeof *rt->rec[s].ev, d);
    uint64_t ref = d;
    DMUON_TRY(rt_ctl_bcast(rt, &ref, (int)sizeof ref, "hook order: digest"));
    int64_t first[1] = {ref != d ? rt->topo.rank : rt->topo.size};
    DMUON_TRY(rt_ctl_i64(rt, first, 1, DMUON_CTL_MIN, "hook order: check"));
    if (first[0] != rt->topo.size)
        return DMUON_FAIL(DMUON_EMISMATCH, "runtime: rank %d called the layer hooks of the first "
                          "micro-batch in another order than rank 0 (every rank must run the "
                          "layers in the same order)", (int)first[0]);
    rt_pool_drop(rt);
    rt->packed = true;
    DMUON_TRY(rt_agree(rt, rt_pool_build(rt)));
    return DMUON_OK;
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
    if (!rt->packed) {
        /* before the first step: compared like a hook, and a step refused
         * on one rank is refused on every rank (the others would wait in
         * the step's first collective) */
        DMUON_TRY(order_check(rt, RT_HOOK_STEP, 0));
        DMUON_TRY(rt_agree(rt, step_ready(rt)));
    } else {
        DMUON_TRY(step_ready(rt));
    }
    DMUON_TRY(rt->elem->sync(rt->opts.stream));
    /* every parameter block is given back before the step (ZeRO-2 keeps
     * them through the micro-batches) */
    for (size_t l = 0; l < rt->nlayers; l++)
        if (rt->layers[l].pblock != RT_BLOCK_NONE)
            DMUON_TRY(release(rt, RT_PARAM, l));
    if (!rt->packed && !rt->recording) {
        DMUON_TRY(rt_pub_end(rt));
        DMUON_TRY(repack(rt));
        DMUON_TRY(rt_write_windows(rt));
    }
    /* the micro-batches are spent whatever the outcome: a failed step
     * dropped their gradients, so a retry needs a new micro-batch */
    rt->micro = 0;
    return rt_step(rt, lrs);
}

int64_t dmuon_rt_steps(const dmuon_rt *rt) { return rt->steps; }

uint64_t dmuon_rt_state_digest(const dmuon_rt *rt)
{
    uint64_t d = dmuon_digest(&rt->steps, sizeof rt->steps, DMUON_DIGEST_SEED);
    if (!rt->opened)
        return d;
    const float *st[] = {rt->own_w, rt->own_m, rt->even_w, rt->even_m, rt->even_v};
    const int64_t n[] = {rt->win_elems, rt->win_elems, rt->even_total, rt->even_total,
                         rt->even_total};
    for (int i = 0; i < 5; i++)
        d = rt_digest_mem(rt, st[i], n[i] * (int64_t)sizeof(float), d);
    /* what the next gathers read: the owner window, the even shards, the
     * publish copy */
    d = rt_digest_mem(rt, rt->base + rt->pwin_off, rt->win_elems * (int64_t)rt->dsize, d);
    d = rt_digest_mem(rt, rt->base + rt->ewin_off, rt->even_total * (int64_t)rt->dsize, d);
    return rt_digest_mem(rt, rt->base + rt->copy_off, rt->copy_bytes, d);
}
double dmuon_rt_grad_norm(const dmuon_rt *rt) { return rt->grad_norm; }

void dmuon_rt_get_stats(const dmuon_rt *rt, dmuon_rt_stats *out)
{
    *out = rt->stats;
    out->state_bytes = (rt->win_elems * 2 + rt->even_total * (rt->opts.line == DMUON_LINE_B ? 2 : 3)) * 4;
    out->view_bytes = rt->packed ? rt->rec[RT_VIEW].total : 0;
    for (size_t l = 0; l < rt->nlayers && !rt->packed; l++)
        if (rt->layers[l].w_own)
            out->view_bytes += (rt->layers[l].own_elems + rt->layers[l].even_elems) * 4;
    out->step_bytes = (rt->win_elems + (rt->opts.line == DMUON_LINE_B ? rt->even_total : 0) +
                       rt->scratch_elems) * 4;
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
        if (rt->elem) {
            rt->elem->free(rt->state);
            rt->elem->free(rt->scratch);
            rt->elem->free(rt->views);
            for (size_t l = 0; l < rt->nlayers; l++)
                rt->elem->free(rt->layers[l].w_own);
        }
        free(rt->state_host);
        if (rt->topo_ok)
            dmuon_topo_release(&rt->topo);
    }
    free(rt->pub_table);
    for (size_t l = 0; l < rt->nlayers; l++) {
        rt_layer *L = &rt->layers[l];
        free(L->params);
        free(L->gsegs);
        free(L->seg_copy);
        free(L->seg_pub);
    }
    for (size_t i = 0; i < rt->nparams; i++)
        free(rt->params[i].init);
    for (size_t i = 0; i < rt->nunknown; i++)
        free(rt->unknown[i]);
    for (int s = 0; s < RT_SPACES; s++) {
        free(rt->rec[s].ev);
        free(rt->rec[s].offsets);
        free(rt->rec[s].acq_block);
    }
    free(rt->unknown);
    free(rt->params);
    free(rt->layers);
    free(rt->pieces);
    dmuon_ns_free(rt->ns);
    free(rt);
}
