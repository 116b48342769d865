/*
 * comm_check.c — one driver for what the comm layer offers on every backend
 * beside the scheduled operators: the control plane over a topology, groups
 * of the per-owner, coalesced and equal algorithms (world and node scope)
 * called split phase (start, test, wait) and blocking, the split-phase
 * misuse rules, the per-owner publish (and, on nccl, its node half), and a
 * stalled rank meeting the deadline.  The same checks run on the MPI
 * backend (tests/mpi/73-comm-backends.sh, on the CPU) and on nccl
 * (tests/gpu/run.sh), over a topology from MPI or, with --handoff, over one
 * handed over from NCCL (a unique id, or the driver's own communicator).
 *
 *   mpirun -np N comm_check [--backend mpi|nccl] [--handoff id|comm]
 *                           [--stall R]
 *
 * Ranks per node: $DMUON_RANKS_PER_NODE (else one node per host; with
 * --handoff, else all ranks one node).  Values are small integers in F32,
 * so every reduction order gives the same bits and expected values are
 * computed from the formula, never from the output.  MPI here only launches
 * (and, with --handoff id, carries the unique id as a trainer's launcher
 * would).  Prints "ok"/"FAIL" lines, then "N passed, M failed"; exit 1 on a
 * failure, 3 when the backend cannot run here ("skipped: reason").
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dmuon/collv.h"
#include "dmuon/ctl.h"
#include "dmuon/publish.h"
#include "dmuon/symm.h"
#include "dmuon/table.h"
#include "dmuon/topo.h"

#ifdef DMUON_HAVE_NCCL
#include <nccl.h>
#endif

static int rank_, passed, failed;

static void check(int ok, const char *what)
{
    int all = ok;
    MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (!ok)
        fprintf(stderr, "rank %d: FAIL %s (last error: %s)\n", rank_, what, dmuon_errmsg());
    if (rank_ == 0)
        printf("%s %s\n", all ? "ok  " : "FAIL", what);
    if (all)
        passed++;
    else
        failed++;
}

/* ------------------------------------------------------- control plane -- */

static void check_ctl(const dmuon_topo *t)
{
    const int N = t->size, last = N - 1;
    check(dmuon_ctl_topo_agree(t, DMUON_OK, 20000) == DMUON_OK, "ctl: agree, no rank failed");
    dmuon_rc mine = t->rank == last ? DMUON_FAIL(DMUON_EIO, "disk 'z' full") : DMUON_OK;
    char want[64];
    snprintf(want, sizeof want, "rank %d: disk 'z' full", last);
    check(dmuon_ctl_topo_agree(t, mine, 20000) == DMUON_EIO && strstr(dmuon_errmsg(), want),
          "ctl: agree, the last rank's failure on every rank");
    double v[2] = {t->rank + 1.0, -1.0};
    check(dmuon_ctl_topo_allreduce_f64(t, v, 2, DMUON_CTL_SUM, 20000, "sum") == DMUON_OK &&
              v[0] == N * (N + 1) / 2.0 && v[1] == -N, "ctl: f64 sum");
    int64_t m = 3 * t->rank;
    check(dmuon_ctl_topo_allreduce_i64(t, &m, 1, DMUON_CTL_MAX, 20000, "max") == DMUON_OK &&
              m == 3 * last, "ctl: i64 max");
    int64_t tab[4] = {t->rank, t->rank, 7, t->rank == last ? 42 : 0};
    check(dmuon_ctl_topo_bcast(t, tab, (int)sizeof tab, last, 20000, "table") == DMUON_OK &&
              tab[0] == last && tab[2] == 7 && tab[3] == 42, "ctl: broadcast from the last rank");
}

/* -------------------------------------------------------------- groups -- */

/* An owner-ordered table over `parts` owners: owner o has two segments of
 * 3 + o and 5 elements, back to back in the buffer and in its window; for
 * EQUAL, `parts` even shards of 7. */
