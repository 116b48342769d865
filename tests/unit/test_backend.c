/*
 * test_backend.c — the backend selection and the host side of symmetric
 * memory copies, on one rank without a GPU: dmuon_backend_parse/check,
 * dmuon_symm_put/get on MPI memory (a plain copy, ranges checked), the GPU
 * backends refusing clearly where no GPU (or no GPU build) exists, and the
 * NCCL equal-length baselines refusing MPI memory.  Prints "N passed,
 * N failed"; exit 1 on a failure.  (On a machine with a GPU the GPU
 * backends' refusal is not expected: those cases are skipped here and run by
 * tests/gpu/run.sh.)
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dmuon/collv.h"
#include "dmuon/symm.h"
#include "dmuon/topo.h"

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
        check(dmuon_symm_alloc(t, 4096, &s) == DMUON_EUNSUPPORTED && s == NULL,
              "symmetric memory on a GPU backend without a GPU");
        t->backend = DMUON_BACKEND_MPI;
    }
}

static void test_copies(dmuon_topo *t)
{
    dmuon_symm *s = NULL;
    check(dmuon_symm_alloc(t, 5000, &s) == DMUON_OK, "mpi memory");
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
    check(dmuon_allgather_equal(s, 0, 1024, 16, 0) == DMUON_EUNSUPPORTED,
          "the NCCL allgather baseline refuses mpi memory");
    check(dmuon_reduce_scatter_equal(s, 0, 1024, 4, DMUON_F32, 0) == DMUON_EUNSUPPORTED,
          "the NCCL reduce-scatter baseline refuses mpi memory");
    dmuon_symm_free(s);
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
    dmuon_topo_release(&t);
    printf("%d passed, %d failed\n", passed, failed);
    MPI_Finalize();
    return failed ? 1 : 0;
}
