/*
 * ckpt.c — checkpoints of optimizer state in pieces, re-sharded on load, and
 * full-weight export (dmuon/ckpt.h; paper §6; docs/design.md "Checkpoints").
 *
 * Save (collective):
 *   1. every rank checks its pieces (known parameter and kind, range inside
 *      the parameter, no overlap among its own pieces); agreed;
 *   2. rank 0 checks that DIR is absent, empty or a checkpoint, creates
 *      DIR.tmp.XXXXXX beside it and broadcasts the name; agreed;
 *   3. every rank with pieces writes DIR.tmp.X/rank-RRRRR.safetensors
 *      (header built with the JSON writer, padded with spaces so the data
 *      starts at a multiple of 8; F32 little-endian data in piece order),
 *      computing the file digest and one digest per piece while writing, and
 *      fsyncs it; agreed;
 *   4. the piece lists and file digests are gathered to rank 0, which keeps
 *      one copy of each replicated range (the lowest rank's), refuses other
 *      overlaps, writes manifest.json (temp + rename inside the directory),
 *      fsyncs the directory and renames it over DIR: an existing DIR is
 *      first renamed to DIR.old.XXXXXX, then the new one into place, then the
 *      old one removed (on a failed second rename the old one is put back);
 *      agreed.  Every failure after step 2 removes DIR.tmp.X (rank 0 does it,
 *      after every rank has closed its file).
 *   The ranks must share one file system (one host, or a cluster file system
 *   such as NFS or Lustre): rank 0 creates, renames and removes what the
 *   other ranks wrote.  A process killed mid-save (SIGKILL, or SIGINT/SIGTERM
 *   without a handler in the trainer) leaves DIR untouched and may leave
 *   DIR.tmp.X behind; nothing removes that automatically.
 *
 * Load (collective): rank 0 reads manifest.json and broadcasts its bytes;
 * every rank parses them (libyaml through doc.c) and checks format, version,
 * model digest, the parameter table and every piece (inside its parameter,
 * inside its file, no two overlapping).  Each requested piece is then cut
 * into the parts that saved pieces cover (a gap is DMUON_ENOTFOUND naming
 * parameter, kind and range); each file needed is checked (size, header via
 * st.c, the tensor of every saved piece in it: name, dtype, shape, offset)
 * and streamed once, computing the file digest and the digest of every
 * saved piece in it (so a corrupt tensor is named by every rank that reads
 * the file) while copying the bytes needed into one temporary buffer.  Only
 * when every rank has succeeded (agreed) are the bytes copied into the
 * callers' destinations: a failed load writes nothing anywhere.
 *
 * Export (collective): the master pieces' ranges are all-gathered; every
 * rank checks the same way that each element of each parameter is covered
 * and computes the same header (tensors in parameter-table order, data
 * contiguous, header padded to a multiple of 8 as the format allows).  Rank
 * 0 creates PATH.tmp.XXXXXX, writes the header and sizes the file; every
 * rank then pwrites its master pieces (the lowest rank of identical
 * replicas only) converted to each parameter's dtype at their offsets and
 * fsyncs; rank 0 renames the file over PATH.  Same shared-file-system
 * assumption as save.
 *
 * Agreement: every step that can fail on one rank ends in agree(): an
 * MPI_Allreduce finds the lowest failing rank, which broadcasts its rc and
 * message; every other rank returns that rc with the message prefixed
 * "rank R: " (a failing rank keeps its own).
 *
 * Data is stored little-endian; this file is built for little-endian hosts
 * only (compile-time check).
 */
#include "dmuon/ckpt.h"

#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dmuon/bf16.h"
#include "dmuon/doc.h"
#include "dmuon/io.h"
#include "st_internal.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "ckpt.c writes host floats as little-endian data: a big-endian host needs byte swaps"
#endif

#define CKPT_FORMAT "dmuon-checkpoint"
#define CKPT_MANIFEST "manifest.json"
#define CKPT_PATH_MAX 4096
#define CKPT_NAME_MAX 64          /* hyperparameter names, bytes with the NUL */
#define CKPT_CHUNK (8u << 20)     /* bytes per read/convert step */

static const char *const kind_names[] = {"master", "momentum", "exp_avg", "exp_avg_sq"};
#define NKINDS ((int)(sizeof kind_names / sizeof *kind_names))

/* --------------------------------------------------------------- helpers -- */

static int kind_index(const char *k)
{
    for (int i = 0; k && i < NKINDS; i++)
        if (!strcmp(k, kind_names[i]))
            return i;
    return -1;
}

/* Parameter table with a sorted index for lookups by name. */
typedef struct {
    const dmuon_ckpt_param *p;
    size_t np;
    size_t *order;      /* indices sorted by name */
    int64_t *numel;     /* per parameter */
} ptable;

static int cmp_order(const void *a, const void *b, void *base)
{
    const dmuon_ckpt_param *p = base;
    return strcmp(p[*(const size_t *)a].name, p[*(const size_t *)b].name);
}

static void ptable_release(ptable *t)
{
    free(t->order);
    free(t->numel);
    memset(t, 0, sizeof *t);
}

/* Checks the table (names present and unique, 0..8 dimensions, positive
 * extents, sizes that fit int64) and indexes it.  DMUON_EINVAL, ENOMEM. */
static dmuon_rc ptable_init(ptable *t, const dmuon_ckpt_param *params, size_t np)
{
    memset(t, 0, sizeof *t);
    if (np > 0 && !params)
        return DMUON_FAIL(DMUON_EINVAL, "checkpoint: %zu parameters but no table", np);
    t->p = params;
    t->np = np;
    t->order = malloc((np ? np : 1) * sizeof *t->order);
    t->numel = malloc((np ? np : 1) * sizeof *t->numel);
    if (!t->order || !t->numel) {
        ptable_release(t);
        return DMUON_FAIL(DMUON_ENOMEM, "out of memory for the parameter table");
    }
    for (size_t i = 0; i < np; i++) {
        const dmuon_ckpt_param *p = &params[i];
        if (!p->name || !*p->name || p->ndim < 0 || p->ndim > 8) {
            ptable_release(t);
            return DMUON_FAIL(DMUON_EINVAL, "checkpoint: parameter %zu ('%s'): expected a name "
                                            "and 0 to 8 dimensions, got %d",
                              i, p->name ? p->name : "(null)", p->ndim);
        }
        int64_t n = 1;
        for (int d = 0; d < p->ndim; d++) {
            if (p->shape[d] <= 0 || n > INT64_MAX / 8 / p->shape[d]) {
                ptable_release(t);
                return DMUON_FAIL(DMUON_EINVAL, "checkpoint: parameter '%s': dimension %d is "
                                                "%lld: expected a positive extent (and a size "
                                                "that fits 64 bits)",
                                  p->name, d, (long long)p->shape[d]);
            }
            n *= p->shape[d];
        }
        t->numel[i] = n;
        t->order[i] = i;
    }
    qsort_r(t->order, np, sizeof *t->order, cmp_order, (void *)params);
    for (size_t i = 1; i < np; i++)
        if (!strcmp(params[t->order[i]].name, params[t->order[i - 1]].name)) {
            const char *dup = params[t->order[i]].name;
            ptable_release(t);
            return DMUON_FAIL(DMUON_EINVAL, "checkpoint: parameter '%s' is listed twice", dup);
        }
    return DMUON_OK;
}

