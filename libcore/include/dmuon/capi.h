/*
 * dmuon/capi.h — a flat C ABI over dmuon/runtime.h and dmuon/plan.h for
 * foreign-function callers (ctypes, cffi) that cannot build C structs or
 * name MPI handles: options are opaque objects set by key and string value,
 * communicators travel as Fortran handles (MPI_Comm_c2f, mpi4py's
 * Comm.py2f()), and the error message is read with dmuon_errmsg (dmuon/rc.h).
 * Every function returning dmuon_rc records its message as libcore does.
 * The Python package python/dmuon binds to this header; nothing here is
 * needed by C trainers.  Not thread-safe (like the runtime).
 */
#ifndef DMUON_CAPI_H
#define DMUON_CAPI_H

#include <stdint.h>

#include "dmuon/plan.h"
#include "dmuon/rc.h"
#include "dmuon/runtime.h"

/* ------------------------------------------------------------------ MPI -- */

/* Initialises MPI when nobody has (MPI_Init_thread asking for
 * MPI_THREAD_SERIALIZED; *initialised = 1 then, 0 when MPI was already up,
 * e.g. by mpi4py) and gives MPI_COMM_WORLD's rank and size.  A process not
 * started by mpirun becomes a world of one (Open MPI's singleton).  Errors:
 * DMUON_ECOMM (MPI_Init_thread failed, or MPI was already finalized). */
dmuon_rc dmuon_capi_mpi_init(int *initialised, int *rank, int *size);

/* MPI_Finalize if MPI is initialised and not finalized; call only when
 * dmuon_capi_mpi_init initialised it, after every runtime is freed. */
void dmuon_capi_mpi_finalize(void);

/* Ends every process of MPI_COMM_WORLD at once with exit status code
 * (MPI_Abort), for a trainer ending on an error of one rank: the other
 * ranks stop instead of waiting in a collective until their deadline (the
 * Python package calls it from its sys.excepthook, as `python -m mpi4py`
 * does).  The one libdmuon call that ends the process, and only when
 * called.  Does not return when MPI is initialised and not finalized;
 * otherwise changes nothing and returns DMUON_ECOMM. */
dmuon_rc dmuon_capi_abort(int code);

/* MPI_COMM_WORLD as a Fortran handle (MPI_Comm_c2f). */
int dmuon_capi_comm_world(void);

/* Rank and size of the communicator with Fortran handle fcomm.  Errors:
 * DMUON_ECOMM. */
dmuon_rc dmuon_capi_comm_info(int fcomm, int *rank, int *size);

/* The nodes of the communicator with Fortran handle fcomm as the runtime
 * will see them (dmuon_topo_init; collective over the communicator):
 * ranks_per_node > 0 makes virtual nodes of that many ranks, 0 reads
 * $DMUON_RANKS_PER_NODE, else MPI_COMM_TYPE_SHARED.  Gives *nodes (R) and
 * *per_node (K).  Errors: those of dmuon_topo_init. */
dmuon_rc dmuon_capi_comm_nodes(int fcomm, int ranks_per_node, int *nodes, int *per_node);

/* Sums n doubles in place over the communicator (dmuon_ctl_allreduce_f64,
 * bounded by $DMUON_DEADLINE_MS or the default deadline; collective): for a
 * trainer's log (the mean loss over ranks).  0 ≤ n ≤ DMUON_CTL_MAX_COUNT.
 * Errors: DMUON_EINVAL (n), DMUON_ETIMEOUT, DMUON_ECOMM. */
dmuon_rc dmuon_capi_allreduce_sum(int fcomm, double *buf, size_t n);

/* ------------------------------------------------------------- planning -- */

typedef struct dmuon_capi_plan_opts dmuon_capi_plan_opts;

/* New planning options holding dmuon_plan_opts_init's defaults and no role
 * patterns; free with dmuon_capi_plan_opts_free (accepts NULL).  Errors:
 * DMUON_ENOMEM. */
dmuon_rc dmuon_capi_plan_opts_new(dmuon_capi_plan_opts **out);
void dmuon_capi_plan_opts_free(dmuon_capi_plan_opts *o);

/* Sets one option from its string value.  Keys (the dmuon-plan flag names
 * with '_'): nodes, gpus_per_node (integers >= 1), sharding (fsdp|hsdp),
 * zero (2|3), strategy (lpt|round-robin), cost (db|flops|elements|m2n),
 * cost_db (path of the cost database), device (the device name its rows
 * are stored under), model_path (recorded in the plan), epsilon (a finite
 * number; dmuon_plan_build rejects < 0), byte_cap, layer_spread,
 * column_balance, fuse_experts (0|1), small_unit_bytes (a size in
 * dmuon_size_parse's grammar: 65536, 64K, 1M),
 * param_dtype (bf16|f32|f16), root (auto|one|split: the layers of the
 * tensors outside numbered blocks, dmuon_model_opts.root; a built model's
 * auto is one "(root)"), muon, adamw (one fnmatch pattern each call,
 * appended; the caller's patterns win over the default role rules).  The
 * strings are copied; a failing call leaves the options unchanged.
 * Errors: DMUON_EINVAL naming the key and the value expected (unknown key,
 * bad value, more than 64 patterns), DMUON_ENOMEM. */
dmuon_rc dmuon_capi_plan_opts_set(dmuon_capi_plan_opts *o, const char *key, const char *value);

