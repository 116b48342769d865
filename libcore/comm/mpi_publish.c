/*
 * mpi_publish.c — the HSDP cross-node publish on the MPI backend
 * (dmuon/publish.h, comm/backend.h), over the copy range of symmetric memory
 * the public layer (publish.c) checked.
 *
 * The chunks come from the publish schedule (sched.c, dmuon_pub_sched).
 * The route is chosen here, per parameter, by size (R > 2 nodes; with two
 * every route is the same single hop):
 *   chain    (the schedule's route) route[0] → route[1] → … → route[R−1]:
 *            every link carries the parameter once; R − 1 hops in a row,
 *            each forwarding a chunk the moment it has arrived;
 *   fan-out  the owner's rank sends every chunk to the R − 1 leaders
 *            itself: one hop, the owner's link carries it R − 1 times;
 *   relay    the owner's rank sends message m to one leader only, the
 *            (m mod (R − 1))-th after its own node, which forwards it to
 *            the R − 2 other leaders the moment it has arrived: two hops,
 *            the owner's link carries the parameter once and each leader's
 *            about (R − 2)/(R − 1) of it (a scatter, then an all-gather
 *            whose pieces go on as they land).
 * A parameter of at most fanout_bytes takes the fan-out (a step of small
 * parameters pays per-hop latency, not link time; a parameter of one or
 * two chunks cannot spread over the relays); a larger one the relay,
 * which bounds every rank's sends by about the parameter's size in two
 * hops, where the chain needs R − 1.  The limit is
 * DMUON_PUBLISH_FANOUT_BYTES (bytes; 0: no parameter fans out) or
 * FANOUT_BYTES_DEFAULT; DMUON_PUBLISH_ROUTE (auto, fan-out, relay or chain;
 * unset: auto, the rule above) sends every parameter by one route.  Both
 * must be the same on every rank (create checks them).
 *
 * Messages: a fan-out parameter travels one schedule chunk per message
 * (eager-sized: no handshake).  A chain or relay parameter travels in
 * messages of whole chunks of up to message_bytes
 * (DMUON_PUBLISH_MESSAGE_BYTES or MESSAGE_BYTES_DEFAULT; 0: one chunk each;
 * on the relay also at most ⌈(chunks − 1)/(R − 1)⌉ chunks, so that every
 * leader relays a message when there are enough), then its last chunk
 * alone: a message above Open MPI's TCP pipeline size (192 KiB) lands in
 * the receiver's copy straight from the socket, where an eager chunk is
 * copied once more out of the transport's buffer, and the per-byte CPU is
 * what bounds a large parameter when ranks outnumber cores
 * (docs/operators.md).  Where that would make a message of 2 to
 * MIN_GROUP − 1 chunks (a group, or the chunks left after the last whole
 * group) they travel one chunk per message instead: at the default chunk
 * (64 KiB less 128 bytes) such a message would not reach that size, so it
 * would pay the handshake's round trip and still be copied out of the
 * transport's buffers.
 *
 * Wire format, per parameter p of rail s, on the publish's own duplicate of
 * the rail communicator with tag p: the chunks of p in increasing offset;
 * the last chunk travels with the step number appended (8 bytes), so a
 * parameter of one chunk costs one message per hop.  Each hop receives the
 * chunks straight into its copy, the last one into a small per-parameter
 * tail buffer, and forwards every chunk the moment it has arrived, in
 * chunk order; MPI's non-overtaking order matches the i-th message from a
 * source to the i-th receive posted for that source (on the relay a leader
 * receives from the owner and from every other leader, each in increasing
 * message order), so the step can only complete a round after every chunk
 * of that round.
 *
 * One persistent pipeline per rail: create builds every message of a step
 * this rank takes part in once, as persistent requests (MPI_Recv_init /
 * MPI_Send_init on the copy and the tail buffers), in two arrays — the
 * rail's receives and its sends.  begin starts every receive of the step
 * (MPI_Start in array order, so that receives of one source match its
 * messages in order: MPI_Startall may start them in any order); post
 * starts the parameter's prebuilt sends; an
 * arrival starts the prebuilt forwards of its message.  Consecutive
 * parameters of a step therefore stream through requests that already
 * exist, with nothing set up per call; every chunk of every posted
 * parameter is in flight at once (eager-sized chunks, as deep as the step).
 * Progress is one MPI_Testsome over the rail's receives per pass, which
 * enters MPI's progress engine once however many parameters are waited
 * for (testing each parameter's next receive in turn entered it once per
 * parameter, and with mpi_yield_when_idle each empty entry gives the CPU
 * away: on ranks outnumbering cores that, not the network, set the pace).
 * The arrival flag is set from the flag message only when the whole round
 * is in, and a wait compares it with the step it wants: equal is accepted,
 * anything else is not (an older flag keeps it waiting; a completed round
 * carrying another step is reported as stale).
 *
 * Invariant: between begin(t) and end(t) every parameter this rank leads
 * has exactly one armed round; end(t) leaves no request outstanding.
 */
#include "dmuon/publish.h"

#include <assert.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dmuon/collv.h"
#include "dmuon/sched.h"
#include "mpi_backend.h"
#include "wait.h"

/* The largest parameter that takes the fan-out route by default (see
 * above): 128 KiB, about two default chunks; measured on namespace hosts over TCP
 * (docs/operators.md, "Publish routes"). */
#define FANOUT_BYTES_DEFAULT (128 * 1024)
/* The largest message of a chain or relay parameter by default (see above). */
#define MESSAGE_BYTES_DEFAULT (1024 * 1024)
/* The fewest chunks a grouped message carries (see above): 3 default
 * chunks are 196224 bytes, not above Open MPI's btl_tcp_min_rdma_pipeline_size
 * (196608 by default), 4 are. */
#define MIN_GROUP 4

/* $DMUON_PUBLISH_ROUTE unset or auto: each parameter's route by its size */
#define ROUTE_AUTO (-1)

typedef struct {
    int idx;                 /* parameter index in the table */
    int owner_node;
    int lead;                /* 1: this rank receives it; 0: this rank owns it */
    int next;                /* the chain's next hop (rail rank = node id), −1
                                when last (the chain's route only) */
    dmuon_pub_route route;   /* chain, fan-out or relay (dmuon/sched.h) */
    int pos;                 /* relay: this leader relays the messages m with
                                m mod (R − 1) = pos (its hop − 1); −1 for the
                                owner */
    int nout;                /* sends per message (relay leader: per message it
                                relays): R − 1 (fan-out owner), R − 2 (relay
                                leader), 1 or 0 */
    int nchunks;
    const dmuon_pub_chunk *chunks;   /* its chunks in the schedule */
    int group;               /* chunks per grouped message */
    int ngrouped;            /* messages 0 .. ngrouped − 1: chunks [m·group,
                                (m + 1)·group), the last of them cut at the
                                last chunk; then one message per chunk up to
                                the last chunk (a leftover of 2 or 3) */
    int nmsg;                /* messages, the last chunk's included */
    /* per-step state */
    int got;                 /* messages received (and on the chain forwarded), in
                                order (lead) */
    int fwd;                 /* relay leader: the next message it relays that is
                                not forwarded yet */
    int round_done;
    int64_t flag;            /* arrival flag: step of the last complete round */
    int64_t in_step;
    unsigned char *tail;     /* last chunk + 8-byte step */
    int tail_bytes;          /* data bytes of the last chunk */
    int rx0;                 /* its receives: rx[rx0 .. rx0 + nmsg) (lead) */
    MPI_Request *sreq;       /* persistent sends, nout per message: message m to
                                destination j at m·nout + j; for a relay
                                leader only the messages it relays, m at
                                (m / (R − 1))·nout + j */
} param_state;

