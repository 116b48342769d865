/*
 * dmuon/collv.h — groups and the variable-length operators AllGatherV and
 * ReduceScatterV (paper §5, C.2), over symmetric memory the caller gives
 * them (dmuon/symm.h).
 *
 * A group is built once per layer from a frozen segment table
 * (dmuon/types.h); building it is collective over the topology's world and
 * exchanges a digest of the table, so ranks that disagree all fail, naming
 * the first differing segment.  A group allocates no shared memory: it keeps
 * its control words (and, on MPI, the staging slots of its reduce streams)
 * in a control area of dmuon_group_ctrl_bytes bytes at ctrl_offset of the
 * symmetric memory, and each call names where in that memory its layer
 * buffer and owner window are:
 *   layer buffer  [buffer_offset, + B)  the table's segments at their offsets
 *   owner window  [window_offset, + W)  owned segments at their window_offset
 * (B = end of the last segment, W = the largest window extent of any owner,
 * both from dmuon_table_check).  Offsets are bytes, the same on every rank of
 * a call; different calls of one group may use different ranges (a ZeRO-3
 * parameter range reused between layers).  Ranks of one node read and write
 * each other's memory directly; across nodes chunks move along rails
 * (MPI backend: point-to-point messages), following dmuon/sched.h.
 *
 * Each call is collective over the group (every rank, same order).  Every
 * wait has a deadline; a call that passes it returns DMUON_ETIMEOUT with a
 * message naming this rank, the peer and the queue, and the group is then
 * unusable (later calls return DMUON_ECOMM).  Not thread-safe: one thread
 * per group; groups over one symmetric memory may run one after another
 * with overlapping buffer ranges, but not at the same time.
 */
#ifndef DMUON_COLLV_H
#define DMUON_COLLV_H

#include <stdint.h>

#include "dmuon/rc.h"
#include "dmuon/sched.h"
#include "dmuon/symm.h"
#include "dmuon/table.h"
#include "dmuon/topo.h"
#include "dmuon/types.h"

/* The deadline of one operator call when neither the options nor
 * $DMUON_DEADLINE_MS give one: 10 minutes, as NCCL's default (its
 * watchdog and NCCL_TIMEOUT in PyTorch), so a slow first call (lazy
 * connection setup, a large layer on a slow link) is not taken for a hang.
 * Tests and tools that inject faults set a short one. */
#define DMUON_DEADLINE_MS_DEFAULT 600000
/* Required alignment of a group's control area offset, in bytes. */
#define DMUON_GROUP_CTRL_ALIGN 64
/* Required alignment of the per-call buffer and window offsets, in bytes
 * (the largest element and binary32 partials). */
#define DMUON_GROUP_RANGE_ALIGN 8

typedef struct dmuon_group dmuon_group;

/*
 * The algorithm of a group (docs/operators.md).  Every algorithm works on
 * the same two ranges of a call (layer buffer, owner window) with the same
 * result; they differ in how the bytes move and in which tables they take:
 *
 *   DEFAULT    the backend's own: SCHEDULED on mpi and nccl-dev, PER_OWNER
 *              on nccl (NCCL routes its own rooted calls).
 *   SCHEDULED  the paper's operator: the queues of dmuon/sched.h (rails,
 *              chains or stars, chunks, the documented reduction order).
 *   PER_OWNER  one rooted call per segment (AllGatherV: a broadcast from the
 *              owner, who first copies its window into its own buffer;
 *              ReduceScatterV: a reduce to the owner's window), all of a
 *              call posted together.  Any table.
 *   COALESCED  one variable-length call per operator call (AllGatherV: an
 *              allgatherv; ReduceScatterV: a reduce-scatter with per-rank
 *              counts).  The table must be owner-ordered: owners
 *              non-decreasing in table order, segments back to back in the
 *              layer buffer, and one owner's segments back to back in its
 *              window (dmuon_table_owner_ordered makes one); one element
 *              type.
 *   EQUAL      the equal-length primitive (allgather, reduce-scatter-block)
 *              over even shards: an owner-ordered table of exactly one
 *              segment per rank of the scope, all of one count.
 *
 * Scope (EQUAL and PER_OWNER): WORLD, owners are ranks of the world; NODE,
 * owners are local ranks 0..K-1 and the call runs on every node alike over
 * the node's ranks (HSDP's replicated shards and node-local broadcasts).
 * At node scope AllGatherV moves data inside each node only, while
 * ReduceScatterV still sums over every rank of the world: the node's
 * reduction is summed along each rail afterwards, so every node's owner of
 * a segment holds the same world sum (the HSDP gradient of a replicated
 * shard).
 *
 * Reductions of PER_OWNER, COALESCED and EQUAL are in the order the
 * transport chooses (BF16 rounding at every step; fp32_accum is not
 * offered: DMUON_EUNSUPPORTED at create); they equal SCHEDULED bit for bit
 * only where every order does (integer-valued inputs).  A backend leaves an
 * algorithm out where it has none (DMUON_EUNSUPPORTED at create naming the
 * backend and the algorithm); on mpi all five exist, blocking and split
 * phase; on nccl PER_OWNER (default), COALESCED (one ncclBroadcast /
 * ncclReduce per owner over its run) and EQUAL, blocking and split phase.
 */
