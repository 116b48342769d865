/*
 * opdrv_opt.c — the operator driver's one option table (opdrv.h) and its
 * case grid.  Both tools parse their operator flags here: a flag means the
 * same in both where both take it; the two spellings of one list (--sizes
 * or -b/-e/-f, --layouts or --layout, --dtypes or --dtype, --paths or
 * --path, --line or --lines) are accepted by both tools; a flag of the
 * other tool alone is refused with a message naming that tool and why.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/opdrv.h"
#include "common/opt.h"
#include "dmuon/sched.h"

enum { O_RPN = 256, O_BACKEND, O_CHUNK, O_SLOTS, O_DEADLINE, O_OP, O_LINE, O_LINES, O_SIZES,
       O_LAYOUTS, O_LAYOUT, O_DTYPES, O_DTYPE, O_PATHS, O_PATH, O_JSON, O_STEPS, O_FAULT,
       O_LAUNCH, O_JSONF, O_PLAN, O_REPLAY, O_RAIL, O_FP32, O_LAYERS };

static const struct option options[] = {
    {"ranks-per-node", required_argument, 0, O_RPN}, {"backend", required_argument, 0, O_BACKEND},
    {"chunk-bytes", required_argument, 0, O_CHUNK}, {"slots", required_argument, 0, O_SLOTS},
    {"deadline-ms", required_argument, 0, O_DEADLINE}, {"op", required_argument, 0, O_OP},
    {"line", required_argument, 0, O_LINE}, {"lines", required_argument, 0, O_LINES},
    {"sizes", required_argument, 0, O_SIZES}, {"minbytes", required_argument, 0, 'b'},
    {"maxbytes", required_argument, 0, 'e'}, {"stepfactor", required_argument, 0, 'f'},
    {"layouts", required_argument, 0, O_LAYOUTS}, {"layout", required_argument, 0, O_LAYOUT},
    {"dtypes", required_argument, 0, O_DTYPES}, {"dtype", required_argument, 0, O_DTYPE},
    {"paths", required_argument, 0, O_PATHS}, {"path", required_argument, 0, O_PATH},
    {"json", no_argument, 0, O_JSON}, {"help", no_argument, 0, 'h'},
    /* dmuon-verify */
    {"steps", required_argument, 0, O_STEPS}, {"fault", required_argument, 0, O_FAULT},
    {"verbose", no_argument, 0, 'v'},
    /* dmuon-bench */
    {"warmup", required_argument, 0, 'w'}, {"iters", required_argument, 0, 'n'},
    {"launches", required_argument, 0, O_LAUNCH}, {"json-file", required_argument, 0, O_JSONF},
    {"plan", required_argument, 0, O_PLAN}, {"replay-publish", required_argument, 0, O_REPLAY},
    {"rail", required_argument, 0, O_RAIL}, {"fp32-accum", no_argument, 0, O_FP32},
    {"layers", required_argument, 0, O_LAYERS}, {0, 0, 0, 0}};

/* The flags of one tool only, and why the other has no use for them. */
static const struct {
    int val, tool;
    const char *name, *why;
} own[] = {
    {O_STEPS, OPDRV_VERIFY, "--steps", "dmuon-bench publishes one step per iteration"},
    {O_FAULT, OPDRV_VERIFY, "--fault", "faults are injected for dmuon-verify's failure tests"},
    {'v', OPDRV_VERIFY, "-v/--verbose", "it lists every check; dmuon-bench prints its table"},
    {'w', OPDRV_BENCH, "-w/--warmup", "dmuon-verify times nothing"},
    {'n', OPDRV_BENCH, "-n/--iters", "dmuon-verify times nothing"},
    {O_LAUNCH, OPDRV_BENCH, "--launches", "dmuon-verify times nothing"},
    {O_JSONF, OPDRV_BENCH, "--json-file", "dmuon-verify writes its one JSON object with --json"},
    {O_PLAN, OPDRV_BENCH, "--plan", "dmuon-verify --plan checks a plan file"},
    {O_REPLAY, OPDRV_BENCH, "--replay-publish", "a replay is timed"},
    {O_RAIL, OPDRV_BENCH, "--rail", "it goes with --replay-publish"},
    {O_FP32, OPDRV_BENCH, "--fp32-accum", "dmuon-verify checks fp32 accumulation on every "
     "BF16 reduction of ours"},
    {O_LAYERS, OPDRV_BENCH, "--layers", "it goes with --plan"},
};

