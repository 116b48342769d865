/*
 * mpiprof.c — a profiling shim for the operators (LD_PRELOAD, PMPI): per
 * rank, the messages posted (count, bytes, how many above the TCP eager
 * size, and how many of those not above Open MPI's TCP pipeline size; a
 * start of a persistent request counts as one), the MPI_Test /
 * MPI_Testsome calls and how many requests they completed, the time spent
 * inside them and MPI_Testall, the idle waits (sched_yield, nanosleep and
 * their time), and the process CPU time (user + system, every thread) in
 * the timed windows.  Printed by every rank at MPI_Finalize as one
 * line "mpiprof rank R host H: ...".  The same counters are also kept for
 * the timed windows of dmuon-bench alone — from one MPI_Wtime to the
 * next: the driver reads the clock right after the barrier before a timed
 * operator call and right after the call, and nowhere else — and printed
 * per window on average ("per call: ...").  With $MPIPROF_TRACE set to a
 * folder, every rank also writes a timeline there (trace-R.txt, one event
 * a line: CLOCK_MONOTONIC ns, which the namespace hosts of one machine
 * share, then B = a timed call began, A = it ended, S = an Isend posted (world rank of
 * the peer, tag, bytes), R = a receive found complete by MPI_Test /
 * MPI_Testsome (source, tag, bytes), Y = a yield or sleep longer than
 * 100 us (its length in ns)); tests/cluster/prof/trace.py reads them.
 * A measurement aid, not part of libdmuon; build and use with
 * tests/cluster/prof/run.sh.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <mpi.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    long isend, isend_big, isend_mid, irecv, test, test_done, testall, yield, sleep;
    long long isend_bytes, test_ns, yield_ns, sleep_ns, cpu_ns;
} counters;
static counters st, win;       /* whole run; timed windows together */
static counters *cur[2] = {&st, NULL};
static long windows;
static long long win_ns, win_t0;

#define ADD(field, v) do { st.field += (v); if (cur[1]) win.field += (v); } while (0)
static long eager = 65536 - 64;   /* TCP BTL eager limit less the match header, about */
/* Open MPI's btl_tcp_min_rdma_pipeline_size (its default): a message above
 * eager and at most this long pays the rendezvous handshake and is still
 * copied out of the transport's fragments */
static long pipeline = 196608;

static long long now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* CPU time of the whole process (every thread, user + system). */
static long long cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}
static long long win_cpu0;

/* ------------------------------------------------------------ trace ---- */

typedef struct {
    long long t, v;
    int peer, tag;
    char what;
} event;
#define TRACE_MAX (1 << 20)
static event *trace;
static long ntrace;

static void ev(char what, int peer, int tag, long long v)
{
    if (trace && ntrace < TRACE_MAX)
        trace[ntrace++] = (event){now_ns(), v, peer, tag, what};
}

/* The world rank of rank `r` of `comm`. */
static int world_of(MPI_Comm comm, int r)
{
    if (comm == MPI_COMM_WORLD || r < 0)
        return r;
    MPI_Group g, w;
    int out = r;
    PMPI_Comm_group(comm, &g);
    PMPI_Comm_group(MPI_COMM_WORLD, &w);
    PMPI_Group_translate_ranks(g, 1, &r, w, &out);
    PMPI_Group_free(&g);
    PMPI_Group_free(&w);
    return out;
}

/* Receives posted: request -> communicator, to name the source of a
 * completed one in world ranks. */
typedef struct {
    MPI_Request req;
    MPI_Comm comm;
} posted;
#define POSTED_MAX 4096
static posted recvs[POSTED_MAX];

static void recv_posted(MPI_Request req, MPI_Comm comm)
{
    if (!trace)
        return;
    for (int i = 0; i < POSTED_MAX; i++)
        if (recvs[i].req == MPI_REQUEST_NULL || recvs[i].req == 0) {
            recvs[i] = (posted){req, comm};
            return;
        }
}

static void recv_done(MPI_Request req, const MPI_Status *s)
{
    if (!trace)
        return;
    for (int i = 0; i < POSTED_MAX; i++)
        if (recvs[i].req == req) {
            int n = 0;
            PMPI_Get_count(s, MPI_BYTE, &n);
            ev('R', world_of(recvs[i].comm, s->MPI_SOURCE), s->MPI_TAG, n);
            recvs[i].req = MPI_REQUEST_NULL;
            return;
        }
}

int MPI_Init(int *argc, char ***argv)
{
    if (getenv("MPIPROF_TRACE"))
        trace = malloc(sizeof(event) * TRACE_MAX);
    return PMPI_Init(argc, argv);
}

int MPI_Init_thread(int *argc, char ***argv, int required, int *provided)
{
    if (getenv("MPIPROF_TRACE"))
        trace = malloc(sizeof(event) * TRACE_MAX);
    return PMPI_Init_thread(argc, argv, required, provided);
}

