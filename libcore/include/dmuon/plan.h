/*
 * dmuon/plan.h — owner plans: assignment units, owners, window layout,
 * frozen segment tables, the balance report, and the plan file.
 *
 * Units (paper §3.3, C.5).  Only Muon matrices get owners; AdamW parameters
 * (embeddings, output head, norm gains, biases) keep FSDP's even sharding and
 * are listed in the plan as sharded.  In every layer:
 *   - each Muon parameter whose per-matrix bytes are at least
 *     small_unit_bytes is its own unit;
 *   - the layer's other (small) Muon parameters form one merged unit;
 *   - each expert matrix (MoE) is its own unit, whatever its size; with
 *     fuse_experts, all matrices of one expert tensor (fused [E,...] storage,
 *     or the per-expert tensors experts.*.P of one layer and projection P)
 *     form one unit instead.  A fused tensor whose gate and up matrices are
 *     strided (layout DMUON_MAT_HALVES or DMUON_MAT_INTERLEAVED of
 *     dmuon/model.h: [E, in, 2I]) gives each expert one unit "NAME[2e,2e+1]"
 *     holding its gate and up: the contiguous block [e*in*2I, (e+1)*in*2I)
 *     of the storage, so segments stay contiguous and the owner reads the
 *     two I x in matrices inside it with the layout's strides.
 * Bytes of a unit = its elements * dtype size of the communication dtype
 * (param_dtype, BF16 by default: the parameters the operators gather and
 * publish), whatever the stored dtype.
 *
 * Owners (paper Appendix B).  Units are sorted by cost descending, ties by
 * element count descending, then by name.  For each unit in turn: candidates
 * are the ranks holding the fewest units of the unit's layer (so no two units
 * of a layer share a rank while the layer has no more units than ranks);
 * among them the least loaded by cost (ties: lower rank) whose bytes stay
 * within (1+epsilon) * P / N after receiving the unit (P: all unit bytes); if
 * none fits, the candidate with the fewest bytes (ties: lower rank).  A
 * deterministic local search then lowers the busiest rank's cost by moves
 * and swaps of units (assign.c), keeping the byte cap (a rank that receives
 * bytes ends within the cap), layer spreading (at most ceil(units of the
 * layer / N) of a layer's units per rank, 1 while they are no more than N)
 * and the units placed over the cap where they are.  HSDP (R nodes x K GPUs,
 * rank = node * K + column) with column balancing: the objective is
 * lexicographic, busiest rank's cost first, then the heaviest column's
 * (rail's) publish bytes: after the search above, moves and swaps that raise
 * no rank above the busiest lower the heaviest rail, then the search runs
 * again with no rail rising above the heaviest.  The row leader of a unit on
 * node r is rank r * K + column(owner).  The plan is a pure function of its
 * inputs.
 *
 * Window.  Each owner's units are laid out contiguously in its window in
 * (layer, position in layer buffer) order; window_offset is in bytes.
 *
 * Segment tables.  A layer's buffer holds the layer's Muon parameters in
 * forward (inventory) order, param_dtype elements; each maximal run of
 * storage with one owner and a contiguous window range is one segment.  The
 * plan file stores each segment as a labelled flow mapping
 *   {owner: 12, dtype: bf16, offset: 0, count: 5505024, window_offset: 0}
 * (the fields of dmuon_segment in dmuon/types.h: offset into the layer
 * buffer and window_offset into the owner's window in bytes, count in
 * elements of dtype, which is always the plan's param_dtype).
 */
#ifndef DMUON_PLAN_H
#define DMUON_PLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "dmuon/cost.h"
#include "dmuon/io.h"
#include "dmuon/model.h"
#include "dmuon/rc.h"
#include "dmuon/types.h"

#define DMUON_PLAN_VERSION 1

typedef struct dmuon_plan dmuon_plan;

typedef enum { DMUON_SHARD_FSDP = 0, DMUON_SHARD_HSDP } dmuon_sharding;
typedef enum { DMUON_STRATEGY_LPT = 0, DMUON_STRATEGY_ROUND_ROBIN } dmuon_strategy;

/* "fsdp"/"hsdp", "lpt"/"round-robin"; parsers fail with DMUON_EINVAL. */
const char *dmuon_sharding_name(dmuon_sharding s);
dmuon_rc dmuon_sharding_parse(const char *s, dmuon_sharding *out);
const char *dmuon_strategy_name(dmuon_strategy s);
dmuon_rc dmuon_strategy_parse(const char *s, dmuon_strategy *out);

