/*
 * nccl_dev.cu — the device-API kernels of the nccl-dev backend (see
 * libcore/comm/nccl_dev.h for what they execute and their contract).
 * Compiled only with NCCL >= 2.30 (the Makefile's DMUON_HAVE_NCCL_DEV),
 * against the pinned NCCL's nccl_device.h, for sm_CUDA_ARCH (>= 90).
 *
 * Kernels are thin executors of dmuon/sched.h: block b serves chunks
 * b, b + blocks, … of this rank's rail queue of source node 0 (one node);
 * threads of a block split a chunk's bytes (16-byte vectors when source,
 * destination and length allow, else single elements).  A chunk's element
 * size is bytes / count (2: BF16, 4: F32).
 *
 * Invariants: every rank launches the same number of blocks (the
 * schedule's), so barrier index b pairs the same blocks on every rank; no
 * kernel waits without a timeout; nothing is allocated per call.
 */
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <nccl.h>
#include <nccl_device.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

extern "C" {
#include "dmuon/rc.h"
#include "dmuon/sched.h"
}
#include "comm/nccl_dev.h"

struct dmuon_ncclx_comm {
    ncclDevComm dc;
};

#define CU(call, what)                                                                  \
    do {                                                                                \
        cudaError_t e_ = (call);                                                        \
        if (e_ != cudaSuccess)                                                          \
            return DMUON_FAIL(DMUON_EDEVICE, "nccl-dev: %s: %s", (what),                \
                              cudaGetErrorString(e_));                                  \
    } while (0)

/* ---------------------------------------------------------- device side -- */

__device__ static void copy_bytes(unsigned char *dst, const unsigned char *src, int64_t bytes)
{
    if ((((uintptr_t)dst | (uintptr_t)src | (uintptr_t)bytes) & 15) == 0) {
        const uint4 *s = (const uint4 *)src;
        uint4 *d = (uint4 *)dst;
        for (int64_t i = threadIdx.x; i < bytes / 16; i += blockDim.x)
            d[i] = s[i];
    } else {
        for (int64_t i = threadIdx.x; i < bytes; i += blockDim.x)
            dst[i] = src[i];
    }
}

__device__ static float load_elem(const void *p, int64_t i, int esz)
{
    return esz == 2 ? __bfloat162float(((const __nv_bfloat16 *)p)[i]) : ((const float *)p)[i];
}

/* The bracket of every call: all ranks' inputs in place (entry), all stores
 * landed (exit).  A timeout sets *err and the block stops. */
__device__ static bool node_barrier(ncclLsaBarrierSession<ncclCoopCta> &bar, uint64_t tmo,
                                    int *err)
{
    if (bar.sync(ncclCoopCta(), cuda::memory_order_acq_rel, tmo) != ncclSuccess) {
        if (threadIdx.x == 0)
            atomicExch(err, 1);
        return false;
    }
    return true;
}

/* What one AllGatherV launch needs besides the communicator (by value). */
struct agv_args {
    const dmuon_chunk *chunks;
    const int *first;
    int R, K, node, local;
    int64_t buf_off, win_off;
    uint64_t tmo;
    int *err;
    const int *in_node, *route_n, *route, *ups, *downs;
    int nups, ndowns;
    uint64_t *base, *calls;
};

#define NB DMUON_NCCLX_BLOCKS
__device__ static ncclGinSignal_t data_signal(int q, int b) { return (ncclGinSignal_t)(q * NB + b); }
__device__ static ncclGinSignal_t ready_signal(int R, int node, int b)
{
    return (ncclGinSignal_t)(R * NB + node * NB + b);
}

__device__ static void flag(int *err)
{
    if (threadIdx.x == 0)
        atomicExch(err, 1);
}

