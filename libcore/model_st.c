/*
 * model_st.c — inventories from safetensors headers: one .safetensors file,
 * or a model.safetensors.index.json and the shards its weight_map names.
 *
 * Format (huggingface/safetensors): 8 bytes little-endian u64 header length
 * L, then L bytes of JSON: {"NAME": {"dtype": "BF16", "shape": [..],
 * "data_offsets": [BEGIN, END]}, ..., "__metadata__": {...}}, then the data.
 * Only the first 8 + L bytes are read.  Checks: the file holds at least 8
 * bytes and the whole header; L is at most 100 MiB; every shape entry is a
 * non-negative integer (zero-size tensors are valid safetensors); the dtype
 * is one the format defines; data_offsets match the shape's byte size and
 * lie inside the file, unless the file ends right after its header (a
 * header-only copy: then the offsets must still match the sizes).  A
 * scalar (shape []) is recorded as shape [1].
 */
#include "model_internal.h"

#include <errno.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define ST_MAX_HEADER (100u << 20)

/* The dtypes of the safetensors format with their size and the dmuon
 * storage type of the same size (dmuon/model.h). */
static const struct {
    const char *name;
    unsigned size;
    dmuon_dtype dt;
} st_types[] = {
    {"F64", 8, DMUON_F64},    {"F32", 4, DMUON_F32},    {"F16", 2, DMUON_F16},
    {"BF16", 2, DMUON_BF16},  {"I64", 8, DMUON_I64},    {"U64", 8, DMUON_I64},
    {"I32", 4, DMUON_I32},    {"U32", 4, DMUON_I32},    {"I16", 2, DMUON_F16},
    {"U16", 2, DMUON_F16},    {"I8", 1, DMUON_U8},      {"U8", 1, DMUON_U8},
    {"BOOL", 1, DMUON_U8},    {"F8_E4M3", 1, DMUON_U8}, {"F8_E5M2", 1, DMUON_U8},
    {"F8_E8M0", 1, DMUON_U8},
};

/* Reads the header of one file and appends its tensors to l.  With want
 * (index route), only names for which want(name) is true are added. */
