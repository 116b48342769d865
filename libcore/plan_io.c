/*
 * plan_io.c — the plan file: YAML, "dmuon_plan: 1", written atomically.
 *
 * Layout (every value needed to run or check the plan; one line per layer,
 * parameter and unit, so diffs stay readable):
 *   dmuon_plan: 1
 *   inputs:   model path and format, digests of the inventory, of the cost
 *             rows used and of the options
 *   cluster:  ranks, nodes, gpus_per_node, sharding, zero_stage
 *   options:  strategy, epsilon, switches, small_unit_bytes, param_dtype,
 *             cost model (+ device, variant, dtype, db for measured costs)
 *   summary:  the balance report (recomputed and compared on load)
 *   digests:  units and segments (recomputed and compared on load)
 *   layers:   - {name, bytes, segments: [{owner, dtype, offset, count,
 *                window_offset}, ...]}  (offset and window_offset in bytes,
 *                count in elements of dtype: dmuon_segment of dmuon/types.h)
 *   params:   - {name, layer, role, numel, matrices, m, n[, transposed: true]
 *                [, layout: halves|interleaved]}  (absent: not transposed,
 *                contiguous; see dmuon_plan_param)
 *   units:    - {id, name, layer, owner, elements, bytes, matrices, ns_ms,
 *                window_offset, fallback, members: [[param, first, count, offset]],
 *                leaders: [...] (HSDP)}
 * Doubles that must round-trip (ns_ms) are written with 17 significant
 * digits, so a loaded plan replays to the same owners.  Writing the same plan
 * twice gives the same bytes: nothing time- or host-dependent is written.
 */
#include "plan_internal.h"

#include "dmuon/doc.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------- writing -- */

static void put_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        if (*c == '"' || *c == '\\')
            fprintf(f, "\\%c", *c);
        else if (*c < 0x20)
            fprintf(f, "\\x%02x", *c);
        else
            fputc(*c, f);
    }
    fputc('"', f);
}

static void put_hex(FILE *f, uint64_t h)
{
    char b[17];
    dmuon_digest_hex(h, b);
    fprintf(f, "\"%s\"", b);
}

static dmuon_rc write_plan(FILE *f, void *ctx)
{
    const dmuon_plan *p = ctx;
    const dmuon_plan_opts *o = &p->opts;
    const dmuon_plan_report *r = &p->report;
    fprintf(f, "# dmuon owner plan: every Muon matrix has one owner rank (see dmuon-plan "
               "--help).\ndmuon_plan: %d\n", DMUON_PLAN_VERSION);
    fprintf(f, "inputs:\n  model: ");
    put_str(f, o->model_path ? o->model_path : "");
    fprintf(f, "\n  model_format: %s\n  model_digest: ", p->model_format);
    put_hex(f, p->model_digest);
    fprintf(f, "\n  cost: %s\n  cost_source: ", dmuon_cost_kind_name(o->cost));
    put_str(f, p->cost_source);
    fprintf(f, "\n  cost_digest: ");
    put_hex(f, p->cost_digest);
    fprintf(f, "\n  options_digest: ");
    put_hex(f, p->options_digest);
    fprintf(f, "\ncluster: {ranks: %d, nodes: %d, gpus_per_node: %d, sharding: %s, "
               "zero_stage: %d}\n",
            p->ranks, o->nodes, o->gpus_per_node, dmuon_sharding_name(o->sharding),
            o->zero_stage);
    fprintf(f, "options: {strategy: %s, epsilon: %.15g, byte_cap: %s, layer_spread: %s, "
               "column_balance: %s, fuse_experts: %s, small_unit_bytes: %lld, param_dtype: %s",
            dmuon_strategy_name(o->strategy), o->epsilon, o->byte_cap ? "true" : "false",
            o->layer_spread ? "true" : "false", o->column_balance ? "true" : "false",
            o->fuse_experts ? "true" : "false", (long long)o->small_unit_bytes,
            dmuon_dtype_name(o->param_dtype));
    if (o->cost == DMUON_COST_DB) {
        fprintf(f, ", device: ");
        put_str(f, o->cost_src.device ? o->cost_src.device : "");
        fprintf(f, ", variant: ");
        put_str(f, o->cost_src.variant ? o->cost_src.variant : "gram-pe5");
        fprintf(f, ", dtype: ");
        put_str(f, o->cost_src.dtype ? o->cost_src.dtype : "fp32");
        fprintf(f, ", db: ");
        put_str(f, o->cost_src.db_path ? o->cost_src.db_path : dmuon_costdb_default_path());
    }
    fprintf(f, "}\n");
    fprintf(f, "summary: {units: %zu, muon_matrices: %lld, busiest_ns_over_mean: %.6f, "
               "busiest_ns_over_lower_bound: %.6f, heaviest_bytes_over_mean: %.6f, "
               "max_owner_bytes: %lld, heaviest_rail_over_mean: %.6f, "
               "max_matrices_per_rank: %lld, layer_root_over_largest_unit: %.6f, "
               "byte_cap_fallbacks: %zu}\n",
            r->units, (long long)r->muon_matrices, r->busiest_ns_over_mean,
            r->busiest_ns_over_lower_bound, r->heaviest_bytes_over_mean,
            (long long)r->max_owner_bytes, r->heaviest_rail_over_mean,
            (long long)r->max_matrices_per_rank, r->layer_root_over_largest_unit,
            r->byte_cap_fallbacks);
    fprintf(f, "digests: {units: ");
    put_hex(f, dmuon_plan_units_digest(p));
    fprintf(f, ", segments: ");
    put_hex(f, dmuon_plan_segments_digest(p));
    fprintf(f, "}\nlayers:\n");
    for (size_t l = 0; l < p->nlayers; l++) {
        fprintf(f, "  - {name: ");
        put_str(f, p->layer_names[l]);
        fprintf(f, ", bytes: %lld, segments: [", (long long)p->layer_bytes[l]);
        for (size_t s = p->layer_seg[l]; s < p->layer_seg[l + 1]; s++) {
            const dmuon_segment *g = &p->segs[s];
            fprintf(f, "%s{owner: %d, dtype: %s, offset: %lld, count: %lld, window_offset: %lld}",
                    s > p->layer_seg[l] ? ", " : "", g->owner, dmuon_dtype_name(g->dtype),
                    (long long)g->offset, (long long)g->count, (long long)g->window_offset);
        }
        fprintf(f, "]}\n");
    }
    fprintf(f, "params:\n");
    for (size_t i = 0; i < p->nparams; i++) {
        const dmuon_plan_param *q = &p->params[i];
        fprintf(f, "  - {name: ");
        put_str(f, q->name);
        fprintf(f, ", layer: %d, role: %s, numel: %lld", q->layer,
                q->role == DMUON_ROLE_MUON ? "muon" : "adamw", (long long)q->numel);
        if (q->role == DMUON_ROLE_MUON) {
            fprintf(f, ", matrices: %lld, m: %lld, n: %lld", (long long)q->matrices,
                    (long long)q->mat_m, (long long)q->mat_n);
            if (q->transposed)
                fprintf(f, ", transposed: true");
            if (q->layout != DMUON_MAT_CONTIGUOUS)
                fprintf(f, ", layout: %s", dmuon_mat_layout_name(q->layout));
        }
        fprintf(f, "}\n");
    }
    fprintf(f, "units:\n");
    for (size_t i = 0; i < p->nunits; i++) {
        const dmuon_plan_unit *u = &p->units[i];
        fprintf(f, "  - {id: %d, name: ", u->id);
        put_str(f, u->name);
        fprintf(f, ", layer: %d, owner: %d, elements: %lld, bytes: %lld, matrices: %lld, "
                   "ns_ms: %.17g, window_offset: %lld, fallback: %s, members: [",
                u->layer, u->owner, (long long)u->elements, (long long)u->bytes,
                (long long)u->matrices, u->ns_ms, (long long)u->window_offset,
                p->fallback[i] ? "true" : "false");
        for (size_t k = 0; k < u->n_members; k++) {
            const dmuon_plan_member *mb = &p->members[u->first_member + k];
            fprintf(f, "%s[%d, %lld, %lld, %lld]", k ? ", " : "", mb->param,
                    (long long)mb->first_matrix, (long long)mb->n_matrices,
                    (long long)mb->layer_offset);
        }
        fprintf(f, "]");
        if (p->leaders) {
            fprintf(f, ", leaders: [");
            for (int32_t r2 = 0; r2 < o->nodes; r2++)
                fprintf(f, "%s%d", r2 ? ", " : "", p->leaders[i * (size_t)o->nodes + (size_t)r2]);
            fprintf(f, "]");
        }
        fprintf(f, "}\n");
    }
    if (ferror(f))
        return DMUON_FAIL(DMUON_EIO, "write error");
    return DMUON_OK;
}

