#!/usr/bin/env bash
# Duplicate keys in every YAML/JSON input are refused, naming both lines
# (readers disagree on which value counts: libyaml keeps both, PyYAML and
# Python's json keep the last); unknown keys in a plan file are refused.
source "$(dirname "$0")/lib.sh"
P="$DMUON_BIN/dmuon-plan"
V="$DMUON_BIN/dmuon-verify"
INV="$DMUON_ROOT/tests/fuzz/seed/inventory/tiny.yaml"
refused() {  # PATTERN DESCRIPTION -- CMD...
    local pat=$1 what=$2; shift 3
    run "$@"
    check_rc 2 "$what"
    check_err "$pat" "$what: message"
    check_no_crash "$what"
}
run "$P" "$INV" --ranks 4 --cost flops -o "$T_TMP/plan.yaml"
check_rc 0 "a plan to edit"
ln=$(wc -l < "$T_TMP/plan.yaml")
# a second units: section at the end
{ cat "$T_TMP/plan.yaml"; echo "units: []"; } > "$T_TMP/units2.yaml"
units_line=$(grep -n '^units:' "$T_TMP/plan.yaml" | cut -d: -f1)
refused "units2.yaml:$((ln + 1)): duplicate key 'units' \(first at line $units_line\)" \
    "plan: a second units: section" -- "$P" show "$T_TMP/units2.yaml"
refused "duplicate key 'units'" "verify --plan: a second units: section" -- "$V" --plan "$T_TMP/units2.yaml"
# a repeated nodes: inside the one-line cluster mapping
sed 's/^cluster: {ranks: 4, nodes: 1,/cluster: {ranks: 4, nodes: 1, nodes: 4,/' "$T_TMP/plan.yaml" > "$T_TMP/nodes2.yaml"
cl=$(grep -n '^cluster:' "$T_TMP/plan.yaml" | cut -d: -f1)
refused "nodes2.yaml:$cl:[0-9]+: duplicate key 'nodes' \(first at line $cl, column [0-9]+\)" \
    "plan: nodes: twice in cluster" -- "$P" show "$T_TMP/nodes2.yaml"
# unknown keys, at the top and inside a mapping
{ cat "$T_TMP/plan.yaml"; echo "comment: hand edited"; } > "$T_TMP/extra.yaml"
refused "extra.yaml:$((ln + 1)): unknown key 'comment' in the plan \(expected dmuon_plan, inputs" \
    "plan: an unknown top-level key" -- "$P" show "$T_TMP/extra.yaml"
sed 's/^cluster: {/cluster: {rnaks: 4, /' "$T_TMP/plan.yaml" > "$T_TMP/typo.yaml"
refused "unknown key 'rnaks' in 'cluster'" "plan: a typo inside cluster" -- "$P" show "$T_TMP/typo.yaml"
# config.json with a repeated field
mkdir -p "$T_TMP/hf"
sed 's/"num_hidden_layers": 28,/"num_hidden_layers": 28,\n  "num_hidden_layers": 2,/' \
    "$DMUON_ROOT/models/qwen2.5-1.5b/config.json" > "$T_TMP/hf/config.json"
grep -c num_hidden_layers "$T_TMP/hf/config.json" | grep -q 2 && ok || bad "config.json edit did not apply"
first=$(grep -n num_hidden_layers "$T_TMP/hf/config.json" | head -n1 | cut -d: -f1)
refused "config.json:$((first + 1)): duplicate key 'num_hidden_layers' \(first at line $first\)" \
    "config.json: a repeated field" -- "$P" inspect "$T_TMP/hf/config.json"
# a YAML inventory with a repeated key in one tensor
printf -- '- {name: a.weight, shape: [4, 4]}\n- {name: b.weight,\n   shape: [4, 4], name: c.weight}\n' > "$T_TMP/inv.yaml"
refused "inv.yaml:3: duplicate key 'name' \(first at line 2" "YAML inventory: name twice" \
    -- "$P" inspect "$T_TMP/inv.yaml"
# a safetensors header with a tensor named twice
hdr='{"w.weight":{"dtype":"BF16","shape":[2,2],"data_offsets":[0,8]},"w.weight":{"dtype":"BF16","shape":[2,2],"data_offsets":[8,16]}}'
python3 -c 'import struct,sys; h=sys.argv[1].encode(); sys.stdout.buffer.write(struct.pack("<Q",len(h))+h+bytes(16))' "$hdr" > "$T_TMP/m.safetensors"
refused "m.safetensors:1:[0-9]+: duplicate key 'w.weight' \(first at line 1, column [0-9]+\)" \
    "safetensors header: a tensor twice" -- "$P" inspect "$T_TMP/m.safetensors"
finish
