/*
 * model_hf.c — the inventory of a Hugging Face config.json, derived from its
 * fields with the module names of transformers' modeling_<type>.py.
 *
 * Matched: transformers 5.24 (tests/reference/hf holds the reference
 * inventories its make_reference.py wrote).  Supported model_type: llama,
 * mistral, qwen2, qwen2_moe, gemma, gemma2, qwen3, qwen3_moe, mixtral, phi3,
 * deepseek_v3, olmo2, gemma3_text, llama4_text, gpt_oss.  Each family is one
 * row of `families` (the config class's defaults for the fields a config may
 * leave out, and the module's shape switches); emit_model walks the layers in
 * module definition order (the order of named_parameters()).  Shapes are
 * PyTorch [out, in]; fused experts as the modules store them.
 *
 * A field absent from config.json takes the class default of the row; a
 * field present as null takes the class's __post_init__ fallback
 * (num_key_value_heads = num_attention_heads, head_dim = hidden_size /
 * num_attention_heads).
 */
#include "model_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

dmuon_rc dmuon_spec_add(dmuon_spec_list *l, const char *name, dmuon_dtype dtype, int ndim,
                        const int64_t *shape)
{
    return dmuon_spec_add_stored(l, name, dtype, NULL, ndim, shape);
}

dmuon_rc dmuon_spec_add_stored(dmuon_spec_list *l, const char *name, dmuon_dtype dtype,
                               const char *stored, int ndim, const int64_t *shape)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 256;
        dmuon_tensor_spec *t = realloc(l->t, cap * sizeof *t);
        if (!t)
            return DMUON_FAIL(DMUON_ENOMEM, "out of memory for the tensor list");
        l->t = t;
        char **nm = realloc(l->names, cap * sizeof *nm);
        if (!nm)
            return DMUON_FAIL(DMUON_ENOMEM, "out of memory for the tensor list");
        l->names = nm;
        const char **st = realloc(l->stored, cap * sizeof *st);
        if (!st)
            return DMUON_FAIL(DMUON_ENOMEM, "out of memory for the tensor list");
        l->stored = st;
        l->cap = cap;
    }
    char *copy = strdup(name);
    if (!copy)
        return DMUON_FAIL(DMUON_ENOMEM, "out of memory for the tensor list");
    dmuon_tensor_spec *t = &l->t[l->n];
    memset(t, 0, sizeof *t);
    t->name = copy;
    t->dtype = dtype;
    l->stored[l->n] = stored;
    t->ndim = ndim;
    for (int d = 0; d < ndim && d < DMUON_MODEL_MAX_DIMS; d++)
        t->shape[d] = shape[d];
    l->names[l->n++] = copy;
    return DMUON_OK;
}

void dmuon_spec_list_release(dmuon_spec_list *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->names[i]);
    free(l->names);
    free(l->stored);
    free(l->t);
    memset(l, 0, sizeof *l);
}


/* ------------------------------------------------------------- families -- */

typedef enum { ATT_STD, ATT_PHI3, ATT_MLA } att_kind;
typedef enum { MLP_DENSE, MLP_PHI3, MOE_QWEN2, MOE_QWEN3, MOE_MIXTRAL, MOE_DEEPSEEK, MOE_LLAMA4,
               MOE_GPT_OSS } mlp_kind;
typedef enum {
    BIAS_NONE,     /* no attention biases (mistral, mixtral, phi3) */
    BIAS_QKV,      /* q/k/v always (qwen2) */
    BIAS_QKV_FIELD,/* q/k/v when qkv_bias (qwen2_moe, default true) */
    BIAS_ATTN,     /* q/k/v/o when attention_bias */
    BIAS_LLAMA     /* q/k/v/o when attention_bias, MLP when mlp_bias */
} bias_kind;
typedef enum { NORM_STD, NORM_SANDWICH, NORM_OLMO2 } norm_kind;
typedef enum { QK_NONE, QK_HEAD, QK_FULL } qk_kind;

/* One model family: its config class's defaults and its module's switches
 * (transformers 5.24 configuration_<type>.py / modeling_<type>.py). */
typedef struct {
    const char *type;
    att_kind att;
    mlp_kind mlp;
    bias_kind bias;
    norm_kind norms;
    qk_kind qk;
    int64_t kv_default;        /* num_key_value_heads when absent; 0: num_attention_heads */
    int64_t hd_default;        /* head_dim when absent; 0: hidden_size / num_attention_heads */
    bool tied;                 /* tie_word_embeddings default */
    bool attn_bias;            /* attention_bias / qkv_bias default */
    bool sinks;                /* self_attn.sinks [heads] (gpt_oss) */
    const char *experts_key;   /* field of the routed expert count, then its alias */
    const char *experts_alias;
    int64_t experts_default, moe_inter_default, shared_default;
} family;

