/*
 * dmuon-train — the reference trainer: a small llama-style decoder trained
 * on byte-level text through the training runtime, in any of the paper's
 * four lines (A AdamW/FSDP, B gather-then-replicate Muon, C per-owner MPI
 * collectives, D dmuon).
 *
 *   mpirun -np 8 dmuon-train --ranks-per-node 2 --line D [options]
 *   dmuon-train --write-config FILE | --write-yaml FILE   (the model for dmuon-plan)
 *
 * Flags are parsed here; the model is model.c, the text data.c, the loop
 * train.c, everything else libcore.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <mpi.h>

#include "common/opt.h"
#include "config.h"
#include "data.h"
#include "dmuon/plan.h"
#include "dmuon/runtime.h"
#include "dmuon/topo.h"
#include "model.h"
#include "train.h"

static const char usage[] =
    "usage: mpirun -np N dmuon-train [options]\n"
    "       dmuon-train --write-config FILE | --write-yaml FILE [model options]\n"
    "       dmuon-train --version\n"
    "\n"
    "Trains a small llama-style decoder (byte-level tokens, FP32 on the CPU) on real text\n"
    "through the dmuon training runtime, and logs loss, validation loss, throughput and\n"
    "per-phase times.  By default the text is Debian's fortunes (/usr/share/games/fortunes,\n"
    "installed by make deps), every 10th block of 4 KiB held out for validation.\n"
    "\n"
    "model:\n"
    "      --layers L            transformer blocks (default 2)\n"
    "      --dim D               width (default 64)\n"
    "      --heads H             attention heads (default 4)\n"
    "      --kv-heads K          key/value heads, divides H (default 2: grouped-query)\n"
    "      --ffn F               SwiGLU width (default 192)\n"
    "      --tie                 tie lm_head to the token embedding\n"
    "      --seq T               tokens per sequence (default 64)\n"
    "      --init-std S          initial weight std (default 0.02)\n"
    "      --write-config FILE   write the model as a Hugging Face config.json and exit\n"
    "      --write-yaml FILE     write the model as a dmuon YAML inventory and exit\n"
    "training:\n"
    "      --batch B             sequences per micro-batch over all ranks (default 16)\n"
    "      --micro-batches M     micro-batches per step (default 1)\n"
    "      --steps S             optimizer steps (default 300), the schedule's length\n"
    "      --stop-at N           stop after N steps (then --save: a run to --resume)\n"
    "      --lr LR               Muon learning rate (default 0.02)\n"
    "      --adamw-lr LR         AdamW learning rate (every parameter in line A; default 0.01)\n"
    "      --schedule cosine|constant   after warmup (default cosine, to --min-lr x LR)\n"
    "      --warmup W            linear warmup steps (default 20)\n"
    "      --min-lr F            cosine floor as a fraction of the peak (default 0.1)\n"
    "      --clip C              global gradient-norm clipping, 0 off (default 1)\n"
    "      --weight-decay W      decoupled weight decay of matrices (default 0)\n"
    "      --seed N              initial values (default 1)\n"
    "      --data-seed N         batch order (default 1)\n"
    "      --recompute           recompute each block's activations in backward\n"
    "data:\n"
    "      --data PATH           a text file or a directory of them (default the fortunes)\n"
    "      --val-every K         hold out every K-th 4 KiB block (default 10)\n"
    "      --val-windows N       validation sequences per evaluation (default 64)\n"
    "      --eval-every N        validation every N steps, and at the start and end\n"
    "                            (default 50; 0: start and end only)\n"
    "runtime and plan:\n"
    "      --line A|B|C|D        A AdamW on FSDP even shards; B Muon by gather-then-\n"
    "                            replicate; C plan owners with per-owner MPI calls; D dmuon\n"
    "                            (default D)\n"
    "      --sharding fsdp|hsdp  self-planning: (default fsdp; with --plan the plan's)\n"
    "      --zero 2|3            self-planning: ZeRO stage (default 3; with --plan the plan's)\n"
    "      --ranks-per-node K    virtual nodes of K ranks (default $DMUON_RANKS_PER_NODE or\n"
    "                            the shared-memory node)\n"
    "      --plan PLAN           a plan file of this model (dmuon-plan on --write-config);\n"
    "                            default: plan the running cluster here (cost flops)\n"
    "      --small-unit-bytes B  self-planning: Muon parameters under B bytes share a unit\n"
    "                            (default 0: every matrix its own unit, as this model is small)\n"
    "      --param-dtype T       self-planning: gathered parameter dtype bf16|f32 (default bf16)\n"
    "checkpoints and output:\n"
    "      --save DIR            save the optimizer state at the end (dmuon/ckpt.h), and on\n"
    "                            SIGINT/SIGTERM after the current step (then exit 128+signal)\n"
    "      --save-every N        also save to --save DIR after every N-th step\n"
    "      --resume DIR          continue from a checkpoint (bit-identical to an unbroken run)\n"
    "      --export FILE         write the weights as one safetensors file at the end\n"
    "      --log CSV             per-step log (rank 0): step, loss, val_loss, rates, tokens/s,\n"
    "                            per-phase wall and CPU times (max and mean over ranks)\n"
    "      --rank-log CSV        per-step figures of every rank (rank 0 writes): step, rank,\n"
    "                            step_s and the --log figures (which rank waited where)\n"
    "      --min-val-drop F      exit 1 unless the validation loss falls by at least the\n"
    "                            fraction F from the first evaluation to the last\n"
    "  -q, --quiet               no progress lines\n"
    "      --progress-every N    a progress line every N steps (default 10)\n"
    "  -v, --verbose             error traces\n"
    "  -h, --help\n"
    "      --version             print the dmuon version\n"
    "\n"
    "Every output path (--save, --export, --log) is checked before step 0.  SIGINT or\n"
    "SIGTERM (on any rank) ends the run after the current step: saved to --save DIR when\n"
    "given (atomically; --resume DIR continues it), no export; a second signal kills.\n"
    "\n"
    "exit: 0 ok, 1 a check failed (--min-val-drop), 2 bad input or usage, 3 runtime error,\n"
    "      130/143 interrupted by SIGINT/SIGTERM\n";

enum {
    O_LAYERS = 256, O_DIM, O_HEADS, O_KV, O_FFN, O_TIE, O_SEQ, O_INIT_STD, O_WCONF, O_WYAML,
    O_BATCH, O_MICRO, O_STEPS, O_LR, O_ALR, O_SCHED, O_WARMUP, O_MINLR, O_CLIP, O_WD, O_SEED,
    O_DSEED, O_RECOMP, O_DATA, O_VAL_EVERY, O_VAL_WIN, O_EVAL, O_LINE, O_SHARD, O_ZERO, O_RPN,
    O_PLAN, O_SUB, O_PDT, O_STOP, O_SAVE, O_SAVE_EVERY, O_RESUME, O_EXPORT, O_LOG, O_RANK_LOG, O_MINDROP, O_PROG, O_VERSION
};

static const struct option longopts[] = {
    {"layers", required_argument, 0, O_LAYERS},
    {"dim", required_argument, 0, O_DIM},
    {"heads", required_argument, 0, O_HEADS},
    {"kv-heads", required_argument, 0, O_KV},
    {"ffn", required_argument, 0, O_FFN},
    {"tie", no_argument, 0, O_TIE},
    {"seq", required_argument, 0, O_SEQ},
    {"init-std", required_argument, 0, O_INIT_STD},
    {"write-config", required_argument, 0, O_WCONF},
    {"write-yaml", required_argument, 0, O_WYAML},
    {"batch", required_argument, 0, O_BATCH},
    {"micro-batches", required_argument, 0, O_MICRO},
    {"steps", required_argument, 0, O_STEPS},
    {"stop-at", required_argument, 0, O_STOP},
    {"lr", required_argument, 0, O_LR},
    {"adamw-lr", required_argument, 0, O_ALR},
    {"schedule", required_argument, 0, O_SCHED},
    {"warmup", required_argument, 0, O_WARMUP},
    {"min-lr", required_argument, 0, O_MINLR},
    {"clip", required_argument, 0, O_CLIP},
    {"weight-decay", required_argument, 0, O_WD},
    {"seed", required_argument, 0, O_SEED},
    {"data-seed", required_argument, 0, O_DSEED},
    {"recompute", no_argument, 0, O_RECOMP},
    {"data", required_argument, 0, O_DATA},
    {"val-every", required_argument, 0, O_VAL_EVERY},
    {"val-windows", required_argument, 0, O_VAL_WIN},
    {"eval-every", required_argument, 0, O_EVAL},
    {"line", required_argument, 0, O_LINE},
    {"sharding", required_argument, 0, O_SHARD},
    {"zero", required_argument, 0, O_ZERO},
    {"ranks-per-node", required_argument, 0, O_RPN},
    {"plan", required_argument, 0, O_PLAN},
    {"small-unit-bytes", required_argument, 0, O_SUB},
    {"param-dtype", required_argument, 0, O_PDT},
    {"save", required_argument, 0, O_SAVE},
    {"save-every", required_argument, 0, O_SAVE_EVERY},
    {"resume", required_argument, 0, O_RESUME},
    {"export", required_argument, 0, O_EXPORT},
    {"log", required_argument, 0, O_LOG},
    {"rank-log", required_argument, 0, O_RANK_LOG},
    {"min-val-drop", required_argument, 0, O_MINDROP},
    {"quiet", no_argument, 0, 'q'},
    {"progress-every", required_argument, 0, O_PROG},
    {"verbose", no_argument, 0, 'v'},
    {"help", no_argument, 0, 'h'},
    {"version", no_argument, 0, O_VERSION},
    {0, 0, 0, 0}};

typedef struct {
    tt_opts t;
    dmuon_rt_opts rt;
    const char *data, *plan, *write_config, *write_yaml;
    dmuon_sharding sharding;
    bool sharding_set, param_dtype_set, zero_set;   /* given on the command line */
    int zero, val_every;
    int64_t small_unit_bytes;
    dmuon_dtype param_dtype;
    double min_drop;
    bool verbose;
    int rank;
} cli;

