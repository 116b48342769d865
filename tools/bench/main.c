/*
 * dmuon-bench — performance work, side by side in one run.
 *
 *   dmuon-bench [operator options]      AllGatherV / ReduceScatterV / publish
 *                                       against per-owner, coalesced and
 *                                       equal-length baselines (MPI)
 *   dmuon-bench ns [options]            Gram vs direct Newton–Schulz, sgemm rate
 *   dmuon-bench plan [options]          planner speed on real and synthetic models
 *
 * This file only dispatches; each family lives in its own file here.
 */
#include <string.h>

#include "bench.h"

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "ns"))
        return bench_ns_main(argc - 1, argv + 1);
    if (argc > 1 && !strcmp(argv[1], "plan"))
        return bench_plan_main(argc - 1, argv + 1);
    return bench_ops_main(argc, argv);
}
