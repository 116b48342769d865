/*
 * config.h — the trainer's model as the other tools see it: a dmuon model
 * inventory (dmuon/model.h) built from the trainer's parameter table, and
 * the two files dmuon-plan reads, a Hugging Face config.json (model_type
 * llama) and the dmuon YAML inventory.  Both files, loaded by libcore, give
 * the same inventory digest as tm_model_build (tests/unit/test_train_model.c).
 * Stored dtype: F32 (the trainer computes and exports FP32).
 */
#ifndef DMUON_TRAIN_CONFIG_H
#define DMUON_TRAIN_CONFIG_H

#include "dmuon/model.h"
#include "dmuon/rc.h"
#include "model.h"

/* Builds the inventory of c (checked) in tm_param_info order; *out is the
 * caller's (dmuon_model_free).  Errors: those of dmuon_model_build. */
dmuon_rc tm_model_build(const tm_config *c, dmuon_model **out);

/* Writes a Hugging Face LlamaConfig JSON for c atomically at path.
 * Errors: those of dmuon_write_atomic. */
dmuon_rc tm_write_hf_config(const tm_config *c, const char *path);

/* Writes the dmuon YAML inventory (a list of {name, shape, dtype}) of c
 * atomically at path.  Errors: those of dmuon_write_atomic. */
dmuon_rc tm_write_yaml(const tm_config *c, const char *path);

#endif
