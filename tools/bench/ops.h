/*
 * ops.h — the shared driver of dmuon-bench's operator benchmarks (ops.c,
 * ops_group.c) and the lines of its table, in the style of nccl-tests: each
 * line (ours and every baseline) is a small file filling a bench_line with
 * its algorithm and its table; the driver fills, times and checks them all
 * alike through the library's groups and publish.
 */
#ifndef DMUON_TOOLS_BENCH_OPS_H
#define DMUON_TOOLS_BENCH_OPS_H

#include <stdint.h>

#include "common/opdrv.h"
#include "dmuon/collv.h"
#include "dmuon/publish.h"
#include "dmuon/topo.h"

enum { OP_AGV = 0, OP_RSV, OP_PUB, OP_COUNT };

/* One benchmark case: an operator over a table on a topology. */
typedef struct {
    const dmuon_topo *topo;
    int op;
    const dmuon_segment *segs;     /* the layer's table */
    int n;
    const int *post_order;         /* publish: order of posts (NULL = table order) */
    const int *layer_of;           /* publish: layer of each parameter (NULL = one
                                      layer), for the per-layer coalesced line */
    dmuon_group_opts gopts;
} bench_case;

/* A publish line of its own (a baseline the library does not offer): setup
 * allocates and fills the inputs (collective), run is one timed operation
 * (collective), check counts wrong bytes on this rank after the last run. */
typedef struct {
    dmuon_rc (*setup)(const bench_case *c, void **state);
    dmuon_rc (*run)(void *state);
    int64_t (*check)(void *state);
    void (*teardown)(void *state);
} bench_pub_own;

/* A line of the table: AllGatherV and ReduceScatterV run through a group of
 * `algo` over the line's table (where segment i of its result lies), the
 * publish through the library publish of `pub_algo`, or `pub_own`, or not
 * at all.  The driver (ops_group.c) fills, times and checks every line
 * alike. */
typedef struct {
    const char *name;   /* "ours", "per_owner", "coalesced", "equal_length" */
    dmuon_algo algo;
    /* The line's table for the case (*out malloc'd, *n entries); 0 when the
     * line cannot hold this case (one element type needed, ...). */
    int (*table)(const bench_case *c, dmuon_segment **out, int *n);
    dmuon_algo pub_algo;          /* DEFAULT: no library publish */
    const bench_pub_own *pub_own; /* NULL: none of its own */
} bench_line;

extern const bench_line bench_line_ours, bench_line_per_owner, bench_line_coalesced,
    bench_line_equal;

/* The driver's side of a line (ops_group.c).  supports: 1 if the line can
 * run the case on its backend (not collective). */
int bench_line_supports(const bench_line *l, const bench_case *c);
dmuon_rc bench_line_setup(const bench_line *l, const bench_case *c, void **state);
dmuon_rc bench_line_run(const bench_line *l, const bench_case *c, void *state);
int64_t bench_line_check(const bench_line *l, const bench_case *c, void *state);
void bench_line_teardown(const bench_line *l, const bench_case *c, void *state);

/* The case's own table, copied (a line's table function). */
int bench_table_same(const bench_case *c, dmuon_segment **out, int *n);

/* Inputs every line uses, so every line computes the same thing
 * (common/opdrv.h):
 * AGV: byte k of segment i is opdrv_byte(BENCH_SEED, i, k) in its owner's
 *      window;
 * RSV: element k of segment i on rank r is bench_rsv_val(r, i, k), integers
 *      in [−4, 4] whose sums are exact in BF16 and F32 in any order;
 * publish: byte k of parameter i is opdrv_byte(BENCH_SEED, i, k). */
#define BENCH_SEED 0x5bu
float bench_rsv_val(int rank, int seg, int64_t k);
float bench_rsv_sum(int nranks, int seg, int64_t k);

#endif
