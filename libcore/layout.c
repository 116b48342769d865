/*
 * layout.c — one rank's layout from the plan (dmuon/layout.h): regions,
 * pieces, windows, the publish copy, the groups, the plan's order of one
 * micro-batch, the packed spaces, the pool's map and the memory figures.
 *
 * Invariants (checked by dmuon_layout_check, which build runs):
 *   - in each space, two blocks live at one moment of the plan's order
 *     occupy disjoint bytes, inside the space;
 *   - everything that must be the same on every rank (pool map, control
 *     areas, spaces) depends on the plan and the options only, never on the
 *     rank: the shard group's size, the largest window, the publish copy
 *     and the even totals are rank-independent;
 *   - the memory figures are the sums stated in the header.
 * Built in two parts: the common part (build_common: everything above)
 * and the rank part (rank_part: pieces, own window, state, scratch and
 * Newton–Schulz sizes, the figures), so that the busiest rank is found
 * without rebuilding the common part per rank.
 */
#include "dmuon/layout.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "dmuon/ns.h"
#include "dmuon/publish.h"
#include "dmuon/table.h"

/* ---------------------------------------------------------------- lines -- */

static const char *const line_names[] = {"D", "C", "B", "A"};

const char *dmuon_line_name(dmuon_line l)
{
    return (unsigned)l <= DMUON_LINE_A ? line_names[l] : "?";
}

dmuon_rc dmuon_line_parse(const char *s, dmuon_line *out)
{
    for (int i = 0; i <= DMUON_LINE_A; i++)
        if (s && !strcasecmp(s, line_names[i])) {
            *out = (dmuon_line)i;
            return DMUON_OK;
        }
    return DMUON_FAIL(DMUON_EINVAL, "line '%s': expected A, B, C or D", s ? s : "");
}

/*                 owners  all_adamw  owned      publish    node_load replicated */
static const dmuon_line_ops line_ops[] = {
    [DMUON_LINE_D] = {true, false, DMUON_ALGO_SCHEDULED, DMUON_ALGO_SCHEDULED, true, false},
    [DMUON_LINE_C] = {true, false, DMUON_ALGO_PER_OWNER, DMUON_ALGO_PER_OWNER, false, false},
    [DMUON_LINE_B] = {false, false, DMUON_ALGO_DEFAULT, DMUON_ALGO_DEFAULT, false, true},
    [DMUON_LINE_A] = {false, true, DMUON_ALGO_DEFAULT, DMUON_ALGO_DEFAULT, false, false},
};

const dmuon_line_ops *dmuon_line_ops_of(dmuon_line l)
{
    return (unsigned)l <= DMUON_LINE_A ? &line_ops[l] : NULL;
}

static const char *const owner_parts_names[] = {"auto", "persistent", "per-layer"};

const char *dmuon_owner_parts_name(dmuon_owner_parts m)
{
    return (unsigned)m < DMUON_OWNER_PARTS_COUNT ? owner_parts_names[m] : "?";
}

dmuon_rc dmuon_owner_parts_parse(const char *s, dmuon_owner_parts *out)
{
    for (int m = 0; s && m < DMUON_OWNER_PARTS_COUNT; m++)
        if (!strcmp(s, owner_parts_names[m])) {
            *out = (dmuon_owner_parts)m;
            return DMUON_OK;
        }
    return DMUON_FAIL(DMUON_EINVAL, "owner parts '%s': expected auto, persistent or per-layer",
                      s ? s : "(null)");
}

const char *dmuon_block_name(int kind)
{
    static const char *const n[DMUON_BLOCK_KINDS] = {
        "parameter", "gradient", "weight view", "gather source", "reduce destination",
        "reduce staging", "step"};
    return kind >= 0 && kind < DMUON_BLOCK_KINDS ? n[kind] : "?";
}

void dmuon_layout_opts_init(dmuon_layout_opts *o)
{
    memset(o, 0, sizeof *o);
    o->line = DMUON_LINE_D;
    o->prefetch = 1;
    o->backend = DMUON_BACKEND_MPI;
}

/* ------------------------------------------------------------ storage -- */

/* The writable view of the arrays the public struct shows as const; all
 * of them point into one allocation (mem_block). */
typedef struct {
    dmuon_layout_layer *layers;
    dmuon_layout_param *params;
    dmuon_layout_piece *pieces;
    size_t pieces_cap;
    int *layer_params;
    dmuon_segment *gsegs, *pub, *gtab;
    int64_t *seg_copy;
    int *seg_pub;
    /* the plan's order: every event, then each kind's */
    dmuon_layout_event *all;
    size_t nall, nall_cap;
    dmuon_pool_event *ev[DMUON_BLOCK_KINDS];
    int32_t *acq_layer[DMUON_BLOCK_KINDS];
    int64_t *acq_off[DMUON_BLOCK_KINDS];
} store;

struct carve {
    unsigned char *p;
    size_t off;
};

/* Reserves n items of size sz at 16-byte alignment (p NULL: counts only). */
static void *carve(struct carve *c, size_t n, size_t sz)
{
    size_t at = (c->off + 15) & ~(size_t)15;
    c->off = at + (n ? n : 1) * sz;
    return c->p ? c->p + at : NULL;
}

/* Events per space in one micro-batch: a parameter block is acquired at
 * most twice (forward, backward) and a view twice; a gradient block once;
 * each acquisition has at most one release. */
#define EV_PER_LAYER 4

static void lay_store(struct carve *c, store *s, size_t nl, size_t np, size_t nseg, size_t nm,
                      int S)
{
    s->layers = carve(c, nl, sizeof *s->layers);
    s->params = carve(c, np, sizeof *s->params);
    s->pieces_cap = nm + np;
    s->pieces = carve(c, s->pieces_cap, sizeof *s->pieces);
    s->layer_params = carve(c, np, sizeof *s->layer_params);
    s->gsegs = carve(c, nseg, sizeof *s->gsegs);
    s->pub = carve(c, nseg, sizeof *s->pub);
    /* owned gather and reduce: nseg each; even gather, reduce and the
     * directions: S each per layer */
    s->gtab = carve(c, 2 * nseg + 3 * (size_t)S * nl, sizeof *s->gtab);
    s->seg_copy = carve(c, nseg, sizeof *s->seg_copy);
    s->seg_pub = carve(c, nseg, sizeof *s->seg_pub);
    s->nall_cap = (size_t)DMUON_BLOCK_KINDS * EV_PER_LAYER * nl + 2;
    s->all = carve(c, s->nall_cap, sizeof *s->all);
    for (int k = 0; k < DMUON_BLOCK_KINDS; k++) {
        s->ev[k] = carve(c, EV_PER_LAYER * nl + 2, sizeof *s->ev[k]);
        s->acq_layer[k] = carve(c, EV_PER_LAYER * nl + 2, sizeof *s->acq_layer[k]);
        s->acq_off[k] = carve(c, EV_PER_LAYER * nl + 2, sizeof *s->acq_off[k]);
    }
}

typedef struct {
    dmuon_layout pub;
    store s;
} layout_impl;

static store *st(dmuon_layout *x) { return &((layout_impl *)x)->s; }

/* ------------------------------------------------------------ regions -- */

