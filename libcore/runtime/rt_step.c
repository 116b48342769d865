/*
 * rt_step.c — the optimizer step on the owners (dmuon_rt_step after its
 * checks) and the checkpoint glue (dmuon_rt_save / load / export).
 *
 * Step order, identical on every rank:
 *   1. gradient check: every accumulated gradient this rank holds is
 *      finite (the lowest bad parameter index is agreed over the world),
 *      and its squares summed (HSDP even shards are replicated across
 *      nodes: node 0's copy counts); a bad gradient fails the step before
 *      any state changes, on every rank, naming the parameter;
 *   2. clipping by the global norm;
 *   3. owned matrices in layer order (Muon), each segment published as soon
 *      as its matrices are done (HSDP, line D);
 *      Newton–Schulz always sees the real out x in matrix: a transposed or
 *      strided one (gate/up halves or interleaved columns of a fused expert
 *      tensor) is gathered from the storage into scratch with its layout's
 *      strides (mat_place) and written back; the update scale uses the real
 *      m and n; parameters, gradients and momentum stay in storage order;
 *   4. even shards: AdamW; line B: the Nesterov direction of each Muon
 *      matrix is gathered whole and every rank runs Newton–Schulz on it;
 *   5. the new parameters written where the next gathers read them.
 * The accumulated gradients are cleared after the step (also after a
 * failed one: that step's gradients are dropped, no optimizer state moved).
 */
#include "rt_internal.h"

#include <assert.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dmuon/ckpt.h"
#include "dmuon/timer.h"
#include "plan_internal.h"

static float *piece_grad(dmuon_rt *rt, const rt_piece *pc)
{
    return (pc->owned ? rt->own_g : rt->even_g) + pc->pos;
}

/* --------------------------------------------------- matrix placement -- */

/* Where Muon matrix j of p lies in p's storage (dmuon/model.h, "Muon
 * matrices"): element (r, c) of the real m x n (out x in) matrix is storage
 * element *base + r * *rs + c * *cs.
 *   contiguous:            base j*m*n, rows n apart (row-major m x n)
 *   contiguous transposed: base j*m*n, rs 1, cs m (row-major n x m, [in, out])
 *   halves [E, n, 2m]:     base e*2mn + h*m, rs 1, cs 2m (e = j/2, h = j%2:
 *                          gate columns [0, m), up [m, 2m))
 *   interleaved:           base e*2mn + h, rs 2, cs 2m (gate even, up odd) */
static void mat_place(const rt_param *p, int64_t j, int64_t *base, int64_t *rs, int64_t *cs)
{
    int64_t m = p->m, n = p->n;
    switch (p->layout) {
    case DMUON_MAT_HALVES:
        *base = (j / 2) * 2 * m * n + (j % 2) * m;
        *rs = 1;
        *cs = 2 * m;
        return;
    case DMUON_MAT_INTERLEAVED:
        *base = (j / 2) * 2 * m * n + j % 2;
        *rs = 2;
        *cs = 2 * m;
        return;
    default:
        *base = j * m * n;
        *rs = p->transposed ? 1 : n;
        *cs = p->transposed ? m : 1;
    }
}

/* Matrices of p that share one contiguous block of storage: an expert's
 * gate and up in a strided layout, else each matrix alone. */
static int64_t mats_per_block(const rt_param *p)
{
    return p->layout == DMUON_MAT_CONTIGUOUS ? 1 : 2;
}

/* The plain placement: matrix j is the row-major block [j*m*n, (j+1)*m*n). */
static bool plain_place(const rt_param *p)
{
    return p->layout == DMUON_MAT_CONTIGUOUS && !p->transposed;
}

/* Copies matrix j of p out of storage (src[k] is storage element lo + k)
 * into dst (m x n row-major), or, with back, from dst into the storage
 * (the device table's strided copy). */
static dmuon_rc mat_copy(const dmuon_rt *rt, const rt_param *p, int64_t j, float *src, int64_t lo,
                         float *dst, bool back)
{
    int64_t base, rs, cs;
    mat_place(p, j, &base, &rs, &cs);
    return rt->elem->strided(dst, src + (base - lo), p->m, p->n, rs, cs, back, rt->stream);
}

/* The step's memory, the layout's range of the working space (nothing
 * else is live there during a step, dmuon/layout.h): the scratch (one
 * m x n matrix per owned matrix in the plain placement, three otherwise;
 * line B one block of directions and one matrix), then the Newton–Schulz
 * workspace, given to the NS context, then the directions every owned
 * matrix (line B: every even element too) gets before the step commits.
 * After the pool is built; the step allocates nothing. */
