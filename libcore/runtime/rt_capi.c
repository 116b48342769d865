/*
 * rt_capi.c — the flat C ABI of dmuon/capi.h: key/value option objects over
 * dmuon_plan_opts and dmuon_rt_opts, tensor lists in flat arrays, Fortran
 * communicator handles.  Only the public headers are used.
 */
#include "dmuon/capi.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dmuon/ctl.h"
#include "dmuon/model.h"
#include "dmuon/ns.h"
#include "dmuon/optim.h"
#include "dmuon/topo.h"
#include "rt_internal.h"

#define CAPI_MAX_PATTERNS 64
#define CAPI_MAX_STR 4096

struct dmuon_capi_plan_opts {
    dmuon_plan_opts plan;
    char *strs[3];                       /* cost_db, device, model_path copies */
    char *muon[CAPI_MAX_PATTERNS];
    char *adamw[CAPI_MAX_PATTERNS];
    size_t n_muon, n_adamw;
    dmuon_root_mode root;                /* the model's (dmuon_model_opts.root) */
};

struct dmuon_capi_rt_opts {
    dmuon_rt_opts rt;
};

/* ------------------------------------------------------------ values -- */

static dmuon_rc parse_i64(const char *key, const char *v, int64_t lo, int64_t hi, int64_t *out)
{
    char *end = NULL;
    errno = 0;
    long long x = v ? strtoll(v, &end, 10) : 0;
    if (!v || !*v || *end || errno || x < lo || x > hi)
        return DMUON_FAIL(DMUON_EINVAL, "option '%s' = '%s': expected an integer in [%lld, %lld]",
                          key, v ? v : "", (long long)lo, (long long)hi);
    *out = x;
    return DMUON_OK;
}

static dmuon_rc parse_int(const char *key, const char *v, int lo, int hi, int *out)
{
    int64_t x = 0;
    DMUON_TRY(parse_i64(key, v, lo, hi, &x));
    *out = (int)x;
    return DMUON_OK;
}

static dmuon_rc parse_bool(const char *key, const char *v, bool *out)
{
    int x = 0;
    DMUON_TRY(parse_int(key, v, 0, 1, &x));
    *out = x != 0;
    return DMUON_OK;
}

static dmuon_rc parse_real(const char *key, const char *v, double *out)
{
    char *end = NULL;
    errno = 0;
    double x = v ? strtod(v, &end) : 0;
    if (!v || !*v || *end || errno || !isfinite(x))
        return DMUON_FAIL(DMUON_EINVAL, "option '%s' = '%s': expected a finite number", key,
                          v ? v : "");
    *out = x;
    return DMUON_OK;
}

static dmuon_rc copy_str(const char *key, const char *v, char **slot)
{
    if (!v || !*v || strlen(v) > CAPI_MAX_STR)
        return DMUON_FAIL(DMUON_EINVAL, "option '%s': expected a non-empty string of at most %d "
                          "bytes", key, CAPI_MAX_STR);
    char *c = strdup(v);
    if (!c)
        return DMUON_FAIL(DMUON_ENOMEM, "out of memory");
    free(*slot);
    *slot = c;
    return DMUON_OK;
}

/* --------------------------------------------------------------- MPI -- */

dmuon_rc dmuon_capi_mpi_init(int *initialised, int *rank, int *size)
{
    int up = 0, down = 0, provided = 0;
    *initialised = 0;
    MPI_Finalized(&down);
    if (down)
        return DMUON_FAIL(DMUON_ECOMM, "mpi: already finalized in this process");
    MPI_Initialized(&up);
    if (!up) {
        if (MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS)
            return DMUON_FAIL(DMUON_ECOMM, "mpi: MPI_Init_thread failed");
        *initialised = 1;
    }
    return dmuon_capi_comm_info(dmuon_capi_comm_world(), rank, size);
}

void dmuon_capi_mpi_finalize(void)
{
    int up = 0, down = 0;
    MPI_Initialized(&up);
    MPI_Finalized(&down);
    if (up && !down)
        MPI_Finalize();
}

dmuon_rc dmuon_capi_abort(int code)
{
    int up = 0, down = 0;
    MPI_Initialized(&up);
    MPI_Finalized(&down);
    if (!up || down)
        return DMUON_FAIL(DMUON_ECOMM, "mpi: abort with MPI %s", up ? "finalized" : "not "
                          "initialised");
    MPI_Abort(MPI_COMM_WORLD, code);
    return DMUON_FAIL(DMUON_ECOMM, "mpi: MPI_Abort returned");
}

int dmuon_capi_comm_world(void)
{
    return (int)MPI_Comm_c2f(MPI_COMM_WORLD);
}

