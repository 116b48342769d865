/*
 * ops.h — dmuon-verify's operator checks on the operator driver
 * (common/opdrv.h, which owns the flags, the cases, the lines, staging,
 * patterns and the counts of wrong bytes): ops.c runs every case on every
 * line and reports; each operator's checks fill a verify_op (ops_agv.c,
 * ops_rsv.c, ops_publish.c), in the style of nccl-tests.
 */
#ifndef DMUON_TOOLS_VERIFY_OPS_H
#define DMUON_TOOLS_VERIFY_OPS_H

#include <stdint.h>

#include "common/opdrv.h"

enum { FAULT_NONE = 0, FAULT_TABLE, FAULT_STALL, FAULT_KILL, FAULT_STALE, FAULT_WRONG };

typedef struct {
    dmuon_topo topo;
    dmuon_group_opts gopts;   /* deadline, chunk, slots; path and algorithm set per run */
    const opdrv_line *line;   /* the line of the run */
    int fault, fault_rank;
    const opdrv_line *fault_line;   /* FAULT_WRONG: the line whose result gets one wrong byte */
    int faulted;              /* the fault has been injected */
    int verbose;
    int passed, failed;       /* checks, agreed over all ranks */
    double worst_ours, worst_ring;   /* BF16 relative error, over all runs */
    int have_worst;                  /* worst_* measured at least once */
    int64_t steps;            /* publish steps */
} vctx;

typedef struct {
    const char *name;
    /* Runs every check of this operator on one table (the line's); records
     * each with vctx_check.  Returns DMUON_OK, or an rc that ends the run
     * (not DMUON_ECHECK: failed checks are counted, not returned). */
    dmuon_rc (*run)(vctx *c, const dmuon_segment *segs, int n, const char *label);
} verify_op;

extern const verify_op verify_op_agv, verify_op_rsv, verify_op_publish;

/* Collective: a check passes when it passed on every rank.  Rank 0 prints
 * failures (and passes with -v) as "ok|FAIL  <label> <what>". */
void vctx_check(vctx *c, int ok_here, const char *label, const char *what);

/* Injects the configured fault at the first operator call of this rank
 * (stall: sleep well past the deadline; kill: SIGKILL itself). */
void vctx_fault_point(vctx *c);

/* --fault wrong:LINE: after the first call of that line, rank 0 changes one
 * bit of the result at p (its layer buffer, or a window it owns), once, as
 * a line writing one wrong element would.  p NULL: nothing here. */
void vctx_fault_result(vctx *c, unsigned char *p);

#endif
