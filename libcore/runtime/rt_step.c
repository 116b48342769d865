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
 * into dst (m x n row-major), or, with back, from dst into the storage. */
static void mat_copy(const rt_param *p, int64_t j, float *src, int64_t lo, float *dst, bool back)
{
    int64_t base, rs, cs;
    mat_place(p, j, &base, &rs, &cs);
    base -= lo;
    for (int64_t r = 0; r < p->m; r++)
        for (int64_t c = 0; c < p->n; c++) {
            float *s = &src[base + r * rs + c * cs], *d = &dst[r * p->n + c];
            if (back)
                *s = *d;
            else
                *d = *s;
        }
}

static dmuon_rc grow_scratch(dmuon_rt *rt, int64_t n)
{
    if (n <= rt->scratch_elems)
        return DMUON_OK;
    float *s = realloc(rt->scratch, (size_t)n * sizeof *s);
    if (!s)
        return DMUON_FAIL(DMUON_ENOMEM, "runtime: out of memory for %lld scratch elements",
                          (long long)n);
    rt->scratch = s;
    rt->scratch_elems = n;
    return DMUON_OK;
}

static void clear_grads(dmuon_rt *rt)
{
    memset(rt->own_g, 0, (size_t)rt->win_elems * sizeof(float));
    memset(rt->even_g, 0, (size_t)rt->even_total * sizeof(float));
}

/* Step 1 and 2. */
static dmuon_rc check_and_clip(dmuon_rt *rt)
{
    double sumsq = 0;
    int bad = INT_MAX;
    for (size_t i = 0; i < rt->npieces; i++) {
        const rt_piece *pc = &rt->pieces[i];
        const float *g = piece_grad(rt, pc);
        bool count = pc->owned || !rt->hsdp || rt->topo.node_id == 0;
        double s = 0;
        for (int64_t k = 0; k < pc->hi - pc->lo; k++) {
            if (!isfinite(g[k])) {
                if (pc->param < bad)
                    bad = pc->param;
                break;
            }
            s += (double)g[k] * g[k];
        }
        if (count)
            sumsq += s;
    }
    int64_t gbad = bad;
    double gsum = sumsq;
    DMUON_TRY(rt_ctl_i64(rt, &gbad, 1, DMUON_CTL_MIN, "step: gradient check"));
    DMUON_TRY(rt_ctl_f64(rt, &gsum, 1, DMUON_CTL_SUM, "step: gradient norm"));
    if (gbad != INT_MAX) {
        clear_grads(rt);
        return DMUON_FAIL(DMUON_ENUMERIC, "runtime: step %lld: non-finite gradient in '%s'; "
                          "no parameter or optimizer state was changed",
                          (long long)rt->steps + 1, rt->params[gbad].name);
    }
    rt->grad_norm = sqrt(gsum);
    double clip = rt->opts.optim.clip_norm;
    if (clip > 0 && rt->grad_norm > clip) {
        float c = (float)(clip / (rt->grad_norm + 1e-6));
        for (int64_t k = 0; k < rt->win_elems; k++)
            rt->own_g[k] *= c;
        for (int64_t k = 0; k < rt->even_total; k++)
            rt->even_g[k] *= c;
    }
    return DMUON_OK;
}

