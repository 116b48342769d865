/*
 * dmuon/netmodel.h — a network model of the communication operators and
 * their baselines, to predict clusters no machine here has (paper Tables
 * 5–7).  Pure: no MPI, no I/O; the same inputs give the same figures.
 *
 * Ours is replayed chunk by chunk from the schedules of dmuon/sched.h (the
 * same dmuon_sched_init, dmuon_sched_queue and dmuon_sched_route the MPI
 * backend executes), on R nodes × K ranks with ready scheduling: every
 * rank is one worker serving whichever of its queues has a chunk ready
 * (earliest ready first, each queue strictly in order), every rank has a
 * rail port and every node a network port, each busy for one message at a
 * time.  The publish replays the publish schedule of sched.c
 * (dmuon_pub_sched_init over the copy layout of dmuon_publish_layout, routes
 * from dmuon_pub_sched_hop): each parameter a stream of chunks along its
 * rail, every rail at once; the owners post in table order.  With
 * pub_fanout > 0 (the MPI backend, namespace preset) a parameter on R > 2
 * nodes takes the MPI backend's route instead (dmuon_pub_sched_msg): up to
 * pub_fanout bytes the fan-out (the owner's rank sends each chunk to the
 * R − 1 leaders itself), above it the relay (chunk k to one leader, the
 * (k mod (R − 1))-th, which sends it on to the R − 2 others).
 *
 * Per chunk of b bytes handled by a rank (times in seconds):
 *   worker      chunk_oh, and chunk_oh more for each send past the first
 *               (issuing it: the star path's R − 1 sends); gather: + b /
 *               intra_bw to read a local owner's
 *               window, then the send is issued, then the stores into the
 *               node: intra_lat + b·(K−1) / intra_bw by the worker, or with
 *               mcast one multicast store of b / intra_bw that also holds the
 *               node's intra port (every rank's ingress takes all b bytes);
 *               reduce: intra_lat + the loads of the node's K inputs (K·b /
 *               intra_bw by the worker, or with mcast one reduction-load of
 *               b / intra_bw on the node's intra port), + b·(K−1+nin) /
 *               red_bw to add them (with mcast b·nin / red_bw: the switch
 *               adds the node's inputs; red_bw 0: free), then the send (or
 *               the owner's window write, b / intra_bw); publish: the send
 *               only.
 *   group       with grp_bw > 0, a chunk's own processing by the thread
 *               group that serves it delays what follows it by b / grp_bw
 *               without holding the worker (the paper's kernel runs up to 16
 *               groups per rank on different chunks at once, C.2; the
 *               worker is the rank's serial part): gather, on a node that
 *               sends the chunk on, its store into the node comes before
 *               the send (the node's copy is complete before it is put, as
 *               kernels/nccl_dev.cu does); reduce, on every node, the
 *               reduction-load and add come before the send or the
 *               owner's window write.
 *   message     starts when the sender's worker issued it and the sender's
 *               rail port, the receiver's rail port and both nodes' network
 *               ports are free; holds the rail ports b / rail_bw and the node
 *               ports b / node_bw; arrives b / min(rail_bw, node_bw) +
 *               hop_lat after it started.
 *   call        call_oh, once.
 *
 * Baselines, as NCCL runs them (tree = 0; the structure of NCCL's tuning
 * model, src/graph/tuning.cc, and its channel and step choice,
 * enqueue.cc): a ring of n ranks, every step of it gated by the network
 * once the ring crosses nodes (R > 1: each step pays the protocol's step
 * latency lat_P; R = 1: intra_lat).  Three protocols P: LL (payload 1/2
 * of each line, a flag in every line: an 8-byte slice), LL128 (120/128, a
 * 120-byte slice), Simple (all, ring_chunk slices: one flag per step).  A
 * call spreads its bytes over nch = clamp(floor(bytes / ch_bytes), 1,
 * chmax) channels; one channel moves k = chmax / (link·ring_eff·payload_P)
 * s per byte (LL: no faster than its share of NCCL's Hopper cap on LL,
 * llMaxBw / channels with llMaxBw 39 GB/s on ≤ 2 nodes, 20.4 GB/s on
 * more), + chmax / nccl_red_bw for a reduction (the SM adds).  With cb the
 * bytes of one channel and c = min(cb, slice_P):
 *   rooted call (broadcast / reduce of b bytes), n − 1 pipelined steps:
 *       base_lat + (n − 1)·(lat_P + c·k) + (cb − c)·k
 *     with the protocol NCCL's tuner picks: the least of its own
 *     prediction baseLat_P + n·hwLat_P + cb·k (tuning.cc's ring constants:
 *     baseLat 6.6, 14.0, 8.4 us; hwLat per step 2.7, 4.0, 14.0 us across
 *     nodes, 0.6, 1.9, 3.4 us in one node);
 *   ring call (all-gather / reduce-scatter, blk bytes per rank and step):
 *       base_lat + (n − 1)·(lat_P + lat_ring + cb·k), the fastest P.
 * Lines: root = one rooted call of the layer's total; equal_length = the
 * ring call of total / N; coalesced (AGV/RSV) = the ring call of the
 * largest block of one rank; per_owner = one rooted call per segment,
 * successive on one stream: call i starts on a rank when that rank has
 * finished call i − 1 (its kernel follows on the stream), so the
 * wavefronts of successive calls trail each other along the ring instead
 * of each call waiting for the whole chain of the last.  The ring of all
 * R × K ranks: link = min(node_bw, intra_bw) (R > 1), chmax = channels.
 * Publish baselines on the rails (a ring of the R leaders of one rail;
 * link = min(rail_bw, node_bw / the rails publishing), chmax = channels /
 * K): per_owner: one rooted call per parameter, trailing as above;
 * coalesced: per layer one grouped call of the layer's bytes lb on the
 * rail, pipelined in coal_slices slices per channel: base_lat + (R − 1)·
 * (lat_P + c·k) + (cb − c)·k with c = cb / coal_slices, each layer's call
 * filling and draining the chain before the next.  The rails run side by side; the slowest rail is the
 * time.
 * With tree = 1 (Open MPI's tuned collectives, the namespace preset) the
 * baselines keep the simpler forms: fill F(b) = ceil(log2 N)·(hop_lat +
 * c / rank) with c = min(b, ring_chunk), rank = min(rail_bw, node_bw / K);
 * broadcast / reduce: call_oh + F(b) + max(b / net, b / intra_bw [, b /
 * red_bw]) / ring_eff with net = min(K·rail_bw, node_bw); all-gather /
 * reduce-scatter of T: call_oh + F(T/N) + max(T·(R−1)/R / net, T·(N−1)/N /
 * intra_bw) / ring_eff; per-owner: the broadcasts one after the other, the
 * fill paid once; coalesced: call_oh + F(m) + (N−1)·m / (ring_eff·min(rank,
 * intra_bw)).
 */
