/*
 * opdrv_per_owner.c — the line "per-owner": one rooted call per segment
 * over the case's table (a broadcast from the owner for AllGatherV, a
 * reduce into the owner's window for ReduceScatterV), and the per-owner
 * publish (one broadcast per parameter on the owner's rail at end).
 */
#include "common/opdrv.h"

const opdrv_line opdrv_line_per_owner = {
    .name = "per-owner",
    .column = "per_owner",
    .algo = DMUON_ALGO_PER_OWNER,
    .pub_algo = DMUON_ALGO_PER_OWNER,
    .table = opdrv_table_same,
};
