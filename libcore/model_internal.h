/*
 * model_internal.h — the model struct and the readers of each input form,
 * shared by model*.c only (not installed).
 */
#ifndef DMUON_MODEL_INTERNAL_H
#define DMUON_MODEL_INTERNAL_H

#include "dmuon/doc.h"
#include "dmuon/model.h"

struct dmuon_model {
    char *source;          /* path given to load */
    char *format;          /* "config", "safetensors", ... */
    dmuon_param *params;   /* nparams, forward order */
    size_t nparams;
    char **layers;         /* nlayers names */
    size_t nlayers;
    uint64_t digest;
    char quant_method[32]; /* config.json quantization_config.quant_method, or "" */
};

/* Builds the model from specs (model.c); format is recorded.  stored (NULL,
 * or n entries, each NULL or a static safetensors type name) gives each
 * tensor's stored type; NULL entries take the name of t[i].dtype.  Formats
 * "safetensors*" accept zero-size dimensions. */
dmuon_rc dmuon_model_new(const char *source, const char *format, const dmuon_tensor_spec *t,
                         const char *const *stored, size_t n, const dmuon_model_opts *opts,
                         dmuon_model **out);

/* Readers; each returns the errors of dmuon_model_load. */
dmuon_rc dmuon_model_load_hf_config(const char *path, dmuon_doc *doc,
                                    const dmuon_model_opts *opts, dmuon_model **out);
dmuon_rc dmuon_model_load_safetensors(const char *path, const dmuon_model_opts *opts,
                                      dmuon_model **out);
dmuon_rc dmuon_model_load_st_index(const char *path, dmuon_doc *doc,
                                   const dmuon_model_opts *opts, dmuon_model **out);
dmuon_rc dmuon_model_load_yaml(const char *path, const dmuon_model_opts *opts,
                               dmuon_model **out);

/* A growable list of tensor specs used by the readers. */
typedef struct {
    dmuon_tensor_spec *t;
    char **names;          /* owned copies of t[i].name */
    const char **stored;   /* stored type names (static strings or NULL) */
    size_t n, cap;
} dmuon_spec_list;

dmuon_rc dmuon_spec_add(dmuon_spec_list *l, const char *name, dmuon_dtype dtype, int ndim,
                        const int64_t *shape);
/* The same with the stored type's safetensors name (a static string, or NULL). */
dmuon_rc dmuon_spec_add_stored(dmuon_spec_list *l, const char *name, dmuon_dtype dtype,
                               const char *stored, int ndim, const int64_t *shape);
void dmuon_spec_list_release(dmuon_spec_list *l);

#endif
