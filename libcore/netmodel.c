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

#include "dmuon/publish.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static const char *const param_names[DMUON_NP_COUNT] = {
    "intra_bw", "intra_lat", "rail_bw", "node_bw", "hop_lat",
    "chunk_oh", "call_oh",   "red_bw",  "ring_eff", "ring_chunk"};
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
    int *stream_of;             /* per chunk */
    int64_t *sfirst;            /* per stream: its chunks [sfirst[i], sfirst[i+1]) */
    int *srail;                 /* per stream: its rail */
    int *route;                 /* per (stream, node): in[R], out[R], nin, nout */
    int *need;                  /* per job: inputs still to arrive */
    double *ready;              /* per job: latest input arrival */
    int64_t *fifo_next;         /* per job: next job in its rank's FIFO */
    int64_t *head, *tail;       /* per rank FIFO of ready jobs */
    double *worker;             /* per rank: time its worker is free */
    double *rail_tx, *rail_rx;  /* per rank */
    double *node_tx, *node_rx;  /* per node */
    double *node_in;            /* per node: its intra port (multicast stores, loads) */
    heap h;
    double end;
} replay;

static int *route_of(const replay *r, int st, int node)
{
    return r->route + ((size_t)st * r->R + node) * (2 * (size_t)r->R + 2);
}

/* A message of b bytes from node a to node z on rail s, issued at t:
 * returns its arrival time.  The sender's ports and the receiver's ports
 * are separate pipes: it leaves once the sender's rail and node ports are
 * free, and is taken in once the receiver's are (a port serves one message
 * at a time, at its bandwidth). */