void rt_step_prepare(dmuon_rt *rt)
{
    unsigned char *step = rt->base + rt->space_off[DMUON_SPACE_WORK] + rt->lay->step_off;
    rt->scratch = (float *)step;
    rt->elem->ns_workspace(rt->ns, step + rt->lay->step_scratch_bytes, rt->lay->step_ns_bytes);
    step += rt->lay->step_scratch_bytes + rt->lay->step_ns_bytes;
    rt->own_o = (float *)step;
    rt->even_o = rt->lay->ops->replicated
                     ? (float *)(step + dmuon_pool_align(rt->lay->max_win_elems * 4))
                     : NULL;
}

dmuon_rc rt_grads_clear(dmuon_rt *rt)
{
    DMUON_TRY(rt->elem->zero(rt->own_g, rt->lay->win_elems * (int64_t)sizeof(float), rt->stream));
    return rt->elem->zero(rt->even_g, rt->lay->even_total * (int64_t)sizeof(float), rt->stream);
}

/* The outcome of a phase of the step, agreed over the world within the
 * deadline, in two rounds that both need every rank (so a rank that comes
 * late after the others timed out times out too instead of going on):
 *   1. MIN over {the lowest parameter whose update is not finite, the
 *      lowest rank with another error};
 *   2. SUM of the failing rank's code (the others give 0).
 * A non-numeric error wins (its rank keeps its own message); else a bad
 * parameter fails the step with DMUON_ENUMERIC naming it, on every rank. */
static dmuon_rc agree_outcome(dmuon_rt *rt, dmuon_rc rc, int bad, const char *what)
{
    int64_t low[2] = {bad, rc != DMUON_OK ? rt->topo.rank : INT_MAX};
    DMUON_TRY(rt_ctl_i64(rt, low, 2, DMUON_CTL_MIN, "step: outcome"));
    int64_t got = low[1] == rt->topo.rank ? (int64_t)rc : 0;
    DMUON_TRY(rt_ctl_i64(rt, &got, 1, DMUON_CTL_SUM, "step: outcome code"));
    if (low[1] != INT_MAX) {
        if (low[1] == rt->topo.rank)
            return rc;
        return DMUON_FAIL((dmuon_rc)got, "runtime: step %lld: rank %d failed (%s); no parameter "
                          "or optimizer state was changed", (long long)rt->steps + 1, (int)low[1],
                          dmuon_rc_name((dmuon_rc)got));
    }
    if (low[0] != INT_MAX)
        return DMUON_FAIL(DMUON_ENUMERIC, "runtime: step %lld: %s '%s' is not finite; no "
                          "parameter or optimizer state was changed", (long long)rt->steps + 1,
                          what, rt->params[low[0]].name);
    return DMUON_OK;
}

/* Step 1 and 2. */
static dmuon_rc check_and_clip(dmuon_rt *rt, const dmuon_rt_lrs *lrs)
{
    double sumsq = 0;
    int bad = INT_MAX;
    dmuon_rc rc = DMUON_OK;
    /* the arguments are checked inside the agreed part: a learning rate
     * refused on one rank fails the step on every rank alike */
    if (!lrs)
        rc = DMUON_FAIL(DMUON_EINVAL, "runtime: step needs learning rates (rank %d: lrs is NULL)",
                        rt->topo.rank);
    else if (!isfinite(lrs->muon_lr) || !isfinite(lrs->adamw_lr))
        rc = DMUON_FAIL(DMUON_EINVAL, "runtime: step needs finite learning rates (rank %d: muon "
                        "%g, adamw %g)", rt->topo.rank, lrs->muon_lr, lrs->adamw_lr);
    for (size_t i = 0; i < rt->lay->npieces; i++) {
        const rt_piece *pc = &rt->lay->pieces[i];
        bool count = pc->owned || !rt->hsdp || rt->topo.node_id == 0;
        double s = 0;
        int64_t at = -1;
        if (rc == DMUON_OK)
            rc = rt->elem->grad_check(piece_grad(rt, pc), pc->hi - pc->lo, &at, &s, rt->stream);
        if (at >= 0 && pc->param < bad)
            bad = pc->param;
        if (count)
            sumsq += s;
    }
    double gsum = sumsq;
    DMUON_TRY(agree_outcome(rt, rc, bad, "the gradient of"));
    /* the same learning rates on every rank: their minima and the minima
     * of their negations (maxima) in one reduction; a difference fails the
     * step on every rank alike, before anything is changed */
    double lr[4] = {lrs->muon_lr, lrs->adamw_lr, -lrs->muon_lr, -lrs->adamw_lr};
    DMUON_TRY(rt_ctl_f64(rt, lr, 4, DMUON_CTL_MIN, "step: learning rates"));
    for (int i = 0; i < 2; i++)
        if (lr[i] != -lr[2 + i])
            return DMUON_FAIL(DMUON_EINVAL, "runtime: step %lld: %s differs between the ranks "
                              "(%.17g to %.17g); no parameter or optimizer state was changed",
                              (long long)rt->steps + 1, i ? "adamw_lr" : "muon_lr", lr[i],
                              -lr[2 + i]);
    DMUON_TRY(rt_ctl_f64(rt, &gsum, 1, DMUON_CTL_SUM, "step: gradient norm"));
    rt->grad_norm = sqrt(gsum);
    double clip = rt->opts.optim.clip_norm;
    if (clip > 0 && rt->grad_norm > clip) {
        float c = (float)(clip / (rt->grad_norm + 1e-6));
        DMUON_TRY(rt->elem->scale(rt->own_g, rt->lay->win_elems, c, rt->stream));
        DMUON_TRY(rt->elem->scale(rt->even_g, rt->lay->even_total, c, rt->stream));
    }
    return DMUON_OK;
}