/* Parameters, their layer lists and offsets; each layer's regions. */
static dmuon_rc regions(dmuon_layout *x)
{
    store *s = st(x);
    const dmuon_plan *p = x->plan;
    size_t np = 0, nm = 0;
    const dmuon_plan_param *pp = dmuon_plan_params(p, &np);
    const dmuon_plan_member *mem = dmuon_plan_members(p, &nm);
    const int S = x->shard_size;
    for (size_t i = 0; i < np; i++) {
        if (pp[i].layer < 0 || (size_t)pp[i].layer >= x->nlayers)
            return DMUON_FAIL(DMUON_ECHECK, "layout: parameter '%s' names layer %d of %zu",
                              pp[i].name, (int)pp[i].layer, x->nlayers);
        s->params[i].role = x->ops->all_adamw ? DMUON_ROLE_ADAMW : pp[i].role;
        s->params[i].owned = x->ops->owners && pp[i].role == DMUON_ROLE_MUON;
    }
    int *lp = s->layer_params;
    int64_t even_pos = 0;
    size_t seg_base = 0;
    for (size_t l = 0; l < x->nlayers; l++) {
        dmuon_layout_layer *L = &s->layers[l];
        L->params = lp;
        for (size_t i = 0; i < np; i++)
            if ((size_t)pp[i].layer == l)
                lp[L->np++] = (int)i;
        lp += L->np;
        if (x->ops->owners) {
            L->segs = dmuon_plan_layer_segments(p, l, &L->nseg);
            L->own_elems = dmuon_plan_layer_bytes(p, l) / x->dsize;
            dmuon_segment *g = s->gsegs + seg_base;
            for (size_t k = 0; k < L->nseg; k++) {
                g[k] = L->segs[k];
                g[k].dtype = DMUON_F32;
                g[k].offset = L->segs[k].offset / x->dsize * 4;
                g[k].window_offset = L->segs[k].window_offset / x->dsize * 4;
            }
            L->gsegs = g;
            seg_base += L->nseg;
        }
        int64_t even = 0;
        for (int j = 0; j < L->np; j++) {
            dmuon_layout_param *q = &s->params[L->params[j]];
            if (!q->owned) {
                q->off = L->own_elems + even;
                even += pp[L->params[j]].numel;
            }
            if (!q->owned && pp[L->params[j]].role == DMUON_ROLE_MUON && !x->ops->all_adamw)
                L->muon_even = true;
        }
        L->even_elems = even;
        L->even_pad = (even + S - 1) / S * S;
        L->shard = L->even_pad / S;
        L->even_pos = even_pos;
        even_pos += L->shard;
        L->bytes[DMUON_BLOCK_PARAM] = (L->own_elems + L->even_pad) * x->dsize;
        L->bytes[DMUON_BLOCK_GRAD] = (L->own_elems + L->even_pad) * 4;
        L->bytes[DMUON_BLOCK_VIEW] = x->view_alias ? 0 : (L->own_elems + L->even_elems) * 4;
    }
    x->even_total = even_pos;
    if (x->ops->owners)
        for (size_t k = 0; k < nm; k++) {
            const dmuon_plan_param *q = &pp[mem[k].param];
            s->params[mem[k].param].off =
                mem[k].layer_offset / x->dsize - mem[k].first_matrix * q->mat_m * q->mat_n;
        }
    for (int32_t r = 0; r < x->ranks && x->ops->owners; r++) {
        int64_t w = dmuon_plan_window_bytes(p, r) / x->dsize;
        if (w > x->max_win_elems)
            x->max_win_elems = w;
    }
    return DMUON_OK;
}

/* HSDP with owners: the publish table (every layer's segments in layer
 * order) laid out as the rails' copy. */
static dmuon_rc publish_copy(dmuon_layout *x)
{
    store *s = st(x);
    if (!x->hsdp || !x->ops->owners)
        return DMUON_OK;
    size_t base = 0;
    for (size_t l = 0; l < x->nlayers; l++) {
        dmuon_layout_layer *L = &s->layers[l];
        L->seg_copy = s->seg_copy + base;
        L->seg_pub = s->seg_pub + base;
        for (size_t k = 0; k < L->nseg; k++) {
            s->seg_pub[base + k] = x->npub;
            s->pub[x->npub++] = L->segs[k];
        }
        base += L->nseg;
    }
    DMUON_TRY(dmuon_publish_layout(x->per_node, s->pub, x->npub, s->pub, &x->copy_bytes));
    for (size_t l = 0; l < x->nlayers; l++) {
        dmuon_layout_layer *L = &s->layers[l];
        for (size_t k = 0; k < L->nseg; k++)
            s->seg_copy[L->seg_pub - s->seg_pub + k] = s->pub[L->seg_pub[k]].offset;
    }
    x->pub_table = s->pub;
    return DMUON_OK;
}

/* --------------------------------------------------------------- groups -- */

/* Every layer's group tables and options (rt_comm.c creates them in this
 * order, control areas back to back). */
static dmuon_rc groups(dmuon_layout *x)
{
    store *s = st(x);
    const dmuon_line_ops *lo = x->ops;
    dmuon_segment *t = s->gtab;
    const dmuon_scope even_scope = x->hsdp ? DMUON_SCOPE_NODE : DMUON_SCOPE_WORLD;
    const bool per_layer = x->opts.owner_parts == DMUON_OWNER_PARTS_PER_LAYER;
    x->gather_staging = 0;
    for (size_t l = 0; l < x->nlayers; l++) {
        dmuon_layout_layer *L = &s->layers[l];
        L->bytes[DMUON_BLOCK_SOURCE] = L->bytes[DMUON_BLOCK_RECV] = 0;
        L->bytes[DMUON_BLOCK_STAGING] = 0;
        for (int k = 0; k < DMUON_GRP_KINDS; k++) {
            dmuon_layout_group *g = &L->group[k];
            memset(g, 0, sizeof *g);
            if (k == DMUON_GRP_OWN_GATHER || k == DMUON_GRP_OWN_REDUCE) {
                if (!L->nseg || lo->owned == DMUON_ALGO_DEFAULT)
                    continue;
                if (k == DMUON_GRP_OWN_GATHER && x->hsdp && lo->node_load)
                    continue;   /* the publish's node load gathers */
                memcpy(t, k == DMUON_GRP_OWN_GATHER ? L->segs : L->gsegs, L->nseg * sizeof *t);
                g->opts.algorithm = lo->owned;
                if (k == DMUON_GRP_OWN_GATHER && x->hsdp) {
                    /* inside the node, from the copy of the column's leader */
                    for (size_t j = 0; j < L->nseg; j++) {
                        t[j].owner = L->segs[j].owner % x->per_node;
                        t[j].window_offset = L->seg_copy[j];
                    }
                    g->opts.scope = DMUON_SCOPE_NODE;
                } else if (per_layer) {
                    /* the owners' part of this layer (gather source, reduce
                     * destination): window offsets from each owner's first
                     * byte in the layer, its part as long as the most any
                     * owner holds */
                    const int es = k == DMUON_GRP_OWN_GATHER ? (int)x->dsize : 4;
                    const int kind = k == DMUON_GRP_OWN_GATHER ? DMUON_BLOCK_SOURCE
                                                               : DMUON_BLOCK_RECV;
                    for (size_t j = 0; j < L->nseg; j++) {
                        int64_t first = t[j].window_offset, len = 0;
                        for (size_t i = 0; i < L->nseg; i++)
                            if (L->segs[i].owner == L->segs[j].owner) {
                                int64_t w = k == DMUON_GRP_OWN_GATHER ? L->segs[i].window_offset
                                                                       : L->gsegs[i].window_offset;
                                first = w < first ? w : first;
                                len += L->segs[i].count * es;
                            }
                        t[j].window_offset -= first;
                        assert(t[j].window_offset >= 0 && t[j].window_offset < len);
                        if (len > L->bytes[kind])
                            L->bytes[kind] = len;
                    }
                }
                g->segs = t;
                g->n = (int)L->nseg;
                t += L->nseg;
                continue;
            }
            if (!L->shard || (k == DMUON_GRP_DIR_GATHER && (!lo->replicated || !L->muon_even)))
                continue;
            const dmuon_dtype dt = k == DMUON_GRP_EVEN_GATHER ? x->pdt : DMUON_F32;
            const int64_t es = (int64_t)dmuon_dtype_size(dt);
            DMUON_TRY(dmuon_table_even(x->shard_size, L->shard, dt, t));
            for (int j = 0; j < x->shard_size; j++) {
                if (k == DMUON_GRP_DIR_GATHER) {
                    t[j].window_offset = 0;   /* a direction buffer's shard */
                } else {
                    t[j].offset += L->own_elems * es;
                    t[j].window_offset = L->even_pos * es;
                }
            }
            g->opts.algorithm = DMUON_ALGO_EQUAL;
            g->opts.scope = even_scope;
            g->segs = t;
            g->n = x->shard_size;
            t += x->shard_size;
        }
    }
    /* control areas: each group its own control words, back to back; the
     * owned region's ReduceScatterV stages in the shared staging space
     * (packed by its lifetime, order_and_pack) */
    dmuon_topo shape = {.world = MPI_COMM_NULL, .node = MPI_COMM_NULL, .rail = MPI_COMM_NULL,
                        .size = x->ranks, .nodes = x->nodes, .per_node = x->per_node,
                        .backend = x->opts.backend};
    x->ngroups = 0;
    x->ctrl_words_bytes = 0;
    for (size_t l = 0; l < x->nlayers; l++)
        for (int k = 0; k < DMUON_GRP_KINDS; k++) {
            dmuon_layout_group *g = &s->layers[l].group[k];
            if (!g->n)
                continue;
            dmuon_group_opts o = g->opts;
            o.deadline_ms = DMUON_DEADLINE_MS_DEFAULT;   /* sizing reads no environment */
            int64_t st = 0, b = 0;
            DMUON_TRY(dmuon_group_staging_bytes(&shape, g->segs, g->n, &o, &st));
            /* the owned region's reduction stages in the shared space (a
             * layer's even reduction runs beside it and keeps its own); a
             * group that only gathers never stages, so its staging may lie
             * anywhere in that space: at its start */
            bool gathers = k == DMUON_GRP_OWN_GATHER || k == DMUON_GRP_EVEN_GATHER ||
                           k == DMUON_GRP_DIR_GATHER;
            if (st > 0 && (k == DMUON_GRP_OWN_REDUCE || gathers)) {
                g->opts.staging_shared = o.staging_shared = 1;
                if (gathers && st > x->gather_staging)
                    x->gather_staging = st;
                if (!gathers)
                    s->layers[l].bytes[DMUON_BLOCK_STAGING] = st;
            }
            DMUON_TRY(dmuon_group_ctrl_bytes(&shape, g->segs, g->n, &o, &b));
            g->ctrl_off = x->ctrl_words_bytes;
            g->ctrl_bytes = dmuon_pool_align(b);
            x->ctrl_words_bytes += g->ctrl_bytes;
            x->ngroups++;
        }
    x->staging_base = dmuon_pool_align(x->ctrl_words_bytes);
    return DMUON_OK;
}

