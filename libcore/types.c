/*
 * types.c — element types, the byte-size grammar and the FNV-1a digest (see
 * dmuon/types.h).
 */
#include "dmuon/types.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static const struct {
    const char *name;
    size_t size;
} dtype_info[DMUON_DTYPE_COUNT] = {
    [DMUON_F32] = {"f32", 4},  [DMUON_BF16] = {"bf16", 2}, [DMUON_F16] = {"f16", 2},
    [DMUON_F64] = {"f64", 8},  [DMUON_I32] = {"i32", 4},   [DMUON_I64] = {"i64", 8},
    [DMUON_U8] = {"u8", 1},
};

size_t dmuon_dtype_size(dmuon_dtype t)
{
    return ((int)t >= 0 && t < DMUON_DTYPE_COUNT) ? dtype_info[t].size : 0;
}

const char *dmuon_dtype_name(dmuon_dtype t)
{
    return ((int)t >= 0 && t < DMUON_DTYPE_COUNT) ? dtype_info[t].name : "invalid";
}

dmuon_rc dmuon_dtype_parse(const char *name, dmuon_dtype *out)
{
    static const struct {
        const char *alias;
        dmuon_dtype t;
    } aliases[] = {
        {"f32", DMUON_F32},   {"fp32", DMUON_F32},  {"float32", DMUON_F32},  {"float", DMUON_F32},
        {"bf16", DMUON_BF16}, {"bfloat16", DMUON_BF16},
        {"f16", DMUON_F16},   {"fp16", DMUON_F16},  {"float16", DMUON_F16},  {"half", DMUON_F16},
        {"f64", DMUON_F64},   {"fp64", DMUON_F64},  {"float64", DMUON_F64},  {"double", DMUON_F64},
        {"i32", DMUON_I32},   {"int32", DMUON_I32}, {"i64", DMUON_I64},      {"int64", DMUON_I64},
        {"u8", DMUON_U8},     {"uint8", DMUON_U8},  {"bool", DMUON_U8},      {"i8", DMUON_U8},
        {"int8", DMUON_U8},   {"f8_e4m3", DMUON_U8}, {"f8_e5m2", DMUON_U8},
    };
    if (name)
        for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++)
            if (strcasecmp(name, aliases[i].alias) == 0) {
                *out = aliases[i].t;
                return DMUON_OK;
            }
    return DMUON_FAIL(DMUON_EINVAL, "unknown element type '%s' (expected f32, bf16, f16, f64, "
                      "i32, i64 or u8)", name ? name : "(null)");
}

uint64_t dmuon_digest(const void *data, size_t len, uint64_t seed)
{
    const unsigned char *p = data;
    uint64_t h = seed;
    for (size_t i = 0; i < len; i++) {
        h ^= p[i];
        h *= UINT64_C(0x100000001b3);
    }
    return h;
}

void dmuon_digest_hex(uint64_t digest, char out[17])
{
    snprintf(out, 17, "%016llx", (unsigned long long)digest);
}

/* ------------------------------------------------------------ sizes -- */

/* Decimal digits (no sign) into *v; *end after them.  False on no digits or
 * overflow. */
static int size_digits(const char *s, long long *v, const char **end)
{
    if (!isdigit((unsigned char)*s))
        return 0;
    char *e;
    errno = 0;
    *v = strtoll(s, &e, 10);
    *end = e;
    return errno != ERANGE;
}

static const struct {
    const char *suffix;
    int shift;
} size_units[] = {
    {"", 0},    {"k", 10},  {"kb", 10}, {"kib", 10}, {"m", 20},  {"mb", 20}, {"mib", 20},
    {"g", 30},  {"gb", 30}, {"gib", 30}, {"t", 40}, {"tb", 40}, {"tib", 40},
};

dmuon_rc dmuon_size_parse(const char *text, int64_t *out)
{
    long long v = 0, add = 0;
    const char *end = text;
    int ok = text && size_digits(text, &v, &end);
    int shift = -1;
    if (ok) {
        size_t len = strcspn(end, "+");
        for (size_t i = 0; i < sizeof size_units / sizeof size_units[0]; i++)
            if (strlen(size_units[i].suffix) == len && !strncasecmp(end, size_units[i].suffix, len))
                shift = size_units[i].shift;
        ok = shift >= 0;
        end += len;
    }
    if (ok && *end == '+') {
        const char *e2;
        ok = size_digits(end + 1, &add, &e2) && !*e2;
    } else if (ok) {
        ok = !*end;
    }
    /* v << shift + add must fit in int64_t */
    if (!ok || v > (INT64_MAX >> shift) || (v << shift) > INT64_MAX - add)
        return DMUON_FAIL(DMUON_EINVAL, "size '%s': expected digits with an optional unit and "
                          "+bytes (e.g. 4096, 16K, 16KB, 16KiB, 1G, 1M+1; K = 1024)",
                          text ? text : "(null)");
    *out = (v << shift) + add;
    return DMUON_OK;
}
