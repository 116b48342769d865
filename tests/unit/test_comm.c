/*
 * test_comm.c — the communication layer over caller memory: symmetric memory
 * (dmuon/symm.h), groups whose calls name their ranges (dmuon/collv.h) and
 * the publish over a copy range (dmuon/publish.h), the split-phase
 * operators (start, local work, test, wait; a call in flight moved by
 * another group's blocking call), and the control plane (dmuon/ctl.h:
 * agreement with the failing rank's message, small reductions, a short
 * broadcast).
 *
 * Runs on any number of ranks: alone from the unit runner (one rank, one
 * node) and under mpirun from tests/mpi/54-comm.sh (4 and 8 ranks as virtual
 * nodes of 2 or 4).  Every check is agreed over all ranks (a check passes
 * when it passed everywhere), so a failure on one rank never leaves the
 * others waiting in a collective; rank 0 prints "N passed, N failed".
 *
 * Expected values are computed independently of the operators: gathered
 * bytes from a hash of (segment, byte), sums of small integers exactly.
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dmuon/bf16.h"
#include "dmuon/collv.h"
#include "dmuon/ctl.h"
#include "dmuon/segshape.h"
#include "dmuon/publish.h"
#include "dmuon/symm.h"
#include "dmuon/topo.h"

static int passed, failed, world_rank;

static void check(int ok, const char *what)
{
    int all = ok ? 1 : 0;
    MPI_Allreduce(MPI_IN_PLACE, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (!ok)
        fprintf(stderr, "rank %d: check failed: %s (%s)\n", world_rank, what, dmuon_errmsg());
    if (all)
        passed++;
    else
        failed++;
    if (world_rank == 0)
        printf("%s %s\n", all ? "ok  " : "FAIL", what);
}

static unsigned char pattern(int salt, int seg, int64_t k)
{
    uint64_t x = (uint64_t)salt * 0x9e3779b97f4a7c15u ^ ((uint64_t)seg << 32) ^ (uint64_t)k;
    x ^= x >> 31;
    x *= 0xbf58476d1ce4e5b9u;
    x ^= x >> 29;
    return (unsigned char)(x >> 40);
}

static int64_t seg_bytes(const dmuon_segment *s)
{
    return s->count * (int64_t)dmuon_dtype_size(s->dtype);
}

/* Input of rank r at element k of segment i: an integer in [-3, 3], so sums
 * over ≤ 64 ranks are exact in BF16 and F32 in any order. */
static float rsv_in(int r, int i, int64_t k)
{
    return (float)((int)(((uint64_t)r * 5 + (uint64_t)i * 3 + (uint64_t)k) % 7) - 3);
}

static void store(dmuon_dtype dt, unsigned char *p, int64_t k, float v)
{
    if (dt == DMUON_BF16) {
        uint16_t h = dmuon_f32_to_bf16(v);
        memcpy(p + 2 * k, &h, 2);
    } else {
        memcpy(p + 4 * k, &v, 4);
    }
}

static float load(dmuon_dtype dt, const unsigned char *p, int64_t k)
{
    if (dt == DMUON_BF16) {
        uint16_t h;
        memcpy(&h, p + 2 * k, 2);
        return dmuon_bf16_to_f32(h);
    }
    float f;
    memcpy(&f, p + 4 * k, 4);
    return f;
}

/* ------------------------------------------------------------- symm ---- */

static void test_symm(const dmuon_topo *t)
{
    dmuon_symm *s = NULL;
    dmuon_rc rc = dmuon_symm_alloc(t, 10000, 0, &s);
    check(rc == DMUON_OK && s, "symm: 10000 bytes allocated on every rank");
    if (rc != DMUON_OK)
        return;
    unsigned char *b = dmuon_symm_base(s);
    check(((uintptr_t)b % DMUON_SYMM_ALIGN) == 0, "symm: base 4 KiB aligned");
    check(dmuon_symm_bytes(s) == 10000, "symm: bytes as requested");
    check(dmuon_symm_backend(s) == DMUON_BACKEND_MPI, "symm: mpi backend");
    int zero = 1;
    for (int i = 0; i < 10000; i++)
        zero &= b[i] == 0;
    check(zero, "symm: zeroed");
    check(dmuon_symm_peer(s, t->local) == b, "symm: own peer entry is the base");
    check(dmuon_symm_peer(s, t->per_node) == NULL && dmuon_symm_peer(s, -1) == NULL,
          "symm: peer index out of range gives NULL");
    int32_t me = t->rank;
    memcpy(b + 9996, &me, 4);
    MPI_Barrier(t->world);
    int peers_ok = 1;
    for (int j = 0; j < t->per_node; j++) {
        const unsigned char *p = dmuon_symm_peer(s, j);
        int32_t v = -1;
        memcpy(&v, p + 9996, 4);
        peers_ok &= ((uintptr_t)p % DMUON_SYMM_ALIGN) == 0 &&
                    v == dmuon_topo_rank_of(t->per_node, t->node_id, j);
    }
    check(peers_ok, "symm: each node peer's part holds what that peer stored");
    MPI_Barrier(t->world);
    dmuon_symm_free(s);
    dmuon_symm_free(NULL);

    s = NULL;
    rc = dmuon_symm_alloc(t, 0, 0, &s);
    check(rc == DMUON_EINVAL && !s, "symm: 0 bytes is DMUON_EINVAL on every rank");
    if (t->size > 1) {
        rc = dmuon_symm_alloc(t, 4096 + (t->rank == t->size - 1), 0, &s);
        check(rc == DMUON_EMISMATCH && !s, "symm: different sizes are DMUON_EMISMATCH on every "
              "rank");
    }
    dmuon_topo other = *t;
    other.backend = DMUON_BACKEND_NCCL;
    rc = dmuon_symm_alloc(&other, 4096, 0, &s);
    check(rc == DMUON_EUNSUPPORTED && !s, "symm: nccl backend is DMUON_EUNSUPPORTED here");
}