/* Index of the parameter named name, or -1. */
static long ptable_find(const ptable *t, const char *name)
{
    size_t lo = 0, hi = t->np;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        int c = strcmp(t->p[t->order[mid]].name, name);
        if (c == 0)
            return (long)t->order[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return -1;
}

/* Every rank learns whether any failed: DMUON_OK when none did; a failing
 * rank returns its own rc and message ("rank R: " added when missing); the
 * others return the lowest failing rank's rc with its message. */
static dmuon_rc agree(MPI_Comm comm, dmuon_rc mine)
{
    int rank, flag, first;
    MPI_Comm_rank(comm, &rank);
    flag = mine == DMUON_OK ? INT_MAX : rank;
    if (MPI_Allreduce(&flag, &first, 1, MPI_INT, MPI_MIN, comm) != MPI_SUCCESS)
        return DMUON_FAIL(DMUON_ECOMM, "checkpoint: MPI_Allreduce failed");
    if (first == INT_MAX)
        return DMUON_OK;
    struct {
        int rc;
        char msg[1024];
    } m;
    memset(&m, 0, sizeof m);
    if (rank == first) {
        m.rc = (int)mine;
        snprintf(m.msg, sizeof m.msg, "%s", dmuon_errmsg());
    }
    if (MPI_Bcast(&m, (int)sizeof m, MPI_BYTE, first, comm) != MPI_SUCCESS)
        return DMUON_FAIL(DMUON_ECOMM, "checkpoint: MPI_Bcast failed after rank %d failed", first);
    char pre[32];
    int plen = snprintf(pre, sizeof pre, "rank %d: ", rank == first || mine == DMUON_OK ? first
                                                                                        : rank);
    if (mine != DMUON_OK) {
        if (strncmp(dmuon_errmsg(), pre, (size_t)plen) != 0) {
            char own[1024];
            snprintf(own, sizeof own, "%s", dmuon_errmsg());
            dmuon_err_set(mine, __FILE__, __LINE__, "%s%s", pre, own);
        }
        return mine;
    }
    const char *body = m.msg;
    if (!strncmp(body, pre, (size_t)plen))
        body += plen;
    return dmuon_err_set((dmuon_rc)m.rc, __FILE__, __LINE__, "%s%s", pre, body);
}

static bool write_all(int fd, const void *buf, size_t len)
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

static bool pwrite_all(int fd, const void *buf, size_t len, uint64_t off)
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

static bool read_all(int fd, void *buf, size_t len, size_t *got)
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

/* *a = dmuon_digest(data, len, *a) and *b = dmuon_digest(data, len, *b) in
 * one pass: the two FNV-1a chains are independent, so they run side by side
 * (a file digest and a piece digest for the price of one). */
static void digest2(const void *data, size_t len, uint64_t *a, uint64_t *b)
{
    const unsigned char *p = data;
    uint64_t x = *a, y = *b;
    for (size_t i = 0; i < len; i++) {
        x = (x ^ p[i]) * UINT64_C(0x100000001b3);
        y = (y ^ p[i]) * UINT64_C(0x100000001b3);
    }
    *a = x;
    *b = y;
}

/* snprintf into a CKPT_PATH_MAX buffer; callers keep names short enough
 * (clean_dir leaves room), so truncation only shortens a message. */
static void fmt_path(char out[CKPT_PATH_MAX], const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void fmt_path(char out[CKPT_PATH_MAX], const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(out, CKPT_PATH_MAX, fmt, ap);
    va_end(ap);
}

/* fsync of a directory (so renames and new entries in it are durable). */
static dmuon_rc fsync_dir(const char *dir)
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

/* Removes the regular files directly inside dir, then dir (best effort). */
static void remove_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        char p[CKPT_PATH_MAX];
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

/* The parent directory of path (for fsync after a rename), into out. */
static void parent_of(const char *path, char out[CKPT_PATH_MAX])
{
    snprintf(out, CKPT_PATH_MAX, "%s", path);
    char *slash = strrchr(out, '/');
    if (!slash)
        snprintf(out, CKPT_PATH_MAX, ".");
    else if (slash == out)
        out[1] = '\0';
    else
        *slash = '\0';
}

/* dir without trailing slashes, into out.  DMUON_EINVAL when empty or too long. */
static dmuon_rc clean_dir(const char *dir, char out[CKPT_PATH_MAX])
{
    if (!dir || !*dir)
        return DMUON_FAIL(DMUON_EINVAL, "checkpoint: empty directory name");
    size_t len = strlen(dir);
    while (len > 1 && dir[len - 1] == '/')
        len--;
    if (len + 32 >= CKPT_PATH_MAX)
        return DMUON_FAIL(DMUON_EINVAL, "checkpoint: directory name too long: '%.60s...'", dir);
    memcpy(out, dir, len);
    out[len] = '\0';
    return DMUON_OK;
}

/* Broadcasts a NUL-terminated path buffer from rank 0. */
static dmuon_rc bcast_path(MPI_Comm comm, char path[CKPT_PATH_MAX])
{
    if (MPI_Bcast(path, CKPT_PATH_MAX, MPI_CHAR, 0, comm) != MPI_SUCCESS)
        return DMUON_FAIL(DMUON_ECOMM, "checkpoint: MPI_Bcast of a path failed");
    path[CKPT_PATH_MAX - 1] = '\0';
    return DMUON_OK;
}

/* ------------------------------------------------- safetensors headers -- */

/* A header being built: JSON object written into memory. */
typedef struct {
    FILE *f;
    char *buf;
    size_t len;
    dmuon_json w;
} hdr_buf;

static dmuon_rc hdr_begin(hdr_buf *h, const char *const *meta, size_t nmeta)
{
    memset(h, 0, sizeof *h);
    h->f = open_memstream(&h->buf, &h->len);
    if (!h->f)
        return DMUON_FAIL(DMUON_ENOMEM, "out of memory for a safetensors header");
    dmuon_json_init(&h->w, h->f, false);
    dmuon_json_begin_object(&h->w);
    dmuon_json_key(&h->w, "__metadata__");
    dmuon_json_begin_object(&h->w);
    for (size_t i = 0; i + 1 < 2 * nmeta; i += 2)
        dmuon_json_kstr(&h->w, meta[i], meta[i + 1]);
    dmuon_json_end_object(&h->w);
    return DMUON_OK;
}

static void hdr_tensor(hdr_buf *h, const char *name, dmuon_dtype dt, int ndim,
                       const int64_t *shape, uint64_t begin, uint64_t end)
{
    dmuon_json_key(&h->w, name);
    dmuon_json_begin_object(&h->w);
    dmuon_json_kstr(&h->w, "dtype", dmuon_st_dtype_name(dt));
    dmuon_json_key(&h->w, "shape");
    dmuon_json_begin_array(&h->w);
    for (int d = 0; d < ndim; d++)
        dmuon_json_int(&h->w, shape[d]);
    dmuon_json_end_array(&h->w);
    dmuon_json_key(&h->w, "data_offsets");
    dmuon_json_begin_array(&h->w);
    dmuon_json_int(&h->w, (int64_t)begin);
    dmuon_json_int(&h->w, (int64_t)end);
    dmuon_json_end_array(&h->w);
    dmuon_json_end_object(&h->w);
}

/* Closes the object and frames it: out = 8-byte LE length + JSON padded with
 * spaces to a multiple of 8 (the writer's closing newline replaced).
 * *out is malloc'ed; *out_len = 8 + L. */
static dmuon_rc hdr_end(hdr_buf *h, unsigned char **out, size_t *out_len)
{
    dmuon_json_end_object(&h->w);
    bool bad = ferror(h->f) != 0;
    fclose(h->f);
    h->f = NULL;
    if (bad || !h->buf) {
        free(h->buf);
        return DMUON_FAIL(DMUON_ENOMEM, "out of memory for a safetensors header");
    }
    size_t len = h->len;
    while (len > 0 && (h->buf[len - 1] == '\n' || h->buf[len - 1] == ' '))
        len--;
    size_t L = (len + 7) / 8 * 8;
    unsigned char *o = malloc(8 + L);
    if (!o) {
        free(h->buf);
        return DMUON_FAIL(DMUON_ENOMEM, "out of memory for a safetensors header");
    }
    for (int i = 0; i < 8; i++)
        o[i] = (unsigned char)((uint64_t)L >> (8 * i));
    memcpy(o + 8, h->buf, len);
    memset(o + 8 + len, ' ', L - len);
    free(h->buf);
    h->buf = NULL;
    *out = o;
    *out_len = 8 + L;
    return DMUON_OK;
}

/* Name of a saved piece's tensor: "<param>/<kind>/<lo>-<hi>". */
static void piece_tensor_name(char *out, size_t cap, const char *param, const char *kind,
                              int64_t lo, int64_t hi)
{
    snprintf(out, cap, "%s/%s/%lld-%lld", param, kind, (long long)lo, (long long)hi);
}

/* ------------------------------------------------------- piece checks -- */

/* One saved or requested piece, in numbers (sent between ranks). */
typedef struct {
    int64_t param, kind, lo, hi;
    int64_t offset;     /* byte offset of its data in its file */
    int64_t rank;       /* the rank that holds it */
    int64_t idx;        /* local: index in the caller's pieces; manifest: index of its file */
    uint64_t digest;    /* FNV-1a of its bytes */
} rec;
#define REC_WORDS ((int)(sizeof(rec) / sizeof(int64_t)))

static int cmp_rec(const void *a, const void *b)
{
    const rec *x = a, *y = b;
    if (x->param != y->param) return x->param < y->param ? -1 : 1;
    if (x->kind != y->kind) return x->kind < y->kind ? -1 : 1;
    if (x->lo != y->lo) return x->lo < y->lo ? -1 : 1;
    if (x->hi != y->hi) return x->hi < y->hi ? -1 : 1;
    return (x->rank > y->rank) - (x->rank < y->rank);
}

/* Checks pieces against the table; fills r[i] (param, kind, lo, hi, rank).
 * only_kind >= 0 skips pieces of other kinds (r gets only the kept ones,
 * *nr their count).  DMUON_EINVAL naming the piece. */
static dmuon_rc check_pieces(const ptable *t, const dmuon_ckpt_piece *pieces, size_t n, int rank,
                             int only_kind, rec *r, size_t *nr)
{
    if (n > 0 && !pieces)
        return DMUON_FAIL(DMUON_EINVAL, "checkpoint: %zu pieces but no piece array", n);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        const dmuon_ckpt_piece *p = &pieces[i];
        int kind = kind_index(p->kind);
        if (kind < 0)
            return DMUON_FAIL(DMUON_EINVAL, "checkpoint: piece %zu of parameter '%s': unknown kind "
                                            "'%s' (expected master, momentum, exp_avg or "
                                            "exp_avg_sq)",
                              i, p->name ? p->name : "(null)", p->kind ? p->kind : "(null)");
        if (only_kind >= 0 && kind != only_kind)
            continue;
        long pi = p->name ? ptable_find(t, p->name) : -1;
        if (pi < 0)
            return DMUON_FAIL(DMUON_EINVAL, "checkpoint: piece %zu: unknown parameter '%s'", i,
                              p->name ? p->name : "(null)");
        if (p->lo < 0 || p->hi <= p->lo || p->hi > t->numel[pi])
            return DMUON_FAIL(DMUON_EINVAL, "checkpoint: piece %zu: parameter '%s' kind '%s': "
                                            "range [%lld, %lld) is not inside its %lld elements",
                              i, p->name, p->kind, (long long)p->lo, (long long)p->hi,
                              (long long)t->numel[pi]);
        if (!p->data)
            return DMUON_FAIL(DMUON_EINVAL, "checkpoint: piece %zu: parameter '%s' kind '%s' "
                                            "[%lld, %lld): no data", i, p->name, p->kind,
                              (long long)p->lo, (long long)p->hi);
        r[k] = (rec){.param = pi, .kind = kind, .lo = p->lo, .hi = p->hi, .rank = rank,
                     .idx = (int64_t)i};
        k++;
    }
    *nr = k;
    return DMUON_OK;
}

/* Sorted records: a record that repeats the range of the one before it is a
 * replica (dropped when keep is set: the lowest rank stays); any other
 * overlap is DMUON_EINVAL naming both.  Compacts r in place to *nr. */
static dmuon_rc dedupe(const ptable *t, rec *r, size_t *nr, const char *what)
{
    qsort(r, *nr, sizeof *r, cmp_rec);
    size_t k = 0;
    for (size_t i = 0; i < *nr; i++) {
        if (k > 0 && r[k - 1].param == r[i].param && r[k - 1].kind == r[i].kind) {
            const rec *a = &r[k - 1], *b = &r[i];
            if (a->lo == b->lo && a->hi == b->hi && a->rank != b->rank)
                continue;
            if (b->lo < a->hi)
                return DMUON_FAIL(DMUON_EINVAL, "%s: parameter '%s' kind '%s': pieces [%lld, "
                                                "%lld) of rank %lld and [%lld, %lld) of rank %lld "
                                                "overlap (only identical replicas may)",
                                  what, t->p[a->param].name, kind_names[a->kind],
                                  (long long)a->lo, (long long)a->hi, (long long)a->rank,
                                  (long long)b->lo, (long long)b->hi, (long long)b->rank);
        }
        r[k++] = r[i];
    }
    *nr = k;
    return DMUON_OK;
}

/* --------------------------------------------------------------- save -- */

/* Rank 0: refuses a DIR that exists and is neither a directory holding a
 * manifest nor empty; creates DIR.tmp.XXXXXX into tmp. */
static dmuon_rc make_tmpdir(const char *dir, char tmp[CKPT_PATH_MAX])
{
    struct stat st;
    if (stat(dir, &st) == 0) {
        if (!S_ISDIR(st.st_mode))
            return DMUON_FAIL(DMUON_EINVAL, "checkpoint: '%s' exists and is not a directory", dir);
        char m[CKPT_PATH_MAX];
        fmt_path(m, "%s/" CKPT_MANIFEST, dir);
        if (access(m, F_OK) != 0) {
            DIR *d = opendir(dir);
            bool empty = true;
            struct dirent *e;
            while (d && (e = readdir(d)) != NULL)
                if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
                    empty = false;
            if (d)
                closedir(d);
            if (!empty)
                return DMUON_FAIL(DMUON_EINVAL, "checkpoint: '%s' exists and is not a checkpoint "
                                                "(no " CKPT_MANIFEST "): refusing to replace it",
                                  dir);
        }
    }
    fmt_path(tmp, "%s.tmp.XXXXXX", dir);
    if (!mkdtemp(tmp)) {
        int e = errno;
        fmt_path(tmp, "%s.tmp.XXXXXX", dir);
        DMUON_FAIL(DMUON_EIO, "checkpoint: cannot create the directory '%s': %s", tmp,
                   strerror(e));
        tmp[0] = '\0';
        return DMUON_EIO;
    }
    chmod(tmp, 0755);
    return DMUON_OK;
}

/* What each rank tells rank 0 about its file. */
typedef struct {
    uint64_t has_file, size, digest;
} file_info;

/* Writes this rank's pieces (r[0..nr), checked) as tmp/rank-RRRRR.safetensors;
 * sets r[i].offset (byte offset of the data in the file) and r[i].digest. */
static dmuon_rc write_rank_file(const char *tmp, int rank, const ptable *t,
                                const dmuon_ckpt_piece *pieces, rec *r, size_t nr,
                                file_info *info)
{
    dmuon_rc rc = DMUON_OK;
    unsigned char *hdr = NULL;
    size_t hlen = 0;
    char path[CKPT_PATH_MAX], name[1024], vers[16];
    int fd = -1;
    fmt_path(path, "%s/rank-%05d.safetensors", tmp, rank);
    snprintf(vers, sizeof vers, "%d", DMUON_CKPT_VERSION);
    const char *meta[] = {"format", CKPT_FORMAT, "version", vers};
    hdr_buf h;
    DMUON_TRY(hdr_begin(&h, meta, 2));
    uint64_t off = 0;
    for (size_t i = 0; i < nr; i++) {
        int64_t cnt = r[i].hi - r[i].lo;
        piece_tensor_name(name, sizeof name, t->p[r[i].param].name, kind_names[r[i].kind],
                          r[i].lo, r[i].hi);
        hdr_tensor(&h, name, DMUON_F32, 1, &cnt, off, off + 4 * (uint64_t)cnt);
        r[i].offset = (int64_t)off;   /* relative for now */
        off += 4 * (uint64_t)cnt;
    }
    DMUON_TRY(hdr_end(&h, &hdr, &hlen));
    fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
        rc = DMUON_FAIL(DMUON_EIO, "checkpoint: cannot create '%s': %s", path, strerror(errno));
        goto out;
    }
    uint64_t dg = dmuon_digest(hdr, hlen, DMUON_DIGEST_SEED);
    if (!write_all(fd, hdr, hlen)) {
        rc = DMUON_FAIL(DMUON_EIO, "checkpoint: cannot write '%s': %s", path, strerror(errno));
        goto out;
    }
    for (size_t i = 0; i < nr; i++) {
        const dmuon_ckpt_piece *p = &pieces[r[i].idx];
        size_t bytes = 4 * (size_t)(r[i].hi - r[i].lo);
        r[i].digest = DMUON_DIGEST_SEED;
        digest2(p->data, bytes, &dg, &r[i].digest);
        if (!write_all(fd, p->data, bytes)) {
            piece_tensor_name(name, sizeof name, p->name, p->kind, p->lo, p->hi);
            rc = DMUON_FAIL(DMUON_EIO, "checkpoint: cannot write '%s' (tensor '%s'): %s", path,
                            name, strerror(errno));
            goto out;
        }
        r[i].offset += (int64_t)hlen;
    }
    if (fsync(fd) != 0) {
        rc = DMUON_FAIL(DMUON_EIO, "checkpoint: cannot fsync '%s': %s", path, strerror(errno));
        goto out;
    }
    int fdc = fd;
    fd = -1;
    if (close(fdc) != 0) {
        rc = DMUON_FAIL(DMUON_EIO, "checkpoint: cannot close '%s': %s", path, strerror(errno));
        goto out;
    }
    info->has_file = 1;
    info->size = hlen + off;
    info->digest = dg;
out:
    if (fd >= 0)
        close(fd);
    free(hdr);
    return rc;
}

