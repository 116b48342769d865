/*
 * model.c — the normalised model inventory (see dmuon/model.h).
 *
 * Every input form ends in dmuon_model_build: a list of spelled-out tensors
 * becomes the parameter table.  This file owns the rules that apply to all
 * forms: unique names, positive dimensions, layer detection and forward
 * order, roles, and the split of a tensor into Muon matrices.  The readers
 * of the individual forms live in model_hf.c (config.json), model_st.c
 * (safetensors headers) and model_yaml.c (the project's YAML).
 *
 * Invariants: params[i].layer < nlayers; layer 0 is "(root)" or "(embed)",
 * and the last layer "(head)", iff some tensor lies outside every numbered
 * block (dmuon/model.h, "Layers of the tensors outside numbered blocks");
 * all strings are owned by the model.
 */
#include "model_internal.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

/* ------------------------------------------------------------ helpers -- */

static char *xstrdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d)
        memcpy(d, s, n);
    return d;
}

/* Path components that introduce a numbered block. */
static const char *const block_words[] = {"layers", "blocks", "h", "layer", "block",
                                          "encoderblock"};

/* Finds the first "<word>.<digits>" component pair of name; on success
 * returns the length of the layer key (through the digits), the length of
 * the prefix (through "<word>."), and the number. */
static bool find_block(const char *name, size_t *key_len, size_t *prefix_len, long long *num)
{
    const char *p = name;
    while (*p) {
        const char *dot = strchr(p, '.');
        if (!dot)
            return false;
        size_t wl = (size_t)(dot - p);
        for (size_t w = 0; w < sizeof block_words / sizeof block_words[0]; w++) {
            if (strlen(block_words[w]) != wl || strncmp(p, block_words[w], wl))
                continue;
            const char *d = dot + 1;
            size_t nd = 0;
            while (isdigit((unsigned char)d[nd]))
                nd++;
            if (nd == 0 || nd > 9 || (d[nd] != '.' && d[nd] != '\0'))
                continue;
            *prefix_len = (size_t)(d - name);
            *key_len = (size_t)(d + nd - name);
            *num = strtoll(d, NULL, 10);
            return true;
        }
        p = dot + 1;
    }
    return false;
}

static bool ends_with(const char *s, const char *suf)
{
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}

dmuon_rc dmuon_model_pattern_check(const char *pat)
{
    if (!pat || !*pat)
        return DMUON_FAIL(DMUON_EINVAL, "role pattern '': expected a non-empty fnmatch pattern");
    for (const char *c = pat; *c; c++) {
        if (*c == '\\') {
            if (!c[1])
                return DMUON_FAIL(DMUON_EINVAL, "role pattern '%s': ends with an unescaped "
                                                "backslash", pat);
            c++;
        } else if (*c == '[') {
            /* a bracket expression: optional '!' or '^', a ']' first is literal */
            const char *e = c + 1;
            if (*e == '!' || *e == '^')
                e++;
            if (*e == ']')
                e++;
            while (*e && *e != ']')
                e++;
            if (!*e)
                return DMUON_FAIL(DMUON_EINVAL, "role pattern '%s': '[' at position %zu has no "
                                                "closing ']'", pat, (size_t)(c - pat) + 1);
            c = e;
        }
    }
    return DMUON_OK;
}

static bool any_match(const char *const *pats, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (pats[i] && fnmatch(pats[i], name, 0) == 0)
            return true;
    return false;
}

/* The last dot-separated component of name. */
static const char *last_component(const char *name)
{
    const char *d = strrchr(name, '.');
    return d ? d + 1 : name;
}

/* Quantization data by name: scales and zero points (rule 2). */
static bool quant_name(const char *name)
{
    const char *c = last_component(name);
    return strstr(c, "scale") || strstr(c, "zero_point");
}

/* The tensors being built, to look up a tensor's siblings. */
typedef struct {
    const dmuon_tensor_spec *t;
    size_t n;
} spec_view;

/* The tensor named like name with its suffix `from` replaced by `to` (e.g.
 * experts.gate_up_proj -> experts.down_proj), or NULL. */
