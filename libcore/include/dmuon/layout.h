/*
 * dmuon/layout.h — where everything of one rank lies, computed from the
 * plan alone (paper §6, C.1): a pure function of (plan, line, ZeRO stage,
 * rank, prefetch depth, backend, owner parts); the parameter dtype is the
 * plan's.  The
 * runtime executes it, dmuon-plan's memory report and --device-memory read
 * its figures, and the checkpoint piece tables are its pieces: nothing
 * derives a layout a second time.  No MPI, no allocation beyond the layout
 * itself; the same inputs give the same layout on every rank and machine.
 *
 * What it holds, for one rank:
 *   - regions: a layer's gathered block is its owned region (the plan's
 *     layer buffer of Muon parameters, lines C/D) followed by its even
 *     region (every other parameter in forward order, padded to a multiple
 *     of the shard group S: N ranks for FSDP, K for HSDP; rank i of the
 *     group holds shard i); its gradient block is the same in F32, and its
 *     view (what dmuon_rt_weights returns) the same in F32;
 *   - the pieces this rank keeps state for (owned matrices, even shards),
 *     which are also its checkpoint pieces;
 *   - the windows: owner windows (persistent owner parts: the owned
 *     region's gather source, FSDP, and reduce destination, sized by the
 *     largest any rank owns, so that the pool is symmetric), even shards,
 *     HSDP publish copy, line B's directions;
 *   - the groups of every layer (segment tables and options of the
 *     operators, dmuon/collv.h) and their control areas;
 *   - the plan's order of one micro-batch and, from it, every block's
 *     offset in its space (below), the pool's map and the memory figures.
 *
 * The plan's order (dmuon/runtime.h "Life of a runtime").  Layers are the
 * plan's, in forward order.  When layer 0 is "(root)" (the tensors outside
 * numbered blocks: embeddings, final norm, head) its brackets enclose the
 * other layers' (pre_forward(root) first, post_forward(root) last; the
 * same in backward).  One micro-batch is
 *   forward:  pre_forward(l) .. post_forward(l) for l = 0, 1, ..., L-1
 *   backward: pre_backward(l) .. post_backward(l) for l = L-1, ..., 0
 * (root enclosing both), and a recomputed forward inside a layer's
 * backward changes no block.  A layer's prefetch target is the next layer
 * of the same pass (next_fwd, next_bwd; ZeRO-3 only in backward).
 *
 * Lifetimes, per layer l (the runtime's hooks do exactly this; every
 * acquisition they make is checked against this layout):
 *   parameter block (param dtype, pool):  acquired when l's gather starts
 *     (a prefetch, or the hook that uses l);  ZeRO-3: released as soon as
 *     it is widened into l's view (the view holds the values for the
 *     bracket), or at the bracket's end when the view is the block itself
 *     (param dtype F32);  ZeRO-2: kept until the step;
 *   view (F32, private arena):  from the bracket's start to its end; none
 *     when the parameter dtype is F32 (the view is the block);
 *   gradient block (F32, pool):  from pre_backward(l) until l's reduction
 *     finishes, which is at the next post_backward (the last one of the
 *     micro-batch finishes every reduction).
 *   gather source (FSDP with per-layer owner parts):  while l's gather
 *     runs (from its start, with the parameter block's acquisition, until
 *     it is waited for, when the block is widened);
 *   reduce destination (per-layer owner parts) and reduce staging (control
 *     space):  from post_backward(l), where l's ReduceScatterV starts,
 *     until it finishes;
 *   the step's memory (scratch, Newton–Schulz workspace): inside
 *     dmuon_rt_step, after every block above has been given back.
 * Every kind but the staging shares one space of the pool, the working
 * space; the staging has its own in the control space.  A per-layer owner
 * part is the same number of bytes on every rank (the most any rank owns
 * of that layer): the owned region's tables then give window offsets
 * relative to the owner's first byte in the layer, so the gather source
 * and reduce destination of one layer lie at the same offset on every
 * rank (with owner windows they are offsets into the window).  Each space
 * is packed by first fit over the acquisitions in the plan's order
 * (dmuon_pool_pack): blocks never live at once share bytes,
 * whatever their kind, and the first micro-batch needs no more than any
 * other.  Under ZeRO-2 the parameter blocks count as live from the start
 * of the first micro-batch to the step (the later micro-batches of a step
 * find them all gathered).  The control space holds every group's control
 * words back to back (each group its own: they persist between calls),
 * then the packed staging.
 */