typedef struct {
    const dmuon_topo *topo;
    MPI_Comm rail;
    MPI_Comm node;           /* the node half (node_load): a duplicate of t->node */
    dmuon_symm *mem;         /* the publish's memory: node peers' copies */
    int64_t copy_offset;
    const dmuon_segment *params;   /* the public publish's table */
    const dmuon_pub_sched *sched;  /* the public publish's schedule */
    int n;
    param_state *mine;       /* parameters of this rank's rail: owned or led */
    int nmine;
    int *slot_of;            /* param index → index in mine, or −1 */
    unsigned char *copy;
    int64_t copy_bytes, chunk_bytes;
    int64_t fanout_bytes;    /* parameters of at most this many bytes fan out */
    int64_t message_bytes;   /* chain and relay messages of up to this many bytes */
    int route;               /* ROUTE_AUTO, or the dmuon_pub_route every
                                parameter takes */
    int deadline_ms;
    int64_t step;            /* current step (0 before the first) */
    int open;                /* between begin and end */
    int broken;
    /* the rail's persistent pipeline (see above) */
    MPI_Request *rx;         /* nrx receives: every chunk of every led parameter */
    MPI_Request *tx;         /* ntx sends: every chunk of every parameter sent on */
    int nrx, ntx;
    int *rx_slot;            /* receive → index in mine */
    unsigned char *rx_done;  /* receive → 1 once it completed (inactive) */
    int *rx_idx;             /* MPI_Testsome's output */
    int *touched;            /* slots with new arrivals in one pass (up to nrx) */
    /* the node load in flight (see "node half" below) */
    int nl_phase;
    int nl_n, nl_next, nl_cap;     /* listed, the next to test for arrival, allocated */
    int *nl_params;                /* copies of the caller's list and offsets */
    int64_t *nl_offs;
    int64_t nl_dst, nl_step;
    MPI_Request nl_req;            /* the node meeting in progress */
} mpi_pub;

static void mpi_publish_free(dmuon_publish *pub);
static int pipeline_init(mpi_pub *p);

/* The route of a parameter of `bytes` bytes (see the top of the file). */
static dmuon_pub_route route_of(const mpi_pub *p, int64_t bytes)
{
    if (p->topo->nodes <= 2)
        return DMUON_PUB_CHAIN;   /* one leader: every route is the same one hop */
    if (p->route != ROUTE_AUTO)
        return (dmuon_pub_route)p->route;
    return bytes <= p->fanout_bytes ? DMUON_PUB_FANOUT : DMUON_PUB_RELAY;
}

/* The messages ps sends on: every message for the owner, the ones it
 * relays (m ≡ pos mod R − 1) for a relay leader, every one for a chain
 * leader that forwards; a fan-out leader sends nothing (nout 0). */
static int msgs_sent(const param_state *ps, int R)
{
    if (ps->route != DMUON_PUB_RELAY || !ps->lead)
        return ps->nmsg;
    return ps->pos < ps->nmsg ? (ps->nmsg - 1 - ps->pos) / (R - 1) + 1 : 0;
}

static int64_t param_bytes(const dmuon_segment *s)
{
    return s->count * (int64_t)dmuon_dtype_size(s->dtype);
}

/* A byte count from the environment: $name (decimal digits only, 0 ≤ v ≤ max) or dflt.
 * Returns 0, or −1 for a value that is not one. */
static int env_bytes(const char *name, int64_t dflt, int64_t max, int64_t *bytes)
{
    const char *env = getenv(name);
    *bytes = dflt;
    if (!env || !*env)
        return 0;
    int64_t v = 0;
    for (const char *c = env; *c; c++) {   /* digits only: no sign, space or suffix */
        if (*c < '0' || *c > '9' || v > (max - (*c - '0')) / 10)
            return -1;
        v = v * 10 + (*c - '0');
    }
    *bytes = v;
    return 0;
}

/* The route $DMUON_PUBLISH_ROUTE names: unset or empty is auto.  Returns 0,
 * or −1 for a name that is not one. */
static int route_parse(const char *val, int *route)
{
    static const char *const names[] = {"auto", "chain", "fan-out", "relay"};
    *route = ROUTE_AUTO;
    if (!val || !*val)
        return 0;
    for (int i = 0; i < 4; i++)
        if (!strcmp(val, names[i])) {
            *route = i - 1;
            return 0;
        }
    return -1;
}

/* Agrees one variable over the world: every rank read it well and the same.
 * Returns 0 when so (on every rank alike). */
static int env_agree(const dmuon_topo *t, int bad, int64_t v)
{
    int64_t a[3] = {bad, v, -v};
    MPI_Allreduce(MPI_IN_PLACE, a, 3, MPI_INT64_T, MPI_MAX, t->world);
    return a[0] || a[1] != -a[2];
}

