/*
 * opt.c — the shared number and size grammar of the dmuon tools (see opt.h).
 * Invariant: a parser either returns 0 with *out in the caller's range, or
 * -1 with a message that quotes the flag, the text and the accepted range.
 */
#include "opt.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <dirent.h>
#include <stdbool.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "dmuon/io.h"
#include "dmuon/types.h"
#include "dmuon/version.h"

/* Decimal digits with an optional '-' into *v; *end after them.  False on
 * no digits or overflow. */
static int digits(const char *s, long long *v, const char **end)
{
    const char *p = s;
    if (*p == '-')
        p++;
    if (!isdigit((unsigned char)*p))
        return 0;
    char *e;
    errno = 0;
    *v = strtoll(s, &e, 10);
    *end = e;
    return errno != ERANGE;
}

int tool_parse_int(const char *flag, const char *text, int64_t lo, int64_t hi, int64_t *out,
                   char *err, size_t n)
{
    long long v = 0;
    const char *end = text;
    if (!text || !digits(text, &v, &end) || *end || v < lo || v > hi) {
        snprintf(err, n, "%s '%s': expected a whole number from %lld to %lld", flag,
                 text ? text : "", (long long)lo, (long long)hi);
        return -1;
    }
    *out = v;
    return 0;
}

char *tool_format_size(int64_t b, char *buf, size_t n)
{
    static const char *const name[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    int k = 0;
    double v = (double)b;
    while (k < 6 && (b >> (10 * (k + 1))) > 0 && (b & ((1LL << (10 * (k + 1))) - 1)) == 0)
        k++;
    if (k > 0 || b < 1024) {
        snprintf(buf, n, "%lld %s", (long long)(b >> (10 * k)), name[k]);
        return buf;
    }
    for (k = 0; k < 6 && v >= 1024; k++)
        v /= 1024;
    snprintf(buf, n, "%.1f %s (%lld bytes)", v, name[k], (long long)b);
    return buf;
}

int tool_parse_size(const char *flag, const char *text, int64_t lo, int64_t hi, int64_t *out,
                    char *err, size_t n)
{
    int64_t v = 0;
    if (dmuon_size_parse(text, &v) != DMUON_OK || v < lo || v > hi) {
        char a[48], b[48];
        snprintf(err, n, "%s '%s': expected a size from %s to %s (e.g. 4096, 16K, 16KB, 16KiB, "
                 "1G; K = 1024)", flag, text ? text : "", tool_format_size(lo, a, sizeof a),
                 tool_format_size(hi, b, sizeof b));
        return -1;
    }
    *out = v;
    return 0;
}

int tool_parse_double(const char *flag, const char *text, double lo, double hi, double *out,
                      char *err, size_t n)
{
    char *end = NULL;
    errno = 0;
    double v = text && *text ? strtod(text, &end) : NAN;
    if (!text || !*text || *end || errno == ERANGE || !isfinite(v) || v < lo || v > hi) {
        snprintf(err, n, "%s '%s': expected a number from %g to %g", flag, text ? text : "", lo,
                 hi);
        return -1;
    }
    *out = v;
    return 0;
}

void tool_print_version(const char *tool, int argc, char **argv)
{
    bool json = false;
    for (int i = 1; i < argc; i++)
        json |= !strcmp(argv[i], "--json");
    if (!json) {
        printf("%s (dmuon) %s\n", tool, dmuon_version());
        return;
    }
    dmuon_json w;
    dmuon_json_init(&w, stdout, false);
    dmuon_json_begin_object(&w);
    dmuon_json_kstr(&w, "tool", tool);
    dmuon_json_kstr(&w, "version", dmuon_version());
    dmuon_json_end_object(&w);   /* ends the line */
}

/* Flushes (and unless it is stdout, closes) f: 0, or the errno of the first
 * failure (EIO when only the error flag tells). */
static int close_stream(FILE *f)
{
    int bad = ferror(f), e = 0;
    errno = 0;
    if (fflush(f) != 0) {
        bad = 1;
        e = errno;
    }
    if (f != stdout && fclose(f) != 0) {
        bad = 1;
        e = e ? e : errno;
    }
    return bad ? (e ? e : EIO) : 0;
}

int tool_finish_stdout(const char *tool, int code)
{
    int e = close_stream(stdout);
    if (!e) {
        errno = 0;
        if (fclose(stdout) != 0)
            e = errno ? errno : EIO;
    }
    if (!e)
        return code;
    /* a run that already failed on this very write said so (the library's
     * "cannot write standard output" was its error): said once */
    if (code != 0 && strstr(dmuon_errmsg(), "cannot write standard output"))
        return code;
    fprintf(stderr, "%s: cannot write standard output: %s\n", tool, strerror(e));
    return 3;
}

int tool_close_file(FILE *f, const char *path, char *err, size_t n)
{
    if (!f)
        return 0;
    int e = close_stream(f);
    if (!e)
        return 0;
    snprintf(err, n, "cannot write '%s': %s", strcmp(path, "-") ? path : "standard output",
             strerror(e));
    return -1;
}

int64_t tool_mem_available(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    long long kb = -1;
    if (!f)
        return -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %lld kB", &kb) == 1)
            break;
    fclose(f);
    return kb < 0 ? -1 : (int64_t)kb * 1024;
}

int tool_check_host_memory(MPI_Comm world, int64_t bytes, int factor, const char *flag,
                           char *err, size_t n)
{
    MPI_Comm local;
    int here = 1, bad = 0;
    if (MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local) ==
        MPI_SUCCESS) {
        MPI_Comm_size(local, &here);
        MPI_Comm_free(&local);
    }
    int64_t avail = tool_mem_available(), need = 0;
    if (__builtin_mul_overflow(bytes, (int64_t)factor * here, &need))
        need = -1;
    if (avail > 0 && (need < 0 || need > avail))
        bad = 1;
    MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_MAX, world);
    if (!bad)
        return 0;
    char a[48], b[48], c[48];
    snprintf(err, n, "%s %s needs at least %s on this host (%d x the size for each of its %d "
             "rank%s), which has %s available: give a smaller size or fewer ranks per host",
             flag, tool_format_size(bytes, a, sizeof a),
             need > 0 ? tool_format_size(need, b, sizeof b) : "more than 8 EiB", factor, here,
             here == 1 ? "" : "s", avail > 0 ? tool_format_size(avail, c, sizeof c) : "less");
    return -1;
}