/* the MoE fields of a dense family */
#define NO_MOE NULL, NULL, 0, 0, 0

static const family families[] = {
    {"llama", ATT_STD, MLP_DENSE, BIAS_LLAMA, NORM_STD, QK_NONE, 0, 0, false, false, false, NO_MOE},
    {"mistral", ATT_STD, MLP_DENSE, BIAS_NONE, NORM_STD, QK_NONE, 8, 0, false, false, false, NO_MOE},
    {"qwen2", ATT_STD, MLP_DENSE, BIAS_QKV, NORM_STD, QK_NONE, 32, 0, false, true, false, NO_MOE},
    {"qwen2_moe", ATT_STD, MOE_QWEN2, BIAS_QKV_FIELD, NORM_STD, QK_NONE, 16, 0, false, true, false,
     "num_experts", NULL, 60, 1408, 5632},
    {"gemma", ATT_STD, MLP_DENSE, BIAS_ATTN, NORM_STD, QK_NONE, 16, 256, true, false, false, NO_MOE},
    {"gemma2", ATT_STD, MLP_DENSE, BIAS_ATTN, NORM_SANDWICH, QK_NONE, 4, 256, true, false, false, NO_MOE},
    {"qwen3", ATT_STD, MLP_DENSE, BIAS_ATTN, NORM_STD, QK_HEAD, 32, 128, false, false, false, NO_MOE},
    {"qwen3_moe", ATT_STD, MOE_QWEN3, BIAS_ATTN, NORM_STD, QK_HEAD, 4, 0, false, false, false,
     "num_experts", "num_local_experts", 128, 768, 0},
    {"mixtral", ATT_STD, MOE_MIXTRAL, BIAS_NONE, NORM_STD, QK_NONE, 8, 0, false, false, false,
     "num_local_experts", "num_experts", 8, 0, 0},
    {"phi3", ATT_PHI3, MLP_PHI3, BIAS_NONE, NORM_STD, QK_NONE, 0, 0, false, false, false, NO_MOE},
    {"deepseek_v3", ATT_MLA, MOE_DEEPSEEK, BIAS_ATTN, NORM_STD, QK_NONE, 128, 0, false, false,
     false, "n_routed_experts", "num_local_experts", 256, 2048, 0},
    {"olmo2", ATT_STD, MLP_DENSE, BIAS_ATTN, NORM_OLMO2, QK_FULL, 0, 0, false, false, false, NO_MOE},
    {"gemma3_text", ATT_STD, MLP_DENSE, BIAS_ATTN, NORM_SANDWICH, QK_HEAD, 4, 256, true, false,
     false, NO_MOE},
    {"llama4_text", ATT_STD, MOE_LLAMA4, BIAS_ATTN, NORM_STD, QK_NONE, 8, 128, false, false, false,
     "num_local_experts", NULL, 16, 0, 0},
    {"gpt_oss", ATT_STD, MOE_GPT_OSS, BIAS_ATTN, NORM_STD, QK_NONE, 8, 64, false, true, true,
     "num_local_experts", "num_experts", 128, 0, 0},
};

#define SUPPORTED_LIST                                                                        \
    "llama, mistral, qwen2, qwen2_moe, gemma, gemma2, qwen3, qwen3_moe, mixtral, phi3, "     \
    "deepseek_v3, olmo2, gemma3_text, llama4_text, gpt_oss"

/* ------------------------------------------------------------- builders -- */

typedef struct {
    dmuon_spec_list *l;
    dmuon_dtype dt;
    char name[512];
} emitter;

static dmuon_rc emit_dt(emitter *e, dmuon_dtype dt, int ndim, int64_t a, int64_t b, int64_t c,
                        const char *fmt, ...) __attribute__((format(printf, 7, 8)));

static dmuon_rc emit_dt(emitter *e, dmuon_dtype dt, int ndim, int64_t a, int64_t b, int64_t c,
                        const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->name, sizeof e->name, fmt, ap);
    va_end(ap);
    int64_t shape[3] = {a, b, c};
    return dmuon_spec_add(e->l, e->name, dt, ndim, shape);
}

#define emit(e, ndim, a, b, c, ...) emit_dt(e, (e)->dt, ndim, a, b, c, __VA_ARGS__)

/* Largest value accepted for a config dimension or count: 2^24, far above
 * any released model's width, depth, vocabulary or expert count, so that an
 * absurd value is blamed on its field rather than on a derived tensor. */
