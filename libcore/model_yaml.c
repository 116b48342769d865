/*
 * model_yaml.c — the project's own YAML inventory.
 *
 * Two forms:
 *   - a list:     - {name: NAME, shape: [d0, d1, ...], dtype: bf16}
 *   - a mapping:  {dtype: DEFAULT, muon: [PATTERNS], adamw: [PATTERNS],
 *                  tensors: [ the list above ]}
 * dtype is optional (default bf16).  Role patterns of the file come after
 * those of the caller's options, so command-line patterns win.
 */
#include "model_internal.h"

#include <stdlib.h>
#include <string.h>

static dmuon_rc read_patterns(dmuon_doc *d, yaml_node_t *root, const char *key,
                              const char *const *base, size_t nbase, const char ***out,
                              size_t *n)
{
    yaml_node_t *seq = dmuon_doc_get(d, root, key);
    size_t k = seq ? dmuon_doc_seq_len(seq) : 0;
    if (seq && seq->type != YAML_SEQUENCE_NODE)
        return DMUON_FAIL(DMUON_EPARSE, "%s:%d: field '%s': expected a list of name patterns",
                          d->name, dmuon_doc_line(seq), key);
    const char **p = malloc((nbase + k + 1) * sizeof *p);
    if (!p)
        return DMUON_FAIL(DMUON_ENOMEM, "out of memory");
    for (size_t i = 0; i < nbase; i++)
        p[i] = base[i];
    for (size_t i = 0; i < k; i++) {
        yaml_node_t *it = dmuon_doc_seq_at(d, seq, i);
        const char *s = dmuon_doc_str(it);
        if (!s || !*s) {
            free(p);
            return DMUON_FAIL(DMUON_EPARSE, "%s:%d: field '%s': item %zu: expected a pattern "
                                            "string", d->name, dmuon_doc_line(it), key, i + 1);
        }
        p[nbase + i] = s;
    }
    *out = p;
    *n = nbase + k;
    return DMUON_OK;
}

typedef struct {
    const char *name;
    size_t index;
    int line;
} named_item;

static int cmp_named(const void *x, const void *y)
{
    const named_item *a = x, *b = y;
    int c = strcmp(a->name, b->name);
    return c ? c : (a->index > b->index) - (a->index < b->index);
}

/* A duplicate tensor name is reported at its second occurrence's line. */
static dmuon_rc check_duplicates(dmuon_doc *d, yaml_node_t *list, const char *path)
{
    size_t n = dmuon_doc_seq_len(list);
    named_item *v = malloc((n ? n : 1) * sizeof *v);
    if (!v)
        return DMUON_FAIL(DMUON_ENOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) {
        yaml_node_t *it = dmuon_doc_seq_at(d, list, i);
        const char *name = NULL;
        dmuon_doc_field_str(d, it, "name", true, &name);   /* checked by the caller */
        v[i] = (named_item){name ? name : "", i, dmuon_doc_line(it)};
    }
    qsort(v, n, sizeof *v, cmp_named);
    for (size_t i = 1; i < n; i++)
        if (!strcmp(v[i].name, v[i - 1].name)) {
            dmuon_rc rc = DMUON_FAIL(DMUON_EPARSE, "%s: duplicate tensor name '%s' at line %d "
                                                   "(first at line %d)",
                                     path, v[i].name, v[i].line, v[i - 1].line);
            free(v);
            return rc;
        }
    free(v);
    return DMUON_OK;
}

