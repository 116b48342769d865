/*
 * model.c — forward and backward of the trainer's llama-style decoder
 * (see model.h for the architecture and the conventions).
 *
 * Invariants: every tensor is row-major FP32; a matrix W of shape [O, I]
 * maps a row x [I] to x Wᵀ [O] (PyTorch nn.Linear); backward functions add
 * into weight gradients and never zero them; a->dx is the only gradient
 * that flows between the pieces (head → blocks in reverse → embedding).
 * Products go through OpenBLAS cblas_sgemm; reductions that decide the
 * loss (log-sum-exp) are accumulated in double.
 */
#include "model.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

#include "dmuon/types.h"

/* --------------------------------------------------------------- config -- */

void tm_config_init(tm_config *c)
{
    memset(c, 0, sizeof *c);
    c->vocab = TM_VOCAB;
    c->dim = 64;
    c->layers = 2;
    c->heads = 4;
    c->kv_heads = 2;
    c->head_dim = 16;
    c->ffn = 192;
    c->seq = 64;
    c->tie = false;
    c->rope_theta = 10000.0;
    c->norm_eps = 1e-5;
}

dmuon_rc tm_config_check(tm_config *c)
{
    if (c->vocab != TM_VOCAB)
        return DMUON_FAIL(DMUON_EINVAL, "vocab: expected %d (byte-level tokens), got %d",
                          TM_VOCAB, c->vocab);
    if (c->dim <= 0 || c->layers <= 0 || c->heads <= 0 || c->kv_heads <= 0 || c->ffn <= 0 ||
        c->seq <= 0)
        return DMUON_FAIL(DMUON_EINVAL, "model sizes: dim %d, layers %d, heads %d, kv-heads %d, "
                                        "ffn %d, seq %d: each must be > 0",
                          c->dim, c->layers, c->heads, c->kv_heads, c->ffn, c->seq);
    if (c->dim % c->heads)
        return DMUON_FAIL(DMUON_EINVAL, "heads: %d does not divide dim %d", c->heads, c->dim);
    if (c->heads % c->kv_heads)
        return DMUON_FAIL(DMUON_EINVAL, "kv-heads: %d does not divide heads %d", c->kv_heads,
                          c->heads);
    c->head_dim = c->dim / c->heads;
    if (c->head_dim % 2)
        return DMUON_FAIL(DMUON_EINVAL, "head dim %d (dim / heads) must be even for RoPE",
                          c->head_dim);
    if (!(c->rope_theta > 0) || !(c->norm_eps > 0))
        return DMUON_FAIL(DMUON_EINVAL, "rope theta and norm eps must be > 0");
    return DMUON_OK;
}

/* ----------------------------------------------------------- parameters -- */

static const char *const block_names[TM_BLOCK_TENSORS] = {
    "self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
    "self_attn.o_proj.weight", "mlp.gate_proj.weight",    "mlp.up_proj.weight",
    "mlp.down_proj.weight",    "input_layernorm.weight",  "post_attention_layernorm.weight"};

size_t tm_param_count(const tm_config *c)
{
    return (size_t)c->layers * TM_BLOCK_TENSORS + 2 + (c->tie ? 0 : 1);
}