#define MAX_CONFIG_VALUE ((int64_t)1 << 24)

/* Reads an integer field.  Absent: *out = def (an error when required);
 * null: *out = null_value; otherwise min..MAX_CONFIG_VALUE. */
static dmuon_rc get_int(dmuon_doc *d, yaml_node_t *root, const char *key, bool required,
                        int64_t def, int64_t null_value, int64_t min, int64_t *out)
{
    yaml_node_t *v = dmuon_doc_get(d, root, key);
    if (!v) {
        if (required)
            return DMUON_FAIL(DMUON_ENOTFOUND, "%s: missing required field '%s'", d->name, key);
        *out = def;
        return DMUON_OK;
    }
    if (dmuon_doc_is_null(v)) {
        if (required)
            return DMUON_FAIL(DMUON_EPARSE, "%s:%d: field '%s': expected a positive integer, "
                                            "got null", d->name, dmuon_doc_line(v), key);
        *out = null_value;
        return DMUON_OK;
    }
    DMUON_TRY(dmuon_doc_to_int(d, v, key, out));
    if (*out < min)
        return DMUON_FAIL(DMUON_EPARSE, "%s:%d: field '%s': expected %s integer, got %lld",
                          d->name, dmuon_doc_line(v), key,
                          min > 0 ? "a positive" : "a non-negative", (long long)*out);
    if (*out > MAX_CONFIG_VALUE)
        return DMUON_FAIL(DMUON_EPARSE, "%s:%d: field '%s': %lld is beyond %lld (expected a "
                                        "model dimension or count)",
                          d->name, dmuon_doc_line(v), key, (long long)*out,
                          (long long)MAX_CONFIG_VALUE);
    return DMUON_OK;
}

/* A positive field; absent or null: def (required: an error when absent). */
static dmuon_rc get_pos(dmuon_doc *d, yaml_node_t *root, const char *key, bool required,
                        int64_t def, int64_t *out)
{
    return get_int(d, root, key, required, def, def, 1, out);
}

static dmuon_rc get_bool(dmuon_doc *d, yaml_node_t *root, const char *key, bool *out)
{
    yaml_node_t *v = dmuon_doc_get(d, root, key);
    if (!v || dmuon_doc_is_null(v))
        return DMUON_OK;
    DMUON_TRY(dmuon_doc_field_bool(d, root, key, false, out));
    return DMUON_OK;
}

/* Reads a list of layer indices in 0..layers-1 into flags[] (true = listed). */
static dmuon_rc get_layer_list(dmuon_doc *d, yaml_node_t *root, const char *key, int64_t layers,
                               bool *flags, bool *present)
{
    yaml_node_t *v = dmuon_doc_get(d, root, key);
    *present = v && !dmuon_doc_is_null(v);
    if (!*present)
        return DMUON_OK;
    if (v->type != YAML_SEQUENCE_NODE)
        return DMUON_FAIL(DMUON_EPARSE, "%s:%d: field '%s': expected a list of layer indices",
                          d->name, dmuon_doc_line(v), key);
    for (size_t i = 0; i < dmuon_doc_seq_len(v); i++) {
        int64_t li;
        DMUON_TRY(dmuon_doc_to_int(d, dmuon_doc_seq_at(d, v, i), key, &li));
        if (li < 0 || li >= layers)
            return DMUON_FAIL(DMUON_EPARSE, "%s: field '%s': layer %lld is outside 0..%lld",
                              d->name, key, (long long)li, (long long)layers - 1);
        flags[li] = true;
    }
    return DMUON_OK;
}

typedef struct {
    const family *f;
    int64_t hidden, inter, layers, heads, kv_heads, head_dim, vocab;
    bool tied, qkv_bias, o_bias, mlp_bias;
    /* MoE */
    int64_t experts, moe_inter, shared_inter, sparse_step, dense_inter;
    bool *sparse;            /* per layer: an MoE block */
    /* MLA (deepseek_v3) */
    int64_t q_lora, kv_lora, rope_dim, nope_dim, v_dim;
} hf_cfg;

static dmuon_rc emit_mlp(emitter *e, const char *pre, int64_t H, int64_t I, bool bias)
{
    DMUON_TRY(emit(e, 2, I, H, 0, "%s.gate_proj.weight", pre));
    if (bias)
        DMUON_TRY(emit(e, 1, I, 0, 0, "%s.gate_proj.bias", pre));
    DMUON_TRY(emit(e, 2, I, H, 0, "%s.up_proj.weight", pre));
    if (bias)
        DMUON_TRY(emit(e, 1, I, 0, 0, "%s.up_proj.bias", pre));
    DMUON_TRY(emit(e, 2, H, I, 0, "%s.down_proj.weight", pre));
    if (bias)
        DMUON_TRY(emit(e, 1, H, 0, 0, "%s.down_proj.bias", pre));
    return DMUON_OK;
}