#ifndef DMUON_NETMODEL_H
#define DMUON_NETMODEL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "dmuon/io.h"
#include "dmuon/plan.h"
#include "dmuon/rc.h"
#include "dmuon/sched.h"
#include "dmuon/types.h"

/* The parameters, in this order in dmuon_net_params.v[] and everywhere a
 * vector of them is written (JSON keys = the names below). */
enum {
    DMUON_NP_INTRA_BW = 0, /* bytes/s: one rank's stores/loads inside a node */
    DMUON_NP_INTRA_LAT,    /* s: one intra-node step */
    DMUON_NP_RAIL_BW,      /* bytes/s: one rank's link on its rail */
    DMUON_NP_NODE_BW,      /* bytes/s: one node's network link, shared by its rails */
    DMUON_NP_HOP_LAT,      /* s: one cross-node hop */
    DMUON_NP_CHUNK_OH,     /* s: one chunk handled by one rank */
    DMUON_NP_CALL_OH,      /* s: one operator or baseline call */
    DMUON_NP_RED_BW,       /* bytes/s: adding BF16 inputs (0: free, done in the switch) */
    DMUON_NP_RING_EFF,     /* fraction of the link bandwidths the baselines reach */
    DMUON_NP_RING_CHUNK,   /* bytes: the baselines' pipeline step (Simple protocol) */
    DMUON_NP_BASE_LAT,     /* s: NCCL's fixed cost of one call on top of call_oh */
    DMUON_NP_LAT_LL,       /* s: one ring step, LL protocol */
    DMUON_NP_LAT_LL128,    /* s: one ring step, LL128 protocol */
    DMUON_NP_LAT_SIMPLE,   /* s: one ring step, Simple protocol */
    DMUON_NP_NCCL_RED_BW,  /* bytes/s: one GPU's SM reduction in the baselines */
    DMUON_NP_CHANNELS,     /* the baselines' largest channel count */
    DMUON_NP_CH_BYTES,     /* bytes: fewer channels while a channel would carry less */
    DMUON_NP_COAL_SLICES,  /* slices of a layer in flight in the coalesced publish */
    DMUON_NP_LAT_RING,     /* s: one all-gather / reduce-scatter ring step on top of
                              the protocol's step latency (fitted: a ring step
                              of the 16-GPU cells costs more than a broadcast's) */
    DMUON_NP_HOP_BW,       /* bytes/s: ours, a chunk's latency per byte on each
                              cross-node hop on top of its port time, holding no
                              port (0: none) */
    DMUON_NP_PUB_FANOUT,   /* bytes: ours' publish on R > 2 nodes takes the MPI
                              backend's routes: a parameter of at most this many
                              bytes goes from the owner's rank to the R − 1
                              leaders itself (fan-out,
                              $DMUON_PUBLISH_FANOUT_BYTES, 128 KiB by default), a
                              larger one by the relay; 0: every parameter takes
                              the chain (the GPU kernel of the paper) */
    DMUON_NP_GRP_BW,       /* bytes/s: ours, one thread group storing a gathered
                              chunk into its node, or reduction-loading and adding
                              a chunk, before the chunk goes on (0: free); it
                              delays that chunk only: the rank's other groups
                              work meanwhile */
    DMUON_NP_COUNT
};