/* ----------------------------------------------------------- groups ---- */

typedef struct {
    dmuon_segment *segs;
    int n;
    int64_t B, W;     /* layer buffer and window bytes */
} table;

static int make_table(const dmuon_topo *t, dmuon_segshape l, int64_t bytes, dmuon_dtype dt,
                      table *tb)
{
    if (dmuon_segshape_make(l, bytes, dt, t->nodes, t->per_node, &tb->segs, &tb->n) != DMUON_OK)
        return 0;
    return dmuon_table_check(tb->segs, tb->n, t->size, &tb->B, &tb->W) == DMUON_OK;
}

/* Owners write pattern(salt) into their windows at win; every rank's buffer
 * at buf is filled with 0xee; then one AllGatherV; returns wrong bytes. */
static int64_t gather_once(const dmuon_topo *t, dmuon_group *g, const table *tb,
                           unsigned char *base, int64_t buf, int64_t win, int salt,
                           dmuon_rc *rc)
{
    memset(base + buf, 0xee, (size_t)tb->B);
    for (int i = 0; i < tb->n; i++)
        if (tb->segs[i].owner == t->rank)
            for (int64_t k = 0; k < seg_bytes(&tb->segs[i]); k++)
                base[win + tb->segs[i].window_offset + k] = pattern(salt, i, k);
    *rc = dmuon_allgatherv(g, buf, win);
    int64_t bad = 0;
    for (int i = 0; i < tb->n; i++)
        for (int64_t k = 0; k < seg_bytes(&tb->segs[i]); k++)
            bad += base[buf + tb->segs[i].offset + k] != pattern(salt, i, k);
    return bad;
}

