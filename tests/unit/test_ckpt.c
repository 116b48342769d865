/*
 * test_ckpt.c — checkpoints (dmuon/ckpt.h): the file format, round trips
 * that re-shard (saved split one way, loaded split another), replacement of
 * an existing checkpoint, every refused input (truncated file, flipped byte,
 * wrong version, wrong model digest, missing range, malformed manifest,
 * header length beyond the file, another parameter table) with a message
 * naming file and tensor and nothing written, and export (F32, BF16, F16
 * against independent roundings).
 *
 * Runs as one process (MPI_COMM_WORLD of size 1) or under mpirun on any
 * number of ranks (pieces are dealt out by rank; rank 0 edits files).
 * With arguments it is the driver of tests/mpi/57-ckpt.sh:
 *   test_ckpt save DIR CHUNK SHIFT ROTATE REPL [EXPORT]
 *   test_ckpt load DIR CHUNK SHIFT ROTATE REPL [EXPORT]
 *   test_ckpt bench DIR MIB
 * save writes the generated state split into CHUNK-element pieces (first
 * boundary at SHIFT, owners rotated by ROTATE, each piece on REPL ranks);
 * load reads it back split that way and checks every bit; both export the
 * master weights to EXPORT when given.  bench times save and load of MIB
 * MiB of pieces in all.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <fcntl.h>
#include <math.h>
#include <mpi.h>
#include <stdbool.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dmuon/ckpt.h"
#include "dmuon/doc.h"
#include "dmuon/timer.h"
#include "testutil.h"

static int rank_, world_;

/* ----------------------------------------------------------- the model -- */

static const dmuon_ckpt_param P[] = {
    {.name = "model.a.weight", .ndim = 2, .shape = {6, 5}, .dtype = DMUON_BF16, .role = 1},
    {.name = "model.b.bias", .ndim = 1, .shape = {7}, .dtype = DMUON_F16, .role = 0},
    {.name = "model.c.scale", .ndim = 0, .dtype = DMUON_F32, .role = 0},
    {.name = "model.d.weight", .ndim = 3, .shape = {4, 3, 2}, .dtype = DMUON_F32, .role = 1},
};
#define NP (sizeof P / sizeof *P)
static const char *const KINDS_MUON[] = {"master", "momentum", NULL};
static const char *const KINDS_ADAMW[] = {"master", "exp_avg", "exp_avg_sq", NULL};
#define DIGEST UINT64_C(0x0123456789abcdef)

static int64_t numel(const dmuon_ckpt_param *p)
{
    int64_t n = 1;
    for (int d = 0; d < p->ndim; d++)
        n *= p->shape[d];
    return n;
}

static uint32_t mix(uint64_t x)
{
    x ^= x >> 33;
    x *= UINT64_C(0xff51afd7ed558ccd);
    x ^= x >> 33;
    x *= UINT64_C(0xc4ceb9fe1a85ec53);
    x ^= x >> 33;
    return (uint32_t)x;
}

/* The generated value of element e of kind k of parameter p: mostly in
 * binary16's range (subnormals to overflow), some of any exponent, some
 * exact rounding ties; never NaN or infinity. */
static uint32_t value_bits(size_t p, int k, int64_t e, uint32_t salt)
{
    uint32_t u = mix(((uint64_t)p << 48) ^ ((uint64_t)k << 40) ^ (uint64_t)e ^
                     ((uint64_t)salt << 56));
    uint32_t v = mix(u ^ 0x9e3779b9u);
    if (u & 3)
        u = (u & 0x807fffffu) | ((100u + v % 50u) << 23);
    if (((u >> 23) & 0xff) == 0xff)
        u ^= 0x40000000u;
    if (e % 17 == 0)
        u = (u & 0xffff0000u) | 0x8000u;           /* bf16 tie */
    else if (e % 17 == 1)
        u = (u & 0xffffe000u) | 0x1000u;           /* f16 tie */
    return u;
}

