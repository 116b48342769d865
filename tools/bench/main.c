/*
 * dmuon-bench — performance work, side by side in one run.
 *
 *   dmuon-bench [operator options]      AllGatherV / ReduceScatterV / publish
 *                                       against per-owner, coalesced and
 *                                       equal-length baselines (MPI)
 *   dmuon-bench ns [options]            Gram vs direct Newton–Schulz, sgemm rate
 *   dmuon-bench plan [options]          planner speed on real and synthetic models
 *   dmuon-bench step [options]          the runtime's optimizer step per rank (MPI)
 *   dmuon-bench predict [options]       the network model, fitted and checked
 *   dmuon-bench loops [options]         the BF16/FP32 element loops of the reductions
 *
 * This file only dispatches; each family lives in its own file here.
 */
#include <stdio.h>
#include <string.h>

#include "bench.h"
#include "common/opt.h"

static int tool_main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--version")) {
            tool_print_version("dmuon-bench", argc, argv);
            return 0;
        }
    /* argv[0] of a family names the tool and the family in its messages */
    if (argc > 1 && !strcmp(argv[1], "ns")) {
        argv[1] = "dmuon-bench ns";
        return bench_ns_main(argc - 1, argv + 1);
    }
    if (argc > 1 && !strcmp(argv[1], "step")) {
        argv[1] = "dmuon-bench step";
        return bench_step_main(argc - 1, argv + 1);
    }
    if (argc > 1 && !strcmp(argv[1], "plan")) {
        argv[1] = "dmuon-bench plan";
        return bench_plan_main(argc - 1, argv + 1);
    }
    if (argc > 1 && !strcmp(argv[1], "predict")) {
        argv[1] = "dmuon-bench predict";
        return bench_predict_main(argc - 1, argv + 1);
    }
    if (argc > 1 && !strcmp(argv[1], "loops")) {
        argv[1] = "dmuon-bench loops";
        return bench_loops_main(argc - 1, argv + 1);
    }
    if (argc > 1 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")))
        printf("dmuon-bench: benchmarks measured side by side in one run.\n\n"
               "  dmuon-bench [options]             the communication operators (below)\n"
               "  dmuon-bench ns [options]          Gram vs direct Newton-Schulz, sgemm rate\n"
               "  dmuon-bench plan [options]        planner speed (real and synthetic models)\n"
               "  dmuon-bench predict [options]     the network model, fitted and checked\n"
               "  dmuon-bench step [options]        the runtime's optimizer step per rank (MPI)\n"
               "  dmuon-bench loops [options]       the BF16/FP32 element loops of the reductions\n\n");
    return bench_ops_main(argc, argv);
}

/* every exit goes through here: output that did not arrive is exit 3 */
int main(int argc, char **argv) { return tool_finish_stdout("dmuon-bench", tool_main(argc, argv)); }