static const char *tool_name(int tool) { return tool == OPDRV_VERIFY ? "dmuon-verify" : "dmuon-bench"; }

static void defaults(int tool, opdrv_opts *o)
{
    memset(o, 0, sizeof *o);
    o->tool = tool;
    o->backend = DMUON_BACKEND_MPI;
    o->op_mask = (1 << OPDRV_NOPS) - 1;
    o->lines = (1 << OPDRV_NLINES) - 1;
    o->rail = -1;
    o->layer_hi = -1;
    o->steps = 3;
    o->warmup = 20;
    o->iters = 30;
    o->launches = 5;
}

/* One element of a list flag into o; 0, or -1 with the message. */
static int list_item(int opt, const char *flag, char *it, opdrv_opts *o, char *bad, size_t cap)
{
    int64_t v = 0;
    switch (opt) {
    case O_SIZES:
        if (o->nsizes == OPDRV_MAX_SIZES) {
            snprintf(bad, cap, "%s: more than %d sizes", flag, OPDRV_MAX_SIZES);
            return -1;
        }
        if (tool_parse_size(flag, it, 1, (int64_t)1 << 40, &v, bad, cap))
            return -1;
        o->sizes[o->nsizes++] = v;
        return 0;
    case O_LAYOUTS:
    case O_LAYOUT:
        if (o->nlayouts < DMUON_SEGSHAPE_COUNT &&
            dmuon_segshape_parse(it, &o->layouts[o->nlayouts]) == DMUON_OK) {
            for (int i = 0; i < o->nlayouts; i++)
                if (o->layouts[i] == o->layouts[o->nlayouts]) {
                    snprintf(bad, cap, "%s: '%s' is given twice", flag, it);
                    return -1;
                }
            o->nlayouts++;
            return 0;
        }
        snprintf(bad, cap, "%s: %s", flag, o->nlayouts < DMUON_SEGSHAPE_COUNT ? dmuon_errmsg()
                 : "more layouts than there are");
        return -1;
    case O_DTYPES:
    case O_DTYPE: {
        dmuon_dtype d;
        if (dmuon_dtype_parse(it, &d) == DMUON_OK &&
            (d == DMUON_BF16 || d == DMUON_F32)) {
            for (int i = 0; i < o->ndtypes; i++)
                if (o->dtypes[i] == d) {
                    snprintf(bad, cap, "%s: '%s' is given twice", flag, it);
                    return -1;
                }
            o->dtypes[o->ndtypes++] = d;
            return 0;
        }
        snprintf(bad, cap, opt == O_DTYPE ? "%s '%s': expected bf16 or f32"
                 : "%s: '%s': expected bf16 or f32", flag, it);
        return -1;
    }
    case O_PATHS:
    case O_PATH: {
        static const char *const names[] = {"auto", "chain", "star"};
        static const dmuon_path paths[] = {DMUON_PATH_AUTO, DMUON_PATH_CHAIN, DMUON_PATH_STAR};
        for (int i = 0; i < 3; i++)
            if (!strcasecmp(it, names[i])) {
                for (int j = 0; j < o->npaths; j++)
                    if (o->paths[j] == paths[i]) {
                        snprintf(bad, cap, "%s: '%s' is given twice", flag, it);
                        return -1;
                    }
                o->paths[o->npaths++] = paths[i];
                return 0;
            }
        snprintf(bad, cap, opt == O_PATH ? "%s '%s': expected auto, chain or star"
                 : "%s: '%s': expected auto, chain or star", flag, it);
        return -1;
    }
    default: {   /* O_LINE, O_LINES: either spelling of a line, or all */
        if (!strcasecmp(it, "all")) {
            o->lines = (1 << OPDRV_NLINES) - 1;
            return 0;
        }
        for (int l = 0; l < OPDRV_NLINES; l++)
            if (!strcasecmp(it, opdrv_lines[l]->name) || !strcasecmp(it, opdrv_lines[l]->column)) {
                o->lines |= 1 << l;
                return 0;
            }
        if (opt == O_LINE)
            snprintf(bad, cap, "--line '%s': expected ours, per-owner, coalesced, equal or all",
                     it);
        else
            snprintf(bad, cap, "--lines: '%s': expected ours, per_owner, coalesced, "
                     "equal_length or all", it);
        return -1;
    }
    }
}

