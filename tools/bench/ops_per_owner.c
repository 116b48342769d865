/*
 * ops_per_owner.c — dmuon-bench line "per_owner": one rooted call per
 * segment over the case's table (the per-owner algorithm: a broadcast from
 * the owner for AllGatherV, a reduce into the owner's window for
 * ReduceScatterV), and the per-owner publish (one broadcast per parameter
 * on the owner's rail).
 */
#include "ops.h"

const bench_line bench_line_per_owner = {
    .name = "per_owner",
    .algo = DMUON_ALGO_PER_OWNER,
    .table = bench_table_same,
    .pub_algo = DMUON_ALGO_PER_OWNER,
};
