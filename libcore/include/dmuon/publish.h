/*
 * dmuon/publish.h — the cross-node publish of HSDP (paper §4.2, §5.3, C.2)
 * over symmetric memory.
 *
 * Each parameter has a global owner (r, s); the rank of column s on every
 * other node is the parameter's leader there and keeps a copy of it.  The
 * parameters of rail s sit at fixed offsets of a per-rank copy buffer (the
 * same layout on every node; sized by the heaviest rail, so identical on
 * every rank).  The copy buffer is a range of symmetric memory the caller
 * gives at create (dmuon/symm.h), [copy_offset, copy_offset +
 * dmuon_publish_copy_bytes_needed), at the same offset on every rank; the
 * publish allocates no copy of its own.  When the owner has written the new values of a parameter
 * into its own copy it posts it; the parameter travels on rail s, in
 * chunks, to every other node: along the schedule's chain, node by node
 * from the owner's node (q → q+1 → … → q+R−1), every leader forwarding each
 * chunk as it arrives, or on mpi by the route its size picks (fan-out from
 * the owner, or the relay through one leader per message: dmuon/sched.h,
 * dmuon_pub_route; dmuon_publish_routes says which).  Posts do not wait
 * for each other: several parameters are in flight at once and the rail
 * streams.
 *
 * Each parameter has an arrival flag on every leader holding the step number
 * of the last complete arrival; flags are never reset.  A wait for step t
 * accepts only t: an earlier step's flag (t−1 left from the last step, or a
 * stale t−1 delivered now) never satisfies it.
 *
 * Per step, on every rank: begin(t); then, in any interleaving, post(p, t)
 * for the parameters this rank owns and wait(p, t) for those it leads;
 * finally end(t).  Not thread-safe.  The table is a segment table
 * (dmuon/types.h) read as: owner, dtype, count as usual; offset = bytes into
 * the copy buffer of the owner's rail; window_offset is not used.
 */
#ifndef DMUON_PUBLISH_H
#define DMUON_PUBLISH_H

#include <stdint.h>

#include "dmuon/collv.h"
#include "dmuon/rc.h"
#include "dmuon/sched.h"
#include "dmuon/symm.h"
#include "dmuon/table.h"
#include "dmuon/topo.h"
#include "dmuon/types.h"

typedef struct dmuon_publish dmuon_publish;

typedef struct {
    int deadline_ms;         /* per wait/end call; 0 → $DMUON_DEADLINE_MS or 600000 (10 min) */
    int64_t chunk_bytes;     /* 0 → the backend's (MPI: 64 KiB less 128 bytes,
                                one eager TCP fragment); else a multiple of 8,
                                ≥ 256 */
    dmuon_algo algorithm;    /* DEFAULT (0) or SCHEDULED: chunks along the rail as
                                posted, per-parameter flags, the node half;
                                PER_OWNER: nothing moves until end, which runs one
                                broadcast per parameter on its rail from the owner's
                                node, in table order; COALESCED: nothing moves until
                                end, which runs one variable-length allgather per run
                                of the rail (a longest stretch of its parameters in
                                table order with owner nodes not decreasing and copy
                                offsets increasing; a table ordered by owner node and
                                laid out by dmuon_publish_layout is one run), in
                                place in the copy, padding between one node's
                                parameters included.  For both, wait is not offered
                                (DMUON_EUNSUPPORTED) and a flag changes at end;
                                node_load is not offered on mpi and, on nccl, follows
                                end of its step (see dmuon_publish_node_load).  EQUAL
                                has no publish form (DMUON_EUNSUPPORTED at create); a
                                backend without an algorithm refuses it the same way
                                (mpi has all three; nccl offers PER_OWNER only) */
} dmuon_publish_opts;