static void on_signal(int sig)
{
    dmuon_write_abandon();
    signal(sig, SIG_DFL);
    raise(sig);
}

void tool_cleanup_on_signal(void)
{
    static const int sigs[] = {SIGINT, SIGTERM, SIGHUP};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
        struct sigaction sa, old;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_signal;
        sigemptyset(&sa.sa_mask);
        /* keep a handler someone installed before (MPI, a caller) */
        if (sigaction(sigs[i], NULL, &old) == 0 && old.sa_handler == SIG_DFL)
            sigaction(sigs[i], &sa, NULL);
    }
}

int tool_check_output_path(const char *flag, const char *path, bool dir, char *err, size_t n)
{
    struct stat st;
    if (!path || !*path) {
        snprintf(err, n, "%s '': expected a path", flag);
        return -1;
    }
    size_t len = strlen(path);
    if (!dir && path[len - 1] == '/') {
        snprintf(err, n, "%s '%s': expected a file name, not a directory's", flag, path);
        return -1;
    }
    if (lstat(path, &st) == 0 && S_ISLNK(st.st_mode) && stat(path, &st) != 0) {
        snprintf(err, n, "%s '%s': a symbolic link to nothing", flag, path);
        return -1;
    }
    /* the directory part: everything before the last '/' (trailing ones dropped) */
    while (len > 1 && path[len - 1] == '/')
        len--;
    char parent[4096];
    size_t cut = len;
    while (cut > 0 && path[cut - 1] != '/')
        cut--;
    if (cut == 0)
        snprintf(parent, sizeof parent, ".");
    else
        snprintf(parent, sizeof parent, "%.*s", (int)(cut > 1 ? cut - 1 : 1), path);
    if (stat(parent, &st) != 0) {
        snprintf(err, n, "%s '%s': the directory '%s' does not exist", flag, path, parent);
        return -1;
    }
    if (!S_ISDIR(st.st_mode)) {
        snprintf(err, n, "%s '%s': '%s' is not a directory", flag, path, parent);
        return -1;
    }
    if (access(parent, W_OK | X_OK) != 0) {
        snprintf(err, n, "%s '%s': the directory '%s' is not writable", flag, path, parent);
        return -1;
    }
    if (stat(path, &st) == 0 && (dir ? !S_ISDIR(st.st_mode) : !S_ISREG(st.st_mode))) {
        snprintf(err, n, "%s '%s': exists and is not a %s", flag, path,
                 dir ? "directory" : "regular file");
        return -1;
    }
    if (dir && stat(path, &st) == 0) {
        /* a checkpoint is replaced only by a checkpoint: DIR must be empty
         * or hold a manifest (the save refuses anything else, after training) */
        DIR *d = opendir(path);
        bool empty = true;
        struct dirent *e;
        while (d && (e = readdir(d)))
            if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
                empty = false;
        if (d)
            closedir(d);
        char man[4200];
        snprintf(man, sizeof man, "%s/manifest.json", path);
        if (!empty && access(man, F_OK) != 0) {
            snprintf(err, n, "%s '%s': exists and is not a checkpoint (no manifest.json): "
                     "refusing to replace it", flag, path);
            return -1;
        }
    }
    /* create and remove a probe where the output will go: access() says yes
     * for root on file systems that refuse new files (/proc, read-only binds) */
    char probe[4200];
    snprintf(probe, sizeof probe, "%s/.dmuon-probe.XXXXXX", parent);
    int fd = mkstemp(probe);
    if (fd < 0) {
        snprintf(err, n, "%s '%s': cannot create a file in '%s': %s", flag, path, parent,
                 strerror(errno));
        return -1;
    }
    close(fd);
    unlink(probe);
    return 0;
}