static dmuon_rc mpi_publish_create(dmuon_publish *pub)
{
    dmuon_rc rc = DMUON_OK;
    const dmuon_topo *t = pub->topo;
    const dmuon_segment *params = pub->params;
    int n = pub->n;
    mpi_pub *p = calloc(1, sizeof *p);
    int fail = !p;
    MPI_Allreduce(MPI_IN_PLACE, &fail, 1, MPI_INT, MPI_MAX, t->world);
    if (fail) {
        free(p);
        return DMUON_FAIL(DMUON_ENOMEM, "out of memory creating a publish");
    }
    pub->impl = p;
    p->topo = t;
    p->rail = MPI_COMM_NULL;
    p->node = MPI_COMM_NULL;
    p->mem = pub->mem;
    p->copy_offset = pub->copy_offset;
    p->params = params;
    p->sched = &pub->sched;
    p->n = n;
    p->copy = pub->copy;
    p->copy_bytes = pub->copy_bytes;
    p->chunk_bytes = pub->chunk_bytes;
    p->deadline_ms = pub->deadline_ms;
    int tag_ub = 32767, *tub = NULL, flag = 0;
    MPI_Comm_get_attr(t->world, MPI_TAG_UB, &tub, &flag);
    if (flag && tub)
        tag_ub = *tub;
    if (n > tag_ub) {
        rc = DMUON_FAIL(DMUON_EINVAL, "%d parameters exceed this MPI's %d message tags", n, tag_ub);
        goto fail;
    }

    int R = t->nodes, K = t->per_node, s = t->local, r = t->node_id;
    static const char *const vars[2] = {"DMUON_PUBLISH_FANOUT_BYTES",
                                        "DMUON_PUBLISH_MESSAGE_BYTES"};
    for (int v = 0; v < 2; v++) {
        int64_t *dst = v ? &p->message_bytes : &p->fanout_bytes;
        int bad = v ? env_bytes(vars[v], MESSAGE_BYTES_DEFAULT, (int64_t)1 << 30, dst)
                    : env_bytes(vars[v], FANOUT_BYTES_DEFAULT, INT64_MAX, dst);
        if (env_agree(t, bad != 0, *dst)) {
            const char *val = getenv(vars[v]);
            rc = DMUON_FAIL(DMUON_EINVAL, "%s: expected the same non-negative number of "
                            "bytes%s on every rank (this rank: '%s')", vars[v],
                            v ? " of at most 1073741824" : "", val ? val : "unset");
            goto fail;
        }
    }
    {
        const char *val = getenv("DMUON_PUBLISH_ROUTE");
        int bad = route_parse(val, &p->route) != 0;
        if (env_agree(t, bad, p->route)) {
            rc = DMUON_FAIL(DMUON_EINVAL, "DMUON_PUBLISH_ROUTE: expected the same route on every "
                            "rank, one of auto, fan-out, relay or chain (this rank: '%s')",
                            val ? val : "unset");
            goto fail;
        }
    }
    if (R >= 2) {   /* the routes in words (dmuon_publish_routes) */
        static const char *const names[] = {"chain", "fan-out", "relay"};
        char msgs[96];
        const int64_t most = p->message_bytes / p->chunk_bytes;
        char one[64];
        snprintf(one, sizeof one, "one chunk of %lld bytes per message", (long long)p->chunk_bytes);
        if (most < MIN_GROUP)
            snprintf(msgs, sizeof msgs, "%s", one);
        else if (most == MIN_GROUP)
            snprintf(msgs, sizeof msgs, "messages of %d chunks of %lld bytes, else of one",
                     MIN_GROUP, (long long)p->chunk_bytes);
        else
            snprintf(msgs, sizeof msgs, "messages of %d to %lld chunks of %lld bytes, "
                     "else of one", MIN_GROUP, (long long)most, (long long)p->chunk_bytes);
        if (R == 2)
            snprintf(pub->routes, sizeof pub->routes, "one hop (two nodes), %s", msgs);
        else if (p->route == ROUTE_AUTO)
            snprintf(pub->routes, sizeof pub->routes, "fan-out up to %lld bytes, relay above "
                     "(%s)", (long long)p->fanout_bytes, msgs);
        else
            snprintf(pub->routes, sizeof pub->routes, "%s for every parameter "
                     "(DMUON_PUBLISH_ROUTE), %s", names[p->route],
                     p->route == DMUON_PUB_FANOUT ? one : msgs);
    }
    p->slot_of = malloc((n ? (size_t)n : 1) * sizeof *p->slot_of);
    p->mine = calloc(n ? (size_t)n : 1, sizeof *p->mine);
    fail = !p->slot_of || !p->mine;
    size_t nrx = 0, ntx = 0;
    if (!fail) {
        for (int i = 0; i < n; i++) {
            p->slot_of[i] = -1;
            if (params[i].owner % K != s || R == 1)
                continue;
            param_state *ps = &p->mine[p->nmine];
            ps->idx = i;
            ps->owner_node = params[i].owner / K;
            ps->lead = ps->owner_node != r;
            int prev = -1;
            ps->pos = dmuon_pub_sched_hop(p->sched, i, r, &prev, &ps->next) - 1;
            ps->route = route_of(p, param_bytes(&params[i]));
            ps->nout = ps->route == DMUON_PUB_FANOUT ? (ps->lead ? 0 : R - 1)
                       : ps->route == DMUON_PUB_RELAY ? (ps->lead ? R - 2 : 1)
                                                      : ps->next >= 0;
            ps->nchunks = p->sched->params[i].nchunks;
            ps->chunks = p->sched->chunks + p->sched->params[i].first;
            /* chunks per message before the last chunk: as many as
             * message_bytes holds, no more than there are, and on the
             * relay at least one message for each of the R − 1 relays
             * where the chunks allow it; fewer than MIN_GROUP: one each */
            int64_t per = p->message_bytes / p->sched->chunk_bytes;
            per = per < ps->nchunks - 1 ? per : ps->nchunks - 1;
            if (ps->route == DMUON_PUB_RELAY) {
                const int64_t even = (ps->nchunks - 1 + R - 2) / (R - 1);
                per = per < even ? per : even;
            }
            ps->group = ps->route == DMUON_PUB_FANOUT || per < MIN_GROUP ? 1
                        : per > INT_MAX ? INT_MAX : (int)per;
            /* after the whole groups, a leftover of one chunk or of at
             * least MIN_GROUP is one more message; of 2 or 3, one each */
            const int rest = (ps->nchunks - 1) % ps->group;
            const bool one_more = rest == 1 || rest >= MIN_GROUP;
            ps->ngrouped = (ps->nchunks - 1) / ps->group + one_more;
            ps->nmsg = ps->ngrouped + (one_more ? 0 : rest) + 1;
            ps->rx0 = (int)nrx;
            nrx += ps->lead ? (size_t)ps->nmsg : 0;
            ntx += (size_t)msgs_sent(ps, R) * (size_t)ps->nout;
            p->slot_of[i] = p->nmine++;
        }
        fail = nrx > INT_MAX || ntx > INT_MAX;
        p->nrx = fail ? 0 : (int)nrx;
        p->ntx = fail ? 0 : (int)ntx;
        p->rx = malloc((nrx ? nrx : 1) * sizeof *p->rx);
        p->tx = malloc((ntx ? ntx : 1) * sizeof *p->tx);
        p->rx_slot = malloc((nrx ? nrx : 1) * sizeof *p->rx_slot);
        p->rx_done = malloc(nrx ? nrx : 1);
        p->rx_idx = malloc((nrx ? nrx : 1) * sizeof *p->rx_idx);
        p->touched = malloc((nrx ? nrx : 1) * sizeof *p->touched);
        fail = fail || !p->rx || !p->tx || !p->rx_slot || !p->rx_done || !p->rx_idx ||
               !p->touched;
        for (int i = 0; i < p->nmine && !fail; i++) {
            param_state *ps = &p->mine[i];
            ps->tail_bytes = (int)ps->chunks[ps->nchunks - 1].bytes;
            ps->tail = malloc((size_t)ps->tail_bytes + 8);
            fail = !ps->tail;
        }
    }
    MPI_Allreduce(MPI_IN_PLACE, &fail, 1, MPI_INT, MPI_MAX, t->world);
    if (fail) {
        rc = DMUON_FAIL(DMUON_ENOMEM, "out of memory creating a publish of %d parameters", n);
        goto fail;
    }
    for (int i = 0; i < p->nrx; i++) {
        p->rx[i] = MPI_REQUEST_NULL;
        p->rx_done[i] = 1;
    }
    for (int i = 0; i < p->ntx; i++)
        p->tx[i] = MPI_REQUEST_NULL;
    MPI_Request *sq = p->tx;
    for (int i = 0; i < p->nmine; i++) {
        param_state *ps = &p->mine[i];
        for (int m = 0; ps->lead && m < ps->nmsg; m++)
            p->rx_slot[ps->rx0 + m] = i;
        ps->sreq = sq;
        sq += (size_t)msgs_sent(ps, p->topo->nodes) * (size_t)ps->nout;
    }
    fail = MPI_Comm_dup(t->rail, &p->rail) != MPI_SUCCESS ||
           MPI_Comm_dup(t->node, &p->node) != MPI_SUCCESS;
    MPI_Allreduce(MPI_IN_PLACE, &fail, 1, MPI_INT, MPI_MAX, t->world);
    if (fail) {
        rc = DMUON_FAIL(DMUON_ECOMM, "MPI_Comm_dup of the rail or node communicator failed");
        goto fail;
    }
    fail = pipeline_init(p) != 0;
    MPI_Allreduce(MPI_IN_PLACE, &fail, 1, MPI_INT, MPI_MAX, t->world);
    if (fail) {
        rc = DMUON_FAIL(DMUON_ECOMM, "publish: building the rail's persistent requests "
                        "(MPI_Recv_init / MPI_Send_init) failed");
        goto fail;
    }
    return DMUON_OK;
fail:
    mpi_publish_free(pub);
    return rc;
}