/* The publish copy layout: the parameters of each rail back to back in
 * table order, each at the next multiple of its element size, starting at
 * 0 on every rail (the same layout on every node).  Writes into out[i] the
 * segment segs[i] with offset = its bytes into the copy and window_offset =
 * 0 (out may be segs: done in place), and the heaviest rail's extent into
 * *copy_bytes (0 for no parameters; what dmuon_publish_copy_bytes_needed
 * then returns).  Pure: per_node is K.  Errors: DMUON_EINVAL (per_node < 1,
 * n < 0, an owner < 0, an unknown element type; naming the parameter),
 * DMUON_ENOMEM. */
dmuon_rc dmuon_publish_layout(int per_node, const dmuon_segment *segs, int n, dmuon_segment *out,
                              int64_t *copy_bytes);

/* Bytes of copy buffer a publish of this table needs on every rank: the
 * largest end offset of any parameter (0 for no parameters).  Not
 * collective.  Errors: DMUON_EINVAL (see dmuon_table_check_publish),
 * DMUON_ENOMEM. */
dmuon_rc dmuon_publish_copy_bytes_needed(const dmuon_topo *t, const dmuon_segment *params, int n,
                                         int64_t *bytes);

/* Builds the publish over t for n parameters (copied), its copy buffer at
 * copy_offset of mem (collective over t->world; exchanges the table
 * digest).  The publish keeps the pointers t and mem, which must outlive it;
 * it neither clears nor reads the copy range at creation (owners write their
 * parameters there before posting them; leaders' copies are overwritten by
 * arrivals).  Errors, identical on every rank: DMUON_EMISMATCH (tables
 * differ; names the first differing parameter), DMUON_EINVAL (owner out of
 * range, count ≤ 0, unknown dtype, misaligned offset, two parameters of one
 * rail overlapping in the copy, more parameters than MPI tags, mem over
 * another topology or backend, copy_offset negative, not a multiple of 8,
 * the copy not inside mem, or, for the scheduled publish on mpi,
 * $DMUON_PUBLISH_FANOUT_BYTES or $DMUON_PUBLISH_MESSAGE_BYTES not the same
 * non-negative decimal on every rank, the latter at most 2^30, or
 * $DMUON_PUBLISH_ROUTE not the same one of auto, fan-out, relay and chain
 * on every rank),
 * DMUON_EUNSUPPORTED (t->backend not built),
 * DMUON_ENOMEM, DMUON_ECOMM, DMUON_ETIMEOUT (a rank did not reach create's
 * agreements, dmuon/ctl.h, within opts->deadline_ms — used as given when
 * > 0, the environment not read — the backend's setup included).  On
 * failure *out is NULL. */
dmuon_rc dmuon_publish_create(const dmuon_topo *t, const dmuon_segment *params, int n,
                              const dmuon_publish_opts *opts, dmuon_symm *mem,
                              int64_t copy_offset, dmuon_publish **out);

/* Frees it: cancels armed receives and releases the rail communicator; the
 * copy range is the caller's again.  Accepts NULL. */
void dmuon_publish_free(dmuon_publish *p);

/* This rank's copy buffer (dmuon_symm_base(mem) + copy_offset: its rail's
 * parameters at their offsets) and its size in bytes. */
void *dmuon_publish_copy(const dmuon_publish *p);
int64_t dmuon_publish_copy_bytes(const dmuon_publish *p);

/* The algorithm the publish runs (DEFAULT resolved). */
dmuon_algo dmuon_publish_algo(const dmuon_publish *p);

/* The schedule the publish runs (chunks and chain routes, dmuon/sched.h),
 * valid until dmuon_publish_free.  The scheduled publish on mpi over more
 * than two nodes sends a parameter of at most $DMUON_PUBLISH_FANOUT_BYTES
 * (default 128 KiB) from its owner to every leader directly (fan-out), a
 * larger one by the relay (the owner sends each message to one leader,
 * which forwards it to the others) instead of along the chain, in the same
 * chunks; $DMUON_PUBLISH_ROUTE (fan-out, relay or chain) sends every
 * parameter by one route.  Chain and relay parameters travel in messages
 * of 4 or more whole chunks (up to $DMUON_PUBLISH_MESSAGE_BYTES, default
 * 1 MiB), or of one chunk where fewer would make a message, with the last
 * chunk alone (docs/operators.md, "Publish routes"). */