/* Step 3, computed: the orthogonalised direction of every owned matrix into
 * own_o (storage order), then the new momentum and master checked without
 * storing them.  Local.  A non-finite direction or update lowers *bad to
 * its parameter; other NS errors are returned. */
static dmuon_rc owned_directions(dmuon_rt *rt, double lr, int *bad)
{
    const dmuon_optim_opts *o = &rt->opts.optim;
    for (size_t i = 0; i < rt->lay->npieces; i++) {
        const rt_piece *pc = &rt->lay->pieces[i];
        if (!pc->owned)
            continue;
        const rt_param *p = &rt->params[pc->param];
        int64_t mn = p->m * p->n;
        bool plain = plain_place(p), finite = true;
        assert(rt->lay->scratch_elems >= (plain ? mn : 3 * mn));
        /* other placements: momentum and gradient of the real matrix
         * gathered into scratch, the direction written back in storage
         * order */
        float *u = rt->scratch, *sm = u + mn, *sg = sm + mn;
        float *m0 = rt->own_m + pc->pos, *g0 = rt->own_g + pc->pos, *o0 = rt->own_o + pc->pos;
        for (int64_t a = 0; a < pc->hi - pc->lo && finite; a += mn) {
            int64_t j = (pc->lo + a) / mn;
            double t0 = dmuon_now_ms();
            dmuon_rc rc;
            if (plain) {
                DMUON_TRY(rt->elem->direction(o, mn, m0 + a, g0 + a, u, rt->stream));
                rc = rt->elem->ns_run(rt->ns, u, p->m, p->n, o0 + a);
            } else {
                DMUON_TRY(mat_copy(rt, p, j, m0, pc->lo, sm, false));
                DMUON_TRY(mat_copy(rt, p, j, g0, pc->lo, sg, false));
                DMUON_TRY(rt->elem->direction(o, mn, sm, sg, u, rt->stream));
                rc = rt->elem->ns_run(rt->ns, u, p->m, p->n, u);
                if (rc == DMUON_OK)
                    rc = mat_copy(rt, p, j, o0, pc->lo, u, true);
            }
            rt->stats.ns_s += (dmuon_now_ms() - t0) / 1e3;
            rt->stats.ns_matrices++;
            if (rc == DMUON_ENUMERIC)
                finite = false;
            else if (rc != DMUON_OK)
                return rc;
            if (rt->pub_open)
                DMUON_TRY(rt_fail_comm(rt, dmuon_publish_progress(rt->pub)));
        }
        int64_t at = -1;
        if (finite)
            DMUON_TRY(rt->elem->muon_finish(o, lr, dmuon_muon_scale_of(o, p->m, p->n),
                                            pc->hi - pc->lo, rt->own_w + pc->pos, m0, g0, o0, 0,
                                            &at, rt->stream));
        finite = finite && at < 0;
        if (!finite && pc->param < *bad)
            *bad = pc->param;
    }
    return DMUON_OK;
}

