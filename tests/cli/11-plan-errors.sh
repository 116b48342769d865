#!/usr/bin/env bash
# Malformed inputs to dmuon-plan: one clear message naming the file and the
# field, a non-zero exit, no crash and no plan file left behind.
source "$(dirname "$0")/lib.sh"
P="$DMUON_BIN/dmuon-plan"
M="$DMUON_ROOT/models"
out="$T_TMP/plan.yaml"

expect() {  # CODE PATTERN DESCRIPTION -- ARGS...
    local code=$1 pat=$2 what=$3; shift 4
    run "$P" "$@" --cost flops -o "$out"
    check_rc "$code" "$what"
    check_err "^dmuon-plan: error: .*$pat" "$what: message"
    check_no_crash "$what"
    check_no_file "$out" "$what: no plan file"
    [ "$(grep -c 'error:' "$T_TMP/err")" -eq 1 ] && ok || bad "$what: one error line"
}
st() {  # NAME LENFIELD HEADER [DATA_BYTES]: writes a safetensors file
    local n=$2 i
    : > "$T_TMP/$1"
    for i in 0 1 2 3 4 5 6 7; do
        printf "\\$(printf '%03o' $(( (n >> (8 * i)) & 255 )))" >> "$T_TMP/$1"
    done
    printf '%s' "$3" >> "$T_TMP/$1"
    head -c "${4:-0}" /dev/zero >> "$T_TMP/$1"
}
ok_hdr='{"w.weight": {"dtype": "BF16", "shape": [2, 2], "data_offsets": [0, 8]}}'
printf '\x05\x00\x00' > "$T_TMP/short.safetensors"
expect 2 "short.safetensors: truncated" "truncated safetensors" -- "$T_TMP/short.safetensors"
st beyond.safetensors 1000000 "$ok_hdr" 8
expect 2 "beyond.safetensors: header length 1000000 goes beyond" "header length beyond the file" -- "$T_TMP/beyond.safetensors"
st notjson.safetensors 9 '[1, 2, 3]'
expect 2 "notjson.safetensors: header does not start" "non-JSON header" -- "$T_TMP/notjson.safetensors"
st trunc.safetensors 20 '{"w.weight": {"dtyp'
expect 2 "trunc.safetensors" "truncated JSON header" -- "$T_TMP/trunc.safetensors"
h='{"w.weight": {"dtype": "BF16", "shape": [2, -2], "data_offsets": [0, 8]}}'
st neg.safetensors ${#h} "$h" 8
expect 2 "neg.safetensors: tensor 'w.weight': field 'shape'" "negative dimension" -- "$T_TMP/neg.safetensors"
printf -- '- {name: a.weight, shape: [0, 4]}\n' > "$T_TMP/zero.yaml"
expect 2 "zero.yaml:1: tensor 'a.weight': field 'shape': dimension 0 is 0" "zero dimension" -- "$T_TMP/zero.yaml"
printf -- '- {name: a.weight, shape: [4, 4]}\n- {name: a.weight, shape: [4]}\n' > "$T_TMP/dup.yaml"
expect 2 "dup.yaml: duplicate tensor name 'a.weight'" "duplicate tensor name" -- "$T_TMP/dup.yaml"
printf '{"model_type": "bert", "hidden_size": 8}' > "$T_TMP/config.json"
expect 2 "field 'model_type': 'bert' is not supported; supported types: llama, mistral, qwen2, qwen2_moe, gemma, gemma2" "unknown model_type" -- "$T_TMP/config.json"
check_err "safetensors" "points at the safetensors route"
printf '{"model_type": "qwen2", "num_hidden_layers": 2, "num_attention_heads": 2, "vocab_size": 10, "intermediate_size": 8}' > "$T_TMP/c2.json"
expect 2 "c2.json: missing required field 'hidden_size'" "missing required config field" -- "$T_TMP/c2.json"
"$P" "$M/qwen2.5-1.5b.yaml" --cost flops -o "$T_TMP/good.yaml" > /dev/null
sed 's/^dmuon_plan: 1$/dmuon_plan: 2/' "$T_TMP/good.yaml" > "$T_TMP/v2.yaml"
run "$P" show "$T_TMP/v2.yaml"
check_rc 2 "plan of another version"
check_err "v2.yaml:2: field 'dmuon_plan': plan format version 2, this dmuon reads version 1" "names both versions"
sed '/^cluster:/d' "$T_TMP/good.yaml" > "$T_TMP/nocl.yaml"
run "$P" show "$T_TMP/nocl.yaml"
check_rc 2 "plan without cluster"
check_err "missing required field 'cluster'" "names the missing field"
expect 2 "--nodes '0'" "zero nodes" -- "$M/qwen2.5-1.5b.yaml" --nodes 0
expect 2 "--gpus-per-node '0'" "zero GPUs" -- "$M/qwen2.5-1.5b.yaml" --gpus-per-node 0
expect 2 "100000 x 100000: expected 1 to 1048576 ranks" "absurd cluster" -- "$M/qwen2.5-1.5b.yaml" --nodes 100000 --gpus-per-node 100000
expect 2 "--ranks 30 is not a multiple" "ranks not a multiple" -- "$M/qwen2.5-1.5b.yaml" --ranks 30
expect 2 "unknown option" "unknown flag" -- "$M/qwen2.5-1.5b.yaml" --frobnicate
expect 2 "--epsilon 'x'" "bad epsilon" -- "$M/qwen2.5-1.5b.yaml" --epsilon x
expect 2 "--sharding 'zero'" "bad sharding" -- "$M/qwen2.5-1.5b.yaml" --sharding zero
expect 2 "cannot open" "missing model file" -- "$T_TMP/nope.yaml"
run "$P"
check_rc 2 "no model"
check_err "no MODEL given" "says what is missing"
finish