/* Line B: the pool's direction region (two buffers, each a layer's
 * gathered directions, F32, then this rank's shard of them). */
static void dir_region(dmuon_layout *x)
{
    int64_t pad = 0, shard = 0;
    for (size_t l = 0; l < x->nlayers && x->ops->replicated; l++) {
        const dmuon_layout_layer *L = &x->layers[l];
        if (!L->shard || !L->muon_even)
            continue;
        if (L->even_pad > pad)
            pad = L->even_pad;
        if (L->shard > shard)
            shard = L->shard;
    }
    x->dir_shard = dmuon_pool_align(pad * 4);
    x->dir_buf = pad ? x->dir_shard + dmuon_pool_align(shard * 4) : 0;
}

/* ------------------------------------------------------ the plan's order -- */

/* The hooks of one micro-batch in the plan's order, as a little machine
 * that makes the runtime's acquisitions and releases (dmuon/layout.h
 * "Lifetimes"). */
typedef struct {
    dmuon_layout *x;
    store *s;
    bool *pl, *view, *red, *done;   /* per layer: parameter block live, view
                                       open, reduction in flight, backward done */
    bool *gathering, *gathered;     /* its gather started (the source is live),
                                       its data is in the block */
    size_t bwd;
} order_sim;

static void emit(order_sim *o, int kind, size_t l, int acquire)
{
    store *s = o->s;
    assert(s->nall < s->nall_cap);
    s->all[s->nall++] = (dmuon_layout_event){(int8_t)kind, (int8_t)acquire, (int32_t)l};
}

/* A gather starts (its parameter block is held): the owners' source. */
static void sim_gather_start(order_sim *o, size_t l)
{
    if (o->gathered[l] || o->gathering[l])
        return;
    if (o->x->layers[l].bytes[DMUON_BLOCK_SOURCE])
        emit(o, DMUON_BLOCK_SOURCE, l, 1);
    o->gathering[l] = true;
}

static void sim_use(order_sim *o, size_t l, int next, bool may_prefetch)
{
    dmuon_layout *x = o->x;
    if (!o->view[l]) {
        if (!o->pl[l]) {
            emit(o, DMUON_BLOCK_PARAM, l, 1);
            o->pl[l] = true;
        }
        sim_gather_start(o, l);
        if (o->gathering[l] && x->layers[l].bytes[DMUON_BLOCK_SOURCE])
            emit(o, DMUON_BLOCK_SOURCE, l, 0);   /* waited for */
        o->gathering[l] = false;
        o->gathered[l] = true;
        if (!x->view_alias)
            emit(o, DMUON_BLOCK_VIEW, l, 1);
        o->view[l] = true;
        if (x->opts.zero_stage == 3 && !x->view_alias) {
            emit(o, DMUON_BLOCK_PARAM, l, 0);   /* widened: the view holds it */
            o->pl[l] = false;
            o->gathered[l] = false;
        }
    }
    if (may_prefetch && x->opts.prefetch && next >= 0 && !o->view[next] && !o->done[next] &&
        !o->gathered[next] && !o->gathering[next] &&
        (x->opts.zero_stage == 2 || !o->pl[next])) {
        if (!o->pl[next]) {
            emit(o, DMUON_BLOCK_PARAM, (size_t)next, 1);
            o->pl[next] = true;
        }
        sim_gather_start(o, (size_t)next);
    }
}

static void sim_close(order_sim *o, size_t l)
{
    dmuon_layout *x = o->x;
    if (o->view[l] && !x->view_alias)
        emit(o, DMUON_BLOCK_VIEW, l, 0);
    o->view[l] = false;
    if (x->opts.zero_stage == 3 && o->pl[l]) {
        emit(o, DMUON_BLOCK_PARAM, l, 0);   /* the aliased view's block */
        o->pl[l] = false;
        o->gathered[l] = false;
    }
}

static void sim_pre_forward(order_sim *o, size_t l)
{
    sim_use(o, l, o->x->layers[l].next_fwd, true);
}

static void sim_post_forward(order_sim *o, size_t l) { sim_close(o, l); }

static void sim_pre_backward(order_sim *o, size_t l)
{
    sim_use(o, l, o->x->layers[l].next_bwd, o->x->opts.zero_stage == 3);
    emit(o, DMUON_BLOCK_GRAD, l, 1);
}

static void sim_post_backward(order_sim *o, size_t l)
{
    emit(o, DMUON_BLOCK_STAGING, l, 1);   /* the reduction starts */
    if (o->x->layers[l].bytes[DMUON_BLOCK_RECV])
        emit(o, DMUON_BLOCK_RECV, l, 1);
    o->red[l] = true;
    o->done[l] = true;
    sim_close(o, l);
    bool last = o->bwd + 1 == o->x->nlayers;
    for (size_t j = 0; j < o->x->nlayers; j++)
        if (o->red[j] && (j != l || last)) {
            emit(o, DMUON_BLOCK_STAGING, j, 0);
            if (o->x->layers[j].bytes[DMUON_BLOCK_RECV])
                emit(o, DMUON_BLOCK_RECV, j, 0);
            emit(o, DMUON_BLOCK_GRAD, j, 0);
            o->red[j] = false;
        }
    o->bwd++;
}

/* Prefetch targets: the next layer of the same pass. */
static void prefetch_targets(dmuon_layout *x)
{
    store *s = st(x);
    size_t L = x->nlayers, first = x->root ? 1 : 0;
    for (size_t l = 0; l < L; l++)
        s->layers[l].next_fwd = s->layers[l].next_bwd = -1;
    for (size_t l = 0; l + 1 < L; l++)
        s->layers[l].next_fwd = (int)(l + 1);
    for (size_t l = L; l-- > first + 1;)
        s->layers[l].next_bwd = (int)(l - 1);
    if (x->root && L > 1)
        s->layers[0].next_bwd = (int)(L - 1);
}

/* The step's working memory, the same on every rank (the most any rank
 * needs, so that the working space is symmetric): the scratch of the
 * largest matrix any rank updates (rt_step.c: one m x n matrix in the plain
 * placement, three otherwise; line B a block of directions and one matrix)
 * and the Newton–Schulz workspace of the largest matrix any rank
 * orthogonalises. */
