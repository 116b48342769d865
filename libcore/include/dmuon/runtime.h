/*
 * dmuon/runtime.h — the training runtime a trainer links against (paper §3,
 * §4, §6, C.1, C.4, C.5, D.2).
 *
 * Life of a runtime, on every rank (SPMD: every rank makes the same calls in
 * the same order):
 *   dmuon_rt_create(plan, comm, opts)     world size and ranks per node must
 *                                          match the plan
 *   dmuon_rt_register(name, shape, init)  once per parameter of the plan
 *   dmuon_rt_open()                       lays out the symmetric pool, builds
 *                                          the operators, places the initial
 *                                          values with their owners
 *   per step, per micro-batch:
 *     for layer l in forward order:  pre_forward(l)  … compute … post_forward(l)
 *     for layer l in reverse order:  pre_backward(l) … write gradients …
 *                                    post_backward(l)
 *   dmuon_rt_step(lrs)                    owner-only updates (+ HSDP publish)
 * Between pre_forward(l) and post_forward(l), and between pre_backward(l)
 * and post_backward(l), dmuon_rt_weights gives the full parameters of layer
 * l; between pre_backward(l) and post_backward(l) dmuon_rt_grad gives a
 * zeroed FP32 gradient buffer for each parameter of l, to which the trainer
 * adds (never written means zero).  Layer indices are the plan's layers
 * (dmuon_plan_layer_name; "(root)" holds the tensors outside numbered blocks,
 * e.g. embeddings, final norm, head: the trainer brackets their use like any
 * other layer).  An evaluation pass (forward only) is every layer's
 * forward followed by dmuon_rt_discard, which ends it without counting it
 * as a micro-batch; it may come anywhere between micro-batches, before the
 * first step too.  dmuon_rt_discard also ends a micro-batch abandoned
 * after a refused hook, so that the next one starts clean.
 *
 * Lines (paper §7.1): the same runtime runs the paper's four systems, so a
 * trainer compares them by one option.
 *   DMUON_LINE_D  owners from the plan, dmuon's AllGatherV / ReduceScatterV /
 *                 publish over the symmetric pool (the product);
 *   DMUON_LINE_C  owners from the plan, one MPI_Bcast / MPI_Reduce per
 *                 owner segment (standard per-owner collectives);
 *   DMUON_LINE_B  Muon by gather-then-replicate: even shards of everything,
 *                 equal-length MPI_Allgather / MPI_Reduce_scatter_block;
 *                 before the step every rank gathers each matrix's full
 *                 Nesterov direction and runs Newton–Schulz itself;
 *   DMUON_LINE_A  AdamW on every parameter, even shards, equal-length
 *                 collectives (FSDP with AdamW).
 * Parameters of role AdamW use FSDP's even sharding in every line (HSDP:
 * sharded inside the node, replicated across nodes).
 *
 * Errors.  Every call returns a dmuon_rc; the message names the rank, the
 * layer or parameter and, for communication, the peer.  Calls out of order
 * (pre_forward twice, a layer out of range, step before every micro-batch
 * ended) are DMUON_EINVAL on the calling rank before any data moves and
 * change nothing; the micro-batch stays where it was (continue it in
 * order, or end it with dmuon_rt_discard).  Before the first step (whose
 * recorded order later micro-batches are checked against locally, without
 * communication) every pre_forward, pre_backward and post_backward, and
 * every dmuon_rt_discard and dmuon_rt_step, first compares its call and
 * layer across the ranks (one small reduction within the deadline): ranks
 * calling them in different orders get DMUON_EMISMATCH on every rank at the
 * first difference, before any data moves; that first step's own
 * preconditions (every micro-batch ended, one at least) are agreed, so a
 * step refused on one rank is refused on every rank.  A stalled or dead
 * peer gives DMUON_ETIMEOUT within the deadline.  After a communication
 * error the runtime is unusable (free it).  Not thread-safe.
 */
#ifndef DMUON_RUNTIME_H
#define DMUON_RUNTIME_H

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>

