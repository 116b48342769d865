/*
 * test_layout.c — the layout as a pure object (dmuon/layout.h), no MPI:
 * over built models (with and without a root layer, dense and MoE-like),
 * FSDP and HSDP, lines A-D, ZeRO-2/3, prefetch 0/1, BF16 and F32
 * parameters, for every rank:
 *   - blocks live at one moment of the plan's order never overlap: replayed
 *     here from the events and offsets, independently of dmuon_layout_check;
 *   - every rank's shared part agrees (map, spaces, digest);
 *   - the sizes add up to the figures;
 *   - the pieces cover the parameters exactly (owned matrices once over the
 *     world; even shards once per shard group);
 * and dmuon_layout_check fails when two live ranges are made to overlap.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "dmuon/layout.h"
#include "dmuon/model.h"
#include "dmuon/plan.h"

/* A llama-like inventory: embeddings, `layers` blocks, final norm, head
 * (root: every one of them outside the blocks; none: blocks only). */
static dmuon_model *model_of(int layers, int d, bool root, bool moe)
{
    dmuon_tensor_spec t[256];
    size_t n = 0;
    char names[256][96];
#define T(nd, a, b, c, fmt, ...)                                                 \
    do {                                                                         \
        snprintf(names[n], sizeof names[n], fmt, __VA_ARGS__);                   \
        t[n] = (dmuon_tensor_spec){names[n], nd, {a, b, c}, DMUON_BF16};         \
        n++;                                                                     \
    } while (0)
    if (root)
        T(2, 4 * d, d, 0, "%s", "model.embed_tokens.weight");
    for (int l = 0; l < layers; l++) {
        T(2, d, d, 0, "model.layers.%d.self_attn.q_proj.weight", l);
        T(2, d / 2, d, 0, "model.layers.%d.self_attn.k_proj.weight", l);
        T(1, d, 0, 0, "model.layers.%d.input_layernorm.weight", l);
        if (moe)
            T(3, 4, 2 * d, d, "model.layers.%d.mlp.experts.down_proj", l);
        else
            T(2, 3 * d, d + l, 0, "model.layers.%d.mlp.up_proj.weight", l);
        T(1, 3, 0, 0, "model.layers.%d.mlp.bias", l);
    }
    if (root) {
        T(1, d, 0, 0, "%s", "model.norm.weight");
        T(2, 4 * d, d, 0, "%s", "lm_head.weight");
    }
#undef T
    dmuon_model *m = NULL;
    assert_int_equal(dmuon_model_build("test_layout", t, n, NULL, &m), DMUON_OK);
    return m;
}

static dmuon_plan *plan_of(const dmuon_model *m, int nodes, int k, dmuon_sharding sh,
                           dmuon_dtype pdt)
{
    dmuon_plan_opts o;
    dmuon_plan_opts_init(&o);
    o.nodes = nodes;
    o.gpus_per_node = k;
    o.sharding = sh;
    o.cost = DMUON_COST_ELEMENTS;
    o.small_unit_bytes = 0;
    o.param_dtype = pdt;
    dmuon_plan *p = NULL;
    assert_int_equal(dmuon_plan_build(m, &o, &p), DMUON_OK);
    return p;
}

/* The bytes a block takes, aligned as the header says. */
static int64_t bytes_of(const dmuon_layout *x, int k, int32_t l)
{
    return k == DMUON_BLOCK_STEP ? x->step_scratch_bytes + x->step_ns_bytes + x->step_dir_bytes
                                 : (x->layers[l].bytes[k] + 63) / 64 * 64;
}

/* The plan's order replayed: no two blocks live at once in one space
 * overlap (parameter, gradient and view blocks and the step's memory share
 * the working space; the staging has its own), all inside their space.
 * Written here from the header's rules. */
