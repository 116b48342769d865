/*
 * opdrv_ours.c — the line "ours": the backend's own AllGatherV and
 * ReduceScatterV (the scheduled algorithm on mpi) and the streaming publish
 * (chunks along the rail as owners post, leaders wait per parameter), over
 * the case's own table.
 */
#include "common/opdrv.h"

const opdrv_line opdrv_line_ours = {
    .name = "ours",
    .column = "ours",
    .algo = DMUON_ALGO_DEFAULT,
    .pub_algo = DMUON_ALGO_SCHEDULED,
    .table = opdrv_table_same,
};