#ifndef DMUON_LAYOUT_H
#define DMUON_LAYOUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "dmuon/collv.h"
#include "dmuon/io.h"
#include "dmuon/plan.h"
#include "dmuon/pool.h"
#include "dmuon/rc.h"
#include "dmuon/topo.h"
#include "dmuon/types.h"

/* ---------------------------------------------------------------- lines -- */

/* The paper's four systems (§7.1; dmuon/runtime.h "Lines"). */
typedef enum { DMUON_LINE_D = 0, DMUON_LINE_C, DMUON_LINE_B, DMUON_LINE_A } dmuon_line;

/* "D", "C", "B", "A" ("?" for another value); the parser also accepts lower
 * case.  Errors: DMUON_EINVAL naming the value and the choices. */
const char *dmuon_line_name(dmuon_line l);
dmuon_rc dmuon_line_parse(const char *s, dmuon_line *out);

/* What a line does: every line-dependent choice of the layout and the
 * runtime is a field of this table. */
typedef struct {
    bool owners;              /* Muon parameters have owners (C, D); else they
                                 are in the even region */
    bool all_adamw;           /* every parameter on AdamW (A) */
    dmuon_algo owned;         /* gather and reduce of the owned region;
                                 DEFAULT: no owned region */
    dmuon_algo publish;       /* HSDP: the publish along the rails */
    bool node_load;           /* HSDP: the owned region's node half is the
                                 publish's node load (no own gather group) */
    bool replicated;          /* the step gathers each Muon matrix's whole
                                 Nesterov direction on every rank (B) */
} dmuon_line_ops;

/* The row of line l; NULL for an unknown line. */
const dmuon_line_ops *dmuon_line_ops_of(dmuon_line l);

/* --------------------------------------------------------------- layout -- */

/* A layer's groups, in the order of their control areas. */
enum {
    DMUON_GRP_OWN_GATHER = 0, /* owned region, AllGatherV (or per-owner) */
    DMUON_GRP_OWN_REDUCE,     /* owned region, ReduceScatterV, F32 */
    DMUON_GRP_EVEN_GATHER,    /* even region, equal allgather over the shard group */
    DMUON_GRP_EVEN_REDUCE,    /* even region, equal reduce-scatter, F32 */
    DMUON_GRP_DIR_GATHER,     /* line B: the step's Nesterov directions, F32 */
    DMUON_GRP_KINDS
};

/* The blocks of a layer, each packed in its own space. */
enum {
    DMUON_BLOCK_PARAM = 0,    /* gathered parameters, param dtype (pool) */
    DMUON_BLOCK_GRAD,         /* gradients, F32 (pool) */
    DMUON_BLOCK_VIEW,         /* the F32 view of the gathered parameters
                                 (empty when they alias) */
    DMUON_BLOCK_SOURCE,       /* per-layer owner parts, FSDP: the owners'
                                 part of the layer in the parameter dtype,
                                 the owned region's AllGatherV source (each
                                 owner narrows its masters into it when the
                                 gather starts); empty otherwise */
    DMUON_BLOCK_RECV,         /* per-layer owner parts: the owners' part of
                                 the layer in F32, the owned region's
                                 ReduceScatterV destination (added to the
                                 accumulated gradients when the reduction
                                 finishes); empty otherwise */
    DMUON_BLOCK_STAGING,      /* the staging of the layer's owned-region
                                 ReduceScatterV (pool, control space; empty
                                 where the backend stages nothing) */
    DMUON_BLOCK_STEP,         /* the step's scratch and Newton–Schulz workspace
                                 (one block, "layer" 0, acquired after the
                                 micro-batches) */
    DMUON_BLOCK_KINDS
};