static void replay(const dmuon_layout *x)
{
    size_t n = DMUON_BLOCK_KINDS * (x->nlayers + 1);
    int64_t *lo = calloc(n, sizeof *lo), *hi = calloc(n, sizeof *hi);
    bool *live = calloc(n, sizeof *live);
    size_t a[DMUON_BLOCK_KINDS] = {0};
    for (size_t e = 0; e < x->nevents; e++) {
        const dmuon_layout_event *v = &x->events[e];
        int k = v->kind;
        size_t b = (size_t)k * (x->nlayers + 1) + (size_t)v->layer;
        if (!v->acquire) {
            assert_true(live[b]);
            live[b] = false;
            continue;
        }
        assert_false(live[b]);
        assert_int_equal(x->space[k].acq_layer[a[k]], v->layer);
        lo[b] = x->space[k].acq_off[a[k]++];
        hi[b] = lo[b] + bytes_of(x, k, v->layer);
        int64_t space = k == DMUON_BLOCK_STAGING ? x->space[k].bytes : x->work_bytes;
        assert_true(lo[b] >= 0 && lo[b] % 64 == 0 && hi[b] <= space);
        for (size_t j = 0; j < n; j++) {
            bool staging = (int)(j / (x->nlayers + 1)) == DMUON_BLOCK_STAGING;
            if (live[j] && staging == (k == DMUON_BLOCK_STAGING) && hi[b] > lo[b] && hi[j] > lo[j])
                assert_true(hi[b] <= lo[j] || hi[j] <= lo[b]);
        }
        live[b] = true;
    }
    for (int k = 0; k < DMUON_BLOCK_KINDS; k++)
        assert_int_equal(a[k], x->space[k].nacq);
    free(lo);
    free(hi);
    free(live);
}

/* Each figure is the sum the header gives. */
static void sums(const dmuon_layout *x)
{
    const dmuon_layout_memory *m = &x->mem;
    assert_int_equal(m->total_bytes, m->pool_bytes + m->state_bytes);
    assert_int_equal(m->pool_bytes, x->map.total);
    assert_true(m->ctrl_bytes + m->work_bytes + m->window_space_bytes <= m->pool_bytes);
    assert_int_equal(m->work_bytes, x->work_bytes);
    assert_true(m->least_bytes <= m->total_bytes);
    assert_int_equal(m->least_bytes, m->total_bytes - m->work_bytes + m->live_peak_bytes);
    assert_true(m->live_peak_bytes <= m->work_bytes);
    assert_true(m->param_live_bytes + m->grad_live_bytes + m->view_live_bytes +
                    m->window_live_bytes >= m->live_peak_bytes - m->step_bytes);
    int64_t we = x->win_elems, ee = x->even_total;
    assert_int_equal(m->state_bytes, (3 * we + 4 * ee) * 4);
    /* the step's directions: the largest window, line B the even shards too */
    assert_true(m->step_dir_bytes >= (x->max_win_elems +
                                      (x->opts.line == DMUON_LINE_B ? ee : 0)) * 4);
    assert_int_equal(m->step_bytes,
                     x->step_scratch_bytes + x->step_ns_bytes + x->step_dir_bytes);
    assert_true(m->scratch_bytes <= x->step_scratch_bytes);
    assert_true(m->ns_workspace_bytes <= x->step_ns_bytes);
    /* the largest layer's block fits; the step's memory is in the space */
    assert_true(m->param_live_bytes >= m->largest_layer_bytes);
    assert_true(x->step_off + m->step_bytes <= x->work_bytes);
    if (x->view_alias)
        assert_int_equal(m->view_live_bytes, 0);
}

/* The owner parts as resolved: owner windows sized by the largest window,
 * or per-layer blocks that hold every owner's part of the layer at the
 * table's (relative) offsets; never both. */