const dmuon_pub_sched *dmuon_publish_sched(const dmuon_publish *p);

/* How this publish's parameters travel, in words for reports and logs
 * (the same on every rank), valid until dmuon_publish_free: on mpi's
 * scheduled publish over more than two nodes the routes it picks and their
 * limits, e.g. "fan-out up to 131072 bytes, relay above (messages of 4
 * to 16 chunks of 65408 bytes, else of one)" (see dmuon_publish_sched
 * above); "chain" for the
 * schedule's route alone; the algorithm's name for the others; "none (one
 * node)" on one node. */
const char *dmuon_publish_routes(const dmuon_publish *p);

/* Arms the receives of step `step` (> the previous step; on mpi, starts
 * the rail's receives that create built as persistent requests).  Errors:
 * DMUON_EINVAL (step not increasing, or the previous step not ended),
 * DMUON_ECOMM (an MPI call failed, or the publish failed before). */
dmuon_rc dmuon_publish_begin(dmuon_publish *p, int64_t step);

/* Posts parameter `param` of this step: the owner's copy holds its new
 * values.  Returns at once (the data streams out while the caller goes on;
 * the copy's bytes of this parameter must not change until end).  Errors:
 * DMUON_EINVAL (this rank does not own param, or step is not the current
 * one — except that a test may deliberately post an older step to check
 * that leaders reject it), DMUON_ECOMM. */
dmuon_rc dmuon_publish_post(dmuon_publish *p, int param, int64_t step);

/* Forwards whatever has arrived; never blocks.  Errors: DMUON_ECOMM. */
dmuon_rc dmuon_publish_progress(dmuon_publish *p);

/* Leader side: waits until parameter `param` of step `step` has arrived
 * whole in this rank's copy.  Errors: DMUON_EINVAL (this rank does not lead
 * param), DMUON_ECHECK (the parameter's arrival of this step carries another
 * step number: a stale flag, never accepted; the message names both steps,
 * the parameter and its owner), DMUON_ETIMEOUT (deadline; names the
 * parameter, the rail and the rank it waits on), DMUON_ECOMM. */
dmuon_rc dmuon_publish_wait(dmuon_publish *p, int param, int64_t step);

/* Waits until every parameter this rank leads has arrived and every chunk it
 * sends has been taken.  Errors: as dmuon_publish_wait. */
dmuon_rc dmuon_publish_end(dmuon_publish *p, int64_t step);

/* The node half of the publish: every rank of a node loads n parameters of
 * step `step` from the copy of the node's rank that leads each (local rank =
 * owner mod K; the owner itself on the owner's node) into its own part of
 * the publish's symmetric memory: parameter params[j] (an index into the
 * publish's table) lands at dst_offset + segs[j].offset, its bytes as the
 * table gives them (segs: a layer's segment table, only offsets are read).
 * It first waits for the listed parameters this rank leads (as
 * dmuon_publish_wait), then the node's ranks meet, load and meet again, so
 * no rank changes its copy before every rank of the node has read it.
 * Collective over the node (every rank of it, the same list and step); the
 * publish's step must be open (between begin and end).  On the nccl backend
 * (PER_OWNER) it follows end(step) instead, before the next begin: the
 * copies are complete then, and it is one ncclBroadcast per listed
 * parameter on the node communicator, root the column that leads it, from
 * that rank's copy to every rank's destination (its own included), enqueued
 * on the memory's stream and waited for within the deadline (past it the
 * memory's NCCL communicators are aborted: DMUON_ETIMEOUT).  Errors: DMUON_EINVAL
 * (an index outside the table, a destination range outside the memory or
 * overlapping the copy; before any communication), those of
 * dmuon_publish_wait, DMUON_ETIMEOUT (a rank of the node did not arrive
 * within the deadline; names the node), DMUON_ECOMM, DMUON_EUNSUPPORTED (a
 * backend without node-shared memory; the MPI per-owner publish), and on
 * nccl DMUON_EINVAL when step is not the last ended one, DMUON_ECOMM (an NCCL
 * call failed, or the communicators were aborted before), DMUON_EDEVICE;
 * DMUON_EINVAL while a split-phase node load is in flight on this publish
 * (dmuon_publish_node_load_start).  On the MPI scheduled publish it is
 * dmuon_publish_node_load_start followed by dmuon_publish_node_load_wait. */