static const dmuon_tensor_spec *find_sibling(const spec_view *v, const char *name,
                                             const char *from, const char *to)
{
    size_t nl = strlen(name), fl = strlen(from), tl = strlen(to);
    if (nl < fl || strcmp(name + nl - fl, from) || nl - fl + tl >= 1024)
        return NULL;
    char want[1024];
    memcpy(want, name, nl - fl);
    memcpy(want + nl - fl, to, tl + 1);
    for (size_t i = 0; i < v->n; i++)
        if (v->t[i].name && !strcmp(v->t[i].name, want))
            return &v->t[i];
    return NULL;
}

/* Matrix split of a muon 3-D tensor p (see "Muon matrices" in dmuon/model.h). */
static void split3(dmuon_param *p, const spec_view *v)
{
    int64_t E = p->shape[0], a = p->shape[1], b = p->shape[2];
    p->matrices = E;
    p->mat_m = a;
    p->mat_n = b;
    if (ends_with(p->name, "gate_up_proj")) {
        /* the sibling down_proj tells the orientation: [E, H, I] with a fused
         * [E, 2I, H] (out x in), or [E, I, H] with a fused [E, H, 2I] (in x out) */
        const dmuon_tensor_spec *dn = find_sibling(v, p->name, "gate_up_proj", "down_proj");
        bool in_out = dn && dn->ndim == 3 && dn->shape[0] == E && dn->shape[2] == a &&
                      2 * dn->shape[1] == b;
        if (in_out && b % 2 == 0) {
            p->matrices = 2 * E;
            p->mat_m = b / 2;
            p->mat_n = a;
            p->transposed = true;
            p->layout = find_sibling(v, p->name, "gate_up_proj", "gate_up_proj_bias")
                            ? DMUON_MAT_INTERLEAVED
                            : DMUON_MAT_HALVES;
        } else if (a % 2 == 0) {
            p->matrices = 2 * E;
            p->mat_m = a / 2;
        }
    } else if (ends_with(p->name, "experts.down_proj")) {
        const dmuon_tensor_spec *gu = find_sibling(v, p->name, "down_proj", "gate_up_proj");
        if (gu && gu->ndim == 3 && gu->shape[0] == E && gu->shape[1] == b &&
            gu->shape[2] == 2 * a) {
            /* [E, I, H] next to [E, H, 2I]: stored [in, out] */
            p->mat_m = b;
            p->mat_n = a;
            p->transposed = true;
        }
    }
}

/* Role and matrix split of one tensor (the rules of dmuon/model.h). */
static dmuon_rc classify(const char *source, dmuon_param *p, const dmuon_model_opts *o,
                         const spec_view *v)
{
    bool force_muon = o && any_match(o->muon, o->n_muon, p->name);
    bool force_adamw = !force_muon && o && any_match(o->adamw, o->n_adamw, p->name);
    bool stack3 = p->ndim == 3 && (strstr(p->name, "experts") || strstr(p->name, "gating_einsum"));
    if (force_muon) {
        if (p->ndim != 2 && p->ndim != 3)
            return DMUON_FAIL(DMUON_EINVAL,
                              "%s: tensor '%s': a muon pattern matches it, but it has %d "
                              "dimensions (muon needs a 2-D matrix or a 3-D stack [E, m, n])",
                              source, p->name, p->ndim);
        if (p->numel == 0)
            return DMUON_FAIL(DMUON_EINVAL, "%s: tensor '%s': a muon pattern matches it, but it "
                                            "has no element", source, p->name);
        p->role = DMUON_ROLE_MUON;
    } else if (force_adamw) {
        p->role = DMUON_ROLE_ADAMW;
    } else if (strstr(p->name, "embed") || strstr(p->name, "lm_head") || strstr(p->name, "wte") ||
               strstr(p->name, "wpe") || ends_with(p->name, ".bias") ||
               ends_with(p->name, "_bias") || quant_name(p->name) || p->quantized ||
               p->numel == 0) {
        p->role = DMUON_ROLE_ADAMW;
    } else if (p->ndim == 2 || stack3) {
        p->role = DMUON_ROLE_MUON;
    } else {
        p->role = DMUON_ROLE_ADAMW;
    }
    p->matrices = p->mat_m = p->mat_n = 0;
    p->expert = false;
    p->transposed = false;
    p->layout = DMUON_MAT_CONTIGUOUS;
    if (p->role != DMUON_ROLE_MUON)
        return DMUON_OK;
    p->expert = strstr(p->name, "experts") != NULL;
    if (p->ndim == 2) {
        p->matrices = 1;
        p->mat_m = p->shape[0];
        p->mat_n = p->shape[1];
        if (ends_with(p->name, "gate_up_proj.weight") && p->shape[0] % 2 == 0) {
            p->matrices = 2;
            p->mat_m = p->shape[0] / 2;
        }
    } else {
        split3(p, v);
    }
    return DMUON_OK;
}

