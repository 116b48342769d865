/*
 * ops_replay.c — dmuon-bench --plan PLAN (every layer's frozen segment table
 * through AllGatherV and ReduceScatterV, against the baselines) and
 * --replay-publish PLAN --rail S (the publish tasks of one rail in one
 * step, in the plan's layer order, paper Table 7).  Needs the plan reader
 * (dmuon/plan.h); a build without it says so.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops_driver.h"

#if __has_include("dmuon/plan.h")
#include "dmuon/plan.h"
#define HAVE_PLAN 1
#else
#define HAVE_PLAN 0
#endif

#if HAVE_PLAN
PLAN_REPLAY_IMPLEMENTATION
#else
dmuon_rc bench_replay(bench_opts *o, const dmuon_topo *t, MPI_Op bf16_sum, int op_mask,
                      int *wrong)
{
    return DMUON_FAIL(DMUON_EUNSUPPORTED, "%s: this build has no plan reader (dmuon/plan.h); "
                      "plan replay is unavailable", o->plan ? o->plan : o->replay_publish);
}
#endif