/* Builds the model of n tensors (names[i], ndims[i], its dimensions the next
 * ndims[i] entries of dims, dtypes[i] a dtype name "f32", "bf16", ... —
 * dmuon_dtype_parse) in forward order with dmuon_model_build (source names
 * the origin in messages) and plans it under o (NULL: the defaults) with
 * dmuon_plan_build.  *out owns the plan (dmuon_plan_free); *model_out, if
 * not NULL, receives the model (dmuon_model_free), else it is freed.
 * Errors: those of dmuon_model_build and dmuon_plan_build, DMUON_EINVAL
 * (n == 0, an ndims[i] outside 1..DMUON_MODEL_MAX_DIMS). */
dmuon_rc dmuon_capi_plan_tensors(const char *source, size_t n, const char *const *names,
                                 const int *ndims, const int64_t *dims,
                                 const char *const *dtypes, const dmuon_capi_plan_opts *o,
                                 dmuon_plan **out, dmuon_model **model_out);

/* The model of n tensors as dmuon_capi_plan_tensors builds it, with the role
 * patterns of o (NULL: none), for dmuon_plan_match_model.  Errors: as
 * dmuon_model_build. */
dmuon_rc dmuon_capi_model_tensors(const char *source, size_t n, const char *const *names,
                                  const int *ndims, const int64_t *dims,
                                  const char *const *dtypes, const dmuon_capi_plan_opts *o,
                                  dmuon_model **out);

/* Parameter i of plan p (i < the count of dmuon_plan_params): its name
 * (valid while p lives), layer index, role (1 Muon, 0 AdamW) and element
 * count.  Errors: DMUON_EINVAL (i out of range). */
dmuon_rc dmuon_capi_plan_param(const dmuon_plan *p, size_t i, const char **name, int32_t *layer,
                               int *role, int64_t *numel);

/* Parameter i's Muon matrices: their count and the real matrix m x n (out
 * x in; dmuon_plan_param of dmuon/plan.h); 0, 0, 0 for an AdamW parameter.
 * Errors: DMUON_EINVAL (i out of range). */
dmuon_rc dmuon_capi_plan_param_matrix(const dmuon_plan *p, size_t i, int64_t *matrices,
                                      int64_t *m, int64_t *n);

/* Parameter count of plan p. */
size_t dmuon_capi_plan_param_count(const dmuon_plan *p);

/* --------------------------------------------------------------- runtime -- */

typedef struct dmuon_capi_rt_opts dmuon_capi_rt_opts;

/* New runtime options holding dmuon_rt_opts_init's defaults; free with
 * dmuon_capi_rt_opts_free (accepts NULL).  Errors: DMUON_ENOMEM. */
dmuon_rc dmuon_capi_rt_opts_new(dmuon_capi_rt_opts **out);
void dmuon_capi_rt_opts_free(dmuon_capi_rt_opts *o);

/* Sets one runtime option from its string value.  Keys: line (A|B|C|D),
 * zero (2|3, 0 = the plan's), ranks_per_node (>= 0), deadline_ms (>= 0),
 * prefetch (0|1), owner_parts (auto|persistent|per-layer, dmuon/layout.h),
 * momentum, nesterov (0|1), weight_decay (Muon λ),
 * adjust_lr (match_rms_adamw: 0.2·√max(m, n); original: √max(1, m/n)),
 * beta1, beta2, eps, adamw_weight_decay, clip_norm, ns (a Newton–Schulz
 * variant, dmuon_ns_opts_set_variant); a failing call leaves the options
 * unchanged.  Values are checked by
 * dmuon_optim_opts_check at dmuon_capi_rt_create.  Errors: DMUON_EINVAL
 * naming the key and what was expected. */
dmuon_rc dmuon_capi_rt_opts_set(dmuon_capi_rt_opts *o, const char *key, const char *value);

/* dmuon_rt_create(plan, the communicator of Fortran handle fcomm, o) after
 * dmuon_optim_opts_check.  o NULL: the defaults.  Errors: those of
 * dmuon_optim_opts_check and dmuon_rt_create. */
dmuon_rc dmuon_capi_rt_create(const dmuon_plan *plan, int fcomm, const dmuon_capi_rt_opts *o,
                              dmuon_rt **out);

/* dmuon_rt_step with the two learning rates as doubles. */
dmuon_rc dmuon_capi_rt_step(dmuon_rt *rt, double muon_lr, double adamw_lr);

/* The runtime's figures (dmuon_rt_get_stats) as 15 doubles, in this order:
 * pool_bytes, ctrl_bytes, work_bytes, window_bytes, state_bytes,
 * total_bytes, optim_s, ns_s, comm_wait_s, publish_wait_s, gather_s,
 * reduce_s, ns_matrices, steps (dmuon_rt_steps), grad_norm
 * (dmuon_rt_grad_norm); dmuon_capi_rt_stats_name gives each name.  out
 * holds at least DMUON_CAPI_STATS doubles. */
#define DMUON_CAPI_STATS 15
void dmuon_capi_rt_stats(const dmuon_rt *rt, double *out);

/* The name of entry i of dmuon_capi_rt_stats ("pool_bytes", ...: the
 * dmuon_rt_stats field, "steps", "grad_norm"), a static string; NULL for i
 * outside [0, DMUON_CAPI_STATS). */
const char *dmuon_capi_rt_stats_name(int i);

#endif