dmuon_rc dmuon_plan_write(const dmuon_plan *p, const char *path)
{
    DMUON_TRY(dmuon_write_atomic(path, write_plan, (void *)p));
    return DMUON_OK;
}

/* ------------------------------------------------------------- loading -- */

typedef struct {
    dmuon_doc *d;
    const char *path;
    unsigned flags;
} ld;

/* An owner or leader outside [0, N): bad input for a strict load, a
 * violation for dmuon-verify (DMUON_PLAN_LOAD_NO_DIGESTS). */
static dmuon_rc range_rc(const ld *c)
{
    return (c->flags & DMUON_PLAN_LOAD_NO_DIGESTS) ? DMUON_ECHECK : DMUON_EPARSE;
}

static dmuon_rc need_kind(ld *c, yaml_node_t *n, const char *what, yaml_node_type_t kind,
                          const char *expected)
{
    if (!n)
        return DMUON_FAIL(DMUON_ENOTFOUND, "%s: missing required field '%s'", c->path, what);
    if (n->type != kind)
        return DMUON_FAIL(DMUON_EPARSE, "%s:%d: field '%s': expected %s", c->path,
                          dmuon_doc_line(n), what, expected);
    return DMUON_OK;
}

/* Every key of map must be one of keys[] (NULL-terminated): a plan file is
 * written by dmuon-plan alone, so an unknown key is a typo or an edit that
 * would otherwise be ignored silently.  where names the mapping. */
static dmuon_rc only_keys(ld *c, yaml_node_t *map, const char *where, const char *const *keys)
{
    return dmuon_doc_only_keys(c->d, map, where, keys);
}

static dmuon_rc need_map(ld *c, yaml_node_t *n, const char *what)
{
    return need_kind(c, n, what, YAML_MAPPING_NODE, "a mapping");
}

static dmuon_rc need_seq(ld *c, yaml_node_t *n, const char *what)
{
    return need_kind(c, n, what, YAML_SEQUENCE_NODE, "a list");
}

/* Reads a list of k integers (a tuple such as [owner, offset, count, win]). */
static dmuon_rc tuple(ld *c, yaml_node_t *n, const char *what, int64_t *v, size_t k)
{
    if (!n || n->type != YAML_SEQUENCE_NODE || dmuon_doc_seq_len(n) != k)
        return DMUON_FAIL(DMUON_EPARSE, "%s:%d: field '%s': expected a list of %zu integers",
                          c->path, dmuon_doc_line(n), what, k);
    for (size_t i = 0; i < k; i++)
        DMUON_TRY(dmuon_doc_to_int(c->d, dmuon_doc_seq_at(c->d, n, i), what, &v[i]));
    return DMUON_OK;
}

static dmuon_rc hex_field(ld *c, yaml_node_t *map, const char *key, uint64_t *out)
{
    const char *s;
    DMUON_TRY(dmuon_doc_field_str(c->d, map, key, true, &s));
    char *end;
    unsigned long long v = strtoull(s, &end, 16);
    if (strlen(s) != 16 || *end)
        return DMUON_FAIL(DMUON_EPARSE, "%s:%d: field '%s': expected 16 hex digits, got '%s'",
                          c->path, dmuon_doc_line(dmuon_doc_get(c->d, map, key)), key, s);
    *out = v;
    return DMUON_OK;
}

static dmuon_rc int_in(ld *c, yaml_node_t *map, const char *key, int64_t lo, int64_t hi,
                       int64_t *out)
{
    DMUON_TRY(dmuon_doc_field_int(c->d, map, key, true, out));
    if (*out < lo || *out > hi)
        return DMUON_FAIL(DMUON_EPARSE, "%s:%d: field '%s': %lld is outside %lld..%lld", c->path,
                          dmuon_doc_line(dmuon_doc_get(c->d, map, key)), key, (long long)*out,
                          (long long)lo, (long long)hi);
    return DMUON_OK;
}

