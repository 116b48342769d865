/*
 * dmuon/table.h — the segment-table module (dmuon/types.h): checks, digest
 * and agreement across ranks, used by groups (dmuon/collv.h) and the publish
 * (dmuon/publish.h) alike.  The pure functions dmuon_table_check and
 * dmuon_table_digest are declared in dmuon/sched.h (the schedule module
 * needs them without MPI); all of them are implemented in comm/table.c.
 */
#ifndef DMUON_TABLE_H
#define DMUON_TABLE_H

#include <mpi.h>
#include <stdint.h>

#include "dmuon/rc.h"
#include "dmuon/sched.h"
#include "dmuon/topo.h"
#include "dmuon/types.h"

/* Checks a publish table (dmuon/publish.h: owner, dtype, count as usual;
 * offset = bytes into the copy of the owner's rail; window_offset ignored)
 * for N = nranks ranks of K = per_node ranks per node.  On success stores in
 * *copy_bytes the largest end offset of any parameter (the copy size every
 * rank needs; 0 for an empty table).  Errors: DMUON_EINVAL (owner out of
 * range, unknown dtype, count ≤ 0 or > 2^40, offset negative or not a
 * multiple of the element size, two parameters of one rail overlapping in
 * the copy; the message names the parameter index), DMUON_ENOMEM. */
dmuon_rc dmuon_table_check_publish(const dmuon_segment *params, int n, int nranks,
                                   int per_node, int64_t *copy_bytes);

/* The owner-ordered form of a table, as the COALESCED and EQUAL algorithms
 * take it (dmuon/collv.h): the segments of segs (owner, dtype, count) in
 * owner order, rank 0's first, table order within one owner (a stable
 * sort), placed in the layer buffer back to back from offset 0 and in each
 * owner's window back to back from 0.  out holds n entries; from (NULL or n
 * entries) gets, for each out[i], the index in segs it came from;
 * *buffer_bytes the layer buffer's length.  Pure.  Errors: DMUON_EINVAL
 * (n < 0, owner outside [0, nranks), unknown element type), DMUON_ENOMEM. */
dmuon_rc dmuon_table_owner_ordered(const dmuon_segment *segs, int n, int nranks,
                                   dmuon_segment *out, int *from, int64_t *buffer_bytes);

/* Writes the owner-ordered table of `parts` even shards of `count`
 * elements of dtype each (segment j owned by j, at offset j·count·size,
 * window offset 0): the EQUAL algorithm's table over `parts` ranks.  out
 * holds parts entries.  Pure.  Errors: DMUON_EINVAL (parts < 1, count < 1,
 * unknown element type). */
dmuon_rc dmuon_table_even(int parts, int64_t count, dmuon_dtype dtype, dmuon_segment *out);

/* Exchanges the digest (dmuon_table_digest) of a table over comm
 * (collective).  DMUON_OK when every rank holds the same table; otherwise
 * DMUON_EMISMATCH on every rank, the message naming the first segment that
 * differs from rank 0's table, the lowest rank where it differs and both
 * versions of the segment; DMUON_ENOMEM on every rank when any rank ran out
 * of memory; DMUON_ETIMEOUT / DMUON_ECOMM from the control calls it is made
 * of (dmuon/ctl.h), each bounded by deadline_ms (> 0: as given, the
 * environment not read; 0: $DMUON_DEADLINE_MS or the default,
 * dmuon_deadline_ms in dmuon/collv.h).  The table is only read. */
dmuon_rc dmuon_table_agree(MPI_Comm comm, const dmuon_segment *segs, int n, int deadline_ms);

/* The same over a topology's ranks (collective over t's N ranks), through
 * the control plane of dmuon/ctl.h (dmuon_ctl_topo_*): MPI for a topology
 * from dmuon_topo_init, NCCL for one handed over (dmuon_topo_init_nccl).
 * Same results and errors as dmuon_table_agree. */
dmuon_rc dmuon_table_agree_topo(const dmuon_topo *t, const dmuon_segment *segs, int n,
                                int deadline_ms);

#endif
