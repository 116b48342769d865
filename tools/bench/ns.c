/*
 * bench/ns.c — `dmuon-bench ns`: Gram vs direct Newton–Schulz side by side
 * in one run, per shape, next to the device's sgemm rate.
 *
 * For each shape: the Gram and the direct variant of the same coefficients
 * and the plain sgemm of the dominant product (s x s by s x l), interleaved
 * call by call (warm-up rounds, then timed rounds; medians), and the
 * effective rates (each variant's
 * operation count, dmuon_ns_flops, over its time).  The two outputs are
 * compared element by element; #wrong counts elements that differ by more
 * than 1e-2 of the largest element (FP32; BF16: 0.3, since BF16 rounding
 * leaves the weakest directions of a Gaussian input unresolved, see
 * dmuon-verify ns) and makes the exit code 1.  gram/op is the Gram time over
 * its operation count at the GEMM rate of the NS's precision measured on the
 * same product (BF16: cublasGemmEx on BF16 operands); --target F makes a
 * shape with gram/op > F fail too (the paper's C.3 goal: F = 1.2).  The row
 * names the kernels of the symmetric products (chosen per shape on a GPU,
 * cached in --db's ns_kernel table).
 */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "bench.h"
#include "common/opt.h"
#include "dmuon/timer.h"
#include "dmuon/costdb.h"
#include "dmuon/io.h"
#include "dmuon/ns.h"
#include "dmuon/probe.h"


static const char *usage_text =
    "usage: dmuon-bench ns [--model MODEL... | --shapes MxN,...] [options]\n"
    "\n"
    "Times Gram and direct Newton-Schulz side by side for each shape, next to the\n"
    "device's sgemm on the dominant product (s x s times s x l, s = min(m,n), l = max),\n"
    "and reports effective rates (NS operation count / time) as a fraction of sgemm's.\n"
    "\n"
    "  --model MODEL        take the model's distinct Muon shapes (repeatable; a model\n"
    "                       without Muon matrices is an error)\n"
    "  --shapes MxN,...     these shapes instead of a model's (default without --model:\n"
    "                       256x1536,1536x1536,8960x1536,1536x8960, the Qwen2.5-1.5B\n"
    "                       Muon shapes)\n"
    "  --coeffs pe5|muon5   coefficient set (default pe5)\n"
    "  --dtype fp32|bf16    precision (default fp32)\n"
    "  --device cpu|cuda    where to run (default cpu)\n"
    "  --warmup W           untimed calls per case (default cpu 1, cuda 5)\n"
    "  --iters I            timed calls per case (default cpu 3, cuda 20)\n"
    "  --max-elements N     skip shapes with more than N elements (default cpu 2^25,\n"
    "                       cuda unlimited); skipped shapes are listed\n"
    "  --db PATH            cost database for the GPU's per-shape kernel choices (table\n"
    "                       ns_kernel; without it they are measured once per run)\n"
    "  --target F           fail (exit 1) a shape whose Gram time exceeds F times its\n"
    "                       operation count at the measured GEMM rate of the NS's dtype\n"
    "                       (bf16: cuBLAS GemmEx on BF16 operands; the gram/op column)\n"
    "  --json               machine-readable output on stdout\n"
    "  -h, --help           this text\n";

static const char *qwen15_shapes = "256x1536,1536x1536,8960x1536,1536x8960";

static int fail(dmuon_rc rc, const char *msg)
{
    fprintf(stderr, "dmuon-bench: error: %s\n", msg);
    return dmuon_rc_exit_code(rc);
}

typedef struct {
    int64_t m, n;
    double gram_ms, direct_ms, sgemm_ms, gemm_ms;
    double gram_gflops, direct_gflops, sgemm_gflops, gemm_gflops;
    double gram_over_op;      /* gram_ms / (its operation count at gemm_gflops) */
    const char *kern_gram, *kern_square;
    int64_t wrong;
} result;