/* A comma-separated list flag; it replaces what the defaults or an earlier
 * spelling of the same list set. */
static int missing(const char *flag, const char *arg, char *bad, size_t cap)
{
    if (*arg && strncmp(arg, "--", 2))
        return 0;
    snprintf(bad, cap, "%s: missing value%s%s%s", flag, *arg ? " (got the option '" : "", arg,
             *arg ? "')" : "");
    return -1;
}

static int list(int opt, const char *flag, const char *arg, opdrv_opts *o, char *bad, size_t cap)
{
    if (missing(flag, arg, bad, cap))
        return -1;
    switch (opt) {
    case O_SIZES:
        o->nsizes = 0;
        if (!o->size_flag)
            o->size_flag = flag;
        break;
    case O_LAYOUTS: case O_LAYOUT: o->nlayouts = 0; o->layout_flag = flag; break;
    case O_DTYPES: case O_DTYPE: o->ndtypes = 0; o->dtype_flag = flag; break;
    case O_PATHS: case O_PATH: o->npaths = 0; break;
    default: o->lines = 0; o->lines_given = 1; break;
    }
    char buf[512];
    snprintf(buf, sizeof buf, "%s", arg);
    char *save = NULL;
    for (char *it = strtok_r(buf, ",", &save); it; it = strtok_r(NULL, ",", &save))
        if (list_item(opt, flag, it, o, bad, cap))
            return -1;
    return 0;
}

/* A whole-number flag in [lo, hi] into *out. */
static int whole(const char *flag, const char *arg, int64_t lo, int64_t hi, int *out, char *bad,
                 size_t cap)
{
    int64_t v = 0;
    if (tool_parse_int(flag, arg, lo, hi, &v, bad, cap))
        return -1;
    *out = (int)v;
    return 0;
}

