/*
 * plan_summary.c — a small program built against an installed libdmuon
 * (tests/cli/20-install.sh): loads a plan file with the public API and
 * prints its cluster, its units and each rank's owner window.  Exit 0, or
 * the tool exit code of the failure.
 *
 *   cc plan_summary.c $(pkg-config --cflags --libs dmuon) -o plan_summary
 *   ./plan_summary PLAN
 */
#include <stdio.h>

#include "dmuon/plan.h"
#include "dmuon/version.h"

int main(int argc, char **argv)
{
    dmuon_plan *p = NULL;
    if (argc != 2) {
        fprintf(stderr, "usage: plan_summary PLAN\n");
        return 2;
    }
    dmuon_rc rc = dmuon_plan_load(argv[1], &p);
    if (rc != DMUON_OK) {
        fprintf(stderr, "plan_summary: %s\n", dmuon_errmsg());
        return dmuon_rc_exit_code(rc);
    }
    size_t units = 0;
    dmuon_plan_units(p, &units);
    printf("libdmuon %s\n", dmuon_version());
    printf("ranks %d nodes %d gpus_per_node %d units %zu layers %zu\n", dmuon_plan_ranks(p),
           dmuon_plan_nodes(p), dmuon_plan_gpus_per_node(p), units, dmuon_plan_layer_count(p));
    for (int32_t r = 0; r < dmuon_plan_ranks(p); r++)
        printf("rank %d window %lld bytes\n", r, (long long)dmuon_plan_window_bytes(p, r));
    dmuon_plan_free(p);
    return 0;
}