static int make_table(dmuon_algo a, int parts, dmuon_segment *segs)
{
    if (a == DMUON_ALGO_EQUAL) {
        dmuon_table_even(parts, 7, DMUON_F32, segs);
        return parts;
    }
    int n = 0;
    int64_t off = 0;
    for (int o = 0; o < parts; o++) {
        int64_t win = 0;
        const int64_t counts[2] = {3 + o, 5};
        for (int k = 0; k < 2; k++) {
            segs[n++] = (dmuon_segment){.owner = o, .dtype = DMUON_F32, .offset = off,
                                        .count = counts[k], .window_offset = win};
            off += 4 * counts[k];
            win += 4 * counts[k];
        }
    }
    return n;
}

/* Whether this rank owns segment s (world scope: its rank; node: its column). */
static int owns(const dmuon_topo *t, dmuon_scope sc, const dmuon_segment *s)
{
    return s->owner == (sc == DMUON_SCOPE_NODE ? t->local : t->rank);
}

/* Memory of the group's span and the group over it; 0 when either failed
 * (*mem freed). */
static int make_group(const dmuon_topo *t, const dmuon_segment *segs, int n,
                      const dmuon_group_opts *o, dmuon_group_span *sp, dmuon_symm **mem,
                      dmuon_group **g)
{
    *mem = NULL;
    *g = NULL;
    int ok = dmuon_group_span_of(t, segs, n, o, sp) == DMUON_OK &&
             dmuon_symm_alloc(t, sp->bytes, 0, mem) == DMUON_OK &&
             dmuon_group_create(t, segs, n, o, *mem, sp->ctrl_offset, g) == DMUON_OK;
    if (!ok) {
        dmuon_symm_free(*mem);
        *mem = NULL;
    }
    return ok;
}

/* One group: AGV and RSV split phase (start, test, wait), then blocking,
 * checked exactly; misuse refused. */
static void check_group(const dmuon_topo *t, dmuon_algo a, dmuon_scope sc)
{
    char what[160], name[64];
    snprintf(name, sizeof name, "%s %s", dmuon_algo_name(a),
             sc == DMUON_SCOPE_NODE ? "node" : "world");
    const int parts = sc == DMUON_SCOPE_NODE ? t->per_node : t->size;
    dmuon_segment segs[2 * 64];
    if (parts > 64) {
        check(0, "groups: at most 64 ranks per scope");
        return;
    }
    const int n = make_table(a, parts, segs);
    dmuon_group_opts o = {.algorithm = a, .scope = sc, .deadline_ms = 30000};
    dmuon_group_span sp;
    dmuon_symm *mem;
    dmuon_group *g;
    int ok = make_group(t, segs, n, &o, &sp, &mem, &g);
    snprintf(what, sizeof what, "%s: group created", name);
    check(ok, what);
    if (!ok)
        return;
    const int64_t B = dmuon_group_buffer_bytes(g), W = dmuon_group_window_bytes(g);
    float *buf = calloc((size_t)B / 4 + 1, 4), *win = calloc((size_t)W / 4 + 1, 4);
    for (int split = 1; split >= 0; split--) {
        /* AllGatherV: owner windows hold 1000·i + k + 1 */
        memset(win, 0, (size_t)W);
        for (int i = 0; i < n; i++)
            if (owns(t, sc, &segs[i]))
                for (int64_t k = 0; k < segs[i].count; k++)
                    win[segs[i].window_offset / 4 + k] = (float)(1000 * i + k + 1);
        int done = -1;
        dmuon_rc rc = dmuon_symm_put(mem, sp.window_offset, win, W);
        if (rc == DMUON_OK && split) {
            rc = dmuon_allgatherv_start(g, sp.buffer_offset, sp.window_offset);
            if (rc == DMUON_OK) {
                dmuon_rc again = dmuon_allgatherv_start(g, sp.buffer_offset, sp.window_offset);
                dmuon_rc other = dmuon_reduce_scatterv_test(g, &done);
                snprintf(what, sizeof what, "%s: a second start and a test of the other kind "
                         "are refused while a gather is in flight", name);
                check(again == DMUON_EINVAL && other == DMUON_EINVAL, what);
                rc = dmuon_allgatherv_test(g, &done);
                if (rc == DMUON_OK && !done)
                    rc = dmuon_allgatherv_wait(g);
            }
        } else if (rc == DMUON_OK) {
            rc = dmuon_allgatherv(g, sp.buffer_offset, sp.window_offset);
        }
        if (rc == DMUON_OK)
            rc = dmuon_symm_get(mem, sp.buffer_offset, buf, B);
        int64_t bad = rc != DMUON_OK;
        for (int i = 0; i < n && !bad; i++)
            for (int64_t k = 0; k < segs[i].count; k++)
                bad += buf[segs[i].offset / 4 + k] != (float)(1000 * i + k + 1);
        snprintf(what, sizeof what, "%s: allgatherv %s, every element its owner's", name,
                 split ? "split phase" : "blocking");
        check(!bad, what);

        /* ReduceScatterV: rank r's buffer holds (r + 1)(i + 1) + k; the owner
         * gets the world sum (node scope: summed along the rail too) */
        for (int i = 0; i < n; i++)
            for (int64_t k = 0; k < segs[i].count; k++)
                buf[segs[i].offset / 4 + k] = (float)((t->rank + 1) * (i + 1) + k);
        memset(win, 0, (size_t)W);
        rc = dmuon_symm_put(mem, sp.buffer_offset, buf, B);
        if (rc == DMUON_OK)
            rc = dmuon_symm_put(mem, sp.window_offset, win, W);
        if (rc == DMUON_OK && split) {
            rc = dmuon_reduce_scatterv_start(g, sp.buffer_offset, sp.window_offset);
            if (rc == DMUON_OK)
                rc = dmuon_reduce_scatterv_wait(g);
            dmuon_rc after = dmuon_reduce_scatterv_wait(g);
            snprintf(what, sizeof what, "%s: a wait with nothing started is refused", name);
            check(after == DMUON_EINVAL, what);
        } else if (rc == DMUON_OK) {
            rc = dmuon_reduce_scatterv(g, sp.buffer_offset, sp.window_offset);
        }
        if (rc == DMUON_OK)
            rc = dmuon_symm_get(mem, sp.window_offset, win, W);
        const int64_t N = t->size;
        bad = rc != DMUON_OK;
        for (int i = 0; i < n && !bad; i++)
            if (owns(t, sc, &segs[i]))
                for (int64_t k = 0; k < segs[i].count; k++)
                    bad += win[segs[i].window_offset / 4 + k] !=
                           (float)(N * (N + 1) / 2 * (i + 1) + N * k);
        snprintf(what, sizeof what, "%s: reducescatterv %s, every owned element the exact sum",
                 name, split ? "split phase" : "blocking");
        check(!bad, what);
    }
    free(buf);
    free(win);
    dmuon_group_free(g);
    dmuon_symm_free(mem);
}

