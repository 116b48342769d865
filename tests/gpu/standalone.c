/*
 * standalone.c — a driver for the GPU checks on a machine that has CUDA,
 * MPI, OpenBLAS and LAPACKE but lacks the headers of the rest of dmuon's
 * dependencies (libyaml, SQLite, cmocka), so `make` cannot build there.
 * tests/gpu/run.sh compiles it with the Newton–Schulz sources only:
 *
 *   t verify [dmuon-verify ns options]
 *   t bench  [dmuon-bench ns options]
 *   t probe  --device cuda MxN,...   (dmuon_probe_shapes; rows printed,
 *                                     not stored: no SQLite here)
 *
 * The model inventory needs libyaml: its entry points are stubs that refuse.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dmuon/probe.h"

int verify_ns_main(int argc, char **argv);
int bench_ns_main(int argc, char **argv);

/* Stubs for dmuon/model.h (not included: its types are not needed). */
int dmuon_model_load(void);
int dmuon_model_muon_shapes(void);
void dmuon_model_free(void);
int dmuon_model_load(void)
{
    return DMUON_FAIL(DMUON_EUNSUPPORTED, "model inventories are not in the standalone driver");
}
int dmuon_model_muon_shapes(void) { return DMUON_EUNSUPPORTED; }
void dmuon_model_free(void) {}

static int probe(const char *list)
{
    int64_t(*shapes)[2] = NULL;
    size_t n = 0;
    dmuon_probe_opts o;
    dmuon_probe_opts_init(&o, DMUON_DEVICE_CUDA);
    dmuon_rc rc = dmuon_probe_parse_shapes(list, &shapes, &n);
    dmuon_cost_row *rows = rc == DMUON_OK ? calloc(n, sizeof *rows) : NULL;
    if (rc == DMUON_OK && rows)
        rc = dmuon_probe_shapes(&o, (const int64_t(*)[2])shapes, n, MPI_COMM_WORLD, rows);
    if (rc != DMUON_OK || !rows) {
        fprintf(stderr, "probe: error: %s\n", dmuon_errmsg());
        free(shapes);
        free(rows);
        return 3;
    }
    for (size_t i = 0; i < n; i++)
        printf("%s  %s %s  %lldx%lld  median %.4f ms  min %.4f  max %.4f  (%lld iters, "
               "%lld ranks)\n", rows[i].device, rows[i].variant, rows[i].dtype,
               (long long)rows[i].m, (long long)rows[i].n, rows[i].median_ms, rows[i].min_ms,
               rows[i].max_ms, (long long)rows[i].samples, (long long)rows[i].ranks);
    free(shapes);
    free(rows);
    return 0;
}

int main(int argc, char **argv)
{
    int code = 2;
    MPI_Init(&argc, &argv);
    if (argc > 1 && !strcmp(argv[1], "verify"))
        code = verify_ns_main(argc - 1, argv + 1);
    else if (argc > 1 && !strcmp(argv[1], "bench"))
        code = bench_ns_main(argc - 1, argv + 1);
    else if (argc > 2 && !strcmp(argv[1], "probe"))
        code = probe(argv[2]);
    else
        fprintf(stderr, "usage: %s verify|bench [options] | probe MxN,...\n", argv[0]);
    MPI_Finalize();
    return code;
}
