/* Placeholder until this family lands; replaced by its implementation. */
#include <stdio.h>
#include "bench.h"
int bench_plan_main(int argc, char **argv)
{
    (void)argc; (void)argv;
    fprintf(stderr, "dmuon-bench: 'plan' is not built yet\n");
    return 3;
}