/* ------------------------------------------------------------- publish -- */

static int64_t align8(int64_t x) { return (x + 4095) / 4096 * 4096; }

/* The per-owner publish: one parameter per rank (5 + r elements, values
 * 100·p + k); after end every rank's copy holds its rail's parameters; the
 * node half (nccl) brings every parameter to every rank. */
static void check_publish(const dmuon_topo *t)
{
    const int N = t->size, K = t->per_node;
    dmuon_segment *par = calloc((size_t)N, sizeof *par), *dst = calloc((size_t)N, sizeof *dst);
    int *list = calloc((size_t)N, sizeof *list);
    int64_t copy_bytes = 0, dst_bytes = 0;
    for (int p = 0; p < N; p++) {
        par[p] = (dmuon_segment){.owner = p, .dtype = DMUON_F32, .count = 5 + p};
        dst[p] = par[p];
        dst[p].offset = dst_bytes;
        dst_bytes += 4 * (5 + p);
        list[p] = p;
    }
    dmuon_publish_layout(K, par, N, par, &copy_bytes);
    const int64_t dst_off = align8(copy_bytes);
    dmuon_publish_opts o = {.algorithm = DMUON_ALGO_PER_OWNER, .deadline_ms = 30000};
    dmuon_symm *mem = NULL;
    dmuon_publish *pub = NULL;
    int ok = dmuon_symm_alloc(t, dst_off + align8(dst_bytes), 0, &mem) == DMUON_OK &&
             dmuon_publish_create(t, par, N, &o, mem, 0, &pub) == DMUON_OK;
    check(ok, "publish: per-owner created");
    float *host = calloc((size_t)(copy_bytes + dst_bytes) / 4 + 1, 4);
    for (int64_t step = 1; ok && step <= 2; step++) {
        dmuon_rc rc = dmuon_publish_begin(pub, step);
        const dmuon_segment *mp = &par[t->rank];
        for (int64_t k = 0; k < mp->count; k++)
            host[k] = (float)(100 * t->rank + k + 1000 * step);
        if (rc == DMUON_OK)
            rc = dmuon_symm_put(mem, mp->offset, host, 4 * mp->count);
        if (rc == DMUON_OK)
            rc = dmuon_publish_post(pub, t->rank, step);
        if (rc == DMUON_OK && step == 1 && dmuon_symm_on_device(mem)) {
            dmuon_rc early = dmuon_publish_node_load(pub, dst, list, N, dst_off, step);
            check(early == DMUON_EINVAL && strstr(dmuon_errmsg(), "follows the end"),
                  "publish: the node half before end is refused (nccl)");
        }
        if (rc == DMUON_OK)
            rc = dmuon_publish_end(pub, step);
        if (rc == DMUON_OK)
            rc = dmuon_symm_get(mem, 0, host, copy_bytes);
        int64_t bad = rc != DMUON_OK;
        for (int p = 0; p < N && !bad; p++)
            if (p % K == t->local) {
                for (int64_t k = 0; k < par[p].count; k++)
                    bad += host[par[p].offset / 4 + k] != (float)(100 * p + k + 1000 * step);
                bad += dmuon_publish_flag(pub, p) != step;
            }
        check(!bad, "publish: after end every rank's copy holds its rail's parameters of the "
                    "step, flags set");
        dmuon_rc nl = dmuon_publish_node_load(pub, dst, list, N, dst_off, step);
        if (!dmuon_symm_on_device(mem)) {
            check(nl == DMUON_EUNSUPPORTED && strstr(dmuon_errmsg(), "publish_node_load"),
                  "publish: the per-owner node half is not offered on mpi");
            continue;
        }
        bad = nl != DMUON_OK || dmuon_symm_get(mem, dst_off, host, dst_bytes) != DMUON_OK;
        for (int p = 0; p < N && !bad; p++)
            for (int64_t k = 0; k < par[p].count; k++)
                bad += host[dst[p].offset / 4 + k] != (float)(100 * p + k + 1000 * step);
        check(!bad, "publish: the node half brings every parameter to every rank (nccl)");
    }
    free(host);
    dmuon_publish_free(pub);
    dmuon_symm_free(mem);
    free(par);
    free(dst);
    free(list);
}