static void test_groups(const dmuon_topo *t)
{
    table a = {0}, b = {0};
    int ok = make_table(t, DMUON_SEGSHAPE_NODE, 300000, DMUON_BF16, &a) &&
             make_table(t, DMUON_SEGSHAPE_RANK, 100000, DMUON_F32, &b);
    check(ok, "groups: two tables made");
    if (!ok)
        goto out;
    dmuon_group_opts o = {.chunk_bytes = 4096, .slots = 2};
    int64_t ca = 0, cb = 0;
    ok = dmuon_group_ctrl_bytes(t, a.segs, a.n, &o, &ca) == DMUON_OK &&
         dmuon_group_ctrl_bytes(t, b.segs, b.n, &o, &cb) == DMUON_OK;
    check(ok && ca >= 384 && ca % DMUON_GROUP_CTRL_ALIGN == 0 && cb % DMUON_GROUP_CTRL_ALIGN == 0,
          "groups: control bytes are at least the control words and 64-byte multiples");
    int64_t lo = ca, hi = ca;
    MPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_INT64_T, MPI_MIN, t->world);
    MPI_Allreduce(MPI_IN_PLACE, &hi, 1, MPI_INT64_T, MPI_MAX, t->world);
    check(lo == hi, "groups: control bytes agree on every rank");

    /* Layout: [ctrl a][ctrl b][buffer X1][buffer X2][window] */
    int64_t big = a.B > b.B ? a.B : b.B, wbig = a.W > b.W ? a.W : b.W;
    int64_t off_cb = ca, x1 = ca + cb + 64, x2 = x1 + big + 8, win = x2 + big + 64;
    int64_t total = win + wbig;
    dmuon_symm *mem = NULL;
    dmuon_group *ga = NULL, *gb = NULL;
    ok = dmuon_symm_alloc(t, total, 0, &mem) == DMUON_OK;
    check(ok, "groups: memory for both groups allocated");
    if (!ok)
        goto out;
    unsigned char *base = dmuon_symm_base(mem);
    dmuon_rc rc = dmuon_group_create(t, a.segs, a.n, &o, mem, 0, &ga);
    dmuon_rc rc2 = dmuon_group_create(t, b.segs, b.n, &o, mem, off_cb, &gb);
    check(rc == DMUON_OK && rc2 == DMUON_OK, "groups: two groups over one memory");
    if (rc != DMUON_OK || rc2 != DMUON_OK)
        goto free_mem;
    check(dmuon_group_buffer_bytes(ga) == a.B && dmuon_group_window_bytes(ga) == a.W,
          "groups: buffer and window bytes from the table");

    int64_t bad = gather_once(t, ga, &a, base, x1, win, 1, &rc);
    check(rc == DMUON_OK && bad == 0, "agv: group a at buffer X1 is bit-exact");
    bad = gather_once(t, ga, &a, base, x2, win, 2, &rc);
    check(rc == DMUON_OK && bad == 0, "agv: group a at buffer X2 (another offset) is bit-exact");
    int64_t kept = 0;
    for (int i = 0; i < a.n; i++)
        for (int64_t k = 0; k < seg_bytes(&a.segs[i]); k++)
            kept += base[x1 + a.segs[i].offset + k] != pattern(1, i, k);
    check(kept == 0, "agv: the call at X2 left X1 untouched");
    bad = gather_once(t, gb, &b, base, x1, win, 3, &rc);
    check(rc == DMUON_OK && bad == 0, "agv: group b reuses buffer X1 right after group a");
    bad = gather_once(t, ga, &a, base, x1, win, 4, &rc);
    check(rc == DMUON_OK && bad == 0, "agv: group a again at X1 after group b");

    /* ReduceScatterV of group a at X2, exact integer sums. */
    for (int i = 0; i < a.n; i++)
        for (int64_t k = 0; k < a.segs[i].count; k++)
            store(a.segs[i].dtype, base + x2 + a.segs[i].offset, k, rsv_in(t->rank, i, k));
    memset(base + win, 0xcd, (size_t)a.W);
    rc = dmuon_reduce_scatterv(ga, x2, win);
    bad = 0;
    for (int i = 0; i < a.n; i++) {
        if (a.segs[i].owner != t->rank)
            continue;
        for (int64_t k = 0; k < a.segs[i].count; k++) {
            float want = 0;
            for (int r = 0; r < t->size; r++)
                want += rsv_in(r, i, k);
            bad += load(a.segs[i].dtype, base + win + a.segs[i].window_offset, k) != want;
        }
    }
    check(rc == DMUON_OK && bad == 0, "rsv: group a at X2 gives the exact sums");
    /* group b (f32) reduces from X1 into the same window */
    for (int i = 0; i < b.n; i++)
        for (int64_t k = 0; k < b.segs[i].count; k++)
            store(DMUON_F32, base + x1 + b.segs[i].offset, k, rsv_in(t->rank, i, k));
    rc = dmuon_reduce_scatterv(gb, x1, win);
    bad = 0;
    for (int i = 0; i < b.n; i++) {
        if (b.segs[i].owner != t->rank)
            continue;
        for (int64_t k = 0; k < b.segs[i].count; k++) {
            float want = 0;
            for (int r = 0; r < t->size; r++)
                want += rsv_in(r, i, k);
            bad += load(DMUON_F32, base + win + b.segs[i].window_offset, k) != want;
        }
    }
    check(rc == DMUON_OK && bad == 0, "rsv: group b at X1 gives the exact sums");

    /* Bad ranges: refused before any communication, the group stays usable. */
    check(dmuon_allgatherv(ga, x1 + 2, win) == DMUON_EINVAL, "agv: misaligned buffer offset");
    check(dmuon_allgatherv(ga, total - a.B + 8, win) == DMUON_EINVAL,
          "agv: buffer past the end of the memory");
    check(dmuon_allgatherv(ga, -8, win) == DMUON_EINVAL, "agv: negative buffer offset");
    check(dmuon_reduce_scatterv(ga, 0, win) == DMUON_EINVAL,
          "rsv: buffer over the group's control area");
    check(dmuon_allgatherv(ga, x1, x1) == DMUON_EINVAL, "agv: buffer and window overlap");
    bad = gather_once(t, ga, &a, base, x2, win, 5, &rc);
    check(rc == DMUON_OK && bad == 0, "agv: the group works after refused calls");

    /* Bad control areas at create: every rank fails alike. */
    dmuon_group *gx = NULL;
    check(dmuon_group_create(t, a.segs, a.n, &o, mem, 32, &gx) == DMUON_EINVAL && !gx,
          "create: control offset not a multiple of 64");
    check(dmuon_group_create(t, a.segs, a.n, &o, mem, total - 64, &gx) == DMUON_EINVAL && !gx,
          "create: control area past the end of the memory");
    check(dmuon_group_create(t, a.segs, a.n, &o, NULL, 0, &gx) == DMUON_EINVAL && !gx,
          "create: no memory");
    if (t->size > 1) {
        dmuon_segment saved = a.segs[0];
        if (t->rank == t->size - 1)
            a.segs[0].count++;
        rc = dmuon_group_create(t, a.segs, a.n, &o, mem, win, &gx);
        a.segs[0] = saved;
        check(rc == DMUON_EMISMATCH && !gx && strstr(dmuon_errmsg(), "segment 0"),
              "create: a rank with another table fails every rank, naming segment 0");
    }

free_mem:
    dmuon_group_free(ga);
    dmuon_group_free(gb);
    dmuon_symm_free(mem);
out:
    free(a.segs);
    free(b.segs);
}

/* ------------------------------------------------------ split phase ---- */

/* Local work between start and wait: about ms milliseconds of arithmetic
 * (no communication, so nothing progresses meanwhile). */
static double busy(int ms)
{
    double t0 = MPI_Wtime(), x = 1.0;
    while (MPI_Wtime() - t0 < ms / 1000.0)
        for (int i = 0; i < 1000; i++)
            x = x * 1.0000001 + 1e-9;
    return x;
}

static int64_t check_gather(const table *tb, const unsigned char *base, int64_t buf, int salt)
{
    int64_t bad = 0;
    for (int i = 0; i < tb->n; i++)
        for (int64_t k = 0; k < seg_bytes(&tb->segs[i]); k++)
            bad += base[buf + tb->segs[i].offset + k] != pattern(salt, i, k);
    return bad;
}

static void fill_windows(const dmuon_topo *t, const table *tb, unsigned char *base, int64_t win,
                         int salt)
{
    for (int i = 0; i < tb->n; i++)
        if (tb->segs[i].owner == t->rank)
            for (int64_t k = 0; k < seg_bytes(&tb->segs[i]); k++)
                base[win + tb->segs[i].window_offset + k] = pattern(salt, i, k);
}

static void fill_grads(const dmuon_topo *t, const table *tb, unsigned char *base, int64_t buf)
{
    for (int i = 0; i < tb->n; i++)
        for (int64_t k = 0; k < tb->segs[i].count; k++)
            store(tb->segs[i].dtype, base + buf + tb->segs[i].offset, k, rsv_in(t->rank, i, k));
}