const char *dmuon_mat_layout_name(dmuon_mat_layout l)
{
    switch (l) {
    case DMUON_MAT_CONTIGUOUS: return "contiguous";
    case DMUON_MAT_HALVES: return "halves";
    case DMUON_MAT_INTERLEAVED: return "interleaved";
    }
    return "invalid";
}

/* The safetensors spelling of a dmuon dtype (for inputs that name no stored
 * type). */
static const char *stored_of(dmuon_dtype t)
{
    static const char *const names[DMUON_DTYPE_COUNT] = {
        [DMUON_F32] = "F32", [DMUON_BF16] = "BF16", [DMUON_F16] = "F16", [DMUON_F64] = "F64",
        [DMUON_I32] = "I32", [DMUON_I64] = "I64",   [DMUON_U8] = "U8"};
    return ((int)t >= 0 && t < DMUON_DTYPE_COUNT && names[t]) ? names[t] : "BF16";
}

/* Integer, BOOL and FP8 storage (role rule 2). */
static bool quantized_type(const char *st)
{
    return st[0] == 'I' || st[0] == 'U' || !strcmp(st, "BOOL") || !strncmp(st, "F8", 2) ||
           !strncmp(st, "F4", 2) || !strncmp(st, "F6", 2);
}

/* --------------------------------------------------------------- layers -- */

typedef struct {
    const char *name;     /* param name; the key is name[0..key_len) */
    size_t key_len, prefix_len;
    long long num;
    size_t first;         /* first param index with this key */
    size_t prefix_first;  /* first param index with this prefix */
    int32_t id;
} layer_key;

static int key_cmp_name(const layer_key *a, const layer_key *b)
{
    size_t n = a->key_len < b->key_len ? a->key_len : b->key_len;
    int c = memcmp(a->name, b->name, n);
    if (c)
        return c;
    return (a->key_len > b->key_len) - (a->key_len < b->key_len);
}

static int qs_key_name(const void *x, const void *y)
{
    const layer_key *a = x, *b = y;
    int c = key_cmp_name(a, b);
    if (c)
        return c;
    return (a->first > b->first) - (a->first < b->first);
}

static int qs_prefix(const void *x, const void *y)
{
    const layer_key *a = x, *b = y;
    size_t n = a->prefix_len < b->prefix_len ? a->prefix_len : b->prefix_len;
    int c = memcmp(a->name, b->name, n);
    if (c)
        return c;
    if (a->prefix_len != b->prefix_len)
        return (a->prefix_len > b->prefix_len) - (a->prefix_len < b->prefix_len);
    return (a->first > b->first) - (a->first < b->first);
}

static int qs_forward(const void *x, const void *y)
{
    const layer_key *a = x, *b = y;
    if (a->prefix_first != b->prefix_first)
        return (a->prefix_first > b->prefix_first) - (a->prefix_first < b->prefix_first);
    if (a->num != b->num)
        return (a->num > b->num) - (a->num < b->num);
    return (a->first > b->first) - (a->first < b->first);
}

static const char *const root_mode_names[] = {"auto", "one", "split"};

const char *dmuon_root_mode_name(dmuon_root_mode r)
{
    return (unsigned)r <= DMUON_ROOT_SPLIT ? root_mode_names[r] : "?";
}

