/*
 * test_model.c — the model inventory: the config.json route against the
 * independently written YAML inventories, the bundled models' counts (paper
 * C.5, Appendix B), safetensors headers and index files, role rules, layer
 * names, and every malformed input named in the planner's contract.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dmuon/model.h"
#include "st_internal.h"

#include "testutil.h"

static int setup(void **state) { return testutil_setup("model"); }
static int teardown(void **state) { return testutil_teardown(); }

static void path_of(char *out, size_t cap, const char *rel)
{
    snprintf(out, cap, "%s/%s", root, rel);
}

static dmuon_model *load(const char *rel, const dmuon_model_opts *o)
{
    char p[1200];
    dmuon_model *m = NULL;
    path_of(p, sizeof p, rel);
    dmuon_rc rc = dmuon_model_load(p, o, &m);
    if (rc != DMUON_OK)
        fprintf(stderr, "load %s: %s\n", p, dmuon_errmsg());
    assert_int_equal(rc, DMUON_OK);
    return m;
}

/* writes text to tmpdir/name and returns the path in out */
static void write_file(char *out, size_t cap, const char *name, const void *data, size_t len)
{
    snprintf(out, cap, "%s/%s", tmpdir, name);
    FILE *f = fopen(out, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, len, f), len);
    fclose(f);
}

/* a safetensors file: 8-byte LE header length, header, data_bytes zeros */
static void write_st(char *out, size_t cap, const char *name, const char *header,
                     uint64_t hdr_len_field, size_t data_bytes)
{
    size_t hl = strlen(header);
    unsigned char *buf = calloc(1, 8 + hl + data_bytes + 1);
    assert_non_null(buf);
    for (int i = 0; i < 8; i++)
        buf[i] = (unsigned char)(hdr_len_field >> (8 * i));
    memcpy(buf + 8, header, hl);
    write_file(out, cap, name, buf, 8 + hl + data_bytes);
    free(buf);
}

static dmuon_rc load_abs(const char *p, dmuon_model **m)
{
    *m = NULL;
    return dmuon_model_load(p, NULL, m);
}

/* ------------------------------------------------------------- counts -- */

static void test_config_matches_yaml(void **state)
{
    static const char *names[] = {"qwen2.5-1.5b", "qwen2.5-7b", "qwen2.5-32b",
                                  "qwen1.5-moe-a2.7b"};
    for (size_t k = 0; k < 4; k++) {
        char a[256], b[256];
        snprintf(a, sizeof a, "models/%s/config.json", names[k]);
        snprintf(b, sizeof b, "models/%s.yaml", names[k]);
        /* the YAML lists are one "(root)" (no order claim); the config splits
         * an untied head apart (tested below) */
        dmuon_model_opts one = {0};
        one.root = DMUON_ROOT_ONE;
        dmuon_model *mc = load(a, &one), *my = load(b, NULL);
        assert_int_equal(dmuon_model_param_count(mc), dmuon_model_param_count(my));
        for (size_t i = 0; i < dmuon_model_param_count(mc); i++) {
            const dmuon_param *p = dmuon_model_param(mc, i), *q = dmuon_model_param(my, i);
            assert_string_equal(p->name, q->name);
            assert_int_equal(p->ndim, q->ndim);
            for (int d = 0; d < p->ndim; d++)
                assert_int_equal(p->shape[d], q->shape[d]);
            assert_int_equal(p->role, q->role);
            assert_int_equal(p->layer, q->layer);
        }
        assert_true(dmuon_model_digest(mc) == dmuon_model_digest(my));
        assert_string_equal(dmuon_model_format(mc), "config");
        assert_string_equal(dmuon_model_format(my), "yaml");
        dmuon_model_free(mc);
        dmuon_model_free(my);
    }
}

/* The tensors outside the blocks (dmuon/model.h): an untied config splits
 * them into "(embed)" first and "(head)" last; a tied one, --root one, a
 * YAML list, a tensor between blocks: one "(root)". */