static int64_t check_sums(const dmuon_topo *t, const table *tb, const unsigned char *base,
                          int64_t win)
{
    int64_t bad = 0;
    for (int i = 0; i < tb->n; i++) {
        if (tb->segs[i].owner != t->rank)
            continue;
        for (int64_t k = 0; k < tb->segs[i].count; k++) {
            float want = 0;
            for (int r = 0; r < t->size; r++)
                want += rsv_in(r, i, k);
            bad += load(tb->segs[i].dtype, base + win + tb->segs[i].window_offset, k) != want;
        }
    }
    return bad;
}

/* The create-time exchanges take the caller's deadline: given one, a bad
 * $DMUON_DEADLINE_MS is never read (memory, table agreement, group
 * creation, the group's call); with 0 the variable is the error, on every
 * rank and before anything is posted. */
static void test_create_deadline(const dmuon_topo *t)
{
    const char *was = getenv("DMUON_DEADLINE_MS");
    char *keep = was ? strdup(was) : NULL;
    setenv("DMUON_DEADLINE_MS", "xyz", 1);
    table a = {0};
    int ok = make_table(t, DMUON_SEGSHAPE_RANK, 65536, DMUON_F32, &a);
    check(ok, "create deadline: a table made");
    dmuon_group_opts o = {.deadline_ms = 5000};
    dmuon_group_span sp;
    dmuon_symm *mem = NULL;
    dmuon_group *g = NULL;
    dmuon_rc rc = ok ? dmuon_group_span_of(t, a.segs, a.n, &o, &sp) : DMUON_EINVAL;
    if (rc == DMUON_OK)
        rc = dmuon_table_agree_topo(t, a.segs, a.n, 5000);
    check(rc == DMUON_OK, "create deadline: table agreement with a deadline given");
    if (rc == DMUON_OK)
        rc = dmuon_symm_alloc(t, sp.bytes, 5000, &mem);
    check(rc == DMUON_OK && mem, "create deadline: memory with a deadline given");
    if (rc == DMUON_OK)
        rc = dmuon_group_create(t, a.segs, a.n, &o, mem, sp.ctrl_offset, &g);
    check(rc == DMUON_OK && g, "create deadline: group with opts.deadline_ms given");
    if (rc == DMUON_OK)
        rc = dmuon_allgatherv(g, sp.buffer_offset, sp.window_offset);
    check(rc == DMUON_OK, "create deadline: the group's call runs");
    dmuon_group_free(g);
    dmuon_symm_free(mem);
    dmuon_symm *s = NULL;
    rc = dmuon_symm_alloc(t, 4096, 0, &s);
    int lo = rc, hi = rc;
    MPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_INT, MPI_MIN, t->world);
    MPI_Allreduce(MPI_IN_PLACE, &hi, 1, MPI_INT, MPI_MAX, t->world);
    check(rc == DMUON_EINVAL && lo == hi && !s && strstr(dmuon_errmsg(), "DMUON_DEADLINE_MS 'xyz'"),
          "create deadline: with 0 the bad variable is DMUON_EINVAL on every rank");
    rc = dmuon_symm_alloc(t, 4096, -1, &s);
    check(rc == DMUON_EINVAL && !s, "create deadline: a negative deadline is DMUON_EINVAL");
    if (keep)
        setenv("DMUON_DEADLINE_MS", keep, 1);
    else
        unsetenv("DMUON_DEADLINE_MS");
    free(keep);
    free(a.segs);
}