static dmuon_rc dup_field(ld *c, dmuon_plan *p, yaml_node_t *map, const char *key, int slot,
                          const char **out)
{
    const char *s = NULL;
    DMUON_TRY(dmuon_doc_field_str(c->d, map, key, false, &s));
    if (!s)
        return DMUON_OK;
    p->strs[slot] = strdup(s);
    if (!p->strs[slot])
        return DMUON_FAIL(DMUON_ENOMEM, "out of memory");
    *out = p->strs[slot];
    return DMUON_OK;
}

static dmuon_rc load_header(ld *c, dmuon_plan *p, yaml_node_t *root)
{
    dmuon_doc *d = c->d;
    dmuon_plan_opts *o = &p->opts;
    int64_t v;
    const char *s;
    yaml_node_t *in = dmuon_doc_get(d, root, "inputs");
    DMUON_TRY(need_map(c, in, "inputs"));
    DMUON_TRY(only_keys(c, in, "'inputs'", (const char *const[]){"model", "model_format",
              "model_digest", "cost", "cost_source", "cost_digest", "options_digest", NULL}));
    DMUON_TRY(dup_field(c, p, in, "model", 0, &o->model_path));
    DMUON_TRY(dmuon_doc_field_str(d, in, "model_format", true, &s));
    snprintf(p->model_format, sizeof p->model_format, "%s", s);
    DMUON_TRY(hex_field(c, in, "model_digest", &p->model_digest));
    DMUON_TRY(hex_field(c, in, "cost_digest", &p->cost_digest));
    DMUON_TRY(hex_field(c, in, "options_digest", &p->options_digest));
    DMUON_TRY(dmuon_doc_field_str(d, in, "cost", true, &s));
    if (dmuon_cost_kind_parse(s, &o->cost) != DMUON_OK)
        return DMUON_FAIL(DMUON_EPARSE, "%s: field 'inputs.cost': %s", c->path, dmuon_errmsg());
    DMUON_TRY(dmuon_doc_field_str(d, in, "cost_source", true, &s));
    snprintf(p->cost_source, sizeof p->cost_source, "%s", s);

    yaml_node_t *cl = dmuon_doc_get(d, root, "cluster");
    DMUON_TRY(need_map(c, cl, "cluster"));
    DMUON_TRY(only_keys(c, cl, "'cluster'", (const char *const[]){"ranks", "nodes",
              "gpus_per_node", "sharding", "zero_stage", NULL}));
    DMUON_TRY(int_in(c, cl, "nodes", 1, DMUON_PLAN_MAX_RANKS, &v));
    o->nodes = (int32_t)v;
    DMUON_TRY(int_in(c, cl, "gpus_per_node", 1, DMUON_PLAN_MAX_RANKS, &v));
    o->gpus_per_node = (int32_t)v;
    DMUON_TRY(int_in(c, cl, "ranks", 1, DMUON_PLAN_MAX_RANKS, &v));
    if (v != (int64_t)o->nodes * o->gpus_per_node)
        return DMUON_FAIL(DMUON_EMISMATCH,
                          "%s: field 'cluster.ranks': %lld does not match nodes x gpus_per_node "
                          "= %d x %d",
                          c->path, (long long)v, o->nodes, o->gpus_per_node);
    p->ranks = (int32_t)v;
    DMUON_TRY(int_in(c, cl, "zero_stage", 2, 3, &v));
    o->zero_stage = (int)v;
    DMUON_TRY(dmuon_doc_field_str(d, cl, "sharding", true, &s));
    if (dmuon_sharding_parse(s, &o->sharding) != DMUON_OK)
        return DMUON_FAIL(DMUON_EPARSE, "%s: field 'cluster.sharding': %s", c->path,
                          dmuon_errmsg());

    yaml_node_t *op = dmuon_doc_get(d, root, "options");
    DMUON_TRY(need_map(c, op, "options"));
    DMUON_TRY(only_keys(c, op, "'options'", (const char *const[]){"strategy", "epsilon",
              "byte_cap", "layer_spread", "column_balance", "fuse_experts", "small_unit_bytes",
              "param_dtype", "device", "variant", "dtype", "db", NULL}));
    DMUON_TRY(dmuon_doc_field_str(d, op, "strategy", true, &s));
    if (dmuon_strategy_parse(s, &o->strategy) != DMUON_OK)
        return DMUON_FAIL(DMUON_EPARSE, "%s: field 'options.strategy': %s", c->path,
                          dmuon_errmsg());
    DMUON_TRY(dmuon_doc_field_double(d, op, "epsilon", true, &o->epsilon));
    DMUON_TRY(dmuon_doc_field_bool(d, op, "byte_cap", true, &o->byte_cap));
    DMUON_TRY(dmuon_doc_field_bool(d, op, "layer_spread", true, &o->layer_spread));
    DMUON_TRY(dmuon_doc_field_bool(d, op, "column_balance", true, &o->column_balance));
    DMUON_TRY(dmuon_doc_field_bool(d, op, "fuse_experts", true, &o->fuse_experts));
    DMUON_TRY(int_in(c, op, "small_unit_bytes", 0, DMUON_PLAN_MAX_SMALL_UNIT_BYTES,
                     &o->small_unit_bytes));
    DMUON_TRY(dmuon_doc_field_str(d, op, "param_dtype", true, &s));
    if (dmuon_dtype_parse(s, &o->param_dtype) != DMUON_OK)
        return DMUON_FAIL(DMUON_EPARSE, "%s: field 'options.param_dtype': unknown type '%s'",
                          c->path, s);
    DMUON_TRY(dup_field(c, p, op, "device", 2, &o->cost_src.device));
    DMUON_TRY(dup_field(c, p, op, "variant", 3, &o->cost_src.variant));
    DMUON_TRY(dup_field(c, p, op, "dtype", 4, &o->cost_src.dtype));
    DMUON_TRY(dup_field(c, p, op, "db", 1, &o->cost_src.db_path));

    yaml_node_t *sm = dmuon_doc_get(d, root, "summary");
    dmuon_plan_report *r = &p->rec_report;
    DMUON_TRY(need_map(c, sm, "summary"));
    DMUON_TRY(only_keys(c, sm, "'summary'", (const char *const[]){"units", "muon_matrices",
              "busiest_ns_over_mean", "busiest_ns_over_lower_bound", "heaviest_bytes_over_mean",
              "max_owner_bytes", "heaviest_rail_over_mean", "max_matrices_per_rank",
              "layer_root_over_largest_unit", "byte_cap_fallbacks", NULL}));
    DMUON_TRY(dmuon_doc_field_int(d, sm, "units", true, &v));
    r->units = v < 0 ? 0 : (size_t)v;
    DMUON_TRY(dmuon_doc_field_int(d, sm, "muon_matrices", true, &r->muon_matrices));
    DMUON_TRY(dmuon_doc_field_int(d, sm, "max_owner_bytes", true, &r->max_owner_bytes));
    DMUON_TRY(dmuon_doc_field_int(d, sm, "max_matrices_per_rank", true, &r->max_matrices_per_rank));
    DMUON_TRY(dmuon_doc_field_int(d, sm, "byte_cap_fallbacks", true, &v));
    r->byte_cap_fallbacks = v < 0 ? 0 : (size_t)v;
    DMUON_TRY(dmuon_doc_field_double(d, sm, "busiest_ns_over_mean", true,
                                     &r->busiest_ns_over_mean));
    DMUON_TRY(dmuon_doc_field_double(d, sm, "busiest_ns_over_lower_bound", true,
                                     &r->busiest_ns_over_lower_bound));
    DMUON_TRY(dmuon_doc_field_double(d, sm, "heaviest_bytes_over_mean", true,
                                     &r->heaviest_bytes_over_mean));
    DMUON_TRY(dmuon_doc_field_double(d, sm, "heaviest_rail_over_mean", true,
                                     &r->heaviest_rail_over_mean));
    DMUON_TRY(dmuon_doc_field_double(d, sm, "layer_root_over_largest_unit", true,
                                     &r->layer_root_over_largest_unit));

    yaml_node_t *dg = dmuon_doc_get(d, root, "digests");
    DMUON_TRY(need_map(c, dg, "digests"));
    DMUON_TRY(only_keys(c, dg, "'digests'", (const char *const[]){"units", "segments", NULL}));
    DMUON_TRY(hex_field(c, dg, "units", &p->rec_units_digest));
    DMUON_TRY(hex_field(c, dg, "segments", &p->rec_segments_digest));
    return DMUON_OK;
}