static int usage_error(const cli *c, const char *fmt, const char *arg)
{
    if (c->rank == 0) {
        fprintf(stderr, "dmuon-train: error: ");
        fprintf(stderr, fmt, arg);
        fprintf(stderr, "\n(see dmuon-train --help)\n");
    }
    return 2;
}

static int fail(const cli *c, dmuon_rc rc)
{
    fprintf(stderr, "dmuon-train: error: %s\n", dmuon_errmsg());
    if (c->verbose && *dmuon_errtrace())
        fprintf(stderr, "dmuon-train: trace: %s\n", dmuon_errtrace());
    return dmuon_rc_exit_code(rc);
}

/* Parses argv into c; returns -1 to go on, else the exit code. */
static int parse(cli *c, int argc, char **argv)
{
    int ch;
    int64_t v;
    double d;
    char err[512];
    opterr = 0;
    while ((ch = getopt_long(argc, argv, ":qvh", longopts, NULL)) != -1) {
        const char *a = optarg;
        switch (ch) {
#define INT_OPT(code, lo, hi, dst, what)                                                   \
    case code:                                                                             \
        if (tool_parse_int("--" what, a, lo, hi, &v, err, sizeof err))                     \
            return usage_error(c, "%s", err);                                              \
        dst = v;                                                                           \
        break;
#define NUM_OPT(code, lo, hi, dst, what)                                                   \
    case code:                                                                             \
        if (tool_parse_double("--" what, a, lo, hi, &d, err, sizeof err))                  \
            return usage_error(c, "%s", err);                                              \
        dst = d;                                                                           \
        break;
            INT_OPT(O_LAYERS, 1, 1024, c->t.model.layers, "layers")
            INT_OPT(O_DIM, 2, 65536, c->t.model.dim, "dim")
            INT_OPT(O_HEADS, 1, 1024, c->t.model.heads, "heads")
            INT_OPT(O_KV, 1, 1024, c->t.model.kv_heads, "kv-heads")
            INT_OPT(O_FFN, 1, 1048576, c->t.model.ffn, "ffn")
            INT_OPT(O_SEQ, 2, 65536, c->t.model.seq, "seq")
            NUM_OPT(O_INIT_STD, 0, 10, c->t.init_std, "init-std")
            INT_OPT(O_BATCH, 1, 1048576, c->t.batch, "batch")
            INT_OPT(O_MICRO, 1, 65536, c->t.micro, "micro-batches")
            INT_OPT(O_STEPS, 1, 1000000000, c->t.steps, "steps")
            INT_OPT(O_STOP, 1, 1000000000, c->t.stop_at, "stop-at")
            INT_OPT(O_SAVE_EVERY, 1, 1000000000, c->t.save_every, "save-every")
            NUM_OPT(O_LR, 0, 1000, c->t.lr, "lr")
            NUM_OPT(O_ALR, 0, 1000, c->t.adamw_lr, "adamw-lr")
            INT_OPT(O_WARMUP, 0, 1000000000, c->t.warmup, "warmup")
            NUM_OPT(O_MINLR, 0, 1, c->t.min_lr_frac, "min-lr")
            NUM_OPT(O_CLIP, 0, 1e30, c->rt.optim.clip_norm, "clip")
            NUM_OPT(O_WD, 0, 1000, c->rt.optim.muon_weight_decay, "weight-decay")
            INT_OPT(O_SEED, 0, INT64_MAX, c->t.seed, "seed")
            INT_OPT(O_DSEED, 0, INT64_MAX, c->t.data_seed, "data-seed")
            INT_OPT(O_VAL_EVERY, 2, 1000000, c->val_every, "val-every")
            INT_OPT(O_VAL_WIN, 1, 1000000, c->t.val_windows, "val-windows")
            INT_OPT(O_EVAL, 0, 1000000000, c->t.eval_every, "eval-every")
        case O_ZERO:
            if (tool_parse_int("--zero", a, 2, 3, &v, err, sizeof err))
                return usage_error(c, "%s", err);
            c->zero = (int)v;
            c->zero_set = true;
            break;
        case O_SUB:   /* a size, in the grammar of every tool (16M, 1MiB, ...) */
            if (tool_parse_size("--small-unit-bytes", a, 0, DMUON_PLAN_MAX_SMALL_UNIT_BYTES, &v,
                                err, sizeof err))
                return usage_error(c, "%s", err);
            c->small_unit_bytes = v;
            break;
            NUM_OPT(O_MINDROP, 0, 1, c->min_drop, "min-val-drop")
            INT_OPT(O_PROG, 0, 1000000000, c->t.progress_every, "progress-every")
#undef INT_OPT
#undef NUM_OPT
        case O_TIE: c->t.model.tie = true; break;
        case O_RECOMP: c->t.recompute = true; break;
        case O_WCONF: c->write_config = a; break;
        case O_WYAML: c->write_yaml = a; break;
        case O_DATA: c->data = a; break;
        case O_PLAN: c->plan = a; break;
        case O_SAVE: c->t.save_dir = a; break;
        case O_RESUME: c->t.resume_dir = a; break;
        case O_EXPORT: c->t.export_path = a; break;
        case O_LOG: c->t.log_path = a; break;
        case O_RANK_LOG: c->t.rank_log_path = a; break;
        case O_SCHED:
            if (!strcasecmp(a, "cosine"))
                c->t.schedule = TT_SCHED_COSINE;
            else if (!strcasecmp(a, "constant"))
                c->t.schedule = TT_SCHED_CONSTANT;
            else
                return usage_error(c, "--schedule '%s': expected cosine or constant", a);
            break;
        case O_LINE:
            if (dmuon_line_parse(a, &c->rt.line) != DMUON_OK)
                return usage_error(c, "--line '%s': expected A, B, C or D", a);
            break;
        case O_SHARD:
            if (dmuon_sharding_parse(a, &c->sharding) != DMUON_OK)
                return usage_error(c, "--sharding '%s': expected fsdp or hsdp", a);
            c->sharding_set = true;
            break;
        case O_RPN:
            if (dmuon_topo_parse_per_node(a, &c->rt.ranks_per_node) != DMUON_OK)
                return usage_error(c, "--ranks-per-node '%s': expected a positive integer", a);
            break;
        case O_PDT:
            if (dmuon_dtype_parse(a, &c->param_dtype) != DMUON_OK ||
                (c->param_dtype != DMUON_BF16 && c->param_dtype != DMUON_F32))
                return usage_error(c, "--param-dtype '%s': expected bf16 or f32", a);
            c->param_dtype_set = true;
            break;
        case 'q': c->t.quiet = true; break;
        case 'v': c->verbose = true; break;
        case 'h':
            if (c->rank == 0)
                fputs(usage, stdout);
            return 0;
        case O_VERSION:
            if (c->rank == 0)
                tool_print_version("dmuon-train", argc, argv);
            return 0;
        case ':': return usage_error(c, "option '%s' needs a value", argv[optind - 1]);
        default: {
            char why[600], hint[128];
            snprintf(why, sizeof why, "unknown option '%s'%s", argv[optind - 1],
                     tool_suggest_option(argv[optind - 1], longopts, hint, sizeof hint));
            return usage_error(c, "%s", why);
        }
        }
    }
    if (optind < argc)
        return usage_error(c, "unexpected argument '%s'", argv[optind]);
    /* flags that would be ignored are refused, naming the one to drop */
    if (c->plan && c->small_unit_bytes >= 0)
        return usage_error(c, "%s", "--small-unit-bytes plans here: not with --plan");
    if (c->plan && c->sharding_set)
        return usage_error(c, "%s", "--sharding: the plan file fixes the sharding; drop "
                                    "--sharding, or plan again with dmuon-plan --sharding");
    if (c->plan && c->zero_set)
        return usage_error(c, "%s", "--zero: the plan file fixes the ZeRO stage; drop --zero, "
                                    "or plan again with dmuon-plan --zero");
    if (c->plan && c->param_dtype_set)
        return usage_error(c, "%s", "--param-dtype: the plan file fixes the gathered dtype; drop "
                                    "--param-dtype, or plan again with dmuon-plan --param-dtype");
    if (c->t.stop_at > c->t.steps) {
        char why[160];
        snprintf(why, sizeof why, "--stop-at %lld is past --steps %lld: give --stop-at N below "
                 "--steps (the schedule's length), or more --steps", (long long)c->t.stop_at,
                 (long long)c->t.steps);
        return usage_error(c, "%s", why);
    }
    if (c->t.save_every > 0 && !c->t.save_dir)
        return usage_error(c, "%s", "--save-every needs --save DIR (where to save)");
    if (c->t.warmup >= c->t.steps && c->t.warmup > 0)
        c->t.warmup = c->t.steps - 1;
    return -1;
}