/* What the manifest writer needs. */
typedef struct {
    const dmuon_ckpt_meta *meta;
    const ptable *t;
    int world;
    const file_info *files;   /* world entries */
    const rec *r;             /* nr kept pieces, sorted */
    size_t nr;
} manifest_ctx;

static dmuon_rc write_manifest(FILE *f, void *vctx)
{
    const manifest_ctx *c = vctx;
    const dmuon_ckpt_meta *m = c->meta;
    char hex[17], fname[64], num[40];
    dmuon_json w;
    dmuon_json_init(&w, f, true);
    dmuon_json_begin_object(&w);
    dmuon_json_kstr(&w, "format", CKPT_FORMAT);
    dmuon_json_kint(&w, "version", DMUON_CKPT_VERSION);
    dmuon_json_kint(&w, "step", m->step);
    dmuon_digest_hex(m->model_digest, hex);
    dmuon_json_kstr(&w, "model_digest", hex);
    dmuon_digest_hex(m->plan_digest, hex);
    dmuon_json_kstr(&w, "plan_digest", hex);
    dmuon_json_kint(&w, "world_size", c->world);
    dmuon_json_kstr(&w, "sharding", m->sharding);
    dmuon_json_key(&w, "hparams");
    dmuon_json_begin_object(&w);
    for (int i = 0; i < m->n_hparams; i++) {
        snprintf(num, sizeof num, "%.17g", m->hparam_values[i]);
        dmuon_json_kstr(&w, m->hparam_names[i], num);
    }
    dmuon_json_end_object(&w);
    dmuon_json_key(&w, "params");
    dmuon_json_begin_array(&w);
    for (size_t i = 0; i < c->t->np; i++) {
        const dmuon_ckpt_param *p = &c->t->p[i];
        dmuon_json_begin_object(&w);
        dmuon_json_kstr(&w, "name", p->name);
        dmuon_json_key(&w, "shape");
        dmuon_json_begin_array(&w);
        for (int d = 0; d < p->ndim; d++)
            dmuon_json_int(&w, p->shape[d]);
        dmuon_json_end_array(&w);
        dmuon_json_kstr(&w, "dtype", dmuon_dtype_name(p->dtype));
        dmuon_json_kstr(&w, "role", p->role == 1 ? "muon" : "adamw");
        dmuon_json_end_object(&w);
    }
    dmuon_json_end_array(&w);
    dmuon_json_key(&w, "files");
    dmuon_json_begin_array(&w);
    for (int r = 0; r < c->world; r++) {
        if (!c->files[r].has_file)
            continue;
        snprintf(fname, sizeof fname, "rank-%05d.safetensors", r);
        dmuon_json_begin_object(&w);
        dmuon_json_kstr(&w, "name", fname);
        dmuon_json_kint(&w, "rank", r);
        dmuon_json_kint(&w, "size", (int64_t)c->files[r].size);
        dmuon_digest_hex(c->files[r].digest, hex);
        dmuon_json_kstr(&w, "digest", hex);
        dmuon_json_end_object(&w);
    }
    dmuon_json_end_array(&w);
    dmuon_json_key(&w, "pieces");
    dmuon_json_begin_array(&w);
    for (size_t i = 0; i < c->nr; i++) {
        const rec *p = &c->r[i];
        snprintf(fname, sizeof fname, "rank-%05d.safetensors", (int)p->rank);
        dmuon_json_begin_object(&w);
        dmuon_json_kstr(&w, "param", c->t->p[p->param].name);
        dmuon_json_kstr(&w, "kind", kind_names[p->kind]);
        dmuon_json_kint(&w, "lo", p->lo);
        dmuon_json_kint(&w, "hi", p->hi);
        dmuon_json_kstr(&w, "file", fname);
        dmuon_json_kint(&w, "offset", p->offset);
        dmuon_digest_hex(p->digest, hex);
        dmuon_json_kstr(&w, "digest", hex);
        dmuon_json_end_object(&w);
    }
    dmuon_json_end_array(&w);
    dmuon_json_end_object(&w);
    return ferror(f) ? DMUON_FAIL(DMUON_EIO, "checkpoint: cannot write the manifest") : DMUON_OK;
}