static void owner_parts(const dmuon_layout *x)
{
    const bool per_layer = x->opts.owner_parts == DMUON_OWNER_PARTS_PER_LAYER;
    assert_true(per_layer || x->opts.owner_parts == DMUON_OWNER_PARTS_PERSISTENT);
    int64_t pwin = x->map.win_off[DMUON_WIN_GRAD] - x->map.win_off[DMUON_WIN_PARAM];
    int64_t gwin = x->map.win_off[DMUON_WIN_EVEN] - x->map.win_off[DMUON_WIN_GRAD];
    if (per_layer) {
        assert_int_equal(pwin, 0);
        assert_int_equal(gwin, 0);
        assert_int_equal(x->space[DMUON_BLOCK_SOURCE].bytes > 0, !x->hsdp);
        assert_true(x->space[DMUON_BLOCK_RECV].bytes > 0);
    } else {
        assert_true(pwin >= (x->hsdp ? 0 : x->max_win_elems * x->dsize));
        assert_true(gwin >= x->max_win_elems * 4);
        assert_int_equal(x->space[DMUON_BLOCK_SOURCE].nacq, 0);
        assert_int_equal(x->space[DMUON_BLOCK_RECV].nacq, 0);
    }
    for (size_t l = 0; l < x->nlayers; l++) {
        const dmuon_layout_layer *L = &x->layers[l];
        for (int k = DMUON_GRP_OWN_GATHER; k <= DMUON_GRP_OWN_REDUCE; k++) {
            const dmuon_layout_group *g = &L->group[k];
            if (!g->n || (k == DMUON_GRP_OWN_GATHER && x->hsdp))
                continue;
            const int64_t es = k == DMUON_GRP_OWN_GATHER ? x->dsize : 4;
            const int64_t cap = per_layer ? L->bytes[k == DMUON_GRP_OWN_GATHER
                                                         ? DMUON_BLOCK_SOURCE
                                                         : DMUON_BLOCK_RECV]
                                          : x->max_win_elems * es;
            for (int j = 0; j < g->n; j++)
                assert_true(g->segs[j].window_offset >= 0 &&
                            g->segs[j].window_offset + g->segs[j].count * es <= cap);
        }
        if (!per_layer)
            assert_int_equal(L->bytes[DMUON_BLOCK_SOURCE] + L->bytes[DMUON_BLOCK_RECV], 0);
    }
}

/* Every rank's pieces: owned matrices once over the world, even elements
 * once per shard group. */
static void coverage(const dmuon_plan *p, dmuon_layout *x)
{
    size_t np = 0;
    const dmuon_plan_param *pp = dmuon_plan_params(p, &np);
    int64_t total = 0, owned = 0, even = 0;
    for (size_t i = 0; i < np; i++)
        total += pp[i].numel;
    int groups = x->hsdp ? x->nodes : 1;
    for (int32_t r = 0; r < x->ranks; r++) {
        assert_int_equal(dmuon_layout_set_rank(x, r), DMUON_OK);
        for (size_t i = 0; i < x->npieces; i++) {
            const dmuon_layout_piece *pc = &x->pieces[i];
            assert_true(pc->lo >= 0 && pc->hi <= pp[pc->param].numel && pc->lo < pc->hi);
            assert_true(pc->owned == x->params[pc->param].owned);
            if (pc->owned)
                owned += pc->hi - pc->lo;
            else
                even += pc->hi - pc->lo;
        }
    }
    int64_t want_owned = 0;
    for (size_t i = 0; i < np; i++)
        if (x->params[i].owned)
            want_owned += pp[i].numel;
    assert_int_equal(owned, want_owned);
    assert_int_equal(even, (total - want_owned) * groups);
}

typedef struct {
    int layers, d, nodes, k;
    bool root, moe;
    dmuon_sharding sh;
    dmuon_dtype pdt;
} shape;