static void test_split(const dmuon_topo *t)
{
    table a = {0}, b = {0};
    int ok = make_table(t, DMUON_SEGSHAPE_NODE, 400000, DMUON_BF16, &a) &&
             make_table(t, DMUON_SEGSHAPE_SPARSE, 150000, DMUON_F32, &b);
    check(ok, "split: two tables made");
    if (!ok)
        goto out;
    dmuon_group_opts o = {.chunk_bytes = 8192, .slots = 2, .deadline_ms = 20000};
    int64_t ca = 0, cb = 0;
    dmuon_group_ctrl_bytes(t, a.segs, a.n, &o, &ca);
    dmuon_group_ctrl_bytes(t, b.segs, b.n, &o, &cb);
    /* [ctrl a][ctrl b][buffer a][window a][buffer b][window b] */
#define UP64(x) (((x) + 63) / 64 * 64)
    int64_t xa = ca + cb, wa = UP64(xa + a.B), xb = UP64(wa + a.W), wb = UP64(xb + b.B);
    int64_t total = wb + b.W;
    dmuon_symm *mem = NULL;
    dmuon_group *ga = NULL, *gb = NULL;
    ok = dmuon_symm_alloc(t, total, 0, &mem) == DMUON_OK;
    check(ok, "split: memory allocated");
    if (!ok)
        goto out;
    unsigned char *base = dmuon_symm_base(mem);
    ok = dmuon_group_create(t, a.segs, a.n, &o, mem, 0, &ga) == DMUON_OK &&
         dmuon_group_create(t, b.segs, b.n, &o, mem, ca, &gb) == DMUON_OK;
    check(ok, "split: two groups created");
    if (!ok)
        goto free_mem;

    /* start, local work of rank-dependent length with a few tests, wait */
    memset(base + xa, 0xee, (size_t)a.B);
    fill_windows(t, &a, base, wa, 21);
    dmuon_rc rc = dmuon_allgatherv_start(ga, xa, wa);
    int done = 0, tests = 0;
    busy(5 * (t->rank % 3));
    dmuon_rc rt = DMUON_OK;
    for (int i = 0; i < 3 && rt == DMUON_OK && !done; i++) {
        rt = dmuon_allgatherv_test(ga, &done);
        tests++;
        busy(2);
    }
    dmuon_rc rw = done ? DMUON_OK : dmuon_allgatherv_wait(ga);
    check(rc == DMUON_OK && rt == DMUON_OK && rw == DMUON_OK,
          "split agv: start, local work, test, wait succeed");
    check(check_gather(&a, base, xa, 21) == 0, "split agv: bit-exact after wait");

    /* test until done, with no wait at all */
    memset(base + xa, 0xee, (size_t)a.B);
    fill_windows(t, &a, base, wa, 22);
    rc = dmuon_allgatherv_start(ga, xa, wa);
    done = 0;
    double t0 = MPI_Wtime();
    while (rc == DMUON_OK && !done && MPI_Wtime() - t0 < 20)
        rc = dmuon_allgatherv_test(ga, &done);
    check(rc == DMUON_OK && done, "split agv: test alone completes the call");
    check(check_gather(&a, base, xa, 22) == 0, "split agv: bit-exact after test said done");
    check(dmuon_allgatherv_wait(ga) == DMUON_EINVAL, "split agv: wait after completion is "
          "DMUON_EINVAL (nothing in flight)");
    check(dmuon_allgatherv_test(ga, &done) == DMUON_EINVAL, "split agv: test with nothing "
          "started is DMUON_EINVAL");

    /* a second start or a blocking call while one is in flight is refused;
     * the first call still completes */
    memset(base + xa, 0xee, (size_t)a.B);
    fill_windows(t, &a, base, wa, 23);
    rc = dmuon_allgatherv_start(ga, xa, wa);
    dmuon_rc r2 = dmuon_allgatherv_start(ga, xa, wa);
    dmuon_rc r3 = dmuon_reduce_scatterv(ga, xa, wa);
    rw = dmuon_allgatherv_wait(ga);
    check(rc == DMUON_OK && r2 == DMUON_EINVAL && r3 == DMUON_EINVAL && rw == DMUON_OK,
          "split agv: a second call in flight is DMUON_EINVAL, the first completes");
    check(check_gather(&a, base, xa, 23) == 0, "split agv: bit-exact after refused calls");

    /* Prefetch across groups in different orders: even ranks run group b's
     * blocking ReduceScatterV before waiting for a's gather, odd ranks after.
     * An odd rank's wait needs chunks that even ranks forward only while
     * they block in b, so b's loop must move a. */
    memset(base + xa, 0xee, (size_t)a.B);
    fill_windows(t, &a, base, wa, 24);
    fill_grads(t, &b, base, xb);
    memset(base + wb, 0xcd, (size_t)b.W);
    rc = dmuon_allgatherv_start(ga, xa, wa);
    if (t->rank % 2 == 0) {
        r2 = dmuon_reduce_scatterv(gb, xb, wb);
        rw = dmuon_allgatherv_wait(ga);
    } else {
        rw = dmuon_allgatherv_wait(ga);
        r2 = dmuon_reduce_scatterv(gb, xb, wb);
    }
    check(rc == DMUON_OK && r2 == DMUON_OK && rw == DMUON_OK,
          "split: a gather in flight and another group's reduce, in different orders");
    check(check_gather(&a, base, xa, 24) == 0 && check_sums(t, &b, base, wb) == 0,
          "split: both bit-exact");

    /* split ReduceScatterV with local work */
    fill_grads(t, &a, base, xa);
    memset(base + wa, 0xcd, (size_t)a.W);
    rc = dmuon_reduce_scatterv_start(ga, xa, wa);
    busy(3 * (t->rank % 4));
    rt = dmuon_reduce_scatterv_test(ga, &done);
    rw = done ? DMUON_OK : dmuon_reduce_scatterv_wait(ga);
    check(rc == DMUON_OK && rt == DMUON_OK && rw == DMUON_OK, "split rsv: start, work, wait");
    check(check_sums(t, &a, base, wa) == 0, "split rsv: exact sums");
    check(dmuon_reduce_scatterv_wait(gb) == DMUON_EINVAL, "split rsv: wait with nothing "
          "started is DMUON_EINVAL");

    /* blocking calls still work after split ones */
    memset(base + xa, 0xee, (size_t)a.B);
    fill_windows(t, &a, base, wa, 25);
    rc = dmuon_allgatherv(ga, xa, wa);
    check(rc == DMUON_OK && check_gather(&a, base, xa, 25) == 0,
          "split: a blocking call after split calls is bit-exact");

free_mem:
    dmuon_group_free(ga);
    dmuon_group_free(gb);
    dmuon_symm_free(mem);
out:
    free(a.segs);
    free(b.segs);
}

/* ---------------------------------------------------------- publish ---- */

