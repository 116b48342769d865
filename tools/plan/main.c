/*
 * dmuon-plan — owner plans for Muon on sharded data parallelism.
 *
 *   dmuon-plan [plan] MODEL [options]   assign owners, print the balance report,
 *                                       write the plan file with -o
 *   dmuon-plan inspect MODEL            the model inventory
 *   dmuon-plan show PLAN                reload a plan file and print its report
 *
 * Flags are parsed here; everything else is libcore (dmuon/model.h,
 * dmuon/plan.h, dmuon/cost.h).
 */
#include <ctype.h>
#include <fnmatch.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "dmuon/cost.h"
#include "dmuon/ns.h"
#include "dmuon/version.h"
#include "dmuon/device.h"
#include "dmuon/io.h"
#include "dmuon/layout.h"
#include "dmuon/model.h"
#include "dmuon/netmodel.h"
#include "dmuon/plan.h"
#include "common/opt.h"

/* dmuon-plan's short options, for getopt_long and tool_bad_option */
#define PLAN_SHORTS "n:g:N:o:vh"
#define MAX_PATTERNS 64

static const char usage[] =
    "usage: dmuon-plan [plan] (MODEL | --model MODEL) [options]\n"
    "       dmuon-plan inspect (MODEL | --model MODEL) [--tensors] [--json] [--muon PAT] [--adamw PAT]\n"
    "                          [--router muon|adamw] [--root auto|one|split]\n"
    "       dmuon-plan show PLAN|- [--json] [--ranks] [--owners --json]\n"
    "       dmuon-plan --version\n"
    "\n"
    "Assigns every Muon matrix of MODEL one owner rank (LPT on Newton-Schulz time, then\n"
    "a local search of moves and swaps, with a byte-cap target and layer spreading; HSDP\n"
    "then lowers the heaviest rail without raising the busiest rank), prints the balance\n"
    "report, and with -o writes the plan file that libdmuon loads.\n"
    "\n"
    "MODEL: a Hugging Face config.json (llama, mistral, qwen2, qwen2_moe, gemma, gemma2,\n"
    "qwen3, qwen3_moe, mixtral, phi3, deepseek_v3, olmo2, gemma3_text, llama4_text, gpt_oss),\n"
    "a .safetensors file, a model.safetensors.index.json, a snapshot folder holding them\n"
    "(the file used is printed), or a dmuon YAML inventory (models/*.yaml), given as the\n"
    "argument or with --model.\n"
    "\n"
    "cluster:\n"
    "      --nodes R             nodes (default 1; -n is not used: it means iterations\n"
    "                            in dmuon-bench and ranks in mpirun)\n"
    "  -g, --gpus-per-node K     ranks per node (default 8)\n"
    "  -N, --ranks N             total ranks; sets nodes = N / K (K = min(8, N) unless -g)\n"
    "      --sharding fsdp|hsdp  (default fsdp)\n"
    "      --zero 2|3            ZeRO stage recorded in the plan (default 3)\n"
    "costs:\n"
    "      --cost db|flops|elements|m2n\n"
    "                            NS cost per matrix (default db: measured, from the cost\n"
    "                            database; flops is an analytic Gram-NS estimate)\n"
    "      --db PATH             cost database (default $DMUON_DB, else db/dmuon.sqlite of\n"
    "                            this build tree, else $XDG_DATA_HOME/dmuon/dmuon.sqlite)\n"
    "      --device cpu|cuda|NAME  device whose times to use (default: this machine's CPU;\n"
    "                            NAME: a device name stored in the database)\n"
    "      --variant V           NS variant: gram-pe5 (default), direct-pe5, gram-muon5,\n"
    "                            direct-muon5\n"
    "      --dtype fp32|bf16     NS precision (default fp32)\n"
    "      --probe-missing       measure the shapes the database lacks on this machine\n"
    "                            (--device cpu|cuda), store them, then plan (--cost db only)\n"
    "assignment:\n"
    "      --strategy lpt|round-robin   (default lpt)\n"
    "      --epsilon E           byte cap slack: the target is each rank <= (1+E) x mean\n"
    "                            bytes (default 0.1); a target, not a guarantee: a unit no\n"
    "                            allowed rank has room for goes over it (the report counts\n"
    "                            them and says why)\n"
    "      --no-byte-cap         assign by time alone\n"
    "      --no-layer-spread     allow units of one layer on one rank\n"
    "      --no-column-balance   HSDP: do not lower the heaviest rail after balancing ranks\n"
    "      --fuse-experts        one unit per expert tensor instead of one per expert matrix\n"
    "      --small-unit-bytes B  Muon parameters under B bytes share a per-layer unit\n"
    "                            (0 to 64T; default 16M; sizes: 16M = 16MB = 16MiB)\n"
    "      --param-dtype T       communication dtype for bytes and offsets (default bf16)\n"
    "      --router muon|adamw   MoE router weights (*.mlp.gate.weight, *router.weight,\n"
    "                            *shared_expert_gate.weight, Mixtral's\n"
    "                            *.block_sparse_moe.gate.weight): Muon (default) or AdamW\n"
    "memory (the report's, per rank; the plan file does not depend on them):\n"
    "      --line A|B|C|D        the runtime line (default D)\n"
    "      --prefetch 0|1        the runtime's prefetch depth (default 1)\n"
    "      --backend mpi|nccl|nccl-dev  whose control areas are counted (default mpi)\n"
    "      --owner-parts auto|persistent|per-layer  where owners keep a layer's gather\n"
    "                            source and reduce destination: owner windows, or\n"
    "                            working-space blocks while that layer's gather or\n"
    "                            reduction runs (default auto: the smaller pool)\n"
    "      --device-memory B     warn when a rank needs more than B bytes (e.g. 80G), naming\n"
    "                            what takes it\n"
    "model:\n"
    "      --muon PAT            force role muon for names matching PAT (fnmatch; repeatable;\n"
    "                            an invalid PAT is an error, one matching nothing a warning)\n"
    "      --adamw PAT           force role adamw (repeatable)\n"
    "      --fused-layout        config.json: fused 3-D expert tensors instead of per-expert\n"
    "      --root auto|one|split  tensors outside the numbered blocks: split into '(embed)'\n"
    "                            and '(head)', each gathered for its own forward and\n"
    "                            backward, or one '(root)' enclosing every layer (auto,\n"
    "                            the default: split for a config.json whose head is not\n"
    "                            tied to the embedding, one elsewhere)\n"
    "output:\n"
    "  -o, --out PLAN            write the plan file (atomically); '-': the plan on stdout,\n"
    "                            the report (or --json) on stderr\n"
    "      --compare             the ablations side by side in one table (writes no plan:\n"
    "                            not with -o)\n"
    "      --json                one JSON object on stdout instead of the table\n"
    "      --predict FILE        under the report, the step's predicted communication\n"
    "                            (network parameters FILE, dmuon-bench predict\n"
    "                            --save-params; see docs/netmodel.md)\n"
    "  -v, --verbose             error traces\n"
    "  -h, --help\n"
    "      --version             print the dmuon version\n"
    "\n"
    "inspect takes --tensors (every tensor: shape, dtype, role, layer, matrices, unit),\n"
    "--json, --muon, --adamw, --router, --fused-layout; show takes --json (PLAN '-' reads\n"
    "standard input), --ranks (per rank: NS, window bytes, matrices, memory) and --owners --json\n"
    "(every parameter's owner rank(s), unit, layer offset, bytes and window offset, for\n"
    "use outside dmuon); other flags are refused there.  A note on stderr says when there\n"
    "are more ranks than units (ranks that own nothing).\n"
    "\n"
    "report: busiest NS / lower bound compares with a bound no plan can beat (in the cost's\n"
    "unit: ms at the nominal 1 TFLOP/s for --cost flops; for a plan within the byte cap, no\n"
    "plan within it); \"optimal\" when it is reached, else what each constraint costs.\n"
    "A layer's root is the rank holding the most of the layer's bytes (it sends or receives\n"
    "that share in the layer's gather and reduction); layer root / largest unit 1.00 means\n"
    "no rank holds more of a layer than its largest unit.  A rail is the network link of\n"
    "one GPU column (local rank) that HSDP publishes on.\n"
    "\n"
    "exit: 0 ok, 1 a check failed, 2 bad input or usage, 3 runtime error\n";

