/*
 * ops.c — dmuon-verify's default mode: the communication operators over MPI.
 *
 *   mpirun -np 8 dmuon-verify --ranks-per-node 2
 *
 * On the operator driver (common/opdrv.h: the flags, the case grid of
 * operators × layouts × sizes × element types, the lines), this file adds
 * the loop over lines and paths, the agreed pass/fail count, fault
 * injection for the failure tests, and the one summary line.  Each
 * operator's checks are a verify_op in its own file.
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
#include "dmuon/segshape.h"
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
        c->line != c->fault_line)
        return;
    c->faulted = 1;
    p[0] ^= 0x01;
    fprintf(stderr, "dmuon-verify: rank 0: fault injected: one wrong byte in the %s line's "
            "result\n", c->fault_line->name);
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
"  --line L             ours, per-owner, coalesced, equal or all (default all;\n"
"                       a list; --lines, per_owner, equal_length too): the\n"
"                       algorithm (docs/operators.md); coalesced runs the\n"
"                       case's table owner-ordered, equal runs N even shards of\n"
"                       its total; publish runs on ours, per-owner and coalesced\n"
"                       (the equal-length primitive has no publish form)\n"
"  --sizes LIST         layer sizes in bytes, e.g. 2K,96K,1M+6 (default\n"
"                       2K,96K,1M+6; 16K = 16KB = 16KiB, 1G = 1GiB; 1 B to\n"
"                       1 TiB); a size a layout cannot hold (fewer elements\n"
"                       than it has segments) is skipped for it; a size the\n"
"                       host cannot hold (2 x size per rank > MemAvailable)\n"
"                       is refused before any check\n"
"  -b B -e B -f F       the sizes from -b to -e by a factor -f instead of\n"
"                       --sizes (as dmuon-bench; defaults 16K, 64M, 2)\n"
"  --layouts LIST       node, rank, sparse, tiny (default all four; --layout,\n"
"                       --dtype and --path are the same lists)\n"
"  --dtypes LIST        bf16, f32 (default bf16,f32)\n"
"  --paths LIST         auto, chain, star (default auto,chain)\n"
"  --chunk-bytes B      chunk size (0 or default: the backend's, MPI 65408, NCCL 65536; a multiple of 8, at least\n"
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
"dmuon-bench's timing flags (-w, -n, --launches, --json-file, --plan, --rail,\n"
"--fp32-accum, --layers) are refused.\n"
"Fault injection (for the failure tests):\n"
"  --fault table:R      rank R builds its groups from a different table\n"
"  --fault stall:R      rank R stops before its first operator call\n"
"  --fault kill:R       rank R kills itself before its first operator call\n"
"  --fault stale        the owner of parameter 0 publishes step 2 as step 1\n"
"  --fault wrong:L      rank 0 flips one bit of line L's first result\n");
}

/* --fault TEXT into c; 0, or -1 with the message in bad. */
static int fault_parse(vctx *c, const char *s, char *bad, size_t cap)
{
    if (!strcmp(s, "stale")) {
        c->fault = FAULT_STALE;
        return 0;
    }
    if (!strncmp(s, "wrong:", 6)) {
        c->fault = FAULT_WRONG;
        for (int l = 0; l < OPDRV_NLINES; l++)
            if (!strcmp(s + 6, opdrv_lines[l]->name) || !strcmp(s + 6, opdrv_lines[l]->column))
                c->fault_line = opdrv_lines[l];
        if (c->fault_line)
            return 0;
        snprintf(bad, cap, "--fault '%s': expected wrong:LINE (ours, per-owner, coalesced or "
                 "equal)", s);
        return -1;
    }
    const char *colon = strchr(s, ':');
    if (colon && !strncmp(s, "table:", 6))
        c->fault = FAULT_TABLE;
    else if (colon && !strncmp(s, "stall:", 6))
        c->fault = FAULT_STALL;
    else if (colon && !strncmp(s, "kill:", 5))
        c->fault = FAULT_KILL;
    else {
        snprintf(bad, cap, "--fault '%s': expected table:R, stall:R, kill:R, stale or "
                 "wrong:LINE", s);
        return -1;
    }
    char *end = NULL;
    long r = strtol(colon + 1, &end, 10);
    if (colon[1] < '0' || colon[1] > '9' || *end || r > 1 << 20) {
        snprintf(bad, cap, "--fault '%s': expected a rank R from 0 to the number of ranks - 1 "
                 "after '%.*s'", s, (int)(colon - s + 1), s);
        return -1;
    }
    c->fault_rank = (int)r;
    return 0;
}

/* Faults that could reach nothing under the selected operators and lines
 * are refused up front; the rest are counted where injected (ops_main). */