static float value(size_t p, int k, int64_t e, uint32_t salt)
{
    uint32_t u = value_bits(p, k, e, salt);
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

#define SENTINEL 0x7fc0deadu

/* --------------------------------------------------------- piece sets -- */

typedef struct {
    dmuon_ckpt_piece p[512];
    int kind[512];
    size_t pi[512];
    size_t n;
    float *buf;
} set;

/* Deals out every (param, kind) range in pieces of chunk elements (first
 * boundary at shift), chunk g going to the ranks r with r % (world/repl) ==
 * (g + rotate) % (world/repl).  fill: generated values (salt), else the
 * sentinel.  Skips the piece of (skip_p, skip_kind) that holds element
 * skip_e when skip_p >= 0.  only_master keeps master pieces only. */
static void set_build(set *s, int64_t chunk, int64_t shift, int rotate, int repl, bool fill,
                      uint32_t salt, int skip_p, const char *skip_kind, int64_t skip_e)
{
    memset(s, 0, sizeof *s);
    int groups = world_ / repl > 0 ? world_ / repl : 1;
    size_t total = 0;
    for (size_t p = 0; p < NP; p++)
        total += 3 * (size_t)numel(&P[p]);
    s->buf = malloc(total * sizeof(float));
    assert_non_null(s->buf);
    size_t used = 0;
    int g = 0;
    for (size_t p = 0; p < NP; p++) {
        const char *const *kinds = P[p].role == 1 ? KINDS_MUON : KINDS_ADAMW;
        int64_t n = numel(&P[p]);
        for (int k = 0; kinds[k]; k++) {
            int64_t lo = 0;
            while (lo < n) {
                int64_t hi = lo == 0 && shift > 0 ? shift : lo + chunk;
                if (hi > n)
                    hi = n;
                bool mine = rank_ % groups == (g + rotate) % groups;
                bool skip = skip_p == (int)p && !strcmp(skip_kind, kinds[k]) && skip_e >= lo &&
                            skip_e < hi;
                g++;
                if (mine && !skip) {
                    assert_true(s->n < 512);
                    float *d = s->buf + used;
                    used += (size_t)(hi - lo);
                    for (int64_t e = lo; e < hi; e++) {
                        uint32_t b = fill ? value_bits(p, k, e, salt) : SENTINEL;
                        memcpy(&d[e - lo], &b, sizeof b);
                    }
                    s->kind[s->n] = k;
                    s->pi[s->n] = p;
                    s->p[s->n++] = (dmuon_ckpt_piece){.name = P[p].name, .kind = kinds[k],
                                                      .lo = lo, .hi = hi, .data = d};
                }
                lo = hi;
            }
        }
    }
}

static void set_free(set *s) { free(s->buf); s->buf = NULL; }

/* Number of elements of s that differ from the generated values. */
static long set_wrong(const set *s, uint32_t salt)
{
    long bad = 0;
    for (size_t i = 0; i < s->n; i++)
        for (int64_t e = s->p[i].lo; e < s->p[i].hi; e++) {
            uint32_t b;
            memcpy(&b, &s->p[i].data[e - s->p[i].lo], sizeof b);
            bad += b != value_bits(s->pi[i], s->kind[i], e, salt);
        }
    return bad;
}

/* True when every element of s still holds the sentinel. */
static bool set_untouched(const set *s)
{
    for (size_t i = 0; i < s->n; i++)
        for (int64_t e = s->p[i].lo; e < s->p[i].hi; e++) {
            uint32_t b;
            memcpy(&b, &s->p[i].data[e - s->p[i].lo], sizeof b);
            if (b != SENTINEL)
                return false;
        }
    return true;
}

static void meta_init(dmuon_ckpt_meta *m, int64_t step)
{
    memset(m, 0, sizeof *m);
    m->step = step;
    m->model_digest = DIGEST;
    m->plan_digest = UINT64_C(0xfedcba9876543210);
    m->world_size = world_;
    m->sharding = "fsdp";
    m->n_hparams = 3;
    m->hparam_names[0] = "lr";
    m->hparam_values[0] = 0.1 + 0.2;          /* needs all 17 digits */
    m->hparam_names[1] = "momentum";
    m->hparam_values[1] = 0.95;
    m->hparam_names[2] = "weight_decay";
    m->hparam_values[2] = 1e-300;
}

/* Saves the standard split (chunk 4, owners from rank 0) into path. */
static void save_std(const char *path, uint32_t salt, int64_t step)
{
    set s;
    dmuon_ckpt_meta m;
    meta_init(&m, step);
    set_build(&s, 4, 0, 0, 1, true, salt, -1, "", 0);
    dmuon_rc rc = dmuon_ckpt_save(MPI_COMM_WORLD, 0, path, &m, P, NP, s.p, s.n);
    if (rc != DMUON_OK)
        print_error("save: %s\n", dmuon_errmsg());
    assert_int_equal(rc, DMUON_OK);
    set_free(&s);
}

/* Loads the other split (chunk 5, first boundary at 3, owners rotated):
 * returns rc; on failure checks that nothing was written. */
static dmuon_rc load_other(const char *path, const dmuon_ckpt_param *params, uint64_t digest,
                           uint32_t salt)
{
    set s;
    dmuon_ckpt_meta expect, got;
    meta_init(&expect, 0);
    expect.model_digest = digest;
    set_build(&s, 5, 3, 1, 1, false, 0, -1, "", 0);
    dmuon_rc rc = dmuon_ckpt_load(MPI_COMM_WORLD, 0, path, &expect, params, NP, s.p, s.n, &got);
    if (rc == DMUON_OK)
        assert_int_equal(set_wrong(&s, salt), 0);
    else
        assert_true(set_untouched(&s));
    set_free(&s);
    return rc;
}

/* ------------------------------------------------------- file helpers -- */

static char *path_in(char *buf, size_t cap, const char *a, const char *b)
{
    snprintf(buf, cap, "%s/%s", a, b);
    return buf;
}

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    assert_non_null(b);
    assert_int_equal(fread(b, 1, (size_t)n, f), (size_t)n);
    b[n] = '\0';
    fclose(f);
    *len = (size_t)n;
    return b;
}

static void spill(const char *path, const char *b, size_t len)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(b, 1, len, f), len);
    fclose(f);
}

/* Rank 0 replaces the first `from` in the file by `to`. */
static void edit(const char *path, const char *from, const char *to)
{
    if (rank_ == 0) {
        size_t len;
        char *b = slurp(path, &len);
        char *at = strstr(b, from);
        assert_non_null(at);
        size_t fl = strlen(from), tl = strlen(to);
        char *o = malloc(len - fl + tl + 1);
        size_t pre = (size_t)(at - b);
        memcpy(o, b, pre);
        memcpy(o + pre, to, tl);
        memcpy(o + pre + tl, at + fl, len - pre - fl);
        spill(path, o, len - fl + tl);
        free(o);
        free(b);
    }
    MPI_Barrier(MPI_COMM_WORLD);
}

