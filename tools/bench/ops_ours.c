/*
 * ops_ours.c — dmuon-bench line "ours": the backend's own AllGatherV /
 * ReduceScatterV (the scheduled algorithm on mpi) over the case's table,
 * and the streaming publish (begin, every owner posts its parameters in
 * post order without waiting, every leader waits for its parameters, end).
 */
#include "ops.h"

const bench_line bench_line_ours = {
    .name = "ours",
    .algo = DMUON_ALGO_DEFAULT,
    .table = bench_table_same,
    .pub_algo = DMUON_ALGO_SCHEDULED,
};
