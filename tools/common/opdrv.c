/*
 * opdrv.c — the operator driver (opdrv.h): inputs, the group and the
 * publish in memory of their own, the counts of wrong bytes, the lines'
 * common table.  The option table and the case grid are opdrv_opt.c's; the
 * lines are opdrv_<line>.c.
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

float opdrv_rsv_int(int r, int64_t e)
{
    return (float)((int)(((uint64_t)r * 7 + (uint64_t)e * 3) % 9) - 4);
}

float opdrv_rsv_sum(int nranks, int64_t e)
{
    float s = 0;
    for (int r = 0; r < nranks; r++)
        s += opdrv_rsv_int(r, e);
    return s;
}

/* ------------------------------------------------------------- group -- */

dmuon_rc opdrv_group_open(const dmuon_topo *t, const dmuon_segment *segs, int n,
                          const dmuon_group_opts *o, opdrv_group *v)
{
    dmuon_rc rc = DMUON_OK;
    memset(v, 0, sizeof *v);
    DMUON_TRY(dmuon_table_agree(t->world, segs, n, o->deadline_ms));
    DMUON_TRY(dmuon_group_span_of(t, segs, n, o, &v->sp));
    /* the window grows with --slots and --chunk-bytes (the control and ring
     * area): refused here, before MPI is asked for a shared window it
     * cannot give (which aborts) */
    char bad[400];
    if (tool_check_host_memory(t->world, v->sp.bytes, 1, "--slots/--chunk-bytes: the group's "
                               "shared window of", bad, sizeof bad))
        return DMUON_FAIL(DMUON_EINVAL, "%s; or lower --slots (%d) or --chunk-bytes (%lld; 0: "
                          "the backend's)", bad, o->slots, (long long)o->chunk_bytes);
    DMUON_TRY(dmuon_symm_alloc(t, v->sp.bytes, o->deadline_ms, &v->mem));
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

dmuon_rc opdrv_group_staged(opdrv_group *v, int agv, int split)
{
    DMUON_TRY(opdrv_group_stage(v, 1));
    DMUON_TRY(opdrv_group_call(v, agv, split));
    return opdrv_group_stage(v, 0);
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

/* ----------------------------------------------------------- publish -- */

dmuon_rc opdrv_pub_open(const dmuon_topo *t, const dmuon_segment *segs, int n,
                        const dmuon_publish_opts *o, opdrv_pub *v)
{
    memset(v, 0, sizeof *v);
    v->params = malloc((n > 0 ? (size_t)n : 1) * sizeof *v->params);
    if (!v->params)
        return DMUON_FAIL(DMUON_ENOMEM, "out of memory");
    v->n = n;
    int64_t copy_bytes = 0;
    dmuon_rc rc = dmuon_publish_layout(t->per_node, segs, n, v->params, &copy_bytes);
    if (rc == DMUON_OK)
        rc = dmuon_table_agree(t->world, v->params, n, o->deadline_ms);
    if (rc == DMUON_OK)
        rc = dmuon_symm_alloc(t, copy_bytes > 0 ? copy_bytes : 1, o->deadline_ms, &v->mem);
    if (rc == DMUON_OK)
        rc = dmuon_publish_create(t, v->params, n, o, v->mem, 0, &v->p);
    if (rc != DMUON_OK) {
        opdrv_pub_close(v);
        return rc;
    }
    v->copy = dmuon_publish_copy(v->p);
    return DMUON_OK;
}

void opdrv_pub_close(opdrv_pub *v)
{
    dmuon_publish_free(v->p);
    dmuon_symm_free(v->mem);
    free(v->params);
    memset(v, 0, sizeof *v);
}

void opdrv_pub_fill(opdrv_pub *v, int rank, uint64_t seed)
{
    for (int i = 0; i < v->n; i++)
        if (v->params[i].owner == rank)
            for (int64_t k = 0; k < opdrv_seg_bytes(&v->params[i]); k++)
                v->copy[v->params[i].offset + k] = opdrv_byte(seed, i, k);
}

int64_t opdrv_pub_wrong(const opdrv_pub *v, const dmuon_topo *t, int i, uint64_t seed)
{
    int64_t bad = 0;
    for (int j = i < 0 ? 0 : i; j < (i < 0 ? v->n : i + 1); j++) {
        if (i < 0 && !(t->nodes > 1 && dmuon_topo_leads(t, v->params[j].owner)))
            continue;
        for (int64_t k = 0; k < opdrv_seg_bytes(&v->params[j]); k++)
            bad += v->copy[v->params[j].offset + k] != opdrv_byte(seed, j, k);
    }
    return bad;
}

dmuon_rc opdrv_pub_step(opdrv_pub *v, const dmuon_topo *t, int64_t step)
{
    DMUON_TRY(dmuon_publish_begin(v->p, step));
    for (int i = 0; i < v->n; i++)
        if (v->params[i].owner == t->rank)
            DMUON_TRY(dmuon_publish_post(v->p, i, step));
    if (t->nodes > 1 && dmuon_publish_algo(v->p) == DMUON_ALGO_SCHEDULED)
        for (int i = 0; i < v->n; i++)
            if (dmuon_topo_leads(t, v->params[i].owner))
                DMUON_TRY(dmuon_publish_wait(v->p, i, step));
    return dmuon_publish_end(v->p, step);
}

/* ------------------------------------------------------------- lines -- */

const char *const opdrv_op_names[OPDRV_NOPS] = {"agv", "rsv", "publish"};

const opdrv_line *const opdrv_lines[OPDRV_NLINES] = {&opdrv_line_ours, &opdrv_line_per_owner,
                                                     &opdrv_line_coalesced, &opdrv_line_equal};

int opdrv_table_same(const opdrv_case *c, dmuon_segment **out, int *n)
{
    *out = malloc((size_t)(c->n > 0 ? c->n : 1) * sizeof **out);
    if (!*out)
        return 0;
    memcpy(*out, c->segs, (size_t)c->n * sizeof **out);
    *n = c->n;
    return 1;
}

int opdrv_line_supports(const opdrv_line *l, const opdrv_case *c)
{
    const dmuon_backend b = c->topo->backend;
    if (c->op == OPDRV_PUB) {   /* the publish runs on the MPI backend */
        if (b != DMUON_BACKEND_MPI || l->pub_algo == DMUON_ALGO_DEFAULT)
            return 0;
    } else if (!dmuon_group_algo_offered(b, l->algo)) {
        return 0;
    }
    dmuon_segment *segs = NULL;
    int n = 0, ok = l->table(c, &segs, &n);
    free(segs);
    return ok;
}

const char *opdrv_errmsg_shared(void)
{
    const char *m = dmuon_errmsg();
    int skip = 0;
    if (sscanf(m, "rank %*d: %n", &skip) == 0 && skip > 0)
        return m + skip;
    return m;
}

int64_t opdrv_case_bytes(const opdrv_case *c)
{
    int64_t b = 0;
    for (int i = 0; i < c->n; i++)
        b += opdrv_seg_bytes(&c->segs[i]);
    return b;
}
