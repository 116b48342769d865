/*
 * ns_kernel.c — the cache of per-shape kernel choices for the GPU
 * Newton–Schulz path (see ns_kernel.h): memory, then the cost database's
 * ns_kernel table, then one measurement.
 *
 * Invariants: a shape is measured at most once per context (the memory entry
 * is written even when the database cannot be); database failures other than
 * a miss or a read-only file are returned, never hidden.
 */
#include "ns_kernel.h"

#include <stdio.h>
#include <string.h>

static const char *const sym_names[NS_SYM_COUNT] = {"syrk", "gemm", "tri"};

const char *ns_sym_name(ns_sym k)
{
    return (unsigned)k < NS_SYM_COUNT ? sym_names[k] : "?";
}

dmuon_rc ns_sym_parse(const char *name, ns_sym *out)
{
    for (int i = 0; i < NS_SYM_COUNT; i++)
        if (name && !strcmp(name, sym_names[i])) {
            *out = (ns_sym)i;
            return DMUON_OK;
        }
    return DMUON_EINVAL;
}

static void remember(ns_sym_cache *c, dmuon_dtype dtype, int64_t s, int64_t k, ns_sym kernel)
{
    int slot;
    if (c->count < NS_SYM_CACHE_SIZE) {
        slot = c->count++;
    } else {   /* full: overwrite the oldest */
        slot = c->next;
        c->next = (c->next + 1) % NS_SYM_CACHE_SIZE;
    }
    c->e[slot].dtype = dtype;
    c->e[slot].s = s;
    c->e[slot].k = k;
    c->e[slot].kernel = kernel;
}

dmuon_rc ns_sym_choose(ns_sym_cache *cache, dmuon_costdb *db, const char *device,
                       const char *libraries, dmuon_dtype dtype, int64_t s, int64_t k,
                       ns_sym_measure_fn measure, void *ctx, ns_sym *out,
                       ns_sym_source *source)
{
    const char *dt = dtype == DMUON_BF16 ? "bf16" : "fp32";
    dmuon_kernel_row row;
    ns_sym_source src = NS_SYM_FROM_MEMORY;
    dmuon_rc rc;
    if (s < 1 || k < 1)
        return DMUON_FAIL(DMUON_EINVAL, "ns: kernel choice for a %lld x %lld product",
                          (long long)s, (long long)k);
    for (int i = 0; i < cache->count; i++)
        if (cache->e[i].dtype == dtype && cache->e[i].s == s && cache->e[i].k == k) {
            *out = cache->e[i].kernel;
            goto found;
        }
    if (db) {
        rc = dmuon_costdb_get_kernel(db, device, dt, s, k, &row);
        if (rc == DMUON_OK && ns_sym_parse(row.kernel, out) == DMUON_OK) {
            src = NS_SYM_FROM_DB;
            remember(cache, dtype, s, k, *out);
            goto found;
        }
        if (rc != DMUON_OK && rc != DMUON_ENOTFOUND)
            return rc;
    }
    memset(&row, 0, sizeof row);
    DMUON_TRY(measure(ctx, dtype, s, k, &row));
    DMUON_TRY(ns_sym_parse(row.kernel, out) == DMUON_OK
                  ? DMUON_OK
                  : DMUON_FAIL(DMUON_EINVAL, "ns: the measurement chose an unknown kernel '%s'",
                               row.kernel));
    remember(cache, dtype, s, k, *out);
    src = NS_SYM_MEASURED;
    if (db && !dmuon_costdb_readonly(db)) {
        snprintf(row.device, sizeof row.device, "%s", device);
        snprintf(row.dtype, sizeof row.dtype, "%s", dt);
        snprintf(row.libraries, sizeof row.libraries, "%s", libraries ? libraries : "");
        row.s = s;
        row.k = k;
        DMUON_TRY(dmuon_costdb_put_kernel(db, &row));
    }
found:
    if (source)
        *source = src;
    return DMUON_OK;
}