typedef struct {
    const char *muon[MAX_PATTERNS], *adamw[MAX_PATTERNS];
    size_t n_muon, n_adamw;
    bool fused_layout, json, compare, verbose, probe_missing, tensors, show_ranks, show_owners;
    bool router_adamw;
    dmuon_root_mode root;           /* layers of the tensors outside the blocks */
    int64_t device_memory;          /* bytes, 0: not given */
    dmuon_layout_opts lay;          /* the memory report's line, prefetch, backend */
    dmuon_device_kind device_kind;
    const char *out;
    const char *predict;   /* network parameter file, or NULL */
    dmuon_net_params np;   /* its parameters, read before planning */
} cli;

static int fail(const cli *c, dmuon_rc rc)
{
    fprintf(stderr, "dmuon-plan: error: %s\n", dmuon_errmsg());
    if (c && c->verbose && *dmuon_errtrace())
        fprintf(stderr, "dmuon-plan: trace: %s\n", dmuon_errtrace());
    return dmuon_rc_exit_code(rc);
}

static int usage_error(const char *fmt, const char *arg)
{
    fprintf(stderr, "dmuon-plan: error: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n(see dmuon-plan --help)\n");
    return 2;
}

/* Warns (on f) about role patterns that match no tensor name of m. */
static void warn_unmatched(const cli *c, const dmuon_model *m, FILE *f)
{
    for (size_t k = 0; k < c->n_muon + c->n_adamw; k++) {
        bool mu = k < c->n_muon;
        const char *pat = mu ? c->muon[k] : c->adamw[k - c->n_muon];
        bool hit = false;
        for (size_t i = 0; !hit && i < dmuon_model_param_count(m); i++)
            hit = fnmatch(pat, dmuon_model_param(m, i)->name, 0) == 0;
        if (!hit)
            fprintf(f, "dmuon-plan: warning: --%s '%s' matches no tensor of %s\n",
                    mu ? "muon" : "adamw", pat, dmuon_model_source(m));
    }
}

/* The file to read for MODEL: a directory (a snapshot folder) is resolved,
 * and the file used is named on f.  Returns 0 or an exit code. */
static int model_file(const cli *c, const char *path, char *buf, size_t cap, const char **file,
                      FILE *f)
{
    dmuon_rc rc = dmuon_model_resolve(path, buf, cap);
    if (rc)
        return fail(c, rc);
    if (strcmp(buf, path))
        fprintf(f, "dmuon-plan: model directory %s: using %s\n", path, buf);
    *file = buf;
    return 0;
}

/* Notes (on f) on what the inventory keeps out of the plan. */
static void note_inventory(const dmuon_model *m, FILE *f)
{
    dmuon_model_stats s;
    dmuon_model_get_stats(m, &s);
    if (s.quantized)
        fprintf(f, "dmuon-plan: note: %zu tensor%s of %s %s stored quantized (integer, BOOL "
                        "or FP8 types): kept out of Muon, which orthogonalises dequantized "
                        "matrices; plan the BF16 checkpoint (or its config.json) to give them "
                        "Muon matrices\n",
                s.quantized, s.quantized == 1 ? "" : "s", dmuon_model_source(m),
                s.quantized == 1 ? "is" : "are");
    if (*dmuon_model_quantization(m))
        fprintf(f, "dmuon-plan: note: %s declares a quantized checkpoint (quant_method "
                        "'%s'): planned as its unquantized (%s) module layout, whose 2-D "
                        "weights are Muon matrices; the checkpoint's own tensors (its "
                        "safetensors files) plan its quantized tensors as AdamW\n",
                dmuon_model_source(m), dmuon_model_quantization(m),
                dmuon_dtype_name(dmuon_model_param_count(m) ? dmuon_model_param(m, 0)->dtype
                                                            : DMUON_BF16));
}

/* The plan units of each parameter, for inspect --tensors: a plan with
 * analytic costs on one rank (units do not depend on the cluster).  NULL
 * when the model cannot be planned (*why says so). */
static dmuon_plan *units_plan(const dmuon_model *m, char *why, size_t cap)
{
    dmuon_plan_opts o;
    dmuon_plan_opts_init(&o);
    o.cost = DMUON_COST_ELEMENTS;
    o.nodes = o.gpus_per_node = 1;
    dmuon_plan *p = NULL;
    if (dmuon_plan_build(m, &o, &p) != DMUON_OK) {
        snprintf(why, cap, "%s", dmuon_errmsg());
        dmuon_err_clear();
        return NULL;
    }
    return p;
}

static void shape_str(const dmuon_param *q, char *out, size_t cap)
{
    size_t w = 0;
    out[0] = '\0';
    for (int d = 0; d < q->ndim && w < cap; d++)
        w += (size_t)snprintf(out + w, cap - w, "%s%lld", d ? "x" : "", (long long)q->shape[d]);
}

static void print_tensors(const dmuon_model *m, const dmuon_plan *p, const char *why,
                          dmuon_json *w)
{
    size_t nu = 0, nm = 0;
    const dmuon_plan_unit *units = p ? dmuon_plan_units(p, &nu) : NULL;
    const dmuon_plan_member *mem = p ? dmuon_plan_members(p, &nm) : NULL;
    /* member -> unit, and the members of each parameter (counting sort) */
    size_t np = dmuon_model_param_count(m);
    size_t *unit_of = calloc(nm ? nm : 1, sizeof *unit_of);
    size_t *pstart = calloc(np + 1, sizeof *pstart), *byp = calloc(nm ? nm : 1, sizeof *byp);
    if (!unit_of || !pstart || !byp)
        nm = 0;   /* out of memory: list the tensors without their units */
    for (size_t u = 0; nm && u < nu; u++)
        for (size_t k = 0; k < units[u].n_members; k++)
            unit_of[units[u].first_member + k] = u;
    for (size_t k = 0; k < nm; k++)
        pstart[mem[k].param + 1]++;
    for (size_t i = 0; nm && i < np; i++)
        pstart[i + 1] += pstart[i];
    size_t *fill = calloc(np ? np : 1, sizeof *fill);
    if (!fill)
        nm = 0;
    for (size_t k = 0; k < nm; k++) {
        size_t q = (size_t)mem[k].param;
        byp[pstart[q] + fill[q]++] = k;
    }
    free(fill);
    if (w) {
        dmuon_json_key(w, "tensors");
        dmuon_json_begin_array(w);
    } else {
        printf("tensors (matrices: count x out x in; units from a one-rank plan%s%s):\n",
               p ? "" : "; none: ", p ? "" : why);
        printf("  %-56s %-14s %-7s %-5s %-5s %-22s %s\n", "name", "shape", "dtype", "role",
               "layer", "matrices", "unit");
    }
    for (size_t i = 0; i < dmuon_model_param_count(m); i++) {
        const dmuon_param *q = dmuon_model_param(m, i);
        char shp[128], mats[96] = "-";
        shape_str(q, shp, sizeof shp);
        if (q->role == DMUON_ROLE_MUON)
            snprintf(mats, sizeof mats, "%lld x %lldx%lld%s%s%s", (long long)q->matrices,
                     (long long)q->mat_m, (long long)q->mat_n, q->transposed ? " T" : "",
                     q->layout != DMUON_MAT_CONTIGUOUS ? " " : "",
                     q->layout != DMUON_MAT_CONTIGUOUS ? dmuon_mat_layout_name(q->layout) : "");
        size_t nunits = nm ? pstart[i + 1] - pstart[i] : 0;
        const char *first = nunits ? units[unit_of[byp[pstart[i]]]].name : NULL;
        const char *role = q->role == DMUON_ROLE_MUON ? "muon" : "adamw";
        const char *layer = dmuon_model_layer_name(m, (size_t)q->layer);
        if (w) {
            dmuon_json_begin_object(w);
            dmuon_json_kstr(w, "name", q->name);
            dmuon_json_key(w, "shape");
            dmuon_json_begin_array(w);
            for (int d = 0; d < q->ndim; d++)
                dmuon_json_int(w, q->shape[d]);
            dmuon_json_end_array(w);
            dmuon_json_kstr(w, "dtype", q->stored);
            dmuon_json_kstr(w, "role", role);
            dmuon_json_kstr(w, "layer", layer);
            dmuon_json_kint(w, "matrices", q->matrices);
            dmuon_json_kint(w, "m", q->mat_m);
            dmuon_json_kint(w, "n", q->mat_n);
            dmuon_json_kbool(w, "transposed", q->transposed);
            dmuon_json_kstr(w, "layout", dmuon_mat_layout_name(q->layout));
            dmuon_json_kbool(w, "expert", q->expert);
            dmuon_json_key(w, "units");
            dmuon_json_begin_array(w);
            for (size_t k = 0; k < nunits; k++)
                dmuon_json_str(w, units[unit_of[byp[pstart[i] + k]]].name);
            dmuon_json_end_array(w);
            dmuon_json_end_object(w);
        } else {
            char un[600];
            if (q->role != DMUON_ROLE_MUON)
                snprintf(un, sizeof un, "(adamw: even shards)");
            else if (!first)
                snprintf(un, sizeof un, "-");
            else if (nunits == 1)
                snprintf(un, sizeof un, "%s", first);
            else
                snprintf(un, sizeof un, "%s ... (%zu units)", first, nunits);
            printf("  %-56s %-14s %-7s %-5s %-5d %-22s %s\n", q->name, shp, q->stored, role,
                   q->layer, mats, un);
        }
    }
    if (w)
        dmuon_json_end_array(w);
    free(unit_of);
    free(pstart);
    free(byp);
}

