/*
 * ckpt_export.c — exporting the full weights (dmuon/ckpt.h; the shared parts: ckpt.c).
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
 */
#include "ckpt_internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dmuon/bf16.h"
#include "dmuon/collv.h"
#include "dmuon/doc.h"
#include "st_internal.h"

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
        return dmuon_fd_pwrite_all(fd, data, 4 * (size_t)count, off);
    size_t per = CKPT_CHUNK / 2;
    uint16_t *h = (uint16_t *)(void *)chunk;
    for (int64_t i = 0; i < count; i += (int64_t)per) {
        size_t k = (size_t)(count - i) < per ? (size_t)(count - i) : per;
        if (dt == DMUON_BF16)
            dmuon_bf16_from_f32(h, data + i, k);
        else
            for (size_t j = 0; j < k; j++)
                h[j] = f32_to_f16(data[i + (int64_t)j]);
        if (!dmuon_fd_pwrite_all(fd, h, 2 * k, off + 2 * (uint64_t)i))
            return false;
    }
    return true;
}

dmuon_rc dmuon_ckpt_export(MPI_Comm comm, int deadline_ms, const char *path,
                           const dmuon_ckpt_param *params, size_t np,
                           const dmuon_ckpt_piece *pieces, size_t n)
{
    dmuon_rc rc = DMUON_OK;
    int rank, world;
    ptable t = {0};
    rec *mine = NULL, *all = NULL;
    int *counts = NULL, *displs = NULL, *cnt = NULL;   /* cnt: heap, see ckpt_wait */
    bool kept = false;   /* a call timed out: its buffers stay allocated */
    uint64_t *poff = NULL;
    unsigned char *hdr = NULL;
    char *chunk = NULL;
    size_t nmine = 0, hlen = 0, total = 0;
    char tmp[CKPT_PATH_MAX] = "", parent[CKPT_PATH_MAX];
    int fd = -1;
    int ms = DMUON_DEADLINE_MS_DEFAULT;   /* the same on every rank (same options) */
    DMUON_TRY(dmuon_deadline_ms(deadline_ms, &ms));
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &world);

    /* 1. arguments; this rank's master pieces */
    if (!path || !*path || strlen(path) + 32 >= CKPT_PATH_MAX)
        rc = DMUON_FAIL(DMUON_EINVAL, "export: expected an output path of 1 to %d bytes",
                        CKPT_PATH_MAX - 32);
    if (rc == DMUON_OK)
        rc = ckpt_ptable_init(&t, params, np);
    for (size_t i = 0; rc == DMUON_OK && i < np; i++)
        if (params[i].dtype != DMUON_F32 && params[i].dtype != DMUON_BF16 &&
            params[i].dtype != DMUON_F16)
            rc = DMUON_FAIL(DMUON_EINVAL, "export: parameter '%s': dtype %s: expected f32, bf16 "
                                          "or f16", params[i].name, dmuon_dtype_name(params[i].dtype));
    if (rc == DMUON_OK && (!(mine = malloc((n ? n : 1) * sizeof *mine)) ||
                           !(counts = malloc((size_t)world * sizeof *counts)) ||
                           !(displs = malloc((size_t)world * sizeof *displs)) ||
                           !(poff = malloc((np ? np : 1) * sizeof *poff)) ||
                           !(cnt = malloc(sizeof *cnt))))
        rc = DMUON_FAIL(DMUON_ENOMEM, "export: out of memory");
    if (rc == DMUON_OK)
        rc = ckpt_check_pieces(&t, pieces, n, rank, 0, mine, &nmine);
    DMUON_TRY_GOTO(rc, ckpt_agree(comm, ms, rc), out);

    /* 2. every rank learns every master range */
    *cnt = (int)nmine * REC_WORDS;
    MPI_Request q;
    DMUON_TRY_GOTO(rc, ckpt_wait(MPI_Iallgather(cnt, 1, MPI_INT, counts, 1, MPI_INT, comm, &q), &q,
                                 ms, "MPI_Iallgather (piece counts)", &kept), out);
    long long sum = 0;
    for (int r = 0; r < world; r++) {
        displs[r] = (int)sum;
        sum += counts[r];
    }
    if (sum > INT_MAX)
        rc = DMUON_FAIL(DMUON_EINVAL, "export: too many pieces (%lld)", sum / REC_WORDS);
    else if (!(all = malloc(((size_t)sum ? (size_t)sum : 1) * sizeof(int64_t))))
        rc = DMUON_FAIL(DMUON_ENOMEM, "export: out of memory");
    DMUON_TRY_GOTO(rc, ckpt_agree(comm, ms, rc), out);
    DMUON_TRY_GOTO(rc, ckpt_wait(MPI_Iallgatherv(mine, *cnt, MPI_INT64_T, all, counts, displs,
                                               MPI_INT64_T, comm, &q), &q, ms,
                               "MPI_Iallgatherv (piece lists)", &kept), out);
    size_t nall = (size_t)sum / REC_WORDS;

    /* 3. coverage (same answer on every rank), layout, header */
    rc = ckpt_dedupe(&t, all, &nall, "export");
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
        rc = ckpt_hdr_begin(&h, meta, 2);
        for (size_t i = 0; rc == DMUON_OK && i < np; i++) {
            uint64_t bytes = (uint64_t)t.numel[i] * dmuon_dtype_size(params[i].dtype);
            poff[i] = total;
            ckpt_hdr_tensor(&h, params[i].name, params[i].dtype, params[i].ndim, params[i].shape,
                            total, total + bytes);
            total += bytes;
        }
        if (rc == DMUON_OK)
            rc = ckpt_hdr_end(&h, &hdr, &hlen);
    }
    if (rc == DMUON_OK && !(chunk = malloc(CKPT_CHUNK)))
        rc = DMUON_FAIL(DMUON_ENOMEM, "export: out of memory");
    DMUON_TRY_GOTO(rc, ckpt_agree(comm, ms, rc), out);

    /* 4. rank 0 creates the file: header, full size */
    if (rank == 0) {
        struct stat st;
        if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
            rc = DMUON_FAIL(DMUON_EINVAL, "export: '%s' exists and is not a regular file", path);
        } else {
            ckpt_fmt_path(tmp, "%s.tmp.XXXXXX", path);
            fd = mkstemp(tmp);
            if (fd < 0) {
                rc = DMUON_FAIL(DMUON_EIO, "export: cannot create '%s': %s", tmp, strerror(errno));
                tmp[0] = '\0';
            } else if (fchmod(fd, 0644) != 0 || !dmuon_fd_write_all(fd, hdr, hlen) ||
                       ftruncate(fd, (off_t)(hlen + total)) != 0) {
                rc = DMUON_FAIL(DMUON_EIO, "export: cannot write '%s': %s", tmp, strerror(errno));
            }
        }
    }
    DMUON_TRY_GOTO(rc, ckpt_agree(comm, ms, rc), out);
    DMUON_TRY_GOTO(rc, ckpt_bcast_path(comm, ms, tmp), out);

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
    DMUON_TRY_GOTO(rc, ckpt_agree(comm, ms, rc), out);

    /* 6. rank 0: into place */
    if (rank == 0) {
        if (rename(tmp, path) != 0) {
            rc = DMUON_FAIL(DMUON_EIO, "export: cannot rename '%s' to '%s': %s", tmp, path,
                            strerror(errno));
        } else {
            tmp[0] = '\0';
            ckpt_parent_of(path, parent);
            rc = dmuon_dir_fsync(parent);
        }
    }
    rc = ckpt_agree(comm, ms, rc);
out:
    if (fd >= 0)
        close(fd);
    if (rc != DMUON_OK && rank == 0 && tmp[0])
        unlink(tmp);
    ckpt_ptable_release(&t);
    if (!kept) {   /* else a late peer may still move these: kept for good */
        free(mine);
        free(all);
        free(counts);
        free(displs);
        free(cnt);
    }
    free(poff);
    free(hdr);
    free(chunk);
    return rc;
}