#include "dmuon/costdb.h"
#include "dmuon/device.h"
#include "dmuon/layout.h"
#include "dmuon/optim.h"
#include "dmuon/plan.h"
#include "dmuon/rc.h"
#include "dmuon/topo.h"
#include "dmuon/types.h"

typedef struct dmuon_rt dmuon_rt;

/* dmuon_line and its names: dmuon/layout.h. */

typedef struct {
    dmuon_line line;          /* default DMUON_LINE_D */
    int zero_stage;           /* 2 or 3; 0 → the plan's */
    int ranks_per_node;       /* virtual nodes (tests); 0 → $DMUON_RANKS_PER_NODE or
                                 MPI_COMM_TYPE_SHARED; must equal the plan's
                                 gpus_per_node */
    dmuon_optim_opts optim;   /* hyperparameters (dmuon_optim_opts_init) */
    int deadline_ms;          /* per operator call; 0 → $DMUON_DEADLINE_MS or 600000 (10 min),
                                 resolved once at create; < 0 or a bad
                                 $DMUON_DEADLINE_MS is DMUON_EINVAL there */
    int prefetch;             /* 1 (default): pre_forward(l) starts layer l+1's
                                 gather (ZeRO-3 pre_backward(l): layer l−1's)
                                 split-phase, every line and sharding alike
                                 (the groups' start: AllGatherV, equal or
                                 per-owner), and the layer's own hook waits
                                 for it, so it overlaps the compute between.
                                 HSDP line D: the publish's node load (no
                                 split phase) runs at the prefetch, the rest
                                 split.  0: none.  Use dmuon_rt_opts_init. */
    dmuon_owner_parts owner_parts;  /* where the owners keep the owned
                                 region's gather source and reduce
                                 destination (dmuon/layout.h): AUTO (default)
                                 the smaller pool, PERSISTENT owner windows,
                                 PER_LAYER blocks of the working space live
                                 while that layer's gather or reduction runs */
    dmuon_backend backend;    /* where the pool lives and how the lines move
                                 it (docs/runtime.md "Backend and device"):
                                 DMUON_BACKEND_MPI (default): host memory,
                                 node-shared MPI windows; DMUON_BACKEND_NCCL
                                 / _NCCL_DEV: GPU memory (ncclMemAlloc,
                                 registered as a symmetric window), needs
                                 device cuda.  An operator a backend does not
                                 offer for the chosen line (e.g. the
                                 scheduled gather and publish on nccl, the
                                 equal algorithm on nccl-dev) is
                                 DMUON_EUNSUPPORTED naming it, at open or at
                                 the hook that needs it, on every rank. */
    dmuon_device_kind device; /* DMUON_DEVICE_CPU (default): pool, optimizer
                                 state, views and scratch in host memory;
                                 DMUON_DEVICE_CUDA: all of them in the memory
                                 of GPU (node-local rank modulo the visible
                                 GPUs, the NCCL pool's GPU; made current at
                                 create: keep it current on the calling
                                 thread), Newton–Schulz on the CUDA engine
                                 (each shape's kernels chosen at its first
                                 use, dmuon_ns_kernels; see ns_costdb) and
                                 the element
                                 updates, non-finite check and norms as CUDA
                                 kernels; needs a NCCL backend.  Then
                                 dmuon_rt_weights / dmuon_rt_grad return
                                 device pointers. */
    void *stream;             /* device cuda: the cudaStream_t (as void *, so
                                 this header needs no CUDA include) on which
                                 the trainer orders its work on the pointers
                                 of dmuon_rt_weights / dmuon_rt_grad; NULL:
                                 the legacy default stream.  Every hook and
                                 dmuon_rt_step first waits for this stream
                                 (cudaStreamSynchronize), so the trainer's
                                 kernels that read a layer's weights or
                                 write its gradients must be enqueued on it
                                 before the hook that ends the bracket.
                                 Every hook returns with the runtime's own
                                 device work on the pointers it hands out
                                 complete (views widened, gradient blocks
                                 zeroed), so work enqueued on any stream
                                 after it sees them; communication it
                                 started split phase (a prefetch, a
                                 reduction) runs on the pool's stream and
                                 is waited for by the hook that needs it.
                                 Ignored with device cpu. */
    dmuon_costdb *ns_costdb;  /* device cuda: a cost database whose ns_kernel
                                 table caches, per GPU model, which kernel
                                 each shape's symmetric products use
                                 (dmuon_ns_set_costdb); borrowed, open until
                                 dmuon_rt_free.  NULL (default): chosen by
                                 measurement at each shape's first use in
                                 this runtime.  Ignored with device cpu. */
    void *nccl_comm;          /* NCCL backends: the trainer's ncclComm_t (as
                                 void *) to run over instead of comm (give
                                 MPI_COMM_NULL; no MPI call is made, MPI
                                 need not be initialised): the topology
                                 splits its own communicators off it
                                 (dmuon_topo_init_nccl), so a deadline
                                 abort never touches the trainer's; the GPU
                                 is the communicator's.  Borrowed: it must
                                 outlive the runtime.  NULL (default): the
                                 backend makes its own NCCL communicator,
                                 bootstrapped over comm.  Over a handoff
                                 ranks_per_node 0 means the plan's
                                 gpus_per_node, and save, load and export
                                 are DMUON_EUNSUPPORTED (the checkpoint
                                 files are written with MPI collectives). */
    const void *nccl_id;      /* NCCL backends: an ncclUniqueId
                                 (DMUON_NCCL_UNIQUE_ID_BYTES bytes, read at
                                 create) the trainer distributed itself, to
                                 bootstrap without MPI
                                 (dmuon_topo_init_nccl_id; comm
                                 MPI_COMM_NULL; GPU: node-local rank modulo
                                 the visible GPUs); otherwise as nccl_comm.
                                 NULL: none.  At most one of the two. */
    int nccl_rank, nccl_size; /* with nccl_comm or nccl_id: this rank and the
                                 ranks (0 <= nccl_rank < nccl_size) */
    char resume_override[256];/* dmuon_rt_load compares the checkpoint's
                                 hyperparameters and NS variant with optim
                                 and refuses a difference; this lists those
                                 allowed to differ (taking this run's value):
                                 names separated by commas or spaces among
                                 momentum, nesterov, muon_weight_decay,
                                 muon_scale, beta1, beta2, eps,
                                 adamw_weight_decay, clip_norm, ns_variant,
                                 or "all"; read within its size (a NUL
                                 is not required).  Default empty. */
} dmuon_rt_opts;