/* A rank that never enters a call: the others time out within a few
 * deadlines, and the group is unusable afterwards. */
static void check_stall(const dmuon_topo *t, int stall)
{
    dmuon_segment segs[128];
    const int n = make_table(DMUON_ALGO_PER_OWNER, t->size, segs);
    dmuon_group_opts o = {.algorithm = DMUON_ALGO_PER_OWNER, .deadline_ms = 1500};
    dmuon_group_span sp;
    dmuon_symm *mem;
    dmuon_group *g;
    int ok = make_group(t, segs, n, &o, &sp, &mem, &g);
    check(ok, "stall: group created");
    if (!ok)
        return;
    int good = 1;
    if (t->rank == stall) {
        sleep(4);   /* past the others' deadline; then it enters the call late, so
                       nothing it posts is left unmatched (its result is not checked) */
        if (dmuon_allgatherv_start(g, sp.buffer_offset, sp.window_offset) == DMUON_OK)
            dmuon_allgatherv_wait(g);
    } else {
        double t0 = MPI_Wtime();
        dmuon_rc rc = dmuon_allgatherv_start(g, sp.buffer_offset, sp.window_offset);
        if (rc == DMUON_OK)
            rc = dmuon_allgatherv_wait(g);
        double s = MPI_Wtime() - t0;
        good = rc == DMUON_ETIMEOUT && s < 3 * 1.5 + 1;
        if (!good)
            fprintf(stderr, "rank %d: stall: rc %d after %.1f s: %s\n", t->rank, (int)rc, s,
                    dmuon_errmsg());
    }
    check(good, "stall: every other rank returns DMUON_ETIMEOUT within 3 deadlines");
    /* the group (MPI: abandoned requests; nccl: aborted communicators) is
     * left to process exit, as after any timeout */
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    dmuon_backend b = DMUON_BACKEND_MPI;
    const char *handoff = NULL;
    int stall = -1, code = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--backend") && i + 1 < argc &&
            dmuon_backend_parse(argv[i + 1], &b) == DMUON_OK)
            i++;
        else if (!strcmp(argv[i], "--handoff") && i + 1 < argc)
            handoff = argv[++i];
        else if (!strcmp(argv[i], "--stall") && i + 1 < argc)
            stall = atoi(argv[++i]);
        else {
            if (rank_ == 0)
                fprintf(stderr, "usage: comm_check [--backend mpi|nccl] [--handoff id|comm] "
                        "[--stall R]\n");
            MPI_Finalize();
            return 2;
        }
    }
    if (dmuon_backend_check(b) != DMUON_OK || (handoff && b != DMUON_BACKEND_NCCL)) {
        if (rank_ == 0)
            printf("skipped: %s\n", handoff && b != DMUON_BACKEND_NCCL
                                        ? "--handoff is for --backend nccl" : dmuon_errmsg());
        MPI_Finalize();
        return 3;
    }
    dmuon_topo t;
    dmuon_rc rc = DMUON_OK;
    int size = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