int MPI_Isend(const void *buf, int count, MPI_Datatype dt, int dest, int tag, MPI_Comm comm,
              MPI_Request *req)
{
    int sz = 1;
    MPI_Type_size(dt, &sz);
    ADD(isend, 1);
    ADD(isend_bytes, (long long)count * sz);
    ADD(isend_big, (long)count * sz > eager);
    ADD(isend_mid, (long)count * sz > eager && (long)count * sz <= pipeline);
    ev('S', world_of(comm, dest), tag, (long long)count * sz);
    return PMPI_Isend(buf, count, dt, dest, tag, comm, req);
}

int MPI_Irecv(void *buf, int count, MPI_Datatype dt, int src, int tag, MPI_Comm comm,
              MPI_Request *req)
{
    ADD(irecv, 1);
    int rc = PMPI_Irecv(buf, count, dt, src, tag, comm, req);
    recv_posted(*req, comm);
    return rc;
}

/* Persistent requests: a start of one made by MPI_Send_init counts as an
 * isend of its bytes, of one made by MPI_Recv_init as an irecv.  The kind
 * and bytes of each persistent request live in an open-addressing table
 * keyed by the request handle (a freed handle is marked, so a reused one
 * is looked up afresh). */
#define PTAB (1 << 18)
static struct {
    MPI_Request r;
    long long bytes;         /* −1: a receive; −2: freed */
    int used;
} ptab[PTAB];

static size_t pslot(MPI_Request r)
{
    size_t h = ((size_t)(uintptr_t)r >> 4) * 0x9E3779B97F4A7C15ull;
    for (size_t i = 0; i < PTAB; i++) {
        size_t j = (h + i) & (PTAB - 1);
        if (!ptab[j].used || ptab[j].r == r)
            return j;
    }
    return PTAB;
}

static void pset(MPI_Request r, long long bytes)
{
    size_t j = pslot(r);
    if (j < PTAB) {
        ptab[j].r = r;
        ptab[j].bytes = bytes;
        ptab[j].used = 1;
    }
}

static void pstart(MPI_Request r)
{
    size_t j = pslot(r);
    if (j == PTAB || !ptab[j].used || ptab[j].bytes == -2)
        return;
    if (ptab[j].bytes == -1) {
        ADD(irecv, 1);
    } else {
        ADD(isend, 1);
        ADD(isend_bytes, ptab[j].bytes);
        ADD(isend_big, ptab[j].bytes > eager);
        ADD(isend_mid, ptab[j].bytes > eager && ptab[j].bytes <= pipeline);
    }
}

int MPI_Send_init(const void *buf, int count, MPI_Datatype dt, int dest, int tag, MPI_Comm comm,
                  MPI_Request *req)
{
    int sz = 1;
    MPI_Type_size(dt, &sz);
    int rc = PMPI_Send_init(buf, count, dt, dest, tag, comm, req);
    if (rc == MPI_SUCCESS)
        pset(*req, (long long)count * sz);
    return rc;
}

int MPI_Recv_init(void *buf, int count, MPI_Datatype dt, int src, int tag, MPI_Comm comm,
                  MPI_Request *req)
{
    int rc = PMPI_Recv_init(buf, count, dt, src, tag, comm, req);
    if (rc == MPI_SUCCESS)
        pset(*req, -1);
    return rc;
}

/* A start may hand back another handle (Open MPI's ob1 replaces a
 * persistent request whose previous use its transport still holds): the
 * kind and bytes move to the new one. */
static void pmoved(MPI_Request was, MPI_Request now)
{
    size_t j = pslot(was);
    if (was != now && j < PTAB && ptab[j].used)
        pset(now, ptab[j].bytes);
}

int MPI_Start(MPI_Request *req)
{
    MPI_Request was = *req;
    pstart(was);
    int rc = PMPI_Start(req);
    pmoved(was, *req);
    return rc;
}

int MPI_Startall(int n, MPI_Request *reqs)
{
    MPI_Request was[64];
    int rc = MPI_SUCCESS;
    for (int i0 = 0; i0 < n && rc == MPI_SUCCESS; i0 += 64) {
        const int m = n - i0 < 64 ? n - i0 : 64;
        for (int i = 0; i < m; i++) {
            was[i] = reqs[i0 + i];
            pstart(was[i]);
        }
        rc = PMPI_Startall(m, reqs + i0);
        for (int i = 0; i < m; i++)
            pmoved(was[i], reqs[i0 + i]);
    }
    return rc;
}

int MPI_Request_free(MPI_Request *req)
{
    size_t j = pslot(*req);
    if (j < PTAB && ptab[j].used)
        ptab[j].bytes = -2;   /* freed: starts of a reused handle are not counted */
    return PMPI_Request_free(req);
}

int MPI_Test(MPI_Request *req, int *flag, MPI_Status *status)
{
    int was_null = *req == MPI_REQUEST_NULL;
    MPI_Request r0 = *req;
    MPI_Status s;
    long long t0 = now_ns();
    int rc = PMPI_Test(req, flag, &s);
    ADD(test_ns, now_ns() - t0);
    if (*flag && !was_null)
        recv_done(r0, &s);
    if (status != MPI_STATUS_IGNORE)
        *status = s;
    ADD(test, 1);
    ADD(test_done, *flag && !was_null);
    return rc;
}

