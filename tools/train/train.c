/*
 * train.c — the training loop on dmuon/runtime.h (see train.h for the call
 * order, the gradient scaling and the schedule).
 *
 * Invariants: every rank makes the same runtime calls in the same order
 * (the same number of micro-batches and validation passes, whatever its
 * slice of the batch); model weights are only read between the hooks of
 * their plan layer, gradients only written between pre_backward and
 * post_backward of theirs.  The tensors outside the blocks are either two
 * layers, "(embed)" bracketing the embedding's forward and backward and
 * "(head)" the final norm's and head's (untied head), or one "(root)" that
 * brackets the whole forward and the whole backward (tied head: the
 * embedding is used first and last, its gradient written first and last;
 * also any plan made with --root one).  The log is written by rank 0 from figures reduced over
 * the ranks (max, and mean where named so).
 */
#include "train.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/opt.h"
#include "dmuon/timer.h"

void tt_opts_init(tt_opts *o)
{
    memset(o, 0, sizeof *o);
    tm_config_init(&o->model);
    o->batch = 16;
    o->micro = 1;
    o->steps = 300;
    o->lr = 0.02;
    o->adamw_lr = 0.01;
    o->warmup = 20;
    o->schedule = TT_SCHED_COSINE;
    o->min_lr_frac = 0.1;
    o->seed = 1;
    o->data_seed = 1;
    o->init_std = 0.02;
    o->eval_every = 50;
    o->val_windows = 64;
    o->progress_every = 10;
}

double tt_lr_factor(const tt_opts *o, int64_t s)
{
    if (o->warmup > 0 && s < o->warmup)
        return (double)(s + 1) / (double)o->warmup;
    if (o->schedule == TT_SCHED_CONSTANT)
        return 1.0;
    int64_t span = o->steps - 1 - o->warmup;
    if (span <= 0)
        return 1.0;
    double t = (double)(s - o->warmup) / (double)span;
    t = t < 0 ? 0 : t > 1 ? 1 : t;
    return o->min_lr_frac + (1.0 - o->min_lr_frac) * 0.5 * (1.0 + cos(M_PI * t));
}

static double cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* --------------------------------------------------------- the trainer -- */

typedef struct {
    const tt_opts *o;
    dmuon_rt *rt;
    MPI_Comm comm;
    int rank, size;
    int Bl, T;                   /* local sequences per micro-batch, tokens each */
    size_t root_layer;           /* plan layer of "(root)", or SIZE_MAX */
    size_t embed_layer;          /* plan layer of "(embed)", or SIZE_MAX */
    size_t head_layer;           /* plan layer of "(head)", or SIZE_MAX */
    size_t *block_layer;         /* plan layer of block l */
    int *pidx;                   /* runtime index of tensor i (tm_param_info order) */
    const td_data *data;
    tm_acts acts;
    uint8_t *tok, *tgt;          /* [Bl, T] */
    double *seq_loss;            /* [batch]: this rank's at rank * Bl */
} trainer;

/* Root weights / gradients of the runtime (valid inside the root's hooks). */
static void root_w(trainer *t, tm_root_w *w)
{
    const tm_config *c = &t->o->model;
    size_t nb = (size_t)c->layers * TM_BLOCK_TENSORS;
    w->t[TM_EMBED] = dmuon_rt_weights(t->rt, t->pidx[0]);
    w->t[TM_NORM] = dmuon_rt_weights(t->rt, t->pidx[nb + 1]);
    w->t[TM_HEAD] = c->tie ? w->t[TM_EMBED] : dmuon_rt_weights(t->rt, t->pidx[nb + 2]);
}

static void root_g(trainer *t, tm_root_g *g)
{
    const tm_config *c = &t->o->model;
    size_t nb = (size_t)c->layers * TM_BLOCK_TENSORS;
    g->t[TM_EMBED] = dmuon_rt_grad(t->rt, t->pidx[0]);
    g->t[TM_NORM] = dmuon_rt_grad(t->rt, t->pidx[nb + 1]);
    g->t[TM_HEAD] = c->tie ? g->t[TM_EMBED] : dmuon_rt_grad(t->rt, t->pidx[nb + 2]);
}

