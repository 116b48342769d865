/*
 * ns_opts.c — Newton–Schulz options: coefficient sets, variant names,
 * parsing of user tuples and restart positions, and the operation count
 * (see dmuon/ns.h).
 *
 * Invariant: a dmuon_ns_opts that passes dmuon_ns_opts_check has 1..MAX
 * finite tuples, dtype F32 or BF16, and restart flags only at 1..steps-1.
 * The flop count mirrors exactly the products that ns.c and kernels/ns_cuda.cu
 * issue, so effective rates compare like with like.
 */
#include "dmuon/ns.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Amsel, Persson, Musco, Gower 2025, arXiv:2505.16932, Algorithm 1 (degree
 * 5, l = 1e-3): the first five tuples. */
const dmuon_ns_coeff dmuon_ns_pe5_raw[5] = {
    {8.28721201814563, -23.595886519098837, 17.300387312530933},
    {4.107059111542203, -2.9478499167379106, 0.5448431082926601},
    {3.9486908534822946, -2.908902115962949, 0.5518191394370137},
    {3.3184196573706015, -2.488488024314874, 0.51004894012372},
    {2.300652019954817, -1.6689039845747493, 0.4188073119525673},
};

/* Jordan et al. 2024, the Muon reference implementation's quintic. */
static const dmuon_ns_coeff muon_triple = {3.4445, -4.7750, 2.0315};

/* ------------------------------------------------------------ presets -- */

static void set_pe5(dmuon_ns_opts *o)
{
    const double s = DMUON_NS_PE_SAFETY;
    o->steps = 5;
    for (int k = 0; k < 5; k++) {
        o->coeff[k].a = dmuon_ns_pe5_raw[k].a / s;
        o->coeff[k].b = dmuon_ns_pe5_raw[k].b / (s * s * s);
        o->coeff[k].c = dmuon_ns_pe5_raw[k].c / (s * s * s * s * s);
    }
}

static void set_muon5(dmuon_ns_opts *o)
{
    o->steps = 5;
    for (int k = 0; k < 5; k++)
        o->coeff[k] = muon_triple;
}

static void set_default_restarts(dmuon_ns_opts *o)
{
    memset(o->restart, 0, sizeof o->restart);
    if (o->steps > 2)
        o->restart[2] = true;
}

void dmuon_ns_opts_init(dmuon_ns_opts *o)
{
    memset(o, 0, sizeof *o);
    o->method = DMUON_NS_GRAM;
    o->dtype = DMUON_F32;
    set_pe5(o);
    set_default_restarts(o);
}

dmuon_rc dmuon_ns_opts_set_variant(dmuon_ns_opts *o, const char *variant)
{
    static const char *names[] = {"gram-pe5", "direct-pe5", "gram-muon5", "direct-muon5"};
    for (int i = 0; i < 4; i++) {
        if (!variant || strcasecmp(variant, names[i]))
            continue;
        o->method = (i % 2 == 0) ? DMUON_NS_GRAM : DMUON_NS_DIRECT;
        memset(o->coeff, 0, sizeof o->coeff);
        if (i < 2)
            set_pe5(o);
        else
            set_muon5(o);
        set_default_restarts(o);
        return DMUON_OK;
    }
    return DMUON_FAIL(DMUON_EINVAL,
                      "unknown NS variant '%s' (expected gram-pe5, direct-pe5, gram-muon5 "
                      "or direct-muon5)",
                      variant ? variant : "");
}

dmuon_rc dmuon_ns_opts_set_dtype(dmuon_ns_opts *o, const char *dtype)
{
    if (dtype && (!strcasecmp(dtype, "fp32") || !strcasecmp(dtype, "f32") || !strcasecmp(dtype, "float32"))) {
        o->dtype = DMUON_F32;
        return DMUON_OK;
    }
    if (dtype && (!strcasecmp(dtype, "bf16") || !strcasecmp(dtype, "bfloat16"))) {
        o->dtype = DMUON_BF16;
        return DMUON_OK;
    }
    return DMUON_FAIL(DMUON_EINVAL, "unknown NS dtype '%s' (expected fp32 or bf16)",
                      dtype ? dtype : "");
}