/* MoE router weights (a gate matrix [experts, hidden] per layer). */
static const char *const router_patterns[] = {"*.mlp.gate.weight", "*router.weight",
                                              "*shared_expert_gate.weight",
                                              "*.block_sparse_moe.gate.weight"};
#define N_ROUTER (sizeof router_patterns / sizeof router_patterns[0])

/* The role patterns of the model options: the user's, then (--router adamw)
 * the router patterns as AdamW ones (a --muon pattern still wins). */
static dmuon_model_opts model_opts(const cli *c, const char **adamw)
{
    size_t n = 0;
    for (size_t i = 0; i < c->n_adamw; i++)
        adamw[n++] = c->adamw[i];
    for (size_t i = 0; c->router_adamw && i < N_ROUTER; i++)
        adamw[n++] = router_patterns[i];
    return (dmuon_model_opts){c->muon, c->n_muon, adamw, n, c->fused_layout, c->root};
}

/* ------------------------------------------------------------- inspect -- */

static void note_no_router(const cli *c, const dmuon_model *m, FILE *f);

static int cmd_inspect(const cli *c, const char *path)
{
    const char *adamw[MAX_PATTERNS + N_ROUTER];
    dmuon_model_opts mo = model_opts(c, adamw);
    dmuon_model *m;
    dmuon_shape_count *sh = NULL;
    size_t nsh = 0;
    char fbuf[4096], why[1024] = "";
    int ec = model_file(c, path, fbuf, sizeof fbuf, &path, stderr);
    if (ec)
        return ec;
    dmuon_rc rc = dmuon_model_load(path, &mo, &m);
    if (rc)
        return fail(c, rc);
    note_inventory(m, stderr);
    note_no_router(c, m, stderr);
    dmuon_plan *up = c->tensors ? units_plan(m, why, sizeof why) : NULL;
    if ((rc = dmuon_model_muon_shapes(m, &sh, &nsh))) {
        dmuon_model_free(m);
        return fail(c, rc);
    }
    warn_unmatched(c, m, stderr);
    dmuon_model_stats s;
    dmuon_model_get_stats(m, &s);
    int64_t adamw_el = s.elements - s.muon_elements, muon_bytes = 0;
    for (size_t i = 0; i < dmuon_model_param_count(m); i++) {
        const dmuon_param *q = dmuon_model_param(m, i);
        if (q->role == DMUON_ROLE_MUON)
            muon_bytes += q->numel * (int64_t)dmuon_dtype_size(q->dtype);
    }
    if (c->json) {
        dmuon_json w;
        dmuon_json_init(&w, stdout, false);
        dmuon_json_begin_object(&w);
        dmuon_json_kstr(&w, "model", path);
        dmuon_json_kstr(&w, "format", dmuon_model_format(m));
        dmuon_json_kint(&w, "tensors", (int64_t)s.tensors);
        dmuon_json_kint(&w, "two_d_tensors", (int64_t)s.two_d);
        dmuon_json_kint(&w, "muon_params", (int64_t)s.muon_params);
        dmuon_json_kint(&w, "adamw_params", (int64_t)s.adamw_params);
        dmuon_json_kint(&w, "muon_matrices", s.muon_matrices);
        dmuon_json_kint(&w, "expert_matrices", s.expert_matrices);
        dmuon_json_kint(&w, "elements", s.elements);
        dmuon_json_kint(&w, "muon_elements", s.muon_elements);
        dmuon_json_kint(&w, "adamw_elements", adamw_el);
        dmuon_json_kint(&w, "bytes", s.bytes);
        dmuon_json_kint(&w, "layers", (int64_t)s.layers);
        dmuon_json_key(&w, "muon_shapes");
        dmuon_json_begin_array(&w);
        for (size_t i = 0; i < nsh; i++) {
            dmuon_json_begin_object(&w);
            dmuon_json_kint(&w, "m", sh[i].m);
            dmuon_json_kint(&w, "n", sh[i].n);
            dmuon_json_kint(&w, "count", sh[i].count);
            dmuon_json_end_object(&w);
        }
        dmuon_json_end_array(&w);
        dmuon_json_kint(&w, "quantized_tensors", (int64_t)s.quantized);
        if (c->tensors) {
            dmuon_json_kstr(&w, "units_note", up ? "" : why);
            print_tensors(m, up, why, &w);
        }
        dmuon_json_end_object(&w);
    } else {
        printf("model: %s (%s)\n", path, dmuon_model_format(m));
        printf("  %-8s %9s %16s %12s\n", "role", "tensors", "elements", "MiB stored");
        printf("  %-8s %9zu %16lld %12.1f\n", "muon", s.muon_params, (long long)s.muon_elements,
               (double)muon_bytes / 1048576.0);
        printf("  %-8s %9zu %16lld %12.1f\n", "adamw", s.adamw_params, (long long)adamw_el,
               (double)(s.bytes - muon_bytes) / 1048576.0);
        printf("  %-8s %9zu %16lld %12.1f\n", "all", s.tensors, (long long)s.elements,
               (double)s.bytes / 1048576.0);
        printf("two-dimensional tensors: %zu; Muon matrices: %lld (%lld expert matrices); "
               "layers: %zu\n",
               s.two_d, (long long)s.muon_matrices, (long long)s.expert_matrices, s.layers);
        printf("distinct Muon shapes (m x n as stored, count):\n");
        for (size_t i = 0; i < nsh; i++)
            printf("  %7lld x %-7lld %6lld\n", (long long)sh[i].m, (long long)sh[i].n,
                   (long long)sh[i].count);
        if (c->tensors)
            print_tensors(m, up, why, NULL);
    }
    dmuon_plan_free(up);
    free(sh);
    dmuon_model_free(m);
    return 0;
}

/* ---------------------------------------------------------------- show -- */

static int report_memory(const cli *c, const dmuon_plan *p, FILE *f, dmuon_json *w);

/* show --owners: every parameter's owner rank(s) and where its matrices
 * lie (layer buffer offset, bytes, window offset); AdamW parameters are
 * evenly sharded and have no owner. */
static void show_owners(const dmuon_plan *p, dmuon_json *w)
{
    size_t nu, nm, np;
    const dmuon_plan_unit *u = dmuon_plan_units(p, &nu);
    const dmuon_plan_member *mb = dmuon_plan_members(p, &nm);
    const dmuon_plan_param *q = dmuon_plan_params(p, &np);
    int64_t dsz = (int64_t)dmuon_dtype_size(dmuon_plan_param_dtype(p));
    dmuon_json_key(w, "params");
    dmuon_json_begin_array(w);
    for (size_t i = 0; i < np; i++) {
        dmuon_json_begin_object(w);
        dmuon_json_kstr(w, "name", q[i].name);
        dmuon_json_kstr(w, "layer", dmuon_plan_layer_name(p, (size_t)q[i].layer));
        dmuon_json_kstr(w, "role", q[i].role == DMUON_ROLE_MUON ? "muon" : "adamw");
        dmuon_json_key(w, "owners");
        dmuon_json_begin_array(w);
        for (size_t k = 0; k < nu; k++)
            for (size_t j = 0; j < u[k].n_members; j++) {
                const dmuon_plan_member *m = &mb[u[k].first_member + j];
                if ((size_t)m->param != i)
                    continue;
                int64_t off = m->layer_offset - mb[u[k].first_member].layer_offset;
                dmuon_json_begin_object(w);
                dmuon_json_kint(w, "rank", u[k].owner);
                dmuon_json_kstr(w, "unit", u[k].name);
                dmuon_json_kint(w, "first_matrix", m->first_matrix);
                dmuon_json_kint(w, "matrices", m->n_matrices);
                dmuon_json_kint(w, "layer_offset", m->layer_offset);
                dmuon_json_kint(w, "bytes", m->n_matrices * q[i].mat_m * q[i].mat_n * dsz);
                dmuon_json_kint(w, "window_offset", u[k].window_offset + off);
                dmuon_json_end_object(w);
            }
        dmuon_json_end_array(w);
        dmuon_json_end_object(w);
    }
    dmuon_json_end_array(w);
}