/* Rank 0, after every file is complete: manifest, fsync, rename into place. */
static dmuon_rc finish_save(const char *dir, char tmp[CKPT_PATH_MAX], manifest_ctx *c)
{
    char path[CKPT_PATH_MAX], old[CKPT_PATH_MAX] = "", parent[CKPT_PATH_MAX];
    fmt_path(path, "%s/" CKPT_MANIFEST, tmp);
    DMUON_TRY(dmuon_write_atomic(path, write_manifest, c));
    DMUON_TRY(fsync_dir(tmp));
    struct stat st;
    if (stat(dir, &st) == 0) {
        fmt_path(old, "%s.old.XXXXXX", dir);
        if (!mkdtemp(old))
            return DMUON_FAIL(DMUON_EIO, "checkpoint: cannot create '%s' to replace '%s': %s", old,
                              dir, strerror(errno));
        if (rename(dir, old) != 0) {
            int e = errno;
            rmdir(old);
            return DMUON_FAIL(DMUON_EIO, "checkpoint: cannot move the old '%s' aside: %s", dir,
                              strerror(e));
        }
    }
    if (rename(tmp, dir) != 0) {
        int e = errno;
        if (old[0] && rename(old, dir) != 0)
            return DMUON_FAIL(DMUON_EIO, "checkpoint: cannot rename '%s' to '%s' (%s), and the "
                                         "old checkpoint stays at '%s'", tmp, dir, strerror(e), old);
        return DMUON_FAIL(DMUON_EIO, "checkpoint: cannot rename '%s' to '%s': %s", tmp, dir,
                          strerror(e));
    }
    tmp[0] = '\0';   /* now DIR: nothing to clean up */
    parent_of(dir, parent);
    dmuon_rc rc = fsync_dir(parent);
    if (old[0])
        remove_dir(old);
    return rc;
}

/* Checks meta (sharding, hyperparameter names). */
static dmuon_rc check_meta(const dmuon_ckpt_meta *m)
{
    if (!m)
        return DMUON_FAIL(DMUON_EINVAL, "checkpoint: no meta given");
    if (!m->sharding || (strcmp(m->sharding, "fsdp") && strcmp(m->sharding, "hsdp")))
        return DMUON_FAIL(DMUON_EINVAL, "checkpoint: meta sharding '%s': expected 'fsdp' or "
                                        "'hsdp'", m->sharding ? m->sharding : "(null)");
    if (m->n_hparams < 0 || m->n_hparams > DMUON_CKPT_MAX_HPARAMS)
        return DMUON_FAIL(DMUON_EINVAL, "checkpoint: %d hyperparameters: expected 0 to %d",
                          m->n_hparams, DMUON_CKPT_MAX_HPARAMS);
    for (int i = 0; i < m->n_hparams; i++) {
        const char *nm = m->hparam_names[i];
        if (!nm || !*nm || strlen(nm) >= CKPT_NAME_MAX)
            return DMUON_FAIL(DMUON_EINVAL, "checkpoint: hyperparameter %d: expected a name of 1 "
                                            "to %d bytes", i, CKPT_NAME_MAX - 1);
        for (int j = 0; j < i; j++)
            if (!strcmp(m->hparam_names[j], nm))
                return DMUON_FAIL(DMUON_EINVAL, "checkpoint: hyperparameter '%s' is given twice",
                                  nm);
    }
    return DMUON_OK;
}

dmuon_rc dmuon_ckpt_save(MPI_Comm comm, const char *dir, const dmuon_ckpt_meta *meta,
                         const dmuon_ckpt_param *params, size_t np,
                         const dmuon_ckpt_piece *pieces, size_t n)
{
    dmuon_rc rc = DMUON_OK;
    int rank, world;
    ptable t = {0};
    rec *mine = NULL, *all = NULL;
    file_info info = {0}, *infos = NULL;
    int *counts = NULL, *displs = NULL;
    size_t nmine = 0;
    char d[CKPT_PATH_MAX], tmp[CKPT_PATH_MAX] = "";
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &world);

    /* 1. arguments and this rank's pieces */
    rc = clean_dir(dir, d);
    if (rc == DMUON_OK)
        rc = check_meta(meta);
    if (rc == DMUON_OK)
        rc = ptable_init(&t, params, np);
    if (rc == DMUON_OK && !(mine = malloc((n ? n : 1) * sizeof *mine)))
        rc = DMUON_FAIL(DMUON_ENOMEM, "checkpoint: out of memory for %zu pieces", n);
    if (rc == DMUON_OK)
        rc = check_pieces(&t, pieces, n, rank, -1, mine, &nmine);
    if (rc == DMUON_OK)
        rc = dedupe(&t, mine, &nmine, "checkpoint");
    DMUON_TRY_GOTO(rc, agree(comm, rc), out);

    /* 2. the temporary directory */
    if (rank == 0)
        rc = make_tmpdir(d, tmp);
    DMUON_TRY_GOTO(rc, agree(comm, rc), out);
    DMUON_TRY_GOTO(rc, bcast_path(comm, tmp), out);

    /* 3. this rank's file */
    if (nmine > 0)
        rc = write_rank_file(tmp, rank, &t, pieces, mine, nmine, &info);
    DMUON_TRY_GOTO(rc, agree(comm, rc), out);

    /* 4. piece lists and file digests to rank 0 */
    int cnt = (int)nmine * REC_WORDS;
    if ((size_t)cnt != nmine * (size_t)REC_WORDS)
        rc = DMUON_FAIL(DMUON_EINVAL, "checkpoint: too many pieces on one rank (%zu)", nmine);
    if (rank == 0 && rc == DMUON_OK) {
        counts = calloc((size_t)world, sizeof *counts);
        displs = calloc((size_t)world, sizeof *displs);
        infos = calloc((size_t)world, sizeof *infos);
        if (!counts || !displs || !infos)
            rc = DMUON_FAIL(DMUON_ENOMEM, "checkpoint: out of memory gathering the pieces");
    }
    DMUON_TRY_GOTO(rc, agree(comm, rc), out);
    if (MPI_Gather(&cnt, 1, MPI_INT, counts, 1, MPI_INT, 0, comm) != MPI_SUCCESS ||
        MPI_Gather(&info, 3, MPI_UINT64_T, infos, 3, MPI_UINT64_T, 0, comm) != MPI_SUCCESS) {
        rc = DMUON_FAIL(DMUON_ECOMM, "checkpoint: MPI_Gather failed");
        goto out;
    }
    size_t total = 0;
    if (rank == 0) {
        long long sum = 0;
        for (int r = 0; r < world; r++) {
            displs[r] = (int)sum;
            sum += counts[r];
        }
        if (sum > INT_MAX)
            rc = DMUON_FAIL(DMUON_EINVAL, "checkpoint: too many pieces in all (%lld)",
                            sum / REC_WORDS);
        else if (!(all = malloc(((size_t)sum ? (size_t)sum : 1) * sizeof(int64_t))))
            rc = DMUON_FAIL(DMUON_ENOMEM, "checkpoint: out of memory gathering the pieces");
        total = (size_t)sum / REC_WORDS;
    }
    DMUON_TRY_GOTO(rc, agree(comm, rc), out);
    if (MPI_Gatherv(mine, cnt, MPI_INT64_T, all, counts, displs, MPI_INT64_T, 0, comm) !=
        MPI_SUCCESS) {
        rc = DMUON_FAIL(DMUON_ECOMM, "checkpoint: MPI_Gatherv failed");
        goto out;
    }

    /* 5. rank 0: one copy per range, manifest, rename */
    if (rank == 0) {
        rc = dedupe(&t, all, &total, "checkpoint");
        if (rc == DMUON_OK) {
            manifest_ctx c = {.meta = meta, .t = &t, .world = world, .files = infos, .r = all,
                              .nr = total};
            rc = finish_save(d, tmp, &c);
        }
    }
    rc = agree(comm, rc);
out:
    if (rc != DMUON_OK && rank == 0 && tmp[0])
        remove_dir(tmp);
    ptable_release(&t);
    free(mine);
    free(all);
    free(infos);
    free(counts);
    free(displs);
    return rc;
}

/* --------------------------------------------------------------- load -- */

typedef struct {
    const char *name;      /* into the document */
    int64_t size;
    uint64_t digest;
} mf_file;

/* A parsed manifest.  Pieces: param indexes the caller's table, idx the
 * file (into files, sorted by name); sorted by (param, kind, lo). */
typedef struct {
    dmuon_doc doc;
    const char *path;      /* DIR/manifest.json, for messages */
    int64_t step, world;
    uint64_t model_digest, plan_digest;
    const char *sharding;
    int nh;
    const char *hnames[DMUON_CKPT_MAX_HPARAMS];
    double hvals[DMUON_CKPT_MAX_HPARAMS];
    mf_file *files;
    size_t nfiles;
    rec *r;
    size_t nr;
} manifest;

static void manifest_release(manifest *m)
{
    dmuon_doc_release(&m->doc);
    free(m->files);
    free(m->r);
    memset(m, 0, sizeof *m);
}

/* A required field of map; absence is a malformed manifest (DMUON_EPARSE). */
static dmuon_rc mf_get(manifest *m, yaml_node_t *map, const char *key, yaml_node_t **out)
{
    *out = dmuon_doc_get(&m->doc, map, key);
    if (!*out)
        return DMUON_FAIL(DMUON_EPARSE, "%s:%d: missing required field '%s'", m->path,
                          dmuon_doc_line(map), key);
    return DMUON_OK;
}

static dmuon_rc mf_int(manifest *m, yaml_node_t *map, const char *key, int64_t *out)
{
    yaml_node_t *v;
    DMUON_TRY(mf_get(m, map, key, &v));
    return dmuon_doc_to_int(&m->doc, v, key, out);
}

static dmuon_rc mf_str(manifest *m, yaml_node_t *map, const char *key, const char **out)
{
    yaml_node_t *v;
    DMUON_TRY(mf_get(m, map, key, &v));
    *out = dmuon_doc_str(v);
    if (!*out || !**out)
        return DMUON_FAIL(DMUON_EPARSE, "%s:%d: field '%s': expected a non-empty string",
                          m->path, dmuon_doc_line(v), key);
    return DMUON_OK;
}

static dmuon_rc mf_hex(manifest *m, yaml_node_t *map, const char *key, uint64_t *out)
{
    const char *s;
    DMUON_TRY(mf_str(m, map, key, &s));
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 16);
    if (strlen(s) != 16 || errno || *end)
        return DMUON_FAIL(DMUON_EPARSE, "%s:%d: field '%s': expected 16 hex digits, got '%.40s'",
                          m->path, dmuon_doc_line(dmuon_doc_get(&m->doc, map, key)), key, s);
    *out = v;
    return DMUON_OK;
}