/* Largest world size the planner accepts (nodes * gpus_per_node). */
#define DMUON_PLAN_MAX_RANKS (1 << 20)

/* Largest small-unit threshold accepted (2^46 bytes, the bound on sizes in a
 * plan file). */
#define DMUON_PLAN_MAX_SMALL_UNIT_BYTES ((int64_t)1 << 46)

/* Planning options; dmuon_plan_opts_init sets the defaults given here. */
typedef struct {
    int32_t nodes;              /* R >= 1 (default 1) */
    int32_t gpus_per_node;      /* K >= 1 (default 8) */
    dmuon_sharding sharding;    /* default FSDP */
    int zero_stage;             /* 2 or 3 (default 3); recorded, not used by assignment */
    dmuon_strategy strategy;    /* default LPT */
    dmuon_cost_kind cost;       /* default DMUON_COST_DB */
    dmuon_cost_source cost_src; /* used with DMUON_COST_DB */
    double epsilon;             /* byte cap slack (default 0.1, paper Appendix B) */
    bool byte_cap;              /* default true (--no-byte-cap) */
    bool layer_spread;          /* default true (--no-layer-spread) */
    bool column_balance;        /* HSDP: default true (--no-column-balance) */
    bool fuse_experts;          /* default false (per-expert units, paper C.5) */
    int64_t small_unit_bytes;   /* default 16 MiB (in param_dtype): Muon
                                   parameters whose matrices are smaller
                                   share the layer's merged unit.  With it,
                                   q/k/v/o of models of width <= 2048
                                   (2048^2 BF16 = 8 MiB) and k/v of wider
                                   ones merge, giving 1 to 6 units per layer
                                   on the paper's models (Appendix B) */
    dmuon_dtype param_dtype;    /* communication dtype, default BF16 */
    const char *model_path;     /* recorded in the plan and in probe commands */
} dmuon_plan_opts;

void dmuon_plan_opts_init(dmuon_plan_opts *o);

/* One assignment unit (read-only view into the plan). */
typedef struct {
    int32_t id;               /* index in dmuon_plan_units, = position in the plan file */
    const char *name;         /* first parameter's name; "NAME[j]" for one expert
                                 matrix j; "NAME[j,j+1]" for an expert's gate and
                                 up of a strided layout; "LAYER.(small)" for a
                                 merged unit */
    int32_t layer;            /* layer index */
    int32_t owner;            /* global rank in [0, ranks) */
    int32_t node;             /* owner / gpus_per_node */
    int32_t column;           /* owner % gpus_per_node: the rail it publishes on */
    int64_t elements;         /* Muon elements of the unit */
    int64_t bytes;            /* elements * dtype size of param_dtype */
    int64_t matrices;         /* Muon matrices of the unit */
    double ns_ms;             /* NS time, ms (measured with cost db; relative
                                 units with analytic costs, see dmuon/cost.h) */
    int64_t window_offset;    /* bytes, into the owner's window */
    size_t first_member;      /* members [first_member, first_member + n_members) */
    size_t n_members;
} dmuon_plan_unit;

/* A contiguous part of one parameter that belongs to a unit: matrices
 * [first_matrix, first_matrix + n_matrices) of parameter param. */
typedef struct {
    int32_t param;            /* index into dmuon_plan_params */
    int64_t first_matrix;
    int64_t n_matrices;
    int64_t layer_offset;     /* bytes, into the layer buffer */
} dmuon_plan_member;

/* One parameter as the plan records it.  Muon matrices: mat_m x mat_n is
 * the real matrix (out x in); transposed and layout say where matrix j lies
 * in the storage (dmuon_param of dmuon/model.h): DMUON_MAT_CONTIGUOUS with
 * transposed false is the plain case, elements [j*m*n, (j+1)*m*n) row-major
 * m x n; HALVES and INTERLEAVED are always transposed, with an even matrix
 * count, and no member splits a gate/up pair (2e, 2e+1).  The plan file
 * writes "transposed: true" and "layout: NAME" only where they differ from
 * the plain case (a file without them is the plain case). */
typedef struct {
    const char *name;
    int32_t layer;
    dmuon_role role;
    int64_t numel;
    int64_t matrices, mat_m, mat_n;
    bool transposed;              /* storage holds each matrix as [in, out] */
    dmuon_mat_layout layout;      /* where matrix j lies in the storage */
} dmuon_plan_param;

