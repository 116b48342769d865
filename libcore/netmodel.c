/*
 * netmodel.c — the network model (dmuon/netmodel.h): a discrete-event
 * replay of the operators' schedules and closed forms for the baselines,
 * plus a Nelder–Mead fit of the parameters to measured cells.
 *
 * Invariants of the replay: events are handled in time order (a binary
 * heap; ties by insertion); a rank's worker takes ready chunks first come
 * first served, which keeps every queue in order because the chunks of one
 * queue become ready in increasing order at every node (they arrive over
 * one path whose ports serve one message at a time); ports are reserved in
 * the order sends are issued.  The schedules come from dmuon_sched_init and
 * dmuon_pub_sched_init, their routes from dmuon_sched_route and
 * dmuon_pub_sched_hop: nothing here knows a route of its own.
 */
#include "dmuon/netmodel.h"

#include "dmuon/doc.h"
#include "dmuon/io.h"
#include "dmuon/publish.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static const char *const param_names[DMUON_NP_COUNT] = {
    "intra_bw",  "intra_lat", "rail_bw",    "node_bw",     "hop_lat",   "chunk_oh",
    "call_oh",   "red_bw",    "ring_eff",   "ring_chunk",  "base_lat",  "lat_ll",
    "lat_ll128", "lat_simple", "nccl_red_bw", "channels",  "ch_bytes",  "coal_slices",
    "lat_ring",  "hop_bw",    "pub_fanout", "grp_bw"};
static const char *const line_names[DMUON_NET_LINE_COUNT] = {
    "ours", "per_owner", "coalesced", "equal_length", "root"};

const char *dmuon_net_param_name(int i)
{
    return i >= 0 && i < DMUON_NP_COUNT ? param_names[i] : NULL;
}

const char *dmuon_net_line_name(dmuon_net_line l)
{
    return (int)l >= 0 && l < DMUON_NET_LINE_COUNT ? line_names[l] : "?";
}

dmuon_rc dmuon_net_line_parse(const char *s, dmuon_net_line *out)
{
    for (int i = 0; i < DMUON_NET_LINE_COUNT; i++)
        if (s && !strcasecmp(s, line_names[i])) {
            *out = (dmuon_net_line)i;
            return DMUON_OK;
        }
    return DMUON_FAIL(DMUON_EINVAL, "line '%s': expected ours, per_owner, coalesced, "
                      "equal_length or root", s ? s : "(null)");
}

static double dmin(double a, double b) { return a < b ? a : b; }
static double dmax(double a, double b) { return a > b ? a : b; }

/* ------------------------------------------------------------ events ---- */

typedef struct {
    double t;
    int64_t seq;    /* insertion order, for ties */
    int kind;       /* EV_READY: job becomes ready; EV_DONE: a worker finished */
    int rank;
    int64_t job;
} event;
enum { EV_READY = 0, EV_DONE };

typedef struct {
    event *v;
    int64_t n, cap, seq;
} heap;

static int ev_less(const event *a, const event *b)
{
    return a->t < b->t || (a->t == b->t && a->seq < b->seq);
}

