/*
 * ops.c — dmuon-verify's default mode: the communication operators over MPI.
 *
 *   mpirun -np 8 dmuon-verify --ranks-per-node 2
 *
 * The shared driver: flags, topology, the loop over operators × layouts ×
 * sizes × element types × paths, the agreed pass/fail count, fault
 * injection for the failure tests, and the one summary line.  Each operator
 * is a verify_op in its own file.
 */
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "common/opt.h"
#include "dmuon/io.h"
#include "dmuon/layout.h"
#include "dmuon/sched.h"
#include "ops.h"
#include "verify.h"

void vctx_check(vctx *c, int ok_here, const char *label, const char *what)
{
    int ok = ok_here ? 1 : 0;
    MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, c->topo.world);
    if (ok)
        c->passed++;
    else
        c->failed++;
    if (c->topo.rank == 0 && (!ok || c->verbose))
        printf("%-4s %s: %s\n", ok ? "ok" : "FAIL", label, what);
    if (!ok_here)
        fprintf(stderr, "dmuon-verify: rank %d: check failed: %s: %s\n", c->topo.rank, label, what);
}

void vctx_fault_point(vctx *c)
{
    if (c->faulted || c->topo.rank != c->fault_rank)
        return;
    if (c->fault == FAULT_STALL) {
        c->faulted = 1;
        fprintf(stderr, "dmuon-verify: rank %d: fault injected: stalling\n", c->topo.rank);
        struct timespec ts = {(c->gopts.deadline_ms * 4) / 1000 + 2, 0};
        nanosleep(&ts, NULL);
    } else if (c->fault == FAULT_KILL) {
        c->faulted = 1;
        fprintf(stderr, "dmuon-verify: rank %d: fault injected: killing this rank\n",
                c->topo.rank);
        fflush(stderr);
        raise(SIGKILL);
    }
}

void vctx_fault_result(vctx *c, unsigned char *p)
{
    if (c->fault != FAULT_WRONG || c->faulted || c->topo.rank != 0 || !p ||
        c->gopts.algorithm != c->fault_algo)
        return;
    c->faulted = 1;
    p[0] ^= 0x01;
    fprintf(stderr, "dmuon-verify: rank 0: fault injected: one wrong byte in the %s algorithm's "
            "result\n", dmuon_algo_name(c->fault_algo));
}

/* --line: the lines and the algorithm each runs ("ours" is the backend's
 * own). */
static const struct {
    const char *name;
    dmuon_algo algo;
} lines[] = {{"ours", DMUON_ALGO_DEFAULT},
             {"per-owner", DMUON_ALGO_PER_OWNER},
             {"coalesced", DMUON_ALGO_COALESCED},
             {"equal", DMUON_ALGO_EQUAL}};
enum { NLINES = sizeof lines / sizeof lines[0] };

static int line_parse(const char *s)
{
    for (int i = 0; i < NLINES; i++)
        if (!strcmp(s, lines[i].name))
            return i;
    return -1;
}

/* The table line l runs for the case's table (segs, n): the same for ours
 * and per-owner; owner-ordered for coalesced; for equal, N even shards
 * holding at least the case's elements.  *out is malloc'd. */
static dmuon_rc line_table(int l, const dmuon_topo *t, const dmuon_segment *segs, int n,
                           dmuon_segment **out, int *nout)
{
    int k = lines[l].algo == DMUON_ALGO_EQUAL ? t->size : n;
    dmuon_segment *o = malloc((size_t)(k > 0 ? k : 1) * sizeof *o);
    if (!o)
        return DMUON_FAIL(DMUON_ENOMEM, "out of memory");
    dmuon_rc rc = DMUON_OK;
    int64_t total = 0, bytes = 0;
    for (int i = 0; i < n; i++)
        total += segs[i].count;
    if (lines[l].algo == DMUON_ALGO_EQUAL)
        rc = dmuon_table_even(t->size, (total + t->size - 1) / t->size,
                              n ? segs[0].dtype : DMUON_BF16, o);
    else if (lines[l].algo == DMUON_ALGO_COALESCED)
        rc = dmuon_table_owner_ordered(segs, n, t->size, o, NULL, &bytes);
    else
        memcpy(o, segs, (size_t)n * sizeof *o);
    if (rc != DMUON_OK) {
        free(o);
        return rc;
    }
    *out = o;
    *nout = k;
    return DMUON_OK;
}

