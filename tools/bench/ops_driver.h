/*
 * ops_driver.h — what the operator benchmark's driver (ops.c) shares with
 * the plan replay (ops_replay.c).
 */
#ifndef DMUON_TOOLS_BENCH_OPS_DRIVER_H
#define DMUON_TOOLS_BENCH_OPS_DRIVER_H

#include "ops.h"

#define BENCH_NLINES 4   /* ours, per_owner, coalesced, equal_length */

extern const bench_line *const bench_lines[BENCH_NLINES];

typedef struct {
    int op, line, ranks, nodes;
    int64_t bytes;
    dmuon_dtype dtype;
    double time_us;
    double algbw, busbw;   /* GB/s of this line (see ops.c) */
    long long wrong;
    char label[64];
} bench_row;

typedef struct {
    int64_t minb, maxb, chunk_bytes;
    int factor, warmup, iters, launches, deadline_ms, lines, rail, fp32_accum;
    int replay_defaults;   /* -w/-n/--launches took the replay defaults */
    int layer_col;         /* the table has a layer column (plan replay) */
    int layer_lo, layer_hi;   /* --layers A:B (hi < 0: all) */
    dmuon_dtype dtype;
    dmuon_path path;
    const char *json, *plan, *replay_publish;
    bench_row *rows;   /* rank 0: every reported row, for --json */
    int nrows;
    int json_stdout;   /* --json: the rows as JSON on stdout instead of the table
                          (json above is --json-file's path) */
} bench_opts;

typedef struct {
    int ran[BENCH_NLINES];
    double time_us[BENCH_NLINES];
    long long wrong[BENCH_NLINES];
} bench_result;

/* Runs every selected line that supports c: launches × (setup, warm-up,
 * timed iterations, check, teardown).  Collective. */
dmuon_rc bench_measure(bench_opts *o, const bench_case *c, bench_result *r);

/* Rank 0 prints the table header / one row (label replaces the op name,
 * e.g. a layer) and keeps the rows for --json.  Returns 1 if any line had
 * wrong results (on every rank). */
void bench_print_header(const bench_opts *o, const dmuon_topo *t, const char *what);
int bench_record(bench_opts *o, const dmuon_topo *t, int op, const char *label, int64_t bytes,
                 dmuon_dtype dt, const bench_result *r);

/* --plan / --replay-publish (ops_replay.c); *wrong set when a check failed. */
dmuon_rc bench_replay(bench_opts *o, const dmuon_topo *t, int op_mask, int *wrong);

#endif