/* Rank 0 copies checkpoint directory a to b (regular files only). */
static void copy_dir(const char *a, const char *b)
{
    if (rank_ == 0) {
        char cmd[512];
        snprintf(cmd, sizeof cmd, "rm -rf '%s' && cp -r '%s' '%s'", b, a, b);
        assert_int_equal(system(cmd), 0);
    }
    MPI_Barrier(MPI_COMM_WORLD);
}

/* Byte offset in the file of tensor name's data (from its header text). */
static long tensor_offset(const char *file, const char *name)
{
    size_t len;
    char *b = slurp(file, &len);
    uint64_t L = 0;
    for (int i = 7; i >= 0; i--)
        L = (L << 8) | (unsigned char)b[i];
    char key[256];
    snprintf(key, sizeof key, "\"%s\":{\"dtype\":\"F32\",\"shape\":[", name);
    char *at = strstr(b + 8, key);
    assert_non_null(at);
    at = strstr(at, "\"data_offsets\":[");
    assert_non_null(at);
    long off = 8 + (long)L + strtol(at + strlen("\"data_offsets\":["), NULL, 10);
    free(b);
    return off;
}

/* Names in tmpdir containing needle (leftover temporary directories). */
static int count_names(const char *needle)
{
    int n = 0;
    DIR *d = opendir(tmpdir);
    struct dirent *e;
    assert_non_null(d);
    while ((e = readdir(d)) != NULL)
        n += strstr(e->d_name, needle) != NULL;
    closedir(d);
    return n;
}

static void expect_msg(const char *needle)
{
    if (getenv("DMUON_TEST_SHOW"))
        print_message("message: %s\n", dmuon_errmsg());
    if (!strstr(dmuon_errmsg(), needle))
        print_error("message '%s' lacks '%s'\n", dmuon_errmsg(), needle);
    assert_non_null(strstr(dmuon_errmsg(), needle));
}

/* -------------------------------------------------------------- tests -- */

/* Saved split one way, loaded split another (several saved pieces per
 * loaded one); meta round trip; layout of the directory. */
static void test_round_trip(void **state)
{
    char dir[256], p[300];
    snprintf(dir, sizeof dir, "%s/rt", tmpdir);
    save_std(dir, 1, 42);
    assert_int_equal(count_names(".tmp."), 0);
    assert_int_equal(access(path_in(p, sizeof p, dir, "manifest.json"), F_OK), 0);
    assert_int_equal(access(path_in(p, sizeof p, dir, "rank-00000.safetensors"), F_OK), 0);

    set s;
    dmuon_ckpt_meta expect, got;
    meta_init(&expect, 0);
    set_build(&s, 5, 3, 1, 1, false, 0, -1, "", 0);
    assert_true(s.n > 0 || world_ > 1);
    dmuon_rc rc = dmuon_ckpt_load(MPI_COMM_WORLD, 0, dir, &expect, P, NP, s.p, s.n, &got);
    if (rc)
        print_error("%s\n", dmuon_errmsg());
    assert_int_equal(rc, DMUON_OK);
    assert_int_equal(set_wrong(&s, 1), 0);
    set_free(&s);
    assert_int_equal(got.step, 42);
    assert_true(got.model_digest == DIGEST);
    assert_true(got.plan_digest == UINT64_C(0xfedcba9876543210));
    assert_int_equal(got.world_size, world_);
    assert_string_equal(got.sharding, "fsdp");
    assert_int_equal(got.n_hparams, 3);
    assert_string_equal(got.hparam_names[0], "lr");
    assert_true(got.hparam_values[0] == 0.1 + 0.2);
    assert_string_equal(got.hparam_names[2], "weight_decay");
    assert_true(got.hparam_values[2] == 1e-300);

    /* one piece per whole tensor, and single elements */
    set w;
    set_build(&w, 1000, 0, 2, 1, false, 0, -1, "", 0);
    assert_int_equal(dmuon_ckpt_load(MPI_COMM_WORLD, 0, dir, NULL, P, NP, w.p, w.n, NULL),
                     DMUON_OK);
    assert_int_equal(set_wrong(&w, 1), 0);
    set_free(&w);
    set_build(&w, 1, 0, 0, 1, false, 0, -1, "", 0);
    assert_int_equal(dmuon_ckpt_load(MPI_COMM_WORLD, 0, dir, NULL, P, NP, w.p, w.n, NULL),
                     DMUON_OK);
    assert_int_equal(set_wrong(&w, 1), 0);
    set_free(&w);
}