static int one(int opt, const char *arg, opdrv_opts *o, int64_t range[3], char *bad, size_t cap)
{
    int64_t v = 0;
    switch (opt) {
    case O_RPN:
        if (dmuon_topo_parse_per_node(arg, &o->per_node) == DMUON_OK)
            return 0;
        snprintf(bad, cap, "--ranks-per-node: %s", dmuon_errmsg());
        return -1;
    case O_BACKEND:
        if (dmuon_backend_parse(arg, &o->backend) == DMUON_OK)
            return 0;
        snprintf(bad, cap, "--backend: %s", dmuon_errmsg());
        return -1;
    case O_CHUNK:
        if (tool_parse_size("--chunk-bytes", arg, 0, (int64_t)1 << 40, &v, bad, cap))
            return -1;
        if (v != 0 && dmuon_chunk_bytes_check(v) != DMUON_OK) {   /* 0: the backend's */
            snprintf(bad, cap, "--chunk-bytes '%s': expected a multiple of %d bytes, at least %d",
                     arg, DMUON_CHUNK_ALIGN_BYTES, DMUON_CHUNK_MIN_BYTES);
            return -1;
        }
        o->chunk_bytes = v;
        return 0;
    case O_SLOTS: return whole("--slots", arg, 1, 1000000, &o->slots, bad, cap);
    case O_DEADLINE: return whole("--deadline-ms", arg, 1, 86400000, &o->deadline_ms, bad, cap);
    case O_STEPS:
        if (tool_parse_int("--steps", arg, 1, 1000000, &o->steps, bad, cap))
            return -1;
        return 0;
    case 'w': o->timing_given |= 1; return whole("-w", arg, 0, 1000000, &o->warmup, bad, cap);
    case 'n': o->timing_given |= 2; return whole("-n", arg, 1, 1000000, &o->iters, bad, cap);
    case O_LAUNCH:
        o->timing_given |= 4;
        return whole("--launches", arg, 1, 10000, &o->launches, bad, cap);
    case O_RAIL: return whole("--rail", arg, 0, (1 << 20) - 1, &o->rail, bad, cap);
    case 'b':
    case 'e':
        if (!o->size_flag || !strcmp(o->size_flag, "--sizes"))
            o->size_flag = opt == 'b' ? "-b" : "-e";
        return tool_parse_size(opt == 'b' ? "-b" : "-e", arg, 1, (int64_t)1 << 40,
                               &range[opt == 'b' ? 0 : 1], bad, cap);
    case 'f':
        if (!o->size_flag || !strcmp(o->size_flag, "--sizes"))
            o->size_flag = "-f";
        return tool_parse_int("-f", arg, 2, 1024, &range[2], bad, cap);
    case O_OP:
        if (missing("--op", arg, bad, cap))
            return -1;
        o->op_mask = !strcasecmp(arg, "agv") ? 1 : !strcasecmp(arg, "rsv") ? 2
                   : !strcasecmp(arg, "publish") ? 4 : !strcasecmp(arg, "all") ? 7 : 0;
        if (o->op_mask)
            return 0;
        snprintf(bad, cap, "--op '%s': expected agv, rsv, publish or all", arg);
        return -1;
    case O_JSON: o->json = 1; return 0;
    case 'v': o->verbose = 1; return 0;
    case O_FAULT: o->fault = arg; return 0;
    case O_JSONF: o->json_file = arg; return 0;
    case O_PLAN: o->plan = arg; return 0;
    case O_REPLAY: o->replay_publish = arg; return 0;
    case O_FP32: o->fp32_accum = 1; return 0;
    case O_LAYERS: {
        char a[32] = "";
        const char *colon = strchr(arg, ':');
        int64_t x = 0, y = -1;
        snprintf(a, sizeof a, "%.*s", colon ? (int)(colon - arg) : 0, arg);
        if (!colon || tool_parse_int("--layers A", a, 0, 999999999, &x, bad, cap) ||
            tool_parse_int("--layers B", colon + 1, 1, 1000000000, &y, bad, cap) || y <= x) {
            snprintf(bad, cap, "--layers '%s': expected A:B with 0 <= A < B <= 1000000000", arg);
            return -1;
        }
        o->layer_lo = (int)x;
        o->layer_hi = (int)y;
        return 0;
    }
    default:
        return list(opt, opt == O_SIZES ? "--sizes" : opt == O_LAYOUTS ? "--layouts"
                    : opt == O_LAYOUT ? "--layout" : opt == O_DTYPES ? "--dtypes"
                    : opt == O_DTYPE ? "--dtype" : opt == O_PATHS ? "--paths"
                    : opt == O_PATH ? "--path" : opt == O_LINE ? "--line" : "--lines",
                    arg, o, bad, cap);
    }
}

/* 1 when a (an argument getopt_long refused) is exactly an option of the
 * table that takes a value: it came last, without one. */
static int needs_value(const char *a)
{
    if (a[0] == '-' && a[1] && a[1] != '-' && !a[2])
        return strchr("befwn", a[1]) != NULL;
    for (const struct option *op = options; a[0] == '-' && a[1] == '-' && op->name; op++)
        if (op->has_arg == required_argument && !strcmp(a + 2, op->name))
            return 1;
    return 0;
}

