/*
 * model.h — the reference trainer's model: a small llama-style decoder
 * (byte-level, FP32 on the CPU with OpenBLAS), forward and backward.
 *
 * Architecture (Hugging Face transformers' modeling_llama.py, names and
 * shapes as its state dict, PyTorch [out, in]):
 *   x0 = embed[tokens]                                   [N, D]   N = B*T
 *   per block l:
 *     h  = RMSNorm(x) * input_layernorm                  [N, D]
 *     q  = RoPE(h Wqᵀ)  [N, H*hd]   k = RoPE(h Wkᵀ)  [N, KV*hd]   v = h Wvᵀ
 *     a  = softmax(q kᵀ / √hd + causal mask) v           [N, H*hd] (head h
 *          reads kv head h / (H/KV): grouped-query attention)
 *     x  = x + a Woᵀ
 *     h2 = RMSNorm(x) * post_attention_layernorm
 *     x  = x + (silu(h2 Wgᵀ) ⊙ (h2 Wuᵀ)) Wdᵀ             gate/up [N, F]
 *   logits = (RMSNorm(x) * norm) Whᵀ                      [N, V]   Wh = embed
 *                                                         when tied
 *   loss = Σ over tokens of −log softmax(logits)[target]  (a sum: the caller
 *          scales the gradient, see tm_head_backward)
 * RMSNorm(x) = x / √(mean(x²) + eps).  RoPE: rotate_half convention (pairs
 * (i, i + hd/2)), inverse frequencies theta^(−2i/hd).
 *
 * The compute functions take the weights as pointers (tm_block_w,
 * tm_root_w) so a runtime that gathers each layer's parameters hands them
 * in per layer; gradients are *added* into the tm_*_g buffers.  Activations
 * live in one tm_acts allocation (per block, or one block's worth with
 * recomputation).  Not thread-safe per tm_acts.
 *
 * Parameters.  tm_param_count/tm_param_info list the tensors in the order
 * of Hugging Face's config route (dmuon/model.h, model_hf.c): embedding,
 * per block q/k/v/o, gate/up/down, input_layernorm, post_attention_layernorm,
 * then model.norm and (untied) lm_head.  Plan layer of a tensor (tied
 * head): 0 for "(root)" (embedding, final norm, head), 1 + l for block l;
 * untied, "(embed)" 0, the blocks 1 + l, "(head)" (final norm, head) last.  tm_params
 * carves every tensor out of one allocation (llm.c's habit).
 */
#ifndef DMUON_TRAIN_MODEL_H
#define DMUON_TRAIN_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dmuon/rc.h"

#define TM_VOCAB 256          /* byte-level tokens */

typedef struct {
    int vocab;                /* V, 256 */
    int dim;                  /* D */
    int layers;               /* L */
    int heads;                /* H (query heads) */
    int kv_heads;             /* KV, divides H */
    int head_dim;             /* hd = D / H, even */
    int ffn;                  /* F (SwiGLU width) */
    int seq;                  /* T, the longest sequence (RoPE table size) */
    bool tie;                 /* lm_head = embed_tokens */
    double rope_theta;        /* 10000 */
    double norm_eps;          /* 1e-5 */
} tm_config;

/* Defaults of every field (a tiny model); call tm_config_check after
 * changing fields (it also fills head_dim from dim / heads). */
void tm_config_init(tm_config *c);

/* Checks the configuration: every size > 0, heads divide dim, kv_heads
 * divides heads, head_dim even, vocab 256.  DMUON_EINVAL naming the field. */
dmuon_rc tm_config_check(tm_config *c);

/* ----------------------------------------------------------- parameters -- */

/* Tensors of one block, in Hugging Face order. */
enum {
    TM_Q = 0, TM_K, TM_V, TM_O, TM_GATE, TM_UP, TM_DOWN, TM_LN1, TM_LN2,
    TM_BLOCK_TENSORS
};
/* Root tensors. */
enum { TM_EMBED = 0, TM_NORM, TM_HEAD, TM_ROOT_TENSORS };

typedef struct {
    char name[64];            /* e.g. "model.layers.3.self_attn.q_proj.weight" */
    int ndim;                 /* 1 or 2 */
    int64_t shape[2];
    int64_t numel;
    int layer;                /* plan layer: 1 + block; 0 for the root tensors when
                                 tied ("(root)"); untied the embedding 0
                                 ("(embed)"), norm and head 1 + layers ("(head)") */
    int block;                /* block index, -1 for root tensors */
    int kind;                 /* TM_Q.. for blocks, TM_EMBED.. for root */
    bool matrix;              /* a 2-D weight inside a block (Muon) */
} tm_param_info;

/* Number of tensors: L * 9 + 2 + (untied ? 1 : 0). */
size_t tm_param_count(const tm_config *c);

/* Description of tensor i < tm_param_count(c). */
void tm_param_info_of(const tm_config *c, size_t i, tm_param_info *out);

/* Weights of one block (numel of each as tm_param_info gives). */
typedef struct { const float *t[TM_BLOCK_TENSORS]; } tm_block_w;
typedef struct { float *t[TM_BLOCK_TENSORS]; } tm_block_g;
/* Root: t[TM_HEAD] == t[TM_EMBED] when tied. */
typedef struct { const float *t[TM_ROOT_TENSORS]; } tm_root_w;
typedef struct { float *t[TM_ROOT_TENSORS]; } tm_root_g;

/* Every tensor of the model carved out of one allocation. */
typedef struct {
    tm_config cfg;
    float *mem;               /* all tensors, in tm_param_info order */
    size_t count;             /* tensors */
    int64_t numel;            /* all elements */
    float **t;                /* t[i]: tensor i */
} tm_params;