/* Line B, layer l: the Nesterov directions of this rank's shard of its
 * Muon parameters (momentum unchanged) into mine (L->lay->shard elements).
 * Local. */
static dmuon_rc shard_directions(dmuon_rt *rt, size_t l, float *mine)
{
    const dmuon_optim_opts *o = &rt->opts.optim;
    const rt_layer *L = &rt->layers[l];
    DMUON_TRY(rt->elem->zero(mine, L->lay->shard * (int64_t)sizeof(float), rt->stream));
    for (size_t i = 0; i < rt->lay->npieces; i++) {
        const rt_piece *pc = &rt->lay->pieces[i];
        if (pc->owned || (size_t)pc->layer != l || rt->params[pc->param].role != DMUON_ROLE_MUON)
            continue;
        DMUON_TRY(rt->elem->direction(o, pc->hi - pc->lo, rt->even_m + pc->pos,
                                      rt->even_g + pc->pos, mine + (pc->pos - L->lay->even_pos),
                                      rt->stream));
    }
    return DMUON_OK;
}

/* Line B, layer l: Newton–Schulz of every Muon matrix of the gathered
 * directions full (even_pad elements), on every rank, and this rank's part
 * of the result into even_o.  The gather of layer next (< nlayers) is in
 * flight meanwhile: it is moved between matrices. */
static dmuon_rc replicated_ns(dmuon_rt *rt, size_t l, const float *full, size_t next, int *bad)
{
    const rt_layer *L = &rt->layers[l];
    for (int j = 0; j < L->lay->np; j++) {
        const rt_param *p = &rt->params[L->lay->params[j]];
        if (p->role != DMUON_ROLE_MUON)
            continue;
        int64_t mn = p->m * p->n, base = p->off - L->lay->own_elems;
        int64_t per = mats_per_block(p), span = per * mn;
        bool plain = plain_place(p);
        float *odir = rt->scratch;  /* the block's directions in storage order */
        float *mat = odir + span;   /* one real matrix (other placements) */
        assert(rt->lay->scratch_elems >= span + mn);
        for (int64_t b = 0; b < p->matrices / per; b++) {
            for (int64_t a = b * per; a < (b + 1) * per; a++) {
                double t0 = dmuon_now_ms();
                dmuon_rc rc;
                if (plain) {
                    rc = rt->elem->ns_run(rt->ns, full + base + a * mn, p->m, p->n, odir);
                } else {
                    rc = mat_copy(rt, p, a, (float *)full + base, 0, mat, false);
                    if (rc == DMUON_OK)
                        rc = rt->elem->ns_run(rt->ns, mat, p->m, p->n, mat);
                    if (rc == DMUON_OK)
                        rc = mat_copy(rt, p, a, odir, b * span, mat, true);
                }
                rt->stats.ns_s += (dmuon_now_ms() - t0) / 1e3;
                rt->stats.ns_matrices++;
                if (rc == DMUON_ENUMERIC) {
                    /* the same directions on every rank: every rank finds it */
                    if (L->lay->params[j] < *bad)
                        *bad = L->lay->params[j];
                    DMUON_TRY(rt->elem->zero(odir + (a - b * per) * mn,
                                             mn * (int64_t)sizeof(float), rt->stream));
                } else if (rc != DMUON_OK) {
                    return rc;
                }
                if (next < rt->nlayers)
                    DMUON_TRY(rt_dir_test(rt, next));
            }
            for (size_t i = 0; i < rt->lay->npieces; i++) {
                const rt_piece *pc = &rt->lay->pieces[i];
                if (pc->owned || pc->param != L->lay->params[j])
                    continue;
                int64_t lo = pc->lo > b * span ? pc->lo : b * span;
                int64_t hi = pc->hi < (b + 1) * span ? pc->hi : (b + 1) * span;
                if (lo < hi)
                    DMUON_TRY(rt->elem->copy(rt->even_o + pc->pos + (lo - pc->lo),
                                             odir + (lo - b * span),
                                             (hi - lo) * (int64_t)sizeof(float), RT_D2D,
                                             rt->stream));
            }
        }
    }
    return DMUON_OK;
}

/* The first layer from l on whose directions line B gathers (a Muon
 * parameter in its shard), or nlayers. */
static size_t next_dir_layer(const dmuon_rt *rt, size_t l)
{
    while (l < rt->nlayers && !rt->layers[l].dgrp)
        l++;
    return l;
}