/* Bounds on sizes read from a plan file, far above any real model, so that
 * sums and products of them cannot overflow 64 bits. */
#define BIG ((int64_t)1 << 46)     /* elements, bytes, offsets */
#define DIM ((int64_t)1 << 31)     /* matrix rows, columns, counts */

static dmuon_rc load_tables(ld *c, dmuon_plan *p, yaml_node_t *root)
{
    dmuon_doc *d = c->d;
    int64_t v, t[4];
    const char *s;
    /* layers and their segment tables */
    yaml_node_t *ls = dmuon_doc_get(d, root, "layers");
    DMUON_TRY(need_seq(c, ls, "layers"));
    p->nlayers = dmuon_doc_seq_len(ls);
    size_t nseg = 0;
    for (size_t l = 0; l < p->nlayers; l++)
        nseg += dmuon_doc_seq_len(dmuon_doc_get(d, dmuon_doc_seq_at(d, ls, l), "segments"));
    p->layer_names = calloc(p->nlayers + 1, sizeof *p->layer_names);
    p->layer_bytes = calloc(p->nlayers + 1, sizeof *p->layer_bytes);
    p->layer_seg = calloc(p->nlayers + 1, sizeof *p->layer_seg);
    p->segs = calloc(nseg + 1, sizeof *p->segs);
    if (!p->layer_names || !p->layer_bytes || !p->layer_seg || !p->segs)
        return DMUON_FAIL(DMUON_ENOMEM, "out of memory");
    for (size_t l = 0; l < p->nlayers; l++) {
        yaml_node_t *it = dmuon_doc_seq_at(d, ls, l);
        DMUON_TRY(need_map(c, it, "layers[]"));
        DMUON_TRY(only_keys(c, it, "a layer", (const char *const[]){"name", "bytes",
                  "segments", NULL}));
        DMUON_TRY(dmuon_doc_field_str(d, it, "name", true, &s));
        p->layer_names[l] = strdup(s);
        if (!p->layer_names[l])
            return DMUON_FAIL(DMUON_ENOMEM, "out of memory");
        DMUON_TRY(int_in(c, it, "bytes", 0, BIG, &p->layer_bytes[l]));
        yaml_node_t *sg = dmuon_doc_get(d, it, "segments");
        DMUON_TRY(need_seq(c, sg, "segments"));
        p->layer_seg[l] = p->nsegs;
        for (size_t k = 0; k < dmuon_doc_seq_len(sg); k++) {
            yaml_node_t *g = dmuon_doc_seq_at(d, sg, k);
            const char *lname = p->layer_names[l];
            if (!g || g->type != YAML_MAPPING_NODE)
                return DMUON_FAIL(DMUON_EPARSE, "%s:%d: layer '%s': segment %zu: expected "
                                                "{owner, dtype, offset, count, window_offset}",
                                  c->path, dmuon_doc_line(g ? g : sg), lname, k);
            static const char *const keys[4] = {"owner", "offset", "count", "window_offset"};
            DMUON_TRY(only_keys(c, g, "a segment", (const char *const[]){"owner", "dtype",
                      "offset", "count", "window_offset", NULL}));
            for (int j = 0; j < 4; j++) {
                DMUON_TRY(dmuon_doc_field_int(d, g, keys[j], true, &t[j]));
                if (j > 0 && (t[j] < 0 || t[j] > BIG))
                    return DMUON_FAIL(DMUON_EPARSE, "%s:%d: layer '%s': segment %zu: field '%s': "
                                                    "%lld is outside 0..2^46",
                                      c->path, dmuon_doc_line(g), lname, k, keys[j],
                                      (long long)t[j]);
            }
            if (t[0] < 0 || t[0] >= p->ranks)
                return DMUON_FAIL(range_rc(c), "%s:%d: layer '%s': segment %zu: owner %lld is "
                                               "outside [0, %d)",
                                  c->path, dmuon_doc_line(g), lname, k, (long long)t[0],
                                  p->ranks);
            DMUON_TRY(dmuon_doc_field_str(d, g, "dtype", true, &s));
            dmuon_dtype dt;
            if (dmuon_dtype_parse(s, &dt) != DMUON_OK || dt != p->opts.param_dtype)
                return DMUON_FAIL(DMUON_EPARSE, "%s:%d: layer '%s': segment %zu: field 'dtype': "
                                                "'%s', expected the plan's param_dtype %s",
                                  c->path, dmuon_doc_line(g), lname, k, s,
                                  dmuon_dtype_name(p->opts.param_dtype));
            p->segs[p->nsegs++] = (dmuon_segment){(int32_t)t[0], dt, t[1], t[2], t[3]};
        }
    }
    p->layer_seg[p->nlayers] = p->nsegs;
    /* parameters */
    yaml_node_t *ps = dmuon_doc_get(d, root, "params");
    DMUON_TRY(need_seq(c, ps, "params"));
    size_t np = dmuon_doc_seq_len(ps);
    p->params = calloc(np + 1, sizeof *p->params);
    if (!p->params)
        return DMUON_FAIL(DMUON_ENOMEM, "out of memory");
    for (size_t i = 0; i < np; i++) {
        yaml_node_t *it = dmuon_doc_seq_at(d, ps, i);
        dmuon_plan_param *q = &p->params[i];
        DMUON_TRY(need_map(c, it, "params[]"));
        DMUON_TRY(only_keys(c, it, "a parameter", (const char *const[]){"name", "layer",
                  "role", "numel", "matrices", "m", "n", "transposed", "layout", NULL}));
        DMUON_TRY(dmuon_doc_field_str(d, it, "name", true, &s));
        q->name = strdup(s);
        if (!q->name)
            return DMUON_FAIL(DMUON_ENOMEM, "out of memory");
        p->nparams = i + 1;
        DMUON_TRY(int_in(c, it, "layer", 0, (int64_t)p->nlayers - 1, &v));
        q->layer = (int32_t)v;
        DMUON_TRY(int_in(c, it, "numel", 1, BIG, &q->numel));
        DMUON_TRY(dmuon_doc_field_str(d, it, "role", true, &s));
        if (!strcmp(s, "muon")) {
            q->role = DMUON_ROLE_MUON;
            DMUON_TRY(int_in(c, it, "matrices", 1, DIM, &q->matrices));
            DMUON_TRY(int_in(c, it, "m", 1, DIM, &q->mat_m));
            DMUON_TRY(int_in(c, it, "n", 1, DIM, &q->mat_n));
            int64_t prod;
            if (__builtin_mul_overflow(q->matrices, q->mat_m, &prod) ||
                __builtin_mul_overflow(prod, q->mat_n, &prod) || prod != q->numel)
                return DMUON_FAIL(DMUON_EPARSE, "%s:%d: parameter '%s': matrices x m x n does "
                                                "not equal numel %lld",
                                  c->path, dmuon_doc_line(it), q->name, (long long)q->numel);
            DMUON_TRY(dmuon_doc_field_bool(d, it, "transposed", false, &q->transposed));
            const char *lay = NULL;
            DMUON_TRY(dmuon_doc_field_str(d, it, "layout", false, &lay));
            q->layout = DMUON_MAT_CONTIGUOUS;
            if (lay && !strcmp(lay, "halves"))
                q->layout = DMUON_MAT_HALVES;
            else if (lay && !strcmp(lay, "interleaved"))
                q->layout = DMUON_MAT_INTERLEAVED;
            else if (lay && strcmp(lay, "contiguous"))
                return DMUON_FAIL(DMUON_EPARSE, "%s:%d: parameter '%s': field 'layout': '%s', "
                                                "expected contiguous, halves or interleaved",
                                  c->path, dmuon_doc_line(it), q->name, lay);
            if (q->layout != DMUON_MAT_CONTIGUOUS && (!q->transposed || q->matrices % 2))
                return DMUON_FAIL(DMUON_EPARSE, "%s:%d: parameter '%s': layout %s needs "
                                                "transposed: true and an even matrix count "
                                                "(gate and up of each expert), got %s and %lld",
                                  c->path, dmuon_doc_line(it), q->name,
                                  dmuon_mat_layout_name(q->layout),
                                  q->transposed ? "true" : "false", (long long)q->matrices);
        } else if (!strcmp(s, "adamw")) {
            q->role = DMUON_ROLE_ADAMW;
        } else {
            return DMUON_FAIL(DMUON_EPARSE, "%s:%d: field 'role': expected muon or adamw, got "
                                            "'%s'", c->path, dmuon_doc_line(it), s);
        }
    }
    /* units */
    yaml_node_t *us = dmuon_doc_get(d, root, "units");
    DMUON_TRY(need_seq(c, us, "units"));
    p->nunits = 0;
    size_t nu = dmuon_doc_seq_len(us), nm = 0;
    if (nu != p->rec_report.units)
        return DMUON_FAIL(DMUON_EMISMATCH, "%s:%d: field 'units': expected %zu units (as "
                                           "'summary.units' records), found %zu; was a unit "
                                           "line deleted or added?",
                          c->path, dmuon_doc_line(us), p->rec_report.units, nu);
    for (size_t i = 0; i < nu; i++)
        nm += dmuon_doc_seq_len(dmuon_doc_get(d, dmuon_doc_seq_at(d, us, i), "members"));
    p->units = calloc(nu + 1, sizeof *p->units);
    p->fallback = calloc(nu + 1, sizeof *p->fallback);
    p->members = calloc(nm + 1, sizeof *p->members);
    if (p->opts.sharding == DMUON_SHARD_HSDP)
        p->leaders = calloc(nu * (size_t)p->opts.nodes + 1, sizeof *p->leaders);
    if (!p->units || !p->fallback || !p->members ||
        (p->opts.sharding == DMUON_SHARD_HSDP && !p->leaders))
        return DMUON_FAIL(DMUON_ENOMEM, "out of memory");
    for (size_t i = 0; i < nu; i++) {
        yaml_node_t *it = dmuon_doc_seq_at(d, us, i);
        dmuon_plan_unit *u = &p->units[i];
        DMUON_TRY(need_map(c, it, "units[]"));
        DMUON_TRY(only_keys(c, it, "a unit", (const char *const[]){"id", "name", "layer",
                  "owner", "elements", "bytes", "matrices", "ns_ms", "window_offset",
                  "fallback", "members", "leaders", NULL}));
        DMUON_TRY(dmuon_doc_field_str(d, it, "name", true, &s));
        u->name = strdup(s);
        if (!u->name)
            return DMUON_FAIL(DMUON_ENOMEM, "out of memory");
        p->nunits = i + 1;
        DMUON_TRY(dmuon_doc_field_int(d, it, "id", true, &v));
        if (v != (int64_t)i)
            return DMUON_FAIL(DMUON_EPARSE, "%s:%d: unit '%s': field 'id': %lld, expected %zu "
                                            "(units are numbered 0, 1, 2, ... in file order)",
                              c->path, dmuon_doc_line(it), u->name, (long long)v, i);
        u->id = (int32_t)v;
        DMUON_TRY(int_in(c, it, "layer", 0, (int64_t)p->nlayers - 1, &v));
        u->layer = (int32_t)v;
        DMUON_TRY(dmuon_doc_field_int(d, it, "owner", true, &v));
        if (v < 0 || v >= p->ranks)
            return DMUON_FAIL(range_rc(c), "%s:%d: unit '%s': owner %lld is outside [0, %d)",
                              c->path, dmuon_doc_line(it), u->name, (long long)v, p->ranks);
        u->owner = (int32_t)v;
        u->node = u->owner / p->opts.gpus_per_node;
        u->column = u->owner % p->opts.gpus_per_node;
        DMUON_TRY(int_in(c, it, "elements", 1, BIG, &u->elements));
        DMUON_TRY(int_in(c, it, "bytes", 1, BIG, &u->bytes));
        DMUON_TRY(int_in(c, it, "matrices", 1, DIM, &u->matrices));
        DMUON_TRY(int_in(c, it, "window_offset", 0, BIG, &u->window_offset));
        DMUON_TRY(dmuon_doc_field_double(d, it, "ns_ms", true, &u->ns_ms));
        if (!isfinite(u->ns_ms) || u->ns_ms < 0)
            return DMUON_FAIL(DMUON_EPARSE, "%s:%d: unit '%s': field 'ns_ms': expected a "
                                            "non-negative number", c->path, dmuon_doc_line(it),
                              u->name);
        DMUON_TRY(dmuon_doc_field_bool(d, it, "fallback", true, &p->fallback[i]));
        yaml_node_t *ms = dmuon_doc_get(d, it, "members");
        DMUON_TRY(need_seq(c, ms, "members"));
        u->first_member = p->nmembers;
        u->n_members = dmuon_doc_seq_len(ms);
        for (size_t k = 0; k < u->n_members; k++) {
            DMUON_TRY(tuple(c, dmuon_doc_seq_at(d, ms, k), "members", t, 4));
            if (t[0] < 0 || (size_t)t[0] >= p->nparams)
                return DMUON_FAIL(DMUON_EPARSE, "%s:%d: unit '%s': member %zu names parameter "
                                                "%lld, outside [0, %zu)",
                                  c->path, dmuon_doc_line(it), u->name, k, (long long)t[0],
                                  p->nparams);
            const dmuon_plan_param *q = &p->params[t[0]];
            if (q->role != DMUON_ROLE_MUON)
                return DMUON_FAIL(range_rc(c), "%s:%d: unit '%s' holds AdamW parameter '%s'",
                                  c->path, dmuon_doc_line(it), u->name, q->name);
            if (t[1] < 0 || t[2] < 1 || t[1] > q->matrices ||
                t[2] > q->matrices - t[1] || t[3] < 0 || t[3] > BIG)
                return DMUON_FAIL(DMUON_EPARSE, "%s:%d: unit '%s': member %zu: matrices "
                                                "[%lld, +%lld) at offset %lld do not lie in "
                                                "Muon parameter '%s'",
                                  c->path, dmuon_doc_line(it), u->name, k, (long long)t[1],
                                  (long long)t[2], (long long)t[3], q->name);
            if (q->layout != DMUON_MAT_CONTIGUOUS && (t[1] % 2 || t[2] % 2))
                return DMUON_FAIL(DMUON_EPARSE, "%s:%d: unit '%s': member %zu: matrices "
                                                "[%lld, +%lld) split a gate/up pair of '%s' "
                                                "(layout %s: an expert's two matrices share "
                                                "one unit)",
                                  c->path, dmuon_doc_line(it), u->name, k, (long long)t[1],
                                  (long long)t[2], q->name, dmuon_mat_layout_name(q->layout));
            p->members[p->nmembers++] = (dmuon_plan_member){(int32_t)t[0], t[1], t[2], t[3]};
        }
        if (p->leaders) {
            yaml_node_t *lv = dmuon_doc_get(d, it, "leaders");
            if (!lv || lv->type != YAML_SEQUENCE_NODE ||
                dmuon_doc_seq_len(lv) != (size_t)p->opts.nodes)
                return DMUON_FAIL(DMUON_EPARSE, "%s:%d: unit '%s': field 'leaders': expected "
                                                "one rank per node (%d)",
                                  c->path, dmuon_doc_line(it), u->name, p->opts.nodes);
            for (int32_t r = 0; r < p->opts.nodes; r++) {
                DMUON_TRY(dmuon_doc_to_int(d, dmuon_doc_seq_at(d, lv, (size_t)r), "leaders", &v));
                if (v < 0 || v >= p->ranks)
                    return DMUON_FAIL(range_rc(c), "%s:%d: unit '%s': leader %lld is outside "
                                                    "[0, %d)", c->path, dmuon_doc_line(it),
                                      u->name, (long long)v, p->ranks);
                p->leaders[i * (size_t)p->opts.nodes + (size_t)r] = (int32_t)v;
            }
        }
    }
    return DMUON_OK;
}

