/*
 * fuzz.h — shared by the libFuzzer harnesses (tests/fuzz/fuzz_*.c): each
 * harness writes the input to a file of the name its loader expects (the
 * loaders choose the form by file name) in one private temporary folder and
 * loads it.  A load may fail with any dmuon_rc; it must never crash, leak or
 * hit undefined behaviour.  The same harnesses also build as plain replay
 * programs (replay_main.c) for make test.
 */
#ifndef DMUON_FUZZ_H
#define DMUON_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Writes prefix (plen bytes, may be 0), data, then zeros zero bytes to NAME
 * in the harness's folder; returns the path (static buffer) or NULL. */
static inline const char *fuzz_file_z(const char *name, const void *prefix, size_t plen,
                                      const uint8_t *data, size_t size, size_t zeros)
{
    static char dir[64], path[128];
    if (!dir[0]) {
        const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
        snprintf(dir, sizeof dir, "%s/dmuon-fuzz-XXXXXX", base);
        if (!mkdtemp(dir)) {
            dir[0] = '\0';
            return NULL;
        }
    }
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f)
        return NULL;
    if (plen)
        fwrite(prefix, 1, plen, f);
    fwrite(data, 1, size, f);
    for (size_t i = 0; i < zeros; i++)
        fputc(0, f);
    fclose(f);
    return path;
}

static inline const char *fuzz_file(const char *name, const void *prefix, size_t plen,
                                    const uint8_t *data, size_t size)
{
    return fuzz_file_z(name, prefix, plen, data, size, 0);
}

#endif