/* The parameters ours depends on (the baselines use some of them too). */
#define DMUON_NP_OURS_MASK                                                          \
    ((1u << DMUON_NP_INTRA_BW) | (1u << DMUON_NP_INTRA_LAT) | (1u << DMUON_NP_RAIL_BW) | \
     (1u << DMUON_NP_NODE_BW) | (1u << DMUON_NP_HOP_LAT) | (1u << DMUON_NP_CHUNK_OH) |   \
     (1u << DMUON_NP_CALL_OH) | (1u << DMUON_NP_RED_BW) | (1u << DMUON_NP_GRP_BW))

typedef struct {
    double v[DMUON_NP_COUNT];
    int mcast;             /* 1: one store / reduction-load reaches a whole node
                              (NVLink SHARP multimem); 0: one per rank */
    int tree;              /* baselines' latency: 0 rings (NCCL), 1 trees of
                              ceil(log2 N) steps (Open MPI's tuned collectives) */
    char fitted_on[256];   /* what a parameter file says they were fitted on
                              ("" for a preset; cut to 255 bytes) */
} dmuon_net_params;

/* Name of parameter i ("intra_bw", ...); NULL out of range. */
const char *dmuon_net_param_name(int i);

/* Lines a cell can be asked for. */
typedef enum {
    DMUON_NET_OURS = 0,
    DMUON_NET_PER_OWNER,
    DMUON_NET_COALESCED,
    DMUON_NET_EQUAL,       /* all-gather / reduce-scatter of the layer's total */
    DMUON_NET_ROOT,        /* one broadcast / reduce of the layer's total */
    DMUON_NET_LINE_COUNT
} dmuon_net_line;

typedef enum { DMUON_NET_AGV = 0, DMUON_NET_RSV, DMUON_NET_PUBLISH } dmuon_net_op;

/* Line name ("ours", "per_owner", "coalesced", "equal_length", "root") and
 * parser (DMUON_EINVAL naming the value). */
const char *dmuon_net_line_name(dmuon_net_line l);
dmuon_rc dmuon_net_line_parse(const char *s, dmuon_net_line *out);

/* One operator call to predict.  segs: AGV/RSV: a segment table for
 * nodes × per_node ranks (as dmuon_group_create takes it); publish: a
 * publish table in post order (owner, dtype, count; offsets are not used,
 * the copy layout is dmuon_publish_layout's), with layer_of[i] the layer of
 * parameter i (non-decreasing; NULL: one layer) for the coalesced line.
 * sched_opts: the schedule options of ours (NULL: defaults). */
/* What the replay of ours moved (filled when a case points to one and
 * line ours is predicted): rail_bytes[rank] the bytes that rank sent on
 * its rail port, node_bytes[node] the bytes that left the node over its
 * network link, messages the cross-node messages (one per chunk and hop).
 * The caller provides rail_bytes (nodes·per_node entries) and node_bytes
 * (nodes entries); the replay zeroes and fills them. */
typedef struct {
    double *rail_bytes, *node_bytes;
    int64_t messages;
} dmuon_net_counts;

