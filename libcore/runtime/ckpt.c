/*
 * ckpt.c — checkpoints of optimizer state in pieces, re-sharded on load, and
 * full-weight export (dmuon/ckpt.h; paper §6; docs/design.md "Checkpoints"): what
 * the three protocols share.  The protocols: ckpt_save.c, ckpt_load.c,
 * ckpt_export.c; file-system helpers: io.c.
 *
 * Agreement: every step that can fail on one rank ends in agree(): an
 * all-reduction finds the lowest failing rank, which broadcasts its rc and
 * message; every other rank returns that rc with the message prefixed
 * "rank R: " (a failing rank keeps its own); when none failed, a second
 * all-reduction confirms it.  Every collective here is started
 * non-blocking and completed within the deadline (ck_wait): a slow fsync,
 * a stalled or a dead rank makes the others fail with DMUON_ETIMEOUT within
 * the deadline instead of waiting, and the slow rank times out at its next
 * collective.  A save that times out leaves DIR as it was (rank 0 removes
 * DIR.tmp.X; a rank still writing there gets an I/O error or writes an
 * unlinked file); a load that times out writes nothing.
 *
 * Data is stored little-endian; these files are built for little-endian hosts
 * only (compile-time check).
 */
#include "ckpt_internal.h"
#include "dmuon/ctl.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "comm/wait.h"
#include "dmuon/collv.h"
#include "st_internal.h"

const char *const ckpt_kind_names[NKINDS] = {"master", "momentum", "exp_avg", "exp_avg_sq"};

/* --------------------------------------------------------------- helpers -- */

int ckpt_kind_index(const char *k)
{
    for (int i = 0; k && i < NKINDS; i++)
        if (!strcmp(k, ckpt_kind_names[i]))
            return i;
    return -1;
}


static int cmp_order(const void *a, const void *b, void *base)
{
    const dmuon_ckpt_param *p = base;
    return strcmp(p[*(const size_t *)a].name, p[*(const size_t *)b].name);
}

void ckpt_ptable_release(ptable *t)
{
    free(t->order);
    free(t->numel);
    memset(t, 0, sizeof *t);
}

/* Checks the table (names present and unique, 0..8 dimensions, positive
 * extents, sizes that fit int64) and indexes it.  DMUON_EINVAL, ENOMEM. */
