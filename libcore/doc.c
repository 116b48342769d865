/*
 * doc.c — libyaml document loading and typed field access (see dmuon/doc.h).
 *
 * Invariant: every error message starts with "FILE:LINE:" of the offending
 * node (or the parser's mark), so a user can jump to it.
 */
#include "dmuon/doc.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ------------------------------------------------------------------ load -- */

typedef struct {
    const char *key;
    const yaml_node_t *node;
} key_ref;

static int cmp_key(const void *a, const void *b)
{
    const key_ref *x = a, *y = b;
    int c = strcmp(x->key, y->key);
    if (c)
        return c;
    /* then by position, so the first of equal keys comes first */
    return x->node->start_mark.index < y->node->start_mark.index ? -1
           : x->node->start_mark.index > y->node->start_mark.index;
}

/* Refuses a mapping that holds one scalar key twice: YAML and JSON readers
 * disagree on which value wins (libyaml keeps both, dmuon's lookups took the
 * first, PyYAML and Python's json the last), so two programs would read two
 * different documents.  Reports the repeat that comes first in the file,
 * with the lines (and columns, for one-line JSON) of both. */
static dmuon_rc check_duplicate_keys(dmuon_doc *doc)
{
    key_ref *refs = NULL;
    size_t cap = 0;
    const yaml_node_t *best_a = NULL, *best_b = NULL;
    const char *best_key = NULL;
    for (yaml_node_t *n = doc->ydoc.nodes.start; n < doc->ydoc.nodes.top; n++) {
        if (n->type != YAML_MAPPING_NODE)
            continue;
        size_t k = 0, len = (size_t)(n->data.mapping.pairs.top - n->data.mapping.pairs.start);
        if (len < 2)
            continue;
        if (len > cap) {
            key_ref *r = realloc(refs, len * sizeof *r);
            if (!r) {
                free(refs);
                return DMUON_FAIL(DMUON_ENOMEM, "out of memory reading '%s'", doc->name);
            }
            refs = r;
            cap = len;
        }
        for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top;
             p++) {
            yaml_node_t *kn = yaml_document_get_node(&doc->ydoc, p->key);
            if (kn && kn->type == YAML_SCALAR_NODE)
                refs[k++] = (key_ref){(const char *)kn->data.scalar.value, kn};
        }
        qsort(refs, k, sizeof *refs, cmp_key);
        for (size_t i = 1; i < k; i++)
            if (!strcmp(refs[i - 1].key, refs[i].key) &&
                (!best_b || refs[i].node->start_mark.index < best_b->start_mark.index)) {
                /* the earliest occurrence of this key and its first repeat */
                size_t j = i - 1;
                while (j > 0 && !strcmp(refs[j - 1].key, refs[i].key))
                    j--;
                best_a = refs[j].node;
                best_b = refs[i].node;
                best_key = refs[i].key;
            }
    }
    dmuon_rc rc = DMUON_OK;
    if (best_b) {
        size_t la = best_a->start_mark.line + 1, lb = best_b->start_mark.line + 1;
        if (la != lb)
            rc = DMUON_FAIL(DMUON_EPARSE, "%s:%zu: duplicate key '%.80s' (first at line %zu): "
                            "readers disagree on which value counts; keep one", doc->name, lb,
                            best_key, la);
        else
            rc = DMUON_FAIL(DMUON_EPARSE, "%s:%zu:%zu: duplicate key '%.80s' (first at line "
                            "%zu, column %zu): readers disagree on which value counts; keep one",
                            doc->name, lb, best_b->start_mark.column + 1, best_key, la,
                            best_a->start_mark.column + 1);
    }
    free(refs);
    return rc;
}

static dmuon_rc parser_fail(const yaml_parser_t *p, const char *name)
{
    const char *problem = p->problem ? p->problem : "syntax error";
    size_t line = p->problem_mark.line + 1, col = p->problem_mark.column + 1;
    if (p->context)
        return DMUON_FAIL(DMUON_EPARSE, "%s:%zu:%zu: %s %s", name, line, col, problem, p->context);
    return DMUON_FAIL(DMUON_EPARSE, "%s:%zu:%zu: %s", name, line, col, problem);
}

