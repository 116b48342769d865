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
 * rail, every rail at once; the owners post in table order.
 *
 * Per chunk of b bytes handled by a rank (times in seconds):
 *   worker      chunk_oh; gather: + b / intra_bw to read a local owner's
 *               window, then the send is issued, then the stores into the
 *               node: intra_lat + b·(K−1) / intra_bw by the worker, or with
 *               mcast one multicast store of b / intra_bw that also holds the
 *               node's intra port (every rank's ingress takes all b bytes);
 *               reduce: intra_lat + the loads of the node's K inputs (K·b /
 *               intra_bw by the worker, or with mcast one reduction-load of
 *               b / intra_bw on the node's intra port), + b·(K−1+nin) /
 *               red_bw to add them (red_bw 0: free), then the send (or the
 *               owner's window write, b / intra_bw); publish: the send only.
 *   message     starts when the sender's worker issued it and the sender's
 *               rail port, the receiver's rail port and both nodes' network
 *               ports are free; holds the rail ports b / rail_bw and the node
 *               ports b / node_bw; arrives b / min(rail_bw, node_bw) +
 *               hop_lat after it started.
 *   call        call_oh, once.
 * Baselines, as NCCL runs them: a ring of the N ranks crossing the R nodes,
 * pipelined in steps of c = min(b, ring_chunk) bytes; net = min(K·rail_bw,
 * node_bw) the bandwidth into one node, rank = min(rail_bw, node_bw / K) one
 * rank's share of it; fill F(b) = (R−1)·(hop_lat + c / rank) + (N−R)·
 * (intra_lat + c / intra_bw), or with `tree` set (Open MPI's tuned
 * collectives: binomial and recursive-doubling trees) ceil(log2 N)·(hop_lat
 * + c / rank) on more than one node; ring_eff scales the baselines'
 * bandwidths (their kernels reach another fraction of the links than ours):
 *   broadcast / reduce of b bytes (one root):
 *       call_oh + F(b) + max(b / net, b / intra_bw [, b / red_bw]) / ring_eff
 *   all-gather / reduce-scatter of T bytes in total (b = T / N per step):
 *       call_oh + F(T/N) + max(T·(R−1)/R / net, T·(N−1)/N / intra_bw) / ring_eff
 *   per-owner: one broadcast / reduce per segment, one after the other;
 *   coalesced (variable lengths, one call): N−1 ring steps, each as long as
 *       its largest block m: call_oh + F(m) + (N−1)·m / (ring_eff·min(rank,
 *       intra_bw));
 *   equal length: the all-gather / reduce-scatter of the layer's total;
 *   root primitive: one broadcast / reduce of the layer's total.
 * Publish baselines on the rails (R ranks each, K = 1 in the formulas, the
 * rails side by side sharing node_bw): per-owner: one broadcast per
 * parameter; coalesced: per layer one grouped call, a broadcast of the
 * layer's bytes of the rail: call_oh + F(m) + layer_bytes / (ring_eff·bw),
 * m the largest parameter of the layer.
 */
#ifndef DMUON_NETMODEL_H
#define DMUON_NETMODEL_H

#include <stdint.h>

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
    DMUON_NP_RING_CHUNK,   /* bytes: the baselines' pipeline step (fill per hop) */
    DMUON_NP_COUNT
};

typedef struct {
    double v[DMUON_NP_COUNT];
    int mcast;             /* 1: one store / reduction-load reaches a whole node
                              (NVLink SHARP multimem); 0: one per rank */
    int tree;              /* baselines' latency: 0 rings (NCCL), 1 trees of
                              ceil(log2 N) steps (Open MPI's tuned collectives) */
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
typedef struct {
    dmuon_net_op op;
    int nodes, per_node;
    const dmuon_segment *segs;
    int n;
    const int *layer_of;
    const dmuon_sched_opts *sched_opts;
} dmuon_net_case;

/* Predicts the time in seconds of line l on case c under p.  Ours replays
 * the schedule chunk by chunk (cost O(chunks·R·K)); the baselines are the
 * closed forms above.  Errors: DMUON_EINVAL (nodes or per_node < 1, no
 * segments, a publish parameter whose owner is not on one rail, a line the
 * op has not: equal_length and root for publish), DMUON_ENOMEM, and the
 * errors of dmuon_sched_init. */
dmuon_rc dmuon_net_predict(const dmuon_net_params *p, const dmuon_net_case *c, dmuon_net_line l,
                           double *seconds);

/* Fitting: minimises Σ_i log(pred_i / meas_i)² over the parameters whose
 * bit is set in free_mask (the others keep their value in *p), in log
 * space, by Nelder–Mead from *p (at most max_evals evaluations of the sum;
 * 0 → 400).  cases[i], lines[i], meas[i] (seconds, > 0) are the cells.
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

#endif