static void test_root_split(void **state)
{
    dmuon_model *m = load("models/qwen2.5-7b/config.json", NULL);
    size_t L = dmuon_model_layer_count(m);
    assert_int_equal(L, 30);
    assert_string_equal(dmuon_model_layer_name(m, 0), "(embed)");
    assert_string_equal(dmuon_model_layer_name(m, L - 1), "(head)");
    for (size_t i = 0; i < dmuon_model_param_count(m); i++) {
        const dmuon_param *p = dmuon_model_param(m, i);
        if (!strcmp(p->name, "model.embed_tokens.weight"))
            assert_int_equal(p->layer, 0);
        else if (!strcmp(p->name, "model.norm.weight") || !strcmp(p->name, "lm_head.weight"))
            assert_int_equal(p->layer, (int)(L - 1));
        else
            assert_true(p->layer > 0 && (size_t)p->layer < L - 1);
    }
    dmuon_model_free(m);
    m = load("models/qwen2.5-1.5b/config.json", NULL);   /* tied */
    assert_string_equal(dmuon_model_layer_name(m, 0), "(root)");
    assert_int_equal(dmuon_model_layer_count(m), 29);
    dmuon_model_free(m);
    dmuon_model_opts one = {0};
    one.root = DMUON_ROOT_ONE;
    m = load("models/qwen2.5-7b/config.json", &one);
    assert_string_equal(dmuon_model_layer_name(m, 0), "(root)");
    assert_int_equal(dmuon_model_layer_count(m), 29);
    dmuon_model_free(m);
    /* built: split only when asked, and only when nothing sits between */
    dmuon_tensor_spec t[] = {{"wte.weight", 2, {8, 4}, DMUON_BF16},
                             {"h.0.w.weight", 2, {4, 4}, DMUON_BF16},
                             {"mid.weight", 1, {4}, DMUON_BF16},
                             {"h.1.w.weight", 2, {4, 4}, DMUON_BF16},
                             {"ln_f.weight", 1, {4}, DMUON_BF16}};
    dmuon_model_opts split = {0};
    split.root = DMUON_ROOT_SPLIT;
    assert_int_equal(dmuon_model_build("t", t, 5, &split, &m), DMUON_OK);
    assert_string_equal(dmuon_model_layer_name(m, 0), "(root)");
    assert_int_equal(dmuon_model_layer_count(m), 3);
    dmuon_model_free(m);
    dmuon_tensor_spec u[] = {t[0], t[1], t[3], t[4]};
    assert_int_equal(dmuon_model_build("t", u, 4, NULL, &m), DMUON_OK);
    assert_string_equal(dmuon_model_layer_name(m, 0), "(root)");
    dmuon_model_free(m);
    assert_int_equal(dmuon_model_build("t", u, 4, &split, &m), DMUON_OK);
    assert_int_equal(dmuon_model_layer_count(m), 4);
    assert_string_equal(dmuon_model_layer_name(m, 0), "(embed)");
    assert_string_equal(dmuon_model_layer_name(m, 3), "(head)");
    assert_int_equal(dmuon_model_param(m, 3)->layer, 3);
    dmuon_model_free(m);
    assert_int_equal(dmuon_model_build("t", u, 3, &split, &m), DMUON_OK);   /* no head */
    assert_int_equal(dmuon_model_layer_count(m), 3);
    assert_string_equal(dmuon_model_layer_name(m, 0), "(embed)");
    assert_string_equal(dmuon_model_layer_name(m, 2), "h.1");
    dmuon_model_free(m);
    /* YAML: root: split in the mapping form; a bad value names the field */
    char y[1300];
    snprintf(y, sizeof y, "%s/split.yaml", tmpdir);
    FILE *f = fopen(y, "w");
    fprintf(f, "root: split\ntensors:\n- {name: wte.weight, shape: [8, 4]}\n"
               "- {name: h.0.w.weight, shape: [4, 4]}\n- {name: ln_f.weight, shape: [4]}\n");
    fclose(f);
    assert_int_equal(dmuon_model_load(y, NULL, &m), DMUON_OK);
    assert_string_equal(dmuon_model_layer_name(m, 0), "(embed)");
    assert_string_equal(dmuon_model_layer_name(m, 2), "(head)");
    dmuon_model_free(m);
    f = fopen(y, "w");
    fprintf(f, "root: both\ntensors:\n- {name: wte.weight, shape: [8, 4]}\n");
    fclose(f);
    assert_int_equal(dmuon_model_load(y, NULL, &m), DMUON_EPARSE);
    assert_non_null(strstr(dmuon_errmsg(), "field 'root': 'both'"));
    dmuon_root_mode r;
    assert_int_equal(dmuon_root_mode_parse("SPLIT", &r), DMUON_OK);
    assert_int_equal(r, DMUON_ROOT_SPLIT);
    assert_string_equal(dmuon_root_mode_name(DMUON_ROOT_ONE), "one");
    assert_int_equal(dmuon_root_mode_parse("x", &r), DMUON_EINVAL);
}

static void test_bundled_counts(void **state)
{
    dmuon_model_stats s;
    /* Qwen2.5-1.5B: 196 Muon matrices = 28 layers x 7; tied: no lm_head */
    dmuon_model *m = load("models/qwen2.5-1.5b.yaml", NULL);
    dmuon_model_get_stats(m, &s);
    assert_int_equal(s.muon_matrices, 196);
    assert_int_equal(s.tensors, 338);
    assert_int_equal(s.elements, 1543714304LL);
    assert_int_equal(s.layers, 29);   /* (root) + 28 */
    for (size_t i = 0; i < dmuon_model_param_count(m); i++)
        assert_null(strstr(dmuon_model_param(m, i)->name, "lm_head"));
    dmuon_shape_count *sh;
    size_t n;
    assert_int_equal(dmuon_model_muon_shapes(m, &sh, &n), DMUON_OK);
    /* k/v 256x1536 (56), q/o 1536x1536 (56), down 1536x8960 (28), gate/up 8960x1536 (56) */
    assert_int_equal(n, 4);
    int64_t want[4][3] = {{256, 1536, 56}, {1536, 1536, 56}, {1536, 8960, 28}, {8960, 1536, 56}};
    for (size_t i = 0; i < 4; i++) {
        assert_int_equal(sh[i].m, want[i][0]);
        assert_int_equal(sh[i].n, want[i][1]);
        assert_int_equal(sh[i].count, want[i][2]);
    }
    free(sh);
    dmuon_model_free(m);

    /* Qwen1.5-MoE-A2.7B: 4320 expert matrices among 4538 2-D tensors */
    m = load("models/qwen1.5-moe-a2.7b.yaml", NULL);
    dmuon_model_get_stats(m, &s);
    assert_int_equal(s.two_d, 4538);
    assert_int_equal(s.expert_matrices, 4320);
    assert_int_equal(s.tensors, 4659);
    assert_int_equal(s.elements, 14315784192LL);
    assert_int_equal(s.muon_matrices, 4320 + 24 * 9);
    dmuon_model_free(m);
}