static void fault_reach(const vctx *c, const opdrv_opts *o, char *bad, size_t cap)
{
    const int ours = o->lines & 1;
    if (c->fault == FAULT_STALE && (!(o->op_mask & (1 << OPDRV_PUB)) || !ours))
        snprintf(bad, cap, "--fault stale: the stale step is posted only by the streaming "
                 "publish of the ours line; select it (--op publish or all, --line ours or all)");
    if (c->fault != FAULT_WRONG)
        return;
    int li = 0;
    while (opdrv_lines[li] != c->fault_line)
        li++;
    if (!(o->lines & (1 << li)))
        snprintf(bad, cap, "--fault wrong:%s: the %s line is not among the lines run "
                 "(--line)", c->fault_line->name, c->fault_line->name);
    else if (o->op_mask == 1 << OPDRV_PUB && c->fault_line->pub_algo == DMUON_ALGO_DEFAULT)
        snprintf(bad, cap, "--fault wrong:%s --op publish: the %s line has no publish form, "
                 "so no result could be made wrong", c->fault_line->name, c->fault_line->name);
}

static const char *path_name(dmuon_path p)
{
    return p == DMUON_PATH_AUTO ? "auto" : p == DMUON_PATH_CHAIN ? "chain" : "star";
}

/* Every selected line on one case; skipped lines are said once. */
static dmuon_rc run_lines(vctx *c, const opdrv_opts *o, const opdrv_cursor *k,
                          const opdrv_case *cs, const verify_op *op)
{
    const int first = k->layout == 0 && k->size == 0 && k->dtype == 0;
    dmuon_rc rc = DMUON_OK;
    for (int li = 0; li < OPDRV_NLINES && rc == DMUON_OK; li++) {
        const opdrv_line *l = opdrv_lines[li];
        if (!(o->lines & (1 << li)))
            continue;
        if (cs->op == OPDRV_PUB && l->pub_algo == DMUON_ALGO_DEFAULT) {
            if (c->topo.rank == 0 && first)
                printf("skip publish line=%s: the %s primitive has no publish form\n", l->name,
                       l == &opdrv_line_equal ? "equal-length" : l->name);
            continue;
        }
        dmuon_segment *lt = NULL;
        int ln = 0;
        if (!l->table(cs, &lt, &ln)) {
            free(lt);
            if (c->topo.rank == 0)
                printf("skip %s line=%s: the line cannot hold this case\n", op->name, l->name);
            continue;
        }
        c->line = l;
        c->gopts.algorithm = l->algo;
        int np = cs->op == OPDRV_PUB || li > 0 ? 1 : o->npaths;
        for (int p = 0; p < np && rc == DMUON_OK; p++) {
            char label[200];
            c->gopts.path = o->paths[p];
            snprintf(label, sizeof label, "%s layout=%s bytes=%lld dtype=%s%s%s%s%s", op->name,
                     dmuon_segshape_name(o->layouts[k->layout]), (long long)opdrv_case_bytes(cs),
                     dmuon_dtype_name(o->dtypes[k->dtype]), li > 0 ? " line=" : "",
                     li > 0 ? l->name : "", np > 1 ? " path=" : "",
                     np > 1 ? path_name(o->paths[p]) : "");
            if (c->verbose && c->topo.rank == 0)
                fprintf(stderr, "dmuon-verify: %s\n", label);
            rc = op->run(c, lt, ln, label);
            if (rc == DMUON_EUNSUPPORTED && li > 0) {
                /* the backend has no such algorithm: same on every rank */
                if (c->topo.rank == 0 && first)
                    printf("skip %s line=%s: %s\n", op->name, l->name, dmuon_errmsg());
                rc = DMUON_OK;
            }
        }
        free(lt);
        c->line = NULL;
        c->gopts.algorithm = DMUON_ALGO_DEFAULT;
    }
    return rc;
}

/* --fault, the one flag the option table leaves to the tool. */
static void flags_check(opdrv_opts *o, void *ctx, char *bad, size_t cap)
{
    if (o->fault && fault_parse(ctx, o->fault, bad, cap) == 0)
        fault_reach(ctx, o, bad, cap);
}