/* Step 3: the owned matrices, in layer order (pieces are sorted so). */
static dmuon_rc step_owned(dmuon_rt *rt, double lr)
{
    const dmuon_optim_opts *o = &rt->opts.optim;
    for (size_t i = 0; i < rt->npieces; i++) {
        const rt_piece *pc = &rt->pieces[i];
        if (!pc->owned)
            continue;
        const rt_param *p = &rt->params[pc->param];
        int64_t mn = p->m * p->n;
        bool plain = plain_place(p);
        DMUON_TRY(grow_scratch(rt, plain ? mn : 4 * mn));
        /* other placements: master, momentum and gradient of the real
         * matrix gathered into scratch, updated there, written back */
        float *sw = rt->scratch + mn, *sm = sw + mn, *sg = sm + mn;
        float *w0 = rt->own_w + pc->pos, *m0 = rt->own_m + pc->pos, *g0 = rt->own_g + pc->pos;
        for (int64_t a = 0; a < pc->hi - pc->lo; a += mn) {
            int64_t w = pc->pos + a, j = (pc->lo + a) / mn;
            double t0 = dmuon_now_ms();
            if (plain) {
                DMUON_TRY(dmuon_muon_update(rt->ns, o, lr, p->m, p->n, rt->own_w + w,
                                            rt->own_m + w, rt->own_g + w, rt->scratch));
            } else {
                mat_copy(p, j, w0, pc->lo, sw, false);
                mat_copy(p, j, m0, pc->lo, sm, false);
                mat_copy(p, j, g0, pc->lo, sg, false);
                DMUON_TRY(dmuon_muon_update(rt->ns, o, lr, p->m, p->n, sw, sm, sg, rt->scratch));
                mat_copy(p, j, w0, pc->lo, sw, true);
                mat_copy(p, j, m0, pc->lo, sm, true);
            }
            rt->stats.ns_s += (dmuon_now_ms() - t0) / 1e3;
            rt->stats.ns_matrices++;
            if (rt->pub)
                DMUON_TRY(rt_fail_comm(rt, dmuon_publish_progress(rt->pub)));
        }
        rt_store_param(rt, pc, rt->base);
        bool seg_end = i + 1 == rt->npieces || !rt->pieces[i + 1].owned ||
                       rt->pieces[i + 1].layer != pc->layer || rt->pieces[i + 1].seg != pc->seg;
        if (seg_end && rt->hsdp)
            DMUON_TRY(rt_pub_post(rt, (size_t)pc->layer, (size_t)pc->seg));
    }
    return DMUON_OK;
}

/* Line B for layer l: Nesterov directions of the shard, gathered whole,
 * Newton–Schulz of every Muon matrix on every rank, applied to the shard. */
static dmuon_rc step_replicated(dmuon_rt *rt, size_t l, double lr)
{
    const dmuon_optim_opts *o = &rt->opts.optim;
    const rt_layer *L = &rt->layers[l];
    bool any = false;
    for (int j = 0; j < L->np; j++)
        any |= rt->params[L->params[j]].role == DMUON_ROLE_MUON;
    if (!any || !L->shard)
        return DMUON_OK;
    int64_t big = L->even_pad + L->shard;
    for (int j = 0; j < L->np; j++) {
        const rt_param *p = &rt->params[L->params[j]];
        /* the direction of one block (one or two matrices) and one matrix */
        int64_t need = L->even_pad + L->shard + 3 * p->m * p->n;
        if (p->role == DMUON_ROLE_MUON && big < need)
            big = need;
    }
    DMUON_TRY(grow_scratch(rt, big));
    float *full = rt->scratch, *mine = full + L->even_pad, *odir = mine + L->shard;
    memset(mine, 0, (size_t)L->shard * sizeof(float));
    for (size_t i = 0; i < rt->npieces; i++) {
        const rt_piece *pc = &rt->pieces[i];
        if (pc->owned || (size_t)pc->layer != l || rt->params[pc->param].role != DMUON_ROLE_MUON)
            continue;
        dmuon_muon_momentum(o, pc->hi - pc->lo, rt->even_m + pc->pos, rt->even_g + pc->pos,
                            mine + (pc->pos - L->even_pos));
    }
    MPI_Request q;
    DMUON_TRY(rt_mpi_wait(rt, MPI_Iallgather(mine, (int)L->shard, MPI_FLOAT, full, (int)L->shard,
                                             MPI_FLOAT, rt->shard_comm, &q),
                          &q, "step: MPI_Iallgather (Nesterov directions)", l));
    for (int j = 0; j < L->np; j++) {
        const rt_param *p = &rt->params[L->params[j]];
        if (p->role != DMUON_ROLE_MUON)
            continue;
        int64_t mn = p->m * p->n, base = p->off - L->own_elems;
        int64_t per = mats_per_block(p), span = per * mn;
        bool plain = plain_place(p);
        float *mat = odir + span;   /* one real matrix (other placements) */
        double scale = dmuon_muon_scale_of(o, p->m, p->n);
        for (int64_t b = 0; b < p->matrices / per; b++) {
            /* odir: the block's directions in storage order */
            for (int64_t a = b * per; a < (b + 1) * per; a++) {
                double t0 = dmuon_now_ms();
                if (plain) {
                    DMUON_TRY(dmuon_ns_run_host(rt->ns, full + base + a * mn, p->m, p->n, odir));
                } else {
                    mat_copy(p, a, full + base, 0, mat, false);
                    DMUON_TRY(dmuon_ns_run_host(rt->ns, mat, p->m, p->n, mat));
                    mat_copy(p, a, odir, b * span, mat, true);
                }
                rt->stats.ns_s += (dmuon_now_ms() - t0) / 1e3;
                rt->stats.ns_matrices++;
            }
            for (size_t i = 0; i < rt->npieces; i++) {
                const rt_piece *pc = &rt->pieces[i];
                if (pc->owned || pc->param != L->params[j])
                    continue;
                int64_t lo = pc->lo > b * span ? pc->lo : b * span;
                int64_t hi = pc->hi < (b + 1) * span ? pc->hi : (b + 1) * span;
                if (lo < hi)
                    dmuon_muon_apply(o, lr, scale, hi - lo, rt->even_w + pc->pos + (lo - pc->lo),
                                     odir + (lo - b * span));
            }
        }
    }
    return DMUON_OK;
}