const char *dmuon_ns_opts_dtype_name(const dmuon_ns_opts *o)
{
    return o->dtype == DMUON_BF16 ? "bf16" : "fp32";
}

/* ------------------------------------------------------------ parsing -- */

static const char *skip_space(const char *p)
{
    while (*p && isspace((unsigned char)*p))
        p++;
    return p;
}

dmuon_rc dmuon_ns_opts_parse_coeffs(dmuon_ns_opts *o, const char *text)
{
    dmuon_ns_coeff c[DMUON_NS_MAX_STEPS];
    int steps = 0;
    const char *p = text ? text : "";
    for (;;) {
        if (steps == DMUON_NS_MAX_STEPS)
            return DMUON_FAIL(DMUON_EINVAL, "coefficients '%s': more than %d tuples", text,
                              DMUON_NS_MAX_STEPS);
        double v[3];
        for (int i = 0; i < 3; i++) {
            char *end;
            p = skip_space(p);
            errno = 0;
            v[i] = strtod(p, &end);
            if (end == p || errno == ERANGE || !isfinite(v[i]))
                return DMUON_FAIL(DMUON_EINVAL,
                                  "coefficients '%s': tuple %d: expected three finite numbers "
                                  "'a,b,c' separated by ';'",
                                  text, steps + 1);
            p = skip_space(end);
            if (i < 2) {
                if (*p != ',')
                    return DMUON_FAIL(DMUON_EINVAL,
                                      "coefficients '%s': tuple %d: expected ',' after value %d",
                                      text, steps + 1, i + 1);
                p++;
            }
        }
        c[steps].a = v[0];
        c[steps].b = v[1];
        c[steps].c = v[2];
        steps++;
        if (*p == '\0')
            break;
        if (*p != ';')
            return DMUON_FAIL(DMUON_EINVAL,
                              "coefficients '%s': tuple %d: expected ';' or the end after 'a,b,c'",
                              text, steps);
        p++;
    }
    memset(o->coeff, 0, sizeof o->coeff);
    memcpy(o->coeff, c, (size_t)steps * sizeof c[0]);
    o->steps = steps;
    for (int k = steps; k < DMUON_NS_MAX_STEPS; k++)
        o->restart[k] = false;
    o->restart[0] = false;
    return DMUON_OK;
}

dmuon_rc dmuon_ns_opts_parse_restarts(dmuon_ns_opts *o, const char *text)
{
    bool r[DMUON_NS_MAX_STEPS] = {false};
    const char *p = text ? text : "";
    if (strcasecmp(p, "none") != 0) {
        for (;;) {
            char *end;
            p = skip_space(p);
            errno = 0;
            long k = strtol(p, &end, 10);
            if (end == p || errno || k < 1 || k >= o->steps)
                return DMUON_FAIL(DMUON_EINVAL,
                                  "restarts '%s': expected 'none' or step counts k with "
                                  "1 <= k < %d (the number of steps), separated by ','",
                                  text ? text : "", o->steps);
            r[k] = true;
            p = skip_space(end);
            if (*p == '\0')
                break;
            if (*p != ',')
                return DMUON_FAIL(DMUON_EINVAL, "restarts '%s': expected ',' between step counts",
                                  text);
            p++;
        }
    }
    memcpy(o->restart, r, sizeof r);
    return DMUON_OK;
}

dmuon_rc dmuon_ns_opts_check(const dmuon_ns_opts *o)
{
    if (!o)
        return DMUON_FAIL(DMUON_EINVAL, "ns options: NULL");
    if (o->method != DMUON_NS_GRAM && o->method != DMUON_NS_DIRECT)
        return DMUON_FAIL(DMUON_EINVAL, "ns options: unknown method %d", (int)o->method);
    if (o->dtype != DMUON_F32 && o->dtype != DMUON_BF16)
        return DMUON_FAIL(DMUON_EINVAL, "ns options: dtype '%s' (expected fp32 or bf16)",
                          dmuon_dtype_name(o->dtype));
    if (o->steps < 1 || o->steps > DMUON_NS_MAX_STEPS)
        return DMUON_FAIL(DMUON_EINVAL, "ns options: %d steps (expected 1 to %d)", o->steps,
                          DMUON_NS_MAX_STEPS);
    for (int k = 0; k < o->steps; k++)
        if (!isfinite(o->coeff[k].a) || !isfinite(o->coeff[k].b) || !isfinite(o->coeff[k].c))
            return DMUON_FAIL(DMUON_EINVAL, "ns options: step %d has a non-finite coefficient",
                              k + 1);
    for (int k = 0; k < DMUON_NS_MAX_STEPS; k++)
        if (o->restart[k] && (k < 1 || k >= o->steps))
            return DMUON_FAIL(DMUON_EINVAL,
                              "ns options: restart after step %d (expected 1 to %d)", k,
                              o->steps - 1);
    return DMUON_OK;
}