static volatile sig_atomic_t *stop_flag;

static void on_stop_signal(int sig)
{
    if (stop_flag && !*stop_flag) {
        *stop_flag = sig;
        return;
    }
    on_signal(sig);
}

void tool_stop_on_signal(volatile sig_atomic_t *flag)
{
    stop_flag = flag;
    static const int sigs[] = {SIGINT, SIGTERM};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_stop_signal;
        sigemptyset(&sa.sa_mask);
        sigaction(sigs[i], &sa, NULL);
    }
}

const char *tool_bad_option(const char *arg, const struct option *opts, const char *shorts,
                            char *buf, size_t n)
{
    char hint[128];
    const char *s = arg && arg[0] == '-' && arg[1] && arg[1] != '-' && arg[1] != ':' && !arg[2] &&
                            shorts ? strchr(shorts, arg[1]) : NULL;
    if (s && s[1] == ':') {
        snprintf(buf, n, "option '%s' needs a value", arg);
        return buf;
    }
    /* a known option at the end of the line, or before another option: its value is missing */
    if (arg && arg[0] == '-' && arg[1] == '-' && !strchr(arg, '='))
        for (const struct option *o = opts; o->name; o++)
            if (o->has_arg == required_argument && !strcmp(o->name, arg + 2)) {
                snprintf(buf, n, "option '%s' needs a value", arg);
                return buf;
            }
    snprintf(buf, n, "unknown option or missing value '%s'%s", arg ? arg : "",
             tool_suggest_option(arg, opts, hint, sizeof hint));
    return buf;
}