/* Per-rank windows and the report from the loaded units. */
static dmuon_rc derive(dmuon_plan *p)
{
    p->window = calloc((size_t)p->ranks, sizeof *p->window);
    if (!p->window)
        return DMUON_FAIL(DMUON_ENOMEM, "out of memory");
    for (size_t i = 0; i < p->nunits; i++)
        p->window[p->units[i].owner] += p->units[i].bytes;
    return DMUON_OK;
}

/* Strict load: everything that can be recomputed from the stored units and
 * options is recomputed and compared with what the file records. */
static dmuon_rc verify_loaded(const char *path, dmuon_plan *p)
{
    char a[17], b[17];
    uint64_t ho = dmuon_plan_options_digest(&p->opts);
    if (ho != p->options_digest) {
        dmuon_digest_hex(p->options_digest, a);
        dmuon_digest_hex(ho, b);
        return DMUON_FAIL(DMUON_EMISMATCH,
                          "%s: field 'inputs.options_digest': recorded %s but the file's cluster "
                          "and options give %s; the plan was edited after dmuon-plan wrote it "
                          "(re-run dmuon-plan)", path, a, b);
    }
    uint64_t hu = dmuon_plan_units_digest(p);
    if (hu != p->rec_units_digest) {
        dmuon_digest_hex(p->rec_units_digest, a);
        dmuon_digest_hex(hu, b);
        return DMUON_FAIL(DMUON_EMISMATCH,
                          "%s: field 'digests.units': recorded %s but the file's units give %s; "
                          "the plan was edited after dmuon-plan wrote it (re-run dmuon-plan, or "
                          "check it with dmuon-verify --plan)", path, a, b);
    }
    /* window offsets from the owners */
    size_t nu = p->nunits ? p->nunits : 1;
    int64_t *woff = malloc(nu * sizeof *woff);
    if (!woff)
        return DMUON_FAIL(DMUON_ENOMEM, "out of memory");
    for (size_t i = 0; i < p->nunits; i++)
        woff[i] = p->units[i].window_offset;
    dmuon_rc rc = dmuon_plan_layout_windows(p);
    for (size_t i = 0; rc == DMUON_OK && i < p->nunits; i++)
        if (woff[i] != p->units[i].window_offset)
            rc = DMUON_FAIL(DMUON_EMISMATCH, "%s: unit %zu '%s': field 'window_offset': "
                                             "recorded %lld, the owners' units give %lld",
                            path, i, p->units[i].name, (long long)woff[i],
                            (long long)p->units[i].window_offset);
    free(woff);
    DMUON_TRY(rc);
    /* segment tables from the units */
    dmuon_segment *fsegs = p->segs;
    size_t *fls = p->layer_seg, fn = p->nsegs;
    p->segs = NULL;
    p->layer_seg = NULL;
    rc = dmuon_plan_layout_segments(p);
    for (size_t l = 0; rc == DMUON_OK && l < p->nlayers; l++) {
        size_t n1 = fls[l + 1] - fls[l], n2 = p->layer_seg[l + 1] - p->layer_seg[l];
        for (size_t k = 0; rc == DMUON_OK && k < (n1 > n2 ? n1 : n2); k++) {
            const dmuon_segment *x = k < n1 ? &fsegs[fls[l] + k] : NULL;
            const dmuon_segment *y = k < n2 ? &p->segs[p->layer_seg[l] + k] : NULL;
            if (x && y && x->owner == y->owner && x->dtype == y->dtype &&
                x->offset == y->offset && x->count == y->count &&
                x->window_offset == y->window_offset)
                continue;
            char fx[160] = "none", fy[160] = "none";
            if (x)
                snprintf(fx, sizeof fx, "{owner: %d, offset: %lld, count: %lld, window_offset: "
                                        "%lld}", x->owner, (long long)x->offset,
                         (long long)x->count, (long long)x->window_offset);
            if (y)
                snprintf(fy, sizeof fy, "{owner: %d, offset: %lld, count: %lld, window_offset: "
                                        "%lld}", y->owner, (long long)y->offset,
                         (long long)y->count, (long long)y->window_offset);
            rc = DMUON_FAIL(DMUON_EMISMATCH,
                            "%s: layer %zu '%s': segment %zu differs from the units: the file "
                            "has %s, the units give %s (%zu segments in the file, %zu from the "
                            "units)", path, l, p->layer_names[l], k, fx, fy, n1, n2);
        }
    }
    if (rc == DMUON_OK && fn != p->nsegs)
        rc = DMUON_FAIL(DMUON_EMISMATCH, "%s: field 'layers': %zu segments in the file, %zu from "
                                         "the units", path, fn, p->nsegs);
    free(fsegs);
    free(fls);
    DMUON_TRY(rc);
    uint64_t hs = dmuon_plan_segments_digest(p);
    if (hs != p->rec_segments_digest) {
        dmuon_digest_hex(p->rec_segments_digest, a);
        dmuon_digest_hex(hs, b);
        return DMUON_FAIL(DMUON_EMISMATCH,
                          "%s: field 'digests.segments': recorded %s but the segment tables "
                          "give %s; the plan was edited after dmuon-plan wrote it (re-run "
                          "dmuon-plan)", path, a, b);
    }
    /* HSDP leaders: rank r * K + column of the owner */
    if (p->leaders) {
        size_t R = (size_t)p->opts.nodes;
        for (size_t u = 0; u < p->nunits; u++)
            for (size_t r = 0; r < R; r++) {
                int32_t want = (int32_t)r * p->opts.gpus_per_node + p->units[u].column;
                if (p->leaders[u * R + r] != want)
                    return DMUON_FAIL(DMUON_EMISMATCH, "%s: unit %zu '%s': field 'leaders': "
                                                       "node %zu has leader %d, expected %d "
                                                       "(node x gpus_per_node + owner's column)",
                                      path, u, p->units[u].name, r, p->leaders[u * R + r],
                                      want);
            }
    }
    /* the summary */
    DMUON_TRY(dmuon_plan_compute_report(p));
    const dmuon_plan_report *x = &p->rec_report, *y = &p->report;
    struct {
        const char *key;
        double rec, got;
        bool ratio;
    } f[] = {
        {"units", (double)x->units, (double)y->units, false},
        {"muon_matrices", (double)x->muon_matrices, (double)y->muon_matrices, false},
        {"max_owner_bytes", (double)x->max_owner_bytes, (double)y->max_owner_bytes, false},
        {"max_matrices_per_rank", (double)x->max_matrices_per_rank,
         (double)y->max_matrices_per_rank, false},
        {"byte_cap_fallbacks", (double)x->byte_cap_fallbacks, (double)y->byte_cap_fallbacks,
         false},
        {"busiest_ns_over_mean", x->busiest_ns_over_mean, y->busiest_ns_over_mean, true},
        {"busiest_ns_over_lower_bound", x->busiest_ns_over_lower_bound,
         y->busiest_ns_over_lower_bound, true},
        {"heaviest_bytes_over_mean", x->heaviest_bytes_over_mean, y->heaviest_bytes_over_mean,
         true},
        {"heaviest_rail_over_mean", x->heaviest_rail_over_mean, y->heaviest_rail_over_mean, true},
        {"layer_root_over_largest_unit", x->layer_root_over_largest_unit,
         y->layer_root_over_largest_unit, true},
    };
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
        /* ratios are written with 6 decimals: allow the rounding (5e-7) */
        bool same = f[i].ratio ? fabs(f[i].rec - f[i].got) <= 1e-6 : f[i].rec == f[i].got;
        bool bound = !strcmp(f[i].key, "busiest_ns_over_lower_bound");
        if (!same)
            return DMUON_FAIL(DMUON_EMISMATCH,
                              "%s: field 'summary.%s': recorded %.6f but the units give %.6f; "
                              "the plan was edited after dmuon-plan wrote it%s (re-run "
                              "dmuon-plan)",
                              path, f[i].key, f[i].rec, f[i].got,
                              bound ? ", or an older dmuon-plan with a weaker bound wrote it"
                                    : "");
    }
    return DMUON_OK;
}