typedef struct {
    dmuon_net_op op;
    int nodes, per_node;
    const dmuon_segment *segs;
    int n;
    const int *layer_of;
    const dmuon_sched_opts *sched_opts;
    dmuon_net_counts *counts;   /* NULL: not counted */
    int64_t max_jobs;           /* ours: at most this many chunk-node jobs (0:
                                   DMUON_NET_REPLAY_JOBS); a larger call is replayed
                                   with g consecutive chunks of a stream merged
                                   into one (its bytes and g chunk overheads),
                                   which flows through each hop as its g chunks
                                   would back to back: it leaves once its first
                                   chunk is at hand, its last byte no earlier
                                   than its last chunk plus one chunk's time on
                                   the port, and the receiver goes on once the
                                   first chunk arrived (cut-through) */
} dmuon_net_case;

/* Default bound on a replay's jobs (chunks × nodes): every cell of the
 * paper's Tables 5-7 replays chunk by chunk under it. */
#define DMUON_NET_REPLAY_JOBS (INT64_C(1) << 22)

/* Predicts the time in seconds of line l on case c under p.  Ours replays
 * the schedule chunk by chunk (cost O(chunks·R·K)); the baselines are the
 * closed forms above.  A group of one rank (R·K = 1), and a publish on
 * one node, move nothing: 0 s.  Errors: DMUON_EINVAL (nodes or per_node <
 * 1, no segments, a publish parameter whose owner is not on one rail, a
 * line the op has not: equal_length and root for publish, a parameter <=
 * 0 that must be positive, ring_eff > 1), DMUON_ENUMERIC (the prediction
 * is not finite: a parameter too large), DMUON_ENOMEM, and the errors of
 * dmuon_sched_init. */
dmuon_rc dmuon_net_predict(const dmuon_net_params *p, const dmuon_net_case *c, dmuon_net_line l,
                           double *seconds);

/* Fitting: minimises Σ_i log(pred_i / meas_i)² over the parameters whose
 * bit is set in free_mask (the others keep their value in *p), in log
 * space, by Nelder–Mead from *p, restarted twice from its best point (at
 * most max_evals evaluations of the sum in all; 0 → 400).  cases[i], lines[i], meas[i] (seconds, > 0) are the cells.
 * On success *p holds the best parameters found and *rms the root mean
 * square of log(pred/meas) there.  Errors: DMUON_EINVAL (no cells, a
 * measurement ≤ 0, a start value ≤ 0 of a free parameter), and the errors of
 * dmuon_net_predict. */
dmuon_rc dmuon_net_fit(dmuon_net_params *p, unsigned free_mask, const dmuon_net_case *cases,
                       const dmuon_net_line *lines, const double *meas, int ncells,
                       int max_evals, double *rms);

/* Presets (the starting points and the fixed values of the two parameter
 * sets): "namespace" (Linux namespace hosts on one machine: TCP over veth,
 * shared-memory windows, CPU adds) and "h100" (H100 SXM nodes of 8 GPUs,
 * NVLink 4 with NVLink SHARP multicast, one 400 Gb/s rail per GPU; figures
 * from the public NVIDIA H100 / ConnectX-7 data sheets: 450 GB/s NVLink per
 * direction, 50 GB/s per 400 Gb/s port).  *free_mask gets the parameters the
 * preset leaves to fitting.  DMUON_EINVAL for another name. */
dmuon_rc dmuon_net_preset(const char *name, dmuon_net_params *p, unsigned *free_mask);

/* Parameter files: fit once, predict many.  A JSON object
 *   {"format": "dmuon-netmodel-params", "version": 1, "preset": NAME,
 *    "fitted_on": TEXT, "mcast": BOOL, "tree": BOOL,
 *    "free": [names of the parameters left to fitting],
 *    "params": {"intra_bw": VALUE, ... every name of dmuon_net_param_name}}
 * (grp_bw may be absent, meaning 0: files saved before it existed load)
 * (units as in the enum above; values with 12 significant digits).
 * dmuon_net_params_save writes it atomically (a temporary file renamed:
 * nothing half-written); preset and fitted_on may be NULL.  Errors:
 * DMUON_EIO.  dmuon_net_params_load reads one (libyaml, as every JSON
 * input of the project) into *p (its fitted_on too) and *free_mask, and
 * copies the preset's name into preset (preset_len bytes; may be NULL).  Errors: DMUON_EIO or
 * DMUON_ENOTFOUND (no file), DMUON_EPARSE naming the file, line and field
 * (another format or version, a missing or negative parameter, one out of
 * its range: bandwidths of at least 1e3 bytes/s (0 where 0 means off),
 * times of at most 1000 s, ring_eff in (0, 1], sizes up to 2^50 bytes,
 * channels and coal_slices whole from 1 to 4096; an unknown name in params
 * or free, a top-level field other than those above, a preset or
 * fitted_on that is not a string in quotes: null, true or a number). */