dmuon_rc dmuon_root_mode_parse(const char *s, dmuon_root_mode *out)
{
    for (int i = 0; i <= DMUON_ROOT_SPLIT; i++)
        if (s && !strcasecmp(s, root_mode_names[i])) {
            *out = (dmuon_root_mode)i;
            return DMUON_OK;
        }
    return DMUON_FAIL(DMUON_EINVAL, "root '%s': expected auto, one or split", s ? s : "");
}

/* Assigns params[i].layer and fills m->layers in forward order.  split:
 * the tensors outside the blocks go to "(embed)" and "(head)" where they
 * all sit before or after every block tensor (dmuon/model.h). */
static dmuon_rc assign_layers(dmuon_model *m, bool split)
{
    size_t n = m->nparams, nk = 0, nu = 0;
    bool root = false;
    layer_key *k = calloc(n ? n : 1, sizeof *k);
    dmuon_rc rc = DMUON_OK;
    if (!k) {
        rc = DMUON_FAIL(DMUON_ENOMEM, "out of memory while ordering %zu tensors", n);
        goto out;
    }
    size_t first_blk = n, last_blk = 0;
    for (size_t i = 0; i < n; i++) {
        layer_key t = {.name = m->params[i].name, .first = i};
        if (find_block(t.name, &t.key_len, &t.prefix_len, &t.num)) {
            k[nk++] = t;
            first_blk = i < first_blk ? i : first_blk;
            last_blk = i;
        } else {
            root = true;
        }
    }
    /* where the tensors outside the blocks sit: before, after, between */
    bool pre = false, post = false, between = false;
    for (size_t i = 0; i < n && root && nk; i++) {
        size_t kl, pl;
        long long num;
        if (find_block(m->params[i].name, &kl, &pl, &num))
            continue;
        if (i < first_blk)
            pre = true;
        else if (i > last_blk)
            post = true;
        else
            between = true;
    }
    split = split && root && nk && !between;
    /* unique keys, each with its first appearance */
    qsort(k, nk, sizeof *k, qs_key_name);
    for (size_t i = 0; i < nk; i++)
        if (nu == 0 || key_cmp_name(&k[nu - 1], &k[i]))
            k[nu++] = k[i];
    /* first appearance of each prefix */
    qsort(k, nu, sizeof *k, qs_prefix);
    for (size_t i = 0; i < nu; i++) {
        bool same = i > 0 && k[i].prefix_len == k[i - 1].prefix_len &&
                    !memcmp(k[i].name, k[i - 1].name, k[i].prefix_len);
        k[i].prefix_first = same ? k[i - 1].prefix_first : k[i].first;
    }
    qsort(k, nu, sizeof *k, qs_forward);
    const bool head = split && post;
    m->nlayers = nu + (root && (!split || pre) ? 1 : 0) + (head ? 1 : 0);
    m->layers = calloc(m->nlayers ? m->nlayers : 1, sizeof *m->layers);
    if (!m->layers) {
        rc = DMUON_FAIL(DMUON_ENOMEM, "out of memory for %zu layers", m->nlayers);
        goto out;
    }
    size_t base = 0;
    if (root && (!split || pre)) {
        m->layers[0] = xstrdup(split ? "(embed)" : "(root)");
        if (!m->layers[0]) {
            rc = DMUON_FAIL(DMUON_ENOMEM, "out of memory for layer names");
            goto out;
        }
        base = 1;
    }
    if (head && !(m->layers[m->nlayers - 1] = xstrdup("(head)"))) {
        rc = DMUON_FAIL(DMUON_ENOMEM, "out of memory for layer names");
        goto out;
    }
    for (size_t i = 0; i < nu; i++) {
        k[i].id = (int32_t)(base + i);
        m->layers[base + i] = strndup(k[i].name, k[i].key_len);
        if (!m->layers[base + i]) {
            rc = DMUON_FAIL(DMUON_ENOMEM, "out of memory for layer names");
            goto out;
        }
    }
    /* param -> layer: look its key up among the unique keys (sorted by name) */
    qsort(k, nu, sizeof *k, qs_key_name);
    for (size_t i = 0; i < n; i++) {
        layer_key t = {.name = m->params[i].name};
        if (!find_block(t.name, &t.key_len, &t.prefix_len, &t.num)) {
            m->params[i].layer = head && i > last_blk ? (int32_t)(m->nlayers - 1) : 0;
            continue;
        }
        size_t lo = 0, hi = nu;
        while (lo < hi) {
            size_t mid = (lo + hi) / 2;
            if (key_cmp_name(&k[mid], &t) < 0)
                lo = mid + 1;
            else
                hi = mid;
        }
        m->params[i].layer = k[lo].id;
    }
out:
    free(k);
    return rc;
}

