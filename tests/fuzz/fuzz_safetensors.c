/* fuzz_safetensors.c — a safetensors header (the input is the JSON text; the
 * harness prepends its 8-byte little-endian length, as the format does, and
 * appends 16 KiB of tensor data so that headers with offsets in that range
 * get past the size check into the rest of the loader). */
#include "fuzz.h"

#include "dmuon/model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t len[8];
    for (int i = 0; i < 8; i++)
        len[i] = (uint8_t)((uint64_t)size >> (8 * i));
    const char *p = fuzz_file_z("model.safetensors", len, 8, data, size, 16384);
    dmuon_model *m = NULL;
    if (p && dmuon_model_load(p, NULL, &m) == DMUON_OK)
        dmuon_model_free(m);
    return 0;
}