static void step_sizes(dmuon_layout *x)
{
    size_t np = 0;
    const dmuon_plan_param *pp = dmuon_plan_params(x->plan, &np);
    dmuon_ns_opts nso;
    dmuon_ns_opts_init(&nso);
    int64_t scratch = 1, ws = 0;
    for (size_t i = 0; i < np; i++) {
        const dmuon_plan_param *q = &pp[i];
        if (x->params[i].role != DMUON_ROLE_MUON)
            continue;
        int64_t mn = q->mat_m * q->mat_n, k;
        if (x->params[i].owned)
            k = (q->layout == DMUON_MAT_CONTIGUOUS && !q->transposed ? 1 : 3) * mn;
        else if (x->ops->replicated)
            k = ((q->layout == DMUON_MAT_CONTIGUOUS ? 1 : 2) + 1) * mn;
        else
            continue;
        scratch = k > scratch ? k : scratch;
        int64_t w = dmuon_ns_workspace_bytes(&nso, q->mat_m, q->mat_n);
        ws = w > ws ? w : ws;
    }
    x->step_scratch_bytes = dmuon_pool_align(scratch * 4);
    x->step_ns_bytes = dmuon_pool_align(ws);
    /* the directions of the transactional step (rt_step.c): every owned
     * matrix's (the largest window of any rank), line B its even shards' */
    x->step_dir_bytes = dmuon_pool_align(x->max_win_elems * 4) +
                        (x->ops->replicated ? dmuon_pool_align(x->even_total * 4) : 0);
}

/* The step's block: scratch, Newton–Schulz workspace, directions. */
static int64_t step_block(const dmuon_layout *x)
{
    return x->step_scratch_bytes + x->step_ns_bytes + x->step_dir_bytes;
}

/* The events of one micro-batch and the step; the parameter, gradient and
 * view blocks and the step's memory packed in the working space, the
 * reduce staging in its own. */
static dmuon_rc order_and_pack(dmuon_layout *x)
{
    store *s = st(x);
    size_t L = x->nlayers, first = x->root ? 1 : 0;
    /* the working space's blocks: (kind, layer) for the five kinds before
     * the staging, then the step */
    const size_t nb = (size_t)DMUON_BLOCK_STAGING * L + 1;
    bool *flags = calloc(6 * (L ? L : 1), sizeof *flags);
    int64_t *sizes = malloc(nb * sizeof *sizes);
    dmuon_pool_event *wev = malloc((s->nall_cap ? s->nall_cap : 1) * sizeof *wev);
    int64_t *woff = malloc((s->nall_cap ? s->nall_cap : 1) * sizeof *woff);
    if (!flags || !sizes || !wev || !woff) {
        free(flags);
        free(sizes);
        free(wev);
        free(woff);
        return DMUON_FAIL(DMUON_ENOMEM, "layout: out of memory for the order of %zu layers", L);
    }
    order_sim o = {x, s, flags, flags + L, flags + 2 * L, flags + 3 * L, flags + 4 * L,
                   flags + 5 * L, 0};
    s->nall = 0;
    /* ZeRO-2 keeps every parameter block from its first gather to the step,
     * through every micro-batch of it: as if all were acquired at the start
     * (in forward order, the order the hooks acquire them in) */
    for (size_t l = 0; l < L && x->opts.zero_stage == 2; l++) {
        emit(&o, DMUON_BLOCK_PARAM, l, 1);
        o.pl[l] = true;
    }
    if (L) {
        if (x->root)
            sim_pre_forward(&o, 0);
        for (size_t l = first; l < L; l++) {
            sim_pre_forward(&o, l);
            sim_post_forward(&o, l);
        }
        if (x->root)
            sim_post_forward(&o, 0);
        if (x->root)
            sim_pre_backward(&o, 0);
        for (size_t l = L; l-- > first;) {
            sim_pre_backward(&o, l);
            sim_post_backward(&o, l);
        }
        if (x->root)
            sim_post_backward(&o, 0);
    }
    /* the step: every parameter block given back, then its memory */
    for (size_t l = 0; l < L; l++)
        if (o.pl[l])
            emit(&o, DMUON_BLOCK_PARAM, l, 0);
    emit(&o, DMUON_BLOCK_STEP, 0, 1);
    emit(&o, DMUON_BLOCK_STEP, 0, 0);
    /* the working space: every event but the staging's */
    for (int k = 0; k < DMUON_BLOCK_STAGING; k++)
        for (size_t l = 0; l < L; l++)
            sizes[(size_t)k * L + l] = x->layers[l].bytes[k];
    sizes[nb - 1] = step_block(x);
    size_t nw = 0, nwa = 0;
    for (size_t e = 0; e < s->nall; e++) {
        const dmuon_layout_event *v = &s->all[e];
        if (v->kind == DMUON_BLOCK_STAGING)
            continue;
        int32_t b = v->kind == DMUON_BLOCK_STEP ? (int32_t)(nb - 1)
                                                 : (int32_t)((size_t)v->kind * L) + v->layer;
        wev[nw++] = (dmuon_pool_event){b, v->acquire};
    }
    dmuon_rc rc = dmuon_pool_pack(wev, nw, sizes, nb, woff, &x->work_bytes);
    /* each kind's acquisitions in order, with their working-space offsets;
     * the staging's packed apart */
    for (int k = 0; k < DMUON_BLOCK_KINDS && rc == DMUON_OK; k++) {
        dmuon_layout_space *sp = &x->space[k];
        size_t ne = 0, na = 0;
        nwa = 0;
        for (size_t e = 0; e < s->nall; e++) {
            const dmuon_layout_event *v = &s->all[e];
            bool in_work = v->kind != DMUON_BLOCK_STAGING;
            size_t at = in_work && v->acquire ? nwa++ : 0;
            if (v->kind != k)
                continue;
            s->ev[k][ne++] = (dmuon_pool_event){v->layer, v->acquire};
            if (v->acquire) {
                s->acq_layer[k][na] = v->layer;
                if (in_work)
                    s->acq_off[k][na] = woff[at];
                na++;
            }
        }
        sp->ev = s->ev[k];
        sp->nev = ne;
        sp->acq_layer = s->acq_layer[k];
        sp->acq_off = s->acq_off[k];
        sp->nacq = na;
        if (k == DMUON_BLOCK_STAGING) {
            for (size_t l = 0; l < L; l++)
                sizes[l] = x->layers[l].bytes[k];
            rc = dmuon_pool_pack(s->ev[k], ne, sizes, L, s->acq_off[k], &sp->bytes);
        }
    }
    if (rc == DMUON_OK)
        x->step_off = x->space[DMUON_BLOCK_STEP].acq_off[0];
    /* a layer's one reduction per micro-batch: its staging has one place,
     * which its reduce group is given (relative to the staging space) */
    for (size_t a = 0; a < x->space[DMUON_BLOCK_STAGING].nacq && rc == DMUON_OK; a++) {
        dmuon_layout_layer *Ly = &s->layers[s->acq_layer[DMUON_BLOCK_STAGING][a]];
        Ly->staging_off = s->acq_off[DMUON_BLOCK_STAGING][a];
        if (Ly->group[DMUON_GRP_OWN_REDUCE].opts.staging_shared)
            Ly->group[DMUON_GRP_OWN_REDUCE].opts.staging_offset = Ly->staging_off;
    }
    /* the gathers' never-used staging lies at the space's start */
    if (x->gather_staging > x->space[DMUON_BLOCK_STAGING].bytes)
        x->space[DMUON_BLOCK_STAGING].bytes = x->gather_staging;
    free(flags);
    free(sizes);
    free(wev);
    free(woff);
    return rc;
}

/* The most bytes (aligned as packed) of the working space's blocks of the
 * kinds in mask (bit k: kind k) live at one moment. */
