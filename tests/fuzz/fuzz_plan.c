/* fuzz_plan.c — a plan file through both loads: the strict one (show,
 * libdmuon) and the one dmuon-verify --plan uses (no digest checks, so the
 * invariant checks see what the parser accepted). */
#include "fuzz.h"

#include "dmuon/plan.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *p = fuzz_file("plan.yaml", NULL, 0, data, size);
    dmuon_plan *plan = NULL;
    if (!p)
        return 0;
    if (dmuon_plan_load(p, &plan) == DMUON_OK)
        dmuon_plan_free(plan);
    plan = NULL;
    if (dmuon_plan_load_ex(p, DMUON_PLAN_LOAD_NO_DIGESTS, &plan) == DMUON_OK) {
        size_t nv = 0;
        (void)dmuon_plan_check(plan, &nv);
        dmuon_plan_free(plan);
    }
    return 0;
}