/* Balance figures (paper §3.3, Appendix B). */
typedef struct {
    int32_t ranks, nodes, gpus_per_node;
    size_t units;
    int64_t muon_matrices;
    double total_ns_ms;                   /* sum of unit costs */
    double busiest_ns_ms;                 /* max over ranks */
    double busiest_ns_over_mean;
    double lower_bound_ms;                /* lower bound on any plan's busiest
                                             NS (same unit as ns_ms): the
                                             largest of the largest unit,
                                             total / N and, for k >= 1 with
                                             n > kN, the sum of the k+1
                                             cheapest of the kN+1 most costly
                                             units (k+1 of them share a rank);
                                             for plans within the byte cap,
                                             also the byte-cap bound
                                             (plan.c: units of more than
                                             cap/(j+1) bytes fit j to a rank) */
    double busiest_ns_over_lower_bound;
    bool bound_optimal;                   /* busiest reaches the bound: no plan
                                             has a lower busiest NS (no plan
                                             within the byte cap, with
                                             bound_with_cap) */
    bool bound_with_cap;                  /* the bound counts the byte cap (a
                                             plan with no unit over it; the
                                             byte-cap bound of plan.c) */
    int64_t total_bytes;                  /* all unit bytes (P) */
    int64_t max_owner_bytes;              /* largest owner window */
    double heaviest_bytes_over_mean;
    double heaviest_rail_over_mean;       /* publish bytes per column / mean */
    int64_t max_rail_bytes;
    int64_t max_matrices_per_rank;
    double layer_root_over_largest_unit;  /* max over layers of (heaviest
                                             rank's bytes in the layer /
                                             layer's largest unit bytes) */
    int32_t worst_layer;                  /* layer of that maximum */
    size_t byte_cap_fallbacks;            /* units placed over the cap */
    int32_t busiest_rank, heaviest_rank, heaviest_rail;
} dmuon_plan_report;

/* Plans model for the cluster of opts.  Reads costs per opts->cost (for
 * DMUON_COST_DB, via dmuon_cost_table_load, whose errors it returns).
 * Errors: DMUON_EINVAL (nodes or gpus_per_node < 1, world size above
 * DMUON_PLAN_MAX_RANKS, epsilon < 0 or not finite, small_unit_bytes outside
 * 0..DMUON_PLAN_MAX_SMALL_UNIT_BYTES, a model with no Muon matrix),
 * DMUON_ENOTFOUND,
 * DMUON_EDB, DMUON_ENOMEM. */
dmuon_rc dmuon_plan_build(const dmuon_model *m, const dmuon_plan_opts *opts, dmuon_plan **out);

/* The cluster from what a user gave (plan_setup.c): with ranks > 0 (0: not
 * given), gpus_per_node becomes min(8, ranks) unless have_gpus, ranks must be
 * a multiple of it, and nodes = ranks / gpus_per_node (which must equal
 * o->nodes when have_nodes).  Then 1 <= nodes x gpus_per_node <= 2^20 is
 * checked.  Updates o->nodes and o->gpus_per_node.  Errors: DMUON_EINVAL
 * with a message that says which flag to change. */
dmuon_rc dmuon_plan_cluster_derive(dmuon_plan_opts *o, int64_t ranks, bool have_nodes,
                                   bool have_gpus);

/* One row of a comparison: a label (static string) and its plan (owned). */
typedef struct {
    const char *name;
    dmuon_plan *plan;
} dmuon_plan_variant;

/* The ablation set of dmuon-plan --compare (paper Appendix B): the base
 * options first ("default", or "as given" when base already holds an
 * ablation), then every ablation base does not already hold — no byte cap,
 * no layer spreading, no column balancing (HSDP), fused expert units (MoE
 * models), round-robin, and costs by element count and by m^2 n — each
 * judged by the base cost model (dmuon_plan_reevaluate).  No two variants
 * have the same options.  *out is a malloc'ed array of *n variants; free it
 * with dmuon_plan_variants_free.  Errors: those of dmuon_plan_build,
 * DMUON_ENOMEM. */
dmuon_rc dmuon_plan_ablations(const dmuon_model *m, const dmuon_plan_opts *base,
                              dmuon_plan_variant **out, size_t *n);

/* Frees n variants and the array; accepts NULL. */
void dmuon_plan_variants_free(dmuon_plan_variant *v, size_t n);