dmuon_rc ckpt_ptable_init(ptable *t, const dmuon_ckpt_param *params, size_t np)
{
    memset(t, 0, sizeof *t);
    if (np > 0 && !params)
        return DMUON_FAIL(DMUON_EINVAL, "checkpoint: %zu parameters but no table", np);
    t->p = params;
    t->np = np;
    t->order = malloc((np ? np : 1) * sizeof *t->order);
    t->numel = malloc((np ? np : 1) * sizeof *t->numel);
    if (!t->order || !t->numel) {
        ckpt_ptable_release(t);
        return DMUON_FAIL(DMUON_ENOMEM, "out of memory for the parameter table");
    }
    for (size_t i = 0; i < np; i++) {
        const dmuon_ckpt_param *p = &params[i];
        if (!p->name || !*p->name || p->ndim < 0 || p->ndim > 8) {
            ckpt_ptable_release(t);
            return DMUON_FAIL(DMUON_EINVAL, "checkpoint: parameter %zu ('%s'): expected a name "
                                            "and 0 to 8 dimensions, got %d",
                              i, p->name ? p->name : "(null)", p->ndim);
        }
        int64_t n = 1;
        for (int d = 0; d < p->ndim; d++) {
            if (p->shape[d] <= 0 || n > INT64_MAX / 8 / p->shape[d]) {
                ckpt_ptable_release(t);
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
            ckpt_ptable_release(t);
            return DMUON_FAIL(DMUON_EINVAL, "checkpoint: parameter '%s' is listed twice", dup);
        }
    return DMUON_OK;
}

/* Index of the parameter named name, or -1. */
long ckpt_ptable_find(const ptable *t, const char *name)
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

/* Completes a collective started non-blocking (err: what starting it
 * returned) within ms: a peer that is slow (a long fsync), stalled or dead
 * makes this rank fail with DMUON_ETIMEOUT instead of waiting for it (a
 * blocking MPI call has no deadline).  MPI cannot cancel the call: after a
 * timeout the communicator is out of step, and the caller must treat it as
 * failed. */
dmuon_rc ckpt_wait(int err, MPI_Request *q, int ms, const char *what, bool *kept)
{
    if (err != MPI_SUCCESS)
        return DMUON_FAIL(DMUON_ECOMM, "checkpoint: %s failed", what);
    dmuon_waiter w;
    dmuon_waiter_start(&w, ms);
    for (;;) {
        int done = 0;
        if (MPI_Test(q, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
            *kept = true;
            return DMUON_FAIL(DMUON_ECOMM, "checkpoint: %s failed", what);
        }
        if (done)
            return DMUON_OK;
        *kept = dmuon_waiter_expired(&w);
        if (*kept)
            return DMUON_FAIL(DMUON_ETIMEOUT, "checkpoint: %s did not complete within the %d ms "
                              "deadline (a peer is slow, stalled or died)", what, ms);
        dmuon_waiter_idle(&w);
    }
}

/* Every rank learns whether any failed, within the deadline ms
 * (dmuon_agree: the lowest failing rank's rc and message on the others, and
 * a confirmation round when none failed). */
dmuon_rc ckpt_agree(MPI_Comm comm, int ms, dmuon_rc mine)
{
    return dmuon_agree(comm, mine, ms);
}

/* *a = dmuon_digest(data, len, *a) and *b = dmuon_digest(data, len, *b) in
 * one pass: the two FNV-1a chains are independent, so they run side by side
 * (a file digest and a piece digest for the price of one). */
void ckpt_digest2(const void *data, size_t len, uint64_t *a, uint64_t *b)
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

void ckpt_fmt_path(char out[CKPT_PATH_MAX], const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(out, CKPT_PATH_MAX, fmt, ap);
    va_end(ap);
}

/* The parent directory of path (for fsync after a rename), into out. */
void ckpt_parent_of(const char *path, char out[CKPT_PATH_MAX])
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
dmuon_rc ckpt_clean_dir(const char *dir, char out[CKPT_PATH_MAX])
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

/* Broadcasts a NUL-terminated path buffer from rank 0 (through a heap copy
 * that a timed-out call keeps, ckpt_wait). */
dmuon_rc ckpt_bcast_path(MPI_Comm comm, int ms, char path[CKPT_PATH_MAX])
{
    char *buf = malloc(CKPT_PATH_MAX);
    if (!buf)
        return DMUON_FAIL(DMUON_ENOMEM, "checkpoint: out of memory for a path");
    memcpy(buf, path, CKPT_PATH_MAX);
    MPI_Request q;
    bool kept = false;
    dmuon_rc rc = ckpt_wait(MPI_Ibcast(buf, CKPT_PATH_MAX, MPI_CHAR, 0, comm, &q), &q, ms,
                            "MPI_Ibcast of a path", &kept);
    if (rc == DMUON_OK) {
        memcpy(path, buf, CKPT_PATH_MAX);
        path[CKPT_PATH_MAX - 1] = '\0';
    }
    if (!kept)
        free(buf);
    return rc;
}

/* ------------------------------------------------- safetensors headers -- */


dmuon_rc ckpt_hdr_begin(hdr_buf *h, const char *const *meta, size_t nmeta)
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

void ckpt_hdr_tensor(hdr_buf *h, const char *name, dmuon_dtype dt, int ndim,
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
dmuon_rc ckpt_hdr_end(hdr_buf *h, unsigned char **out, size_t *out_len)
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
void ckpt_piece_tensor_name(char *out, size_t cap, const char *param, const char *kind,
                            int64_t lo, int64_t hi)
{
    snprintf(out, cap, "%s/%s/%lld-%lld", param, kind, (long long)lo, (long long)hi);
}

/* ------------------------------------------------------- piece checks -- */


int ckpt_cmp_rec(const void *a, const void *b)
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
dmuon_rc ckpt_check_pieces(const ptable *t, const dmuon_ckpt_piece *pieces, size_t n,
                           int rank, int only_kind, rec *r, size_t *nr)
{
    if (n > 0 && !pieces)
        return DMUON_FAIL(DMUON_EINVAL, "checkpoint: %zu pieces but no piece array", n);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        const dmuon_ckpt_piece *p = &pieces[i];
        int kind = ckpt_kind_index(p->kind);
        if (kind < 0)
            return DMUON_FAIL(DMUON_EINVAL, "checkpoint: piece %zu of parameter '%s': unknown kind "
                                            "'%s' (expected master, momentum, exp_avg or "
                                            "exp_avg_sq)",
                              i, p->name ? p->name : "(null)", p->kind ? p->kind : "(null)");
        if (only_kind >= 0 && kind != only_kind)
            continue;
        long pi = p->name ? ckpt_ptable_find(t, p->name) : -1;
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
dmuon_rc ckpt_dedupe(const ptable *t, rec *r, size_t *nr, const char *what)
{
    qsort(r, *nr, sizeof *r, ckpt_cmp_rec);
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
                                  what, t->p[a->param].name, ckpt_kind_names[a->kind],
                                  (long long)a->lo, (long long)a->hi, (long long)a->rank,
                                  (long long)b->lo, (long long)b->hi, (long long)b->rank);
        }
        r[k++] = r[i];
    }
    *nr = k;
    return DMUON_OK;
}
