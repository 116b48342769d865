/*
 * optim.c — the owner-only updates of dmuon/optim.h: Muon on one whole
 * matrix, its momentum and apply halves on element ranges (for
 * gather-then-replicate), and AdamW on element ranges.
 *
 * Invariant: a failing Muon update leaves the master and the momentum as
 * they were (the momentum is computed into scratch first and committed only
 * after Newton–Schulz succeeded).  Arithmetic is binary32 on the stored
 * values with double for the scalars, the same on every rank, so the owner
 * and a single-process reference give the same bits.
 */
#include "dmuon/optim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void dmuon_optim_opts_init(dmuon_optim_opts *o)
{
    memset(o, 0, sizeof *o);
    o->momentum = 0.95;
    o->nesterov = 1;
    o->muon_weight_decay = 0.0;
    o->scale = DMUON_MUON_SCALE_RMS;
    o->beta1 = 0.9;
    o->beta2 = 0.95;
    o->eps = 1e-8;
    o->adamw_weight_decay = 0.0;
    o->clip_norm = 0.0;
    strcpy(o->ns_variant, "gram-pe5");
}

static int finite_in(double v, double lo, double hi) { return isfinite(v) && v >= lo && v < hi; }

dmuon_rc dmuon_optim_opts_check(const dmuon_optim_opts *o)
{
    if (!finite_in(o->momentum, 0.0, 1.0))
        return DMUON_FAIL(DMUON_EINVAL, "optimizer: momentum %g: expected 0 <= mu < 1", o->momentum);
    if (!finite_in(o->beta1, 0.0, 1.0) || !finite_in(o->beta2, 0.0, 1.0))
        return DMUON_FAIL(DMUON_EINVAL, "optimizer: betas %g, %g: expected 0 <= beta < 1",
                          o->beta1, o->beta2);
    if (!(isfinite(o->eps) && o->eps > 0))
        return DMUON_FAIL(DMUON_EINVAL, "optimizer: eps %g: expected a finite number > 0", o->eps);
    if (!finite_in(o->muon_weight_decay, 0.0, INFINITY) ||
        !finite_in(o->adamw_weight_decay, 0.0, INFINITY))
        return DMUON_FAIL(DMUON_EINVAL, "optimizer: weight decay %g / %g: expected >= 0",
                          o->muon_weight_decay, o->adamw_weight_decay);
    if (!isfinite(o->clip_norm))
        return DMUON_FAIL(DMUON_EINVAL, "optimizer: clip norm %g: expected a finite number",
                          o->clip_norm);
    if (o->scale != DMUON_MUON_SCALE_RMS && o->scale != DMUON_MUON_SCALE_SHAPE)
        return DMUON_FAIL(DMUON_EINVAL, "optimizer: unknown Muon update scale %d", (int)o->scale);
    dmuon_ns_opts ns;
    dmuon_ns_opts_init(&ns);
    DMUON_TRY(dmuon_ns_opts_set_variant(&ns, o->ns_variant));
    return DMUON_OK;
}

double dmuon_muon_scale_of(const dmuon_optim_opts *o, int64_t m, int64_t n)
{
    if (o->scale == DMUON_MUON_SCALE_SHAPE) {
        double r = (double)m / (double)n;
        return sqrt(r > 1.0 ? r : 1.0);
    }
    return 0.2 * sqrt((double)(m > n ? m : n));
}

void dmuon_muon_momentum(const dmuon_optim_opts *o, int64_t n, float *mom, const float *g,
                         float *u)
{
    const float mu = (float)o->momentum;
    for (int64_t i = 0; i < n; i++) {
        float mi = mu * mom[i] + g[i];
        mom[i] = mi;
        u[i] = o->nesterov ? g[i] + mu * mi : mi;
    }
}

void dmuon_muon_apply(const dmuon_optim_opts *o, double lr, double scale, int64_t n, float *w,
                      const float *o_dir)
{
    const float keep = (float)(1.0 - lr * o->muon_weight_decay);
    const float step = (float)(lr * scale);
    for (int64_t i = 0; i < n; i++)
        w[i] = w[i] * keep - step * o_dir[i];
}

dmuon_rc dmuon_muon_update(dmuon_ns *ns, const dmuon_optim_opts *o, double lr, int64_t m,
                           int64_t n, float *w, float *mom, const float *g, float *work)
{
    const int64_t len = m * n;
    const float mu = (float)o->momentum;
    float *buf = work, *own = NULL;
    if (!buf) {
        own = malloc((size_t)len * sizeof *own);
        if (!own)
            return DMUON_FAIL(DMUON_ENOMEM, "muon update: %lld x %lld scratch", (long long)m,
                              (long long)n);
        buf = own;
    }
    /* U into scratch without touching mom. */
    for (int64_t i = 0; i < len; i++) {
        float mi = mu * mom[i] + g[i];
        buf[i] = o->nesterov ? g[i] + mu * mi : mi;
    }
    dmuon_rc rc = dmuon_ns_run_host(ns, buf, m, n, buf);
    if (rc != DMUON_OK) {
        dmuon_err_trace_add(rc, __FILE__, __LINE__);
        free(own);
        return rc;
    }
    for (int64_t i = 0; i < len; i++)
        mom[i] = mu * mom[i] + g[i];
    dmuon_muon_apply(o, lr, dmuon_muon_scale_of(o, m, n), len, w, buf);
    free(own);
    return DMUON_OK;
}

void dmuon_adamw_update(const dmuon_optim_opts *o, double lr, double decay, int64_t t,
                        int64_t n, float *w, float *m, float *v, const float *g)
{
    const float b1 = (float)o->beta1, b2 = (float)o->beta2;
    const double c1 = 1.0 - pow(o->beta1, (double)t), c2 = 1.0 - pow(o->beta2, (double)t);
    const float step = (float)(lr / c1), rc2 = (float)(1.0 / sqrt(c2)), eps = (float)o->eps;
    const float keep = (float)(1.0 - lr * decay);
    for (int64_t i = 0; i < n; i++) {
        float mi = b1 * m[i] + (1.0f - b1) * g[i];
        float vi = b2 * v[i] + (1.0f - b2) * g[i] * g[i];
        m[i] = mi;
        v[i] = vi;
        w[i] = w[i] * keep - step * mi / (sqrtf(vi) * rc2 + eps);
    }
}
