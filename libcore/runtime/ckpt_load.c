/*
 * ckpt_load.c — loading a checkpoint onto any plan (dmuon/ckpt.h; the shared parts: ckpt.c).
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
    const char *ns_variant;  /* NULL: not recorded (saved before it was) */
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
        long k = ckpt_ptable_find(t, name);
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

/* What the caller resumes with against what was saved: every hyperparameter
 * named in expect must have been saved with the same value (both are
 * binary64; the manifest keeps 17 significant digits, which round-trips),
 * and expect's NS variant must be the saved one when both are known (a
 * manifest written before the variant was recorded has none).  A name the
 * caller leaves out of expect is not compared (its explicit override). */
static dmuon_rc check_resume(const manifest *m, const dmuon_ckpt_meta *expect)
{
    for (int i = 0; i < expect->n_hparams; i++) {
        const char *nm = expect->hparam_names[i];
        int j = 0;
        while (j < m->nh && strcmp(m->hnames[j], nm))
            j++;
        if (j == m->nh)
            return DMUON_FAIL(DMUON_EMISMATCH, "%s: hyperparameter '%s' is not in the "
                              "checkpoint (this run has %.17g): resume without it only by "
                              "allowing the change explicitly", m->path, nm,
                              expect->hparam_values[i]);
        if (m->hvals[j] != expect->hparam_values[i] &&
            !(isnan(m->hvals[j]) && isnan(expect->hparam_values[i])))
            return DMUON_FAIL(DMUON_EMISMATCH, "%s: hyperparameter '%s' was %.17g when saved, "
                              "this run has %.17g: resume with the saved value, or allow the "
                              "change explicitly", m->path, nm, m->hvals[j],
                              expect->hparam_values[i]);
    }
    if (expect->ns_variant && m->ns_variant && strcmp(expect->ns_variant, m->ns_variant))
        return DMUON_FAIL(DMUON_EMISMATCH, "%s: Newton-Schulz variant '%s' when saved, this run "
                          "uses '%s': resume with the saved variant, or allow the change "
                          "explicitly", m->path, m->ns_variant, expect->ns_variant);
    return DMUON_OK;
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
    if ((v = dmuon_doc_get(&m->doc, root, "ns_variant"))) {
        m->ns_variant = dmuon_doc_str(v);
        if (!m->ns_variant || !*m->ns_variant || strlen(m->ns_variant) >= CKPT_NAME_MAX)
            return DMUON_FAIL(DMUON_EPARSE, "%s:%d: field 'ns_variant': expected a name of 1 to "
                              "%d bytes", path, dmuon_doc_line(v), CKPT_NAME_MAX - 1);
    }
    if (expect)
        DMUON_TRY(check_resume(m, expect));
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
        long pi = ckpt_ptable_find(t, pname);
        e->kind = ckpt_kind_index(kname);
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
    qsort(m->r, m->nr, sizeof *m->r, ckpt_cmp_rec);
    for (size_t i = 1; i < m->nr; i++) {
        const rec *a = &m->r[i - 1], *b = &m->r[i];
        if (a->param == b->param && a->kind == b->kind && b->lo < a->hi)
            return DMUON_FAIL(DMUON_EPARSE, "%s: parameter '%s' kind '%s': saved pieces [%lld, "
                                            "%lld) and [%lld, %lld) overlap", path,
                              t->p[a->param].name, ckpt_kind_names[a->kind], (long long)a->lo,
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
            if (ckpt_cmp_rec(&m->r[mid], &key) <= 0)
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
                              ckpt_kind_names[q[i].kind], (long long)cur, (long long)gap_end,
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
    ckpt_fmt_path(path, "%s/%s", dir, mf->name);
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
            ckpt_piece_tensor_name(name, sizeof name, t->p[lost->param].name,
                                   ckpt_kind_names[lost->kind], lost->lo, lost->hi);
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
        ckpt_piece_tensor_name(name, sizeof name, t->p[r->param].name, ckpt_kind_names[r->kind],
                               r->lo, r->hi);
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
        if (!dmuon_fd_read_all(fd, chunk, CKPT_CHUNK, &got)) {
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
            ckpt_digest2(chunk + (a - pos), b - a, &fdg, &dg[i]);
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
            ckpt_piece_tensor_name(name, sizeof name, t->p[ur[i]->param].name,
                                   ckpt_kind_names[ur[i]->kind], ur[i]->lo, ur[i]->hi);
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
    char ns_variant[CKPT_NAME_MAX];
    char names[DMUON_CKPT_MAX_HPARAMS][CKPT_NAME_MAX];
} meta_store;

/* Rank 0 reads the manifest; every rank gets its bytes (*buf malloc'ed).
 * The broadcasts post from heap memory that a timed-out call keeps
 * (ckpt_wait). */
static dmuon_rc bcast_manifest(MPI_Comm comm, int ms, int rank, const char *path,
                               char **buf, size_t *len)
{
    MPI_Request q;
    dmuon_rc rc = DMUON_OK;
    bool kept = false;
    uint64_t *np = malloc(sizeof *np), n = 0;
    *buf = NULL;
    if (!np)
        rc = DMUON_FAIL(DMUON_ENOMEM, "checkpoint: out of memory for the manifest");
    if (rank == 0 && rc == DMUON_OK) {
        if (access(path, F_OK) != 0 && errno == ENOENT)
            rc = DMUON_FAIL(DMUON_ENOTFOUND, "no checkpoint: '%s' does not exist (an interrupted "
                                             "save leaves none)", path);
        else
            rc = dmuon_read_file(path, 1u << 30, buf, len);
        n = *len;
    }
    rc = ckpt_agree(comm, ms, rc);
    if (rc == DMUON_OK) {
        *np = n;
        rc = ckpt_wait(MPI_Ibcast(np, 1, MPI_UINT64_T, 0, comm, &q), &q, ms,
                       "MPI_Ibcast (manifest size)", &kept);
        n = *np;
    }
    if (!kept)
        free(np);
    if (rc != DMUON_OK) {
        free(*buf);
        *buf = NULL;
        return rc;
    }
    if (rank != 0) {
        *len = (size_t)n;
        if (!(*buf = malloc((size_t)n + 1)))
            rc = DMUON_FAIL(DMUON_ENOMEM, "checkpoint: out of memory for the manifest");
    }
    rc = ckpt_agree(comm, ms, rc);
    if (rc == DMUON_OK)
        rc = ckpt_wait(MPI_Ibcast(*buf, (int)n, MPI_CHAR, 0, comm, &q), &q, ms,
                       "MPI_Ibcast (manifest)", &kept);
    if (rc != DMUON_OK) {
        if (!kept)   /* else a late peer may still write it: kept for good */
            free(*buf);
        *buf = NULL;
        return rc;
    }
    (*buf)[n] = '\0';
    return DMUON_OK;
}

dmuon_rc dmuon_ckpt_load(MPI_Comm comm, int deadline_ms, const char *dir,
                         const dmuon_ckpt_meta *expect, const dmuon_ckpt_param *params, size_t np,
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
    int ms = DMUON_DEADLINE_MS_DEFAULT;   /* the same on every rank (same options) */
    DMUON_TRY(dmuon_deadline_ms(deadline_ms, &ms));
    MPI_Comm_rank(comm, &rank);

    /* 1. arguments and requested pieces */
    rc = ckpt_clean_dir(dir, d);
    if (rc == DMUON_OK)
        rc = ckpt_ptable_init(&t, params, np);
    if (rc == DMUON_OK && (!(q = malloc((n ? n : 1) * sizeof *q)) ||
                           !(dst = malloc((n ? n : 1) * sizeof *dst))))
        rc = DMUON_FAIL(DMUON_ENOMEM, "checkpoint: out of memory for %zu pieces", n);
    if (rc == DMUON_OK)
        rc = ckpt_check_pieces(&t, pieces, n, rank, -1, q, &nq);
    DMUON_TRY_GOTO(rc, ckpt_agree(comm, ms, rc), out);
    ckpt_fmt_path(mpath, "%s/" CKPT_MANIFEST, d);

    /* 2. the manifest */
    DMUON_TRY_GOTO(rc, bcast_manifest(comm, ms, rank, mpath, &text, &tlen), out);
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
    DMUON_TRY_GOTO(rc, ckpt_agree(comm, ms, rc), out);

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
        if (m.ns_variant) {
            snprintf(meta_store.ns_variant, sizeof meta_store.ns_variant, "%s", m.ns_variant);
            meta_out->ns_variant = meta_store.ns_variant;
        }
        meta_out->n_hparams = m.nh;
        for (int i = 0; i < m.nh; i++) {
            snprintf(meta_store.names[i], CKPT_NAME_MAX, "%s", m.hnames[i]);
            meta_out->hparam_names[i] = meta_store.names[i];
            meta_out->hparam_values[i] = m.hvals[i];
        }
    }
out:
    manifest_release(&m);
    ckpt_ptable_release(&t);
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
