/*
 * cost_probe.c — measuring the Muon shapes that the cost database lacks, for
 * dmuon-plan --probe-missing (see dmuon/cost.h): the model's Muon shapes
 * through the probe protocol of dmuon-probe (dmuon_probe_run in
 * dmuon/probe.h, with its one missing-shape filter) on one process.
 */
#include "dmuon/cost.h"

#include <stdio.h>
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
    dmuon_shape_count *sc = NULL;
    int64_t(*shapes)[2] = NULL;
    dmuon_probe_result r = {0};
    size_t n = 0;
    *probed = 0;
    dmuon_probe_opts_init(&po, kind);
    DMUON_TRY(dmuon_ns_opts_set_variant(&po.ns, s.variant ? s.variant : "gram-pe5"));
    DMUON_TRY(dmuon_ns_opts_set_dtype(&po.ns, s.dtype ? s.dtype : "fp32"));
    po.progress = progress;
    po.progress_ctx = ctx;
    DMUON_TRY(dmuon_model_muon_shapes(model, &sc, &n));
    shapes = malloc((n ? n : 1) * sizeof *shapes);
    if (!shapes) {
        rc = DMUON_FAIL(DMUON_ENOMEM, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        shapes[i][0] = sc[i].m;
        shapes[i][1] = sc[i].n;
    }
    /* the probe protocol on this one process, measuring what the database lacks */
    dmuon_probe_run_opts ro = {s.db_path, true, -1};
    rc = dmuon_probe_run(&po, &ro, (const int64_t(*)[2])shapes, n, MPI_COMM_NULL, &r);
    snprintf(device_out, 128, "%s", r.device);
    *probed = r.stored;
    if (rc != DMUON_OK)
        dmuon_err_trace_add(rc, __FILE__, __LINE__);
out:
    dmuon_probe_result_release(&r);
    free(sc);
    free(shapes);
    return rc;
}