dmuon_rc dmuon_doc_load_buffer(dmuon_doc *doc, const char *name, const char *buf, size_t len)
{
    yaml_parser_t parser;
    dmuon_rc rc = DMUON_OK;
    memset(doc, 0, sizeof *doc);
    doc->name = strdup(name ? name : "(buffer)");
    if (!doc->name)
        return DMUON_FAIL(DMUON_ENOMEM, "out of memory reading '%s'", name);
    if (!yaml_parser_initialize(&parser)) {
        rc = DMUON_FAIL(DMUON_ENOMEM, "cannot start the YAML parser for '%s'", name);
        goto out;
    }
    yaml_parser_set_input_string(&parser, (const unsigned char *)buf, len);
    if (!yaml_parser_load(&parser, &doc->ydoc)) {
        rc = parser_fail(&parser, doc->name);
        yaml_parser_delete(&parser);
        goto out;
    }
    doc->loaded = true;
    if (!yaml_document_get_root_node(&doc->ydoc)) {
        yaml_parser_delete(&parser);
        rc = DMUON_FAIL(DMUON_EPARSE, "%s: empty document", doc->name);
        goto out;
    }
    /* Anything after the first document (a second document, or trailing
     * text after a JSON object) is an error, not silently ignored. */
    yaml_document_t next;
    if (!yaml_parser_load(&parser, &next)) {
        rc = parser_fail(&parser, doc->name);
        yaml_parser_delete(&parser);
        goto out;
    }
    bool more = yaml_document_get_root_node(&next) != NULL;
    int line = more ? (int)next.start_mark.line + 1 : 0;
    yaml_document_delete(&next);
    yaml_parser_delete(&parser);
    if (more) {
        rc = DMUON_FAIL(DMUON_EPARSE, "%s:%d: unexpected content after the end of the document",
                        doc->name, line);
        goto out;
    }
    if ((rc = check_duplicate_keys(doc)) != DMUON_OK)
        goto out;
    return DMUON_OK;
out:
    dmuon_doc_release(doc);
    return rc;
}

dmuon_rc dmuon_doc_load_file(dmuon_doc *doc, const char *path)
{
    bool std_in = !strcmp(path, "-");
    struct stat st;
    char *buf = NULL;
    size_t len = 0, cap = 0;
    dmuon_rc rc;
    memset(doc, 0, sizeof *doc);
    if (!std_in && stat(path, &st) == 0 && S_ISDIR(st.st_mode))
        return DMUON_FAIL(DMUON_EINVAL, "'%s' is a directory, expected a file", path);
    FILE *f = std_in ? stdin : fopen(path, "rb");
    if (!f)
        return DMUON_FAIL(errno == ENOENT ? DMUON_ENOTFOUND : DMUON_EIO, "cannot open '%s': %s",
                          path, strerror(errno));
    for (;;) {
        if (len == cap) {
            size_t ncap = cap ? cap * 2 : 65536;
            char *nbuf = realloc(buf, ncap);
            if (!nbuf) {
                if (!std_in)
                    fclose(f);
                free(buf);
                return DMUON_FAIL(DMUON_ENOMEM, "out of memory reading '%s'", path);
            }
            buf = nbuf;
            cap = ncap;
        }
        size_t got = fread(buf + len, 1, cap - len, f);
        len += got;
        if (got == 0)
            break;
    }
    if (ferror(f)) {
        if (!std_in)
            fclose(f);
        free(buf);
        return DMUON_FAIL(DMUON_EIO, "cannot read '%s': %s", path, strerror(errno));
    }
    if (!std_in)
        fclose(f);
    rc = dmuon_doc_load_buffer(doc, std_in ? "(stdin)" : path, buf, len);
    free(buf);
    return rc;
}

void dmuon_doc_release(dmuon_doc *doc)
{
    if (!doc)
        return;
    if (doc->loaded)
        yaml_document_delete(&doc->ydoc);
    free(doc->name);
    memset(doc, 0, sizeof *doc);
}

