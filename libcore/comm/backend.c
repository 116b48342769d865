/*
 * backend.c — the table of communication backends (backend.h).  Adding a
 * backend is one entry here plus its own files.
 */
#include "backend.h"

#include "mpi_backend.h"

const dmuon_comm_ops dmuon_mpi_ops = {
    .name = "mpi",
    .symm_alloc = dmuon_mpi_symm_alloc,
    .symm_free = dmuon_mpi_symm_free,
    .group_ctrl_bytes = dmuon_mpi_group_ctrl_bytes,
    .group_create = dmuon_mpi_group_create,
    .group_free = dmuon_mpi_group_free,
    .allgatherv = dmuon_mpi_allgatherv,
    .reduce_scatterv = dmuon_mpi_reduce_scatterv,
    .publish_create = dmuon_mpi_publish_create,
    .publish_free = dmuon_mpi_publish_free,
    .publish_begin = dmuon_mpi_publish_begin,
    .publish_post = dmuon_mpi_publish_post,
    .publish_progress = dmuon_mpi_publish_progress,
    .publish_wait = dmuon_mpi_publish_wait,
    .publish_end = dmuon_mpi_publish_end,
    .publish_flag = dmuon_mpi_publish_flag,
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

const dmuon_comm_ops *dmuon_comm_backend(dmuon_backend b)
{
    return b == DMUON_BACKEND_MPI ? &dmuon_mpi_ops : NULL;
}

dmuon_rc dmuon_comm_backend_get(dmuon_backend b, const char *what, const dmuon_comm_ops **out)
{
    *out = dmuon_comm_backend(b);
    if (!*out)
        return DMUON_FAIL(DMUON_EUNSUPPORTED, "%s: the %s backend is not in this build (built: "
                          "mpi)", what, dmuon_backend_name(b));
    return DMUON_OK;
}
