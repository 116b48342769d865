#!/usr/bin/env bash
# dmuon-plan inspect --tensors (table and --json) on the reference checkpoints
# of tests/reference/hf, snapshot folders as MODEL, quantized checkpoints, and
# plans of expert matrices that are not contiguous in storage.
source "$(dirname "$0")/lib.sh"
P="$DMUON_BIN/dmuon-plan"
R="$DMUON_ROOT/tests/reference/hf"

# a snapshot folder: the file used is named; every tensor is listed once
run "$P" inspect --tensors --json "$R/st/qwen3_moe"
check_rc 0 "inspect --tensors --json of a snapshot folder"
check_err "^dmuon-plan: model directory .*st/qwen3_moe: using .*st/qwen3_moe/model.safetensors$" "names the file used"
n=$(grep -o '"name":' "$T_TMP/out" | wc -l)
want=$(grep -c '"name":' "$R/files/qwen3_moe.json")
want=$((want / 2))   # the file lists the single file and the shards
check_eq "$n" "$want" "one entry per tensor of the file"
check_out '"name":"model.layers.0.mlp.experts.0.gate_proj.weight","shape":\[32,64\],"dtype":"BF16","role":"muon","layer":"model.layers.0","matrices":1,"m":32,"n":64,"transposed":false,"layout":"contiguous","expert":true,"units":\["model.layers.0.mlp.experts.0.gate_proj.weight"\]' "an expert matrix is its own unit"
check_out '"name":"model.layers.0.input_layernorm.weight","shape":\[64\],"dtype":"BF16","role":"adamw","layer":"model.layers.0","matrices":0' "a norm gain is adamw"

# the module layout: the fused [E, 2I, H] tensor is 2E units of I x H
run "$P" inspect --tensors --json --fused-layout "$R/configs/qwen3_moe.json"
check_rc 0 "inspect --tensors --fused-layout"
check_out '"name":"model.layers.0.mlp.experts.gate_up_proj","shape":\[4,64,64\],"dtype":"BF16","role":"muon","layer":"model.layers.0","matrices":8,"m":32,"n":64,"transposed":false,"layout":"contiguous","expert":true,"units":\["model.layers.0.mlp.experts.gate_up_proj\[0\]",.*"model.layers.0.mlp.experts.gate_up_proj\[7\]"\]' "fused gate_up_proj: gate and up of each expert"

# the table
run "$P" inspect --tensors "$R/st/llama4_text/model.safetensors"
check_rc 0 "inspect --tensors (table)"
check_out "^  model.layers.1.feed_forward.experts.gate_up_proj +4x64x192 +BF16 +muon +2 +8 x 96x64 T halves" "llama4_text gate_up_proj: halves, 8 matrices of 96 x 64"
check_out "^  model.layers.1.feed_forward.experts.down_proj +4x96x64 +BF16 +muon +2 +4 x 64x96 T " "llama4_text down_proj: 4 matrices of 64 x 96, transposed"
check_out "^  model.layers.1.feed_forward.experts.gate_up_proj .*model.layers.1.feed_forward.experts.gate_up_proj\[0,1\] \.\.\. \(4 units\)" "llama4_text gate_up_proj: 4 units, one per expert"

# strided gate/up matrices: each expert's pair is one unit, its contiguous
# block: expert e of the [4, 64, 192] BF16 tensor at 2 x 96 x 64 x 2 bytes x e
run "$P" inspect --tensors --json "$R/st/gpt_oss/model.safetensors"
check_rc 0 "inspect --tensors of gpt_oss"
check_out '"name":"model.layers.0.mlp.experts.gate_up_proj","shape":\[4,64,192\],"dtype":"BF16","role":"muon","layer":"model.layers.0","matrices":8,"m":96,"n":64,"transposed":true,"layout":"interleaved","expert":true,"units":\["model.layers.0.mlp.experts.gate_up_proj\[0,1\]","model.layers.0.mlp.experts.gate_up_proj\[2,3\]","model.layers.0.mlp.experts.gate_up_proj\[4,5\]","model.layers.0.mlp.experts.gate_up_proj\[6,7\]"\]' "gpt_oss gate_up_proj: one unit per expert's gate and up"
run "$P" "$R/st/gpt_oss/model.safetensors" --cost flops -N 8 -o "$T_TMP/oss.yaml"
check_rc 0 "plan of interleaved gate_up_proj"
off0=$(grep -o 'name: "model.layers.0.mlp.experts.gate_up_proj\[0,1\]".*members: \[\[[0-9]*, 0, 2, [0-9]*\]\]' "$T_TMP/oss.yaml" | grep -o '[0-9]*\]\]$' | tr -d ']')
off3=$(grep -o 'name: "model.layers.0.mlp.experts.gate_up_proj\[6,7\]".*members: \[\[[0-9]*, 6, 2, [0-9]*\]\]' "$T_TMP/oss.yaml" | grep -o '[0-9]*\]\]$' | tr -d ']')
check_eq "$((off3 - off0))" "$((3 * 2 * 96 * 64 * 2))" "expert 3's block starts 3 blocks after expert 0's"
run "$DMUON_BIN/dmuon-verify" --plan "$T_TMP/oss.yaml" --model "$R/st/gpt_oss/model.safetensors"
check_rc 0 "dmuon-verify accepts the plan"

# a quantized checkpoint: a note on what is kept out of Muon
h='{"m.layers.0.q_proj.weight": {"dtype": "F8_E4M3", "shape": [4, 4], "data_offsets": [0, 16]}, "m.layers.0.q_proj.weight_scale_inv": {"dtype": "F32", "shape": [1, 1], "data_offsets": [16, 20]}, "m.layers.0.o_proj.weight": {"dtype": "BF16", "shape": [4, 4], "data_offsets": [20, 52]}}' 
perl -e 'print pack("Q<", length $ARGV[0]), $ARGV[0]' "$h" > "$T_TMP/q.safetensors"   # header only
run "$P" inspect --tensors "$T_TMP/q.safetensors"
check_rc 0 "inspect a header-only FP8 file"
check_err "^dmuon-plan: note: 1 tensor of .*q.safetensors is stored quantized .*kept out of Muon" "quantized note"
check_out "^  m.layers.0.q_proj.weight +4x4 +F8_E4M3 +adamw" "the FP8 weight is adamw"
check_out "^  m.layers.0.q_proj.weight_scale_inv +1x1 +F32 +adamw" "its scale is adamw"
finish