dmuon_rc dmuon_plan_load_ex(const char *path, unsigned flags, dmuon_plan **out)
{
    dmuon_rc rc = DMUON_OK;
    dmuon_doc d;
    *out = NULL;
    DMUON_TRY(dmuon_doc_load_file(&d, path));
    ld c = {&d, path, flags};
    dmuon_plan *p = calloc(1, sizeof *p);
    if (!p) {
        dmuon_doc_release(&d);
        return DMUON_FAIL(DMUON_ENOMEM, "out of memory");
    }
    p->loaded = true;
    yaml_node_t *root = dmuon_doc_root(&d);
    yaml_node_t *ver = dmuon_doc_get(&d, root, "dmuon_plan");
    if (!ver) {
        rc = DMUON_FAIL(DMUON_EPARSE, "%s: not a dmuon plan file (no 'dmuon_plan' version "
                                      "field)", path);
        goto fail;
    }
    int64_t v;
    DMUON_TRY_GOTO(rc, dmuon_doc_to_int(&d, ver, "dmuon_plan", &v), fail);
    if (v != DMUON_PLAN_VERSION) {
        rc = DMUON_FAIL(DMUON_EVERSION,
                        "%s:%d: field 'dmuon_plan': plan format version %lld, this dmuon reads "
                        "version %d; re-run dmuon-plan to make a new plan",
                        path, dmuon_doc_line(ver), (long long)v, DMUON_PLAN_VERSION);
        goto fail;
    }
    DMUON_TRY_GOTO(rc, only_keys(&c, root, "the plan", (const char *const[]){"dmuon_plan",
                   "inputs", "cluster", "options", "summary", "digests", "layers", "params",
                   "units", NULL}), fail);
    DMUON_TRY_GOTO(rc, load_header(&c, p, root), fail);
    DMUON_TRY_GOTO(rc, load_tables(&c, p, root), fail);
    DMUON_TRY_GOTO(rc, derive(p), fail);
    if (!(flags & DMUON_PLAN_LOAD_NO_DIGESTS))
        DMUON_TRY_GOTO(rc, verify_loaded(path, p), fail);
    else
        DMUON_TRY_GOTO(rc, dmuon_plan_compute_report(p), fail);
    dmuon_doc_release(&d);
    *out = p;
    return DMUON_OK;
fail:
    dmuon_doc_release(&d);
    dmuon_plan_free(p);
    return rc;
}

