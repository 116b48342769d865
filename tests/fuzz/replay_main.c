/*
 * replay_main.c — runs a fuzz harness over files without libFuzzer, for
 * make test: every argument is a file or a folder of files; each file's
 * bytes go to LLVMFuzzerTestOneInput once.  A crash (or a sanitizer report
 * in the sanitizer build) fails the run; "N passed, 0 failed" otherwise.
 */
#include <dirent.h>
#include <sys/stat.h>

#include "fuzz.h"

static int replay(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "replay: cannot open '%s'\n", path);
        return -1;
    }
    uint8_t *buf = NULL;
    size_t len = 0, cap = 0, got;
    do {
        if (len == cap) {
            cap = cap ? 2 * cap : 4096;
            uint8_t *b = realloc(buf, cap);
            if (!b) {
                free(buf);
                fclose(f);
                return -1;
            }
            buf = b;
        }
        got = fread(buf + len, 1, cap - len, f);
        len += got;
    } while (got);
    fclose(f);
    LLVMFuzzerTestOneInput(buf, len);
    free(buf);
    return 0;
}

int main(int argc, char **argv)
{
    int n = 0, bad = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) == 0 && S_ISDIR(st.st_mode)) {
            DIR *d = opendir(argv[i]);
            struct dirent *e;
            while (d && (e = readdir(d))) {
                if (e->d_name[0] == '.')
                    continue;
                char p[4096];
                snprintf(p, sizeof p, "%s/%s", argv[i], e->d_name);
                if (replay(p))
                    bad++;
                else
                    n++;
            }
            if (d)
                closedir(d);
        } else if (replay(argv[i])) {
            bad++;
        } else {
            n++;
        }
    }
    printf("%d passed, %d failed\n", n, bad);
    return bad != 0;
}
