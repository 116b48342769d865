/*
 * test_capi.c — the flat C ABI of dmuon/capi.h: option setters (every
 * error names the key and what was expected), planning from spelled-out
 * tensors, the plan's parameter view, runtime creation on one rank, and
 * the MPI helpers on a world of one.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "dmuon/capi.h"

/* A two-block decoder: embedding, per block q [8,8], up [12,8], norm [8]. */
static const char *names[] = {"embed_tokens.weight", "layers.0.q_proj.weight",
                              "layers.0.up_proj.weight", "layers.0.norm.weight",
                              "layers.1.q_proj.weight", "layers.1.up_proj.weight",
                              "layers.1.norm.weight", "lm_head.weight"};
static const int ndims[] = {2, 2, 2, 1, 2, 2, 1, 2};
static const int64_t dims[] = {16, 8, 8, 8, 12, 8, 8, 8, 8, 12, 8, 8, 16, 8};
static const char *dtypes[] = {"f32", "f32", "f32", "f32", "f32", "f32", "f32", "f32"};
#define NT (sizeof names / sizeof *names)

static void test_plan_opts(void **state)
{
    dmuon_capi_plan_opts *o = NULL;
    assert_int_equal(dmuon_capi_plan_opts_new(&o), DMUON_OK);
    assert_int_equal(dmuon_capi_plan_opts_set(o, "gpus_per_node", "2"), DMUON_OK);
    assert_int_equal(dmuon_capi_plan_opts_set(o, "sharding", "hsdp"), DMUON_OK);
    assert_int_equal(dmuon_capi_plan_opts_set(o, "param_dtype", "f32"), DMUON_OK);
    assert_int_equal(dmuon_capi_plan_opts_set(o, "muon", "layers.*.q_proj.weight"), DMUON_OK);
    assert_int_equal(dmuon_capi_plan_opts_set(o, "bogus", "1"), DMUON_EINVAL);
    assert_non_null(strstr(dmuon_errmsg(), "'bogus'"));
    assert_int_equal(dmuon_capi_plan_opts_set(o, "nodes", "0"), DMUON_EINVAL);
    assert_non_null(strstr(dmuon_errmsg(), "'nodes' = '0'"));
    assert_int_equal(dmuon_capi_plan_opts_set(o, "epsilon", "nan"), DMUON_EINVAL);
    assert_non_null(strstr(dmuon_errmsg(), "finite"));
    assert_int_equal(dmuon_capi_plan_opts_set(o, "zero", "1"), DMUON_EINVAL);
    assert_int_equal(dmuon_capi_plan_opts_set(o, "byte_cap", "yes"), DMUON_EINVAL);
    assert_int_equal(dmuon_capi_plan_opts_set(o, "muon", "[unclosed"), DMUON_EINVAL);
    assert_int_equal(dmuon_capi_plan_opts_set(o, "small_unit_bytes", "1M"), DMUON_OK);
    assert_int_equal(dmuon_capi_plan_opts_set(o, "small_unit_bytes", "64KiB"), DMUON_OK);
    assert_int_equal(dmuon_capi_plan_opts_set(o, "small_unit_bytes", "1.5M"), DMUON_EINVAL);
    assert_non_null(strstr(dmuon_errmsg(), "'small_unit_bytes' = '1.5M'"));
    dmuon_capi_plan_opts_free(o);
    dmuon_capi_plan_opts_free(NULL);
}