static dmuon_rc mf_seq(manifest *m, yaml_node_t *map, const char *key, yaml_node_t **out)
{
    DMUON_TRY(mf_get(m, map, key, out));
    if ((*out)->type != YAML_SEQUENCE_NODE)
        return DMUON_FAIL(DMUON_EPARSE, "%s:%d: field '%s': expected a list", m->path,
                          dmuon_doc_line(*out), key);
    return DMUON_OK;
}

static int cmp_file(const void *a, const void *b)
{
    return strcmp(((const mf_file *)a)->name, ((const mf_file *)b)->name);
}

/* The parameter table of the manifest against the caller's. */
static dmuon_rc match_params(manifest *m, yaml_node_t *root, const ptable *t)
{
    dmuon_rc rc = DMUON_OK;
    yaml_node_t *ps;
    DMUON_TRY(mf_seq(m, root, "params", &ps));
    bool *seen = calloc(t->np ? t->np : 1, 1);
    if (!seen)
        return DMUON_FAIL(DMUON_ENOMEM, "checkpoint: out of memory");
    for (size_t i = 0; i < dmuon_doc_seq_len(ps); i++) {
        yaml_node_t *p = dmuon_doc_seq_at(&m->doc, ps, i), *sh;
        const char *name;
        DMUON_TRY_GOTO(rc, mf_str(m, p, "name", &name), out);
        DMUON_TRY_GOTO(rc, mf_seq(m, p, "shape", &sh), out);
        long k = ptable_find(t, name);
        if (k < 0) {
            rc = DMUON_FAIL(DMUON_EMISMATCH, "%s: parameter '%s' of the checkpoint is not in the "
                                             "model's parameter table", m->path, name);
            goto out;
        }
        if (seen[k]) {
            rc = DMUON_FAIL(DMUON_EPARSE, "%s:%d: parameter '%s' is listed twice", m->path,
                            dmuon_doc_line(p), name);
            goto out;
        }
        seen[k] = true;
        const dmuon_ckpt_param *q = &t->p[k];
        size_t nd = dmuon_doc_seq_len(sh);
        bool same = nd == (size_t)q->ndim;
        char got[160] = "", want[160] = "";
        size_t gl = 0, wl = 0;
        for (size_t dd = 0; dd < nd; dd++) {
            int64_t v;
            DMUON_TRY_GOTO(rc, dmuon_doc_to_int(&m->doc, dmuon_doc_seq_at(&m->doc, sh, dd),
                                                "shape", &v), out);
            if (same && v != q->shape[dd])
                same = false;
            if (gl < sizeof got - 24)
                gl += (size_t)snprintf(got + gl, sizeof got - gl, "%s%lld", dd ? ", " : "",
                                       (long long)v);
        }
        if (!same) {
            for (int dd = 0; dd < q->ndim && wl < sizeof want - 24; dd++)
                wl += (size_t)snprintf(want + wl, sizeof want - wl, "%s%lld", dd ? ", " : "",
                                       (long long)q->shape[dd]);
            rc = DMUON_FAIL(DMUON_EMISMATCH, "%s: parameter '%s': the checkpoint has shape [%s], "
                                             "the model [%s]", m->path, name, got, want);
            goto out;
        }
    }
    for (size_t i = 0; i < t->np; i++)
        if (!seen[i]) {
            rc = DMUON_FAIL(DMUON_EMISMATCH, "%s: parameter '%s' of the model is not in the "
                                             "checkpoint", m->path, t->p[i].name);
            goto out;
        }
out:
    free(seen);
    return rc;
}

/* Parses and checks the manifest text (see the file comment). */
static dmuon_rc parse_manifest(manifest *m, const char *path, const char *buf, size_t len,
                               const ptable *t, const dmuon_ckpt_meta *expect)
{
    memset(m, 0, sizeof *m);
    m->path = path;
    DMUON_TRY(dmuon_doc_load_buffer(&m->doc, path, buf, len));
    yaml_node_t *root = dmuon_doc_root(&m->doc), *v;
    if (!root || root->type != YAML_MAPPING_NODE)
        return DMUON_FAIL(DMUON_EPARSE, "%s: expected a JSON object", path);
    const char *fmt;
    DMUON_TRY(mf_str(m, root, "format", &fmt));
    if (strcmp(fmt, CKPT_FORMAT))
        return DMUON_FAIL(DMUON_EPARSE, "%s: field 'format': '%s' is not '" CKPT_FORMAT "': not "
                                        "a dmuon checkpoint manifest", path, fmt);
    int64_t version;
    DMUON_TRY(mf_int(m, root, "version", &version));
    if (version != DMUON_CKPT_VERSION)
        return DMUON_FAIL(DMUON_EVERSION, "%s: checkpoint format version %lld, this build reads "
                                          "version %d: load it with the dmuon that saved it, or "
                                          "save it again", path, (long long)version,
                          DMUON_CKPT_VERSION);
    DMUON_TRY(mf_hex(m, root, "model_digest", &m->model_digest));
    if (expect && expect->model_digest != m->model_digest) {
        char a[17], b[17];
        dmuon_digest_hex(m->model_digest, a);
        dmuon_digest_hex(expect->model_digest, b);
        return DMUON_FAIL(DMUON_EMISMATCH, "%s: saved for model digest %s, but this model's "
                                           "digest is %s: a checkpoint of another model", path, a,
                          b);
    }
    DMUON_TRY(mf_hex(m, root, "plan_digest", &m->plan_digest));
    DMUON_TRY(mf_int(m, root, "step", &m->step));
    DMUON_TRY(mf_int(m, root, "world_size", &m->world));
    DMUON_TRY(mf_str(m, root, "sharding", &m->sharding));
    if (strcmp(m->sharding, "fsdp") && strcmp(m->sharding, "hsdp"))
        return DMUON_FAIL(DMUON_EPARSE, "%s: field 'sharding': '%s': expected 'fsdp' or 'hsdp'",
                          path, m->sharding);
    DMUON_TRY(mf_get(m, root, "hparams", &v));
    size_t nh = dmuon_doc_map_len(v);
    if (v->type != YAML_MAPPING_NODE || nh > DMUON_CKPT_MAX_HPARAMS)
        return DMUON_FAIL(DMUON_EPARSE, "%s:%d: field 'hparams': expected an object of at most "
                                        "%d name: \"value\" pairs", path, dmuon_doc_line(v),
                          DMUON_CKPT_MAX_HPARAMS);
    for (size_t i = 0; i < nh; i++) {
        const char *k = dmuon_doc_map_key(&m->doc, v, i);
        const char *s = dmuon_doc_str(dmuon_doc_map_value(&m->doc, v, i));
        char *end = NULL;
        double x = s ? strtod(s, &end) : 0;
        if (!k || !*k || strlen(k) >= CKPT_NAME_MAX || !s || !*s || *end)
            return DMUON_FAIL(DMUON_EPARSE, "%s:%d: field 'hparams': entry %zu: expected a name "
                                            "of at most %d bytes and a number", path,
                              dmuon_doc_line(dmuon_doc_map_value(&m->doc, v, i)), i + 1,
                              CKPT_NAME_MAX - 1);
        m->hnames[i] = k;
        m->hvals[i] = x;
    }
    m->nh = (int)nh;
    DMUON_TRY(match_params(m, root, t));

    /* files */
    yaml_node_t *fs, *ps;
    DMUON_TRY(mf_seq(m, root, "files", &fs));
    m->nfiles = dmuon_doc_seq_len(fs);
    m->files = calloc(m->nfiles ? m->nfiles : 1, sizeof *m->files);
    if (!m->files)
        return DMUON_FAIL(DMUON_ENOMEM, "checkpoint: out of memory");
    for (size_t i = 0; i < m->nfiles; i++) {
        yaml_node_t *f = dmuon_doc_seq_at(&m->doc, fs, i);
        mf_file *e = &m->files[i];
        DMUON_TRY(mf_str(m, f, "name", &e->name));
        DMUON_TRY(mf_int(m, f, "size", &e->size));
        DMUON_TRY(mf_hex(m, f, "digest", &e->digest));
        if (strchr(e->name, '/') || e->name[0] == '.' || e->size < 8)
            return DMUON_FAIL(DMUON_EPARSE, "%s:%d: file '%s' of %lld bytes: expected a file name "
                                            "inside the checkpoint and at least 8 bytes", path,
                              dmuon_doc_line(f), e->name, (long long)e->size);
    }
    qsort(m->files, m->nfiles, sizeof *m->files, cmp_file);
    for (size_t i = 1; i < m->nfiles; i++)
        if (!strcmp(m->files[i].name, m->files[i - 1].name))
            return DMUON_FAIL(DMUON_EPARSE, "%s: field 'files': '%s' is listed twice", path,
                              m->files[i].name);

    /* pieces */
    DMUON_TRY(mf_seq(m, root, "pieces", &ps));
    m->nr = dmuon_doc_seq_len(ps);
    m->r = calloc(m->nr ? m->nr : 1, sizeof *m->r);
    if (!m->r)
        return DMUON_FAIL(DMUON_ENOMEM, "checkpoint: out of memory");
    for (size_t i = 0; i < m->nr; i++) {
        yaml_node_t *p = dmuon_doc_seq_at(&m->doc, ps, i);
        const char *pname, *kname, *fname;
        rec *e = &m->r[i];
        int line = dmuon_doc_line(p);
        DMUON_TRY(mf_str(m, p, "param", &pname));
        DMUON_TRY(mf_str(m, p, "kind", &kname));
        DMUON_TRY(mf_int(m, p, "lo", &e->lo));
        DMUON_TRY(mf_int(m, p, "hi", &e->hi));
        DMUON_TRY(mf_str(m, p, "file", &fname));
        DMUON_TRY(mf_int(m, p, "offset", &e->offset));
        DMUON_TRY(mf_hex(m, p, "digest", &e->digest));
        long pi = ptable_find(t, pname);
        e->kind = kind_index(kname);
        if (pi < 0 || e->kind < 0)
            return DMUON_FAIL(DMUON_EPARSE, "%s:%d: piece %zu: %s '%s' is not in the parameter "
                                            "table or the list of kinds", path, line, i,
                              pi < 0 ? "parameter" : "kind", pi < 0 ? pname : kname);
        e->param = pi;
        if (e->lo < 0 || e->hi <= e->lo || e->hi > t->numel[pi])
            return DMUON_FAIL(DMUON_EPARSE, "%s:%d: piece '%s' kind '%s': range [%lld, %lld) is "
                                            "not inside the parameter's %lld elements", path, line,
                              pname, kname, (long long)e->lo, (long long)e->hi,
                              (long long)t->numel[pi]);
        mf_file key = {.name = fname};
        mf_file *f = bsearch(&key, m->files, m->nfiles, sizeof *m->files, cmp_file);
        if (!f)
            return DMUON_FAIL(DMUON_EPARSE, "%s:%d: piece '%s' kind '%s': file '%s' is not in "
                                            "'files'", path, line, pname, kname, fname);
        e->idx = f - m->files;
        if (e->offset < 8 || e->offset > f->size || (e->hi - e->lo) > (f->size - e->offset) / 4)
            return DMUON_FAIL(DMUON_EPARSE, "%s:%d: piece '%s' kind '%s' [%lld, %lld): offset "
                                            "%lld does not hold %lld bytes inside '%s' (%lld "
                                            "bytes)", path, line, pname, kname, (long long)e->lo,
                              (long long)e->hi, (long long)e->offset,
                              (long long)(4 * (e->hi - e->lo)), fname, (long long)f->size);
        e->rank = (int64_t)i;
    }
    qsort(m->r, m->nr, sizeof *m->r, cmp_rec);
    for (size_t i = 1; i < m->nr; i++) {
        const rec *a = &m->r[i - 1], *b = &m->r[i];
        if (a->param == b->param && a->kind == b->kind && b->lo < a->hi)
            return DMUON_FAIL(DMUON_EPARSE, "%s: parameter '%s' kind '%s': saved pieces [%lld, "
                                            "%lld) and [%lld, %lld) overlap", path,
                              t->p[a->param].name, kind_names[a->kind], (long long)a->lo,
                              (long long)a->hi, (long long)b->lo, (long long)b->hi);
    }
    return DMUON_OK;
}

