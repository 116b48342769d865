/*
 * ops.h — dmuon-bench's operator timings on the operator driver
 * (common/opdrv.h, which owns the flags, the cases, the lines, staging,
 * patterns and the check): ops.c times the lines and prints the table,
 * ops_group.c runs one line on one case, ops_replay.c replays plans.
 */
#ifndef DMUON_TOOLS_BENCH_OPS_H
#define DMUON_TOOLS_BENCH_OPS_H

#include <stdint.h>

#include "common/opdrv.h"

/* Room for a publish's dmuon_publish_routes text (backend.h keeps it in
 * 160 bytes). */
#define BENCH_ROUTES 160

typedef struct {
    int op, line, ranks, nodes;
    int64_t bytes;
    dmuon_dtype dtype;
    double time_us;
    double algbw, busbw;   /* GB/s of this line (see ops.c) */
    long long wrong;
    char label[64];
    char routes[BENCH_ROUTES];   /* publish: dmuon_publish_routes of the line */
    int warmup, iters, launches;
    double *launch_us;     /* owned: each launch's median (us), `launches` of them */
} bench_row;

typedef struct {
    opdrv_opts opt;        /* the flags */
    int replay_defaults;   /* -w/-n/--launches took the replay defaults */
    int layer_col;         /* the table has a layer column (plan replay) */
    bench_row *rows;       /* rank 0: every reported row, for --json */
    int nrows;
    char routes_said[BENCH_ROUTES];   /* rank 0: the publish routes last printed */
} bench_opts;

typedef struct {
    int ran[OPDRV_NLINES];
    double time_us[OPDRV_NLINES];
    long long wrong[OPDRV_NLINES];
    char routes[OPDRV_NLINES][BENCH_ROUTES];   /* publish: how each line's parameters travel */
    int launches;
    /* owned (bench_result_release): line l's median of launch i, in us, at
     * [l * launches + i]; time_us is the median of these */
    double *launch_us;
} bench_result;

/* Frees r's launch_us (r itself is the caller's); NULL-safe. */
void bench_result_release(bench_result *r);
/* Sets time_us of every line that ran to the median of its launch_us (a
 * total over layers: the median of the per-launch sums).  DMUON_ENOMEM. */
dmuon_rc bench_result_settle(bench_result *r);

/* One line on one case (ops_group.c): setup makes the line's group or
 * publish over its table and fills the inputs (collective); run is one
 * timed operation (collective); check counts the wrong bytes (AGV,
 * publish) or elements (RSV) on this rank after the last run; teardown
 * frees (collective). */
dmuon_rc bench_line_setup(const opdrv_line *l, const opdrv_case *c, void **state);
dmuon_rc bench_line_run(void *state);
int64_t bench_line_check(void *state);
void bench_line_teardown(void *state);
/* The publish's dmuon_publish_routes, or NULL for AGV and RSV. */
const char *bench_line_routes(void *state);

/* Runs every selected line that supports c: launches × (setup, warm-up,
 * timed iterations, check, teardown).  Collective. */
dmuon_rc bench_measure(bench_opts *o, const opdrv_case *c, bench_result *r);

/* Rank 0 prints the table header / one row (label replaces the op name,
 * e.g. a layer) and keeps the rows for --json.  Returns 1 if any line had
 * wrong results (on every rank). */
void bench_print_header(const bench_opts *o, const dmuon_topo *t, const char *what);
int bench_record(bench_opts *o, const dmuon_topo *t, int op, const char *label, int64_t bytes,
                 dmuon_dtype dt, const bench_result *r);

/* --plan / --replay-publish (ops_replay.c); *wrong set when a check failed. */
dmuon_rc bench_replay(bench_opts *o, const dmuon_topo *t, int *wrong);

#endif