int opdrv_parse(int tool, int argc, char **argv, opdrv_opts *o, char *bad, size_t cap)
{
    defaults(tool, o);
    bad[0] = '\0';
    int64_t range[3] = {16 * 1024, 64 * 1024 * 1024, 2};   /* -b, -e, -f */
    int ranged = 0, opt;
    optind = 1;
    opterr = 0;   /* our message (with a suggestion), once */
    while ((opt = getopt_long(argc, argv, "b:e:f:w:n:vh", options, NULL)) != -1) {
        if (opt == 'h') {
            o->help = 1;
            return 0;
        }
        if (opt == '?' || opt == ':') {
            const char *a = argv[optind - 1];
            if (needs_value(a)) {
                snprintf(bad, cap, "option '%s' needs a value (see --help)", a);
            } else {
                char hint[128];
                snprintf(bad, cap, "unknown option or missing value '%s'%s (see --help)", a,
                         tool_suggest_option(a, options, hint, sizeof hint));
            }
            return -1;
        }
        for (size_t i = 0; i < sizeof own / sizeof own[0]; i++)
            if (own[i].val == opt && own[i].tool != tool) {
                snprintf(bad, cap, "%s does not apply to %s (a %s option: %s)", own[i].name,
                         tool_name(tool), tool_name(own[i].tool), own[i].why);
                return -1;
            }
        ranged |= opt == 'b' || opt == 'e' || opt == 'f';
        if (one(opt, optarg, o, range, bad, cap))
            return -1;
    }
    if (optind < argc) {
        snprintf(bad, cap, "unexpected argument '%s' (see --help)", argv[optind]);
        return -1;
    }
    if (ranged && o->nsizes) {
        snprintf(bad, cap, "--sizes and %s exclude each other (a list of sizes, or the sizes "
                 "from -b to -e by a factor -f)", o->size_flag);
        return -1;
    }
    if (range[0] > range[1]) {
        snprintf(bad, cap, "-b %lld is larger than -e %lld", (long long)range[0],
                 (long long)range[1]);
        return -1;
    }
    if (!o->nsizes && (ranged || tool == OPDRV_BENCH)) {
        for (int64_t b = range[0]; b <= range[1]; b *= range[2]) {
            if (o->nsizes == OPDRV_MAX_SIZES) {
                snprintf(bad, cap, "-b %lld to -e %lld by -f %lld: more than %d sizes",
                         (long long)range[0], (long long)range[1], (long long)range[2],
                         OPDRV_MAX_SIZES);
                return -1;
            }
            o->sizes[o->nsizes++] = b;
        }
    }
    /* the tool's default lists */
    const int v = tool == OPDRV_VERIFY;
    if (!o->nsizes) {   /* dmuon-verify: 2K, 96K, 1M+6 */
        o->sizes[0] = 2048;
        o->sizes[1] = 96 * 1024;
        o->sizes[2] = 1024 * 1024 + 6;
        o->nsizes = 3;
    }
    if (!o->nlayouts)
        for (int l = 0; l < (v ? DMUON_SEGSHAPE_COUNT : 1); l++)
            o->layouts[o->nlayouts++] = v ? (dmuon_segshape)l : DMUON_SEGSHAPE_NODE;
    if (!o->ndtypes) {
        o->dtypes[o->ndtypes++] = DMUON_BF16;
        if (v)
            o->dtypes[o->ndtypes++] = DMUON_F32;
    }
    if (!o->npaths) {
        o->paths[o->npaths++] = DMUON_PATH_AUTO;
        if (v)
            o->paths[o->npaths++] = DMUON_PATH_CHAIN;
    }
    if (!v && o->npaths > 1) {
        snprintf(bad, cap, "--path: dmuon-bench runs one path (its table has no path column)");
        return -1;
    }
    /* without the flag the variable is the deadline: checked here; with
     * it the library is given it everywhere (the operators' calls and the
     * create-time exchanges), so the variable is not read at all */
    int d = 0;
    if (o->deadline_ms == 0 && dmuon_deadline_ms(0, &d) != DMUON_OK) {
        snprintf(bad, cap, "%s", dmuon_errmsg());
        return -1;
    }
    return 0;
}