#define WORK_KINDS (0x7fu & ~(1u << DMUON_BLOCK_STAGING))
static int64_t live_peak(const dmuon_layout *x, unsigned mask)
{
    const store *s = &((const layout_impl *)x)->s;
    int64_t live = 0, peak = 0;
    mask &= WORK_KINDS;
    for (size_t e = 0; e < s->nall; e++) {
        const dmuon_layout_event *v = &s->all[e];
        if (!(mask & (1u << v->kind)))
            continue;
        int64_t b = v->kind == DMUON_BLOCK_STEP
                        ? step_block(x)
                        : dmuon_pool_align(x->layers[v->layer].bytes[v->kind]);
        live += v->acquire ? b : -b;
        if (live > peak)
            peak = live;
    }
    return peak;
}

/* ------------------------------------------------------------ the pool -- */

static void pool_map(dmuon_layout *x)
{
    dmuon_pool_sizes sz = {.ctrl = x->staging_base + x->space[DMUON_BLOCK_STAGING].bytes,
                           .work = x->work_bytes};
    if (x->opts.owner_parts == DMUON_OWNER_PARTS_PERSISTENT) {
        /* the largest window of any rank: the pool is symmetric; HSDP's
         * gathers read the publish copy */
        sz.win[DMUON_WIN_PARAM] = x->hsdp ? 0 : x->max_win_elems * x->dsize;
        sz.win[DMUON_WIN_GRAD] = x->max_win_elems * 4;
    }
    sz.win[DMUON_WIN_EVEN] = x->even_total * x->dsize;
    sz.win[DMUON_WIN_EVEN_GRAD] = x->even_total * 4;
    sz.win[DMUON_WIN_COPY] = x->copy_bytes;
    sz.win[DMUON_WIN_DIR] = 2 * x->dir_buf;
    dmuon_pool_lay_out(&sz, &x->map);
}

/* ----------------------------------------------------------- the rank -- */

/* Owned pieces in layer order, then segment, then window position. */
static int piece_order(const void *a, const void *b)
{
    const dmuon_layout_piece *u = a, *v = b;
    if (u->layer != v->layer)
        return u->layer < v->layer ? -1 : 1;
    if (u->seg != v->seg)
        return u->seg < v->seg ? -1 : 1;
    return u->pos < v->pos ? -1 : u->pos > v->pos;
}

static bool plain_place(const dmuon_plan_param *q)
{
    return q->layout == DMUON_MAT_CONTIGUOUS && !q->transposed;
}

/* The rank part: pieces, own window, shard rank, state, scratch and the
 * Newton–Schulz size, and the memory figures. */
static dmuon_rc rank_part(dmuon_layout *x, int32_t rank)
{
    store *s = st(x);
    const dmuon_plan *p = x->plan;
    size_t nu = 0, nm = 0, np = 0;
    const dmuon_plan_unit *units = dmuon_plan_units(p, &nu);
    const dmuon_plan_member *mem = dmuon_plan_members(p, &nm);
    const dmuon_plan_param *pp = dmuon_plan_params(p, &np);
    x->opts.rank = rank;
    x->shard_rank = x->hsdp ? rank % x->per_node : rank;
    x->win_elems = x->ops->owners ? dmuon_plan_window_bytes(p, rank) / x->dsize : 0;
    size_t n = 0;
    for (size_t u = 0; u < nu && x->ops->owners; u++) {
        if (units[u].owner != rank)
            continue;
        for (size_t k = units[u].first_member; k < units[u].first_member + units[u].n_members;
             k++) {
            const dmuon_plan_param *q = &pp[mem[k].param];
            const dmuon_layout_layer *L = &x->layers[q->layer];
            int64_t mn = q->mat_m * q->mat_n;
            size_t g = 0;
            while (g + 1 < L->nseg && L->segs[g + 1].offset <= mem[k].layer_offset)
                g++;
            assert(n < s->pieces_cap);
            dmuon_layout_piece *pc = &s->pieces[n++];
            pc->param = mem[k].param;
            pc->lo = mem[k].first_matrix * mn;
            pc->hi = pc->lo + mem[k].n_matrices * mn;
            pc->owned = true;
            pc->pos = L->nseg ? (L->segs[g].window_offset + mem[k].layer_offset -
                                 L->segs[g].offset) / x->dsize
                              : -1;
            pc->layer = q->layer;
            pc->seg = (int32_t)g;
            if (!L->nseg || L->segs[g].owner != rank || pc->pos < 0 ||
                pc->pos + (pc->hi - pc->lo) > x->win_elems)
                return DMUON_FAIL(DMUON_ECHECK, "layout: unit '%s' of rank %d does not sit in "
                                  "its owner's window", units[u].name, (int)rank);
            if (q->layout != DMUON_MAT_CONTIGUOUS &&
                (mem[k].first_matrix % 2 || mem[k].n_matrices % 2))
                return DMUON_FAIL(DMUON_ECHECK, "layout: unit '%s' splits the gate/up pair of "
                                  "'%s' (layout %s)", units[u].name, q->name,
                                  dmuon_mat_layout_name(q->layout));
        }
    }
    qsort(s->pieces, n, sizeof *s->pieces, piece_order);
    for (size_t l = 0; l < x->nlayers; l++) {
        const dmuon_layout_layer *L = &x->layers[l];
        int64_t s0 = L->own_elems + (int64_t)x->shard_rank * L->shard, s1 = s0 + L->shard;
        for (int j = 0; j < L->np; j++) {
            const dmuon_layout_param *q = &x->params[L->params[j]];
            int64_t numel = pp[L->params[j]].numel;
            if (q->owned)
                continue;
            int64_t a = q->off > s0 ? q->off : s0, b = q->off + numel < s1 ? q->off + numel : s1;
            if (a >= b)
                continue;
            assert(n < s->pieces_cap);
            dmuon_layout_piece *pc = &s->pieces[n++];
            *pc = (dmuon_layout_piece){L->params[j], a - q->off, b - q->off, false,
                                       L->even_pos + (a - s0), (int32_t)l, -1};
        }
    }
    x->npieces = n;
    /* the step's scratch (rt_step.c): an owned matrix needs one m x n
     * matrix in the plain placement, three otherwise (direction, momentum
     * and gradient of the real matrix); line B a block of directions
     * (two matrices for a strided gate/up pair) and one matrix */
    int64_t need = 1, ws = 0;
    x->ns_max_m = x->ns_max_n = 0;
    dmuon_ns_opts nso;
    dmuon_ns_opts_init(&nso);
    for (size_t i = 0; i < n; i++) {
        const dmuon_plan_param *q = &pp[s->pieces[i].param];
        if (!s->pieces[i].owned)
            continue;
        int64_t mn = q->mat_m * q->mat_n, k = (plain_place(q) ? 1 : 3) * mn;
        need = k > need ? k : need;
        int64_t w = dmuon_ns_workspace_bytes(&nso, q->mat_m, q->mat_n);
        if (w > ws) {
            ws = w;
            x->ns_max_m = q->mat_m;
            x->ns_max_n = q->mat_n;
        }
    }
    for (size_t l = 0; l < x->nlayers && x->ops->replicated; l++) {
        const dmuon_layout_layer *L = &x->layers[l];
        for (int j = 0; j < L->np && L->shard; j++) {
            const dmuon_plan_param *q = &pp[L->params[j]];
            if (x->params[L->params[j]].role != DMUON_ROLE_MUON)
                continue;
            int64_t mn = q->mat_m * q->mat_n;
            int64_t k = ((q->layout == DMUON_MAT_CONTIGUOUS ? 1 : 2) + 1) * mn;
            need = k > need ? k : need;
            int64_t w = dmuon_ns_workspace_bytes(&nso, q->mat_m, q->mat_n);
            if (w > ws) {
                ws = w;
                x->ns_max_m = q->mat_m;
                x->ns_max_n = q->mat_n;
            }
        }
    }
    x->scratch_elems = need;
    const int64_t we = x->win_elems, ee = x->even_total;
    x->state_elems = 3 * we + 4 * ee;

    dmuon_layout_memory *m = &x->mem;
    memset(m, 0, sizeof *m);
    m->pool_bytes = x->map.total;
    m->ctrl_bytes = x->map.space_bytes[DMUON_SPACE_CTRL];
    m->staging_bytes = x->space[DMUON_BLOCK_STAGING].bytes;
    m->work_bytes = x->map.space_bytes[DMUON_SPACE_WORK];
    m->param_live_bytes = x->space[DMUON_BLOCK_PARAM].bytes;
    m->grad_live_bytes = x->space[DMUON_BLOCK_GRAD].bytes;
    m->view_live_bytes = x->space[DMUON_BLOCK_VIEW].bytes;
    m->step_bytes = step_block(x);
    m->step_dir_bytes = x->step_dir_bytes;
    m->window_space_bytes = x->map.space_bytes[DMUON_SPACE_WINDOW];
    m->state_bytes = x->state_elems * 4;
    m->scratch_bytes = x->scratch_elems * 4;
    m->ns_workspace_bytes = ws;
    m->total_bytes = m->pool_bytes + m->state_bytes;
    m->live_peak_bytes = live_peak(x, WORK_KINDS);
    m->window_live_bytes = live_peak(x, 1u << DMUON_BLOCK_SOURCE | 1u << DMUON_BLOCK_RECV);
    m->least_bytes = m->total_bytes - m->work_bytes + m->live_peak_bytes;
    m->dir_bytes = 2 * x->dir_buf;
    m->optimizer_bytes = we * 8 + ee * 12;
    m->owner_window_bytes = we * (x->dsize + 4);
    m->largest_layer = -1;
    for (size_t l = 0; l < x->nlayers; l++)
        if (x->layers[l].bytes[DMUON_BLOCK_PARAM] > m->largest_layer_bytes) {
            m->largest_layer_bytes = x->layers[l].bytes[DMUON_BLOCK_PARAM];
            m->largest_layer = (int32_t)l;
        }
    return DMUON_OK;
}