typedef enum {
    DMUON_ALGO_DEFAULT = 0,
    DMUON_ALGO_SCHEDULED,
    DMUON_ALGO_PER_OWNER,
    DMUON_ALGO_COALESCED,
    DMUON_ALGO_EQUAL,
    DMUON_ALGO_COUNT
} dmuon_algo;

typedef enum { DMUON_SCOPE_WORLD = 0, DMUON_SCOPE_NODE } dmuon_scope;

/* "default", "scheduled", "per-owner", "coalesced", "equal"; "?" otherwise. */
const char *dmuon_algo_name(dmuon_algo a);
/* The algorithm named text (dmuon_algo_name).  DMUON_EINVAL naming the text
 * and the names otherwise. */
dmuon_rc dmuon_algo_parse(const char *text, dmuon_algo *out);

typedef struct {
    dmuon_path path;          /* AUTO (default), CHAIN or STAR; see sched.h */
    int64_t chunk_bytes;      /* 0 → the backend's (MPI: 64 KiB less 128 bytes,
                                 one eager TCP fragment); else a multiple of 8, ≥ 256
                                 (dmuon_chunk_bytes_check) */
    int64_t star_max_bytes;   /* AUTO picks star up to this many bytes per
                                 source node; 0 → 256 KiB */
    int deadline_ms;          /* bounds one whole operator call (every wait
                                 of it together, progress or not); 0 →
                                 $DMUON_DEADLINE_MS or 600000 (10 min) */
    int slots;                /* ring slots per incoming reduce stream; 0 → 4 */
    int fp32_accum;           /* BF16 reduce: carry binary32 partials and
                                 round once, at the owner (SCHEDULED only) */
    dmuon_algo algorithm;     /* DEFAULT (0) → the backend's; see above */
    dmuon_scope scope;        /* EQUAL and PER_OWNER: WORLD (0) or NODE */
    int staging_shared;       /* 0 (default): a ReduceScatterV's staging slots
                                 (MPI SCHEDULED: slots × streams × 2 chunks
                                 per reduce queue, dmuon_group_staging_bytes)
                                 are part of the group's control area; else
                                 they lie at staging_offset of the memory
                                 (DMUON_GROUP_CTRL_ALIGN-aligned, outside the
                                 control area) and the control area holds the
                                 control words only.  Several groups may be
                                 given overlapping staging: the caller
                                 guarantees that no two of them have a
                                 ReduceScatterV in flight at once (an
                                 AllGatherV does not use it; a call uses it
                                 from start to its completion) */
    int64_t staging_offset;   /* with staging_shared: bytes into the memory */
} dmuon_group_opts;

/* Reads the deadline in ms from opts (if > 0), else $DMUON_DEADLINE_MS, else
 * the default.  DMUON_EINVAL if the variable is not a positive integer. */
dmuon_rc dmuon_deadline_ms(int opt_ms, int *out);

/* Bytes of control area one group over this table needs on t's backend
 * (the same on every rank for the same table, opts and topology; a multiple
 * of DMUON_GROUP_CTRL_ALIGN).  Not collective.  MPI: 384 bytes of control
 * words plus slots × (streams in + 1) staging slots of 2 × chunk bytes per
 * reduce queue, maximised over the nodes (the slots not with
 * opts->staging_shared).  Errors: DMUON_EINVAL (a bad table,
 * see dmuon_table_check, or bad opts: chunk size, path), DMUON_EUNSUPPORTED
 * (t->backend not built), DMUON_ENOMEM. */
dmuon_rc dmuon_group_ctrl_bytes(const dmuon_topo *t, const dmuon_segment *segs, int n,
                                const dmuon_group_opts *opts, int64_t *bytes);

/* Bytes of the staging a ReduceScatterV of this table uses on t's backend
 * (0 for the algorithms and backends that stage nothing; the same on every
 * rank).  Not collective.  Errors: as dmuon_group_ctrl_bytes. */
dmuon_rc dmuon_group_staging_bytes(const dmuon_topo *t, const dmuon_segment *segs, int n,
                                   const dmuon_group_opts *opts, int64_t *bytes);

