/*
 * optim.c — the owner-only updates of dmuon/optim.h: Muon on one whole
 * matrix, its direction and finishing halves on element ranges (for
 * gather-then-replicate and the runtime's check-then-commit step), and
 * AdamW on element ranges.
 *
 * Invariant: a failing update leaves the master and the optimizer state as
 * they were: the direction is computed into scratch, and each update is
 * computed once without storing (checking that every new value is finite)
 * before the same arithmetic stores it — the runtime agrees the check's
 * outcome over every rank between the two.  Arithmetic is binary32 on the stored
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

void dmuon_muon_direction(const dmuon_optim_opts *o, int64_t n, const float *mom,
                          const float *g, float *u)
{
    const float mu = (float)o->momentum;
    for (int64_t i = 0; i < n; i++) {
        float mi = mu * mom[i] + g[i];
        u[i] = o->nesterov ? g[i] + mu * mi : mi;
    }
}

int64_t dmuon_muon_finish(const dmuon_optim_opts *o, double lr, double scale, int64_t n,
                          float *w, float *mom, const float *g, const float *o_dir, int write)
{
    const float mu = (float)o->momentum;
    const float keep = (float)(1.0 - lr * o->muon_weight_decay);
    const float step = (float)(lr * scale);
    for (int64_t i = 0; i < n; i++) {
        float mi = mu * mom[i] + g[i];
        float wi = w[i] * keep - step * o_dir[i];
        if (!write) {
            if (!isfinite(mi) || !isfinite(wi))
                return i;
            continue;
        }
        mom[i] = mi;
        w[i] = wi;
    }
    return -1;
}

dmuon_rc dmuon_muon_update(dmuon_ns *ns, const dmuon_optim_opts *o, double lr, int64_t m,
                           int64_t n, float *w, float *mom, const float *g, float *work)
{
    const int64_t len = m * n;
    float *buf = work, *own = NULL;
    if (!buf) {
        own = malloc((size_t)len * sizeof *own);
        if (!own)
            return DMUON_FAIL(DMUON_ENOMEM, "muon update: %lld x %lld scratch", (long long)m,
                              (long long)n);
        buf = own;
    }
    /* U into scratch without touching mom; nothing is written unless the
     * new momentum and weights are finite. */
    dmuon_muon_direction(o, len, mom, g, buf);
    dmuon_rc rc = dmuon_ns_run_host(ns, buf, m, n, buf);
    if (rc != DMUON_OK) {
        dmuon_err_trace_add(rc, __FILE__, __LINE__);
        free(own);
        return rc;
    }
    double scale = dmuon_muon_scale_of(o, m, n);
    int64_t bad = dmuon_muon_finish(o, lr, scale, len, w, mom, g, buf, 0);
    if (bad >= 0) {
        free(own);
        return DMUON_FAIL(DMUON_ENUMERIC, "muon update: %lld x %lld: element %lld of the new "
                          "momentum or weights is not finite", (long long)m, (long long)n,
                          (long long)bad);
    }
    dmuon_muon_finish(o, lr, scale, len, w, mom, g, buf, 1);
    free(own);
    return DMUON_OK;
}

int64_t dmuon_adamw_step(const dmuon_optim_opts *o, double lr, double decay, int64_t t,
                         int64_t n, float *w, float *m, float *v, const float *g, int write)
{
    const float b1 = (float)o->beta1, b2 = (float)o->beta2;
    const double c1 = 1.0 - pow(o->beta1, (double)t), c2 = 1.0 - pow(o->beta2, (double)t);
    const float step = (float)(lr / c1), rc2 = (float)(1.0 / sqrt(c2)), eps = (float)o->eps;
    const float keep = (float)(1.0 - lr * decay);
    for (int64_t i = 0; i < n; i++) {
        float mi = b1 * m[i] + (1.0f - b1) * g[i];
        float vi = b2 * v[i] + (1.0f - b2) * g[i] * g[i];
        float wi = w[i] * keep - step * mi / (sqrtf(vi) * rc2 + eps);
        if (!write) {
            if (!isfinite(mi) || !isfinite(vi) || !isfinite(wi))
                return i;
            continue;
        }
        m[i] = mi;
        v[i] = vi;
        w[i] = wi;
    }
    return -1;
}

void dmuon_adamw_update(const dmuon_optim_opts *o, double lr, double decay, int64_t t,
                        int64_t n, float *w, float *m, float *v, const float *g)
{
    dmuon_adamw_step(o, lr, decay, t, n, w, m, v, g, 1);
}
