/*
 * dmuon/types.h — small types shared by every part of libcore: element types
 * and the frozen segment table that the communication operators run over.
 */
#ifndef DMUON_TYPES_H
#define DMUON_TYPES_H

#include <stddef.h>
#include <stdint.h>

#include "dmuon/rc.h"

/* Element type of a tensor or a communication segment. */
typedef enum {
    DMUON_F32 = 0,   /* IEEE binary32, 4 bytes */
    DMUON_BF16,      /* bfloat16, 2 bytes (top half of binary32) */
    DMUON_F16,       /* IEEE binary16, 2 bytes */
    DMUON_F64,       /* IEEE binary64, 8 bytes */
    DMUON_I32,       /* 4-byte signed integer */
    DMUON_I64,       /* 8-byte signed integer */
    DMUON_U8,        /* 1-byte unsigned (also bool / fp8 storage) */
    DMUON_DTYPE_COUNT
} dmuon_dtype;

/* Bytes per element of t (0 for an invalid t). */
size_t dmuon_dtype_size(dmuon_dtype t);

/* Canonical lower-case name: "f32", "bf16", "f16", "f64", "i32", "i64", "u8". */
const char *dmuon_dtype_name(dmuon_dtype t);

/* Parses a name into *out.  Accepts the canonical names and the common
 * spellings: fp32/float32/F32, bf16/bfloat16/BF16, fp16/float16/F16,
 * fp64/float64/F64, int32/I32, int64/I64, uint8/U8/BOOL, F8_E4M3/F8_E5M2 (as
 * u8 storage).  Returns DMUON_EINVAL (message names the value) otherwise. */
dmuon_rc dmuon_dtype_parse(const char *name, dmuon_dtype *out);

/*
 * One segment of a layer's frozen segment table (paper §5, C.2).  A layer's
 * communication buffer is the same on every rank; segment i occupies bytes
 * [offset, offset + count * dtype_size) of it and belongs to `owner`.  In the
 * owner's window the same data sits at `window_offset` bytes.  Segments of a
 * table are in layer order and do not overlap.
 */
typedef struct {
    int32_t owner;           /* global rank in [0, N) */
    dmuon_dtype dtype;       /* element type of the data */
    int64_t offset;          /* bytes, into the layer buffer (same on all ranks) */
    int64_t count;           /* elements of dtype, > 0 */
    int64_t window_offset;   /* bytes, into the owner's window */
} dmuon_segment;

/* Parses a byte size in the tools' one grammar into *out: decimal digits,
 * an optional unit K/KB/KiB, M/MB/MiB, G/GB/GiB, T/TB/TiB in any case (all
 * powers of 1024: "16K" = "16KB" = "16KiB" = 16384), and an optional
 * "+N" bytes ("1M+1" = 1048577).  No sign, no fraction, no spaces.
 * Returns DMUON_OK, or DMUON_EINVAL when text is NULL, does not match or
 * overflows int64_t (the message quotes text and gives examples; *out is
 * unchanged). */
dmuon_rc dmuon_size_parse(const char *text, int64_t *out);

/* A 64-bit FNV-1a digest of len bytes, continuing from seed (use
 * DMUON_DIGEST_SEED to start).  A change detector for inputs and tables, not
 * a cryptographic hash.  Source: Fowler–Noll–Vo, FNV-1a 64-bit parameters. */
#define DMUON_DIGEST_SEED UINT64_C(0xcbf29ce484222325)
uint64_t dmuon_digest(const void *data, size_t len, uint64_t seed);

/* Writes digest as 16 lower-case hex digits plus NUL into out[17]. */
void dmuon_digest_hex(uint64_t digest, char out[17]);

#endif