__global__ void k_agv(ncclDevComm dc, ncclWindow_t win, agv_args a)
{
    const int b = blockIdx.x, K = a.K;
    ncclLsaBarrierSession<ncclCoopCta> bar(ncclCoopCta(), dc, ncclTeamLsa(dc), dc.lsaBarrier, b);
    if (!node_barrier(bar, a.tmo, a.err))
        return;
    const uint64_t call = a.calls[b] + 1;
    if (a.R == 1) {   /* one node: LSA loads and stores only */
        for (int i = a.first[a.local] + b; i < a.first[a.local + 1]; i += gridDim.x) {
            const dmuon_chunk c = a.chunks[i];
            const unsigned char *src = (const unsigned char *)ncclGetLsaPointer(
                win, (size_t)(a.win_off + c.win_offset), c.owner % K);
            for (int p = 0; p < K; p++)
                copy_bytes((unsigned char *)ncclGetLsaPointer(win, (size_t)(a.buf_off + c.offset), p),
                           src, c.bytes);
        }
    } else {          /* several nodes: GIN along the rail (compiled, not yet run) */
        ncclGin gin(dc, 0);
        const ncclTeam rail = ncclTeamRail(dc);
        if (threadIdx.x == 0)
            for (int u = 0; u < a.nups; u++)   /* "block b of this node is in this call" */
                gin.signal(rail, a.ups[u], ncclGin_StrongSignalInc{ready_signal(a.R, a.node, b)});
        for (int d = 0; d < a.ndowns; d++)
            if (gin.waitSignal(ncclCoopCta(), ready_signal(a.R, a.downs[d], b), call, 64,
                               cuda::memory_order_acquire, a.tmo) != ncclSuccess) {
                flag(a.err);
                return;
            }
        for (int q = 0; q < a.R; q++) {
            const int qi = q * K + a.local;
            const bool source = a.in_node[q] < 0;
            uint64_t got = 0;
            for (int i = a.first[qi] + b; i < a.first[qi + 1]; i += gridDim.x) {
                const dmuon_chunk c = a.chunks[i];
                const size_t at = (size_t)(a.buf_off + c.offset);
                const unsigned char *src;
                if (source) {
                    src = (const unsigned char *)ncclGetLsaPointer(
                        win, (size_t)(a.win_off + c.win_offset), c.owner % K);
                } else {
                    got++;
                    if (gin.waitSignal(ncclCoopCta(), data_signal(q, b), a.base[q * NB + b] + got,
                                       64, cuda::memory_order_acquire, a.tmo) != ncclSuccess) {
                        flag(a.err);
                        return;
                    }
                    src = (const unsigned char *)ncclGetLsaPointer(win, at, a.local);
                }
                for (int p = 0; p < K; p++)
                    if (source || p != a.local)
                        copy_bytes((unsigned char *)ncclGetLsaPointer(win, at, p), src, c.bytes);
                __syncthreads();   /* this rank's copy is complete before it is put */
                for (int o = 0; o < a.route_n[q]; o++)
                    gin.put(rail, a.route[q * a.R + o], win, at, win, at, (size_t)c.bytes,
                            ncclGin_StrongSignalInc{data_signal(q, b)}, ncclGin_None{},
                            ncclCoopCta());
            }
            if (threadIdx.x == 0 && !source)
                a.base[q * NB + b] += got;
        }
        gin.flush(ncclCoopCta());
    }
    node_barrier(bar, a.tmo, a.err);
    if (threadIdx.x == 0)
        a.calls[b] = call;
}