static dmuon_rc bench_shape(dmuon_ns *g, dmuon_ns *d, int64_t m, int64_t n, int warmup,
                            int iters, double wrong_tol, result *r)
{
    dmuon_rc rc = DMUON_OK;
    const size_t count = (size_t)(m * n);
    float *host = malloc(count * sizeof *host), *h1 = malloc(count * sizeof *h1),
          *h2 = malloc(count * sizeof *h2);
    double *t = malloc(4 * (size_t)iters * sizeof *t);
    const dmuon_dtype dt = dmuon_ns_get_opts(g)->dtype;
    float *x = NULL, *o1 = NULL, *o2 = NULL;
    if (!host || !h1 || !h2 || !t) {
        rc = DMUON_FAIL(DMUON_ENOMEM, "out of memory for a %lld x %lld case", (long long)m,
                        (long long)n);
        goto done;
    }
    DMUON_TRY_GOTO(rc, dmuon_ns_test_input(DMUON_NS_INPUT_GAUSSIAN, m, n, 1, host), done);
    DMUON_TRY_GOTO(rc, dmuon_ns_mem_alloc(g, count, &x), done);
    DMUON_TRY_GOTO(rc, dmuon_ns_mem_alloc(g, count, &o1), done);
    DMUON_TRY_GOTO(rc, dmuon_ns_mem_alloc(g, count, &o2), done);
    DMUON_TRY_GOTO(rc, dmuon_ns_mem_put(g, x, host, count), done);
    memset(r, 0, sizeof *r);
    r->m = m;
    r->n = n;
    /* interleaved per iteration (Gram, direct, sgemm, BF16 GEMM), so a
     * change in the machine's load during the run affects all alike */
    const int64_t s = m < n ? m : n, l = m < n ? n : m;
    DMUON_TRY_GOTO(rc, dmuon_ns_kernels(g, m, n, &r->kern_gram, &r->kern_square), done);
    for (int i = 0; i < warmup + iters; i++) {
        double t0 = dmuon_now_ms(), one, bf = 0.0;
        DMUON_TRY_GOTO(rc, dmuon_ns_run(g, x, m, n, o1), done);
        double t1 = dmuon_now_ms();
        DMUON_TRY_GOTO(rc, dmuon_ns_run(d, x, m, n, o2), done);
        double t2 = dmuon_now_ms();
        DMUON_TRY_GOTO(rc, dmuon_ns_time_sgemm(g, s, l, s, 0, 1, &one), done);
        if (dt == DMUON_BF16)
            DMUON_TRY_GOTO(rc, dmuon_ns_time_gemm(g, DMUON_BF16, s, l, s, 0, 1, &bf), done);
        if (i >= warmup) {
            t[i - warmup] = t1 - t0;
            t[iters + i - warmup] = t2 - t1;
            t[2 * iters + i - warmup] = one;
            t[3 * iters + i - warmup] = dt == DMUON_BF16 ? bf : one;
        }
    }
    r->gram_ms = dmuon_median(t, (size_t)iters);
    r->direct_ms = dmuon_median(t + iters, (size_t)iters);
    r->sgemm_ms = dmuon_median(t + 2 * iters, (size_t)iters);
    r->gemm_ms = dmuon_median(t + 3 * iters, (size_t)iters);
    r->gram_gflops = dmuon_ns_flops(dmuon_ns_get_opts(g), m, n) / (r->gram_ms * 1e6);
    r->direct_gflops = dmuon_ns_flops(dmuon_ns_get_opts(d), m, n) / (r->direct_ms * 1e6);
    r->sgemm_gflops = 2.0 * (double)s * (double)s * (double)l / (r->sgemm_ms * 1e6);
    r->gemm_gflops = 2.0 * (double)s * (double)s * (double)l / (r->gemm_ms * 1e6);
    r->gram_over_op = r->gram_ms * r->gemm_gflops * 1e6 / dmuon_ns_flops(dmuon_ns_get_opts(g), m, n);
    DMUON_TRY_GOTO(rc, dmuon_ns_mem_get(g, h1, o1, count), done);
    DMUON_TRY_GOTO(rc, dmuon_ns_mem_get(g, h2, o2, count), done);
    double big = 0.0;
    for (size_t i = 0; i < count; i++)
        big = fabs((double)h2[i]) > big ? fabs((double)h2[i]) : big;
    for (size_t i = 0; i < count; i++)
        r->wrong += fabs((double)h1[i] - (double)h2[i]) > wrong_tol * big;
done:
    dmuon_ns_mem_free(g, x);
    dmuon_ns_mem_free(g, o1);
    dmuon_ns_mem_free(g, o2);
    free(host);
    free(h1);
    free(h2);
    free(t);
    return rc;
}

