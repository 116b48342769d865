/*
 * model_hf.c — the inventory of a Hugging Face config.json, derived from its
 * fields with the module names of transformers' modeling_<type>.py.
 *
 * Supported model_type: llama, mistral, qwen2, qwen2_moe, gemma, gemma2.
 * Tensors come out in module definition order (embedding, then per layer:
 * attention q/k/v/o with their biases, MLP or MoE block, norms; then the
 * final norm and, unless tied, lm_head), which is the order of the
 * checkpoints' own listings.  Shapes are PyTorch [out, in].
 */
#include "model_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const supported[] = {"llama", "mistral", "qwen2", "qwen2_moe", "gemma",
                                        "gemma2"};

dmuon_rc dmuon_spec_add(dmuon_spec_list *l, const char *name, dmuon_dtype dtype, int ndim,
                        const int64_t *shape)
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
        l->cap = cap;
    }
    char *copy = strdup(name);
    if (!copy)
        return DMUON_FAIL(DMUON_ENOMEM, "out of memory for the tensor list");
    dmuon_tensor_spec *t = &l->t[l->n];
    memset(t, 0, sizeof *t);
    t->name = copy;
    t->dtype = dtype;
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
    free(l->t);
    memset(l, 0, sizeof *l);
}

/* ------------------------------------------------------------- builders -- */

typedef struct {
    dmuon_spec_list *l;
    dmuon_dtype dt;
    char name[512];
} emitter;

static dmuon_rc emit(emitter *e, int ndim, int64_t a, int64_t b, int64_t c, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));

static dmuon_rc emit(emitter *e, int ndim, int64_t a, int64_t b, int64_t c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->name, sizeof e->name, fmt, ap);
    va_end(ap);
    int64_t shape[3] = {a, b, c};
    return dmuon_spec_add(e->l, e->name, e->dt, ndim, shape);
}

/* Reads an integer field; required ones must be present and > 0. */
static dmuon_rc get_pos(dmuon_doc *d, yaml_node_t *root, const char *key, bool required,
                        int64_t *out)
{
    yaml_node_t *v = dmuon_doc_get(d, root, key);
    if (!v || dmuon_doc_is_null(v)) {
        if (required)
            return DMUON_FAIL(DMUON_ENOTFOUND, "%s: missing required field '%s'", d->name, key);
        return DMUON_OK;
    }
    DMUON_TRY(dmuon_doc_to_int(d, v, key, out));
    if (*out <= 0)
        return DMUON_FAIL(DMUON_EPARSE, "%s:%d: field '%s': expected a positive integer, got %lld",
                          d->name, dmuon_doc_line(v), key, (long long)*out);
    return DMUON_OK;
}

static dmuon_rc get_bool(dmuon_doc *d, yaml_node_t *root, const char *key, bool *out)
{
    yaml_node_t *v = dmuon_doc_get(d, root, key);
    if (!v || dmuon_doc_is_null(v))
        return DMUON_OK;
    DMUON_TRY(dmuon_doc_field_bool(d, root, key, false, out));
    return DMUON_OK;
}