static void pub_free(mpi_pub *p)
{
    if (!p)
        return;
    /* an active receive (armed, not arrived) is cancelled first; a send
     * still active after a failure completes in the background */
    for (int i = 0; p->rx && i < p->nrx; i++)
        if (p->rx[i] != MPI_REQUEST_NULL) {
            if (!p->rx_done[i])
                MPI_Cancel(&p->rx[i]);
            MPI_Request_free(&p->rx[i]);
        }
    for (int i = 0; p->tx && i < p->ntx; i++)
        if (p->tx[i] != MPI_REQUEST_NULL)
            MPI_Request_free(&p->tx[i]);
    if (p->rail != MPI_COMM_NULL)
        MPI_Comm_free(&p->rail);
    if (p->node != MPI_COMM_NULL)
        MPI_Comm_free(&p->node);
    for (int i = 0; p->mine && i < p->n; i++)
        free(p->mine[i].tail);
    free(p->slot_of);
    free(p->mine);
    free(p->rx);
    free(p->tx);
    free(p->rx_slot);
    free(p->rx_done);
    free(p->rx_idx);
    free(p->touched);
    free(p->nl_params);
    free(p->nl_offs);
    free(p);
}

static int64_t pub_flag(const mpi_pub *p, int param)
{
    if (param < 0 || param >= p->n || p->slot_of[param] < 0)
        return 0;
    return p->mine[p->slot_of[param]].flag;
}

static dmuon_rc pub_progress(mpi_pub *p);

static void chunk_span(const mpi_pub *p, const param_state *ps, int k, unsigned char **ptr,
                       int *bytes)
{
    *ptr = p->copy + ps->chunks[k].offset;
    *bytes = (int)ps->chunks[k].bytes;
}

/* The bytes message m of ps travels in: chunks [m·group, (m + 1)·group)
 * of the copy (the last chunk excluded) for a grouped message, one chunk
 * for each message after them, or for the last message the tail buffer,
 * the last chunk with its step word. */
static void msg_wire(const mpi_pub *p, const param_state *ps, int m, unsigned char **ptr,
                     int *bytes)
{
    if (m < ps->nmsg - 1) {
        const int k0 = m < ps->ngrouped ? m * ps->group
                                        : ps->ngrouped * ps->group + (m - ps->ngrouped);
        const int k1 = m >= ps->ngrouped                   ? k0 + 1
                       : k0 + ps->group < ps->nchunks - 1 ? k0 + ps->group
                                                            : ps->nchunks - 1;
        const dmuon_pub_chunk *a = &ps->chunks[k0], *b = &ps->chunks[k1 - 1];
        *ptr = p->copy + a->offset;
        *bytes = (int)(b->offset + b->bytes - a->offset);
    } else {
        *ptr = ps->tail;
        *bytes = ps->tail_bytes + 8;
    }
}

/* Builds the rail's persistent requests (see the top of the file): every
 * receive of a led parameter from its previous hop, every send of a chunk
 * to each destination of its route.  Returns 0, or −1 when an MPI call
 * failed (what was built is freed by pub_free). */
static int pipeline_init(mpi_pub *p)
{
    const int R = p->topo->nodes, r = p->topo->node_id;
    int *to = malloc((size_t)R * sizeof *to), rc = to ? 0 : -1;
    for (int i = 0; i < p->nmine && !rc; i++) {
        param_state *ps = &p->mine[i];
        const int by_relay = ps->route == DMUON_PUB_RELAY && ps->lead;
        for (int m = 0; m < ps->nmsg && !rc; m++) {
            unsigned char *ptr;
            int bytes, nto = 0;
            msg_wire(p, ps, m, &ptr, &bytes);
            const int from = dmuon_pub_sched_msg(p->sched, ps->idx, ps->route, m, r, to, &nto);
            assert(nto == ps->nout || (by_relay && nto == 0));
            if (ps->lead && MPI_Recv_init(ptr, bytes, MPI_BYTE, from, ps->idx, p->rail,
                                          &p->rx[ps->rx0 + m]) != MPI_SUCCESS)
                rc = -1;
            /* a relay leader holds sends for the messages it relays only */
            const size_t at = (size_t)(by_relay ? m / (R - 1) : m) * ps->nout;
            for (int j = 0; j < nto && !rc; j++)
                if (MPI_Send_init(ptr, bytes, MPI_BYTE, to[j], ps->idx, p->rail,
                                  &ps->sreq[at + j]) != MPI_SUCCESS)
                    rc = -1;
        }
    }
    free(to);
    return rc;
}

/* Starts n persistent requests one after the other, in array order:
 * messages of one source, destination and tag must be started in the
 * order they match (MPI_Startall may start its requests in any order).
 * Returns 0, or −1 when an MPI call failed. */
static int start_in_order(int n, MPI_Request *req)
{
    for (int i = 0; i < n; i++)
        if (MPI_Start(&req[i]) != MPI_SUCCESS)
            return -1;
    return 0;
}

/* Starts the prebuilt sends of messages [m0, m1) of ps to every
 * destination of its route. */
static dmuon_rc start_msgs(mpi_pub *p, param_state *ps, int m0, int m1)
{
    if (start_in_order((m1 - m0) * ps->nout, &ps->sreq[(size_t)m0 * ps->nout]))
        return DMUON_FAIL(DMUON_ECOMM, "publish: MPI_Start of parameter %d's sends "
                          "(messages %d..%d) failed", ps->idx, m0, m1 - 1);
    return DMUON_OK;
}

static dmuon_rc pub_begin(mpi_pub *p, int64_t step)
{
    if (p->broken)
        return DMUON_FAIL(DMUON_ECOMM, "publish: failed in an earlier call and cannot be used");
    if (p->open)
        return DMUON_FAIL(DMUON_EINVAL, "publish: step %lld began before step %lld ended",
                          (long long)step, (long long)p->step);
    if (step <= p->step)
        return DMUON_FAIL(DMUON_EINVAL, "publish: step %lld does not follow step %lld",
                          (long long)step, (long long)p->step);
    p->step = step;
    p->open = 1;
    for (int i = 0; i < p->nmine; i++) {
        p->mine[i].got = 0;
        p->mine[i].fwd = p->mine[i].pos;
        p->mine[i].round_done = 0;
    }
    memset(p->rx_done, 0, (size_t)p->nrx);
    if (start_in_order(p->nrx, p->rx)) {
        p->broken = 1;
        return DMUON_FAIL(DMUON_ECOMM, "publish: MPI_Start of step %lld's %d receives "
                          "failed", (long long)step, p->nrx);
    }
    return DMUON_OK;
}

