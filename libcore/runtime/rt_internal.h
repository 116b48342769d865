/*
 * rt_internal.h — the runtime's state, shared by runtime.c (life, hooks;
 * every offset and size comes from the rank's layout, dmuon/layout.h), rt_comm.c
 * (the lines' transports), rt_step.c (the optimizer step, checkpoints),
 * rt_device.c (backend and device, host staging) and elem.c (the device
 * operations every access of the memory below goes through).  Not
 * installed.
 *
 * Memory of one rank:
 *   pool (symmetric, identical layout on every rank; dmuon/pool.h)
 *     control | working space | windows
 *     windows = pwin (owner window, param_dtype: FSDP's AllGatherV source;
 *                     persistent owner parts only)
 *             | gwin (owner window, F32: ReduceScatterV destination;
 *                     persistent owner parts only)
 *             | ewin (even shards of every layer, param_dtype)
 *             | egwin (even shards, F32: reduce-scatter destination)
 *             | copy (HSDP: the publish copy of this rank's rail)
 *             | dir (line B: two buffers, each a layer's gathered Nesterov
 *                    directions, F32, then this rank's shard of them)
 *   private optimizer state, by element:
 *     own_*[w]   element w of this rank's owner window (whole matrices)
 *     even_*[e]  element e of this rank's even shards (layer by layer)
 * A layer's gathered block (parameter space) is its owned region (the plan's
 * layer buffer, param_dtype) followed by its even region (even_pad elements);
 * its gradient block is the same two regions in F32.  Elements of a
 * parameter sit at rt_param.off in the layer's F32 view (owned region first).
 * Parameter and gradient blocks, the FP32 views (what dmuon_rt_weights
 * returns), the per-layer owner parts (gather source, reduce destination)
 * and the step's scratch are ranges of the pool's working space, packed by
 * the layout.
 */
#ifndef DMUON_RT_INTERNAL_H
#define DMUON_RT_INTERNAL_H

#include <stdbool.h>

#include "dmuon/collv.h"
#include "dmuon/ctl.h"
#include "dmuon/layout.h"
#include "dmuon/ns.h"
#include "dmuon/pool.h"
#include "dmuon/publish.h"
#include "dmuon/runtime.h"
#include "dmuon/symm.h"
#include "dmuon/topo.h"
#include "elem.h"

typedef struct {
    const char *name;
    int32_t layer;
    dmuon_role role;          /* effective role in this line (A: all AdamW) */
    dmuon_role plan_role;     /* the plan's role (weight decay group) */
    int64_t numel, matrices, m, n;   /* Muon: matrices of m x n (out x in) */
    bool transposed;          /* the storage holds each matrix as [in, out] */
    dmuon_mat_layout layout;  /* where matrix j lies (dmuon/model.h); the
                                 optimizer state stays in storage order, NS
                                 runs on the real m x n matrix */
    bool owned;               /* in the layer's owned region (Muon, lines C/D) */
    int64_t off;              /* element offset in the layer's F32 view */
    bool registered;
    int ndim;
    int64_t shape[8];         /* as registered */
    int64_t reg_numel;        /* elements of the shape given at registration */
    int reg_count;            /* registrations of this name */
    bool bad_shape;           /* a 2-D matrix registered with another shape */
    char reg_shape_text[96];
} rt_param;

/* A range of one parameter's elements whose state this rank holds: the
 * layout's pieces (dmuon/layout.h), which are also the checkpoint's. */
typedef dmuon_layout_piece rt_piece;

/* A layer's place in the hooks of a micro-batch.  The gradient block is
 * live exactly in RT_BWD and RT_BWD_FWD, and in RT_DONE while its reduction
 * is in flight (rt_layer.reducing); the F32 view exists exactly in
 * RT_FWD, RT_BWD and RT_BWD_FWD. */
typedef enum {
    RT_IDLE = 0,              /* no bracket open; backward not yet run */
    RT_FWD,                   /* pre_forward .. post_forward */
    RT_BWD,                   /* pre_backward .. post_backward */
    RT_BWD_FWD,               /* a (recomputed) forward inside its backward */
    RT_DONE                   /* post_backward ran this micro-batch */
} rt_phase;

/* The layer's parameter block in the parameter space. */
typedef enum {
    RT_BLOCK_NONE = 0,        /* not acquired (ZeRO-3 between uses) */
    RT_BLOCK_LIVE,            /* acquired; data not (yet) there */
    RT_BLOCK_GATHERED         /* acquired and holds this step's parameters */
} rt_block;

/* A layer's runtime state; its regions, tables and block sizes are the
 * layout's (lay).  Invariants (layer_assert, after each hook): the view w
 * exists exactly inside an open bracket; under ZeRO-3 a parameter block is
 * held only between its gather's start and its widening into the view (or
 * for the bracket, when the view is the block: parameter dtype F32);
 * inflight implies a block. */