dmuon_rc dmuon_capi_comm_info(int fcomm, int *rank, int *size)
{
    MPI_Comm c = MPI_Comm_f2c((MPI_Fint)fcomm);
    if (c == MPI_COMM_NULL || MPI_Comm_rank(c, rank) != MPI_SUCCESS ||
        MPI_Comm_size(c, size) != MPI_SUCCESS)
        return DMUON_FAIL(DMUON_ECOMM, "mpi: communicator handle %d is not usable", fcomm);
    return DMUON_OK;
}

dmuon_rc dmuon_capi_comm_nodes(int fcomm, int ranks_per_node, int *nodes, int *per_node)
{
    MPI_Comm c = MPI_Comm_f2c((MPI_Fint)fcomm);
    if (c == MPI_COMM_NULL)
        return DMUON_FAIL(DMUON_ECOMM, "mpi: communicator handle %d is not usable", fcomm);
    dmuon_topo t;
    DMUON_TRY(dmuon_topo_init(&t, c, ranks_per_node));
    *nodes = t.nodes;
    *per_node = t.per_node;
    dmuon_topo_release(&t);
    return DMUON_OK;
}

dmuon_rc dmuon_capi_allreduce_sum(int fcomm, double *buf, size_t n)
{
    MPI_Comm c = MPI_Comm_f2c((MPI_Fint)fcomm);
    if (c == MPI_COMM_NULL)
        return DMUON_FAIL(DMUON_ECOMM, "mpi: communicator handle %d is not usable", fcomm);
    if (n == 0)
        return DMUON_OK;
    if (n > DMUON_CTL_MAX_COUNT)
        return DMUON_FAIL(DMUON_EINVAL, "allreduce_sum: %zu values, at most %d in one call", n,
                          DMUON_CTL_MAX_COUNT);
    return dmuon_ctl_allreduce_f64(c, buf, (int)n, DMUON_CTL_SUM, 0, "allreduce_sum");
}

/* ---------------------------------------------------------- planning -- */

dmuon_rc dmuon_capi_plan_opts_new(dmuon_capi_plan_opts **out)
{
    *out = calloc(1, sizeof **out);
    if (!*out)
        return DMUON_FAIL(DMUON_ENOMEM, "out of memory");
    dmuon_plan_opts_init(&(*out)->plan);
    return DMUON_OK;
}

void dmuon_capi_plan_opts_free(dmuon_capi_plan_opts *o)
{
    if (!o)
        return;
    for (size_t i = 0; i < 3; i++)
        free(o->strs[i]);
    for (size_t i = 0; i < o->n_muon; i++)
        free(o->muon[i]);
    for (size_t i = 0; i < o->n_adamw; i++)
        free(o->adamw[i]);
    free(o);
}

static dmuon_rc add_pattern(const char *key, const char *v, char **list, size_t *n)
{
    if (*n == CAPI_MAX_PATTERNS)
        return DMUON_FAIL(DMUON_EINVAL, "option '%s': at most %d patterns", key,
                          CAPI_MAX_PATTERNS);
    DMUON_TRY(dmuon_model_pattern_check(v ? v : ""));
    list[*n] = NULL;
    DMUON_TRY(copy_str(key, v, &list[*n]));
    (*n)++;
    return DMUON_OK;
}