int opdrv_init(int tool, int *argc, char ***argv, opdrv_opts *o, void (*usage)(FILE *f),
               void (*check)(opdrv_opts *o, void *ctx, char *bad, size_t cap), void *ctx)
{
    MPI_Init(argc, argv);
    int wrank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &wrank);
    char bad[640] = "";
    if (opdrv_parse(tool, *argc, *argv, o, bad, sizeof bad) == 0 && !o->help && check)
        check(o, ctx, bad, sizeof bad);
    if (!bad[0] && !o->help)
        return -1;
    if (wrank == 0 && bad[0])
        fprintf(stderr, "%s: error: %s\n", tool_name(tool), bad);
    else if (wrank == 0)
        usage(stdout);
    MPI_Finalize();
    return bad[0] ? 2 : 0;
}

int opdrv_topo_init(const opdrv_opts *o, dmuon_topo *t, int memory)
{
    const char *tool = tool_name(o->tool);
    int wrank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &wrank);
    dmuon_rc rc = dmuon_topo_init(t, MPI_COMM_WORLD, o->per_node);
    if (rc != DMUON_OK) {
        if (wrank == 0)
            fprintf(stderr, "%s: error: %s\n", tool, dmuon_errmsg());
        MPI_Finalize();
        return dmuon_rc_exit_code(rc);
    }
    dmuon_err_set_rank(t->rank);
    t->backend = o->backend;
    int code = -1;
    char bad[300];
    if ((rc = dmuon_backend_check(o->backend)) != DMUON_OK) {   /* the same on every rank */
        snprintf(bad, sizeof bad, "%s", dmuon_errmsg());
        code = dmuon_rc_exit_code(rc);
    } else if (memory) {
        int64_t most = 0;
        for (int i = 0; i < o->nsizes; i++)
            most = o->sizes[i] > most ? o->sizes[i] : most;
        const char *flag = o->size_flag && strcmp(o->size_flag, "--sizes") ? "-e"
                         : o->size_flag || o->tool == OPDRV_VERIFY ? "--sizes" : "-e";
        if (tool_check_host_memory(t->world, most, 2, flag, bad, sizeof bad))
            code = 2;
    }
    if (code < 0)
        return -1;
    if (t->rank == 0)
        fprintf(stderr, "%s: error: %s\n", tool, bad);
    dmuon_topo_release(t);
    MPI_Finalize();
    return code;
}

/* ------------------------------------------------------------- cases -- */

int opdrv_case_next(const opdrv_opts *o, opdrv_cursor *k)
{
    if (k->first) {
        k->first = 0;
        k->op = k->layout = k->size = k->dtype = 0;
    } else if (++k->dtype == o->ndtypes) {
        k->dtype = 0;
        if (++k->size == o->nsizes) {
            k->size = 0;
            if (++k->layout == o->nlayouts) {
                k->layout = 0;
                k->op++;
            }
        }
    }
    while (k->op < OPDRV_NOPS && !(o->op_mask & (1 << k->op)))
        k->op++;
    return k->op < OPDRV_NOPS;
}

dmuon_rc opdrv_case_make(const opdrv_opts *o, const dmuon_topo *t, const opdrv_cursor *k,
                         opdrv_case *c, dmuon_segment **segs)
{
    memset(c, 0, sizeof *c);
    int n = 0;
    DMUON_TRY(dmuon_segshape_make(o->layouts[k->layout], o->sizes[k->size], o->dtypes[k->dtype],
                                t->nodes, t->per_node, segs, &n));
    c->topo = t;
    c->op = k->op;
    c->segs = *segs;
    c->n = n;
    c->gopts.path = o->paths[0];
    c->gopts.chunk_bytes = o->chunk_bytes;
    c->gopts.deadline_ms = o->deadline_ms;
    c->gopts.slots = o->slots;
    c->gopts.fp32_accum = o->fp32_accum;
    return DMUON_OK;
}