/* ---------------------------------------------------------------- build -- */

static int qs_name_idx(const void *x, const void *y, void *ctx)
{
    const dmuon_param *p = ctx;
    return strcmp(p[*(const size_t *)x].name, p[*(const size_t *)y].name);
}

static uint64_t digest_model(const dmuon_model *m)
{
    uint64_t h = DMUON_DIGEST_SEED;
    for (size_t i = 0; i < m->nparams; i++) {
        const dmuon_param *p = &m->params[i];
        h = dmuon_digest(p->name, strlen(p->name) + 1, h);
        int64_t v[6 + DMUON_MODEL_MAX_DIMS] = {p->ndim, p->dtype, p->role, p->matrices, p->mat_m,
                                               p->mat_n};
        for (int d = 0; d < p->ndim; d++)
            v[6 + d] = p->shape[d];
        h = dmuon_digest(v, sizeof(int64_t) * (size_t)(6 + p->ndim), h);
        /* the matrix placement, only where it is not the plain one (digests
         * of existing inventories stay as they were) */
        if (p->transposed || p->layout != DMUON_MAT_CONTIGUOUS) {
            int64_t w[2] = {p->transposed, p->layout};
            h = dmuon_digest(w, sizeof w, h);
        }
    }
    return h;
}

dmuon_rc dmuon_model_new(const char *source, const char *format, const dmuon_tensor_spec *t,
                         const char *const *stored, size_t n, const dmuon_model_opts *opts,
                         dmuon_model **out)
{
    dmuon_rc rc = DMUON_OK;
    size_t *idx = NULL;
    spec_view view = {t, n};
    bool allow_empty = format && !strncmp(format, "safetensors", 11);
    *out = NULL;
    for (size_t i = 0; opts && i < opts->n_muon + opts->n_adamw; i++)
        DMUON_TRY(dmuon_model_pattern_check(i < opts->n_muon ? opts->muon[i]
                                                              : opts->adamw[i - opts->n_muon]));
    dmuon_model *m = calloc(1, sizeof *m);
    if (!m)
        return DMUON_FAIL(DMUON_ENOMEM, "out of memory");
    m->source = xstrdup(source ? source : "(built)");
    m->format = xstrdup(format ? format : "built");
    m->params = calloc(n ? n : 1, sizeof *m->params);
    if (!m->source || !m->format || !m->params) {
        rc = DMUON_FAIL(DMUON_ENOMEM, "out of memory for %zu tensors", n);
        goto fail;
    }
    for (size_t i = 0; i < n; i++) {
        dmuon_param *p = &m->params[i];
        if (!t[i].name || !*t[i].name) {
            rc = DMUON_FAIL(DMUON_EPARSE, "%s: tensor %zu: empty name", m->source, i + 1);
            goto fail;
        }
        if (t[i].ndim < 1 || t[i].ndim > DMUON_MODEL_MAX_DIMS) {
            rc = DMUON_FAIL(DMUON_EPARSE,
                            "%s: tensor '%s': field 'shape': expected 1 to %d dimensions, got %d",
                            m->source, t[i].name, DMUON_MODEL_MAX_DIMS, t[i].ndim);
            goto fail;
        }
        p->name = xstrdup(t[i].name);
        if (!p->name) {
            rc = DMUON_FAIL(DMUON_ENOMEM, "out of memory");
            goto fail;
        }
        m->nparams = i + 1;
        p->ndim = t[i].ndim;
        p->dtype = t[i].dtype;
        p->stored = stored && stored[i] ? stored[i] : stored_of(t[i].dtype);
        p->quantized = quantized_type(p->stored);
        p->numel = 1;
        for (int d = 0; d < p->ndim; d++) {
            int64_t s = t[i].shape[d];
            if (s == 0 && allow_empty) {
                p->shape[d] = 0;
                p->numel = 0;
                continue;
            }
            if (s <= 0) {
                rc = DMUON_FAIL(DMUON_EPARSE,
                                "%s: tensor '%s': field 'shape': dimension %d is %lld, expected a "
                                "positive integer",
                                m->source, p->name, d, (long long)s);
                goto fail;
            }
            if (p->numel && p->numel > INT64_MAX / s) {
                rc = DMUON_FAIL(DMUON_EPARSE, "%s: tensor '%s': field 'shape': too many elements",
                                m->source, p->name);
                goto fail;
            }
            p->shape[d] = s;
            p->numel *= s;
        }
        DMUON_TRY_GOTO(rc, classify(m->source, p, opts, &view), fail);
    }
    /* duplicate names */
    idx = malloc((n ? n : 1) * sizeof *idx);
    if (!idx) {
        rc = DMUON_FAIL(DMUON_ENOMEM, "out of memory");
        goto fail;
    }
    for (size_t i = 0; i < n; i++)
        idx[i] = i;
    qsort_r(idx, n, sizeof *idx, qs_name_idx, m->params);
    for (size_t i = 1; i < n; i++)
        if (!strcmp(m->params[idx[i]].name, m->params[idx[i - 1]].name)) {
            rc = DMUON_FAIL(DMUON_EPARSE, "%s: duplicate tensor name '%s'", m->source,
                            m->params[idx[i]].name);
            goto fail;
        }
    /* AUTO is the reader's to resolve (model_hf.c splits an untied config);
     * left here, it is one "(root)" */
    DMUON_TRY_GOTO(rc, assign_layers(m, opts && opts->root == DMUON_ROOT_SPLIT), fail);
    m->digest = digest_model(m);
    free(idx);
    *out = m;
    return DMUON_OK;
fail:
    free(idx);
    dmuon_model_free(m);
    return rc;
}