static dmuon_rc read_header(const char *path, dmuon_spec_list *l)
{
    dmuon_rc rc = DMUON_OK;
    char *hdr = NULL;
    dmuon_doc d = {0};
    FILE *f = fopen(path, "rb");
    if (!f)
        return DMUON_FAIL(errno == ENOENT ? DMUON_ENOTFOUND : DMUON_EIO,
                          "cannot open safetensors file '%s': %s", path, strerror(errno));
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        rc = DMUON_FAIL(DMUON_EIO, "'%s' is not a regular file", path);
        goto out;
    }
    unsigned char lenb[8];
    if (fread(lenb, 1, 8, f) != 8) {
        rc = DMUON_FAIL(DMUON_EPARSE,
                        "%s: truncated safetensors file: %lld bytes, expected at least the "
                        "8-byte header length",
                        path, (long long)st.st_size);
        goto out;
    }
    uint64_t L = 0;
    for (int i = 7; i >= 0; i--)
        L = (L << 8) | lenb[i];
    if (L > (uint64_t)st.st_size - 8) {
        rc = DMUON_FAIL(DMUON_EPARSE,
                        "%s: header length %llu goes beyond the end of the file (%lld bytes); "
                        "expected a safetensors file",
                        path, (unsigned long long)L, (long long)st.st_size);
        goto out;
    }
    if (L > ST_MAX_HEADER || L < 2) {
        rc = DMUON_FAIL(DMUON_EPARSE, "%s: header length %llu: expected 2 to %u bytes", path,
                        (unsigned long long)L, ST_MAX_HEADER);
        goto out;
    }
    hdr = malloc(L + 1);
    if (!hdr) {
        rc = DMUON_FAIL(DMUON_ENOMEM, "out of memory for the header of '%s'", path);
        goto out;
    }
    if (fread(hdr, 1, L, f) != L) {
        rc = DMUON_FAIL(DMUON_EPARSE, "%s: truncated header", path);
        goto out;
    }
    hdr[L] = '\0';
    if (hdr[0] != '{') {
        rc = DMUON_FAIL(DMUON_EPARSE, "%s: header does not start with '{': not a JSON object",
                        path);
        goto out;
    }
    DMUON_TRY_GOTO(rc, dmuon_doc_load_buffer(&d, path, hdr, L), out);
    yaml_node_t *root = dmuon_doc_root(&d);
    if (!root || root->type != YAML_MAPPING_NODE) {
        rc = DMUON_FAIL(DMUON_EPARSE, "%s: header: expected a JSON object of tensors", path);
        goto out;
    }
    uint64_t data_len = (uint64_t)st.st_size - 8 - L;
    bool header_only = data_len == 0;
    for (size_t i = 0; i < dmuon_doc_map_len(root); i++) {
        const char *name = dmuon_doc_map_key(&d, root, i);
        yaml_node_t *v = dmuon_doc_map_value(&d, root, i);
        if (!name) {
            rc = DMUON_FAIL(DMUON_EPARSE, "%s: header: entry %zu: expected a string key", path, i);
            goto out;
        }
        if (!strcmp(name, "__metadata__"))
            continue;
        if (!v || v->type != YAML_MAPPING_NODE) {
            rc = DMUON_FAIL(DMUON_EPARSE, "%s: tensor '%s': expected an object with dtype, shape "
                                          "and data_offsets", path, name);
            goto out;
        }
        const char *dts;
        DMUON_TRY_GOTO(rc, dmuon_doc_field_str(&d, v, "dtype", true, &dts), out);
        size_t ti, nt = sizeof st_types / sizeof st_types[0];
        for (ti = 0; ti < nt; ti++)
            if (!strcmp(dts, st_types[ti].name))
                break;
        if (ti == nt) {
            rc = DMUON_FAIL(DMUON_EPARSE, "%s: tensor '%s': field 'dtype': unsupported type '%s' "
                                          "(expected F64, F32, F16, BF16, I64, U64, I32, U32, "
                                          "I16, U16, I8, U8, BOOL, F8_E4M3, F8_E5M2 or F8_E8M0)",
                            path, name, dts);
            goto out;
        }
        dmuon_dtype dt = st_types[ti].dt;
        yaml_node_t *sh = dmuon_doc_get(&d, v, "shape");
        if (!sh || sh->type != YAML_SEQUENCE_NODE) {
            rc = DMUON_FAIL(DMUON_EPARSE, "%s: tensor '%s': field 'shape': expected a list of "
                                          "positive integers", path, name);
            goto out;
        }
        size_t nd = dmuon_doc_seq_len(sh);
        if (nd > DMUON_MODEL_MAX_DIMS) {
            rc = DMUON_FAIL(DMUON_EPARSE, "%s: tensor '%s': field 'shape': %zu dimensions, at "
                                          "most %d supported", path, name, nd, DMUON_MODEL_MAX_DIMS);
            goto out;
        }
        int64_t shape[DMUON_MODEL_MAX_DIMS] = {1};
        uint64_t bytes = st_types[ti].size;
        for (size_t k = 0; k < nd; k++) {
            DMUON_TRY_GOTO(rc, dmuon_doc_to_int(&d, dmuon_doc_seq_at(&d, sh, k), "shape",
                                                &shape[k]), out);
            if (shape[k] < 0) {
                rc = DMUON_FAIL(DMUON_EPARSE, "%s: tensor '%s': field 'shape': dimension %zu is "
                                              "%lld, expected a non-negative integer",
                                path, name, k, (long long)shape[k]);
                goto out;
            }
            if (shape[k] && bytes > (UINT64_MAX >> 1) / (uint64_t)shape[k]) {
                rc = DMUON_FAIL(DMUON_EPARSE, "%s: tensor '%s': field 'shape': too many elements",
                                path, name);
                goto out;
            }
            bytes *= (uint64_t)shape[k];
        }
        yaml_node_t *off = dmuon_doc_get(&d, v, "data_offsets");
        if (!off || off->type != YAML_SEQUENCE_NODE || dmuon_doc_seq_len(off) != 2) {
            rc = DMUON_FAIL(DMUON_EPARSE, "%s: tensor '%s': field 'data_offsets': expected "
                                          "[begin, end]", path, name);
            goto out;
        }
        int64_t b0, b1;
        DMUON_TRY_GOTO(rc, dmuon_doc_to_int(&d, dmuon_doc_seq_at(&d, off, 0), "data_offsets",
                                            &b0), out);
        DMUON_TRY_GOTO(rc, dmuon_doc_to_int(&d, dmuon_doc_seq_at(&d, off, 1), "data_offsets",
                                            &b1), out);
        if (b0 < 0 || b1 < b0 || (uint64_t)(b1 - b0) != bytes ||
            (!header_only && (uint64_t)b1 > data_len)) {
            if (header_only)
                rc = DMUON_FAIL(DMUON_EPARSE,
                                "%s: tensor '%s': field 'data_offsets': [%lld, %lld] does not "
                                "hold its %llu bytes (%s of shape with %zu dimensions)",
                                path, name, (long long)b0, (long long)b1,
                                (unsigned long long)bytes, dts, nd);
            else
                rc = DMUON_FAIL(DMUON_EPARSE,
                                "%s: tensor '%s': field 'data_offsets': [%lld, %lld] does not "
                                "hold %llu bytes inside the %llu data bytes of the file",
                                path, name, (long long)b0, (long long)b1,
                                (unsigned long long)bytes, (unsigned long long)data_len);
            goto out;
        }
        DMUON_TRY_GOTO(rc, dmuon_spec_add_stored(l, name, dt, st_types[ti].name,
                                                 nd ? (int)nd : 1, shape), out);
    }
out:
    dmuon_doc_release(&d);
    free(hdr);
    fclose(f);
    return rc;
}