/* Routed experts of one MoE block at pre (".experts" appended): fused
 * [E, 2I, H] / [E, H, I] (module layout) or one by one (checkpoint layout). */
static dmuon_rc emit_experts(emitter *e, const char *pre, int64_t E, int64_t H, int64_t I,
                             bool fused)
{
    if (fused) {
        DMUON_TRY(emit(e, 3, E, 2 * I, H, "%s.experts.gate_up_proj", pre));
        DMUON_TRY(emit(e, 3, E, H, I, "%s.experts.down_proj", pre));
        return DMUON_OK;
    }
    for (int64_t x = 0; x < E; x++) {
        char ex[160];
        snprintf(ex, sizeof ex, "%s.experts.%lld", pre, (long long)x);
        DMUON_TRY(emit_mlp(e, ex, H, I, false));
    }
    return DMUON_OK;
}

static dmuon_rc emit_attention(emitter *e, const hf_cfg *c, const char *pre)
{
    int64_t H = c->hidden, hd = c->head_dim, q = c->heads * hd, kv = c->kv_heads * hd;
    if (c->f->att == ATT_PHI3) {
        DMUON_TRY(emit(e, 2, H, q, 0, "%s.self_attn.o_proj.weight", pre));
        DMUON_TRY(emit(e, 2, q + 2 * kv, H, 0, "%s.self_attn.qkv_proj.weight", pre));
        return DMUON_OK;
    }
    if (c->f->att == ATT_MLA) {
        int64_t qk = c->nope_dim + c->rope_dim;
        if (c->q_lora > 0) {
            DMUON_TRY(emit(e, 2, c->q_lora, H, 0, "%s.self_attn.q_a_proj.weight", pre));
            if (c->o_bias)
                DMUON_TRY(emit(e, 1, c->q_lora, 0, 0, "%s.self_attn.q_a_proj.bias", pre));
            DMUON_TRY(emit(e, 1, c->q_lora, 0, 0, "%s.self_attn.q_a_layernorm.weight", pre));
            DMUON_TRY(emit(e, 2, c->heads * qk, c->q_lora, 0, "%s.self_attn.q_b_proj.weight",
                           pre));
        } else {
            DMUON_TRY(emit(e, 2, c->heads * qk, H, 0, "%s.self_attn.q_proj.weight", pre));
        }
        DMUON_TRY(emit(e, 2, c->kv_lora + c->rope_dim, H, 0,
                       "%s.self_attn.kv_a_proj_with_mqa.weight", pre));
        if (c->o_bias)
            DMUON_TRY(emit(e, 1, c->kv_lora + c->rope_dim, 0, 0,
                           "%s.self_attn.kv_a_proj_with_mqa.bias", pre));
        DMUON_TRY(emit(e, 1, c->kv_lora, 0, 0, "%s.self_attn.kv_a_layernorm.weight", pre));
        DMUON_TRY(emit(e, 2, c->heads * (c->nope_dim + c->v_dim), c->kv_lora, 0,
                       "%s.self_attn.kv_b_proj.weight", pre));
        DMUON_TRY(emit(e, 2, H, c->heads * c->v_dim, 0, "%s.self_attn.o_proj.weight", pre));
        if (c->o_bias)
            DMUON_TRY(emit(e, 1, H, 0, 0, "%s.self_attn.o_proj.bias", pre));
        return DMUON_OK;
    }
    if (c->f->sinks)
        DMUON_TRY(emit(e, 1, c->heads, 0, 0, "%s.self_attn.sinks", pre));
    DMUON_TRY(emit(e, 2, q, H, 0, "%s.self_attn.q_proj.weight", pre));
    if (c->qkv_bias)
        DMUON_TRY(emit(e, 1, q, 0, 0, "%s.self_attn.q_proj.bias", pre));
    DMUON_TRY(emit(e, 2, kv, H, 0, "%s.self_attn.k_proj.weight", pre));
    if (c->qkv_bias)
        DMUON_TRY(emit(e, 1, kv, 0, 0, "%s.self_attn.k_proj.bias", pre));
    DMUON_TRY(emit(e, 2, kv, H, 0, "%s.self_attn.v_proj.weight", pre));
    if (c->qkv_bias)
        DMUON_TRY(emit(e, 1, kv, 0, 0, "%s.self_attn.v_proj.bias", pre));
    DMUON_TRY(emit(e, 2, H, q, 0, "%s.self_attn.o_proj.weight", pre));
    if (c->o_bias)
        DMUON_TRY(emit(e, 1, H, 0, 0, "%s.self_attn.o_proj.bias", pre));
    if (c->f->qk == QK_HEAD) {
        DMUON_TRY(emit(e, 1, hd, 0, 0, "%s.self_attn.q_norm.weight", pre));
        DMUON_TRY(emit(e, 1, hd, 0, 0, "%s.self_attn.k_norm.weight", pre));
    } else if (c->f->qk == QK_FULL) {
        DMUON_TRY(emit(e, 1, q, 0, 0, "%s.self_attn.q_norm.weight", pre));
        DMUON_TRY(emit(e, 1, kv, 0, 0, "%s.self_attn.k_norm.weight", pre));
    }
    return DMUON_OK;
}