/* Allocates (zeroed).  Errors: DMUON_ENOMEM.  Release with tm_params_release. */
dmuon_rc tm_params_init(tm_params *p, const tm_config *c);
void tm_params_release(tm_params *p);

/* Deterministic initial values from seed, independent of tensor order: each
 * tensor's values come from a stream keyed by (seed, name).  Matrices and
 * the embedding: normal(0, std), o_proj and down_proj scaled by 1/√(2L)
 * (GPT-2); norm gains 1.  std 0.02 is the usual choice. */
void tm_params_init_values(tm_params *p, uint64_t seed, double std);

/* Views of one block's / the root's tensors of p (const or writable). */
void tm_params_block(const tm_params *p, int l, tm_block_w *w);
void tm_params_block_g(tm_params *p, int l, tm_block_g *g);
void tm_params_root(const tm_params *p, tm_root_w *w);
void tm_params_root_g(tm_params *p, tm_root_g *g);

/* ---------------------------------------------------------- activations -- */

/* Saved activations of one block for B sequences of T tokens. */
typedef struct {
    float *x_in;              /* [N, D] block input (residual) */
    float *rstd1;             /* [N] */
    float *h1;                /* [N, D] */
    float *q;                 /* [N, H*hd] after RoPE */
    float *k;                 /* [N, KV*hd] after RoPE */
    float *v;                 /* [N, KV*hd] */
    float *att;               /* [B, H, T, T] softmax probabilities (upper part 0) */
    float *ao;                /* [N, H*hd] attention output */
    float *x1;                /* [N, D] after the attention residual */
    float *rstd2;             /* [N] */
    float *h2;                /* [N, D] */
    float *g;                 /* [N, F] gate pre-activation */
    float *u;                 /* [N, F] up */
    float *s;                 /* [N, F] silu(g) * u */
} tm_block_acts;

typedef struct {
    tm_config cfg;
    int B, T;                 /* sequences, tokens per sequence (T <= cfg.seq) */
    bool recompute;           /* one tm_block_acts shared by all blocks */
    float *mem;               /* one allocation */
    float *resid;             /* [L+1, N, D] block inputs; resid + L*N*D = final x */
    tm_block_acts *blk;       /* L entries (recompute: L entries, one storage) */
    float *rstdf;             /* [N] final norm */
    float *xf;                /* [N, D] normed final x */
    float *probs;             /* [N, V] softmax of the logits */
    float *cos, *sin;         /* [seq, hd/2] RoPE tables */
    /* backward scratch */
    float *dx;                /* [N, D] gradient of the residual stream */
    float *dh;                /* [N, D] */
    float *dq, *dk, *dv, *dao;/* like q, k, v, ao */
    float *datt;              /* [T, T] */
    float *dg, *du;           /* [N, F] */
    float *dxf;               /* [N, D] */
} tm_acts;

/* Allocates activations for B x T tokens (T <= c->seq).  With recompute,
 * only the block inputs are kept per block.  Errors: DMUON_EINVAL (bad
 * sizes), DMUON_ENOMEM.  Release with tm_acts_release. */
dmuon_rc tm_acts_init(tm_acts *a, const tm_config *c, int B, int T, bool recompute);
void tm_acts_release(tm_acts *a);

/* --------------------------------------------------------------- compute -- */

/* x0 = embed[tokens]: tokens [N] (values < V) into a->resid. */
void tm_embed_forward(tm_acts *a, const tm_root_w *w, const uint8_t *tokens);

/* Forward of block l: reads a->resid[l], writes a->blk[l] and a->resid[l+1]. */
void tm_block_forward(tm_acts *a, int l, const tm_block_w *w);

/* Final norm, head and softmax on a->resid[L]; returns the summed
 * cross-entropy over the N tokens (nats, accumulated in double, sequence by
 * sequence: the sum of seq_loss in order).  seq_loss [B] (may be NULL)
 * receives each sequence's sum, so callers that split a batch over ranks
 * can add the sequences in one global order (the same bits on any number
 * of ranks). */
double tm_head_forward(tm_acts *a, const tm_root_w *w, const uint8_t *targets, double *seq_loss);

/* Backward of the head and the final norm for the loss scale·Σ CE:
 * writes a->dx = ∂/∂x_L and adds into g->t[TM_NORM], g->t[TM_HEAD] (the
 * embedding's gradient when tied).  Needs tm_head_forward's activations. */
void tm_head_backward(tm_acts *a, const tm_root_w *w, tm_root_g *g, const uint8_t *targets,
                      float scale);

/* Backward of block l: a->dx holds ∂/∂resid[l+1] on entry and ∂/∂resid[l]
 * on return; adds the block's weight gradients into g.  Needs block l's
 * activations (with recompute: call tm_block_forward(a, l, w) first). */
void tm_block_backward(tm_acts *a, int l, const tm_block_w *w, tm_block_g *g);

/* Embedding backward: adds a->dx rows into g->t[TM_EMBED][tokens]. */
void tm_embed_backward(tm_acts *a, tm_root_g *g, const uint8_t *tokens);

/* The whole model on one set of parameters (tests, single process): loss
 * sum of forward; with grads (may be NULL) the backward of scale·loss,
 * added into grads (same config as p).  Recomputation is honoured. */
double tm_forward_backward(tm_acts *a, const tm_params *p, tm_params *grads,
                           const uint8_t *tokens, const uint8_t *targets, float scale);

#endif
