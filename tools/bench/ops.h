/*
 * ops.h — the shared driver of dmuon-bench's operator benchmarks (ops.c) and
 * the lines of its table, in the style of nccl-tests: each line (ours and
 * every baseline) is a small file filling a bench_line.
 */
#ifndef DMUON_TOOLS_BENCH_OPS_H
#define DMUON_TOOLS_BENCH_OPS_H

#include <stdint.h>

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
    MPI_Op bf16_sum;               /* user-defined BF16 sum for the baselines */
} bench_case;

typedef struct {
    const char *name;   /* "ours", "per_owner", "coalesced", "equal_length" */
    /* 1 if the line can run this case */
    int (*supports)(const bench_case *c);
    /* Allocates and fills the inputs (collective). */
    dmuon_rc (*setup)(const bench_case *c, void **state);
    /* One timed operation (collective). */
    dmuon_rc (*run)(void *state);
    /* Wrong elements (AGV: bytes) on this rank after the last run. */
    int64_t (*check)(void *state);
    void (*teardown)(void *state);
} bench_line;

extern const bench_line bench_line_ours, bench_line_per_owner, bench_line_coalesced,
    bench_line_equal;

/* Inputs every line uses, so every line computes the same thing:
 * AGV: byte k of segment i is bench_agv_byte(i, k) in its owner's window;
 * RSV: element k of segment i on rank r is bench_rsv_val(r, i, k), integers
 *      in [−4, 4] whose sums are exact in BF16 and F32 in any order;
 * publish: byte k of parameter i is bench_agv_byte(i, k). */
unsigned char bench_agv_byte(int seg, int64_t k);
float bench_rsv_val(int rank, int seg, int64_t k);
float bench_rsv_sum(int nranks, int seg, int64_t k);
void bench_store(dmuon_dtype dt, void *base, int64_t i, float v);
float bench_load(dmuon_dtype dt, const void *base, int64_t i);
int64_t bench_seg_bytes(const dmuon_segment *s);

/* The MPI datatype and reduction of dt for the baselines (BF16: 16-bit
 * words with the case's user-defined sum). */
MPI_Datatype bench_mpi_type(dmuon_dtype dt);
MPI_Op bench_mpi_sum(const bench_case *c, dmuon_dtype dt);

#endif