static int heap_push(heap *h, double t, int kind, int rank, int64_t job)
{
    if (h->n == h->cap) {
        int64_t cap = h->cap ? 2 * h->cap : 1024;
        event *v = realloc(h->v, (size_t)cap * sizeof *v);
        if (!v)
            return -1;
        h->v = v;
        h->cap = cap;
    }
    event e = {t, h->seq++, kind, rank, job};
    int64_t i = h->n++;
    while (i > 0 && ev_less(&e, &h->v[(i - 1) / 2])) {
        h->v[i] = h->v[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h->v[i] = e;
    return 0;
}

static event heap_pop(heap *h)
{
    event top = h->v[0], last = h->v[--h->n];
    int64_t i = 0;
    for (;;) {
        int64_t c = 2 * i + 1;
        if (c >= h->n)
            break;
        if (c + 1 < h->n && ev_less(&h->v[c + 1], &h->v[c]))
            c++;
        if (!ev_less(&h->v[c], &last))
            break;
        h->v[i] = h->v[c];
        i = c;
    }
    if (h->n)
        h->v[i] = last;
    return top;
}

/* ------------------------------------------------------------ replay ---- */

/* State of one replay.  The schedule is seen as streams: a stream is one
 * queue (q, s) of dmuon_sched or one parameter of dmuon_pub_sched, with its
 * chunks in order and, per node, the nodes it receives from and sends to.
 * Job j = node·nc + c for chunk c (chunks numbered stream by stream); it runs
 * on rank node·K + the stream's rail. */
typedef struct {
    const dmuon_net_params *p;
    int R, K, kind;             /* kind: 0 gather, 1 reduce, 2 publish */
    int64_t nc;                 /* chunks */
    int ns;                     /* streams */
    double *bytes;              /* per chunk */
    double *mult;               /* per chunk: chunks of the schedule merged into it */
    int *stream_of;             /* per chunk */
    int64_t *sfirst;            /* per stream: its chunks [sfirst[i], sfirst[i+1]) */
    int *srail;                 /* per stream: its rail */
    const dmuon_sched *cs;      /* the schedule replayed (gather, reduce) */
    const dmuon_pub_sched *ps;  /* or the publish schedule */
    unsigned char *sroute;      /* publish: per stream, its dmuon_pub_route (NULL:
                                   every stream takes the chain) */
    int *rin, *rout;            /* scratch: one route (R entries each) */
    int *need;                  /* per job: inputs still to arrive */
    double *ready;              /* per job: latest input arrival (of its first part, when
                                   chunks are merged) */
    double *full;               /* per job: latest arrival of its last part */
    int64_t *fifo_next;         /* per job: next job in its rank's FIFO */
    int64_t *head, *tail;       /* per rank FIFO of ready jobs */
    double *worker;             /* per rank: time its worker is free */
    double *rail_tx, *rail_rx;  /* per rank */
    double *node_tx, *node_rx;  /* per node */
    double *node_in;            /* per node: its intra port (multicast stores, loads) */
    heap h;
    double end;
    dmuon_net_counts *cnt;      /* NULL: not counted */
} replay;

/* The route of chunk c of stream st at node: fills r->rin (nodes it
 * receives from) and r->rout (nodes it sends to), asked of the schedule
 * each time (no table of routes is kept: memory stays linear in the
 * ranks); returns the input count and stores the output count in *nout
 * (a publish may pass nout NULL: then only the input count).
 * A publish chunk is a message of dmuon_pub_sched_msg (on the relay, the
 * stream's k-th job is its message k, merged chunks or not). */
static int route_at(replay *r, int st, int64_t c, int node, int *nout)
{
    if (r->cs)
        return dmuon_sched_route(r->cs, st / r->K, node, r->rin, r->rout, nout);
    dmuon_pub_route rt = r->sroute ? (dmuon_pub_route)r->sroute[st] : DMUON_PUB_CHAIN;
    /* nout NULL: the input count only (the destinations are not listed) */
    int dummy = 0;
    int from = dmuon_pub_sched_msg(r->ps, st, rt, (int)(c - r->sfirst[st]), node,
                                   nout ? r->rout : NULL, nout ? nout : &dummy);
    r->rin[0] = from;
    return from >= 0;
}

/* A message of b bytes from node a to node z on rail s, issued at t:
 * returns its arrival time.  The sender's ports and the receiver's ports
 * are separate pipes: it leaves once the sender's rail and node ports are
 * free, and is taken in once the receiver's are (a port serves one message
 * at a time, at its bandwidth).  A message of m > 1 merged chunks stands
 * for m chunks sent back to back: it may start once the first is at hand
 * (t), its last byte leaves no earlier than the last chunk is at hand
 * (t_full) plus one chunk's time on the port; *full gets the arrival of
 * the last chunk, the return value that of the first.  With m = 1 (t_full
 * <= t) both are the arrival of the message. */
static double message(replay *r, int a, int z, int s, double b, double t, double m,
                      double t_full, double *full)
{
    const double *v = r->p->v;
    int ra = a * r->K + s, rz = z * r->K + s;
    if (r->cnt) {
        r->cnt->rail_bytes[ra] += b;
        r->cnt->node_bytes[a] += b;
        r->cnt->messages++;
    }
    double tr = b / v[DMUON_NP_RAIL_BW], tn = b / v[DMUON_NP_NODE_BW];
    double st = dmax(t, dmax(r->rail_tx[ra], r->node_tx[a]));
    r->rail_tx[ra] = st + tr;
    r->node_tx[a] = st + tn;
    double hold = dmax(tr, tn);
    double sent = dmax(st + hold, t_full + hold / m);
    double in = dmax(sent, dmax(r->rail_rx[rz] + tr, r->node_rx[z] + tn));
    r->rail_rx[rz] = in - hold + tr;
    r->node_rx[z] = in - hold + tn;
    *full = in + v[DMUON_NP_HOP_LAT];
    if (v[DMUON_NP_HOP_BW] > 0)
        *full += b / m / v[DMUON_NP_HOP_BW];   /* per chunk, holding no port */
    return *full - hold * (m - 1) / m;
}

/* The node's stores or loads of b bytes to or from `copies` ranks, starting
 * at t: with multicast one operation on the node's intra port, else the
 * worker's own copies.  Returns when they are done. */
static double intra(replay *r, int node, double t, double b, int copies)
{
    double bw = r->p->v[DMUON_NP_INTRA_BW];
    if (!r->p->mcast)
        return t + b * copies / bw;
    double st = t > r->node_in[node] ? t : r->node_in[node];
    r->node_in[node] = st + b / bw;
    return st + b / bw;
}

/* When the last part of job j's inputs arrived (0: it has none). */
static double j_full(const replay *r, int64_t j) { return r->full[j]; }

/* Runs job j on its rank, starting at t; stores when the worker is free. */
static int run_job(replay *r, int64_t j, double t, double *free_at)
{
    const double *v = r->p->v;
    int node = (int)(j / r->nc);
    int64_t c = j % r->nc;
    int st = r->stream_of[c], s = r->srail[st], K = r->K;
    double b = r->bytes[c];
    int nout = 0, nin = route_at(r, st, c, node, &nout);
    int *out = r->rout;
    double m = r->mult[c], x = t + v[DMUON_NP_CHUNK_OH] * m;
    if (r->kind == 0) {
        if (nin == 0)
            x += b / v[DMUON_NP_INTRA_BW];     /* read the owner's window */
    } else if (r->kind == 1) {
        x += v[DMUON_NP_INTRA_LAT] * m;         /* every chunk of a merged job pays it */
        x = intra(r, node, x, b, K);
        /* the adds: the node's K inputs (in the switch with multicast) and
         * the upstream partials */
        if (v[DMUON_NP_RED_BW] > 0)
            x += b * ((r->p->mcast ? 0 : K - 1) + nin) / v[DMUON_NP_RED_BW];
    }
    /* A merged job (m chunks): its first chunk is handled after 1/m of
     * the work, its last no earlier than its last input arrived plus 1/m
     * of the work (m = 1: both are x). */
    /* A thread group's own processing of the chunk (grp_bw): it delays
     * the chunk's sends (and a reduction's window write), not the worker. */
    double grp = 0;
    if (v[DMUON_NP_GRP_BW] > 0 && (r->kind == 1 || (r->kind == 0 && nout > 0)))
        grp = b / v[DMUON_NP_GRP_BW];
    double work = x - t, x_full = dmax(x, j_full(r, j) + work / m);
    x = t + work / m;
    x += grp / m;        /* the first chunk of a merged job: its own share */
    x_full += grp / m;   /* the last: after its own processing too */
    for (int o = 0; o < nout; o++) {
        if (o > 0) {
            x += v[DMUON_NP_CHUNK_OH] * m;   /* issuing one more send */
            x_full += v[DMUON_NP_CHUNK_OH] * m;
        }
        double full = 0, arr = message(r, node, out[o], s, b, x, m, x_full, &full);
        int64_t jj = (int64_t)out[o] * r->nc + c;
        if (arr > r->ready[jj])
            r->ready[jj] = arr;
        if (full > r->full[jj])
            r->full[jj] = full;
        if (--r->need[jj] == 0 && heap_push(&r->h, r->ready[jj], EV_READY, out[o] * K + s, jj))
            return -1;
        if (full > r->end)
            r->end = full;
    }
    /* the group's processing done (and the sends issued); the worker
     * itself was not held by it */
    double grp_done = dmax(x, x_full);
    x -= grp / m;
    x_full -= grp / m;
    if (r->kind == 0 && K > 1)
        /* the stores into the node: the port's, the worker's own serial
         * time (m chunks handled one after the other: each read before its
         * store, as chunk by chunk), and the last chunk's after it arrived */
        x = dmax(dmax(intra(r, node, x + v[DMUON_NP_INTRA_LAT] * m, b, K - 1),
                      t + work + v[DMUON_NP_INTRA_LAT] * m + b / v[DMUON_NP_INTRA_BW]),
                 x_full + v[DMUON_NP_INTRA_LAT] + b / m / v[DMUON_NP_INTRA_BW]);
    else
        x = dmax(x, x_full);
    if (r->kind == 1 && nout == 0) {
        x += b / v[DMUON_NP_INTRA_BW];         /* the owner's window */
        /* written once the group's reduction of the chunk is done */
        double done = grp_done + b / v[DMUON_NP_INTRA_BW];
        if (done > r->end)
            r->end = done;
    }
    *free_at = x;
    if (x > r->end)
        r->end = x;
    return 0;
}

static void replay_free(replay *r)
{
    free(r->bytes);
    free(r->mult);
    free(r->stream_of);
    free(r->sfirst);
    free(r->srail);
    free(r->rin);
    free(r->rout);
    free(r->need);
    free(r->ready);
    free(r->full);
    free(r->fifo_next);
    free(r->head);
    free(r->tail);
    free(r->worker);
    free(r->rail_tx);
    free(r->rail_rx);
    free(r->node_tx);
    free(r->node_rx);
    free(r->node_in);
    free(r->sroute);
    free(r->h.v);
}

/* Allocates a replay of ns streams and nc chunks on R × K. */
static dmuon_rc replay_alloc(replay *r, const dmuon_net_params *p, int R, int K, int kind,
                             int ns, int64_t nc)
{
    memset(r, 0, sizeof *r);
    r->p = p;
    r->R = R;
    r->K = K;
    r->kind = kind;
    r->ns = ns;
    r->nc = nc;
    size_t N = (size_t)R * K, nj = (size_t)R * (size_t)(nc ? nc : 1), c1 = nc ? (size_t)nc : 1;
    r->bytes = malloc(c1 * sizeof *r->bytes);
    r->mult = malloc(c1 * sizeof *r->mult);
    r->stream_of = malloc(c1 * sizeof *r->stream_of);
    r->sfirst = malloc(((size_t)ns + 1) * sizeof *r->sfirst);
    r->srail = malloc(((size_t)ns + 1) * sizeof *r->srail);
    r->rin = malloc((size_t)R * sizeof *r->rin);
    r->rout = malloc((size_t)R * sizeof *r->rout);
    r->need = malloc(nj * sizeof *r->need);
    r->ready = calloc(nj, sizeof *r->ready);
    r->full = calloc(nj, sizeof *r->full);
    r->fifo_next = malloc(nj * sizeof *r->fifo_next);
    r->head = malloc(N * sizeof *r->head);
    r->tail = malloc(N * sizeof *r->tail);
    r->worker = calloc(N, sizeof *r->worker);
    r->rail_tx = calloc(N, sizeof *r->rail_tx);
    r->rail_rx = calloc(N, sizeof *r->rail_rx);
    r->node_tx = calloc((size_t)R, sizeof *r->node_tx);
    r->node_rx = calloc((size_t)R, sizeof *r->node_rx);
    r->node_in = calloc((size_t)R, sizeof *r->node_in);
    if (!r->bytes || !r->mult || !r->stream_of || !r->sfirst || !r->srail || !r->rin ||
        !r->rout || !r->need ||
        !r->ready || !r->full || !r->fifo_next || !r->head || !r->tail || !r->worker || !r->rail_tx ||
        !r->rail_rx || !r->node_tx || !r->node_rx || !r->node_in) {
        replay_free(r);
        return DMUON_FAIL(DMUON_ENOMEM, "network model: out of memory replaying %lld chunks",
                          (long long)nc);
    }
    for (size_t i = 0; i < N; i++)
        r->head[i] = r->tail[i] = -1;
    return DMUON_OK;
}

/* Zeroes the counts the replay fills. */
static void counts_zero(dmuon_net_counts *cnt, int R, int K)
{
    if (!cnt)
        return;
    memset(cnt->rail_bytes, 0, (size_t)R * K * sizeof *cnt->rail_bytes);
    memset(cnt->node_bytes, 0, (size_t)R * sizeof *cnt->node_bytes);
    cnt->messages = 0;
}

/* Runs the filled replay: every job's input count from its route, the jobs
 * ready at once (by_stream: stream after stream, as a publish posts its
 * parameters; else chunk k of every stream in turn, as the executors sweep
 * their queues), then the events in time order.  Stores the time of the
 * last event plus the call overhead; releases r. */
static dmuon_rc replay_run(replay *r, int by_stream, double *seconds)
{
    int R = r->R, K = r->K;
    int64_t maxn = 0;
    for (int st = 0; st < r->ns; st++) {
        for (int64_t c = r->sfirst[st]; c < r->sfirst[st + 1]; c++)
            r->stream_of[c] = st;
        for (int node = 0; node < R; node++) {
            int nout = 0, nin = 0;
            for (int64_t c = r->sfirst[st]; c < r->sfirst[st + 1]; c++) {
                /* a gather or reduce queue has one route; a publish
                 * message's may depend on the message (the relay) */
                if (c == r->sfirst[st] || !r->cs)
                    nin = route_at(r, st, c, node, r->cs ? &nout : NULL);
                r->need[node * r->nc + c] = nin;
            }
        }
        maxn = dmax((double)maxn, (double)(r->sfirst[st + 1] - r->sfirst[st]));
    }
    dmuon_rc rc = DMUON_OK;
    int64_t outer = by_stream ? r->ns : maxn, inner = by_stream ? maxn : r->ns;
    /* The jobs ready at 0, in order; then what their EV_READY events would
     * do, in the same order (every later event is at a positive time), so
     * the event queue holds only what is in flight. */
    int64_t n0 = 0, *first = NULL;
    for (int pass = 0; pass < 2 && rc == DMUON_OK; pass++) {
        if (pass == 1 && !(first = malloc((size_t)(n0 ? n0 : 1) * sizeof *first)))
            rc = DMUON_ENOMEM;
        n0 = 0;
        for (int64_t a = 0; a < outer && rc == DMUON_OK; a++)
            for (int64_t b = 0; b < inner; b++) {
                int st = (int)(by_stream ? a : b);
                int64_t c = r->sfirst[st] + (by_stream ? b : a);
                if (c >= r->sfirst[st + 1])
                    continue;
                for (int node = 0; node < R; node++)
                    if (r->need[node * r->nc + c] == 0) {
                        if (pass == 1)
                            first[n0] = node * r->nc + c;
                        n0++;
                    }
            }
    }
    for (int64_t i = 0; i < n0 && rc == DMUON_OK; i++) {
        int64_t j = first[i];
        int rk = (int)(j / r->nc) * K + r->srail[r->stream_of[j % r->nc]];
        if (r->head[rk] < 0 && r->worker[rk] <= 0) {
            double fr = 0;
            if (run_job(r, j, 0.0, &fr) || heap_push(&r->h, fr, EV_DONE, rk, -1))
                rc = DMUON_ENOMEM;
            r->worker[rk] = fr;
        } else {
            r->fifo_next[j] = -1;
            if (r->tail[rk] < 0)
                r->head[rk] = j;
            else
                r->fifo_next[r->tail[rk]] = j;
            r->tail[rk] = j;
        }
    }
    free(first);
    while (rc == DMUON_OK && r->h.n) {
        event e = heap_pop(&r->h);
        int rk = e.rank;
        int64_t j = -1;
        if (e.kind == EV_READY) {
            if (r->worker[rk] <= e.t && r->head[rk] < 0) {
                j = e.job;
            } else {
                r->fifo_next[e.job] = -1;
                if (r->tail[rk] < 0)
                    r->head[rk] = e.job;
                else
                    r->fifo_next[r->tail[rk]] = e.job;
                r->tail[rk] = e.job;
            }
        } else if (r->head[rk] >= 0) {
            j = r->head[rk];
            r->head[rk] = r->fifo_next[j];
            if (r->head[rk] < 0)
                r->tail[rk] = -1;
        }
        if (j >= 0) {
            double fr = 0;
            if (run_job(r, j, e.t, &fr) || heap_push(&r->h, fr, EV_DONE, rk, -1))
                rc = DMUON_ENOMEM;
            r->worker[rk] = fr;
        }
    }
    double end = r->end;
    replay_free(r);
    if (rc != DMUON_OK)
        return DMUON_FAIL(rc, "network model: out of memory in the event queue");
    *seconds = end + r->p->v[DMUON_NP_CALL_OH];
    return DMUON_OK;
}

/* Replays a gather or reduce schedule: one stream per queue (q, s). */
/* Chunks of the schedule merged into one replayed chunk so that a call of
 * nc chunks on R nodes stays within max_jobs chunk-node jobs. */
static int64_t merge_factor(int64_t nc, int R, int64_t max_jobs)
{
    if (max_jobs <= 0)
        max_jobs = DMUON_NET_REPLAY_JOBS;
    int64_t jobs = nc * R;
    return jobs <= max_jobs ? 1 : (jobs + max_jobs - 1) / max_jobs;
}

/* Appends the n chunk sizes of one stream at r->bytes[*c], g at a time. */
static void add_stream(replay *r, int64_t *c, const int64_t *sizes, size_t stride, int n,
                       int64_t g)
{
    for (int k = 0; k < n; k += (int)g) {
        double b = 0;
        int m = 0;
        for (; m < g && k + m < n; m++)
            b += (double)*(const int64_t *)((const char *)sizes + (size_t)(k + m) * stride);
        r->bytes[*c] = b;
        r->mult[*c] = m;
        (*c)++;
    }
}

/* Replays a gather or reduce schedule: one stream per queue (q, s). */
static dmuon_rc replay_collv(const dmuon_net_params *p, const dmuon_sched *s, int kind,
                             int64_t max_jobs, dmuon_net_counts *cnt, double *seconds)
{
    int R = s->nodes, K = s->per_node;
    int64_t g = merge_factor(s->nchunks, R, max_jobs), nc = 0;
    for (int q = 0; q < R; q++)
        for (int sl = 0; sl < K; sl++) {
            int n = 0;
            dmuon_sched_queue(s, q, sl, &n);
            nc += (n + g - 1) / g;
        }
    replay r;
    DMUON_TRY(replay_alloc(&r, p, R, K, kind, R * K, nc));
    r.cs = s;
    r.cnt = cnt;
    counts_zero(cnt, R, K);
    int64_t c = 0;
    for (int q = 0; q < R; q++)
        for (int sl = 0; sl < K; sl++) {
            int st = q * K + sl, n = 0;
            const dmuon_chunk *c0 = dmuon_sched_queue(s, q, sl, &n);
            r.sfirst[st] = c;
            r.srail[st] = sl;
            if (n)
                add_stream(&r, &c, &c0[0].bytes, sizeof *c0, n, g);
        }
    r.sfirst[R * K] = c;
    assert(c == r.nc);
    return replay_run(&r, 0, seconds);
}

/* Replays a publish schedule: one stream per parameter, on its rail,
 * along its route: the chain, or with pub_fanout > 0 on R > 2 nodes the
 * MPI backend's routes by size (fan-out up to pub_fanout bytes, the relay
 * above; dmuon_pub_sched_msg). */
static dmuon_rc replay_publish(const dmuon_net_params *p, const dmuon_pub_sched *s,
                               int64_t max_jobs, dmuon_net_counts *cnt, double *seconds)
{
    int R = s->nodes, K = s->per_node;
    int64_t g = merge_factor(s->nchunks, R, max_jobs), nc = 0;
    for (int i = 0; i < s->nparams; i++)
        nc += (s->params[i].nchunks + g - 1) / g;
    replay r;
    DMUON_TRY(replay_alloc(&r, p, R, K, 2, s->nparams, nc));
    r.ps = s;
    r.cnt = cnt;
    double fan = p->v[DMUON_NP_PUB_FANOUT];
    if (R > 2 && fan > 0 && !(r.sroute = calloc((size_t)s->nparams + 1, 1))) {
        replay_free(&r);
        return DMUON_FAIL(DMUON_ENOMEM, "network model: out of memory");
    }
    counts_zero(cnt, R, K);
    int64_t c = 0;
    for (int i = 0; i < s->nparams; i++) {
        const dmuon_pub_param *pp = &s->params[i];
        if (r.sroute) {
            double pb = 0;
            for (int k = 0; k < pp->nchunks; k++)
                pb += (double)s->chunks[pp->first + k].bytes;
            r.sroute[i] = (unsigned char)(pb <= fan ? DMUON_PUB_FANOUT : DMUON_PUB_RELAY);
        }
        r.sfirst[i] = c;
        r.srail[i] = pp->rail;
        if (pp->nchunks)
            add_stream(&r, &c, &s->chunks[pp->first].bytes, sizeof s->chunks[0], pp->nchunks,
                       g);
    }
    r.sfirst[s->nparams] = c;
    assert(c == r.nc);
    return replay_run(&r, 1, seconds);
}

/* ------------------------------------- baselines: Open MPI (tree) ---- */

/* Pipeline fill of a ring over R nodes × K ranks in steps of min(b, ring_chunk). */
static double fill(const dmuon_net_params *p, int R, int K, double b)
{
    const double *v = p->v;
    double c = b < v[DMUON_NP_RING_CHUNK] ? b : v[DMUON_NP_RING_CHUNK];
    double rank = dmin(v[DMUON_NP_RAIL_BW], v[DMUON_NP_NODE_BW] / K);
    if (p->tree && R > 1)
        return ceil(log2((double)R * K)) * (v[DMUON_NP_HOP_LAT] + c / rank);
    return (R - 1) * (v[DMUON_NP_HOP_LAT] + c / rank) +
           (double)(R * K - R) * (v[DMUON_NP_INTRA_LAT] + c / v[DMUON_NP_INTRA_BW]);
}

/* One broadcast (red = 0) or reduce (red = 1) of b bytes. */
static double rooted(const dmuon_net_params *p, int R, int K, double b, int red)
{
    const double *v = p->v;
    double net = dmin(K * v[DMUON_NP_RAIL_BW], v[DMUON_NP_NODE_BW]);
    double t = R > 1 ? b / net : 0;
    if (K > 1)
        t = dmax(t, b / v[DMUON_NP_INTRA_BW]);
    if (red && v[DMUON_NP_RED_BW] > 0)
        t = dmax(t, b / v[DMUON_NP_RED_BW]);
    return v[DMUON_NP_CALL_OH] + fill(p, R, K, b) + t / v[DMUON_NP_RING_EFF];
}

/* Per-owner calls over segs on R nodes × K ranks (with rail ≥ 0 only the
 * segments whose owner sits on that rail of a topology of kreal ranks per
 * node): one rooted call per segment, one after the other; successive calls
 * pipeline on the ring, so its fill is paid once, for the largest. */
static double per_owner(const dmuon_net_params *p, int R, int K, const dmuon_segment *segs, int n,
                        int rail, int kreal, int red)
{
    double t = 0, big = 0;
    int any = 0;
    for (int i = 0; i < n; i++) {
        if (rail >= 0 && segs[i].owner % kreal != rail)
            continue;
        double b = (double)segs[i].count * (double)dmuon_dtype_size(segs[i].dtype);
        t += rooted(p, R, K, b, red) - fill(p, R, K, b);
        big = dmax(big, b);
        any = 1;
    }
    return any ? t + fill(p, R, K, big) : 0;
}

/* All-gather (red = 0) or reduce-scatter of T bytes in total. */
static double ring_all(const dmuon_net_params *p, int R, int K, double T, int red)
{
    const double *v = p->v;
    int N = R * K;
    double net = dmin(K * v[DMUON_NP_RAIL_BW], v[DMUON_NP_NODE_BW]);
    double t = R > 1 ? T * (R - 1) / R / net : 0;
    t = dmax(t, T * (N - 1) / N / v[DMUON_NP_INTRA_BW]);
    if (red && v[DMUON_NP_RED_BW] > 0)
        t = dmax(t, T * (N - 1) / N / v[DMUON_NP_RED_BW]);
    return v[DMUON_NP_CALL_OH] + fill(p, R, K, T / N) + t / v[DMUON_NP_RING_EFF];
}

/* One variable-length call: N−1 ring steps as long as the largest block. */
static double ring_var(const dmuon_net_params *p, int R, int K, double max_block)
{
    const double *v = p->v;
    int N = R * K;
    double bw = dmin(v[DMUON_NP_RAIL_BW], v[DMUON_NP_NODE_BW] / K);
    if (K > 1)
        bw = dmin(bw, v[DMUON_NP_INTRA_BW]);
    return v[DMUON_NP_CALL_OH] + fill(p, R, K, max_block) +
           (N - 1) * max_block / (bw * v[DMUON_NP_RING_EFF]);
}

static double seg_bytes(const dmuon_segment *g)
{
    return (double)g->count * (double)dmuon_dtype_size(g->dtype);
}

/* Largest block of one rank (AGV/RSV) or one node of the rail (publish)
 * over segments [lo, hi). */
static dmuon_rc max_block(const dmuon_net_case *c, int lo, int hi, int units, int div,
                          double *out)
{
    double *blk = calloc((size_t)units, sizeof *blk);
    if (!blk)
        return DMUON_FAIL(DMUON_ENOMEM, "network model: out of memory");
    double m = 0;
    for (int i = lo; i < hi; i++) {
        int u = c->segs[i].owner / div;
        blk[u] += seg_bytes(&c->segs[i]);
        if (blk[u] > m)
            m = blk[u];
    }
    free(blk);
    *out = m;
    return DMUON_OK;
}

/* ------------------------------------------------ baselines: NCCL ---- */

/* NCCL's three protocols (its tuning model, src/graph/tuning.cc: a call
 * costs a base latency, a latency per ring step and its bytes over the
 * bus bandwidth; the fastest predicted protocol runs).  Payload fraction of
 * a line: LL sends 4 data bytes with each 4-byte flag, LL128 8 flag bytes
 * in each 128-byte line, Simple none.  What a rank must hold before it
 * passes data on (the pipeline's store-and-forward unit): LL and LL128
 * carry a flag in every line, so a line goes on as soon as it arrived (8
 * and 120 payload bytes: cut-through, whatever the buffer slot, which is
 * 32 KiB of LL payload and 562.5 KiB of LL128 payload per step); Simple
 * flags a whole step, ring_chunk bytes (4 MiB buffer in NCCL_STEPS = 8
 * slots). */
enum { PR_LL = 0, PR_LL128, PR_SIMPLE, PR_COUNT };
static const double proto_payload[PR_COUNT] = {0.5, 120.0 / 128.0, 1.0};
static const double proto_step[PR_COUNT] = {8.0, 120.0, 0.0};

typedef struct {
    double fixed;   /* s: call_oh + base_lat */
    double st;      /* s: one ring step of one slice */
    double tail;    /* s: the rest of a channel's stream after its first slice */
    double whole;   /* s: the whole call alone */
    double pick;    /* s: NCCL's tuner's prediction, which picks the protocol */
} ring_cost;

static double proto_lat(const dmuon_net_params *p, int R, int pr)
{
    if (R < 2)
        return p->v[DMUON_NP_INTRA_LAT];
    return p->v[pr == PR_LL ? DMUON_NP_LAT_LL : pr == PR_LL128 ? DMUON_NP_LAT_LL128
                                                                : DMUON_NP_LAT_SIMPLE];
}

/* A ring's links and channels: `link` bytes/s through the slowest link
 * of a step, shared by at most chmax channels. */
typedef struct {
    double link, chmax;
} ring_shape;

/* Channels NCCL spreads blk bytes over: all of them unless a channel would
 * carry less than ch_bytes. */
static double nccl_channels(const dmuon_net_params *p, ring_shape g, double blk)
{
    double c = floor(blk / p->v[DMUON_NP_CH_BYTES]);
    return dmax(1.0, dmin(c, g.chmax));
}

/* NCCL's cap on LL's bus bandwidth on Hopper (tuning.cc, llMaxBws: 39 GB/s
 * on one or two nodes, 20.4 GB/s on more), for a call on all of
 * `channels` channels: LL's 8-byte stores, half of them flags, cannot go
 * faster whatever the links.  The model gives each channel its share,
 * llMaxBw / channels, also when a small call runs on fewer (one channel's
 * LL rate is the SM's, not a share of the link). */
static double ll_max_bw(int R) { return R > 2 ? 20.4e9 : 39.0e9; }

/* Seconds per byte of one channel of a call on R nodes: the link over the
 * channels, the protocol's payload fraction, ring_eff (LL: no faster than
 * its share of NCCL's cap), and (red) the SM adds. */
static double ch_cost(const dmuon_net_params *p, ring_shape g, int pr, int red, int R)
{
    const double *v = p->v;
    double rate = g.link * v[DMUON_NP_RING_EFF] * proto_payload[pr] / g.chmax;
    if (pr == PR_LL)
        rate = dmin(rate, ll_max_bw(R) / v[DMUON_NP_CHANNELS]);
    double k = 1 / rate;
    if (red && v[DMUON_NP_NCCL_RED_BW] > 0)
        k += g.chmax / v[DMUON_NP_NCCL_RED_BW];
    return k;
}

/* NCCL's tuner (tuning.cc, ring algorithm, its Hopper-era constants): a
 * call's predicted time is baseLat + nsteps · hwLat + bytes / bandwidth
 * with baseLat {6.6, 14.0, 8.4} us for LL / LL128 / Simple and, per step,
 * the network's hwLat {2.7, 4.0, 14.0} us once the ring crosses nodes (one
 * node: NVLink's {0.6, 1.9, 3.4} us).  NCCL runs a rooted call with the
 * protocol its tuner predicts fastest; the model times it with its own
 * (fitted) step latencies. */
static const double nccl_tuner_base[PR_COUNT] = {6.6e-6, 14.0e-6, 8.4e-6};

static double nccl_tuner_step(int R, int pr)
{
    static const double net[PR_COUNT] = {2.7e-6, 4.0e-6, 14.0e-6};
    static const double nvl[PR_COUNT] = {0.6e-6, 1.9e-6, 3.4e-6};
    return R > 1 ? net[pr] : nvl[pr];
}

/* A rooted call (broadcast, or reduce with red) of b bytes along a ring of
 * n ranks whose links carry `link` bytes/s, R nodes: n − 1 pipelined steps
 * of one slice, then the rest of the stream; the protocol NCCL's tuner
 * picks (nccl_tuner_base: its constants, the model's bandwidth). */
static ring_cost nccl_rooted(const dmuon_net_params *p, int R, int n, ring_shape g, double b,
                             int red)
{
    const double *v = p->v;
    ring_cost best = {0, 0, 0, INFINITY, INFINITY};
    double nch = nccl_channels(p, g, b), cb = b / nch;
    for (int pr = 0; pr < PR_COUNT; pr++) {
        double k = ch_cost(p, g, pr, red, R);
        double step = pr == PR_SIMPLE ? v[DMUON_NP_RING_CHUNK] : proto_step[pr];
        double c = dmin(cb, step);
        ring_cost rc = {v[DMUON_NP_BASE_LAT],
                        proto_lat(p, R, pr) + c * k, (cb - c) * k, 0, 0};
        rc.whole = rc.fixed + (n - 1) * rc.st + rc.tail;
        double pick = nccl_tuner_base[pr] + n * nccl_tuner_step(R, pr) + cb * k;
        if (pick < best.pick) {
            best = rc;
            best.pick = pick;
        }
    }
    return best;
}

/* A grouped call of b bytes on a ring of n ranks pipelined in
 * coal_slices slices per channel (the coalesced publish); the fastest
 * protocol. */
static double nccl_sliced(const dmuon_net_params *p, int R, int n, ring_shape g, double b)
{
    const double *v = p->v;
    double best = INFINITY, nch = nccl_channels(p, g, b), cb = b / nch;
    double c = cb / dmax(1.0, v[DMUON_NP_COAL_SLICES]);
    for (int pr = 0; pr < PR_COUNT; pr++) {
        double k = ch_cost(p, g, pr, 0, R);
        best = dmin(best, v[DMUON_NP_BASE_LAT] + (n - 1) * (proto_lat(p, R, pr) + c * k) +
                              (cb - c) * k);
    }
    return best;
}

/* An all-gather / reduce-scatter ring over n ranks, each step moving a
 * block of blk bytes per rank (the largest block for variable lengths):
 * n − 1 steps, each its latency and the block's bytes; the fastest
 * protocol. */
static double nccl_ring(const dmuon_net_params *p, int R, int n, ring_shape g, double blk,
                        int red)
{
    const double *v = p->v;
    double best = INFINITY, nch = nccl_channels(p, g, blk), cb = blk / nch;
    for (int pr = 0; pr < PR_COUNT; pr++) {
        double t = v[DMUON_NP_BASE_LAT] +
                   (n - 1) * (proto_lat(p, R, pr) + v[DMUON_NP_LAT_RING] +
                              cb * ch_cost(p, g, pr, red, R));
        best = dmin(best, t);
    }
    return best;
}

/* The ring of all R × K ranks: it leaves each node over the node's
 * network link (no more than its K ranks' rails: one GPU per node has one
 * NIC) and runs inside it over NVLink, the slower bounding every step,
 * with all the channels. */
static ring_shape ring_all_ranks(const dmuon_net_params *p, int R, int K)
{
    const double *v = p->v;
    double net = dmin(v[DMUON_NP_NODE_BW], K * v[DMUON_NP_RAIL_BW]);
    ring_shape g = {R > 1 ? dmin(net, v[DMUON_NP_INTRA_BW]) : v[DMUON_NP_INTRA_BW],
                    v[DMUON_NP_CHANNELS]};
    return g;
}

/* The ring of one rail (one rank per node): its rank's rail link, or its
 * share of the node link among the `active` rails publishing at once, and
 * the rail's share of the node's channels (one NIC of K). */
static ring_shape ring_rail(const dmuon_net_params *p, int K, int active)
{
    const double *v = p->v;
    ring_shape g = {dmin(v[DMUON_NP_RAIL_BW], v[DMUON_NP_NODE_BW] / active),
                    dmax(1.0, floor(v[DMUON_NP_CHANNELS] / K))};
    return g;
}

/* Successive rooted calls on one stream (per-owner): call i (root root[i],
 * bytes b[i]) starts on a rank once that rank finished call i − 1, so the
 * wavefronts trail each other along the ring of n ranks instead of each
 * call paying the whole chain after the last.  Broadcasts run from the
 * root downstream; reduces (red) from the rank after the root, ending at
 * it.  free_at: n scratch entries.  Returns when the last rank is done. */
static double nccl_trail(const dmuon_net_params *p, int R, int n, ring_shape g, const int *root,
                         const double *b, int calls, int red, double *free_at)
{
    for (int j = 0; j < n; j++)
        free_at[j] = 0;
    double end = 0;
    for (int i = 0; i < calls; i++) {
        ring_cost rc = nccl_rooted(p, R, n, g, b[i], red);
        double a = 0;
        for (int d = 0; d < n; d++) {
            int j = red ? (root[i] + 1 + d) % n : (root[i] + d) % n;
            double ready = free_at[j] + rc.fixed;
            a = d == 0 ? ready : dmax(a + rc.st, ready);
            free_at[j] = a + rc.tail + (d == 0 ? rc.st : 0);
            end = dmax(end, free_at[j]);
        }
    }
    return end;
}


/* The NCCL baselines of case c (line l is not ours). */
static dmuon_rc nccl_predict(const dmuon_net_params *p, const dmuon_net_case *c, dmuon_net_line l,
                             double *seconds)
{
    int R = c->nodes, K = c->per_node, N = R * K, red = c->op == DMUON_NET_RSV;
    double total = 0;
    for (int i = 0; i < c->n; i++)
        total += seg_bytes(&c->segs[i]);
    int pub = c->op == DMUON_NET_PUBLISH;
    int n = pub ? R : N;
    int *root = malloc((size_t)c->n * sizeof *root);
    double *b = malloc((size_t)c->n * sizeof *b);
    double *scratch = malloc((size_t)(n > K ? n : K) * sizeof *scratch);
    int *nrail = calloc((size_t)K, sizeof *nrail);
    dmuon_rc rc = DMUON_OK;
    if (!root || !b || !scratch || !nrail) {
        rc = DMUON_FAIL(DMUON_ENOMEM, "network model: out of memory");
        goto done;
    }
    if (!pub) {
        ring_shape g = ring_all_ranks(p, R, K);
        if (l == DMUON_NET_PER_OWNER) {
            for (int i = 0; i < c->n; i++) {
                root[i] = (int)c->segs[i].owner;
                b[i] = seg_bytes(&c->segs[i]);
            }
            *seconds = nccl_trail(p, R, N, g, root, b, c->n, red, scratch);
        } else if (l == DMUON_NET_COALESCED) {
            double m = 0;
            rc = max_block(c, 0, c->n, N, 1, &m);
            *seconds = nccl_ring(p, R, N, g, m, red);
        } else if (l == DMUON_NET_EQUAL) {
            *seconds = nccl_ring(p, R, N, g, total / N, red);
        } else {
            *seconds = nccl_rooted(p, R, N, g, total, red).whole;
        }
        goto done;
    }
    /* Publish: the rails side by side (sharing each node's link), each a
     * ring of its R leaders. */
    int active = 0;
    for (int i = 0; i < c->n; i++)
        active += nrail[c->segs[i].owner % K]++ == 0;
    ring_shape g = ring_rail(p, K, active);
    double worst = 0;
    for (int s = 0; s < K; s++) {
        if (!nrail[s])
            continue;
        double ts = 0;
        if (l == DMUON_NET_PER_OWNER) {
            int k = 0;
            for (int i = 0; i < c->n; i++)
                if (c->segs[i].owner % K == s) {
                    root[k] = (int)c->segs[i].owner / K;
                    b[k++] = seg_bytes(&c->segs[i]);
                }
            ts = nccl_trail(p, R, R, g, root, b, k, 0, scratch);
        } else {
            /* coalesced: per layer one grouped call of the layer's
             * parameters on the rail (NCCL runs a group's broadcasts in
             * one kernel over the channels: one rooted pipeline of the
             * layer's bytes); each layer's call fills and drains the
             * chain before the next starts */
            for (int i = 0; i < c->n;) {
                int layer = c->layer_of ? c->layer_of[i] : 0, j = i;
                double lb = 0;
                for (; j < c->n && (c->layer_of ? c->layer_of[j] : 0) == layer; j++)
                    if (c->segs[j].owner % K == s)
                        lb += seg_bytes(&c->segs[j]);
                if (lb > 0)
                    ts += nccl_sliced(p, R, R, g, lb);
                i = j;
            }
        }
        worst = dmax(worst, ts);
    }
    *seconds = worst;
done:
    free(root);
    free(b);
    free(scratch);
    free(nrail);
    return rc;
}

/* -------------------------------------------------------------- API ---- */

static dmuon_rc predict_raw(const dmuon_net_params *p, const dmuon_net_case *c, dmuon_net_line l,
                            double *seconds)
{
    const double *v = p->v;
    int R = c->nodes, K = c->per_node;
    if (R < 1 || K < 1)
        return DMUON_FAIL(DMUON_EINVAL, "network model: %d nodes x %d ranks: expected at least "
                          "1 x 1", R, K);
    if (c->n < 1 || !c->segs)
        return DMUON_FAIL(DMUON_EINVAL, "network model: no segments");
    for (int i = 0; i < DMUON_NP_COUNT; i++)
        if (!(v[i] >= 0) || (i != DMUON_NP_RED_BW && i != DMUON_NP_INTRA_LAT &&
                             i != DMUON_NP_HOP_LAT && i != DMUON_NP_CHUNK_OH &&
                             i != DMUON_NP_CALL_OH && i != DMUON_NP_BASE_LAT &&
                             i != DMUON_NP_LAT_LL && i != DMUON_NP_LAT_LL128 &&
                             i != DMUON_NP_LAT_SIMPLE && i != DMUON_NP_NCCL_RED_BW &&
                             i != DMUON_NP_LAT_RING && i != DMUON_NP_HOP_BW &&
                             i != DMUON_NP_PUB_FANOUT && i != DMUON_NP_GRP_BW &&
                             ((i != DMUON_NP_CHANNELS && i != DMUON_NP_CH_BYTES &&
                               i != DMUON_NP_COAL_SLICES) || !p->tree) &&
                             v[i] <= 0))
            return DMUON_FAIL(DMUON_EINVAL, "network model: parameter %s = %g: expected a "
                              "positive value", param_names[i], v[i]);
    if (v[DMUON_NP_RING_EFF] > 1)
        return DMUON_FAIL(DMUON_EINVAL, "network model: parameter ring_eff = %g: expected a "
                          "fraction of the links, at most 1", v[DMUON_NP_RING_EFF]);
    double total = 0;
    for (int i = 0; i < c->n; i++)
        total += seg_bytes(&c->segs[i]);
    int red = c->op == DMUON_NET_RSV;
    if (R * K == 1) {
        *seconds = 0;   /* a group of one rank moves nothing */
        return DMUON_OK;
    }

    if (c->op == DMUON_NET_PUBLISH) {
        for (int i = 0; i < c->n; i++)
            if (c->segs[i].owner >= R * K || c->segs[i].owner < 0)
                return DMUON_FAIL(DMUON_EINVAL, "network model: publish parameter %d: owner %d "
                                  "is not a rank of %d x %d", i, (int)c->segs[i].owner, R, K);
        if (l != DMUON_NET_OURS && l != DMUON_NET_PER_OWNER && l != DMUON_NET_COALESCED)
            return DMUON_FAIL(DMUON_EINVAL, "network model: the publish has no %s line",
                              line_names[l]);
        if (R == 1) {
            *seconds = 0;   /* one node: no other node to publish to */
            return DMUON_OK;
        }
        /* Rails with parameters share each node's link. */
        int *nrail = calloc((size_t)K, sizeof *nrail);
        if (!nrail)
            return DMUON_FAIL(DMUON_ENOMEM, "network model: out of memory");
        int active = 0;
        for (int i = 0; i < c->n; i++)
            active += nrail[c->segs[i].owner % K]++ == 0;
        dmuon_net_params p1 = *p;
        p1.v[DMUON_NP_NODE_BW] = dmin(v[DMUON_NP_NODE_BW] / active, v[DMUON_NP_RAIL_BW]);
        dmuon_rc rc = DMUON_OK;
        if (l == DMUON_NET_OURS) {
            /* The publish schedule of sched.c over the copy layout of
             * publish.c, every rail replayed together on the node links. */
            dmuon_segment *t = malloc((size_t)c->n * sizeof *t);
            if (!t) {
                free(nrail);
                return DMUON_FAIL(DMUON_ENOMEM, "network model: out of memory");
            }
            int64_t copy = 0;
            rc = dmuon_publish_layout(K, c->segs, c->n, t, &copy);
            dmuon_pub_sched ps;
            memset(&ps, 0, sizeof ps);
            if (rc == DMUON_OK)
                rc = dmuon_pub_sched_init(&ps, t, c->n, R, K,
                                          c->sched_opts ? c->sched_opts->chunk_bytes : 0);
            if (rc == DMUON_OK)
                rc = replay_publish(p, &ps, c->max_jobs, c->counts, seconds);
            dmuon_pub_sched_release(&ps);
            free(t);
            free(nrail);
            return rc;
        }
        if (!p->tree) {
            free(nrail);
            return nccl_predict(p, c, l, seconds);
        }
        /* Baselines: each rail one after the other, rails side by side. */
        double worst = 0;
        for (int s = 0; s < K && rc == DMUON_OK; s++) {
            double ts = 0;
            int lo = -1;
            for (int i = 0; i < c->n; i++) {
                if (c->segs[i].owner % K != s)
                    continue;
                if (l == DMUON_NET_PER_OWNER) {
                    ts = per_owner(&p1, R, 1, c->segs, c->n, s, K, 0);
                    break;
                }
                /* coalesced: one call per layer of this rail */
                int layer = c->layer_of ? c->layer_of[i] : 0;
                if (lo >= 0 && (c->layer_of ? c->layer_of[lo] : 0) == layer)
                    continue;
                lo = i;
                double m = 0, lb = 0;
                for (int j = i; j < c->n && (c->layer_of ? c->layer_of[j] : 0) == layer; j++)
                    if (c->segs[j].owner % K == s) {
                        m = dmax(m, seg_bytes(&c->segs[j]));
                        lb += seg_bytes(&c->segs[j]);
                    }
                ts += p1.v[DMUON_NP_CALL_OH] + fill(&p1, R, 1, m) +
                      lb / (p1.v[DMUON_NP_NODE_BW] * p1.v[DMUON_NP_RING_EFF]);
            }
            worst = dmax(worst, ts);
        }
        free(nrail);
        *seconds = worst;
        return rc;
    }

    switch (l) {
    case DMUON_NET_OURS: {
        dmuon_sched s;
        DMUON_TRY(dmuon_sched_init(&s, c->segs, c->n, R, K,
                                   red ? DMUON_SCHED_REDUCE : DMUON_SCHED_GATHER, c->sched_opts));
        dmuon_rc rc = replay_collv(p, &s, red, c->max_jobs, c->counts, seconds);
        dmuon_sched_release(&s);
        return rc;
    }
    default:
        break;
    }
    if (!p->tree && l > DMUON_NET_OURS && l < DMUON_NET_LINE_COUNT)
        return nccl_predict(p, c, l, seconds);
    switch (l) {
    case DMUON_NET_PER_OWNER:
        *seconds = per_owner(p, R, K, c->segs, c->n, -1, K, red);
        return DMUON_OK;
    case DMUON_NET_COALESCED: {
        double m = 0;
        DMUON_TRY(max_block(c, 0, c->n, R * K, 1, &m));
        *seconds = ring_var(p, R, K, m);
        return DMUON_OK;
    }
    case DMUON_NET_EQUAL:
        *seconds = ring_all(p, R, K, total, red);
        return DMUON_OK;
    case DMUON_NET_ROOT:
        *seconds = rooted(p, R, K, total, red);
        return DMUON_OK;
    default:
        return DMUON_FAIL(DMUON_EINVAL, "network model: unknown line %d", (int)l);
    }
}

dmuon_rc dmuon_net_predict(const dmuon_net_params *p, const dmuon_net_case *c, dmuon_net_line l,
                           double *seconds)
{
    DMUON_TRY(predict_raw(p, c, l, seconds));
    if (!isfinite(*seconds))
        return DMUON_FAIL(DMUON_ENUMERIC, "network model: the %s time of %s on %d x %d is not "
                          "finite (a parameter too large?)", line_names[l],
                          c->op == DMUON_NET_AGV ? "a gather" : c->op == DMUON_NET_RSV
                                                                    ? "a reduction"
                                                                    : "the publish",
                          c->nodes, c->per_node);
    return DMUON_OK;
}

/* ------------------------------------------------------------ fitting ---- */

typedef struct {
    dmuon_net_params base;
    unsigned mask;
    const dmuon_net_case *cases;
    const dmuon_net_line *lines;
    const double *meas;
    int n;
    dmuon_rc rc;
} fit_ctx;

static void unpack(const fit_ctx *f, const double *x, dmuon_net_params *p)
{
    *p = f->base;
    for (int i = 0, k = 0; i < DMUON_NP_COUNT; i++)
        if (f->mask & (1u << i))
            p->v[i] = exp(x[k++]);
}

static double objective(fit_ctx *f, const double *x)
{
    dmuon_net_params p;
    unpack(f, x, &p);
    if (p.v[DMUON_NP_RING_EFF] > 1.0)
        return 1e30;   /* a baseline cannot beat the links */
    double sum = 0;
    for (int i = 0; i < f->n; i++) {
        double t = 0;
        dmuon_rc rc = predict_raw(&p, &f->cases[i], f->lines[i], &t);
        if (rc != DMUON_OK) {
            f->rc = rc;
            return 1e30;
        }
        if (!isfinite(t) || !(t > 0))
            return 1e30;   /* out of range: not a point the fit may land on */
        double e = log(t / f->meas[i]);
        sum += e * e;
    }
    return sum;
}

dmuon_rc dmuon_net_fit(dmuon_net_params *p, unsigned free_mask, const dmuon_net_case *cases,
                       const dmuon_net_line *lines, const double *meas, int ncells,
                       int max_evals, double *rms)
{
    if (ncells < 1)
        return DMUON_FAIL(DMUON_EINVAL, "network model fit: no cells to fit");
    for (int i = 0; i < ncells; i++)
        if (!(meas[i] > 0))
            return DMUON_FAIL(DMUON_EINVAL, "network model fit: cell %d: measured time %g: "
                              "expected a positive time", i, meas[i]);
    fit_ctx f = {*p, free_mask, cases, lines, meas, ncells, DMUON_OK};
    int d = 0;
    double x0[DMUON_NP_COUNT];
    for (int i = 0; i < DMUON_NP_COUNT; i++)
        if (free_mask & (1u << i)) {
            if (!(p->v[i] > 0))
                return DMUON_FAIL(DMUON_EINVAL, "network model fit: free parameter %s starts "
                                  "at %g: expected a positive value", param_names[i], p->v[i]);
            x0[d++] = log(p->v[i]);
        }
    if (max_evals <= 0)
        max_evals = 400;
    if (d == 0) {
        double s = objective(&f, x0);
        if (f.rc != DMUON_OK)
            return f.rc;
        *rms = sqrt(s / ncells);
        return DMUON_OK;
    }
    /* Nelder–Mead (Nelder & Mead 1965; standard coefficients 1, 2, 0.5,
     * 0.5), simplex of d+1 points, initial steps of log(3) per axis;
     * restarted twice from the best point with a fresh simplex (a third of
     * the evaluations each), which gets it out of the kinks of the
     * baselines' protocol choice. */
    double xs[DMUON_NP_COUNT + 1][DMUON_NP_COUNT], fx[DMUON_NP_COUNT + 1];
    int evals = 0;
    for (int round = 0; round < 3 && f.rc == DMUON_OK; round++) {
        if (round > 0 && evals + d + 1 > max_evals)
            break;
        if (round > 0) {
            int best = 0;
            for (int i = 1; i <= d; i++)
                if (fx[i] < fx[best])
                    best = i;
            memcpy(x0, xs[best], sizeof x0);
        }
        int stop = round == 2 ? max_evals : evals + (max_evals - evals) / (3 - round);
        for (int i = 0; i <= d; i++) {
            memcpy(xs[i], x0, sizeof x0);
            if (i > 0)
                xs[i][i - 1] += log(3.0);
            fx[i] = objective(&f, xs[i]);
        }
        evals += d + 1;
        while (evals < stop && f.rc == DMUON_OK) {
            /* order: best first */
            for (int i = 1; i <= d; i++)
                for (int j = i; j > 0 && fx[j] < fx[j - 1]; j--) {
                    double tf = fx[j];
                    fx[j] = fx[j - 1];
                    fx[j - 1] = tf;
                    double tx[DMUON_NP_COUNT];
                    memcpy(tx, xs[j], sizeof tx);
                    memcpy(xs[j], xs[j - 1], sizeof tx);
                    memcpy(xs[j - 1], tx, sizeof tx);
                }
            if (fx[d] - fx[0] < 1e-10 * (1 + fx[0]))
                break;
            double cen[DMUON_NP_COUNT] = {0}, xr[DMUON_NP_COUNT], xe[DMUON_NP_COUNT];
            for (int i = 0; i < d; i++)
                for (int k = 0; k < d; k++)
                    cen[k] += xs[i][k] / d;
            for (int k = 0; k < d; k++)
                xr[k] = cen[k] + (cen[k] - xs[d][k]);
            double fr = objective(&f, xr);
            evals++;
            if (fr < fx[0]) {
                for (int k = 0; k < d; k++)
                    xe[k] = cen[k] + 2 * (cen[k] - xs[d][k]);
                double fe = objective(&f, xe);
                evals++;
                if (fe < fr) {
                    memcpy(xs[d], xe, sizeof xe);
                    fx[d] = fe;
                } else {
                    memcpy(xs[d], xr, sizeof xr);
                    fx[d] = fr;
                }
            } else if (fr < fx[d - 1]) {
                memcpy(xs[d], xr, sizeof xr);
                fx[d] = fr;
            } else {
                double xc[DMUON_NP_COUNT];
                int outside = fr < fx[d];
                for (int k = 0; k < d; k++)
                    xc[k] = outside ? cen[k] + 0.5 * (xr[k] - cen[k])
                                    : cen[k] + 0.5 * (xs[d][k] - cen[k]);
                double fc = objective(&f, xc);
                evals++;
                if (fc < (outside ? fr : fx[d])) {
                    memcpy(xs[d], xc, sizeof xc);
                    fx[d] = fc;
                } else {
                    for (int i = 1; i <= d; i++) {
                        for (int k = 0; k < d; k++)
                            xs[i][k] = xs[0][k] + 0.5 * (xs[i][k] - xs[0][k]);
                        fx[i] = objective(&f, xs[i]);
                        evals++;
                    }
                }
            }
        }
    }
    if (f.rc != DMUON_OK)
        return f.rc;
    int best = 0;
    for (int i = 1; i <= d; i++)
        if (fx[i] < fx[best])
            best = i;
    unpack(&f, xs[best], p);
    *rms = sqrt(fx[best] / ncells);
    return DMUON_OK;
}

/* ------------------------------------------------------------ presets ---- */

dmuon_rc dmuon_net_preset(const char *name, dmuon_net_params *p, unsigned *free_mask)
{
    memset(p, 0, sizeof *p);
    if (name && !strcasecmp(name, "namespace")) {
        /* Starting values only: every figure but the switch is fitted. */
        p->v[DMUON_NP_INTRA_BW] = 4e9;
        p->v[DMUON_NP_INTRA_LAT] = 5e-6;
        p->v[DMUON_NP_RAIL_BW] = 1e9;
        p->v[DMUON_NP_NODE_BW] = 1e9;
        p->v[DMUON_NP_HOP_LAT] = 100e-6;
        p->v[DMUON_NP_CHUNK_OH] = 20e-6;
        p->v[DMUON_NP_CALL_OH] = 50e-6;
        p->v[DMUON_NP_RED_BW] = 2e9;
        p->v[DMUON_NP_RING_EFF] = 0.5;
        p->v[DMUON_NP_RING_CHUNK] = 64 * 1024;
        p->v[DMUON_NP_CHANNELS] = 1;           /* not used by the trees */
        p->v[DMUON_NP_CH_BYTES] = 64 * 1024;
        p->v[DMUON_NP_COAL_SLICES] = 1;
        p->v[DMUON_NP_PUB_FANOUT] = 128 * 1024;   /* the MPI backend's default route */
        p->mcast = 0;
        p->tree = 1;
        /* grp_bw stays 0: the MPI backend's progress loop is the worker
         * itself, no thread groups */
        *free_mask = (DMUON_NP_OURS_MASK & ~(1u << DMUON_NP_GRP_BW)) |
                     (1u << DMUON_NP_RING_EFF) | (1u << DMUON_NP_RING_CHUNK);
        return DMUON_OK;
    }
    if (name && !strcasecmp(name, "h100")) {
        /* Fixed from hardware and software facts (the 16-GPU cells have one
         * cross-node hop and cannot tell these apart from the fitted
         * ones): NVLink 4 at 450 GB/s per direction per GPU, one 400 Gb/s
         * ConnectX-7 rail per GPU (50 GB/s), eight per node, about 3 us
         * per cross-node hop (NIC, switch, NIC), NCCL's Simple step of
         * 512 KiB (4 MiB buffer in NCCL_STEPS = 8 slots), 16 channels
         * (two per NIC), a channel used from 64 KiB; the coalesced
         * publish's slices in flight at NCCL_STEPS = 8 (assumed: one node
         * hop, as in the 16-GPU cells, cannot tell; a fit over more node
         * counts may free it).  Fitted from the
         * start values: ours' intra_lat, chunk and call overheads and the
         * add of the upstream partial (red_bw); the baselines' bus
         * efficiency, base latency, the step latency of each protocol and
         * their SM reduction bandwidth. */
        p->v[DMUON_NP_INTRA_BW] = 450e9;
        p->v[DMUON_NP_INTRA_LAT] = 1e-6;
        p->v[DMUON_NP_RAIL_BW] = 50e9;
        p->v[DMUON_NP_NODE_BW] = 8 * 50e9;
        p->v[DMUON_NP_HOP_LAT] = 3e-6;
        p->v[DMUON_NP_CHUNK_OH] = 1e-6;
        p->v[DMUON_NP_CALL_OH] = 10e-6;
        p->v[DMUON_NP_RED_BW] = 1e12;
        p->v[DMUON_NP_RING_EFF] = 0.8;
        p->v[DMUON_NP_RING_CHUNK] = 512 * 1024;
        p->v[DMUON_NP_BASE_LAT] = 1e-6;
        p->v[DMUON_NP_LAT_LL] = 2.7e-6;    /* from NCCL's tuner's step latencies */
        p->v[DMUON_NP_LAT_LL128] = 4e-6;
        p->v[DMUON_NP_LAT_SIMPLE] = 8e-6;
        p->v[DMUON_NP_NCCL_RED_BW] = 1e12;
        p->v[DMUON_NP_CHANNELS] = 16;
        p->v[DMUON_NP_CH_BYTES] = 64 * 1024;
        p->v[DMUON_NP_COAL_SLICES] = 8;
        p->v[DMUON_NP_LAT_RING] = 1e-6;
        /* grp_bw 0: a parameter file that frees it (with a positive start)
         * fits it on the 16-GPU cells to about 10 GB/s; docs/netmodel.md
         * gives its held-out score, lower than without it */
        p->mcast = 1;
        *free_mask = (1u << DMUON_NP_INTRA_LAT) | (1u << DMUON_NP_CHUNK_OH) |
                     (1u << DMUON_NP_CALL_OH) | (1u << DMUON_NP_RED_BW) |
                     (1u << DMUON_NP_RING_EFF) | (1u << DMUON_NP_BASE_LAT) |
                     (1u << DMUON_NP_LAT_LL) | (1u << DMUON_NP_LAT_LL128) |
                     (1u << DMUON_NP_LAT_SIMPLE) | (1u << DMUON_NP_NCCL_RED_BW) |
                     (1u << DMUON_NP_LAT_RING);
        return DMUON_OK;
    }
    return DMUON_FAIL(DMUON_EINVAL, "network preset '%s': expected namespace or h100",
                      name ? name : "(null)");
}

/* ------------------------------------------------------ parameter files -- */

#define PARAMS_FORMAT "dmuon-netmodel-params"

typedef struct {
    const dmuon_net_params *p;
    unsigned mask;
    const char *preset, *fitted_on;
} params_out;

static dmuon_rc write_params(FILE *f, void *ctx)
{
    const params_out *o = ctx;
    dmuon_json w;
    dmuon_json_init(&w, f, true);
    dmuon_json_begin_object(&w);
    dmuon_json_kstr(&w, "format", PARAMS_FORMAT);
    dmuon_json_kint(&w, "version", 1);
    dmuon_json_kstr(&w, "preset", o->preset ? o->preset : "");
    dmuon_json_kstr(&w, "fitted_on", o->fitted_on ? o->fitted_on : "");
    dmuon_json_kbool(&w, "mcast", o->p->mcast);
    dmuon_json_kbool(&w, "tree", o->p->tree);
    dmuon_json_key(&w, "free");
    dmuon_json_begin_array(&w);
    for (int i = 0; i < DMUON_NP_COUNT; i++)
        if (o->mask & (1u << i))
            dmuon_json_str(&w, param_names[i]);
    dmuon_json_end_array(&w);
    dmuon_json_key(&w, "params");
    dmuon_json_begin_object(&w);
    for (int i = 0; i < DMUON_NP_COUNT; i++)
        dmuon_json_kdouble(&w, param_names[i], o->p->v[i]);
    dmuon_json_end_object(&w);
    dmuon_json_end_object(&w);
    fputc('\n', f);
    return ferror(f) ? DMUON_FAIL(DMUON_EIO, "writing network parameters failed") : DMUON_OK;
}

dmuon_rc dmuon_net_params_save(const char *path, const dmuon_net_params *p, unsigned free_mask,
                               const char *preset, const char *fitted_on)
{
    params_out o = {p, free_mask, preset, fitted_on};
    return dmuon_write_atomic(path, write_params, &o);
}

static int param_index(const char *name)
{
    for (int i = 0; i < DMUON_NP_COUNT; i++)
        if (name && !strcmp(name, param_names[i]))
            return i;
    return -1;
}

/* The range a loaded parameter must lie in (NULL: x is in it), wide
 * enough for any machine, narrow enough that no prediction overflows:
 * bandwidths at least 1 kB/s (0 where 0 means off), times at most 1000 s,
 * ring_eff a fraction, sizes from 1 byte to 2^50, counts whole from 1 to
 * 4096 (0 allowed with tree for what trees do not use). */
static const char *param_range(int i, double x, int tree)
{
    switch (i) {
    case DMUON_NP_INTRA_BW:
    case DMUON_NP_RAIL_BW:
    case DMUON_NP_NODE_BW:
        return x >= 1e3 ? NULL : "a bandwidth of at least 1e3 bytes/s";
    case DMUON_NP_RED_BW:
    case DMUON_NP_NCCL_RED_BW:
    case DMUON_NP_HOP_BW:
    case DMUON_NP_GRP_BW:
        return x == 0 || x >= 1e3 ? NULL : "0 (off) or a bandwidth of at least 1e3 bytes/s";
    case DMUON_NP_RING_EFF:
        return x > 0 && x <= 1 ? NULL : "a fraction of the links, above 0 and at most 1";
    case DMUON_NP_RING_CHUNK:
        return x >= 1 && x <= 0x1p50 ? NULL : "bytes from 1 to 2^50";
    case DMUON_NP_CH_BYTES:
        return (x >= 1 || (tree && x == 0)) && x <= 0x1p50 ? NULL : "bytes from 1 to 2^50";
    case DMUON_NP_PUB_FANOUT:
        return x <= 0x1p62 ? NULL : "bytes from 0 to 2^62";
    case DMUON_NP_CHANNELS:
    case DMUON_NP_COAL_SLICES:
        return x == floor(x) && (x >= 1 || (tree && x == 0)) && x <= 4096
                   ? NULL : "a whole number from 1 to 4096";
    default:   /* the latencies and overheads, in seconds */
        return x <= 1e3 ? NULL : "at most 1000 seconds";
    }
}

/* A text field of a parameter file (preset, fitted_on): absent, or a JSON
 * string.  libyaml reads null, true and numbers as text too; those are
 * refused here, naming the field and what was found. */
static dmuon_rc text_field(dmuon_doc *doc, yaml_node_t *root, const char *path, const char *key,
                           const char **out)
{
    yaml_node_t *n = dmuon_doc_get(doc, root, key);
    if (n && (n->type != YAML_SCALAR_NODE || n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE)) {
        const char *s = dmuon_doc_str(n);
        return DMUON_FAIL(DMUON_EPARSE, "%s:%d: field '%s': expected a string in quotes, got "
                          "%s%.60s", path, dmuon_doc_line(n), key,
                          s ? "" : n->type == YAML_SEQUENCE_NODE ? "a list" : "an object",
                          s ? s : "");
    }
    return dmuon_doc_field_str(doc, root, key, false, out);
}

dmuon_rc dmuon_net_params_load(const char *path, dmuon_net_params *p, unsigned *free_mask,
                               char *preset, size_t preset_len)
{
    dmuon_doc doc;
    DMUON_TRY(dmuon_doc_load_file(&doc, path));
    dmuon_rc rc = DMUON_OK;
    dmuon_net_params q;
    memset(&q, 0, sizeof q);
    unsigned mask = 0;
    yaml_node_t *root = dmuon_doc_root(&doc), *pm = NULL, *fr = NULL;
    const char *fmt = NULL, *name = "";
    int64_t version = 0;
    bool mcast = false, tree = false;
    if (!root || root->type != YAML_MAPPING_NODE) {
        rc = DMUON_FAIL(DMUON_EPARSE, "%s: expected a JSON object of network parameters", path);
        goto done;
    }
    DMUON_TRY_GOTO(rc, dmuon_doc_field_str(&doc, root, "format", true, &fmt), done);
    DMUON_TRY_GOTO(rc, dmuon_doc_field_int(&doc, root, "version", true, &version), done);
    if (strcmp(fmt, PARAMS_FORMAT) || version != 1) {
        rc = DMUON_FAIL(DMUON_EPARSE, "%s:%d: format '%s' version %lld: expected %s version 1",
                        path, dmuon_doc_line(root), fmt, (long long)version, PARAMS_FORMAT);
        goto done;
    }
    static const char *const keys[] = {"format", "version", "preset", "fitted_on", "mcast",
                                       "tree", "free", "params"};
    for (size_t i = 0; i < dmuon_doc_map_len(root); i++) {
        const char *k = dmuon_doc_map_key(&doc, root, i);
        size_t j = 0;
        while (j < sizeof keys / sizeof keys[0] && (!k || strcmp(k, keys[j])))
            j++;
        if (j == sizeof keys / sizeof keys[0]) {
            rc = DMUON_FAIL(DMUON_EPARSE, "%s:%d: unknown field '%s' (expected format, version, "
                            "preset, fitted_on, mcast, tree, free, params)", path,
                            dmuon_doc_line(dmuon_doc_map_value(&doc, root, i)), k ? k : "");
            goto done;
        }
    }
    DMUON_TRY_GOTO(rc, text_field(&doc, root, path, "preset", &name), done);
    const char *fitted = "";
    DMUON_TRY_GOTO(rc, text_field(&doc, root, path, "fitted_on", &fitted), done);
    snprintf(q.fitted_on, sizeof q.fitted_on, "%s", fitted);
    DMUON_TRY_GOTO(rc, dmuon_doc_field_bool(&doc, root, "mcast", true, &mcast), done);
    DMUON_TRY_GOTO(rc, dmuon_doc_field_bool(&doc, root, "tree", true, &tree), done);
    pm = dmuon_doc_get(&doc, root, "params");
    if (!pm || pm->type != YAML_MAPPING_NODE) {
        rc = DMUON_FAIL(DMUON_EPARSE, "%s:%d: field 'params': expected an object of the %d "
                        "parameters", path, dmuon_doc_line(pm ? pm : root), DMUON_NP_COUNT);
        goto done;
    }
    for (size_t i = 0; i < dmuon_doc_map_len(pm); i++) {
        const char *k = dmuon_doc_map_key(&doc, pm, i);
        if (param_index(k) < 0) {
            rc = DMUON_FAIL(DMUON_EPARSE, "%s:%d: params: unknown parameter '%s'", path,
                            dmuon_doc_line(dmuon_doc_map_value(&doc, pm, i)), k ? k : "");
            goto done;
        }
    }
    for (int i = 0; i < DMUON_NP_COUNT; i++) {
        /* grp_bw came after version 1 files were first written: absent, it
         * is 0 (off), which is what those files meant */
        bool required = i != DMUON_NP_GRP_BW;
        if (!required)
            q.v[i] = 0;
        DMUON_TRY_GOTO(rc, dmuon_doc_field_double(&doc, pm, param_names[i], required, &q.v[i]),
                       done);
        if (!(q.v[i] >= 0) || !isfinite(q.v[i])) {
            rc = DMUON_FAIL(DMUON_EPARSE, "%s:%d: params.%s = %g: expected a finite value >= 0",
                            path, dmuon_doc_line(pm), param_names[i], q.v[i]);
            goto done;
        }
        const char *want = param_range(i, q.v[i], tree);
        if (want) {
            rc = DMUON_FAIL(DMUON_EPARSE, "%s:%d: params.%s = %g: expected %s", path,
                            dmuon_doc_line(pm), param_names[i], q.v[i], want);
            goto done;
        }
    }
    fr = dmuon_doc_get(&doc, root, "free");
    if (fr && fr->type != YAML_SEQUENCE_NODE) {
        rc = DMUON_FAIL(DMUON_EPARSE, "%s:%d: field 'free': expected an array of parameter "
                        "names", path, dmuon_doc_line(fr));
        goto done;
    }
    for (size_t i = 0; fr && i < dmuon_doc_seq_len(fr); i++) {
        yaml_node_t *e = dmuon_doc_seq_at(&doc, fr, i);
        int k = param_index(dmuon_doc_str(e));
        if (k < 0) {
            rc = DMUON_FAIL(DMUON_EPARSE, "%s:%d: free: unknown parameter '%s'", path,
                            dmuon_doc_line(e), dmuon_doc_str(e) ? dmuon_doc_str(e) : "");
            goto done;
        }
        mask |= 1u << k;
    }
    q.mcast = mcast;
    q.tree = tree;
    *p = q;
    *free_mask = mask;
    if (preset && preset_len)
        snprintf(preset, preset_len, "%s", name);
done:
    dmuon_doc_release(&doc);
    return rc;
}