/* ---------------------------------------------------------------- access -- */

yaml_node_t *dmuon_doc_root(dmuon_doc *doc)
{
    return doc->loaded ? yaml_document_get_root_node(&doc->ydoc) : NULL;
}

int dmuon_doc_line(const yaml_node_t *node) { return node ? (int)node->start_mark.line + 1 : 0; }

yaml_node_t *dmuon_doc_node(dmuon_doc *doc, int index)
{
    return yaml_document_get_node(&doc->ydoc, index);
}

const char *dmuon_doc_str(const yaml_node_t *node)
{
    return (node && node->type == YAML_SCALAR_NODE) ? (const char *)node->data.scalar.value : NULL;
}

bool dmuon_doc_is_null(const yaml_node_t *node)
{
    if (!node)
        return true;
    if (node->type != YAML_SCALAR_NODE || node->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
        return false;
    const char *s = dmuon_doc_str(node);
    return !*s || !strcmp(s, "null") || !strcmp(s, "~") || !strcmp(s, "Null") || !strcmp(s, "NULL");
}

yaml_node_t *dmuon_doc_get(dmuon_doc *doc, yaml_node_t *map, const char *key)
{
    if (!map || map->type != YAML_MAPPING_NODE)
        return NULL;
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top; p++) {
        const char *k = dmuon_doc_str(dmuon_doc_node(doc, p->key));
        if (k && !strcmp(k, key))
            return dmuon_doc_node(doc, p->value);
    }
    return NULL;
}

size_t dmuon_doc_seq_len(const yaml_node_t *seq)
{
    if (!seq || seq->type != YAML_SEQUENCE_NODE)
        return 0;
    return (size_t)(seq->data.sequence.items.top - seq->data.sequence.items.start);
}

yaml_node_t *dmuon_doc_seq_at(dmuon_doc *doc, yaml_node_t *seq, size_t i)
{
    if (i >= dmuon_doc_seq_len(seq))
        return NULL;
    return dmuon_doc_node(doc, seq->data.sequence.items.start[i]);
}

size_t dmuon_doc_map_len(const yaml_node_t *map)
{
    if (!map || map->type != YAML_MAPPING_NODE)
        return 0;
    return (size_t)(map->data.mapping.pairs.top - map->data.mapping.pairs.start);
}

const char *dmuon_doc_map_key(dmuon_doc *doc, yaml_node_t *map, size_t i)
{
    if (i >= dmuon_doc_map_len(map))
        return NULL;
    return dmuon_doc_str(dmuon_doc_node(doc, map->data.mapping.pairs.start[i].key));
}

dmuon_rc dmuon_doc_only_keys(dmuon_doc *doc, yaml_node_t *map, const char *where,
                             const char *const *keys)
{
    for (size_t i = 0; i < dmuon_doc_map_len(map); i++) {
        const char *k = dmuon_doc_map_key(doc, map, i);
        bool known = false;
        for (size_t j = 0; k && keys[j] && !known; j++)
            known = !strcmp(k, keys[j]);
        if (!known) {
            char list[512];
            size_t len = 0;
            for (size_t j = 0; keys[j] && len < sizeof list; j++)
                len += (size_t)snprintf(list + len, sizeof list - len, "%s%s", j ? ", " : "",
                                        keys[j]);
            return DMUON_FAIL(DMUON_EPARSE, "%s:%d: unknown key '%.80s' in %s (expected %s)",
                              doc->name, dmuon_doc_line(dmuon_doc_map_value(doc, map, i)),
                              k ? k : "(not a string)", where, list);
        }
    }
    return DMUON_OK;
}

yaml_node_t *dmuon_doc_map_value(dmuon_doc *doc, yaml_node_t *map, size_t i)
{
    if (i >= dmuon_doc_map_len(map))
        return NULL;
    return dmuon_doc_node(doc, map->data.mapping.pairs.start[i].value);
}

/* ----------------------------------------------------------- conversions -- */