static void block_w(trainer *t, int l, tm_block_w *w)
{
    for (int k = 0; k < TM_BLOCK_TENSORS; k++)
        w->t[k] = dmuon_rt_weights(t->rt, t->pidx[1 + (size_t)l * TM_BLOCK_TENSORS + (size_t)k]);
}

static void block_g(trainer *t, int l, tm_block_g *g)
{
    for (int k = 0; k < TM_BLOCK_TENSORS; k++)
        g->t[k] = dmuon_rt_grad(t->rt, t->pidx[1 + (size_t)l * TM_BLOCK_TENSORS + (size_t)k]);
}

/* The summed loss of the global micro-batch: every rank's per-sequence
 * sums gathered, added in global sequence order (the same bits on any
 * number of ranks). */
static dmuon_rc global_loss(trainer *t, double *loss)
{
    if (MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, t->seq_loss, t->Bl, MPI_DOUBLE,
                      t->comm) != MPI_SUCCESS)
        return DMUON_FAIL(DMUON_ECOMM, "loss: MPI_Allgather failed");
    double s = 0;
    for (int j = 0; j < t->Bl * t->size; j++)
        s += t->seq_loss[j];
    *loss = s;
    return DMUON_OK;
}

/* The forward of one micro-batch in t->tok/tgt; *loss: this rank's summed
 * CE (per-sequence sums in t->seq_loss at this rank's slice). */
static dmuon_rc forward(trainer *t, double *loss)
{
    const tm_config *c = &t->o->model;
    tm_root_w rw;
    tm_block_w bw;
    if (t->root_layer != SIZE_MAX)
        DMUON_TRY(dmuon_rt_pre_forward(t->rt, t->root_layer));
    if (t->embed_layer != SIZE_MAX)
        DMUON_TRY(dmuon_rt_pre_forward(t->rt, t->embed_layer));
    root_w(t, &rw);
    tm_embed_forward(&t->acts, &rw, t->tok);
    if (t->embed_layer != SIZE_MAX)
        DMUON_TRY(dmuon_rt_post_forward(t->rt, t->embed_layer));
    for (int l = 0; l < c->layers; l++) {
        DMUON_TRY(dmuon_rt_pre_forward(t->rt, t->block_layer[l]));
        block_w(t, l, &bw);
        tm_block_forward(&t->acts, l, &bw);
        DMUON_TRY(dmuon_rt_post_forward(t->rt, t->block_layer[l]));
    }
    if (t->head_layer != SIZE_MAX)
        DMUON_TRY(dmuon_rt_pre_forward(t->rt, t->head_layer));
    root_w(t, &rw);
    *loss = tm_head_forward(&t->acts, &rw, t->tgt, t->seq_loss + (size_t)t->rank * t->Bl);
    if (t->head_layer != SIZE_MAX)
        DMUON_TRY(dmuon_rt_post_forward(t->rt, t->head_layer));
    if (t->root_layer != SIZE_MAX)
        DMUON_TRY(dmuon_rt_post_forward(t->rt, t->root_layer));
    return DMUON_OK;
}

/* The backward of the micro-batch forward() ran last, loss scale `scale`. */
static dmuon_rc backward(trainer *t, float scale)
{
    const tm_config *c = &t->o->model;
    tm_root_w rw;
    tm_root_g rg;
    tm_block_w bw;
    tm_block_g bg;
    if (t->root_layer != SIZE_MAX)
        DMUON_TRY(dmuon_rt_pre_backward(t->rt, t->root_layer));
    if (t->head_layer != SIZE_MAX)
        DMUON_TRY(dmuon_rt_pre_backward(t->rt, t->head_layer));
    root_w(t, &rw);
    root_g(t, &rg);
    tm_head_backward(&t->acts, &rw, &rg, t->tgt, scale);
    if (t->head_layer != SIZE_MAX)
        DMUON_TRY(dmuon_rt_post_backward(t->rt, t->head_layer));
    for (int l = c->layers - 1; l >= 0; l--) {
        size_t L = t->block_layer[l];
        DMUON_TRY(dmuon_rt_pre_backward(t->rt, L));
        if (t->o->recompute) {
            DMUON_TRY(dmuon_rt_recompute_begin(t->rt));
            DMUON_TRY(dmuon_rt_pre_forward(t->rt, L));
            block_w(t, l, &bw);
            tm_block_forward(&t->acts, l, &bw);
            DMUON_TRY(dmuon_rt_post_forward(t->rt, L));
            DMUON_TRY(dmuon_rt_recompute_end(t->rt));
        }
        block_w(t, l, &bw);
        block_g(t, l, &bg);
        tm_block_backward(&t->acts, l, &bw, &bg);
        DMUON_TRY(dmuon_rt_post_backward(t->rt, L));
    }
    if (t->embed_layer != SIZE_MAX)
        DMUON_TRY(dmuon_rt_pre_backward(t->rt, t->embed_layer));
    root_g(t, &rg);
    tm_embed_backward(&t->acts, &rg, t->tok);
    if (t->embed_layer != SIZE_MAX)
        DMUON_TRY(dmuon_rt_post_backward(t->rt, t->embed_layer));
    if (t->root_layer != SIZE_MAX)
        DMUON_TRY(dmuon_rt_post_backward(t->rt, t->root_layer));
    return DMUON_OK;
}

