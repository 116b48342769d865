/*
 * cost_probe.c — measuring the Muon shapes that the cost database lacks, for
 * dmuon-plan --probe-missing (see dmuon/cost.h).  The timing itself is
 * dmuon_probe_shapes (dmuon/probe.h); this file only chooses the shapes,
 * runs the probe on one process and stores the rows in one transaction.
 */
#include "dmuon/cost.h"

#include <stdlib.h>
#include <string.h>

#include "dmuon/probe.h"

dmuon_rc dmuon_cost_probe_missing(const dmuon_model *model, const dmuon_cost_source *src,
                                  dmuon_device_kind kind, dmuon_cost_progress_fn progress,
                                  void *ctx, char device_out[128], size_t *probed)
{
    dmuon_rc rc = DMUON_OK;
    dmuon_probe_opts po;
    dmuon_cost_source s = src ? *src : (dmuon_cost_source){0};
    dmuon_shape_count *miss = NULL;
    int64_t(*shapes)[2] = NULL;
    dmuon_cost_row *rows = NULL;
    dmuon_costdb *db = NULL;
    size_t n = 0;
    char var[32], dt[8];
    *probed = 0;
    dmuon_probe_opts_init(&po, kind);
    DMUON_TRY(dmuon_ns_opts_set_variant(&po.ns, s.variant ? s.variant : "gram-pe5"));
    DMUON_TRY(dmuon_ns_opts_set_dtype(&po.ns, s.dtype ? s.dtype : "fp32"));
    po.progress = progress;
    po.progress_ctx = ctx;
    DMUON_TRY(dmuon_probe_key(&po, MPI_COMM_NULL, device_out, var, dt));
    s.device = device_out;
    s.variant = var;
    s.dtype = dt;
    /* open (and create) first, so a bad path fails before any timing */
    const char *path = s.db_path ? s.db_path : dmuon_costdb_default_path();
    DMUON_TRY(dmuon_costdb_open(path, true, 30000, &db));
    DMUON_TRY_GOTO(rc, dmuon_cost_missing(model, &s, &miss, &n), out);
    if (n == 0)
        goto out;
    shapes = malloc(n * sizeof *shapes);
    rows = calloc(n, sizeof *rows);
    if (!shapes || !rows) {
        rc = DMUON_FAIL(DMUON_ENOMEM, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        shapes[i][0] = miss[i].m;
        shapes[i][1] = miss[i].n;
    }
    DMUON_TRY_GOTO(rc, dmuon_probe_shapes(&po, (const int64_t(*)[2])shapes, n, MPI_COMM_NULL,
                                          rows), out);
    DMUON_TRY_GOTO(rc, dmuon_costdb_put_rows(db, rows, n), out);
    *probed = n;
out:
    dmuon_costdb_close(db);
    free(miss);
    free(shapes);
    free(rows);
    return rc;
}