int MPI_Testsome(int n, MPI_Request *reqs, int *outcount, int *indices, MPI_Status *statuses)
{
    MPI_Request r0[POSTED_MAX];
    MPI_Status own[POSTED_MAX];
    int keep = trace && n <= POSTED_MAX;
    if (keep)
        memcpy(r0, reqs, (size_t)n * sizeof *reqs);
    MPI_Status *sts = statuses == MPI_STATUSES_IGNORE && keep ? own : statuses;
    long long t0 = now_ns();
    int rc = PMPI_Testsome(n, reqs, outcount, indices, sts);
    ADD(test_ns, now_ns() - t0);
    ADD(test, 1);
    if (*outcount != MPI_UNDEFINED) {
        ADD(test_done, *outcount);
        if (keep && sts != MPI_STATUSES_IGNORE)
            for (int i = 0; i < *outcount; i++)
                recv_done(r0[indices[i]], &sts[i]);
    }
    return rc;
}

int MPI_Testall(int n, MPI_Request *reqs, int *flag, MPI_Status *statuses)
{
    long long t0 = now_ns();
    int rc = PMPI_Testall(n, reqs, flag, statuses);
    ADD(test_ns, now_ns() - t0);
    ADD(testall, 1);
    return rc;
}

int sched_yield(void)
{
    static int (*real)(void);
    if (!real)
        real = (int (*)(void))dlsym(RTLD_NEXT, "sched_yield");
    long long t0 = now_ns();
    int rc = real();
    long long d = now_ns() - t0;
    ADD(yield_ns, d);
    ADD(yield, 1);
    if (d > 100000)
        ev('Y', -1, 0, d);
    return rc;
}

int nanosleep(const struct timespec *req, struct timespec *rem)
{
    static int (*real)(const struct timespec *, struct timespec *);
    if (!real)
        real = (int (*)(const struct timespec *, struct timespec *))dlsym(RTLD_NEXT, "nanosleep");
    long long t0 = now_ns();
    int rc = real(req, rem);
    long long d = now_ns() - t0;
    ADD(sleep_ns, d);
    ADD(sleep, 1);
    if (d > 100000)
        ev('Y', -1, 1, d);
    return rc;
}

/* The driver's clock reads come in pairs around each timed call: the
 * first opens a window, the second closes it. */
double MPI_Wtime(void)
{
    double t = PMPI_Wtime();
    if (!cur[1]) {
        ev('B', -1, 0, 0);
        cur[1] = &win;
        win_t0 = now_ns();
        win_cpu0 = cpu_ns();
    } else {
        ev('A', -1, 0, 0);
        win_ns += now_ns() - win_t0;
        win.cpu_ns += cpu_ns() - win_cpu0;
        windows++;
        cur[1] = NULL;
    }
    return t;
}

int MPI_Finalize(void)
{
    int rank = 0;
    char host[64] = "";
    PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
    gethostname(host, sizeof host);
    fprintf(stderr, "mpiprof rank %d host %s: isend %ld (%lld bytes, %ld above eager) irecv %ld "
            "test %ld (%ld completed, %.1f ms) testall %ld yield %ld (%.1f ms) sleep %ld "
            "(%.1f ms); above eager and not above %ld bytes: %ld\n", rank, host, st.isend,
            st.isend_bytes, st.isend_big, st.irecv, st.test, st.test_done, st.test_ns / 1e6,
            st.testall, st.yield, st.yield_ns / 1e6, st.sleep, st.sleep_ns / 1e6, pipeline,
            st.isend_mid);
    if (windows) {
        double w = (double)windows;
        fprintf(stderr, "mpiprof rank %d host %s: per call (%ld calls): %.2f ms; isend %.1f "
                "(%.1f above eager) irecv %.1f test %.1f (%.1f completed, %.2f ms) yield %.1f "
                "(%.2f ms) sleep %.1f (%.2f ms) cpu %.2f ms\n", rank, host, windows, win_ns / 1e6 / w,
                win.isend / w, win.isend_big / w, win.irecv / w, win.test / w,
                win.test_done / w, win.test_ns / 1e6 / w, win.yield / w, win.yield_ns / 1e6 / w,
                win.sleep / w, win.sleep_ns / 1e6 / w, win.cpu_ns / 1e6 / w);
    }
    const char *dir = getenv("MPIPROF_TRACE");
    if (trace && dir) {
        char path[4096];
        snprintf(path, sizeof path, "%s/trace-%d.txt", dir, rank);
        FILE *f = fopen(path, "w");
        if (f) {
            for (long i = 0; i < ntrace; i++)
                fprintf(f, "%lld %c %d %d %lld\n", trace[i].t, trace[i].what, trace[i].peer,
                        trace[i].tag, trace[i].v);
            fclose(f);
        }
    }
    return PMPI_Finalize();
}
