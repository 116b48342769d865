/*
 * test_backend.c — the backend selection and the host side of symmetric
 * memory copies, on one rank without a GPU: dmuon_backend_parse/check,
 * dmuon_symm_put/get on MPI memory (a plain copy, ranges checked), the GPU
 * backends refusing clearly where no GPU (or no GPU build) exists, and an
 * ops-table entry left NULL refused with DMUON_EUNSUPPORTED and a message
 * naming the backend and the operation (a bare table with no split phase,
 * no publish and no stream), and the nccl backend's table where it is built
 * (its entries as offered, and a publish call it lacks refused), and the
 * publish algorithms of mpi (coalesced offered, equal refused).  Prints "N passed,
 * N failed"; exit 1 on a failure.  (On a machine with a GPU the GPU
 * backends' refusal is not expected: those cases are skipped here and run by
 * tests/gpu/run.sh.)
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dmuon/collv.h"
#include "dmuon/publish.h"
#include "dmuon/symm.h"
#include "dmuon/topo.h"
#include "comm/backend.h"

static int passed, failed;

static void check(int ok, const char *what)
{
    if (ok) {
        passed++;
    } else {
        failed++;
        fprintf(stderr, "check failed: %s (last error: %s)\n", what, dmuon_errmsg());
    }
}

static void test_parse(void)
{
    dmuon_backend b = DMUON_BACKEND_COUNT;
    check(dmuon_backend_parse("mpi", &b) == DMUON_OK && b == DMUON_BACKEND_MPI, "parse mpi");
    check(dmuon_backend_parse("nccl", &b) == DMUON_OK && b == DMUON_BACKEND_NCCL, "parse nccl");
    check(dmuon_backend_parse("nccl-dev", &b) == DMUON_OK && b == DMUON_BACKEND_NCCL_DEV,
          "parse nccl-dev");
    check(dmuon_backend_parse("NCCL-Dev", &b) == DMUON_OK && b == DMUON_BACKEND_NCCL_DEV,
          "names in any case");
    check(dmuon_backend_parse("nccl2", &b) == DMUON_EINVAL, "other names are refused");
    check(strstr(dmuon_errmsg(), "'nccl2'") && strstr(dmuon_errmsg(), "mpi, nccl or nccl-dev"),
          "the message names the value and the names");
    check(dmuon_backend_parse(NULL, &b) == DMUON_EINVAL, "NULL is refused");
    for (int i = 0; i < DMUON_BACKEND_COUNT; i++) {
        dmuon_backend back;
        check(dmuon_backend_parse(dmuon_backend_name((dmuon_backend)i), &back) == DMUON_OK &&
                  back == (dmuon_backend)i, "name and parse agree");
    }
    check(dmuon_backend_check(DMUON_BACKEND_MPI) == DMUON_OK, "mpi is always there");
}

static int gpu_visible(void)
{
    return system("command -v nvidia-smi > /dev/null 2>&1 && nvidia-smi -L > /dev/null 2>&1") == 0;
}

static void test_gpu_refused(dmuon_topo *t)
{
    if (gpu_visible()) {
        printf("note: a GPU is visible: the GPU backends are checked by tests/gpu/run.sh\n");
        return;
    }
    for (int b = DMUON_BACKEND_NCCL; b <= DMUON_BACKEND_NCCL_DEV; b++) {
        check(dmuon_backend_check((dmuon_backend)b) == DMUON_EUNSUPPORTED,
              "a GPU backend without a GPU is unsupported");
        const char *m = dmuon_errmsg();
        check(strstr(m, dmuon_backend_name((dmuon_backend)b)) &&
                  (strstr(m, "no GPU found") || strstr(m, "built without GPU support") ||
                   strstr(m, "older than 2.30")),
              "the message names the backend and says why");
        /* memory over such a topology: refused the same way, nothing left */
        t->backend = (dmuon_backend)b;
        dmuon_symm *s = (dmuon_symm *)1;
        check(dmuon_symm_alloc(t, 4096, 0, &s) == DMUON_EUNSUPPORTED && s == NULL,
              "symmetric memory on a GPU backend without a GPU");
        t->backend = DMUON_BACKEND_MPI;
    }
}

/* The NCCL handoff refusing bad facts before any NCCL call, and (without a
 * GPU, or without NCCL in the build) refusing clearly; t is left zeroed. */