dmuon_rc dmuon_model_build(const char *source, const dmuon_tensor_spec *t, size_t n,
                           const dmuon_model_opts *opts, dmuon_model **out)
{
    DMUON_TRY(dmuon_model_new(source, "built", t, NULL, n, opts, out));
    return DMUON_OK;
}

void dmuon_model_free(dmuon_model *m)
{
    if (!m)
        return;
    for (size_t i = 0; i < m->nparams; i++)
        free((char *)m->params[i].name);
    free(m->params);
    if (m->layers)
        for (size_t i = 0; i < m->nlayers; i++)
            free(m->layers[i]);
    free(m->layers);
    free(m->source);
    free(m->format);
    free(m);
}

/* ------------------------------------------------------------- accessors -- */

const char *dmuon_model_source(const dmuon_model *m) { return m->source; }
const char *dmuon_model_format(const dmuon_model *m) { return m->format; }
const char *dmuon_model_quantization(const dmuon_model *m) { return m->quant_method; }
uint64_t dmuon_model_digest(const dmuon_model *m) { return m->digest; }
size_t dmuon_model_param_count(const dmuon_model *m) { return m->nparams; }
size_t dmuon_model_layer_count(const dmuon_model *m) { return m->nlayers; }

const dmuon_param *dmuon_model_param(const dmuon_model *m, size_t i)
{
    return i < m->nparams ? &m->params[i] : NULL;
}

const char *dmuon_model_layer_name(const dmuon_model *m, size_t i)
{
    return i < m->nlayers ? m->layers[i] : NULL;
}

