#!/usr/bin/env bash
# dmuon-probe --model: the distinct Muon shapes of a model inventory.
. "$(dirname "$0")/lib.sh"
P="$DMUON_BIN/dmuon-probe"
DB="$T_TMP/c.sqlite"
cat > "$T_TMP/tiny.yaml" <<'YAML'
- {name: model.embed_tokens.weight, shape: [64, 16]}
- {name: model.layers.0.self_attn.q_proj.weight, shape: [16, 16]}
- {name: model.layers.0.mlp.up_proj.weight, shape: [40, 16]}
- {name: model.layers.0.input_layernorm.weight, shape: [16]}
- {name: model.layers.1.self_attn.q_proj.weight, shape: [16, 16]}
- {name: model.layers.1.mlp.up_proj.weight, shape: [40, 16]}
- {name: model.norm.weight, shape: [16]}
YAML
run "$P" --model "$T_TMP/tiny.yaml" --db "$DB" --iters 1 --warmup 0
check_rc 0 "probe --model"
check_out '^# 2 shapes probed' "two distinct Muon shapes"
check_out ' 16x16 ' "q_proj shape"
check_out ' 40x16 ' "up_proj shape"
run "$P" --model "$T_TMP/tiny.yaml" --db "$DB" --missing
check_rc 0 "second run with --missing"
check_err '0 shapes missing' "second run probes nothing"
printf -- '- {name: model.embed_tokens.weight, shape: [64, 16]}\n' > "$T_TMP/nomuon.yaml"
run "$P" --model "$T_TMP/nomuon.yaml" --db "$T_TMP/n.sqlite"
check_rc 2 "a model without Muon matrices"
check_err 'no Muon matrices' "error says so"
check_no_file "$T_TMP/n.sqlite" "no database created for nothing to probe"
run "$P" --model "$T_TMP/tiny.yaml" --shapes 8x8 --db "$T_TMP/n.sqlite"
check_rc 2 "--model with --shapes"
check_err '--model and --shapes exclude each other' "usage error says why"
run "$P" --model "$T_TMP/absent.yaml" --db "$DB"
check_rc 2 "missing model file"
check_err 'absent.yaml' "error names the file"
finish