dmuon_rc dmuon_model_load_yaml(const char *path, const dmuon_model_opts *opts, dmuon_model **out)
{
    dmuon_rc rc = DMUON_OK;
    dmuon_doc d;
    dmuon_spec_list l = {0};
    dmuon_model_opts o = {0};
    const char **muon = NULL, **adamw = NULL;
    if (opts)
        o = *opts;
    DMUON_TRY(dmuon_doc_load_file(&d, path));
    yaml_node_t *root = dmuon_doc_root(&d), *list = root;
    dmuon_dtype def = DMUON_BF16;
    if (root && root->type == YAML_MAPPING_NODE && dmuon_doc_get(&d, root, "dmuon_plan")) {
        rc = DMUON_FAIL(DMUON_EINVAL, "'%s' is a dmuon plan file, not a model inventory: read "
                        "it with dmuon-plan show %s (or check it with dmuon-verify --plan)",
                        path, path);
        goto out;
    }
    if (root && root->type == YAML_MAPPING_NODE) {
        const char *dts = NULL, *rs = NULL;
        DMUON_TRY_GOTO(rc, dmuon_doc_only_keys(&d, root, "the inventory",
                                               (const char *const[]){"dtype", "muon", "adamw",
                                                                     "tensors", "root", NULL}),
                       out);
        /* the caller's choice wins over the file's (dmuon/model.h) */
        DMUON_TRY_GOTO(rc, dmuon_doc_field_str(&d, root, "root", false, &rs), out);
        if (rs && o.root == DMUON_ROOT_AUTO && dmuon_root_mode_parse(rs, &o.root) != DMUON_OK) {
            rc = DMUON_FAIL(DMUON_EPARSE, "%s: field 'root': '%s': expected auto, one or split "
                            "(split: the list is in forward order and no tensor outside the "
                            "blocks is used at both ends)", path, rs);
            goto out;
        }
        DMUON_TRY_GOTO(rc, dmuon_doc_field_str(&d, root, "dtype", false, &dts), out);
        if (dts && dmuon_dtype_parse(dts, &def) != DMUON_OK) {
            rc = DMUON_FAIL(DMUON_EPARSE, "%s: field 'dtype': unknown element type '%s'", path,
                            dts);
            goto out;
        }
        DMUON_TRY_GOTO(rc, read_patterns(&d, root, "muon", o.muon, o.n_muon, &muon, &o.n_muon),
                       out);
        DMUON_TRY_GOTO(rc, read_patterns(&d, root, "adamw", o.adamw, o.n_adamw, &adamw,
                                         &o.n_adamw), out);
        o.muon = muon;
        o.adamw = adamw;
        list = dmuon_doc_get(&d, root, "tensors");
        if (!list) {
            rc = DMUON_FAIL(DMUON_ENOTFOUND, "%s:%d: missing required field 'tensors'", path,
                            dmuon_doc_line(root));
            goto out;
        }
    }
    if (!list || list->type != YAML_SEQUENCE_NODE || dmuon_doc_seq_len(list) == 0) {
        rc = DMUON_FAIL(DMUON_EPARSE, "%s:%d: expected a non-empty list of {name, shape} items "
                                      "(or a mapping with 'tensors')",
                        path, dmuon_doc_line(list));
        goto out;
    }
    for (size_t i = 0; i < dmuon_doc_seq_len(list); i++) {
        yaml_node_t *it = dmuon_doc_seq_at(&d, list, i);
        if (!it || it->type != YAML_MAPPING_NODE) {
            rc = DMUON_FAIL(DMUON_EPARSE, "%s:%d: item %zu: expected {name, shape}", path,
                            dmuon_doc_line(it), i + 1);
            goto out;
        }
        const char *name, *dts = NULL;
        DMUON_TRY_GOTO(rc, dmuon_doc_only_keys(&d, it, "a tensor",
                                               (const char *const[]){"name", "shape", "dtype",
                                                                     NULL}),
                       out);
        DMUON_TRY_GOTO(rc, dmuon_doc_field_str(&d, it, "name", true, &name), out);
        DMUON_TRY_GOTO(rc, dmuon_doc_field_str(&d, it, "dtype", false, &dts), out);
        dmuon_dtype dt = def;
        if (dts && dmuon_dtype_parse(dts, &dt) != DMUON_OK) {
            rc = DMUON_FAIL(DMUON_EPARSE, "%s:%d: field 'dtype': unknown element type '%s'", path,
                            dmuon_doc_line(it), dts);
            goto out;
        }
        yaml_node_t *sh = dmuon_doc_get(&d, it, "shape");
        size_t nd = dmuon_doc_seq_len(sh);
        if (!sh || sh->type != YAML_SEQUENCE_NODE || nd == 0 || nd > DMUON_MODEL_MAX_DIMS) {
            rc = DMUON_FAIL(DMUON_EPARSE,
                            "%s:%d: tensor '%s': field 'shape': expected a list of 1 to %d "
                            "positive integers",
                            path, dmuon_doc_line(sh ? sh : it), name, DMUON_MODEL_MAX_DIMS);
            goto out;
        }
        int64_t shape[DMUON_MODEL_MAX_DIMS];
        for (size_t k = 0; k < nd; k++) {
            yaml_node_t *v = dmuon_doc_seq_at(&d, sh, k);
            DMUON_TRY_GOTO(rc, dmuon_doc_to_int(&d, v, "shape", &shape[k]), out);
            if (shape[k] <= 0) {
                rc = DMUON_FAIL(DMUON_EPARSE,
                                "%s:%d: tensor '%s': field 'shape': dimension %zu is %lld, "
                                "expected a positive integer",
                                path, dmuon_doc_line(v), name, k, (long long)shape[k]);
                goto out;
            }
        }
        DMUON_TRY_GOTO(rc, dmuon_spec_add(&l, name, dt, (int)nd, shape), out);
    }
    DMUON_TRY_GOTO(rc, check_duplicates(&d, list, path), out);
    DMUON_TRY_GOTO(rc, dmuon_model_new(path, "yaml", l.t, l.stored, l.n, &o, out), out);
out:
    free(muon);
    free(adamw);
    dmuon_spec_list_release(&l);
    dmuon_doc_release(&d);
    return rc;
}