static dmuon_rc pub_post(mpi_pub *p, int param, int64_t step)
{
    if (param < 0 || param >= p->n)
        return DMUON_FAIL(DMUON_EINVAL, "publish: parameter %d is not in the table of %d", param,
                          p->n);
    if (p->params[param].owner != p->topo->rank)
        return DMUON_FAIL(DMUON_EINVAL, "publish: parameter %d belongs to rank %d, not to this "
                          "rank", param, (int)p->params[param].owner);
    if (!p->open || step > p->step)
        return DMUON_FAIL(DMUON_EINVAL, "publish: parameter %d posted for step %lld outside "
                          "step %lld", param, (long long)step, (long long)p->step);
    if (p->slot_of[param] < 0)
        return DMUON_OK; /* one node: nobody to publish to */
    param_state *ps = &p->mine[p->slot_of[param]];
    if (ps->round_done)
        return DMUON_FAIL(DMUON_EINVAL, "publish: parameter %d posted twice in step %lld", param,
                          (long long)p->step);
    unsigned char *ptr;
    int bytes;
    chunk_span(p, ps, ps->nchunks - 1, &ptr, &bytes);
    memcpy(ps->tail, ptr, (size_t)bytes);
    memcpy(ps->tail + bytes, &step, 8);
    dmuon_rc rc = start_msgs(p, ps, 0, ps->nmsg);
    if (rc != DMUON_OK) {
        p->broken = 1;
        return rc;
    }
    ps->round_done = 1;
    ps->flag = step;
    return pub_progress(p);
}

/* Forwards the messages of one led parameter that have arrived, in order
 * (a later message that completed first waits for the ones before it: the
 * next hop matches messages to receives in order), and completes its round
 * with the last one. */
static dmuon_rc advance(mpi_pub *p, param_state *ps)
{
    const int m0 = ps->got;
    const int relay = ps->route == DMUON_PUB_RELAY, R = p->topo->nodes;
    /* relay: the messages this leader relays come from the owner in order,
     * and go on the moment they arrive, whatever else is still out */
    for (; relay && ps->fwd < ps->nmsg && p->rx_done[ps->rx0 + ps->fwd]; ps->fwd += R - 1)
        if (start_in_order(ps->nout, &ps->sreq[(size_t)(ps->fwd / (R - 1)) * ps->nout]))
            return DMUON_FAIL(DMUON_ECOMM, "publish: MPI_Start of parameter %d's forwards "
                              "of message %d failed", ps->idx, ps->fwd);
    while (ps->got < ps->nmsg && p->rx_done[ps->rx0 + ps->got])
        ps->got++;
    if (ps->got == m0)
        return DMUON_OK;
    if (ps->got == ps->nmsg) {
        unsigned char *ptr;
        int bytes;
        chunk_span(p, ps, ps->nchunks - 1, &ptr, &bytes);
        memcpy(ptr, ps->tail, (size_t)bytes);
        memcpy(&ps->in_step, ps->tail + bytes, 8);
    }
    if (!relay)
        DMUON_TRY(start_msgs(p, ps, m0, ps->got));
    if (ps->got == ps->nmsg) {
        ps->flag = ps->in_step;
        ps->round_done = 1;
    }
    return DMUON_OK;
}

/* One pass of the rail's pipeline: one MPI_Testsome over its receives,
 * then the forwards of what arrived. */
static dmuon_rc pub_progress(mpi_pub *p)
{
    if (!p->open || p->nrx == 0)
        return DMUON_OK;
    int outc = 0;
    if (MPI_Testsome(p->nrx, p->rx, &outc, p->rx_idx, MPI_STATUSES_IGNORE) != MPI_SUCCESS) {
        p->broken = 1;
        return DMUON_FAIL(DMUON_ECOMM, "publish: MPI_Testsome failed");
    }
    if (outc == MPI_UNDEFINED)
        return DMUON_OK;   /* every receive of the step is in */
    int ntouched = 0;
    for (int j = 0; j < outc; j++) {
        const int r = p->rx_idx[j], slot = p->rx_slot[r];
        p->rx_done[r] = 1;
        if (ntouched == 0 || p->touched[ntouched - 1] != slot)
            p->touched[ntouched++] = slot;
    }
    for (int j = 0; j < ntouched; j++) {
        dmuon_rc rc = advance(p, &p->mine[p->touched[j]]);
        if (rc != DMUON_OK) {
            p->broken = 1;
            return rc;
        }
    }
    return DMUON_OK;
}

static dmuon_rc stale(const mpi_pub *p, const param_state *ps, int64_t step)
{
    return DMUON_FAIL(DMUON_ECHECK, "publish: parameter %d (rail %d, owner rank %d) arrived "
                      "with step %lld, expected step %lld: stale arrival flag not accepted",
                      ps->idx, p->topo->local, (int)p->params[ps->idx].owner,
                      (long long)ps->flag, (long long)step);
}

/* The deadline message of a led parameter: how many of its messages
 * arrived (in any order: on the relay they come from several ranks) and
 * where the first missing one comes from. */
static dmuon_rc late(const mpi_pub *p, const param_state *ps, int64_t step)
{
    const dmuon_topo *t = p->topo;
    int arrived = 0, missing = -1, nto = 0;
    for (int m = 0; m < ps->nmsg; m++) {
        arrived += p->rx_done[ps->rx0 + m];
        if (missing < 0 && !p->rx_done[ps->rx0 + m])
            missing = m;
    }
    const int from = dmuon_pub_sched_msg(p->sched, ps->idx, ps->route, missing < 0 ? 0 : missing,
                                         t->node_id, NULL, &nto);
    return DMUON_FAIL(DMUON_ETIMEOUT, "publish: parameter %d (rail %d, owner rank %d) of step "
                      "%lld: %d of %d messages arrived within the %d ms deadline, message %d "
                      "not, due from rank %d (node %d); the arrival flag holds step %lld",
                      ps->idx, t->local, (int)p->params[ps->idx].owner, (long long)step,
                      arrived, ps->nmsg, p->deadline_ms, missing + 1,
                      dmuon_topo_rank_of(t->per_node, from, t->local), from,
                      (long long)ps->flag);
}

static dmuon_rc pub_wait(mpi_pub *p, int param, int64_t step)
{
    if (param < 0 || param >= p->n)
        return DMUON_FAIL(DMUON_EINVAL, "publish: parameter %d is not in the table of %d", param,
                          p->n);
    if (p->slot_of[param] < 0 || !p->mine[p->slot_of[param]].lead)
        return DMUON_FAIL(DMUON_EINVAL, "publish: this rank does not lead parameter %d", param);
    param_state *ps = &p->mine[p->slot_of[param]];
    dmuon_waiter w;
    dmuon_waiter_start(&w, p->deadline_ms);
    for (;;) {
        if (ps->flag == step)
            return DMUON_OK;
        if (ps->round_done && p->open && step == p->step)
            return stale(p, ps, step);
        DMUON_TRY(pub_progress(p));
        if (ps->flag == step)
            return DMUON_OK;
        if (dmuon_waiter_expired(&w)) {
            p->broken = 1;
            return late(p, ps, step);
        }
        dmuon_waiter_idle(&w);
    }
}

