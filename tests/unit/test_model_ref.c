/*
 * test_model_ref.c — the model inventory against Hugging Face transformers,
 * tensor for tensor, for every supported family.
 *
 * tests/reference/hf/make_reference.py (not run here) wrote, for each case:
 * configs/CASE.json (the config given to dmuon), params/CASE.json
 * (named_parameters() of the transformers model built from it, tied weights
 * once), and for the cases saved with save_pretrained st/CASE/ (the
 * config.json transformers wrote, model.safetensors and sharded/ with the
 * index and its shards, all cut to their headers) and files/CASE.json (the
 * files' tensors as the safetensors library lists them).  Checked here:
 *   - config route, module layout (fused experts) == params, names in the
 *     same order, shapes and dtypes (dtype skipped for configs without a
 *     dtype field: dmuon then assumes BF16, transformers builds FP32);
 *   - config route, checkpoint layout == the file save_pretrained wrote;
 *   - the transformers-written config.json == the file;
 *   - safetensors route, single file and sharded index, and the snapshot
 *     folders == the file;
 *   - the Muon matrices: both layouts give the same matrix shapes and
 *     counts; fused [E, in, 2I] tensors split into the real I x H gate and
 *     up matrices (halves for llama4_text, interleaved for gpt_oss).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dmuon/doc.h"
#include "dmuon/model.h"

#include "testutil.h"

static int setup(void **state) { return testutil_setup("modelref"); }
static int teardown(void **state) { return testutil_teardown(); }

#define REF "tests/reference/hf"
#define MAX_T 4096

/* One tensor of a reference list. */
typedef struct {
    char name[160];
    int ndim;
    int64_t shape[8];
    char dtype[16];
} ref_tensor;

typedef struct {
    ref_tensor t[MAX_T];
    size_t n;
} ref_list;

static int cmp_ref(const void *a, const void *b)
{
    return strcmp(((const ref_tensor *)a)->name, ((const ref_tensor *)b)->name);
}

/* Reads list `key` of the JSON file rel into out (file order). */
static void read_ref(const char *rel, const char *key, ref_list *out)
{
    char p[1400];
    snprintf(p, sizeof p, "%s/%s", root, rel);
    dmuon_doc d;
    dmuon_rc rc = dmuon_doc_load_file(&d, p);
    if (rc != DMUON_OK)
        fprintf(stderr, "%s: %s\n", p, dmuon_errmsg());
    assert_int_equal(rc, DMUON_OK);
    yaml_node_t *seq = dmuon_doc_get(&d, dmuon_doc_root(&d), key);
    assert_non_null(seq);
    out->n = dmuon_doc_seq_len(seq);
    assert_true(out->n > 0 && out->n <= MAX_T);
    for (size_t i = 0; i < out->n; i++) {
        yaml_node_t *it = dmuon_doc_seq_at(&d, seq, i);
        ref_tensor *r = &out->t[i];
        const char *s = dmuon_doc_str(dmuon_doc_get(&d, it, "name"));
        assert_non_null(s);
        snprintf(r->name, sizeof r->name, "%s", s);
        s = dmuon_doc_str(dmuon_doc_get(&d, it, "dtype"));
        assert_non_null(s);
        snprintf(r->dtype, sizeof r->dtype, "%s", s);
        yaml_node_t *sh = dmuon_doc_get(&d, it, "shape");
        r->ndim = (int)dmuon_doc_seq_len(sh);
        assert_true(r->ndim >= 0 && r->ndim <= 8);
        for (int k = 0; k < r->ndim; k++)
            assert_int_equal(dmuon_doc_to_int(&d, dmuon_doc_seq_at(&d, sh, (size_t)k), "shape",
                                              &r->shape[k]),
                             DMUON_OK);
        if (r->ndim == 0) {   /* a scalar is recorded as [1] */
            r->ndim = 1;
            r->shape[0] = 1;
        }
    }
    dmuon_doc_release(&d);
}

static dmuon_model *load_rel(const char *rel, bool fused)
{
    char p[1400];
    snprintf(p, sizeof p, "%s/%s", root, rel);
    dmuon_model_opts o = {.fused_experts = fused};
    dmuon_model *m = NULL;
    dmuon_rc rc = dmuon_model_load(p, &o, &m);
    if (rc != DMUON_OK)
        fprintf(stderr, "load %s: %s\n", p, dmuon_errmsg());
    assert_int_equal(rc, DMUON_OK);
    return m;
}

