/*
 * st.c — reading and checking safetensors headers (st_internal.h).
 *
 * Invariant: a header that passes dmuon_st_header_read describes tensors
 * each holding exactly the bytes its dtype and shape need, lying wholly
 * inside the file's data part (unless the caller allows a header-only file
 * and the data part is absent), and no two of them share a byte; every
 * error message starts with the file's path and names the tensor and field.
 * The checkpoints read with no flag (their files always hold their data);
 * the model inventories accept all the format allows (DMUON_ST_* flags).
 */
#include "st_internal.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The dtypes of the safetensors format with their size and the dmuon
 * storage type of the same size; own: the dmuon type is the stored type
 * itself (accepted without DMUON_ST_ALL_DTYPES, and the name written for
 * that dmuon type). */
static const struct {
    const char *name;
    unsigned size;
    dmuon_dtype dt;
    bool own;
} st_types[] = {
    {"F64", 8, DMUON_F64, true},      {"F32", 4, DMUON_F32, true},
    {"F16", 2, DMUON_F16, true},      {"BF16", 2, DMUON_BF16, true},
    {"I64", 8, DMUON_I64, true},      {"U64", 8, DMUON_I64, false},
    {"I32", 4, DMUON_I32, true},      {"U32", 4, DMUON_I32, false},
    {"I16", 2, DMUON_F16, false},     {"U16", 2, DMUON_F16, false},
    {"I8", 1, DMUON_U8, false},       {"U8", 1, DMUON_U8, true},
    {"BOOL", 1, DMUON_U8, false},     {"F8_E4M3", 1, DMUON_U8, false},
    {"F8_E5M2", 1, DMUON_U8, false},  {"F8_E8M0", 1, DMUON_U8, false},
};
#define N_ST_TYPES (sizeof st_types / sizeof st_types[0])

const char *dmuon_st_dtype_name(dmuon_dtype t)
{
    for (size_t i = 0; i < N_ST_TYPES; i++)
        if (st_types[i].own && st_types[i].dt == t)
            return st_types[i].name;
    return "?";
}

/* The names accepted under flags, for messages: "F64, F32, ... or U8". */
static void accepted_names(unsigned flags, char *buf, size_t cap)
{
    size_t len = 0, n = 0, k = 0;
    for (size_t i = 0; i < N_ST_TYPES; i++)
        n += st_types[i].own || (flags & DMUON_ST_ALL_DTYPES);
    buf[0] = '\0';
    for (size_t i = 0; i < N_ST_TYPES && len < cap; i++) {
        if (!st_types[i].own && !(flags & DMUON_ST_ALL_DTYPES))
            continue;
        k++;
        int w = snprintf(buf + len, cap - len, "%s%s", k == 1 ? "" : k == n ? " or " : ", ",
                         st_types[i].name);
        len += w > 0 ? (size_t)w : 0;
    }
}

void dmuon_st_header_release(dmuon_st_header *h)
{
    if (!h)
        return;
    dmuon_doc_release(&h->doc);
    free(h->t);
    memset(h, 0, sizeof *h);
}

static int cmp_begin(const void *a, const void *b)
{
    const dmuon_st_tensor *x = *(dmuon_st_tensor *const *)a, *y = *(dmuon_st_tensor *const *)b;
    return x->begin < y->begin ? -1 : x->begin > y->begin;
}

/* Reads exactly len bytes at offset off; false on a short read. */
static bool pread_all(int fd, void *buf, size_t len, uint64_t off)
{
    char *p = buf;
    while (len > 0) {
        ssize_t got = pread(fd, p, len, (off_t)off);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            return false;
        p += got;
        len -= (size_t)got;
        off += (uint64_t)got;
    }
    return true;
}

/* One tensor entry v named name: dtype, shape, data_offsets.  header_only:
 * the file has no data part and flags allow it. */
