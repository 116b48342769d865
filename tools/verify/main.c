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

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "ns"))
        return verify_ns_main(argc - 1, argv + 1);
    if (argc > 1 && !strcmp(argv[1], "plan"))
        return verify_plan_main(argc - 1, argv + 1);
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--plan") || !strncmp(argv[i], "--plan=", 7))
            return verify_plan_main(argc, argv);
    return verify_ops_main(argc, argv);
}