dmuon_rc dmuon_capi_plan_opts_set(dmuon_capi_plan_opts *o, const char *key, const char *value)
{
    dmuon_plan_opts *p = &o->plan;
    const char *k = key ? key : "";
    int64_t x = 0;
    if (!strcmp(k, "nodes") || !strcmp(k, "gpus_per_node")) {
        DMUON_TRY(parse_i64(k, value, 1, DMUON_PLAN_MAX_RANKS, &x));
        *(k[0] == 'n' ? &p->nodes : &p->gpus_per_node) = (int32_t)x;
    } else if (!strcmp(k, "sharding")) {
        dmuon_sharding v;
        DMUON_TRY(dmuon_sharding_parse(value ? value : "", &v));
        p->sharding = v;
    } else if (!strcmp(k, "zero")) {
        DMUON_TRY(parse_int(k, value, 2, 3, &p->zero_stage));
    } else if (!strcmp(k, "strategy")) {
        dmuon_strategy v;
        DMUON_TRY(dmuon_strategy_parse(value ? value : "", &v));
        p->strategy = v;
    } else if (!strcmp(k, "cost")) {
        dmuon_cost_kind v;
        DMUON_TRY(dmuon_cost_kind_parse(value ? value : "", &v));
        p->cost = v;
    } else if (!strcmp(k, "cost_db")) {
        DMUON_TRY(copy_str(k, value, &o->strs[0]));
        p->cost_src.db_path = o->strs[0];
    } else if (!strcmp(k, "device")) {
        DMUON_TRY(copy_str(k, value, &o->strs[1]));
        p->cost_src.device = o->strs[1];
    } else if (!strcmp(k, "model_path")) {
        DMUON_TRY(copy_str(k, value, &o->strs[2]));
        p->model_path = o->strs[2];
    } else if (!strcmp(k, "epsilon")) {
        DMUON_TRY(parse_real(k, value, &p->epsilon));
    } else if (!strcmp(k, "byte_cap")) {
        DMUON_TRY(parse_bool(k, value, &p->byte_cap));
    } else if (!strcmp(k, "layer_spread")) {
        DMUON_TRY(parse_bool(k, value, &p->layer_spread));
    } else if (!strcmp(k, "column_balance")) {
        DMUON_TRY(parse_bool(k, value, &p->column_balance));
    } else if (!strcmp(k, "fuse_experts")) {
        DMUON_TRY(parse_bool(k, value, &p->fuse_experts));
    } else if (!strcmp(k, "small_unit_bytes")) {
        int64_t b;
        if (dmuon_size_parse(value, &b) != DMUON_OK || b > DMUON_PLAN_MAX_SMALL_UNIT_BYTES)
            return DMUON_FAIL(DMUON_EINVAL, "option 'small_unit_bytes' = '%s': expected a size "
                              "from 0 to %lld bytes (e.g. 65536, 64K, 1M, 1MiB; K = 1024)",
                              value ? value : "", (long long)DMUON_PLAN_MAX_SMALL_UNIT_BYTES);
        p->small_unit_bytes = b;
    } else if (!strcmp(k, "param_dtype")) {
        dmuon_dtype v;
        DMUON_TRY(dmuon_dtype_parse(value ? value : "", &v));
        p->param_dtype = v;
    } else if (!strcmp(k, "root")) {
        dmuon_root_mode v;
        DMUON_TRY(dmuon_root_mode_parse(value, &v));
        o->root = v;
    } else if (!strcmp(k, "muon")) {
        DMUON_TRY(add_pattern(k, value, o->muon, &o->n_muon));
    } else if (!strcmp(k, "adamw")) {
        DMUON_TRY(add_pattern(k, value, o->adamw, &o->n_adamw));
    } else {
        return DMUON_FAIL(DMUON_EINVAL, "planning option '%s': expected one of nodes, "
                          "gpus_per_node, sharding, zero, strategy, cost, cost_db, device, "
                          "model_path, epsilon, byte_cap, layer_spread, column_balance, "
                          "fuse_experts, small_unit_bytes, param_dtype, root, muon, adamw", k);
    }
    return DMUON_OK;
}

dmuon_rc dmuon_capi_model_tensors(const char *source, size_t n, const char *const *names,
                                  const int *ndims, const int64_t *dims,
                                  const char *const *dtypes, const dmuon_capi_plan_opts *o,
                                  dmuon_model **out)
{
    *out = NULL;
    if (n == 0)
        return DMUON_FAIL(DMUON_EINVAL, "%s: no tensors to plan", source ? source : "model");
    dmuon_tensor_spec *t = calloc(n, sizeof *t);
    if (!t)
        return DMUON_FAIL(DMUON_ENOMEM, "out of memory");
    dmuon_rc rc = DMUON_OK;
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        if (ndims[i] < 1 || ndims[i] > DMUON_MODEL_MAX_DIMS) {
            rc = DMUON_FAIL(DMUON_EINVAL, "%s: tensor '%s' has %d dimensions: expected 1 to %d",
                            source ? source : "model", names[i], ndims[i], DMUON_MODEL_MAX_DIMS);
            goto out;
        }
        t[i].name = names[i];
        t[i].ndim = ndims[i];
        for (int d = 0; d < ndims[i]; d++)
            t[i].shape[d] = dims[at++];
        DMUON_TRY_GOTO(rc, dmuon_dtype_parse(dtypes[i], &t[i].dtype), out);
    }
    dmuon_model_opts mo = {0};
    if (o) {
        mo.muon = (const char *const *)o->muon;
        mo.n_muon = o->n_muon;
        mo.adamw = (const char *const *)o->adamw;
        mo.n_adamw = o->n_adamw;
        mo.fused_experts = false;
        mo.root = o->root;
    }
    DMUON_TRY_GOTO(rc, dmuon_model_build(source ? source : "model", t, n, &mo, out), out);
out:
    free(t);
    return rc;
}