static void test_publish(const dmuon_topo *t)
{
    table a = {0};
    int ok = make_table(t, DMUON_SEGSHAPE_RANK, 50000, DMUON_BF16, &a);
    check(ok, "publish: table made");
    if (!ok) {
        free(a.segs);
        return;
    }
    /* each rail's parameters back to back in its copy */
    int64_t *end = calloc((size_t)t->per_node, sizeof *end);
    for (int i = 0; i < a.n; i++) {
        a.segs[i].offset = end[a.segs[i].owner % t->per_node];
        a.segs[i].window_offset = 0;
        end[a.segs[i].owner % t->per_node] += seg_bytes(&a.segs[i]);
    }
    int64_t need = 0, most = 0;
    for (int s = 0; s < t->per_node; s++)
        most = end[s] > most ? end[s] : most;
    free(end);
    dmuon_rc rc = dmuon_publish_copy_bytes_needed(t, a.segs, a.n, &need);
    check(rc == DMUON_OK && need == most, "publish: copy bytes needed = the heaviest rail's");
    int64_t off = 8192;
    dmuon_symm *mem = NULL;
    dmuon_publish *p = NULL;
    if (dmuon_symm_alloc(t, off + need, 0, &mem) != DMUON_OK) {
        check(0, "publish: memory allocated");
        free(a.segs);
        return;
    }
    check(dmuon_publish_create(t, a.segs, a.n, NULL, mem, off + 8, &p) == DMUON_EINVAL && !p,
          "publish: a copy past the end of the memory is DMUON_EINVAL");
    check(dmuon_publish_create(t, a.segs, a.n, NULL, mem, 4, &p) == DMUON_EINVAL && !p,
          "publish: a copy offset not a multiple of 8 is DMUON_EINVAL");
    rc = dmuon_publish_create(t, a.segs, a.n, NULL, mem, off, &p);
    check(rc == DMUON_OK, "publish: created over a copy range at 8 KiB");
    if (rc == DMUON_OK) {
        unsigned char *copy = dmuon_publish_copy(p), *base = dmuon_symm_base(mem);
        check(copy == base + off && dmuon_publish_copy_bytes(p) == need,
              "publish: copy is base + offset");
        memset(base, 0x5a, (size_t)off);
        int64_t bad = 0;
        int all_ok = 1;
        for (int64_t step = 1; step <= 2; step++) {
            all_ok &= dmuon_publish_begin(p, step) == DMUON_OK;
            for (int i = 0; i < a.n; i++)
                if (a.segs[i].owner == t->rank) {
                    for (int64_t k = 0; k < seg_bytes(&a.segs[i]); k++)
                        copy[a.segs[i].offset + k] = pattern(10 + (int)step, i, k);
                    all_ok &= dmuon_publish_post(p, i, step) == DMUON_OK;
                }
            for (int i = 0; i < a.n; i++)
                if (t->nodes > 1 && a.segs[i].owner % t->per_node == t->local &&
                    a.segs[i].owner != t->rank) {
                    all_ok &= dmuon_publish_wait(p, i, step) == DMUON_OK;
                    for (int64_t k = 0; k < seg_bytes(&a.segs[i]); k++)
                        bad += copy[a.segs[i].offset + k] != pattern(10 + (int)step, i, k);
                }
            all_ok &= dmuon_publish_end(p, step) == DMUON_OK;
        }
        int outside = 0;
        for (int64_t k = 0; k < off; k++)
            outside |= base[k] != 0x5a;
        check(all_ok && bad == 0, "publish: two steps arrive bit-exact in the leaders' copies");
        check(!outside, "publish: nothing written outside the copy range");
        dmuon_publish_free(p);
    }
    dmuon_symm_free(mem);
    free(a.segs);
}

/* The node half split phase on the scheduled publish: one f32 parameter
 * per rank (5 + p elements); every rank loads all of them from the node's
 * leaders' copies into a destination after the copy.  Step 1 tests until
 * done, step 2 waits; the list handed to start is clobbered and freed right
 * after it (start copies it).  A second start, the blocking form while one
 * is in flight, and a test or wait with none started are DMUON_EINVAL. */