void tm_param_info_of(const tm_config *c, size_t i, tm_param_info *o)
{
    assert(i < tm_param_count(c));
    int64_t D = c->dim, q = (int64_t)c->heads * c->head_dim,
            kv = (int64_t)c->kv_heads * c->head_dim, F = c->ffn;
    memset(o, 0, sizeof *o);
    size_t nb = (size_t)c->layers * TM_BLOCK_TENSORS;
    if (i == 0 || i > nb) {
        o->block = -1;
        o->layer = 0;   /* "(root)", or "(embed)" / "(head)" untied: see below */
        o->kind = i == 0 ? TM_EMBED : i == nb + 1 ? TM_NORM : TM_HEAD;
        snprintf(o->name, sizeof o->name, "%s",
                 o->kind == TM_EMBED ? "model.embed_tokens.weight"
                 : o->kind == TM_NORM ? "model.norm.weight" : "lm_head.weight");
        o->ndim = o->kind == TM_NORM ? 1 : 2;
        o->shape[0] = o->kind == TM_NORM ? D : c->vocab;
        o->shape[1] = o->kind == TM_NORM ? 1 : D;
        if (!c->tie && o->kind != TM_EMBED)
            o->layer = 1 + c->layers;
    } else {
        size_t j = i - 1;
        o->block = (int)(j / TM_BLOCK_TENSORS);
        o->kind = (int)(j % TM_BLOCK_TENSORS);
        o->layer = 1 + o->block;
        snprintf(o->name, sizeof o->name, "model.layers.%d.%s", o->block, block_names[o->kind]);
        static const int rows[TM_BLOCK_TENSORS] = {0, 1, 1, 2, 3, 3, 2, 2, 2};
        static const int cols[TM_BLOCK_TENSORS] = {2, 2, 2, 0, 2, 2, 3, -1, -1};
        int64_t sz[4] = {q, kv, D, F};
        o->shape[0] = sz[rows[o->kind]];
        o->ndim = cols[o->kind] < 0 ? 1 : 2;
        o->shape[1] = cols[o->kind] < 0 ? 1 : sz[cols[o->kind]];
        o->matrix = o->ndim == 2;
    }
    o->numel = o->shape[0] * (o->ndim == 2 ? o->shape[1] : 1);
}

dmuon_rc tm_params_init(tm_params *p, const tm_config *c)
{
    memset(p, 0, sizeof *p);
    p->cfg = *c;
    p->count = tm_param_count(c);
    for (size_t i = 0; i < p->count; i++) {
        tm_param_info in;
        tm_param_info_of(c, i, &in);
        p->numel += in.numel;
    }
    p->mem = calloc((size_t)p->numel, sizeof(float));
    p->t = calloc(p->count, sizeof *p->t);
    if (!p->mem || !p->t) {
        tm_params_release(p);
        return DMUON_FAIL(DMUON_ENOMEM, "out of memory for %lld parameters",
                          (long long)p->numel);
    }
    float *at = p->mem;
    for (size_t i = 0; i < p->count; i++) {
        tm_param_info in;
        tm_param_info_of(c, i, &in);
        p->t[i] = at;
        at += in.numel;
    }
    return DMUON_OK;
}

void tm_params_release(tm_params *p)
{
    free(p->mem);
    free(p->t);
    memset(p, 0, sizeof *p);
}

