/*
 * dmuon/collv.h — groups and the variable-length operators AllGatherV and
 * ReduceScatterV on the MPI backend (paper §5, C.2).
 *
 * A group is built once per layer from a frozen segment table
 * (dmuon/types.h); building it is collective over the topology's world and
 * exchanges a digest of the table, so ranks that disagree all fail, naming
 * the first differing segment.  The group owns one node-shared memory window
 * per rank (MPI_Win_allocate_shared on the node communicator) holding, at
 * identical offsets on every rank:
 *   the layer buffer  (buffer_bytes: the table's segments at their offsets)
 *   the owner window  (window_bytes: owned segments at their window_offset)
 * Ranks of one node read and write each other's windows directly (the CPU
 * stand-in for NVLink loads/stores and multimem); across nodes chunks move
 * along rails with MPI point-to-point messages, following dmuon/sched.h.
 *
 * Each call is collective over the group (every rank, same order).  Every
 * wait has a deadline; a call that passes it returns DMUON_ETIMEOUT with a
 * message naming this rank, the peer and the queue, and the group is then
 * unusable (later calls return DMUON_ECOMM).  Not thread-safe: one thread
 * per group.
 */
#ifndef DMUON_COLLV_H
#define DMUON_COLLV_H

#include <stdint.h>

#include "dmuon/rc.h"
#include "dmuon/sched.h"
#include "dmuon/topo.h"
#include "dmuon/types.h"

#define DMUON_DEADLINE_MS_DEFAULT 60000

typedef struct dmuon_group dmuon_group;

typedef struct {
    dmuon_path path;          /* AUTO (default), CHAIN or STAR; see sched.h */
    int64_t chunk_bytes;      /* 0 → 64 KiB; else a multiple of 8, ≥ 256
                                 (dmuon_chunk_bytes_check) */
    int64_t star_max_bytes;   /* AUTO picks star up to this many bytes per
                                 source node; 0 → 256 KiB */
    int deadline_ms;          /* bounds one whole operator call (every wait
                                 of it together, progress or not); 0 →
                                 $DMUON_DEADLINE_MS or 60000 */
    int slots;                /* ring slots per incoming reduce stream; 0 → 4 */
    int fp32_accum;           /* BF16 reduce: carry binary32 partials and
                                 round once, at the owner */
} dmuon_group_opts;

/* Reads the deadline in ms from opts (if > 0), else $DMUON_DEADLINE_MS, else
 * the default.  DMUON_EINVAL if the variable is not a positive integer. */
dmuon_rc dmuon_deadline_ms(int opt_ms, int *out);

/* Exchanges the digest of a table over comm (collective).  DMUON_OK when
 * every rank holds the same table; otherwise DMUON_EMISMATCH on every rank,
 * the message naming the first segment that differs from rank 0's table and
 * the lowest rank where it differs; DMUON_ENOMEM on any rank's failure. */
dmuon_rc dmuon_table_agree(MPI_Comm comm, const dmuon_segment *segs, int n);

/* Builds a group over t for the n segments of segs (copied; the caller keeps
 * segs).  Collective over t->world.  Errors, identical on every rank:
 * DMUON_EMISMATCH (tables differ: the message names the first differing
 * segment and the rank that differs from rank 0), DMUON_EINVAL (a bad table,
 * see dmuon_table_check, or bad opts), DMUON_ENOMEM (on any rank),
 * DMUON_ECOMM.  On failure *out is NULL. */
dmuon_rc dmuon_group_create(const dmuon_topo *t, const dmuon_segment *segs, int n,
                            const dmuon_group_opts *opts, dmuon_group **out);

/* Frees the group (collective over the node: frees the shared window), so
 * after a failed call free it only if every rank is still alive; a tool that
 * gives up after a timeout may leave it to process exit.  Accepts NULL. */
void dmuon_group_free(dmuon_group *g);

/* This rank's layer buffer / owner window inside the shared window, 64-byte
 * aligned, zeroed at creation; valid until dmuon_group_free. */
void *dmuon_group_buffer(const dmuon_group *g);
int64_t dmuon_group_buffer_bytes(const dmuon_group *g);
void *dmuon_group_window(const dmuon_group *g);
int64_t dmuon_group_window_bytes(const dmuon_group *g);

/* The schedule a kind of call runs (for reports and tests). */
const dmuon_sched *dmuon_group_sched(const dmuon_group *g, dmuon_sched_kind kind);

/* AllGatherV: segment i's bytes in its owner's window at window_offset land
 * at offset in the layer buffer of every rank (the owner's own buffer
 * included), bit for bit.  Owners must have written their windows before the
 * call.  Errors: DMUON_ETIMEOUT (deadline; message names rank, peer, queue),
 * DMUON_ECOMM (an MPI call failed, or the group failed before). */
dmuon_rc dmuon_allgatherv(dmuon_group *g);

/* ReduceScatterV: for every segment, the sum over all ranks of the layer
 * buffers' bytes at offset lands in the owner's window at window_offset, in
 * the order documented in dmuon/sched.h (BF16 rounds at every level unless
 * fp32_accum).  Element types BF16 and F32 only.  Layer buffers are read,
 * not changed.  Errors: DMUON_EUNSUPPORTED (another element type, returned
 * by every rank before any communication), DMUON_ETIMEOUT, DMUON_ECOMM. */
dmuon_rc dmuon_reduce_scatterv(dmuon_group *g);

#endif