dmuon_rc rt_step(dmuon_rt *rt, const dmuon_rt_lrs *lrs)
{
    double t0 = dmuon_now_ms();
    rt->stats.ns_s = 0;
    rt->stats.ns_matrices = 0;
    dmuon_rc rc = check_and_clip(rt);
    if (rc != DMUON_OK)
        return rc;
    DMUON_TRY(rt_pub_end(rt));
    DMUON_TRY(rt_pub_begin(rt));
    const dmuon_optim_opts *o = &rt->opts.optim;
    int64_t t = rt->steps + 1;
    /* NS failures (a non-finite direction) are agreed before anything is
     * published further; the checks above make them unreachable for finite
     * gradients. */
    rc = step_owned(rt, lrs->muon_lr);
    if (rc != DMUON_OK)
        return rt_fail_comm(rt, rc);
    for (size_t l = 0; l < rt->nlayers && rt->opts.line == DMUON_LINE_B; l++)
        DMUON_TRY(step_replicated(rt, l, lrs->muon_lr));
    for (size_t i = 0; i < rt->npieces; i++) {
        const rt_piece *pc = &rt->pieces[i];
        if (pc->owned)
            continue;
        const rt_param *p = &rt->params[pc->param];
        if (p->role == DMUON_ROLE_ADAMW) {
            double decay = p->plan_role == DMUON_ROLE_MUON ? o->muon_weight_decay
                                                           : o->adamw_weight_decay;
            dmuon_adamw_update(o, lrs->adamw_lr, decay, t, pc->hi - pc->lo, rt->even_w + pc->pos,
                               rt->even_m + pc->pos, rt->even_v + pc->pos, rt->even_g + pc->pos);
        }
        rt_store_param(rt, pc, rt->base);
    }
    DMUON_TRY(rt_pub_finish(rt));
    clear_grads(rt);
    rt->steps = t;
    rt->stats.optim_s = (dmuon_now_ms() - t0) / 1e3;
    return DMUON_OK;
}

/* --------------------------------------------------------- checkpoints -- */

