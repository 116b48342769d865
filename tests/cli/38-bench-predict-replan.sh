#!/usr/bin/env bash
# dmuon-bench predict --plan PLAN --nodes R -g K: the plan's model planned
# again for that cluster (its options, its cost source) before predicting,
# equal to predicting the plan dmuon-plan makes for that cluster; a plan
# whose model file changed is refused, --nodes without --plan too.
source "$(dirname "$0")/lib.sh"
B="$DMUON_BIN/dmuon-bench"
PL="$DMUON_BIN/dmuon-plan"
PARAMS="$DMUON_ROOT/tools/bench/params/h100.json"
cp "$DMUON_ROOT/models/qwen2.5-1.5b.yaml" "$T_TMP/m.yaml"

"$PL" "$T_TMP/m.yaml" --nodes 2 -g 8 --sharding hsdp --zero 2 --cost flops -o "$T_TMP/p2x8.plan" \
    > /dev/null
"$PL" "$T_TMP/m.yaml" --nodes 4 -g 4 --sharding hsdp --zero 2 --cost flops -o "$T_TMP/p4x4.plan" \
    > /dev/null

run "$B" predict --params "$PARAMS" --plan "$T_TMP/p2x8.plan" --nodes 4 -g 4 \
    --json-file "$T_TMP/again.json"
check_rc 0 "--plan with --nodes and -g"
check_out '^# dmuon-bench predict: plan .*p2x8.plan planned again, 4 x 4, parameters h100' \
    "the header names the cluster planned for"
check_out '^rail3 +[0-9]+ ' "four rails: four GPUs per node"
if grep -q '^rail4 ' "$T_TMP/out"; then bad "a fifth rail on 4 GPUs per node"; else ok; fi
tail -n +2 "$T_TMP/out" > "$T_TMP/again.txt"
run "$B" predict --params "$PARAMS" --plan "$T_TMP/p4x4.plan" --json-file "$T_TMP/direct.json"
check_rc 0 "the plan dmuon-plan made for 4 x 4"
tail -n +2 "$T_TMP/out" > "$T_TMP/direct.txt"
check_cmp "$T_TMP/again.txt" "$T_TMP/direct.txt" "re-planned prediction equals the direct plan's"
python3 - "$T_TMP/again.json" "$T_TMP/direct.json" <<'PY' && ok || bad "the JSON of both agree"
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:])
assert a["nodes"] == b["nodes"] == 4 and a["gpus_per_node"] == b["gpus_per_node"] == 4, (a.keys())
assert a["step_us"] == b["step_us"] and a["layers"] == b["layers"] and a["rails"] == b["rails"]
PY

# --replay-jobs bounds each replay of ours: merged chunks flow cut-through,
# so a bound that merges chunks stays close to chunk by chunk (0); the
# baselines' lines do not replay and stay the same
run "$B" predict --params "$PARAMS" --plan "$T_TMP/p4x4.plan" --replay-jobs 0 --json-file "$T_TMP/j0.json"
check_rc 0 "--replay-jobs 0: chunk by chunk"
run "$B" predict --params "$PARAMS" --plan "$T_TMP/p4x4.plan" --replay-jobs 2000 --json-file "$T_TMP/j2k.json"
check_rc 0 "--replay-jobs 2000: chunks merged"
python3 - "$T_TMP/j0.json" "$T_TMP/j2k.json" <<'PY' && ok || bad "a bounded replay stays within 2% of chunk by chunk"
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:])
assert a["step_us"]["A"] == b["step_us"]["A"] and a["step_us"]["C"] == b["step_us"]["C"]
assert abs(b["step_us"]["D"] / a["step_us"]["D"] - 1) < 0.02, (a["step_us"], b["step_us"])
PY
run "$B" predict --preset h100 --cells "$DMUON_ROOT/tools/bench/paper/tables.json" --replay-jobs 10
check_rc 2 "--replay-jobs without --plan"
check_err "give --plan PLAN" "says so"

# only --nodes: the plan's GPUs per node stay
run "$B" predict --params "$PARAMS" --plan "$T_TMP/p2x8.plan" --nodes 4
check_rc 0 "--nodes alone"
check_out 'planned again, 4 x 8,' "keeps the plan's 8 GPUs per node"
check_out '^rail7 +[0-9]+ ' "eight rails"

run "$B" predict --params "$PARAMS" --nodes 4
check_rc 2 "--nodes without --plan"
check_err "give --plan PLAN" "says what is missing"
run "$B" predict --params "$PARAMS" --plan "$T_TMP/p2x8.plan" --nodes 0
check_rc 2 "--nodes 0"
check_err "\-\-nodes" "names the flag"

# a plan made with role patterns: planned again with the default roles,
# which differ, so refused naming the parameter
"$PL" "$T_TMP/m.yaml" --nodes 2 -g 8 --sharding hsdp --cost flops --adamw '*q_proj*' \
    -o "$T_TMP/roles.plan" > /dev/null
run "$B" predict --params "$PARAMS" --plan "$T_TMP/roles.plan" --nodes 4
[ "$RC" -ne 0 ] && ok || bad "a plan with other roles is refused (rc $RC)"
check_err "q_proj.weight.*adamw.*muon" "names the parameter whose role differs"

# the model file changed since the plan was made: refused, naming it
sed -i 's/^- {name: model.layers.0.mlp.gate_proj.weight, shape: \[8960, 1536\]}/- {name: model.layers.0.mlp.gate_proj.weight, shape: [8964, 1536]}/' \
    "$T_TMP/m.yaml"
run "$B" predict --params "$PARAMS" --plan "$T_TMP/p2x8.plan" --nodes 4
[ "$RC" -ne 0 ] && ok || bad "a changed model file is refused (rc $RC)"
check_err "planning its model .*m.yaml again for 4 x 8" "names the model file and the cluster"
finish