/* show --ranks: per rank NS, window bytes, matrices and memory. */
static int show_ranks(const cli *c, const dmuon_plan *p, dmuon_json *w)
{
    int32_t N = dmuon_plan_ranks(p);
    size_t nu;
    const dmuon_plan_unit *u = dmuon_plan_units(p, &nu);
    double *ns = calloc((size_t)N, sizeof *ns);
    int64_t *mats = calloc((size_t)N, sizeof *mats);
    if (!ns || !mats) {
        free(ns);
        free(mats);
        fprintf(stderr, "dmuon-plan: error: out of memory\n");
        return 3;
    }
    for (size_t k = 0; k < nu; k++) {
        ns[u[k].owner] += u[k].ns_ms;
        mats[u[k].owner] += u[k].matrices;
    }
    if (w) {
        dmuon_json_key(w, "ranks_detail");
        dmuon_json_begin_array(w);
    } else {
        printf("%6s %12s %12s %9s %10s %10s %10s\n", "rank", "NS", "window MiB", "matrices",
               "state GiB", "least GiB", "total GiB");
    }
    int ec = 0;
    dmuon_layout *x = NULL;
    dmuon_rc lrc = dmuon_layout_build(p, &c->lay, &x);
    if (lrc)
        ec = fail(c, lrc);
    for (int32_t r = 0; r < N && !ec; r++) {
        dmuon_rc rc = dmuon_layout_set_rank(x, r);
        if (rc) {
            ec = fail(c, rc);
            break;
        }
        const dmuon_layout_memory m = x->mem;
        if (w) {
            dmuon_json_begin_object(w);
            dmuon_json_kint(w, "rank", r);
            dmuon_json_kdouble(w, "ns_ms", ns[r]);
            dmuon_json_kint(w, "window_bytes", dmuon_plan_window_bytes(p, r));
            dmuon_json_kint(w, "matrices", mats[r]);
            dmuon_json_kint(w, "optimizer_bytes", m.optimizer_bytes);
            dmuon_json_kint(w, "state_bytes", m.state_bytes);
            dmuon_json_kint(w, "least_bytes", m.least_bytes);
            dmuon_json_kint(w, "total_bytes", m.total_bytes);
            dmuon_json_end_object(w);
        } else {
            printf("%6d %12.4g %12.1f %9lld %10.2f %10.2f %10.2f\n", r, ns[r],
                   dmuon_plan_window_bytes(p, r) / 1048576.0, (long long)mats[r],
                   m.state_bytes / 1073741824.0, m.least_bytes / 1073741824.0,
                   m.total_bytes / 1073741824.0);
        }
    }
    if (w)
        dmuon_json_end_array(w);
    dmuon_layout_free(x);
    free(ns);
    free(mats);
    return ec;
}

static int cmd_show(const cli *c, const char *path)
{
    dmuon_plan *p;
    dmuon_rc rc = dmuon_plan_load(path, &p);
    if (rc)
        return fail(c, rc);
    if (c->show_owners && !c->json) {
        dmuon_plan_free(p);
        return usage_error("%s", "--owners prints JSON: add --json");
    }
    if (c->show_owners || (c->show_ranks && c->json)) {
        dmuon_json w;
        int ec = 0;
        dmuon_json_init(&w, stdout, false);
        dmuon_json_begin_object(&w);
        dmuon_json_kstr(&w, "plan", path);
        dmuon_json_kint(&w, "ranks", dmuon_plan_ranks(p));
        if (c->show_owners)
            show_owners(p, &w);
        if (c->show_ranks)
            ec = show_ranks(c, p, &w);
        dmuon_json_end_object(&w);
        dmuon_plan_free(p);
        return ec;
    }
    if (c->show_ranks) {
        printf("plan file: %s\n", path);
        int ec = show_ranks(c, p, NULL);
        dmuon_plan_free(p);
        return ec;
    }
    if (c->json) {
        dmuon_json w;
        dmuon_json_init(&w, stdout, false);
        dmuon_json_begin_object(&w);
        dmuon_json_kstr(&w, "plan", path);
        dmuon_plan_report_json(p, &w);
        int ec = report_memory(c, p, stdout, &w);
        dmuon_json_end_object(&w);
        dmuon_plan_free(p);
        return ec;
    }
    printf("plan file: %s\n", path);
    dmuon_plan_print_report(p, stdout);
    int ec = report_memory(c, p, stdout, NULL);
    dmuon_plan_free(p);
    return ec;
}

/* ---------------------------------------------------------------- plan -- */

/* The constraints an ablation drops: its variant name, what it is. */
static const char *const constraint_names[][2] = {{"no-byte-cap", "byte cap"},
                                                  {"no-layer-spread", "layer spreading"},
                                                  {"no-column-balance", "column balancing"}};

static void print_cost(FILE *f, const char *what, const dmuon_plan *with, const dmuon_plan *without)
{
    const dmuon_plan_report *a = dmuon_plan_get_report(with), *b = dmuon_plan_get_report(without);
    /* the plan with the constraint is also a plan without it: a relaxed
     * plan that is worse is the search's miss, not a negative cost */
    if (b->busiest_ns_over_mean > a->busiest_ns_over_mean)
        fprintf(f, "  %s: costs nothing (busiest NS %.3f with it; the search without it "
                   "reached %.3f), heaviest rail %.3f -> %.3f without it\n",
                what, a->busiest_ns_over_mean, b->busiest_ns_over_mean,
                a->heaviest_rail_over_mean, b->heaviest_rail_over_mean);
    else
        fprintf(f, "  %s: busiest NS %.3f -> %.3f, heaviest rail %.3f -> %.3f without it\n", what,
                a->busiest_ns_over_mean, b->busiest_ns_over_mean, a->heaviest_rail_over_mean,
                b->heaviest_rail_over_mean);
}

/* One "constraint_costs" entry: the figures with and without it; costs_nothing
 * when the relaxed plan is not less busy (see print_cost). */
static void json_cost(dmuon_json *w, const char *what, const dmuon_plan *with,
                      const dmuon_plan *without)
{
    const dmuon_plan_report *a = dmuon_plan_get_report(with), *b = dmuon_plan_get_report(without);
    dmuon_json_begin_object(w);
    dmuon_json_kstr(w, "constraint", what);
    dmuon_json_kdouble(w, "busiest_ns_over_mean", a->busiest_ns_over_mean);
    dmuon_json_kdouble(w, "busiest_ns_over_mean_without", b->busiest_ns_over_mean);
    dmuon_json_kdouble(w, "heaviest_rail_over_mean", a->heaviest_rail_over_mean);
    dmuon_json_kdouble(w, "heaviest_rail_over_mean_without", b->heaviest_rail_over_mean);
    dmuon_json_kbool(w, "costs_nothing", b->busiest_ns_over_mean >= a->busiest_ns_over_mean);
    dmuon_json_end_object(w);
}

/* When the busiest rank is more than 1% over the bound: what each
 * constraint the plan keeps costs (the plan rebuilt without it). */