__global__ void k_rsv(ncclDevComm dc, ncclWindow_t win, const dmuon_chunk *chunks,
                      const int *first, int K, int local, int64_t buf_off, int64_t win_off,
                      uint64_t tmo, int *err)
{
    ncclLsaBarrierSession<ncclCoopCta> bar(ncclCoopCta(), dc, ncclTeamLsa(dc), dc.lsaBarrier,
                                           blockIdx.x);
    if (!node_barrier(bar, tmo, err))
        return;
    for (int i = first[local] + blockIdx.x; i < first[local + 1]; i += gridDim.x) {
        const dmuon_chunk c = chunks[i];
        const int esz = (int)(c.bytes / c.count);
        void *dst = ncclGetLsaPointer(win, (size_t)(win_off + c.win_offset), c.owner % K);
        for (int64_t e = threadIdx.x; e < c.count; e += blockDim.x) {
            /* L = rnd(Σ_j x_j), binary32 in local-rank order (dmuon/sched.h) */
            float acc = 0.0f;
            for (int j = 0; j < K; j++) {
                const float x =
                    load_elem(ncclGetLsaPointer(win, (size_t)(buf_off + c.offset), j), e, esz);
                acc = j == 0 ? x : acc + x;
            }
            if (esz == 2)
                ((__nv_bfloat16 *)dst)[e] = __float2bfloat16_rn(acc);
            else
                ((float *)dst)[e] = acc;
        }
    }
    node_barrier(bar, tmo, err);
}

/* ------------------------------------------------------------ host side -- */

extern "C" dmuon_rc dmuon_ncclx_comm_create(ncclComm_t comm, int nodes, int node, int per_node,
                                            int local, dmuon_ncclx_comm **out)
{
    *out = NULL;
    dmuon_ncclx_comm *d = (dmuon_ncclx_comm *)calloc(1, sizeof *d);
    if (!d)
        return DMUON_FAIL(DMUON_ENOMEM, "nccl-dev: out of memory");
    ncclDevCommRequirements_t reqs = NCCL_DEV_COMM_REQUIREMENTS_INITIALIZER;
    reqs.lsaBarrierCount = DMUON_NCCLX_BLOCKS;
    if (nodes > 1) {
        reqs.ginContextCount = 1;
        reqs.ginSignalCount = 2 * nodes * DMUON_NCCLX_BLOCKS;
        reqs.ginConnectionType = NCCL_GIN_CONNECTION_RAIL;
    }
    ncclResult_t r = ncclDevCommCreate(comm, &reqs, &d->dc);
    if (r != ncclSuccess) {
        free(d);
        return DMUON_FAIL(DMUON_ECOMM, "nccl-dev: ncclDevCommCreate: %s (the window must be "
                          "symmetric; NCCL_MULTI_RANK_GPU_ENABLE=1 for ranks sharing a GPU)",
                          ncclGetErrorString(r));
    }
    const ncclTeam rail = ncclTeamRail(comm);
    if (nodes > 1 && (rail.nRanks != nodes || rail.rank != node)) {
        dmuon_rc rc = DMUON_FAIL(DMUON_EUNSUPPORTED, "nccl-dev: NCCL's rail team (%d ranks, this "
                                 "one at %d) is not the rail (%d nodes, this one at %d)",
                                 rail.nRanks, rail.rank, nodes, node);
        ncclDevCommDestroy(comm, &d->dc);
        free(d);
        return rc;
    }
    if (d->dc.lsaSize != per_node || d->dc.lsaRank != local) {
        dmuon_rc rc = DMUON_FAIL(DMUON_EUNSUPPORTED, "nccl-dev: NCCL's LSA team (%d ranks, this "
                                 "one at %d) is not the node (%d ranks, this one at %d)",
                                 d->dc.lsaSize, d->dc.lsaRank, per_node, local);
        ncclDevCommDestroy(comm, &d->dc);
        free(d);
        return rc;
    }
    *out = d;
    return DMUON_OK;
}

extern "C" void dmuon_ncclx_comm_free(ncclComm_t comm, dmuon_ncclx_comm *d)
{
    if (!d)
        return;
    if (comm)
        ncclDevCommDestroy(comm, &d->dc);
    free(d);
}

/* In dmuon_ncclx_queues_upload: a failed CUDA call records rc and leaves. */
#define CUG(call, what)                                                                 \
    do {                                                                                \
        cudaError_t e_ = (call);                                                        \
        if (e_ != cudaSuccess) {                                                        \
            rc = DMUON_FAIL(DMUON_EDEVICE, "nccl-dev: %s: %s", (what), cudaGetErrorString(e_)); \
            goto done;                                                                  \
        }                                                                               \
    } while (0)