/* -------------------------------------------------------------- build -- */

static dmuon_rc resolve(const dmuon_plan *p, const dmuon_layout_opts *in, dmuon_layout *x)
{
    dmuon_layout_opts o;
    if (in)
        o = *in;
    else
        dmuon_layout_opts_init(&o);
    if (!o.zero_stage)
        o.zero_stage = dmuon_plan_zero_stage(p);
    if (o.zero_stage != 2 && o.zero_stage != 3)
        return DMUON_FAIL(DMUON_EINVAL, "layout: ZeRO stage %d: expected 2 or 3", o.zero_stage);
    if (o.prefetch != 0 && o.prefetch != 1)
        return DMUON_FAIL(DMUON_EINVAL, "layout: prefetch depth %d: expected 0 or 1",
                          o.prefetch);
    if (!dmuon_line_ops_of(o.line))
        return DMUON_FAIL(DMUON_EINVAL, "layout: unknown line %d", (int)o.line);
    if ((unsigned)o.backend >= DMUON_BACKEND_COUNT)
        return DMUON_FAIL(DMUON_EINVAL, "layout: unknown backend %d", (int)o.backend);
    if ((unsigned)o.owner_parts >= DMUON_OWNER_PARTS_COUNT)
        return DMUON_FAIL(DMUON_EINVAL, "layout: unknown owner parts %d", (int)o.owner_parts);
    x->ranks = dmuon_plan_ranks(p);
    if (o.rank < 0 || o.rank >= x->ranks)
        return DMUON_FAIL(DMUON_EINVAL, "layout: rank %d outside [0, %d)", (int)o.rank,
                          (int)x->ranks);
    x->plan = p;
    x->opts = o;
    x->ops = dmuon_line_ops_of(o.line);
    x->nodes = dmuon_plan_nodes(p);
    x->per_node = dmuon_plan_gpus_per_node(p);
    x->hsdp = dmuon_plan_sharding(p) == DMUON_SHARD_HSDP;
    x->shard_size = x->hsdp ? x->per_node : x->ranks;
    x->pdt = dmuon_plan_param_dtype(p);
    if (x->pdt != DMUON_BF16 && x->pdt != DMUON_F32)
        return DMUON_FAIL(DMUON_EINVAL, "layout: parameter dtype %s: expected bf16 or f32",
                          dmuon_dtype_name(x->pdt));
    x->dsize = (int64_t)dmuon_dtype_size(x->pdt);
    x->view_alias = x->pdt == DMUON_F32;
    x->nlayers = dmuon_plan_layer_count(p);
    x->root = x->nlayers > 1 && !strcmp(dmuon_plan_layer_name(p, 0), "(root)");
    return DMUON_OK;
}

/* Groups, order, packing and the pool for x->opts.owner_parts. */
static dmuon_rc build_parts(dmuon_layout *x)
{
    DMUON_TRY(groups(x));
    DMUON_TRY(order_and_pack(x));
    x->events = st(x)->all;
    x->nevents = st(x)->nall;
    for (int k = 0; k < DMUON_BLOCK_KINDS; k++)
        if (k != DMUON_BLOCK_STAGING)
            x->space[k].bytes = live_peak(x, 1u << k);
    pool_map(x);
    return DMUON_OK;
}

static dmuon_rc build_common(dmuon_layout *x)
{
    DMUON_TRY(regions(x));
    DMUON_TRY(publish_copy(x));
    dir_region(x);
    prefetch_targets(x);
    step_sizes(x);
    dmuon_owner_parts want = x->opts.owner_parts;
    if (!x->ops->owners || x->ops->owned == DMUON_ALGO_DEFAULT)
        want = DMUON_OWNER_PARTS_PERSISTENT;   /* no owned region: no window either way */
    if (want != DMUON_OWNER_PARTS_AUTO) {
        x->opts.owner_parts = want;
        return build_parts(x);
    }
    /* both, the smaller pool kept (the same choice on every rank: the pool
     * is common) */
    x->opts.owner_parts = DMUON_OWNER_PARTS_PER_LAYER;
    DMUON_TRY(build_parts(x));
    int64_t per_layer = x->map.total;
    x->opts.owner_parts = DMUON_OWNER_PARTS_PERSISTENT;
    DMUON_TRY(build_parts(x));
    if (per_layer < x->map.total) {
        x->opts.owner_parts = DMUON_OWNER_PARTS_PER_LAYER;
        DMUON_TRY(build_parts(x));
    }
    return DMUON_OK;
}

static dmuon_rc layout_new(const dmuon_plan *p, const dmuon_layout_opts *opts, dmuon_layout **out)
{
    *out = NULL;
    layout_impl *li = calloc(1, sizeof *li);
    if (!li)
        return DMUON_FAIL(DMUON_ENOMEM, "layout: out of memory");
    dmuon_layout *x = &li->pub;
    dmuon_rc rc = resolve(p, opts, x);
    if (rc) {
        free(li);
        return rc;
    }
    size_t np = 0, nm = 0, nseg = 0;
    dmuon_plan_params(p, &np);
    dmuon_plan_members(p, &nm);
    for (size_t l = 0; l < x->nlayers; l++) {
        size_t k = 0;
        dmuon_plan_layer_segments(p, l, &k);
        nseg += k;
    }
    struct carve c = {NULL, 0};
    lay_store(&c, &li->s, x->nlayers, np, nseg, nm, x->shard_size);
    c.p = calloc(1, c.off);
    if (!c.p) {
        free(li);
        return DMUON_FAIL(DMUON_ENOMEM, "layout: out of memory for %zu bytes", c.off);
    }
    x->mem_block = c.p;
    c.off = 0;
    lay_store(&c, &li->s, x->nlayers, np, nseg, nm, x->shard_size);
    x->nparams = np;
    x->layers = li->s.layers;
    x->params = li->s.params;
    x->pieces = li->s.pieces;
    *out = x;
    return DMUON_OK;
}

void dmuon_layout_free(dmuon_layout *x)
{
    if (!x)
        return;
    free(x->mem_block);
    free((layout_impl *)x);
}

dmuon_rc dmuon_layout_build(const dmuon_plan *p, const dmuon_layout_opts *opts,
                            dmuon_layout **out)
{
    dmuon_layout *x = NULL;
    *out = NULL;
    DMUON_TRY(layout_new(p, opts, &x));
    dmuon_rc rc = build_common(x);
    if (rc == DMUON_OK)
        rc = rank_part(x, x->opts.rank);
    if (rc == DMUON_OK)
        rc = dmuon_layout_check(x);
    if (rc != DMUON_OK) {
        dmuon_layout_free(x);
        return rc;
    }
    *out = x;
    return DMUON_OK;
}

