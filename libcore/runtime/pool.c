/*
 * pool.c — the pool's layout (dmuon/pool.h): the spaces and window regions
 * from their sizes, and first-fit packing of the parameter and gradient
 * spaces from a recorded acquire/release sequence.
 *
 * Invariant: two acquisitions whose lifetimes overlap get disjoint byte
 * ranges.  The live set is kept sorted by offset; an acquisition takes the
 * lowest gap that fits.  O(events × live blocks), which is tiny (a model has
 * at most a few hundred layers).
 */
#include "dmuon/pool.h"

#include <stdlib.h>

const char *dmuon_pool_space_name(int space)
{
    static const char *names[] = {"control", "parameters", "gradients", "windows"};
    return space >= 0 && space < DMUON_SPACE_COUNT ? names[space] : "?";
}

void dmuon_pool_lay_out(const dmuon_pool_sizes *in, dmuon_pool_map *out)
{
    int64_t w = 0;
    for (int r = 0; r < DMUON_WIN_COUNT; r++) {
        out->win_off[r] = w;
        w += dmuon_pool_align(in->win[r]);
    }
    const int64_t b[DMUON_SPACE_COUNT] = {in->ctrl, in->param, in->grad, w};
    int64_t off = 0;
    for (int s = 0; s < DMUON_SPACE_COUNT; s++) {
        out->space_off[s] = off;
        out->space_bytes[s] = b[s];
        off += (b[s] + DMUON_POOL_BASE_ALIGN - 1) / DMUON_POOL_BASE_ALIGN * DMUON_POOL_BASE_ALIGN;
    }
    for (int r = 0; r < DMUON_WIN_COUNT; r++)
        out->win_off[r] += out->space_off[DMUON_SPACE_WINDOW];
    out->total = off;
}

typedef struct {
    int32_t block;
    int64_t off, end;
} live_range;

dmuon_rc dmuon_pool_pack(const dmuon_pool_event *ev, size_t nev, const int64_t *sizes,
                         size_t nblocks, int64_t *offsets, int64_t *total)
{
    dmuon_rc rc = DMUON_OK;
    live_range *live = malloc((nblocks ? nblocks : 1) * sizeof *live);
    if (!live)
        return DMUON_FAIL(DMUON_ENOMEM, "pool layout: out of memory");
    size_t nlive = 0, k = 0;
    int64_t top = 0;
    for (size_t e = 0; e < nev; e++) {
        int32_t b = ev[e].block;
        if (b < 0 || (size_t)b >= nblocks) {
            rc = DMUON_FAIL(DMUON_EINVAL, "pool layout: event %zu names block %d of %zu", e,
                            (int)b, nblocks);
            goto done;
        }
        size_t at = nlive;
        for (size_t i = 0; i < nlive; i++)
            if (live[i].block == b)
                at = i;
        if (!ev[e].acquire) {
            if (at == nlive) {
                rc = DMUON_FAIL(DMUON_EINVAL, "pool layout: event %zu releases block %d, "
                                "which is not live", e, (int)b);
                goto done;
            }
            for (size_t i = at + 1; i < nlive; i++)
                live[i - 1] = live[i];
            nlive--;
            continue;
        }
        if (at != nlive) {
            rc = DMUON_FAIL(DMUON_EINVAL, "pool layout: event %zu acquires block %d, "
                            "which is live already", e, (int)b);
            goto done;
        }
        int64_t need = dmuon_pool_align(sizes[b]), off = 0;
        size_t pos = 0;
        for (; pos < nlive; pos++) {        /* live is sorted by offset */
            if (live[pos].off - off >= need)
                break;
            if (live[pos].end > off)
                off = live[pos].end;
        }
        for (size_t i = nlive; i > pos; i--)
            live[i] = live[i - 1];
        live[pos] = (live_range){b, off, off + need};
        nlive++;
        offsets[k++] = off;
        if (off + need > top)
            top = off + need;
    }
    *total = top;
done:
    free(live);
    return rc;
}
