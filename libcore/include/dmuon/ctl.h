/*
 * dmuon/ctl.h — the control plane of the communication layer: agreement on
 * a return code, small reductions and the broadcast of a short table, each
 * bounded by a deadline (docs/operators.md "Control plane").
 *
 * These move a few bytes to decide things together (did any rank fail, the
 * gradient norm, the non-finite flag, a digest of a layout).  The MPI_Comm
 * forms run over the MPI communicator given, on every backend alike, as
 * non-blocking MPI calls polled until done or until the deadline passes.
 * Every function is collective over comm (every rank, same order, same
 * arguments where said); MPI_COMM_NULL makes each a local no-op that
 * returns as if alone.
 *
 * deadline_ms: > 0 bounds the call; 0 takes $DMUON_DEADLINE_MS or
 * DMUON_DEADLINE_MS_DEFAULT (dmuon_deadline_ms, dmuon/collv.h).  A call past
 * its deadline returns DMUON_ETIMEOUT naming `what` and this rank; the
 * communicator may then hold a posted call that never completes (MPI cannot
 * cancel collectives), so the caller treats it as failed: a tool ends the
 * job, a runtime refuses further collective work.  Each call posts from a
 * heap copy of its buffer that it owns: the caller's memory is read before
 * the call is posted and written only after it completed, never by a late
 * peer.  A timed-out call keeps its copy alive for good (8 bytes per value
 * of a reduction, `bytes` of a broadcast, 8 + 1028 bytes of an agreement)
 * together with its request; the communicator is unusable afterwards.
 *
 * Two forms: over an MPI communicator (dmuon_agree, dmuon_ctl_allreduce_*,
 * dmuon_ctl_bcast) and over a topology, whatever carries it
 * (dmuon_ctl_topo_*): t->world through the MPI functions for a topology
 * from dmuon_topo_init, and the topology's own NCCL control communicator
 * for one from dmuon_topo_init_nccl / _id (dmuon/topo.h; no MPI call).
 */
#ifndef DMUON_CTL_H
#define DMUON_CTL_H

#include <mpi.h>
#include <stdint.h>

#include "dmuon/rc.h"
#include "dmuon/topo.h"

/* The most elements of one small reduction, and the most bytes of one short
 * broadcast.  Larger payloads belong in a group (dmuon/collv.h). */
#define DMUON_CTL_MAX_COUNT 4096
#define DMUON_CTL_MAX_BYTES (1 << 20)

/* Agrees on whether any rank of comm failed: mine is this rank's rc (with
 * its message recorded, as after DMUON_FAIL).  Returns DMUON_OK on every
 * rank when every mine is DMUON_OK.  Otherwise every rank returns an error:
 * a failing rank its own rc, its message prefixed "rank R: " (R its rank in
 * comm) unless it already starts so; every other rank the lowest failing
 * rank F's rc with F's message, prefixed "rank F: " (message broadcast from
 * F, at most 1023 bytes).  When no rank failed, a second round that needs
 * every rank confirms it, so a rank that arrives after the others gave up at
 * the deadline times out instead of going on alone.  Errors besides those agreed: DMUON_ETIMEOUT
 * (deadline; the message names `agree` and this rank), DMUON_ECOMM (an MPI
 * call failed, or "rounds out of step": the first round came back with a
 * value no rank of this round can have sent, such as a root outside
 * 0..size-1, because a late rank's round completed against calls of
 * another round; nothing is broadcast from such a value). */
dmuon_rc dmuon_agree(MPI_Comm comm, dmuon_rc mine, int deadline_ms);

typedef enum { DMUON_CTL_SUM = 0, DMUON_CTL_MIN, DMUON_CTL_MAX } dmuon_ctl_op;

/* In place over n values (1 ≤ n ≤ DMUON_CTL_MAX_COUNT, the same n and op on
 * every rank): v[i] becomes the sum, minimum or maximum of v[i] over the
 * ranks of comm, the same on every rank.  F64 sums are in MPI's order (the
 * same on every rank for one communicator and count, not across rank
 * counts); I64 is exact (sums must not overflow).  Errors: DMUON_EINVAL
 * (n, op; before any communication), DMUON_ETIMEOUT (names what),
 * DMUON_ECOMM. */
dmuon_rc dmuon_ctl_allreduce_f64(MPI_Comm comm, double *v, int n, dmuon_ctl_op op,
                                 int deadline_ms, const char *what);
dmuon_rc dmuon_ctl_allreduce_i64(MPI_Comm comm, int64_t *v, int n, dmuon_ctl_op op,
                                 int deadline_ms, const char *what);

/* Copies root's `bytes` bytes at data to data on every rank of comm (0 ≤
 * bytes ≤ DMUON_CTL_MAX_BYTES, the same bytes and root on every rank; a
 * short table such as a layout digest).  Errors: DMUON_EINVAL (bytes, root;
 * before any communication), DMUON_ETIMEOUT (names what), DMUON_ECOMM. */
dmuon_rc dmuon_ctl_bcast(MPI_Comm comm, void *data, int bytes, int root, int deadline_ms,
                         const char *what);

/*
 * The control plane over a topology (collective over t's N ranks, every
 * rank in the same order; same arguments, results and errors as the MPI_Comm
 * functions above, with comm = t->world and rank = t->rank).  A topology from
 * dmuon_topo_init runs them over MPI exactly as above (a zeroed one, world
 * MPI_COMM_NULL, is a local no-op).  A topology from dmuon_topo_init_nccl /
 * _id runs them over its control communicator: the values are copied into a
 * pinned host buffer, to a device buffer, reduced (ncclAllReduce, ncclFloat64
 * or ncclInt64 with ncclSum / ncclMin / ncclMax) or broadcast (ncclBroadcast
 * of bytes) in place on the control stream, copied back, and an event after
 * them is polled with ncclCommGetAsyncError until deadline_ms; past it the
 * control communicator is aborted (ncclCommAbort) and the call returns
 * DMUON_ETIMEOUT naming `what` and this rank; an asynchronous NCCL error
 * aborts it too (DMUON_ECOMM).  Later control calls on that topology then
 * return DMUON_ECOMM ("aborted by an earlier failure"); the buffers stay
 * with the topology until dmuon_topo_release.  F64 sums are in NCCL's order
 * (the same on every rank of one call).  Extra errors on NCCL: DMUON_EDEVICE
 * (a CUDA copy or event failed).  The caller's v / data are read before and
 * written only after the call completed, never by a late peer.  Compiled,
 * never run on a GPU where written.
 */
dmuon_rc dmuon_ctl_topo_agree(const dmuon_topo *t, dmuon_rc mine, int deadline_ms);
dmuon_rc dmuon_ctl_topo_allreduce_f64(const dmuon_topo *t, double *v, int n, dmuon_ctl_op op,
                                      int deadline_ms, const char *what);
dmuon_rc dmuon_ctl_topo_allreduce_i64(const dmuon_topo *t, int64_t *v, int n, dmuon_ctl_op op,
                                      int deadline_ms, const char *what);
dmuon_rc dmuon_ctl_topo_bcast(const dmuon_topo *t, void *data, int bytes, int root,
                              int deadline_ms, const char *what);

#endif