static int explain_gap(const cli *c, const dmuon_model *m, const dmuon_plan_opts *o,
                       const dmuon_plan *p, FILE *f)
{
    if (dmuon_plan_get_report(p)->busiest_ns_over_lower_bound <= 1.01 ||
        o->strategy != DMUON_STRATEGY_LPT)
        return 0;
    fprintf(f, "\n  busiest NS is %.3f x the bound; what each constraint costs:\n",
            dmuon_plan_get_report(p)->busiest_ns_over_lower_bound);
    for (int k = 0; k < 3; k++) {
        dmuon_plan_opts q = *o;
        bool *flag = k == 0 ? &q.byte_cap : k == 1 ? &q.layer_spread : &q.column_balance;
        if (!*flag || (k == 2 && q.sharding != DMUON_SHARD_HSDP))
            continue;
        *flag = false;
        dmuon_plan *v = NULL;
        dmuon_rc rc = dmuon_plan_build(m, &q, &v);
        if (rc)
            return fail(c, rc);
        print_cost(f, constraint_names[k][1], p, v);
        dmuon_plan_free(v);
    }
    return 0;
}

static int cmd_compare(const cli *c, const dmuon_model *m, const dmuon_plan_opts *base)
{
    dmuon_plan_variant *v = NULL;
    size_t nv = 0;
    dmuon_rc rc = dmuon_plan_ablations(m, base, &v, &nv);
    if (rc)
        return fail(c, rc);
    if (c->json) {
        dmuon_json w;
        dmuon_json_init(&w, stdout, false);
        dmuon_json_begin_object(&w);
        dmuon_json_key(&w, "variants");
        dmuon_json_begin_array(&w);
        for (size_t i = 0; i < nv; i++) {
            dmuon_json_begin_object(&w);
            dmuon_json_kstr(&w, "variant", v[i].name);
            dmuon_plan_report_json(v[i].plan, &w);
            dmuon_json_end_object(&w);
        }
        dmuon_json_end_array(&w);
        /* what each constraint costs: the first variant against the one
         * without it, as in the text */
        dmuon_json_key(&w, "constraint_costs");
        dmuon_json_begin_array(&w);
        for (size_t k = 0; k < 3; k++)
            for (size_t i = 1; i < nv; i++)
                if (!strcmp(v[i].name, constraint_names[k][0]))
                    json_cost(&w, constraint_names[k][1], v[0].plan, v[i].plan);
        dmuon_json_end_array(&w);
        dmuon_json_end_object(&w);
    } else {
        const dmuon_plan_opts *o = base;
        printf("ablations of %s on %d ranks (%d x %d, %s); NS figures by %s\n",
               dmuon_model_source(m), o->nodes * o->gpus_per_node, o->nodes, o->gpus_per_node,
               dmuon_sharding_name(o->sharding), dmuon_plan_cost_source(v[0].plan));
        if (strcmp(v[0].name, "default"))
            printf("as given:%s%s%s%s%s (ablations already given are not repeated)\n",
                   o->byte_cap ? "" : " --no-byte-cap", o->layer_spread ? "" : " --no-layer-spread",
                   o->sharding == DMUON_SHARD_HSDP && !o->column_balance ? " --no-column-balance" : "",
                   o->fuse_experts ? " --fuse-experts" : "",
                   o->strategy == DMUON_STRATEGY_ROUND_ROBIN ? " --strategy round-robin" : "");
        printf("%-18s %7s %9s %9s %9s %10s %9s %8s %9s\n", "variant", "units", "ns/mean",
               "ns/bound", "bytes/mn", "max MiB", "rail/mn", "mat/rk", "root/unit");
        for (size_t i = 0; i < nv; i++) {
            const dmuon_plan_report *r = dmuon_plan_get_report(v[i].plan);
            printf("%-18s %7zu %9.3f %9.3f %9.3f %10.1f %9.3f %8lld %9.2f\n", v[i].name,
                   r->units, r->busiest_ns_over_mean, r->busiest_ns_over_lower_bound,
                   r->heaviest_bytes_over_mean, (double)r->max_owner_bytes / 1048576.0,
                   r->heaviest_rail_over_mean, (long long)r->max_matrices_per_rank,
                   r->layer_root_over_largest_unit);
        }
        /* what each constraint costs: the default against the variant
         * without it */
        for (size_t k = 0; k < 3; k++)
            for (size_t i = 1; i < nv; i++)
                if (!strcmp(v[i].name, constraint_names[k][0]))
                    print_cost(stdout, constraint_names[k][1], v[0].plan, v[i].plan);
    }
    dmuon_plan_variants_free(v, nv);
    return 0;
}

static void probe_progress(size_t done, size_t total, const dmuon_cost_row *row, void *ctx)
{
    (void)ctx;
    fprintf(stderr, "dmuon-plan: probed %zu/%zu: %lldx%lld %.4g ms\n", done, total,
            (long long)row->m, (long long)row->n, row->median_ms);
}

/* Router weights of m: how many, and how many of them on Muon. */
static size_t count_router(const dmuon_model *m, size_t *muon)
{
    size_t n = 0;
    *muon = 0;
    for (size_t i = 0; i < dmuon_model_param_count(m); i++) {
        const dmuon_param *q = dmuon_model_param(m, i);
        for (size_t k = 0; k < N_ROUTER; k++)
            if (fnmatch(router_patterns[k], q->name, 0) == 0) {
                n++;
                *muon += q->role == DMUON_ROLE_MUON;
                break;
            }
    }
    return n;
}

/* A note (on f) when --router adamw is given and the model has no router
 * weight: the flag then changes nothing. */
static void note_no_router(const cli *c, const dmuon_model *m, FILE *f)
{
    size_t muon;
    if (c->router_adamw && count_router(m, &muon) == 0)
        fprintf(f, "dmuon-plan: note: --router adamw: %s has no router weight "
                   "(*.mlp.gate.weight, *router.weight, *shared_expert_gate.weight, "
                   "*.block_sparse_moe.gate.weight); "
                   "nothing changes\n", dmuon_model_source(m));
}

/* Prints the role the router weights got (after the report). */
static void note_router(const cli *c, const dmuon_model *m, FILE *f)
{
    size_t muon, n = count_router(m, &muon);
    if (n)
        fprintf(f, "  router weights: %zu tensor%s (*.mlp.gate.weight, *router.weight, "
                   "*shared_expert_gate.weight,\n  *.block_sparse_moe.gate.weight): %zu on Muon, %zu on AdamW (--router %s%s)\n",
                n, n == 1 ? "" : "s", muon, n - muon, c->router_adamw ? "adamw" : "muon",
                c->router_adamw ? "" : ", the default");
}

/* The memory of the rank that needs the most under p, with c's line,
 * prefetch and backend (dmuon/layout.h). */
static dmuon_rc busiest_layout(const cli *c, const dmuon_plan *p, dmuon_layout **x)
{
    dmuon_layout_opts o = c->lay;
    o.zero_stage = 0;   /* the plan's */
    return dmuon_layout_build_busiest(p, &o, x);
}

/* The memory table under the report (to f), or the "memory" object (w). */
static int report_memory(const cli *c, const dmuon_plan *p, FILE *f, dmuon_json *w)
{
    dmuon_layout *x = NULL;
    dmuon_rc rc = busiest_layout(c, p, &x);
    if (rc)
        return fail(c, rc);
    if (w) {
        dmuon_json_key(w, "memory");
        dmuon_json_begin_object(w);
        dmuon_layout_memory_json(x, w);
        dmuon_json_end_object(w);
    } else {
        dmuon_layout_print_memory(x, f);
    }
    dmuon_layout_free(x);
    return 0;
}

/* Warns (on f) when the busiest rank's memory passes --device-memory. */
static int warn_memory(const cli *c, const dmuon_plan *p, FILE *f)
{
    if (!c->device_memory)
        return 0;
    dmuon_layout *x = NULL;
    dmuon_rc rc = busiest_layout(c, p, &x);
    if (rc)
        return fail(c, rc);
    const dmuon_layout_memory *m = &x->mem;
    if (m->total_bytes > c->device_memory) {
        int zs = x->opts.zero_stage;
        double G = 1073741824.0;
        fprintf(f,
                "dmuon-plan: warning: rank %d needs %.2f GiB at every step (the first "
                "included), over --device-memory %.2f GiB:\n"
                "  %.2f optimizer state + %.2f windows + %.2f working space + %.2f control "
                "areas;\n"
                "  the working space holds at most %.2f gathered parameters%s, %.2f F32 "
                "gradients, %.2f F32 weight views, %.2f step scratch and Newton-Schulz;\n"
                "  the largest gathered layer is '%s' (%.2f GiB) (%s)\n",
                (int)x->opts.rank, m->total_bytes / G, c->device_memory / G,
                m->state_bytes / G, m->window_space_bytes / G, m->work_bytes / G,
                m->ctrl_bytes / G, m->param_live_bytes / G,
                zs == 2 ? " (ZeRO-2: every layer)" : "", m->grad_live_bytes / G,
                m->view_live_bytes / G, m->step_bytes / G,
                m->largest_layer >= 0 ? dmuon_plan_layer_name(p, (size_t)m->largest_layer) : "-",
                m->largest_layer_bytes / G,
                zs == 2 ? "more ranks, ZeRO-3, or a smaller layer"
                        : "more ranks or a smaller layer");
    }
    dmuon_layout_free(x);
    return 0;
}