/* One copy from a file into the temporary buffer. */
typedef struct {
    int64_t file;
    uint64_t off, len;     /* bytes in the file */
    size_t dst;            /* byte offset into the temporary buffer */
} seg;

static int cmp_seg(const void *a, const void *b)
{
    const seg *x = a, *y = b;
    if (x->file != y->file) return x->file < y->file ? -1 : 1;
    return (x->off > y->off) - (x->off < y->off);
}

/* Cuts every requested piece into segments of saved pieces (marks used[]);
 * a gap is DMUON_ENOTFOUND.  *nseg ≤ capacity is checked by counting first. */
static dmuon_rc plan_copies(const manifest *m, const ptable *t, const char *dir, const rec *q,
                            size_t nq, const size_t *dst, bool *used, seg **segs, size_t *nseg)
{
    size_t cap = 16, ns = 0;
    seg *s = malloc(cap * sizeof *s);
    if (!s)
        return DMUON_FAIL(DMUON_ENOMEM, "checkpoint: out of memory");
    for (size_t i = 0; i < nq; i++) {
        /* first saved piece of (param, kind) with lo > q.lo, then one back */
        size_t lo = 0, hi = m->nr;
        rec key = {.param = q[i].param, .kind = q[i].kind, .lo = q[i].lo, .hi = INT64_MAX,
                   .rank = INT64_MAX};
        while (lo < hi) {
            size_t mid = (lo + hi) / 2;
            if (cmp_rec(&m->r[mid], &key) <= 0)
                lo = mid + 1;
            else
                hi = mid;
        }
        size_t j = lo;
        if (j > 0 && m->r[j - 1].param == q[i].param && m->r[j - 1].kind == q[i].kind)
            j--;
        int64_t cur = q[i].lo;
        for (; j < m->nr && cur < q[i].hi; j++) {
            const rec *r = &m->r[j];
            if (r->param != q[i].param || r->kind != q[i].kind)
                break;
            if (r->hi <= cur)
                continue;
            if (r->lo > cur)
                break;
            int64_t a = cur, b = r->hi < q[i].hi ? r->hi : q[i].hi;
            if (ns == cap) {
                seg *ns2 = realloc(s, 2 * cap * sizeof *s);
                if (!ns2) {
                    free(s);
                    return DMUON_FAIL(DMUON_ENOMEM, "checkpoint: out of memory");
                }
                s = ns2;
                cap *= 2;
            }
            s[ns++] = (seg){.file = r->idx, .off = (uint64_t)(r->offset + 4 * (a - r->lo)),
                            .len = 4 * (uint64_t)(b - a), .dst = dst[i] + 4 * (size_t)(a - q[i].lo)};
            used[j] = true;
            cur = b;
        }
        if (cur < q[i].hi) {
            int64_t gap_end = q[i].hi;
            if (j < m->nr && m->r[j].param == q[i].param && m->r[j].kind == q[i].kind &&
                m->r[j].lo < gap_end)
                gap_end = m->r[j].lo;
            free(s);
            return DMUON_FAIL(DMUON_ENOTFOUND, "checkpoint '%s': no saved piece covers parameter "
                                               "'%s' kind '%s' elements [%lld, %lld) (this rank "
                                               "loads [%lld, %lld))", dir, t->p[q[i].param].name,
                              kind_names[q[i].kind], (long long)cur, (long long)gap_end,
                              (long long)q[i].lo, (long long)q[i].hi);
        }
    }
    qsort(s, ns, sizeof *s, cmp_seg);
    *segs = s;
    *nseg = ns;
    return DMUON_OK;
}

static int cmp_tensor_name(const void *a, const void *b)
{
    return strcmp((*(const dmuon_st_tensor *const *)a)->name,
                  (*(const dmuon_st_tensor *const *)b)->name);
}

static int cmp_rec_ptr_file(const void *a, const void *b)
{
    const rec *x = *(const rec *const *)a, *y = *(const rec *const *)b;
    if (x->idx != y->idx) return x->idx < y->idx ? -1 : 1;
    return (x->offset > y->offset) - (x->offset < y->offset);
}

/* Checks file fi (size, header, the tensors of all the saved pieces it holds,
 * ur[0..nu) sorted by offset, used or not, so that every rank reading a
 * damaged file names the same tensor) and streams it: file digest, piece
 * digests, copies of the segments s[0..ns) into buf. */
static dmuon_rc read_file(const char *dir, const manifest *m, const ptable *t, int64_t fi,
                          const rec **ur, size_t nu, const seg *s, size_t ns, char *buf,
                          char *chunk)
{
    dmuon_rc rc = DMUON_OK;
    const mf_file *mf = &m->files[fi];
    char path[CKPT_PATH_MAX], name[1024];
    dmuon_st_header h = {0};
    const dmuon_st_tensor **byname = NULL;
    uint64_t *dg = NULL;
    fmt_path(path, "%s/%s", dir, mf->name);
    FILE *f = fopen(path, "rb");
    if (!f)
        return DMUON_FAIL(DMUON_ECHECK, "cannot open checkpoint file '%s' (listed in the "
                                        "manifest): %s", path, strerror(errno));
    int fd = fileno(f);
    struct stat st;
    if (fstat(fd, &st) != 0) {
        rc = DMUON_FAIL(DMUON_EIO, "cannot stat '%s': %s", path, strerror(errno));
        goto out;
    }
    if ((int64_t)st.st_size != mf->size) {
        const rec *lost = NULL;   /* the first piece of this file the cut removes */
        for (size_t i = 0; i < nu && !lost; i++)
            if (ur[i]->offset + 4 * (ur[i]->hi - ur[i]->lo) > (int64_t)st.st_size)
                lost = ur[i];
        if (lost) {
            piece_tensor_name(name, sizeof name, t->p[lost->param].name, kind_names[lost->kind],
                              lost->lo, lost->hi);
            rc = DMUON_FAIL(DMUON_ECHECK, "checkpoint file '%s' is %lld bytes, the manifest "
                                          "records %lld: truncated (tensor '%s' is cut off)",
                            path, (long long)st.st_size, (long long)mf->size, name);
        } else {
            rc = DMUON_FAIL(DMUON_ECHECK, "checkpoint file '%s' is %lld bytes, the manifest "
                                          "records %lld: truncated or replaced", path,
                            (long long)st.st_size, (long long)mf->size);
        }
        goto out;
    }
    DMUON_TRY_GOTO(rc, dmuon_st_header_read(f, path, 0, &h), out);
    byname = malloc((h.n ? h.n : 1) * sizeof *byname);
    dg = malloc((nu ? nu : 1) * sizeof *dg);
    if (!byname || !dg) {
        rc = DMUON_FAIL(DMUON_ENOMEM, "checkpoint: out of memory reading '%s'", path);
        goto out;
    }
    for (size_t i = 0; i < h.n; i++)
        byname[i] = &h.t[i];
    qsort(byname, h.n, sizeof *byname, cmp_tensor_name);
    for (size_t i = 0; i < nu; i++) {
        const rec *r = ur[i];
        piece_tensor_name(name, sizeof name, t->p[r->param].name, kind_names[r->kind], r->lo,
                          r->hi);
        dmuon_st_tensor key = {.name = name}, *kp = &key;
        const dmuon_st_tensor **hit = bsearch(&kp, byname, h.n, sizeof *byname, cmp_tensor_name);
        if (!hit) {
            rc = DMUON_FAIL(DMUON_ECHECK, "%s: tensor '%s' (listed in the manifest) is not in the "
                                          "file's header", path, name);
            goto out;
        }
        const dmuon_st_tensor *x = *hit;
        if (x->dtype != DMUON_F32 || x->ndim != 1 || x->shape[0] != r->hi - r->lo ||
            h.data_start + x->begin != (uint64_t)r->offset) {
            rc = DMUON_FAIL(DMUON_ECHECK, "%s: tensor '%s': the header says %s [%lld] at byte "
                                          "%llu, the manifest F32 [%lld] at byte %lld", path, name,
                            dmuon_st_dtype_name(x->dtype), (long long)(x->ndim ? x->shape[0] : 0),
                            (unsigned long long)(h.data_start + x->begin),
                            (long long)(r->hi - r->lo), (long long)r->offset);
            goto out;
        }
        dg[i] = DMUON_DIGEST_SEED;
    }
    /* stream: digests and copies */
    uint64_t fdg = DMUON_DIGEST_SEED, pos = 0;
    size_t u0 = 0, s0 = 0;
    for (;;) {
        size_t got;
        if (!read_all(fd, chunk, CKPT_CHUNK, &got)) {
            rc = DMUON_FAIL(DMUON_EIO, "cannot read '%s': %s", path, strerror(errno));
            goto out;
        }
        if (got == 0)
            break;
        uint64_t end = pos + got, at = pos;   /* chunk bytes before at are digested */
        while (u0 < nu && (uint64_t)(ur[u0]->offset + 4 * (ur[u0]->hi - ur[u0]->lo)) <= pos)
            u0++;
        for (size_t i = u0; i < nu && (uint64_t)ur[i]->offset < end; i++) {
            uint64_t a = (uint64_t)ur[i]->offset, b = a + 4 * (uint64_t)(ur[i]->hi - ur[i]->lo);
            a = a > at ? a : at;
            b = b < end ? b : end;
            fdg = dmuon_digest(chunk + (at - pos), a - at, fdg);
            digest2(chunk + (a - pos), b - a, &fdg, &dg[i]);
            at = b;
        }
        fdg = dmuon_digest(chunk + (at - pos), end - at, fdg);
        while (s0 < ns && s[s0].off + s[s0].len <= pos)
            s0++;
        for (size_t i = s0; i < ns && s[i].off < end; i++) {
            uint64_t a = s[i].off, b = a + s[i].len;
            if (b <= pos)
                continue;
            a = a > pos ? a : pos;
            b = b < end ? b : end;
            memcpy(buf + s[i].dst + (a - s[i].off), chunk + (a - pos), b - a);
        }
        pos = end;
    }
    if (pos != (uint64_t)mf->size) {
        rc = DMUON_FAIL(DMUON_ECHECK, "checkpoint file '%s' changed while being read (%llu "
                                      "bytes read, %lld expected)", path,
                        (unsigned long long)pos, (long long)mf->size);
        goto out;
    }
    for (size_t i = 0; i < nu; i++)
        if (dg[i] != ur[i]->digest) {
            char a[17], b[17];
            piece_tensor_name(name, sizeof name, t->p[ur[i]->param].name, kind_names[ur[i]->kind],
                              ur[i]->lo, ur[i]->hi);
            dmuon_digest_hex(dg[i], a);
            dmuon_digest_hex(ur[i]->digest, b);
            rc = DMUON_FAIL(DMUON_ECHECK, "%s: tensor '%s': digest %s, the manifest records %s: "
                                          "the file is corrupt", path, name, a, b);
            goto out;
        }
    if (fdg != mf->digest) {
        char a[17], b[17];
        dmuon_digest_hex(fdg, a);
        dmuon_digest_hex(mf->digest, b);
        rc = DMUON_FAIL(DMUON_ECHECK, "%s: file digest %s, the manifest records %s: the file is "
                                      "corrupt outside its tensors' data (in the header or padding)",
                        path, a, b);
        goto out;
    }
out:
    free(dg);
    free(byname);
    dmuon_st_header_release(&h);
    fclose(f);
    return rc;
}

