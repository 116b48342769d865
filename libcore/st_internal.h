/*
 * st_internal.h — safetensors framing shared by the model inventories
 * (model_st.c) and the checkpoints (runtime/ckpt.c): the one header reader
 * of the project; not installed.
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

/* Flags of dmuon_st_header_read: what a reader accepts beyond the default
 * (the checkpoints' rules: every dimension > 0, dmuon's own types, the data
 * present). */
#define DMUON_ST_ZERO_DIMS 1u     /* dimensions of 0 (tensors of no element,
                                     data_offsets [b, b]) */
#define DMUON_ST_HEADER_ONLY 2u   /* a file that ends right after its header
                                     (a header-only copy): data_offsets must
                                     still hold exactly each tensor's bytes,
                                     but need not lie inside the file */
#define DMUON_ST_ALL_DTYPES 4u    /* every dtype of the format: also those
                                     dmuon stores as another type of the same
                                     size (U64 -> I64, U32 -> I32, I16/U16 ->
                                     F16, I8/BOOL/F8_E4M3/F8_E5M2/F8_E8M0 ->
                                     U8); without it only F64, F32, F16, BF16,
                                     I64, I32 and U8 */

/* One tensor entry of a header.  name points into the header's document. */
typedef struct {
    const char *name;
    dmuon_dtype dtype;                 /* dmuon storage type of the same size */
    const char *stored;                /* the dtype as the file spells it ("BF16",
                                          "F8_E4M3", ...; static string) */
    int ndim;                          /* 0 (scalar) .. DMUON_ST_MAX_DIMS */
    int64_t shape[DMUON_ST_MAX_DIMS];  /* each > 0 (>= 0 with DMUON_ST_ZERO_DIMS) */
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
 * messages; flags are DMUON_ST_* above (0: the strict checkpoint rules).
 * Checks: the file holds the 8-byte length and the whole header;
 * 2 <= L <= DMUON_ST_MAX_HEADER; the header is a JSON object whose entries
 * are objects with a dtype the format defines (see DMUON_ST_ALL_DTYPES), a
 * shape of positive integers (non-negative with DMUON_ST_ZERO_DIMS; at most
 * 8) and data_offsets [begin, end] holding exactly the shape's bytes inside
 * the data part (with DMUON_ST_HEADER_ONLY and no data part: anywhere); no
 * two tensors that hold bytes overlap.  Errors: DMUON_EIO (fstat/read),
 * DMUON_EPARSE (message "PATH: ..." naming the tensor and field),
 * DMUON_ENOMEM.  On success release h with dmuon_st_header_release; on
 * failure h is released. */
dmuon_rc dmuon_st_header_read(FILE *f, const char *path, unsigned flags, dmuon_st_header *h);

/* Frees h; accepts a zeroed or released header. */
void dmuon_st_header_release(dmuon_st_header *h);

/* Safetensors dtype name of a dmuon type ("F32", "BF16", "F16", "F64",
 * "I32", "I64", "U8"). */
const char *dmuon_st_dtype_name(dmuon_dtype t);

#endif