static void hparams(const dmuon_rt *rt, dmuon_ckpt_meta *m)
{
    const dmuon_optim_opts *o = &rt->opts.optim;
    static const char *names[] = {"momentum", "nesterov", "muon_weight_decay", "muon_scale",
                                  "beta1", "beta2", "eps", "adamw_weight_decay", "clip_norm"};
    double v[] = {o->momentum, o->nesterov, o->muon_weight_decay, (double)o->scale,
                  o->beta1, o->beta2, o->eps, o->adamw_weight_decay, o->clip_norm};
    m->n_hparams = (int)(sizeof v / sizeof v[0]);
    for (int i = 0; i < m->n_hparams; i++) {
        m->hparam_names[i] = names[i];
        m->hparam_values[i] = v[i];
    }
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
    *pieces = calloc(rt->npieces * 3 + 1, sizeof **pieces);
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
    for (size_t i = 0; i < rt->npieces; i++) {
        const rt_piece *pc = &rt->pieces[i];
        /* HSDP even shards are replicas across nodes: node 0's are saved */
        if (with_state && !pc->owned && rt->hsdp && rt->topo.node_id != 0)
            continue;
        const rt_param *p = &rt->params[pc->param];
        dmuon_ckpt_piece base = {p->name, "master", pc->lo, pc->hi,
                                 (pc->owned ? rt->own_w : rt->even_w) + pc->pos};
        (*pieces)[k++] = base;
        if (!with_state)
            continue;
        if (p->role == DMUON_ROLE_MUON) {
            base.kind = "momentum";
            base.data = (pc->owned ? rt->own_m : rt->even_m) + pc->pos;
            (*pieces)[k++] = base;
        } else {
            base.kind = "exp_avg";
            base.data = rt->even_m + pc->pos;
            (*pieces)[k++] = base;
            base.kind = "exp_avg_sq";
            base.data = rt->even_v + pc->pos;
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
    dmuon_ckpt_param *params = NULL;
    dmuon_ckpt_piece *pieces = NULL;
    size_t n = 0;
    dmuon_ckpt_meta meta;
    meta_of(rt, &meta);
    dmuon_rc rc = rt_agree(rt, ckpt_tables(rt, true, &params, &pieces, &n));
    if (rc == DMUON_OK)
        rc = dmuon_ckpt_save(rt->topo.world, dir, &meta, params, rt->nparams, pieces, n);
    free(params);
    free(pieces);
    return rc;
}

dmuon_rc dmuon_rt_load(dmuon_rt *rt, const char *dir)
{
    if (!rt->opened)
        return DMUON_FAIL(DMUON_EINVAL, "runtime: load before open");
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
    dmuon_rc rc = ckpt_tables(rt, true, &params, &pieces, &n);
    rt->hsdp = hsdp;
    rc = rt_agree(rt, rc);
    if (rc == DMUON_OK)
        rc = dmuon_ckpt_load(rt->topo.world, dir, &meta, params, rt->nparams, pieces, n, &got);
    free(params);
    free(pieces);
    DMUON_TRY(rc);
    rt->steps = got.step;
    for (size_t l = 0; l < rt->nlayers; l++)
        rt->layers[l].gathered = false;
    DMUON_TRY(rt_write_windows(rt));
    return rt_pub_round(rt);
}

dmuon_rc dmuon_rt_export(dmuon_rt *rt, const char *path)
{
    if (!rt->opened)
        return DMUON_FAIL(DMUON_EINVAL, "runtime: export before open");
    dmuon_ckpt_param *params = NULL;
    dmuon_ckpt_piece *pieces = NULL;
    size_t n = 0;
    dmuon_rc rc = rt_agree(rt, ckpt_tables(rt, false, &params, &pieces, &n));
    if (rc == DMUON_OK)
        rc = dmuon_ckpt_export(rt->topo.world, path, params, rt->nparams, pieces, n);
    free(params);
    free(pieces);
    return rc;
}