typedef struct {
    const char *type;
    int64_t hidden, inter, layers, heads, kv_heads, head_dim, vocab;
    bool tied, qkv_bias, o_bias, mlp_bias;
    bool gemma2;
    /* qwen2_moe */
    int64_t experts, moe_inter, shared_inter, sparse_step;
    bool *mlp_only;   /* per layer */
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

static dmuon_rc emit_model(emitter *e, const hf_cfg *c, bool fused)
{
    int64_t H = c->hidden, q = c->heads * c->head_dim, kv = c->kv_heads * c->head_dim;
    DMUON_TRY(emit(e, 2, c->vocab, H, 0, "model.embed_tokens.weight"));
    for (int64_t i = 0; i < c->layers; i++) {
        char pre[64];
        snprintf(pre, sizeof pre, "model.layers.%lld", (long long)i);
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
        bool sparse = c->experts > 0 && !c->mlp_only[i] && (i + 1) % c->sparse_step == 0;
        char mlp[96];
        snprintf(mlp, sizeof mlp, "%s.mlp", pre);
        if (sparse) {
            int64_t E = c->experts, I = c->moe_inter;
            DMUON_TRY(emit(e, 2, E, H, 0, "%s.gate.weight", mlp));
            if (fused) {
                DMUON_TRY(emit(e, 3, E, 2 * I, H, "%s.experts.gate_up_proj", mlp));
                DMUON_TRY(emit(e, 3, E, H, I, "%s.experts.down_proj", mlp));
            } else {
                for (int64_t x = 0; x < E; x++) {
                    char ex[128];
                    snprintf(ex, sizeof ex, "%s.experts.%lld", mlp, (long long)x);
                    DMUON_TRY(emit_mlp(e, ex, H, I, false));
                }
            }
            if (c->shared_inter > 0) {
                char sh[128];
                snprintf(sh, sizeof sh, "%s.shared_expert", mlp);
                DMUON_TRY(emit_mlp(e, sh, H, c->shared_inter, false));
                DMUON_TRY(emit(e, 2, 1, H, 0, "%s.shared_expert_gate.weight", mlp));
            }
        } else {
            DMUON_TRY(emit_mlp(e, mlp, H, c->inter, c->mlp_bias));
        }
        DMUON_TRY(emit(e, 1, H, 0, 0, "%s.input_layernorm.weight", pre));
        DMUON_TRY(emit(e, 1, H, 0, 0, "%s.post_attention_layernorm.weight", pre));
        if (c->gemma2) {
            DMUON_TRY(emit(e, 1, H, 0, 0, "%s.pre_feedforward_layernorm.weight", pre));
            DMUON_TRY(emit(e, 1, H, 0, 0, "%s.post_feedforward_layernorm.weight", pre));
        }
    }
    DMUON_TRY(emit(e, 1, H, 0, 0, "model.norm.weight"));
    if (!c->tied)
        DMUON_TRY(emit(e, 2, c->vocab, H, 0, "lm_head.weight"));
    return DMUON_OK;
}

/* --------------------------------------------------------------- reader -- */

dmuon_rc dmuon_model_load_hf_config(const char *path, dmuon_doc *d, const dmuon_model_opts *opts,
                                    dmuon_model **out)
{
    dmuon_rc rc = DMUON_OK;
    dmuon_spec_list l = {0};
    hf_cfg c = {0};
    yaml_node_t *root = dmuon_doc_root(d);
    const char *type = NULL;
    DMUON_TRY(dmuon_doc_field_str(d, root, "model_type", true, &type));
    size_t ns = sizeof supported / sizeof supported[0], k;
    for (k = 0; k < ns; k++)
        if (!strcmp(type, supported[k]))
            break;
    if (k == ns)
        return DMUON_FAIL(DMUON_EUNSUPPORTED,
                          "%s:%d: field 'model_type': '%s' is not supported; supported types: "
                          "llama, mistral, qwen2, qwen2_moe, gemma, gemma2 (for any other model, "
                          "point dmuon at its model.safetensors.index.json or .safetensors files, "
                          "whose headers list every tensor)",
                          path, dmuon_doc_line(dmuon_doc_get(d, root, "model_type")), type);
    c.type = type;
    bool gemma = !strncmp(type, "gemma", 5), qwen = !strncmp(type, "qwen2", 5);
    c.gemma2 = !strcmp(type, "gemma2");
    DMUON_TRY(get_pos(d, root, "hidden_size", true, &c.hidden));
    DMUON_TRY(get_pos(d, root, "num_hidden_layers", true, &c.layers));
    DMUON_TRY(get_pos(d, root, "num_attention_heads", true, &c.heads));
    DMUON_TRY(get_pos(d, root, "vocab_size", true, &c.vocab));
    c.kv_heads = c.heads;
    DMUON_TRY(get_pos(d, root, "num_key_value_heads", false, &c.kv_heads));
    if (c.hidden % c.heads && !dmuon_doc_get(d, root, "head_dim"))
        return DMUON_FAIL(DMUON_EPARSE,
                          "%s: field 'hidden_size' (%lld) is not a multiple of "
                          "'num_attention_heads' (%lld) and 'head_dim' is missing",
                          path, (long long)c.hidden, (long long)c.heads);
    c.head_dim = c.hidden / c.heads;
    DMUON_TRY(get_pos(d, root, "head_dim", false, &c.head_dim));
    if (c.layers > 100000 || c.heads > 100000 || c.kv_heads > c.heads)
        return DMUON_FAIL(DMUON_EPARSE,
                          "%s: fields 'num_hidden_layers' (%lld), 'num_attention_heads' (%lld), "
                          "'num_key_value_heads' (%lld): expected at most 100000 layers and no "
                          "more kv heads than heads",
                          path, (long long)c.layers, (long long)c.heads, (long long)c.kv_heads);
    c.tied = gemma;   /* transformers' defaults per model type */
    DMUON_TRY(get_bool(d, root, "tie_word_embeddings", &c.tied));
    c.qkv_bias = qwen;
    if (!qwen) {
        bool ab = false;
        DMUON_TRY(get_bool(d, root, "attention_bias", &ab));
        c.qkv_bias = c.o_bias = ab;
    }
    if (!strcmp(type, "llama"))
        DMUON_TRY(get_bool(d, root, "mlp_bias", &c.mlp_bias));
    c.sparse_step = 1;
    bool moe = !strcmp(type, "qwen2_moe");
    if (moe) {
        DMUON_TRY(get_pos(d, root, "num_experts", true, &c.experts));
        DMUON_TRY(get_pos(d, root, "moe_intermediate_size", true, &c.moe_inter));
        DMUON_TRY(get_pos(d, root, "shared_expert_intermediate_size", false, &c.shared_inter));
        DMUON_TRY(get_pos(d, root, "decoder_sparse_step", false, &c.sparse_step));
    }
    /* dense MLP width: required unless every layer is sparse */
    DMUON_TRY(get_pos(d, root, "intermediate_size", !moe, &c.inter));
    const char *dts = NULL;
    dmuon_dtype dt = DMUON_BF16;
    DMUON_TRY(dmuon_doc_field_str(d, root, "torch_dtype", false, &dts));
    if (dts && dmuon_dtype_parse(dts, &dt) != DMUON_OK)
        return DMUON_FAIL(DMUON_EPARSE, "%s: field 'torch_dtype': expected a floating type, got '%s'",
                          path, dts);
    c.mlp_only = calloc((size_t)c.layers, sizeof *c.mlp_only);
    if (!c.mlp_only)
        return DMUON_FAIL(DMUON_ENOMEM, "out of memory");
    yaml_node_t *mo = dmuon_doc_get(d, root, "mlp_only_layers");
    if (moe && mo && !dmuon_doc_is_null(mo)) {
        if (mo->type != YAML_SEQUENCE_NODE) {
            rc = DMUON_FAIL(DMUON_EPARSE, "%s:%d: field 'mlp_only_layers': expected a list of "
                                          "layer indices", path, dmuon_doc_line(mo));
            goto out;
        }
        for (size_t i = 0; i < dmuon_doc_seq_len(mo); i++) {
            int64_t li;
            DMUON_TRY_GOTO(rc, dmuon_doc_to_int(d, dmuon_doc_seq_at(d, mo, i), "mlp_only_layers",
                                                &li), out);
            if (li < 0 || li >= c.layers) {
                rc = DMUON_FAIL(DMUON_EPARSE,
                                "%s: field 'mlp_only_layers': layer %lld is outside 0..%lld", path,
                                (long long)li, (long long)c.layers - 1);
                goto out;
            }
            c.mlp_only[li] = true;
        }
    }
    for (int64_t i = 0; moe && i < c.layers; i++)
        if ((c.mlp_only[i] || (i + 1) % c.sparse_step) && c.inter <= 0) {
            rc = DMUON_FAIL(DMUON_ENOTFOUND, "%s: missing required field 'intermediate_size' "
                                             "(layer %lld is dense)", path, (long long)i);
            goto out;
        }
    emitter e = {.l = &l, .dt = dt};
    DMUON_TRY_GOTO(rc, emit_model(&e, &c, opts && opts->fused_experts), out);
    DMUON_TRY_GOTO(rc, dmuon_model_new(path, "config", l.t, l.n, opts, out), out);
out:
    free(c.mlp_only);
    dmuon_spec_list_release(&l);
    return rc;
}
