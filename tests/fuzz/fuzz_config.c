/* fuzz_config.c — a Hugging Face config.json through dmuon_model_load. */
#include "fuzz.h"

#include "dmuon/model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *p = fuzz_file("config.json", NULL, 0, data, size);
    dmuon_model *m = NULL;
    if (p && dmuon_model_load(p, NULL, &m) == DMUON_OK)
        dmuon_model_free(m);
    return 0;
}