void dmuon_rt_opts_init(dmuon_rt_opts *o);

/* Creates a runtime for plan on comm (collective over comm; with
 * opts.nccl_comm or opts.nccl_id, over those ranks, comm MPI_COMM_NULL).
 * The plan is borrowed and must outlive the runtime; comm is duplicated.
 * Over an MPI comm, first an agreement over comm (dmuon_agree, within opts'
 * deadline) that every rank reached create and accepted its options; only
 * then the blocking MPI_Comm_dup / _split of the topology (over a NCCL
 * handoff there is no such first agreement: an option refused on one rank
 * makes the others wait in the topology's NCCL calls).  Then the plan
 * digest and the options that must match are agreed over the world: line,
 * zero_stage (resolved), prefetch, owner_parts, deadline_ms (resolved) and every field
 * of optim (ns_variant by a hash); ranks_per_node is agreed by the
 * topology; resume_override is not compared.  Errors, on every rank:
 * DMUON_EMISMATCH (world size or ranks per node differ from the plan: the
 * message gives both; different plans on the ranks; an option that
 * differs between the ranks: the first such field in the order above, with
 * the lowest and highest value), DMUON_EINVAL (bad opts on any rank: that
 * rank's message; among them a NCCL backend with device cpu or the MPI
 * backend with device cuda, both nccl_comm and nccl_id, a NCCL handle with
 * the MPI backend or beside an MPI comm, nccl_rank outside
 * 0..nccl_size-1), DMUON_EUNSUPPORTED (a backend or device this build or
 * machine cannot run: named in the message), DMUON_EDEVICE (the GPU or its
 * Newton–Schulz context could not be set up), DMUON_ENOMEM, DMUON_ECOMM,
 * DMUON_ETIMEOUT (a rank did not reach create within the deadline; the
 * abandoned agreement stays posted on comm, which the caller should then
 * treat as failed), and those of dmuon_topo_init_nccl / _id with a
 * handoff.  On failure *out is NULL. */