static void test_fused_experts_same_matrices(void **state)
{
    dmuon_model_opts fused = {.fused_experts = true};
    dmuon_model *a = load("models/qwen1.5-moe-a2.7b/config.json", NULL);
    dmuon_model *b = load("models/qwen1.5-moe-a2.7b/config.json", &fused);
    dmuon_model_stats sa, sb;
    dmuon_model_get_stats(a, &sa);
    dmuon_model_get_stats(b, &sb);
    assert_int_equal(sa.expert_matrices, 4320);
    assert_int_equal(sb.expert_matrices, 4320);
    assert_int_equal(sa.muon_elements, sb.muon_elements);
    /* the fused gate_up_proj [60, 2816, 2048] holds 120 matrices of 1408 x 2048 */
    bool seen = false;
    for (size_t i = 0; i < dmuon_model_param_count(b); i++) {
        const dmuon_param *p = dmuon_model_param(b, i);
        if (!strcmp(p->name, "model.layers.0.mlp.experts.gate_up_proj")) {
            seen = true;
            assert_int_equal(p->ndim, 3);
            assert_int_equal(p->shape[1], 2816);
            assert_int_equal(p->matrices, 120);
            assert_int_equal(p->mat_m, 1408);
            assert_int_equal(p->mat_n, 2048);
            assert_true(p->expert);
        }
    }
    assert_true(seen);
    dmuon_shape_count *xa, *xb;
    size_t na, nb;
    assert_int_equal(dmuon_model_muon_shapes(a, &xa, &na), DMUON_OK);
    assert_int_equal(dmuon_model_muon_shapes(b, &xb, &nb), DMUON_OK);
    assert_int_equal(na, nb);
    for (size_t i = 0; i < na; i++) {
        assert_int_equal(xa[i].m, xb[i].m);
        assert_int_equal(xa[i].n, xb[i].n);
        assert_int_equal(xa[i].count, xb[i].count);
        if (xa[i].m == 1408 && xa[i].n == 2048)
            assert_int_equal(xa[i].count, 2880);
        if (xa[i].m == 2048 && xa[i].n == 1408)
            assert_int_equal(xa[i].count, 1440);
    }
    free(xa);
    free(xb);
    dmuon_model_free(a);
    dmuon_model_free(b);
}

static void test_layers_keep_prefix(void **state)
{
    dmuon_model *m = load("models/qwen2.5-vl-3b-instruct.yaml", NULL);
    size_t nl = dmuon_model_layer_count(m);
    assert_int_equal(nl, 1 + 32 + 36);
    assert_string_equal(dmuon_model_layer_name(m, 0), "(root)");
    assert_string_equal(dmuon_model_layer_name(m, 1), "visual.blocks.0");
    assert_string_equal(dmuon_model_layer_name(m, 4), "visual.blocks.3");
    assert_string_equal(dmuon_model_layer_name(m, 33 + 3), "model.layers.3");
    /* blocks.10 comes after blocks.9 (numeric, not string order) */
    assert_string_equal(dmuon_model_layer_name(m, 11), "visual.blocks.10");
    for (size_t i = 0; i < dmuon_model_param_count(m); i++) {
        const dmuon_param *p = dmuon_model_param(m, i);
        if (!strcmp(p->name, "visual.blocks.3.attn.qkv.weight"))
            assert_string_equal(dmuon_model_layer_name(m, (size_t)p->layer), "visual.blocks.3");
        if (!strcmp(p->name, "model.layers.3.mlp.up_proj.weight"))
            assert_string_equal(dmuon_model_layer_name(m, (size_t)p->layer), "model.layers.3");
        if (!strcmp(p->name, "model.embed_tokens.weight"))
            assert_int_equal(p->role, DMUON_ROLE_ADAMW);
        if (!strcmp(p->name, "visual.patch_embed.proj.weight"))
            assert_int_equal(p->role, DMUON_ROLE_ADAMW);
    }
    dmuon_model_free(m);
}

static void test_roles_and_overrides(void **state)
{
    const char *adamw[] = {"*.mlp.down_proj.weight"};
    dmuon_model_opts o = {.adamw = adamw, .n_adamw = 1};
    dmuon_model *m = load("models/qwen2.5-1.5b.yaml", &o);
    dmuon_model_stats s;
    dmuon_model_get_stats(m, &s);
    assert_int_equal(s.muon_matrices, 196 - 28);
    dmuon_model_free(m);
    /* a muon pattern on a 1-D tensor is an error */
    const char *muon[] = {"*.input_layernorm.weight"};
    dmuon_model_opts bad = {.muon = muon, .n_muon = 1};
    char p[1200];
    path_of(p, sizeof p, "models/qwen2.5-1.5b.yaml");
    assert_int_equal(dmuon_model_load(p, &bad, &m), DMUON_EINVAL);
    assert_non_null(strstr(dmuon_errmsg(), "input_layernorm"));
    /* defaults: biases and norms adamw, embedding adamw, 2-D weights muon */
    m = load("models/qwen2.5-7b.yaml", NULL);
    for (size_t i = 0; i < dmuon_model_param_count(m); i++) {
        const dmuon_param *q = dmuon_model_param(m, i);
        bool is2d = q->ndim == 2;
        bool emb = strstr(q->name, "embed") || strstr(q->name, "lm_head");
        assert_int_equal(q->role, is2d && !emb ? DMUON_ROLE_MUON : DMUON_ROLE_ADAMW);
    }
    dmuon_model_free(m);
}