#define UPLOAD(dst, src, n, T)                                                          \
    do {                                                                                \
        CUG(cudaMalloc((void **)&(dst), (size_t)((n) > 0 ? (n) : 1) * sizeof(T)), "cudaMalloc"); \
        if ((n) > 0)                                                                    \
            CUG(cudaMemcpy((dst), (src), (size_t)(n) * sizeof(T), cudaMemcpyHostToDevice), \
                "copy to the GPU");                                                     \
    } while (0)

extern "C" dmuon_rc dmuon_ncclx_queues_upload(const dmuon_sched *s, int node, dmuon_ncclx_queues *q)
{
    dmuon_rc rc = DMUON_OK;
    memset(q, 0, sizeof *q);
    const int R = s->nodes;
    q->nchunks = s->nchunks;
    q->nqueues = R * s->per_node;
    q->nodes = R;
    int longest = 1;
    for (int i = 0; i < q->nqueues; i++)
        longest = s->first[i + 1] - s->first[i] > longest ? s->first[i + 1] - s->first[i]
                                                          : longest;
    q->blocks = longest < DMUON_NCCLX_BLOCKS ? longest : DMUON_NCCLX_BLOCKS;
    /* this node's routes (the same for every rail) */
    int *in_node = (int *)calloc((size_t)R, sizeof(int)), *route_n = (int *)calloc((size_t)R, sizeof(int));
    int *route = (int *)calloc((size_t)R * R, sizeof(int)), *in = (int *)calloc((size_t)R, sizeof(int));
    int *ups = (int *)calloc((size_t)R, sizeof(int)), *downs = (int *)calloc((size_t)R, sizeof(int));
    char *is_up = (char *)calloc((size_t)R, 1), *is_down = (char *)calloc((size_t)R, 1);
    if (!in_node || !route_n || !route || !in || !ups || !downs || !is_up || !is_down) {
        rc = DMUON_FAIL(DMUON_ENOMEM, "nccl-dev: out of memory");
        goto done;
    }
    for (int qn = 0; qn < R; qn++) {
        int nout = 0;
        int nin = dmuon_sched_route(s, qn, node, in, route + qn * R, &nout);
        in_node[qn] = qn == node ? -1 : (nin > 0 ? in[nin - 1] : -1);
        route_n[qn] = nout;
        if (qn != node && nin > 0 && !is_up[in[nin - 1]]) {
            is_up[in[nin - 1]] = 1;
            ups[q->nups++] = in[nin - 1];
        }
        for (int o = 0; o < nout; o++)
            if (!is_down[route[qn * R + o]]) {
                is_down[route[qn * R + o]] = 1;
                downs[q->ndowns++] = route[qn * R + o];
            }
    }
    {
        UPLOAD(q->chunks, s->chunks, q->nchunks, dmuon_chunk);
        UPLOAD(q->first, s->first, q->nqueues + 1, int);
        UPLOAD(q->in_node, in_node, R, int);
        UPLOAD(q->route_n, route_n, R, int);
        UPLOAD(q->route, route, R * R, int);
        UPLOAD(q->ups, ups, q->nups, int);
        UPLOAD(q->downs, downs, q->ndowns, int);
        CUG(cudaMalloc((void **)&q->err, sizeof(int)), "cudaMalloc (error word)");
        CUG(cudaMemset(q->err, 0, sizeof(int)), "memset");
        CUG(cudaMalloc((void **)&q->base, (size_t)R * DMUON_NCCLX_BLOCKS * sizeof(uint64_t)),
            "cudaMalloc (counters)");
        CUG(cudaMemset(q->base, 0, (size_t)R * DMUON_NCCLX_BLOCKS * sizeof(uint64_t)), "memset");
        CUG(cudaMalloc((void **)&q->calls, DMUON_NCCLX_BLOCKS * sizeof(uint64_t)),
            "cudaMalloc (counters)");
        CUG(cudaMemset(q->calls, 0, DMUON_NCCLX_BLOCKS * sizeof(uint64_t)), "memset");
    }
done:
    free(in_node);
    free(route_n);
    free(route);
    free(in);
    free(ups);
    free(downs);
    free(is_up);
    free(is_down);
    return rc;
}

