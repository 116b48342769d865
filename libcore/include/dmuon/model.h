/*
 * dmuon/model.h — the model inventory: one table of parameters (name, shape,
 * dtype, layer, role, Muon matrices) built from any of the input forms.
 *
 * Input forms (dmuon_model_load detects them by content and extension):
 *   - a Hugging Face config.json of model_type llama, mistral, qwen2,
 *     qwen2_moe, gemma, gemma2, qwen3, qwen3_moe, mixtral, phi3, deepseek_v3,
 *     olmo2, gemma3_text, llama4_text or gpt_oss: the tensors of
 *     transformers' modeling_<type>.py (matched: transformers 5.24), derived
 *     from the config fields; a field left out takes the config class's
 *     default (e.g. qwen2 num_key_value_heads 32, gemma head_dim 256), a
 *     field set to null the class's fallback (num_key_value_heads =
 *     num_attention_heads, head_dim = hidden_size / num_attention_heads).
 *     Required: hidden_size, num_hidden_layers, num_attention_heads,
 *     vocab_size, and intermediate_size where a layer uses it.  The stored
 *     type is the "dtype" field (transformers 5), else "torch_dtype", else
 *     BF16 (the type released checkpoints store);
 *   - one .safetensors file (only its header: 8 bytes little-endian header
 *     length, then a JSON object name -> {dtype, shape, data_offsets}; a
 *     header-only file, cut after the header, is accepted; zero-size
 *     dimensions are accepted), or a model.safetensors.index.json whose
 *     "weight_map" names the shards (each shard's header is read, never the
 *     tensor data);
 *   - a directory (a Hugging Face snapshot): its model.safetensors.index.json,
 *     else its single *.safetensors file, else its config.json
 *     (dmuon_model_resolve tells which);
 *   - the project's YAML inventory: a list of {name, shape[, dtype]} items,
 *     or a mapping {tensors: [...], dtype: DEFAULT, muon: [PATTERNS],
 *     adamw: [PATTERNS], root: auto|one|split} (the caller's patterns are
 *     tried first; the caller's root, when not auto, wins).
 *
 * Two layouts of MoE experts (config.json route): the checkpoint layout
 * (default) is the tensor list save_pretrained writes, experts one by one
 * (qwen2_moe, qwen3_moe, deepseek_v3: mlp.experts.{e}.{gate,up,down}_proj;
 * mixtral: block_sparse_moe.experts.{e}.w1/w2/w3; deepseek_v3 adds the
 * router's e_score_correction_bias buffer); the module layout
 * (opts->fused_experts) is named_parameters() of the transformers 5 module:
 * fused mlp.experts.gate_up_proj [E, 2I, H] and mlp.experts.down_proj
 * [E, H, I].  llama4_text and gpt_oss store fused experts in both.
 *
 * Layers of the tensors outside numbered blocks (embeddings, final norm,
 * head), dmuon_model_opts.root:
 *   - split: those before every block tensor in the inventory's order form
 *     the first layer "(embed)", those after every block tensor the last
 *     layer "(head)", each gathered only for its own forward and backward
 *     (as torchtitan shards the embeddings and [norm, output] apart);
 *   - one: all of them form layer 0, "(root)", whose forward and backward
 *     brackets enclose every other layer's (the runtime gathers them for
 *     the whole forward and backward).
 * The default (DMUON_ROOT_AUTO) splits where the input form gives the
 * forward order and no tensor outside the blocks is used at both ends: a
 * config.json without tie_word_embeddings (its tensor list is generated in
 * forward order); everywhere else (safetensors headers list names in
 * alphabetical order, a tied embedding is read by the head too, YAML and
 * built inventories unless their caller says so) one "(root)".  A tensor
 * outside the blocks that sits between block tensors (a multi-tower model)
 * always makes one "(root)".
 *
 * Invariants of a loaded model: names are unique; every dimension is > 0
 * except in safetensors files (zero-size tensors are kept, role adamw, no
 * matrices); every parameter belongs to exactly one layer (layer 0 is
 * "(root)" or "(embed)", and the last layer "(head)", as above, when any
 * tensor lies outside a numbered block); layers are in forward order (order
 * of first appearance of the block prefix, blocks of one prefix by
 * number).
 *
 * Roles (default rules, applied in this order; the first match wins):
 *   1. a user pattern (opts->muon / opts->adamw, fnmatch(3) on the full name,
 *      muon patterns checked before adamw patterns);
 *   2. adamw: names containing "embed" (token, position and patch
 *      embeddings), "lm_head", "wte" or "wpe" (the output head and the
 *      GPT-2 style embeddings); names ending in ".bias" or "_bias" (biases,
 *      gpt_oss gate_up_proj_bias, deepseek e_score_correction_bias);
 *      quantization data: a last name component containing "scale" or
 *      "zero_point" (weight_scale_inv, *_scales, input_scale), and every
 *      tensor stored as an integer, BOOL or FP8 type (the quantized weights
 *      themselves: Muon needs the dequantized matrix, so a quantized
 *      checkpoint gets no Muon matrix for those tensors; dmuon_model_stats
 *      counts them in `quantized`);
 *   3. muon: 2-D tensors; 3-D tensors whose name contains "experts" or
 *      "gating_einsum" (stacks of matrices along dimension 0);
 *   4. adamw: everything else (1-D gains and biases, convolutions, other
 *      n-D tensors, tensors with no element).
 * A muon pattern that matches a 3-D tensor makes it a stack of matrices along
 * dimension 0; one matching a 1-D or >3-D tensor is an error.
 *
 * Muon matrices of a parameter (paper C.5).  mat_m x mat_n is the real
 * matrix, out x in (PyTorch Linear [out, in]); `transposed` says the storage
 * holds it as [in, out]; `layout` says where matrix j lies:
 *   - DMUON_MAT_CONTIGUOUS: matrix j is elements [j*m*n, (j+1)*m*n) of the
 *     storage, row-major (m x n, or n x m when transposed).  A 2-D [m, n]
 *     tensor is one matrix; a 3-D [E, a, b] tensor E matrices; a fused
 *     gate_up_proj [E, 2I, H] (qwen2_moe, qwen3_moe, mixtral, deepseek_v3 in
 *     transformers 5) 2E matrices of I x H, expert e's gate (j = 2e: rows
 *     [0, I) of its block) then its up (j = 2e+1: rows [I, 2I)); a 2-D
 *     gate_up_proj.weight [2I, H] (phi3) 2 matrices, gate then up;
 *     down_proj [E, I, H] stored [in, out] (llama4_text, gpt_oss) E matrices
 *     of H x I, transposed.
 *   - DMUON_MAT_HALVES: gate_up_proj [E, H, 2I] (llama4_text): expert e's
 *     block is H rows of 2I; gate (j = 2e) is columns [0, I), up (j = 2e+1)
 *     columns [I, 2I); I x H matrices, transposed, row stride 2I.
 *   - DMUON_MAT_INTERLEAVED: gate_up_proj [E, H, 2I] (gpt_oss, told apart by
 *     its sibling gate_up_proj_bias): gate is the even columns, up the odd
 *     ones; I x H matrices, transposed, column stride 2.
 * HALVES and INTERLEAVED matrices are not contiguous in storage, but each
 * expert's gate and up together are: the block [e*in*2I, (e+1)*in*2I).
 * Plans therefore never split such a pair: dmuon_plan_build gives the two
 * matrices of an expert one unit (one contiguous segment), and the owner
 * reads the real I x in gate and up from that block with the strides above
 * (gate: row stride 2I, columns [0, I) or the even columns; up: columns
 * [I, 2I) or the odd columns).  They are never cut into wrong "matrices"
 * along another dimension.
 */