dmuon_rc dmuon_capi_plan_tensors(const char *source, size_t n, const char *const *names,
                                 const int *ndims, const int64_t *dims,
                                 const char *const *dtypes, const dmuon_capi_plan_opts *o,
                                 dmuon_plan **out, dmuon_model **model_out)
{
    *out = NULL;
    if (model_out)
        *model_out = NULL;
    dmuon_model *m = NULL;
    dmuon_plan_opts def;
    dmuon_plan_opts_init(&def);
    dmuon_rc rc;
    DMUON_TRY_GOTO(rc, dmuon_capi_model_tensors(source, n, names, ndims, dims, dtypes, o, &m), out);
    DMUON_TRY_GOTO(rc, dmuon_plan_build(m, o ? &o->plan : &def, out), out);
    if (model_out) {
        *model_out = m;
        m = NULL;
    }
out:
    dmuon_model_free(m);
    return rc;
}

size_t dmuon_capi_plan_param_count(const dmuon_plan *p)
{
    size_t n = 0;
    dmuon_plan_params(p, &n);
    return n;
}

dmuon_rc dmuon_capi_plan_param(const dmuon_plan *p, size_t i, const char **name, int32_t *layer,
                               int *role, int64_t *numel)
{
    size_t n = 0;
    const dmuon_plan_param *pp = dmuon_plan_params(p, &n);
    if (i >= n)
        return DMUON_FAIL(DMUON_EINVAL, "plan parameter %zu: the plan has %zu", i, n);
    *name = pp[i].name;
    *layer = pp[i].layer;
    *role = pp[i].role == DMUON_ROLE_MUON;
    *numel = pp[i].numel;
    return DMUON_OK;
}

dmuon_rc dmuon_capi_plan_param_matrix(const dmuon_plan *p, size_t i, int64_t *matrices,
                                      int64_t *m, int64_t *n)
{
    size_t np = 0;
    const dmuon_plan_param *pp = dmuon_plan_params(p, &np);
    if (i >= np)
        return DMUON_FAIL(DMUON_EINVAL, "plan parameter %zu: the plan has %zu", i, np);
    bool muon = pp[i].role == DMUON_ROLE_MUON;
    *matrices = muon ? pp[i].matrices : 0;
    *m = muon ? pp[i].mat_m : 0;
    *n = muon ? pp[i].mat_n : 0;
    return DMUON_OK;
}

/* ----------------------------------------------------------- runtime -- */

dmuon_rc dmuon_capi_rt_opts_new(dmuon_capi_rt_opts **out)
{
    *out = calloc(1, sizeof **out);
    if (!*out)
        return DMUON_FAIL(DMUON_ENOMEM, "out of memory");
    dmuon_rt_opts_init(&(*out)->rt);
    return DMUON_OK;
}

void dmuon_capi_rt_opts_free(dmuon_capi_rt_opts *o)
{
    free(o);
}