void dmuon_model_get_stats(const dmuon_model *m, dmuon_model_stats *s)
{
    memset(s, 0, sizeof *s);
    s->tensors = m->nparams;
    s->layers = m->nlayers;
    for (size_t i = 0; i < m->nparams; i++) {
        const dmuon_param *p = &m->params[i];
        s->two_d += p->ndim == 2;
        s->quantized += p->quantized;
        s->strided += p->role == DMUON_ROLE_MUON && p->layout != DMUON_MAT_CONTIGUOUS;
        s->elements += p->numel;
        s->bytes += p->numel * (int64_t)dmuon_dtype_size(p->dtype);
        if (p->role == DMUON_ROLE_MUON) {
            s->muon_params++;
            s->muon_matrices += p->matrices;
            s->muon_elements += p->numel;
            if (p->expert)
                s->expert_matrices += p->matrices;
        } else {
            s->adamw_params++;
        }
    }
}

static int qs_shape(const void *x, const void *y)
{
    const dmuon_shape_count *a = x, *b = y;
    if (a->m != b->m)
        return (a->m > b->m) - (a->m < b->m);
    return (a->n > b->n) - (a->n < b->n);
}

dmuon_rc dmuon_model_muon_shapes(const dmuon_model *m, dmuon_shape_count **shapes, size_t *n)
{
    size_t k = 0;
    *shapes = NULL;
    *n = 0;
    for (size_t i = 0; i < m->nparams; i++)
        k += m->params[i].role == DMUON_ROLE_MUON;
    if (k == 0)
        return DMUON_OK;
    dmuon_shape_count *s = malloc(k * sizeof *s);
    if (!s)
        return DMUON_FAIL(DMUON_ENOMEM, "out of memory");
    k = 0;
    for (size_t i = 0; i < m->nparams; i++) {
        const dmuon_param *p = &m->params[i];
        if (p->role == DMUON_ROLE_MUON)
            s[k++] = (dmuon_shape_count){p->mat_m, p->mat_n, p->matrices};
    }
    qsort(s, k, sizeof *s, qs_shape);
    size_t u = 0;
    for (size_t i = 0; i < k; i++) {
        if (u > 0 && s[u - 1].m == s[i].m && s[u - 1].n == s[i].n)
            s[u - 1].count += s[i].count;
        else
            s[u++] = s[i];
    }
    *shapes = s;
    *n = u;
    return DMUON_OK;
}

/* ----------------------------------------------------------------- load -- */

dmuon_rc dmuon_model_resolve(const char *path, char *out, size_t cap)
{
    if (!path || !*path)
        return DMUON_FAIL(DMUON_EINVAL, "no model path given");
    struct stat sb;
    if (stat(path, &sb) != 0)
        return DMUON_FAIL(errno == ENOENT || errno == ENOTDIR ? DMUON_ENOTFOUND : DMUON_EIO,
                          "cannot open model '%s': %s", path, strerror(errno));
    const char *sep = path[strlen(path) - 1] == '/' ? "" : "/";
    if (!S_ISDIR(sb.st_mode)) {
        if ((size_t)snprintf(out, cap, "%s", path) >= cap)
            return DMUON_FAIL(DMUON_EINVAL, "model path '%s' is too long", path);
        return DMUON_OK;
    }
    /* a snapshot folder: the index, else the only .safetensors, else config.json */
    if ((size_t)snprintf(out, cap, "%s%smodel.safetensors.index.json", path, sep) >= cap)
        return DMUON_FAIL(DMUON_EINVAL, "model path '%s' is too long", path);
    if (access(out, F_OK) == 0)
        return DMUON_OK;
    DIR *d = opendir(path);
    if (!d)
        return DMUON_FAIL(DMUON_EIO, "cannot read directory '%s': %s", path, strerror(errno));
    char one[1024] = "", two[1024] = "";
    size_t nst = 0, nidx = 0;
    char idx[1024] = "";
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (ends_with(e->d_name, ".safetensors")) {
            if (nst == 0 || strcmp(e->d_name, one) < 0) {
                snprintf(two, sizeof two, "%s", one);
                snprintf(one, sizeof one, "%s", e->d_name);
            } else if (nst == 1 || strcmp(e->d_name, two) < 0) {
                snprintf(two, sizeof two, "%s", e->d_name);
            }
            nst++;
        } else if (ends_with(e->d_name, ".safetensors.index.json")) {
            if (nidx == 0 || strcmp(e->d_name, idx) < 0)
                snprintf(idx, sizeof idx, "%s", e->d_name);
            nidx++;
        }
    }
    closedir(d);
    const char *pick = NULL;
    if (nidx == 1)
        pick = idx;
    else if (nidx > 1)
        return DMUON_FAIL(DMUON_EINVAL, "model directory '%s' holds %zu safetensors index files "
                                        "(%s, ...): give the one to use", path, nidx, idx);
    else if (nst == 1)
        pick = one;
    else if (nst > 1)
        return DMUON_FAIL(DMUON_EINVAL, "model directory '%s' holds %zu .safetensors files (%s, "
                                        "%s, ...) and no model.safetensors.index.json: give the "
                                        "file or the index to use", path, nst, one, two);
    else
        pick = "config.json";
    if ((size_t)snprintf(out, cap, "%s%s%s", path, sep, pick) >= cap)
        return DMUON_FAIL(DMUON_EINVAL, "model path '%s' is too long", path);
    if (access(out, F_OK) != 0)
        return DMUON_FAIL(DMUON_ENOTFOUND, "model directory '%s' holds no "
                                           "model.safetensors.index.json, no .safetensors file and "
                                           "no config.json; expected a Hugging Face snapshot "
                                           "folder", path);
    return DMUON_OK;
}