static void test_other_config_types(void **state)
{
    char p[1200];
    dmuon_model *m;
    dmuon_model_stats s;
    const char *gemma2 = "{\"model_type\": \"gemma2\", \"hidden_size\": 64, \"intermediate_size\": "
                         "128, \"num_hidden_layers\": 2, \"num_attention_heads\": 4, "
                         "\"num_key_value_heads\": 2, \"head_dim\": 32, \"vocab_size\": 1000}";
    write_file(p, sizeof p, "config.json", gemma2, strlen(gemma2));
    assert_int_equal(load_abs(p, &m), DMUON_OK);
    dmuon_model_get_stats(m, &s);
    /* embed, 2 x (q,k,v,o, gate,up,down, 4 norms), final norm; tied: no head */
    assert_int_equal(s.tensors, 1 + 2 * 11 + 1);
    assert_int_equal(s.muon_matrices, 14);
    /* q: heads * head_dim = 128 rows */
    assert_string_equal(dmuon_model_param(m, 1)->name, "model.layers.0.self_attn.q_proj.weight");
    assert_int_equal(dmuon_model_param(m, 1)->shape[0], 128);
    assert_int_equal(dmuon_model_param(m, 2)->shape[0], 64);
    dmuon_model_free(m);
    const char *llama = "{\"model_type\": \"llama\", \"hidden_size\": 64, \"intermediate_size\": "
                        "96, \"num_hidden_layers\": 1, \"num_attention_heads\": 4, "
                        "\"vocab_size\": 100, \"attention_bias\": true}";
    write_file(p, sizeof p, "llama.json", llama, strlen(llama));
    assert_int_equal(load_abs(p, &m), DMUON_OK);
    dmuon_model_get_stats(m, &s);
    /* embed, q,qb,k,kb,v,vb,o,ob, gate,up,down, 2 norms, norm, lm_head */
    assert_int_equal(s.tensors, 1 + 8 + 3 + 2 + 1 + 1);
    dmuon_model_free(m);
}

/* -------------------------------------------------------- safetensors -- */

static void test_safetensors_and_index(void **state)
{
    char p[1200], q[1200];
    dmuon_model *m;
    const char *h1 = "{\"__metadata__\": {\"format\": \"pt\"}, "
                     "\"model.layers.1.mlp.up_proj.weight\": {\"dtype\": \"BF16\", \"shape\": [8, "
                     "4], \"data_offsets\": [0, 64]}, "
                     "\"model.layers.0.mlp.up_proj.weight\": {\"dtype\": \"F32\", \"shape\": [4, "
                     "4], \"data_offsets\": [64, 128]}}";
    write_st(p, sizeof p, "a.safetensors", h1, strlen(h1), 128);
    assert_int_equal(load_abs(p, &m), DMUON_OK);
    assert_int_equal(dmuon_model_param_count(m), 2);
    assert_string_equal(dmuon_model_format(m), "safetensors");
    /* forward order: layers.0 before layers.1 */
    assert_string_equal(dmuon_model_layer_name(m, 0), "model.layers.0");
    const dmuon_param *x = dmuon_model_param(m, 0);
    assert_int_equal(x->dtype, DMUON_BF16);
    assert_int_equal(x->shape[0], 8);
    assert_int_equal(x->layer, 1);
    assert_int_equal(dmuon_model_param(m, 1)->dtype, DMUON_F32);
    dmuon_model_free(m);

    const char *h2 = "{\"model.norm.weight\": {\"dtype\": \"BF16\", \"shape\": [4], "
                     "\"data_offsets\": [0, 8]}}";
    write_st(q, sizeof q, "b.safetensors", h2, strlen(h2), 8);
    const char *idx = "{\"metadata\": {}, \"weight_map\": {"
                      "\"model.layers.0.mlp.up_proj.weight\": \"a.safetensors\", "
                      "\"model.layers.1.mlp.up_proj.weight\": \"a.safetensors\", "
                      "\"model.norm.weight\": \"b.safetensors\"}}";
    write_file(p, sizeof p, "model.safetensors.index.json", idx, strlen(idx));
    assert_int_equal(load_abs(p, &m), DMUON_OK);
    assert_int_equal(dmuon_model_param_count(m), 3);
    assert_string_equal(dmuon_model_format(m), "safetensors-index");
    assert_string_equal(dmuon_model_param(m, 0)->name, "model.layers.0.mlp.up_proj.weight");
    dmuon_model_free(m);
    /* an index naming a tensor its shard lacks */
    const char *idx2 = "{\"weight_map\": {\"x.weight\": \"b.safetensors\"}}";
    write_file(p, sizeof p, "bad.index.json", idx2, strlen(idx2));
    assert_int_equal(load_abs(p, &m), DMUON_ENOTFOUND);
    assert_non_null(strstr(dmuon_errmsg(), "x.weight"));
    /* a shard that does not exist */
    const char *idx3 = "{\"weight_map\": {\"x.weight\": \"nope.safetensors\"}}";
    write_file(p, sizeof p, "bad3.index.json", idx3, strlen(idx3));
    assert_int_equal(load_abs(p, &m), DMUON_ENOTFOUND);
    assert_non_null(strstr(dmuon_errmsg(), "nope.safetensors"));
    assert_non_null(strstr(dmuon_errmsg(), "bad3.index.json"));   /* names the index too */
}

