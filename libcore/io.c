/*
 * io.c — atomic file writes, whole-file reads, streaming JSON (dmuon/io.h).
 */
#include "dmuon/io.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---------------------------------------------------------------- files -- */

/* The file a symbolic link points to (malloc'ed): realpath when the target
 * exists, else the link's text taken relative to the link's directory. */
static dmuon_rc link_target(const char *link, char **out)
{
    char text[4096];
    *out = realpath(link, NULL);
    if (*out)
        return DMUON_OK;
    ssize_t n = readlink(link, text, sizeof text - 1);
    if (n < 0)
        return DMUON_FAIL(DMUON_EIO, "cannot resolve the link '%s': %s", link, strerror(errno));
    text[n] = '\0';
    const char *slash = strrchr(link, '/');
    int dir = (text[0] == '/' || !slash) ? 0 : (int)(slash - link + 1);
    size_t cap = (size_t)dir + (size_t)n + 1;
    *out = malloc(cap);
    if (!*out)
        return DMUON_FAIL(DMUON_ENOMEM, "out of memory resolving '%s'", link);
    snprintf(*out, cap, "%.*s%s", dir, link, text);
    return DMUON_OK;
}

/* The temporary file of the write in progress ("" when none), for
 * dmuon_write_abandon from a signal handler. */
static char pending_tmp[4096];
static volatile sig_atomic_t pending_set;

void dmuon_write_abandon(void)
{
    if (pending_set)
        unlink(pending_tmp);
    pending_set = 0;
}

static void test_stall(void)
{
    const char *ms = getenv("DMUON_TEST_WRITE_STALL_MS");
    if (ms && atoi(ms) > 0) {
        struct timespec ts = {atoi(ms) / 1000, (long)(atoi(ms) % 1000) * 1000000L};
        nanosleep(&ts, NULL);
    }
}

dmuon_rc dmuon_write_atomic(const char *path, dmuon_write_fn fn, void *ctx)
{
    dmuon_rc rc = DMUON_OK;
    char *tmp = NULL, *resolved = NULL;
    FILE *f = NULL;
    int fd = -1;

    if (!strcmp(path, "-")) {
        rc = fn(stdout, ctx);
        errno = 0;
        if ((fflush(stdout) != 0 || ferror(stdout)) && !rc)
            rc = DMUON_FAIL(DMUON_EIO, "cannot write standard output: %s",
                            errno ? strerror(errno) : "write error");
        return rc;
    }
    if (!*path)
        return DMUON_FAIL(DMUON_EINVAL, "empty output path (use '-' for standard output)");
    /* Write through a symbolic link to its target; never replace a device,
     * FIFO or directory with a regular file. */
    struct stat st;
    if (lstat(path, &st) == 0 && S_ISLNK(st.st_mode)) {
        DMUON_TRY(link_target(path, &resolved));
        path = resolved;
    }
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
        rc = DMUON_FAIL(DMUON_EINVAL, "output '%s' exists and is not a regular file (use '-' for "
                        "standard output)", path);
        goto out;
    }
    size_t n = strlen(path) + 16;
    tmp = malloc(n);
    if (!tmp) {
        rc = DMUON_FAIL(DMUON_ENOMEM, "out of memory writing '%s'", path);
        goto out;
    }
    snprintf(tmp, n, "%s.tmp.XXXXXX", path);
    fd = mkstemp(tmp);
    if (fd < 0) {
        rc = DMUON_FAIL(DMUON_EIO, "cannot create a temporary file next to '%s': %s", path,
                        strerror(errno));
        goto out;
    }
    if (strlen(tmp) < sizeof pending_tmp) {
        memcpy(pending_tmp, tmp, strlen(tmp) + 1);
        pending_set = 1;
    }
    test_stall();
    fchmod(fd, 0644);
    f = fdopen(fd, "w");
    if (!f) {
        rc = DMUON_FAIL(DMUON_EIO, "cannot write '%s': %s", tmp, strerror(errno));
        close(fd);
        goto fail;
    }
    DMUON_TRY_GOTO(rc, fn(f, ctx), fail);
    if (fflush(f) != 0 || ferror(f) || fsync(fileno(f)) != 0) {
        rc = DMUON_FAIL(DMUON_EIO, "cannot write '%s': %s", tmp, strerror(errno));
        goto fail;
    }
    if (fclose(f) != 0) {
        f = NULL;
        rc = DMUON_FAIL(DMUON_EIO, "cannot write '%s': %s", tmp, strerror(errno));
        goto fail;
    }
    f = NULL;
    if (rename(tmp, path) != 0) {
        rc = DMUON_FAIL(DMUON_EIO, "cannot rename '%s' to '%s': %s", tmp, path, strerror(errno));
        goto fail;
    }
    goto out;
fail:
    if (f)
        fclose(f);
    unlink(tmp);
out:
    pending_set = 0;
    free(tmp);
    free(resolved);
    return rc;
}

dmuon_rc dmuon_read_file(const char *path, size_t max_bytes, char **buf, size_t *len)
{
    FILE *f = fopen(path, "rb");
    struct stat st;
    *buf = NULL;
    *len = 0;
    if (!f)
        return DMUON_FAIL(DMUON_EIO, "cannot open '%s': %s", path, strerror(errno));
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        fclose(f);
        return DMUON_FAIL(DMUON_EIO, "'%s' is not a regular file", path);
    }
    if ((uint64_t)st.st_size > max_bytes) {
        fclose(f);
        return DMUON_FAIL(DMUON_EINVAL, "'%s' is %lld bytes, more than the %zu allowed", path,
                          (long long)st.st_size, max_bytes);
    }
    char *b = malloc((size_t)st.st_size + 1);
    if (!b) {
        fclose(f);
        return DMUON_FAIL(DMUON_ENOMEM, "out of memory reading '%s'", path);
    }
    size_t got = fread(b, 1, (size_t)st.st_size, f);
    if (ferror(f)) {
        fclose(f);
        free(b);
        return DMUON_FAIL(DMUON_EIO, "cannot read '%s': %s", path, strerror(errno));
    }
    fclose(f);
    b[got] = '\0';
    *buf = b;
    *len = got;
    return DMUON_OK;
}