dmuon_rc dmuon_plan_load(const char *path, dmuon_plan **out)
{
    DMUON_TRY(dmuon_plan_load_ex(path, 0, out));
    return DMUON_OK;
}

dmuon_rc dmuon_plan_match_model(const dmuon_plan *p, const dmuon_model *m)
{
    char a[17], b[17];
    if (dmuon_model_param_count(m) != p->nparams)
        return DMUON_FAIL(DMUON_EMISMATCH, "plan has %zu parameters, model '%s' has %zu",
                          p->nparams, dmuon_model_source(m), dmuon_model_param_count(m));
    for (size_t i = 0; i < p->nparams; i++) {
        const dmuon_param *q = dmuon_model_param(m, i);
        const dmuon_plan_param *r = &p->params[i];
        if (strcmp(q->name, r->name) || q->numel != r->numel || q->role != r->role ||
            q->matrices != r->matrices)
            return DMUON_FAIL(DMUON_EMISMATCH,
                              "parameter %zu differs: plan has '%s' (%lld elements, %s), model "
                              "'%s' has '%s' (%lld elements, %s)",
                              i, r->name, (long long)r->numel,
                              r->role == DMUON_ROLE_MUON ? "muon" : "adamw",
                              dmuon_model_source(m), q->name, (long long)q->numel,
                              q->role == DMUON_ROLE_MUON ? "muon" : "adamw");
        if (q->role == DMUON_ROLE_MUON &&
            (q->mat_m != r->mat_m || q->mat_n != r->mat_n || q->transposed != r->transposed ||
             q->layout != r->layout))
            return DMUON_FAIL(DMUON_EMISMATCH,
                              "parameter '%s' differs: plan has %lld x %lld matrices%s, layout "
                              "%s; model '%s' has %lld x %lld%s, layout %s",
                              r->name, (long long)r->mat_m, (long long)r->mat_n,
                              r->transposed ? " (transposed)" : "",
                              dmuon_mat_layout_name(r->layout), dmuon_model_source(m),
                              (long long)q->mat_m, (long long)q->mat_n,
                              q->transposed ? " (transposed)" : "",
                              dmuon_mat_layout_name(q->layout));
    }
    if (dmuon_model_digest(m) != p->model_digest) {
        dmuon_digest_hex(p->model_digest, a);
        dmuon_digest_hex(dmuon_model_digest(m), b);
        return DMUON_FAIL(DMUON_EMISMATCH, "model digest differs: plan %s, model '%s' %s", a,
                          dmuon_model_source(m), b);
    }
    return DMUON_OK;
}
