/*
 * opdrv.h — the one operator driver of dmuon-verify and dmuon-bench (linked
 * into those two tools only), in the shape of nccl-tests: the driver owns
 * the option table (opdrv_opt.c), the case grid (operators × layouts ×
 * sizes × element types), the group and publish in symmetric memory of
 * their own with host staging on GPU backends, the fill patterns and the
 * bit-exact count of wrong elements where segment i of a line's result
 * lies.  A line (ours and each baseline) is a small file, opdrv_<line>.c,
 * filling one opdrv_line: its algorithms and its table.  dmuon-verify adds
 * its checks and their report (tools/verify/ops*.c), dmuon-bench its timing
 * and table (tools/bench/ops*.c).
 */
#ifndef DMUON_TOOLS_COMMON_OPDRV_H
#define DMUON_TOOLS_COMMON_OPDRV_H

#include <stddef.h>
#include <stdio.h>
#include <stdint.h>

#include "dmuon/collv.h"
#include "dmuon/segshape.h"
#include "dmuon/publish.h"
#include "dmuon/topo.h"

/* ------------------------------------------------------------ inputs -- */

/* Deterministic 64-bit mix of (seed, a, b): splitmix64 finalizer. */
uint64_t opdrv_hash(uint64_t seed, uint64_t a, uint64_t b);

/* Byte k of segment seg under pattern seed (any bit pattern, NaN payloads
 * of the element type included). */
unsigned char opdrv_byte(uint64_t seed, int seg, int64_t k);

/* Element i of an array of dt (BF16 or F32) at p; unaligned p is fine. */
float opdrv_load(dmuon_dtype dt, const void *p, int64_t i);
void opdrv_store(dmuon_dtype dt, void *p, int64_t i, float v);
int64_t opdrv_seg_bytes(const dmuon_segment *s);

/* The integer reduction input of rank r at layer element e: in [−4, 4], so
 * every partial sum over N ≤ 64 ranks is an integer exact in BF16 and F32
 * in any order; opdrv_rsv_sum is the exact sum over ranks 0..N−1. */
float opdrv_rsv_int(int r, int64_t e);
float opdrv_rsv_sum(int nranks, int64_t e);

/* ------------------------------------------------------------- group -- */

/* A group over symmetric memory of its own (dmuon_group_span_of: control
 * area, layer buffer, owner window).  buf/win: this rank's layer buffer and
 * owner window — on a GPU backend a host copy, moved to and from the device
 * by opdrv_group_stage.  open agrees the table first (a rank with another
 * table gets the table's mismatch message) and is collective; close is
 * collective, only when every rank is still alive. */
typedef struct {
    dmuon_symm *mem;
    dmuon_group *g;
    dmuon_group_span sp;
    unsigned char *buf, *win;
    unsigned char *host;   /* the host copy of the span (GPU backends only) */
} opdrv_group;

dmuon_rc opdrv_group_open(const dmuon_topo *t, const dmuon_segment *segs, int n,
                          const dmuon_group_opts *o, opdrv_group *v);
void opdrv_group_close(opdrv_group *v);

/* in = 1: buf/win to the device; 0: back (no-op on host memory). */
dmuon_rc opdrv_group_stage(opdrv_group *v, int in);

/* One AllGatherV (agv = 1) or ReduceScatterV of the group, without staging:
 * split = 1: start, one test, wait (host memory only: on a GPU backend
 * the driver runs the blocking call, so it does not exercise the nccl
 * split phase); else the blocking call. */
dmuon_rc opdrv_group_call(opdrv_group *v, int agv, int split);

/* opdrv_group_call between staging in and out: buf/win are read before the
 * call and written after it on every backend. */
dmuon_rc opdrv_group_staged(opdrv_group *v, int agv, int split);

/* AGV input: every segment this rank owns gets opdrv_byte(seed, i, k) at
 * win + window_offset. */
void opdrv_agv_fill(const dmuon_segment *segs, int n, int rank, unsigned char *win,
                    uint64_t seed);

/* Bytes that differ from opdrv_byte(seed, i, k): at buf + segs[i].offset for
 * every segment (owned_only = 0: the gathered layer buffer; every rank of
 * the line has all of it), or at win + segs[i].window_offset for the
 * segments this rank owns (owned_only = 1). */