/* Line B, computed: the directions of every layer gathered whole over the
 * shard group from the pool's dir region (two buffers), Newton–Schulz of
 * every Muon matrix on every rank, this rank's part into even_o.  The
 * gather of the next layer runs while this layer's Newton–Schulz does.
 * Collective: every rank starts and waits every layer's gather whatever
 * fails locally (the first local error is returned after the last wait,
 * for the agreement); a communication failure returns at once and leaves
 * a started gather to the failed runtime, which keeps its pool. */
static dmuon_rc replicated_directions(dmuon_rt *rt, int *bad)
{
    size_t n = rt->nlayers, cur = next_dir_layer(rt, 0);
    int b = 0;
    dmuon_rc rc = DMUON_OK;
    if (cur < n) {
        rc = shard_directions(rt, cur, rt_dir_mine(rt, b));
        DMUON_TRY(rt_dir_start(rt, cur, b));
    }
    while (cur < n) {
        size_t next = next_dir_layer(rt, cur + 1);
        if (next < n) {
            dmuon_rc r = shard_directions(rt, next, rt_dir_mine(rt, b ^ 1));
            rc = rc != DMUON_OK ? rc : r;
            DMUON_TRY(rt_dir_start(rt, next, b ^ 1));
        }
        DMUON_TRY(rt_dir_wait(rt, cur));
        if (rc == DMUON_OK) {
            rc = replicated_ns(rt, cur, rt_dir_full(rt, b), next, bad);
            if (rt->failed)
                return rc;
        }
        cur = next;
        b ^= 1;
    }
    return rc;
}

/* Step 4 (and line B's Muon shards), computed or committed: the update of
 * every even piece; with write 0 nothing is stored and *bad is lowered to
 * the first parameter whose new state is not finite. */
static dmuon_rc even_updates(dmuon_rt *rt, const dmuon_rt_lrs *lrs, int64_t t, int write,
                             int *bad)
{
    const dmuon_optim_opts *o = &rt->opts.optim;
    for (size_t i = 0; i < rt->lay->npieces; i++) {
        const rt_piece *pc = &rt->lay->pieces[i];
        if (pc->owned)
            continue;
        const rt_param *p = &rt->params[pc->param];
        int64_t n = pc->hi - pc->lo, at = -1;
        float *w = rt->even_w + pc->pos, *m = rt->even_m + pc->pos, *g = rt->even_g + pc->pos;
        if (p->role == DMUON_ROLE_ADAMW) {
            double decay = p->plan_role == DMUON_ROLE_MUON ? o->muon_weight_decay
                                                           : o->adamw_weight_decay;
            DMUON_TRY(rt->elem->adamw_step(o, lrs->adamw_lr, decay, t, n, w, m,
                                           rt->even_v + pc->pos, g, write, &at, rt->stream));
        } else {
            DMUON_TRY(rt->elem->muon_finish(o, lrs->muon_lr, dmuon_muon_scale_of(o, p->m, p->n),
                                            n, w, m, g, rt->even_o + pc->pos, write, &at,
                                            rt->stream));
        }
        if (at >= 0 && pc->param < *bad)
            *bad = pc->param;
        if (write)
            DMUON_TRY(rt_store_param(rt, pc, rt->base));
    }
    return DMUON_OK;
}

/* Step 5 for the owned matrices: the checked updates stored, each segment
 * published as soon as its matrices are done (HSDP). */
static dmuon_rc owned_commit(dmuon_rt *rt, double lr)
{
    const dmuon_optim_opts *o = &rt->opts.optim;
    for (size_t i = 0; i < rt->lay->npieces; i++) {
        const rt_piece *pc = &rt->lay->pieces[i];
        if (!pc->owned)
            continue;
        const rt_param *p = &rt->params[pc->param];
        int64_t at = -1;
        DMUON_TRY(rt->elem->muon_finish(o, lr, dmuon_muon_scale_of(o, p->m, p->n),
                                        pc->hi - pc->lo, rt->own_w + pc->pos, rt->own_m + pc->pos,
                                        rt->own_g + pc->pos, rt->own_o + pc->pos, 1, &at,
                                        rt->stream));
        DMUON_TRY(rt_store_param(rt, pc, rt->base));
        bool seg_end = i + 1 == rt->lay->npieces || !rt->lay->pieces[i + 1].owned ||
                       rt->lay->pieces[i + 1].layer != pc->layer || rt->lay->pieces[i + 1].seg != pc->seg;
        if (seg_end && rt->hsdp)
            DMUON_TRY(rt_pub_post(rt, (size_t)pc->layer, (size_t)pc->seg));
    }
    return DMUON_OK;
}