/* The files themselves: safetensors framing, manifest sizes and digests. */
static void test_format(void **state)
{
    char dir[256], p[300];
    snprintf(dir, sizeof dir, "%s/fmt", tmpdir);
    save_std(dir, 2, 1);
    if (rank_ == 0) {
        size_t len;
        char *b = slurp(path_in(p, sizeof p, dir, "rank-00000.safetensors"), &len);
        uint64_t L = 0;
        for (int i = 7; i >= 0; i--)
            L = (L << 8) | (unsigned char)b[i];
        assert_true(L % 8 == 0 && 8 + L <= len);
        assert_int_equal(b[8], '{');
        assert_non_null(strstr(b + 8, "\"__metadata__\":{\"format\":\"dmuon-checkpoint\","
                                      "\"version\":\"1\"}"));
        /* chunk 0 of model.a.weight's master is elements 0..3 on rank 0 */
        long off = tensor_offset(p, "model.a.weight/master/0-4");
        assert_non_null(strstr(b + 8, "\"model.a.weight/master/0-4\":{\"dtype\":\"F32\","
                                      "\"shape\":[4],\"data_offsets\":["));
        for (int e = 0; e < 4; e++) {
            uint32_t u;
            memcpy(&u, b + off + 4 * e, 4);
            assert_true(u == value_bits(0, 0, e, 2));
        }
        /* the header ends in padding spaces only, then data */
        for (uint64_t i = 8; i < 8 + L; i++)
            assert_true(b[i] != '\n');
        /* the manifest: every file with its size and the digest of its bytes */
        dmuon_doc d;
        assert_int_equal(dmuon_doc_load_file(&d, path_in(p, sizeof p, dir, "manifest.json")),
                         DMUON_OK);
        yaml_node_t *top = dmuon_doc_root(&d);
        int64_t v;
        assert_int_equal(dmuon_doc_field_int(&d, top, "version", true, &v), DMUON_OK);
        assert_int_equal(v, DMUON_CKPT_VERSION);
        yaml_node_t *files = dmuon_doc_get(&d, top, "files");
        assert_int_equal(dmuon_doc_seq_len(files), (size_t)world_);
        yaml_node_t *f0 = dmuon_doc_seq_at(&d, files, 0);
        const char *name, *dg;
        assert_int_equal(dmuon_doc_field_str(&d, f0, "name", true, &name), DMUON_OK);
        assert_string_equal(name, "rank-00000.safetensors");
        assert_int_equal(dmuon_doc_field_int(&d, f0, "size", true, &v), DMUON_OK);
        assert_int_equal(v, (int64_t)len);
        assert_int_equal(dmuon_doc_field_str(&d, f0, "digest", true, &dg), DMUON_OK);
        char hex[17];
        dmuon_digest_hex(dmuon_digest(b, len, DMUON_DIGEST_SEED), hex);
        assert_string_equal(dg, hex);
        yaml_node_t *pieces = dmuon_doc_get(&d, top, "pieces");
        size_t expect_pieces = 0;
        for (size_t q = 0; q < NP; q++)
            expect_pieces += (size_t)(P[q].role == 1 ? 2 : 3) * (size_t)((numel(&P[q]) + 3) / 4);
        assert_int_equal(dmuon_doc_seq_len(pieces), expect_pieces);
        /* the first piece (sorted: model.a.weight master [0, 4)) and its digest */
        yaml_node_t *p0 = dmuon_doc_seq_at(&d, pieces, 0);
        int64_t lo, hi, po;
        assert_int_equal(dmuon_doc_field_int(&d, p0, "lo", true, &lo), DMUON_OK);
        assert_int_equal(dmuon_doc_field_int(&d, p0, "hi", true, &hi), DMUON_OK);
        assert_int_equal(dmuon_doc_field_int(&d, p0, "offset", true, &po), DMUON_OK);
        assert_int_equal(lo, 0);
        assert_int_equal(hi, 4);
        assert_int_equal(po, off);
        assert_int_equal(dmuon_doc_field_str(&d, p0, "digest", true, &dg), DMUON_OK);
        dmuon_digest_hex(dmuon_digest(b + off, 16, DMUON_DIGEST_SEED), hex);
        assert_string_equal(dg, hex);
        dmuon_doc_release(&d);
        free(b);
    }
    MPI_Barrier(MPI_COMM_WORLD);
}

/* A second save replaces the first; a directory that is not a checkpoint
 * is refused and kept. */