dmuon_rc dmuon_rt_create(const dmuon_plan *plan, MPI_Comm comm, const dmuon_rt_opts *opts,
                         dmuon_rt **out);

/* Registers parameter `name` (a name of the plan) with its shape and its
 * initial values init (numel FP32 values, row-major; identical on every rank
 * — only what this rank owns is kept; copied, the caller keeps init).  Local
 * (no communication); problems are collected and reported by open.  Errors
 * now: DMUON_EINVAL (after open, or init NULL). */
dmuon_rc dmuon_rt_register(dmuon_rt *rt, const char *name, int ndim, const int64_t *shape,
                           const float *init);

/* Checks the registrations against the plan — unknown names, names of the
 * plan never registered, an element count differing from the plan's, a
 * Muon matrix registered with another m x n, a name registered twice — and
 * reports them all (the first six) in one DMUON_EINVAL, agreed on every
 * rank; then lays out the owners' state (FP32 masters and momenta, AdamW
 * moments of the even shards) and the symmetric pool (exchanging its
 * offset-table digest: DMUON_EMISMATCH naming the first differing entry),
 * builds the operators, places the initial values with their owners (the
 * registered copies are freed), writes the owner windows and, on HSDP,
 * publishes the initial parameters so that step 0's gathers find them.
 * Call once, after every register.  Collective.  Errors: DMUON_EINVAL
 * (registrations, or open called twice), DMUON_EMISMATCH, DMUON_ENOMEM,
 * DMUON_ECOMM and DMUON_ETIMEOUT (the pool or the first publish). */
dmuon_rc dmuon_rt_open(dmuon_rt *rt);

/* ----------------------------------------------------------- layer hooks -- */

/* Forward of layer l begins: its parameters are gathered (FSDP: AllGatherV
 * over the world; HSDP: waits for this step's publish of l's parameters,
 * then gathers inside the node) — or waited for if a prefetch started them —
 * and, with prefetch, layer l+1's gather starts.  Inside a recomputation
 * (between dmuon_rt_recompute_begin/end) nothing is prefetched, recorded or
 * released.  Collective.  Errors: DMUON_EINVAL (out of order; or, after the
 * first step, the range recorded for this acquisition is still held by a
 * layer the recorded micro-batch had ended by then: the message names both
 * layers; nothing changed), DMUON_EMISMATCH (before the first step: another
 * rank gathers another layer here; every rank, nothing changed),
 * DMUON_ETIMEOUT, DMUON_ECOMM. */
dmuon_rc dmuon_rt_pre_forward(dmuon_rt *rt, size_t layer);

/* Forward of layer l ended: under ZeRO-3 its parameter range is released
 * (may be reused by a later layer); under ZeRO-2 the gathered parameter
 * range (parameter dtype, inside the pool, not a pointer the trainer holds)
 * stays for the layer's pre_backward, which widens it again without
 * communication.  In both stages the FP32 views dmuon_rt_weights returned
 * for l are released here: those pointers are invalid from this call on
 * (later layers' views reuse the memory); call dmuon_rt_weights again
 * after pre_backward(l).  Local. */
dmuon_rc dmuon_rt_post_forward(dmuon_rt *rt, size_t layer);

/* Backward of layer l begins: ZeRO-3 gathers the parameters again (with
 * prefetch of layer l−1); the gradient buffers of l are zeroed.  Collective
 * under ZeRO-3.  Errors: as pre_forward. */
dmuon_rc dmuon_rt_pre_backward(dmuon_rt *rt, size_t layer);

