/*
 * dmuon/symm.h — symmetric memory: one allocation per rank, the same size on
 * every rank, that the operators of dmuon/collv.h and dmuon/publish.h work
 * in (paper §6, C.1, C.2).  Callers lay out their ranges (layer buffers,
 * owner windows, operator control areas, publish copies) at byte offsets
 * that are the same on every rank, and pass those offsets to the operators.
 *
 * Backends (dmuon_topo.backend): MPI allocates one node-shared window per
 * node (MPI_Win_allocate_shared over t->node), so every rank can load and
 * store its node peers' memory directly (dmuon_symm_peer).  The NCCL
 * backends allocate the same thing on the GPU with ncclMemAlloc and register
 * it as a symmetric window (ncclCommWindowRegister, NCCL_WIN_COLL_SYMMETRIC;
 * comm/nccl_symm.c); the type is opaque for that reason.
 */
#ifndef DMUON_SYMM_H
#define DMUON_SYMM_H

#include <stdint.h>

#include "dmuon/rc.h"
#include "dmuon/topo.h"

/* Alignment of every rank's base, in bytes (each part is allocated rounded up to a
 * multiple of it too): 4 KiB, the page size and NCCL's window granule. */
#define DMUON_SYMM_ALIGN 4096

typedef struct dmuon_symm dmuon_symm;

/* Allocates `bytes` bytes of symmetric memory on every rank of t
 * (collective over t->world; bytes must be the same on every rank).  Each
 * rank's part starts DMUON_SYMM_ALIGN-aligned and is zeroed; when the call
 * returns every rank has zeroed its part (so peers may write at once).  The
 * memory keeps the pointer t, which must outlive it.  Errors, identical on
 * every rank: DMUON_EMISMATCH (ranks gave different sizes; the message gives
 * the smallest and largest), DMUON_EINVAL (bytes ≤ 0 or above 2^46),
 * DMUON_EUNSUPPORTED (t->backend is not built; the MPI backend over a
 * topology handed over from NCCL), DMUON_ENOMEM (the shared window or
 * bookkeeping could not be allocated on some rank), DMUON_ECOMM,
 * DMUON_ETIMEOUT (a rank did not reach one of the agreements within the
 * deadline).  deadline_ms bounds each agreement of the call (the size, the
 * allocation's outcome, and the backend's setup: NCCL's unique id,
 * communicators and window registration): > 0 is used as given, without
 * reading the environment; 0 means $DMUON_DEADLINE_MS or the default
 * (dmuon_deadline_ms, dmuon/collv.h; a bad variable is DMUON_EINVAL);
 * negative is DMUON_EINVAL.  On failure *out is NULL. */
dmuon_rc dmuon_symm_alloc(const dmuon_topo *t, int64_t bytes, int deadline_ms, dmuon_symm **out);

/* Frees the memory (collective over t->node; every group and publish built
 * over it must be freed first).  After a failed operator call free it only
 * if every rank is still alive; a tool that gives up after a timeout may
 * leave it to process exit.  Accepts NULL. */
void dmuon_symm_free(dmuon_symm *s);

/* This rank's part: DMUON_SYMM_ALIGN-aligned, dmuon_symm_bytes(s) bytes,
 * valid until dmuon_symm_free. */
void *dmuon_symm_base(const dmuon_symm *s);

/* The part of node peer `local` (0 ≤ local < t->per_node; this rank's own
 * local index gives dmuon_symm_base) as mapped into this process, for loads
 * and stores inside the node; NULL for an index out of range.  Writes into a
 * peer's part are visible to it after a synchronisation (the operators'
 * release/acquire counters, or a barrier). */
void *dmuon_symm_peer(const dmuon_symm *s, int local);

/* Bytes of each rank's part (as given to dmuon_symm_alloc). */
int64_t dmuon_symm_bytes(const dmuon_symm *s);

/* The backend that allocated it. */
dmuon_backend dmuon_symm_backend(const dmuon_symm *s);

/* Whether this rank's part is device (GPU) memory: the NCCL backends; then
 * dmuon_symm_base is a device pointer and dmuon_symm_peer gives NULL. */
int dmuon_symm_on_device(const dmuon_symm *s);

/* The CUDA stream (a cudaStream_t, as void *) the operators over s enqueue
 * on: the NCCL backends' calls of groups and publishes over s, and the
 * ordering point of dmuon_symm_put / _get (which synchronise it first).  A
 * memory starts with a non-blocking stream of its own, made at allocation
 * and destroyed by dmuon_symm_free.  NULL on host memory (MPI).  Not
 * collective. */
void *dmuon_symm_stream(const dmuon_symm *s);

/* Makes the operators over s enqueue on `stream` (a cudaStream_t of the
 * memory's device, as void *; NULL: back to the memory's own), so a
 * trainer orders its kernels and the layer's communication on one stream
 * without synchronising the host.  The stream stays the caller's: it must
 * outlive every call over s that enqueues on it and is never destroyed
 * here.  Change it only between calls (no split-phase call in flight).
 * Split-phase calls record an event after their work on it, and test /
 * wait poll that event (dmuon/collv.h).  Not collective (each rank its
 * own).  Errors: DMUON_EUNSUPPORTED (host memory: the MPI backend). */
dmuon_rc dmuon_symm_set_stream(dmuon_symm *s, void *stream);

/* Gives the pages of [offset, offset + bytes) of this rank's part back to
 * the system, where the memory allows it: host memory (the MPI backend's
 * node-shared window, a shared mapping of a file in memory) through
 * madvise(MADV_REMOVE), which frees the whole 4 KiB pages inside the range;
 * they read as zeros afterwards and take memory again when next touched.
 * The bytes of the range's partial pages at either end, all of it where the
 * system refuses (a file system without hole punching) and device memory
 * (the NCCL backends: allocated once, nothing is given back) keep their
 * contents.  For memory whose contents are dead: no peer may read the
 * range while it runs.  Not collective.  *released (may be NULL): the bytes
 * given back, 0 where nothing could be.  Errors: DMUON_EINVAL (the range is
 * not inside the part). */
dmuon_rc dmuon_symm_release(dmuon_symm *s, int64_t offset, int64_t bytes, int64_t *released);

/* Copies bytes between host memory and this rank's part at offset (a plain
 * memcpy for host memory, cudaMemcpy for device memory; synchronous; not
 * collective; device memory: after the memory's stream, dmuon_symm_stream,
 * has finished its work).  Errors: DMUON_EINVAL (the range is not inside
 * the part), DMUON_EDEVICE (the copy failed). */
dmuon_rc dmuon_symm_put(dmuon_symm *s, int64_t offset, const void *src, int64_t bytes);
dmuon_rc dmuon_symm_get(const dmuon_symm *s, int64_t offset, void *dst, int64_t bytes);

#endif