#ifndef DMUON_MODEL_H
#define DMUON_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dmuon/rc.h"
#include "dmuon/types.h"

#define DMUON_MODEL_MAX_DIMS 8

typedef struct dmuon_model dmuon_model;

/* Optimizer role of a parameter. */
typedef enum { DMUON_ROLE_ADAMW = 0, DMUON_ROLE_MUON = 1 } dmuon_role;

/* Where each Muon matrix lies in a parameter's storage (see above). */
typedef enum {
    DMUON_MAT_CONTIGUOUS = 0,
    DMUON_MAT_HALVES,        /* [E, in, 2I]: gate | up halves of the last dimension */
    DMUON_MAT_INTERLEAVED    /* [E, in, 2I]: gate even, up odd columns */
} dmuon_mat_layout;

/* "contiguous", "halves" or "interleaved". */
const char *dmuon_mat_layout_name(dmuon_mat_layout l);

/* One tensor of the inventory (read-only view into the model). */
typedef struct {
    const char *name;                      /* full name, unique */
    int ndim;                              /* 1 .. DMUON_MODEL_MAX_DIMS */
    int64_t shape[DMUON_MODEL_MAX_DIMS];   /* each > 0 (>= 0 from safetensors);
                                              shape[0] outermost */
    dmuon_dtype dtype;                     /* storage type of the same size (bf16
                                              when unknown; i8/bool/fp8 -> u8,
                                              i16/u16 -> f16, u32 -> i32, u64 -> i64) */
    const char *stored;                    /* the stored type as safetensors spells
                                              it: "BF16", "F32", "F8_E4M3", "I8", ...
                                              (static string) */
    bool quantized;                        /* stored as an integer, BOOL or FP8 type */
    int64_t numel;                         /* product of shape */
    int32_t layer;                         /* index into the layer table */
    dmuon_role role;
    bool expert;                           /* an MoE expert weight (fused or per expert) */
    int64_t matrices;                      /* Muon matrices in this storage; 0 for adamw */
    int64_t mat_m, mat_n;                  /* out x in of each matrix (0 for adamw) */
    bool transposed;                       /* storage holds each matrix as [in, out] */
    dmuon_mat_layout layout;               /* where matrix j lies in the storage */
} dmuon_param;