/* --predict FILE: the plan's step under the network parameters of FILE
 * (dmuon/netmodel.h), into the open JSON object w, or else as a table on f. */
static dmuon_rc predict_step(const cli *c, const dmuon_plan *p, FILE *f, dmuon_json *w)
{
    dmuon_net_plan_pred r;
    DMUON_TRY(dmuon_net_plan_predict(p, &c->np, NULL, &r));
    if (w) {
        dmuon_json_kstr(w, "params", c->predict);
        dmuon_net_plan_json(&r, w);
    } else {
        fprintf(f, "\npredicted with %s:\n", c->predict);
        dmuon_net_plan_print(&r, f);
    }
    dmuon_net_plan_pred_free(&r);
    return DMUON_OK;
}

/* A note (on f) when some ranks own no unit. */
static void note_few_units(const dmuon_plan *p, FILE *f)
{
    const dmuon_plan_report *r = dmuon_plan_get_report(p);
    if ((int64_t)r->units < r->ranks)
        fprintf(f, "dmuon-plan: note: %d ranks but only %zu unit%s: %lld rank%s own no "
                "Muon matrix (empty owner windows; fewer ranks, or --small-unit-bytes 0 for "
                "more units)\n", r->ranks, r->units, r->units == 1 ? "" : "s",
                (long long)(r->ranks - (int64_t)r->units),
                r->ranks - (int64_t)r->units == 1 ? "" : "s");
}

/* "notes": the messages in text, one string each (a message starts with
 * "dmuon-plan: "; its indented lines belong to it), prefix dropped. */
static void json_notes(dmuon_json *w, const char *text)
{
    static const char pre[] = "dmuon-plan: ";
    dmuon_json_key(w, "notes");
    dmuon_json_begin_array(w);
    const char *q = text;
    while (*q) {
        const char *e = q;
        do {   /* to the next line that starts a message */
            e = strchr(e, '\n');
            e = e ? e + 1 : q + strlen(q);
        } while (*e && strncmp(e, pre, sizeof pre - 1));
        const char *b = strncmp(q, pre, sizeof pre - 1) ? q : q + sizeof pre - 1;
        size_t len = (size_t)(e - b);
        while (len && b[len - 1] == '\n')
            len--;
        char *one = strndup(b, len);
        dmuon_json_str(w, one ? one : "");
        free(one);
        q = e;
    }
    dmuon_json_end_array(w);
}

/* Closes the notes stream of cmd_plan (a memory stream when into_json) and
 * frees its buffer: *buf is read after fclose, which may move it. */
static void close_notes(FILE *notes, char **buf, bool into_json)
{
    if (into_json) {
        fclose(notes);
        free(*buf);
        *buf = NULL;
    }
}

static int cmd_plan(const cli *c, const char *path, dmuon_plan_opts *o)
{
    const char *adamw[MAX_PATTERNS + N_ROUTER];
    dmuon_model_opts mo = model_opts(c, adamw);
    dmuon_model *m;
    dmuon_plan *p = NULL;
    static char fbuf[4096];
    /* with -o - --json the report is stderr's JSON document: notes and
     * warnings go into its "notes" array instead of onto stderr */
    bool into_json = c->json && c->out && !strcmp(c->out, "-") && !c->compare;
    char *nbuf = NULL;
    size_t nlen = 0;
    FILE *notes = into_json ? open_memstream(&nbuf, &nlen) : stderr;
    if (!notes)
        return fail(c, DMUON_FAIL(DMUON_ENOMEM, "out of memory"));
    int fec = model_file(c, path, fbuf, sizeof fbuf, &path, notes);
    if (fec) {
        close_notes(notes, &nbuf, into_json);
        return fec;
    }
    dmuon_rc rc = dmuon_model_load(path, &mo, &m);
    if (rc) {
        close_notes(notes, &nbuf, into_json);
        return fail(c, rc);
    }
    warn_unmatched(c, m, notes);
    note_inventory(m, notes);
    note_no_router(c, m, notes);
    o->model_path = path;
    if (c->probe_missing && o->cost == DMUON_COST_DB) {
        static char device[128];
        size_t n = 0;
        rc = dmuon_cost_probe_missing(m, &o->cost_src, c->device_kind, probe_progress, NULL,
                                      device, &n);
        if (rc != DMUON_OK)
            goto out;
        if (n)
            fprintf(stderr, "dmuon-plan: %zu missing shape%s measured on '%s'\n", n,
                    n == 1 ? "" : "s", device);
        else
            fprintf(stderr, "dmuon-plan: no shape missing on '%s'\n", device);
        o->cost_src.device = device;
    }
    if (c->compare) {
        int ec = cmd_compare(c, m, o);
        dmuon_model_free(m);
        return ec;
    }
    int wec = 0;
    if ((rc = dmuon_plan_build(m, o, &p)) != DMUON_OK)
        goto out;
    if (dmuon_plan_sharding(p) == DMUON_SHARD_HSDP && dmuon_plan_nodes(p) == 1)
        fprintf(notes, "dmuon-plan: warning: HSDP on one node has no replicas: the plan is "
                        "FSDP's; give --nodes R (or -N with -g) for R > 1 nodes\n");
    if (c->out && (rc = dmuon_plan_write(p, c->out)) != DMUON_OK)
        goto out;
    /* with -o - the plan is stdout's only content: the report goes to stderr */
    FILE *rep = c->out && !strcmp(c->out, "-") ? stderr : stdout;
    if (c->json) {
        /* the notes first, so that the JSON document is stderr's last */
        if ((wec = warn_memory(c, p, notes)) == 0)
            note_few_units(p, notes);
        dmuon_json w;
        dmuon_json_init(&w, rep, false);
        dmuon_json_begin_object(&w);
        dmuon_plan_report_json(p, &w);
        if ((wec = report_memory(c, p, rep, &w)) != 0) {
            dmuon_json_end_object(&w);
            close_notes(notes, &nbuf, into_json);
            dmuon_plan_free(p);
            dmuon_model_free(m);
            return wec;
        }
        size_t rmuon, rn = count_router(m, &rmuon);
        dmuon_json_kint(&w, "router_tensors", (int64_t)rn);
        dmuon_json_kint(&w, "router_tensors_on_muon", (int64_t)rmuon);
        dmuon_json_kstr(&w, "plan_file", c->out ? c->out : "");
        if (c->predict) {
            dmuon_json_key(&w, "predicted");
            dmuon_json_begin_object(&w);
            rc = predict_step(c, p, rep, &w);
            dmuon_json_end_object(&w);
        }
        if (into_json) {
            fflush(notes);
            json_notes(&w, nbuf ? nbuf : "");
        }
        dmuon_json_end_object(&w);
        if (rc != DMUON_OK)
            goto out;
    } else {
        dmuon_plan_print_report(p, rep);
        int gec = report_memory(c, p, rep, NULL);
        if (!gec)
            gec = explain_gap(c, m, o, p, rep);
        if (gec) {
            dmuon_plan_free(p);
            dmuon_model_free(m);
            return gec;
        }
        if (c->out && rep == stderr)
            fprintf(rep, "\nplan written to standard output\n");
        else if (c->out)
            fprintf(rep, "\nplan written to %s\n", c->out);
        else
            fprintf(rep, "\n(no plan file written; add -o PLAN)\n");
    }
    if (!c->json) {
        note_router(c, m, rep);
        if ((wec = warn_memory(c, p, stderr)) == 0)
            note_few_units(p, stderr);
    }
    if (wec) {
        close_notes(notes, &nbuf, into_json);
        dmuon_plan_free(p);
        dmuon_model_free(m);
        return wec;
    }
    if (c->predict && !c->json && (rc = predict_step(c, p, rep, NULL)) != DMUON_OK)
        goto out;
out:
    close_notes(notes, &nbuf, into_json);
    dmuon_plan_free(p);
    dmuon_model_free(m);
    return rc ? fail(c, rc) : 0;
}