static void expect_st_error(const char *name, const char *header, uint64_t len_field,
                            size_t data, dmuon_rc want, const char *needle)
{
    char p[1200];
    dmuon_model *m = (dmuon_model *)1;
    write_st(p, sizeof p, name, header, len_field, data);
    dmuon_rc rc = load_abs(p, &m);
    if (rc != want || !strstr(dmuon_errmsg(), needle))
        fprintf(stderr, "%s: rc %d, message: %s\n", name, rc, dmuon_errmsg());
    assert_int_equal(rc, want);
    assert_null(m);
    assert_non_null(strstr(dmuon_errmsg(), needle));
    assert_non_null(strstr(dmuon_errmsg(), name));
}

static void test_safetensors_errors(void **state)
{
    char p[1200];
    dmuon_model *m;
    write_file(p, sizeof p, "short.safetensors", "\x05\x00\x00", 3);
    assert_int_equal(load_abs(p, &m), DMUON_EPARSE);
    assert_non_null(strstr(dmuon_errmsg(), "truncated"));
    const char *ok = "{\"w.weight\": {\"dtype\": \"BF16\", \"shape\": [2, 2], \"data_offsets\": [0, 8]}}";
    expect_st_error("beyond.safetensors", ok, 1u << 30, 8, DMUON_EPARSE, "beyond the end");
    expect_st_error("notjson.safetensors", "[1, 2, 3]", 9, 0, DMUON_EPARSE, "not start with '{'");
    expect_st_error("trunc.safetensors", "{\"w.weight\": {\"dtype\": \"BF16\", \"sha", 35, 0,
                    DMUON_EPARSE, "trunc.safetensors");
    const char *neg = "{\"w.weight\": {\"dtype\": \"BF16\", \"shape\": [2, -3], \"data_offsets\": [0, 8]}}";
    expect_st_error("neg.safetensors", neg, strlen(neg), 8, DMUON_EPARSE,
                    "non-negative integer");
    const char *dup = "{\"w.weight\": {\"dtype\": \"BF16\", \"shape\": [2], \"data_offsets\": [0, 4]}, "
                      "\"w.weight\": {\"dtype\": \"BF16\", \"shape\": [2], \"data_offsets\": [4, 8]}}";
    expect_st_error("dup.safetensors", dup, strlen(dup), 8, DMUON_EPARSE, "duplicate key 'w.weight' (first at line 1, column 2)");
    const char *off = "{\"w.weight\": {\"dtype\": \"BF16\", \"shape\": [2, 2], \"data_offsets\": [0, 6]}}";
    expect_st_error("off.safetensors", off, strlen(off), 8, DMUON_EPARSE, "data_offsets");
    const char *dt = "{\"w.weight\": {\"dtype\": \"Q4\", \"shape\": [2], \"data_offsets\": [0, 1]}}";
    expect_st_error("dtype.safetensors", dt, strlen(dt), 8, DMUON_EPARSE, "'Q4'");
    /* header-only: offsets beyond the (absent) data are fine, wrong sizes are not */
    expect_st_error("hdr-off.safetensors", off, strlen(off), 0, DMUON_EPARSE, "does not hold");
}

