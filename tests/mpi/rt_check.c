/*
 * rt_check.c — the runtime against an independent single-process reference.
 *
 * A small llama-shaped model (embedding, L blocks of q/k/v/o, gate/up/down,
 * two norms, one block with a 3-D expert stack; final norm, head; fused
 * experts stored [in, out]: block 0 a llama4_text-style gate_up_proj
 * [E, H, 2I] (gate | up halves) and down_proj [E, I, H], block 2 a
 * gpt_oss-style interleaved gate_up_proj with its bias) is planned
 * for the run's cluster; every rank feeds the runtime synthetic gradients
 * that are multiples of 2^-10 with small numerators, so every sum over ranks
 * and micro-batches is exact in binary32 in any order.  The reference sums
 * them itself and runs whole-matrix Muon (dmuon_muon_update) and AdamW
 * (dmuon_adamw_update) on the full parameters — the owner-only runtime must
 * then give the same bits: every parameter gathered by pre_forward equals
 * the reference's master rounded to the plan's parameter dtype, exactly
 * (tolerance 0, stated).  Line B orthogonalises the same Nesterov directions
 * on every rank, line A runs AdamW everywhere; the reference follows the line.
 * The reference takes each real out x in matrix out of its storage with its
 * own index arithmetic (dmuon/model.h, "Muon matrices"), updates it, and
 * puts it back.
 *
 * Where the runtime's memory is: --backend/--device pick the runtime's
 * (mpi/cpu by default; nccl or nccl-dev with cuda on a GPU machine), and
 * --check-table runs device cpu with the checking table of the runtime's
 * device operations (libcore/runtime/elem.h), whose disguised addresses
 * fault on any load or store the runtime makes past the table.  This
 * trainer reads the weights and writes the gradients through host copies
 * in either case (mem_in / mem_out below), as a trainer with device memory
 * would on its stream.
 *
 * Prints per-check lines, a digest of every gathered weight (for the
 * two-runs-identical check of the driver script) and "N passed, M failed".
 * Exit 1 on any failure, 2 on usage errors.
 */
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "dmuon/bf16.h"
#include "dmuon/model.h"
#include "dmuon/optim.h"
#include "dmuon/plan.h"
#include "dmuon/runtime.h"
#include "runtime/elem.h"   /* the checking table (tests only) */

#if DMUON_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif
#if DMUON_HAVE_NCCL
#include <nccl.h>
#endif

static int g_rank, g_pass, g_fail;

/* The runtime's memory as this trainer reaches it: 0 host, 1 the checking
 * table's disguised host addresses, 2 CUDA device memory. */
static int g_mem;
static float *g_host;        /* the host copy of one parameter */
static int64_t g_host_cap;

/* --handoff id|comm (NCCL backends): this program, as a trainer that runs
 * NCCL itself, distributes an ncclUniqueId over MPI_COMM_WORLD and gives
 * the runtime the id, or a communicator it made from it; the runtime then
 * gets MPI_COMM_NULL and makes no MPI call.  0 when set up (or not asked),
 * else an error printed. */
