/*
 * dmuon/sched.h — the schedule of the variable-length operators: which rank
 * moves which chunk where, in which chain (paper §5, C.2).  Pure: no MPI, no
 * memory other than its own arrays, so the MPI backend and GPU kernels
 * execute the same schedule and unit tests check it directly.
 *
 * Model.  R nodes × K ranks; rail s links rank (r, s) of every node.  A
 * segment of the frozen table (dmuon/types.h) is cut into K slices by
 * element: slice s is elements [count·s/K, count·(s+1)/K) and travels on rail
 * s.  Each slice is cut into chunks of at most chunk_bytes (64 KiB by
 * default, rounded down to whole elements).  Queue (q, s) holds, in table
 * order, the chunks of every segment whose owner sits on node q, slice s:
 * one queue per source node per rail.
 *
 * Routes (per queue, the same for every rail):
 *   gather, chain: q → q+1 → … → q+R−1 (mod R).  Each node's rail rank
 *     stores the chunk into every rank of its node (one store into the
 *     node-shared window), then forwards it.
 *   gather, star:  q sends to every other node directly (one hop).
 *   reduce, chain: q+1 → q+2 → … → q+R−1 → q.  Each node's rail rank sums
 *     the chunk over its node, adds the upstream partial, passes it on; the
 *     last hop (node q) writes the owner's window.
 *   reduce, star:  every node ≠ q sends its node sum to q, which adds them
 *     in chain order q+1, …, q+R−1 and then its own.
 * Summation order (both reduce paths give identical bits): with
 * L_r = rnd(Σ_{j=0..K−1} x_(r,j)) summed in binary32 in local-rank order,
 *   result = rnd(…rnd(rnd(L_{q+1} + L_{q+2}) + L_{q+3}) … + L_q)
 * where rnd rounds to the element type (BF16: at every level; with FP32
 * accumulation partials stay binary32 and only the final value is rounded).
 */
#ifndef DMUON_SCHED_H
#define DMUON_SCHED_H

#include <stdint.h>

#include "dmuon/types.h"

#define DMUON_CHUNK_BYTES (64 * 1024)   /* paper C.2 */
#define DMUON_STAR_MAX_NODES 16         /* paper C.2: star path on ≤ 16 nodes */
/* The smallest chunk the operators accept, and the multiple every chunk
 * size must be (the largest element, binary32 partials and the publish's
 * 8-byte step word).  Smaller chunks only multiply the per-chunk cost
 * (one message and one flag per chunk), so a layer of megabytes would take
 * minutes; dmuon's own choice, not from the paper. */
#define DMUON_CHUNK_MIN_BYTES 256
#define DMUON_CHUNK_ALIGN_BYTES 8

typedef enum { DMUON_SCHED_GATHER = 0, DMUON_SCHED_REDUCE } dmuon_sched_kind;
typedef enum { DMUON_PATH_AUTO = 0, DMUON_PATH_CHAIN, DMUON_PATH_STAR } dmuon_path;

/* One chunk of one slice of one segment. */
typedef struct {
    int32_t seg;          /* index into the segment table */
    int32_t owner;        /* global owner rank of the segment */
    int64_t offset;       /* bytes into the layer buffer (same on every rank) */
    int64_t win_offset;   /* bytes into the owner's window */
    int64_t count;        /* elements */
    int64_t bytes;        /* count × element size */
} dmuon_chunk;

typedef struct {
    int nodes, per_node;      /* R, K */
    dmuon_sched_kind kind;
    dmuon_path path;          /* resolved: CHAIN or STAR */
    int64_t chunk_bytes;
    int nchunks;              /* all chunks of all queues */
    dmuon_chunk *chunks;      /* grouped by queue: queue (q, s) is
                                 chunks[first[q*K+s] .. first[q*K+s+1]) */
    int *first;               /* R·K + 1 entries */
    int64_t max_source_bytes; /* largest total bytes of one source node */
} dmuon_sched;

typedef struct {
    dmuon_path path;          /* AUTO: star when R ≤ 16 and every source node
                                 holds ≤ star_max_bytes, else chain */
    int64_t chunk_bytes;      /* 0 → DMUON_CHUNK_BYTES */
    int64_t star_max_bytes;   /* 0 → 256 KiB */
} dmuon_sched_opts;

/* Checks an operator chunk size in bytes: 0 (the default, 64 KiB) or a
 * multiple of DMUON_CHUNK_ALIGN_BYTES of at least DMUON_CHUNK_MIN_BYTES.
 * The schedule itself accepts any chunk of at least one element (tests cut
 * small tables into small chunks); the group and publish builders call this.
 * Errors: DMUON_EINVAL naming the size and both limits. */
dmuon_rc dmuon_chunk_bytes_check(int64_t chunk_bytes);

/* Checks a segment table against N ranks: owner in [0, N), a known element
 * type, count > 0, offset aligned to the element size, segments in
 * increasing offset without overlap, and no two segments of one owner
 * overlapping in its window.  On success stores the layer buffer's bytes
 * (end of the last segment) and the largest window extent of any owner.
 * Errors: DMUON_EINVAL naming the segment index and field. */
dmuon_rc dmuon_table_check(const dmuon_segment *segs, int n, int nranks,
                           int64_t *layer_bytes, int64_t *window_bytes);

/* Digest of a table (every field of every segment, in order, fixed-width
 * little-endian encoding); equal tables give equal digests on any host. */
uint64_t dmuon_table_digest(const dmuon_segment *segs, int n);

/* Builds the schedule of kind over a checked table for R nodes × K ranks.
 * opts may be NULL.  Errors: DMUON_EINVAL (R or K < 1, chunk smaller than
 * an element, star requested on more than 16 nodes), DMUON_ENOMEM.  On
 * failure *s needs no release. */