/* Name of a block kind ("parameter", "gradient", "weight view", "gather
 * source", "reduce destination", "reduce staging", "step"). */
const char *dmuon_block_name(int kind);

/* One group: its table (n segments; n = 0: the layer has no such group),
 * options (deadline_ms 0: the caller sets its own; staging_shared set where
 * the group stages, its staging_offset relative to the staging area: add
 * the pool's offset of the control space plus staging_base) and its
 * control area (ctrl_off bytes into the control space, ctrl_bytes). */
typedef struct {
    const dmuon_segment *segs;
    int n;
    dmuon_group_opts opts;
    int64_t ctrl_off, ctrl_bytes;
} dmuon_layout_group;

typedef struct {
    const int *params;        /* the layer's parameters (plan indices), forward order */
    int np;
    const dmuon_segment *segs;/* owned region: the plan's table (param dtype);
                                 NULL / 0 without owners */
    size_t nseg;
    const dmuon_segment *gsegs;  /* the same table in F32 (offsets scaled) */
    const int64_t *seg_copy;  /* HSDP with owners: per segment, bytes into its
                                 rail's publish copy; else NULL */
    const int *seg_pub;       /* HSDP with owners: per segment, its index in
                                 the publish table; else NULL */
    int64_t own_elems;        /* owned region, elements */
    int64_t even_elems;       /* even region, elements before padding */
    int64_t even_pad;         /* padded to a multiple of the shard group */
    int64_t shard;            /* even_pad / S: one rank's shard */
    int64_t even_pos;         /* first element of this layer's shard in the
                                 rank's even arrays */
    int64_t bytes[DMUON_BLOCK_KINDS];  /* block sizes (unaligned; view 0 when
                                 it aliases the parameter block; staging 0
                                 where nothing is staged) */
    int64_t staging_off;      /* the staging's offset in the staging space */
    bool muon_even;           /* a Muon parameter in the even region (line B
                                 gathers its directions at the step) */
    int next_fwd, next_bwd;   /* prefetch target after this layer's
                                 pre_forward / pre_backward (-1: none) */
    dmuon_layout_group group[DMUON_GRP_KINDS];
} dmuon_layout_layer;

/* One parameter in this layout. */
typedef struct {
    dmuon_role role;          /* effective role (line A: AdamW for all) */
    bool owned;               /* in its layer's owned region (Muon, lines C/D) */
    int64_t off;              /* element offset in its layer's view and
                                 gradient block (owned region first) */
} dmuon_layout_param;

/* A range of one parameter's elements whose state this rank holds (also
 * a checkpoint piece).  Sorted: owned pieces in (layer, segment, window
 * position) order — the order the step updates and publishes them —,
 * then even pieces by layer. */
typedef struct {
    int32_t param;
    int64_t lo, hi;           /* parameter elements [lo, hi) */
    bool owned;               /* owner window (whole matrices) or even shard */
    int64_t pos;              /* element in the rank's owned or even arrays */
    int32_t layer;
    int32_t seg;              /* owned: segment index in the layer's table; else -1 */
} dmuon_layout_piece;

/* One kind's order and placement: nacq acquisitions in the plan's order,
 * acquisition k is layer acq_layer[k]'s block at byte acq_off[k] of its
 * space (the working space; the staging space for DMUON_BLOCK_STAGING).
 * bytes: the most bytes of this kind live at one moment (aligned); for the
 * staging, its space's size. */
typedef struct {
    const dmuon_pool_event *ev;   /* the kind's events, in order */
    size_t nev;
    const int32_t *acq_layer;
    const int64_t *acq_off;
    size_t nacq;
    int64_t bytes;
} dmuon_layout_space;

/* One event of the plan's order, every kind in one sequence. */
typedef struct {
    int8_t kind;              /* DMUON_BLOCK_* */
    int8_t acquire;           /* 1 acquire, 0 release */
    int32_t layer;
} dmuon_layout_event;