/* The MLP or MoE block of layer i. */
static dmuon_rc emit_ffn(emitter *e, const hf_cfg *c, const char *pre, int64_t i, bool fused)
{
    int64_t H = c->hidden, E = c->experts, I = c->moe_inter;
    char mlp[128];
    snprintf(mlp, sizeof mlp, "%s.mlp", pre);
    if (c->f->mlp == MLP_PHI3) {
        DMUON_TRY(emit(e, 2, 2 * c->inter, H, 0, "%s.gate_up_proj.weight", mlp));
        DMUON_TRY(emit(e, 2, H, c->inter, 0, "%s.down_proj.weight", mlp));
        return DMUON_OK;
    }
    if (c->f->mlp == MOE_LLAMA4) {
        snprintf(mlp, sizeof mlp, "%s.feed_forward", pre);
        if (!c->sparse[i])
            return emit_mlp(e, mlp, H, c->dense_inter, false);
        DMUON_TRY(emit(e, 3, E, H, 2 * I, "%s.experts.gate_up_proj", mlp));
        DMUON_TRY(emit(e, 3, E, I, H, "%s.experts.down_proj", mlp));
        DMUON_TRY(emit(e, 2, E, H, 0, "%s.router.weight", mlp));
        char sh[160];
        snprintf(sh, sizeof sh, "%s.shared_expert", mlp);
        return emit_mlp(e, sh, H, c->inter, false);
    }
    if (!c->sparse[i])
        return emit_mlp(e, mlp, H, c->inter, c->mlp_bias);
    char sh[160];
    switch (c->f->mlp) {
    case MOE_QWEN2:
        DMUON_TRY(emit(e, 2, E, H, 0, "%s.gate.weight", mlp));
        DMUON_TRY(emit_experts(e, mlp, E, H, I, fused));
        snprintf(sh, sizeof sh, "%s.shared_expert", mlp);
        DMUON_TRY(emit_mlp(e, sh, H, c->shared_inter, false));
        DMUON_TRY(emit(e, 2, 1, H, 0, "%s.shared_expert_gate.weight", mlp));
        return DMUON_OK;
    case MOE_QWEN3:
        DMUON_TRY(emit_experts(e, mlp, E, H, I, fused));
        return emit(e, 2, E, H, 0, "%s.gate.weight", mlp);
    case MOE_MIXTRAL:
        if (fused) {
            DMUON_TRY(emit(e, 2, E, H, 0, "%s.gate.weight", mlp));
            return emit_experts(e, mlp, E, H, I, true);
        }
        /* the checkpoint names of Mixtral: block_sparse_moe, w1 gate, w2 down, w3 up */
        DMUON_TRY(emit(e, 2, E, H, 0, "%s.block_sparse_moe.gate.weight", pre));
        for (int64_t x = 0; x < E; x++) {
            DMUON_TRY(emit(e, 2, I, H, 0, "%s.block_sparse_moe.experts.%lld.w1.weight", pre,
                           (long long)x));
            DMUON_TRY(emit(e, 2, H, I, 0, "%s.block_sparse_moe.experts.%lld.w2.weight", pre,
                           (long long)x));
            DMUON_TRY(emit(e, 2, I, H, 0, "%s.block_sparse_moe.experts.%lld.w3.weight", pre,
                           (long long)x));
        }
        return DMUON_OK;
    case MOE_DEEPSEEK:
        DMUON_TRY(emit_experts(e, mlp, E, H, I, fused));
        /* the router is kept in FP32 (_keep_in_fp32_modules_strict) */
        DMUON_TRY(emit_dt(e, DMUON_F32, 2, E, H, 0, "%s.gate.weight", mlp));
        if (!fused)   /* a persistent buffer: in the checkpoint, not a parameter */
            DMUON_TRY(emit_dt(e, DMUON_F32, 1, E, 0, 0, "%s.gate.e_score_correction_bias", mlp));
        snprintf(sh, sizeof sh, "%s.shared_experts", mlp);
        return emit_mlp(e, sh, H, c->shared_inter, false);
    case MOE_GPT_OSS:
        DMUON_TRY(emit(e, 2, E, H, 0, "%s.router.weight", mlp));
        DMUON_TRY(emit(e, 1, E, 0, 0, "%s.router.bias", mlp));
        DMUON_TRY(emit(e, 3, E, H, 2 * I, "%s.experts.gate_up_proj", mlp));
        DMUON_TRY(emit(e, 2, E, 2 * I, 0, "%s.experts.gate_up_proj_bias", mlp));
        DMUON_TRY(emit(e, 3, E, I, H, "%s.experts.down_proj", mlp));
        return emit(e, 2, E, H, 0, "%s.experts.down_proj_bias", mlp);
    default:
        return emit_mlp(e, mlp, H, c->inter, c->mlp_bias);
    }
}