/* Writes the plan file (YAML, dmuon_plan: DMUON_PLAN_VERSION) atomically;
 * "-" writes to stdout.  The same plan gives a byte-identical file.
 * Errors: DMUON_EIO. */
dmuon_rc dmuon_plan_write(const dmuon_plan *p, const char *path);

/* Loads a plan file without trusting it.  Checks the version (DMUON_EVERSION
 * names the file's version and this build's), required fields
 * (DMUON_ENOTFOUND / DMUON_EPARSE with file, line and field), value ranges
 * (DMUON_EPARSE: owners, leaders and segment owners outside [0, ranks), a
 * segment dtype other than param_dtype, small_unit_bytes outside
 * 0..DMUON_PLAN_MAX_SMALL_UNIT_BYTES, a parameter's layout unknown or a
 * strided one not transposed or with an odd matrix count, a member
 * splitting a strided gate/up pair), and recomputes from the stored units
 * and options, in this order, what the file records (DMUON_EMISMATCH naming
 * the field): ranks = nodes x gpus_per_node; the unit count against
 * summary.units ("expected N units, found M"); the options digest; the units
 * digest; each unit's window_offset; each layer's segment table (naming the
 * layer and the first differing segment); the segments digest; HSDP leaders;
 * the summary figures (ratios to 1e-6, the file's 6 decimals).  The model
 * digest cannot be checked without the model: see dmuon_plan_match_model.
 * Errors also: DMUON_EIO, DMUON_ENOMEM. */
dmuon_rc dmuon_plan_load(const char *path, dmuon_plan **out);

/* dmuon_plan_load with flags: DMUON_PLAN_LOAD_NO_DIGESTS skips the
 * recomputations from the options digest on (digests, window offsets,
 * segment tables, leaders, summary; dmuon_plan_check then reports wrong
 * owners, windows and segments as violations), and reports owners, leaders
 * and segment owners outside [0, N) as DMUON_ECHECK instead of DMUON_EPARSE
 * (a violation for dmuon-verify: nothing can be derived from them). */
#define DMUON_PLAN_LOAD_NO_DIGESTS 1u
dmuon_rc dmuon_plan_load_ex(const char *path, unsigned flags, dmuon_plan **out);

/* Checks that plan p was made from model m (inventory digest, parameter
 * table: names, sizes, roles, matrix split, orientation and layout):
 * DMUON_EMISMATCH naming the first difference. */
dmuon_rc dmuon_plan_match_model(const dmuon_plan *p, const dmuon_model *m);

/* Frees the plan; accepts NULL. */
void dmuon_plan_free(dmuon_plan *p);

/* Cluster and options of the plan. */
int32_t dmuon_plan_ranks(const dmuon_plan *p);
int32_t dmuon_plan_nodes(const dmuon_plan *p);
int32_t dmuon_plan_gpus_per_node(const dmuon_plan *p);
dmuon_sharding dmuon_plan_sharding(const dmuon_plan *p);
int dmuon_plan_zero_stage(const dmuon_plan *p);
dmuon_dtype dmuon_plan_param_dtype(const dmuon_plan *p);
const char *dmuon_plan_cost_source(const dmuon_plan *p);  /* "db: DEVICE ..." or "flops (estimate)" ... */
const dmuon_plan_opts *dmuon_plan_options(const dmuon_plan *p); /* strings owned by p */

/* Layers (forward order, as in the model). */
size_t dmuon_plan_layer_count(const dmuon_plan *p);
const char *dmuon_plan_layer_name(const dmuon_plan *p, size_t i);
/* Bytes of layer i's buffer (its Muon parameters in param_dtype). */
int64_t dmuon_plan_layer_bytes(const dmuon_plan *p, size_t i);

/* The frozen segment table of layer i: *n segments in layer order, offsets
 * in bytes into the layer buffer, counts in elements of param_dtype,
 * window_offset in bytes into the owner's window.  Valid while p lives. */
const dmuon_segment *dmuon_plan_layer_segments(const dmuon_plan *p, size_t i, size_t *n);

/* Units, members and parameters; valid while p lives. */
const dmuon_plan_unit *dmuon_plan_units(const dmuon_plan *p, size_t *n);
const dmuon_plan_member *dmuon_plan_members(const dmuon_plan *p, size_t *n);
const dmuon_plan_param *dmuon_plan_params(const dmuon_plan *p, size_t *n);