int64_t opdrv_agv_wrong(const dmuon_segment *segs, int n, int rank, const unsigned char *p,
                        uint64_t seed, int owned_only);

/* ----------------------------------------------------------- publish -- */

/* A publish over symmetric memory of its own: params is the table laid out
 * by dmuon_publish_layout (owned; n entries), copy this rank's copy.  open
 * agrees the table and is collective; close likewise, only when every
 * rank is alive. */
typedef struct {
    dmuon_symm *mem;
    dmuon_publish *p;
    dmuon_segment *params;
    int n;
    unsigned char *copy;
} opdrv_pub;

dmuon_rc opdrv_pub_open(const dmuon_topo *t, const dmuon_segment *segs, int n,
                        const dmuon_publish_opts *o, opdrv_pub *v);
void opdrv_pub_close(opdrv_pub *v);

/* Every parameter this rank owns gets opdrv_byte(seed, i, k) in its copy. */
void opdrv_pub_fill(opdrv_pub *v, int rank, uint64_t seed);

/* Bytes that differ from opdrv_byte(seed, i, k) in this rank's copy, over
 * parameter i (i ≥ 0) or every parameter this rank leads (i < 0). */
int64_t opdrv_pub_wrong(const opdrv_pub *v, const dmuon_topo *t, int i, uint64_t seed);

/* One step: begin; every owner posts its parameters in table order without
 * waiting; where the algorithm streams (scheduled) every leader waits for
 * each parameter it leads; end.  Collective. */
dmuon_rc opdrv_pub_step(opdrv_pub *v, const dmuon_topo *t, int64_t step);

/* ------------------------------------------------------ cases, lines -- */

enum { OPDRV_AGV = 0, OPDRV_RSV, OPDRV_PUB, OPDRV_NOPS };

/* "agv", "rsv", "publish". */
extern const char *const opdrv_op_names[OPDRV_NOPS];

/* One case: an operator over a table on a topology. */
typedef struct {
    const dmuon_topo *topo;
    int op;
    const dmuon_segment *segs;   /* the case's table (publish: its parameters) */
    int n;
    const int *layer_of;         /* publish: layer of each parameter (NULL: one layer) */
    dmuon_group_opts gopts;      /* path, chunk, slots, deadline, fp32_accum */
} opdrv_case;

/* A line: the algorithm its groups and its publish run, and where segment
 * i of its result lies — the line's table for a case.  table returns 0
 * (with *out NULL or freed by the caller) when the line cannot hold the
 * case (one element type needed, ...); *out is malloc'd.  For the publish
 * the table lists the parameters before dmuon_publish_layout. */
typedef struct {
    const char *name;      /* dmuon-verify's spelling: ours, per-owner, coalesced, equal */
    const char *column;    /* dmuon-bench's: ours, per_owner, coalesced, equal_length */
    dmuon_algo algo;       /* AllGatherV, ReduceScatterV */
    dmuon_algo pub_algo;   /* the publish; DEFAULT: the line has no publish form */
    int (*table)(const opdrv_case *c, dmuon_segment **out, int *n);
} opdrv_line;

#define OPDRV_NLINES 4
extern const opdrv_line opdrv_line_ours, opdrv_line_per_owner, opdrv_line_coalesced,
    opdrv_line_equal;
extern const opdrv_line *const opdrv_lines[OPDRV_NLINES];   /* in that order */

/* The case's table, copied (a line's table function). */
int opdrv_table_same(const opdrv_case *c, dmuon_segment **out, int *n);

/* 1 if line l can run case c on its backend (not collective). */
int opdrv_line_supports(const opdrv_line *l, const opdrv_case *c);

/* ----------------------------------------------------------- options -- */

/* The one option table of both tools.  Every flag either applies to the
 * tool (the same meaning in both where both take it: --sizes and -b/-e/-f,
 * --layouts and --layout, --dtypes and --dtype, --paths and --path, --line
 * and --lines are spellings of one list each) or is refused naming the
 * tool it belongs to. */
enum { OPDRV_VERIFY = 1, OPDRV_BENCH = 2 };