/* A step that failed before its commit: nothing was stored; the
 * accumulated gradients are dropped so the next micro-batch starts clean,
 * and the gradient norm reads NaN. */
static dmuon_rc step_failed(dmuon_rt *rt, dmuon_rc rc)
{
    dmuon_rc cr = rt_grads_clear(rt);
    rt->grad_norm = NAN;
    return rc != DMUON_OK ? rc : cr;
}

dmuon_rc rt_step(dmuon_rt *rt, const dmuon_rt_lrs *lrs)
{
    double t0 = dmuon_now_ms();
    rt->stats.ns_s = 0;
    rt->stats.ns_matrices = 0;
    rt->grad_norm = NAN;
    dmuon_rc rc = check_and_clip(rt, lrs);
    if (rc != DMUON_OK)
        return step_failed(rt, rc);
    int64_t t = rt->steps + 1;
    /* computed: every direction and every update, checked; nothing stored
     * outside scratch and the direction buffers */
    int bad = INT_MAX;
    rc = owned_directions(rt, lrs->muon_lr, &bad);
    if (!rt->failed) {
        dmuon_rc r = replicated_directions(rt, &bad);
        if (rc == DMUON_OK)
            rc = r;
    }
    if (rt->failed)   /* a communication failure: no agreement possible */
        return step_failed(rt, rc);
    if (rc == DMUON_OK)
        rc = even_updates(rt, lrs, t, 0, &bad);
    /* agreed before anything is stored or published: every rank commits,
     * or none does */
    rc = agree_outcome(rt, rc, bad, "the update of");
    if (rc != DMUON_OK)
        return step_failed(rt, rc);
    /* committed */
    DMUON_TRY(rt_pub_end(rt));
    DMUON_TRY(rt_pub_begin(rt));
    DMUON_TRY(owned_commit(rt, lrs->muon_lr));
    DMUON_TRY(even_updates(rt, lrs, t, 1, &bad));
    DMUON_TRY(rt_pub_finish(rt));
    DMUON_TRY(rt_grads_clear(rt));
    rt->steps = t;
    rt->stats.optim_s = (dmuon_now_ms() - t0) / 1e3;
    return DMUON_OK;
}

/* --------------------------------------------------------- checkpoints -- */

/* The settings a checkpoint records and a load compares (learning rates
 * are the trainer's, per step, and stay free). */
static const char *const hparam_names[] = {"momentum", "nesterov", "muon_weight_decay",
                                           "muon_scale", "beta1", "beta2", "eps",
                                           "adamw_weight_decay", "clip_norm"};
#define N_HPARAMS ((int)(sizeof hparam_names / sizeof *hparam_names))

static void hparams(const dmuon_rt *rt, dmuon_ckpt_meta *m)
{
    const dmuon_optim_opts *o = &rt->opts.optim;
    double v[N_HPARAMS] = {o->momentum, o->nesterov, o->muon_weight_decay, (double)o->scale,
                           o->beta1, o->beta2, o->eps, o->adamw_weight_decay, o->clip_norm};
    m->n_hparams = N_HPARAMS;
    for (int i = 0; i < m->n_hparams; i++) {
        m->hparam_names[i] = hparam_names[i];
        m->hparam_values[i] = v[i];
    }
    m->ns_variant = o->ns_variant;
}

/* Drops from m what opts.resume_override allows to differ from the
 * checkpoint: a list of names separated by commas or spaces, each a
 * hyperparameter of hparam_names, "ns_variant", or "all".  Local and the
 * same on every rank (same options).  Errors: DMUON_EINVAL naming an
 * unknown entry. */