static void test_plan_tensors(void **state)
{
    dmuon_capi_plan_opts *o = NULL;
    assert_int_equal(dmuon_capi_plan_opts_new(&o), DMUON_OK);
    assert_int_equal(dmuon_capi_plan_opts_set(o, "gpus_per_node", "2"), DMUON_OK);
    assert_int_equal(dmuon_capi_plan_opts_set(o, "cost", "flops"), DMUON_OK);
    dmuon_plan *p = NULL;
    dmuon_model *m = NULL;
    assert_int_equal(dmuon_capi_plan_tensors("t", NT, names, ndims, dims, dtypes, o, &p, &m),
                     DMUON_OK);
    assert_int_equal(dmuon_plan_ranks(p), 2);
    assert_int_equal(dmuon_capi_plan_param_count(p), NT);
    assert_int_equal(dmuon_plan_match_model(p, m), DMUON_OK);
    const char *name = NULL;
    int32_t layer = -1;
    int role = -1;
    int64_t numel = 0;
    assert_int_equal(dmuon_capi_plan_param(p, 0, &name, &layer, &role, &numel), DMUON_OK);
    assert_string_equal(name, "embed_tokens.weight");
    assert_int_equal(role, 0);          /* embeddings: AdamW */
    assert_int_equal(numel, 16 * 8);
    assert_int_equal(dmuon_capi_plan_param(p, 2, &name, &layer, &role, &numel), DMUON_OK);
    assert_string_equal(name, "layers.0.up_proj.weight");
    assert_int_equal(role, 1);          /* a 2-D block matrix: Muon */
    assert_string_equal(dmuon_plan_layer_name(p, (size_t)layer), "layers.0");
    assert_int_equal(dmuon_capi_plan_param(p, NT, &name, &layer, &role, &numel), DMUON_EINVAL);
    dmuon_plan_free(p);
    dmuon_model_free(m);

    /* a bad dimension count and a bad dtype name are errors naming the tensor */
    int bad_nd[NT];
    memcpy(bad_nd, ndims, sizeof bad_nd);
    bad_nd[3] = 0;
    assert_int_equal(dmuon_capi_plan_tensors("t", NT, names, bad_nd, dims, dtypes, o, &p, NULL),
                     DMUON_EINVAL);
    assert_non_null(strstr(dmuon_errmsg(), "layers.0.norm.weight"));
    assert_null(p);
    const char *bad_dt[NT];
    memcpy(bad_dt, dtypes, sizeof bad_dt);
    bad_dt[1] = "f33";
    assert_int_not_equal(dmuon_capi_plan_tensors("t", NT, names, ndims, dims, bad_dt, o, &p,
                                                 NULL), DMUON_OK);
    assert_int_equal(dmuon_capi_plan_tensors("t", 0, names, ndims, dims, dtypes, o, &p, NULL),
                     DMUON_EINVAL);
    dmuon_capi_plan_opts_free(o);
}

