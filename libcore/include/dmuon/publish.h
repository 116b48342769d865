/*
 * dmuon/publish.h — the cross-node publish of HSDP (paper §4.2, §5.3, C.2)
 * on the MPI backend.
 *
 * Each parameter has a global owner (r, s); the rank of column s on every
 * other node is the parameter's leader there and keeps a copy of it.  The
 * parameters of rail s sit at fixed offsets of a per-rank copy buffer (the
 * same layout on every node; sized by the heaviest rail, so identical on
 * every rank).  When the owner has written the new values of a parameter
 * into its own copy it posts it; the parameter travels along rail s, node by
 * node from the owner's node (q → q+1 → … → q+R−1), in chunks, and every
 * leader forwards each chunk as it arrives.  Posts do not wait for each
 * other: several parameters are in flight at once and the rail streams.
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

#include "dmuon/rc.h"
#include "dmuon/topo.h"
#include "dmuon/types.h"

typedef struct dmuon_publish dmuon_publish;

typedef struct {
    int deadline_ms;         /* per wait/end call; 0 → $DMUON_DEADLINE_MS or 60000 */
    int64_t chunk_bytes;     /* 0 → 64 KiB; else a multiple of 8, ≥ 256 */
} dmuon_publish_opts;

/* Builds the publish over t for n parameters (collective over t->world;
 * exchanges the table digest).  Errors, identical on every rank:
 * DMUON_EMISMATCH (tables differ; names the first differing parameter),
 * DMUON_EINVAL (owner out of range, count ≤ 0, unknown dtype, misaligned
 * offset, two parameters of one rail overlapping in the copy), DMUON_ENOMEM,
 * DMUON_ECOMM.  On failure *out is NULL. */
dmuon_rc dmuon_publish_create(const dmuon_topo *t, const dmuon_segment *params, int n,
                              const dmuon_publish_opts *opts, dmuon_publish **out);

/* Frees it: cancels armed receives and releases the rail communicator.
 * Accepts NULL. */
void dmuon_publish_free(dmuon_publish *p);

/* This rank's copy buffer (its rail's parameters at their offsets), 64-byte
 * aligned, zeroed at creation; and its size in bytes. */
void *dmuon_publish_copy(const dmuon_publish *p);
int64_t dmuon_publish_copy_bytes(const dmuon_publish *p);

/* Arms the receives of step `step` (> the previous step).  Errors:
 * DMUON_EINVAL (step not increasing, or the previous step not ended),
 * DMUON_ECOMM. */
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

/* Step number in this rank's arrival flag of param (0 before any). */
int64_t dmuon_publish_flag(const dmuon_publish *p, int param);

#endif
