/*
 * plan_internal.h — the plan struct and the pieces shared by plan*.c and
 * assign.c (not installed).
 */
#ifndef DMUON_PLAN_INTERNAL_H
#define DMUON_PLAN_INTERNAL_H

#include "dmuon/plan.h"

struct dmuon_plan {
    dmuon_plan_opts opts;        /* string fields point into strs below */
    char *strs[8];               /* owned copies of option strings */
    int32_t ranks;
    char cost_source[320];
    char model_format[32];
    uint64_t model_digest, cost_digest, options_digest;
    uint64_t rec_units_digest, rec_segments_digest;  /* as recorded in a loaded file */
    dmuon_plan_report rec_report;                    /* its summary, as recorded */
    bool loaded;

    dmuon_plan_param *params;
    size_t nparams;
    char **layer_names;
    int64_t *layer_bytes;
    size_t nlayers;

    dmuon_plan_unit *units;
    size_t nunits;
    bool *fallback;              /* per unit: placed over the cap, nothing fitted */
    int32_t *leaders;            /* HSDP: nunits * nodes ranks, else NULL */
    dmuon_plan_member *members;
    size_t nmembers;

    dmuon_segment *segs;
    size_t nsegs;
    size_t *layer_seg;           /* nlayers + 1 prefix offsets into segs */

    int64_t *window;             /* per rank: owner window bytes */
    dmuon_plan_report report;
};

/* Item of an assignment run. */
typedef struct {
    double cost;
    int64_t bytes;
    int64_t elements;
    int32_t layer;
    const char *name;
} dmuon_assign_item;

/* Assigns n items to nbins bins with the LPT rule of dmuon/plan.h: items
 * sorted by cost desc, elements desc, name; layer spreading by rounds when
 * spread; cap in bytes (cap < 0: no cap).  Writes bin[i] in [0, nbins) and
 * fallback[i] (true where no candidate fitted the cap).  Errors:
 * DMUON_ENOMEM. */
dmuon_rc dmuon_assign_lpt(const dmuon_assign_item *items, size_t n, int32_t nbins, double cap,
                          bool spread, int32_t *bin, bool *fallback);

/* Improves an assignment bin[0..n) of items to nbins bins in place by the
 * local search of assign.c: moves and swaps that lower the busiest bin's
 * cost, keeping the byte cap (cap < 0: none), layer spreading (when spread)
 * and, with columns > 1 (bin b in column b % columns), a rail phase first
 * that lowers the heaviest column's bytes without raising the busiest bin's
 * cost, after which no column's bytes rise above the heaviest.  Items with
 * fixed[i] set (placed over the cap) stay.  Deterministic; the work is
 * bounded.  Errors: DMUON_ENOMEM, DMUON_EINVAL (over 2^30 items). */
dmuon_rc dmuon_assign_improve(const dmuon_assign_item *items, size_t n, int32_t nbins,
                              int32_t columns, double cap, bool spread, const bool *fixed,
                              int32_t *bin);

/* Owners for all units per the plan's options (strategy, sharding, column
 * balancing); fills p->units[i].owner/node/column and p->fallback. */
dmuon_rc dmuon_plan_assign_owners(dmuon_plan *p);

/* Lays out windows, segment tables, leaders, digests and the report from the
 * units' owners.  Errors: DMUON_ENOMEM. */
dmuon_rc dmuon_plan_finish(dmuon_plan *p);

/* The balance report from units, windows and fallback flags. */
dmuon_rc dmuon_plan_compute_report(dmuon_plan *p);

/* Digests over the units (owners included; with the matrix placement of
 * the parameters that are transposed or strided) and over the segment
 * tables. */
uint64_t dmuon_plan_units_digest(const dmuon_plan *p);
uint64_t dmuon_plan_segments_digest(const dmuon_plan *p);

/* Digest of the planning options (cluster, strategy, switches, epsilon as
 * written with 15 significant digits, small_unit_bytes, param_dtype). */
uint64_t dmuon_plan_options_digest(const dmuon_plan_opts *o);

/* Window offsets of the units (owner's units in id order) and p->window.
 * Errors: DMUON_ENOMEM. */
dmuon_rc dmuon_plan_layout_windows(dmuon_plan *p);

/* Frozen segment tables from the units (owners, window offsets, members):
 * fills p->segs, p->nsegs and p->layer_seg.  Errors: DMUON_ENOMEM. */
dmuon_rc dmuon_plan_layout_segments(dmuon_plan *p);

/* Text of the cost source for the report. */
void dmuon_plan_describe_cost(dmuon_plan *p);

#endif