static void test_replace(void **state)
{
    char dir[256], other[256], p[300];
    snprintf(dir, sizeof dir, "%s/rep", tmpdir);
    save_std(dir, 3, 1);
    save_std(dir, 4, 2);
    assert_int_equal(count_names(".tmp."), 0);
    assert_int_equal(count_names(".old."), 0);
    assert_int_equal(load_other(dir, P, DIGEST, 4), DMUON_OK);

    snprintf(other, sizeof other, "%s/notckpt", tmpdir);
    if (rank_ == 0) {
        assert_int_equal(mkdir(other, 0755), 0);
        spill(path_in(p, sizeof p, other, "keep.txt"), "x", 1);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    set s;
    dmuon_ckpt_meta m;
    meta_init(&m, 1);
    set_build(&s, 4, 0, 0, 1, true, 1, -1, "", 0);
    assert_int_equal(dmuon_ckpt_save(MPI_COMM_WORLD, 0, other, &m, P, NP, s.p, s.n), DMUON_EINVAL);
    expect_msg("is not a checkpoint");
    assert_int_equal(access(path_in(p, sizeof p, other, "keep.txt"), F_OK), 0);
    assert_int_equal(count_names(".tmp."), 0);
    set_free(&s);
}

/* Refused saves: nothing left behind. */
static void test_save_errors(void **state)
{
    char dir[256];
    snprintf(dir, sizeof dir, "%s/bad", tmpdir);
    set s;
    dmuon_ckpt_meta m;
    meta_init(&m, 1);
    set_build(&s, 4, 0, 0, 1, true, 1, -1, "", 0);
    dmuon_ckpt_piece keep;
    if (s.n > 1) {   /* overlap: a second piece covering part of the first */
        keep = s.p[1];
        s.p[1] = s.p[0];
        s.p[1].lo = s.p[0].lo + 1;
    }
    dmuon_rc rc = dmuon_ckpt_save(MPI_COMM_WORLD, 0, dir, &m, P, NP, s.p, s.n);
    assert_int_equal(rc, DMUON_EINVAL);
    if (rank_ == 0)
        expect_msg("overlap");
    if (s.n > 1)
        s.p[1] = keep;
    if (rank_ == world_ - 1 && s.n > 0)
        s.p[0].kind = "velocity";
    rc = dmuon_ckpt_save(MPI_COMM_WORLD, 0, dir, &m, P, NP, s.p, s.n);
    assert_int_equal(rc, DMUON_EINVAL);
    expect_msg("unknown kind 'velocity'");
    char rk[32];
    snprintf(rk, sizeof rk, "rank %d: ", world_ - 1);
    expect_msg(rk);
    if (rank_ == world_ - 1 && s.n > 0) {
        s.p[0].kind = "master";
        s.p[0].hi = 1000;
    }
    rc = dmuon_ckpt_save(MPI_COMM_WORLD, 0, dir, &m, P, NP, s.p, s.n);
    assert_int_equal(rc, DMUON_EINVAL);
    expect_msg("is not inside its");
    m.sharding = "ddp";
    assert_int_equal(dmuon_ckpt_save(MPI_COMM_WORLD, 0, dir, &m, P, NP, NULL, 0), DMUON_EINVAL);
    assert_int_equal(access(dir, F_OK), -1);
    assert_int_equal(count_names(".tmp."), 0);
    set_free(&s);
}

static void test_no_checkpoint(void **state)
{
    char dir[256];
    snprintf(dir, sizeof dir, "%s/absent", tmpdir);
    assert_int_equal(load_other(dir, P, DIGEST, 0), DMUON_ENOTFOUND);
    expect_msg("absent/manifest.json' does not exist");
}

static void test_truncated(void **state)
{
    char good[256], dir[256], p[300];
    snprintf(good, sizeof good, "%s/tr-good", tmpdir);
    snprintf(dir, sizeof dir, "%s/tr", tmpdir);
    save_std(good, 5, 1);
    copy_dir(good, dir);
    path_in(p, sizeof p, dir, "rank-00000.safetensors");
    if (rank_ == 0) {
        struct stat st;
        assert_int_equal(stat(p, &st), 0);
        assert_int_equal(truncate(p, st.st_size - 10), 0);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    assert_int_equal(load_other(dir, P, DIGEST, 5), DMUON_ECHECK);
    expect_msg("tr/rank-00000.safetensors");
    expect_msg("truncated (tensor 'model.");
    /* the good copy still loads */
    assert_int_equal(load_other(good, P, DIGEST, 5), DMUON_OK);
}

static void test_flipped_byte(void **state)
{
    char good[256], dir[256], p[300];
    snprintf(good, sizeof good, "%s/fl-good", tmpdir);
    snprintf(dir, sizeof dir, "%s/fl", tmpdir);
    save_std(good, 6, 1);
    copy_dir(good, dir);
    path_in(p, sizeof p, dir, "rank-00000.safetensors");
    if (rank_ == 0) {
        long off = tensor_offset(p, "model.a.weight/master/0-4") + 5;
        int fd = open(p, O_RDWR);
        char c;
        assert_int_equal(pread(fd, &c, 1, off), 1);
        c ^= 0x10;
        assert_int_equal(pwrite(fd, &c, 1, off), 1);
        close(fd);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    assert_int_equal(load_other(dir, P, DIGEST, 6), DMUON_ECHECK);
    expect_msg("fl/rank-00000.safetensors: tensor 'model.a.weight/master/0-4': digest");
    expect_msg("corrupt");

    /* a flipped byte in the header's padding: the file digest */
    copy_dir(good, dir);
    if (rank_ == 0) {
        size_t len;
        char *b = slurp(p, &len);
        uint64_t L = 0;
        for (int i = 7; i >= 0; i--)
            L = (L << 8) | (unsigned char)b[i];
        char *last = b + 8 + L - 1;
        while (*last == ' ')
            last--;
        if (last < b + 8 + L - 1) {     /* there is padding: make it a tab */
            last[1] = '\t';
            spill(p, b, len);
        } else {                        /* no padding: flip the closing brace */
            last[0] = ']';
            spill(p, b, len);
        }
        free(b);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    dmuon_rc rc = load_other(dir, P, DIGEST, 6);
    assert_true(rc == DMUON_ECHECK || rc == DMUON_EPARSE);
    expect_msg("fl/rank-00000.safetensors");
}

static void test_header_beyond_file(void **state)
{
    char good[256], dir[256], p[300];
    snprintf(good, sizeof good, "%s/hb-good", tmpdir);
    snprintf(dir, sizeof dir, "%s/hb", tmpdir);
    save_std(good, 7, 1);
    copy_dir(good, dir);
    path_in(p, sizeof p, dir, "rank-00000.safetensors");
    if (rank_ == 0) {
        unsigned char l[8] = {0x00, 0xca, 0x9a, 0x3b, 0, 0, 0, 0};   /* 1e9 */
        int fd = open(p, O_RDWR);
        assert_int_equal(pwrite(fd, l, 8, 0), 8);
        close(fd);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    assert_int_equal(load_other(dir, P, DIGEST, 7), DMUON_EPARSE);
    expect_msg("hb/rank-00000.safetensors: header length 1000000000 goes beyond the end");
}

static void test_wrong_version(void **state)
{
    char good[256], dir[256], p[300];
    snprintf(good, sizeof good, "%s/ver-good", tmpdir);
    snprintf(dir, sizeof dir, "%s/ver", tmpdir);
    save_std(good, 8, 1);
    copy_dir(good, dir);
    edit(path_in(p, sizeof p, dir, "manifest.json"), "\"version\": 1,", "\"version\": 2,");
    assert_int_equal(load_other(dir, P, DIGEST, 8), DMUON_EVERSION);
    expect_msg("ver/manifest.json: checkpoint format version 2, this build reads version 1");
}

static void test_wrong_model(void **state)
{
    char dir[256];
    snprintf(dir, sizeof dir, "%s/model", tmpdir);
    save_std(dir, 9, 1);
    assert_int_equal(load_other(dir, P, UINT64_C(0x1111222233334444), 9), DMUON_EMISMATCH);
    expect_msg("model/manifest.json: saved for model digest 0123456789abcdef");
    expect_msg("1111222233334444");
    /* same digest, another parameter table */
    dmuon_ckpt_param q[NP];
    memcpy(q, P, sizeof q);
    q[1].shape[0] = 8;
    assert_int_equal(load_other(dir, q, DIGEST, 9), DMUON_EMISMATCH);
    expect_msg("parameter 'model.b.bias': the checkpoint has shape [7], the model [8]");
}

static void test_missing_range(void **state)
{
    char dir[256];
    snprintf(dir, sizeof dir, "%s/gap", tmpdir);
    set s;
    dmuon_ckpt_meta m;
    meta_init(&m, 1);
    set_build(&s, 4, 0, 0, 1, true, 10, 3, "momentum", 9);   /* [8, 12) of d's momentum */
    assert_int_equal(dmuon_ckpt_save(MPI_COMM_WORLD, 0, dir, &m, P, NP, s.p, s.n), DMUON_OK);
    set_free(&s);
    assert_int_equal(load_other(dir, P, DIGEST, 10), DMUON_ENOTFOUND);
    expect_msg("no saved piece covers parameter 'model.d.weight' kind 'momentum' elements "
               "[8, 12)");
}

static void test_malformed_manifest(void **state)
{
    char good[256], dir[256], p[300];
    snprintf(good, sizeof good, "%s/mf-good", tmpdir);
    snprintf(dir, sizeof dir, "%s/mf", tmpdir);
    save_std(good, 11, 1);
    path_in(p, sizeof p, dir, "manifest.json");

    copy_dir(good, dir);                      /* cut in half */
    if (rank_ == 0) {
        size_t len;
        char *b = slurp(p, &len);
        spill(p, b, len / 2);
        free(b);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    assert_int_equal(load_other(dir, P, DIGEST, 11), DMUON_EPARSE);
    expect_msg("mf/manifest.json:");

    copy_dir(good, dir);                      /* a required field renamed */
    edit(p, "\"pieces\"", "\"piecez\"");
    assert_int_equal(load_other(dir, P, DIGEST, 11), DMUON_EPARSE);
    expect_msg("missing required field 'pieces'");

    copy_dir(good, dir);                      /* a piece beyond its file */
    edit(p, "\"offset\": ", "\"offset\": 9999");
    assert_int_equal(load_other(dir, P, DIGEST, 11), DMUON_EPARSE);
    expect_msg("does not hold");

    copy_dir(good, dir);                      /* two saved pieces overlap */
    edit(p, "\"lo\": 4,", "\"lo\": 3,");
    dmuon_rc rc = load_other(dir, P, DIGEST, 11);
    assert_int_equal(rc, DMUON_EPARSE);
    expect_msg("overlap");

    copy_dir(good, dir);                      /* manifest and header disagree */
    char from[64], to[64], f0[300];
    long off = tensor_offset(path_in(f0, sizeof f0, dir, "rank-00000.safetensors"),
                             "model.a.weight/master/0-4");
    snprintf(from, sizeof from, "\"offset\": %ld,", off);
    snprintf(to, sizeof to, "\"offset\": %ld,", off + 4);
    edit(p, from, to);
    assert_int_equal(load_other(dir, P, DIGEST, 11), DMUON_ECHECK);
    expect_msg("mf/rank-00000.safetensors: tensor 'model.a.weight/master/0-4': the header says");
}

/* -------------------------------------------------------------- export -- */

/* Independent roundings: bf16 by comparing the two neighbours in double;
 * f16 through the compiler's _Float16 conversion. */
static uint16_t ref_bf16(float x)
{
    uint32_t u, lo, hi;
    memcpy(&u, &x, sizeof u);
    lo = u & 0xffff0000u;
    hi = lo + 0x10000u;
    float fl, fh;
    memcpy(&fl, &lo, sizeof fl);
    memcpy(&fh, &hi, sizeof fh);
    double dh = isinf(fh) ? ldexp(copysign(1.0, x), 128) : (double)fh;
    double el = fabs((double)x - fl), eh = fabs(dh - x);
    if (el < eh) return (uint16_t)(lo >> 16);
    if (eh < el) return (uint16_t)(hi >> 16);
    return (uint16_t)(((lo >> 16) & 1) ? hi >> 16 : lo >> 16);
}

static void test_export(void **state)
{
    char path[256];
    snprintf(path, sizeof path, "%s/model.safetensors", tmpdir);
    set s;
    set_build(&s, 3, 2, 1, 1, true, 12, -1, "", 0);
    dmuon_rc rc = dmuon_ckpt_export(MPI_COMM_WORLD, 0, path, P, NP, s.p, s.n);
    if (rc)
        print_error("%s\n", dmuon_errmsg());
    assert_int_equal(rc, DMUON_OK);
    set_free(&s);
    if (rank_ == 0) {
        size_t len;
        char *b = slurp(path, &len);
        uint64_t L = 0;
        for (int i = 7; i >= 0; i--)
            L = (L << 8) | (unsigned char)b[i];
        assert_true(L % 8 == 0 && 8 + L <= len);
        dmuon_doc d;
        assert_int_equal(dmuon_doc_load_buffer(&d, path, b + 8, L), DMUON_OK);
        yaml_node_t *top = dmuon_doc_root(&d);
        uint64_t next = 0;
        long bad = 0;
        for (size_t q = 0; q < NP; q++) {
            yaml_node_t *t = dmuon_doc_get(&d, top, P[q].name), *sh, *off;
            assert_non_null(t);
            const char *dt;
            assert_int_equal(dmuon_doc_field_str(&d, t, "dtype", true, &dt), DMUON_OK);
            const char *want = P[q].dtype == DMUON_F32 ? "F32" : P[q].dtype == DMUON_BF16 ? "BF16"
                                                                                          : "F16";
            assert_string_equal(dt, want);
            sh = dmuon_doc_get(&d, t, "shape");
            assert_int_equal(dmuon_doc_seq_len(sh), (size_t)P[q].ndim);
            for (int k = 0; k < P[q].ndim; k++) {
                int64_t v;
                assert_int_equal(dmuon_doc_to_int(&d, dmuon_doc_seq_at(&d, sh, k), "shape", &v),
                                 DMUON_OK);
                assert_int_equal(v, P[q].shape[k]);
            }
            off = dmuon_doc_get(&d, t, "data_offsets");
            int64_t b0, b1;
            assert_int_equal(dmuon_doc_to_int(&d, dmuon_doc_seq_at(&d, off, 0), "o", &b0), 0);
            assert_int_equal(dmuon_doc_to_int(&d, dmuon_doc_seq_at(&d, off, 1), "o", &b1), 0);
            assert_int_equal((uint64_t)b0, next);   /* contiguous, in table order */
            size_t es = P[q].dtype == DMUON_F32 ? 4 : 2;
            assert_int_equal(b1 - b0, numel(&P[q]) * (int64_t)es);
            next = (uint64_t)b1;
            const unsigned char *data = (const unsigned char *)b + 8 + L + b0;
            for (int64_t e = 0; e < numel(&P[q]); e++) {
                float x = value(q, 0, e, 12);
                if (P[q].dtype == DMUON_F32) {
                    uint32_t u;
                    memcpy(&u, data + 4 * e, 4);
                    bad += u != value_bits(q, 0, e, 12);
                } else if (P[q].dtype == DMUON_BF16) {
                    uint16_t h;
                    memcpy(&h, data + 2 * e, 2);
                    bad += h != ref_bf16(x);
                } else {
#ifdef __FLT16_MANT_DIG__
                    _Float16 r = (_Float16)x;
                    uint16_t h, w;
                    memcpy(&h, data + 2 * e, 2);
                    memcpy(&w, &r, 2);
                    bad += h != w;
#endif
                }
            }
        }
        assert_int_equal(bad, 0);
        assert_int_equal(8 + L + next, len);
        dmuon_doc_release(&d);
        free(b);
    }
    MPI_Barrier(MPI_COMM_WORLD);

    /* a gap in the master pieces: refused, no file */
    char gap[256];
    snprintf(gap, sizeof gap, "%s/gap.safetensors", tmpdir);
    set_build(&s, 3, 2, 1, 1, true, 12, 1, "master", 4);
    assert_int_equal(dmuon_ckpt_export(MPI_COMM_WORLD, 0, gap, P, NP, s.p, s.n), DMUON_EINVAL);
    expect_msg("parameter 'model.b.bias': elements [2, 5) (of 7) are in no rank's master piece");
    assert_int_equal(access(gap, F_OK), -1);
    assert_int_equal(count_names("gap.safetensors.tmp"), 0);
    set_free(&s);
    dmuon_ckpt_param q[NP];
    memcpy(q, P, sizeof q);
    q[2].dtype = DMUON_I32;
    assert_int_equal(dmuon_ckpt_export(MPI_COMM_WORLD, 0, gap, q, NP, NULL, 0), DMUON_EINVAL);
    expect_msg("parameter 'model.c.scale': dtype i32");
}

/* ------------------------------------------------------- the MPI driver -- */

static int driver(int argc, char **argv)
{
    const char *mode = argv[1];
    dmuon_rc rc;
    if (!strcmp(mode, "bench") && argc == 4) {
        /* MIB MiB in all, in 1 MiB master and momentum pieces of one
         * parameter per rank */
        int64_t per = (int64_t)atol(argv[3]) * (1 << 20) / 4 / world_;
        dmuon_ckpt_param *ps = calloc((size_t)world_, sizeof *ps);
        char (*names)[32] = calloc((size_t)world_, 32);
        size_t np = (size_t)world_, n = 0;
        int64_t chunk = 1 << 18;
        dmuon_ckpt_piece *pc = calloc((size_t)(per / chunk + 1) * 2, sizeof *pc);
        float *data = malloc((size_t)per * 4);
        for (int r = 0; r < world_; r++) {
            snprintf(names[r], 32, "p%d", r);
            ps[r] = (dmuon_ckpt_param){.name = names[r], .ndim = 1, .shape = {per / 2},
                                       .dtype = DMUON_F32};
        }
        for (int64_t i = 0; i < per; i++)
            data[i] = (float)(i % 1000) * 0.5f;
        for (int k = 0; k < 2; k++)
            for (int64_t lo = 0; lo < per / 2; lo += chunk)
                pc[n++] = (dmuon_ckpt_piece){.name = names[rank_], .kind = k ? "momentum" : "master",
                                             .lo = lo, .hi = lo + chunk < per / 2 ? lo + chunk : per / 2,
                                             .data = data + k * (per / 2) + lo};
        dmuon_ckpt_meta m;
        meta_init(&m, 1);
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = (dmuon_now_ms() / 1e3);
        rc = dmuon_ckpt_save(MPI_COMM_WORLD, 0, argv[2], &m, ps, np, pc, n);
        double t1 = (dmuon_now_ms() / 1e3);
        if (rc == DMUON_OK)
            rc = dmuon_ckpt_load(MPI_COMM_WORLD, 0, argv[2], NULL, ps, np, pc, n, NULL);
        double t2 = (dmuon_now_ms() / 1e3);
        if (rank_ == 0)
            printf("ckpt bench: %d ranks, %.1f MiB: save %.3f s (%.0f MiB/s), load %.3f s "
                   "(%.0f MiB/s)%s%s\n", world_, (double)per * 4 * world_ / (1 << 20), t1 - t0,
                   (double)per * 4 * world_ / (1 << 20) / (t1 - t0), t2 - t1,
                   (double)per * 4 * world_ / (1 << 20) / (t2 - t1), rc ? ": " : "",
                   rc ? dmuon_errmsg() : "");
        free(ps);
        free(names);
        free(pc);
        free(data);
        return rc ? 1 : 0;
    }
    if ((strcmp(mode, "save") && strcmp(mode, "load")) || argc < 7) {
        fprintf(stderr, "usage: test_ckpt save|load DIR CHUNK SHIFT ROTATE REPL [EXPORT] | "
                        "bench DIR MIB\n");
        return 2;
    }
    bool save = !strcmp(mode, "save");
    set s;
    set_build(&s, atol(argv[3]), atol(argv[4]), atoi(argv[5]), atoi(argv[6]), save, 77, -1, "",
              0);
    dmuon_ckpt_meta m, got;
    meta_init(&m, 5);
    if (atoi(argv[6]) > 1)
        m.sharding = "hsdp";
    if (save) {
        rc = dmuon_ckpt_save(MPI_COMM_WORLD, 0, argv[2], &m, P, NP, s.p, s.n);
    } else {
        rc = dmuon_ckpt_load(MPI_COMM_WORLD, 0, argv[2], &m, P, NP, s.p, s.n, &got);
        if (rc == DMUON_OK) {
            long bad = set_wrong(&s, 77), all;
            MPI_Allreduce(&bad, &all, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
            if (rank_ == 0)
                printf("load on %d ranks: %ld wrong elements; step %lld, saved by %d ranks (%s)\n",
                       world_, all, (long long)got.step, got.world_size, got.sharding);
            if (all)
                rc = DMUON_ECHECK;
        }
    }
    if (rc == DMUON_OK && argc > 7)
        rc = dmuon_ckpt_export(MPI_COMM_WORLD, 0, argv[7], P, NP, s.p, s.n);
    if (rc != DMUON_OK)
        fprintf(stderr, "rank %d: %s: %s\n", rank_, mode, dmuon_errmsg());
    set_free(&s);
    return rc == DMUON_OK ? 0 : 1;
}

/* ---------------------------------------------------------------- main -- */

static int setup(void **state)
{
    if (rank_ == 0)
        testutil_setup("ckpt");
    MPI_Bcast(tmpdir, sizeof tmpdir, MPI_CHAR, 0, MPI_COMM_WORLD);
    return 0;
}

static int teardown(void **state)
{
    MPI_Barrier(MPI_COMM_WORLD);
    return rank_ == 0 ? testutil_teardown() : 0;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &world_);
    int rc;
    if (argc > 1) {
        rc = driver(argc, argv);
    } else {
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_round_trip),       cmocka_unit_test(test_format),
            cmocka_unit_test(test_replace),          cmocka_unit_test(test_save_errors),
            cmocka_unit_test(test_no_checkpoint),    cmocka_unit_test(test_truncated),
            cmocka_unit_test(test_flipped_byte),     cmocka_unit_test(test_header_beyond_file),
            cmocka_unit_test(test_wrong_version),    cmocka_unit_test(test_wrong_model),
            cmocka_unit_test(test_missing_range),    cmocka_unit_test(test_malformed_manifest),
            cmocka_unit_test(test_export),
        };
        rc = cmocka_run_group_tests(tests, setup, teardown);
    }
    MPI_Finalize();
    return rc;
}