void tool_unknown_option(const char *prog, const char *arg, const struct option *opts)
{
    char msg[512];
    fprintf(stderr, "%s: error: %s\n", prog, tool_bad_option(arg, opts, NULL, msg, sizeof msg));
}

/* msg without its leading "rank N: " prefixes */
static const char *strip_rank(const char *msg)
{
    int n = 0;
    while (sscanf(msg, "rank %*d: %n", &n) == 0 && n > 0) {
        msg += n;
        n = 0;
    }
    return msg;
}

void tool_report_error(MPI_Comm comm, const char *tool, const char *msg, int code)
{
    const char *core = strip_rank(msg);
    uint64_t h = 1469598103934665603ull;   /* FNV-1a of the message without prefix */
    for (const char *p = core; *p; p++)
        h = (h ^ (unsigned char)*p) * 1099511628211ull;
    int rank = 0, size = 1;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    uint64_t *all = calloc((size_t)size, sizeof *all);
    MPI_Request req;
    int done = 0;
    if (all && MPI_Iallgather(&h, 1, MPI_UINT64_T, all, 1, MPI_UINT64_T, comm, &req) ==
                   MPI_SUCCESS) {
        struct timespec pause = {0, 1000000};
        for (int i = 0; i < 10000 && !done; i++) {
            MPI_Test(&req, &done, MPI_STATUS_IGNORE);
            if (!done)
                nanosleep(&pause, NULL);
        }
    }
    if (!done) {
        fprintf(stderr, "%s: error: %s\n", tool, msg);
        free(all);
        MPI_Abort(comm, code);
        return;
    }
    int alike = 1;
    for (int r = 1; r < size; r++)
        alike &= all[r] == all[0];
    if (alike) {
        if (rank == 0)
            fprintf(stderr, "%s: error: %s%s\n", tool, core, size > 1 ? " (every rank)" : "");
    } else if (rank == 0 || all[rank] != all[0]) {
        fprintf(stderr, "%s: error: %s\n", tool, msg);
    }
    free(all);
}

char *tool_lower(char *s)
{
    for (char *p = s; p && *p; p++)
        *p = (char)tolower((unsigned char)*p);
    return s;
}

/* Levenshtein distance of a[0..la) and b[0..lb), both under 64 characters. */
static int edit_distance(const char *a, size_t la, const char *b, size_t lb)
{
    int row[65];
    for (size_t j = 0; j <= lb; j++)
        row[j] = (int)j;
    for (size_t i = 1; i <= la; i++) {
        int diag = row[0];
        row[0] = (int)i;
        for (size_t j = 1; j <= lb; j++) {
            int up = row[j];
            int best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best)
                best = up + 1;
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb];
}

const char *tool_suggest_option(const char *arg, const struct option *opts, char *buf,
                                size_t n)
{
    if (n)
        buf[0] = '\0';
    if (!arg || arg[0] != '-')
        return buf;
    const char *name = arg + (arg[1] == '-' ? 2 : 1);
    size_t len = strcspn(name, "=");
    if (len < 2 || len >= 64)   /* "-x": nothing to go by */
        return buf;
    const char *best = NULL;
    int best_d = 1 << 30;
    for (const struct option *o = opts; o->name; o++) {
        size_t ol = strlen(o->name);
        if (ol >= 64)
            continue;
        int d = edit_distance(name, len, o->name, ol);
        if (len >= 3 && !strncmp(o->name, name, len))
            d = 1;   /* an unfinished name: "--shard" */
        int limit = (int)(ol / 3) > 2 ? (int)(ol / 3) : 2;
        if (d <= limit && d < best_d) {
            best = o->name;
            best_d = d;
        }
    }
    if (best)
        snprintf(buf, n, " (did you mean --%s?)", best);
    return buf;
}