static dmuon_rc apply_override(const dmuon_rt *rt, dmuon_ckpt_meta *m)
{
    /* the field need not be NUL-terminated: read within its size */
    char list[sizeof rt->opts.resume_override + 1];
    size_t len = strnlen(rt->opts.resume_override, sizeof rt->opts.resume_override);
    memcpy(list, rt->opts.resume_override, len);
    list[len] = '\0';
    const char *s = list;
    bool drop[N_HPARAMS] = {false}, ns = false;
    while (*s) {
        size_t n = strcspn(s, ", ");
        bool known = n == 3 && !strncmp(s, "all", 3);
        if (known) {
            ns = true;
            for (int i = 0; i < N_HPARAMS; i++)
                drop[i] = true;
        } else if (n == 10 && !strncmp(s, "ns_variant", 10)) {
            known = ns = true;
        }
        for (int i = 0; i < N_HPARAMS && !known && n; i++)
            if (strlen(hparam_names[i]) == n && !strncmp(s, hparam_names[i], n))
                known = drop[i] = true;
        if (n && !known)
            return DMUON_FAIL(DMUON_EINVAL, "runtime: resume_override entry '%.*s': expected "
                              "all, ns_variant, momentum, nesterov, muon_weight_decay, "
                              "muon_scale, beta1, beta2, eps, adamw_weight_decay or clip_norm",
                              (int)n, s);
        s += n;
        s += strspn(s, ", ");
    }
    int k = 0;
    for (int i = 0; i < m->n_hparams; i++)
        if (!drop[i]) {
            m->hparam_names[k] = m->hparam_names[i];
            m->hparam_values[k++] = m->hparam_values[i];
        }
    m->n_hparams = k;
    if (ns)
        m->ns_variant = NULL;
    return DMUON_OK;
}

/* The parameter table's digest: names, element counts and roles. */
static uint64_t table_digest(const dmuon_rt *rt)
{
    uint64_t d = DMUON_DIGEST_SEED;
    size_t np = 0;
    const dmuon_plan_param *pp = dmuon_plan_params(rt->plan, &np);
    for (size_t i = 0; i < np; i++) {
        d = dmuon_digest(pp[i].name, strlen(pp[i].name) + 1, d);
        int64_t v[2] = {pp[i].numel, (int64_t)pp[i].role};
        d = dmuon_digest(v, sizeof v, d);
    }
    return d;
}

static dmuon_rc ckpt_tables(dmuon_rt *rt, bool with_state, dmuon_ckpt_param **params,
                            dmuon_ckpt_piece **pieces, size_t *n)
{
    size_t np = 0;
    const dmuon_plan_param *pp = dmuon_plan_params(rt->plan, &np);
    *params = calloc(rt->nparams + 1, sizeof **params);
    *pieces = calloc(rt->lay->npieces * 3 + 1, sizeof **pieces);
    if (!*params || !*pieces)
        return DMUON_FAIL(DMUON_ENOMEM, "runtime: out of memory for the checkpoint tables");
    for (size_t i = 0; i < rt->nparams; i++) {
        dmuon_ckpt_param *c = &(*params)[i];
        c->name = rt->params[i].name;
        c->ndim = rt->params[i].ndim;
        memcpy(c->shape, rt->params[i].shape, sizeof c->shape);
        c->dtype = DMUON_F32;
        c->role = (int)pp[i].role;
    }
    size_t k = 0;
    for (size_t i = 0; i < rt->lay->npieces; i++) {
        const rt_piece *pc = &rt->lay->pieces[i];
        /* HSDP even shards are replicas across nodes: node 0's are saved */
        if (with_state && !pc->owned && rt->hsdp && rt->topo.node_id != 0)
            continue;
        const rt_param *p = &rt->params[pc->param];
        /* the host's view of the state (device tables: its host copy) */
        dmuon_ckpt_piece base = {p->name, "master", pc->lo, pc->hi,
                                 rt_host_of(rt, (pc->owned ? rt->own_w : rt->even_w) + pc->pos)};
        (*pieces)[k++] = base;
        if (!with_state)
            continue;
        if (p->role == DMUON_ROLE_MUON) {
            base.kind = "momentum";
            base.data = rt_host_of(rt, (pc->owned ? rt->own_m : rt->even_m) + pc->pos);
            (*pieces)[k++] = base;
        } else {
            base.kind = "exp_avg";
            base.data = rt_host_of(rt, rt->even_m + pc->pos);
            (*pieces)[k++] = base;
            base.kind = "exp_avg_sq";
            base.data = rt_host_of(rt, rt->even_v + pc->pos);
            (*pieces)[k++] = base;
        }
    }
    *n = k;
    return DMUON_OK;
}

static void meta_of(const dmuon_rt *rt, dmuon_ckpt_meta *m)
{
    memset(m, 0, sizeof *m);
    m->step = rt->steps;
    m->model_digest = table_digest(rt);
    m->plan_digest = rt->plan->options_digest ^ dmuon_plan_units_digest(rt->plan);
    m->world_size = rt->topo.size;
    m->sharding = rt->hsdp ? "hsdp" : "fsdp";
    hparams(rt, m);
}