static double message(replay *r, int a, int z, int s, double b, double t)
{
    const double *v = r->p->v;
    int ra = a * r->K + s, rz = z * r->K + s;
    double tr = b / v[DMUON_NP_RAIL_BW], tn = b / v[DMUON_NP_NODE_BW];
    double st = dmax(t, dmax(r->rail_tx[ra], r->node_tx[a]));
    r->rail_tx[ra] = st + tr;
    r->node_tx[a] = st + tn;
    double sent = st + dmax(tr, tn);
    double in = dmax(sent, dmax(r->rail_rx[rz] + tr, r->node_rx[z] + tn));
    r->rail_rx[rz] = in - dmax(tr, tn) + tr;
    r->node_rx[z] = in - dmax(tr, tn) + tn;
    return in + v[DMUON_NP_HOP_LAT];
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

/* Runs job j on its rank, starting at t; stores when the worker is free. */
static int run_job(replay *r, int64_t j, double t, double *free_at)
{
    const double *v = r->p->v;
    int node = (int)(j / r->nc);
    int64_t c = j % r->nc;
    int st = r->stream_of[c], s = r->srail[st], K = r->K, R = r->R;
    double b = r->bytes[c];
    int *rt = route_of(r, st, node);
    int nin = rt[2 * R], nout = rt[2 * R + 1];
    int *out = rt + R;
    double x = t + v[DMUON_NP_CHUNK_OH];
    if (r->kind == 0) {
        if (nin == 0)
            x += b / v[DMUON_NP_INTRA_BW];     /* read the owner's window */
    } else if (r->kind == 1) {
        x += v[DMUON_NP_INTRA_LAT];
        x = intra(r, node, x, b, K);
        if (v[DMUON_NP_RED_BW] > 0)
            x += b * (K - 1 + nin) / v[DMUON_NP_RED_BW];
    }
    for (int o = 0; o < nout; o++) {
        double arr = message(r, node, out[o], s, b, x);
        int64_t jj = (int64_t)out[o] * r->nc + c;
        if (arr > r->ready[jj])
            r->ready[jj] = arr;
        if (--r->need[jj] == 0 && heap_push(&r->h, r->ready[jj], EV_READY, out[o] * K + s, jj))
            return -1;
        if (arr > r->end)
            r->end = arr;
    }
    if (r->kind == 0 && K > 1)
        x = intra(r, node, x + v[DMUON_NP_INTRA_LAT], b, K - 1);
    if (r->kind == 1 && nout == 0)
        x += b / v[DMUON_NP_INTRA_BW];         /* the owner's window */
    *free_at = x;
    if (x > r->end)
        r->end = x;
    return 0;
}

static void replay_free(replay *r)
{
    free(r->bytes);
    free(r->stream_of);
    free(r->sfirst);
    free(r->srail);
    free(r->route);
    free(r->need);
    free(r->ready);
    free(r->fifo_next);
    free(r->head);
    free(r->tail);
    free(r->worker);
    free(r->rail_tx);
    free(r->rail_rx);
    free(r->node_tx);
    free(r->node_rx);
    free(r->node_in);
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
    r->stream_of = malloc(c1 * sizeof *r->stream_of);
    r->sfirst = malloc(((size_t)ns + 1) * sizeof *r->sfirst);
    r->srail = malloc(((size_t)ns + 1) * sizeof *r->srail);
    r->route = malloc(((size_t)ns ? (size_t)ns : 1) * R * (2 * (size_t)R + 2) * sizeof(int));
    r->need = malloc(nj * sizeof *r->need);
    r->ready = calloc(nj, sizeof *r->ready);
    r->fifo_next = malloc(nj * sizeof *r->fifo_next);
    r->head = malloc(N * sizeof *r->head);
    r->tail = malloc(N * sizeof *r->tail);
    r->worker = calloc(N, sizeof *r->worker);
    r->rail_tx = calloc(N, sizeof *r->rail_tx);
    r->rail_rx = calloc(N, sizeof *r->rail_rx);
    r->node_tx = calloc((size_t)R, sizeof *r->node_tx);
    r->node_rx = calloc((size_t)R, sizeof *r->node_rx);
    r->node_in = calloc((size_t)R, sizeof *r->node_in);
    if (!r->bytes || !r->stream_of || !r->sfirst || !r->srail || !r->route || !r->need ||
        !r->ready || !r->fifo_next || !r->head || !r->tail || !r->worker || !r->rail_tx ||
        !r->rail_rx || !r->node_tx || !r->node_rx || !r->node_in) {
        replay_free(r);
        return DMUON_FAIL(DMUON_ENOMEM, "network model: out of memory replaying %lld chunks",
                          (long long)nc);
    }
    for (size_t i = 0; i < N; i++)
        r->head[i] = r->tail[i] = -1;
    return DMUON_OK;
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
        for (int64_t c = r->sfirst[st]; c < r->sfirst[st + 1]; c++) {
            r->stream_of[c] = st;
            for (int node = 0; node < R; node++)
                r->need[node * r->nc + c] = route_of(r, st, node)[2 * R];
        }
        maxn = dmax((double)maxn, (double)(r->sfirst[st + 1] - r->sfirst[st]));
    }
    dmuon_rc rc = DMUON_OK;
    int64_t outer = by_stream ? r->ns : maxn, inner = by_stream ? maxn : r->ns;
    for (int64_t a = 0; a < outer && rc == DMUON_OK; a++)
        for (int64_t b = 0; b < inner && rc == DMUON_OK; b++) {
            int st = (int)(by_stream ? a : b);
            int64_t c = r->sfirst[st] + (by_stream ? b : a);
            if (c >= r->sfirst[st + 1])
                continue;
            for (int node = 0; node < R; node++)
                if (r->need[node * r->nc + c] == 0 &&
                    heap_push(&r->h, 0.0, EV_READY, node * K + r->srail[st], node * r->nc + c))
                    rc = DMUON_ENOMEM;
        }
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
static dmuon_rc replay_collv(const dmuon_net_params *p, const dmuon_sched *s, int kind,
                             double *seconds)
{
    int R = s->nodes, K = s->per_node;
    replay r;
    DMUON_TRY(replay_alloc(&r, p, R, K, kind, R * K, s->nchunks));
    int64_t c = 0;
    for (int q = 0; q < R; q++)
        for (int sl = 0; sl < K; sl++) {
            int st = q * K + sl, n = 0;
            const dmuon_chunk *c0 = dmuon_sched_queue(s, q, sl, &n);
            r.sfirst[st] = c;
            r.srail[st] = sl;
            for (int k = 0; k < n; k++)
                r.bytes[c++] = (double)c0[k].bytes;
            for (int node = 0; node < R; node++) {
                int *rt = route_of(&r, st, node), nout = 0;
                rt[2 * R] = dmuon_sched_route(s, q, node, rt, rt + R, &nout);
                rt[2 * R + 1] = nout;
            }
        }
    r.sfirst[R * K] = c;
    assert(c == r.nc);
    return replay_run(&r, 0, seconds);
}

/* Replays a publish schedule: one stream per parameter, on its rail,
 * along its route (dmuon_pub_sched_hop). */
static dmuon_rc replay_publish(const dmuon_net_params *p, const dmuon_pub_sched *s,
                               double *seconds)
{
    int R = s->nodes, K = s->per_node;
    replay r;
    DMUON_TRY(replay_alloc(&r, p, R, K, 2, s->nparams, s->nchunks));
    int64_t c = 0;
    for (int i = 0; i < s->nparams; i++) {
        const dmuon_pub_param *pp = &s->params[i];
        r.sfirst[i] = c;
        r.srail[i] = pp->rail;
        for (int k = 0; k < pp->nchunks; k++)
            r.bytes[c++] = (double)s->chunks[pp->first + k].bytes;
        for (int node = 0; node < R; node++) {
            int *rt = route_of(&r, i, node), prev = -1, next = -1;
            dmuon_pub_sched_hop(s, i, node, &prev, &next);
            rt[2 * R] = rt[2 * R + 1] = 0;
            if (prev >= 0)
                rt[rt[2 * R]++] = prev;
            if (next >= 0)
                rt[R + rt[2 * R + 1]++] = next;
        }
    }
    r.sfirst[s->nparams] = c;
    assert(c == r.nc);
    return replay_run(&r, 1, seconds);
}

/* --------------------------------------------------------- baselines ---- */

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

/* -------------------------------------------------------------- API ---- */

dmuon_rc dmuon_net_predict(const dmuon_net_params *p, const dmuon_net_case *c, dmuon_net_line l,
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
                             i != DMUON_NP_CALL_OH && v[i] <= 0))
            return DMUON_FAIL(DMUON_EINVAL, "network model: parameter %s = %g: expected a "
                              "positive value", param_names[i], v[i]);
    double total = 0;
    for (int i = 0; i < c->n; i++)
        total += seg_bytes(&c->segs[i]);
    int red = c->op == DMUON_NET_RSV;

    if (c->op == DMUON_NET_PUBLISH) {
        for (int i = 0; i < c->n; i++)
            if (c->segs[i].owner >= R * K || c->segs[i].owner < 0)
                return DMUON_FAIL(DMUON_EINVAL, "network model: publish parameter %d: owner %d "
                                  "is not a rank of %d x %d", i, (int)c->segs[i].owner, R, K);
        if (l != DMUON_NET_OURS && l != DMUON_NET_PER_OWNER && l != DMUON_NET_COALESCED)
            return DMUON_FAIL(DMUON_EINVAL, "network model: the publish has no %s line",
                              line_names[l]);
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
                rc = replay_publish(p, &ps, seconds);
            dmuon_pub_sched_release(&ps);
            free(t);
            free(nrail);
            return rc;
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
        dmuon_rc rc = replay_collv(p, &s, red, seconds);
        dmuon_sched_release(&s);
        return rc;
    }
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
        dmuon_rc rc = dmuon_net_predict(&p, &f->cases[i], f->lines[i], &t);
        if (rc != DMUON_OK) {
            f->rc = rc;
            return 1e30;
        }
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
     * 0.5), simplex of d+1 points, initial steps of log(3) per axis. */
    double xs[DMUON_NP_COUNT + 1][DMUON_NP_COUNT], fx[DMUON_NP_COUNT + 1];
    for (int i = 0; i <= d; i++) {
        memcpy(xs[i], x0, sizeof x0);
        if (i > 0)
            xs[i][i - 1] += log(3.0);
        fx[i] = objective(&f, xs[i]);
    }
    int evals = d + 1;
    while (evals < max_evals && f.rc == DMUON_OK) {
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
        p->mcast = 0;
        p->tree = 1;
        *free_mask = (1u << DMUON_NP_COUNT) - 1;
        return DMUON_OK;
    }
    if (name && !strcasecmp(name, "h100")) {
        /* Fixed from public figures: 400 Gb/s per rail (50 GB/s), eight
         * rails per node, about 3 us per cross-node hop (NIC, switch,
         * NIC), the reduction in the switch; the baselines' pipeline step
         * at 64 KiB (not identifiable from 16-GPU cells).  Fitted from
         * the start values: intra_bw (NVLink 4, 450 GB/s per direction),
         * intra_lat, the chunk and call overheads, the baselines'
         * efficiency. */
        p->v[DMUON_NP_INTRA_BW] = 450e9;
        p->v[DMUON_NP_INTRA_LAT] = 1e-6;
        p->v[DMUON_NP_RAIL_BW] = 50e9;
        p->v[DMUON_NP_NODE_BW] = 8 * 50e9;
        p->v[DMUON_NP_HOP_LAT] = 3e-6;
        p->v[DMUON_NP_CHUNK_OH] = 1e-6;
        p->v[DMUON_NP_CALL_OH] = 10e-6;
        p->v[DMUON_NP_RED_BW] = 0;
        p->v[DMUON_NP_RING_EFF] = 0.8;
        p->v[DMUON_NP_RING_CHUNK] = 64 * 1024;
        p->mcast = 1;
        *free_mask = (1u << DMUON_NP_INTRA_BW) | (1u << DMUON_NP_INTRA_LAT) |
                     (1u << DMUON_NP_CHUNK_OH) | (1u << DMUON_NP_CALL_OH) |
                     (1u << DMUON_NP_RING_EFF);
        return DMUON_OK;
    }
    return DMUON_FAIL(DMUON_EINVAL, "network preset '%s': expected namespace or h100",
                      name ? name : "(null)");
}
