/*
 * test_train_model.c — the trainer's model (tools/train/model.c): the
 * backward pass against central finite differences for every parameter
 * tensor, recomputation giving the same gradients bit for bit, a few SGD
 * steps lowering the loss, and the parameter table against libcore's
 * config.json route (tools/train/config.c), and the text loader's file
 * selection, split and batches (tools/train/data.c).
 *
 * Finite differences: the loss is the summed cross-entropy (double
 * accumulation of FP32 logits); each checked element w gets
 * (L(w+h) − L(w−h)) / 2h with h = 2e-3, whose truncation error is O(h²) and
 * whose rounding error is about |L|·2⁻²⁴/h.  Per tensor the test requires
 * ‖fd − analytic‖₂ ≤ 1e-2·‖analytic‖₂ + 1e-3·√n over the n checked elements
 * (every element of tensors up to 600 elements; otherwise 600 spread
 * elements, plus, for the embedding, every element of the rows of the tokens
 * used).  A wrong sign, a missing term or a wrong transpose in any backward
 * piece gives errors of the order of the gradient itself.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"
#include "data.h"
#include "dmuon/model.h"
#include "model.h"

#include "testutil.h"

static int setup(void **state) { return testutil_setup("train-model"); }
static int teardown(void **state) { return testutil_teardown(); }

typedef struct {
    tm_config cfg;
    int B, T;
    bool recompute;
} fd_case;

static void make_tokens(uint8_t *tok, uint8_t *tgt, int N, unsigned seed)
{
    for (int n = 0; n < N; n++) {
        seed = seed * 1103515245u + 12345u;
        tok[n] = (uint8_t)(97 + (seed >> 16) % 8);   /* 'a'..'h' */
        seed = seed * 1103515245u + 12345u;
        tgt[n] = (uint8_t)(97 + (seed >> 16) % 8);
    }
}

static void run_fd(const fd_case *fc)
{
    tm_config c = fc->cfg;
    assert_int_equal(tm_config_check(&c), DMUON_OK);
    tm_params p, g;
    tm_acts a;
    assert_int_equal(tm_params_init(&p, &c), DMUON_OK);
    assert_int_equal(tm_params_init(&g, &c), DMUON_OK);
    assert_int_equal(tm_acts_init(&a, &c, fc->B, fc->T, fc->recompute), DMUON_OK);
    /* large init so the nonlinearities matter; gains away from 1 */
    tm_params_init_values(&p, 7, 0.4);
    for (size_t i = 0; i < p.count; i++) {
        tm_param_info in;
        tm_param_info_of(&c, i, &in);
        if (in.ndim == 1)
            for (int64_t e = 0; e < in.numel; e++)
                p.t[i][e] = 0.6f + 0.05f * (float)((e * 7 + (int64_t)i) % 17);
    }
    int N = fc->B * fc->T;
    uint8_t tok[256], tgt[256];
    assert_true(N <= 256);
    make_tokens(tok, tgt, N, 3);
    tm_forward_backward(&a, &p, &g, tok, tgt, 1.0f);

    const float h = 2e-3f;
    size_t idx[1200];
    for (size_t i = 0; i < p.count; i++) {
        tm_param_info in;
        tm_param_info_of(&c, i, &in);
        size_t n = 0;
        if (in.numel <= 600) {
            for (int64_t e = 0; e < in.numel; e++)
                idx[n++] = (size_t)e;
        } else {
            for (int k = 0; k < 600; k++)
                idx[n++] = (size_t)(((int64_t)k * 7919) % in.numel);
            if (in.kind == TM_EMBED && in.block < 0)
                for (int r = 97; r < 105 && n + (size_t)c.dim <= 1200; r++)
                    for (int d = 0; d < c.dim; d++)
                        idx[n++] = (size_t)r * c.dim + d;
        }
        double err2 = 0, ref2 = 0, worst = 0;
        for (size_t k = 0; k < n; k++) {
            float *w = &p.t[i][idx[k]], w0 = *w;
            *w = w0 + h;
            double lp = tm_forward_backward(&a, &p, NULL, tok, tgt, 1.0f);
            *w = w0 - h;
            double lm = tm_forward_backward(&a, &p, NULL, tok, tgt, 1.0f);
            *w = w0;
            double fd = (lp - lm) / (2.0 * h), an = g.t[i][idx[k]];
            err2 += (fd - an) * (fd - an);
            ref2 += an * an;
            worst = fmax(worst, fabs(fd - an));
        }
        double err = sqrt(err2), ref = sqrt(ref2), tol = 1e-2 * ref + 1e-3 * sqrt((double)n);
        print_message("  %-48s n=%4zu |g|=%.3e |fd-g|=%.3e (max %.2e) tol %.2e\n", in.name, n,
                      ref, err, worst, tol);
        assert_true(ref > 0);
        assert_true(err <= tol);
    }
    tm_acts_release(&a);
    tm_params_release(&p);
    tm_params_release(&g);
}

