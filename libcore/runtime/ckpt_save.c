/*
 * ckpt_save.c — saving a checkpoint (dmuon/ckpt.h; the shared parts: ckpt.c).
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
 *      fsyncs the directory and puts it in DIR's place: an existing DIR is
 *      swapped with it in one step (renameat2 RENAME_EXCHANGE), then the old
 *      one, now at DIR.tmp.X, removed; where the file system cannot swap
 *      (EINVAL, ENOSYS, EOPNOTSUPP: some network file systems), DIR is first
 *      renamed to DIR.old.XXXXXX, then the new one into place, then the old
 *      one removed (on a failed second rename the old one is put back);
 *      agreed.  Every failure after step 2 removes DIR.tmp.X (rank 0 does it,
 *      after every rank has closed its file).
 *   The ranks must share one file system (one host, or a cluster file system
 *   such as NFS or Lustre): rank 0 creates, renames and removes what the
 *   other ranks wrote.  A process killed mid-save (SIGKILL, or SIGINT/SIGTERM
 *   without a handler in the trainer) leaves DIR, old or new, and may leave
 *   DIR.tmp.X behind; nothing removes that automatically.  Only without the
 *   one-step swap can a kill between the two renames leave DIR missing, the
 *   old checkpoint then at DIR.old.XXXXXX.
 */