/* ---------------------------------------------------------------- main -- */

enum {
    O_NODES = 255, O_SHARDING = 256, O_ZERO, O_COST, O_DB, O_DEVICE, O_VARIANT, O_DTYPE, O_PROBE, O_STRATEGY,
    O_EPS, O_NOCAP, O_NOSPREAD, O_NOCOL, O_FUSE, O_SMALL, O_PDTYPE, O_MUON, O_ADAMW, O_LAYOUT,
    O_COMPARE, O_JSON, O_VERSION, O_TENSORS, O_MODEL, O_ROUTER, O_DEVMEM, O_PERRANK, O_OWNERS, O_PREDICT,
    O_LINE, O_PREFETCH, O_BACKEND, O_ROOT, O_OWNER_PARTS
};

/* The long name of the option getopt_long just returned. */
static const char *opt_name(const struct option *opts, int li, int ch)
{
    if (li >= 0)
        return opts[li].name;
    for (const struct option *o = opts; o->name; o++)
        if (o->val == ch)
            return o->name;
    return "?";
}

/* Options that inspect (and show) accept; everything else is refused there. */
static bool applies_to(const char *cmd, const char *name)
{
    static const char *const common[] = {"json", "verbose", "help", "version"};
    static const char *const model[] = {"muon", "adamw", "fused-layout", "tensors", "model",
                                        "router", "root"};
    for (size_t i = 0; i < 4; i++)
        if (!strcmp(name, common[i]))
            return true;
    if (!strcmp(cmd, "show") && (!strcmp(name, "per-rank") || !strcmp(name, "owners") ||
                                 !strcmp(name, "line") || !strcmp(name, "prefetch") ||
                                 !strcmp(name, "backend") || !strcmp(name, "owner-parts")))
        return true;
    if (!strcmp(cmd, "inspect"))
        for (size_t i = 0; i < 7; i++)
            if (!strcmp(name, model[i]))
                return true;
    return false;
}


static int tool_main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"nodes", required_argument, 0, O_NODES},
        {"gpus-per-node", required_argument, 0, 'g'},
        {"ranks", required_argument, 0, 'N'},
        {"sharding", required_argument, 0, O_SHARDING},
        {"zero", required_argument, 0, O_ZERO},
        {"cost", required_argument, 0, O_COST},
        {"db", required_argument, 0, O_DB},
        {"device", required_argument, 0, O_DEVICE},
        {"variant", required_argument, 0, O_VARIANT},
        {"dtype", required_argument, 0, O_DTYPE},
        {"probe-missing", no_argument, 0, O_PROBE},
        {"strategy", required_argument, 0, O_STRATEGY},
        {"epsilon", required_argument, 0, O_EPS},
        {"no-byte-cap", no_argument, 0, O_NOCAP},
        {"no-layer-spread", no_argument, 0, O_NOSPREAD},
        {"no-column-balance", no_argument, 0, O_NOCOL},
        {"fuse-experts", no_argument, 0, O_FUSE},
        {"small-unit-bytes", required_argument, 0, O_SMALL},
        {"param-dtype", required_argument, 0, O_PDTYPE},
        {"muon", required_argument, 0, O_MUON},
        {"adamw", required_argument, 0, O_ADAMW},
        {"fused-layout", no_argument, 0, O_LAYOUT},
        {"out", required_argument, 0, 'o'},
        {"compare", no_argument, 0, O_COMPARE},
        {"json", no_argument, 0, O_JSON},
        {"tensors", no_argument, 0, O_TENSORS},
        {"verbose", no_argument, 0, 'v'},
        {"help", no_argument, 0, 'h'},
        {"version", no_argument, 0, O_VERSION},
        {"model", required_argument, 0, O_MODEL},
        {"router", required_argument, 0, O_ROUTER},
        {"device-memory", required_argument, 0, O_DEVMEM},
        {"per-rank", no_argument, 0, O_PERRANK},
        {"owners", no_argument, 0, O_OWNERS},
        {"predict", required_argument, 0, O_PREDICT},
        {"line", required_argument, 0, O_LINE},
        {"prefetch", required_argument, 0, O_PREFETCH},
        {"backend", required_argument, 0, O_BACKEND},
        {"owner-parts", required_argument, 0, O_OWNER_PARTS},
        {"root", required_argument, 0, O_ROOT},
        {0, 0, 0, 0},
    };
    cli c = {0};
    dmuon_layout_opts_init(&c.lay);
    dmuon_plan_opts o;
    dmuon_plan_opts_init(&o);
    int64_t ranks = 0, v;
    bool have_k = false, have_n = false;
    const char *flags_seen[64];
    size_t nflags = 0;
    char devbuf[160], err[512];
    const char *device = NULL, *model_flag = NULL, *db_flag = NULL;
    int ch, li = -1;
    opterr = 0;
    /* "show PLAN --ranks" lists the ranks; elsewhere --ranks N is the
     * world size */
    for (int i = 2; argc > 1 && !strcmp(argv[1], "show") && i < argc; i++)
        if (!strcmp(argv[i], "--ranks"))
            argv[i] = (char *)"--per-rank";
    tool_cleanup_on_signal();
