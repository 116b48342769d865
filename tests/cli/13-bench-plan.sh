#!/usr/bin/env bash
# dmuon-bench plan, shrunk to a quick run: both cases planned and checked
# (#wrong 0), table and JSON.  Speed is judged by make bench, not here.
source "$(dirname "$0")/lib.sh"
B="$DMUON_BIN/dmuon-bench"
M="$DMUON_ROOT/models"
run "$B" plan --model "$M/qwen1.5-moe-a2.7b.yaml" --units 2000 --synthetic-ranks 256 --reps 1
check_rc 0 "bench plan"
check_out "^qwen1.5-moe-a2.7b +4416 +256 .* 0$" "MoE row: 4416 units, 256 ranks, nothing wrong"
check_out "^synthetic +2000 +256 .* 0$" "synthetic row: 2000 units, 256 ranks, nothing wrong"
check_err "run 1/1" "progress on stderr"
run "$B" plan --model "$M/qwen1.5-moe-a2.7b.yaml" --units 1000 --synthetic-ranks 64 --reps 1 --json
check_rc 0 "bench plan --json"
check_out '"model":"synthetic","units":1000,"ranks":64' "JSON row"
check_out '"wrong":0' "JSON #wrong"
run "$B" plan --units 5
check_rc 2 "bad --units"
check_err "--units '5'" "names the flag"
finish
