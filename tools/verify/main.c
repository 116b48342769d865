/*
 * dmuon-verify — CI checks with a non-zero exit on any failure.
 *
 *   dmuon-verify [operator options]     the communication operators (MPI)
 *   dmuon-verify ns [options]           Newton–Schulz numerics
 *   dmuon-verify --plan PLAN            a plan file's invariants
 *
 * This file only dispatches; each family lives in its own file of this
 * directory and calls libcore.
 */
#include <stdio.h>
#include <string.h>

#include "verify.h"
#include "common/opt.h"

static int tool_main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--version")) {
            tool_print_version("dmuon-verify", argc, argv);
            return 0;
        }
    /* argv[0] of a family names the tool and the family in its messages */
    if (argc > 1 && !strcmp(argv[1], "ns")) {
        argv[1] = "dmuon-verify ns";
        return verify_ns_main(argc - 1, argv + 1);
    }
    if (argc > 1 && !strcmp(argv[1], "plan")) {
        argv[1] = "dmuon-verify plan";
        return verify_plan_main(argc - 1, argv + 1);
    }
    if (argc > 1 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")))
        printf("dmuon-verify: checks for CI, exit 0 when all pass, 1 when a check fails,\n"
               "2 on bad input or usage, 3 on a runtime error.\n\n"
               "  dmuon-verify [options]            the communication operators (below)\n"
               "  dmuon-verify ns [options]         Newton-Schulz numerics (--help for its options)\n"
               "  dmuon-verify --plan PLAN          a plan file's invariants (plan --help)\n\n");
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--plan") || !strncmp(argv[i], "--plan=", 7))
            return verify_plan_main(argc, argv);
    return verify_ops_main(argc, argv);
}

/* every exit goes through here: output that did not arrive is exit 3 */
int main(int argc, char **argv) { return tool_finish_stdout("dmuon-verify", tool_main(argc, argv)); }