dmuon_rc dmuon_publish_node_load(dmuon_publish *p, const dmuon_segment *segs, const int *params,
                                 int n, int64_t dst_offset, int64_t step);

/* The node half split phase: dmuon_publish_node_load as start, test and
 * wait, so the load overlaps the caller's compute.  At most one node load in
 * flight per publish (the blocking dmuon_publish_node_load counts as one
 * while it runs).  Collective over the node as dmuon_publish_node_load: every
 * rank of the node starts the same list and step, and every rank must go on
 * to its test-until-done or its wait.
 *
 * start: the arguments, shapes and units as dmuon_publish_node_load (n
 * parameters; params[j] an index into the publish's table; parameter
 * params[j] lands at byte dst_offset + segs[j].offset of this rank's part of
 * the publish's symmetric memory).  Start checks them and copies the list
 * (params and the segments' offsets), so segs and params are the caller's
 * again when start returns; the destination bytes must not be read or
 * written until the node load completes.  Start communicates nothing and
 * never blocks.  On the MPI scheduled publish the load then runs as: the
 * listed parameters this rank leads have arrived (their flags, tested
 * without blocking) → MPI_Ibarrier on the node → the copies from the
 * leaders' node-shared copies → MPI_Ibarrier → done.  Errors: DMUON_EINVAL
 * (as dmuon_publish_node_load's, before any communication; or a node load
 * already in flight on this publish, which is left as it was),
 * DMUON_EUNSUPPORTED (the backend or algorithm does not offer it: the MPI
 * per-owner and coalesced publishes, nccl; or the node's memory is not
 * mapped), DMUON_ENOMEM (the copy of the list).
 *
 * test: moves the node load on without blocking (it also moves the publish,
 * as dmuon_publish_progress) and sets *done to 1 once it has completed (the
 * destinations hold the step's parameters; no node load is in flight any
 * more: a later test or wait is DMUON_EINVAL), else 0.  Errors: DMUON_EINVAL
 * (done NULL, or none started), DMUON_ECHECK (a parameter this rank leads
 * arrived with another step: a stale flag), DMUON_ECOMM (an MPI call failed,
 * or the publish failed before).  After an error nothing is in flight.
 *
 * wait: completes the node load within the publish's deadline
 * (dmuon_publish_opts, milliseconds), which starts over whenever the load moves on (an arrival, a meeting), as each
 * stage of the blocking form has its own.  Errors: DMUON_EINVAL (none
 * started, or the one started was already seen complete by a test), those
 * of test, DMUON_ETIMEOUT (a parameter this rank leads did not arrive: names
 * the parameter, the rail and the rank it waits on; or a rank of the node
 * did not meet: names the node).  After any error nothing is in flight, and
 * after DMUON_ETIMEOUT or DMUON_ECOMM the node's ranks are out of step: the
 * caller stops communicating on this publish and frees it (an abandoned
 * node meeting is left to MPI, not freed). */
dmuon_rc dmuon_publish_node_load_start(dmuon_publish *p, const dmuon_segment *segs,
                                       const int *params, int n, int64_t dst_offset,
                                       int64_t step);
dmuon_rc dmuon_publish_node_load_test(dmuon_publish *p, int *done);
dmuon_rc dmuon_publish_node_load_wait(dmuon_publish *p);

/* Step number in this rank's arrival flag of param (0 before any). */
int64_t dmuon_publish_flag(const dmuon_publish *p, int param);

#endif