dmuon_rc dmuon_layout_build_busiest(const dmuon_plan *p, const dmuon_layout_opts *opts,
                                    dmuon_layout **out)
{
    dmuon_layout *x = NULL;
    dmuon_layout_opts o;
    *out = NULL;
    if (opts)
        o = *opts;
    else
        dmuon_layout_opts_init(&o);
    o.rank = 0;
    DMUON_TRY(layout_new(p, &o, &x));
    dmuon_rc rc = build_common(x);
    int32_t best = 0;
    int64_t most = -1;
    for (int32_t r = 0; r < x->ranks && rc == DMUON_OK; r++) {
        rc = rank_part(x, r);
        if (rc == DMUON_OK && x->mem.total_bytes > most) {
            most = x->mem.total_bytes;
            best = r;
        }
    }
    if (rc == DMUON_OK)
        rc = rank_part(x, best);
    if (rc == DMUON_OK)
        rc = dmuon_layout_check(x);
    if (rc != DMUON_OK) {
        dmuon_layout_free(x);
        return rc;
    }
    *out = x;
    return DMUON_OK;
}

dmuon_rc dmuon_layout_set_rank(dmuon_layout *x, int32_t rank)
{
    if (rank < 0 || rank >= x->ranks)
        return DMUON_FAIL(DMUON_EINVAL, "layout: rank %d outside [0, %d)", (int)rank,
                          (int)x->ranks);
    DMUON_TRY(rank_part(x, rank));
    return dmuon_layout_check(x);
}

/* -------------------------------------------------------------- check -- */

typedef struct {
    int32_t kind, layer;
    int64_t lo, hi;
} live_range;

/* The bytes of a block of kind k of layer l, aligned as packed. */
static int64_t block_bytes(const dmuon_layout *x, int k, int32_t l)
{
    return k == DMUON_BLOCK_STEP ? step_block(x)
                                 : dmuon_pool_align(x->layers[l].bytes[k]);
}

/* Replays the plan's order: every acquisition is its kind's next one,
 * inside its space, and disjoint from every block live in that space at
 * that moment, whatever its kind (the staging has a space of its own). */
static dmuon_rc replay(const dmuon_layout *x, live_range *live)
{
    size_t nlive = 0, a[DMUON_BLOCK_KINDS] = {0};
    for (size_t e = 0; e < x->nevents; e++) {
        const dmuon_layout_event *v = &x->events[e];
        const int k = v->kind;
        const int32_t l = v->layer;
        if (k < 0 || k >= DMUON_BLOCK_KINDS || l < 0 ||
            (k != DMUON_BLOCK_STEP && (size_t)l >= x->nlayers))
            return DMUON_FAIL(DMUON_ECHECK, "layout: event %zu names kind %d, layer %d", e, k,
                              (int)l);
        const char *ln = k == DMUON_BLOCK_STEP ? "(step)" : dmuon_plan_layer_name(x->plan, (size_t)l);
        if (!v->acquire) {
            size_t i = 0;
            while (i < nlive && (live[i].layer != l || live[i].kind != k))
                i++;
            if (i == nlive)
                return DMUON_FAIL(DMUON_ECHECK, "layout: event %zu releases the %s block of "
                                  "'%s', which is not live", e, dmuon_block_name(k), ln);
            live[i] = live[--nlive];
            continue;
        }
        const dmuon_layout_space *sp = &x->space[k];
        if (a[k] >= sp->nacq || sp->acq_layer[a[k]] != l)
            return DMUON_FAIL(DMUON_ECHECK, "layout: %s acquisition %zu is not layer '%s''s",
                              dmuon_block_name(k), a[k], ln);
        const bool staging = k == DMUON_BLOCK_STAGING;
        const int64_t space = staging ? sp->bytes : x->work_bytes;
        int64_t lo = sp->acq_off[a[k]++], hi = lo + block_bytes(x, k, l);
        if (lo < 0 || lo % DMUON_POOL_ALIGN || hi > space)
            return DMUON_FAIL(DMUON_ECHECK, "layout: %s block of '%s' at [%lld, %lld) is not "
                              "an aligned range of its %lld-byte space", dmuon_block_name(k), ln,
                              (long long)lo, (long long)hi, (long long)space);
        for (size_t i = 0; i < nlive; i++) {
            if (live[i].layer == l && live[i].kind == k)
                return DMUON_FAIL(DMUON_ECHECK, "layout: %s block of '%s' acquired while it is "
                                  "live", dmuon_block_name(k), ln);
            if ((live[i].kind == DMUON_BLOCK_STAGING) != staging)
                continue;
            if (lo < live[i].hi && live[i].lo < hi && hi > lo)
                return DMUON_FAIL(DMUON_ECHECK, "layout: the %s block of '%s' [%lld, %lld) and "
                                  "the %s block of '%s' [%lld, %lld) are live at once and "
                                  "overlap", dmuon_block_name(live[i].kind),
                                  live[i].kind == DMUON_BLOCK_STEP
                                      ? "(step)"
                                      : dmuon_plan_layer_name(x->plan, (size_t)live[i].layer),
                                  (long long)live[i].lo, (long long)live[i].hi,
                                  dmuon_block_name(k), ln, (long long)lo, (long long)hi);
        }
        live[nlive++] = (live_range){k, l, lo, hi};
    }
    for (int k = 0; k < DMUON_BLOCK_KINDS; k++)
        if (a[k] != x->space[k].nacq)
            return DMUON_FAIL(DMUON_ECHECK, "layout: %s has %zu acquisitions, its events %zu",
                              dmuon_block_name(k), x->space[k].nacq, a[k]);
    return DMUON_OK;
}

/* Pieces of one kind: inside [0, cap) of their arrays, and disjoint. */
static dmuon_rc check_pieces(const dmuon_layout *x, bool owned, int64_t cap)
{
    for (size_t i = 0; i < x->npieces; i++) {
        const dmuon_layout_piece *a = &x->pieces[i];
        if (a->owned != owned)
            continue;
        if (a->lo >= a->hi || a->pos < 0 || a->pos + (a->hi - a->lo) > cap)
            return DMUON_FAIL(DMUON_ECHECK, "layout: piece %zu [%lld, %lld) at %lld is outside "
                              "the %lld elements of the rank's %s", i, (long long)a->lo,
                              (long long)a->hi, (long long)a->pos, (long long)cap,
                              owned ? "owner window" : "even shards");
        for (size_t j = i + 1; j < x->npieces; j++) {
            const dmuon_layout_piece *b = &x->pieces[j];
            if (b->owned == owned && a->pos < b->pos + (b->hi - b->lo) &&
                b->pos < a->pos + (a->hi - a->lo))
                return DMUON_FAIL(DMUON_ECHECK, "layout: pieces %zu and %zu overlap in the "
                                  "rank's %s", i, j, owned ? "owner window" : "even shards");
        }
    }
    return DMUON_OK;
}