static void test_handoff(void)
{
    dmuon_topo h;
    unsigned char id[DMUON_NCCL_UNIQUE_ID_BYTES] = {0};
    check(dmuon_topo_init_nccl(&h, NULL, 0, 1, 1) != DMUON_OK, "handoff: no communicator");
#ifdef DMUON_HAVE_NCCL
    check(strstr(dmuon_errmsg(), "no communicator or unique id") != NULL,
          "handoff: the message says what is missing");
    check(dmuon_topo_init_nccl_id(&h, id, 2, 2, 1, -1) == DMUON_EINVAL &&
              strstr(dmuon_errmsg(), "rank 2 of 2 ranks"), "handoff: a rank outside the size");
    check(dmuon_topo_init_nccl_id(&h, id, 0, 6, 4, -1) == DMUON_EINVAL &&
              strstr(dmuon_errmsg(), "4 per node"), "handoff: ranks per node not dividing");
    if (!gpu_visible()) {
        check(dmuon_topo_init_nccl_id(&h, id, 0, 1, 1, -1) == DMUON_EUNSUPPORTED &&
                  strstr(dmuon_errmsg(), "no GPU found"), "handoff without a GPU: unsupported");
    }
#else
    check(dmuon_topo_init_nccl_id(&h, id, 0, 1, 1, -1) == DMUON_EUNSUPPORTED &&
              strstr(dmuon_errmsg(), "built without GPU support"),
          "handoff in a build without NCCL: unsupported");
#endif
    check(h.nccl == NULL && h.world == MPI_COMM_NULL && h.node == MPI_COMM_NULL,
          "handoff: a failed one leaves the topology empty");
    dmuon_topo_release(&h);   /* accepted, does nothing */
}

static void test_copies(dmuon_topo *t)
{
    dmuon_symm *s = NULL;
    check(dmuon_symm_alloc(t, 5000, 0, &s) == DMUON_OK, "mpi memory");
    if (!s)
        return;
    check(!dmuon_symm_on_device(s), "mpi memory is host memory");
    unsigned char in[300], out[300];
    for (int i = 0; i < 300; i++)
        in[i] = (unsigned char)(i * 7 + 1);
    check(dmuon_symm_put(s, 100, in, 300) == DMUON_OK, "put 300 bytes at 100");
    const unsigned char *base = dmuon_symm_base(s);
    check(!memcmp(base + 100, in, 300) && base[99] == 0 && base[400] == 0,
          "put lands at the offset, nothing around it");
    memset(out, 0, sizeof out);
    check(dmuon_symm_get(s, 100, out, 300) == DMUON_OK && !memcmp(in, out, 300),
          "get returns the bytes");
    check(dmuon_symm_put(s, 4900, in, 100) == DMUON_OK, "put up to the last byte");
    check(dmuon_symm_put(s, 4901, in, 100) == DMUON_EINVAL, "put past the end is refused");
    check(strstr(dmuon_errmsg(), "inside its 5000 bytes") != NULL, "the message gives the size");
    check(dmuon_symm_get(s, -1, out, 10) == DMUON_EINVAL, "negative offset is refused");
    check(dmuon_symm_get(s, 0, out, -1) == DMUON_EINVAL, "negative length is refused");
    check(dmuon_symm_put(s, 0, in, 0) == DMUON_OK, "an empty copy is fine");
    dmuon_symm_free(s);
}

/* The split-phase calls and the publish calls on a group / publish whose
 * backend leaves those entries NULL: refused, with the backend's name and
 * the operation in the message; nothing is dereferenced.  The objects are
 * made by hand (the backend's create is never reached), so this runs
 * without the backend's hardware. */
static void check_unsupported(const dmuon_comm_ops *ops)
{
    char what[128];
    dmuon_group g;
    memset(&g, 0, sizeof g);
    g.ops = ops;
    g.opts.algorithm = ops->default_algo;
    g.gops = ops->group[ops->default_algo];
    g.rsv_ok = 1;
    int done = -1;
    const struct {
        const char *name;
        dmuon_rc rc;
    } calls[] = {
        {"allgatherv_start", dmuon_allgatherv_start(&g, 0, 0)},
        {"allgatherv_test", dmuon_allgatherv_test(&g, &done)},
        {"allgatherv_wait", dmuon_allgatherv_wait(&g)},
        {"reducescatterv_start", dmuon_reduce_scatterv_start(&g, 0, 0)},
        {"reducescatterv_test", dmuon_reduce_scatterv_test(&g, &done)},
        {"reducescatterv_wait", dmuon_reduce_scatterv_wait(&g)},
    };
    for (size_t i = 0; i < sizeof calls / sizeof calls[0]; i++) {
        snprintf(what, sizeof what, "%s on %s: DMUON_EUNSUPPORTED", calls[i].name, ops->name);
        check(calls[i].rc == DMUON_EUNSUPPORTED, what);
    }
    /* the last error is the last call's */
    char want[96];
    snprintf(want, sizeof want, "reducescatterv_wait: not offered by the %s backend", ops->name);
    snprintf(what, sizeof what, "the message names the operation and the %s backend", ops->name);
    check(strstr(dmuon_errmsg(), want) != NULL, what);
    check(done == -1, "test left *done alone");
    dmuon_allgatherv_start(&g, 0, 0);
    snprintf(want, sizeof want, "allgatherv_start: not offered by the %s backend", ops->name);
    check(strstr(dmuon_errmsg(), want) != NULL, "start's message names start");

    dmuon_publish p;
    memset(&p, 0, sizeof p);
    p.ops = ops;
    check(dmuon_publish_begin(&p, 1) == DMUON_EUNSUPPORTED &&
              strstr(dmuon_errmsg(), "publish_begin: not offered by the") &&
              strstr(dmuon_errmsg(), ops->name),
          "publish_begin on a backend without publish");
    check(dmuon_publish_wait(&p, 0, 1) == DMUON_EUNSUPPORTED &&
              strstr(dmuon_errmsg(), "publish_wait"), "publish_wait refused");
    check(dmuon_publish_flag(&p, 0) == -1, "no flags without a publish");
}

