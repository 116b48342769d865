/*
 * dmuon/optim.h — the owner-only optimizer updates (paper §2.1, §3; docs/design.md
 * "Optimizer"): Muon on whole matrices, AdamW on element ranges.  Pure
 * arithmetic on caller memory, no communication: the runtime calls them on
 * the owner of each matrix and on each rank's even shard, and tests call
 * them as the single-process reference.
 *
 * Muon, per m × n matrix (row-major FP32), step t ≥ 1, learning rate η:
 *   M ← μ·M + G                                   (momentum, FP32)
 *   U = G + μ·M  (Nesterov, default)  or  U = M
 *   O = NS(U)                                      (dmuon/ns.h; zero U → zero O)
 *   W ← W·(1 − η·λ) − η·scale·O                    (decoupled weight decay λ)
 * scale = 0.2·√max(m, n) (default: matches AdamW's update RMS, Liu et al.
 * 2025, "Muon is scalable for LLM training", arXiv:2502.16982) or
 * √max(1, m/n) (Jordan et al.'s public Muon code).
 * AdamW, per element (Loshchilov & Hutter 2019), step t ≥ 1:
 *   m ← β1·m + (1−β1)·g;  v ← β2·v + (1−β2)·g²
 *   m̂ = m / (1 − β1^t);   v̂ = v / (1 − β2^t)
 *   W ← W·(1 − η·λ) − η·m̂ / (√v̂ + ε)
 * Defaults: μ = 0.95, Nesterov on, Muon λ = 0; AdamW β1 = 0.9, β2 = 0.95,
 * ε = 1e-8, λ = 0 (caller sets decay per group).
 */
#ifndef DMUON_OPTIM_H
#define DMUON_OPTIM_H

#include <stdint.h>

#include "dmuon/ns.h"
#include "dmuon/rc.h"

typedef enum {
    DMUON_MUON_SCALE_RMS = 0,    /* 0.2·√max(m, n) */
    DMUON_MUON_SCALE_SHAPE       /* √max(1, m/n) */
} dmuon_muon_scale;

typedef struct {
    double momentum;             /* μ, default 0.95 */
    int nesterov;                /* default 1 */
    double muon_weight_decay;    /* λ for Muon parameters, default 0 */
    dmuon_muon_scale scale;      /* default RMS */
    double beta1, beta2, eps;    /* AdamW: 0.9, 0.95, 1e-8 */
    double adamw_weight_decay;   /* λ for AdamW parameters, default 0 */
    double clip_norm;            /* global gradient norm clipping; ≤ 0 off (default) */
    char ns_variant[64];         /* NS variant (dmuon_ns_opts_set_variant), default "gram-pe5" */
} dmuon_optim_opts;

void dmuon_optim_opts_init(dmuon_optim_opts *o);

/* Checks ranges: 0 ≤ μ < 1, 0 ≤ β1, β2 < 1, ε > 0, decays ≥ 0, all finite,
 * a known NS variant.  DMUON_EINVAL naming the field. */
dmuon_rc dmuon_optim_opts_check(const dmuon_optim_opts *o);

/* The update scale for an m × n matrix under o. */
double dmuon_muon_scale_of(const dmuon_optim_opts *o, int64_t m, int64_t n);

/* One Muon update of an m × n matrix: w (master, FP32), mom (momentum),
 * g (gradient, read), work (m·n floats of scratch for U and O; may be NULL,
 * then allocated).  lr is η.  ns runs the orthogonalisation (host memory).
 * Errors: DMUON_ENUMERIC (non-finite U, or a new momentum or weight that
 * is not finite, e.g. a finite gradient whose Nesterov direction overflows;
 * nothing written — w and mom keep their values), DMUON_ENOMEM, errors of
 * dmuon_ns_run_host. */
dmuon_rc dmuon_muon_update(dmuon_ns *ns, const dmuon_optim_opts *o, double lr, int64_t m,
                           int64_t n, float *w, float *mom, const float *g, float *work);

/* The Muon direction on an element range (gather-then-replicate keeps
 * momentum in shards), momentum unchanged: u = g + μ·(μ·mom + g) (Nesterov)
 * or u = μ·mom + g.  n elements; u may not alias mom or g. */
void dmuon_muon_direction(const dmuon_optim_opts *o, int64_t n, const float *mom,
                          const float *g, float *u);

/* The rest of a Muon update on an element range given the orthogonalised
 * direction o_dir: mom ← μ·mom + g; w ← w·(1 − lr·λ) − lr·scale·o_dir.
 * With write 0 nothing is stored and the result is the index of the first
 * element whose new momentum or weight is not finite (-1: none); with
 * write 1 the same values are stored (the caller checked first) and the
 * result is -1.  Checking then writing gives the bits of one pass. */
int64_t dmuon_muon_finish(const dmuon_optim_opts *o, double lr, double scale, int64_t n,
                          float *w, float *mom, const float *g, const float *o_dir, int write);

/* One AdamW update of n elements at step t ≥ 1 (bias correction uses t);
 * decay is λ (the caller picks the group's).  write 0: nothing stored, the
 * result is the index of the first element whose new m, v or w is not
 * finite (-1: none); write 1: stored, result -1. */
int64_t dmuon_adamw_step(const dmuon_optim_opts *o, double lr, double decay, int64_t t,
                         int64_t n, float *w, float *m, float *v, const float *g, int write);

/* dmuon_adamw_step with write 1 (the single-process reference's call).
 * Never fails; a caller that must not store non-finite values checks with
 * dmuon_adamw_step(..., 0) first. */
void dmuon_adamw_update(const dmuon_optim_opts *o, double lr, double decay, int64_t t,
                        int64_t n, float *w, float *m, float *v, const float *g);

#endif