/* ----------------------------------------------------------------- JSON -- */

void dmuon_json_init(dmuon_json *w, FILE *f, bool pretty)
{
    memset(w, 0, sizeof *w);
    w->f = f;
    w->pretty = pretty;
    w->first[0] = true;
}

static void indent(dmuon_json *w)
{
    if (!w->pretty)
        return;
    fputc('\n', w->f);
    for (int i = 0; i < w->depth; i++)
        fputs("  ", w->f);
}

/* Separator before a value (or a key) at the current depth. */
static void sep(dmuon_json *w)
{
    if (w->after_key) {
        w->after_key = false;
        return;
    }
    if (!w->first[w->depth])
        fputc(',', w->f);
    w->first[w->depth] = false;
    if (w->depth > 0)
        indent(w);
}

static void open_(dmuon_json *w, char c)
{
    sep(w);
    fputc(c, w->f);
    if (w->depth < 32)
        w->depth++;
    w->first[w->depth] = true;
}

static void close_(dmuon_json *w, char c)
{
    bool empty = w->first[w->depth];
    if (w->depth > 0)
        w->depth--;
    if (!empty)
        indent(w);
    fputc(c, w->f);
    if (w->depth == 0)
        fputc('\n', w->f);
}

void dmuon_json_begin_object(dmuon_json *w) { open_(w, '{'); }
void dmuon_json_end_object(dmuon_json *w) { close_(w, '}'); }
void dmuon_json_begin_array(dmuon_json *w) { open_(w, '['); }
void dmuon_json_end_array(dmuon_json *w) { close_(w, ']'); }

static void put_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
        switch (*p) {
        case '"': fputs("\\\"", f); break;
        case '\\': fputs("\\\\", f); break;
        case '\n': fputs("\\n", f); break;
        case '\r': fputs("\\r", f); break;
        case '\t': fputs("\\t", f); break;
        default:
            if (*p < 0x20)
                fprintf(f, "\\u%04x", *p);
            else
                fputc(*p, f);
        }
    }
    fputc('"', f);
}

void dmuon_json_key(dmuon_json *w, const char *key)
{
    sep(w);
    put_string(w->f, key);
    fputs(w->pretty ? ": " : ":", w->f);
    w->after_key = true;
}

void dmuon_json_str(dmuon_json *w, const char *s) { sep(w); put_string(w->f, s); }
void dmuon_json_int(dmuon_json *w, int64_t v) { sep(w); fprintf(w->f, "%lld", (long long)v); }
void dmuon_json_bool(dmuon_json *w, bool v) { sep(w); fputs(v ? "true" : "false", w->f); }
void dmuon_json_null(dmuon_json *w) { sep(w); fputs("null", w->f); }

void dmuon_json_double(dmuon_json *w, double v)
{
    sep(w);
    if (isfinite(v))
        fprintf(w->f, "%.12g", v);
    else
        fputs("null", w->f);
}

void dmuon_json_kstr(dmuon_json *w, const char *k, const char *s) { dmuon_json_key(w, k); dmuon_json_str(w, s); }
void dmuon_json_kint(dmuon_json *w, const char *k, int64_t v) { dmuon_json_key(w, k); dmuon_json_int(w, v); }
void dmuon_json_kdouble(dmuon_json *w, const char *k, double v) { dmuon_json_key(w, k); dmuon_json_double(w, v); }
void dmuon_json_kbool(dmuon_json *w, const char *k, bool v) { dmuon_json_key(w, k); dmuon_json_bool(w, v); }

/* ------------------------------------------------- file descriptors -- */

bool dmuon_fd_write_all(int fd, const void *buf, size_t len)
{
    const char *p = buf;
    while (len > 0) {
        ssize_t w = write(fd, p, len);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return false;
        p += w;
        len -= (size_t)w;
    }
    return true;
}

bool dmuon_fd_pwrite_all(int fd, const void *buf, size_t len, uint64_t off)
{
    const char *p = buf;
    while (len > 0) {
        ssize_t w = pwrite(fd, p, len, (off_t)off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return false;
        p += w;
        len -= (size_t)w;
        off += (uint64_t)w;
    }
    return true;
}

bool dmuon_fd_read_all(int fd, void *buf, size_t len, size_t *got)
{
    char *p = buf;
    *got = 0;
    while (len > 0) {
        ssize_t r = read(fd, p, len);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return false;
        if (r == 0)
            return true;
        p += r;
        len -= (size_t)r;
        *got += (size_t)r;
    }
    return true;
}


dmuon_rc dmuon_dir_fsync(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd < 0)
        return DMUON_FAIL(DMUON_EIO, "cannot open directory '%s': %s", dir, strerror(errno));
    int r = fsync(fd);
    int e = errno;
    close(fd);
    if (r != 0 && e != EINVAL)
        return DMUON_FAIL(DMUON_EIO, "cannot fsync directory '%s': %s", dir, strerror(e));
    return DMUON_OK;
}

void dmuon_dir_remove(const char *dir)
{
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        char p[4096];
        while ((e = readdir(d)) != NULL) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
                continue;
            if ((size_t)snprintf(p, sizeof p, "%s/%s", dir, e->d_name) < sizeof p)
                unlink(p);
        }
        closedir(d);
    }
    rmdir(dir);
}