static dmuon_rc wrong(dmuon_doc *doc, yaml_node_t *node, const char *what, const char *expected)
{
    const char *s = dmuon_doc_str(node);
    const char *found = s ? s : (node && node->type == YAML_SEQUENCE_NODE) ? "a list"
                                : (node && node->type == YAML_MAPPING_NODE) ? "a mapping" : "nothing";
    return DMUON_FAIL(DMUON_EPARSE, "%s:%d: field '%s': expected %s, got '%.60s'", doc->name,
                      dmuon_doc_line(node), what, expected, found);
}

/* A quoted scalar ("1536" in JSON, '1536' in YAML) is a string. */
static bool quoted(const yaml_node_t *node)
{
    return node && node->type == YAML_SCALAR_NODE &&
           node->data.scalar.style != YAML_PLAIN_SCALAR_STYLE;
}

dmuon_rc dmuon_doc_to_int(dmuon_doc *doc, yaml_node_t *node, const char *what, int64_t *out)
{
    const char *s = dmuon_doc_str(node);
    char *end;
    if (!s || !*s || quoted(node))
        return wrong(doc, node, what, "an integer (unquoted)");
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end)
        return wrong(doc, node, what, "an integer");
    *out = v;
    return DMUON_OK;
}

dmuon_rc dmuon_doc_to_double(dmuon_doc *doc, yaml_node_t *node, const char *what, double *out)
{
    const char *s = dmuon_doc_str(node);
    char *end;
    if (!s || !*s || quoted(node))
        return wrong(doc, node, what, "a number (unquoted)");
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end || !isfinite(v))
        return wrong(doc, node, what, "a finite number");
    *out = v;
    return DMUON_OK;
}

static dmuon_rc field(dmuon_doc *doc, yaml_node_t *map, const char *key, bool required,
                      yaml_node_t **node)
{
    *node = dmuon_doc_get(doc, map, key);
    if (!*node && required)
        return DMUON_FAIL(DMUON_ENOTFOUND, "%s:%d: missing required field '%s'", doc->name,
                          dmuon_doc_line(map), key);
    return DMUON_OK;
}

dmuon_rc dmuon_doc_field_int(dmuon_doc *doc, yaml_node_t *map, const char *key, bool required,
                             int64_t *out)
{
    yaml_node_t *n;
    DMUON_TRY(field(doc, map, key, required, &n));
    return n ? dmuon_doc_to_int(doc, n, key, out) : DMUON_OK;
}

dmuon_rc dmuon_doc_field_double(dmuon_doc *doc, yaml_node_t *map, const char *key,
                                bool required, double *out)
{
    yaml_node_t *n;
    DMUON_TRY(field(doc, map, key, required, &n));
    return n ? dmuon_doc_to_double(doc, n, key, out) : DMUON_OK;
}

dmuon_rc dmuon_doc_field_bool(dmuon_doc *doc, yaml_node_t *map, const char *key, bool required,
                              bool *out)
{
    yaml_node_t *n;
    DMUON_TRY(field(doc, map, key, required, &n));
    if (!n)
        return DMUON_OK;
    const char *s = quoted(n) ? NULL : dmuon_doc_str(n);
    if (s && (!strcmp(s, "true") || !strcmp(s, "True") || !strcmp(s, "yes"))) {
        *out = true;
        return DMUON_OK;
    }
    if (s && (!strcmp(s, "false") || !strcmp(s, "False") || !strcmp(s, "no"))) {
        *out = false;
        return DMUON_OK;
    }
    return wrong(doc, n, key, "true or false");
}

dmuon_rc dmuon_doc_field_str(dmuon_doc *doc, yaml_node_t *map, const char *key, bool required,
                             const char **out)
{
    yaml_node_t *n;
    DMUON_TRY(field(doc, map, key, required, &n));
    if (!n)
        return DMUON_OK;
    if (!dmuon_doc_str(n))
        return wrong(doc, n, key, "a string");
    *out = dmuon_doc_str(n);
    return DMUON_OK;
}