#ifdef DMUON_HAVE_NCCL
/* The nccl table as this build fills it: split phase for every group
 * algorithm it offers, the per-owner publish with its node half, the rest
 * NULL; and a publish call the per-owner algorithm lacks (wait) refused
 * through that real table without reaching the backend. */
static void check_nccl_table(const dmuon_comm_ops *nccl)
{
    const dmuon_algo offered[] = {DMUON_ALGO_PER_OWNER, DMUON_ALGO_COALESCED, DMUON_ALGO_EQUAL};
    for (size_t i = 0; i < sizeof offered / sizeof offered[0]; i++) {
        const dmuon_group_ops *go = nccl->group[offered[i]];
        char what[96];
        snprintf(what, sizeof what, "nccl %s: blocking and split phase entries",
                 dmuon_algo_name(offered[i]));
        check(go && go->create && go->free && go->allgatherv && go->reduce_scatterv &&
                  go->start && go->test && go->wait, what);
    }
    check(nccl->group[DMUON_ALGO_SCHEDULED] == NULL, "nccl has no scheduled group");
    check(dmuon_group_algo_offered(DMUON_BACKEND_NCCL, DMUON_ALGO_EQUAL) &&
              !dmuon_group_algo_offered(DMUON_BACKEND_NCCL, DMUON_ALGO_SCHEDULED),
          "dmuon_group_algo_offered reads the table");
    check(nccl->symm_stream && nccl->symm_set_stream, "nccl memory has a stream");
    const dmuon_publish_ops *po = nccl->publish[DMUON_ALGO_PER_OWNER];
    check(po && po->create && po->begin && po->post && po->end && po->node_load && !po->wait,
          "nccl per-owner publish: begin, post, end, node load; no wait");
    check(nccl->publish[DMUON_ALGO_SCHEDULED] == NULL, "nccl has no scheduled publish");
    dmuon_publish p;
    memset(&p, 0, sizeof p);
    p.ops = nccl;
    p.pops = po;
    p.algorithm = DMUON_ALGO_PER_OWNER;
    check(dmuon_publish_wait(&p, 0, 1) == DMUON_EUNSUPPORTED &&
              strstr(dmuon_errmsg(), "publish_wait: not offered by the nccl backend with the "
                     "per-owner algorithm"),
          "publish_wait on nccl per-owner: refused, naming backend and algorithm");
    int done = 1;
    check(!po->node_load_start && !po->node_load_test && !po->node_load_wait,
          "nccl per-owner publish: no split-phase node load");
    check(dmuon_publish_node_load_start(&p, NULL, NULL, 0, 0, 1) == DMUON_EUNSUPPORTED &&
              strstr(dmuon_errmsg(), "publish_node_load_start: not offered by the nccl"),
          "publish_node_load_start on nccl: refused, naming it");
    check(dmuon_publish_node_load_test(&p, &done) == DMUON_EUNSUPPORTED &&
              dmuon_publish_node_load_wait(&p) == DMUON_EUNSUPPORTED,
          "publish_node_load_test and _wait on nccl: refused");
}
#endif