static dmuon_rc pub_end(mpi_pub *p, int64_t step)
{
    if (!p->open || step != p->step)
        return DMUON_FAIL(DMUON_EINVAL, "publish: end of step %lld, but step %lld is open",
                          (long long)step, (long long)p->step);
    for (int i = 0; i < p->nmine; i++)
        if (!p->mine[i].lead && !p->mine[i].round_done) {
            p->broken = 1;
            return DMUON_FAIL(DMUON_EINVAL, "publish: step %lld ended before this rank "
                              "posted its parameter %d", (long long)step, p->mine[i].idx);
        }
    /* every round in (each pass moves the pipeline once), then every send
     * taken: one test of the rail's sends per pass */
    dmuon_waiter w;
    dmuon_waiter_start(&w, p->deadline_ms);
    int next = 0;   /* the first led parameter whose round may still be out */
    for (;;) {
        DMUON_TRY(pub_progress(p));
        while (next < p->nmine && (!p->mine[next].lead || p->mine[next].round_done))
            next++;
        int done = 0;
        if (next == p->nmine &&
            MPI_Testall(p->ntx, p->tx, &done, MPI_STATUSES_IGNORE) != MPI_SUCCESS) {
            p->broken = 1;
            return DMUON_FAIL(DMUON_ECOMM, "publish: MPI_Testall failed");
        }
        if (done)
            break;
        if (dmuon_waiter_expired(&w)) {
            p->broken = 1;
            if (next < p->nmine)
                return late(p, &p->mine[next], step);
            const dmuon_topo *t = p->topo;
            for (int i = 0; i < p->nmine; i++) {
                const param_state *ps = &p->mine[i];
                int all = 1;
                if (ps->nout == 0 ||
                    MPI_Testall(msgs_sent(ps, t->nodes) * ps->nout, ps->sreq, &all,
                                MPI_STATUSES_IGNORE) != MPI_SUCCESS || all)
                    continue;
                if (ps->route != DMUON_PUB_CHAIN)
                    return DMUON_FAIL(DMUON_ETIMEOUT, "publish: parameter %d (rail %d) could "
                                      "not be %s the leaders of the other %d nodes within "
                                      "the %d ms deadline", ps->idx, t->local,
                                      ps->lead ? "relayed to" : "sent to", t->nodes - 1,
                                      p->deadline_ms);
                return DMUON_FAIL(DMUON_ETIMEOUT, "publish: parameter %d (rail %d) could not be "
                                  "forwarded to rank %d (node %d) within the %d ms deadline",
                                  ps->idx, t->local,
                                  dmuon_topo_rank_of(t->per_node, ps->next, t->local), ps->next,
                                  p->deadline_ms);
            }
            return DMUON_FAIL(DMUON_ETIMEOUT, "publish: rank %d: the sends of step %lld on rail "
                              "%d were not taken within the %d ms deadline", t->rank,
                              (long long)step, t->local, p->deadline_ms);
        }
        dmuon_waiter_idle(&w);
    }
    p->open = 0;
    for (int i = 0; i < p->nmine; i++)
        if (p->mine[i].lead && p->mine[i].flag != step)
            return stale(p, &p->mine[i], step);
    return DMUON_OK;
}

/* ------------------------------------------------------- node half ---- *
 * The node load as a state machine (one in flight per publish):
 *   NL_ARRIVE  the listed parameters this rank leads have arrived (their
 *              flags equal the step, tested without blocking);
 *   NL_MEET1   an MPI_Ibarrier on the node communicator: every rank of the
 *              node has its leads' copies complete;
 *   NL_MEET2   the copies are done; a second MPI_Ibarrier: nobody changes
 *              its copy before every rank of the node has read it;
 *   NL_NONE    none in flight (done, or failed).
 * Start copies the list (params and the segments' offsets), so the caller's
 * arrays need not outlive it.  The wait's deadline starts over whenever a
 * stage moves on (an arrival, a meeting), as each stage of the blocking
 * form had its own. */

enum { NL_NONE = 0, NL_ARRIVE, NL_MEET1, NL_MEET2 };

static dmuon_rc nl_ibarrier(mpi_pub *p)
{
    if (MPI_Ibarrier(p->node, &p->nl_req) != MPI_SUCCESS) {
        p->broken = 1;
        p->nl_phase = NL_NONE;
        return DMUON_FAIL(DMUON_ECOMM, "publish node load: MPI_Ibarrier failed");
    }
    return DMUON_OK;
}

static dmuon_rc nl_start(mpi_pub *p, const dmuon_segment *segs, const int *params, int n,
                         int64_t dst_offset, int64_t step)
{
    if (p->nl_phase != NL_NONE)
        return DMUON_FAIL(DMUON_EINVAL, "publish node load: a node load of step %lld is in "
                          "flight: wait for it before starting another", (long long)p->nl_step);
    if (!p->mem->peer)
        return DMUON_FAIL(DMUON_EUNSUPPORTED, "publish node load: the node's memory is not "
                          "mapped here");
    if (n > p->nl_cap) {
        int *ip = realloc(p->nl_params, (size_t)n * sizeof *ip);
        if (ip)
            p->nl_params = ip;
        int64_t *op = ip ? realloc(p->nl_offs, (size_t)n * sizeof *op) : NULL;
        if (op)
            p->nl_offs = op;
        if (!ip || !op)
            return DMUON_FAIL(DMUON_ENOMEM, "publish node load: out of memory for a list of %d "
                              "parameters", n);
        p->nl_cap = n;
    }
    for (int j = 0; j < n; j++) {
        p->nl_params[j] = params[j];
        p->nl_offs[j] = segs[j].offset;
    }
    p->nl_n = n;
    p->nl_next = 0;
    p->nl_dst = dst_offset;
    p->nl_step = step;
    p->nl_phase = NL_ARRIVE;
    return DMUON_OK;
}

/* Moves the node load on as far as it goes without blocking; *moved is set
 * when a stage (or an arrival) advanced.  On error nothing is in flight. */
