/*
 * ops_publish.c — dmuon-verify case: the HSDP publish.  The table's
 * segments become parameters (owner and length kept; offsets from the
 * publish copy layout, dmuon_publish_layout).  For steps 1..S every owner writes
 * hashed bytes of (step, parameter) into its copy and posts its parameters
 * in table order without waiting; every leader waits for each parameter it
 * leads, in table order, and checks the bytes bit for bit and that its
 * arrival flag holds exactly this step; end() must then succeed.  Before
 * step t's data is posted every led flag must still hold t−1 (a wait would
 * not accept it).  With the stale fault, the owner of parameter 0 posts it
 * in step 2 labelled step 1: its leaders must refuse it (DMUON_ECHECK).
 * A last step posts one parameter at a time (with a barrier between posts)
 * to check that each one streams through on its own.  The per-owner
 * algorithm (--line per-owner) moves everything at end: leaders check the
 * bytes and flags after end, and the stale and one-at-a-time cases (which
 * need streaming) are not run for it; the coalesced algorithm likewise
 * (its table is the case's own, so a layout whose owners are not in node
 * order, sparse, makes several runs of one rail).  The publish, its memory
 * and the patterns are the operator driver's (opdrv_pub).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops.h"

static uint64_t seed(int64_t step) { return 0x9bu + (uint64_t)step; }

static dmuon_rc publish_run(vctx *c, const dmuon_segment *segs, int n, const char *label)
{
    const dmuon_topo *t = &c->topo;
    dmuon_publish_opts o = {.deadline_ms = c->gopts.deadline_ms,
                            .chunk_bytes = c->gopts.chunk_bytes,
                            .algorithm = c->line->pub_algo};
    opdrv_pub v;
    DMUON_TRY(opdrv_pub_open(t, segs, n, &o, &v));
    dmuon_rc rc = DMUON_OK;
    const dmuon_segment *ps = v.params;
    int leads = t->nodes > 1;
    /* scheduled: parameters stream as posted, leaders wait for each;
     * per-owner, coalesced: everything moves at end */
    const int streams = dmuon_publish_algo(v.p) == DMUON_ALGO_SCHEDULED;
    for (int64_t step = 1; step <= c->steps; step++) {
        DMUON_TRY_GOTO(rc, dmuon_publish_begin(v.p, step), done);
        int old_ok = 1;
        for (int i = 0; i < n; i++)
            if (leads && dmuon_topo_leads(t, ps[i].owner))
                old_ok &= dmuon_publish_flag(v.p, i) == step - 1;
        char what[200];
        snprintf(what, sizeof what, "step %lld: arrival flags hold step %lld before the posts",
                 (long long)step, (long long)step - 1);
        vctx_check(c, old_ok, label, what);
        vctx_fault_point(c);
        opdrv_pub_fill(&v, t->rank, seed(step));
        for (int i = 0; i < n; i++) {
            if (ps[i].owner != t->rank)
                continue;
            int64_t label_step = step;
            if (c->fault == FAULT_STALE && streams && i == 0 && step == 2) {
                label_step = 1;
                c->faulted = 1;
            }
            DMUON_TRY_GOTO(rc, dmuon_publish_post(v.p, i, label_step), done);
        }
        int64_t bad = 0;
        int stale_seen = 0, ok_wait = 1;
        if (!streams)
            DMUON_TRY_GOTO(rc, dmuon_publish_end(v.p, step), done);
        for (int i = 0; i < n; i++) {
            if (!leads || !dmuon_topo_leads(t, ps[i].owner))
                continue;
            dmuon_rc w = streams ? dmuon_publish_wait(v.p, i, step) : DMUON_OK;
            if (w == DMUON_ECHECK) {
                fprintf(stderr, "dmuon-verify: %s\n", dmuon_errmsg());
                stale_seen = 1;
                ok_wait = 0;
                continue;
            }
            if (w != DMUON_OK) {
                rc = w;
                goto done;
            }
            vctx_fault_result(c, v.copy + ps[i].offset);
            bad += opdrv_pub_wrong(&v, t, i, seed(step));
            ok_wait &= dmuon_publish_flag(v.p, i) == step;
        }
        dmuon_rc e = streams ? dmuon_publish_end(v.p, step) : DMUON_OK;
        if (e != DMUON_OK && !(e == DMUON_ECHECK && stale_seen)) {
            rc = e;
            goto done;
        }
        snprintf(what, sizeof what, "step %lld: leaders hold the owners' bytes bit for bit "
                 "(%lld wrong here)", (long long)step, (long long)bad);
        vctx_check(c, bad == 0, label, what);
        snprintf(what, sizeof what, "step %lld: every arrival flag carries step %lld",
                 (long long)step, (long long)step);
        vctx_check(c, ok_wait, label, what);
    }

    /* One post at a time: parameter i reaches all its leaders before i + 1
     * is posted, while every later parameter's flag still holds the previous
     * step (which a wait would not take). */
    if (c->fault == FAULT_NONE && streams) {
        int64_t step = c->steps + 1;
        int64_t bad = 0;
        int order_ok = 1;
        DMUON_TRY_GOTO(rc, dmuon_publish_begin(v.p, step), done);
        opdrv_pub_fill(&v, t->rank, seed(step));
        for (int i = 0; i < n; i++) {
            if (ps[i].owner == t->rank)
                DMUON_TRY_GOTO(rc, dmuon_publish_post(v.p, i, step), done);
            if (leads && dmuon_topo_leads(t, ps[i].owner)) {
                DMUON_TRY_GOTO(rc, dmuon_publish_wait(v.p, i, step), done);
                bad += opdrv_pub_wrong(&v, t, i, seed(step));
            }
            for (int j = i + 1; j < n; j++)
                if (leads && dmuon_topo_leads(t, ps[j].owner))
                    order_ok &= dmuon_publish_flag(v.p, j) == step - 1;
            MPI_Barrier(t->world);
        }
        DMUON_TRY_GOTO(rc, dmuon_publish_end(v.p, step), done);
        char what[200];
        snprintf(what, sizeof what, "posted one at a time: each parameter arrives whole before "
                 "the next is posted (%lld wrong here)", (long long)bad);
        vctx_check(c, bad == 0, label, what);
        vctx_check(c, order_ok, label, "posted one at a time: parameters not yet posted keep "
                   "the previous step's flag");
    }
done:
    if (rc == DMUON_OK)
        opdrv_pub_close(&v);
    return rc;
}

const verify_op verify_op_publish = {"publish", publish_run};