/* Backward of layer l ended: the reduction of its gradients to their
 * owners starts split phase (ReduceScatterV; even shards: equal-length
 * reduce-scatter) and runs while the trainer computes the backward of the
 * layer before; the next post_backward (or the last of the micro-batch)
 * waits for it and adds the result to the owners' accumulated gradients
 * (gradient accumulation over micro-batches).  dmuon_rt_grad(l) is NULL
 * from here on.  The parameter range is released under ZeRO-3.
 * Collective.  Errors: DMUON_EINVAL, DMUON_EMISMATCH (before the first
 * step: another rank reduces another layer here; every rank, nothing
 * changed), DMUON_ETIMEOUT, DMUON_ECOMM (naming the layer whose reduction
 * failed). */
dmuon_rc dmuon_rt_post_backward(dmuon_rt *rt, size_t layer);

/* Moves the split-phase calls in flight (the next layer's gather started
 * by a prefetch, the last layer's gradient reduction) without blocking.  Optional: a trainer may call
 * it inside long computations so that peers waiting for this rank's
 * forwarding are served earlier; communication otherwise progresses only
 * inside the hooks.  Local.  Errors: DMUON_ECOMM. */
dmuon_rc dmuon_rt_progress(dmuon_rt *rt);

/* Activation recomputation: a forward of a layer inside backward.  Between
 * begin and end, pre_forward/post_forward neither prefetch, record order,
 * nor release.  Local. */
dmuon_rc dmuon_rt_recompute_begin(dmuon_rt *rt);
dmuon_rc dmuon_rt_recompute_end(dmuon_rt *rt);

/* Ends the micro-batch in progress without counting it: an evaluation
 * (forward-only) pass, or a micro-batch abandoned after a refused hook.
 * Calls in flight (a prefetch, a gradient reduction) are waited for within
 * the deadline, every open bracket is closed, the blocks the micro-batch
 * acquired are given back (ZeRO-2 keeps those of the step's earlier
 * micro-batches), and before the first step its hooks are not part of the
 * recorded order.  A micro-batch whose backward had begun has added some
 * of its gradients to the accumulation already: then every gradient
 * accumulated since the last step is dropped as well, and the next step
 * needs a new micro-batch.  A forward-only pass drops nothing: the step's
 * micro-batches before it still count.  Outside a micro-batch (and between
 * micro-batches of a completed backward) nothing changes.  Every rank
 * calls it at the same point.  Collective: one agreement within the
 * deadline, so a failure on any rank is the same error on every rank.
 * Errors: DMUON_EINVAL (before open), DMUON_EMISMATCH (before the first
 * step: other ranks made another call here, e.g. the discard is on some
 * ranks only; nothing discarded), DMUON_ETIMEOUT, DMUON_ECOMM (a call in
 * flight failed, or after a communication failure). */
dmuon_rc dmuon_rt_discard(dmuon_rt *rt);

/* ------------------------------------------------------------ parameters -- */

/* Index of parameter `name` (the plan's parameter table), or -1. */
int dmuon_rt_param_index(const dmuon_rt *rt, const char *name);

/* Full FP32 values of parameter p (row-major, numel elements), valid while
 * its layer is gathered (see the life above); NULL otherwise.  Values are
 * the plan's param_dtype (BF16 by default) widened to FP32.  Device cuda:
 * a device pointer (read it on opts.stream, see there). */
const float *dmuon_rt_weights(dmuon_rt *rt, int p);

/* Gradient buffer of parameter p (numel FP32, zeroed at pre_backward), valid
 * between pre_backward and post_backward of its layer; NULL otherwise.
 * Device cuda: a device pointer (write it on opts.stream). */
float *dmuon_rt_grad(dmuon_rt *rt, int p);

/* ------------------------------------------------------------------ step -- */

/* Learning rates of one step (schedules stay in the trainer). */
typedef struct {
    double muon_lr;           /* Muon parameters (lines B, C, D) */
    double adamw_lr;          /* AdamW parameters (every parameter in line A) */
} dmuon_rt_lrs;