/* Rank 0 checks every output path before any work; all ranks learn the
 * answer.  Returns -1 to go on, else the exit code (2). */
static int check_outputs(const cli *c, bool mpi)
{
    char err[4400] = "";
    int bad = 0;
    if (c->rank == 0)
        bad = (c->t.save_dir && tool_check_output_path("--save", c->t.save_dir, true, err,
                                                       sizeof err)) ||
              (c->t.export_path && tool_check_output_path("--export", c->t.export_path, false,
                                                          err, sizeof err)) ||
              (c->t.log_path &&
               tool_check_output_path("--log", c->t.log_path, false, err, sizeof err)) ||
              (c->t.rank_log_path &&
               tool_check_output_path("--rank-log", c->t.rank_log_path, false, err, sizeof err));
    if (!bad && c->t.log_path && c->t.rank_log_path && !strcmp(c->t.log_path, c->t.rank_log_path)) {
        snprintf(err, sizeof err, "--rank-log '%s': the same file as --log", c->t.rank_log_path);
        bad = 1;
    }
    if (mpi)
        MPI_Bcast(&bad, 1, MPI_INT, 0, MPI_COMM_WORLD);
    return bad ? usage_error(c, "%s", err) : -1;
}

/* Plans the model for the running cluster (cost flops), or loads --plan. */
static dmuon_rc get_plan(cli *c, const dmuon_model *m, dmuon_plan **out)
{
    if (c->plan) {
        DMUON_TRY(dmuon_plan_load(c->plan, out));
        dmuon_rc rc = dmuon_plan_match_model(*out, m);
        if (rc) {
            dmuon_plan_free(*out);
            *out = NULL;
            return dmuon_err_trace_add(rc, __FILE__, __LINE__);
        }
        return DMUON_OK;
    }
    dmuon_topo topo;
    DMUON_TRY(dmuon_topo_init(&topo, MPI_COMM_WORLD, c->rt.ranks_per_node));
    dmuon_plan_opts po;
    dmuon_plan_opts_init(&po);
    po.nodes = topo.nodes;
    po.gpus_per_node = topo.per_node;
    dmuon_topo_release(&topo);
    po.sharding = c->sharding;
    po.zero_stage = c->zero;
    po.cost = DMUON_COST_FLOPS;
    po.small_unit_bytes = c->small_unit_bytes < 0 ? 0 : c->small_unit_bytes;
    po.param_dtype = c->param_dtype;
    po.model_path = "dmuon-train model";
    DMUON_TRY(dmuon_plan_build(m, &po, out));
    return DMUON_OK;
}

