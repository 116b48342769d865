/* fuzz_inventory.c — a dmuon YAML inventory (as in models/) through
 * dmuon_model_load, then the Muon shape list the planner and probe use. */
#include "fuzz.h"

#include "dmuon/model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *p = fuzz_file("model.yaml", NULL, 0, data, size);
    dmuon_model *m = NULL;
    if (p && dmuon_model_load(p, NULL, &m) == DMUON_OK) {
        dmuon_shape_count *s = NULL;
        size_t n = 0;
        if (dmuon_model_muon_shapes(m, &s, &n) == DMUON_OK)
            free(s);
        dmuon_model_free(m);
    }
    return 0;
}