static dmuon_rc nl_advance(mpi_pub *p, int *moved)
{
    const int K = p->topo->per_node;
    dmuon_rc rc = DMUON_OK;
    if (p->nl_phase == NL_ARRIVE) {
        if (p->open) {
            rc = pub_progress(p);
            if (rc != DMUON_OK)
                goto fail;
        }
        for (; p->nl_next < p->nl_n; p->nl_next++) {
            const int idx = p->nl_params[p->nl_next];
            if (p->slot_of[idx] < 0 || !p->mine[p->slot_of[idx]].lead)
                continue;
            const param_state *ps = &p->mine[p->slot_of[idx]];
            if (ps->flag == p->nl_step)
                continue;
            if (ps->round_done && p->open && p->nl_step == p->step) {
                rc = stale(p, ps, p->nl_step);
                goto fail;
            }
            return DMUON_OK;
        }
        *moved = 1;
        rc = nl_ibarrier(p);
        if (rc != DMUON_OK)
            return rc;
        p->nl_phase = NL_MEET1;
    }
    while (p->nl_phase == NL_MEET1 || p->nl_phase == NL_MEET2) {
        int done = 0;
        if (MPI_Test(&p->nl_req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
            p->broken = 1;
            rc = DMUON_FAIL(DMUON_ECOMM, "publish node load: MPI_Test failed");
            goto fail;
        }
        if (!done) {
            if (p->open) {
                rc = pub_progress(p);   /* no peer waits on this rank's forwarding */
                if (rc != DMUON_OK)
                    goto fail;
            }
            return DMUON_OK;
        }
        *moved = 1;
        if (p->nl_phase == NL_MEET2) {
            p->nl_phase = NL_NONE;
            return DMUON_OK;
        }
        for (int j = 0; j < p->nl_n; j++) {
            const dmuon_segment *q = &p->params[p->nl_params[j]];
            const unsigned char *src = p->mem->peer[q->owner % K] + p->copy_offset + q->offset;
            memcpy(p->mem->base + p->nl_dst + p->nl_offs[j], src, (size_t)param_bytes(q));
        }
        rc = nl_ibarrier(p);
        if (rc != DMUON_OK)
            return rc;
        p->nl_phase = NL_MEET2;
    }
    return DMUON_OK;
fail:
    p->nl_phase = NL_NONE;
    return rc;
}

static dmuon_rc nl_none(void)
{
    return DMUON_FAIL(DMUON_EINVAL, "publish node load: none started");
}

static dmuon_rc nl_test(mpi_pub *p, int *done)
{
    *done = 0;
    if (p->nl_phase == NL_NONE)
        return nl_none();
    int moved = 0;
    DMUON_TRY(nl_advance(p, &moved));
    *done = p->nl_phase == NL_NONE;
    return DMUON_OK;
}

static dmuon_rc nl_wait(mpi_pub *p)
{
    if (p->nl_phase == NL_NONE)
        return nl_none();
    dmuon_waiter w;
    dmuon_waiter_start(&w, p->deadline_ms);
    for (;;) {
        int moved = 0;
        DMUON_TRY(nl_advance(p, &moved));
        if (p->nl_phase == NL_NONE)
            return DMUON_OK;
        if (moved) {
            dmuon_waiter_start(&w, p->deadline_ms);
            continue;
        }
        if (dmuon_waiter_expired(&w)) {
            p->broken = 1;
            const int phase = p->nl_phase;
            p->nl_phase = NL_NONE;   /* the barrier request is abandoned, never freed */
            if (phase == NL_ARRIVE)
                return late(p, &p->mine[p->slot_of[p->nl_params[p->nl_next]]], p->nl_step);
            return DMUON_FAIL(DMUON_ETIMEOUT, "publish node load: rank %d: the ranks of node %d "
                              "did not all arrive within the %d ms deadline", p->topo->rank,
                              p->topo->node_id, p->deadline_ms);
        }
        dmuon_waiter_idle(&w);
    }
}

static dmuon_rc pub_node_load(mpi_pub *p, const dmuon_segment *segs, const int *params, int n,
                              int64_t dst_offset, int64_t step)
{
    DMUON_TRY(nl_start(p, segs, params, n, dst_offset, step));
    return nl_wait(p);
}

/* ------------------------------------------------- backend entries ---- */

static void mpi_publish_free(dmuon_publish *pub)
{
    if (pub->impl)
        pub_free(pub->impl);
    pub->impl = NULL;
}

static dmuon_rc mpi_publish_begin(dmuon_publish *pub, int64_t step)
{
    return pub_begin(pub->impl, step);
}

static dmuon_rc mpi_publish_post(dmuon_publish *pub, int param, int64_t step)
{
    return pub_post(pub->impl, param, step);
}

static dmuon_rc mpi_publish_progress(dmuon_publish *pub)
{
    return pub_progress(pub->impl);
}

static dmuon_rc mpi_publish_wait(dmuon_publish *pub, int param, int64_t step)
{
    return pub_wait(pub->impl, param, step);
}

static dmuon_rc mpi_publish_end(dmuon_publish *pub, int64_t step)
{
    return pub_end(pub->impl, step);
}

static int64_t mpi_publish_flag(const dmuon_publish *pub, int param)
{
    return pub_flag(pub->impl, param);
}

static dmuon_rc mpi_publish_node_load(dmuon_publish *pub, const dmuon_segment *segs,
                                      const int *params, int n, int64_t dst_offset, int64_t step)
{
    return pub_node_load(pub->impl, segs, params, n, dst_offset, step);
}

static dmuon_rc mpi_publish_node_load_start(dmuon_publish *pub, const dmuon_segment *segs,
                                            const int *params, int n, int64_t dst_offset,
                                            int64_t step)
{
    return nl_start(pub->impl, segs, params, n, dst_offset, step);
}

static dmuon_rc mpi_publish_node_load_test(dmuon_publish *pub, int *done)
{
    return nl_test(pub->impl, done);
}

static dmuon_rc mpi_publish_node_load_wait(dmuon_publish *pub)
{
    return nl_wait(pub->impl);
}

const dmuon_publish_ops dmuon_mpi_publish_scheduled_ops = {
    .create = mpi_publish_create,
    .free = mpi_publish_free,
    .begin = mpi_publish_begin,
    .post = mpi_publish_post,
    .progress = mpi_publish_progress,
    .wait = mpi_publish_wait,
    .end = mpi_publish_end,
    .flag = mpi_publish_flag,
    .node_load = mpi_publish_node_load,
    .node_load_start = mpi_publish_node_load_start,
    .node_load_test = mpi_publish_node_load_test,
    .node_load_wait = mpi_publish_node_load_wait,
};

/* ----------------------------- the per-owner and coalesced publishes --
 * Nothing streams while the caller computes: begin and post only keep the
 * step; end posts the calls on a duplicate of this rank's rail, from and
 * into the copy, and completes them within the deadline.
 *
 *   per-owner  one MPI_Ibcast per parameter of this rank's rail, rooted at
 *              the owner's node, in table order;
 *   coalesced  one MPI_Iallgatherv (bytes, MPI_IN_PLACE) per run of this
 *              rank's rail: a run is a longest stretch of the rail's
 *              parameters, in table order, whose owner nodes do not
 *              decrease and whose copy offsets increase (each starts at or
 *              after the end of the one before).  Node q's block of a run
 *              is [its first parameter's offset, its last one's end) of
 *              the copy, so the blocks are disjoint and in node order; the
 *              padding between one node's parameters travels with them.
 *              A table laid out by dmuon_publish_layout with its parameters
 *              ordered by owner node is one run, one call per rail.
 *
 * Counts, displacements and requests are made at create (nothing is
 * allocated per step); a parameter of this rank's rail has flag = the step
 * of the last end that delivered it. */

typedef struct {
    MPI_Comm rail;           /* duplicate of t->rail */
    int ncalls;              /* calls end posts on this rail */
    MPI_Request *req;        /* ncalls */
    int64_t *flag;           /* per parameter: the step of its last delivery */
    /* coalesced: per run r, its base offset in the copy and, per node q,
     * counts[r * R + q] / displs[r * R + q] bytes from that base */
    int64_t *base;
    int *counts, *displs;
    int64_t step;
    int open, broken;
} end_pub;

static void end_free(dmuon_publish *pub)
{
    end_pub *q = pub->impl;
    if (q) {
        if (q->rail != MPI_COMM_NULL)
            MPI_Comm_free(&q->rail);
        free(q->req);
        free(q->flag);
        free(q->base);
        free(q->counts);
        free(q);
    }
    pub->impl = NULL;
}

/* The runs of this rank's rail (see above): counts calls into *nruns, and
 * with base non-NULL fills base, counts and displs.  Returns 3 when a run
 * is larger than MPI's counts (2^31 - 1 bytes), else 0. */
static int coalesced_runs(const dmuon_publish *pub, int *nruns, int64_t *base, int *counts,
                          int *displs)
{
    const dmuon_topo *t = pub->topo;
    const int K = t->per_node, R = t->nodes;
    int r = -1, last_node = 0;
    int64_t end = 0;
    for (int i = 0; i < pub->n; i++) {
        const dmuon_segment *s = &pub->params[i];
        if (s->owner % K != t->local)
            continue;
        const int node = s->owner / K;
        if (r < 0 || node < last_node || s->offset < end) {   /* a new run */
            r++;
            if (base) {
                base[r] = s->offset;
                memset(counts + (size_t)r * R, 0, (size_t)R * sizeof *counts);
                memset(displs + (size_t)r * R, 0, (size_t)R * sizeof *displs);
            }
        }
        if (base) {
            const int64_t lo = s->offset - base[r], hi = lo + param_bytes(s);
            if (hi > INT_MAX)
                return 3;
            int *c = counts + (size_t)r * R + node, *d = displs + (size_t)r * R + node;
            if (!*c)
                *d = (int)lo;
            *c = (int)(hi - *d);
        }
        last_node = node;
        end = s->offset + param_bytes(s);
    }
    *nruns = r + 1;
    return 0;
}

static dmuon_rc end_create(dmuon_publish *pub)
{
    const dmuon_topo *t = pub->topo;
    const int co = pub->algorithm == DMUON_ALGO_COALESCED;
    end_pub *q = calloc(1, sizeof *q);
    int fail = !q;
    if (q) {
        q->rail = MPI_COMM_NULL;
        if (co)
            coalesced_runs(pub, &q->ncalls, NULL, NULL, NULL);
        else
            q->ncalls = pub->n;
        const size_t nc = q->ncalls > 0 ? (size_t)q->ncalls : 1;
        q->req = malloc(nc * sizeof *q->req);
        q->flag = calloc((size_t)(pub->n > 0 ? pub->n : 1), sizeof *q->flag);
        fail = !q->req || !q->flag;
        if (co && !fail) {
            q->base = malloc(nc * sizeof *q->base);
            q->counts = malloc(2 * nc * (size_t)t->nodes * sizeof *q->counts);   /* + displs */
            fail = !q->base || !q->counts;
            if (!fail) {
                q->displs = q->counts + nc * (size_t)t->nodes;
                fail = coalesced_runs(pub, &q->ncalls, q->base, q->counts, q->displs);
            }
        }
    }
    for (int i = 0; !fail && !co && i < pub->n; i++)
        if (param_bytes(&pub->params[i]) > INT_MAX)
            fail = 3;
    if (!fail)
        fail = MPI_Comm_dup(t->rail, &q->rail) != MPI_SUCCESS ? 2 : 0;
    MPI_Allreduce(MPI_IN_PLACE, &fail, 1, MPI_INT, MPI_MAX, t->world);
    pub->impl = q;
    if (fail) {
        const char *an = dmuon_algo_name(pub->algorithm);
        end_free(pub);
        return fail == 3 ? DMUON_FAIL(DMUON_EINVAL, "publish (%s): %s of more than 2^31 - 1 "
                                      "bytes does not fit one MPI call", an,
                                      co ? "a run of parameters" : "a parameter")
             : fail == 2 ? DMUON_FAIL(DMUON_ECOMM, "publish (%s): MPI_Comm_dup of the rail "
                                      "failed", an)
                         : DMUON_FAIL(DMUON_ENOMEM, "out of memory creating a publish");
    }
    for (int i = 0; i < q->ncalls; i++)
        q->req[i] = MPI_REQUEST_NULL;
    return DMUON_OK;
}

static dmuon_rc end_begin(dmuon_publish *pub, int64_t step)
{
    end_pub *q = pub->impl;
    if (q->broken)
        return DMUON_FAIL(DMUON_ECOMM, "publish: failed in an earlier step");
    return dmuon_pub_step_begin(&q->step, &q->open, step);
}

static dmuon_rc end_post(dmuon_publish *pub, int param, int64_t step)
{
    const end_pub *q = pub->impl;
    return dmuon_pub_step_post(pub, q->step, q->open, param, step);
}

static dmuon_rc end_progress(dmuon_publish *pub) { return DMUON_OK; }

/* Posts this step's calls of the algorithm; returns how many in *k. */
static dmuon_rc end_calls(dmuon_publish *pub, end_pub *q, int *k)
{
    const dmuon_topo *t = pub->topo;
    const int K = t->per_node;
    *k = 0;
    if (t->nodes < 2)
        return DMUON_OK;
    if (pub->algorithm == DMUON_ALGO_COALESCED) {
        for (int r = 0; r < q->ncalls; r++, (*k)++)
            if (MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_BYTE, pub->copy + q->base[r],
                                q->counts + (size_t)r * t->nodes,
                                q->displs + (size_t)r * t->nodes, MPI_BYTE, q->rail,
                                &q->req[r]) != MPI_SUCCESS)
                return DMUON_FAIL(DMUON_ECOMM, "publish (coalesced): MPI_Iallgatherv of run %d "
                                  "failed", r);
        return DMUON_OK;
    }
    for (int i = 0; i < pub->n; i++) {
        const dmuon_segment *s = &pub->params[i];
        if (s->owner % K != t->local)
            continue;
        if (MPI_Ibcast(pub->copy + s->offset, (int)param_bytes(s), MPI_BYTE, s->owner / K,
                       q->rail, &q->req[(*k)++]) != MPI_SUCCESS)
            return DMUON_FAIL(DMUON_ECOMM, "publish (per-owner): MPI_Ibcast of parameter %d "
                              "failed", i);
    }
    return DMUON_OK;
}