/* Appends the model's Muon shapes to *shapes. */
static dmuon_rc add_model(const char *path, int64_t (**shapes)[2], size_t *n)
{
    int64_t(*more)[2] = NULL;
    size_t k = 0;
    DMUON_TRY(dmuon_probe_model_shapes(path, &more, &k));
    int64_t(*grown)[2] = realloc(*shapes, (*n + k + 1) * sizeof **shapes);
    if (!grown) {
        free(more);
        return DMUON_FAIL(DMUON_ENOMEM, "out of memory");
    }
    memcpy(grown + *n, more, k * sizeof *more);
    *shapes = grown;
    *n += k;
    free(more);
    return DMUON_OK;
}

int bench_ns_main(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"model", required_argument, NULL, 'm'}, {"shapes", required_argument, NULL, 's'},
        {"coeffs", required_argument, NULL, 'c'}, {"dtype", required_argument, NULL, 't'},
        {"device", required_argument, NULL, 'd'}, {"warmup", required_argument, NULL, 'w'},
        {"iters", required_argument, NULL, 'i'}, {"max-elements", required_argument, NULL, 'x'},
        {"json", no_argument, NULL, 'j'}, {"help", no_argument, NULL, 'h'},
        {"db", required_argument, NULL, 'D'}, {"target", required_argument, NULL, 'T'},
        {NULL, 0, NULL, 0}};
    const char *db_path = NULL;
    double target = -1.0;
    dmuon_costdb *db = NULL;
    int64_t(*shapes)[2] = NULL;
    size_t n = 0;
    const char *set = "pe5", *dtype = "fp32";
    int warmup = -1, iters = -1;
    long long max_el = -1;
    bool json = false, have_model = false, have_shapes = false;
    static const char excl[] = "--model and --shapes exclude each other: give one";
    dmuon_device_kind dev = DMUON_DEVICE_CPU;
    char msg[512], *end = NULL;
    int c, code = 0;
    dmuon_rc rc = DMUON_OK;
    optind = 1;
    opterr = 0;   /* our message (with a suggestion) */
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        int64_t v;
        switch (c) {
        case 'm':
            if (have_shapes) {
                code = fail(DMUON_EINVAL, excl);
                goto done;
            }
            have_model = true;
            if ((rc = add_model(optarg, &shapes, &n)) != DMUON_OK) {
                code = fail(rc, dmuon_errmsg());
                goto done;
            }
            break;
        case 's': {
            int64_t(*more)[2] = NULL;
            size_t k = 0;
            if (have_model) {
                code = fail(DMUON_EINVAL, excl);
                goto done;
            }
            have_shapes = true;
            if ((rc = dmuon_probe_parse_shapes(optarg, &more, &k)) != DMUON_OK) {
                code = fail(rc, dmuon_errmsg());
                goto done;
            }
            int64_t(*grown)[2] = realloc(shapes, (n + k) * sizeof *shapes);
            if (!grown) {
                free(more);
                code = fail(DMUON_ENOMEM, "out of memory");
                goto done;
            }
            shapes = grown;
            memcpy(shapes + n, more, k * sizeof *more);
            n += k;
            free(more);
            break;
        }
        case 'c': set = optarg; break;
        case 't': dtype = optarg; break;
        case 'd':
            if (dmuon_device_parse(optarg, &dev) != DMUON_OK) {
                code = fail(DMUON_EINVAL, dmuon_errmsg());
                goto done;
            }
            break;
        case 'w':
        case 'i':
        case 'x':
            if (tool_parse_int(c == 'w' ? "--warmup" : c == 'i' ? "--iters" : "--max-elements",
                               optarg, c == 'w' ? 0 : 1, c == 'x' ? INT64_MAX : 1000000, &v, msg,
                               sizeof msg)) {
                code = fail(DMUON_EINVAL, msg);
                goto done;
            }
            if (c == 'w')
                warmup = (int)v;
            else if (c == 'i')
                iters = (int)v;
            else
                max_el = v;
            break;
        case 'j': json = true; break;
        case 'D': db_path = optarg; break;
        case 'T':
            target = strtod(optarg, &end);
            if (*end || !*optarg || !(target > 0.0)) {
                snprintf(msg, sizeof msg, "--target '%s': expected a number > 0", optarg);
                code = fail(DMUON_EINVAL, msg);
                goto done;
            }
            break;
        case 'h': fputs(usage_text, stdout); goto done;
        default:
            tool_unknown_option(argv[0], argv[optind - 1], longopts);
            fputs(usage_text, stderr);
            code = 2;
            goto done;
        }
    }
    if (optind < argc) {
        snprintf(msg, sizeof msg, "unexpected argument '%s' (see --help)", argv[optind]);
        code = fail(DMUON_EINVAL, msg);
        goto done;
    }
    if (strcasecmp(set, "pe5") && strcasecmp(set, "muon5")) {
        snprintf(msg, sizeof msg, "--coeffs '%s': expected pe5 or muon5", set);
        code = fail(DMUON_EINVAL, msg);
        goto done;
    }
    set = strcasecmp(set, "pe5") ? "muon5" : "pe5";   /* the canonical spelling */
    if (n == 0 && (rc = dmuon_probe_parse_shapes(qwen15_shapes, &shapes, &n)) != DMUON_OK) {
        code = fail(rc, dmuon_errmsg());
        goto done;
    }
    if ((rc = dmuon_probe_check_shapes((const int64_t(*)[2])shapes, n)) != DMUON_OK) {
        code = fail(rc, dmuon_errmsg());
        goto done;
    }
    if (warmup < 0)
        warmup = dev == DMUON_DEVICE_CUDA ? 5 : 1;
    if (iters < 0)
        iters = dev == DMUON_DEVICE_CUDA ? 20 : 3;
    if (max_el < 0)
        max_el = dev == DMUON_DEVICE_CUDA ? -1 : (1LL << 25);

    dmuon_ns_opts go, dopt;
    dmuon_ns_opts_init(&go);
    char vname[32];
    snprintf(vname, sizeof vname, "gram-%s", set);
    if ((rc = dmuon_ns_opts_set_variant(&go, vname)) != DMUON_OK ||
        (rc = dmuon_ns_opts_set_dtype(&go, dtype)) != DMUON_OK) {
        code = fail(rc, dmuon_errmsg());
        goto done;
    }
    dopt = go;
    dopt.method = DMUON_NS_DIRECT;
    dmuon_ns *g = NULL, *d = NULL;
    if ((rc = dmuon_ns_create(dev, -1, &go, &g)) != DMUON_OK ||
        (rc = dmuon_ns_create(dev, -1, &dopt, &d)) != DMUON_OK) {
        dmuon_ns_free(g);
        code = fail(rc, dmuon_errmsg());
        goto done;
    }
    if (db_path && (rc = dmuon_costdb_open(db_path, true, 30000, &db)) != DMUON_OK) {
        dmuon_ns_free(g);
        dmuon_ns_free(d);
        code = fail(rc, dmuon_errmsg());
        goto done;
    }
    dmuon_ns_set_costdb(g, db);
    dmuon_ns_set_costdb(d, db);
    char device[128];
    if (dmuon_device_name(dev, device, sizeof device) != DMUON_OK)
        snprintf(device, sizeof device, "%s", dev == DMUON_DEVICE_CUDA ? "cuda" : "cpu");
    dmuon_json w;
    if (json) {
        dmuon_json_init(&w, stdout, true);
        dmuon_json_begin_object(&w);
        dmuon_json_kstr(&w, "device", device);
        dmuon_json_kstr(&w, "coeffs", set);
        dmuon_json_kstr(&w, "dtype", dmuon_ns_opts_dtype_name(&go));
        dmuon_json_kint(&w, "warmup", warmup);
        dmuon_json_kint(&w, "iters", iters);
        dmuon_json_key(&w, "shapes");
        dmuon_json_begin_array(&w);
    } else {
        printf("# dmuon-bench ns: %s, %s %s, warmup %d, iters %d (medians)\n", device, set,
               dmuon_ns_opts_dtype_name(&go), warmup, iters);
        printf("# eff = NS operation count / time; sgemm = the s x s by s x l product; "
               "#wrong = elements where Gram and direct differ by > %g of the largest\n",
               go.dtype == DMUON_BF16 ? 0.3 : 1e-2);
        if (go.dtype == DMUON_BF16)
            printf("# bf16: the sgemm reference is FP32; on GPUs whose BF16 products run on "
                   "tensor cores the fractions exceed 1\n");
        printf("# gemm_GF = GEMM rate at the NS's dtype on that product; gram/op = Gram time "
               "over its operation count at that rate%s; kernels = X.X^T/R.R products\n",
               target > 0 ? " (--target gates it)" : "");
        printf("%-11s %11s %11s %8s %9s %9s %9s %9s %9s %9s %8s %-9s %7s\n", "shape", "gram_ms",
               "direct_ms", "dir/gram", "gram_GF/s", "dir_GF/s", "sgemm_GF", "gram/sg", "dir/sg",
               "gemm_GF", "gram/op", "kernels", "#wrong");
    }
    int64_t wrong = 0, over = 0;
    for (size_t i = 0; i < n; i++) {
        const int64_t m = shapes[i][0], k = shapes[i][1];
        if (max_el >= 0 && m * k > max_el) {
            if (json) {
                dmuon_json_begin_object(&w);
                dmuon_json_kint(&w, "m", m);
                dmuon_json_kint(&w, "n", k);
                dmuon_json_kbool(&w, "skipped", true);
                dmuon_json_end_object(&w);
            } else {
                printf("%lldx%-*lld skipped: %lld elements > --max-elements %lld\n",
                       (long long)m, 10 - snprintf(NULL, 0, "%lld", (long long)m) , (long long)k,
                       (long long)(m * k), max_el);
            }
            continue;
        }
        fprintf(stderr, "dmuon-bench: ns [%zu/%zu] %lldx%lld\n", i + 1, n, (long long)m,
                (long long)k);
        result r;
        rc = bench_shape(g, d, m, k, warmup, iters, go.dtype == DMUON_BF16 ? 0.3 : 1e-2, &r);
        if (rc != DMUON_OK)
            break;
        wrong += r.wrong;
        const bool over_target = target > 0 && r.gram_over_op > target;
        over += over_target;
        char kernels[40];
        snprintf(kernels, sizeof kernels, "%s/%s", r.kern_gram, r.kern_square);
        char shape[48];
        snprintf(shape, sizeof shape, "%lldx%lld", (long long)m, (long long)k);
        if (json) {
            dmuon_json_begin_object(&w);
            dmuon_json_kstr(&w, "shape", shape);
            dmuon_json_kint(&w, "m", m);
            dmuon_json_kint(&w, "n", k);
            dmuon_json_kdouble(&w, "gram_ms", r.gram_ms);
            dmuon_json_kdouble(&w, "direct_ms", r.direct_ms);
            dmuon_json_kdouble(&w, "direct_over_gram", r.direct_ms / r.gram_ms);
            dmuon_json_kdouble(&w, "gram_gflops", r.gram_gflops);
            dmuon_json_kdouble(&w, "direct_gflops", r.direct_gflops);
            dmuon_json_kdouble(&w, "sgemm_gflops", r.sgemm_gflops);
            dmuon_json_kdouble(&w, "gram_fraction_of_sgemm", r.gram_gflops / r.sgemm_gflops);
            dmuon_json_kdouble(&w, "direct_fraction_of_sgemm", r.direct_gflops / r.sgemm_gflops);
            dmuon_json_kdouble(&w, "gemm_gflops", r.gemm_gflops);
            dmuon_json_kdouble(&w, "gram_over_op", r.gram_over_op);
            dmuon_json_kstr(&w, "kernel_gram", r.kern_gram);
            dmuon_json_kstr(&w, "kernel_square", r.kern_square);
            if (target > 0)
                dmuon_json_kbool(&w, "within_target", !over_target);
            dmuon_json_kint(&w, "wrong", r.wrong);
            dmuon_json_end_object(&w);
        } else {
            printf("%-11s %11.3f %11.3f %8.2f %9.2f %9.2f %9.2f %9.2f %9.2f %9.2f %8.2f %-9s "
                   "%7lld%s\n", shape, r.gram_ms, r.direct_ms, r.direct_ms / r.gram_ms,
                   r.gram_gflops, r.direct_gflops, r.sgemm_gflops, r.gram_gflops / r.sgemm_gflops,
                   r.direct_gflops / r.sgemm_gflops, r.gemm_gflops, r.gram_over_op, kernels,
                   (long long)r.wrong, over_target ? "  OVER TARGET" : "");
        }
        fflush(stdout);
    }
    if (json) {
        dmuon_json_end_array(&w);
        dmuon_json_kint(&w, "wrong", wrong);
        dmuon_json_end_object(&w);
        fputc('\n', stdout);
    }
    dmuon_ns_free(g);
    dmuon_ns_free(d);
    dmuon_costdb_close(db);
    if (rc != DMUON_OK) {
        code = fail(rc, dmuon_errmsg());
        goto done;
    }
    if (wrong) {
        fprintf(stderr, "dmuon-bench: ns: %lld elements differ between Gram and direct NS\n",
                (long long)wrong);
        code = 1;
    }
    if (over) {
        fprintf(stderr, "dmuon-bench: ns: %lld shape(s) over --target %g (Gram time / operation "
                "count at the GEMM rate)\n", (long long)over, target);
        code = 1;
    }
done:
    free(shapes);
    return code;
}