dmuon_rc dmuon_sched_init(dmuon_sched *s, const dmuon_segment *segs, int n, int nodes,
                          int per_node, dmuon_sched_kind kind, const dmuon_sched_opts *opts);

/* Frees the arrays; accepts a zeroed or released s. */
void dmuon_sched_release(dmuon_sched *s);

/* Chunks of queue (source node q, rail s): *n entries starting at the
 * returned pointer (NULL when *n is 0). */
const dmuon_chunk *dmuon_sched_queue(const dmuon_sched *s, int q, int rail, int *n);

/* The route of queue q at node `node`: fills in[] with the nodes whose data
 * this node receives for q, in the order it must add them (reduce) — at most
 * R−1 — and out[] with the nodes it sends to; returns the count of in[] and
 * stores the count of out[] in *nout.  Both arrays need R entries. */
int dmuon_sched_route(const dmuon_sched *s, int q, int node, int *in, int *out, int *nout);

/* Hops on the longest path of a queue: R−1 for chain, 1 for star, 0 for
 * one node. */
int dmuon_sched_depth(const dmuon_sched *s);

/*
 * The publish schedule (HSDP, paper §4.2, §5.3, C.2).  A publish table
 * (dmuon/publish.h: owner, dtype, count; offset = bytes into the copy of the
 * owner's rail) is cut per parameter into chunks of at most chunk_bytes
 * (rounded down to whole elements, at least one), in increasing offset.
 * Parameter p of owner (q, s) travels on rail s along its route, an array
 * of R nodes: route[0] = q (the owner's node), route[h] = (q + h) mod R; the
 * rank of column s on route[h] receives every chunk from route[h−1] and
 * forwards it to route[h+1] (none after route[R−1]).  One node: the route
 * is {q} and nothing moves.
 */
typedef struct {
    int32_t param;        /* index into the publish table */
    int32_t index;        /* chunk number inside the parameter, from 0 */
    int64_t offset;       /* bytes into the copy of the parameter's rail */
    int64_t bytes;
} dmuon_pub_chunk;

typedef struct {
    int32_t owner;        /* global rank */
    int32_t rail;         /* owner mod K */
    int32_t first;        /* its chunks: chunks[first .. first + nchunks) */
    int32_t nchunks;
    const int32_t *route; /* R nodes, route[0] = the owner's node */
} dmuon_pub_param;

typedef struct {
    int nodes, per_node;      /* R, K */
    int64_t chunk_bytes;
    int nparams;
    dmuon_pub_param *params;  /* nparams entries, table order */
    int nchunks;
    dmuon_pub_chunk *chunks;  /* grouped by parameter, in offset order */
    int32_t *route_mem;       /* nparams × R */
} dmuon_pub_sched;

/* Builds the publish schedule over a publish table already checked with
 * dmuon_table_check_publish (dmuon/table.h), for R nodes × K ranks and
 * chunk_bytes (0 → DMUON_CHUNK_BYTES).  Errors: DMUON_EINVAL (R or K < 1,
 * chunk_bytes < 0, a parameter of more than 2^31 − 1 chunks), DMUON_ENOMEM.
 * On failure *s needs no release. */
dmuon_rc dmuon_pub_sched_init(dmuon_pub_sched *s, const dmuon_segment *params, int n, int nodes,
                              int per_node, int64_t chunk_bytes);

/* Frees the arrays; accepts a zeroed or released s. */
void dmuon_pub_sched_release(dmuon_pub_sched *s);

/* Where `node` sits on parameter param's route: returns the hop h (0 for
 * the owner's node, 1..R−1 for leaders) and stores the node it receives
 * from in *prev (−1 at hop 0) and the node it forwards to in *next (−1 at
 * the last hop). */
int dmuon_pub_sched_hop(const dmuon_pub_sched *s, int param, int node, int *prev, int *next);

/* The routes a parameter's messages can take on its rail.  With R ≤ 2
 * nodes they are all the same single hop.
 *   DMUON_PUB_CHAIN   along the route (dmuon_pub_sched_hop): R − 1 hops in
 *                     a row, every link carries the parameter once — the
 *                     schedule's own route, run by the GPU kernels and
 *                     replayed by the network model;
 *   DMUON_PUB_FANOUT  the owner's node sends every message to route[1],
 *                     …, route[R − 1] itself: one hop, the owner's link
 *                     carries the parameter R − 1 times;
 *   DMUON_PUB_RELAY   message m goes from the owner's node to the leader
 *                     route[1 + m mod (R − 1)], which sends it on to the
 *                     R − 2 other leaders in route order: two hops (a
 *                     scatter, then an all-gather whose pieces go on as
 *                     they land); the owner's link carries the parameter
 *                     once, each leader's about (R − 2)/(R − 1) of it.
 * The MPI backend picks one per parameter by size (docs/operators.md,
 * "Publish routes"). */
typedef enum { DMUON_PUB_CHAIN = 0, DMUON_PUB_FANOUT, DMUON_PUB_RELAY } dmuon_pub_route;

/* Message m (≥ 0; a message is one chunk or several, as the caller cuts
 * the parameter) of parameter param by `route`, seen at `node`: returns
 * the node it arrives from (−1 at the owner's node) and stores in
 * out[0 .. *nout) the nodes this node sends it on to, in the order above
 * (out holds at least R − 1 entries, or is NULL: then only *nout is set). */
int dmuon_pub_sched_msg(const dmuon_pub_sched *s, int param, dmuon_pub_route route, int m,
                        int node, int *out, int *nout);

#endif