typedef struct {
    const dmuon_layout_layer *lay;
    dmuon_group *pgrp, *ggrp; /* owned region: gather, reduce (lines C, D) */
    dmuon_group *egrp, *eggrp;/* even region: gather, reduce (equal algorithm) */
    dmuon_group *dgrp;        /* line B: the step's gather of Nesterov directions
                                 (F32, equal algorithm); NULL without Muon */
    int64_t poff, goff;       /* offsets of the blocks in their spaces (when live) */
    int64_t soff, roff;       /* the owners' part: gather source (while src_live),
                                 reduce destination (while reducing) */
    bool src_live;            /* a gather of the owned region runs from the source */
    rt_phase phase;           /* where the hooks are in this micro-batch */
    rt_block pblock;          /* the parameter block */
    bool inflight;            /* transport: a prefetch started, not yet waited for */
    bool acq_now;             /* the parameter block was acquired in this
                                 micro-batch (dmuon_rt_discard gives it back) */
    bool reducing;            /* the gradient reduction started at post_backward,
                                 not yet finished: the gradient block is its */
    unsigned pending;         /* bit k: group k's split-phase call in flight */
    float *w;                 /* F32 view of the layer's parameters while one of
                                 its brackets is open, else NULL: a range of the
                                 view arena, or the parameter block itself
                                 (parameter dtype F32) */
} rt_layer;

/* The layout's block kinds (DMUON_BLOCK_*): parameter, gradient and view
 * blocks in the pool's working space, the reduce staging in its control
 * space (the step's memory has no acquisitions of the hooks). */
enum { RT_PARAM = DMUON_BLOCK_PARAM, RT_GRAD = DMUON_BLOCK_GRAD, RT_VIEW = DMUON_BLOCK_VIEW,
       RT_SOURCE = DMUON_BLOCK_SOURCE, RT_RECV = DMUON_BLOCK_RECV,
       RT_STAGING = DMUON_BLOCK_STAGING, RT_SPACES = DMUON_BLOCK_KINDS };

struct dmuon_rt {
    const dmuon_plan *plan;
    dmuon_rt_opts opts;
    dmuon_topo topo;
    bool topo_ok;
    dmuon_layout *lay;        /* this rank's layout (dmuon/layout.h): regions,
                                 pieces, windows, groups, the plan's order, the
                                 pool's map; built at create */
    MPI_Comm shard_comm;      /* even shards: world (FSDP) or node (HSDP) */
    bool hsdp, owners;        /* owners: lines C/D */
    bool per_layer;           /* the layout's owner parts are per layer (the
                                 working space's SOURCE / RECV blocks), not
                                 the owner windows */
    int zero;
    dmuon_dtype pdt;
    size_t dsize;
    dmuon_ns *ns;
    const rt_elem_ops *elem;  /* the operations on the device's memory: pool,
                                 state, scratch and views are read and
                                 written only through it (rt_device.c) */
    void *stream;             /* their stream (device tables; NULL on the host) */
    int gpu;                  /* device cuda: the GPU; else -1 */
    float *state_host;        /* a host copy of state during a checkpoint
                                 call (device tables), else NULL */

    rt_param *params;
    size_t nparams;
    rt_layer *layers;
    size_t nlayers;
    char **unknown;           /* names registered that the plan lacks */
    size_t nunknown;

    /* pool */
    dmuon_symm *symm;
    unsigned char *base;
    int64_t space_off[DMUON_SPACE_COUNT], space_bytes[DMUON_SPACE_COUNT];
    int64_t pwin_off, gwin_off, ewin_off, egwin_off, copy_off;
    int64_t dir_off;          /* line B: the dir region (lay->dir_buf per buffer) */

    /* publish (HSDP) */
    dmuon_publish *pub;
    int64_t pub_round;        /* last round begun */
    bool pub_open;

    /* optimizer state: one allocation (state, lay->state_elems floats) */
    float *state;
    float *own_w, *own_m, *own_g;           /* win_elems each */
    float *own_o;             /* win_elems: the step's directions, before commit
                                 (in the step's block of the working space) */
    float *even_w, *even_m, *even_v, *even_g; /* even_total each */
    float *even_o;            /* line B: even_total directions (the step's
                                 block, after own_o); else NULL */
    float *scratch;           /* lay->scratch_elems floats: the step's range of
                                 the working space */

    /* progress */
    bool opened, failed, recompute;
    int64_t steps;
    int64_t micro;            /* micro-batches since the last step */
    size_t bwd_count;         /* layers whose backward ended this micro-batch */
    bool in_micro;
    bool order_agreed;        /* the first step has run: until then every hook is
                                 compared across the ranks (order_check) */
    size_t acq_index[RT_SPACES];   /* acquisitions so far in this micro-batch */
    double grad_norm;
    dmuon_rt_stats stats;
};