/* Builds a group over t for the n segments of segs (copied; the caller keeps
 * segs), with its control area at [ctrl_offset, ctrl_offset +
 * dmuon_group_ctrl_bytes) of mem.  Collective over t->world; zeroes the
 * control area on every rank.  The group keeps the pointers t and mem, which
 * must outlive it; the control area belongs to the group until
 * dmuon_group_free (callers must not touch it, and two live groups must not
 * share one).  Errors, identical on every rank: DMUON_EMISMATCH (tables
 * differ: the message names the first differing segment and the rank that
 * differs from rank 0), DMUON_EINVAL (a bad table, see dmuon_table_check;
 * bad opts; mem allocated over another topology or backend; ctrl_offset
 * negative, not a multiple of DMUON_GROUP_CTRL_ALIGN, or the area not inside
 * mem; the same for a shared staging area, or one overlapping the control
 * area; a call's buffer or window overlapping either, at the call),
 * DMUON_EUNSUPPORTED (t->backend not built), DMUON_ENOMEM (on any
 * rank), DMUON_ECOMM, DMUON_ETIMEOUT (a rank did not reach one of create's
 * agreements, dmuon/ctl.h, within the deadline: opts->deadline_ms as for
 * the calls, so a value > 0 is used without reading the environment; the
 * backend's setup, e.g. NCCL's node and rail communicators, included).
 * An algorithm the backend does not offer, or
 * fp32_accum with another algorithm than SCHEDULED: DMUON_EUNSUPPORTED naming
 * both; a table the algorithm cannot take (see dmuon_algo): DMUON_EINVAL
 * naming the first segment that breaks its rule.  On failure *out is NULL. */
dmuon_rc dmuon_group_create(const dmuon_topo *t, const dmuon_segment *segs, int n,
                            const dmuon_group_opts *opts, dmuon_symm *mem, int64_t ctrl_offset,
                            dmuon_group **out);

/* Where one group's ranges sit when a caller gives it memory of its own
 * (tools and tests; the runtime lays out its pool itself): the control
 * area, the layer buffer and the owner window back to back, each starting
 * at a multiple of DMUON_SYMM_ALIGN; bytes is the symmetric memory to
 * allocate. */
typedef struct {
    int64_t ctrl_offset, buffer_offset, window_offset, bytes;
} dmuon_group_span;

/* Fills *out for this table (not collective; the same on every rank for
 * the same inputs).  Errors: as dmuon_group_ctrl_bytes. */
dmuon_rc dmuon_group_span_of(const dmuon_topo *t, const dmuon_segment *segs, int n,
                             const dmuon_group_opts *opts, dmuon_group_span *out);

/* Frees the group (collective over t->world: releases its rail
 * communicator); the control area is the caller's again.  After a failed
 * call free it only if every rank is still alive; a tool that gives up after
 * a timeout may leave it to process exit.  Accepts NULL. */
void dmuon_group_free(dmuon_group *g);

/* Bytes of the layer buffer (B) and of the owner window (W) of one call,
 * from the table. */
int64_t dmuon_group_buffer_bytes(const dmuon_group *g);
int64_t dmuon_group_window_bytes(const dmuon_group *g);

/* 1 if backend b is built and offers algorithm a for groups (DEFAULT: the
 * backend's own), else 0.  Not collective. */
int dmuon_group_algo_offered(dmuon_backend b, dmuon_algo a);

/* The algorithm the group runs (DEFAULT resolved to the backend's). */
dmuon_algo dmuon_group_algo(const dmuon_group *g);

/* The schedule a kind of call runs (for reports and tests). */
const dmuon_sched *dmuon_group_sched(const dmuon_group *g, dmuon_sched_kind kind);

/* For callers that keep a host image of a group's symmetric memory (tools
 * and tests on a GPU backend): copies the layer buffer [buffer_offset, + B)
 * and the owner window [window_offset, + W) between host (an image laid
 * out like the memory: the ranges at the same offsets) and the memory,
 * to_memory 1 host → memory, 0 back.  Not collective; synchronous.  Errors:
 * those of dmuon_symm_put / dmuon_symm_get (ranges outside the memory). */
dmuon_rc dmuon_group_host_copy(const dmuon_group *g, int64_t buffer_offset,
                               int64_t window_offset, unsigned char *host, int to_memory);