/* Storage for the strings of meta_out (see dmuon_ckpt_load). */
static _Thread_local struct {
    char sharding[8];
    char names[DMUON_CKPT_MAX_HPARAMS][CKPT_NAME_MAX];
} meta_store;

/* Rank 0 reads the manifest; every rank gets its bytes (*buf malloc'ed). */
static dmuon_rc bcast_manifest(MPI_Comm comm, int rank, const char *path, char **buf,
                               size_t *len)
{
    dmuon_rc rc = DMUON_OK;
    uint64_t n = 0;
    *buf = NULL;
    if (rank == 0) {
        if (access(path, F_OK) != 0 && errno == ENOENT)
            rc = DMUON_FAIL(DMUON_ENOTFOUND, "no checkpoint: '%s' does not exist (an interrupted "
                                             "save leaves none)", path);
        else
            rc = dmuon_read_file(path, 1u << 30, buf, len);
        n = *len;
    }
    DMUON_TRY(agree(comm, rc));
    if (MPI_Bcast(&n, 1, MPI_UINT64_T, 0, comm) != MPI_SUCCESS)
        return DMUON_FAIL(DMUON_ECOMM, "checkpoint: MPI_Bcast failed");
    if (rank != 0) {
        *len = (size_t)n;
        if (!(*buf = malloc((size_t)n + 1)))
            rc = DMUON_FAIL(DMUON_ENOMEM, "checkpoint: out of memory for the manifest");
    }
    rc = agree(comm, rc);
    if (rc == DMUON_OK && MPI_Bcast(*buf, (int)n, MPI_CHAR, 0, comm) != MPI_SUCCESS)
        rc = DMUON_FAIL(DMUON_ECOMM, "checkpoint: MPI_Bcast of the manifest failed");
    if (rc != DMUON_OK) {
        free(*buf);
        *buf = NULL;
        return rc;
    }
    (*buf)[n] = '\0';
    return DMUON_OK;
}

dmuon_rc dmuon_ckpt_load(MPI_Comm comm, const char *dir, const dmuon_ckpt_meta *expect,
                         const dmuon_ckpt_param *params, size_t np,
                         dmuon_ckpt_piece *pieces, size_t n, dmuon_ckpt_meta *meta_out)
{
    dmuon_rc rc = DMUON_OK;
    int rank;
    ptable t = {0};
    manifest m = {0};
    rec *q = NULL;
    size_t nq = 0, *dst = NULL, nseg = 0, total = 0;
    bool *used = NULL;
    seg *segs = NULL;
    const rec **ur = NULL;
    char *buf = NULL, *chunk = NULL, *text = NULL;
    char d[CKPT_PATH_MAX], mpath[CKPT_PATH_MAX];
    size_t tlen = 0;
    MPI_Comm_rank(comm, &rank);

    /* 1. arguments and requested pieces */
    rc = clean_dir(dir, d);
    if (rc == DMUON_OK)
        rc = ptable_init(&t, params, np);
    if (rc == DMUON_OK && (!(q = malloc((n ? n : 1) * sizeof *q)) ||
                           !(dst = malloc((n ? n : 1) * sizeof *dst))))
        rc = DMUON_FAIL(DMUON_ENOMEM, "checkpoint: out of memory for %zu pieces", n);
    if (rc == DMUON_OK)
        rc = check_pieces(&t, pieces, n, rank, -1, q, &nq);
    DMUON_TRY_GOTO(rc, agree(comm, rc), out);
    fmt_path(mpath, "%s/" CKPT_MANIFEST, d);

    /* 2. the manifest */
    DMUON_TRY_GOTO(rc, bcast_manifest(comm, rank, mpath, &text, &tlen), out);
    rc = parse_manifest(&m, mpath, text, tlen, &t, expect);

    /* 3. what to copy from where */
    if (rc == DMUON_OK) {
        for (size_t i = 0; i < nq; i++) {
            dst[i] = total;
            total += 4 * (size_t)(q[i].hi - q[i].lo);
        }
        if (!(used = calloc(m.nr ? m.nr : 1, sizeof *used)) ||
            !(ur = malloc((m.nr ? m.nr : 1) * sizeof *ur)) || !(buf = malloc(total ? total : 1)) ||
            !(chunk = malloc(CKPT_CHUNK)))
            rc = DMUON_FAIL(DMUON_ENOMEM, "checkpoint: out of memory for %zu bytes of pieces",
                            total);
    }
    if (rc == DMUON_OK)
        rc = plan_copies(&m, &t, d, q, nq, dst, used, &segs, &nseg);

    /* 4. every file needed: check and stream (ur: saved pieces by file) */
    if (rc == DMUON_OK) {
        for (size_t j = 0; j < m.nr; j++)
            ur[j] = &m.r[j];
        qsort(ur, m.nr, sizeof *ur, cmp_rec_ptr_file);
    }
    for (size_t j0 = 0, j1, s0 = 0, s1; rc == DMUON_OK && j0 < m.nr; j0 = j1) {
        int64_t fi = ur[j0]->idx;
        bool needed = false;
        for (j1 = j0; j1 < m.nr && ur[j1]->idx == fi; j1++)
            needed |= used[ur[j1] - m.r];
        while (s0 < nseg && segs[s0].file < fi)
            s0++;
        for (s1 = s0; s1 < nseg && segs[s1].file == fi; s1++)
            ;
        if (needed)
            rc = read_file(d, &m, &t, fi, ur + j0, j1 - j0, segs + s0, s1 - s0, buf, chunk);
    }
    DMUON_TRY_GOTO(rc, agree(comm, rc), out);

    /* 5. every rank succeeded: the destinations */
    for (size_t i = 0; i < nq; i++)
        memcpy(pieces[q[i].idx].data, buf + dst[i], 4 * (size_t)(q[i].hi - q[i].lo));
    if (meta_out) {
        memset(meta_out, 0, sizeof *meta_out);
        meta_out->step = m.step;
        meta_out->model_digest = m.model_digest;
        meta_out->plan_digest = m.plan_digest;
        meta_out->world_size = (int)m.world;
        snprintf(meta_store.sharding, sizeof meta_store.sharding, "%s", m.sharding);
        meta_out->sharding = meta_store.sharding;
        meta_out->n_hparams = m.nh;
        for (int i = 0; i < m.nh; i++) {
            snprintf(meta_store.names[i], CKPT_NAME_MAX, "%s", m.hnames[i]);
            meta_out->hparam_names[i] = meta_store.names[i];
            meta_out->hparam_values[i] = m.hvals[i];
        }
    }
out:
    manifest_release(&m);
    ptable_release(&t);
    free(q);
    free(dst);
    free(used);
    free(segs);
    free(ur);
    free(buf);
    free(chunk);
    free(text);
    return rc;
}

/* ------------------------------------------------------------- export -- */

/* Rounds f to the nearest binary16 (ties to even); NaN stays a quiet NaN,
 * overflow goes to infinity.  Source: IEEE 754-2008 binary16 layout (1 sign,
 * 5 exponent bits biased by 15, 10 fraction bits). */
