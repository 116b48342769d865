/*
 * mpiprof.c — a profiling shim for the operators (LD_PRELOAD, PMPI): per
 * rank, the messages posted (count, bytes, how many above the TCP eager
 * size), the MPI_Test calls and how many completed something, the time
 * spent inside MPI_Test / MPI_Testall, and the idle waits (sched_yield,
 * nanosleep and their time), and the process CPU time (user + system,
 * every thread) in the timed windows.  Printed by every rank at MPI_Finalize as one
 * line "mpiprof rank R host H: ...".  The same counters are also kept for
 * the timed windows of dmuon-bench alone — from the return of each
 * MPI_Barrier to the next MPI_Allreduce, which is how the driver brackets
 * one timed operator call — and printed per window on average ("per
 * call: ...").  A measurement aid, not part of libdmuon; build and use
 * with tests/cluster/prof/run.sh.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <mpi.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    long isend, isend_big, irecv, test, test_done, testall, yield, sleep;
    long long isend_bytes, test_ns, yield_ns, sleep_ns, cpu_ns;
} counters;
static counters st, win;       /* whole run; timed windows together */
static counters *cur[2] = {&st, NULL};
static long windows;
static long long win_ns, win_t0;

#define ADD(field, v) do { st.field += (v); if (cur[1]) win.field += (v); } while (0)
static long eager = 65536 - 64;   /* TCP BTL eager limit less the match header, about */

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

int MPI_Isend(const void *buf, int count, MPI_Datatype dt, int dest, int tag, MPI_Comm comm,
              MPI_Request *req)
{
    int sz = 1;
    MPI_Type_size(dt, &sz);
    ADD(isend, 1);
    ADD(isend_bytes, (long long)count * sz);
    ADD(isend_big, (long)count * sz > eager);
    return PMPI_Isend(buf, count, dt, dest, tag, comm, req);
}

int MPI_Irecv(void *buf, int count, MPI_Datatype dt, int src, int tag, MPI_Comm comm,
              MPI_Request *req)
{
    ADD(irecv, 1);
    return PMPI_Irecv(buf, count, dt, src, tag, comm, req);
}

int MPI_Test(MPI_Request *req, int *flag, MPI_Status *status)
{
    int was_null = *req == MPI_REQUEST_NULL;
    long long t0 = now_ns();
    int rc = PMPI_Test(req, flag, status);
    ADD(test_ns, now_ns() - t0);
    ADD(test, 1);
    ADD(test_done, *flag && !was_null);
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
    ADD(yield_ns, now_ns() - t0);
    ADD(yield, 1);
    return rc;
}

int nanosleep(const struct timespec *req, struct timespec *rem)
{
    static int (*real)(const struct timespec *, struct timespec *);
    if (!real)
        real = (int (*)(const struct timespec *, struct timespec *))dlsym(RTLD_NEXT, "nanosleep");
    long long t0 = now_ns();
    int rc = real(req, rem);
    ADD(sleep_ns, now_ns() - t0);
    ADD(sleep, 1);
    return rc;
}

int MPI_Barrier(MPI_Comm comm)
{
    int rc = PMPI_Barrier(comm);
    cur[1] = &win;
    win_t0 = now_ns();
    win_cpu0 = cpu_ns();
    return rc;
}

int MPI_Allreduce(const void *in, void *out, int n, MPI_Datatype dt, MPI_Op op, MPI_Comm comm)
{
    if (cur[1]) {
        win_ns += now_ns() - win_t0;
        win.cpu_ns += cpu_ns() - win_cpu0;
        windows++;
        cur[1] = NULL;
    }
    return PMPI_Allreduce(in, out, n, dt, op, comm);
}

int MPI_Finalize(void)
{
    int rank = 0;
    char host[64] = "";
    PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
    gethostname(host, sizeof host);
    fprintf(stderr, "mpiprof rank %d host %s: isend %ld (%lld bytes, %ld above eager) irecv %ld "
            "test %ld (%ld completed, %.1f ms) testall %ld yield %ld (%.1f ms) sleep %ld "
            "(%.1f ms)\n", rank, host, st.isend, st.isend_bytes, st.isend_big, st.irecv, st.test,
            st.test_done, st.test_ns / 1e6, st.testall, st.yield, st.yield_ns / 1e6, st.sleep,
            st.sleep_ns / 1e6);
    if (windows) {
        double w = (double)windows;
        fprintf(stderr, "mpiprof rank %d host %s: per call (%ld calls): %.2f ms; isend %.1f "
                "(%.1f above eager) irecv %.1f test %.1f (%.1f completed, %.2f ms) yield %.1f "
                "(%.2f ms) sleep %.1f (%.2f ms) cpu %.2f ms\n", rank, host, windows, win_ns / 1e6 / w,
                win.isend / w, win.isend_big / w, win.irecv / w, win.test / w,
                win.test_done / w, win.test_ns / 1e6 / w, win.yield / w, win.yield_ns / 1e6 / w,
                win.sleep / w, win.sleep_ns / 1e6 / w, win.cpu_ns / 1e6 / w);
    }
    return PMPI_Finalize();
}