static void test_null_entries(void)
{
    static const dmuon_group_ops blocking_only = {NULL};
    static const dmuon_comm_ops bare = {.name = "bare", .default_algo = DMUON_ALGO_SCHEDULED,
                                        .group = {[DMUON_ALGO_SCHEDULED] = &blocking_only}};
    check_unsupported(&bare);
    /* a memory whose backend has no stream: refused, nothing dereferenced */
    dmuon_symm s;
    memset(&s, 0, sizeof s);
    s.ops = &bare;
    check(dmuon_symm_stream(&s) == NULL, "no stream on a backend without one");
    check(dmuon_symm_set_stream(&s, NULL) == DMUON_EUNSUPPORTED &&
              strstr(dmuon_errmsg(), "not offered by the bare backend"),
          "set_stream refused on a backend without one");
#ifdef DMUON_HAVE_NCCL
    const dmuon_comm_ops *nccl = dmuon_comm_backend(DMUON_BACKEND_NCCL);
    check(nccl != NULL, "the nccl backend is built");
    if (nccl)
        check_nccl_table(nccl);
#else
    printf("skipped: the nccl backend's table (built without NCCL)\n");
#endif
    const dmuon_comm_ops *mpi = dmuon_comm_backend(DMUON_BACKEND_MPI);
    const dmuon_publish_ops *ms = mpi ? mpi->publish[DMUON_ALGO_SCHEDULED] : NULL;
    const dmuon_publish_ops *mo = mpi ? mpi->publish[DMUON_ALGO_PER_OWNER] : NULL;
    check(ms && ms->node_load && ms->node_load_start && ms->node_load_test &&
              ms->node_load_wait && mo && !mo->node_load && !mo->node_load_start,
          "mpi: the scheduled publish has the split-phase node load, per-owner none");
}

/* The publish algorithms on mpi (one rank, so nothing crosses nodes):
 * coalesced is offered, begin/post/end run and the flag moves at end, wait
 * is refused by name; equal has no publish form: refused at create with a
 * message naming the algorithm and the backend. */
static void test_publish_algos(const dmuon_topo *t)
{
    dmuon_segment par[2] = {{.owner = 0, .dtype = DMUON_BF16, .count = 4},
                            {.owner = 0, .dtype = DMUON_BF16, .count = 8}};
    int64_t bytes = 0;
    check(dmuon_publish_layout(t->per_node, par, 2, par, &bytes) == DMUON_OK && bytes == 24,
          "publish layout of two parameters");
    dmuon_symm *mem = NULL;
    if (dmuon_symm_alloc(t, bytes, 0, &mem) != DMUON_OK) {
        check(0, "symmetric memory for the publish");
        return;
    }
    dmuon_publish *p = NULL;
    dmuon_publish_opts o = {.algorithm = DMUON_ALGO_EQUAL};
    check(dmuon_publish_create(t, par, 2, &o, mem, 0, &p) == DMUON_EUNSUPPORTED && !p &&
              strstr(dmuon_errmsg(), "the equal algorithm is not offered by the mpi backend"),
          "the equal publish is refused, naming the algorithm and the backend");
    o.algorithm = DMUON_ALGO_COALESCED;
    check(dmuon_publish_create(t, par, 2, &o, mem, 0, &p) == DMUON_OK && p &&
              dmuon_publish_algo(p) == DMUON_ALGO_COALESCED, "the coalesced publish on mpi");
    if (p) {
        check(dmuon_publish_begin(p, 1) == DMUON_OK && dmuon_publish_post(p, 0, 1) == DMUON_OK &&
                  dmuon_publish_post(p, 1, 1) == DMUON_OK, "coalesced: begin and posts");
        check(dmuon_publish_flag(p, 1) == 0, "coalesced: the flag before end");
        check(dmuon_publish_wait(p, 0, 1) == DMUON_EUNSUPPORTED &&
                  strstr(dmuon_errmsg(), "publish_wait: not offered by the mpi backend with "
                         "the coalesced algorithm"), "coalesced: wait is refused by name");
        check(dmuon_publish_end(p, 1) == DMUON_OK && dmuon_publish_flag(p, 1) == 1,
              "coalesced: end moves the flag to the step");
        check(dmuon_publish_begin(p, 1) == DMUON_EINVAL, "coalesced: a step that does not grow");
        dmuon_publish_free(p);
    }
    dmuon_symm_free(mem);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    dmuon_topo t;
    if (dmuon_topo_init(&t, MPI_COMM_WORLD, 0) != DMUON_OK) {
        fprintf(stderr, "topology: %s\n", dmuon_errmsg());
        MPI_Finalize();
        return 3;
    }
    test_parse();
    test_gpu_refused(&t);
    test_copies(&t);
    test_null_entries();
    test_publish_algos(&t);
    test_handoff();
    dmuon_topo_release(&t);
    printf("%d passed, %d failed\n", passed, failed);
    MPI_Finalize();
    return failed ? 1 : 0;
}