int verify_ops_main(int argc, char **argv)
{
    vctx c;
    memset(&c, 0, sizeof c);
    c.fault_rank = -1;
    opdrv_opts o;
    int code = opdrv_init(OPDRV_VERIFY, &argc, &argv, &o, usage, flags_check, &c);
    if (code >= 0)
        return code;
    c.steps = o.steps;
    c.verbose = o.verbose;
    c.gopts.chunk_bytes = o.chunk_bytes;
    c.gopts.slots = o.slots;
    c.gopts.deadline_ms = o.deadline_ms;
    static const verify_op *const ops[OPDRV_NOPS] = {&verify_op_agv, &verify_op_rsv,
                                                     &verify_op_publish};
    if ((code = opdrv_topo_init(&o, &c.topo, 1)) >= 0)
        return code;
    dmuon_rc rc = DMUON_OK;
    if (c.fault_rank >= c.topo.size || c.topo.size < 2) {
        if (c.topo.rank == 0 && c.fault_rank >= c.topo.size)
            fprintf(stderr, "dmuon-verify: error: --fault: rank %d is not one of the %d ranks "
                    "(expected a rank from 0 to %d)\n", c.fault_rank, c.topo.size,
                    c.topo.size - 1);
        else if (c.topo.rank == 0)
            fprintf(stderr, "dmuon-verify: error: 1 rank: the operators move nothing between "
                    "ranks, so nothing would be checked; run under mpirun -np 2 or more (with "
                    "--ranks-per-node for the two-level path)\n");
        dmuon_topo_release(&c.topo);
        MPI_Finalize();
        return 2;
    }
    /* --json: stdout holds the one JSON object; everything else goes to stderr */
    int saved_stdout = -1;
    if (o.json) {
        fflush(stdout);
        saved_stdout = dup(1);
        dup2(2, 1);
    }
    if (c.topo.rank == 0)
        fprintf(stderr, "dmuon-verify: %d rank%s as %d node%s x %d%s%s%s\n", c.topo.size,
                c.topo.size == 1 ? "" : "s", c.topo.nodes, c.topo.nodes == 1 ? "" : "s",
                c.topo.per_node, c.topo.virtual_nodes ? " (virtual nodes)" : "",
                o.backend == DMUON_BACKEND_MPI ? "" : ", backend ",
                o.backend == DMUON_BACKEND_MPI ? "" : dmuon_backend_name(o.backend));
    int skipped = 0, tried = 0, unfit = 0, pub_said = 0;

    opdrv_cursor k = {.first = 1};
    while (rc == DMUON_OK && opdrv_case_next(&o, &k)) {
        const verify_op *op = ops[k.op];
        const char *why = NULL;
        if (k.op == OPDRV_PUB && o.backend != DMUON_BACKEND_MPI)
            why = "the driver checks the publish on the mpi backend only";
        else if (k.op == OPDRV_PUB && c.topo.nodes < 2)
            why = "one node: the publish moves nothing between nodes, no byte would be "
                  "compared (give --ranks-per-node)";
        else if (k.op == OPDRV_PUB && (k.dtype > 0 || k.size > 1))
            why = "the publish moves bytes whatever their type: it runs the first element "
                  "type and the first two sizes only";
        const int once = why && k.op == OPDRV_PUB && o.backend == DMUON_BACKEND_MPI &&
                         c.topo.nodes > 1;   /* said for each case, else once */
        if (why) {   /* a reason of the whole run is said at its first case */
            if (c.topo.rank == 0 && once)
                printf("skip publish layout=%s bytes=%lld dtype=%s: %s\n",
                       dmuon_segshape_name(o.layouts[k.layout]), (long long)o.sizes[k.size],
                       dmuon_dtype_name(o.dtypes[k.dtype]), why);
            else if (c.topo.rank == 0 && !pub_said)
                printf("skip publish (every case): %s\n", why);
            pub_said |= !once;
            skipped++;
            continue;
        }
        dmuon_segment *segs = NULL;
        opdrv_case cs;
        tried++;
        rc = opdrv_case_make(&o, &c.topo, &k, &cs, &segs);
        if (rc == DMUON_EINVAL) {
            /* a size this layout cannot hold: same on every rank */
            if (c.topo.rank == 0)
                printf("skip %s layout=%s bytes=%lld dtype=%s: %s\n", op->name,
                       dmuon_segshape_name(o.layouts[k.layout]), (long long)o.sizes[k.size],
                       dmuon_dtype_name(o.dtypes[k.dtype]), opdrv_errmsg_shared());
            skipped++;
            unfit++;
            rc = DMUON_OK;
            continue;
        }
        if (rc != DMUON_OK)
            break;
        if (c.fault == FAULT_TABLE && c.topo.rank == c.fault_rank && cs.n > 1) {
            segs[cs.n - 1].count -= 1;
            c.faulted = 1;
        }
        rc = run_lines(&c, &o, &k, &cs, op);
        free(segs);
    }
    if (rc == DMUON_OK && tried > 0 && unfit == tried) {
        rc = DMUON_FAIL(DMUON_EINVAL, "--sizes: no size fits any of the layouts (%d cases "
                        "skipped)", unfit);
    } else if (rc == DMUON_OK && c.passed + c.failed == 0) {   /* agreed counts */
        rc = DMUON_FAIL(DMUON_EINVAL, "nothing was checked: every case was skipped (%d; see "
                        "the skip lines), so the run proves nothing", skipped);
    }
    int injected = c.faulted;
    if (rc == DMUON_OK && c.fault != FAULT_NONE) {
        MPI_Allreduce(MPI_IN_PLACE, &injected, 1, MPI_INT, MPI_SUM, c.topo.world);
        if (injected == 0)
            rc = DMUON_FAIL(DMUON_EINVAL, "--fault %s: the fault was injected on no rank (no "
                            "case of this run reaches it: e.g. rank 0 holds no result of "
                            "that line here), so the run cannot show it fails", o.fault);
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
    if (o.json) {
        fflush(stdout);
        dup2(saved_stdout, 1);
        close(saved_stdout);
    }
    if (c.topo.rank == 0 && o.json) {
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
        dmuon_json_end_object(&w);   /* ends the line */
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
