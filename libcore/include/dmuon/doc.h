/*
 * dmuon/doc.h — YAML and JSON documents through libyaml.
 *
 * A dmuon_doc holds one parsed document (libyaml's node graph) plus the name
 * of the file it came from, so every typed getter can fail with a message of
 * the form  "FILE:LINE: field 'KEY': expected WHAT, got 'VALUE'".
 * JSON is read by the same parser (JSON is YAML flow syntax).  Lines are
 * 1-based.  Nodes are libyaml's yaml_node_t; NULL stands for "absent".
 */
#ifndef DMUON_DOC_H
#define DMUON_DOC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <yaml.h>

#include "dmuon/rc.h"

typedef struct {
    yaml_document_t ydoc;
    char *name;      /* file name used in messages (owned) */
    bool loaded;
} dmuon_doc;

/* Parses the first document of the file at path ("-": standard input, named
 * "(stdin)" in messages).  Errors: DMUON_EINVAL (path is a directory),
 * DMUON_ENOTFOUND (no such file), DMUON_EIO (cannot open/read), DMUON_EPARSE (syntax; message gives line and column, or an
 * empty file, or content after the document, or a mapping with the same
 * key twice: "FILE:LINE: duplicate key 'K' (first at line L)", with columns
 * when both are on one line).  On success release with dmuon_doc_release. */
dmuon_rc dmuon_doc_load_file(dmuon_doc *doc, const char *path);

/* Parses len bytes of buf; name is used in messages.  Errors as above. */
dmuon_rc dmuon_doc_load_buffer(dmuon_doc *doc, const char *name, const char *buf, size_t len);

/* Frees the document; accepts a zeroed or released doc. */
void dmuon_doc_release(dmuon_doc *doc);

/* Root node, or NULL for an empty document. */
yaml_node_t *dmuon_doc_root(dmuon_doc *doc);

/* 1-based line of node (0 for NULL). */
int dmuon_doc_line(const yaml_node_t *node);

/* Node behind an index (NULL if out of range). */
yaml_node_t *dmuon_doc_node(dmuon_doc *doc, int index);

/* Value of key in a mapping node; NULL if map is not a mapping or lacks key. */
yaml_node_t *dmuon_doc_get(dmuon_doc *doc, yaml_node_t *map, const char *key);

/* Scalar text of node (NUL-terminated by libyaml), or NULL if not a scalar. */
const char *dmuon_doc_str(const yaml_node_t *node);

/* True if node is a plain scalar null ("null", "~" or empty) or NULL. */
bool dmuon_doc_is_null(const yaml_node_t *node);

/* Number of items of a sequence node (0 for any other node). */
size_t dmuon_doc_seq_len(const yaml_node_t *seq);

/* Item i of a sequence node. */
yaml_node_t *dmuon_doc_seq_at(dmuon_doc *doc, yaml_node_t *seq, size_t i);

/* Number of pairs of a mapping node (0 for any other node). */
size_t dmuon_doc_map_len(const yaml_node_t *map);

/* Key text and value node of pair i of a mapping (key NULL if not scalar). */
const char *dmuon_doc_map_key(dmuon_doc *doc, yaml_node_t *map, size_t i);
yaml_node_t *dmuon_doc_map_value(dmuon_doc *doc, yaml_node_t *map, size_t i);

/* Every key of map must be one of keys[] (NULL-terminated): an unknown key
 * is a typo or an edit that would otherwise be ignored silently.  where
 * names the mapping in the message.  Errors: DMUON_EPARSE "FILE:LINE:
 * unknown key 'K' in WHERE (expected A, B, ...)". */
dmuon_rc dmuon_doc_only_keys(dmuon_doc *doc, yaml_node_t *map, const char *where,
                             const char *const *keys);

/* Typed field getters on a mapping.  When the key is absent: if required,
 * DMUON_ENOTFOUND ("FILE:LINE: missing required field 'KEY'"); otherwise
 * DMUON_OK with *out unchanged.  A present value of the wrong form is
 * DMUON_EPARSE naming file, line, field, what was expected and what was
 * found.  Strings returned point into the document (valid until release). */
dmuon_rc dmuon_doc_field_int(dmuon_doc *doc, yaml_node_t *map, const char *key, bool required,
                             int64_t *out);
dmuon_rc dmuon_doc_field_double(dmuon_doc *doc, yaml_node_t *map, const char *key,
                                bool required, double *out);
dmuon_rc dmuon_doc_field_bool(dmuon_doc *doc, yaml_node_t *map, const char *key, bool required,
                              bool *out);
dmuon_rc dmuon_doc_field_str(dmuon_doc *doc, yaml_node_t *map, const char *key, bool required,
                             const char **out);

/* Scalar conversions used by the getters; what names the field in messages. */
dmuon_rc dmuon_doc_to_int(dmuon_doc *doc, yaml_node_t *node, const char *what, int64_t *out);
dmuon_rc dmuon_doc_to_double(dmuon_doc *doc, yaml_node_t *node, const char *what, double *out);

#endif