/* The optimizer step after the last micro-batch: global-norm clipping (if
 * opts.optim.clip_norm > 0), then on each owner the Muon update of every
 * matrix it owns and AdamW on its shards; HSDP: each updated parameter is
 * published to its leaders as soon as it is done.  Newton–Schulz runs on
 * the real out x in matrix (mat_m x mat_n of dmuon_plan_param): a
 * transposed or strided (gate/up halves, interleaved) matrix is read from
 * the storage with its layout's strides and the result written back there;
 * parameters, gradients and optimizer state stay in storage order.
 * A step fails as a whole, on every rank alike: every Newton–Schulz
 * direction and every new momentum, moment and master is computed and
 * checked before anything is stored, and the outcome is agreed over the
 * world within the deadline before any rank stores or publishes.  A
 * non-finite gradient, or a finite one whose direction or update is not
 * finite (e.g. a Nesterov direction that overflows binary32), fails the
 * step on every rank with DMUON_ENUMERIC naming the parameter; another
 * rank's local error fails it on every rank with that rank's code.  A failed
 * step changes no parameter, optimizer state or step count; it drops the
 * accumulated gradients (the next micro-batch starts clean), so calling
 * step again without a new micro-batch is DMUON_EINVAL, and
 * dmuon_rt_grad_norm reads NaN.  A deadline passed (DMUON_ETIMEOUT) or a
 * communication failure also leaves the state as it was if it happens
 * before the agreement, but the runtime is then unusable (free it).
 * Collective.  Errors: DMUON_EINVAL (a micro-batch not ended, no
 * micro-batch since the last step: local, before any communication, except
 * at the first step, where it is agreed over the ranks;
 * non-finite learning rates, or lrs NULL, on any rank; learning rates
 * that differ between the ranks (their minimum and maximum over the world
 * are compared: the message names muon_lr or adamw_lr with both): agreed,
 * a failed step on every rank like the others, the runtime stays usable),
 * DMUON_EMISMATCH (the first step only: other ranks made another call
 * here, see Errors at the top), DMUON_ENUMERIC, DMUON_ETIMEOUT,
 * DMUON_ECOMM, and a failing rank's code. */
dmuon_rc dmuon_rt_step(dmuon_rt *rt, const dmuon_rt_lrs *lrs);

/* Steps taken (0 after open; restored by load). */
int64_t dmuon_rt_steps(const dmuon_rt *rt);

/* A digest (dmuon_digest) of everything a step changes on this rank: the
 * step count, the masters, momenta and moments this rank holds, and the
 * parameter-dtype copies the gathers read (owner window, even shards,
 * HSDP publish copy).  Accumulated gradients are not part of it.  Local;
 * for checking that a failed step changed nothing, or that replicas agree
 * (equal digests on the ranks holding the same shards). */
uint64_t dmuon_rt_state_digest(const dmuon_rt *rt);

/* Global gradient norm of the last step (before clipping); NaN when the
 * last step failed (also when its gradients were finite: a failed step
 * reports no norm) and 0 before the first step. */
double dmuon_rt_grad_norm(const dmuon_rt *rt);

/* -------------------------------------------------------------- reports -- */

/* Per-rank figures (this rank), for benchmarks and the trainer's log.  The
 * byte figures are the rank's layout's (dmuon_layout_memory of
 * dmuon/layout.h, which dmuon-plan --json prints as "memory"), fixed from
 * create on: everything is allocated once, at that size, for every step
 * (the first included).  On host memory (the MPI backend) the working
 * space's pages are given back to the system after each step
 * (dmuon_symm_release) and the state's pages take memory when first
 * written, so the resident memory is at most these figures.  The times are cumulative since the last
 * dmuon_rt_reset_stats, except optim_s, ns_s and ns_matrices, which are
 * the last step's. */
