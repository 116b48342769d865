#!/usr/bin/env bash
# dmuon-bench ns: Gram and direct side by side with the sgemm rate; the
# outputs are compared (#wrong 0); --json; bad input exits 2.
. "$(dirname "$0")/lib.sh"
B="$DMUON_BIN/dmuon-bench"

run "$B" ns --shapes 32x96,96x32,24x24 --iters 1 --warmup 0
check_rc 0 "bench ns"
check_out '^shape +gram_ms +direct_ms +dir/gram' "table header"
check_out '^32x96 +[0-9.]+ +[0-9.]+ +[0-9.]+ .* 0$' "32x96 row with #wrong 0"
check_out '^96x32 ' "tall shape row"

run "$B" ns --shapes 16x48 --iters 1 --warmup 0 --json
check_rc 0 "bench ns --json"
check_out '"direct_over_gram": ' "json ratio"
check_out '"gram_fraction_of_sgemm": ' "json fraction of sgemm"
check_out '"wrong": 0' "json wrong count"

run "$B" ns --shapes 16x48,4096x4096 --iters 1 --warmup 0 --max-elements 100000
check_rc 0 "bench ns with a skipped shape"
check_out '4096x4096 +skipped' "skipped shape is listed"

printf -- '- {name: model.embed_tokens.weight, shape: [64, 16]}\n- {name: model.norm.weight, shape: [16]}\n' > "$T_TMP/nomuon.yaml"
run "$B" ns --model "$T_TMP/nomuon.yaml" --iters 1 --warmup 0
check_rc 2 "a model without Muon matrices"
check_err "nomuon.yaml' has no Muon matrices" "error names the model"
check_eq "$(grep -c '^[0-9]' "$T_TMP/out")" 0 "no default shapes timed instead"
run "$B" ns --model "$T_TMP/nomuon.yaml" --shapes 8x8
check_rc 2 "--model with --shapes"
run "$B" ns --shapes 8x8 --model "$T_TMP/nomuon.yaml"
check_rc 2 "--shapes with --model"
check_err '--model and --shapes exclude each other' "usage error says why"
run "$B" ns --shapes 16x
check_rc 2 "bad shape"
run "$B" ns --coeffs pe9
check_rc 2 "bad coefficient set"
run "$B" ns --iters 0
check_rc 2 "iters 0"

# the GEMM-rate target: gram/op is Gram time over its operation count at the
# measured GEMM rate, > 0; a generous target passes, a tiny one fails
run "$B" ns --shapes 32x96 --iters 1 --warmup 0 --target 1000
check_rc 0 "bench ns within --target 1000"
check_out '^32x96 .* syrk/syrk +0$' "row names the kernels (CPU: ssyrk)"
run "$B" ns --shapes 32x96 --iters 1 --warmup 0 --target 1e-6 --json
check_rc 1 "bench ns over --target 1e-6"
check_out '"within_target": false' "json says over target"
check_err 'over --target 1e-06' "stderr says why"
ratio=$(sed -n 's/.*"gram_over_op": \([0-9.e+-]*\).*/\1/p' "$T_TMP/out")
check_eq "$(awk -v r="$ratio" 'BEGIN { print (r > 0 && r < 1e6) ? "ok" : "bad" }')" ok "gram_over_op positive ($ratio)"
run "$B" ns --target 0
check_rc 2 "target 0"
run "$B" ns --target x
check_rc 2 "target not a number"
# --db creates a database at the current schema version (CPU stores no choices)
run "$B" ns --shapes 16x48 --iters 1 --warmup 0 --db "$T_TMP/k.sqlite"
check_rc 0 "bench ns --db"
check_eq "$(sqlite3 "$T_TMP/k.sqlite" 'PRAGMA user_version; SELECT count(*) FROM ns_kernel' | tr '\n' ' ')" "2 0 " "database at version 2 with an empty ns_kernel"
finish