static void test_rt_opts_and_create(void **state)
{
    dmuon_capi_rt_opts *o = NULL;
    assert_int_equal(dmuon_capi_rt_opts_new(&o), DMUON_OK);
    assert_int_equal(dmuon_capi_rt_opts_set(o, "line", "c"), DMUON_OK);
    assert_int_equal(dmuon_capi_rt_opts_set(o, "adjust_lr", "original"), DMUON_OK);
    assert_int_equal(dmuon_capi_rt_opts_set(o, "ns", "direct-muon5"), DMUON_OK);
    assert_int_equal(dmuon_capi_rt_opts_set(o, "adjust_lr", "spectral"), DMUON_EINVAL);
    assert_non_null(strstr(dmuon_errmsg(), "match_rms_adamw"));
    assert_int_equal(dmuon_capi_rt_opts_set(o, "line", "E"), DMUON_EINVAL);
    assert_int_equal(dmuon_capi_rt_opts_set(o, "zero", "1"), DMUON_EINVAL);
    assert_int_equal(dmuon_capi_rt_opts_set(o, "prefetch", "2"), DMUON_EINVAL);
    assert_int_equal(dmuon_capi_rt_opts_set(o, "nope", "1"), DMUON_EINVAL);
    assert_int_equal(dmuon_capi_rt_opts_set(o, "ns", "foo"), DMUON_EINVAL);
    assert_non_null(strstr(dmuon_errmsg(), "'foo'"));

    int ini = -1, rank = -1, size = -1;
    assert_int_equal(dmuon_capi_mpi_init(&ini, &rank, &size), DMUON_OK);
    assert_int_equal(ini, 1);
    assert_int_equal(size, 1);
    double v[2] = {1.5, -2.0};
    assert_int_equal(dmuon_capi_allreduce_sum(dmuon_capi_comm_world(), v, 2), DMUON_OK);
    assert_true(v[0] == 1.5 && v[1] == -2.0);
    int nodes = 0, per = 0;
    assert_int_equal(dmuon_capi_comm_nodes(dmuon_capi_comm_world(), 1, &nodes, &per), DMUON_OK);
    assert_int_equal(nodes * per, 1);

    /* a plan for 1 rank; a momentum out of range fails at create */
    dmuon_capi_plan_opts *po = NULL;
    assert_int_equal(dmuon_capi_plan_opts_new(&po), DMUON_OK);
    assert_int_equal(dmuon_capi_plan_opts_set(po, "gpus_per_node", "1"), DMUON_OK);
    assert_int_equal(dmuon_capi_plan_opts_set(po, "cost", "flops"), DMUON_OK);
    dmuon_plan *p = NULL;
    assert_int_equal(dmuon_capi_plan_tensors("t", NT, names, ndims, dims, dtypes, po, &p, NULL),
                     DMUON_OK);
    dmuon_rt *rt = NULL;
    assert_int_equal(dmuon_capi_rt_opts_set(o, "momentum", "1.5"), DMUON_OK);
    assert_int_equal(dmuon_capi_rt_create(p, dmuon_capi_comm_world(), o, &rt), DMUON_EINVAL);
    assert_null(rt);
    assert_int_equal(dmuon_capi_rt_opts_set(o, "momentum", "0.9"), DMUON_OK);
    /* the deadline is resolved at create: a bad $DMUON_DEADLINE_MS and a
     * negative deadline_ms are refused there */
    setenv("DMUON_DEADLINE_MS", "abc", 1);
    assert_int_equal(dmuon_capi_rt_create(p, dmuon_capi_comm_world(), o, &rt), DMUON_EINVAL);
    assert_non_null(strstr(dmuon_errmsg(), "DMUON_DEADLINE_MS 'abc'"));
    assert_null(rt);
    unsetenv("DMUON_DEADLINE_MS");
    dmuon_rt_opts ro;
    dmuon_rt_opts_init(&ro);
    ro.deadline_ms = -1;
    assert_int_equal(dmuon_rt_create(p, MPI_COMM_WORLD, &ro, &rt), DMUON_EINVAL);
    assert_non_null(strstr(dmuon_errmsg(), "deadline_ms -1"));
    assert_null(rt);
    assert_int_equal(dmuon_capi_rt_create(p, dmuon_capi_comm_world(), o, &rt), DMUON_OK);
    double st[DMUON_CAPI_STATS];
    dmuon_capi_rt_stats(rt, st);
    assert_true(st[13] == 0.0);         /* steps */
    assert_string_equal(dmuon_capi_rt_stats_name(13), "steps");
    assert_null(dmuon_capi_rt_stats_name(DMUON_CAPI_STATS));
    /* the layout's figures from create on: the pool and the total */
    dmuon_rt_stats rs;
    dmuon_rt_get_stats(rt, &rs);
    assert_true(st[0] == (double)rs.pool_bytes && rs.pool_bytes > 0);
    assert_true(st[5] == (double)rs.total_bytes && rs.total_bytes >= rs.pool_bytes);
    dmuon_rt_free(rt);
    dmuon_plan_free(p);
    dmuon_capi_plan_opts_free(po);
    dmuon_capi_rt_opts_free(o);
    dmuon_capi_mpi_finalize();
    assert_int_equal(dmuon_capi_mpi_init(&ini, &rank, &size), DMUON_ECOMM);
    /* no MPI left to abort: the call returns and says so */
    assert_int_equal(dmuon_capi_abort(1), DMUON_ECOMM);
    assert_non_null(strstr(dmuon_errmsg(), "abort with MPI finalized"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plan_opts),
        cmocka_unit_test(test_plan_tensors),
        cmocka_unit_test(test_rt_opts_and_create),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
