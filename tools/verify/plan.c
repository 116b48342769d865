/* Placeholder until this family lands; replaced by its implementation. */
#include <stdio.h>
#include "verify.h"
int verify_plan_main(int argc, char **argv)
{
    (void)argc; (void)argv;
    fprintf(stderr, "dmuon-verify: 'plan' is not built yet\n");
    return 3;
}