static dmuon_rc parse_tensor(dmuon_st_header *h, const char *path, const char *name,
                             yaml_node_t *v, uint64_t data_len, unsigned flags,
                             bool header_only, dmuon_st_tensor *t)
{
    dmuon_doc *d = &h->doc;
    bool zero_ok = flags & DMUON_ST_ZERO_DIMS;
    if (!v || v->type != YAML_MAPPING_NODE)
        return DMUON_FAIL(DMUON_EPARSE, "%s: tensor '%s': expected an object with dtype, shape "
                                        "and data_offsets", path, name);
    const char *dts;
    DMUON_TRY(dmuon_doc_field_str(d, v, "dtype", true, &dts));
    size_t ti;
    for (ti = 0; ti < N_ST_TYPES; ti++)
        if (!strcmp(dts, st_types[ti].name) && (st_types[ti].own || (flags & DMUON_ST_ALL_DTYPES)))
            break;
    if (ti == N_ST_TYPES) {
        char names[200];
        accepted_names(flags, names, sizeof names);
        return DMUON_FAIL(DMUON_EPARSE, "%s: tensor '%s': field 'dtype': unsupported type '%s' "
                                        "(expected %s)", path, name, dts, names);
    }
    t->dtype = st_types[ti].dt;
    t->stored = st_types[ti].name;
    const char *want = zero_ok ? "non-negative" : "positive";
    yaml_node_t *sh = dmuon_doc_get(d, v, "shape");
    if (!sh || sh->type != YAML_SEQUENCE_NODE)
        return DMUON_FAIL(DMUON_EPARSE, "%s: tensor '%s': field 'shape': expected a list of "
                                        "%s integers", path, name, want);
    size_t nd = dmuon_doc_seq_len(sh);
    if (nd > DMUON_ST_MAX_DIMS)
        return DMUON_FAIL(DMUON_EPARSE, "%s: tensor '%s': field 'shape': %zu dimensions, at "
                                        "most %d supported", path, name, nd, DMUON_ST_MAX_DIMS);
    t->name = name;
    t->ndim = (int)nd;
    uint64_t bytes = st_types[ti].size;
    for (size_t k = 0; k < nd; k++) {
        DMUON_TRY(dmuon_doc_to_int(d, dmuon_doc_seq_at(d, sh, k), "shape", &t->shape[k]));
        if (t->shape[k] < 0 || (t->shape[k] == 0 && !zero_ok))
            return DMUON_FAIL(DMUON_EPARSE, "%s: tensor '%s': field 'shape': dimension %zu is "
                                            "%lld, expected a %s integer",
                              path, name, k, (long long)t->shape[k], want);
        if (t->shape[k] && bytes > (UINT64_MAX >> 1) / (uint64_t)t->shape[k])
            return DMUON_FAIL(DMUON_EPARSE, "%s: tensor '%s': field 'shape': too many elements",
                              path, name);
        bytes *= (uint64_t)t->shape[k];
    }
    yaml_node_t *off = dmuon_doc_get(d, v, "data_offsets");
    if (!off || off->type != YAML_SEQUENCE_NODE || dmuon_doc_seq_len(off) != 2)
        return DMUON_FAIL(DMUON_EPARSE, "%s: tensor '%s': field 'data_offsets': expected "
                                        "[begin, end]", path, name);
    int64_t b0, b1;
    DMUON_TRY(dmuon_doc_to_int(d, dmuon_doc_seq_at(d, off, 0), "data_offsets", &b0));
    DMUON_TRY(dmuon_doc_to_int(d, dmuon_doc_seq_at(d, off, 1), "data_offsets", &b1));
    if (b0 < 0 || b1 < b0 || (uint64_t)(b1 - b0) != bytes ||
        (!header_only && (uint64_t)b1 > data_len)) {
        if (header_only)
            return DMUON_FAIL(DMUON_EPARSE,
                              "%s: tensor '%s': field 'data_offsets': [%lld, %lld] does not "
                              "hold its %llu bytes (%s of shape with %zu dimensions)",
                              path, name, (long long)b0, (long long)b1,
                              (unsigned long long)bytes, dts, nd);
        return DMUON_FAIL(DMUON_EPARSE,
                          "%s: tensor '%s': field 'data_offsets': [%lld, %lld] does not hold "
                          "%llu bytes inside the %llu data bytes of the file",
                          path, name, (long long)b0, (long long)b1, (unsigned long long)bytes,
                          (unsigned long long)data_len);
    }
    t->begin = (uint64_t)b0;
    t->end = (uint64_t)b1;
    return DMUON_OK;
}

