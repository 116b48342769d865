/*
 * opdrv.h — what the operator drivers of dmuon-verify and dmuon-bench share
 * (linked into those two tools only): one group in symmetric memory of its
 * own with its host staging on GPU backends, the split/blocking calls, the
 * fill patterns, and the bit-exact count of wrong bytes where segment i of a
 * line's result lies.  Each line stays the tool's: it sets the algorithm and
 * gives the table saying where segment i lies.
 */
#ifndef DMUON_TOOLS_COMMON_OPDRV_H
#define DMUON_TOOLS_COMMON_OPDRV_H

#include <stddef.h>
#include <stdint.h>

#include "dmuon/collv.h"
#include "dmuon/topo.h"

/* Deterministic 64-bit mix of (seed, a, b): splitmix64 finalizer. */
uint64_t opdrv_hash(uint64_t seed, uint64_t a, uint64_t b);

/* Byte k of segment seg under pattern seed (any bit pattern, NaN payloads
 * of the element type included). */
unsigned char opdrv_byte(uint64_t seed, int seg, int64_t k);

/* Element i of an array of dt (BF16 or F32) at p; unaligned p is fine. */
float opdrv_load(dmuon_dtype dt, const void *p, int64_t i);
void opdrv_store(dmuon_dtype dt, void *p, int64_t i, float v);
int64_t opdrv_seg_bytes(const dmuon_segment *s);

/* A group over symmetric memory of its own (dmuon_group_span_of: control
 * area, layer buffer, owner window).  buf/win: this rank's layer buffer and
 * owner window — on a GPU backend a host copy, moved to and from the device
 * by opdrv_group_stage.  open is collective (the table should be agreed
 * first); close is collective, only when every rank is still alive. */
typedef struct {
    dmuon_symm *mem;
    dmuon_group *g;
    dmuon_group_span sp;
    unsigned char *buf, *win;
    unsigned char *host;   /* the host copy of the span (GPU backends only) */
} opdrv_group;

dmuon_rc opdrv_group_open(const dmuon_topo *t, const dmuon_segment *segs, int n,
                          const dmuon_group_opts *o, opdrv_group *v);
void opdrv_group_close(opdrv_group *v);

/* in = 1: buf/win to the device; 0: back (no-op on host memory). */
dmuon_rc opdrv_group_stage(opdrv_group *v, int in);

/* One AllGatherV (agv = 1) or ReduceScatterV of the group, without staging:
 * split = 1: start, one test, wait (host memory only: the GPU backends
 * have no split phase); else the blocking call. */
dmuon_rc opdrv_group_call(opdrv_group *v, int agv, int split);

/* AGV input: every segment this rank owns gets opdrv_byte(seed, i, k) at
 * win + window_offset. */
void opdrv_agv_fill(const dmuon_segment *segs, int n, int rank, unsigned char *win,
                    uint64_t seed);

/* Bytes that differ from opdrv_byte(seed, i, k): at buf + segs[i].offset for
 * every segment (owned_only = 0: the gathered layer buffer; every rank of
 * the line has all of it), or at win + segs[i].window_offset for the
 * segments this rank owns (owned_only = 1). */
int64_t opdrv_agv_wrong(const dmuon_segment *segs, int n, int rank, const unsigned char *p,
                        uint64_t seed, int owned_only);

/* The flags both operator drivers take the same way (--ranks-per-node,
 * --backend, --chunk-bytes).  opdrv_flag returns 1 when opt is one of them
 * (bad filled on a bad value, left alone otherwise), 0 when it is not. */
typedef enum { OPDRV_RPN = 1, OPDRV_BACKEND, OPDRV_CHUNK } opdrv_opt;
typedef struct {
    int per_node;
    dmuon_backend backend;
    int64_t chunk_bytes;   /* 0: not given */
} opdrv_flags;
int opdrv_flag(opdrv_opt opt, const char *arg, int64_t chunk_max, opdrv_flags *f, char *bad,
               size_t cap);

#endif