/* Mean validation loss over the fixed windows: every rank runs the same
 * number of passes, each on its slice of `batch` windows.  A validation
 * pass is a forward only, ended by dmuon_rt_discard: not a micro-batch,
 * nothing added to the step's gradients. */
static dmuon_rc validate(trainer *t, double *mean)
{
    const tt_opts *o = t->o;
    int passes = (o->val_windows + o->batch - 1) / o->batch, total = passes * o->batch;
    double sum = 0, l;
    for (int p = 0; p < passes; p++) {
        td_val_batch(t->data, p * o->batch + t->rank * t->Bl, t->Bl, total, t->T, t->tok,
                     t->tgt);
        DMUON_TRY(forward(t, &l));
        DMUON_TRY(dmuon_rt_discard(t->rt));
        DMUON_TRY(global_loss(t, &l));
        sum += l;
    }
    *mean = sum / ((double)total * t->T);
    return DMUON_OK;
}

/* Per-step figures of this rank, reduced over ranks for the log. */
enum {
    F_FWD, F_BWD, F_OPT, F_WAIT, F_PUB, F_FWD_CPU, F_BWD_CPU, F_OPT_CPU, F_NS, F_RT_OPT,
    F_WAIT_FWD, F_WAIT_BWD, F_WAIT_OPT, F_STATE, F_GATHER_WAIT, F_REDUCE_WAIT, F_PUB_STEP,
    F_EXPOSED, F_COUNT
};
static const char *const f_names[F_COUNT] = {
    "fwd_s", "bwd_s", "optim_s", "comm_wait_s", "publish_wait_s", "fwd_cpu_s", "bwd_cpu_s",
    "optim_cpu_s", "ns_s", "rt_optim_s", "comm_wait_fwd_s", "comm_wait_bwd_s",
    "comm_wait_optim_s", "state_bytes", "gather_wait_s", "reduce_wait_s",
    "publish_wait_step_s", "exposed_comm_s"};

static void write_header(FILE *f)
{
    fprintf(f, "step,loss,val_loss,muon_lr,adamw_lr,grad_norm,tokens_per_s,step_s");
    for (int k = 0; k < F_COUNT; k++)
        fprintf(f, ",%s", f_names[k]);
    for (int k = 0; k < F_COUNT; k++)
        fprintf(f, ",mean_%s", f_names[k]);
    fprintf(f, "\n");
}

static void write_rank_header(FILE *f)
{
    fprintf(f, "step,rank,step_s");
    for (int k = 0; k < F_COUNT; k++)
        fprintf(f, ",%s", f_names[k]);
    fprintf(f, "\n");
}

/* Rank 0 opens `path` for writing (NULL: no file); every rank learns
 * whether it could. */
static dmuon_rc open_log(const trainer *t, const char *what, const char *path, FILE **f)
{
    *f = NULL;
    int bad = 0;
    if (t->rank == 0 && path) {
        *f = fopen(path, "w");
        bad = !*f;
    }
    MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_MAX, t->comm);
    if (bad)
        return DMUON_FAIL(DMUON_EIO, "%s '%s': rank 0 cannot open it for writing", what, path);
    return DMUON_OK;
}

