/*
 * dmuon/model.h — the model inventory: one table of parameters (name, shape,
 * dtype, layer, role, Muon matrices) built from any of the input forms.
 *
 * Input forms (dmuon_model_load detects them by content and extension):
 *   - a Hugging Face config.json of model_type llama, mistral, qwen2,
 *     qwen2_moe, gemma or gemma2: tensors derived from the config fields
 *     with Hugging Face module names (transformers' modeling_<type>.py);
 *   - one .safetensors file (only its header: 8 bytes little-endian header
 *     length, then a JSON object name -> {dtype, shape, data_offsets}), or a
 *     model.safetensors.index.json whose "weight_map" names the shards (each
 *     shard's header is read, never the tensor data);
 *   - the project's YAML inventory: a list of {name, shape[, dtype]} items,
 *     or a mapping {tensors: [...], dtype: DEFAULT, muon: [PATTERNS],
 *     adamw: [PATTERNS]} (the caller's patterns are tried first).
 *
 * Invariants of a loaded model: names are unique; every dimension is > 0;
 * every parameter belongs to exactly one layer (layer 0 is "(root)" when any
 * tensor lies outside a numbered block); layers are in forward order (order
 * of first appearance of the block prefix, blocks of one prefix by number).
 *
 * Roles (default rules, applied in this order; the first match wins):
 *   1. a user pattern (opts->muon / opts->adamw, fnmatch(3) on the full name,
 *      muon patterns checked before adamw patterns);
 *   2. adamw: names containing "embed" (token, position and patch
 *      embeddings), "lm_head", "wte" or "wpe" (the output head and the
 *      GPT-2 style embeddings), or ending in ".bias";
 *   3. muon: 2-D tensors; 3-D tensors whose name contains "experts" or
 *      "gating_einsum" (stacks of matrices along dimension 0);
 *   4. adamw: everything else (1-D gains and biases, convolutions, other
 *      n-D tensors).
 * A muon pattern that matches a 3-D tensor makes it a stack of matrices along
 * dimension 0; one matching a 1-D or >3-D tensor is an error.
 *
 * Muon matrices of a parameter (paper C.5): a 2-D [m, n] tensor is one m x n
 * matrix; a 3-D [E, a, b] tensor is E matrices of a x b, except a fused
 * "gate_up_proj" [E, 2I, H], which is 2E matrices of I x H (expert e's gate
 * then its up, matrix j occupying elements [j*I*H, (j+1)*I*H) of the
 * storage).  Matrices are m rows x n columns as stored (PyTorch [out, in]).
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

/* One tensor of the inventory (read-only view into the model). */
typedef struct {
    const char *name;                      /* full name, unique */
    int ndim;                              /* 1 .. DMUON_MODEL_MAX_DIMS */
    int64_t shape[DMUON_MODEL_MAX_DIMS];   /* each > 0; shape[0] outermost */
    dmuon_dtype dtype;                     /* stored type (bf16 when unknown) */
    int64_t numel;                         /* product of shape */
    int32_t layer;                         /* index into the layer table */
    dmuon_role role;
    bool expert;                           /* an MoE expert weight (fused or per expert) */
    int64_t matrices;                      /* Muon matrices in this storage; 0 for adamw */
    int64_t mat_m, mat_n;                  /* rows x columns of each matrix (0 for adamw) */
} dmuon_param;

/* Load options.  Zero-initialised (or NULL) means the defaults. */
typedef struct {
    const char *const *muon;   /* fnmatch patterns forcing role muon */
    size_t n_muon;
    const char *const *adamw;  /* fnmatch patterns forcing role adamw */
    size_t n_adamw;
    bool fused_experts;        /* config.json route: emit the fused 3-D expert
                                  tensors (mlp.experts.gate_up_proj [E,2I,H],
                                  mlp.experts.down_proj [E,H,I]) instead of the
                                  per-expert layout experts.{e}.{gate,up,down}_proj */
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
 * Errors: DMUON_EIO (cannot read a file), DMUON_EPARSE (malformed JSON/YAML,
 * truncated or oversized safetensors header, header length beyond the file,
 * non-positive dimension, duplicate tensor name, a field of the wrong form;
 * the message names the file, the line or tensor/field and what was
 * expected), DMUON_ENOTFOUND (missing required config field or shard file),
 * DMUON_EUNSUPPORTED (model_type not supported: the message lists the
 * supported types and points at the safetensors route), DMUON_EINVAL (a role
 * pattern that cannot apply), DMUON_ENOMEM. */
dmuon_rc dmuon_model_load(const char *path, const dmuon_model_opts *opts, dmuon_model **out);

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