/* splitmix64 (Steele, Lea, Flood 2014): a counter-based stream. */
static uint64_t splitmix64(uint64_t *s)
{
    uint64_t z = (*s += UINT64_C(0x9e3779b97f4a7c15));
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

/* Uniform in (0, 1) from the top 53 bits. */
static double unif(uint64_t *s)
{
    return ((double)(splitmix64(s) >> 11) + 0.5) / 9007199254740992.0;
}

void tm_params_init_values(tm_params *p, uint64_t seed, double std)
{
    const tm_config *c = &p->cfg;
    for (size_t i = 0; i < p->count; i++) {
        tm_param_info in;
        tm_param_info_of(c, i, &in);
        float *t = p->t[i];
        if (in.ndim == 1) {
            for (int64_t e = 0; e < in.numel; e++)
                t[e] = 1.0f;
            continue;
        }
        double sd = std;
        if (in.kind == TM_O || in.kind == TM_DOWN)
            sd /= sqrt(2.0 * c->layers);
        uint64_t s = dmuon_digest(in.name, strlen(in.name), DMUON_DIGEST_SEED) ^
                     (seed * UINT64_C(0x2545f4914f6cdd1d));
        for (int64_t e = 0; e < in.numel; e += 2) {
            /* Box–Muller: two normals per pair of uniforms */
            double r = sqrt(-2.0 * log(unif(&s))), th = 2.0 * M_PI * unif(&s);
            t[e] = (float)(sd * r * cos(th));
            if (e + 1 < in.numel)
                t[e + 1] = (float)(sd * r * sin(th));
        }
    }
}

void tm_params_block(const tm_params *p, int l, tm_block_w *w)
{
    for (int k = 0; k < TM_BLOCK_TENSORS; k++)
        w->t[k] = p->t[1 + (size_t)l * TM_BLOCK_TENSORS + (size_t)k];
}

void tm_params_block_g(tm_params *p, int l, tm_block_g *g)
{
    for (int k = 0; k < TM_BLOCK_TENSORS; k++)
        g->t[k] = p->t[1 + (size_t)l * TM_BLOCK_TENSORS + (size_t)k];
}

void tm_params_root(const tm_params *p, tm_root_w *w)
{
    size_t nb = (size_t)p->cfg.layers * TM_BLOCK_TENSORS;
    w->t[TM_EMBED] = p->t[0];
    w->t[TM_NORM] = p->t[nb + 1];
    w->t[TM_HEAD] = p->cfg.tie ? p->t[0] : p->t[nb + 2];
}

void tm_params_root_g(tm_params *p, tm_root_g *g)
{
    size_t nb = (size_t)p->cfg.layers * TM_BLOCK_TENSORS;
    g->t[TM_EMBED] = p->t[0];
    g->t[TM_NORM] = p->t[nb + 1];
    g->t[TM_HEAD] = p->cfg.tie ? p->t[0] : p->t[nb + 2];
}

/* ---------------------------------------------------------- activations -- */

dmuon_rc tm_acts_init(tm_acts *a, const tm_config *c, int B, int T, bool recompute)
{
    memset(a, 0, sizeof *a);
    if (B <= 0 || T <= 0 || T > c->seq)
        return DMUON_FAIL(DMUON_EINVAL, "activations: batch %d x seq %d (model seq %d)", B, T,
                          c->seq);
    a->cfg = *c;
    a->B = B;
    a->T = T;
    a->recompute = recompute;
    size_t N = (size_t)B * T, D = (size_t)c->dim, F = (size_t)c->ffn, V = (size_t)c->vocab;
    size_t Q = (size_t)c->heads * c->head_dim, KV = (size_t)c->kv_heads * c->head_dim;
    size_t L = (size_t)c->layers, hh = (size_t)c->head_dim / 2;
    size_t att = (size_t)B * c->heads * T * T;
    /* per block: rstd1, h1, q, k, v, att, ao, x1, rstd2, h2, g, u, s */
    size_t per_block = N + N * D + N * Q + 2 * N * KV + att + N * Q + N * D + N + N * D + 3 * N * F;
    size_t stored = recompute ? 1 : L;
    size_t total = (L + 1) * N * D + stored * per_block + N + N * D + N * V + 2 * (size_t)c->seq * hh
                   /* backward scratch */
                   + 2 * N * D + 2 * N * Q + 2 * N * KV + (size_t)T * T + 2 * N * F + N * D;
    a->mem = malloc(total * sizeof(float));
    a->blk = calloc(L, sizeof *a->blk);
    if (!a->mem || !a->blk) {
        tm_acts_release(a);
        return DMUON_FAIL(DMUON_ENOMEM, "out of memory for activations (%zu floats)", total);
    }
    float *at = a->mem;
#define TAKE(n) (at += (n), at - (n))
    a->resid = TAKE((L + 1) * N * D);
    for (size_t s = 0; s < stored; s++) {
        tm_block_acts *b = &a->blk[s];
        b->rstd1 = TAKE(N);
        b->h1 = TAKE(N * D);
        b->q = TAKE(N * Q);
        b->k = TAKE(N * KV);
        b->v = TAKE(N * KV);
        b->att = TAKE(att);
        b->ao = TAKE(N * Q);
        b->x1 = TAKE(N * D);
        b->rstd2 = TAKE(N);
        b->h2 = TAKE(N * D);
        b->g = TAKE(N * F);
        b->u = TAKE(N * F);
        b->s = TAKE(N * F);
    }
    for (size_t l = 0; l < L; l++) {
        if (recompute && l > 0)
            a->blk[l] = a->blk[0];
        a->blk[l].x_in = a->resid + l * N * D;
    }
    a->rstdf = TAKE(N);
    a->xf = TAKE(N * D);
    a->probs = TAKE(N * V);
    a->cos = TAKE((size_t)c->seq * hh);
    a->sin = TAKE((size_t)c->seq * hh);
    a->dx = TAKE(N * D);
    a->dh = TAKE(N * D);
    a->dq = TAKE(N * Q);
    a->dk = TAKE(N * KV);
    a->dv = TAKE(N * KV);
    a->dao = TAKE(N * Q);
    a->datt = TAKE((size_t)T * T);
    a->dg = TAKE(N * F);
    a->du = TAKE(N * F);
    a->dxf = TAKE(N * D);
#undef TAKE
    assert((size_t)(at - a->mem) == total);
    for (int t = 0; t < c->seq; t++)
        for (size_t i = 0; i < hh; i++) {
            double f = pow(c->rope_theta, -2.0 * (double)i / c->head_dim);
            a->cos[(size_t)t * hh + i] = (float)cos(t * f);
            a->sin[(size_t)t * hh + i] = (float)sin(t * f);
        }
    return DMUON_OK;
}

void tm_acts_release(tm_acts *a)
{
    free(a->mem);
    free(a->blk);
    memset(a, 0, sizeof *a);
}

/* ------------------------------------------------------------ kernels -- */

/* out[N, O] = x[N, In] Wᵀ (W [O, In]); beta 0 overwrites, 1 adds. */
static void mm_xwt(float *out, const float *x, const float *W, int N, int O, int In, float beta)
{
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, O, In, 1.0f, x, In, W, In, beta, out, O);
}