dmuon_rc dmuon_capi_rt_opts_set(dmuon_capi_rt_opts *o, const char *key, const char *value)
{
    dmuon_rt_opts *r = &o->rt;
    dmuon_optim_opts *q = &r->optim;
    const char *k = key ? key : "";
    bool b;
    if (!strcmp(k, "line")) {
        dmuon_line v;
        DMUON_TRY(dmuon_line_parse(value ? value : "", &v));
        r->line = v;
    } else if (!strcmp(k, "zero")) {
        int z = 0;
        DMUON_TRY(parse_int(k, value, 0, 3, &z));
        if (z == 1)
            return DMUON_FAIL(DMUON_EINVAL, "option 'zero' = '1': expected 2 or 3 (0: the plan's)");
        r->zero_stage = z;
    } else if (!strcmp(k, "ranks_per_node")) {
        DMUON_TRY(parse_int(k, value, 0, DMUON_PLAN_MAX_RANKS, &r->ranks_per_node));
    } else if (!strcmp(k, "deadline_ms")) {
        DMUON_TRY(parse_int(k, value, 0, INT_MAX, &r->deadline_ms));
    } else if (!strcmp(k, "prefetch")) {
        DMUON_TRY(parse_bool(k, value, &b));
        r->prefetch = b;
    } else if (!strcmp(k, "owner_parts")) {
        dmuon_owner_parts v;
        if (dmuon_owner_parts_parse(value, &v))
            return DMUON_FAIL(DMUON_EINVAL, "option 'owner_parts' = '%s': expected auto, "
                              "persistent or per-layer", value ? value : "");
        r->owner_parts = v;
    } else if (!strcmp(k, "momentum")) {
        DMUON_TRY(parse_real(k, value, &q->momentum));
    } else if (!strcmp(k, "nesterov")) {
        DMUON_TRY(parse_bool(k, value, &b));
        q->nesterov = b;
    } else if (!strcmp(k, "weight_decay")) {
        DMUON_TRY(parse_real(k, value, &q->muon_weight_decay));
    } else if (!strcmp(k, "adjust_lr")) {
        if (value && !strcmp(value, "match_rms_adamw"))
            q->scale = DMUON_MUON_SCALE_RMS;
        else if (value && !strcmp(value, "original"))
            q->scale = DMUON_MUON_SCALE_SHAPE;
        else
            return DMUON_FAIL(DMUON_EINVAL, "option 'adjust_lr' = '%s': expected "
                              "match_rms_adamw or original", value ? value : "");
    } else if (!strcmp(k, "beta1")) {
        DMUON_TRY(parse_real(k, value, &q->beta1));
    } else if (!strcmp(k, "beta2")) {
        DMUON_TRY(parse_real(k, value, &q->beta2));
    } else if (!strcmp(k, "eps")) {
        DMUON_TRY(parse_real(k, value, &q->eps));
    } else if (!strcmp(k, "adamw_weight_decay")) {
        DMUON_TRY(parse_real(k, value, &q->adamw_weight_decay));
    } else if (!strcmp(k, "clip_norm")) {
        DMUON_TRY(parse_real(k, value, &q->clip_norm));
    } else if (!strcmp(k, "ns")) {
        if (!value || !*value || strlen(value) >= sizeof q->ns_variant)
            return DMUON_FAIL(DMUON_EINVAL, "option 'ns': expected a Newton-Schulz variant name "
                              "of at most %zu bytes", sizeof q->ns_variant - 1);
        dmuon_ns_opts ns;
        dmuon_ns_opts_init(&ns);
        DMUON_TRY(dmuon_ns_opts_set_variant(&ns, value));
        memcpy(q->ns_variant, value, strlen(value) + 1);
    } else {
        return DMUON_FAIL(DMUON_EINVAL, "runtime option '%s': expected one of line, zero, "
                          "ranks_per_node, deadline_ms, prefetch, owner_parts, momentum, "
                          "nesterov, "
                          "weight_decay, adjust_lr, beta1, beta2, eps, adamw_weight_decay, "
                          "clip_norm, ns", k);
    }
    return DMUON_OK;
}

dmuon_rc dmuon_capi_rt_create(const dmuon_plan *plan, int fcomm, const dmuon_capi_rt_opts *o,
                              dmuon_rt **out)
{
    *out = NULL;
    dmuon_rt_opts def;
    dmuon_rt_opts_init(&def);
    const dmuon_rt_opts *r = o ? &o->rt : &def;
    DMUON_TRY(dmuon_optim_opts_check(&r->optim));
    MPI_Comm c = MPI_Comm_f2c((MPI_Fint)fcomm);
    if (c == MPI_COMM_NULL)
        return DMUON_FAIL(DMUON_ECOMM, "mpi: communicator handle %d is not usable", fcomm);
    return dmuon_rt_create(plan, c, r, out);
}

dmuon_rc dmuon_capi_rt_step(dmuon_rt *rt, double muon_lr, double adamw_lr)
{
    dmuon_rt_lrs lrs = {muon_lr, adamw_lr};
    return dmuon_rt_step(rt, &lrs);
}

static const char *const stats_names[DMUON_CAPI_STATS] = {
    "pool_bytes", "ctrl_bytes", "work_bytes", "window_bytes", "state_bytes", "total_bytes",
    "optim_s", "ns_s", "comm_wait_s", "publish_wait_s", "gather_s", "reduce_s", "ns_matrices",
    "steps", "grad_norm"};

const char *dmuon_capi_rt_stats_name(int i)
{
    return i >= 0 && i < DMUON_CAPI_STATS ? stats_names[i] : NULL;
}

void dmuon_capi_rt_stats(const dmuon_rt *rt, double *out)
{
    dmuon_rt_stats s;
    dmuon_rt_get_stats(rt, &s);
    double v[DMUON_CAPI_STATS] = {
        (double)s.pool_bytes, (double)s.ctrl_bytes, (double)s.work_bytes,
        (double)s.window_bytes, (double)s.state_bytes, (double)s.total_bytes, s.optim_s,
        s.ns_s, s.comm_wait_s, s.publish_wait_s, s.gather_s, s.reduce_s,
        (double)s.ns_matrices, (double)dmuon_rt_steps(rt), dmuon_rt_grad_norm(rt)};
    memcpy(out, v, sizeof v);
}