#include "ckpt_internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dmuon/bf16.h"
#include "dmuon/collv.h"
#include "dmuon/doc.h"
#include "st_internal.h"

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
        ckpt_fmt_path(m, "%s/" CKPT_MANIFEST, dir);
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
    ckpt_fmt_path(tmp, "%s.tmp.XXXXXX", dir);
    if (!mkdtemp(tmp)) {
        int e = errno;
        ckpt_fmt_path(tmp, "%s.tmp.XXXXXX", dir);
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
    ckpt_fmt_path(path, "%s/rank-%05d.safetensors", tmp, rank);
    snprintf(vers, sizeof vers, "%d", DMUON_CKPT_VERSION);
    const char *meta[] = {"format", CKPT_FORMAT, "version", vers};
    hdr_buf h;
    DMUON_TRY(ckpt_hdr_begin(&h, meta, 2));
    uint64_t off = 0;
    for (size_t i = 0; i < nr; i++) {
        int64_t cnt = r[i].hi - r[i].lo;
        ckpt_piece_tensor_name(name, sizeof name, t->p[r[i].param].name, ckpt_kind_names[r[i].kind],
                               r[i].lo, r[i].hi);
        ckpt_hdr_tensor(&h, name, DMUON_F32, 1, &cnt, off, off + 4 * (uint64_t)cnt);
        r[i].offset = (int64_t)off;   /* relative for now */
        off += 4 * (uint64_t)cnt;
    }
    DMUON_TRY(ckpt_hdr_end(&h, &hdr, &hlen));
    fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
        rc = DMUON_FAIL(DMUON_EIO, "checkpoint: cannot create '%s': %s", path, strerror(errno));
        goto out;
    }
    uint64_t dg = dmuon_digest(hdr, hlen, DMUON_DIGEST_SEED);
    if (!dmuon_fd_write_all(fd, hdr, hlen)) {
        rc = DMUON_FAIL(DMUON_EIO, "checkpoint: cannot write '%s': %s", path, strerror(errno));
        goto out;
    }
    for (size_t i = 0; i < nr; i++) {
        const dmuon_ckpt_piece *p = &pieces[r[i].idx];
        size_t bytes = 4 * (size_t)(r[i].hi - r[i].lo);
        r[i].digest = DMUON_DIGEST_SEED;
        ckpt_digest2(p->data, bytes, &dg, &r[i].digest);
        if (!dmuon_fd_write_all(fd, p->data, bytes)) {
            ckpt_piece_tensor_name(name, sizeof name, p->name, p->kind, p->lo, p->hi);
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
    if (m->ns_variant)
        dmuon_json_kstr(&w, "ns_variant", m->ns_variant);
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
        dmuon_json_kstr(&w, "kind", ckpt_kind_names[p->kind]);
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
    ckpt_fmt_path(path, "%s/" CKPT_MANIFEST, tmp);
    DMUON_TRY(dmuon_write_atomic(path, write_manifest, c));
    DMUON_TRY(dmuon_dir_fsync(tmp));
    struct stat st;
    if (stat(dir, &st) == 0) {
        /* one step: a kill at any moment leaves DIR there, old or new */
        if (renameat2(AT_FDCWD, tmp, AT_FDCWD, dir, RENAME_EXCHANGE) == 0) {
            ckpt_parent_of(dir, parent);
            dmuon_rc rc = dmuon_dir_fsync(parent);
            dmuon_dir_remove(tmp);   /* the old checkpoint */
            tmp[0] = '\0';
            return rc;
        }
        if (errno != EINVAL && errno != ENOSYS && errno != EOPNOTSUPP)
            return DMUON_FAIL(DMUON_EIO, "checkpoint: cannot swap '%s' into the place of '%s': "
                              "%s", tmp, dir, strerror(errno));
        ckpt_fmt_path(old, "%s.old.XXXXXX", dir);
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
    ckpt_parent_of(dir, parent);
    dmuon_rc rc = dmuon_dir_fsync(parent);
    if (old[0])
        dmuon_dir_remove(old);
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
    if (m->ns_variant && (!*m->ns_variant || strlen(m->ns_variant) >= CKPT_NAME_MAX))
        return DMUON_FAIL(DMUON_EINVAL, "checkpoint: meta ns_variant: expected a name of 1 to %d "
                          "bytes or NULL", CKPT_NAME_MAX - 1);
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

dmuon_rc dmuon_ckpt_save(MPI_Comm comm, int deadline_ms, const char *dir,
                         const dmuon_ckpt_meta *meta, const dmuon_ckpt_param *params, size_t np,
                         const dmuon_ckpt_piece *pieces, size_t n)
{
    dmuon_rc rc = DMUON_OK;
    int rank, world;
    ptable t = {0};
    rec *mine = NULL, *all = NULL;
    file_info info = {0}, *infos = NULL;
    int *counts = NULL, *displs = NULL;
    struct {
        int cnt;
        file_info info;
    } *send = NULL;   /* what this rank sends to rank 0 (heap: see ckpt_wait) */
    bool kept = false;   /* a call timed out: its buffers stay allocated */
    size_t nmine = 0;
    char d[CKPT_PATH_MAX], tmp[CKPT_PATH_MAX] = "";
    int ms = DMUON_DEADLINE_MS_DEFAULT;   /* the same on every rank (same options) */
    DMUON_TRY(dmuon_deadline_ms(deadline_ms, &ms));
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &world);

    /* 1. arguments and this rank's pieces */
    rc = ckpt_clean_dir(dir, d);
    if (rc == DMUON_OK)
        rc = check_meta(meta);
    if (rc == DMUON_OK)
        rc = ckpt_ptable_init(&t, params, np);
    if (rc == DMUON_OK && !(mine = malloc((n ? n : 1) * sizeof *mine)))
        rc = DMUON_FAIL(DMUON_ENOMEM, "checkpoint: out of memory for %zu pieces", n);
    if (rc == DMUON_OK)
        rc = ckpt_check_pieces(&t, pieces, n, rank, -1, mine, &nmine);
    if (rc == DMUON_OK)
        rc = ckpt_dedupe(&t, mine, &nmine, "checkpoint");
    DMUON_TRY_GOTO(rc, ckpt_agree(comm, ms, rc), out);

    /* 2. the temporary directory */
    if (rank == 0)
        rc = make_tmpdir(d, tmp);
    DMUON_TRY_GOTO(rc, ckpt_agree(comm, ms, rc), out);
    DMUON_TRY_GOTO(rc, ckpt_bcast_path(comm, ms, tmp), out);

    /* 3. this rank's file */
    if (nmine > 0)
        rc = write_rank_file(tmp, rank, &t, pieces, mine, nmine, &info);
    DMUON_TRY_GOTO(rc, ckpt_agree(comm, ms, rc), out);

    /* 4. piece lists and file digests to rank 0 */
    int cnt = (int)nmine * REC_WORDS;
    if ((size_t)cnt != nmine * (size_t)REC_WORDS)
        rc = DMUON_FAIL(DMUON_EINVAL, "checkpoint: too many pieces on one rank (%zu)", nmine);
    if (rc == DMUON_OK && !(send = malloc(sizeof *send)))
        rc = DMUON_FAIL(DMUON_ENOMEM, "checkpoint: out of memory gathering the pieces");
    if (rc == DMUON_OK) {
        send->cnt = cnt;
        send->info = info;
    }
    if (rank == 0 && rc == DMUON_OK) {
        counts = calloc((size_t)world, sizeof *counts);
        displs = calloc((size_t)world, sizeof *displs);
        infos = calloc((size_t)world, sizeof *infos);
        if (!counts || !displs || !infos)
            rc = DMUON_FAIL(DMUON_ENOMEM, "checkpoint: out of memory gathering the pieces");
    }
    DMUON_TRY_GOTO(rc, ckpt_agree(comm, ms, rc), out);
    MPI_Request q;
    DMUON_TRY_GOTO(rc, ckpt_wait(MPI_Igather(&send->cnt, 1, MPI_INT, counts, 1, MPI_INT, 0, comm,
                                             &q), &q, ms, "MPI_Igather (piece counts)", &kept),
                   out);
    DMUON_TRY_GOTO(rc, ckpt_wait(MPI_Igather(&send->info, 3, MPI_UINT64_T, infos, 3, MPI_UINT64_T,
                                             0, comm, &q), &q, ms, "MPI_Igather (file digests)",
                                 &kept), out);
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
    DMUON_TRY_GOTO(rc, ckpt_agree(comm, ms, rc), out);
    DMUON_TRY_GOTO(rc, ckpt_wait(MPI_Igatherv(mine, cnt, MPI_INT64_T, all, counts, displs,
                                            MPI_INT64_T, 0, comm, &q), &q, ms,
                               "MPI_Igatherv (piece lists)", &kept), out);

    /* 5. rank 0: one copy per range, manifest, rename */
    if (rank == 0) {
        rc = ckpt_dedupe(&t, all, &total, "checkpoint");
        if (rc == DMUON_OK) {
            manifest_ctx c = {.meta = meta, .t = &t, .world = world, .files = infos, .r = all,
                              .nr = total};
            rc = finish_save(d, tmp, &c);
        }
    }
    rc = ckpt_agree(comm, ms, rc);
out:
    if (rc != DMUON_OK && rank == 0 && tmp[0])
        dmuon_dir_remove(tmp);
    ckpt_ptable_release(&t);
    if (kept)   /* a late peer may still move these: kept for good */
        return rc;
    free(mine);
    free(all);
    free(infos);
    free(counts);
    free(displs);
    free(send);
    return rc;
}