static dmuon_rc end_end(dmuon_publish *pub, int64_t step)
{
    end_pub *q = pub->impl;
    const dmuon_topo *t = pub->topo;
    const int K = t->per_node;
    const char *an = dmuon_algo_name(pub->algorithm);
    DMUON_TRY(dmuon_pub_step_end(q->step, &q->open, step));
    int k = 0;
    dmuon_rc rc = end_calls(pub, q, &k);
    if (rc != DMUON_OK) {
        q->broken = 1;   /* some calls may be posted: the publish cannot be reused */
        return dmuon_err_trace_add(rc, __FILE__, __LINE__);
    }
    dmuon_waiter w;
    dmuon_waiter_start(&w, pub->deadline_ms);
    for (;;) {
        int done = 0;
        if (MPI_Testall(k, q->req, &done, MPI_STATUSES_IGNORE) != MPI_SUCCESS) {
            q->broken = 1;
            return DMUON_FAIL(DMUON_ECOMM, "publish (%s): MPI_Testall failed", an);
        }
        if (done)
            break;
        if (dmuon_waiter_expired(&w)) {
            q->broken = 1;
            return DMUON_FAIL(DMUON_ETIMEOUT, "publish (%s): rank %d: the calls of step %lld "
                              "on rail %d were not complete within the %d ms deadline", an,
                              t->rank, (long long)step, t->local, pub->deadline_ms);
        }
        dmuon_waiter_idle(&w);
    }
    for (int i = 0; i < pub->n; i++)
        if (pub->params[i].owner % K == t->local)
            q->flag[i] = step;
    return DMUON_OK;
}

static int64_t end_flag(const dmuon_publish *pub, int param)
{
    const end_pub *q = pub->impl;
    return param >= 0 && param < pub->n ? q->flag[param] : 0;
}

/* wait and node_load are not offered: nothing is known to have arrived
 * before end.  One table serves both algorithms (pub->algorithm). */
const dmuon_publish_ops dmuon_mpi_publish_end_ops = {
    .create = end_create,
    .free = end_free,
    .begin = end_begin,
    .post = end_post,
    .progress = end_progress,
    .end = end_end,
    .flag = end_flag,
};