static tm_config tiny(bool tie, int kv)
{
    tm_config c;
    tm_config_init(&c);
    c.dim = 16;
    c.heads = 4;
    c.kv_heads = kv;
    c.layers = 2;
    c.ffn = 24;
    c.seq = 8;
    c.tie = tie;
    return c;
}

static void test_fd_untied_gqa(void **state)
{
    fd_case fc = {tiny(false, 2), 2, 5, false};
    run_fd(&fc);
}

static void test_fd_tied_recompute(void **state)
{
    fd_case fc = {tiny(true, 4), 2, 7, true};
    run_fd(&fc);
}

/* Recomputation must not change a single bit of the gradients. */
static void test_recompute_identical(void **state)
{
    tm_config c = tiny(false, 1);
    assert_int_equal(tm_config_check(&c), DMUON_OK);
    tm_params p, g1, g2;
    tm_acts a1, a2;
    assert_int_equal(tm_params_init(&p, &c), DMUON_OK);
    assert_int_equal(tm_params_init(&g1, &c), DMUON_OK);
    assert_int_equal(tm_params_init(&g2, &c), DMUON_OK);
    assert_int_equal(tm_acts_init(&a1, &c, 3, 8, false), DMUON_OK);
    assert_int_equal(tm_acts_init(&a2, &c, 3, 8, true), DMUON_OK);
    tm_params_init_values(&p, 11, 0.2);
    uint8_t tok[24], tgt[24];
    make_tokens(tok, tgt, 24, 5);
    double l1 = tm_forward_backward(&a1, &p, &g1, tok, tgt, 0.5f);
    double l2 = tm_forward_backward(&a2, &p, &g2, tok, tgt, 0.5f);
    assert_true(l1 == l2);
    assert_memory_equal(g1.mem, g2.mem, (size_t)g1.numel * sizeof(float));
    tm_acts_release(&a1);
    tm_acts_release(&a2);
    tm_params_release(&p);
    tm_params_release(&g1);
    tm_params_release(&g2);
}

/* Plain SGD on one fixed batch of text lowers the mean loss. */
static void test_sgd_lowers_loss(void **state)
{
    tm_config c = tiny(false, 2);
    c.seq = 32;
    assert_int_equal(tm_config_check(&c), DMUON_OK);
    tm_params p, g;
    tm_acts a;
    assert_int_equal(tm_params_init(&p, &c), DMUON_OK);
    assert_int_equal(tm_params_init(&g, &c), DMUON_OK);
    assert_int_equal(tm_acts_init(&a, &c, 2, 32, false), DMUON_OK);
    tm_params_init_values(&p, 1, 0.02);
    const char *text = "the quick brown fox jumps over the lazy dog. the quick brown fox jumps"
                       " over the lazy dog.";
    uint8_t tok[64], tgt[64];
    for (int n = 0; n < 64; n++) {
        tok[n] = (uint8_t)text[n];
        tgt[n] = (uint8_t)text[n + 1];
    }
    int N = 64;
    double first = 0, last = 0;
    for (int step = 0; step < 40; step++) {
        memset(g.mem, 0, (size_t)g.numel * sizeof(float));
        double loss = tm_forward_backward(&a, &p, &g, tok, tgt, 1.0f / N) / N;
        if (step == 0)
            first = loss;
        last = loss;
        for (int64_t e = 0; e < p.numel; e++)
            p.mem[e] -= 1.0f * g.mem[e];
    }
    print_message("  sgd: loss %.4f -> %.4f (ln 256 = %.4f)\n", first, last, log(256.0));
    assert_true(fabs(first - log(256.0)) < 0.05);   /* near-uniform start */
    assert_true(last < 0.7 * first);
    tm_acts_release(&a);
    tm_params_release(&p);
    tm_params_release(&g);
}

/* The config.json the trainer writes gives libcore the trainer's own
 * parameter table (names, shapes, order, roles); so does the YAML. */
static void test_config_routes(void **state)
{
    for (int tie = 0; tie < 2; tie++) {
        tm_config c = tiny(tie, 2);
        assert_int_equal(tm_config_check(&c), DMUON_OK);
        dmuon_model *built = NULL, *hf = NULL, *ym = NULL;
        assert_int_equal(tm_model_build(&c, &built), DMUON_OK);
        char cfg[256], yml[256];
        snprintf(cfg, sizeof cfg, "%s/config-%d.json", tmpdir, tie);
        snprintf(yml, sizeof yml, "%s/model-%d.yaml", tmpdir, tie);
        assert_int_equal(tm_write_hf_config(&c, cfg), DMUON_OK);
        assert_int_equal(tm_write_yaml(&c, yml), DMUON_OK);
        dmuon_rc rc = dmuon_model_load(cfg, NULL, &hf);
        if (rc)
            fprintf(stderr, "%s\n", dmuon_errmsg());
        assert_int_equal(rc, DMUON_OK);
        rc = dmuon_model_load(yml, NULL, &ym);
        if (rc)
            fprintf(stderr, "%s\n", dmuon_errmsg());
        assert_int_equal(rc, DMUON_OK);
        size_t n = tm_param_count(&c);
        assert_int_equal(dmuon_model_param_count(hf), n);
        assert_int_equal(dmuon_model_param_count(ym), n);
        for (size_t i = 0; i < n; i++) {
            tm_param_info in;
            tm_param_info_of(&c, i, &in);
            const dmuon_param *q = dmuon_model_param(hf, i);
            assert_string_equal(q->name, in.name);
            assert_int_equal(q->numel, in.numel);
            assert_int_equal(q->role, in.matrix ? DMUON_ROLE_MUON : DMUON_ROLE_ADAMW);
            assert_string_equal(dmuon_model_layer_name(hf, (size_t)q->layer),
                                in.block >= 0 ? dmuon_model_layer_name(built, (size_t)in.layer)
                                : c.tie ? "(root)" : in.kind == TM_EMBED ? "(embed)" : "(head)");
            assert_string_equal(dmuon_model_layer_name(built, (size_t)in.layer),
                                dmuon_model_layer_name(hf, (size_t)q->layer));
            assert_int_equal(q->layer, in.layer);
        }
        assert_true(dmuon_model_digest(hf) == dmuon_model_digest(built));
        assert_true(dmuon_model_digest(ym) == dmuon_model_digest(built));
        dmuon_model_free(built);
        dmuon_model_free(hf);
        dmuon_model_free(ym);
    }
}

