#!/usr/bin/env bash
# --cost db (the default): missing shapes are an error that lists them and
# gives the dmuon-probe command; --probe-missing is refused in this build.
source "$(dirname "$0")/lib.sh"
P="$DMUON_BIN/dmuon-plan"
M="$DMUON_ROOT/models"
export DMUON_DB="$T_TMP/none.sqlite"
run "$P" "$M/qwen2.5-1.5b.yaml" --ranks 32 -o "$T_TMP/p.yaml"
check_rc 2 "no database"
check_err "none.sqlite' does not exist" "names the database"
check_err "256x1536, 1536x1536, 1536x8960, 8960x1536" "lists the missing shapes"
check_err "dmuon-probe --model $M/qwen2.5-1.5b.yaml --missing --db $T_TMP/none.sqlite" "prints the probe command"
check_no_file "$T_TMP/p.yaml" "no plan file"
run "$P" "$M/qwen2.5-1.5b.yaml" --ranks 32 --db "$T_TMP/x.sqlite" --device "cuda: H200" --probe-missing
check_rc 2 "--probe-missing with a stored device name"
check_err "give --device cpu or cuda" "says which devices it can measure"
# a small model: --probe-missing measures its two shapes once, then plans
printf -- '- {name: blocks.0.a.weight, shape: [64, 128]}\n- {name: blocks.0.b.weight, shape: [32, 64]}\n- {name: blocks.1.a.weight, shape: [64, 128]}\n' > "$T_TMP/tiny.yaml"
run "$P" "$T_TMP/tiny.yaml" --ranks 2 --db "$T_TMP/t.sqlite" --probe-missing --json
check_rc 0 "--probe-missing plans"
check_err "2 missing shapes measured on 'cpu: " "measures the two shapes"
check_out '"cost_source":"db: cpu: ' "plans from measured costs"
check_out '"muon_matrices":3' "three matrices"
run "$P" "$T_TMP/tiny.yaml" --ranks 2 --db "$T_TMP/t.sqlite" --probe-missing
check_rc 0 "second run"
check_err "no shape missing" "a second run measures nothing"
run "$P" "$T_TMP/tiny.yaml" --ranks 2 --db "$T_TMP/t.sqlite" -o "$T_TMP/t.yaml"
check_rc 0 "--cost db from the stored rows"
grep -q 'cost: db' "$T_TMP/t.yaml" && ok || bad "plan file records cost db"
finish
