#!/usr/bin/env bash
# A config.json that declares quantization_config gets a note naming the
# quant_method (plan and inspect); without it, no note.
source "$(dirname "$0")/lib.sh"
P="$DMUON_BIN/dmuon-plan"
src="$DMUON_ROOT/models/qwen2.5-1.5b/config.json"
python3 - "$src" "$T_TMP/q.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["quantization_config"] = {"quant_method": "fp8", "weight_block_size": [128, 128]}
json.dump(c, open(sys.argv[2], "w"))
PY
run "$P" inspect "$T_TMP/q.json"
check_rc 0 "inspect a quantized config"
check_err "declares a quantized checkpoint \(quant_method 'fp8'\)" "inspect notes the quant_method"
run "$P" "$T_TMP/q.json" --ranks 8 --cost flops
check_rc 0 "plan a quantized config"
check_err "quant_method 'fp8'" "plan notes it too"
run "$P" inspect "$src"
check_rc 0 "inspect the plain config"
if grep -q "quantized checkpoint" "$T_TMP/err"; then bad "a plain config gets no note"; else ok; fi
finish