/* ------------------------------------------------------------- naming -- */

static bool same_coeffs(const dmuon_ns_opts *a, const dmuon_ns_opts *b)
{
    if (a->steps != b->steps)
        return false;
    for (int k = 0; k < a->steps; k++)
        if (a->coeff[k].a != b->coeff[k].a || a->coeff[k].b != b->coeff[k].b ||
            a->coeff[k].c != b->coeff[k].c)
            return false;
    return true;
}

void dmuon_ns_opts_variant(const dmuon_ns_opts *o, char *out, size_t cap)
{
    const char *method = o->method == DMUON_NS_DIRECT ? "direct" : "gram";
    dmuon_ns_opts ref;
    dmuon_ns_opts_init(&ref);
    const char *set = NULL;
    if (same_coeffs(o, &ref))
        set = "pe5";
    set_muon5(&ref);
    if (!set && same_coeffs(o, &ref))
        set = "muon5";
    if (!set) {
        uint64_t d = dmuon_digest(o->coeff, (size_t)o->steps * sizeof o->coeff[0],
                                  DMUON_DIGEST_SEED);
        if (o->method == DMUON_NS_GRAM)
            d = dmuon_digest(o->restart, sizeof o->restart, d);
        snprintf(out, cap, "%s-user-%08x", method, (unsigned)(d & 0xffffffffu));
        return;
    }
    char suffix[64] = "";
    bool def = true;
    for (int k = 0; k < DMUON_NS_MAX_STEPS; k++)
        if (o->restart[k] != (k == 2))
            def = false;
    if (o->method == DMUON_NS_GRAM && !def) {
        size_t len = (size_t)snprintf(suffix, sizeof suffix, "-r");
        bool any = false;
        for (int k = 1; k < o->steps && len < sizeof suffix; k++)
            if (o->restart[k]) {
                len += (size_t)snprintf(suffix + len, sizeof suffix - len, "%s%d", any ? "," : "",
                                        k);
                any = true;
            }
        if (!any)
            snprintf(suffix, sizeof suffix, "-rnone");
    }
    snprintf(out, cap, "%s-%s%s", method, set, suffix);
}

/* --------------------------------------------------------------- flops -- */

double dmuon_ns_flops(const dmuon_ns_opts *o, int64_t m, int64_t n)
{
    if (m < 1 || n < 1)
        return 0.0;
    const double s = (double)(m < n ? m : n), l = (double)(m < n ? n : m);
    const double syrk_sl = s * (s + 1.0) * l, syrk_ss = s * (s + 1.0) * s;
    const double gemm_ssl = 2.0 * s * s * l, gemm_sss = 2.0 * s * s * s;
    double f = 0.0;
    if (o->method == DMUON_NS_DIRECT)
        return o->steps * (syrk_sl + syrk_ss + gemm_ssl);
    f += syrk_sl;   /* R = X·Xᵀ */
    bool have_q = false;
    for (int k = 0; k < o->steps; k++) {
        if (k > 0 && o->restart[k]) {
            f += gemm_ssl + syrk_sl;   /* X ← Q·X, R ← X·Xᵀ */
            have_q = false;
        }
        f += syrk_ss;                  /* R² */
        if (k + 1 < o->steps && !o->restart[k + 1])
            f += 2.0 * gemm_sss;       /* R ← Qₖ·(R·Qₖ) */
        if (have_q)
            f += gemm_sss;             /* Q ← Q·Qₖ */
        have_q = true;
    }
    return f + gemm_ssl;               /* out = Q·X */
}
