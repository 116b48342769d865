#!/usr/bin/env bash
# dmuon-plan on the bundled models: plan, report keys, plan files that are
# byte-identical for the same inputs, show, verify, --compare, inspect.
source "$(dirname "$0")/lib.sh"
P="$DMUON_BIN/dmuon-plan"; V="$DMUON_BIN/dmuon-verify"
M="$DMUON_ROOT/models"

run "$P" "$M/qwen2.5-1.5b.yaml" --ranks 32 --cost flops -o "$T_TMP/a.yaml"
check_rc 0 "plan qwen2.5-1.5b on 32 ranks"
check_out "heaviest bytes / mean +1\.14" "byte cap gives about 1.14x the mean bytes"
check_out "plan written to" "says where the plan went"
run "$P" "$M/qwen2.5-1.5b.yaml" --ranks 32 --cost flops -o "$T_TMP/b.yaml"
check_cmp "$T_TMP/a.yaml" "$T_TMP/b.yaml" "same inputs give a byte-identical plan file"
check_eq "$(head -c 64 "$T_TMP/a.yaml" | grep -c dmuon)" "1" "plan file starts with its header"
grep -q '^dmuon_plan: 1$' "$T_TMP/a.yaml" && ok || bad "plan file carries dmuon_plan: 1"

run "$P" "$M/qwen2.5-1.5b.yaml" --ranks 32 --cost flops --json
check_rc 0 "--json"
for k in ranks nodes gpus_per_node sharding units muon_matrices cost_source \
         busiest_ns_over_mean busiest_ns_over_lower_bound heaviest_bytes_over_mean \
         max_owner_bytes heaviest_rail_over_mean max_matrices_per_rank \
         layer_root_over_largest_unit; do
    check_out "\"$k\":" "--json has key $k"
done
check_eq "$(wc -l < "$T_TMP/out")" "1" "--json prints one line (one object)"
check_out '"muon_matrices":196' "196 Muon matrices"
check_out '"ranks":32,"nodes":4,"gpus_per_node":8' "32 ranks = 4 x 8"

run "$P" "$M/qwen2.5-1.5b.yaml" --ranks 32 --cost flops --no-byte-cap --json
check_out '"heaviest_bytes_over_mean":1\.3[3-5]' "without the cap about 1.34x"

run "$P" show "$T_TMP/a.yaml"
check_rc 0 "show reloads the plan"
check_out "heaviest bytes / mean +1\.14" "show prints the same report"
run "$V" --plan "$T_TMP/a.yaml" --model "$M/qwen2.5-1.5b.yaml"
check_rc 0 "verify --plan passes"
check_out "all invariants hold" "verify says so"
run "$V" plan "$T_TMP/a.yaml" --json
check_out '"ok":true' "verify plan --json"

# an edited plan: show refuses (digest), verify reports a violation
sed '0,/owner: 0,/s//owner: 1,/' "$T_TMP/a.yaml" > "$T_TMP/edit.yaml"
run "$P" show "$T_TMP/edit.yaml"
check_rc 2 "show of an edited plan"
check_err "edit.yaml: field 'digests.units'" "names the digest that does not match"
run "$V" --plan "$T_TMP/edit.yaml"
check_rc 1 "verify of an edited plan exits 1"
check_out "FAILED" "verify prints FAILED"
# an owner outside [0, N)
sed '0,/owner: 0,/s//owner: 99,/' "$T_TMP/a.yaml" > "$T_TMP/range.yaml"
run "$V" --plan "$T_TMP/range.yaml"
check_rc 1 "owner out of range is a violation"
check_out "outside \[0, 32\)" "names the range"
# plan made for another model
run "$V" --plan "$T_TMP/a.yaml" --model "$M/qwen2.5-7b.yaml"
check_rc 1 "plan of another model"

run "$P" "$M/qwen1.5-moe-a2.7b.yaml" --ranks 256 --cost flops --json
check_out '"max_owner_bytes":115343360' "MoE on 256 ranks: largest window 110.0 MiB"
check_out '"heaviest_bytes_over_mean":1\.07[5-9]' "1.08x the mean"
run "$P" "$M/qwen1.5-moe-a2.7b.yaml" --ranks 256 --cost flops --fuse-experts --json
check_out '"max_owner_bytes":346030080' "fused expert units: 330 MiB windows"

run "$P" "$M/pi05.yaml" --nodes 16 --gpus-per-node 8 --sharding hsdp --cost flops -o "$T_TMP/h.yaml"
check_rc 0 "pi0.5 HSDP 16 x 8"
check_out "heaviest rail / mean +1\.0[0-6]" "heaviest rail within 1.06x"
grep -q 'leaders: \[' "$T_TMP/h.yaml" && ok || bad "HSDP plan lists row leaders"
run "$V" --plan "$T_TMP/h.yaml"
check_rc 0 "verify HSDP plan"

run "$P" "$M/qwen2.5-7b/config.json" --nodes 16 --sharding hsdp --cost flops --compare
check_rc 0 "--compare"
for v in default no-byte-cap no-layer-spread no-column-balance round-robin "cost elements"; do
    check_out "^$v " "--compare has row $v"
done
run "$P" "$M/qwen2.5-7b.yaml" --nodes 2 --cost flops --compare --json
check_out '"variants":\[' "--compare --json"

run "$P" inspect "$M/qwen1.5-moe-a2.7b.yaml"
check_rc 0 "inspect"
check_out "two-dimensional tensors: 4538; Muon matrices: 4536 \(4320 expert matrices\)" "MoE counts"
check_out "1408 x 2048 +2880" "expert gate/up shape"
run "$P" inspect "$M/qwen2.5-1.5b/config.json" --json
check_out '"muon_matrices":196' "inspect --json"
run "$P" --help
check_rc 0 "--help"
check_out "usage: dmuon-plan" "help text"
finish