dmuon_rc dmuon_st_header_read(FILE *f, const char *path, unsigned flags, dmuon_st_header *h)
{
    dmuon_rc rc = DMUON_OK;
    char *hdr = NULL;
    dmuon_st_tensor **order = NULL;
    size_t nbytes = 0;   /* entries of order: the tensors holding bytes */
    int fd = fileno(f);
    memset(h, 0, sizeof *h);
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
        return DMUON_FAIL(DMUON_EIO, "'%s' is not a regular file", path);
    h->file_size = (uint64_t)st.st_size;
    unsigned char lenb[8];
    if (h->file_size < 8 || !pread_all(fd, lenb, 8, 0)) {
        rc = DMUON_FAIL(DMUON_EPARSE,
                        "%s: truncated safetensors file: %lld bytes, expected at least the "
                        "8-byte header length",
                        path, (long long)st.st_size);
        goto fail;
    }
    uint64_t L = 0;
    for (int i = 7; i >= 0; i--)
        L = (L << 8) | lenb[i];
    if (L > h->file_size - 8) {
        rc = DMUON_FAIL(DMUON_EPARSE,
                        "%s: header length %llu goes beyond the end of the file (%lld bytes); "
                        "expected a safetensors file",
                        path, (unsigned long long)L, (long long)st.st_size);
        goto fail;
    }
    if (L > DMUON_ST_MAX_HEADER || L < 2) {
        rc = DMUON_FAIL(DMUON_EPARSE, "%s: header length %llu: expected 2 to %u bytes", path,
                        (unsigned long long)L, DMUON_ST_MAX_HEADER);
        goto fail;
    }
    h->header_len = L;
    h->data_start = 8 + L;
    hdr = malloc(L + 1);
    if (!hdr) {
        rc = DMUON_FAIL(DMUON_ENOMEM, "out of memory for the header of '%s'", path);
        goto fail;
    }
    if (!pread_all(fd, hdr, L, 8)) {
        rc = DMUON_FAIL(DMUON_EPARSE, "%s: truncated header", path);
        goto fail;
    }
    hdr[L] = '\0';
    if (hdr[0] != '{') {
        rc = DMUON_FAIL(DMUON_EPARSE, "%s: header does not start with '{': not a JSON object",
                        path);
        goto fail;
    }
    DMUON_TRY_GOTO(rc, dmuon_doc_load_buffer(&h->doc, path, hdr, L), fail);
    yaml_node_t *root = dmuon_doc_root(&h->doc);
    if (!root || root->type != YAML_MAPPING_NODE) {
        rc = DMUON_FAIL(DMUON_EPARSE, "%s: header: expected a JSON object of tensors", path);
        goto fail;
    }
    size_t nmap = dmuon_doc_map_len(root);
    h->t = calloc(nmap ? nmap : 1, sizeof *h->t);
    order = calloc(nmap ? nmap : 1, sizeof *order);
    if (!h->t || !order) {
        rc = DMUON_FAIL(DMUON_ENOMEM, "out of memory for the header of '%s'", path);
        goto fail;
    }
    uint64_t data_len = h->file_size - h->data_start;
    bool header_only = data_len == 0 && (flags & DMUON_ST_HEADER_ONLY);
    for (size_t i = 0; i < nmap; i++) {
        const char *name = dmuon_doc_map_key(&h->doc, root, i);
        yaml_node_t *v = dmuon_doc_map_value(&h->doc, root, i);
        if (!name) {
            rc = DMUON_FAIL(DMUON_EPARSE, "%s: header: entry %zu: expected a string key", path, i);
            goto fail;
        }
        if (!strcmp(name, "__metadata__")) {
            h->meta = v;
            continue;
        }
        DMUON_TRY_GOTO(rc, parse_tensor(h, path, name, v, data_len, flags, header_only,
                                       &h->t[h->n]), fail);
        if (h->t[h->n].end > h->t[h->n].begin)   /* tensors of no byte overlap nothing */
            order[nbytes++] = &h->t[h->n];
        h->n++;
    }
    qsort(order, nbytes, sizeof *order, cmp_begin);
    for (size_t i = 1; i < nbytes; i++)
        if (order[i]->begin < order[i - 1]->end) {
            rc = DMUON_FAIL(DMUON_EPARSE,
                            "%s: tensor '%s': field 'data_offsets': [%llu, %llu] overlaps "
                            "tensor '%s' at [%llu, %llu]",
                            path, order[i]->name, (unsigned long long)order[i]->begin,
                            (unsigned long long)order[i]->end, order[i - 1]->name,
                            (unsigned long long)order[i - 1]->begin,
                            (unsigned long long)order[i - 1]->end);
            goto fail;
        }
    free(order);
    free(hdr);
    return DMUON_OK;
fail:
    free(order);
    free(hdr);
    dmuon_st_header_release(h);
    return rc;
}