static int handoff_setup(const char *mode, dmuon_rt_opts *ro, int size, int per_node,
                         void **own_comm)
{
    *own_comm = NULL;
    if (!mode)
        return 0;
#if DMUON_HAVE_NCCL
    static ncclUniqueId id;
    if (g_rank == 0 && ncclGetUniqueId(&id) != ncclSuccess) {
        fprintf(stderr, "rt_check: ncclGetUniqueId failed\n");
        return 1;
    }
    MPI_Bcast(&id, (int)sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
    ro->nccl_rank = g_rank;
    ro->nccl_size = size;
    if (strcmp(mode, "id") == 0) {
        ro->nccl_id = &id;
        return 0;
    }
    int count = 0;
    ncclComm_t c = NULL;
    if (strcmp(mode, "comm") != 0 || cudaGetDeviceCount(&count) != cudaSuccess || count < 1 ||
        cudaSetDevice(g_rank % per_node % count) != cudaSuccess ||
        ncclCommInitRank(&c, size, id, g_rank) != ncclSuccess) {
        fprintf(stderr, "rt_check: --handoff %s: expected id or comm, with a GPU and NCCL\n", mode);
        return 1;
    }
    ro->nccl_comm = c;
    *own_comm = c;
    return 0;
#else
    (void)ro;
    (void)size;
    (void)per_node;
    fprintf(stderr, "rt_check: --handoff %s: this build has no NCCL\n", mode);
    return 1;
#endif
}

/* A host copy of n floats at the runtime's pointer p (host: p itself). */
static float *mem_in(const float *p, int64_t n)
{
    if (g_mem == 0)
        return (float *)p;
    if (n > g_host_cap) {
        free(g_host);
        g_host = malloc((size_t)n * sizeof *g_host);
        g_host_cap = g_host ? n : 0;
        if (!g_host) {
            fprintf(stderr, "rt_check: out of memory\n");
            exit(2);
        }
    }
    if (g_mem == 1)
        memcpy(g_host, rt_elem_check_reveal(p), (size_t)n * sizeof *g_host);
#if DMUON_HAVE_CUDA
    else if (cudaMemcpy(g_host, p, (size_t)n * sizeof *g_host, cudaMemcpyDeviceToHost) != cudaSuccess)
        fprintf(stderr, "rt_check: rank %d: cudaMemcpy from the device failed\n", g_rank);
#endif
    return g_host;
}

/* Writes the host copy h of n floats back to the runtime's pointer p. */
static void mem_out(float *p, const float *h, int64_t n)
{
    if (g_mem == 1)
        memcpy(rt_elem_check_reveal(p), h, (size_t)n * sizeof *h);
#if DMUON_HAVE_CUDA
    else if (g_mem == 2 && cudaMemcpy(p, h, (size_t)n * sizeof *h, cudaMemcpyHostToDevice) != cudaSuccess)
        fprintf(stderr, "rt_check: rank %d: cudaMemcpy to the device failed\n", g_rank);
#endif
}

static int g_stall_mode;

/* --fault: what one rank (--fault-rank, default the last) does wrong at
 * the second step, and the test-only slow fsync: this program's fsync
 * replaces the C library's for the whole process (the library's checkpoint
 * code included), so one rank can be made slow without a hook in the
 * library. */
static const char *g_fault;
static int g_fault_rank = -1;   /* --fault-rank; default the last */
static int g_slow_fsync_ms;

int fsync(int fd)
{
    if (g_slow_fsync_ms > 0) {
        struct timespec ts = {g_slow_fsync_ms / 1000, (long)(g_slow_fsync_ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
    }
    return (int)syscall(SYS_fsync, fd);
}

static int fault_is(const char *k) { return g_fault && strcmp(g_fault, k) == 0; }

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}


static void check(int ok, const char *fmt, ...)
{
    if (g_stall_mode && !ok) {   /* peers may be gone: no collective check */
        char line[1024];
        va_list ap;
        va_start(ap, fmt);
        int n = snprintf(line, sizeof line, "rank %d: FAIL ", g_rank);
        n += vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
        va_end(ap);
        if (n > (int)sizeof line - 2)
            n = (int)sizeof line - 2;
        line[n++] = '\n';
        /* one write: lines of several ranks never interleave */
        if (write(2, line, (size_t)n) < 0)
            _exit(4);
        _exit(3);
    }
    int all = 0;
    MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
    if (all)
        g_pass++;
    else
        g_fail++;
    if (g_rank == 0 && (!all || getenv("RT_CHECK_VERBOSE"))) {
        va_list ap;
        va_start(ap, fmt);
        printf("%s ", all ? "ok  " : "FAIL");
        vprintf(fmt, ap);
        printf("\n");
        va_end(ap);
    }
}

/* --------------------------------------------------------------- model -- */

#define H 32
#define FF 48
#define KV 16
#define V 64
#define E 3

static size_t add(dmuon_tensor_spec *t, size_t n, const char *name, int64_t a, int64_t b,
                  int64_t c)
{
    t[n].name = strdup(name);
    t[n].ndim = c ? 3 : b ? 2 : 1;
    t[n].shape[0] = a;
    t[n].shape[1] = b;
    t[n].shape[2] = c;
    t[n].dtype = DMUON_BF16;
    return n + 1;
}

static size_t make_specs(dmuon_tensor_spec *t, int layers)
{
    size_t n = 0;
    char s[128];
    n = add(t, n, "model.embed_tokens.weight", V, H, 0);
    for (int l = 0; l < layers; l++) {
#define P(suffix, a, b, c)                                              \
    snprintf(s, sizeof s, "model.layers.%d.%s", l, suffix);             \
    n = add(t, n, s, a, b, c)
        P("input_layernorm.weight", H, 0, 0);
        P("self_attn.q_proj.weight", H, H, 0);
        P("self_attn.k_proj.weight", KV, H, 0);
        P("self_attn.v_proj.weight", KV, H, 0);
        P("self_attn.o_proj.weight", H, H, 0);
        P("post_attention_layernorm.weight", H, 0, 0);
        if (l == 1) {
            P("mlp.experts.down_proj", E, H, FF / 2);
            P("mlp.experts.up_proj", E, FF / 2, H);
        } else if (l == 2) {   /* gpt_oss: [in, out], gate/up interleaved (the bias tells) */
            P("mlp.experts.gate_up_proj", E, H, FF);
            P("mlp.experts.gate_up_proj_bias", E, FF, 0);
            P("mlp.experts.down_proj", E, FF / 2, H);
        } else {
            P("mlp.gate_proj.weight", FF, H, 0);
            P("mlp.up_proj.weight", FF, H, 0);
            P("mlp.down_proj.weight", H, FF, 0);
        }
        if (l == 0) {   /* llama4_text: [in, out], gate | up halves of the last dimension */
            P("feed_forward.experts.gate_up_proj", E, H, FF);
            P("feed_forward.experts.down_proj", E, FF / 2, H);
        }
#undef P
    }
    n = add(t, n, "model.norm.weight", H, 0, 0);
    n = add(t, n, "lm_head.weight", V, H, 0);
    return n;
}

/* Deterministic values: a 64-bit mix of the arguments. */
static uint64_t mix(uint64_t a, uint64_t b, uint64_t c, uint64_t d, uint64_t e)
{
    uint64_t h = 0x9e3779b97f4a7c15ull;
    uint64_t v[5] = {a, b, c, d, e};
    for (int i = 0; i < 5; i++) {
        h ^= v[i] + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
        h *= 0xff51afd7ed558ccdull;
        h ^= h >> 33;
    }
    return h;
}

static float grad_value(int rank, int step, int micro, int param, int64_t i, int seed)
{
    return (float)((int)(mix((uint64_t)rank, (uint64_t)step, (uint64_t)micro,
                             (uint64_t)param * 1000003u + (uint64_t)i, (uint64_t)seed) % 17) - 8) /
           1024.0f;
}

/* What rank `rank` of `size` adds for element i of parameter `param`.  With
 * global gradients one rank, chosen per element, gives the whole value, so
 * the sum is the same on any number of ranks (checkpoints across rank
 * counts); otherwise every rank gives its own, and rank 1 gives nothing to
 * the first block's input norm. */
static int g_global, g_zero;
static double g_clip;

static float contrib(int rank, int size, int step, int micro, int param, int64_t i, int seed,
                     const char *name)
{
    if (g_zero)
        return 0.0f;
    if (g_global) {
        int sel = (int)(mix(3, (uint64_t)step, (uint64_t)micro, (uint64_t)param, (uint64_t)i) %
                        (uint64_t)size);
        return rank == sel ? grad_value(0, step, micro, param, i, seed) : 0.0f;
    }
    if (rank == 1 && strstr(name, "layers.0.input_layernorm"))
        return 0.0f;
    return grad_value(rank, step, micro, param, i, seed);
}

static float init_value(int param, int64_t i, int seed)
{
    return (float)((int)(mix(7, (uint64_t)param, (uint64_t)i, 11, (uint64_t)seed) % 2001) - 1000) /
           16384.0f;
}

/* Storage element of element (r, c) of Muon matrix j (out x in, m x n) of
 * pp: plain row-major blocks; transposed blocks [in][out]; a fused
 * [E, in, 2m] gate_up_proj with expert e = j / 2 and gate (j even) / up (j
 * odd) in the halves [0, m) / [m, 2m) or the even / odd columns. */
static int64_t ref_at(const dmuon_param *pp, int64_t j, int64_t r, int64_t c)
{
    int64_t m = pp->mat_m, n = pp->mat_n, e = j / 2, up = j % 2;
    switch (pp->layout) {
    case DMUON_MAT_HALVES: return (e * n + c) * 2 * m + up * m + r;
    case DMUON_MAT_INTERLEAVED: return (e * n + c) * 2 * m + 2 * r + up;
    default: return pp->transposed ? j * m * n + c * m + r : j * m * n + r * n + c;
    }
}

/* The reference's step t (its tt-th update): exact sums of every rank's
 * gradients, then whole-matrix Muon / AdamW on the full parameters. */
static void ref_step(const dmuon_model *model, int t, int size, int micro, int seed,
                     dmuon_line ln, const dmuon_optim_opts *o, dmuon_ns *ns, int64_t tt,
                     float **ref_w, float **ref_m, float **ref_v, float **ref_g)
{
    const double muon_lr = 0.02, adamw_lr = 0.003;
    size_t np = dmuon_model_param_count(model);
    for (size_t p = 0; p < np; p++) {
        const dmuon_param *pp = dmuon_model_param(model, p);
        for (int64_t i = 0; i < pp->numel; i++) {
            double s = 0;
            for (int r = 0; r < size; r++)
                for (int k = 0; k < micro; k++)
                    s += contrib(r, size, t, k, (int)p, i, seed, pp->name);
            ref_g[p][i] = (float)s;
        }
    }
    if (g_clip > 0) {   /* global-norm clipping, the norm summed in double */
        double sq = 0;
        for (size_t p = 0; p < np; p++)
            for (int64_t i = 0; i < dmuon_model_param(model, p)->numel; i++)
                sq += (double)ref_g[p][i] * ref_g[p][i];
        double norm = sqrt(sq);
        if (norm > g_clip) {
            float c = (float)(g_clip / (norm + 1e-6));
            for (size_t p = 0; p < np; p++)
                for (int64_t i = 0; i < dmuon_model_param(model, p)->numel; i++)
                    ref_g[p][i] *= c;
        }
    }
    for (size_t p = 0; p < np; p++) {
        const dmuon_param *pp = dmuon_model_param(model, p);
        bool muon = pp->role == DMUON_ROLE_MUON && ln != DMUON_LINE_A;
        if (!muon) {
            double decay = pp->role == DMUON_ROLE_MUON ? o->muon_weight_decay
                                                       : o->adamw_weight_decay;
            dmuon_adamw_update(o, adamw_lr, decay, tt, pp->numel, ref_w[p], ref_m[p], ref_v[p],
                               ref_g[p]);
            continue;
        }
        int64_t mn = pp->mat_m * pp->mat_n;
        float *w = malloc((size_t)mn * 4), *mo = malloc((size_t)mn * 4), *g = malloc((size_t)mn * 4);
        for (int64_t a = 0; a < pp->matrices; a++) {
            for (int64_t r = 0; r < pp->mat_m; r++)
                for (int64_t c = 0; c < pp->mat_n; c++) {
                    int64_t k = ref_at(pp, a, r, c);
                    w[r * pp->mat_n + c] = ref_w[p][k];
                    mo[r * pp->mat_n + c] = ref_m[p][k];
                    g[r * pp->mat_n + c] = ref_g[p][k];
                }
            dmuon_muon_update(ns, o, muon_lr, pp->mat_m, pp->mat_n, w, mo, g, NULL);
            for (int64_t r = 0; r < pp->mat_m; r++)
                for (int64_t c = 0; c < pp->mat_n; c++) {
                    int64_t k = ref_at(pp, a, r, c);
                    ref_w[p][k] = w[r * pp->mat_n + c];
                    ref_m[p][k] = mo[r * pp->mat_n + c];
                }
        }
        free(w);
        free(mo);
        free(g);
    }
}

/* ------------------------------------------------------------- faults -- */

/* Every rank got the same code. */
static int same_everywhere(int v)
{
    int lo = v, hi = v;
    MPI_Allreduce(&v, &lo, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(&v, &hi, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    return lo == hi;
}

/* Right after a call that timed out: fills 64 KiB of stack below this
 * frame (where the library's frames were) with a pattern and waits in a
 * world barrier, during which the late rank arrives and completes the calls
 * the others abandoned.  True when no byte changed: the library posted
 * those calls from memory of its own, not from its stack. */
__attribute__((noinline)) static bool stack_untouched(void)
{
    volatile unsigned char buf[65536];
    for (size_t i = 0; i < sizeof buf; i++)
        buf[i] = 0xA5;
    MPI_Barrier(MPI_COMM_WORLD);
    size_t changed = 0;
    for (size_t i = 0; i < sizeof buf; i++)
        changed += buf[i] != 0xA5;
    return changed == 0;
}

/* The step with --fault's injection: it fails with the same code on every
 * rank, the state is byte-identical to before, the norm reads NaN and a
 * retry without a micro-batch is refused.  True when the run can go on
 * (the step failed cleanly; a stall leaves the runtime unusable). */
static bool fault_failed_step(dmuon_rt *rt, const dmuon_rt_lrs *lrs, int size, int deadline,
                              const char *param)
{
    bool stall = fault_is("stall");
    uint64_t before = dmuon_rt_state_digest(rt);
    int64_t steps = dmuon_rt_steps(rt);
    if (stall && g_rank == g_fault_rank) {   /* comes to the step late */
        struct timespec ts = {deadline * 2 / 1000, (long)(deadline * 2 % 1000) * 1000000L};
        nanosleep(&ts, NULL);
    }
    dmuon_rc rc = dmuon_rt_step(rt, lrs);
    if (stall)
        check(stack_untouched(), "stall: the abandoned calls left rank %d's stack alone", g_rank);
    dmuon_rc want = stall ? DMUON_ETIMEOUT : DMUON_ENUMERIC;
    check(same_everywhere((int)rc), "%s: every rank returns the same code (rank %d: %s)", g_fault,
          g_rank, dmuon_rc_name(rc));
    check(rc == want && (stall || strstr(dmuon_errmsg(), param)),
          "%s: the step fails with %s%s%s (%s)", g_fault, dmuon_rc_name(want),
          stall ? "" : " naming ", stall ? "" : param, dmuon_errmsg());
    check(dmuon_rt_state_digest(rt) == before && dmuon_rt_steps(rt) == steps,
          "%s: masters, momenta, moments, weights and the step count are byte-identical to "
          "before the failed step", g_fault);
    check(isnan(dmuon_rt_grad_norm(rt)), "%s: the failed step's gradient norm reads NaN (%g)",
          g_fault, dmuon_rt_grad_norm(rt));
    rc = dmuon_rt_step(rt, lrs);
    check(rc == (stall ? DMUON_ECOMM : DMUON_EINVAL) && same_everywhere((int)rc),
          "%s: a retry without a micro-batch is refused on every rank (%s)", g_fault,
          dmuon_errmsg());
    check(dmuon_rt_state_digest(rt) == before, "%s: the refused retry changed nothing", g_fault);
    return !stall;
}

/* ----------------------------------------------- discarded passes -- */

/* --eval: before every training micro-batch, a forward-only pass (the root
 * bracket around the blocks, as the training forward) ended by
 * dmuon_rt_discard.  With `partial` it also begins the backward (the root
 * and the last block, whose gradients are written with a large value and
 * reduced) and has a hook refused, before discarding: the step's
 * accumulated gradients are then dropped, so this is done only before the
 * step's first micro-batch, where nothing was accumulated yet (before the
 * first step, when the hooks are recorded, and after it).  The run
 * must still match the reference bit for bit.  False on a hook error. */
static bool eval_pass(dmuon_rt *rt, const dmuon_model *model, size_t L, size_t np, bool partial)
{
    for (size_t l = 0; l < L; l++) {
        if (dmuon_rt_pre_forward(rt, l) != DMUON_OK ||
            (l > 0 && dmuon_rt_post_forward(rt, l) != DMUON_OK)) {
            check(0, "eval: forward of layer %zu: %s", l, dmuon_errmsg());
            return false;
        }
    }
    if (dmuon_rt_post_forward(rt, 0) != DMUON_OK) {
        check(0, "eval: post_forward(root): %s", dmuon_errmsg());
        return false;
    }
    if (partial) {
        check(dmuon_rt_post_forward(rt, 1) == DMUON_EINVAL, "eval: a hook out of order is "
              "refused (%s)", dmuon_errmsg());
        if (dmuon_rt_pre_backward(rt, 0) != DMUON_OK || dmuon_rt_pre_backward(rt, L - 1) != DMUON_OK) {
            check(0, "eval: pre_backward: %s", dmuon_errmsg());
            return false;
        }
        for (size_t p = 0; p < np; p++) {
            const dmuon_param *pp = dmuon_model_param(model, p);
            float *g = dmuon_rt_grad(rt, dmuon_rt_param_index(rt, pp->name));
            if (!g)
                continue;
            float *h = mem_in(g, pp->numel);
            for (int64_t i = 0; i < pp->numel; i++)
                h[i] = 1e3f;
            mem_out(g, h, pp->numel);
        }
        if (dmuon_rt_post_backward(rt, L - 1) != DMUON_OK) {
            check(0, "eval: post_backward: %s", dmuon_errmsg());
            return false;
        }
    }
    dmuon_rc rc = dmuon_rt_discard(rt);
    check(rc == DMUON_OK && same_everywhere((int)rc), "eval: %s pass discarded on every rank (%s)",
          partial ? "a begun backward's" : "a forward-only", rc ? dmuon_errmsg() : "ok");
    return rc == DMUON_OK;
}

/* ------------------------------------------------------- held blocks -- */

/* --hold N: in the first micro-batch of the step after the layout was
 * packed, each block's post_forward and post_backward comes only after up
 * to N later blocks began (their ends are held back, oldest first out), so
 * the micro-batch releases in another order than the recorded one.  An
 * acquisition whose recorded range is still held must be refused (nothing
 * changed by the refusal); the caller then ends its oldest held block and
 * retries.  Held layers' weights must stay intact and the run must still
 * match the reference (the held gradients were not overwritten). */
typedef struct {
    size_t held[64];
    int n, cap;
    int refused, refused_other, bad_weights;
} hold_state;

static int hold_ends(dmuon_rt *rt, hold_state *h, bool backward)
{
    size_t l = h->held[0];
    memmove(h->held, h->held + 1, (size_t)(--h->n) * sizeof *h->held);
    dmuon_rc rc = backward ? dmuon_rt_post_backward(rt, l) : dmuon_rt_post_forward(rt, l);
    if (rc != DMUON_OK)
        check(0, "held %s of %zu: %s", backward ? "post_backward" : "post_forward", l,
              dmuon_errmsg());
    return rc == DMUON_OK;
}

/* The begin hook of layer l; refused while a held block occupies its
 * recorded range: the oldest held block ends and the hook runs again. */
static dmuon_rc hold_begin(dmuon_rt *rt, hold_state *h, size_t l, bool backward)
{
    for (;;) {
        dmuon_rc rc = backward ? dmuon_rt_pre_backward(rt, l) : dmuon_rt_pre_forward(rt, l);
        if (rc == DMUON_OK || !h->n)
            return rc;
        if (rc != DMUON_EINVAL || !strstr(dmuon_errmsg(), "still holds")) {
            h->refused_other++;
            return rc;
        }
        h->refused++;
        if (!hold_ends(rt, h, backward))
            return DMUON_ECHECK;
    }
}

/* The end hook of layer l, held back; the oldest held one ends when more
 * than cap are held. */
static int hold_end(dmuon_rt *rt, hold_state *h, size_t l, bool backward)
{
    h->held[h->n++] = l;
    return h->n <= h->cap || hold_ends(rt, h, backward);
}

/* Every held layer's weights still equal the reference (bitwise). */
static void hold_verify(dmuon_rt *rt, const hold_state *h, const dmuon_model *model,
                        float **ref_w, dmuon_dtype pdt)
{
    size_t np = dmuon_model_param_count(model);
    for (int k = 0; k < h->n; k++)
        for (size_t p = 0; p < np; p++) {
            const dmuon_param *pp = dmuon_model_param(model, p);
            if ((size_t)pp->layer != h->held[k])
                continue;
            const float *w = dmuon_rt_weights(rt, dmuon_rt_param_index(rt, pp->name));
            if (w)
                w = mem_in(w, pp->numel);
            for (int64_t i = 0; w && i < pp->numel; i++) {
                float want = pdt == DMUON_BF16 ? dmuon_bf16_to_f32(dmuon_f32_to_bf16(ref_w[p][i]))
                                               : ref_w[p][i];
                if (memcmp(&want, &w[i], 4) != 0) {
                    ((hold_state *)h)->bad_weights++;
                    break;
                }
            }
        }
}

/* --------------------------------------------------------------- main -- */

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int size;
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const char *line = "D", *sharding = "fsdp", *dtype = "bf16";
    int zero = 3, per_node = 2, steps = 3, micro = 2, layers = 3, seed = 1, recompute = 0,
        errors = 0, mismatch = 0, shape_scale = 0, stall = -1, deadline = 20000, start = 0, expect_load_error = 0;
    const char *save_dir = NULL, *load_dir = NULL, *export_path = NULL, *plan_out = NULL;
    const char *ns_variant = NULL, *resume_override = NULL;   /* resume checks */
    double momentum = -1;
    int load_only = 0, hold = 0, progress = 0, eval = 0;
    const char *backend = "mpi", *device = "cpu", *owner_parts = "auto";
    int check_table = 0;
    double tolerance = 0;   /* --tolerance: relative, for a GPU's Newton-Schulz */
    const char *handoff = NULL;
    void *own_nccl = NULL;
    int64_t small_unit = 0;
    static struct option lo[] = {{"line", 1, 0, 'l'},       {"sharding", 1, 0, 's'},
                                 {"zero", 1, 0, 'z'},       {"ranks-per-node", 1, 0, 'k'},
                                 {"steps", 1, 0, 't'},      {"micro", 1, 0, 'm'},
                                 {"layers", 1, 0, 'L'},     {"seed", 1, 0, 'S'},
                                 {"dtype", 1, 0, 'd'},      {"recompute", 0, 0, 'r'},
                                 {"small-unit-bytes", 1, 0, 'u'}, {"errors", 0, 0, 'e'}, {"mismatch", 0, 0, 'x'}, {"stall", 1, 0, 'X'}, {"global-grads", 0, 0, 'G'}, {"clip", 1, 0, 'C'}, {"zero-grads", 0, 0, 'Z'}, {"save", 1, 0, 'V'}, {"load", 1, 0, 'O'}, {"start", 1, 0, 'T'}, {"saved-ranks", 1, 0, 'R'}, {"export", 1, 0, 'E'}, {"expect-load-error", 0, 0, 'F'}, {"deadline-ms", 1, 0, 'D'}, {"shape-scale", 0, 0, 'Q'},
                                 {"fault", 1, 0, 'K'},              {"momentum", 1, 0, 'M'},
                                 {"ns-variant", 1, 0, 'N'},         {"resume-override", 1, 0, 'W'},
                                 {"load-only", 0, 0, 'Y'},          {"fault-rank", 1, 0, 'j'},
                                 {"backend", 1, 0, 'b'},            {"device", 1, 0, 'v'},
                                 {"check-table", 0, 0, 'c'},        {"tolerance", 1, 0, 'o'},
                                 {"handoff", 1, 0, 'n'},
                                 {"hold", 1, 0, 'H'},               {"progress", 0, 0, 'P'},
                                 {"eval", 0, 0, 'A'},               {"plan-out", 1, 0, 'p'},
                                 {"owner-parts", 1, 0, 'w'},
                                 {0, 0, 0, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        switch (c) {
        case 'l': line = optarg; break;
        case 's': sharding = optarg; break;
        case 'z': zero = atoi(optarg); break;
        case 'k': per_node = atoi(optarg); break;
        case 't': steps = atoi(optarg); break;
        case 'm': micro = atoi(optarg); break;
        case 'L': layers = atoi(optarg); break;
        case 'S': seed = atoi(optarg); break;
        case 'd': dtype = optarg; break;
        case 'r': recompute = 1; break;
        case 'u': small_unit = atoll(optarg); break;
        case 'e': errors = 1; break;
        case 'x': mismatch = 1; break;
        case 'X': stall = atoi(optarg); break;
        case 'D': deadline = atoi(optarg); break;
        case 'Q': shape_scale = 1; break;
        case 'G': g_global = 1; break;
        case 'C': g_clip = atof(optarg); break;
        case 'Z': g_zero = 1; break;
        case 'V': save_dir = optarg; break;
        case 'O': load_dir = optarg; break;
        case 'T': start = atoi(optarg); break;
        case 'R': break;   /* global gradients do not depend on the rank count */
        case 'E': export_path = optarg; break;
        case 'F': expect_load_error = 1; break;
        case 'K': g_fault = optarg; break;
        case 'j': g_fault_rank = atoi(optarg); break;
        case 'M': momentum = atof(optarg); break;
        case 'N': ns_variant = optarg; break;
        case 'W': resume_override = optarg; break;
        case 'Y': load_only = 1; break;
        case 'b': backend = optarg; break;
        case 'v': device = optarg; break;
        case 'c': check_table = 1; break;
        case 'o': tolerance = atof(optarg); break;
        case 'n': handoff = optarg; break;
        case 'H': hold = atoi(optarg); break;
        case 'P': progress = 1; break;
        case 'A': eval = 1; break;
        case 'p': plan_out = optarg; break;
        case 'w': owner_parts = optarg; break;
        default:
            if (g_rank == 0)
                fprintf(stderr, "usage: rt_check [--line A|B|C|D] [--sharding fsdp|hsdp] ...\n");
            MPI_Finalize();
            return 2;
        }
    }
    if (g_fault_rank < 0 || g_fault_rank >= size)
        g_fault_rank = size - 1;

    g_stall_mode = stall >= 0;
    dmuon_tensor_spec specs[256];
    size_t nspec = make_specs(specs, layers);
    dmuon_model *model = NULL;
    dmuon_plan *plan = NULL;
    dmuon_plan_opts po;
    dmuon_plan_opts_init(&po);
    po.gpus_per_node = per_node;
    po.nodes = size / per_node;
    po.cost = DMUON_COST_FLOPS;
    po.small_unit_bytes = small_unit;
    po.zero_stage = zero;
    dmuon_rc rc = dmuon_sharding_parse(sharding, &po.sharding);
    if (rc == DMUON_OK)
        rc = dmuon_dtype_parse(dtype, &po.param_dtype);
    if (rc == DMUON_OK)
        rc = dmuon_model_build("rt_check", specs, nspec, NULL, &model);
    if (rc == DMUON_OK)
        rc = dmuon_plan_build(model, &po, &plan);
    if (rc != DMUON_OK) {
        if (g_rank == 0)
            fprintf(stderr, "rt_check: %s\n", dmuon_errmsg());
        MPI_Finalize();
        return 2;
    }
    dmuon_rt_opts ro;
    dmuon_rt_opts_init(&ro);
    if (dmuon_backend_parse(backend, &ro.backend) != DMUON_OK ||
        dmuon_device_parse(device, &ro.device) != DMUON_OK) {
        if (g_rank == 0)
            fprintf(stderr, "rt_check: %s\n", dmuon_errmsg());
        MPI_Finalize();
        return 2;
    }
    g_mem = check_table ? 1 : ro.device == DMUON_DEVICE_CUDA ? 2 : 0;
    if (handoff_setup(handoff, &ro, size, per_node, &own_nccl)) {
        MPI_Finalize();
        return 2;
    }
    MPI_Comm rt_comm = handoff ? MPI_COMM_NULL : MPI_COMM_WORLD;
    rt_elem_check_enable(check_table);
    ro.ranks_per_node = per_node;
    ro.zero_stage = zero;
    ro.deadline_ms = deadline;
    dmuon_line_parse(line, &ro.line);
    if (dmuon_owner_parts_parse(owner_parts, &ro.owner_parts)) {
        if (g_rank == 0)
            fprintf(stderr, "rt_check: %s\n", dmuon_errmsg());
        MPI_Finalize();
        return 2;
    }
    ro.optim.muon_weight_decay = 0.01;
    ro.optim.adamw_weight_decay = 0.02;
    ro.optim.clip_norm = g_clip;
    if (shape_scale)   /* √max(1, m/n): not symmetric in m and n */
        ro.optim.scale = DMUON_MUON_SCALE_SHAPE;
    if (momentum >= 0)
        ro.optim.momentum = momentum;
    if (ns_variant)
        snprintf(ro.optim.ns_variant, sizeof ro.optim.ns_variant, "%s", ns_variant);
    if (resume_override) {   /* a value of the field's size or more fills it: no NUL */
        size_t n = strlen(resume_override);
        memcpy(ro.resume_override, resume_override,
               n < sizeof ro.resume_override ? n + 1 : sizeof ro.resume_override);
    }

    /* the model has the placements it is meant to test */
    int placed[3] = {0, 0, 0};   /* halves, interleaved, transposed contiguous */
    for (size_t p = 0; p < dmuon_model_param_count(model); p++) {
        const dmuon_param *pp = dmuon_model_param(model, p);
        placed[0] += pp->role == DMUON_ROLE_MUON && pp->layout == DMUON_MAT_HALVES;
        placed[1] += pp->role == DMUON_ROLE_MUON && pp->layout == DMUON_MAT_INTERLEAVED;
        placed[2] += pp->role == DMUON_ROLE_MUON && pp->layout == DMUON_MAT_CONTIGUOUS &&
                     pp->transposed && pp->mat_m != pp->mat_n;
    }
    if (layers >= 3 && !mismatch)
        check(placed[0] == 1 && placed[1] == 1 && placed[2] == 2,
              "the model has one halves, one interleaved gate_up_proj and two transposed "
              "down_proj (%d, %d, %d)", placed[0], placed[1], placed[2]);

    /* reference state: full parameters */
    size_t np = dmuon_model_param_count(model);
    float **ref_w = calloc(np, sizeof *ref_w), **ref_m = calloc(np, sizeof *ref_m),
          **ref_v = calloc(np, sizeof *ref_v), **ref_g = calloc(np, sizeof *ref_g);
    dmuon_ns_opts nso;
    dmuon_ns_opts_init(&nso);
    dmuon_ns *ns = NULL;
    dmuon_ns_create(DMUON_DEVICE_CPU, -1, &nso, &ns);

    dmuon_rt *rt = NULL;
    if (mismatch) {   /* the run's nodes are not the plan's */
        ro.ranks_per_node = per_node == size ? 1 : size;
        rc = dmuon_rt_create(plan, MPI_COMM_WORLD, &ro, &rt);
        check(rc == DMUON_EMISMATCH && strstr(dmuon_errmsg(), "ranks per node") && !rt,
              "a plan for %d ranks per node on a run of %d per node: %s", per_node,
              ro.ranks_per_node, dmuon_errmsg());
        goto out;
    }
    if (errors) {   /* pairs that cannot work, and what this machine cannot run, are
                     * refused by name, on every rank */
        dmuon_rt_opts bad = ro;
        bad.device = DMUON_DEVICE_CUDA;
        rc = dmuon_rt_create(plan, MPI_COMM_WORLD, &bad, &rt);
        check(rc == DMUON_EINVAL && !rt && strstr(dmuon_errmsg(), "device cuda with backend mpi"),
              "device cuda on the MPI backend's host pool is refused: %s", dmuon_errmsg());
        bad = ro;
        bad.backend = DMUON_BACKEND_NCCL;
        rc = dmuon_rt_create(plan, MPI_COMM_WORLD, &bad, &rt);
        check(rc == DMUON_EINVAL && !rt && strstr(dmuon_errmsg(), "backend nccl with device cpu"),
              "backend nccl with device cpu is refused: %s", dmuon_errmsg());
        bad.device = DMUON_DEVICE_CUDA;
        bad.nccl_comm = &bad;   /* neither is read: refused before */
        bad.nccl_id = &bad;
        rc = dmuon_rt_create(plan, MPI_COMM_WORLD, &bad, &rt);
        check(rc == DMUON_EINVAL && !rt && strstr(dmuon_errmsg(), "both nccl_comm and nccl_id"),
              "a NCCL communicator and a unique id together are refused: %s", dmuon_errmsg());
        bad.nccl_comm = NULL;
        bad.nccl_id = NULL;
        dmuon_rt_opts mpi_id = ro;   /* the MPI backend takes no NCCL handle */
        mpi_id.nccl_id = "";
        rc = dmuon_rt_create(plan, MPI_COMM_NULL, &mpi_id, &rt);
        check(rc == DMUON_EINVAL && !rt && strstr(dmuon_errmsg(), "nccl_id given with backend mpi"),
              "a NCCL unique id with backend mpi is refused: %s", dmuon_errmsg());
        if (dmuon_backend_check(DMUON_BACKEND_NCCL) != DMUON_OK) {   /* no GPU here */
            rc = dmuon_rt_create(plan, MPI_COMM_WORLD, &bad, &rt);
            /* a build without CUDA names that; one with CUDA, the backend's reason */
            check(rc == DMUON_EUNSUPPORTED && !rt &&
                      (strstr(dmuon_errmsg(), "backend nccl") || strstr(dmuon_errmsg(), "no CUDA")),
                  "backend nccl with device cuda where it cannot run is refused naming why: %s",
                  dmuon_errmsg());
        }
    }
    if (fault_is("late-create")) {   /* --fault-rank reaches create two deadlines late */
        MPI_Comm cw;   /* the abandoned agreement stays on this copy, not on the world */
        MPI_Comm_dup(MPI_COMM_WORLD, &cw);
        if (g_rank == g_fault_rank) {
            struct timespec ts = {deadline * 2 / 1000, (long)(deadline * 2 % 1000) * 1000000L};
            nanosleep(&ts, NULL);
        }
        double t0 = now_s();
        rc = dmuon_rt_create(plan, cw, &ro, &rt);
        double took = now_s() - t0;
        check(rc == DMUON_ETIMEOUT && !rt, "late create: create returns DMUON_ETIMEOUT on every "
              "rank (rank %d: %s)", g_rank, dmuon_errmsg());
        check(g_rank == g_fault_rank || took < 2.0 * deadline / 1e3,
              "late create: the waiting ranks returned within two deadlines (rank %d: %.2f s)",
              g_rank, took);
        goto out;
    }
    if (fault_is("args")) {   /* one rank (--fault-rank) with another option: refused */
        static const char *const field[] = {"optim.momentum", "optim.clip_norm", "zero_stage",
                                            "prefetch", "line", "optim.ns_variant"};
        for (int f = 0; f < 6; f++) {
            dmuon_rt_opts bad = ro;
            if (g_rank == g_fault_rank) {
                if (f == 0) bad.optim.momentum = 0.5;
                if (f == 1) bad.optim.clip_norm = 0.1;
                if (f == 2) bad.zero_stage = zero == 3 ? 2 : 3;
                if (f == 3) bad.prefetch = !bad.prefetch;
                if (f == 4) bad.line = bad.line == DMUON_LINE_D ? DMUON_LINE_C : DMUON_LINE_D;
                if (f == 5) snprintf(bad.optim.ns_variant, sizeof bad.optim.ns_variant, "direct-pe5");
            }
            rc = dmuon_rt_create(plan, MPI_COMM_WORLD, &bad, &rt);
            check(same_everywhere((int)rc) && rc == DMUON_EMISMATCH && !rt &&
                      strstr(dmuon_errmsg(), field[f]),
                  "args: another %s on rank %d is refused at create on every rank (%s)", field[f],
                  g_fault_rank, dmuon_errmsg());
        }
    }
    rc = dmuon_rt_create(plan, rt_comm, &ro, &rt);
    check(rc == DMUON_OK, "create%s (%s)", handoff ? " over the handed-over NCCL communicator" : "",
          rc ? dmuon_errmsg() : "");
    if (rc != DMUON_OK)
        goto out;
    for (size_t p = 0; p < np; p++) {
        const dmuon_param *pp = dmuon_model_param(model, p);
        ref_w[p] = malloc((size_t)pp->numel * 4);
        ref_m[p] = calloc((size_t)pp->numel, 4);
        ref_v[p] = calloc((size_t)pp->numel, 4);
        ref_g[p] = calloc((size_t)pp->numel, 4);
        for (int64_t i = 0; i < pp->numel; i++)
            ref_w[p][i] = init_value((int)p, i, seed);
    }
    if (errors) {   /* every registration problem at once, then a clean runtime */
        for (size_t p = 0; p < np; p++) {
            const dmuon_param *pp = dmuon_model_param(model, p);
            int64_t sh[8];
            memcpy(sh, pp->shape, sizeof sh);
            if (p == 0)
                sh[0]++;                             /* wrong element count */
            if (strstr(pp->name, "layers.0.self_attn.k_proj")) {
                sh[0] = pp->shape[1];                /* the transpose */
                sh[1] = pp->shape[0];
            }
            if (strstr(pp->name, "layers.0.self_attn.q_proj"))
                dmuon_rt_register(rt, pp->name, pp->ndim, sh, ref_w[p]);   /* twice */
            if (strcmp(pp->name, "model.norm.weight"))                     /* one missing */
                dmuon_rt_register(rt, pp->name, pp->ndim, sh, ref_w[p]);
        }
        dmuon_rt_register(rt, "model.no_such.weight", 1, dmuon_model_param(model, 0)->shape,
                          ref_w[0]);
        dmuon_rc orc = dmuon_rt_open(rt);
        const char *e = dmuon_errmsg();
        check(orc == DMUON_EINVAL && strstr(e, "5 registration problems") &&
                  strstr(e, "'model.no_such.weight' is not a parameter") &&
                  strstr(e, "'model.norm.weight' was never registered") &&
                  strstr(e, "'model.embed_tokens.weight' has 2080 elements, the plan 2048") &&
                  strstr(e, "k_proj.weight' is registered as 32 x 16, the plan's matrix is 16 x 32") &&
                  strstr(e, "q_proj.weight' was registered 2 times") && !strstr(e, ": ;"),
              "open lists an unknown name, a wrong count, a transposed matrix, a double and a "
              "missing registration: %s", e);
        dmuon_rt_free(rt);
        rt = NULL;
        dmuon_rt_create(plan, rt_comm, &ro, &rt);
    }
    for (size_t p = 0; p < np; p++) {
        const dmuon_param *pp = dmuon_model_param(model, p);
        dmuon_rt_register(rt, pp->name, pp->ndim, pp->shape, ref_w[p]);
    }
    rc = dmuon_rt_open(rt);
    check(rc == DMUON_OK, "open (%s)", rc ? dmuon_errmsg() : "");
    if (rc != DMUON_OK)
        goto out;
    if (load_dir) {
        rc = dmuon_rt_load(rt, load_dir);
        if (expect_load_error) {
            check(rc != DMUON_OK && *dmuon_errmsg(), "loading a damaged checkpoint fails on every "
                  "rank: %s", dmuon_errmsg());
            goto out;
        }
        check(rc == DMUON_OK && dmuon_rt_steps(rt) == start, "load %s at step %lld (%s)",
              load_dir, (long long)dmuon_rt_steps(rt), rc ? dmuon_errmsg() : "");
        if (rc != DMUON_OK)
            goto out;
        if (load_only)   /* other settings than the reference's: no steps */
            goto out;
        for (int t = 0; t < start; t++)
            ref_step(model, t, size, micro, seed, ro.line, &ro.optim, ns, t + 1, ref_w, ref_m,
                     ref_v, ref_g);
    }
    if (errors) {
        check(dmuon_rt_post_forward(rt, 1) == DMUON_EINVAL, "post_forward before pre_forward");
        check(dmuon_rt_pre_forward(rt, 999) == DMUON_EINVAL, "pre_forward of a layer out of range");
        dmuon_rt_lrs z = {0.01, 0.01};
        check(dmuon_rt_step(rt, &z) == DMUON_EINVAL, "step before any micro-batch");
    }

    dmuon_line ln = ro.line;
    const size_t L = dmuon_plan_layer_count(plan);
    uint64_t digest = DMUON_DIGEST_SEED;
    int64_t mismatches = 0, compared = 0;
    int nan_step = errors || fault_is("nan") ? 1 : -1;
    /* --fault overflow: a finite gradient whose Nesterov direction (or, for
     * AdamW, whose square) overflows binary32, on one rank, in one matrix */
    int fault_step = g_fault && !fault_is("slow-save") && !fault_is("late-free") &&
                             !fault_is("order") && !fault_is("onerank") ? 1 : -1,
        over_p = -1;
    for (size_t p = 0; p < np && fault_is("overflow"); p++)
        if (strcmp(dmuon_model_param(model, p)->name, "model.layers.0.self_attn.q_proj.weight") == 0)
            over_p = (int)p;
    if (fault_is("overflow"))
        check(over_p >= 0, "the overflow fault has its parameter");
    hold_state hs = {.cap = hold < 64 ? hold : 63};
    for (int t = start; t <= start + steps; t++) {
        for (int k = 0; k < (t == start + steps ? 1 : micro); k++) {
            bool holding = hold > 0 && t == start + 1 && k == 0;
            if (eval && t < start + steps) {
                if (k == 0 && t > start) {   /* right after a step: eval alone is no micro-batch */
                    dmuon_rt_lrs z = {0.01, 0.01};
                    if (!eval_pass(rt, model, L, np, false))
                        goto out;
                    rc = dmuon_rt_step(rt, &z);
                    check(rc == DMUON_EINVAL && same_everywhere((int)rc) &&
                              strstr(dmuon_errmsg(), "no micro-batch"),
                          "eval: a step after a forward-only pass alone is refused (%s)",
                          dmuon_errmsg());
                }
                if (!eval_pass(rt, model, L, np, k == 0 && t <= start + 1))
                    goto out;
                if (k == 0 && t <= start + 1) {   /* after a begun backward: no micro-batch left */
                    dmuon_rt_lrs z = {0.01, 0.01};
                    rc = dmuon_rt_step(rt, &z);
                    check(rc == DMUON_EINVAL && same_everywhere((int)rc),
                          "eval: the discarded backward left no micro-batch to step (%s)",
                          dmuon_errmsg());
                }
            }
            if (fault_is("order") && t == start && k == 0 && L > 2) {
                /* before the first step one rank runs two blocks of the same
                 * size in another order: refused at the first one on every
                 * rank, before any data moved; the pass is discarded */
                size_t second = g_rank == g_fault_rank ? 2 : 1;
                rc = dmuon_rt_pre_forward(rt, 0);
                dmuon_rc r2 = rc == DMUON_OK ? dmuon_rt_pre_forward(rt, second) : rc;
                check(rc == DMUON_OK && r2 == DMUON_EMISMATCH && same_everywhere((int)r2) &&
                          strstr(dmuon_errmsg(), "different hooks"),
                      "order: the first differing pre_forward is refused on every rank (%s)",
                      dmuon_errmsg());
                rc = dmuon_rt_discard(rt);
                check(rc == DMUON_OK && same_everywhere((int)rc), "order: the refused pass is "
                      "discarded (%s)", rc ? dmuon_errmsg() : "ok");
                if (rc != DMUON_OK)
                    goto out;
            }
            if (fault_is("onerank") && t == start && k == 0) {
                /* before the first step one rank calls dmuon_rt_discard,
                 * then dmuon_rt_step, where the others begin the forward:
                 * EMISMATCH on every rank each time (not two different
                 * collectives meeting), nothing changed */
                for (int call = 0; call < 2; call++) {
                    dmuon_rt_lrs z = {0.01, 0.01};
                    if (g_rank == g_fault_rank)
                        rc = call == 0 ? dmuon_rt_discard(rt) : dmuon_rt_step(rt, &z);
                    else
                        rc = dmuon_rt_pre_forward(rt, 0);
                    /* the call is named among the differing ones (before
                     * "among them"), not only in the advice after it */
                    const char *msg = dmuon_errmsg(), *among = strstr(msg, " among them");
                    const char *named = strstr(msg, call == 0 ? "dmuon_rt_discard" : "dmuon_rt_step");
                    check(rc == DMUON_EMISMATCH && same_everywhere((int)rc) &&
                              strstr(msg, "different hooks") && among && named && named < among,
                          "onerank: a %s on one rank before the first step is refused on "
                          "every rank (%s)", call == 0 ? "discard" : "step", dmuon_errmsg());
                    if (rc != DMUON_EMISMATCH)
                        goto out;
                }
            }
            /* forward: root bracket around the blocks */
            for (size_t l = 0; l < L; l++) {
                if ((holding ? hold_begin(rt, &hs, l, false) : dmuon_rt_pre_forward(rt, l)) !=
                    DMUON_OK) {
                    check(0, "pre_forward(%zu) step %d: %s", l, t, dmuon_errmsg());
                    goto out;
                }
                if (k == 0)
                    for (size_t p = 0; p < np; p++) {
                        const dmuon_param *pp = dmuon_model_param(model, p);
                        if ((size_t)pp->layer != l)
                            continue;
                        const float *w = dmuon_rt_weights(rt, dmuon_rt_param_index(rt, pp->name));
                        if (!w) {
                            mismatches++;
                            continue;
                        }
                        w = mem_in(w, pp->numel);
                        for (int64_t i = 0; i < pp->numel; i++) {
                            float want = po.param_dtype == DMUON_BF16
                                             ? dmuon_bf16_to_f32(dmuon_f32_to_bf16(ref_w[p][i]))
                                             : ref_w[p][i];
                            /* exact, except with clipping: the norm's summation
                             * order differs, so 1e-5 relative (stated); and
                             * with --tolerance (cuBLAS's Newton-Schulz is not
                             * OpenBLAS's bit for bit) */
                            float rel = tolerance > 0 ? (float)tolerance : 1e-5f;
                            mismatches += g_clip > 0 || tolerance > 0
                                              ? fabsf(want - w[i]) > 1e-7f + rel * fabsf(want)
                                              : memcmp(&want, &w[i], 4) != 0;
                            compared++;
                        }
                        digest = dmuon_digest(w, (size_t)pp->numel * 4, digest);
                    }
                if (holding) {
                    hold_verify(rt, &hs, model, ref_w, po.param_dtype);
                    if (l > 0 && !hold_end(rt, &hs, l, false))
                        goto out;
                    continue;
                }
                if (l > 0 && dmuon_rt_post_forward(rt, l) != DMUON_OK) {
                    check(0, "post_forward(%zu): %s", l, dmuon_errmsg());
                    goto out;
                }
            }
            while (hs.n)
                if (!hold_ends(rt, &hs, false))
                    goto out;
            if (dmuon_rt_post_forward(rt, 0) != DMUON_OK) {
                check(0, "post_forward(root): %s", dmuon_errmsg());
                goto out;
            }
            if (t == start + steps)
                break;
            if (t == 1 && g_rank == stall) {   /* a stalled rank */
                struct timespec ts = {deadline * 4 / 1000, 0};
                nanosleep(&ts, NULL);
            }
            if (errors && t == 2 && k == 0 && L > 2) {
                /* refused hook calls (out of the recorded order) change
                 * nothing: the correct order then runs and matches */
                dmuon_rc r1 = dmuon_rt_pre_backward(rt, 1);
                check(r1 == DMUON_EINVAL && strstr(dmuon_errmsg(), "acquisition"),
                      "pre_backward of a block before the root's is refused (%s)",
                      dmuon_errmsg());
                if (zero == 3) {
                    r1 = dmuon_rt_pre_forward(rt, 1);
                    check(r1 == DMUON_EINVAL && strstr(dmuon_errmsg(), "acquisition"),
                          "pre_forward of a block after the forward is refused (%s)",
                          dmuon_errmsg());
                }
            }
            /* backward: root opened first, blocks in reverse, root closed last */
            if (dmuon_rt_pre_backward(rt, 0) != DMUON_OK) {
                check(0, "pre_backward(root): %s", dmuon_errmsg());
                goto out;
            }
            for (size_t j = 0; j < L; j++) {
                size_t l = j + 1 < L ? L - 1 - j : 0;
                if (l != 0) {
                    if ((holding ? hold_begin(rt, &hs, l, true) : dmuon_rt_pre_backward(rt, l)) !=
                        DMUON_OK) {
                        check(0, "pre_backward(%zu): %s", l, dmuon_errmsg());
                        goto out;
                    }
                    if (recompute) {
                        dmuon_rt_recompute_begin(rt);
                        if (dmuon_rt_pre_forward(rt, l) != DMUON_OK ||
                            dmuon_rt_post_forward(rt, l) != DMUON_OK) {
                            check(0, "recompute of %zu: %s", l, dmuon_errmsg());
                            goto out;
                        }
                        dmuon_rt_recompute_end(rt);
                    }
                }
                for (size_t p = 0; p < np; p++) {
                    const dmuon_param *pp = dmuon_model_param(model, p);
                    if ((size_t)pp->layer != l)
                        continue;
                    float *gd = dmuon_rt_grad(rt, dmuon_rt_param_index(rt, pp->name));
                    if (!gd) {
                        check(0, "no gradient buffer for %s", pp->name);
                        goto out;
                    }
                    float *g = mem_in(gd, pp->numel);
                    /* a rank with nothing to add leaves the buffer: zero */
                    if (!g_global && g_rank == 1 && strstr(pp->name, "layers.0.input_layernorm"))
                        continue;
                    for (int64_t i = 0; i < pp->numel; i++) {
                        float v = contrib(g_rank, size, t, k, (int)p, i, seed, pp->name);
                        if (t == nan_step && p == np / 2 && i == 3 && g_rank == g_fault_rank)
                            v = NAN;
                        if (t == fault_step && k == 0 && (int)p == over_p && i == 5 && g_rank == g_fault_rank)
                            v = 2.5e38f;
                        g[i] += v;
                    }
                    mem_out(gd, g, pp->numel);
                }
                /* --progress: the reduction the last post_backward started
                 * (and any prefetch) moved while this layer's gradients are
                 * written */
                if (progress && dmuon_rt_progress(rt) != DMUON_OK) {
                    check(0, "progress before post_backward(%zu): %s", l, dmuon_errmsg());
                    goto out;
                }
                if (holding && l != 0) {
                    if (!hold_end(rt, &hs, l, true))
                        goto out;
                    continue;
                }
                while (hs.n)
                    if (!hold_ends(rt, &hs, true))
                        goto out;
                if (dmuon_rt_post_backward(rt, l) != DMUON_OK) {
                    check(0, "post_backward(%zu): %s", l, dmuon_errmsg());
                    goto out;
                }
            }
        }
        if (t == start + steps)
            break;
        dmuon_rt_lrs lrs = {0.02, 0.003};
        if (t == fault_step && fault_is("args")) {
            /* another finite learning rate on one rank: the step fails on
             * every rank alike naming it, nothing changed */
            uint64_t before = dmuon_rt_state_digest(rt);
            dmuon_rt_lrs other = lrs;
            if (g_rank == g_fault_rank)
                other.adamw_lr *= 2;
            rc = dmuon_rt_step(rt, &other);
            check(same_everywhere((int)rc) && rc == DMUON_EINVAL &&
                      strstr(dmuon_errmsg(), "adamw_lr differs between the ranks"),
                  "args: another adamw_lr on rank %d fails the step on every rank (%s)",
                  g_fault_rank, dmuon_errmsg());
            check(dmuon_rt_state_digest(rt) == before && dmuon_rt_steps(rt) == t - start,
                  "args: the refused step changed nothing");
            continue;   /* nothing changed: the reference does not step either */
        }
        if (t == fault_step) {
            if (fault_failed_step(rt, &lrs, size, deadline, over_p >= 0 ? dmuon_model_param(model, over_p)->name
                                                               : dmuon_model_param(model, np / 2)->name))
                continue;   /* nothing changed: the reference does not step either */
            goto out;
        }
        if (errors && t == 2) {
            /* a non-finite learning rate on one rank: refused on every rank
             * alike, nothing changed, the runtime still usable */
            if (g_rank == g_fault_rank)
                lrs.muon_lr = NAN;
            rc = dmuon_rt_step(rt, &lrs);
            check(same_everywhere((int)rc) && rc == DMUON_EINVAL &&
                      strstr(dmuon_errmsg(), g_rank == g_fault_rank ? "finite learning rates"
                                                                    : "failed (einval)"),
                  "a NaN learning rate on rank %d is refused on every rank (%s)", g_fault_rank,
                  dmuon_errmsg());
            continue;   /* no state changed: the reference does not step either */
        }
        rc = dmuon_rt_step(rt, &lrs);
        if (t == nan_step) {
            check(rc == DMUON_ENUMERIC && strstr(dmuon_errmsg(), dmuon_model_param(model, np / 2)->name),
                  "a NaN gradient on one rank fails the step on every rank naming the parameter "
                  "(%s)", dmuon_errmsg());
            continue;   /* no state changed: the reference does not step either */
        }
        check(rc == DMUON_OK, "step %d (%s)", t, rc ? dmuon_errmsg() : "");
        if (rc != DMUON_OK)
            goto out;
        ref_step(model, t, size, micro, seed, ln, &ro.optim, ns, dmuon_rt_steps(rt), ref_w, ref_m,
                 ref_v, ref_g);
    }
    if (hold) {
        check(same_everywhere(hs.refused) && same_everywhere(hs.bad_weights) &&
                  hs.refused_other == 0,
              "held blocks (up to %d): %d acquisitions into a range still held were refused, on "
              "every rank alike, and no other hook failed", hold, hs.refused);
        check(hs.bad_weights == 0, "held blocks: the held layers' weights stayed intact (%d "
              "overwritten)", hs.bad_weights);
        if (g_rank == 0)
            printf("hold refused %d\n", hs.refused);
    }
    check(mismatches == 0 && compared > 0,
          "line %s %s ZeRO-%d %s, %d ranks (%d per node), %d steps x %d micro-batches%s: %lld of "
          "%lld gathered values differ from the reference", line, sharding, zero, dtype, size,
          per_node, steps, micro, recompute ? ", recompute" : "", (long long)mismatches,
          (long long)compared);
    if (errors) {   /* the last forward left a micro-batch open */
        dmuon_rt_lrs z = {0.01, 0.01};
        check(dmuon_rt_step(rt, &z) == DMUON_EINVAL && strstr(dmuon_errmsg(), "'(root)' has had no "
              "post_backward"), "step inside a micro-batch names the layer: %s", dmuon_errmsg());
        check(dmuon_rt_load(rt, "/nonexistent") == DMUON_EINVAL && strstr(dmuon_errmsg(), "load after"),
              "load after steps is refused: %s", dmuon_errmsg());
    }
    if (fault_is("late-free")) {   /* --fault-rank reaches free two deadlines late */
        if (g_rank == g_fault_rank) {
            struct timespec ts = {deadline * 2 / 1000, (long)(deadline * 2 % 1000) * 1000000L};
            nanosleep(&ts, NULL);
        }
        double t0 = now_s();
        dmuon_rt_free(rt);
        rt = NULL;
        double took = now_s() - t0;
        check(g_rank == g_fault_rank || took < 2.0 * deadline / 1e3,
              "late free: the waiting ranks returned from free within two deadlines (rank %d: "
              "%.2f s)", g_rank, took);
        goto out;
    }
    if (save_dir && fault_is("slow-save")) {
        /* the last rank's fsync takes 4 deadlines: every rank fails with
         * DMUON_ETIMEOUT, the waiting ones within 3 deadlines, the slow one
         * within 3 deadlines after its fsync; no checkpoint appears */
        double slow = 4.0 * deadline / 1e3, t0 = now_s();
        if (g_rank == g_fault_rank)
            g_slow_fsync_ms = 4 * deadline;
        rc = dmuon_rt_save(rt, save_dir);
        double took = now_s() - t0, limit = 3.0 * deadline / 1e3 + (g_rank == g_fault_rank ? slow : 0);
        g_slow_fsync_ms = 0;
        check(stack_untouched(), "slow fsync: the abandoned calls left rank %d's stack alone",
              g_rank);
        check(same_everywhere((int)rc) && rc == DMUON_ETIMEOUT,
              "slow fsync: save returns DMUON_ETIMEOUT on every rank (rank %d: %s)", g_rank,
              dmuon_errmsg());
        check(took < limit, "slow fsync: rank %d returned after %.2f s (limit %.2f s: 3 deadlines%s)",
              g_rank, took, limit, g_rank == g_fault_rank ? " after its own fsync" : "");
        check(access(save_dir, F_OK) != 0, "slow fsync: no checkpoint '%s' appeared", save_dir);
        rc = dmuon_rt_save(rt, save_dir);
        check(rc == DMUON_ECOMM && same_everywhere((int)rc),
              "slow fsync: the runtime refuses further collectives (%s)", dmuon_errmsg());
        goto out;
    }
    if (save_dir) {
        rc = dmuon_rt_save(rt, save_dir);
        check(rc == DMUON_OK, "save %s (%s)", save_dir, rc ? dmuon_errmsg() : "");
    }
    if (export_path) {
        rc = dmuon_rt_export(rt, export_path);
        check(rc == DMUON_OK, "export %s (%s)", export_path, rc ? dmuon_errmsg() : "");
    }
    if (errors) {
        dmuon_rt_stats st;
        dmuon_rt_get_stats(rt, &st);
        check(st.pool_bytes > 0 && st.work_bytes > 0, "pool bytes reported");
    }
    if (plan_out) {   /* the plan and every rank's memory, for dmuon-plan show */
        dmuon_rt_stats st;
        dmuon_rt_get_stats(rt, &st);
        int64_t mine[6] = {st.pool_bytes, st.ctrl_bytes, st.work_bytes, st.window_bytes,
                           st.state_bytes, st.total_bytes};
        int64_t *all = g_rank == 0 ? malloc(sizeof mine * (size_t)size) : NULL;
        MPI_Gather(mine, 6, MPI_INT64_T, all, 6, MPI_INT64_T, 0, MPI_COMM_WORLD);
        int wrc = g_rank == 0 ? (int)dmuon_plan_write(plan, plan_out) : 0;
        MPI_Bcast(&wrc, 1, MPI_INT, 0, MPI_COMM_WORLD);
        check(wrc == DMUON_OK, "plan written to %s (%s)", plan_out, wrc ? dmuon_errmsg() : "");
        if (g_rank == 0) {
            for (int r = 0; r < size; r++)
                printf("memory rank %d: pool %lld ctrl %lld work %lld windows %lld state %lld "
                       "total %lld\n", r, (long long)all[6 * r], (long long)all[6 * r + 1],
                       (long long)all[6 * r + 2], (long long)all[6 * r + 3],
                       (long long)all[6 * r + 4], (long long)all[6 * r + 5]);
        }
        free(all);
    }
    if (g_rank == 0) {
        dmuon_rt_stats st;
        dmuon_rt_get_stats(rt, &st);
        printf("weights digest %016llx\n", (unsigned long long)digest);
        printf("pool %lld bytes: control %lld, working %lld, windows %lld; state %lld; "
               "total %lld\n",
               (long long)st.pool_bytes, (long long)st.ctrl_bytes, (long long)st.work_bytes,
               (long long)st.window_bytes, (long long)st.state_bytes, (long long)st.total_bytes);
    }
out:
    dmuon_rt_free(rt);
#if DMUON_HAVE_NCCL
    if (own_nccl)   /* the trainer's communicator outlived the runtime */
        ncclCommDestroy((ncclComm_t)own_nccl);
#endif
    dmuon_ns_free(ns);
    for (size_t p = 0; p < np; p++) {
        free(ref_w[p]);
        free(ref_m[p]);
        free(ref_v[p]);
        free(ref_g[p]);
    }
    free(ref_w);
    free(ref_m);
    free(ref_v);
    free(ref_g);
    for (size_t i = 0; i < nspec; i++)
        free((char *)specs[i].name);
    dmuon_plan_free(plan);
    dmuon_model_free(model);
    if (g_rank == 0 && check_table)
        printf("checking table: %lld calls on rank 0\n", (long long)rt_elem_check_calls());
    free(g_host);
    if (g_rank == 0)
        printf("%d passed, %d failed\n", g_pass, g_fail);
    MPI_Finalize();
    return g_fail ? 1 : 0;
}