/* dx[N, In] (+)= dy[N, O] W[O, In] */
static void mm_dx(float *dx, const float *dy, const float *W, int N, int O, int In, float beta)
{
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, In, O, 1.0f, dy, O, W, In, beta, dx, In);
}

/* dW[O, In] += dy[N, O]ᵀ x[N, In] */
static void mm_dw(float *dW, const float *dy, const float *x, int N, int O, int In)
{
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, O, In, N, 1.0f, dy, O, x, In, 1.0f, dW, In);
}

/* y[n] = x[n] * rstd[n] * w, rstd[n] = 1/√(mean(x[n]²) + eps); x, y [N, D]. */
static void rmsnorm_forward(float *y, float *rstd, const float *x, const float *w, int N, int D,
                            double eps)
{
    for (int n = 0; n < N; n++) {
        const float *xr = x + (size_t)n * D;
        double ss = 0;
        for (int d = 0; d < D; d++)
            ss += (double)xr[d] * xr[d];
        float r = (float)(1.0 / sqrt(ss / D + eps));
        rstd[n] = r;
        float *yr = y + (size_t)n * D;
        for (int d = 0; d < D; d++)
            yr[d] = xr[d] * r * w[d];
    }
}

/* Given dy = ∂/∂y: dx += ∂/∂x, dw += ∂/∂w.
 * With x̂ = x·rstd: ∂/∂x = rstd·(dŷ − x̂·mean(dŷ ⊙ x̂)), dŷ = dy ⊙ w. */
static void rmsnorm_backward(float *dx, float *dw, const float *dy, const float *x,
                             const float *rstd, const float *w, int N, int D)
{
    for (int n = 0; n < N; n++) {
        const float *xr = x + (size_t)n * D, *dyr = dy + (size_t)n * D;
        float *dxr = dx + (size_t)n * D;
        float r = rstd[n];
        double dot = 0;
        for (int d = 0; d < D; d++) {
            dot += (double)dyr[d] * w[d] * xr[d] * r;
            dw[d] += dyr[d] * xr[d] * r;
        }
        float m = (float)(dot / D);
        for (int d = 0; d < D; d++)
            dxr[d] += r * (dyr[d] * w[d] - xr[d] * r * m);
    }
}

/* RoPE on x [N, heads*hd] in place (rotate_half pairs (i, i + hd/2));
 * sign −1 applies the inverse rotation (the backward). */
static void rope(float *x, const tm_acts *a, int heads, float sign)
{
    int hd = a->cfg.head_dim, hh = hd / 2, T = a->T;
    for (int n = 0; n < a->B * T; n++) {
        int t = n % T;
        const float *c = a->cos + (size_t)t * hh, *s = a->sin + (size_t)t * hh;
        for (int h = 0; h < heads; h++) {
            float *v = x + ((size_t)n * heads + h) * hd;
            for (int i = 0; i < hh; i++) {
                float x1 = v[i], x2 = v[i + hh], si = sign * s[i];
                v[i] = x1 * c[i] - x2 * si;
                v[i + hh] = x2 * c[i] + x1 * si;
            }
        }
    }
}