/* The memory of one rank, bytes.  Each figure is the same at every step,
 * the first included: everything is allocated once, at open, at this size.
 *   total_bytes = pool_bytes + state_bytes
 *   pool_bytes  = ctrl + work + window_space, each 4 KiB-aligned
 *                 (dmuon_pool_lay_out)
 *   least_bytes = total_bytes - work_bytes + live_peak_bytes (what any
 *                 placement of the same lifetimes would need) */
typedef struct {
    int64_t total_bytes;
    int64_t pool_bytes;
    int64_t ctrl_bytes;           /* the operators' control space: every group's
                                     control words, then the reduce staging */
    int64_t staging_bytes;        /* of which the packed reduce staging */
    int64_t work_bytes;           /* the working space: gathered parameters,
                                     F32 gradient blocks, F32 weight views and
                                     the step's memory, packed by lifetime */
    int64_t param_live_bytes;     /* the most gathered parameter bytes live at
                                     once (of the working space's peak) */
    int64_t window_live_bytes;    /* the same for the gather sources and reduce
                                     destinations (the owner window's part in
                                     flight) */
    int64_t grad_live_bytes;      /* the same for the gradient blocks */
    int64_t view_live_bytes;      /* and for the views (0 when parameter
                                     dtype F32: the view is the block) */
    int64_t step_bytes;           /* the step's memory, reserved in the working
                                     space for the largest any rank needs: its
                                     scratch (the largest owned matrix; three
                                     for a transposed or strided one; line B
                                     its largest block of directions and one
                                     matrix), the Newton–Schulz workspace
                                     of the largest matrix (dmuon_ns_workspace_bytes)
                                     and the directions (step_dir_bytes) */
    int64_t step_dir_bytes;       /* of which the directions: 4 B per owned
                                     element of the largest window (line B:
                                     + 4 B per even element) */
    int64_t window_space_bytes;   /* even shards (param dtype + F32), HSDP
                                     publish copy, line B's direction buffers */
    int64_t state_bytes;          /* private F32 state: per owned element master,
                                     momentum, accumulated gradient (12 B);
                                     per even element master, two moments (or
                                     momentum), accumulated gradient (16 B) */
    int64_t scratch_bytes;        /* of the step's memory, what this rank's
                                     scratch uses */
    int64_t ns_workspace_bytes;   /* and its Newton–Schulz workspace */
    int64_t live_peak_bytes;      /* the most working-space bytes (every kind,
                                     the step's memory included) live at one
                                     moment of the plan's order */
    int64_t least_bytes;
    int64_t dir_bytes;            /* line B: its direction buffers (part of
                                     window_space_bytes) */
    /* for the report */
    int64_t optimizer_bytes;      /* masters + momenta + moments: 8 B per owned
                                     Muon element, 12 B per even element */
    int64_t owner_window_bytes;   /* this rank's owned elements in param dtype +
                                     F32 (what persistent owner windows would
                                     hold; the working space holds only the
                                     layers in flight) */
    int32_t largest_layer;        /* the largest gathered layer (-1: none) */
    int64_t largest_layer_bytes;  /* its parameter block */
} dmuon_layout_memory;

/* Where FSDP's owners keep the gather source and reduce destination of
 * the owned region.  PERSISTENT: owner windows, each rank's owned
 * parameters in the parameter dtype and one F32 gradient window, held from
 * open to close (the pool is sized by the largest any rank owns).
 * PER_LAYER: blocks of the working space (DMUON_BLOCK_SOURCE, _RECV), live
 * only while that layer's gather or reduction runs, each the most any owner
 * holds of that layer.  Owner windows shrink as 1/ranks of the model's
 * matrices; per-layer parts stay a few whole matrices (a layer's largest
 * owners, one or two layers in flight) whatever the ranks, so owner
 * windows are smaller at many ranks and per-layer parts at few.  AUTO (default) builds both
 * and keeps the one whose pool is smaller (ties: PERSISTENT).  HSDP gathers
 * from its publish copy either way; only the reduce destination moves. */