#ifdef DMUON_HAVE_NCCL
    ncclComm_t mine = NULL;
    if (handoff) {
        const char *env = getenv("DMUON_RANKS_PER_NODE");
        const int K = env && atoi(env) > 0 ? atoi(env) : size;
        ncclUniqueId id;
        memset(&id, 0, sizeof id);
        if (rank_ == 0)
            ncclGetUniqueId(&id);
        MPI_Bcast(&id, (int)sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);   /* the launcher's part */
        if (!strcmp(handoff, "comm")) {
            int count = 1;
            cudaGetDeviceCount(&count);
            cudaSetDevice((rank_ % K) % count);
            if (ncclCommInitRank(&mine, size, id, rank_) != ncclSuccess)
                rc = DMUON_FAIL(DMUON_ECOMM, "the driver's own ncclCommInitRank failed");
            else
                rc = dmuon_topo_init_nccl(&t, mine, rank_, size, K);
        } else {
            rc = dmuon_topo_init_nccl_id(&t, &id, rank_, size, K, -1);
        }
    } else
#endif
    {
        rc = dmuon_topo_init(&t, MPI_COMM_WORLD, 0);
        t.backend = b;
    }
    check(rc == DMUON_OK, handoff ? "topology handed over from NCCL" : "topology over MPI");
    if (rc != DMUON_OK) {
        MPI_Finalize();
        return 1;
    }
    if (rank_ == 0)
        printf("comm_check: %d ranks as %d nodes x %d, backend %s%s%s\n", t.size, t.nodes,
               t.per_node, dmuon_backend_name(t.backend), handoff ? ", handoff " : "",
               handoff ? handoff : "");
    if (stall >= 0) {
        check_stall(&t, stall);
    } else {
        check_ctl(&t);
        const dmuon_algo algos[3] = {DMUON_ALGO_PER_OWNER, DMUON_ALGO_COALESCED,
                                     DMUON_ALGO_EQUAL};
        for (int a = 0; a < 3; a++)
            for (int sc = 0; sc < 2; sc++)
                if (!(algos[a] == DMUON_ALGO_COALESCED && sc == DMUON_SCOPE_NODE))
                    check_group(&t, algos[a], (dmuon_scope)sc);
        check_publish(&t);
        dmuon_topo_release(&t);
#ifdef DMUON_HAVE_NCCL
        if (mine) {   /* the trainer's communicator survives the topology */
            int *d = NULL, one = 1;
            cudaMalloc((void **)&d, sizeof *d);
            cudaMemcpy(d, &one, sizeof one, cudaMemcpyHostToDevice);
            int ok = ncclAllReduce(d, d, 1, ncclInt32, ncclSum, mine, 0) == ncclSuccess &&
                     cudaMemcpy(&one, d, sizeof one, cudaMemcpyDeviceToHost) == cudaSuccess &&
                     one == size;
            check(ok, "handoff: the trainer's communicator still works after release");
            cudaFree(d);
            ncclCommDestroy(mine);
        }
#endif
    }
    if (rank_ == 0)
        printf("%d passed, %d failed\n", passed, failed);
    code = failed ? 1 : 0;
    MPI_Finalize();
    return code;
}