static void usage(FILE *f)
{
    fprintf(f,
"usage: mpirun -np N dmuon-verify [options]\n"
"Checks AllGatherV, ReduceScatterV and the HSDP publish over MPI: gathered\n"
"bytes equal the owners' bit for bit; integer, all-one and all-two inputs\n"
"reduce to the exact sum bit for bit; random BF16 inputs reduce in the\n"
"documented order bit for bit, with a smaller worst relative error than a\n"
"ring-order reduction; publish delivers every parameter with its step flag.\n"
"The baselines (--line) run as group algorithms of the library and are\n"
"checked the same way, random inputs excepted (their order is MPI's).\n"
"Prints one summary line \"N passed, M failed\"; exit 1 if any check failed.\n"
"\n"
"  --backend B          mpi (default), nccl (NCCL host API, GPU) or nccl-dev\n"
"                       (NCCL device API kernels, GPU; one node); publish runs\n"
"                       on mpi only\n"
"  --ranks-per-node K   virtual nodes of K consecutive ranks (default:\n"
"                       $DMUON_RANKS_PER_NODE, else one node per host)\n"
"  --op OP              agv, rsv, publish or all (default all)\n"
"  --line L             ours, per-owner, coalesced, equal or all (default all):\n"
"                       the algorithm (docs/operators.md); coalesced runs the\n"
"                       case's table owner-ordered, equal runs N even shards of\n"
"                       its total; publish runs on ours and per-owner\n"
"  --sizes LIST         layer sizes in bytes, e.g. 2K,96K,1M+6 (default\n"
"                       2K,96K,1M+6; 16K = 16KB = 16KiB, 1G = 1GiB; 1 B to\n"
"                       1 TiB); a size a layout cannot hold (fewer elements\n"
"                       than it has segments) is skipped for it; a size the\n"
"                       host cannot hold (2 x size per rank > MemAvailable)\n"
"                       is refused before any check\n"
"  --layouts LIST       node, rank, sparse, tiny (default all four)\n"
"  --dtypes LIST        bf16, f32 (default bf16,f32)\n"
"  --paths LIST         auto, chain, star (default auto,chain)\n"
"  --chunk-bytes B      chunk size (default: the backend's, MPI 65408, NCCL 65536; a multiple of 8, at least\n"
"                       256)\n"
"  --slots S            ring slots per incoming reduce stream (default 4)\n"
"  --steps S            publish steps (default 3)\n"
"  --deadline-ms MS     deadline of one operator call (default\n"
"                       $DMUON_DEADLINE_MS or 600000 (10 min)); a run makes many calls\n"
"  -v, --verbose        print every check, not only failures\n"
"  --json               one JSON object on stdout (counts, topology, error\n"
"                       figures); progress and check lines go to stderr\n"
"  --version            print the dmuon version\n"
"Needs at least 2 ranks: with one, nothing crosses ranks and nothing is\n"
"checked (exit 2).\n"
"  -h, --help           this text\n"
"Fault injection (for the failure tests):\n"
"  --fault table:R      rank R builds its groups from a different table\n"
"  --fault stall:R      rank R stops before its first operator call\n"
"  --fault kill:R       rank R kills itself before its first operator call\n"
"  --fault stale        the owner of parameter 0 publishes step 2 as step 1\n"
"  --fault wrong:L      rank 0 flips one bit of line L's first result\n");
}

