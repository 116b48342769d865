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

__global__ void k_agv(ncclDevComm dc, ncclWindow_t win, const dmuon_chunk *chunks,
                      const int *first, int K, int local, int64_t buf_off, int64_t win_off,
                      uint64_t tmo, int *err)
{
    ncclLsaBarrierSession<ncclCoopCta> bar(ncclCoopCta(), dc, ncclTeamLsa(dc), dc.lsaBarrier,
                                           blockIdx.x);
    if (!node_barrier(bar, tmo, err))
        return;
    for (int i = first[local] + blockIdx.x; i < first[local + 1]; i += gridDim.x) {
        const dmuon_chunk c = chunks[i];
        const unsigned char *src = (const unsigned char *)ncclGetLsaPointer(
            win, (size_t)(win_off + c.win_offset), c.owner % K);
        for (int p = 0; p < K; p++)
            copy_bytes((unsigned char *)ncclGetLsaPointer(win, (size_t)(buf_off + c.offset), p),
                       src, c.bytes);
    }
    node_barrier(bar, tmo, err);
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

extern "C" dmuon_rc dmuon_ncclx_comm_create(ncclComm_t comm, int per_node, int local,
                                            dmuon_ncclx_comm **out)
{
    *out = NULL;
    dmuon_ncclx_comm *d = (dmuon_ncclx_comm *)calloc(1, sizeof *d);
    if (!d)
        return DMUON_FAIL(DMUON_ENOMEM, "nccl-dev: out of memory");
    ncclDevCommRequirements_t reqs = NCCL_DEV_COMM_REQUIREMENTS_INITIALIZER;
    reqs.lsaBarrierCount = DMUON_NCCLX_BLOCKS;
    ncclResult_t r = ncclDevCommCreate(comm, &reqs, &d->dc);
    if (r != ncclSuccess) {
        free(d);
        return DMUON_FAIL(DMUON_ECOMM, "nccl-dev: ncclDevCommCreate: %s (the window must be "
                          "symmetric; NCCL_MULTI_RANK_GPU_ENABLE=1 for ranks sharing a GPU)",
                          ncclGetErrorString(r));
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

extern "C" dmuon_rc dmuon_ncclx_queues_upload(const dmuon_sched *s, dmuon_ncclx_queues *q)
{
    memset(q, 0, sizeof *q);
    q->nchunks = s->nchunks;
    q->nqueues = s->nodes * s->per_node;
    int longest = 1;
    for (int i = 0; i < q->nqueues; i++)
        longest = s->first[i + 1] - s->first[i] > longest ? s->first[i + 1] - s->first[i]
                                                          : longest;
    q->blocks = longest < DMUON_NCCLX_BLOCKS ? longest : DMUON_NCCLX_BLOCKS;
    CU(cudaMalloc((void **)&q->chunks, (size_t)(q->nchunks ? q->nchunks : 1) * sizeof(dmuon_chunk)),
       "cudaMalloc (queues)");
    CU(cudaMalloc((void **)&q->first, (size_t)(q->nqueues + 1) * sizeof(int)),
       "cudaMalloc (queues)");
    CU(cudaMalloc((void **)&q->err, sizeof(int)), "cudaMalloc (error word)");
    if (q->nchunks)
        CU(cudaMemcpy(q->chunks, s->chunks, (size_t)q->nchunks * sizeof(dmuon_chunk),
                      cudaMemcpyHostToDevice), "copy queues");
    CU(cudaMemcpy(q->first, s->first, (size_t)(q->nqueues + 1) * sizeof(int),
                  cudaMemcpyHostToDevice), "copy queues");
    CU(cudaMemset(q->err, 0, sizeof(int)), "memset");
    return DMUON_OK;
}

extern "C" void dmuon_ncclx_queues_free(dmuon_ncclx_queues *q)
{
    cudaFree(q->chunks);
    cudaFree(q->first);
    cudaFree(q->err);
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
                                           const dmuon_ncclx_queues *q, int per_node, int local,
                                           int64_t buffer_offset, int64_t window_offset,
                                           int deadline_ms, cudaStream_t st)
{
    k_agv<<<q->blocks, 256, 0, st>>>(d->dc, win, q->chunks, q->first, per_node, local,
                                     buffer_offset, window_offset, timeout_cycles(deadline_ms),
                                     q->err);
    return finish(q, st, "allgatherv kernel", deadline_ms);
}

extern "C" dmuon_rc dmuon_ncclx_reduce_scatterv(dmuon_ncclx_comm *d, ncclWindow_t win,
                                                const dmuon_ncclx_queues *q, int per_node,
                                                int local, int64_t buffer_offset,
                                                int64_t window_offset, int deadline_ms,
                                                cudaStream_t st)
{
    k_rsv<<<q->blocks, 256, 0, st>>>(d->dc, win, q->chunks, q->first, per_node, local,
                                     buffer_offset, window_offset, timeout_cycles(deadline_ms),
                                     q->err);
    return finish(q, st, "reducescatterv kernel", deadline_ms);
}
