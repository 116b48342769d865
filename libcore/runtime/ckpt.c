/*
 * ckpt.c — placeholder until the checkpoint module is in: every call fails
 * with DMUON_EUNSUPPORTED and says so.
 */
#include "dmuon/ckpt.h"

static dmuon_rc missing(void)
{
    return DMUON_FAIL(DMUON_EUNSUPPORTED, "checkpoints are not available in this build");
}
dmuon_rc dmuon_ckpt_save(MPI_Comm c, const char *d, const dmuon_ckpt_meta *m,
                         const dmuon_ckpt_param *p, size_t np, const dmuon_ckpt_piece *pc, size_t n)
{
    return missing();
}
dmuon_rc dmuon_ckpt_load(MPI_Comm c, const char *d, const dmuon_ckpt_meta *e,
                         const dmuon_ckpt_param *p, size_t np, dmuon_ckpt_piece *pc, size_t n,
                         dmuon_ckpt_meta *o)
{
    return missing();
}
dmuon_rc dmuon_ckpt_export(MPI_Comm c, const char *path, const dmuon_ckpt_param *p, size_t np,
                           const dmuon_ckpt_piece *pc, size_t n)
{
    return missing();
}
