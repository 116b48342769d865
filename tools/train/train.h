/*
 * train.h — the trainer's loop on the training runtime (dmuon/runtime.h):
 * the model of model.h computes on the parameters the runtime gathers, per
 * plan layer, and writes its gradients into the runtime's buffers; the
 * runtime reduces them to the owners and runs the optimizer (lines A–D).
 *
 * Per step, per micro-batch (every rank, same order):
 *   pre_forward(root)  embedding
 *     per block l: pre_forward(l)  block forward  post_forward(l)
 *   head (final norm, lm_head, loss)  post_forward(root)
 *   pre_backward(root)  head backward
 *     per block l in reverse:
 *       pre_backward(l)
 *       [--recompute: recompute_begin  pre_forward(l)  block forward
 *        post_forward(l)  recompute_end]
 *       block backward into dmuon_rt_grad  post_backward(l)
 *   embedding backward  post_backward(root)
 * then dmuon_rt_step with the step's learning rates (schedule below).
 * Validation: forward passes, each followed by the backward hooks without
 * compute (zero gradients; the runtime has no forward-only pass).
 *
 * Gradients are of the mean loss over the global batch: each rank scales its
 * summed cross-entropy by 1 / (global sequences · T · micro-batches) and the
 * runtime sums over ranks and micro-batches.
 *
 * Schedule (per optimizer step s of S): linear warmup over W steps from
 * lr/W, then constant or cosine down to min_lr_frac·lr at step S−1; the
 * same factor multiplies the Muon and the AdamW rate.
 */
#ifndef DMUON_TRAIN_TRAIN_H
#define DMUON_TRAIN_TRAIN_H

#include <mpi.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

#include "data.h"
#include "dmuon/plan.h"
#include "dmuon/rc.h"
#include "dmuon/runtime.h"
#include "model.h"

typedef enum { TT_SCHED_COSINE = 0, TT_SCHED_CONSTANT } tt_schedule;

typedef struct {
    tm_config model;
    int batch;                /* global sequences per micro-batch (divisible by ranks) */
    int micro;                /* micro-batches per step */
    int64_t steps;            /* total optimizer steps (a resumed run continues to it);
                                 the schedule's length */
    int64_t stop_at;          /* > 0: stop (evaluate, save, export) after this many steps */
    double lr, adamw_lr;      /* peak Muon / AdamW rates */
    int64_t warmup;           /* warmup steps */
    tt_schedule schedule;
    double min_lr_frac;       /* cosine floor, fraction of the peak */
    uint64_t seed;            /* initial values */
    uint64_t data_seed;       /* batches */
    double init_std;
    bool recompute;
    int64_t eval_every;       /* validation every N steps (and first/last); 0: first/last only */
    int val_windows;          /* validation sequences per evaluation */
    const char *log_path;     /* CSV (rank 0), NULL: none */
    const char *rank_log_path; /* CSV (rank 0): every rank's figures of every step, NULL: none */
    const char *save_dir, *resume_dir, *export_path;
    int64_t save_every;       /* > 0: also save to save_dir after every N-th step */
    volatile sig_atomic_t *stop; /* non-NULL: a signal number set here (on any rank) ends
                                    the run after the current step, saved to save_dir */
    bool quiet;               /* no progress on stderr */
    int progress_every;       /* progress line every N steps (rank 0) */
} tt_opts;

/* Defaults of every field. */
void tt_opts_init(tt_opts *o);

/* What a run measured (same on every rank). */
typedef struct {
    double first_loss, last_loss;            /* training loss of the first / last step run */
    double first_val, last_val;              /* validation loss at the start / end */
    double wall_s;                           /* the loop */
    int64_t steps_run;
    int interrupted;                         /* the signal that stopped the run, or 0 */
    int64_t next_step;                       /* the step a --resume of the save starts at */
} tt_result;

/* Learning-rate factor of step s (see above), in (0, 1]. */
double tt_lr_factor(const tt_opts *o, int64_t s);

/* Trains under plan on comm (collective).  rt_opts: line, ZeRO stage,
 * virtual nodes, optimizer hyperparameters.  The plan must be of the model
 * o->model (dmuon_plan_match_model against tm_model_build).  Errors: those of
 * the runtime (dmuon/runtime.h) and of the checkpoint calls, DMUON_EINVAL
 * (batch not divisible by the ranks, the plan's layers are not the model's),
 * DMUON_EIO (log file), DMUON_ENOMEM, DMUON_ENUMERIC (a non-finite loss).
 * Stopped by *o->stop, the ranks agree at the end of a step (the flag rides
 * on the step's figure reduction), save when save_dir is set, skip the final
 * evaluation and the export, and return DMUON_OK with res->interrupted set. */
dmuon_rc tt_train(const tt_opts *o, const dmuon_plan *plan, const dmuon_rt_opts *rt_opts,
                  MPI_Comm comm, const td_data *data, tt_result *res);

#endif