static dmuon_rc emit_model(emitter *e, const hf_cfg *c, bool fused)
{
    int64_t H = c->hidden;
    DMUON_TRY(emit(e, 2, c->vocab, H, 0, "model.embed_tokens.weight"));
    for (int64_t i = 0; i < c->layers; i++) {
        char pre[64];
        snprintf(pre, sizeof pre, "model.layers.%lld", (long long)i);
        DMUON_TRY(emit_attention(e, c, pre));
        DMUON_TRY(emit_ffn(e, c, pre, i, fused));
        if (c->f->norms != NORM_OLMO2)
            DMUON_TRY(emit(e, 1, H, 0, 0, "%s.input_layernorm.weight", pre));
        DMUON_TRY(emit(e, 1, H, 0, 0, "%s.post_attention_layernorm.weight", pre));
        if (c->f->norms == NORM_SANDWICH)
            DMUON_TRY(emit(e, 1, H, 0, 0, "%s.pre_feedforward_layernorm.weight", pre));
        if (c->f->norms != NORM_STD)
            DMUON_TRY(emit(e, 1, H, 0, 0, "%s.post_feedforward_layernorm.weight", pre));
    }
    DMUON_TRY(emit(e, 1, H, 0, 0, "model.norm.weight"));
    if (!c->tied)
        DMUON_TRY(emit(e, 2, c->vocab, H, 0, "lm_head.weight"));
    return DMUON_OK;
}

/* --------------------------------------------------------------- reader -- */

/* The MoE fields of c->f and which layers are sparse. */
static dmuon_rc read_moe(dmuon_doc *d, yaml_node_t *root, hf_cfg *c)
{
    const family *f = c->f;
    int64_t L = c->layers;
    bool listed;
    if (f->mlp == MLP_DENSE || f->mlp == MLP_PHI3)
        return DMUON_OK;
    const char *ek = dmuon_doc_get(d, root, f->experts_key) || !f->experts_alias
                         ? f->experts_key : f->experts_alias;
    bool qwen = f->mlp == MOE_QWEN2 || f->mlp == MOE_QWEN3;
    /* qwen: num_experts 0 makes every layer dense */
    DMUON_TRY(get_int(d, root, ek, false, f->experts_default, f->experts_default, qwen ? 0 : 1,
                      &c->experts));
    c->moe_inter = c->inter;
    if (f->moe_inter_default)
        DMUON_TRY(get_pos(d, root, "moe_intermediate_size", false, f->moe_inter_default,
                          &c->moe_inter));
    switch (f->mlp) {
    case MOE_QWEN2:
    case MOE_QWEN3:
        if (f->mlp == MOE_QWEN2)
            DMUON_TRY(get_pos(d, root, "shared_expert_intermediate_size", false,
                              f->shared_default, &c->shared_inter));
        DMUON_TRY(get_pos(d, root, "decoder_sparse_step", false, 1, &c->sparse_step));
        DMUON_TRY(get_layer_list(d, root, "mlp_only_layers", L, c->sparse, &listed));
        for (int64_t i = 0; i < L; i++)   /* listed -> dense */
            c->sparse[i] = !c->sparse[i] && c->experts > 0 && (i + 1) % c->sparse_step == 0;
        break;
    case MOE_MIXTRAL:
    case MOE_GPT_OSS:
        for (int64_t i = 0; i < L; i++)
            c->sparse[i] = true;
        break;
    case MOE_DEEPSEEK: {
        int64_t first, nshared;
        DMUON_TRY(get_int(d, root, "first_k_dense_replace", false, 3, 3, 0, &first));
        DMUON_TRY(get_pos(d, root, "n_shared_experts", false, 1, &nshared));
        c->shared_inter = c->moe_inter * nshared;
        for (int64_t i = 0; i < L; i++)
            c->sparse[i] = i >= first;
        break;
    }
    case MOE_LLAMA4: {
        int64_t step;
        DMUON_TRY(get_pos(d, root, "intermediate_size_mlp", false, 16384, &c->dense_inter));
        DMUON_TRY(get_pos(d, root, "interleave_moe_layer_step", false, 1, &step));
        DMUON_TRY(get_layer_list(d, root, "moe_layers", L, c->sparse, &listed));
        if (!listed)
            for (int64_t i = step - 1; i < L; i += step)
                c->sparse[i] = true;
        break;
    }
    default:
        break;
    }
    return DMUON_OK;
}