static void free_trainer(trainer *t)
{
    tm_acts_release(&t->acts);
    free(t->block_layer);
    free(t->pidx);
    free(t->tok);
    free(t->tgt);
    free(t->seq_loss);
    dmuon_rt_free(t->rt);
    t->rt = NULL;
}

/* Creates the runtime, registers every tensor with its initial values and
 * opens it; maps the plan's layers to the model's blocks. */
static dmuon_rc setup(trainer *t, const dmuon_plan *plan, const dmuon_rt_opts *ro)
{
    const tt_opts *o = t->o;
    const tm_config *c = &o->model;
    size_t np = tm_param_count(c);
    tm_params init = {0};
    dmuon_rc rc = DMUON_OK;
    size_t nl = dmuon_plan_layer_count(plan);
    if (nl != (size_t)c->layers + 1 && nl != (size_t)c->layers + 2)
        return DMUON_FAIL(DMUON_EINVAL, "plan has %zu layers; the model has %d blocks and the "
                                        "root, or the embedding and the head (expected %d or %d)",
                          nl, c->layers, c->layers + 1, c->layers + 2);
    t->block_layer = calloc((size_t)c->layers, sizeof *t->block_layer);
    t->pidx = calloc(np, sizeof *t->pidx);
    t->tok = malloc((size_t)t->Bl * t->T);
    t->tgt = malloc((size_t)t->Bl * t->T);
    t->seq_loss = calloc((size_t)o->batch, sizeof *t->seq_loss);
    if (!t->block_layer || !t->pidx || !t->tok || !t->tgt || !t->seq_loss)
        return DMUON_FAIL(DMUON_ENOMEM, "out of memory");
    t->root_layer = t->embed_layer = t->head_layer = SIZE_MAX;
    for (int l = 0; l < c->layers; l++)
        t->block_layer[l] = SIZE_MAX;
    for (size_t i = 0; i < nl; i++) {
        const char *name = dmuon_plan_layer_name(plan, i);
        int b;
        char tail;
        if (!strcmp(name, "(root)")) {
            t->root_layer = i;
        } else if (!strcmp(name, "(embed)")) {
            t->embed_layer = i;
        } else if (!strcmp(name, "(head)")) {
            t->head_layer = i;
        } else if (sscanf(name, "model.layers.%d%c", &b, &tail) == 1 && b >= 0 &&
                   b < c->layers) {
            t->block_layer[b] = i;
        } else {
            return DMUON_FAIL(DMUON_EINVAL, "plan layer %zu '%s' is not a layer of the model", i,
                              name);
        }
    }
    for (int l = 0; l < c->layers; l++)
        if (t->block_layer[l] == SIZE_MAX)
            return DMUON_FAIL(DMUON_EINVAL, "plan has no layer 'model.layers.%d'", l);
    /* one enclosing root, or the embedding and the head apart; a tied head
     * reads the embedding at both ends: one root */
    bool split = t->embed_layer != SIZE_MAX && t->head_layer != SIZE_MAX;
    if ((t->root_layer == SIZE_MAX) == !split || (c->tie && split))
        return DMUON_FAIL(DMUON_EINVAL, "plan has %s: expected '(root)'%s", split
                          ? "'(embed)' and '(head)' layers" : t->root_layer != SIZE_MAX
                          ? "'(root)' beside '(embed)' or '(head)'" : "no '(root)' layer",
                          c->tie ? " (the head is tied to the embedding)"
                                 : ", or '(embed)' and '(head)'");
    DMUON_TRY(tm_acts_init(&t->acts, c, t->Bl, t->T, o->recompute));
    DMUON_TRY(dmuon_rt_create(plan, t->comm, ro, &t->rt));
    DMUON_TRY_GOTO(rc, tm_params_init(&init, c), out);
    tm_params_init_values(&init, o->seed, o->init_std);
    for (size_t i = 0; i < np; i++) {
        tm_param_info in;
        tm_param_info_of(c, i, &in);
        DMUON_TRY_GOTO(rc, dmuon_rt_register(t->rt, in.name, in.ndim, in.shape, init.t[i]), out);
    }
    DMUON_TRY_GOTO(rc, dmuon_rt_open(t->rt), out);
    for (size_t i = 0; i < np; i++) {
        tm_param_info in;
        tm_param_info_of(c, i, &in);
        t->pidx[i] = dmuon_rt_param_index(t->rt, in.name);
        if (t->pidx[i] < 0) {
            rc = DMUON_FAIL(DMUON_EINVAL, "runtime has no parameter '%s'", in.name);
            goto out;
        }
    }
out:
    tm_params_release(&init);
    return rc;
}