static int tool_main(int argc, char **argv)
{
    cli c;
    memset(&c, 0, sizeof c);
    tt_opts_init(&c.t);
    dmuon_rt_opts_init(&c.rt);
    c.rt.optim.clip_norm = 1.0;
    c.sharding = DMUON_SHARD_FSDP;
    c.zero = 3;
    c.val_every = 10;
    c.param_dtype = DMUON_BF16;
    c.min_drop = -1;
    c.small_unit_bytes = -1;

    tool_cleanup_on_signal();
    /* flags that exit before MPI (help, version, config files) need no mpirun */
    bool need_mpi = true;
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help") ||
            !strcmp(argv[i], "--version") || !strncmp(argv[i], "--write-", 8))
            need_mpi = false;
    if (need_mpi && MPI_Init(&argc, &argv) != MPI_SUCCESS) {
        fprintf(stderr, "dmuon-train: error: MPI_Init failed\n");
        return 3;
    }
    if (need_mpi)
        MPI_Comm_rank(MPI_COMM_WORLD, &c.rank);
    int code = parse(&c, argc, argv);
    dmuon_model *model = NULL;
    dmuon_plan *plan = NULL;
    td_data data = {0};
    dmuon_rc rc = DMUON_OK;
    if (code >= 0)
        goto out;
    if ((rc = tm_config_check(&c.t.model))) {
        code = c.rank == 0 ? fail(&c, rc) : dmuon_rc_exit_code(rc);
        goto out;
    }
    c.rt.zero_stage = c.plan ? 0 : c.zero;   /* 0: the plan's */
    if (c.write_config || c.write_yaml) {
        if (c.write_config && (rc = tm_write_hf_config(&c.t.model, c.write_config)))
            code = fail(&c, rc);
        else if (c.write_yaml && (rc = tm_write_yaml(&c.t.model, c.write_yaml)))
            code = fail(&c, rc);
        else
            code = 0;
        goto out;
    }
    if ((code = check_outputs(&c, need_mpi)) >= 0)
        goto out;
    code = -1;
    /* from here a SIGINT/SIGTERM ends the run after the current step */
    static volatile sig_atomic_t stop;
    tool_stop_on_signal(&stop);
    c.t.stop = &stop;
    dmuon_err_set_rank(c.rank);
    int size;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if ((rc = td_load(c.data, c.val_every, c.t.model.seq, &data)) ||
        (rc = tm_model_build(&c.t.model, &model)) || (rc = get_plan(&c, model, &plan))) {
        code = c.rank == 0 ? fail(&c, rc) : dmuon_rc_exit_code(rc);
        goto out;
    }
    if (c.rank == 0 && dmuon_plan_sharding(plan) == DMUON_SHARD_HSDP && dmuon_plan_nodes(plan) == 1)
        fprintf(stderr, "dmuon-train: warning: HSDP on one node has no replicas to publish to: it "
                        "runs as FSDP; give --ranks-per-node K for virtual nodes of K ranks\n");
    if (c.rank == 0 && !c.t.quiet) {
        dmuon_model_stats ms;
        dmuon_model_get_stats(model, &ms);
        fprintf(stderr,
                "dmuon-train: line %s, %d ranks (%d nodes x %d), %s ZeRO-%d; model %d x %d "
                "(%lld parameters, %lld in %lld Muon matrices); text %s: %zu files, %zu train "
                "+ %zu validation bytes\n",
                dmuon_line_name(c.rt.line), size, dmuon_plan_nodes(plan),
                dmuon_plan_gpus_per_node(plan), dmuon_sharding_name(dmuon_plan_sharding(plan)),
                dmuon_plan_zero_stage(plan), c.t.model.layers, c.t.model.dim, (long long)ms.elements,
                (long long)ms.muon_elements, (long long)ms.muon_matrices, data.source,
                data.files, data.n_train, data.n_val);
    }
    tt_result res;
    rc = tt_train(&c.t, plan, &c.rt, MPI_COMM_WORLD, &data, &res);
    if (rc) {   /* the runtime's failures are agreed: every rank is here */
        tool_report_error(MPI_COMM_WORLD, "dmuon-train", dmuon_errmsg(), dmuon_rc_exit_code(rc));
        if (c.verbose && *dmuon_errtrace())
            fprintf(stderr, "dmuon-train: trace: %s\n", dmuon_errtrace());
        code = dmuon_rc_exit_code(rc);
        goto out;
    }
    if (res.interrupted) {
        if (c.rank == 0) {
            if (c.t.save_dir)
                fprintf(stderr, "dmuon-train: interrupted at step %lld, saved to %s (continue "
                                "with --resume %s)\n",
                        (long long)res.next_step, c.t.save_dir, c.t.save_dir);
            else
                fprintf(stderr, "dmuon-train: interrupted at step %lld; nothing saved (no "
                                "--save DIR)\n",
                        (long long)res.next_step);
        }
        code = 128 + res.interrupted;
        goto out;
    }
    double drop = res.first_val > 0 ? 1.0 - res.last_val / res.first_val : 0;
    if (c.rank == 0 && !c.t.quiet)
        fprintf(stderr,
                "dmuon-train: %lld steps in %.1f s: loss %.4f -> %.4f, validation %.4f -> %.4f "
                "(%.1f%% lower)\n",
                (long long)res.steps_run, res.wall_s, res.first_loss, res.last_loss,
                res.first_val, res.last_val, 100.0 * drop);
    code = 0;
    if (c.min_drop >= 0 && drop < c.min_drop) {
        if (c.rank == 0)
            fprintf(stderr, "dmuon-train: check failed: validation loss fell %.1f%%, less than "
                            "--min-val-drop %.1f%%\n",
                    100.0 * drop, 100.0 * c.min_drop);
        code = 1;
    }
out:
    dmuon_plan_free(plan);
    dmuon_model_free(model);
    td_release(&data);
    if (need_mpi) {
        if (code == 3)
            MPI_Abort(MPI_COMM_WORLD, 3);
        MPI_Finalize();
    }
    return code;
}

/* every exit goes through here: output that did not arrive is exit 3 */
int main(int argc, char **argv) { return tool_finish_stdout("dmuon-train", tool_main(argc, argv)); }