typedef enum {
    DMUON_OWNER_PARTS_AUTO = 0,
    DMUON_OWNER_PARTS_PERSISTENT,
    DMUON_OWNER_PARTS_PER_LAYER,
    DMUON_OWNER_PARTS_COUNT
} dmuon_owner_parts;

/* "auto", "persistent", "per-layer"; "?" out of range. */
const char *dmuon_owner_parts_name(dmuon_owner_parts m);
/* Parses one of those names (NULL or anything else: DMUON_EINVAL naming
 * the accepted ones; *out unchanged). */
dmuon_rc dmuon_owner_parts_parse(const char *s, dmuon_owner_parts *out);

typedef struct {
    dmuon_line line;          /* default D */
    int zero_stage;           /* 2 or 3; 0 (default): the plan's */
    int32_t rank;             /* in [0, ranks) (default 0) */
    int prefetch;             /* prefetch depth, 0 or 1 (default 1) */
    dmuon_backend backend;    /* whose control areas (default MPI) */
    dmuon_owner_parts owner_parts;  /* default AUTO */
} dmuon_layout_opts;

void dmuon_layout_opts_init(dmuon_layout_opts *o);

typedef struct {
    const dmuon_plan *plan;   /* borrowed: must outlive the layout */
    dmuon_layout_opts opts;   /* resolved (zero_stage 2 or 3; owner_parts
                                 PERSISTENT or PER_LAYER, what AUTO chose;
                                 PERSISTENT where nothing has owners) */
    const dmuon_line_ops *ops;
    int32_t ranks, nodes, per_node;
    bool hsdp;
    int shard_size, shard_rank;   /* the shard group: N (FSDP) or K (HSDP) */
    dmuon_dtype pdt;          /* the plan's parameter dtype (BF16 or F32) */
    int64_t dsize;            /* its bytes */
    bool view_alias;          /* pdt F32: the view is the parameter block */
    bool root;                /* layer 0 is "(root)" and encloses the others */

    size_t nlayers;
    const dmuon_layout_layer *layers;
    size_t nparams;
    const dmuon_layout_param *params;
    size_t npieces;
    const dmuon_layout_piece *pieces;

    int64_t win_elems;        /* this rank's owner window, elements */
    int64_t max_win_elems;    /* the largest over ranks */
    int64_t even_total;       /* elements of this rank's even shards */
    const dmuon_segment *pub_table;  /* HSDP with owners: every layer's
                                 segments in layer order, laid out by
                                 dmuon_publish_layout (offset: bytes into the
                                 rail's copy) */
    int npub;
    int64_t copy_bytes;       /* the publish copy's extent */
    int64_t dir_buf, dir_shard;  /* line B: bytes of one direction buffer,
                                 offset of this rank's shard inside it */

    dmuon_layout_space space[DMUON_BLOCK_KINDS];
    const dmuon_layout_event *events;   /* the plan's order, every kind */
    size_t nevents;
    int64_t work_bytes;       /* the working space's size */
    int64_t step_off;         /* the step's memory: its offset in the working
                                 space; the scratch first, then the
                                 Newton–Schulz workspace */
    int64_t step_scratch_bytes, step_ns_bytes;  /* their sizes (aligned; the
                                 most any rank needs) */
    int64_t step_dir_bytes;   /* after them, the step's directions: every
                                 owned matrix's orthogonalised direction (F32,
                                 the largest owner window of any rank), line
                                 B also its even shards' (F32), all computed
                                 before the step commits any (the step is
                                 transactional, dmuon/runtime.h) */
    int ngroups;              /* groups with a table, over every layer */
    int64_t ctrl_words_bytes; /* the groups' control areas, back to back */
    int64_t staging_base;     /* where the staging space starts in the
                                 control space (aligned) */
    int64_t gather_staging;   /* the largest staging a gather-only group would
                                 hold (it never uses it: its staging lies at
                                 the space's start, which is at least this
                                 long) */
    dmuon_pool_map map;       /* the pool, offsets from its base */
    int64_t state_elems;      /* floats of the private state allocation */
    int64_t scratch_elems;    /* floats of the step's scratch */
    int64_t ns_max_m, ns_max_n;  /* the largest matrix orthogonalised here */
    dmuon_layout_memory mem;
    void *mem_block;          /* the one allocation behind the arrays above */
} dmuon_layout;