/* The publish table of one rail (HSDP, paper §4.2 and Table 7): the units
 * whose column is `rail`, in the order their owners post them in a step
 * (the forward order of their layers; within a layer, unit order), as a
 * parameter table for dmuon_publish_create / dmuon_publish_layout:
 * (*segs)[j] = {owner, dtype = the plan's param_dtype, offset = bytes of
 * the units before it, count = elements}.  (*layer_of)[j] numbers the
 * layers 0, 1, ... in post order (non-decreasing; a new number whenever the
 * plan layer changes).  *n gets the unit count, *bytes their total in
 * bytes.  The caller frees *segs and *layer_of with free().  Errors:
 * DMUON_EINVAL (rail outside [0, gpus_per_node), or no unit on the rail:
 * the message names the rail), DMUON_ENOMEM. */
dmuon_rc dmuon_plan_rail_publish(const dmuon_plan *p, int rail, dmuon_segment **segs,
                                 int **layer_of, int *n, int64_t *bytes);

/* Bytes of rank r's owner window (sum of its units' bytes). */
int64_t dmuon_plan_window_bytes(const dmuon_plan *p, int32_t rank);

/* Row leader of unit u on node r: rank r * K + column (HSDP); for FSDP the
 * owner itself.  Returns -1 for an out-of-range u or r. */
int32_t dmuon_plan_leader(const dmuon_plan *p, size_t u, int32_t node);

/* The balance report (computed by build and by load). */
const dmuon_plan_report *dmuon_plan_get_report(const dmuon_plan *p);

/*
 * Checks the plan's invariants:
 *   1. every Muon matrix of every Muon parameter is in exactly one unit, and
 *      no AdamW parameter is in a unit;
 *   2. every unit has one owner in [0, N), node/column agree with it;
 *   3. the byte cap holds for every rank unless the plan was made without it
 *      or the unit that broke it had no feasible candidate (re-derived);
 *   4. no two units of one layer share a rank while the layer has no more
 *      units than ranks (when layer spreading is on);
 *   5. HSDP: every unit's leaders sit in the owner's column, one per node;
 *   6. windows: units of one owner do not overlap and fit the window;
 *      segment tables cover each layer buffer exactly, in order, with the
 *      owners and window offsets of their units.
 * Returns DMUON_OK, or DMUON_ECHECK with the first violation in the message;
 * *violations (if not NULL) receives the number of violations found.
 */
dmuon_rc dmuon_plan_check(const dmuon_plan *p, size_t *violations);

/* At most this many violations are listed by dmuon_plan_check_list. */
#define DMUON_PLAN_CHECK_LIST 20

/* dmuon_plan_check, also writing the first DMUON_PLAN_CHECK_LIST violations
 * into list (caller-owned, cap bytes; one per line, each ending in '\n';
 * NUL-terminated, cut at cap).  list may be NULL when cap is 0.  Returns and
 * errors as dmuon_plan_check. */
dmuon_rc dmuon_plan_check_list(const dmuon_plan *p, size_t *violations, char *list, size_t cap);

/* Re-evaluates p's NS figures with the unit costs of ref (a plan of the same
 * model and unit options, e.g. the same plan made with measured costs), so
 * that an assignment made under one cost model is judged by another (paper
 * Appendix B: assigning by element count, evaluating by measured time).
 * Updates p's report and cost description; owners are unchanged.
 * Errors: DMUON_EMISMATCH (the plans' units differ). */
dmuon_rc dmuon_plan_reevaluate(dmuon_plan *p, const dmuon_plan *ref);

/* The memory one rank needs under a plan is its layout's
 * (dmuon_layout_memory, dmuon/layout.h). */

/* ---------------------------------------------------------------- report -- */

/* Writes the human report (cluster, unit counts, balance table) to f. */
void dmuon_plan_print_report(const dmuon_plan *p, FILE *f);

/* Writes the report's keys (ranks, nodes, gpus_per_node, sharding, units,
 * muon_matrices, cost_source, busiest_ns_over_mean,
 * busiest_ns_over_lower_bound, heaviest_bytes_over_mean, max_owner_bytes,
 * heaviest_rail_over_mean, max_matrices_per_rank,
 * layer_root_over_largest_unit, ...) into the JSON object open in w. */
void dmuon_plan_report_json(const dmuon_plan *p, dmuon_json *w);

#endif