static void check_all(const shape *c)
{
    dmuon_model *m = model_of(c->layers, c->d, c->root, c->moe);
    dmuon_plan *p = plan_of(m, c->nodes, c->k, c->sh, c->pdt);
    for (int line = DMUON_LINE_D; line <= DMUON_LINE_A; line++)
        for (int zero = 2; zero <= 3; zero++)
            for (int pf = 0; pf <= 1; pf++)
            for (int op = 0; op < DMUON_OWNER_PARTS_COUNT; op++) {
                dmuon_layout_opts o;
                dmuon_layout_opts_init(&o);
                o.line = (dmuon_line)line;
                o.zero_stage = zero;
                o.prefetch = pf;
                o.owner_parts = (dmuon_owner_parts)op;
                dmuon_layout *first = NULL;
                assert_int_equal(dmuon_layout_build(p, &o, &first), DMUON_OK);
                assert_true(first->view_alias == (c->pdt == DMUON_F32));
                owner_parts(first);
                if (line == DMUON_LINE_B || line == DMUON_LINE_A)
                    assert_int_equal(first->opts.owner_parts, DMUON_OWNER_PARTS_PERSISTENT);
                else if (op != DMUON_OWNER_PARTS_AUTO)
                    assert_int_equal(first->opts.owner_parts, op);
                if (op == DMUON_OWNER_PARTS_AUTO) {   /* the smaller pool of the two */
                    int64_t t[2];
                    for (int q = 0; q < 2; q++) {
                        dmuon_layout_opts oq = o;
                        oq.owner_parts = q ? DMUON_OWNER_PARTS_PER_LAYER
                                           : DMUON_OWNER_PARTS_PERSISTENT;
                        dmuon_layout *y = NULL;
                        assert_int_equal(dmuon_layout_build(p, &oq, &y), DMUON_OK);
                        t[q] = y->map.total;
                        dmuon_layout_free(y);
                    }
                    assert_int_equal(first->map.total, t[1] < t[0] ? t[1] : t[0]);
                    assert_int_equal(first->opts.owner_parts,
                                     t[1] < t[0] ? DMUON_OWNER_PARTS_PER_LAYER
                                                 : DMUON_OWNER_PARTS_PERSISTENT);
                }
                for (int32_t r = 0; r < dmuon_plan_ranks(p); r++) {
                    o.rank = r;
                    dmuon_layout *x = NULL;
                    assert_int_equal(dmuon_layout_build(p, &o, &x), DMUON_OK);
                    assert_int_equal(dmuon_layout_check(x), DMUON_OK);
                    replay(x);
                    sums(x);
                    /* what every rank must share */
                    assert_memory_equal(&x->map, &first->map, sizeof x->map);
                    assert_true(dmuon_layout_digest(x) == dmuon_layout_digest(first));
                    for (int k = 0; k < DMUON_BLOCK_KINDS; k++)
                        assert_int_equal(x->space[k].bytes, first->space[k].bytes);
                    assert_int_equal(x->work_bytes, first->work_bytes);
                    /* ZeRO-2 keeps every layer's parameters gathered */
                    if (zero == 2) {
                        int64_t all = 0;
                        for (size_t l = 0; l < x->nlayers; l++)
                            all += (x->layers[l].bytes[DMUON_BLOCK_PARAM] + 63) / 64 * 64;
                        assert_int_equal(x->space[DMUON_BLOCK_PARAM].bytes, all);
                    }
                    dmuon_layout_free(x);
                }
                coverage(p, first);
                dmuon_layout_free(first);
            }
    dmuon_plan_free(p);
    dmuon_model_free(m);
}