dmuon_rc dmuon_rt_save(dmuon_rt *rt, const char *dir)
{
    if (!rt->opened)
        return DMUON_FAIL(DMUON_EINVAL, "runtime: save before open");
    if (rt->failed)
        return DMUON_FAIL(DMUON_ECOMM, "runtime: save after a communication failure (a missed "
                          "deadline leaves the communicator out of step): free the runtime");
    DMUON_TRY(rt_ckpt_usable(rt, "save"));
    dmuon_ckpt_param *params = NULL;
    dmuon_ckpt_piece *pieces = NULL;
    size_t n = 0;
    dmuon_ckpt_meta meta;
    meta_of(rt, &meta);
    dmuon_rc rc = rt_state_to_host(rt, true);
    if (rc == DMUON_OK)
        rc = ckpt_tables(rt, true, &params, &pieces, &n);
    rc = rt_agree(rt, rc);
    if (rc == DMUON_OK)
        rc = rt_fail_comm(rt, dmuon_ckpt_save(rt->topo.world, rt->opts.deadline_ms, dir, &meta,
                                              params, rt->nparams, pieces, n));
    free(params);
    free(pieces);
    rt_state_drop(rt);
    return rc;
}

dmuon_rc dmuon_rt_load(dmuon_rt *rt, const char *dir)
{
    if (!rt->opened)
        return DMUON_FAIL(DMUON_EINVAL, "runtime: load before open");
    if (rt->failed)
        return DMUON_FAIL(DMUON_ECOMM, "runtime: load after a communication failure (a missed "
                          "deadline leaves the communicator out of step): free the runtime");
    DMUON_TRY(rt_ckpt_usable(rt, "load"));
    if (rt->steps > 0 || rt->micro > 0 || rt->in_micro)
        return DMUON_FAIL(DMUON_EINVAL, "runtime: load after %s: load right after open, before "
                          "the first micro-batch", rt->steps > 0 ? "a step" : "a micro-batch began");
    dmuon_ckpt_param *params = NULL;
    dmuon_ckpt_piece *pieces = NULL;
    size_t n = 0;
    dmuon_ckpt_meta meta, got;
    meta_of(rt, &meta);
    /* every replica loads its pieces (HSDP even shards on every node) */
    bool hsdp = rt->hsdp;
    rt->hsdp = false;
    dmuon_rc rc = apply_override(rt, &meta);
    if (rc == DMUON_OK)   /* device tables: loaded into a host copy, then copied in */
        rc = rt_state_to_host(rt, true);
    if (rc == DMUON_OK)
        rc = ckpt_tables(rt, true, &params, &pieces, &n);
    rt->hsdp = hsdp;
    rc = rt_agree(rt, rc);
    if (rc == DMUON_OK)
        rc = rt_fail_comm(rt, dmuon_ckpt_load(rt->topo.world, rt->opts.deadline_ms, dir, &meta,
                                              params, rt->nparams, pieces, n, &got));
    free(params);
    free(pieces);
    if (rc == DMUON_OK)
        rc = rt_agree(rt, rt_state_from_host(rt));
    rt_state_drop(rt);
    DMUON_TRY(rc);
    rt->steps = got.step;
    for (size_t l = 0; l < rt->nlayers; l++)
        if (rt->layers[l].pblock == RT_BLOCK_GATHERED)
            rt->layers[l].pblock = RT_BLOCK_LIVE;
    DMUON_TRY(rt_write_windows(rt));
    return rt_pub_round(rt);
}

dmuon_rc dmuon_rt_export(dmuon_rt *rt, const char *path)
{
    if (!rt->opened)
        return DMUON_FAIL(DMUON_EINVAL, "runtime: export before open");
    if (rt->failed)
        return DMUON_FAIL(DMUON_ECOMM, "runtime: export after a communication failure (a missed "
                          "deadline leaves the communicator out of step): free the runtime");
    DMUON_TRY(rt_ckpt_usable(rt, "export"));
    dmuon_ckpt_param *params = NULL;
    dmuon_ckpt_piece *pieces = NULL;
    size_t n = 0;
    dmuon_rc rc = rt_state_to_host(rt, true);
    if (rc == DMUON_OK)
        rc = ckpt_tables(rt, false, &params, &pieces, &n);
    rc = rt_agree(rt, rc);
    if (rc == DMUON_OK)
        rc = rt_fail_comm(rt, dmuon_ckpt_export(rt->topo.world, rt->opts.deadline_ms, path,
                                                params, rt->nparams, pieces, n));
    free(params);
    free(pieces);
    rt_state_drop(rt);
    return rc;
}
