/*
 * opdrv.c — the operator drivers' shared part (opdrv.h).
 */
#include "common/opdrv.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/opt.h"
#include "dmuon/bf16.h"
#include "dmuon/sched.h"
#include "dmuon/symm.h"

uint64_t opdrv_hash(uint64_t seed, uint64_t a, uint64_t b)
{
    uint64_t z = seed * 0x9e3779b97f4a7c15u ^ (a + 0x632be59bd9b4e019u) * 0xbf58476d1ce4e5b9u ^
                 (b + 0x2545f4914f6cdd1du) * 0x94d049bb133111ebu;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
}

unsigned char opdrv_byte(uint64_t seed, int seg, int64_t k)
{
    return (unsigned char)(opdrv_hash(seed, (uint64_t)seg, (uint64_t)k) >> 56);
}

float opdrv_load(dmuon_dtype dt, const void *p, int64_t i)
{
    const unsigned char *b = p;
    if (dt == DMUON_BF16) {
        uint16_t h;
        memcpy(&h, b + 2 * i, 2);
        return dmuon_bf16_to_f32(h);
    }
    float f;
    memcpy(&f, b + 4 * i, 4);
    return f;
}

void opdrv_store(dmuon_dtype dt, void *p, int64_t i, float v)
{
    unsigned char *b = p;
    if (dt == DMUON_BF16) {
        uint16_t h = dmuon_f32_to_bf16(v);
        memcpy(b + 2 * i, &h, 2);
    } else {
        memcpy(b + 4 * i, &v, 4);
    }
}

int64_t opdrv_seg_bytes(const dmuon_segment *s)
{
    return s->count * (int64_t)dmuon_dtype_size(s->dtype);
}

dmuon_rc opdrv_group_open(const dmuon_topo *t, const dmuon_segment *segs, int n,
                          const dmuon_group_opts *o, opdrv_group *v)
{
    dmuon_rc rc = DMUON_OK;
    memset(v, 0, sizeof *v);
    DMUON_TRY(dmuon_group_span_of(t, segs, n, o, &v->sp));
    DMUON_TRY(dmuon_symm_alloc(t, v->sp.bytes, &v->mem));
    DMUON_TRY_GOTO(rc, dmuon_group_create(t, segs, n, o, v->mem, v->sp.ctrl_offset, &v->g),
                   fail);
    unsigned char *base = dmuon_symm_base(v->mem);
    if (dmuon_symm_on_device(v->mem)) {   /* GPU memory: the drivers work on a host copy */
        v->host = calloc(1, (size_t)v->sp.bytes);
        if (!v->host) {
            rc = DMUON_FAIL(DMUON_ENOMEM, "out of memory for the host copy of a group");
            dmuon_group_free(v->g);
            v->g = NULL;
            goto fail;
        }
        base = v->host;
    }
    v->buf = base + v->sp.buffer_offset;
    v->win = base + v->sp.window_offset;
    return DMUON_OK;
fail:
    dmuon_symm_free(v->mem);
    v->mem = NULL;
    return rc;
}

void opdrv_group_close(opdrv_group *v)
{
    dmuon_group_free(v->g);
    dmuon_symm_free(v->mem);
    free(v->host);
    memset(v, 0, sizeof *v);
}

dmuon_rc opdrv_group_stage(opdrv_group *v, int in)
{
    if (!v->host)
        return DMUON_OK;
    return dmuon_group_host_copy(v->g, v->sp.buffer_offset, v->sp.window_offset, v->host, in);
}

dmuon_rc opdrv_group_call(opdrv_group *v, int agv, int split)
{
    const int64_t b = v->sp.buffer_offset, w = v->sp.window_offset;
    if (!split || v->host)
        return agv ? dmuon_allgatherv(v->g, b, w) : dmuon_reduce_scatterv(v->g, b, w);
    int done = 0;
    if (agv) {
        DMUON_TRY(dmuon_allgatherv_start(v->g, b, w));
        DMUON_TRY(dmuon_allgatherv_test(v->g, &done));
        return done ? DMUON_OK : dmuon_allgatherv_wait(v->g);
    }
    DMUON_TRY(dmuon_reduce_scatterv_start(v->g, b, w));
    DMUON_TRY(dmuon_reduce_scatterv_test(v->g, &done));
    return done ? DMUON_OK : dmuon_reduce_scatterv_wait(v->g);
}

void opdrv_agv_fill(const dmuon_segment *segs, int n, int rank, unsigned char *win,
                    uint64_t seed)
{
    for (int i = 0; i < n; i++)
        if (segs[i].owner == rank)
            for (int64_t k = 0; k < opdrv_seg_bytes(&segs[i]); k++)
                win[segs[i].window_offset + k] = opdrv_byte(seed, i, k);
}

int64_t opdrv_agv_wrong(const dmuon_segment *segs, int n, int rank, const unsigned char *p,
                        uint64_t seed, int owned_only)
{
    int64_t bad = 0;
    for (int i = 0; i < n; i++) {
        if (owned_only && segs[i].owner != rank)
            continue;
        const unsigned char *at = p + (owned_only ? segs[i].window_offset : segs[i].offset);
        for (int64_t k = 0; k < opdrv_seg_bytes(&segs[i]); k++)
            bad += at[k] != opdrv_byte(seed, i, k);
    }
    return bad;
}

int opdrv_flag(opdrv_opt opt, const char *arg, int64_t chunk_max, opdrv_flags *f, char *bad,
               size_t cap)
{
    int64_t v = 0;
    switch (opt) {
    case OPDRV_RPN:
        if (dmuon_topo_parse_per_node(arg, &f->per_node) != DMUON_OK)
            snprintf(bad, cap, "--ranks-per-node: %s", dmuon_errmsg());
        return 1;
    case OPDRV_BACKEND:
        if (dmuon_backend_parse(arg, &f->backend) != DMUON_OK)
            snprintf(bad, cap, "--backend: %s", dmuon_errmsg());
        return 1;
    case OPDRV_CHUNK:
        if (tool_parse_size("--chunk-bytes", arg, 1, chunk_max, &v, bad, cap))
            return 1;
        if (dmuon_chunk_bytes_check(v) != DMUON_OK)
            snprintf(bad, cap, "--chunk-bytes '%s': expected a multiple of %d bytes, at least %d",
                     arg, DMUON_CHUNK_ALIGN_BYTES, DMUON_CHUNK_MIN_BYTES);
        else
            f->chunk_bytes = v;
        return 1;
    }
    return 0;
}