/* The model's tensors as a reference list (model order). */
static void list_of(const dmuon_model *m, ref_list *out)
{
    out->n = dmuon_model_param_count(m);
    assert_true(out->n <= MAX_T);
    for (size_t i = 0; i < out->n; i++) {
        const dmuon_param *q = dmuon_model_param(m, i);
        ref_tensor *r = &out->t[i];
        snprintf(r->name, sizeof r->name, "%s", q->name);
        snprintf(r->dtype, sizeof r->dtype, "%s", q->stored);
        r->ndim = q->ndim;
        for (int k = 0; k < q->ndim; k++)
            r->shape[k] = q->shape[k];
    }
}

/* Compares two lists as sets of (name, shape[, dtype]); prints every
 * difference; returns their number. */
static int diff_lists(const char *what, ref_list *want, ref_list *got, bool dtypes)
{
    int bad = 0;
    qsort(want->t, want->n, sizeof want->t[0], cmp_ref);
    qsort(got->t, got->n, sizeof got->t[0], cmp_ref);
    size_t i = 0, j = 0;
    while (i < want->n || j < got->n) {
        int c = i == want->n ? 1 : j == got->n ? -1 : strcmp(want->t[i].name, got->t[j].name);
        if (c < 0) {
            fprintf(stderr, "%s: missing %s\n", what, want->t[i++].name);
            bad++;
        } else if (c > 0) {
            fprintf(stderr, "%s: extra %s\n", what, got->t[j++].name);
            bad++;
        } else {
            const ref_tensor *a = &want->t[i++], *b = &got->t[j++];
            bool same = a->ndim == b->ndim && (!dtypes || !strcmp(a->dtype, b->dtype));
            for (int k = 0; same && k < a->ndim; k++)
                same = a->shape[k] == b->shape[k];
            if (!same) {
                fprintf(stderr, "%s: %s: want %s [", what, a->name, a->dtype);
                for (int k = 0; k < a->ndim; k++)
                    fprintf(stderr, "%s%lld", k ? ", " : "", (long long)a->shape[k]);
                fprintf(stderr, "], got %s [", b->dtype);
                for (int k = 0; k < b->ndim; k++)
                    fprintf(stderr, "%s%lld", k ? ", " : "", (long long)b->shape[k]);
                fprintf(stderr, "]\n");
                bad++;
            }
        }
    }
    return bad;
}

static ref_list want, got;

/* Checks model m against list key of reference file ref; with ordered, the
 * names must also come in the reference's order. */
static int check_against(const char *ref, const char *key, const dmuon_model *m, const char *what,
                         bool dtypes, bool ordered)
{
    int bad = 0;
    read_ref(ref, key, &want);
    list_of(m, &got);
    for (size_t i = 0; ordered && i < want.n && i < got.n; i++)
        if (strcmp(want.t[i].name, got.t[i].name)) {
            fprintf(stderr, "%s: tensor %zu is %s, expected %s (named_parameters() order)\n",
                    what, i, got.t[i].name, want.t[i].name);
            bad++;
            break;
        }
    return bad + diff_lists(what, &want, &got, dtypes);
}

static bool config_has_dtype(const char *rel)
{
    char p[1400];
    snprintf(p, sizeof p, "%s/%s", root, rel);
    dmuon_doc d;
    assert_int_equal(dmuon_doc_load_file(&d, p), DMUON_OK);
    yaml_node_t *r = dmuon_doc_root(&d);
    bool has = dmuon_doc_get(&d, r, "dtype") || dmuon_doc_get(&d, r, "torch_dtype");
    dmuon_doc_release(&d);
    return has;
}

/* Same Muon matrix shapes and counts. */
static int same_matrices(const char *what, const dmuon_model *a, const dmuon_model *b)
{
    dmuon_shape_count *sa, *sb;
    size_t na, nb;
    assert_int_equal(dmuon_model_muon_shapes(a, &sa, &na), DMUON_OK);
    assert_int_equal(dmuon_model_muon_shapes(b, &sb, &nb), DMUON_OK);
    int bad = na != nb;
    for (size_t i = 0; !bad && i < na; i++)
        bad = sa[i].m != sb[i].m || sa[i].n != sb[i].n || sa[i].count != sb[i].count;
    if (bad)
        fprintf(stderr, "%s: the two layouts give different Muon matrices\n", what);
    free(sa);
    free(sb);
    return bad;
}

static int file_exists(const char *rel)
{
    char p[1400];
    snprintf(p, sizeof p, "%s/%s", root, rel);
    return access(p, F_OK) == 0;
}