/* Layers of the tensors outside numbered blocks (see above). */
typedef enum {
    DMUON_ROOT_AUTO = 0,     /* split where the input form allows (the default) */
    DMUON_ROOT_ONE,          /* one enclosing "(root)" */
    DMUON_ROOT_SPLIT         /* "(embed)" and "(head)" whenever the order allows:
                                the caller knows the order is the forward order
                                and no such tensor is used at both ends */
} dmuon_root_mode;

/* "auto", "one", "split"; the parser fails with DMUON_EINVAL naming the
 * value. */
const char *dmuon_root_mode_name(dmuon_root_mode r);
dmuon_rc dmuon_root_mode_parse(const char *s, dmuon_root_mode *out);

/* Load options.  Zero-initialised (or NULL) means the defaults. */
typedef struct {
    const char *const *muon;   /* fnmatch patterns forcing role muon */
    size_t n_muon;
    const char *const *adamw;  /* fnmatch patterns forcing role adamw */
    size_t n_adamw;
    bool fused_experts;        /* config.json route: the module layout
                                  (named_parameters(): fused 3-D expert tensors
                                  mlp.experts.gate_up_proj [E,2I,H] and
                                  mlp.experts.down_proj [E,H,I]) instead of the
                                  checkpoint layout (experts one by one) */
    dmuon_root_mode root;      /* layers of the tensors outside numbered blocks */
} dmuon_model_opts;

/* One spelled-out tensor for dmuon_model_build (name is copied). */
typedef struct {
    const char *name;
    int ndim;
    int64_t shape[DMUON_MODEL_MAX_DIMS];
    dmuon_dtype dtype;
} dmuon_tensor_spec;

/* Loads the inventory at path (see the input forms above).  opts may be NULL.
 * On success *out owns everything; free with dmuon_model_free.
 * Errors: DMUON_ENOTFOUND (path does not exist; missing required config
 * field; a shard the index names is missing: the message names the index
 * and the shard), DMUON_EIO (cannot read a file), DMUON_EPARSE (malformed
 * JSON/YAML, truncated or oversized safetensors header, header length beyond
 * the file, a negative dimension (a zero one outside safetensors), a
 * safetensors dtype the format does not define, data_offsets that do not
 * hold the tensor or overlap another tensor's, duplicate tensor name, a field of the wrong form, a
 * model_type not supported: that message lists the supported types and
 * points at the safetensors route; the message names the file, the line or
 * tensor/field and what was expected), DMUON_EINVAL (a role pattern that is
 * invalid, see dmuon_model_pattern_check, or cannot apply), DMUON_ENOMEM, and
 * for a directory the errors of dmuon_model_resolve (then the file it names
 * is read). */
dmuon_rc dmuon_model_load(const char *path, const dmuon_model_opts *opts, dmuon_model **out);