static float silu(float x) { return x / (1.0f + expf(-x)); }

/* --------------------------------------------------------------- compute -- */

void tm_embed_forward(tm_acts *a, const tm_root_w *w, const uint8_t *tokens)
{
    int N = a->B * a->T, D = a->cfg.dim;
    for (int n = 0; n < N; n++)
        memcpy(a->resid + (size_t)n * D, w->t[TM_EMBED] + (size_t)tokens[n] * D,
               (size_t)D * sizeof(float));
}

void tm_block_forward(tm_acts *a, int l, const tm_block_w *w)
{
    const tm_config *c = &a->cfg;
    tm_block_acts *b = &a->blk[l];
    int B = a->B, T = a->T, N = B * T, D = c->dim, F = c->ffn, hd = c->head_dim;
    int H = c->heads, KVh = c->kv_heads, Q = H * hd, KV = KVh * hd, grp = H / KVh;
    float scale = 1.0f / sqrtf((float)hd);
    float *x_out = a->resid + (size_t)(l + 1) * N * D;

    rmsnorm_forward(b->h1, b->rstd1, b->x_in, w->t[TM_LN1], N, D, c->norm_eps);
    mm_xwt(b->q, b->h1, w->t[TM_Q], N, Q, D, 0.0f);
    mm_xwt(b->k, b->h1, w->t[TM_K], N, KV, D, 0.0f);
    mm_xwt(b->v, b->h1, w->t[TM_V], N, KV, D, 0.0f);
    rope(b->q, a, H, 1.0f);
    rope(b->k, a, KVh, 1.0f);
    for (int s = 0; s < B; s++)
        for (int h = 0; h < H; h++) {
            int g = h / grp;
            const float *q = b->q + (size_t)s * T * Q + (size_t)h * hd;
            const float *k = b->k + (size_t)s * T * KV + (size_t)g * hd;
            const float *v = b->v + (size_t)s * T * KV + (size_t)g * hd;
            float *P = b->att + ((size_t)s * H + h) * T * T;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hd, scale, q, Q, k, KV,
                        0.0f, P, T);
            for (int i = 0; i < T; i++) {
                float *row = P + (size_t)i * T, mx = row[0];
                for (int j = 1; j <= i; j++)
                    mx = row[j] > mx ? row[j] : mx;
                double sum = 0;
                for (int j = 0; j <= i; j++) {
                    row[j] = expf(row[j] - mx);
                    sum += row[j];
                }
                float inv = (float)(1.0 / sum);
                for (int j = 0; j <= i; j++)
                    row[j] *= inv;
                for (int j = i + 1; j < T; j++)
                    row[j] = 0.0f;
            }
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hd, T, 1.0f, P, T, v, KV,
                        0.0f, b->ao + (size_t)s * T * Q + (size_t)h * hd, Q);
        }
    /* x1 = x + ao Woᵀ */
    memcpy(b->x1, b->x_in, (size_t)N * D * sizeof(float));
    mm_xwt(b->x1, b->ao, w->t[TM_O], N, D, Q, 1.0f);
    rmsnorm_forward(b->h2, b->rstd2, b->x1, w->t[TM_LN2], N, D, c->norm_eps);
    mm_xwt(b->g, b->h2, w->t[TM_GATE], N, F, D, 0.0f);
    mm_xwt(b->u, b->h2, w->t[TM_UP], N, F, D, 0.0f);
    for (size_t i = 0; i < (size_t)N * F; i++)
        b->s[i] = silu(b->g[i]) * b->u[i];
    memcpy(x_out, b->x1, (size_t)N * D * sizeof(float));
    mm_xwt(x_out, b->s, w->t[TM_DOWN], N, D, F, 1.0f);
}