/* The case names: the .json files of configs/, sorted. */
static size_t list_cases(char names[][64], size_t cap)
{
    char p[1400];
    snprintf(p, sizeof p, "%s/" REF "/configs", root);
    DIR *d = opendir(p);
    assert_non_null(d);
    size_t n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        size_t l = strlen(e->d_name);
        if (l > 5 && l < 64 && !strcmp(e->d_name + l - 5, ".json") && n < cap) {
            memcpy(names[n], e->d_name, l - 5);
            names[n++][l - 5] = '\0';
        }
    }
    closedir(d);
    qsort(names, n, 64, (int (*)(const void *, const void *))strcmp);
    return n;
}

static void test_every_family_both_routes(void **state)
{
    static char cases[128][64];
    size_t n = list_cases(cases, 128);
    static const char *const families[] = {
        "llama", "mistral", "qwen2", "qwen2_moe", "gemma", "gemma2", "qwen3", "qwen3_moe",
        "mixtral", "phi3", "deepseek_v3", "olmo2", "gemma3_text", "llama4_text", "gpt_oss"};
    /* every family has a saved case and a defaults case */
    for (size_t f = 0; f < sizeof families / sizeof families[0]; f++) {
        char rel[256];
        snprintf(rel, sizeof rel, REF "/files/%s.json", families[f]);
        assert_true(file_exists(rel));
        snprintf(rel, sizeof rel, REF "/configs/%s_defaults.json", families[f]);
        assert_true(file_exists(rel));
    }
    int bad = 0, checked = 0;
    for (size_t c = 0; c < n; c++) {
        const char *k = cases[c];
        char cfg[256], ref[256], what[256];
        snprintf(cfg, sizeof cfg, REF "/configs/%s.json", k);
        snprintf(ref, sizeof ref, REF "/params/%s.json", k);
        /* config route, module layout == named_parameters() */
        dmuon_model *mod = load_rel(cfg, true);
        snprintf(what, sizeof what, "%s: config (module layout) vs named_parameters", k);
        bad += check_against(ref, "params", mod, what, config_has_dtype(cfg), true);
        checked++;
        snprintf(ref, sizeof ref, REF "/files/%s.json", k);
        if (!file_exists(ref)) {
            dmuon_model_free(mod);
            continue;
        }
        /* config route, checkpoint layout == the file save_pretrained wrote */
        dmuon_model *ck = load_rel(cfg, false);
        snprintf(what, sizeof what, "%s: config (checkpoint layout) vs model.safetensors", k);
        bad += check_against(ref, "single", ck, what, true, false);
        snprintf(what, sizeof what, "%s: config layouts", k);
        bad += same_matrices(what, mod, ck);
        /* the config.json transformers wrote */
        char rel[256];
        snprintf(rel, sizeof rel, REF "/st/%s/config.json", k);
        dmuon_model *written = load_rel(rel, false);
        snprintf(what, sizeof what, "%s: written config.json vs model.safetensors", k);
        bad += check_against(ref, "single", written, what, true, false);
        /* safetensors: single file, sharded index, and the snapshot folders */
        snprintf(rel, sizeof rel, REF "/st/%s/model.safetensors", k);
        dmuon_model *st = load_rel(rel, false);
        snprintf(what, sizeof what, "%s: model.safetensors", k);
        bad += check_against(ref, "single", st, what, true, false);
        snprintf(what, sizeof what, "%s: safetensors vs config (checkpoint layout)", k);
        bad += same_matrices(what, st, ck);
        snprintf(rel, sizeof rel, REF "/st/%s/sharded/model.safetensors.index.json", k);
        dmuon_model *ix = load_rel(rel, false);
        snprintf(what, sizeof what, "%s: sharded index", k);
        bad += check_against(ref, "sharded", ix, what, true, false);
        snprintf(rel, sizeof rel, REF "/st/%s", k);
        dmuon_model *dir = load_rel(rel, false);
        assert_string_equal(dmuon_model_format(dir), "safetensors");
        if (dmuon_model_digest(dir) != dmuon_model_digest(st) &&
            fprintf(stderr, "%s: the snapshot folder differs from its model.safetensors\n", k))
            bad++;
        dmuon_model_free(dir);
        snprintf(rel, sizeof rel, REF "/st/%s/sharded", k);
        dir = load_rel(rel, false);
        assert_string_equal(dmuon_model_format(dir), "safetensors-index");
        if (dmuon_model_digest(dir) != dmuon_model_digest(ix) &&
            fprintf(stderr, "%s: the sharded folder differs from its index\n", k))
            bad++;
        dmuon_model_free(dir);
        checked += 5;
        dmuon_model_free(ix);
        dmuon_model_free(st);
        dmuon_model_free(written);
        dmuon_model_free(ck);
        dmuon_model_free(mod);
    }
    fprintf(stderr, "%zu cases, %d comparisons, %d differences\n", n, checked, bad);
    assert_true(n >= 30);
    assert_int_equal(bad, 0);
}

