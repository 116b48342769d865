/*
 * backend.c — the table of communication backends (backend.h).  Adding a
 * backend is one entry here plus its own files.
 */
#include "backend.h"

#include <string.h>
#include <strings.h>

#include "mpi_backend.h"
#include "nccl_backend.h"

const dmuon_comm_ops dmuon_mpi_ops = {
    .name = "mpi",
    .chunk_bytes = DMUON_MPI_CHUNK_BYTES,
    .symm_alloc = dmuon_mpi_symm_alloc,
    .symm_free = dmuon_mpi_symm_free,
    .default_algo = DMUON_ALGO_SCHEDULED,
    .group = {
        [DMUON_ALGO_SCHEDULED] = &dmuon_mpi_scheduled_ops,
        [DMUON_ALGO_PER_OWNER] = &dmuon_mpi_baseline_ops,
        [DMUON_ALGO_COALESCED] = &dmuon_mpi_baseline_ops,
        [DMUON_ALGO_EQUAL] = &dmuon_mpi_baseline_ops,
    },
    .publish = {
        [DMUON_ALGO_SCHEDULED] = &dmuon_mpi_publish_scheduled_ops,
        [DMUON_ALGO_PER_OWNER] = &dmuon_mpi_publish_end_ops,
        [DMUON_ALGO_COALESCED] = &dmuon_mpi_publish_end_ops,
    },
};

const char *dmuon_backend_name(dmuon_backend b)
{
    switch (b) {
    case DMUON_BACKEND_MPI: return "mpi";
    case DMUON_BACKEND_NCCL: return "nccl";
    case DMUON_BACKEND_NCCL_DEV: return "nccl-dev";
    default: return "?";
    }
}

dmuon_rc dmuon_backend_parse(const char *text, dmuon_backend *out)
{
    for (int b = 0; b < DMUON_BACKEND_COUNT; b++)
        if (text && !strcasecmp(text, dmuon_backend_name((dmuon_backend)b))) {
            *out = (dmuon_backend)b;
            return DMUON_OK;
        }
    return DMUON_FAIL(DMUON_EINVAL, "backend '%s': expected mpi, nccl or nccl-dev",
                      text ? text : "");
}

const dmuon_comm_ops *dmuon_comm_backend(dmuon_backend b)
{
    switch (b) {
    case DMUON_BACKEND_MPI: return &dmuon_mpi_ops;
#ifdef DMUON_HAVE_NCCL
    case DMUON_BACKEND_NCCL: return &dmuon_nccl_ops;
#endif
#ifdef DMUON_HAVE_NCCL_DEV
    case DMUON_BACKEND_NCCL_DEV: return &dmuon_nccl_dev_ops;
#endif
    default: return NULL;
    }
}

/* Why b is not built, for the messages. */
static const char *missing_why(dmuon_backend b)
{
#ifndef DMUON_HAVE_NCCL
    (void)b;
    return "this dmuon was built without GPU support (CUDA toolkit and NCCL not found at "
           "build time)";
#else
    return b == DMUON_BACKEND_NCCL_DEV ? "this dmuon was built with an NCCL older than 2.30, "
                                         "without the device API (see make nccl-wheel)"
                                       : "unknown backend";
#endif
}

dmuon_rc dmuon_backend_check(dmuon_backend b)
{
    if (b == DMUON_BACKEND_MPI)
        return DMUON_OK;
    if (!dmuon_comm_backend(b))
        return DMUON_FAIL(DMUON_EUNSUPPORTED, "the %s backend: %s", dmuon_backend_name(b),
                          missing_why(b));
#ifdef DMUON_HAVE_NCCL
    DMUON_TRY(dmuon_nccl_gpu_check(dmuon_backend_name(b)));
#endif
    return DMUON_OK;
}

dmuon_rc dmuon_comm_unsupported(const dmuon_comm_ops *ops, const char *what, const char *file,
                                int line)
{
    return dmuon_err_set(DMUON_EUNSUPPORTED, file, line, "%s: not offered by the %s backend",
                         what, ops->name);
}

dmuon_rc dmuon_comm_backend_get(dmuon_backend b, const char *what, const dmuon_comm_ops **out)
{
    *out = dmuon_comm_backend(b);
    if (!*out)
        return DMUON_FAIL(DMUON_EUNSUPPORTED, "%s: the %s backend: %s", what,
                          dmuon_backend_name(b), missing_why(b));
    return DMUON_OK;
}