/* A directory: index files and links skipped, names in order, blocks split
 * alternately, batches deterministic and shifted by one. */
static void test_data(void **state)
{
    char dir[256], f[300];
    snprintf(dir, sizeof dir, "%s/text", tmpdir);
    assert_int_equal(mkdir(dir, 0755), 0);
    const char *names[] = {"b", "a", "a.dat", "a.u8"};
    size_t sizes[] = {3000, 6000, 100, 100};
    for (int i = 0; i < 4; i++) {
        snprintf(f, sizeof f, "%s/%s", dir, names[i]);
        FILE *fp = fopen(f, "w");
        assert_non_null(fp);
        for (size_t k = 0; k < sizes[i]; k++)
            fputc(names[i][0] + (int)(k % 7) + (i >= 2 ? 10 : 0), fp);
        fclose(fp);
    }
    char ln[300];
    snprintf(f, sizeof f, "%s/b", dir);
    snprintf(ln, sizeof ln, "%s/link", dir);
    assert_int_equal(symlink(f, ln), 0);
    td_data d;
    assert_int_equal(td_load(dir, 2, 16, &d), DMUON_OK);
    assert_int_equal(d.files, 2);
    /* 9000 bytes: blocks 0 (train), 1 (val), 2 (train, 808 bytes) */
    assert_int_equal(d.n_train, 4096 + 808);
    assert_int_equal(d.n_val, 4096);
    assert_int_equal(d.train[0], 'a');                /* "a" comes first */
    assert_int_equal(d.val[0], 'a' + (4096 % 7));     /* block 1 of "a" */
    assert_int_equal(d.train[4096 + 808 - 1], 'b' + (2999 % 7));
    uint8_t t1[64], y1[64], t2[64], y2[64];
    td_train_batch(&d, 5, 3, 1, 0, 4, 16, t1, y1);
    td_train_batch(&d, 5, 3, 1, 2, 2, 16, t2, y2);
    assert_memory_equal(t1 + 32, t2, 32);             /* slices of one batch */
    for (int k = 0; k < 15; k++)
        assert_int_equal(y1[k], t1[k + 1]);
    td_train_batch(&d, 6, 3, 1, 0, 4, 16, t2, y2);
    assert_true(memcmp(t1, t2, 64) != 0);             /* another seed */
    td_val_batch(&d, 0, 2, 2, 16, t2, y2);
    assert_memory_equal(t2, d.val, 16);
    td_release(&d);
    assert_int_equal(td_load(f, 2, 16, &d), DMUON_EINVAL);   /* 3000 bytes: no val block */
    assert_non_null(strstr(dmuon_errmsg(), "validation"));
    snprintf(f, sizeof f, "%s/missing", dir);
    assert_int_equal(td_load(f, 2, 16, &d), DMUON_ENOTFOUND);
}

/* Bad sizes are refused with the field named. */
static void test_config_check(void **state)
{
    tm_config c = tiny(false, 3);
    assert_int_equal(tm_config_check(&c), DMUON_EINVAL);
    assert_non_null(strstr(dmuon_errmsg(), "kv-heads"));
    c = tiny(false, 2);
    c.heads = 3;
    assert_int_equal(tm_config_check(&c), DMUON_EINVAL);
    assert_non_null(strstr(dmuon_errmsg(), "heads"));
    c = tiny(false, 2);
    c.dim = 8;
    c.heads = 8;
    c.kv_heads = 8;
    assert_int_equal(tm_config_check(&c), DMUON_EINVAL);   /* head dim 1 is odd */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fd_untied_gqa),     cmocka_unit_test(test_fd_tied_recompute),
        cmocka_unit_test(test_recompute_identical), cmocka_unit_test(test_sgd_lowers_loss),
        cmocka_unit_test(test_config_routes),     cmocka_unit_test(test_config_check),
        cmocka_unit_test(test_data),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