static void test_invariants(void **state)
{
    (void)state;
    static const shape cases[] = {
        {4, 16, 1, 4, true, false, DMUON_SHARD_FSDP, DMUON_BF16},
        {4, 16, 2, 2, true, false, DMUON_SHARD_HSDP, DMUON_BF16},
        {3, 24, 2, 2, false, false, DMUON_SHARD_FSDP, DMUON_F32},
        {5, 8, 2, 4, true, true, DMUON_SHARD_HSDP, DMUON_F32},
        {6, 16, 1, 1, true, false, DMUON_SHARD_FSDP, DMUON_BF16},
        {2, 32, 4, 2, false, true, DMUON_SHARD_FSDP, DMUON_BF16},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        check_all(&cases[i]);
}

/* ZeRO-3 with prefetch: one layer's parameter block at a time (released
 * once widened), so at most the largest layer's block is gathered at once,
 * and at most two layers' gradients (the reduction in flight) plus the
 * root's, which encloses the others; the working space holds no more than
 * the kinds' peaks together. */
static void test_reuse(void **state)
{
    (void)state;
    dmuon_model *m = model_of(8, 32, true, false);
    dmuon_plan *p = plan_of(m, 1, 4, DMUON_SHARD_FSDP, DMUON_BF16);
    dmuon_layout *x = NULL;
    assert_int_equal(dmuon_layout_build(p, NULL, &x), DMUON_OK);
    assert_true(x->root);
    int64_t big = 0, sum = 0, gmax[2] = {0, 0};
    for (size_t l = 0; l < x->nlayers; l++) {
        int64_t b = (x->layers[l].bytes[DMUON_BLOCK_PARAM] + 63) / 64 * 64;
        int64_t g = (x->layers[l].bytes[DMUON_BLOCK_GRAD] + 63) / 64 * 64;
        big = b > big ? b : big;
        sum += b;
        if (l > 0 && g > gmax[0]) {
            gmax[1] = gmax[0];
            gmax[0] = g;
        } else if (l > 0 && g > gmax[1]) {
            gmax[1] = g;
        }
    }
    assert_int_equal(x->space[DMUON_BLOCK_PARAM].bytes, big);
    assert_true(x->space[DMUON_BLOCK_PARAM].bytes < sum / 2);
    assert_true(x->work_bytes <= x->space[DMUON_BLOCK_PARAM].bytes +
                                     x->space[DMUON_BLOCK_GRAD].bytes +
                                     x->space[DMUON_BLOCK_VIEW].bytes +
                                     x->space[DMUON_BLOCK_SOURCE].bytes +
                                     x->space[DMUON_BLOCK_RECV].bytes + x->mem.step_bytes);
    int64_t groot = (x->layers[0].bytes[DMUON_BLOCK_GRAD] + 63) / 64 * 64;
    assert_true(x->space[DMUON_BLOCK_GRAD].bytes >= groot + gmax[1]);
    assert_true(x->space[DMUON_BLOCK_GRAD].bytes <= groot + gmax[0] + gmax[1]);
    /* prefetch targets: the next layer of the pass; the root's backward
     * prefetches the last block */
    assert_int_equal(x->layers[0].next_fwd, 1);
    assert_int_equal(x->layers[0].next_bwd, (int)x->nlayers - 1);
    assert_int_equal(x->layers[1].next_bwd, -1);
    assert_int_equal(x->layers[x->nlayers - 1].next_fwd, -1);
    assert_int_equal(x->layers[3].next_bwd, 2);
    dmuon_layout_free(x);
    dmuon_plan_free(p);
    dmuon_model_free(m);
}

/* Two live ranges made to overlap: the check names them. */
static void test_overlap_caught(void **state)
{
    (void)state;
    dmuon_model *m = model_of(4, 16, true, false);
    dmuon_plan *p = plan_of(m, 1, 2, DMUON_SHARD_FSDP, DMUON_BF16);
    static const int kinds[] = {DMUON_BLOCK_PARAM, DMUON_BLOCK_GRAD, DMUON_BLOCK_VIEW,
                                DMUON_BLOCK_RECV, DMUON_BLOCK_STAGING};
    for (size_t ki = 0; ki < 5; ki++) {
        const int k = kinds[ki];
        dmuon_layout *x = NULL;
        dmuon_layout_opts o;
        dmuon_layout_opts_init(&o);
        o.zero_stage = k == DMUON_BLOCK_PARAM ? 2 : 3;   /* ZeRO-3 widens one at a time */
        o.owner_parts = DMUON_OWNER_PARTS_PER_LAYER;
        assert_int_equal(dmuon_layout_build(p, &o, &x), DMUON_OK);
        /* two acquisitions whose blocks are live at once (the root's and
         * the next one): move the second onto the first */
        const dmuon_layout_space *sp = &x->space[k];
        size_t a = 0, b = 0, acq = 0;
        bool found = false;
        bool *live = calloc(x->nlayers, sizeof *live);
        size_t *at = calloc(x->nlayers, sizeof *at);
        for (size_t e = 0; e < sp->nev && !found; e++) {
            int32_t l = sp->ev[e].block;
            if (!sp->ev[e].acquire) {
                live[l] = false;
                continue;
            }
            for (size_t j = 0; j < x->nlayers && !found; j++)
                if (live[j] && x->layers[j].bytes[k] && x->layers[l].bytes[k]) {
                    a = at[j];
                    b = acq;
                    found = true;
                }
            live[l] = true;
            at[l] = acq++;
        }
        free(live);
        free(at);
        assert_true(found);
        int64_t *off = (int64_t *)(uintptr_t)sp->acq_off;
        assert_int_equal(dmuon_layout_check(x), DMUON_OK);
        int64_t keep = off[b];
        off[b] = off[a];
        assert_int_equal(dmuon_layout_check(x), DMUON_ECHECK);
        assert_non_null(strstr(dmuon_errmsg(), "overlap"));
        off[b] = keep;
        assert_int_equal(dmuon_layout_check(x), DMUON_OK);
        dmuon_layout_free(x);
    }
    /* across kinds in the working space: a view moved onto the gradient
     * block live beside it, a gather source onto its parameter block */
    static const int pair[2][2] = {{DMUON_BLOCK_GRAD, DMUON_BLOCK_VIEW},
                                   {DMUON_BLOCK_PARAM, DMUON_BLOCK_SOURCE}};
    for (int q = 0; q < 2; q++) {
        const int ka = pair[q][0], kb = pair[q][1];
        dmuon_layout *x = NULL;
        dmuon_layout_opts o;
        dmuon_layout_opts_init(&o);
        o.owner_parts = DMUON_OWNER_PARTS_PER_LAYER;
        assert_int_equal(dmuon_layout_build(p, &o, &x), DMUON_OK);
        size_t aa = 0, ab = 0, na = 0, nb = 0;
        bool la = false, found = false;
        for (size_t e = 0; e < x->nevents && !found; e++) {
            const dmuon_layout_event *v = &x->events[e];
            if (v->kind == ka && v->acquire) {
                aa = na++;
                la = true;
            } else if (v->kind == ka) {
                la = false;
            } else if (v->kind == kb && v->acquire) {
                ab = nb++;
                found = la;
            }
        }
        assert_true(found);
        int64_t *boff = (int64_t *)(uintptr_t)x->space[kb].acq_off;
        boff[ab] = x->space[ka].acq_off[aa];
        assert_int_equal(dmuon_layout_check(x), DMUON_ECHECK);
        assert_non_null(strstr(dmuon_errmsg(), "overlap"));
        dmuon_layout_free(x);
    }
    dmuon_plan_free(p);
    dmuon_model_free(m);
}

/* Bad options are refused naming the value. */
static void test_bad_options(void **state)
{
    (void)state;
    dmuon_model *m = model_of(2, 16, true, false);
    dmuon_plan *p = plan_of(m, 1, 2, DMUON_SHARD_FSDP, DMUON_BF16);
    dmuon_layout_opts o;
    dmuon_layout *x = (dmuon_layout *)1;
    dmuon_layout_opts_init(&o);
    o.rank = 2;
    assert_int_equal(dmuon_layout_build(p, &o, &x), DMUON_EINVAL);
    assert_null(x);
    assert_non_null(strstr(dmuon_errmsg(), "rank 2 outside [0, 2)"));
    dmuon_layout_opts_init(&o);
    o.zero_stage = 1;
    assert_int_equal(dmuon_layout_build(p, &o, &x), DMUON_EINVAL);
    assert_non_null(strstr(dmuon_errmsg(), "ZeRO stage 1"));
    dmuon_layout_opts_init(&o);
    o.prefetch = 2;
    assert_int_equal(dmuon_layout_build(p, &o, &x), DMUON_EINVAL);
    assert_non_null(strstr(dmuon_errmsg(), "prefetch depth 2"));
    dmuon_layout_opts_init(&o);
    o.line = (dmuon_line)7;
    assert_int_equal(dmuon_layout_build(p, &o, &x), DMUON_EINVAL);
    dmuon_layout_opts_init(&o);
    o.owner_parts = DMUON_OWNER_PARTS_COUNT;
    assert_int_equal(dmuon_layout_build(p, &o, &x), DMUON_EINVAL);
    assert_non_null(strstr(dmuon_errmsg(), "owner parts 3"));
    dmuon_owner_parts op = DMUON_OWNER_PARTS_PER_LAYER;
    assert_int_equal(dmuon_owner_parts_parse("windows", &op), DMUON_EINVAL);
    assert_int_equal(op, DMUON_OWNER_PARTS_PER_LAYER);
    assert_non_null(strstr(dmuon_errmsg(), "expected auto, persistent or per-layer"));
    assert_int_equal(dmuon_owner_parts_parse(NULL, &op), DMUON_EINVAL);
    for (int i = 0; i < DMUON_OWNER_PARTS_COUNT; i++) {
        assert_int_equal(dmuon_owner_parts_parse(dmuon_owner_parts_name((dmuon_owner_parts)i),
                                                 &op), DMUON_OK);
        assert_int_equal(op, i);
    }
    assert_string_equal(dmuon_owner_parts_name(DMUON_OWNER_PARTS_COUNT), "?");
    assert_int_equal(dmuon_layout_build(p, NULL, &x), DMUON_OK);
    assert_int_equal(dmuon_layout_set_rank(x, -1), DMUON_EINVAL);
    dmuon_layout_free(x);
    dmuon_layout_free(NULL);
    dmuon_plan_free(p);
    dmuon_model_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_invariants),
        cmocka_unit_test(test_reuse),
        cmocka_unit_test(test_overlap_caught),
        cmocka_unit_test(test_bad_options),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