dmuon_rc dmuon_model_load_hf_config(const char *path, dmuon_doc *d, const dmuon_model_opts *opts,
                                    dmuon_model **out)
{
    dmuon_rc rc = DMUON_OK;
    dmuon_spec_list l = {0};
    hf_cfg c = {0};
    yaml_node_t *root = dmuon_doc_root(d);
    const char *type = NULL;
    DMUON_TRY(dmuon_doc_field_str(d, root, "model_type", true, &type));
    size_t nf = sizeof families / sizeof families[0], k;
    for (k = 0; k < nf; k++)
        if (!strcmp(type, families[k].type))
            break;
    if (k == nf)
        return DMUON_FAIL(DMUON_EPARSE,
                          "%s:%d: field 'model_type': '%s' is not supported; supported types: "
                          SUPPORTED_LIST " (for any other model, point dmuon at its "
                          "model.safetensors.index.json or .safetensors files, whose headers "
                          "list every tensor)",
                          path, dmuon_doc_line(dmuon_doc_get(d, root, "model_type")), type);
    const family *f = c.f = &families[k];
    DMUON_TRY(get_pos(d, root, "hidden_size", true, 0, &c.hidden));
    DMUON_TRY(get_pos(d, root, "num_hidden_layers", true, 0, &c.layers));
    DMUON_TRY(get_pos(d, root, "num_attention_heads", true, 0, &c.heads));
    DMUON_TRY(get_pos(d, root, "vocab_size", true, 0, &c.vocab));
    DMUON_TRY(get_int(d, root, "num_key_value_heads", false,
                      f->kv_default ? f->kv_default : c.heads, c.heads, 1, &c.kv_heads));
    yaml_node_t *hdn = dmuon_doc_get(d, root, "head_dim");
    bool hd_split = (!hdn && !f->hd_default) || (hdn && dmuon_doc_is_null(hdn));
    if (f->att != ATT_MLA && hd_split && c.hidden % c.heads)
        return DMUON_FAIL(DMUON_EPARSE,
                          "%s: field 'hidden_size' (%lld) is not a multiple of "
                          "'num_attention_heads' (%lld) and 'head_dim' is not given",
                          path, (long long)c.hidden, (long long)c.heads);
    DMUON_TRY(get_int(d, root, "head_dim", false, f->hd_default ? f->hd_default : c.hidden / c.heads,
                      c.hidden / c.heads, 1, &c.head_dim));
    if (c.layers > 100000 || c.heads > 100000 || c.kv_heads > 100000)
        return DMUON_FAIL(DMUON_EPARSE,
                          "%s: fields 'num_hidden_layers' (%lld), 'num_attention_heads' (%lld), "
                          "'num_key_value_heads' (%lld): expected at most 100000 each",
                          path, (long long)c.layers, (long long)c.heads, (long long)c.kv_heads);
    c.tied = f->tied;
    DMUON_TRY(get_bool(d, root, "tie_word_embeddings", &c.tied));
    bool ab = f->attn_bias;
    switch (f->bias) {
    case BIAS_QKV:
        c.qkv_bias = true;
        break;
    case BIAS_QKV_FIELD:
        DMUON_TRY(get_bool(d, root, "qkv_bias", &ab));
        c.qkv_bias = ab;
        break;
    case BIAS_LLAMA:
        DMUON_TRY(get_bool(d, root, "mlp_bias", &c.mlp_bias));
        /* fall through */
    case BIAS_ATTN:
        DMUON_TRY(get_bool(d, root, "attention_bias", &ab));
        c.qkv_bias = c.o_bias = ab;
        break;
    case BIAS_NONE:
        break;
    }
    if (f->att == ATT_MLA) {
        c.qkv_bias = false;   /* o_bias carries attention_bias (q_a, kv_a, o) */
        DMUON_TRY(get_int(d, root, "q_lora_rank", false, 1536, 0, 1, &c.q_lora));
        DMUON_TRY(get_pos(d, root, "kv_lora_rank", false, 512, &c.kv_lora));
        DMUON_TRY(get_pos(d, root, "qk_rope_head_dim", false, 64, &c.rope_dim));
        DMUON_TRY(get_pos(d, root, "qk_nope_head_dim", false, 128, &c.nope_dim));
        DMUON_TRY(get_pos(d, root, "v_head_dim", false, 128, &c.v_dim));
    }
    /* dtype: transformers 5 writes "dtype", earlier releases "torch_dtype" */
    const char *dts = NULL, *dtkey = "dtype";
    dmuon_dtype dt = DMUON_BF16;
    DMUON_TRY(dmuon_doc_field_str(d, root, "dtype", false, &dts));
    if (!dts) {
        dtkey = "torch_dtype";
        DMUON_TRY(dmuon_doc_field_str(d, root, "torch_dtype", false, &dts));
    }
    if (dts && (dmuon_dtype_parse(dts, &dt) != DMUON_OK ||
                (dt != DMUON_BF16 && dt != DMUON_F16 && dt != DMUON_F32 && dt != DMUON_F64)))
        return DMUON_FAIL(DMUON_EPARSE, "%s: field '%s': expected a floating type (bfloat16, "
                                        "float16, float32, float64), got '%s'",
                          path, dtkey, dts);
    dmuon_err_clear();
    c.sparse = calloc((size_t)c.layers, sizeof *c.sparse);
    if (!c.sparse)
        return DMUON_FAIL(DMUON_ENOMEM, "out of memory");
    /* intermediate_size: required where a layer uses it */
    yaml_node_t *in = dmuon_doc_get(d, root, "intermediate_size");
    if (in && !dmuon_doc_is_null(in))
        DMUON_TRY_GOTO(rc, get_pos(d, root, "intermediate_size", true, 0, &c.inter), out);
    DMUON_TRY_GOTO(rc, read_moe(d, root, &c), out);
    bool need_inter = f->mlp == MOE_MIXTRAL || f->mlp == MOE_LLAMA4 || f->mlp == MOE_GPT_OSS;
    int64_t dense_at = -1;
    for (int64_t i = 0; i < c.layers && dense_at < 0; i++)
        if (!c.sparse[i] && f->mlp != MOE_LLAMA4)
            dense_at = i;
    if (c.inter <= 0 && (need_inter || dense_at >= 0)) {
        if (dense_at >= 0 && !need_inter)
            rc = DMUON_FAIL(DMUON_ENOTFOUND, "%s: missing required field 'intermediate_size' "
                                             "(layer %lld is dense)", path, (long long)dense_at);
        else
            rc = DMUON_FAIL(DMUON_ENOTFOUND, "%s: missing required field 'intermediate_size'",
                            path);
        goto out;
    }
    if (f->mlp == MOE_MIXTRAL || f->mlp == MOE_LLAMA4 || f->mlp == MOE_GPT_OSS)
        c.moe_inter = c.inter;
    emitter e = {.l = &l, .dt = dt};
    DMUON_TRY_GOTO(rc, emit_model(&e, &c, opts && opts->fused_experts), out);
    {   /* generated in forward order: embeddings, blocks, norm and head, the
         * head apart unless tied to the embedding */
        dmuon_model_opts mo = {0};
        if (opts)
            mo = *opts;
        if (mo.root == DMUON_ROOT_AUTO)
            mo.root = c.tied ? DMUON_ROOT_ONE : DMUON_ROOT_SPLIT;
        DMUON_TRY_GOTO(rc, dmuon_model_new(path, "config", l.t, l.stored, l.n, &mo, out), out);
    }
    {   /* a quantized checkpoint's config: the inventory is its module layout */
        yaml_node_t *q = dmuon_doc_get(d, root, "quantization_config");
        if (q && !dmuon_doc_is_null(q)) {
            const char *qm = NULL;
            if (q->type == YAML_MAPPING_NODE)
                (void)dmuon_doc_field_str(d, q, "quant_method", false, &qm);
            dmuon_err_clear();
            snprintf((*out)->quant_method, sizeof (*out)->quant_method, "%s",
                     qm && *qm ? qm : "unknown");
        }
    }
out:
    free(c.sparse);
    dmuon_spec_list_release(&l);
    return rc;
}