/* AllGatherV over the layer buffer at buffer_offset and the owner windows at
 * window_offset (bytes into the group's symmetric memory, the same on every
 * rank): segment i's bytes in its owner's window at window_offset land at
 * offset in the layer buffer of every rank (the owner's own buffer
 * included), bit for bit.  Owners must have written their windows before the
 * call.  The two ranges must lie inside the memory, be multiples of
 * DMUON_GROUP_RANGE_ALIGN and overlap neither each other nor the group's
 * control area.  Errors: DMUON_EINVAL (a range breaking those rules,
 * returned before any communication and leaving the group usable; when only
 * some ranks pass bad offsets the others time out), DMUON_ETIMEOUT
 * (deadline; message names rank, peer, queue), DMUON_ECOMM (an MPI call
 * failed, or the group failed before). */
dmuon_rc dmuon_allgatherv(dmuon_group *g, int64_t buffer_offset, int64_t window_offset);

/* ReduceScatterV over the same two ranges: for every segment, the sum over
 * all ranks of the layer buffers' bytes at offset lands in the owner's
 * window at window_offset, in the order documented in dmuon/sched.h (BF16
 * rounds at every level unless fp32_accum).  Element types BF16 and F32
 * only.  Layer buffers are read, not changed.  Errors: DMUON_EUNSUPPORTED
 * (another element type, returned by every rank before any communication),
 * DMUON_EINVAL (ranges, as for dmuon_allgatherv), DMUON_ETIMEOUT,
 * DMUON_ECOMM. */
dmuon_rc dmuon_reduce_scatterv(dmuon_group *g, int64_t buffer_offset, int64_t window_offset);

/*
 * Split phase, for prefetching a layer while computing another:
 *
 *   dmuon_allgatherv_start(g, buf, win);   enters the call, arms receives,
 *                                          moves what it can, returns
 *   ... compute (no progress happens here) ...
 *   dmuon_allgatherv_test(g, &done);       optional, any number of times:
 *                                          moves what it can, never blocks
 *   dmuon_allgatherv_wait(g);              blocks until the call is complete
 *
 * dmuon_allgatherv is start + wait.  Progress happens only inside start,
 * test and wait of this group, and inside the wait loops of any other
 * group call over the same symmetric memory (a blocking call or wait on
 * group B moves a started call of group A, so A's peers are never left
 * waiting for this rank while it blocks in B).  A rank that computes
 * between start and wait makes the ranks that need its forwarding wait for
 * it until it next calls test or wait; they give up after their deadline,
 * so a long computation should call test now and then.  The deadline of a
 * split call runs from wait (start and test never time out); the ranges
 * and the layer buffer's contents belong to the call until wait returns
 * (do not read the buffer or change the owner window in between).  One
 * call in flight per group: a second start, or a blocking call, before the
 * wait is DMUON_EINVAL (the first call is unaffected).
 *
 * Errors of start: as the blocking call's before any waiting (DMUON_EINVAL
 * for ranges or a call already in flight, DMUON_ECOMM).  Errors of test and
 * wait: DMUON_EINVAL (nothing started on g), DMUON_ETIMEOUT (wait only;
 * the message names rank, peer and queue), DMUON_ECOMM; any failure of the
 * call, also one noticed while another group moved it, is reported by the
 * next test or wait and leaves the group unusable.  *done is 1 once the
 * call is complete (then the call is over, as after wait), else 0.
 * ReduceScatterV has the same three, with its own errors
 * (DMUON_EUNSUPPORTED for element types) and the same rules.
 *
 * On the nccl backend start enqueues the call's NCCL group on the memory's
 * stream (dmuon_symm_stream) and records a CUDA event after it; the data
 * then moves on the GPU without any host call, and test and wait only
 * query the event and the communicators' asynchronous errors (no progress
 * of other groups is needed).  A deadline or an asynchronous NCCL error
 * aborts every NCCL communicator of the memory (DMUON_ETIMEOUT /
 * DMUON_ECOMM; every later call on them: DMUON_ECOMM).  Work the caller
 * enqueues on the same stream after start is ordered after the call.
 * Several groups over one memory may have calls in flight at once, but
 * every rank must start the calls over one memory in the same order (NCCL
 * matches collectives on a communicator by their order; another order
 * deadlocks until the deadline).
 */
dmuon_rc dmuon_allgatherv_start(dmuon_group *g, int64_t buffer_offset, int64_t window_offset);
dmuon_rc dmuon_allgatherv_test(dmuon_group *g, int *done);
dmuon_rc dmuon_allgatherv_wait(dmuon_group *g);
dmuon_rc dmuon_reduce_scatterv_start(dmuon_group *g, int64_t buffer_offset,
                                     int64_t window_offset);
dmuon_rc dmuon_reduce_scatterv_test(dmuon_group *g, int *done);
dmuon_rc dmuon_reduce_scatterv_wait(dmuon_group *g);

#endif