/* Builds the layout of opts->rank under plan p (opts NULL: the defaults).
 * *out is owned by the caller (dmuon_layout_free); it borrows p.  Pure:
 * the same plan and options give the same layout; every rank's offsets
 * agree (only the pieces, the own window and the state and scratch sizes
 * depend on the rank).  Errors: DMUON_EINVAL (rank outside [0, ranks),
 * zero_stage not 2 or 3, prefetch not 0 or 1, an unknown line or backend,
 * a parameter dtype other than BF16 and F32), DMUON_ECHECK (a unit that
 * does not sit in its owner's window, or splits a strided gate/up pair; a
 * layout that fails dmuon_layout_check), DMUON_EUNSUPPORTED (a backend not
 * in this build), DMUON_ENOMEM, those of dmuon_publish_layout and
 * dmuon_group_ctrl_bytes.  On failure *out is NULL. */
dmuon_rc dmuon_layout_build(const dmuon_plan *p, const dmuon_layout_opts *opts,
                            dmuon_layout **out);

/* Frees a layout; accepts NULL. */
void dmuon_layout_free(dmuon_layout *x);

/* Checks the layout's invariants, by replaying the plan's order against
 * the placement: in each space no two blocks live at once share a byte,
 * every block lies inside its space, the acquisitions are the events'; the
 * pool's spaces and window regions are disjoint, aligned and inside the
 * pool; the pieces cover this rank's windows without overlap; the memory
 * figures are the sums given above.  dmuon_layout_build runs it.  Returns
 * DMUON_OK or DMUON_ECHECK naming the first violation (space, layers,
 * offsets). */
dmuon_rc dmuon_layout_check(const dmuon_layout *x);

/* A digest of everything that must be equal on every rank: the pool's map,
 * the control areas, every space's acquisitions and offsets (not the
 * pieces, the own window or the state).  Pure. */
uint64_t dmuon_layout_digest(const dmuon_layout *x);

/* The rank whose layout needs the most memory (largest total_bytes, ties:
 * lower rank; only the owner window, pieces and the step's sizes differ
 * between ranks) and its layout, as dmuon_layout_build.  opts->rank is
 * ignored. */
dmuon_rc dmuon_layout_build_busiest(const dmuon_plan *p, const dmuon_layout_opts *opts,
                                    dmuon_layout **out);

/* Re-derives the rank-dependent part of x (pieces, own window, shard rank,
 * state, scratch and Newton–Schulz sizes, the memory figures) for rank,
 * keeping the rest, which every rank shares: the same result as
 * dmuon_layout_build with that rank, without rebuilding the common part.
 * Errors: DMUON_EINVAL (rank outside [0, ranks)), DMUON_ECHECK (as build;
 * x is then unusable: free it). */
dmuon_rc dmuon_layout_set_rank(dmuon_layout *x, int32_t rank);

/* The memory table (rank, options, each figure in GiB with what it is for)
 * to f. */
void dmuon_layout_print_memory(const dmuon_layout *x, FILE *f);

/* The memory figures as keys of the JSON object open in w: rank, line,
 * zero_stage, prefetch, backend, then every field of dmuon_layout_memory
 * under its name (first_step_bytes = total_bytes, windows_bytes =
 * window_space_bytes, gathered_layer, gathered_layer_bytes, window_bytes =
 * owner_window_bytes, line_b_dir_bytes = dir_bytes, kept for scripts). */
void dmuon_layout_memory_json(const dmuon_layout *x, dmuon_json *w);

#endif
