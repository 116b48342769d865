/*
 * model_st.c — inventories from safetensors headers: one .safetensors file,
 * or a model.safetensors.index.json and the shards its weight_map names.
 *
 * The header is read and checked by the project's one safetensors reader
 * (st.c, st_internal.h), allowing all the format allows: every shape entry
 * is a non-negative integer (zero-size tensors are valid safetensors); the
 * dtype is any the format defines (mapped to the dmuon storage type of the
 * same size, the stored name kept); data_offsets match the shape's byte
 * size and lie inside the file, unless the file ends right after its header
 * (a header-only copy: then the offsets must still match the sizes); no two
 * tensors overlap.  Only the first 8 + L bytes are read.  A scalar (shape
 * []) is recorded as shape [1].
 */
#include "model_internal.h"
#include "st_internal.h"

#include <errno.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Reads the header of one file (st.c, with everything the format allows:
 * zero-size dimensions, header-only files, every dtype) and appends its
 * tensors to l in header order. */
static dmuon_rc read_header(const char *path, dmuon_spec_list *l)
{
    dmuon_rc rc = DMUON_OK;
    dmuon_st_header h = {0};
    FILE *f = fopen(path, "rb");
    if (!f)
        return DMUON_FAIL(errno == ENOENT ? DMUON_ENOTFOUND : DMUON_EIO,
                          "cannot open safetensors file '%s': %s", path, strerror(errno));
    DMUON_TRY_GOTO(rc, dmuon_st_header_read(f, path, DMUON_ST_ZERO_DIMS | DMUON_ST_HEADER_ONLY |
                                                         DMUON_ST_ALL_DTYPES, &h),
                   out);
    for (size_t i = 0; i < h.n; i++) {
        const dmuon_st_tensor *t = &h.t[i];
        int64_t shape[DMUON_MODEL_MAX_DIMS] = {1};   /* a scalar is recorded as [1] */
        for (int k = 0; k < t->ndim; k++)
            shape[k] = t->shape[k];
        DMUON_TRY_GOTO(rc, dmuon_spec_add_stored(l, t->name, t->dtype, t->stored,
                                                 t->ndim ? t->ndim : 1, shape), out);
    }
out:
    dmuon_st_header_release(&h);
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