/* Zero-size tensors, header-only files, stored types and quantized tensors. */
static void test_safetensors_accepted(void **state)
{
    char p[1200];
    dmuon_model *m;
    const char *zero = "{\"w.weight\": {\"dtype\": \"BF16\", \"shape\": [0, 3], \"data_offsets\": [0, 0]}, "
                       "\"v.weight\": {\"dtype\": \"BF16\", \"shape\": [2, 2], \"data_offsets\": [0, 8]}}";
    write_st(p, sizeof p, "zero.safetensors", zero, strlen(zero), 8);
    assert_int_equal(load_abs(p, &m), DMUON_OK);
    const dmuon_param *q = dmuon_model_param(m, 0);
    assert_string_equal(q->name, "w.weight");
    assert_int_equal(q->shape[0], 0);
    assert_int_equal(q->numel, 0);
    assert_int_equal(q->role, DMUON_ROLE_ADAMW);   /* nothing to orthogonalise */
    assert_int_equal(dmuon_model_param(m, 1)->role, DMUON_ROLE_MUON);
    dmuon_model_free(m);
    /* the same header with no data after it (a header-only copy) */
    write_st(p, sizeof p, "hdronly.safetensors", zero, strlen(zero), 0);
    assert_int_equal(load_abs(p, &m), DMUON_OK);
    assert_int_equal(dmuon_model_param_count(m), 2);
    dmuon_model_free(m);
    /* an FP8 checkpoint: weights F8_E4M3 with their weight_scale_inv; I8 and
     * U8 tensors; all adamw (not Muon), counted as quantized */
    const char *q8 =
        "{\"l.layers.0.q_proj.weight\": {\"dtype\": \"F8_E4M3\", \"shape\": [4, 4], \"data_offsets\": [0, 16]}, "
        "\"l.layers.0.q_proj.weight_scale_inv\": {\"dtype\": \"F32\", \"shape\": [1, 1], \"data_offsets\": [16, 20]}, "
        "\"l.layers.0.k_proj.qweight\": {\"dtype\": \"I8\", \"shape\": [4, 4], \"data_offsets\": [20, 36]}, "
        "\"l.layers.0.experts.gate_up_proj_blocks\": {\"dtype\": \"U8\", \"shape\": [2, 4, 2, 2], \"data_offsets\": [36, 68]}, "
        "\"l.layers.0.experts.gate_up_proj_scales\": {\"dtype\": \"U8\", \"shape\": [2, 4, 2], \"data_offsets\": [68, 84]}, "
        "\"l.layers.0.o_proj.weight\": {\"dtype\": \"BF16\", \"shape\": [4, 4], \"data_offsets\": [84, 116]}}";
    write_st(p, sizeof p, "fp8.safetensors", q8, strlen(q8), 116);
    assert_int_equal(load_abs(p, &m), DMUON_OK);
    dmuon_model_stats s;
    dmuon_model_get_stats(m, &s);
    assert_int_equal(s.quantized, 4);
    assert_int_equal(s.muon_params, 1);   /* only the BF16 o_proj */
    assert_string_equal(dmuon_model_param(m, 0)->stored, "F8_E4M3");
    assert_true(dmuon_model_param(m, 0)->quantized);
    assert_int_equal(dmuon_model_param(m, 0)->dtype, DMUON_U8);
    assert_int_equal(dmuon_model_param(m, 1)->role, DMUON_ROLE_ADAMW);   /* a scale */
    assert_false(dmuon_model_param(m, 1)->quantized);
    assert_string_equal(dmuon_model_param(m, 5)->name, "l.layers.0.o_proj.weight");
    assert_int_equal(dmuon_model_param(m, 5)->role, DMUON_ROLE_MUON);
    assert_int_equal(s.bytes, 16 + 4 + 16 + 32 + 16 + 32);
    dmuon_model_free(m);
    /* --muon still overrides */
    const char *pat[] = {"*q_proj.weight"};
    dmuon_model_opts o = {.muon = pat, .n_muon = 1};
    assert_int_equal(dmuon_model_load(p, &o, &m), DMUON_OK);
    assert_int_equal(dmuon_model_param(m, 0)->role, DMUON_ROLE_MUON);
    dmuon_model_free(m);
}

/* The one safetensors reader (st.c): what the model route allows with its
 * flags, and the strict rules the checkpoints read with (no flag). */
static dmuon_rc st_read(const char *path, unsigned flags, dmuon_st_header *h)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    dmuon_rc rc = dmuon_st_header_read(f, path, flags, h);
    fclose(f);
    return rc;
}

static void test_st_reader_flags(void **state)
{
    char p[1200];
    dmuon_st_header h;
    const unsigned all = DMUON_ST_ZERO_DIMS | DMUON_ST_HEADER_ONLY | DMUON_ST_ALL_DTYPES;
    /* every stored type the format defines: allowed with ALL_DTYPES only */
    const char *types =
        "{\"a\": {\"dtype\": \"U64\", \"shape\": [2], \"data_offsets\": [0, 16]}, "
        "\"b\": {\"dtype\": \"U16\", \"shape\": [2], \"data_offsets\": [16, 20]}, "
        "\"c\": {\"dtype\": \"F8_E8M0\", \"shape\": [4], \"data_offsets\": [20, 24]}, "
        "\"d\": {\"dtype\": \"BOOL\", \"shape\": [], \"data_offsets\": [24, 25]}}";
    write_st(p, sizeof p, "types.safetensors", types, strlen(types), 25);
    assert_int_equal(st_read(p, DMUON_ST_ALL_DTYPES, &h), DMUON_OK);
    assert_int_equal(h.n, 4);
    assert_string_equal(h.t[0].stored, "U64");
    assert_int_equal(h.t[0].dtype, DMUON_I64);
    assert_string_equal(h.t[1].stored, "U16");
    assert_int_equal(h.t[1].dtype, DMUON_F16);
    assert_string_equal(h.t[2].stored, "F8_E8M0");
    assert_int_equal(h.t[2].dtype, DMUON_U8);
    assert_int_equal(h.t[3].ndim, 0);
    dmuon_st_header_release(&h);
    assert_int_equal(st_read(p, 0, &h), DMUON_EPARSE);
    assert_non_null(strstr(dmuon_errmsg(), "unsupported type 'U64'"));
    assert_non_null(strstr(dmuon_errmsg(), "expected F64, F32, F16, BF16, I64, I32 or U8"));
    /* a zero-size dimension */
    const char *zero = "{\"w\": {\"dtype\": \"F32\", \"shape\": [0, 3], \"data_offsets\": [0, 0]}, "
                       "\"v\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]}}";
    write_st(p, sizeof p, "zero2.safetensors", zero, strlen(zero), 8);
    assert_int_equal(st_read(p, DMUON_ST_ZERO_DIMS, &h), DMUON_OK);   /* overlaps nothing */
    assert_int_equal(h.t[0].shape[0], 0);
    dmuon_st_header_release(&h);
    assert_int_equal(st_read(p, 0, &h), DMUON_EPARSE);
    assert_non_null(strstr(dmuon_errmsg(), "dimension 0 is 0, expected a positive integer"));
    /* a header-only file: only with HEADER_ONLY, and the sizes still count */
    const char *two = "{\"w\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]}}";
    write_st(p, sizeof p, "hdr.safetensors", two, strlen(two), 0);
    assert_int_equal(st_read(p, DMUON_ST_HEADER_ONLY, &h), DMUON_OK);
    dmuon_st_header_release(&h);
    assert_int_equal(st_read(p, 0, &h), DMUON_EPARSE);
    assert_non_null(strstr(dmuon_errmsg(), "inside the 0 data bytes"));
    /* a file with some data is no header-only copy: offsets must lie inside */
    write_st(p, sizeof p, "short2.safetensors", two, strlen(two), 4);
    assert_int_equal(st_read(p, all, &h), DMUON_EPARSE);
    assert_non_null(strstr(dmuon_errmsg(), "inside the 4 data bytes"));
    /* overlapping tensors: refused under every flag */
    const char *ov = "{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]}, "
                     "\"b\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [4, 12]}}";
    write_st(p, sizeof p, "ov.safetensors", ov, strlen(ov), 12);
    assert_int_equal(st_read(p, all, &h), DMUON_EPARSE);
    assert_non_null(strstr(dmuon_errmsg(), "overlaps"));
    dmuon_model *m = (dmuon_model *)1;
    assert_int_equal(load_abs(p, &m), DMUON_EPARSE);   /* the model route reads with st.c */
    assert_null(m);
    assert_non_null(strstr(dmuon_errmsg(), "overlaps tensor 'a'"));
}

