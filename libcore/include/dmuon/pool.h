/*
 * dmuon/pool.h — layout of the symmetric pool (paper §6, C.1).
 *
 * Every rank holds one allocation with the same layout: control area of the
 * operators, the working space (gathered layer parameters, full-layer
 * gradient buffers, the FP32 weight views, the owners' per-layer gather
 * sources and reduce destinations, the step's scratch), and windows (what
 * this rank keeps between steps: the owner windows where the layout keeps
 * them, the even shards, the HSDP publish copy, line B's direction
 * buffers).  Offsets are bytes from the
 * pool's base, each range 64-byte aligned (4 KiB for the base, as NCCL's
 * symmetric windows require).
 *
 * Reuse.  The working space holds blocks that are live between an acquire
 * and a release.  The plan's order of one micro-batch (dmuon/layout.h)
 * gives the sequence of events; dmuon_pool_pack places every acquisition
 * where no block live at the same time lies, so blocks never live
 * together share bytes.  The same events give the same offsets
 * on every rank.
 */
#ifndef DMUON_POOL_H
#define DMUON_POOL_H

#include <stddef.h>
#include <stdint.h>

#include "dmuon/rc.h"

#define DMUON_POOL_ALIGN 64
#define DMUON_POOL_BASE_ALIGN 4096

enum {
    DMUON_SPACE_CTRL = 0,   /* operators' control words and reduce staging */
    DMUON_SPACE_WORK,       /* gathered parameters, gradient blocks, weight
                               views, the step's scratch */
    DMUON_SPACE_WINDOW,     /* owner windows, shards, publish copy */
    DMUON_SPACE_COUNT
};

/* Name of a space ("control", "working", "windows"). */
const char *dmuon_pool_space_name(int space);

/* One event of a recorded micro-batch: block `block` (an index < nblocks)
 * is acquired (acquire = 1) or released (0).  A block acquired and never
 * released stays live to the end. */
typedef struct {
    int32_t block;
    int32_t acquire;
} dmuon_pool_event;

/* Packs a space offline.  sizes[b] is the bytes of block b; events in
 * order; acquisition k (the k-th event with acquire = 1) is live until its
 * block's next release (or the end) and gets offsets[k] (caller array of as
 * many entries as acquisitions; bytes, multiples of DMUON_POOL_ALIGN), with
 * *total the bytes of the space.  First fit: acquisitions in an order,
 * each at the lowest offset free of those already placed that are live at
 * the same time; three orders are tried (largest first, longest-lived
 * first, those live at the moments of most live bytes first) and the
 * smallest space kept (ties: the earlier order).  A block acquired while live, or released while not live, is
 * DMUON_EINVAL naming the event and block; DMUON_ENOMEM.  Pure: same
 * input, same output. */
dmuon_rc dmuon_pool_pack(const dmuon_pool_event *ev, size_t nev, const int64_t *sizes,
                         size_t nblocks, int64_t *offsets, int64_t *total);

/* The regions of the window space, in this order. */
enum {
    DMUON_WIN_PARAM = 0,    /* owner window, parameter dtype (FSDP's AllGatherV
                               source); empty with per-layer owner parts */
    DMUON_WIN_GRAD,         /* owner window, F32 (ReduceScatterV destination);
                               empty with per-layer owner parts */
    DMUON_WIN_EVEN,         /* even shards of every layer, parameter dtype */
    DMUON_WIN_EVEN_GRAD,    /* even shards, F32 (reduce-scatter destination) */
    DMUON_WIN_COPY,         /* HSDP: the publish copy of this rank's rail */
    DMUON_WIN_DIR,          /* line B: Nesterov directions, F32 (two buffers of a
                               layer's gathered directions and this rank's shard) */
    DMUON_WIN_COUNT
};

/* What a pool is laid out from: the bytes of the control area, of the
 * working space, and of each window region (unaligned: the layout aligns
 * each). */
typedef struct {
    int64_t ctrl, work;
    int64_t win[DMUON_WIN_COUNT];
} dmuon_pool_sizes;

/* Where everything lies, bytes from the pool's base.  space_bytes of the
 * window space is the sum of its aligned regions; each space starts at a
 * multiple of DMUON_POOL_BASE_ALIGN, each window region at a multiple of
 * DMUON_POOL_ALIGN inside it; total is the bytes to allocate. */
typedef struct {
    int64_t space_off[DMUON_SPACE_COUNT], space_bytes[DMUON_SPACE_COUNT];
    int64_t win_off[DMUON_WIN_COUNT];
    int64_t total;
} dmuon_pool_map;

/* Lays out a pool: spaces in the order of the DMUON_SPACE_* enum, window
 * regions in the order of DMUON_WIN_*.  Pure (the same sizes give the same
 * map on every rank); never fails (sizes are ≥ 0). */
void dmuon_pool_lay_out(const dmuon_pool_sizes *in, dmuon_pool_map *out);

/* Rounds bytes up to DMUON_POOL_ALIGN. */
static inline int64_t dmuon_pool_align(int64_t bytes)
{
    return (bytes + DMUON_POOL_ALIGN - 1) & ~(int64_t)(DMUON_POOL_ALIGN - 1);
}

#endif