static void test_node_half(const dmuon_topo *t)
{
    const int N = t->size, K = t->per_node;
    dmuon_segment *par = calloc((size_t)N, sizeof *par), *dst = calloc((size_t)N, sizeof *dst);
    int *list = calloc((size_t)N, sizeof *list);
    int64_t copy_bytes = 0, dst_bytes = 0;
    for (int p = 0; p < N; p++) {
        par[p] = (dmuon_segment){.owner = p, .dtype = DMUON_F32, .count = 5 + p};
        dst[p] = par[p];
        dst[p].offset = dst_bytes;
        dst_bytes += 4 * (5 + p);
        list[p] = p;
    }
    dmuon_publish_layout(K, par, N, par, &copy_bytes);
    const int64_t dst_off = (copy_bytes + 7) / 8 * 8;
    dmuon_publish_opts o = {.algorithm = DMUON_ALGO_SCHEDULED, .deadline_ms = 30000};
    dmuon_symm *mem = NULL;
    dmuon_publish *pub = NULL;
    int ok = dmuon_symm_alloc(t, dst_off + dst_bytes + 8, 0, &mem) == DMUON_OK &&
             dmuon_publish_create(t, par, N, &o, mem, 0, &pub) == DMUON_OK;
    check(ok, "node half: scheduled publish created");
    int done = 0;
    if (ok) {
        check(dmuon_publish_node_load_wait(pub) == DMUON_EINVAL &&
                  strstr(dmuon_errmsg(), "none started"),
              "node half: a wait with none started is DMUON_EINVAL");
        check(dmuon_publish_node_load_test(pub, &done) == DMUON_EINVAL && !done,
              "node half: a test with none started is DMUON_EINVAL");
    }
    unsigned char *base = ok ? dmuon_symm_base(mem) : NULL;
    for (int64_t step = 1; ok && step <= 2; step++) {
        float *mine = (float *)(base + par[t->rank].offset);
        for (int64_t k = 0; k < par[t->rank].count; k++)
            mine[k] = (float)(100 * t->rank + k + 1000 * step);
        memset(base + dst_off, 0, (size_t)dst_bytes);
        int all = dmuon_publish_begin(pub, step) == DMUON_OK &&
                  dmuon_publish_post(pub, t->rank, step) == DMUON_OK;
        check(all, "node half: begin and post");
        dmuon_segment *segs2 = malloc((size_t)N * sizeof *segs2);
        int *list2 = malloc((size_t)N * sizeof *list2);
        memcpy(segs2, dst, (size_t)N * sizeof *segs2);
        memcpy(list2, list, (size_t)N * sizeof *list2);
        dmuon_rc rc = dmuon_publish_node_load_start(pub, segs2, list2, N, dst_off, step);
        memset(segs2, 0xff, (size_t)N * sizeof *segs2);
        memset(list2, 0xff, (size_t)N * sizeof *list2);
        free(segs2);
        free(list2);
        check(rc == DMUON_OK, "node half: start");
        if (rc != DMUON_OK)
            break;
        check(dmuon_publish_node_load_start(pub, dst, list, N, dst_off, step) == DMUON_EINVAL &&
                  strstr(dmuon_errmsg(), "in flight"),
              "node half: a second start while one is in flight is DMUON_EINVAL");
        check(dmuon_publish_node_load(pub, dst, list, N, dst_off, step) == DMUON_EINVAL,
              "node half: the blocking form while one is in flight is DMUON_EINVAL");
        if (step == 1) {
            double t0 = MPI_Wtime();
            done = 0;
            while (rc == DMUON_OK && !done && MPI_Wtime() - t0 < 30.0)
                rc = dmuon_publish_node_load_test(pub, &done);
            check(rc == DMUON_OK && done, "node half: tests until done");
        } else {
            rc = dmuon_publish_node_load_wait(pub);
            check(rc == DMUON_OK, "node half: wait");
        }
        int64_t bad = rc != DMUON_OK;
        for (int p = 0; p < N && !bad; p++) {
            const float *got = (const float *)(base + dst_off + dst[p].offset);
            for (int64_t k = 0; k < par[p].count; k++)
                bad += got[k] != (float)(100 * p + k + 1000 * step);
        }
        check(!bad, "node half: every parameter of the step at its destination on every rank");
        check(dmuon_publish_node_load_wait(pub) == DMUON_EINVAL,
              "node half: a wait after completion is DMUON_EINVAL");
        check(dmuon_publish_end(pub, step) == DMUON_OK, "node half: end");
    }
    dmuon_publish_free(pub);
    dmuon_symm_free(mem);
    free(par);
    free(dst);
    free(list);
}

static void test_ctl(const dmuon_topo *t)
{
    const int N = t->size, last = N - 1;
    check(dmuon_agree(t->world, DMUON_OK, 5000) == DMUON_OK, "agree: no rank failed");
    /* the last rank fails: every rank returns its code and message */
    dmuon_rc mine = t->rank == last ? DMUON_FAIL(DMUON_EINVAL, "field 'x': bad value 7")
                                    : DMUON_OK;
    char want[96];
    snprintf(want, sizeof want, "rank %d: field 'x': bad value 7", last);
    dmuon_rc got = dmuon_agree(t->world, mine, 5000);
    check(got == DMUON_EINVAL, "agree: the failing rank's code on every rank");
    check(strstr(dmuon_errmsg(), want) != NULL, "agree: its message on every rank, with its rank");
    /* two ranks fail differently: the lowest one's code reaches the others */
    if (N >= 3) {
        mine = t->rank == 1   ? DMUON_FAIL(DMUON_ENOMEM, "out of memory for the rows")
             : t->rank == 2   ? DMUON_FAIL(DMUON_EIO, "cannot write the file")
                              : DMUON_OK;
        got = dmuon_agree(t->world, mine, 5000);
        dmuon_rc expect = t->rank == 2 ? DMUON_EIO : DMUON_ENOMEM;
        check(got == expect, "agree: failing ranks keep their own code, the others rank 1's");
        check(t->rank == 2 ? strstr(dmuon_errmsg(), "rank 2: cannot write") != NULL
                           : strstr(dmuon_errmsg(), "rank 1: out of memory") != NULL,
              "agree: messages name the rank they came from");
    }
    check(dmuon_agree(MPI_COMM_NULL, DMUON_OK, 0) == DMUON_OK, "agree: no communicator");

    double v[3] = {t->rank + 1.0, -(double)t->rank, 0.5};
    check(dmuon_ctl_allreduce_f64(t->world, v, 3, DMUON_CTL_SUM, 5000, "sum") == DMUON_OK &&
              v[0] == N * (N + 1) / 2.0 && v[1] == -(N * (N - 1) / 2.0) && v[2] == 0.5 * N,
          "ctl: f64 sum of a short vector");
    int64_t w[2] = {t->rank * 3 - 1, -t->rank};
    check(dmuon_ctl_allreduce_i64(t->world, w, 2, DMUON_CTL_MAX, 5000, "max") == DMUON_OK &&
              w[0] == last * 3 - 1 && w[1] == 0, "ctl: i64 max");
    int64_t m = 100 - t->rank;
    check(dmuon_ctl_allreduce_i64(t->world, &m, 1, DMUON_CTL_MIN, 5000, "min") == DMUON_OK &&
              m == 100 - last, "ctl: i64 min");
    check(dmuon_ctl_allreduce_i64(t->world, &m, 0, DMUON_CTL_MIN, 5000, "none") == DMUON_EINVAL,
          "ctl: an empty reduction is refused");
    unsigned char tab[200];
    for (int i = 0; i < 200; i++)
        tab[i] = t->rank == last ? (unsigned char)(i * 13 + 5) : 0;
    int same = dmuon_ctl_bcast(t->world, tab, 200, last, 5000, "table") == DMUON_OK;
    for (int i = 0; i < 200; i++)
        same = same && tab[i] == (unsigned char)(i * 13 + 5);
    check(same, "ctl: a short table broadcast from the last rank");
    check(dmuon_ctl_bcast(t->world, tab, 1, N, 5000, "table") == DMUON_EINVAL &&
              strstr(dmuon_errmsg(), "table:") != NULL, "ctl: a root outside the ranks is refused");
}