/* ------------------------------------------------------- config / yaml -- */

static void expect_file_error(const char *name, const char *text, dmuon_rc want,
                              const char *needle)
{
    char p[1200];
    dmuon_model *m = (dmuon_model *)1;
    write_file(p, sizeof p, name, text, strlen(text));
    dmuon_rc rc = load_abs(p, &m);
    if (rc != want || !strstr(dmuon_errmsg(), needle))
        fprintf(stderr, "%s: rc %d, message: %s\n", name, rc, dmuon_errmsg());
    assert_int_equal(rc, want);
    assert_null(m);
    assert_non_null(strstr(dmuon_errmsg(), needle));
    assert_non_null(strstr(dmuon_errmsg(), name));
}

static void test_config_errors(void **state)
{
    expect_file_error("bert.json", "{\"model_type\": \"bert\", \"hidden_size\": 8}",
                      DMUON_EPARSE, "qwen2_moe");
    assert_non_null(strstr(dmuon_errmsg(), "safetensors"));
    expect_file_error("nohidden.json",
                      "{\"model_type\": \"qwen2\", \"num_hidden_layers\": 2, "
                      "\"num_attention_heads\": 2, \"vocab_size\": 10, \"intermediate_size\": 8}",
                      DMUON_ENOTFOUND, "'hidden_size'");
    expect_file_error("neg.json",
                      "{\"model_type\": \"qwen2\", \"hidden_size\": -8, \"num_hidden_layers\": 2, "
                      "\"num_attention_heads\": 2, \"vocab_size\": 10, \"intermediate_size\": 8}",
                      DMUON_EPARSE, "positive integer");
    expect_file_error("broken.json", "{\"model_type\": \"qwen2\", \"hidden_size\": ", DMUON_EPARSE,
                      "broken.json");
    expect_file_error("neither.json", "{\"a\": 1}", DMUON_EPARSE, "model_type");
    /* an absurd dimension is blamed on its config field */
    expect_file_error("huge.json",
                      "{\"model_type\": \"qwen2\", \"hidden_size\": 100000000000, "
                      "\"num_hidden_layers\": 2, \"num_attention_heads\": 2, "
                      "\"vocab_size\": 10, \"intermediate_size\": 8}",
                      DMUON_EPARSE, "field 'hidden_size': 100000000000");
}

