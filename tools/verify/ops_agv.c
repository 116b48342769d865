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

static unsigned char pattern(int rep, int seg, int64_t i)
{
    return (unsigned char)(vhash(0xa9u + (uint64_t)rep, (uint64_t)seg, (uint64_t)i) >> 56);
}

static dmuon_rc agv_run(vctx *c, const dmuon_segment *segs, int n, const char *label)
{
    vgroup v;
    DMUON_TRY(vgroup_open(c, segs, n, &c->gopts, &v));
    dmuon_rc rc = DMUON_OK;
    unsigned char *buf = v.buf, *win = v.win;
    for (int rep = 0; rep < 2; rep++) {
        memset(buf, 0xee, (size_t)dmuon_group_buffer_bytes(v.g));
        for (int i = 0; i < n; i++)
            if (segs[i].owner == c->topo.rank) {
                int64_t b = segs[i].count * (int64_t)dmuon_dtype_size(segs[i].dtype);
                for (int64_t k = 0; k < b; k++)
                    win[segs[i].window_offset + k] = pattern(rep, i, k);
            }
        vctx_fault_point(c);
        DMUON_TRY_GOTO(rc, vgroup_allgatherv(&v, rep == 1), done);
        vctx_fault_result(c, n > 0 ? buf + segs[0].offset : NULL);
        int64_t bad = 0, bad_win = 0;
        for (int i = 0; i < n; i++) {
            int64_t b = segs[i].count * (int64_t)dmuon_dtype_size(segs[i].dtype);
            for (int64_t k = 0; k < b; k++) {
                bad += buf[segs[i].offset + k] != pattern(rep, i, k);
                if (segs[i].owner == c->topo.rank)
                    bad_win += win[segs[i].window_offset + k] != pattern(rep, i, k);
            }
        }
        char what[160];
        snprintf(what, sizeof what, "gathered bytes equal the owners' (call %d, %lld wrong here)",
                 rep + 1, (long long)bad);
        vctx_check(c, bad == 0, label, what);
        snprintf(what, sizeof what, "owner windows unchanged (call %d)", rep + 1);
        vctx_check(c, bad_win == 0, label, what);
    }
done:
    if (rc == DMUON_OK)       /* freeing is collective: not after a failure */
        vgroup_close(&v);
    return rc;
}

const verify_op verify_op_agv = {"agv", agv_run};