static int split_list(char *s, char **items, int max)
{
    int n = 0;
    for (char *tok = strtok(s, ","); tok && n < max; tok = strtok(NULL, ","))
        items[n++] = tok;
    return n;
}

int verify_ops_main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int wrank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &wrank);
    vctx c;
    memset(&c, 0, sizeof c);
    c.steps = 3;
    c.fault_rank = -1;
    int code = 0, json = 0;
    char sizes_s[256] = "2K,96K,1M+6", layouts_s[128] = "node,rank,sparse,tiny";
    char dtypes_s[64] = "bf16,f32", paths_s[64] = "auto,chain", op_s[32] = "all";
    char line_s[32] = "all";
    enum { O_RPN = 256, O_OP, O_SIZES, O_LAYOUTS, O_DTYPES, O_PATHS, O_CHUNK, O_SLOTS,
           O_STEPS, O_DEADLINE, O_FAULT, O_JSON, O_BACKEND, O_LINE };
    opdrv_flags df = {.backend = DMUON_BACKEND_MPI};   /* the flags common/opdrv.h parses */
    static const struct option opts[] = {
        {"ranks-per-node", required_argument, 0, O_RPN}, {"op", required_argument, 0, O_OP},
        {"sizes", required_argument, 0, O_SIZES}, {"layouts", required_argument, 0, O_LAYOUTS},
        {"dtypes", required_argument, 0, O_DTYPES}, {"paths", required_argument, 0, O_PATHS},
        {"chunk-bytes", required_argument, 0, O_CHUNK}, {"slots", required_argument, 0, O_SLOTS},
        {"steps", required_argument, 0, O_STEPS}, {"deadline-ms", required_argument, 0, O_DEADLINE},
        {"fault", required_argument, 0, O_FAULT}, {"verbose", no_argument, 0, 'v'},
        {"json", no_argument, 0, O_JSON}, {"line", required_argument, 0, O_LINE},
        {"backend", required_argument, 0, O_BACKEND},
        {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    int opt;
    char bad[300] = "";
    opterr = 0;   /* our message (with a suggestion), once */
    while ((opt = getopt_long(argc, argv, "vh", opts, NULL)) != -1) {
        int64_t v = 0;
        if (bad[0])
            continue;   /* the first error is the one reported */
        if (opt == O_SIZES || opt == O_LAYOUTS || opt == O_DTYPES || opt == O_PATHS ||
            opt == O_OP) {
            const char *name = opt == O_SIZES ? "--sizes" : opt == O_LAYOUTS ? "--layouts"
                             : opt == O_DTYPES ? "--dtypes" : opt == O_PATHS ? "--paths" : "--op";
            if (!*optarg || !strncmp(optarg, "--", 2)) {
                snprintf(bad, sizeof bad, "%s: missing value%s%s%s", name,
                         *optarg ? " (got the option '" : "", *optarg ? optarg : "",
                         *optarg ? "')" : "");
                continue;
            }
        }
        switch (opt) {
        case O_RPN:
        case O_BACKEND:
        case O_CHUNK:
            opdrv_flag(opt == O_RPN ? OPDRV_RPN : opt == O_BACKEND ? OPDRV_BACKEND : OPDRV_CHUNK,
                       optarg, 1 << 30, &df, bad, sizeof bad);
            if (opt == O_CHUNK && df.chunk_bytes)
                c.gopts.chunk_bytes = df.chunk_bytes;
            break;
        case O_OP: snprintf(op_s, sizeof op_s, "%s", optarg); break;
        case O_LINE:
            if (strcmp(optarg, "all") && line_parse(optarg) < 0)
                snprintf(bad, sizeof bad, "--line '%s': expected ours, per-owner, coalesced, "
                         "equal or all", optarg);
            snprintf(line_s, sizeof line_s, "%s", optarg);
            break;
        case O_SIZES: snprintf(sizes_s, sizeof sizes_s, "%s", optarg); break;
        case O_LAYOUTS: snprintf(layouts_s, sizeof layouts_s, "%s", optarg); break;
        case O_DTYPES: snprintf(dtypes_s, sizeof dtypes_s, "%s", optarg); break;
        case O_PATHS: snprintf(paths_s, sizeof paths_s, "%s", optarg); break;
        case O_SLOTS:
        case O_STEPS:
        case O_DEADLINE:
            if (tool_parse_int(opt == O_SLOTS ? "--slots" : opt == O_STEPS ? "--steps"
                               : "--deadline-ms", optarg, 1,
                               opt == O_DEADLINE ? 86400000 : 1000000, &v, bad, sizeof bad))
                break;
            if (opt == O_SLOTS)
                c.gopts.slots = (int)v;
            else if (opt == O_STEPS)
                c.steps = v;
            else
                c.gopts.deadline_ms = (int)v;
            break;
        case O_FAULT:
            if (!strcmp(optarg, "stale")) {
                c.fault = FAULT_STALE;
            } else if (!strncmp(optarg, "wrong:", 6)) {
                int l = line_parse(optarg + 6);
                c.fault = FAULT_WRONG;
                if (l < 0)
                    snprintf(bad, sizeof bad, "--fault '%s': expected wrong:LINE (ours, "
                             "per-owner, coalesced or equal)", optarg);
                else
                    c.fault_algo = lines[l].algo;
            } else {
                const char *colon = strchr(optarg, ':');
                int r = colon ? atoi(colon + 1) : -1;
                if (colon && !strncmp(optarg, "table:", 6))
                    c.fault = FAULT_TABLE;
                else if (colon && !strncmp(optarg, "stall:", 6))
                    c.fault = FAULT_STALL;
                else if (colon && !strncmp(optarg, "kill:", 5))
                    c.fault = FAULT_KILL;
                else
                    snprintf(bad, sizeof bad, "--fault '%s': expected table:R, stall:R, kill:R "
                             "or stale", optarg);
                c.fault_rank = r;
            }
            break;
        case 'v': c.verbose = 1; break;
        case O_JSON: json = 1; break;
        case 'h':
            if (wrank == 0)
                usage(stdout);
            MPI_Finalize();
            return 0;
        default: {
            char hint[128];
            snprintf(bad, sizeof bad, "unknown option or missing value '%s'%s (see --help)",
                     argv[optind - 1], tool_suggest_option(argv[optind - 1], opts, hint, sizeof hint));
        }
        }
    }
    if (!bad[0] && optind < argc)
        snprintf(bad, sizeof bad, "unexpected argument '%s' (see --help)", argv[optind]);
    if (!bad[0] && c.gopts.deadline_ms == 0) {
        int d = 0;
        if (dmuon_deadline_ms(0, &d) != DMUON_OK)
            snprintf(bad, sizeof bad, "%s", dmuon_errmsg());
    }

    /* Lists. */
    char *items[32];
    int64_t sizes[32];
    dmuon_layout layouts[8];
    dmuon_dtype dtypes[8];
    dmuon_path paths[4];
    int nsizes = 0, nlayouts = 0, ndtypes = 0, npaths = 0;
    const verify_op *ops[3];
    int nops = 0;
    if (!bad[0]) {
        int n = split_list(sizes_s, items, 32);
        for (int i = 0; i < n && !bad[0]; i++)
            tool_parse_size("--sizes", items[i], 1, (int64_t)1 << 40, &sizes[nsizes++], bad,
                            sizeof bad);
        n = split_list(layouts_s, items, 8);
        for (int i = 0; i < n && !bad[0]; i++)
            if (dmuon_layout_parse(items[i], &layouts[nlayouts++]) != DMUON_OK)
                snprintf(bad, sizeof bad, "--layouts: %s", dmuon_errmsg());
        n = split_list(dtypes_s, items, 8);
        for (int i = 0; i < n && !bad[0]; i++) {
            if (dmuon_dtype_parse(items[i], &dtypes[ndtypes]) != DMUON_OK ||
                (dtypes[ndtypes] != DMUON_BF16 && dtypes[ndtypes] != DMUON_F32))
                snprintf(bad, sizeof bad, "--dtypes: '%s': expected bf16 or f32", items[i]);
            ndtypes++;
        }
        n = split_list(paths_s, items, 4);
        for (int i = 0; i < n && !bad[0]; i++) {
            if (!strcasecmp(items[i], "auto"))
                paths[npaths++] = DMUON_PATH_AUTO;
            else if (!strcasecmp(items[i], "chain"))
                paths[npaths++] = DMUON_PATH_CHAIN;
            else if (!strcasecmp(items[i], "star"))
                paths[npaths++] = DMUON_PATH_STAR;
            else
                snprintf(bad, sizeof bad, "--paths: '%s': expected auto, chain or star", items[i]);
        }
        if (!strcasecmp(op_s, "agv") || !strcasecmp(op_s, "all"))
            ops[nops++] = &verify_op_agv;
        if (!strcasecmp(op_s, "rsv") || !strcasecmp(op_s, "all"))
            ops[nops++] = &verify_op_rsv;
        if (!strcasecmp(op_s, "publish") || !strcasecmp(op_s, "all"))
            ops[nops++] = &verify_op_publish;
        if (!nops)
            snprintf(bad, sizeof bad, "--op '%s': expected agv, rsv, publish or all", op_s);
    }
    if (bad[0]) {
        if (wrank == 0)
            fprintf(stderr, "dmuon-verify: error: %s\n", bad);
        MPI_Finalize();
        return 2;
    }

    dmuon_rc rc = dmuon_topo_init(&c.topo, MPI_COMM_WORLD, df.per_node);
    if (rc != DMUON_OK) {
        if (wrank == 0)
            fprintf(stderr, "dmuon-verify: error: %s\n", dmuon_errmsg());
        MPI_Finalize();
        return dmuon_rc_exit_code(rc);
    }
    dmuon_err_set_rank(c.topo.rank);
    c.topo.backend = df.backend;
    if ((rc = dmuon_backend_check(df.backend)) != DMUON_OK) {   /* the same on every rank */
        if (c.topo.rank == 0)
            fprintf(stderr, "dmuon-verify: error: %s\n", dmuon_errmsg());
        dmuon_topo_release(&c.topo);
        MPI_Finalize();
        return dmuon_rc_exit_code(rc);
    }
    if (c.fault_rank >= c.topo.size) {
        if (wrank == 0)
            fprintf(stderr, "dmuon-verify: error: --fault: rank %d is not one of the %d ranks\n",
                    c.fault_rank, c.topo.size);
        dmuon_topo_release(&c.topo);
        MPI_Finalize();
        return 2;
    }
    if (c.topo.size < 2) {
        if (c.topo.rank == 0)
            fprintf(stderr, "dmuon-verify: error: 1 rank: the operators move nothing between "
                    "ranks, so nothing would be checked; run under mpirun -np 2 or more (with "
                    "--ranks-per-node for the two-level path)\n");
        dmuon_topo_release(&c.topo);
        MPI_Finalize();
        return 2;
    }
    int64_t maxsize = 0;
    for (int i = 0; i < nsizes; i++)
        maxsize = sizes[i] > maxsize ? sizes[i] : maxsize;
    if (tool_check_host_memory(c.topo.world, maxsize, 2, "--sizes", bad, sizeof bad)) {
        if (c.topo.rank == 0)
            fprintf(stderr, "dmuon-verify: error: %s\n", bad);
        dmuon_topo_release(&c.topo);
        MPI_Finalize();
        return 2;
    }
    /* --json: stdout holds the one JSON object; everything else goes to stderr */
    int saved_stdout = -1;
    if (json) {
        fflush(stdout);
        saved_stdout = dup(1);
        dup2(2, 1);
    }
    if (c.topo.rank == 0)
        fprintf(stderr, "dmuon-verify: %d rank%s as %d node%s x %d%s%s%s\n", c.topo.size,
                c.topo.size == 1 ? "" : "s", c.topo.nodes, c.topo.nodes == 1 ? "" : "s",
                c.topo.per_node, c.topo.virtual_nodes ? " (virtual nodes)" : "",
                df.backend == DMUON_BACKEND_MPI ? "" : ", backend ",
                df.backend == DMUON_BACKEND_MPI ? "" : dmuon_backend_name(df.backend));
    int skipped = 0, tried = 0;

    for (int o = 0; o < nops && rc == DMUON_OK; o++)
        for (int l = 0; l < nlayouts && rc == DMUON_OK; l++)
            for (int s = 0; s < nsizes && rc == DMUON_OK; s++)
                for (int d = 0; d < ndtypes && rc == DMUON_OK; d++) {
                    if (ops[o] == &verify_op_publish && (d > 0 || s > 1))
                        continue;   /* publish moves bytes: one type, two sizes suffice */
                    if (ops[o] == &verify_op_publish && df.backend != DMUON_BACKEND_MPI) {
                        if (c.topo.rank == 0 && l == 0 && s == 0)
                            printf("skip publish: not built on the %s backend\n",
                                   dmuon_backend_name(df.backend));
                        continue;
                    }
                    dmuon_segment *segs = NULL;
                    int n = 0;
                    tried++;
                    rc = dmuon_layout_make(layouts[l], sizes[s], dtypes[d], c.topo.nodes,
                                           c.topo.per_node, &segs, &n);
                    if (rc == DMUON_EINVAL) {
                        /* a size this layout cannot hold: same on every rank */
                        if (c.topo.rank == 0)
                            printf("skip %s layout=%s bytes=%lld dtype=%s: %s\n", ops[o]->name,
                                   dmuon_layout_name(layouts[l]), (long long)sizes[s],
                                   dmuon_dtype_name(dtypes[d]), dmuon_errmsg());
                        skipped++;
                        rc = DMUON_OK;
                        continue;
                    }
                    if (rc != DMUON_OK)
                        break;
                    if (c.fault == FAULT_TABLE && c.topo.rank == c.fault_rank && n > 1)
                        segs[n - 1].count -= 1;
                    for (int li = 0; li < NLINES && rc == DMUON_OK; li++) {
                        if (strcmp(line_s, "all") && strcmp(line_s, lines[li].name))
                            continue;
                        if (ops[o] == &verify_op_publish &&
                            lines[li].algo != DMUON_ALGO_DEFAULT &&
                            lines[li].algo != DMUON_ALGO_PER_OWNER)
                            continue;   /* publish: ours and per-owner */
                        dmuon_segment *lt = NULL;
                        int ln = 0;
                        rc = line_table(li, &c.topo, segs, n, &lt, &ln);
                        if (rc != DMUON_OK)
                            break;
                        c.gopts.algorithm = lines[li].algo;
                        int np = ops[o] == &verify_op_publish || li > 0 ? 1 : npaths;
                        for (int p = 0; p < np && rc == DMUON_OK; p++) {
                            char label[200];
                            c.gopts.path = paths[p];
                            snprintf(label, sizeof label, "%s layout=%s bytes=%lld dtype=%s%s%s%s%s",
                                     ops[o]->name, dmuon_layout_name(layouts[l]),
                                     (long long)sizes[s], dmuon_dtype_name(dtypes[d]),
                                     li > 0 ? " line=" : "", li > 0 ? lines[li].name : "",
                                     np > 1 ? " path=" : "",
                                     np == 1 ? "" : paths[p] == DMUON_PATH_AUTO ? "auto"
                                     : paths[p] == DMUON_PATH_CHAIN ? "chain" : "star");
                            if (c.verbose && c.topo.rank == 0)
                                fprintf(stderr, "dmuon-verify: %s\n", label);
                            rc = ops[o]->run(&c, lt, ln, label);
                            if (rc == DMUON_EUNSUPPORTED && li > 0) {
                                /* the backend has no such algorithm: same on every rank */
                                if (c.topo.rank == 0 && l == 0 && s == 0 && d == 0)
                                    printf("skip %s line=%s: %s\n", ops[o]->name,
                                           lines[li].name, dmuon_errmsg());
                                rc = DMUON_OK;
                            }
                        }
                        free(lt);
                        c.gopts.algorithm = DMUON_ALGO_DEFAULT;
                    }
                    free(segs);
                }

    if (rc == DMUON_OK && tried > 0 && skipped == tried) {
        rc = DMUON_FAIL(DMUON_EINVAL, "--sizes: no size fits any of the layouts (%d cases "
                        "skipped)", skipped);
    }
    if (rc != DMUON_OK) {
        /* A timeout or an MPI failure is each rank's own and peers may be
         * gone or stuck: nothing collective is safe, each rank says its
         * view.  Everything else failed on every rank (agreed): printed
         * once when alike, else each rank that differs names its view. */
        if (rc == DMUON_ETIMEOUT || rc == DMUON_ECOMM) {
            fprintf(stderr, "dmuon-verify: error: %s\n", dmuon_errmsg());
            fflush(stderr);
            MPI_Abort(MPI_COMM_WORLD, 3);
        }
        tool_report_error(MPI_COMM_WORLD, "dmuon-verify", dmuon_errmsg(),
                          dmuon_rc_exit_code(rc));
        fflush(stderr);
        dmuon_topo_release(&c.topo);
        MPI_Finalize();
        return dmuon_rc_exit_code(rc);
    }
    if (json) {
        fflush(stdout);
        dup2(saved_stdout, 1);
        close(saved_stdout);
    }
    if (c.topo.rank == 0 && json) {
        dmuon_json w;
        dmuon_json_init(&w, stdout, false);
        dmuon_json_begin_object(&w);
        dmuon_json_kint(&w, "passed", c.passed);
        dmuon_json_kint(&w, "failed", c.failed);
        dmuon_json_kint(&w, "skipped", skipped);
        dmuon_json_kint(&w, "ranks", c.topo.size);
        dmuon_json_kint(&w, "nodes", c.topo.nodes);
        dmuon_json_kint(&w, "ranks_per_node", c.topo.per_node);
        if (c.have_worst) {
            dmuon_json_kdouble(&w, "worst_bf16_rel_error", c.worst_ours);
            dmuon_json_kdouble(&w, "ring_order_rel_error", c.worst_ring);
        }
        dmuon_json_kbool(&w, "ok", c.failed == 0);
        dmuon_json_end_object(&w);
        fputc('\n', stdout);
        fflush(stdout);
    } else if (c.topo.rank == 0) {
        char worst[96], skip[48] = "";
        if (c.have_worst)
            snprintf(worst, sizeof worst, "ours %.5f, ring order %.5f", c.worst_ours,
                     c.worst_ring);
        else
            snprintf(worst, sizeof worst, "n/a");
        if (skipped)
            snprintf(skip, sizeof skip, ", %d skipped", skipped);
        printf("dmuon-verify: %d passed, %d failed%s (%d rank%s as %d node%s x %d; worst BF16 "
               "relative error: %s)\n", c.passed, c.failed, skip, c.topo.size,
               c.topo.size == 1 ? "" : "s", c.topo.nodes, c.topo.nodes == 1 ? "" : "s",
               c.topo.per_node, worst);
        fflush(stdout);
    }
    code = c.failed ? 1 : 0;
    dmuon_topo_release(&c.topo);
    MPI_Finalize();
    return code;
}