#define NUM(flag, lo, hi, dst)                                                         \
    do {                                                                               \
        if (tool_parse_int(flag, optarg, lo, hi, &v, err, sizeof err))                 \
            return usage_error("%s", err);                                             \
        dst = v;                                                                       \
    } while (0)
    while ((ch = getopt_long(argc, argv, PLAN_SHORTS, opts, &li)) != -1) {
        if (ch != '?' && ch != ':' && nflags < 64)
            flags_seen[nflags++] = opt_name(opts, li, ch);
        li = -1;
        switch (ch) {
        case 'n':
            return usage_error("%s", "-n is not a dmuon-plan flag (it means iterations in "
                                     "dmuon-bench and ranks in mpirun): give --nodes R or "
                                     "--ranks N");
        case O_NODES:
            NUM("--nodes", 1, DMUON_PLAN_MAX_RANKS, o.nodes);
            have_n = true;
            break;
        case 'g':
            NUM("--gpus-per-node", 1, DMUON_PLAN_MAX_RANKS, o.gpus_per_node);
            have_k = true;
            break;
        case 'N':
            NUM("--ranks", 1, DMUON_PLAN_MAX_RANKS, ranks);
            break;
        case O_MODEL:
            if (model_flag)
                return usage_error("%s", "--model given twice: plan one model per run");
            model_flag = optarg;
            break;
        case O_SHARDING:
            if (dmuon_sharding_parse(optarg, &o.sharding))
                return usage_error("--sharding '%s': expected fsdp or hsdp", optarg);
            break;
        case O_ZERO:
            NUM("--zero", 2, 3, o.zero_stage);
            break;
        case O_COST:
            if (dmuon_cost_kind_parse(optarg, &o.cost))
                return usage_error("--cost '%s': expected db, flops, elements or m2n", optarg);
            break;
        case O_DB:
            o.cost_src.db_path = db_flag = optarg;
            break;
        case O_DEVICE:
            device = optarg;
            break;
        case O_VARIANT: {
            dmuon_ns_opts ns;
            dmuon_ns_opts_init(&ns);
            if (dmuon_ns_opts_set_variant(&ns, tool_lower(optarg)) != DMUON_OK) {
                fprintf(stderr, "dmuon-plan: error: --variant: %s\n(see dmuon-plan --help)\n",
                        dmuon_errmsg());
                return 2;
            }
            o.cost_src.variant = optarg;
            break;
        }
        case O_DTYPE:
            if (strcasecmp(optarg, "fp32") && strcasecmp(optarg, "bf16"))
                return usage_error("--dtype '%s': expected fp32 or bf16", optarg);
            o.cost_src.dtype = strcasecmp(optarg, "fp32") ? "bf16" : "fp32";
            break;
        case O_PROBE:
            c.probe_missing = true;
            break;
        case O_STRATEGY:
            if (dmuon_strategy_parse(optarg, &o.strategy))
                return usage_error("--strategy '%s': expected lpt or round-robin", optarg);
            break;
        case O_EPS:
            if (tool_parse_double("--epsilon", optarg, 0, 100, &o.epsilon, err, sizeof err))
                return usage_error("%s", err);
            break;
        case O_NOCAP:
            o.byte_cap = false;
            break;
        case O_NOSPREAD:
            o.layer_spread = false;
            break;
        case O_NOCOL:
            o.column_balance = false;
            break;
        case O_FUSE:
            o.fuse_experts = true;
            break;
        case O_SMALL:
            if (tool_parse_size("--small-unit-bytes", optarg, 0, DMUON_PLAN_MAX_SMALL_UNIT_BYTES,
                                &o.small_unit_bytes, err, sizeof err))
                return usage_error("%s", err);
            break;
        case O_PDTYPE:
            if (dmuon_dtype_parse(optarg, &o.param_dtype))
                return usage_error("--param-dtype '%s': expected bf16, f16 or f32", optarg);
            break;
        case O_MUON:
        case O_ADAMW: {
            bool mu = ch == O_MUON;
            size_t *n = mu ? &c.n_muon : &c.n_adamw;
            if (*n == MAX_PATTERNS)
                return usage_error("too many --%s patterns (at most 64)", mu ? "muon" : "adamw");
            if (dmuon_model_pattern_check(optarg) != DMUON_OK) {
                fprintf(stderr, "dmuon-plan: error: --%s: %s\n(see dmuon-plan --help)\n",
                        mu ? "muon" : "adamw", dmuon_errmsg());
                return 2;
            }
            (mu ? c.muon : c.adamw)[(*n)++] = optarg;
            break;
        }
        case O_LAYOUT:
            c.fused_layout = true;
            break;
        case O_ROUTER:
            if (strcasecmp(optarg, "muon") && strcasecmp(optarg, "adamw"))
                return usage_error("--router '%s': expected muon or adamw", optarg);
            c.router_adamw = !strcasecmp(optarg, "adamw");
            break;
        case O_DEVMEM:
            if (tool_parse_size("--device-memory", optarg, 1, INT64_MAX, &c.device_memory, err,
                                sizeof err))
                return usage_error("%s", err);
            break;
        case O_PERRANK:
            c.show_ranks = true;
            break;
        case O_LINE:
            if (dmuon_line_parse(optarg, &c.lay.line))
                return usage_error("--line '%s': expected A, B, C or D", optarg);
            break;
        case O_PREFETCH:
            NUM("--prefetch", 0, 1, c.lay.prefetch);
            break;
        case O_ROOT:
            if (dmuon_root_mode_parse(optarg, &c.root))
                return usage_error("--root '%s': expected auto, one or split", optarg);
            break;
        case O_BACKEND:
            if (dmuon_backend_parse(optarg, &c.lay.backend))
                return usage_error("--backend '%s': expected mpi, nccl or nccl-dev", optarg);
            break;
        case O_OWNER_PARTS:
            if (dmuon_owner_parts_parse(optarg, &c.lay.owner_parts))
                return usage_error("--owner-parts '%s': expected auto, persistent or per-layer",
                                   optarg);
            break;
        case O_OWNERS:
            c.show_owners = true;
            break;
        case 'o':
            if (!*optarg)
                return usage_error("%s", "-o/--out '': expected a plan file path");
            c.out = optarg;
            break;
        case O_COMPARE:
            c.compare = true;
            break;
        case O_JSON:
            c.json = true;
            break;
        case O_TENSORS:
            c.tensors = true;
            break;
        case O_PREDICT:
            c.predict = optarg;
            break;
        case 'v':
            c.verbose = true;
            break;
        case 'h':
            fputs(usage, stdout);
            return 0;
        case O_VERSION:
            tool_print_version("dmuon-plan", argc, argv);
            return 0;
        default: {
            char msg[400];
            fprintf(stderr, "dmuon-plan: error: %s\n(see dmuon-plan --help)\n",
                    tool_bad_option(argv[optind - 1], opts, PLAN_SHORTS, msg, sizeof msg));
            return 2;
        }
        }
    }
    int rest = argc - optind;
    char **args = argv + optind;
    const char *cmd = "plan";
    if (rest >= 1 && (!strcmp(args[0], "plan") || !strcmp(args[0], "inspect") ||
                      !strcmp(args[0], "show"))) {
        cmd = args[0];
        args++;
        rest--;
    }
    bool is_show = !strcmp(cmd, "show");
    if (model_flag && is_show)
        return usage_error("%s", "--model does not apply to show (show takes one PLAN)");
    if (model_flag && rest >= 1)
        return usage_error("model given twice ('%s' and --model): give one", args[0]);
    if (model_flag) {
        args = (char **)&model_flag;
        rest = 1;
    }
    if (rest != 1) {
        if (is_show)
            return usage_error("%s", rest == 0 ? "show takes one PLAN; none given"
                                               : "show takes one PLAN");
        return usage_error("%s", rest == 0 ? "no MODEL given" : "more than one MODEL given");
    }
    if (strcmp(cmd, "plan"))
        for (size_t i = 0; i < nflags; i++)
            if (!applies_to(cmd, flags_seen[i])) {
                fprintf(stderr, "dmuon-plan: error: --%s does not apply to %s (%s takes %s)\n"
                                "(see dmuon-plan --help)\n", flags_seen[i], cmd, cmd,
                        is_show ? "--json, --ranks, --owners, --line, --prefetch, --backend, "
                                  "--owner-parts"
                                : "--tensors, --json, --muon, --adamw, --router, "
                                  "--fused-layout, --root");
                return 2;
            }
    if (!strcmp(cmd, "plan") && (c.show_ranks || c.show_owners))
        return usage_error("%s", c.show_owners ? "--owners applies to show PLAN"
                                               : "--per-rank applies to show PLAN (there, "
                                                 "--ranks lists the ranks)");
    if (c.compare && c.out)
        return usage_error("%s", "--compare writes no plan file: drop -o, or plan without "
                                 "--compare to write one");
    if (c.compare && c.predict)
        return usage_error("%s", "--predict prints under a plan's report and --compare makes "
                                 "no plan: drop one of them");
    if (c.probe_missing && o.cost != DMUON_COST_DB)
        return usage_error("--probe-missing measures costs for --cost db, not --cost %s",
                           dmuon_cost_kind_name(o.cost));
    if (db_flag && o.cost != DMUON_COST_DB && !strcmp(cmd, "plan"))
        return usage_error(o.cost == DMUON_COST_FLOPS
                               ? "--db '%s' is read for --cost db only, not --cost flops"
                               : "--db '%s' is read for --cost db only (a --cost of "
                                 "elements or m2n reads no database)",
                           db_flag);
    if (!strcmp(cmd, "inspect"))
        return cmd_inspect(&c, args[0]);
    if (!strcmp(cmd, "show"))
        return cmd_show(&c, args[0]);
    if (dmuon_plan_cluster_derive(&o, ranks, have_n, have_k) != DMUON_OK)
        return usage_error("%s", dmuon_errmsg());
    dmuon_device_kind kind;
    if (c.probe_missing && device && dmuon_device_parse(device, &kind) != DMUON_OK)
        return usage_error("--probe-missing measures this machine: give --device cpu or "
                           "cuda, not '%s'", device);
    if (o.cost == DMUON_COST_DB) {
        bool local;
        if (dmuon_cost_device_resolve(device, o.cost_src.db_path, devbuf, &c.device_kind,
                                      &local) != DMUON_OK) {
            fprintf(stderr, "dmuon-plan: error: --device: %s\n(see dmuon-plan --help)\n",
                    dmuon_errmsg());
            return 2;
        }
        if (c.probe_missing && !local)
            return usage_error("--probe-missing measures this machine: give --device cpu or "
                               "cuda, not '%s'", device);
        o.cost_src.device = devbuf;
    }
    if (c.predict) {
        /* read (and check) the parameters before planning and writing anything */
        unsigned mask = 0;
        dmuon_rc prc = dmuon_net_params_load(c.predict, &c.np, &mask, NULL, 0);
        if (prc != DMUON_OK)
            return fail(&c, prc);
    }
    return cmd_plan(&c, args[0], &o);
}

/* every exit goes through here: output that did not arrive is exit 3 */
int main(int argc, char **argv) { return tool_finish_stdout("dmuon-plan", tool_main(argc, argv)); }