typedef struct {
    int64_t pool_bytes;          /* the symmetric pool: the three below, each
                                    4 KiB-aligned */
    int64_t ctrl_bytes;          /* the operators' control areas and reduce
                                    staging */
    int64_t work_bytes;          /* the working space: gathered parameter
                                    blocks (param dtype), F32 gradient blocks,
                                    the F32 views dmuon_rt_weights returns
                                    (only layers inside an open bracket have
                                    one, ZeRO-2 too; none when the parameter
                                    dtype is F32: the view is the block) and
                                    the owners' per-layer gather sources and
                                    reduce destinations, and the step's
                                    scratch, Newton–Schulz workspace and
                                    directions, packed by the plan's order */
    int64_t window_bytes;        /* the window space: owner windows (persistent
                                    owner parts), even shards, HSDP publish
                                    copy, line B's direction buffers */
    int64_t state_bytes;         /* private F32 state held by this rank:
                                    masters, momenta, moments, accumulated
                                    gradients */
    int64_t total_bytes;         /* pool + state: what the runtime holds */
    double optim_s;              /* last step: owner updates (s, wall) */
    double ns_s;                 /* of which Newton–Schulz */
    double comm_wait_s;          /* since the last reset: time blocked in
                                    gathers, reductions and publish waits
                                    (exposed communication) */
    double publish_wait_s;       /* of which publish waits (HSDP) */
    double gather_s, reduce_s;   /* since the last reset: wall time inside
                                    gather / reduce calls */
    int64_t ns_matrices;         /* matrices orthogonalised by this rank, last step */
} dmuon_rt_stats;

/* This rank's figures into *out.  Local; valid from create on. */
void dmuon_rt_get_stats(const dmuon_rt *rt, dmuon_rt_stats *out);
/* Zeroes the cumulative times (comm_wait_s, publish_wait_s, gather_s,
 * reduce_s).  Local. */
void dmuon_rt_reset_stats(dmuon_rt *rt);

/* --------------------------------------------------------- checkpoints -- */

/* Saves the optimizer state this rank owns into dir (dmuon/ckpt.h), with
 * the hyperparameters and NS variant, collective; every wait has the
 * runtime's deadline (a rank slow in its file I/O makes every rank return
 * DMUON_ETIMEOUT; the runtime is then unusable).  dir is rank 0's: the
 * directory and its checks are rank 0's (every rank writes its files under
 * rank 0's dir, on a file system every rank sees); the dir other ranks pass
 * is not read or compared.  Errors: DMUON_ECOMM after an earlier
 * communication failure, those of dmuon_ckpt_save. */
dmuon_rc dmuon_rt_save(dmuon_rt *rt, const char *dir);

/* Loads the state this rank owns under this runtime's plan from dir (saved
 * under any plan of the same model), then places the parameters as open
 * does.  The checkpoint's hyperparameters (optim: momentum, nesterov,
 * weight decays, update scale, betas, eps, clip norm) and NS variant must
 * equal this runtime's, except those named in opts.resume_override:
 * DMUON_EMISMATCH naming the field and both values, nothing loaded
 * (checkpoints saved before the variant was recorded are not compared on
 * it).  Learning rates are per step and never compared.  Collective; call
 * after open, before the first step.  Errors: DMUON_EINVAL (after a step,
 * or an unknown resume_override entry), those of dmuon_ckpt_load. */
dmuon_rc dmuon_rt_load(dmuon_rt *rt, const char *dir);

/* Writes the full FP32 master weights as one safetensors file with the
 * model's names (dmuon_ckpt_export).  path is rank 0's (as for save: the
 * path other ranks pass is not read or compared).  Collective. */
dmuon_rc dmuon_rt_export(dmuon_rt *rt, const char *path);

/* Frees the runtime (collective over the node: frees the pool).  Accepts
 * NULL.  After open, it first waits for the calls still in flight and
 * agrees over the world (dmuon_agree), both within the deadline, that
 * every rank reached free; a rank missing at the deadline counts as a
 * communication failure (below; this rank's error message is then that
 * timeout), so free returns within about two deadlines and never blocks
 * in the pool's collective free waiting for a dead rank.  After a communication failure (DMUON_ETIMEOUT or DMUON_ECOMM from
 * any call) the pool, the optimizer state, the scratch, the groups and the
 * communicators are kept allocated for good, not freed: a call abandoned
 * at its deadline may still write them when the late peers arrive, and
 * freeing the pool would be a collective on a communicator out of step.
 * The call is then local; the process should end the job soon. */
void dmuon_rt_free(dmuon_rt *rt);

#endif
