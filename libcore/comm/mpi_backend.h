/*
 * mpi_backend.h — libcore-internal: the functions of the MPI backend
 * (mpi_symm.c, mpi_collv.c, mpi_publish.c) that backend.c puts into
 * dmuon_mpi_ops, and what its files share.
 */
#ifndef DMUON_COMM_MPI_BACKEND_H
#define DMUON_COMM_MPI_BACKEND_H

#include <mpi.h>

#include "backend.h"

/* The MPI backend's chunk when the options say 0: 64 KiB less 128 bytes, so
 * that a chunk with Open MPI's match header — and the publish's last chunk
 * with its 8-byte step word — fits one eager fragment of the TCP transport
 * (btl_tcp_eager_limit, 64 KiB including the header).  A 64 KiB chunk goes
 * the rendezvous way instead: every message waits for the receiver's
 * acknowledgement before its data moves, one more round trip per chunk and
 * hop (measured across namespace hosts: 1 MiB AllGatherV on 4 hosts x 2,
 * 21-52 ms per call with 64 KiB chunks against 8-21 ms with these). */
#define DMUON_MPI_CHUNK_BYTES (64 * 1024 - 128)

dmuon_rc dmuon_mpi_symm_alloc(dmuon_symm *s);
void dmuon_mpi_symm_free(dmuon_symm *s);
/* The node-shared window of an MPI symmetric memory (locked for all ranks
 * with MPI_Win_lock_all, so MPI_Win_sync may be called on it at any time). */
MPI_Win dmuon_mpi_symm_win(const dmuon_symm *s);
/* The head of the list of group calls in flight on s (owned by
 * mpi_collv.c: every wait loop moves the other calls on the list). */
void **dmuon_mpi_symm_inflight(dmuon_symm *s);

/* The scheduled algorithm (mpi_collv.c: the queues of dmuon/sched.h). */
extern const dmuon_group_ops dmuon_mpi_scheduled_ops;
/* The per-owner, coalesced and equal algorithms (mpi_algo.c: MPI's
 * non-blocking collectives); one table, the algorithm read from g->opts. */
extern const dmuon_group_ops dmuon_mpi_baseline_ops;

/* Moves every scheduled call in flight on s once (never blocks); a failure
 * there is kept by that call's group and reported by its own test or wait.
 * Every wait loop over s calls it, so that a call blocked here never leaves
 * another group's peers waiting for this rank. */
void dmuon_mpi_progress_inflight(dmuon_symm *s);

/* "allgatherv" or "reducescatterv" for a call kind (DMUON_SCHED_GATHER /
 * _REDUCE), for messages. */
const char *dmuon_mpi_op_name(int kind);

/* The checks before a group call of `kind` starts, shared by every
 * algorithm: DMUON_ECOMM when the group failed before (broken), DMUON_EINVAL
 * when a call of kind in_flight (≥ 0) is not finished. */
dmuon_rc dmuon_mpi_call_admit(int broken, int in_flight, int kind);

/* The BF16 sum for MPI reductions of MPI_UINT16_T: inout = bf16(in + inout)
 * per element, created at the first call (after MPI_Init) and kept. */
MPI_Op dmuon_mpi_bf16_sum(void);

/* The publish (mpi_publish.c): scheduled (chunks along the rail, flags per
 * parameter, the node half); per-owner (one MPI_Ibcast per parameter on its
 * rail at end) and coalesced (one MPI_Iallgatherv per owner-ordered run of
 * the rail at end), one table read by pub->algorithm. */
extern const dmuon_publish_ops dmuon_mpi_publish_scheduled_ops, dmuon_mpi_publish_end_ops;

#endif
