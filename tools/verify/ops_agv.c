/*
 * ops_agv.c — dmuon-verify case: AllGatherV.  Owners fill their windows with
 * hashed bytes (any bit pattern, NaN payloads included); after the call
 * every rank's layer buffer must equal every owner's bytes bit for bit, and
 * the owners' windows must be unchanged.  Runs twice to cover the call
 * sequence numbers and data left by the previous call, the second time
 * split phase (start, test, wait) where the backend has it.
 */
#include <stdio.h>
#include <string.h>

#include "ops.h"

/* The pattern of call rep (common/opdrv.h). */
static uint64_t seed(int rep) { return 0xa9u + (uint64_t)rep; }

static dmuon_rc agv_run(vctx *c, const dmuon_segment *segs, int n, const char *label)
{
    opdrv_group v;
    DMUON_TRY(opdrv_group_open(&c->topo, segs, n, &c->gopts, &v));
    dmuon_rc rc = DMUON_OK;
    unsigned char *buf = v.buf, *win = v.win;
    for (int rep = 0; rep < 2; rep++) {
        memset(buf, 0xee, (size_t)dmuon_group_buffer_bytes(v.g));
        opdrv_agv_fill(segs, n, c->topo.rank, win, seed(rep));
        vctx_fault_point(c);
        DMUON_TRY_GOTO(rc, opdrv_group_staged(&v, 1, rep == 1), done);
        vctx_fault_result(c, n > 0 ? buf + segs[0].offset : NULL);
        int64_t bad = opdrv_agv_wrong(segs, n, c->topo.rank, buf, seed(rep), 0);
        int64_t bad_win = opdrv_agv_wrong(segs, n, c->topo.rank, win, seed(rep), 1);
        char what[160];
        snprintf(what, sizeof what, "gathered bytes equal the owners' (call %d, %lld wrong here)",
                 rep + 1, (long long)bad);
        vctx_check(c, bad == 0, label, what);
        snprintf(what, sizeof what, "owner windows unchanged (call %d)", rep + 1);
        vctx_check(c, bad_win == 0, label, what);
    }
done:
    if (rc == DMUON_OK)       /* freeing is collective: not after a failure */
        opdrv_group_close(&v);
    return rc;
}

const verify_op verify_op_agv = {"agv", agv_run};