dmuon_rc dmuon_model_load_safetensors(const char *path, const dmuon_model_opts *opts,
                                      dmuon_model **out)
{
    dmuon_spec_list l = {0};
    dmuon_rc rc;
    DMUON_TRY_GOTO(rc, read_header(path, &l), out);
    if (l.n == 0) {
        rc = DMUON_FAIL(DMUON_EPARSE, "%s: the header lists no tensors", path);
        goto out;
    }
    DMUON_TRY_GOTO(rc, dmuon_model_new(path, "safetensors", l.t, l.stored, l.n, opts, out), out);
out:
    dmuon_spec_list_release(&l);
    return rc;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* A tensor read from a shard with its stored type, for lookup by name. */
typedef struct {
    const dmuon_tensor_spec *t;
    const char *stored;
} shard_tensor;

static int cmp_shard_tensor(const void *a, const void *b)
{
    return strcmp(((const shard_tensor *)a)->t->name, ((const shard_tensor *)b)->t->name);
}

dmuon_rc dmuon_model_load_st_index(const char *path, dmuon_doc *d, const dmuon_model_opts *opts,
                                   dmuon_model **out)
{
    dmuon_rc rc = DMUON_OK;
    dmuon_spec_list l = {0}, ordered = {0};
    char *dircopy = strdup(path);
    const char **shards = NULL;
    shard_tensor *byname = NULL;
    size_t nshards = 0;
    if (!dircopy)
        return DMUON_FAIL(DMUON_ENOMEM, "out of memory");
    const char *dir = dirname(dircopy);
    yaml_node_t *wm = dmuon_doc_get(d, dmuon_doc_root(d), "weight_map");
    size_t n = dmuon_doc_map_len(wm);
    if (!wm || wm->type != YAML_MAPPING_NODE || n == 0) {
        rc = DMUON_FAIL(DMUON_EPARSE, "%s:%d: field 'weight_map': expected an object of tensor "
                                      "name -> shard file", path, dmuon_doc_line(wm));
        goto out;
    }
    shards = malloc(n * sizeof *shards);
    if (!shards) {
        rc = DMUON_FAIL(DMUON_ENOMEM, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        const char *s = dmuon_doc_str(dmuon_doc_map_value(d, wm, i));
        if (!dmuon_doc_map_key(d, wm, i) || !s || !*s || strchr(s, '/')) {
            rc = DMUON_FAIL(DMUON_EPARSE, "%s:%d: field 'weight_map': entry %zu: expected "
                                          "\"tensor name\": \"shard file name\"",
                            path, dmuon_doc_line(dmuon_doc_map_value(d, wm, i)), i + 1);
            goto out;
        }
        shards[i] = s;
    }
    qsort(shards, n, sizeof *shards, cmp_str);
    for (size_t i = 0; i < n; i++)
        if (nshards == 0 || strcmp(shards[nshards - 1], shards[i]))
            shards[nshards++] = shards[i];
    for (size_t i = 0; i < nshards; i++) {
        char sp[4096];
        if ((size_t)snprintf(sp, sizeof sp, "%s/%s", dir, shards[i]) >= sizeof sp) {
            rc = DMUON_FAIL(DMUON_EINVAL, "%s: shard path too long", path);
            goto out;
        }
        if (access(sp, F_OK) != 0) {
            rc = DMUON_FAIL(DMUON_ENOTFOUND, "%s: field 'weight_map': shard '%s' is missing "
                                             "(expected the file %s next to the index)",
                            path, shards[i], sp);
            goto out;
        }
        DMUON_TRY_GOTO(rc, read_header(sp, &l), out);
    }
    /* tensors in weight_map order; each must be in the shard it names */
    byname = malloc((l.n ? l.n : 1) * sizeof *byname);
    if (!byname) {
        rc = DMUON_FAIL(DMUON_ENOMEM, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < l.n; i++)
        byname[i] = (shard_tensor){&l.t[i], l.stored[i]};
    qsort(byname, l.n, sizeof *byname, cmp_shard_tensor);
    for (size_t i = 0; i < n; i++) {
        const char *name = dmuon_doc_map_key(d, wm, i);
        dmuon_tensor_spec kt = {.name = name};
        shard_tensor key = {&kt, NULL};
        shard_tensor *hit = bsearch(&key, byname, l.n, sizeof *byname, cmp_shard_tensor);
        const dmuon_tensor_spec *t = hit ? hit->t : NULL;
        if (!t) {
            rc = DMUON_FAIL(DMUON_ENOTFOUND, "%s: tensor '%s' is in 'weight_map' but not in the "
                                             "header of its shard '%s'",
                            path, name, dmuon_doc_str(dmuon_doc_map_value(d, wm, i)));
            goto out;
        }
        DMUON_TRY_GOTO(rc, dmuon_spec_add_stored(&ordered, t->name, t->dtype, hit->stored,
                                                 t->ndim, t->shape), out);
    }
    if (l.n != n) {
        rc = DMUON_FAIL(DMUON_EPARSE, "%s: the shards hold %zu tensors but 'weight_map' lists "
                                      "%zu", path, l.n, n);
        goto out;
    }
    DMUON_TRY_GOTO(rc, dmuon_model_new(path, "safetensors-index", ordered.t, ordered.stored,
                                       ordered.n, opts, out),
                   out);
out:
    dmuon_spec_list_release(&l);
    dmuon_spec_list_release(&ordered);
    free(shards);
    free(byname);
    free(dircopy);
    return rc;
}