static uint16_t f32_to_f16(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    uint32_t sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    if (a > 0x7f800000u)
        return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
    if (a >= 0x477ff000u)                 /* ≥ 65520: rounds to infinity */
        return (uint16_t)(sign | 0x7c00u);
    if (a >= 0x38800000u) {               /* ≥ 2^-14: a normal binary16 */
        uint32_t r = a - (112u << 23);    /* rebias the exponent: 127 → 15 */
        r += 0xfffu + ((r >> 13) & 1u);
        return (uint16_t)(sign | (r >> 13));
    }
    if (a < 0x33000000u)                  /* ≤ 2^-25 (ties to even): zero */
        return (uint16_t)sign;
    uint32_t e = a >> 23, m = (a & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126u - e;            /* 14 .. 24: m·2^(e-150) in units of 2^-24 */
    uint32_t r = (m + (1u << (shift - 1)) - 1u + ((m >> shift) & 1u)) >> shift;
    return (uint16_t)(sign | r);
}

/* Writes the master range [lo, hi) of p (data as given) at byte off of fd,
 * converted to dt through chunk (CKPT_CHUNK bytes). */
static bool write_converted(int fd, const float *data, int64_t count, dmuon_dtype dt,
                            uint64_t off, char *chunk)
{
    if (dt == DMUON_F32)
        return pwrite_all(fd, data, 4 * (size_t)count, off);
    size_t per = CKPT_CHUNK / 2;
    uint16_t *h = (uint16_t *)(void *)chunk;
    for (int64_t i = 0; i < count; i += (int64_t)per) {
        size_t k = (size_t)(count - i) < per ? (size_t)(count - i) : per;
        if (dt == DMUON_BF16)
            dmuon_bf16_from_f32(h, data + i, k);
        else
            for (size_t j = 0; j < k; j++)
                h[j] = f32_to_f16(data[i + (int64_t)j]);
        if (!pwrite_all(fd, h, 2 * k, off + 2 * (uint64_t)i))
            return false;
    }
    return true;
}

dmuon_rc dmuon_ckpt_export(MPI_Comm comm, const char *path, const dmuon_ckpt_param *params,
                           size_t np, const dmuon_ckpt_piece *pieces, size_t n)
{
    dmuon_rc rc = DMUON_OK;
    int rank, world;
    ptable t = {0};
    rec *mine = NULL, *all = NULL;
    int *counts = NULL, *displs = NULL;
    uint64_t *poff = NULL;
    unsigned char *hdr = NULL;
    char *chunk = NULL;
    size_t nmine = 0, hlen = 0, total = 0;
    char tmp[CKPT_PATH_MAX] = "", parent[CKPT_PATH_MAX];
    int fd = -1;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &world);

    /* 1. arguments; this rank's master pieces */
    if (!path || !*path || strlen(path) + 32 >= CKPT_PATH_MAX)
        rc = DMUON_FAIL(DMUON_EINVAL, "export: expected an output path of 1 to %d bytes",
                        CKPT_PATH_MAX - 32);
    if (rc == DMUON_OK)
        rc = ptable_init(&t, params, np);
    for (size_t i = 0; rc == DMUON_OK && i < np; i++)
        if (params[i].dtype != DMUON_F32 && params[i].dtype != DMUON_BF16 &&
            params[i].dtype != DMUON_F16)
            rc = DMUON_FAIL(DMUON_EINVAL, "export: parameter '%s': dtype %s: expected f32, bf16 "
                                          "or f16", params[i].name, dmuon_dtype_name(params[i].dtype));
    if (rc == DMUON_OK && (!(mine = malloc((n ? n : 1) * sizeof *mine)) ||
                           !(counts = malloc((size_t)world * sizeof *counts)) ||
                           !(displs = malloc((size_t)world * sizeof *displs)) ||
                           !(poff = malloc((np ? np : 1) * sizeof *poff))))
        rc = DMUON_FAIL(DMUON_ENOMEM, "export: out of memory");
    if (rc == DMUON_OK)
        rc = check_pieces(&t, pieces, n, rank, 0, mine, &nmine);
    DMUON_TRY_GOTO(rc, agree(comm, rc), out);

    /* 2. every rank learns every master range */
    int cnt = (int)nmine * REC_WORDS;
    if (MPI_Allgather(&cnt, 1, MPI_INT, counts, 1, MPI_INT, comm) != MPI_SUCCESS) {
        rc = DMUON_FAIL(DMUON_ECOMM, "export: MPI_Allgather failed");
        goto out;
    }
    long long sum = 0;
    for (int r = 0; r < world; r++) {
        displs[r] = (int)sum;
        sum += counts[r];
    }
    if (sum > INT_MAX)
        rc = DMUON_FAIL(DMUON_EINVAL, "export: too many pieces (%lld)", sum / REC_WORDS);
    else if (!(all = malloc(((size_t)sum ? (size_t)sum : 1) * sizeof(int64_t))))
        rc = DMUON_FAIL(DMUON_ENOMEM, "export: out of memory");
    DMUON_TRY_GOTO(rc, agree(comm, rc), out);
    if (MPI_Allgatherv(mine, cnt, MPI_INT64_T, all, counts, displs, MPI_INT64_T, comm) !=
        MPI_SUCCESS) {
        rc = DMUON_FAIL(DMUON_ECOMM, "export: MPI_Allgatherv failed");
        goto out;
    }
    size_t nall = (size_t)sum / REC_WORDS;

    /* 3. coverage (same answer on every rank), layout, header */
    rc = dedupe(&t, all, &nall, "export");
    for (size_t i = 0, j = 0; rc == DMUON_OK && i < np; i++) {
        int64_t cur = 0, gap_end = t.numel[i];
        for (; j < nall && all[j].param == (int64_t)i; j++) {
            if (all[j].lo > cur) {
                gap_end = all[j].lo;
                break;
            }
            cur = all[j].hi;
        }
        while (j < nall && all[j].param == (int64_t)i)
            j++;
        if (cur < t.numel[i])
            rc = DMUON_FAIL(DMUON_EINVAL, "export: parameter '%s': elements [%lld, %lld) (of %lld) "
                                          "are in no rank's master piece", params[i].name,
                            (long long)cur, (long long)gap_end, (long long)t.numel[i]);
    }
    if (rc == DMUON_OK) {
        const char *meta[] = {"format", "pt", "producer", "dmuon"};
        hdr_buf h;
        rc = hdr_begin(&h, meta, 2);
        for (size_t i = 0; rc == DMUON_OK && i < np; i++) {
            uint64_t bytes = (uint64_t)t.numel[i] * dmuon_dtype_size(params[i].dtype);
            poff[i] = total;
            hdr_tensor(&h, params[i].name, params[i].dtype, params[i].ndim, params[i].shape,
                       total, total + bytes);
            total += bytes;
        }
        if (rc == DMUON_OK)
            rc = hdr_end(&h, &hdr, &hlen);
    }
    if (rc == DMUON_OK && !(chunk = malloc(CKPT_CHUNK)))
        rc = DMUON_FAIL(DMUON_ENOMEM, "export: out of memory");
    DMUON_TRY_GOTO(rc, agree(comm, rc), out);

    /* 4. rank 0 creates the file: header, full size */
    if (rank == 0) {
        struct stat st;
        if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
            rc = DMUON_FAIL(DMUON_EINVAL, "export: '%s' exists and is not a regular file", path);
        } else {
            fmt_path(tmp, "%s.tmp.XXXXXX", path);
            fd = mkstemp(tmp);
            if (fd < 0) {
                rc = DMUON_FAIL(DMUON_EIO, "export: cannot create '%s': %s", tmp, strerror(errno));
                tmp[0] = '\0';
            } else if (fchmod(fd, 0644) != 0 || !write_all(fd, hdr, hlen) ||
                       ftruncate(fd, (off_t)(hlen + total)) != 0) {
                rc = DMUON_FAIL(DMUON_EIO, "export: cannot write '%s': %s", tmp, strerror(errno));
            }
        }
    }
    DMUON_TRY_GOTO(rc, agree(comm, rc), out);
    DMUON_TRY_GOTO(rc, bcast_path(comm, tmp), out);

    /* 5. every rank writes its master pieces (the first copy of replicas) */
    if (rank != 0 && nmine > 0 && (fd = open(tmp, O_WRONLY | O_CLOEXEC)) < 0)
        rc = DMUON_FAIL(DMUON_EIO, "export: cannot open '%s': %s", tmp, strerror(errno));
    for (size_t i = 0; rc == DMUON_OK && i < nall; i++) {
        const rec *r = &all[i];
        if (r->rank != rank)
            continue;
        const dmuon_ckpt_piece *p = &pieces[r->idx];
        dmuon_dtype dt = params[r->param].dtype;
        uint64_t off = hlen + poff[r->param] + (uint64_t)r->lo * dmuon_dtype_size(dt);
        if (!write_converted(fd, p->data, r->hi - r->lo, dt, off, chunk))
            rc = DMUON_FAIL(DMUON_EIO, "export: cannot write '%s' (tensor '%s'): %s", tmp,
                            p->name, strerror(errno));
    }
    if (rc == DMUON_OK && fd >= 0 && fsync(fd) != 0)
        rc = DMUON_FAIL(DMUON_EIO, "export: cannot fsync '%s': %s", tmp, strerror(errno));
    if (fd >= 0) {
        if (close(fd) != 0 && rc == DMUON_OK)
            rc = DMUON_FAIL(DMUON_EIO, "export: cannot close '%s': %s", tmp, strerror(errno));
        fd = -1;
    }
    DMUON_TRY_GOTO(rc, agree(comm, rc), out);

    /* 6. rank 0: into place */
    if (rank == 0) {
        if (rename(tmp, path) != 0) {
            rc = DMUON_FAIL(DMUON_EIO, "export: cannot rename '%s' to '%s': %s", tmp, path,
                            strerror(errno));
        } else {
            tmp[0] = '\0';
            parent_of(path, parent);
            rc = fsync_dir(parent);
        }
    }
    rc = agree(comm, rc);
out:
    if (fd >= 0)
        close(fd);
    if (rc != DMUON_OK && rank == 0 && tmp[0])
        unlink(tmp);
    ptable_release(&t);
    free(mine);
    free(all);
    free(counts);
    free(displs);
    free(poff);
    free(hdr);
    free(chunk);
    return rc;
}
