/*
 * dmuon/segshape.h — generated segment tables for tests and benchmarks (the
 * real ones come from plan files).  All generators are deterministic: the
 * same arguments give the same table on every rank.
 */
#ifndef DMUON_SEGSHAPE_H
#define DMUON_SEGSHAPE_H

#include <stdint.h>

#include "dmuon/types.h"

typedef enum {
    DMUON_SEGSHAPE_NODE = 0,  /* one owner per node (rank r·K + r mod K), lengths
                               cycling 1:2:3 — the benchmark shape of paper D.3 */
    DMUON_SEGSHAPE_RANK,      /* one segment per rank, lengths cycling 1:2:3 */
    DMUON_SEGSHAPE_SPARSE,    /* 7 segments on 3 owners (ranks N−1, 0, N/2), some
                               owners holding several segments at successive
                               window offsets; other nodes own nothing */
    DMUON_SEGSHAPE_TINY,      /* one segment per rank of 1..K−1 elements (≥ 1),
                               so some rails carry nothing */
    DMUON_SEGSHAPE_COUNT
} dmuon_segshape;

/* Name ("node", "rank", "sparse", "tiny") and parser (DMUON_EINVAL naming
 * the value and the choices). */
const char *dmuon_segshape_name(dmuon_segshape l);
dmuon_rc dmuon_segshape_parse(const char *name, dmuon_segshape *out);

/* Builds a table of about total_bytes (rounded down to whole elements; each
 * segment at least one element) of element type dt for R nodes × K ranks.
 * *segs is malloc'ed (free it).  Errors: DMUON_EINVAL (R, K < 1, total
 * smaller than one element, unknown layout or dtype), DMUON_ENOMEM. */
dmuon_rc dmuon_segshape_make(dmuon_segshape l, int64_t total_bytes, dmuon_dtype dt, int nodes,
                           int per_node, dmuon_segment **segs, int *n);

#endif