dmuon_rc dmuon_net_params_save(const char *path, const dmuon_net_params *p, unsigned free_mask,
                               const char *preset, const char *fitted_on);
dmuon_rc dmuon_net_params_load(const char *path, dmuon_net_params *p, unsigned *free_mask,
                               char *preset, size_t preset_len);

/* ------------------------------------------- a plan's communication -- */

/* Lines of a training step (paper §7): A = FSDP's equal-length
 * primitives (all-gather / reduce-scatter of each layer's total, no
 * publish), C = the plan's owners with NCCL (per-owner broadcasts and
 * reduces; HSDP: the node's gather as one coalesced call, the publish the
 * faster of per-owner and coalesced), D = ours. */
enum { DMUON_NET_STEP_A = 0, DMUON_NET_STEP_C, DMUON_NET_STEP_D, DMUON_NET_STEP_COUNT };

typedef struct {
    const char *name;                     /* the plan's layer name (valid while the plan lives) */
    int64_t bytes;                        /* the layer buffer */
    double gather[DMUON_NET_LINE_COUNT];  /* s, per line (ours, per_owner, ...) */
    double reduce[DMUON_NET_LINE_COUNT];
} dmuon_net_layer_pred;

typedef struct {
    int nodes, per_node, zero_stage, hsdp;
    int nlayers;                          /* layers with segments */
    dmuon_net_layer_pred *layers;
    int nrails;                           /* HSDP: per_node; FSDP: 0 */
    int64_t *rail_bytes;                  /* per rail: bytes published */
    double (*rail)[3];                    /* per rail: ours, per_owner, coalesced (s) */
    double step[DMUON_NET_STEP_COUNT];    /* s: a step's communication, nothing overlapped */
} dmuon_net_plan_pred;

/* Predicts the communication of one training step of plan under p (no
 * measured rows): every layer's gather and reduction by ours and the
 * baselines, the publish of every rail (HSDP), and the step totals of
 * lines A, C, D.  FSDP: gather and reduction over all nodes × per_node
 * ranks; HSDP: the gather inside one node (each owner's row leader there,
 * rank owner mod per_node), the reduction over all ranks, the publish on
 * the rails (dmuon_plan_rail_publish).  A step gathers each layer once
 * (ZeRO-2) or twice (ZeRO-3: forward and backward) and reduces it once;
 * the step totals add the operators' times (no overlap with compute or
 * with each other).  sched_opts: ours' schedule options (NULL: defaults).
 * Each replay of ours is bounded to DMUON_NET_REPLAY_JOBS / 4 jobs (see
 * dmuon_net_case.max_jobs): past it, consecutive chunks are merged.
 * Memory O(ranks + chunks of one call · nodes).  *out is released with
 * dmuon_net_plan_pred_free.  Errors: those of dmuon_net_predict and
 * dmuon_plan_rail_publish, DMUON_ENUMERIC (a step total not finite),
 * DMUON_ENOMEM. */
dmuon_rc dmuon_net_plan_predict(const dmuon_plan *plan, const dmuon_net_params *p,
                                const dmuon_sched_opts *sched_opts, dmuon_net_plan_pred *out);
/* The same with each replay of ours bounded to max_jobs chunk-node jobs
 * (0: DMUON_NET_REPLAY_JOBS / 4; INT64_MAX: chunk by chunk, cost and
 * memory O(chunks · nodes) per call).  Errors: those of
 * dmuon_net_plan_predict. */
dmuon_rc dmuon_net_plan_predict_jobs(const dmuon_plan *plan, const dmuon_net_params *p,
                                     const dmuon_sched_opts *sched_opts, int64_t max_jobs,
                                     dmuon_net_plan_pred *out);
void dmuon_net_plan_pred_free(dmuon_net_plan_pred *r);

/* The prediction as a table (per layer, per rail, the step totals) on f,
 * and as the keys "layers", "rails", "step" into the JSON object open in w
 * (times in microseconds). */
void dmuon_net_plan_print(const dmuon_net_plan_pred *r, FILE *f);
void dmuon_net_plan_json(const dmuon_net_plan_pred *r, dmuon_json *w);

#endif