dmuon_rc dmuon_layout_check(const dmuon_layout *x)
{
    live_range *live = malloc((DMUON_BLOCK_KINDS * x->nlayers + 1) * sizeof *live);
    if (!live)
        return DMUON_FAIL(DMUON_ENOMEM, "layout: out of memory");
    dmuon_rc rc = replay(x, live);
    free(live);
    DMUON_TRY(rc);
    const dmuon_pool_map *m = &x->map;
    const int64_t want[DMUON_SPACE_COUNT] = {x->staging_base + x->space[DMUON_BLOCK_STAGING].bytes,
                                             x->work_bytes, -1};
    int64_t end = 0;
    for (int s = 0; s < DMUON_SPACE_COUNT; s++) {
        if (m->space_off[s] < end || m->space_off[s] % DMUON_POOL_BASE_ALIGN ||
            (want[s] >= 0 && m->space_bytes[s] != want[s]))
            return DMUON_FAIL(DMUON_ECHECK, "layout: pool space %s at %lld (%lld bytes) is "
                              "misplaced or mis-sized", dmuon_pool_space_name(s),
                              (long long)m->space_off[s], (long long)m->space_bytes[s]);
        end = m->space_off[s] + m->space_bytes[s];
    }
    if (end > m->total)
        return DMUON_FAIL(DMUON_ECHECK, "layout: the pool's spaces end at %lld, past its %lld "
                          "bytes", (long long)end, (long long)m->total);
    for (int r = 0; r < DMUON_WIN_COUNT; r++)
        if (m->win_off[r] < m->space_off[DMUON_SPACE_WINDOW] || m->win_off[r] % DMUON_POOL_ALIGN ||
            m->win_off[r] > m->space_off[DMUON_SPACE_WINDOW] + m->space_bytes[DMUON_SPACE_WINDOW])
            return DMUON_FAIL(DMUON_ECHECK, "layout: window region %d at %lld is outside the "
                              "window space", r, (long long)m->win_off[r]);
    DMUON_TRY(check_pieces(x, true, x->win_elems));
    DMUON_TRY(check_pieces(x, false, x->even_total));
    const dmuon_layout_memory *y = &x->mem;
    int64_t total = y->pool_bytes + y->state_bytes;
    int64_t least = total - y->work_bytes + y->live_peak_bytes;
    if (y->total_bytes != total || y->least_bytes != least || y->least_bytes > total ||
        y->pool_bytes != m->total || y->live_peak_bytes > y->work_bytes ||
        y->scratch_bytes > x->step_scratch_bytes || y->ns_workspace_bytes > x->step_ns_bytes ||
        x->win_elems * 4 + (x->ops->replicated ? x->even_total * 4 : 0) > x->step_dir_bytes ||
        y->ctrl_bytes + y->work_bytes + y->window_space_bytes > y->pool_bytes)
        return DMUON_FAIL(DMUON_ECHECK, "layout: the memory figures do not add up (total %lld, "
                          "least %lld, pool %lld)", (long long)y->total_bytes,
                          (long long)y->least_bytes, (long long)y->pool_bytes);
    return DMUON_OK;
}

uint64_t dmuon_layout_digest(const dmuon_layout *x)
{
    uint64_t d = dmuon_digest(&x->map, sizeof x->map, DMUON_DIGEST_SEED);
    int64_t g[4] = {x->ctrl_words_bytes, x->staging_base, x->ngroups, x->opts.owner_parts};
    d = dmuon_digest(g, sizeof g, d);
    for (int k = 0; k < DMUON_BLOCK_KINDS; k++) {
        const dmuon_layout_space *sp = &x->space[k];
        d = dmuon_digest(sp->acq_layer, sp->nacq * sizeof *sp->acq_layer, d);
        d = dmuon_digest(sp->acq_off, sp->nacq * sizeof *sp->acq_off, d);
        d = dmuon_digest(&sp->bytes, sizeof sp->bytes, d);
    }
    int64_t w[5] = {x->work_bytes, x->step_off, x->step_scratch_bytes, x->step_ns_bytes,
                    x->step_dir_bytes};
    return dmuon_digest(w, sizeof w, d);
}

/* ------------------------------------------------------------- report -- */

static double gib(int64_t b) { return (double)b / 1073741824.0; }

void dmuon_layout_print_memory(const dmuon_layout *x, FILE *f)
{
    const dmuon_layout_memory *m = &x->mem;
    const char *big = m->largest_layer >= 0
                          ? dmuon_plan_layer_name(x->plan, (size_t)m->largest_layer)
                          : "-";
    fprintf(f, "\n  memory per rank, rank %d (the most; GiB): line %s, ZeRO-%d, prefetch %d, "
               "%s backend\n", (int)x->opts.rank, dmuon_line_name(x->opts.line),
            x->opts.zero_stage, x->opts.prefetch, dmuon_backend_name(x->opts.backend));
    fprintf(f, "  %-40s %10.2f\n", "optimizer state (F32, private)", gib(m->state_bytes));
    fprintf(f, "  %-40s %10.2f   owner parts %s%s\n", "windows (owner, shards, copy)",
            gib(m->window_space_bytes), dmuon_owner_parts_name(x->opts.owner_parts),
            x->opts.owner_parts == DMUON_OWNER_PARTS_PERSISTENT
                ? " (owner windows)"
                : " (in the working space)");
    fprintf(f, "  %-40s %10.2f   packed by lifetime; at most at once:\n", "working space",
            gib(m->work_bytes));
    fprintf(f, "  %-40s %10.2f   largest: '%s', %.2f\n", "    gathered parameters",
            gib(m->param_live_bytes), big, gib(m->largest_layer_bytes));
    fprintf(f, "  %-40s %10.2f\n", "    F32 gradient blocks", gib(m->grad_live_bytes));
    fprintf(f, "  %-40s %10.2f\n", "    F32 weight views", gib(m->view_live_bytes));
    fprintf(f, "  %-40s %10.2f\n", "    owner parts (gather, reduction)",
            gib(m->window_live_bytes));
    fprintf(f, "  %-40s %10.2f   of which the step's directions %.2f\n",
            "    step: scratch, Newton-Schulz, directions", gib(m->step_bytes),
            gib(m->step_dir_bytes));
    fprintf(f, "  %-40s %10.2f   of which reduce staging %.2f\n", "operators' control areas",
            gib(m->ctrl_bytes), gib(m->staging_bytes));
    fprintf(f, "  %-40s %10.2f   (every step, the first included)\n", "total",
            gib(m->total_bytes));
    fprintf(f, "  %-40s %10.2f   (the working space's live peak)\n", "least",
            gib(m->least_bytes));
}

void dmuon_layout_memory_json(const dmuon_layout *x, dmuon_json *w)
{
    const dmuon_layout_memory *m = &x->mem;
    dmuon_json_kint(w, "rank", x->opts.rank);
    dmuon_json_kstr(w, "line", dmuon_line_name(x->opts.line));
    dmuon_json_kint(w, "zero_stage", x->opts.zero_stage);
    dmuon_json_kint(w, "prefetch", x->opts.prefetch);
    dmuon_json_kstr(w, "backend", dmuon_backend_name(x->opts.backend));
    dmuon_json_kstr(w, "owner_parts", dmuon_owner_parts_name(x->opts.owner_parts));
    dmuon_json_kint(w, "total_bytes", m->total_bytes);
    dmuon_json_kint(w, "first_step_bytes", m->total_bytes);
    dmuon_json_kint(w, "least_bytes", m->least_bytes);
    dmuon_json_kint(w, "live_peak_bytes", m->live_peak_bytes);
    dmuon_json_kint(w, "pool_bytes", m->pool_bytes);
    dmuon_json_kint(w, "ctrl_bytes", m->ctrl_bytes);
    dmuon_json_kint(w, "staging_bytes", m->staging_bytes);
    dmuon_json_kint(w, "work_bytes", m->work_bytes);
    dmuon_json_kint(w, "param_live_bytes", m->param_live_bytes);
    dmuon_json_kint(w, "grad_live_bytes", m->grad_live_bytes);
    dmuon_json_kint(w, "view_live_bytes", m->view_live_bytes);
    dmuon_json_kint(w, "window_live_bytes", m->window_live_bytes);
    dmuon_json_kint(w, "step_bytes", m->step_bytes);
    dmuon_json_kint(w, "step_dir_bytes", m->step_dir_bytes);
    dmuon_json_kint(w, "window_space_bytes", m->window_space_bytes);
    dmuon_json_kint(w, "windows_bytes", m->window_space_bytes);
    dmuon_json_kint(w, "state_bytes", m->state_bytes);
    dmuon_json_kint(w, "scratch_bytes", m->scratch_bytes);
    dmuon_json_kint(w, "ns_workspace_bytes", m->ns_workspace_bytes);
    dmuon_json_kint(w, "dir_bytes", m->dir_bytes);
    dmuon_json_kint(w, "line_b_dir_bytes", m->dir_bytes);
    dmuon_json_kint(w, "optimizer_bytes", m->optimizer_bytes);
    dmuon_json_kint(w, "owner_window_bytes", m->owner_window_bytes);
    dmuon_json_kint(w, "window_bytes", m->owner_window_bytes);
    dmuon_json_kstr(w, "gathered_layer", m->largest_layer >= 0
                                             ? dmuon_plan_layer_name(x->plan,
                                                                     (size_t)m->largest_layer)
                                             : "");
    dmuon_json_kint(w, "gathered_layer_bytes", m->largest_layer_bytes);
}