extern "C" void dmuon_ncclx_queues_free(dmuon_ncclx_queues *q)
{
    cudaFree(q->chunks);
    cudaFree(q->first);
    cudaFree(q->err);
    cudaFree(q->in_node);
    cudaFree(q->route_n);
    cudaFree(q->route);
    cudaFree(q->ups);
    cudaFree(q->downs);
    cudaFree(q->base);
    cudaFree(q->calls);
    memset(q, 0, sizeof *q);
}

/* Barrier timeout in GPU clock cycles for deadline_ms (the SM clock rate). */
static uint64_t timeout_cycles(int deadline_ms)
{
    int dev = 0, khz = 0;
    cudaGetDevice(&dev);
    if (cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, dev) != cudaSuccess || khz <= 0)
        khz = 2000000;
    return (uint64_t)deadline_ms * (uint64_t)khz;
}

static dmuon_rc finish(const dmuon_ncclx_queues *q, cudaStream_t st, const char *what,
                       int deadline_ms)
{
    CU(cudaGetLastError(), what);
    CU(cudaStreamSynchronize(st), what);
    int err = 0;
    CU(cudaMemcpy(&err, q->err, sizeof err, cudaMemcpyDeviceToHost), what);
    if (err) {
        cudaMemset(q->err, 0, sizeof(int));
        return DMUON_FAIL(DMUON_ETIMEOUT, "nccl-dev: %s: a node barrier passed the deadline of "
                          "%d ms (a peer did not enter the call)", what, deadline_ms);
    }
    return DMUON_OK;
}

extern "C" dmuon_rc dmuon_ncclx_allgatherv(dmuon_ncclx_comm *d, ncclWindow_t win,
                                           const dmuon_ncclx_queues *q, int node, int per_node,
                                           int local, int64_t buffer_offset,
                                           int64_t window_offset, int deadline_ms,
                                           cudaStream_t st)
{
    agv_args a;
    a.chunks = q->chunks;
    a.first = q->first;
    a.R = q->nodes;
    a.K = per_node;
    a.node = node;
    a.local = local;
    a.buf_off = buffer_offset;
    a.win_off = window_offset;
    a.tmo = timeout_cycles(deadline_ms);
    a.err = q->err;
    a.in_node = q->in_node;
    a.route_n = q->route_n;
    a.route = q->route;
    a.ups = q->ups;
    a.downs = q->downs;
    a.nups = q->nups;
    a.ndowns = q->ndowns;
    a.base = q->base;
    a.calls = q->calls;
    k_agv<<<q->blocks, 256, 0, st>>>(d->dc, win, a);
    return finish(q, st, "allgatherv kernel", deadline_ms);
}

extern "C" dmuon_rc dmuon_ncclx_reduce_scatterv(dmuon_ncclx_comm *d, ncclWindow_t win,
                                                const dmuon_ncclx_queues *q, int per_node,
                                                int local, int64_t buffer_offset,
                                                int64_t window_offset, int deadline_ms,
                                                cudaStream_t st)
{
    if (q->nodes > 1)
        return DMUON_FAIL(DMUON_EUNSUPPORTED, "reducescatterv: the nccl-dev backend reduces "
                          "inside one node in this build (across nodes: not built)");
    k_rsv<<<q->blocks, 256, 0, st>>>(d->dc, win, q->chunks, q->first, per_node, local,
                                     buffer_offset, window_offset, timeout_cycles(deadline_ms),
                                     q->err);
    return finish(q, st, "reducescatterv kernel", deadline_ms);
}