/* The file dmuon_model_load reads for path: path itself unless it is a
 * directory; in a directory (a Hugging Face snapshot) its
 * model.safetensors.index.json, else its only *.safetensors file, else its
 * config.json.  Writes the path (NUL-terminated) into out[cap].  Errors:
 * DMUON_ENOTFOUND (path missing; a directory holding none of those files:
 * the message lists what was looked for), DMUON_EINVAL (several
 * .safetensors files and no index: the message names two; out too small),
 * DMUON_EIO. */
dmuon_rc dmuon_model_resolve(const char *path, char *out, size_t cap);

/* Checks the syntax of a role pattern (fnmatch(3), no flags): non-empty,
 * every '[' closed by a ']', no trailing backslash.  Errors: DMUON_EINVAL
 * naming the pattern and the problem. */
dmuon_rc dmuon_model_pattern_check(const char *pat);

/* Builds a model from n spelled-out tensors (in forward order), applying the
 * same layer and role rules as dmuon_model_load.  source names the origin in
 * messages and in dmuon_model_source.  Errors: DMUON_EPARSE (duplicate name,
 * non-positive dimension, bad ndim), DMUON_EINVAL, DMUON_ENOMEM. */
dmuon_rc dmuon_model_build(const char *source, const dmuon_tensor_spec *t, size_t n,
                           const dmuon_model_opts *opts, dmuon_model **out);

/* Frees the model; accepts NULL. */
void dmuon_model_free(dmuon_model *m);

/* Where the model came from (the path given to load) and its input form:
 * "config", "safetensors", "safetensors-index", "yaml" or "built". */
const char *dmuon_model_source(const dmuon_model *m);
const char *dmuon_model_format(const dmuon_model *m);

/* The quant_method of a config.json's quantization_config ("fp8", "mxfp4",
 * ... or "unknown" when it has none), "" when the config declares no
 * quantization or the input is not a config.json.  The config route lists
 * the unquantized module layout either way; valid while m lives. */
const char *dmuon_model_quantization(const dmuon_model *m);

/* Digest of the normalised inventory (names, shapes, dtypes, roles, matrix
 * split), independent of the input form's formatting. */
uint64_t dmuon_model_digest(const dmuon_model *m);

/* Parameters in forward order; param(i) for i < count. */
size_t dmuon_model_param_count(const dmuon_model *m);
const dmuon_param *dmuon_model_param(const dmuon_model *m, size_t i);

/* Layers in forward order; a name is the block prefix with its index, e.g.
 * "model.layers.3" or "visual.blocks.3", or "(root)" for tensors outside
 * any numbered block. */
size_t dmuon_model_layer_count(const dmuon_model *m);
const char *dmuon_model_layer_name(const dmuon_model *m, size_t i);

/* Totals of a model. */
typedef struct {
    size_t tensors;            /* all parameters */
    size_t two_d;              /* tensors with ndim == 2 */
    size_t muon_params;        /* parameters of role muon */
    size_t adamw_params;       /* parameters of role adamw */
    int64_t muon_matrices;     /* Muon matrices (expert stacks counted per matrix) */
    int64_t expert_matrices;   /* of which MoE expert matrices */
    int64_t elements;          /* all elements */
    int64_t muon_elements;     /* elements of muon parameters */
    int64_t bytes;             /* stored bytes (each tensor's own dtype) */
    size_t layers;             /* layer table size */
    size_t quantized;          /* tensors stored as integer, BOOL or FP8 types */
    size_t strided;            /* muon tensors whose matrices are not contiguous
                                  (DMUON_MAT_HALVES / DMUON_MAT_INTERLEAVED) */
} dmuon_model_stats;

void dmuon_model_get_stats(const dmuon_model *m, dmuon_model_stats *s);

/* A distinct Muon matrix shape: m rows x n columns as stored (PyTorch
 * [out, in]) and how many matrices of the model have it. */
typedef struct {
    int64_t m, n;
    int64_t count;
} dmuon_shape_count;

/* The distinct Muon matrix shapes of the model, sorted by (m, n) ascending,
 * each with its matrix count.  *shapes is malloc'ed (NULL when *n is 0); the
 * caller free()s it.  Errors: DMUON_ENOMEM. */
dmuon_rc dmuon_model_muon_shapes(const dmuon_model *m, dmuon_shape_count **shapes, size_t *n);

#endif
