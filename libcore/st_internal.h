/*
 * st_internal.h — safetensors framing shared by the model inventories
 * (model_st.c) and the checkpoints (runtime/ckpt.c); not installed.
 *
 * Format (huggingface/safetensors): 8 bytes little-endian u64 header length
 * L, then L bytes of JSON: {"NAME": {"dtype": "BF16", "shape": [..],
 * "data_offsets": [BEGIN, END]}, ..., "__metadata__": {...}}, then the data.
 * BEGIN/END are byte offsets into the data part (which starts at 8 + L).
 */
#ifndef DMUON_ST_INTERNAL_H
#define DMUON_ST_INTERNAL_H

#include <stdint.h>
#include <stdio.h>

#include "dmuon/doc.h"
#include "dmuon/types.h"

#define DMUON_ST_MAX_HEADER (100u << 20)   /* bytes; the limit of the reference reader */
#define DMUON_ST_MAX_DIMS 8

/* One tensor entry of a header.  name points into the header's document. */
typedef struct {
    const char *name;
    dmuon_dtype dtype;
    int ndim;                          /* 0 (scalar) .. DMUON_ST_MAX_DIMS */
    int64_t shape[DMUON_ST_MAX_DIMS];  /* each > 0 */
    uint64_t begin, end;               /* data_offsets: bytes into the data part */
} dmuon_st_tensor;

/* A parsed header: the tensors in header order ("__metadata__" skipped; its
 * node is kept in meta, NULL when absent). */
typedef struct {
    dmuon_doc doc;
    yaml_node_t *meta;
    dmuon_st_tensor *t;                /* n entries (owned) */
    size_t n;
    uint64_t file_size;                /* bytes of the whole file */
    uint64_t header_len;               /* L */
    uint64_t data_start;               /* 8 + L */
} dmuon_st_header;

/* Reads and checks the header of the safetensors file open as f (read from
 * offset 0 with pread, so f's position is unused); path names the file in
 * messages.  Checks: the file holds the 8-byte length and the whole header;
 * 2 <= L <= DMUON_ST_MAX_HEADER; the header is a JSON object whose entries
 * are objects with a known dtype, a shape of positive integers (at most 8)
 * and data_offsets [begin, end] holding exactly the shape's bytes inside the
 * data part; no two tensors overlap.  Errors: DMUON_EIO (fstat/read), DMUON_EPARSE
 * (message "PATH: ..." naming the tensor and field), DMUON_ENOMEM.  On
 * success release h with dmuon_st_header_release; on failure h is released. */
dmuon_rc dmuon_st_header_read(FILE *f, const char *path, dmuon_st_header *h);

/* Frees h; accepts a zeroed or released header. */
void dmuon_st_header_release(dmuon_st_header *h);

/* Safetensors dtype name ("F32", "BF16", "F16", "F64", "I32", "I64", "U8"). */
const char *dmuon_st_dtype_name(dmuon_dtype t);

#endif