/* The topology forms of the control plane on an MPI topology (the same
 * results as the MPI_Comm forms), a zeroed topology as a local no-op, and
 * the table agreement over a topology with a table whose comparison is
 * broadcast in several pieces (more than DMUON_CTL_MAX_BYTES). */
static void test_ctl_topo(const dmuon_topo *t)
{
    const int N = t->size, last = N - 1;
    check(dmuon_ctl_topo_agree(t, DMUON_OK, 5000) == DMUON_OK, "topo agree: no rank failed");
    dmuon_rc mine = t->rank == last ? DMUON_FAIL(DMUON_EIO, "file 'y': short write") : DMUON_OK;
    char want[96];
    snprintf(want, sizeof want, "rank %d: file 'y': short write", last);
    check(dmuon_ctl_topo_agree(t, mine, 5000) == DMUON_EIO && strstr(dmuon_errmsg(), want),
          "topo agree: the failing rank's code and message on every rank");
    double v[2] = {t->rank + 0.25, 1.0};
    check(dmuon_ctl_topo_allreduce_f64(t, v, 2, DMUON_CTL_SUM, 5000, "norm") == DMUON_OK &&
              v[0] == N * (N - 1) / 2.0 + 0.25 * N && v[1] == N, "topo ctl: f64 sum");
    int64_t w = t->rank == 1 % N ? -7 : t->rank;
    check(dmuon_ctl_topo_allreduce_i64(t, &w, 1, DMUON_CTL_MIN, 5000, "flag") == DMUON_OK &&
              w == -7, "topo ctl: i64 min");
    check(dmuon_ctl_topo_allreduce_i64(t, &w, 1, (dmuon_ctl_op)9, 5000, "flag") == DMUON_EINVAL,
          "topo ctl: an unknown operation is refused");
    char tab[64];
    snprintf(tab, sizeof tab, "digest of rank %d", t->rank);
    check(dmuon_ctl_topo_bcast(t, tab, (int)sizeof tab, last, 5000, "digest") == DMUON_OK,
          "topo ctl: broadcast");
    snprintf(want, sizeof want, "digest of rank %d", last);
    check(!strcmp(tab, want), "topo ctl: every rank holds the root's bytes");
    check(dmuon_ctl_topo_bcast(t, tab, DMUON_CTL_MAX_BYTES + 1, 0, 5000, "digest") ==
              DMUON_EINVAL, "topo ctl: a broadcast over the limit is refused");
    dmuon_topo alone;
    memset(&alone, 0, sizeof alone);
    alone.world = alone.node = alone.rail = MPI_COMM_NULL;
    alone.size = 1;
    int64_t x = 5;
    check(dmuon_ctl_topo_allreduce_i64(&alone, &x, 1, DMUON_CTL_SUM, 0, "x") == DMUON_OK &&
              x == 5 && dmuon_ctl_topo_agree(&alone, DMUON_OK, 0) == DMUON_OK,
          "topo ctl: a topology without communicators is alone");

    /* 30000 segments: rank 0's encoded table is 1.2 MB, two broadcasts */
    const int n = 30000;
    dmuon_segment *segs = calloc((size_t)n, sizeof *segs);
    if (!segs) {
        check(0, "topo table agreement: memory");
        return;
    }
    for (int i = 0; i < n; i++)
        segs[i] = (dmuon_segment){.owner = i % N, .dtype = DMUON_F32, .offset = 8 * (int64_t)i,
                                  .count = 2, .window_offset = 0};
    check(dmuon_table_agree_topo(t, segs, n, 0) == DMUON_OK, "topo table agreement: same tables");
    if (N > 1) {
        if (t->rank == last)
            segs[29000].count = 3;
        dmuon_rc rc = dmuon_table_agree_topo(t, segs, n, 0);
        snprintf(want, sizeof want, "first difference at segment 29000 (rank %d against rank 0",
                 last);
        check(rc == DMUON_EMISMATCH && strstr(dmuon_errmsg(), want),
              "topo table agreement: the first difference past the first piece, on every rank");
    }
    free(segs);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    dmuon_topo t;
    if (dmuon_topo_init(&t, MPI_COMM_WORLD, 0) != DMUON_OK) {
        fprintf(stderr, "rank %d: topology: %s\n", world_rank, dmuon_errmsg());
        MPI_Finalize();
        return 3;
    }
    dmuon_err_set_rank(t.rank);
    if (t.rank == 0)
        printf("test_comm: %d ranks as %d nodes x %d\n", t.size, t.nodes, t.per_node);
    test_symm(&t);
    test_groups(&t);
    test_create_deadline(&t);
    test_split(&t);
    test_publish(&t);
    test_node_half(&t);
    test_ctl(&t);
    test_ctl_topo(&t);
    dmuon_topo_release(&t);
    if (world_rank == 0)
        printf("%d passed, %d failed\n", passed, failed);
    MPI_Finalize();
    return failed ? 1 : 0;
}
