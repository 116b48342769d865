/*
 * ctl.c — the control plane (dmuon/ctl.h): non-blocking MPI calls polled
 * until done or the deadline (comm/wait.h), the agreement of a return code
 * with the failing rank's message broadcast to the others, written once over
 * either an MPI communicator or a topology (whose NCCL form is
 * nccl_topo.c's).
 */
#include "dmuon/ctl.h"

#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dmuon/collv.h"
#include "nccl_backend.h"
#include "wait.h"

/* Posts nothing itself: completes req (from a call that returned err)
 * within deadline_ms.  Every call here posts from a heap copy owned by the
 * call (kept_done): a call abandoned at its deadline may still write its
 * buffer whenever the late peers arrive, so that buffer is never the
 * caller's memory and is never freed. */
static dmuon_rc finish(MPI_Comm comm, int err, MPI_Request *req, int deadline_ms,
                       const char *what)
{
    int rank = 0;
    MPI_Comm_rank(comm, &rank);
    if (err != MPI_SUCCESS)
        return DMUON_FAIL(DMUON_ECOMM, "%s: an MPI call failed on rank %d", what, rank);
    int ms = 0;
    DMUON_TRY(dmuon_deadline_ms(deadline_ms, &ms));
    dmuon_waiter w;
    dmuon_waiter_start(&w, ms);
    for (;;) {
        int done = 0;
        if (MPI_Test(req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS)
            return DMUON_FAIL(DMUON_ECOMM, "%s: MPI_Test failed on rank %d", what, rank);
        if (done)
            return DMUON_OK;
        if (dmuon_waiter_expired(&w))
            return DMUON_FAIL(DMUON_ETIMEOUT, "%s: rank %d: not complete within the %d ms "
                              "deadline (a peer stalled or died)", what, rank, ms);
        dmuon_waiter_idle(&w);
    }
}

static MPI_Op mpi_op(dmuon_ctl_op op)
{
    return op == DMUON_CTL_MIN ? MPI_MIN : op == DMUON_CTL_MAX ? MPI_MAX : MPI_SUM;
}

/* After finish: on success copies the call's heap buffer out to dst and
 * frees it; when the call was never posted (err) frees it; otherwise (a
 * deadline passed or MPI_Test failed: the call may still write it) keeps it
 * for good, bytes that stay allocated by design. */
static dmuon_rc kept_done(dmuon_rc rc, int err, void *buf, void *dst, size_t bytes)
{
    if (rc == DMUON_OK)
        memcpy(dst, buf, bytes);
    if (rc == DMUON_OK || err != MPI_SUCCESS)
        free(buf);
    return rc;
}

static dmuon_rc reduce_args(int n, dmuon_ctl_op op, const char *what)
{
    if (n < 1 || n > DMUON_CTL_MAX_COUNT || op < DMUON_CTL_SUM || op > DMUON_CTL_MAX)
        return DMUON_FAIL(DMUON_EINVAL, "%s: %d values, operation %d: expected 1 to %d values "
                          "and sum, min or max", what, n, (int)op, DMUON_CTL_MAX_COUNT);
    return DMUON_OK;
}

static dmuon_rc bcast_args(int bytes, int root, int size, const char *what)
{
    if (bytes < 0 || bytes > DMUON_CTL_MAX_BYTES || root < 0 || root >= size)
        return DMUON_FAIL(DMUON_EINVAL, "%s: %d bytes from rank %d: expected 0 to %d bytes "
                          "from a rank of 0..%d", what, bytes, root, DMUON_CTL_MAX_BYTES,
                          size - 1);
    return DMUON_OK;
}

static dmuon_rc allreduce(MPI_Comm comm, void *v, int n, MPI_Datatype type, size_t size,
                          dmuon_ctl_op op, int deadline_ms, const char *what)
{
    DMUON_TRY(reduce_args(n, op, what));
    if (comm == MPI_COMM_NULL)
        return DMUON_OK;
    /* a bad $DMUON_DEADLINE_MS fails before anything is posted */
    DMUON_TRY(dmuon_deadline_ms(deadline_ms, &deadline_ms));
    size_t bytes = (size_t)n * size;
    void *buf = malloc(bytes);
    if (!buf)
        return DMUON_FAIL(DMUON_ENOMEM, "%s: out of memory for %zu bytes", what, bytes);
    memcpy(buf, v, bytes);
    MPI_Request q;
    int err = MPI_Iallreduce(MPI_IN_PLACE, buf, n, type, mpi_op(op), comm, &q);
    return kept_done(finish(comm, err, &q, deadline_ms, what), err, buf, v, bytes);
}

dmuon_rc dmuon_ctl_allreduce_f64(MPI_Comm comm, double *v, int n, dmuon_ctl_op op,
                                 int deadline_ms, const char *what)
{
    return allreduce(comm, v, n, MPI_DOUBLE, sizeof *v, op, deadline_ms, what);
}

dmuon_rc dmuon_ctl_allreduce_i64(MPI_Comm comm, int64_t *v, int n, dmuon_ctl_op op,
                                 int deadline_ms, const char *what)
{
    return allreduce(comm, v, n, MPI_INT64_T, sizeof *v, op, deadline_ms, what);
}

dmuon_rc dmuon_ctl_bcast(MPI_Comm comm, void *data, int bytes, int root, int deadline_ms,
                         const char *what)
{
    if (comm == MPI_COMM_NULL)
        return DMUON_OK;
    int size = 0;
    MPI_Comm_size(comm, &size);
    DMUON_TRY(bcast_args(bytes, root, size, what));
    DMUON_TRY(dmuon_deadline_ms(deadline_ms, &deadline_ms));   /* before posting */
    void *buf = malloc(bytes ? (size_t)bytes : 1);
    if (!buf)
        return DMUON_FAIL(DMUON_ENOMEM, "%s: out of memory for %d bytes", what, bytes);
    memcpy(buf, data, (size_t)bytes);
    MPI_Request q;
    int err = MPI_Ibcast(buf, bytes, MPI_BYTE, root, comm, &q);
    return kept_done(finish(comm, err, &q, deadline_ms, what), err, buf, data, (size_t)bytes);
}

/* The two calls an agreement is made of, over an MPI communicator
 * (t NULL) or a topology. */
typedef struct {
    MPI_Comm comm;
    const dmuon_topo *t;
    int rank, size;
} ctl_link;

static dmuon_rc link_min(const ctl_link *l, int64_t *v, int deadline_ms, const char *what)
{
    return l->t ? dmuon_ctl_topo_allreduce_i64(l->t, v, 1, DMUON_CTL_MIN, deadline_ms, what)
                : dmuon_ctl_allreduce_i64(l->comm, v, 1, DMUON_CTL_MIN, deadline_ms, what);
}

static dmuon_rc link_bcast(const ctl_link *l, void *data, int bytes, int root, int deadline_ms)
{
    return l->t ? dmuon_ctl_topo_bcast(l->t, data, bytes, root, deadline_ms, "agree")
                : dmuon_ctl_bcast(l->comm, data, bytes, root, deadline_ms, "agree");
}

static dmuon_rc agree_over(const ctl_link *l, dmuon_rc mine, int deadline_ms)
{
    const int rank = l->rank, size = l->size;
    /* keep this rank's message: the calls below may record their own */
    char own[1024] = "";
    if (mine != DMUON_OK)
        snprintf(own, sizeof own, "%s", dmuon_errmsg());
    int64_t first = mine == DMUON_OK ? INT_MAX : rank;
    DMUON_TRY(link_min(l, &first, deadline_ms, "agree"));
    /* a late rank's round can complete against another round of the others
     * (they gave up at the deadline and went on): a value that cannot be
     * this round's is never used as a root */
    bool bad = mine == DMUON_OK ? first != INT_MAX && (first < 0 || first >= size || first == rank)
                                : first < 0 || first > rank;
    if (bad)
        return DMUON_FAIL(DMUON_ECOMM, "agree: rank %d: the first failing rank came back as %lld "
                          "(of %d ranks): rounds out of step after a missed deadline", rank,
                          (long long)first, size);
    if (first == INT_MAX) {
        /* a second round that needs every rank: a rank whose first round
         * completed against calls the others abandoned at their deadline
         * times out here instead of going on alone */
        int64_t one = 1;
        return link_min(l, &one, deadline_ms, "agree (confirmation)");
    }
    struct {
        int rc;
        char msg[1024];
    } m;
    memset(&m, 0, sizeof m);
    if (rank == first) {
        m.rc = (int)mine;
        snprintf(m.msg, sizeof m.msg, "%s", own);
    }
    DMUON_TRY(link_bcast(l, &m, (int)sizeof m, (int)first, deadline_ms));
    char pre[32];
    int plen = snprintf(pre, sizeof pre, "rank %d: ", mine != DMUON_OK ? rank : (int)first);
    if (mine != DMUON_OK) {
        if (strncmp(own, pre, (size_t)plen) != 0)
            return dmuon_err_set(mine, __FILE__, __LINE__, "%s%s", pre, own);
        return dmuon_err_trace_add(mine, __FILE__, __LINE__);   /* its message stands */
    }
    const char *body = m.msg;
    if (!strncmp(body, pre, (size_t)plen))
        body += plen;
    return dmuon_err_set((dmuon_rc)m.rc, __FILE__, __LINE__, "%s%s", pre, body);
}

dmuon_rc dmuon_agree(MPI_Comm comm, dmuon_rc mine, int deadline_ms)
{
    if (comm == MPI_COMM_NULL)
        return mine;
    ctl_link l = {comm, NULL, 0, 0};
    MPI_Comm_rank(comm, &l.rank);
    MPI_Comm_size(comm, &l.size);
    return agree_over(&l, mine, deadline_ms);
}

/* ------------------------------------------------------ over a topology -- */

dmuon_rc dmuon_ctl_topo_agree(const dmuon_topo *t, dmuon_rc mine, int deadline_ms)
{
    if (!t->nccl)
        return dmuon_agree(t->world, mine, deadline_ms);
    ctl_link l = {MPI_COMM_NULL, t, t->rank, t->size};
    return agree_over(&l, mine, deadline_ms);
}

/* Over t's control communicator (f64: values are doubles, else int64),
 * or over t->world. */
static dmuon_rc topo_allreduce(const dmuon_topo *t, void *v, int n, int f64, dmuon_ctl_op op,
                               int deadline_ms, const char *what)
{
#ifdef DMUON_HAVE_NCCL
    if (t->nccl) {
        DMUON_TRY(reduce_args(n, op, what));
        return dmuon_nccl_ctl_allreduce(t, v, n, f64, op, deadline_ms, what);
    }
#endif
    return allreduce(t->world, v, n, f64 ? MPI_DOUBLE : MPI_INT64_T, 8, op, deadline_ms, what);
}

dmuon_rc dmuon_ctl_topo_allreduce_f64(const dmuon_topo *t, double *v, int n, dmuon_ctl_op op,
                                      int deadline_ms, const char *what)
{
    return topo_allreduce(t, v, n, 1, op, deadline_ms, what);
}

dmuon_rc dmuon_ctl_topo_allreduce_i64(const dmuon_topo *t, int64_t *v, int n, dmuon_ctl_op op,
                                      int deadline_ms, const char *what)
{
    return topo_allreduce(t, v, n, 0, op, deadline_ms, what);
}

dmuon_rc dmuon_ctl_topo_bcast(const dmuon_topo *t, void *data, int bytes, int root,
                              int deadline_ms, const char *what)
{
#ifdef DMUON_HAVE_NCCL
    if (t->nccl) {
        DMUON_TRY(bcast_args(bytes, root, t->size, what));
        return dmuon_nccl_ctl_bcast(t, data, bytes, root, deadline_ms, what);
    }
#endif
    return dmuon_ctl_bcast(t->world, data, bytes, root, deadline_ms, what);
}