dmuon_rc tt_train(const tt_opts *o, const dmuon_plan *plan, const dmuon_rt_opts *ro,
                  MPI_Comm comm, const td_data *data, tt_result *res)
{
    trainer t = {0};
    FILE *log = NULL, *rlog = NULL;
    double *ranks = NULL;        /* rank 0, with --rank-log: [size][1 + F_COUNT] */
    char err[4400];
    dmuon_rc rc = DMUON_OK;
    memset(res, 0, sizeof *res);
    t.o = o;
    t.comm = comm;
    t.data = data;
    MPI_Comm_rank(comm, &t.rank);
    MPI_Comm_size(comm, &t.size);
    if (o->batch <= 0 || o->batch % t.size)
        return DMUON_FAIL(DMUON_EINVAL, "batch %d: expected a positive multiple of the %d ranks",
                          o->batch, t.size);
    if (o->micro <= 0 || o->steps <= 0)
        return DMUON_FAIL(DMUON_EINVAL, "micro-batches %d, steps %lld: each must be > 0",
                          o->micro, (long long)o->steps);
    t.Bl = o->batch / t.size;
    t.T = o->model.seq;
    DMUON_TRY_GOTO(rc, setup(&t, plan, ro), out);
    if (o->resume_dir)
        DMUON_TRY_GOTO(rc, dmuon_rt_load(t.rt, o->resume_dir), out);
    int64_t start = dmuon_rt_steps(t.rt);
    if (start > o->steps || (o->stop_at > 0 && start > o->stop_at)) {
        rc = DMUON_FAIL(DMUON_EINVAL, "checkpoint '%s' is at step %lld, past --steps %lld or --stop-at",
                        o->resume_dir, (long long)start, (long long)o->steps);
        goto out;
    }
    DMUON_TRY_GOTO(rc, open_log(&t, "log", o->log_path, &log), out);
    DMUON_TRY_GOTO(rc, open_log(&t, "rank log", o->rank_log_path, &rlog), out);
    if (log)
        write_header(log);
    if (rlog)
        write_rank_header(rlog);
    if (o->rank_log_path && t.rank == 0) {
        ranks = malloc((size_t)t.size * (1 + F_COUNT) * sizeof *ranks);
        if (!ranks) {
            rc = DMUON_FAIL(DMUON_ENOMEM, "rank log: out of memory");
        }
    }
    int bad = rc != DMUON_OK;
    MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_MAX, comm);
    if (bad) {
        if (!rc)
            rc = DMUON_FAIL(DMUON_ENOMEM, "rank log: rank 0 is out of memory");
        goto out;
    }

    const double tokens_step = (double)o->batch * t.T * o->micro;
    const float scale = (float)(1.0 / tokens_step);
    double t_loop = dmuon_now_ms();
    for (int64_t s = start; s <= o->steps; s++) {
        double val = NAN;
        bool last = s == o->steps || (o->stop_at > 0 && s == o->stop_at);
        if (s == start || last || (o->eval_every > 0 && s % o->eval_every == 0)) {
            DMUON_TRY_GOTO(rc, validate(&t, &val), out);
            if (s == start)
                res->first_val = val;
            res->last_val = val;
        }
        if (last) {
            if (log) {
                fprintf(log, "%lld,,%.17g", (long long)s, val);
                for (int k = 0; k < 5 + 2 * F_COUNT; k++)
                    fputc(',', log);
                fputc('\n', log);
            }
            if (t.rank == 0 && !o->quiet)
                fprintf(stderr, "dmuon-train: step %lld/%lld  val %.4f\n", (long long)s,
                        (long long)o->steps, val);
            break;
        }
        double fr = tt_lr_factor(o, s);
        dmuon_rt_lrs lrs = {o->lr * fr, o->adamw_lr * fr};
        double f[F_COUNT] = {0}, loss = 0, l, w0, c0, wait_prev = 0;
        dmuon_rt_stats st;
        dmuon_rt_reset_stats(t.rt);
        double t_step = dmuon_now_ms();
        for (int m = 0; m < o->micro; m++) {
            td_train_batch(data, o->data_seed, s, m, t.rank * t.Bl, t.Bl, t.T, t.tok, t.tgt);
            w0 = dmuon_now_ms();
            c0 = cpu_s();
            DMUON_TRY_GOTO(rc, forward(&t, &l), out);
            f[F_FWD] += (dmuon_now_ms() - w0) / 1e3;
            f[F_FWD_CPU] += cpu_s() - c0;
            dmuon_rt_get_stats(t.rt, &st);
            f[F_WAIT_FWD] += st.comm_wait_s - wait_prev;
            wait_prev = st.comm_wait_s;
            DMUON_TRY_GOTO(rc, global_loss(&t, &l), out);
            loss += l;
            w0 = dmuon_now_ms();
            c0 = cpu_s();
            DMUON_TRY_GOTO(rc, backward(&t, scale), out);
            f[F_BWD] += (dmuon_now_ms() - w0) / 1e3;
            f[F_BWD_CPU] += cpu_s() - c0;
            dmuon_rt_get_stats(t.rt, &st);
            f[F_WAIT_BWD] += st.comm_wait_s - wait_prev;
            wait_prev = st.comm_wait_s;
        }
        double pub_prev = st.publish_wait_s;
        w0 = dmuon_now_ms();
        c0 = cpu_s();
        DMUON_TRY_GOTO(rc, dmuon_rt_step(t.rt, &lrs), out);
        f[F_OPT] = (dmuon_now_ms() - w0) / 1e3;
        f[F_OPT_CPU] = cpu_s() - c0;
        double step_s = (dmuon_now_ms() - t_step) / 1e3;
        dmuon_rt_get_stats(t.rt, &st);
        f[F_WAIT] = st.comm_wait_s;
        f[F_WAIT_OPT] = st.comm_wait_s - wait_prev;
        f[F_PUB] = st.publish_wait_s;
        /* Exposed communication: the time inside gather calls (waits, split
         * starts, and gathers a prefetch hint runs whole where the line has
         * no split phase, which comm_wait_s leaves out; the HSDP publish's
         * node loads are inside them), inside reductions, and the publish
         * waits inside the step (not in comm_wait_s either).  A rank has one
         * thread: no compute runs while it is inside these calls. */
        f[F_REDUCE_WAIT] = st.reduce_s;
        f[F_GATHER_WAIT] = st.gather_s;
        f[F_PUB_STEP] = st.publish_wait_s - pub_prev;
        f[F_EXPOSED] = st.gather_s + st.reduce_s + f[F_PUB_STEP];
        f[F_NS] = st.ns_s;
        f[F_RT_OPT] = st.optim_s;
        f[F_STATE] = (double)st.state_bytes;
        /* reductions: step time max, figures max and sum (the loss is global) */
        /* ... and the stop signal, agreed: the largest number any rank saw */
        double sums[2 + F_COUNT], maxs[2 + F_COUNT];
        sums[0] = sums[1 + F_COUNT] = 0;
        maxs[0] = step_s;
        maxs[1 + F_COUNT] = o->stop ? (double)*o->stop : 0;
        memcpy(sums + 1, f, sizeof f);
        memcpy(maxs + 1, f, sizeof f);
        if (MPI_Allreduce(MPI_IN_PLACE, sums, 2 + F_COUNT, MPI_DOUBLE, MPI_SUM, comm) !=
                MPI_SUCCESS ||
            MPI_Allreduce(MPI_IN_PLACE, maxs, 2 + F_COUNT, MPI_DOUBLE, MPI_MAX, comm) !=
                MPI_SUCCESS) {
            rc = DMUON_FAIL(DMUON_ECOMM, "step %lld: MPI_Allreduce of the figures failed",
                            (long long)s);
            goto out;
        }
        if (o->rank_log_path) {
            double mine[1 + F_COUNT];
            mine[0] = step_s;
            memcpy(mine + 1, f, sizeof f);
            if (MPI_Gather(mine, 1 + F_COUNT, MPI_DOUBLE, ranks, 1 + F_COUNT, MPI_DOUBLE, 0,
                           comm) != MPI_SUCCESS) {
                rc = DMUON_FAIL(DMUON_ECOMM, "step %lld: MPI_Gather of the rank log failed",
                                (long long)s);
                goto out;
            }
            for (int r = 0; rlog && r < t.size; r++) {
                const double *v = ranks + (size_t)r * (1 + F_COUNT);
                fprintf(rlog, "%lld,%d,%.6f", (long long)s, r, v[0]);
                for (int k = 0; k < F_COUNT; k++)
                    fprintf(rlog, k == F_STATE ? ",%.0f" : ",%.6f", v[1 + k]);
                fputc('\n', rlog);
            }
        }
        double mean_loss = loss / tokens_step;
        if (!isfinite(mean_loss)) {
            rc = DMUON_FAIL(DMUON_ENUMERIC, "step %lld: loss is %g", (long long)s, mean_loss);
            goto out;
        }
        if (s == start)
            res->first_loss = mean_loss;
        res->last_loss = mean_loss;
        res->steps_run++;
        double tps = tokens_step / maxs[0];
        if (log) {
            fprintf(log, "%lld,%.17g,", (long long)s, mean_loss);
            if (!isnan(val))
                fprintf(log, "%.17g", val);
            fprintf(log, ",%.6g,%.6g,%.6g,%.1f,%.6f", lrs.muon_lr, lrs.adamw_lr,
                    dmuon_rt_grad_norm(t.rt), tps, maxs[0]);
            for (int k = 0; k < F_COUNT; k++)
                fprintf(log, k == F_STATE ? ",%.0f" : ",%.6f", maxs[1 + k]);
            for (int k = 0; k < F_COUNT; k++)
                fprintf(log, k == F_STATE ? ",%.0f" : ",%.6f", sums[1 + k] / t.size);
            fputc('\n', log);
            fflush(log);
        }
        if (t.rank == 0 && !o->quiet &&
            (s == start || (o->progress_every > 0 && (s + 1) % o->progress_every == 0) ||
             !isnan(val)))
        {
            char vs[32] = "";
            if (!isnan(val))
                snprintf(vs, sizeof vs, "  val %.4f", val);
            fprintf(stderr,
                    "dmuon-train: step %lld/%lld  loss %.4f%s  lr %.3g  %.0f tok/s  "
                    "(fwd %.3f bwd %.3f optim %.3f wait %.3f s)\n",
                    (long long)s, (long long)o->steps, mean_loss, vs, lrs.muon_lr, tps,
                    maxs[1 + F_FWD], maxs[1 + F_BWD], maxs[1 + F_OPT], maxs[1 + F_WAIT]);
        }
        if (maxs[1 + F_COUNT] > 0) {
            res->interrupted = (int)maxs[1 + F_COUNT];
            break;
        }
        /* periodic checkpoints; the last step's save is the one after the loop */
        int64_t end = o->stop_at > 0 && o->stop_at < o->steps ? o->stop_at : o->steps;
        if (o->save_dir && o->save_every > 0 && (s + 1) % o->save_every == 0 && s + 1 < end)
            DMUON_TRY_GOTO(rc, dmuon_rt_save(t.rt, o->save_dir), out);
    }
    res->wall_s = (dmuon_now_ms() - t_loop) / 1e3;
    res->next_step = dmuon_rt_steps(t.rt);
    if (o->save_dir)
        DMUON_TRY_GOTO(rc, dmuon_rt_save(t.rt, o->save_dir), out);
    if (o->export_path && !res->interrupted)
        DMUON_TRY_GOTO(rc, dmuon_rt_export(t.rt, o->export_path), out);
out:
    if (tool_close_file(log, o->log_path, err, sizeof err) && !rc)
        rc = DMUON_FAIL(DMUON_EIO, "--log: %s", err);
    if (tool_close_file(rlog, o->rank_log_path, err, sizeof err) && !rc)
        rc = DMUON_FAIL(DMUON_EIO, "--rank-log: %s", err);
    free(ranks);
    free_trainer(&t);
    return rc;
}