/* Finds tensor name in m. */
static const dmuon_param *find(const dmuon_model *m, const char *name)
{
    for (size_t i = 0; i < dmuon_model_param_count(m); i++)
        if (!strcmp(dmuon_model_param(m, i)->name, name))
            return dmuon_model_param(m, i);
    fail_msg("tensor %s not found", name);
    return NULL;
}

static void test_fused_expert_matrices(void **state)
{
    /* tiny configs: H = 64; llama4_text, gpt_oss I = 96 (intermediate_size),
     * E = 4; the others' module layout [E, 2I, H] */
    static const struct {
        const char *rel, *name;
        int64_t E, I, H;
        dmuon_mat_layout layout;
        bool transposed;
    } cases[] = {
        {REF "/st/llama4_text/model.safetensors", "model.layers.1.feed_forward.experts.gate_up_proj",
         4, 96, 64, DMUON_MAT_HALVES, true},
        {REF "/st/gpt_oss/model.safetensors", "model.layers.0.mlp.experts.gate_up_proj", 4, 96, 64,
         DMUON_MAT_INTERLEAVED, true},
        {REF "/configs/qwen3_moe.json", "model.layers.0.mlp.experts.gate_up_proj", 4, 32, 64,
         DMUON_MAT_CONTIGUOUS, false},
        {REF "/configs/mixtral.json", "model.layers.1.mlp.experts.gate_up_proj", 4, 96, 64,
         DMUON_MAT_CONTIGUOUS, false},
        {REF "/configs/deepseek_v3.json", "model.layers.2.mlp.experts.gate_up_proj", 4, 32, 64,
         DMUON_MAT_CONTIGUOUS, false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        dmuon_model *m = load_rel(cases[i].rel, true);
        const dmuon_param *p = find(m, cases[i].name);
        assert_int_equal(p->role, DMUON_ROLE_MUON);
        assert_true(p->expert);
        assert_int_equal(p->matrices, 2 * cases[i].E);
        assert_int_equal(p->mat_m, cases[i].I);   /* the real gate / up: I x H */
        assert_int_equal(p->mat_n, cases[i].H);
        assert_int_equal(p->layout, cases[i].layout);
        assert_int_equal(p->transposed, cases[i].transposed);
        /* down_proj: E matrices of H x I (out x in) */
        char dn[200];
        snprintf(dn, sizeof dn, "%.*sdown_proj", (int)(strlen(p->name) - strlen("gate_up_proj")),
                 p->name);
        const dmuon_param *d = find(m, dn);
        assert_int_equal(d->matrices, cases[i].E);
        assert_int_equal(d->mat_m, cases[i].H);
        assert_int_equal(d->mat_n, cases[i].I);
        assert_int_equal(d->transposed, cases[i].transposed);
        assert_int_equal(d->layout, DMUON_MAT_CONTIGUOUS);
        dmuon_model_free(m);
    }
    /* gpt_oss: biases of the experts stay out of Muon; phi3's fused dense
     * gate_up_proj.weight [2I, H] is gate and up */
    dmuon_model *m = load_rel(REF "/st/gpt_oss/model.safetensors", false);
    assert_int_equal(find(m, "model.layers.0.mlp.experts.gate_up_proj_bias")->role,
                     DMUON_ROLE_ADAMW);
    assert_int_equal(find(m, "model.layers.0.mlp.experts.down_proj_bias")->role,
                     DMUON_ROLE_ADAMW);
    assert_int_equal(find(m, "model.layers.0.self_attn.sinks")->role, DMUON_ROLE_ADAMW);
    dmuon_model_stats s;
    dmuon_model_get_stats(m, &s);
    assert_int_equal(s.strided, 2);   /* one gate_up_proj per layer */
    dmuon_model_free(m);
    m = load_rel(REF "/configs/phi3.json", false);
    const dmuon_param *p = find(m, "model.layers.0.mlp.gate_up_proj.weight");
    assert_int_equal(p->matrices, 2);
    assert_int_equal(p->mat_m, 96);
    assert_int_equal(p->mat_n, 64);
    dmuon_model_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_family_both_routes),
        cmocka_unit_test(test_fused_expert_matrices),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