double tm_head_forward(tm_acts *a, const tm_root_w *w, const uint8_t *targets, double *seq_loss)
{
    const tm_config *c = &a->cfg;
    int N = a->B * a->T, D = c->dim, V = c->vocab;
    const float *xL = a->resid + (size_t)c->layers * N * D;
    rmsnorm_forward(a->xf, a->rstdf, xL, w->t[TM_NORM], N, D, c->norm_eps);
    mm_xwt(a->probs, a->xf, w->t[TM_HEAD], N, V, D, 0.0f);
    double loss = 0, seq = 0;
    for (int n = 0; n < N; n++) {
        float *row = a->probs + (size_t)n * V, mx = row[0];
        for (int v = 1; v < V; v++)
            mx = row[v] > mx ? row[v] : mx;
        double sum = 0, lt = row[targets[n]];
        for (int v = 0; v < V; v++)
            sum += exp((double)row[v] - mx);
        seq += log(sum) + mx - lt;
        for (int v = 0; v < V; v++)
            row[v] = (float)(exp((double)row[v] - mx) / sum);
        if ((n + 1) % a->T == 0) {
            if (seq_loss)
                seq_loss[n / a->T] = seq;
            loss += seq;
            seq = 0;
        }
    }
    return loss;
}

void tm_head_backward(tm_acts *a, const tm_root_w *w, tm_root_g *g, const uint8_t *targets,
                      float scale)
{
    const tm_config *c = &a->cfg;
    int N = a->B * a->T, D = c->dim, V = c->vocab;
    const float *xL = a->resid + (size_t)c->layers * N * D;
    /* dlogits = scale (p − onehot), in place of the probabilities */
    float *dl = a->probs;
    for (int n = 0; n < N; n++) {
        float *row = dl + (size_t)n * V;
        for (int v = 0; v < V; v++)
            row[v] *= scale;
        row[targets[n]] -= scale;
    }
    mm_dx(a->dxf, dl, w->t[TM_HEAD], N, V, D, 0.0f);
    mm_dw(g->t[TM_HEAD], dl, a->xf, N, V, D);
    memset(a->dx, 0, (size_t)N * D * sizeof(float));
    rmsnorm_backward(a->dx, g->t[TM_NORM], a->dxf, xL, a->rstdf, w->t[TM_NORM], N, D);
}