/* A directory, a missing path, and role patterns. */
static void test_paths_and_patterns(void **state)
{
    char p[1200], d[1300];
    dmuon_model *m = (dmuon_model *)1;
    char r[1400];
    snprintf(d, sizeof d, "%s/snap", tmpdir);
    assert_int_equal(mkdir(d, 0755), 0);
    /* an empty directory: nothing to read */
    assert_int_equal(dmuon_model_resolve(d, r, sizeof r), DMUON_ENOTFOUND);
    assert_non_null(strstr(dmuon_errmsg(), "no config.json"));
    /* config.json only: read as the config */
    write_file(p, sizeof p, "snap/config.json", "{}", 2);
    assert_int_equal(dmuon_model_resolve(d, r, sizeof r), DMUON_OK);
    assert_non_null(strstr(r, "snap/config.json"));
    assert_int_equal(dmuon_model_load(d, NULL, &m), DMUON_EPARSE);   /* '{}' has no model_type */
    assert_null(m);
    assert_non_null(strstr(dmuon_errmsg(), "snap/config.json"));
    /* one .safetensors file wins over config.json; two are ambiguous; an index wins */
    const char *h = "{\"w.weight\": {\"dtype\": \"BF16\", \"shape\": [2, 2], \"data_offsets\": [0, 8]}}";
    write_st(p, sizeof p, "snap/a.safetensors", h, strlen(h), 8);
    assert_int_equal(dmuon_model_resolve(d, r, sizeof r), DMUON_OK);
    assert_non_null(strstr(r, "snap/a.safetensors"));
    write_st(p, sizeof p, "snap/b.safetensors", h, strlen(h), 8);
    assert_int_equal(dmuon_model_resolve(d, r, sizeof r), DMUON_EINVAL);
    assert_non_null(strstr(dmuon_errmsg(), "a.safetensors, b.safetensors"));
    const char *ix = "{\"weight_map\": {\"w.weight\": \"a.safetensors\"}}";
    write_file(p, sizeof p, "snap/model.safetensors.index.json", ix, strlen(ix));
    assert_int_equal(dmuon_model_resolve(d, r, sizeof r), DMUON_OK);
    assert_non_null(strstr(r, "snap/model.safetensors.index.json"));
    assert_int_equal(dmuon_model_load(d, NULL, &m), DMUON_OK);
    assert_string_equal(dmuon_model_format(m), "safetensors-index");
    dmuon_model_free(m);
    snprintf(d + strlen(d), sizeof d - strlen(d), "/absent.yaml");
    assert_int_equal(dmuon_model_load(d, NULL, &m), DMUON_ENOTFOUND);
    assert_non_null(strstr(dmuon_errmsg(), "absent.yaml"));
    assert_int_equal(dmuon_model_pattern_check("*.weight"), DMUON_OK);
    assert_int_equal(dmuon_model_pattern_check("a[]b]c"), DMUON_OK);
    assert_int_equal(dmuon_model_pattern_check("a[bc"), DMUON_EINVAL);
    assert_non_null(strstr(dmuon_errmsg(), "'a[bc'"));
    assert_int_equal(dmuon_model_pattern_check("a\\"), DMUON_EINVAL);
    assert_int_equal(dmuon_model_pattern_check(""), DMUON_EINVAL);
    const char *bad[] = {"x[y"};
    dmuon_model_opts o = {bad, 1, NULL, 0, false, DMUON_ROOT_AUTO};
    dmuon_tensor_spec t = {"w.weight", 2, {4, 4}, DMUON_BF16};
    assert_int_equal(dmuon_model_build("t", &t, 1, &o, &m), DMUON_EINVAL);
    assert_non_null(strstr(dmuon_errmsg(), "x[y"));
}

static void test_yaml_errors(void **state)
{
    expect_file_error("zero.yaml", "- {name: a.weight, shape: [0, 4]}\n", DMUON_EPARSE,
                      "positive integer");
    expect_file_error("neg.yaml", "- {name: a.weight, shape: [4, -1]}\n", DMUON_EPARSE,
                      "positive integer");
    expect_file_error("dup.yaml", "- {name: a.weight, shape: [4, 4]}\n- {name: a.weight, shape: [4]}\n",
                      DMUON_EPARSE, "duplicate tensor name 'a.weight'");
    expect_file_error("dup3.yaml",
                      "- {name: a.weight, shape: [4, 4]}\n- {name: b.weight, shape: [4, 4]}\n"
                      "- {name: a.weight, shape: [4]}\n",
                      DMUON_EPARSE, "duplicate tensor name 'a.weight' at line 3 (first at line 1)");
    expect_file_error("noshape.yaml", "- {name: a.weight}\n", DMUON_EPARSE, "'shape'");
    expect_file_error("noname.yaml", "- {shape: [2, 2]}\n", DMUON_ENOTFOUND, "'name'");
    expect_file_error("text.yaml", "hello\n", DMUON_EPARSE, "text.yaml");
    expect_file_error("str.yaml", "- {name: a, shape: [2, x]}\n", DMUON_EPARSE, "shape");
    /* the mapping form with patterns and a default dtype */
    char p[1200];
    dmuon_model *m;
    const char *y = "dtype: f32\nadamw: ['*.b.weight']\ntensors:\n"
                    "  - {name: blocks.0.a.weight, shape: [4, 4]}\n"
                    "  - {name: blocks.0.b.weight, shape: [4, 4]}\n"
                    "  - {name: blocks.1.a.weight, shape: [4, 4], dtype: bf16}\n";
    write_file(p, sizeof p, "map.yaml", y, strlen(y));
    assert_int_equal(load_abs(p, &m), DMUON_OK);
    assert_int_equal(dmuon_model_param(m, 0)->dtype, DMUON_F32);
    assert_int_equal(dmuon_model_param(m, 1)->role, DMUON_ROLE_ADAMW);
    assert_int_equal(dmuon_model_param(m, 2)->dtype, DMUON_BF16);
    assert_int_equal(dmuon_model_layer_count(m), 2);
    dmuon_model_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config_matches_yaml),
        cmocka_unit_test(test_root_split),
        cmocka_unit_test(test_bundled_counts),
        cmocka_unit_test(test_fused_experts_same_matrices),
        cmocka_unit_test(test_layers_keep_prefix),
        cmocka_unit_test(test_roles_and_overrides),
        cmocka_unit_test(test_other_config_types),
        cmocka_unit_test(test_safetensors_and_index),
        cmocka_unit_test(test_safetensors_errors),
        cmocka_unit_test(test_safetensors_accepted),
        cmocka_unit_test(test_st_reader_flags),
        cmocka_unit_test(test_config_errors),
        cmocka_unit_test(test_yaml_errors),
        cmocka_unit_test(test_paths_and_patterns),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