dmuon_rc dmuon_model_load(const char *path, const dmuon_model_opts *opts, dmuon_model **out)
{
    *out = NULL;
    if (!path || !*path)
        return DMUON_FAIL(DMUON_EINVAL, "no model path given");
    struct stat sb;
    if (stat(path, &sb) != 0)
        return DMUON_FAIL(errno == ENOENT || errno == ENOTDIR ? DMUON_ENOTFOUND : DMUON_EIO,
                          "cannot open model '%s': %s", path, strerror(errno));
    if (S_ISDIR(sb.st_mode)) {
        char file[4096];
        DMUON_TRY(dmuon_model_resolve(path, file, sizeof file));
        DMUON_TRY(dmuon_model_load(file, opts, out));
        return DMUON_OK;
    }
    if (ends_with(path, ".safetensors")) {
        DMUON_TRY(dmuon_model_load_safetensors(path, opts, out));
        return DMUON_OK;
    }
    if (ends_with(path, ".yaml") || ends_with(path, ".yml")) {
        DMUON_TRY(dmuon_model_load_yaml(path, opts, out));
        return DMUON_OK;
    }
    if (ends_with(path, ".json")) {
        /* an index names its shards in "weight_map"; a config has "model_type" */
        dmuon_doc d;
        DMUON_TRY(dmuon_doc_load_file(&d, path));
        yaml_node_t *root = dmuon_doc_root(&d);
        bool index = dmuon_doc_get(&d, root, "weight_map") != NULL;
        bool config = dmuon_doc_get(&d, root, "model_type") != NULL;
        dmuon_rc rc;
        if (index)
            rc = dmuon_model_load_st_index(path, &d, opts, out);
        else if (config)
            rc = dmuon_model_load_hf_config(path, &d, opts, out);
        else
            rc = DMUON_FAIL(DMUON_EPARSE,
                            "%s: expected a Hugging Face config.json (with 'model_type') or a "
                            "model.safetensors.index.json (with 'weight_map')",
                            path);
        dmuon_doc_release(&d);
        if (rc != DMUON_OK)
            return dmuon_err_trace_add(rc, __FILE__, __LINE__);
        return DMUON_OK;
    }
    /* no telling extension: a safetensors file starts with an 8-byte length
     * and then '{'; anything else is read as YAML (JSON included) */
    FILE *f = fopen(path, "rb");
    if (!f)
        return DMUON_FAIL(DMUON_EIO, "cannot open model '%s': %m", path);
    unsigned char head[9];
    size_t got = fread(head, 1, sizeof head, f);
    fclose(f);
    if (got == 9 && head[8] == '{' && (head[6] | head[7]) == 0) {
        DMUON_TRY(dmuon_model_load_safetensors(path, opts, out));
        return DMUON_OK;
    }
    DMUON_TRY(dmuon_model_load_yaml(path, opts, out));
    return DMUON_OK;
}
