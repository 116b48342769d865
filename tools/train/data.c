/*
 * data.c — loading, splitting and batching the trainer's text (see data.h).
 * Invariant after td_load: n_train, n_val > seq + 1, so every window of
 * T + 1 <= seq + 1 bytes fits in either text.
 */
#include "data.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "dmuon/io.h"
#include "dmuon/types.h"

#define TD_MAX_BYTES ((size_t)1 << 30)

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int skip_name(const char *n)
{
    size_t l = strlen(n);
    return n[0] == '.' || (l > 4 && !strcmp(n + l - 4, ".dat")) ||
           (l > 3 && !strcmp(n + l - 3, ".u8"));
}

/* Appends the file at path to *buf. */
static dmuon_rc append_file(const char *path, uint8_t **buf, size_t *len, size_t *cap)
{
    char *c = NULL;
    size_t n = 0;
    DMUON_TRY(dmuon_read_file(path, TD_MAX_BYTES, &c, &n));
    if (*len + n > *cap) {
        size_t nc = (*len + n) * 2;
        uint8_t *b = realloc(*buf, nc);
        if (!b) {
            free(c);
            return DMUON_FAIL(DMUON_ENOMEM, "out of memory reading '%s'", path);
        }
        *buf = b;
        *cap = nc;
    }
    memcpy(*buf + *len, c, n);
    *len += n;
    free(c);
    return DMUON_OK;
}

dmuon_rc td_load(const char *path, int val_every, int seq, td_data *d)
{
    memset(d, 0, sizeof *d);
    const char *p = path ? path : TD_DEFAULT_DIR;
    snprintf(d->source, sizeof d->source, "%s", p);
    if (val_every < 2)
        return DMUON_FAIL(DMUON_EINVAL, "validation split: every %d-th block (expected >= 2)",
                          val_every);
    struct stat st;
    if (stat(p, &st) != 0)
        return DMUON_FAIL(DMUON_ENOTFOUND, "data '%s': %s%s", p, strerror(errno),
                          path ? "" : " (the default text is Debian's fortunes: run make deps)");
    uint8_t *all = NULL;
    size_t len = 0, cap = 0;
    char **names = NULL;
    size_t nn = 0;
    dmuon_rc rc = DMUON_OK;
    if (S_ISDIR(st.st_mode)) {
        DIR *dir = opendir(p);
        if (!dir)
            return DMUON_FAIL(DMUON_EIO, "data '%s': cannot open the directory: %s", p,
                              strerror(errno));
        struct dirent *e;
        size_t ncap = 0;
        while ((e = readdir(dir))) {
            if (skip_name(e->d_name))
                continue;
            if (nn == ncap) {
                ncap = ncap ? 2 * ncap : 64;
                char **t = realloc(names, ncap * sizeof *t);
                if (!t) {
                    closedir(dir);
                    rc = DMUON_FAIL(DMUON_ENOMEM, "out of memory listing '%s'", p);
                    goto out;
                }
                names = t;
            }
            names[nn] = strdup(e->d_name);
            if (!names[nn]) {
                closedir(dir);
                rc = DMUON_FAIL(DMUON_ENOMEM, "out of memory listing '%s'", p);
                goto out;
            }
            nn++;
        }
        closedir(dir);
        qsort(names, nn, sizeof *names, cmp_str);
        for (size_t i = 0; i < nn; i++) {
            char fp[2048];
            snprintf(fp, sizeof fp, "%s/%s", p, names[i]);
            struct stat fs;
            if (lstat(fp, &fs) != 0 || !S_ISREG(fs.st_mode))
                continue;
            DMUON_TRY_GOTO(rc, append_file(fp, &all, &len, &cap), out);
            d->files++;
        }
        if (!d->files) {
            rc = DMUON_FAIL(DMUON_ENOTFOUND, "data '%s': no text files in the directory", p);
            goto out;
        }
    } else {
        DMUON_TRY_GOTO(rc, append_file(p, &all, &len, &cap), out);
        d->files = 1;
    }
    d->digest = dmuon_digest(all, len, DMUON_DIGEST_SEED);
    d->train = malloc(len ? len : 1);
    d->val = malloc(len ? len : 1);
    if (!d->train || !d->val) {
        rc = DMUON_FAIL(DMUON_ENOMEM, "out of memory for %zu bytes of text", len);
        goto out;
    }
    for (size_t b = 0, at = 0; at < len; b++, at += TD_BLOCK) {
        size_t n = len - at < TD_BLOCK ? len - at : TD_BLOCK;
        int v = (int)(b % (size_t)val_every) == val_every - 1;
        memcpy(v ? d->val + d->n_val : d->train + d->n_train, all + at, n);
        *(v ? &d->n_val : &d->n_train) += n;
    }
    if (d->n_train <= (size_t)seq + 1 || d->n_val <= (size_t)seq + 1) {
        rc = DMUON_FAIL(DMUON_EINVAL, "data '%s': %zu bytes give %zu training and %zu validation "
                                      "bytes; each needs more than seq + 1 = %d (blocks of %d, "
                                      "every %d-th held out)",
                        p, len, d->n_train, d->n_val, seq + 1, TD_BLOCK, val_every);
        goto out;
    }
out:
    for (size_t i = 0; i < nn; i++)
        free(names[i]);
    free(names);
    free(all);
    if (rc)
        td_release(d);
    return rc;
}

void td_release(td_data *d)
{
    free(d->train);
    free(d->val);
    d->train = d->val = NULL;
    d->n_train = d->n_val = 0;
}

/* splitmix64 finaliser of a key (Steele, Lea, Flood 2014). */
static uint64_t mix(uint64_t z)
{
    z += UINT64_C(0x9e3779b97f4a7c15);
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

void td_train_batch(const td_data *d, uint64_t seed, int64_t step, int micro, int j0, int n,
                    int T, uint8_t *tokens, uint8_t *targets)
{
    uint64_t span = d->n_train - (size_t)T - 1;
    for (int j = 0; j < n; j++) {
        uint64_t k = mix(mix(mix(seed) ^ (uint64_t)step) ^ (uint64_t)micro) ^ (uint64_t)(j0 + j);
        size_t at = (size_t)(mix(k) % span);
        memcpy(tokens + (size_t)j * T, d->train + at, (size_t)T);
        memcpy(targets + (size_t)j * T, d->train + at + 1, (size_t)T);
    }
}

void td_val_batch(const td_data *d, int i0, int n, int total, int T, uint8_t *tokens,
                  uint8_t *targets)
{
    size_t span = d->n_val - (size_t)T - 1;
    for (int j = 0; j < n; j++) {
        size_t at = (size_t)((double)(i0 + j) * (double)span / (double)total);
        memcpy(tokens + (size_t)j * T, d->val + at, (size_t)T);
        memcpy(targets + (size_t)j * T, d->val + at + 1, (size_t)T);
    }
}