void tm_block_backward(tm_acts *a, int l, const tm_block_w *w, tm_block_g *gr)
{
    const tm_config *c = &a->cfg;
    tm_block_acts *b = &a->blk[l];
    int B = a->B, T = a->T, N = B * T, D = c->dim, F = c->ffn, hd = c->head_dim;
    int H = c->heads, KVh = c->kv_heads, Q = H * hd, KV = KVh * hd, grp = H / KVh;
    float scale = 1.0f / sqrtf((float)hd);
    float *dx = a->dx;

    /* MLP: x_out = x1 + s Wdᵀ; dx is ∂/∂x_out and becomes ∂/∂x1 */
    float *ds = a->dg; /* ds, then dg in place */
    mm_dx(ds, dx, w->t[TM_DOWN], N, D, F, 0.0f);
    mm_dw(gr->t[TM_DOWN], dx, b->s, N, D, F);
    for (size_t i = 0; i < (size_t)N * F; i++) {
        float gi = b->g[i], sg = 1.0f / (1.0f + expf(-gi));
        a->du[i] = ds[i] * gi * sg;
        a->dg[i] = ds[i] * b->u[i] * sg * (1.0f + gi * (1.0f - sg));
    }
    mm_dx(a->dh, a->dg, w->t[TM_GATE], N, F, D, 0.0f);
    mm_dx(a->dh, a->du, w->t[TM_UP], N, F, D, 1.0f);
    mm_dw(gr->t[TM_GATE], a->dg, b->h2, N, F, D);
    mm_dw(gr->t[TM_UP], a->du, b->h2, N, F, D);
    rmsnorm_backward(dx, gr->t[TM_LN2], a->dh, b->x1, b->rstd2, w->t[TM_LN2], N, D);

    /* attention: x1 = x + ao Woᵀ; dx becomes ∂/∂x */
    mm_dx(a->dao, dx, w->t[TM_O], N, D, Q, 0.0f);
    mm_dw(gr->t[TM_O], dx, b->ao, N, D, Q);
    memset(a->dk, 0, (size_t)N * KV * sizeof(float));
    memset(a->dv, 0, (size_t)N * KV * sizeof(float));
    for (int s = 0; s < B; s++)
        for (int h = 0; h < H; h++) {
            int g = h / grp;
            size_t qo = (size_t)s * T * Q + (size_t)h * hd, ko = (size_t)s * T * KV + (size_t)g * hd;
            const float *P = b->att + ((size_t)s * H + h) * T * T;
            float *dP = a->datt;
            /* dP = dO Vᵀ;  dV += Pᵀ dO */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hd, 1.0f, a->dao + qo, Q,
                        b->v + ko, KV, 0.0f, dP, T);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, hd, T, 1.0f, P, T,
                        a->dao + qo, Q, 1.0f, a->dv + ko, KV);
            /* softmax backward: dS = P ⊙ (dP − rowsum(P ⊙ dP)) */
            for (int i = 0; i < T; i++) {
                const float *pr = P + (size_t)i * T;
                float *dr = dP + (size_t)i * T;
                double r = 0;
                for (int j = 0; j <= i; j++)
                    r += (double)pr[j] * dr[j];
                for (int j = 0; j <= i; j++)
                    dr[j] = pr[j] * (dr[j] - (float)r);
                for (int j = i + 1; j < T; j++)
                    dr[j] = 0.0f;
            }
            /* dQ = scale dS K;  dK += scale dSᵀ Q */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hd, T, scale, dP, T,
                        b->k + ko, KV, 0.0f, a->dq + qo, Q);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, hd, T, scale, dP, T,
                        b->q + qo, Q, 1.0f, a->dk + ko, KV);
        }
    rope(a->dq, a, H, -1.0f);
    rope(a->dk, a, KVh, -1.0f);
    mm_dx(a->dh, a->dq, w->t[TM_Q], N, Q, D, 0.0f);
    mm_dx(a->dh, a->dk, w->t[TM_K], N, KV, D, 1.0f);
    mm_dx(a->dh, a->dv, w->t[TM_V], N, KV, D, 1.0f);
    mm_dw(gr->t[TM_Q], a->dq, b->h1, N, Q, D);
    mm_dw(gr->t[TM_K], a->dk, b->h1, N, KV, D);
    mm_dw(gr->t[TM_V], a->dv, b->h1, N, KV, D);
    rmsnorm_backward(dx, gr->t[TM_LN1], a->dh, b->x_in, b->rstd1, w->t[TM_LN1], N, D);
}

void tm_embed_backward(tm_acts *a, tm_root_g *g, const uint8_t *tokens)
{
    int N = a->B * a->T, D = a->cfg.dim;
    for (int n = 0; n < N; n++) {
        float *row = g->t[TM_EMBED] + (size_t)tokens[n] * D;
        const float *d = a->dx + (size_t)n * D;
        for (int e = 0; e < D; e++)
            row[e] += d[e];
    }
}

double tm_forward_backward(tm_acts *a, const tm_params *p, tm_params *grads,
                           const uint8_t *tokens, const uint8_t *targets, float scale)
{
    tm_root_w rw;
    tm_block_w bw;
    tm_params_root(p, &rw);
    tm_embed_forward(a, &rw, tokens);
    for (int l = 0; l < p->cfg.layers; l++) {
        tm_params_block(p, l, &bw);
        tm_block_forward(a, l, &bw);
    }
    double loss = tm_head_forward(a, &rw, targets, NULL);
    if (!grads)
        return loss;
    tm_root_g rg;
    tm_block_g bg;
    tm_params_root_g(grads, &rg);
    tm_head_backward(a, &rw, &rg, targets, scale);
    for (int l = p->cfg.layers - 1; l >= 0; l--) {
        tm_params_block(p, l, &bw);
        tm_params_block_g(grads, l, &bg);
        if (a->recompute)
            tm_block_forward(a, l, &bw);
        tm_block_backward(a, l, &bw, &bg);
    }
    tm_embed_backward(a, &rg, tokens);
    return loss;
}
