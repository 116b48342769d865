/* fuzz_manifest.c — a checkpoint manifest.json through dmuon_ckpt_load on
 * one rank (MPI_COMM_SELF), with a two-parameter table and a request for
 * each parameter's master: the manifest's fields, files and pieces are all
 * checked before anything is read, so every input must fail cleanly or load
 * (the seed names a missing file, so a parse that gets through still stops
 * at the file check). */
#include "fuzz.h"

#include <libgen.h>
#include <mpi.h>

#include "dmuon/ckpt.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int inited;
    if (!inited) {
        int argc = 0;
        char **argv = NULL;
        MPI_Init(&argc, &argv);
        inited = 1;
    }
    const char *p = fuzz_file("manifest.json", NULL, 0, data, size);
    if (!p)
        return 0;
    char dir[128];
    snprintf(dir, sizeof dir, "%s", p);
    dirname(dir);
    dmuon_ckpt_param params[2] = {{"a.weight", 2, {2, 3}, DMUON_F32, 1},
                                  {"b.weight", 1, {4}, DMUON_F32, 0}};
    float a[6], b[4];
    dmuon_ckpt_piece pieces[2] = {{"a.weight", "master", 0, 6, a}, {"b.weight", "master", 0, 4, b}};
    dmuon_ckpt_meta got;
    (void)dmuon_ckpt_load(MPI_COMM_SELF, 0, dir, NULL, params, 2, pieces, 2, &got);
    return 0;
}