/* runtime.c */
dmuon_rc rt_fail_comm(dmuon_rt *rt, dmuon_rc rc);
/* The plan's next acquisition in space for layer l: checked (order, and
 * free of every block live in its space), then made.  DMUON_EINVAL naming
 * the layers, nothing changed. */
dmuon_rc rt_acquire(dmuon_rt *rt, int space, size_t l);
dmuon_rc rt_acq_check(const dmuon_rt *rt, int space, size_t l);
unsigned char *rt_pblock(const dmuon_rt *rt, const rt_layer *L);
float *rt_gblock(const dmuon_rt *rt, const rt_layer *L);
dmuon_rc rt_pool_build(dmuon_rt *rt);
void rt_pool_drop(dmuon_rt *rt);
dmuon_rc rt_write_windows(dmuon_rt *rt);

/* rt_comm.c */
dmuon_rc rt_groups_create(dmuon_rt *rt);
void rt_groups_free(dmuon_rt *rt);
dmuon_rc rt_gather(dmuon_rt *rt, size_t l);
/* Split phase, every line: start, test (never blocks), finish (waits within
 * the deadline; reduce: adds what arrived to the accumulated gradients).
 * rt_gather is start + finish. */
dmuon_rc rt_gather_start(dmuon_rt *rt, size_t l);
dmuon_rc rt_gather_finish(dmuon_rt *rt, size_t l);
dmuon_rc rt_gather_test(dmuon_rt *rt, size_t l);
dmuon_rc rt_reduce_start(dmuon_rt *rt, size_t l);
dmuon_rc rt_reduce_test(dmuon_rt *rt, size_t l);
dmuon_rc rt_reduce_finish(dmuon_rt *rt, size_t l);
dmuon_rc rt_drain(dmuon_rt *rt);   /* waits for every call in flight; failed on error */
/* Line B: buffer b's gathered directions and shard (the layout's dir
 * region); the gather of layer l's directions from buffer b's shard into
 * its whole, split phase (start, test, wait: the wait has the deadline;
 * every started gather must be waited). */
float *rt_dir_full(const dmuon_rt *rt, int b);
float *rt_dir_mine(const dmuon_rt *rt, int b);
dmuon_rc rt_dir_start(dmuon_rt *rt, size_t l, int b);
dmuon_rc rt_dir_test(dmuon_rt *rt, size_t l);
dmuon_rc rt_dir_wait(dmuon_rt *rt, size_t l);
dmuon_rc rt_pub_round(dmuon_rt *rt);   /* HSDP: begin a round, publish every owned segment */
dmuon_rc rt_pub_begin(dmuon_rt *rt);
dmuon_rc rt_pub_post(dmuon_rt *rt, size_t l, size_t s);
dmuon_rc rt_pub_finish(dmuon_rt *rt); /* line C: the rail broadcasts of the round */
dmuon_rc rt_pub_end(dmuon_rt *rt);
dmuon_rc rt_agree(dmuon_rt *rt, dmuon_rc rc);
/* The control plane (dmuon/ctl.h) over the world within the runtime's
 * deadline; a timeout or an MPI failure marks the runtime failed.  bcast:
 * rank 0's bytes to every rank. */
dmuon_rc rt_ctl_i64(dmuon_rt *rt, int64_t *v, int n, dmuon_ctl_op op, const char *what);
dmuon_rc rt_ctl_f64(dmuon_rt *rt, double *v, int n, dmuon_ctl_op op, const char *what);
dmuon_rc rt_ctl_bcast(dmuon_rt *rt, void *data, int bytes, const char *what);

/* rt_device.c */
bool rt_on_host(const dmuon_rt *rt);   /* the plain host table */
dmuon_rc rt_device_check(const dmuon_rt *rt);
dmuon_rc rt_comm_size(const dmuon_rt *rt, MPI_Comm comm, int *size, int *rank);
dmuon_rc rt_topo_init(dmuon_rt *rt, MPI_Comm comm, int ranks_per_node);
dmuon_rc rt_ckpt_usable(const dmuon_rt *rt, const char *what);
dmuon_rc rt_device_init(dmuon_rt *rt, const dmuon_ns_opts *nso);
float *rt_host_of(const dmuon_rt *rt, float *state_ptr);
dmuon_rc rt_state_to_host(dmuon_rt *rt, bool copy_out);
dmuon_rc rt_state_from_host(dmuon_rt *rt);
void rt_state_drop(dmuon_rt *rt);
uint64_t rt_digest_mem(const dmuon_rt *rt, const void *p, int64_t bytes, uint64_t d);

/* rt_step.c */
void rt_step_prepare(dmuon_rt *rt);   /* at open, after the pool: the step's memory */
dmuon_rc rt_step(dmuon_rt *rt, const dmuon_rt_lrs *lrs);
dmuon_rc rt_grads_clear(dmuon_rt *rt);   /* zeroes the accumulated gradients */
dmuon_rc rt_store_param(dmuon_rt *rt, const rt_piece *pc, unsigned char *dst_base);

#endif
