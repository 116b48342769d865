/*
 * config.c — inventory, config.json and YAML of the trainer's model (see
 * config.h).  The field names of config.json are those of transformers'
 * LlamaConfig (configuration_llama.py).
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>

#include "dmuon/io.h"

dmuon_rc tm_model_build(const tm_config *c, dmuon_model **out)
{
    *out = NULL;
    size_t n = tm_param_count(c);
    dmuon_tensor_spec *t = calloc(n, sizeof *t);
    tm_param_info *in = calloc(n, sizeof *in);
    dmuon_rc rc = DMUON_OK;
    if (!t || !in) {
        rc = DMUON_FAIL(DMUON_ENOMEM, "out of memory for the tensor list");
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        tm_param_info_of(c, i, &in[i]);
        t[i].name = in[i].name;
        t[i].ndim = in[i].ndim;
        t[i].shape[0] = in[i].shape[0];
        t[i].shape[1] = in[i].shape[1];
        t[i].dtype = DMUON_F32;
    }
    {   /* listed in forward order: the embedding and the head apart unless
         * tied (as dmuon-plan splits the config.json --write-config writes) */
        dmuon_model_opts mo = {0};
        mo.root = c->tie ? DMUON_ROOT_ONE : DMUON_ROOT_SPLIT;
        DMUON_TRY_GOTO(rc, dmuon_model_build("dmuon-train model", t, n, &mo, out), out);
    }
out:
    free(t);
    free(in);
    return rc;
}

static dmuon_rc write_hf(FILE *f, void *ctx)
{
    const tm_config *c = ctx;
    dmuon_json w;
    dmuon_json_init(&w, f, true);
    dmuon_json_begin_object(&w);
    dmuon_json_key(&w, "architectures");
    dmuon_json_begin_array(&w);
    dmuon_json_str(&w, "LlamaForCausalLM");
    dmuon_json_end_array(&w);
    dmuon_json_kstr(&w, "model_type", "llama");
    dmuon_json_kint(&w, "vocab_size", c->vocab);
    dmuon_json_kint(&w, "hidden_size", c->dim);
    dmuon_json_kint(&w, "intermediate_size", c->ffn);
    dmuon_json_kint(&w, "num_hidden_layers", c->layers);
    dmuon_json_kint(&w, "num_attention_heads", c->heads);
    dmuon_json_kint(&w, "num_key_value_heads", c->kv_heads);
    dmuon_json_kint(&w, "head_dim", c->head_dim);
    dmuon_json_kint(&w, "max_position_embeddings", c->seq);
    dmuon_json_kdouble(&w, "rms_norm_eps", c->norm_eps);
    dmuon_json_kdouble(&w, "rope_theta", c->rope_theta);
    dmuon_json_kbool(&w, "tie_word_embeddings", c->tie);
    dmuon_json_kstr(&w, "hidden_act", "silu");
    dmuon_json_kbool(&w, "attention_bias", false);
    dmuon_json_kbool(&w, "mlp_bias", false);
    dmuon_json_kstr(&w, "torch_dtype", "float32");
    dmuon_json_end_object(&w);
    fputc('\n', f);
    return ferror(f) ? DMUON_FAIL(DMUON_EIO, "write failed") : DMUON_OK;
}

dmuon_rc tm_write_hf_config(const tm_config *c, const char *path)
{
    DMUON_TRY(dmuon_write_atomic(path, write_hf, (void *)c));
    return DMUON_OK;
}

static dmuon_rc write_yaml(FILE *f, void *ctx)
{
    const tm_config *c = ctx;
    fprintf(f, "# dmuon-train model: llama-style decoder, vocab %d, dim %d, layers %d, heads %d, "
               "kv_heads %d, ffn %d, seq %d, %s\n",
            c->vocab, c->dim, c->layers, c->heads, c->kv_heads, c->ffn, c->seq,
            c->tie ? "tied head" : "untied head");
    for (size_t i = 0; i < tm_param_count(c); i++) {
        tm_param_info in;
        tm_param_info_of(c, i, &in);
        if (in.ndim == 1)
            fprintf(f, "- {name: %s, shape: [%lld], dtype: f32}\n", in.name,
                    (long long)in.shape[0]);
        else
            fprintf(f, "- {name: %s, shape: [%lld, %lld], dtype: f32}\n", in.name,
                    (long long)in.shape[0], (long long)in.shape[1]);
    }
    return ferror(f) ? DMUON_FAIL(DMUON_EIO, "write failed") : DMUON_OK;
}

dmuon_rc tm_write_yaml(const tm_config *c, const char *path)
{
    DMUON_TRY(dmuon_write_atomic(path, write_yaml, (void *)c));
    return DMUON_OK;
}