#define OPDRV_MAX_SIZES 64
typedef struct {
    int tool;                 /* OPDRV_VERIFY or OPDRV_BENCH */
    int help;                 /* -h given: print the usage, exit 0 */
    /* both */
    int per_node;             /* 0: $DMUON_RANKS_PER_NODE, else one node per host */
    dmuon_backend backend;
    int64_t chunk_bytes;      /* 0: the backend's */
    int slots, deadline_ms;   /* 0: the library's */
    int op_mask;              /* 1 << OPDRV_AGV | ... */
    int lines;                /* 1 << index in opdrv_lines */
    int lines_given;
    int64_t sizes[OPDRV_MAX_SIZES];
    int nsizes;
    const char *size_flag;    /* the flag that set the sizes ("--sizes", "-b", ...), or NULL */
    dmuon_segshape layouts[DMUON_SEGSHAPE_COUNT];
    int nlayouts;
    const char *layout_flag;
    dmuon_dtype dtypes[2];
    int ndtypes;
    const char *dtype_flag;
    dmuon_path paths[3];
    int npaths;
    int json;                 /* --json: the tool's JSON on stdout */
    /* dmuon-verify */
    int64_t steps;
    int verbose;
    const char *fault;        /* --fault's text (the tool parses it) */
    /* dmuon-bench */
    int warmup, iters, launches;
    int timing_given;         /* bits: -w 1, -n 2, --launches 4 */
    int fp32_accum, rail, layer_lo, layer_hi;
    const char *json_file, *plan, *replay_publish;
} opdrv_opts;

/* Parses argv for tool (getopt_long over the one table; argv[0] names the
 * tool): fills o with the tool's defaults, then the flags.  Returns 0, or
 * -1 with the first error ("FLAG 'VALUE': expected ...", "FLAG does not
 * apply to dmuon-TOOL (...)", an unknown option with a suggestion) in
 * bad[0..cap).  Not collective: every rank parses the same argv. */
int opdrv_parse(int tool, int argc, char **argv, opdrv_opts *o, char *bad, size_t cap);

/* The start of both tools' main: MPI_Init, opdrv_parse, then the tool's
 * check of flags that go together (check may be NULL; it fills bad), then
 * --help (usage on rank 0's stdout) or a usage error ("TOOL: error: MSG",
 * once, by rank 0).  Returns -1 to go on, or the exit code (0 after --help,
 * 2 on a usage error) after MPI_Finalize. */
int opdrv_init(int tool, int *argc, char ***argv, opdrv_opts *o, void (*usage)(FILE *f),
               void (*check)(opdrv_opts *o, void *ctx, char *bad, size_t cap), void *ctx);

/* The topology of the run: dmuon_topo_init over MPI_COMM_WORLD with
 * o->per_node, this rank in error messages, o->backend checked, and (with
 * memory = 1) the largest size checked against the host's memory (2 x
 * size per rank).  Returns -1 to go on, or the exit code after printing the
 * error once, releasing t and MPI_Finalize.  Collective. */
int opdrv_topo_init(const opdrv_opts *o, dmuon_topo *t, int memory);

/* The case grid: op × layout × size × dtype, in that order, over the
 * selected operators.  A cursor starts zeroed with first = 1; next moves
 * it to the next case and returns 1, or 0 past the last. */
typedef struct {
    int first;
    int op, layout, size, dtype;
} opdrv_cursor;
int opdrv_case_next(const opdrv_opts *o, opdrv_cursor *k);

/* Builds the case at k over t: *segs (malloc'd; the caller frees it) the
 * layout's table of the size and type (dmuon_segshape_make), c's options from
 * o, the first path.  Errors: those of dmuon_segshape_make (DMUON_EINVAL: the
 * layout cannot hold the size, the same on every rank). */
dmuon_rc opdrv_case_make(const opdrv_opts *o, const dmuon_topo *t, const opdrv_cursor *k,
                         opdrv_case *c, dmuon_segment **segs);

/* dmuon_errmsg() without its "rank R: " prefix: for an error every rank
 * shares (the same on every rank), printed once. */
const char *opdrv_errmsg_shared(void);

/* The bytes a case's table really moves (sum of its segments): the size
 * asked for, except where the layout ignores it (tiny). */
int64_t opdrv_case_bytes(const opdrv_case *c);

#endif
