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
check_err "dmuon-probe --model $M/qwen2.5-1.5b.yaml --shapes 256x1536,1536x1536,1536x8960,8960x1536 --db $T_TMP/none.sqlite" "prints the probe command"
check_no_file "$T_TMP/p.yaml" "no plan file"
run "$P" "$M/qwen2.5-1.5b.yaml" --ranks 32 --db "$T_TMP/x.sqlite" --device cuda:H200 --probe-missing
check_rc 3 "--probe-missing"
check_err "not available in this build" "says it is not built"
finish
