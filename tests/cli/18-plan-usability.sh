#!/usr/bin/env bash
# dmuon-plan as a new user meets it: the missing-costs hint is a command that
# works, -o - and show - pipe, --compare with ablation flags repeats nothing,
# more ranks than units is said, a plan given where a model is expected is
# named, directories are bad input (2), --model works like the argument,
# -n is refused with the flags to use, an interrupted write leaves no file.
source "$(dirname "$0")/lib.sh"
P="$DMUON_BIN/dmuon-plan"
V="$DMUON_BIN/dmuon-verify"; M="$DMUON_ROOT/models"
PR="$DMUON_BIN/dmuon-probe"
INV="$DMUON_ROOT/tests/fuzz/seed/inventory/tiny.yaml"
Q="$DMUON_ROOT/models/qwen2.5-1.5b.yaml"
export OPENBLAS_NUM_THREADS=1

# 1. the hint for missing costs runs as printed, and then the plan works
run "$P" "$INV" --ranks 4 --db "$T_TMP/h.sqlite"
check_rc 2 "no costs yet"
cmd=$(grep -oE 'measure them with: dmuon-probe [^(]*' "$T_TMP/err" | sed 's/^measure them with: //; s/ *$//')
case "$cmd" in "dmuon-probe --model $INV --missing --db $T_TMP/h.sqlite --device cpu") ok ;;
     *) bad "hint: got '$cmd'" ;; esac
run $DMUON_BIN/$cmd --iters 1 --warmup 0
check_rc 0 "the hinted probe command runs"
run "$P" "$INV" --ranks 4 --db "$T_TMP/h.sqlite"
check_rc 0 "the plan works after the hinted probe"

# 8. rows probed with another thread count are named, with the flag to use them
run env OPENBLAS_NUM_THREADS=2 "$P" "$INV" --ranks 4 --db "$T_TMP/h.sqlite"
check_rc 2 "x2 finds no x2 rows"
check_err "holds [0-9]+ of these shapes for device 'cpu: .* x1'" "names the x1 rows"
dev=$(grep -oE "plan with --device 'cpu: [^']* x1'" "$T_TMP/err" | head -n1 | sed "s/^plan with --device '//; s/'$//")
run env OPENBLAS_NUM_THREADS=2 "$P" "$INV" --ranks 4 --db "$T_TMP/h.sqlite" --device "$dev"
check_rc 0 "and --device with that name plans"

# 1b. --db beside a --cost that reads no database is refused, naming both
run "$P" "$INV" --ranks 4 --cost flops --db "$T_TMP/h.sqlite" -o "$T_TMP/flops.yaml"
check_rc 2 "--cost flops --db"
check_err "^dmuon-plan: error: --db '.*h.sqlite' is read for --cost db only, not --cost flops" "--db with --cost flops names both"
[ -e "$T_TMP/flops.yaml" ] && bad "--cost flops --db wrote a plan" || ok

# 2. -o -: the plan alone on stdout, the report on stderr; show - reads stdin
run "$P" "$INV" --ranks 4 --cost flops -o -
check_rc 0 "-o -"
check_eq "$(head -n 2 "$T_TMP/out" | tail -n 1)" "dmuon_plan: 1" "stdout starts with the plan"
if grep -qE 'plan written|ns/mean|^ *rank' "$T_TMP/out"; then bad "-o -: report text on stdout"; else ok; fi
check_err "plan written to standard output" "-o -: report on stderr"
"$P" "$INV" --ranks 4 --cost flops -o - 2> /dev/null | "$P" show - > "$T_TMP/show" 2> "$T_TMP/err"
check_eq "$?" 0 "plan -o - | show -"
grep -q "ranks" "$T_TMP/show" && ok || bad "show - printed no report"
run "$P" "$INV" --ranks 4 --cost flops -o - --json
check_rc 0 "-o - --json"
python3 -c 'import json,sys; json.loads(open(sys.argv[1]).read())' "$T_TMP/err" 2> /dev/null && ok || bad "-o - --json: stderr is not one JSON document"
if grep -q '^{' "$T_TMP/out"; then bad "-o - --json: JSON on stdout"; else ok; fi

# 9. --compare with an ablation flag: the given options once, no repeated row
run "$P" "$Q" --ranks 32 --cost flops --compare --no-byte-cap
check_rc 0 "--compare --no-byte-cap"
check_out "^as given +" "first row is the options as given"
if grep -qE '^no-byte-cap ' "$T_TMP/out"; then bad "--compare repeats no-byte-cap"; else ok; fi
dups=$(grep -oE '^(as given|no-[a-z-]+|round-robin|cost [a-z0-9]+|fuse-experts) ' "$T_TMP/out" | sort | uniq -d | wc -l)
check_eq "$dups" 0 "no label twice"
given=$(grep -E '^as given ' "$T_TMP/out" | sed -E 's/^as given +//')
"$P" "$Q" --ranks 32 --cost flops --compare > "$T_TMP/cmp0"
nocap=$(grep -E '^no-byte-cap ' "$T_TMP/cmp0" | sed -E 's/^no-byte-cap +//')
check_eq "$given" "$nocap" "'as given' (--no-byte-cap) = the no-byte-cap row of a plain --compare"

# 11. more ranks than units is said
run "$P" "$INV" --ranks 1024 --cost flops
check_rc 0 "1024 ranks"
check_err "note: 1024 ranks but only [0-9]+ units: [0-9]+ ranks own no Muon matrix" "more ranks than units"

# 12. directories and plans where models go
run "$P" show "$T_TMP"
check_rc 2 "show DIR"
check_err "is a directory" "show DIR: says so"
"$P" "$INV" --ranks 4 --cost flops -o "$T_TMP/p.yaml" > /dev/null
run "$P" inspect "$T_TMP/p.yaml"
check_rc 2 "inspect PLAN"
check_err "is a dmuon plan file, not a model inventory: read it with dmuon-plan show" "inspect PLAN: says use show"

# 13. --model is the argument; -n is refused; --version
"$P" "$INV" --ranks 4 --cost flops > "$T_TMP/a" 2>&1
"$P" --model "$INV" --ranks 4 --cost flops > "$T_TMP/b" 2>&1
check_cmp "$T_TMP/a" "$T_TMP/b" "--model MODEL = MODEL"
run "$P" inspect --model "$INV"
check_rc 0 "inspect --model"
run "$P" "$INV" --model "$INV" --cost flops
check_rc 2 "a model both ways"
run "$P" "$INV" -n 2 --cost flops
check_rc 2 "-n"
check_err "give --nodes R or --ranks N" "-n names the flags to use"
run "$P" "$INV" --ranks 4 --cost flops --small-unit-bytes 1MiB -o "$T_TMP/s1.yaml"
check_rc 0 "--small-unit-bytes 1MiB"
run "$P" "$INV" --ranks 4 --cost flops --small-unit-bytes 1048576 -o "$T_TMP/s2.yaml"
check_cmp "$T_TMP/s1.yaml" "$T_TMP/s2.yaml" "1MiB = 1048576"

# 7. an interrupted plan write leaves neither the plan nor its temporary file
set -m   # job control: a background job keeps SIGINT (not ignored)
for sig in INT TERM; do
    rm -f "$T_TMP"/int.yaml*
    DMUON_TEST_WRITE_STALL_MS=5000 "$P" "$INV" --ranks 4 --cost flops -o "$T_TMP/int.yaml" > /dev/null 2>&1 &
    pid=$!
    for _ in $(seq 50); do ls "$T_TMP"/int.yaml.tmp.* > /dev/null 2>&1 && break; sleep 0.1; done
    ls "$T_TMP"/int.yaml.tmp.* > /dev/null 2>&1 && ok || bad "SIG$sig: no temporary file seen"
    kill -s "$sig" "$pid"; wait "$pid"; rc=$?
    check_eq "$rc" "$((128 + $(kill -l "$sig")))" "SIG$sig: dies by the signal"
    left=$(ls "$T_TMP" | grep -c '^int\.yaml')
    check_eq "$left" 0 "SIG$sig: no plan file, no PLAN.tmp.* left"
done
set +m
# memory: a DeepSeek-V3-shaped config on 64 ranks does not fit 80G; the
# warning names the layer it gathers
D="$DMUON_ROOT/tests/data/plan/deepseek-v3.json"
run "$P" "$D" --ranks 64 --cost flops --device-memory 80G
check_rc 0 "--device-memory only warns"
check_err "warning: rank [0-9]+ needs [0-9.]+ GiB at every step \(the first included\), over --device-memory 80.00 GiB" \
    "--device-memory 80G warns on what every step needs"
check_err "the largest gathered layer is 'model\.layers\.[0-9]+'" "--device-memory 80G names the layer"
# the parts add up: total = optimizer state + windows + working space +
# control areas; the working space's parts (at most at once) each under it
# (GiB with 2 decimals, in order: total, the limit, the four parts, the
# working space's four, the largest layer)
grep -oE '[0-9]+\.[0-9]{2}' "$T_TMP/err" | tr '\n' ' ' | awk '{
    d1 = $1 - ($3 + $4 + $5 + $6)
    exit (NF == 11 && d1 * d1 < 4e-4 && $7 <= $5 + 0.01 && $8 <= $5 + 0.01 && $10 <= $5 + 0.01 &&
          $11 <= $7 + 0.01 && $3 > 0) ? 0 : 1 }' &&
    ok || bad "the --device-memory warning's parts do not add up: $(cat "$T_TMP/err")"
if grep -q "ZeRO-3" "$T_TMP/err"; then bad "already ZeRO-3: the hint suggests ZeRO-3"; else ok; fi
run "$P" "$D" --ranks 64 --cost flops --zero 2 --device-memory 80G
check_err "more ranks, ZeRO-3, or a smaller layer" "ZeRO-2: the hint suggests ZeRO-3"
run "$P" "$D" --ranks 64 --cost flops --device-memory 100T
if grep -q "device-memory" "$T_TMP/err"; then bad "100T: no warning expected"; else ok; fi
run "$P" "$D" --ranks 64 --cost flops --json
for k in optimizer_bytes window_bytes gathered_layer_bytes pool_bytes least_bytes line_b_dir_bytes \
         total_bytes first_step_bytes work_bytes state_bytes ctrl_bytes param_live_bytes \
         grad_live_bytes view_live_bytes step_bytes live_peak_bytes; do
    check_out "\"$k\":[0-9]" "--json memory has $k"
done
run "$P" "$D" --ranks 64 --cost flops --device-memory lots
check_rc 2 "--device-memory lots is bad input"

# the bound: Qwen2.5-1.5B on 4 x 8 within 1% of it, with its unit
run "$P" "$M/qwen2.5-1.5b.yaml" --nodes 4 -g 8 --cost flops
ratio=$(grep "busiest NS / lower bound" "$T_TMP/out" | awk '{print $6}')
awk -v r="$ratio" 'BEGIN { exit !(r != "" && r <= 1.01) }' && ok || bad "busiest / bound $ratio > 1.01"
check_out "bound [0-9.e+]+ ms at the nominal 1 TFLOP/s" "the bound has its unit"
check_out "layer root: the rank holding the most" "layer root explained"
check_out "byte cap: a target" "the byte cap is a target"

# Qwen2.5-32B at 2 and 8 nodes: a plan keeping the byte cap and layer
# spreading reaches the mean (unit t of layer L on rank (L + t) mod R), so the
# default must be within 1% of it and proven optimal
for n in 2 8; do
    run "$P" "$M/qwen2.5-32b.yaml" --nodes $n -g 8 --cost flops
    check_out "busiest NS / mean +1\.00[0-9] " "qwen2.5-32b ${n}x8: busiest within 1% of the mean"
    check_out "optimal: no plan has a less busy rank" "qwen2.5-32b ${n}x8: proven optimal"
done

# a plan over its bound says what each constraint costs
run "$P" "$DMUON_ROOT/tests/data/plan/qwen3-8b.json" --nodes 16 -g 8 --cost flops --sharding hsdp
check_out "what each constraint costs" "the gap to the bound is explained"
check_out "layer spreading: busiest NS [0-9.]+ -> [0-9.]+" "layer spreading's cost"
check_out "column balancing: busiest NS" "column balancing's cost (HSDP)"
# no cost is negative: a relaxed plan worse than the plan keeping the
# constraint is reported as costing nothing
neg=0
for args in "$DMUON_ROOT/tests/data/plan/qwen3-8b.json --nodes 16 -g 8 --sharding hsdp" \
            "$DMUON_ROOT/tests/data/plan/qwen3-8b.json --nodes 8 -g 8 --sharding hsdp --compare" \
            "$M/pi05.yaml --nodes 8 -g 8 --sharding hsdp --compare"; do
    run "$P" $args --cost flops
    neg=$((neg + $(awk '/busiest NS [0-9.]+ -> [0-9.]+/ { for (i = 1; i < NF; i++)
        if ($i == "->" && $(i - 2) == "NS" && $(i + 1) + 0 > $(i - 1) + 0) n++ } END { print n + 0 }' "$T_TMP/out")))
done
if [ "$neg" -eq 0 ]; then ok; else bad "$neg constraint cost lines with a relaxed plan worse than the default"; fi
# the over-cap reason: no blame on layer spreading without it; every unit over the cap said so
run "$P" "$DMUON_ROOT/tests/data/plan/qwen3-8b.json" --nodes 16 -g 8 --cost flops --no-layer-spread
check_out "placed over it" "qwen3-8b 16x8 without spreading: units over the cap"
if grep -q "layer spreading allowed" "$T_TMP/out"; then bad "--no-layer-spread: the over-cap reason blames layer spreading"; else ok; fi
run "$P" "$DMUON_ROOT/tests/fuzz/seed/inventory/tiny.yaml" --ranks 64 --cost flops
check_out "every unit is larger than the cap by itself" "every unit over the cap: said so"
run "$P" "$M/qwen2.5-1.5b.yaml" --nodes 4 -g 8 --cost flops
if grep -q "what each constraint costs" "$T_TMP/out"; then bad "within 1% of the bound: no explanation"; else ok; fi

# routers: the role printed; --router adamw moves them to AdamW
Q="$M/qwen1.5-moe-a2.7b/config.json"
run "$P" "$Q" --ranks 64 --cost flops
check_out "router weights: 48 tensors" "router weights counted"
check_out "48 on Muon, 0 on AdamW \(--router muon, the default\)" "default: routers on Muon"
run "$P" "$Q" --ranks 64 --cost flops --router adamw --json
m1=$(jq .muon_matrices "$T_TMP/out")
run "$P" "$Q" --ranks 64 --cost flops --json
m0=$(jq .muon_matrices "$T_TMP/out")
check_eq "$((m0 - m1))" "48" "--router adamw takes 48 matrices off Muon"
check_eq "$(jq .router_tensors_on_muon "$T_TMP/out")" "48" "--json: 48 router tensors on Muon by default"
run "$P" inspect "$Q" --router adamw --json
a1=$(jq .adamw_params "$T_TMP/out")
run "$P" inspect "$Q" --json
a0=$(jq .adamw_params "$T_TMP/out")
check_eq "$((a1 - a0))" "48" "inspect --router adamw: 48 more AdamW tensors"
run "$P" "$Q" --ranks 64 --cost flops --router sgd
check_rc 2 "--router sgd refused"

# show --ranks, show --owners --json
run "$P" "$M/qwen2.5-1.5b.yaml" --ranks 32 --cost flops -o "$T_TMP/own.yaml"
run "$P" show "$T_TMP/own.yaml" --ranks
check_rc 0 "show --ranks"
check_eq "$(grep -cE '^ +[0-9]+ ' "$T_TMP/out")" "32" "show --ranks lists 32 ranks"
run "$P" show "$T_TMP/own.yaml" --ranks --json
check_eq "$(jq '.ranks_detail | length' "$T_TMP/out")" "32" "show --ranks --json: 32 ranks"
sum=$(jq '[.ranks_detail[].matrices] | add' "$T_TMP/out")
check_eq "$sum" "196" "matrices over the ranks add up to the model's 196"
run "$P" show "$T_TMP/own.yaml" --owners --json
check_rc 0 "show --owners --json"
q=$(jq -r '.params[] | select(.name == "model.layers.3.mlp.down_proj.weight") | .owners | length' "$T_TMP/out")
check_eq "$q" "1" "a dense matrix has one owner"
o=$(jq -r '.params[] | select(.name == "model.layers.3.mlp.down_proj.weight") | .owners[0].rank' "$T_TMP/out")
w=$(grep -o 'name: "model.layers.3.mlp.down_proj.weight", layer: [0-9]*, owner: [0-9]*' "$T_TMP/own.yaml" | grep -o 'owner: [0-9]*' | grep -o '[0-9]*')
check_eq "$o" "$w" "--owners agrees with the plan file's owner"
a=$(jq -r '[.params[] | select(.role == "adamw") | .owners | length] | add' "$T_TMP/out")
check_eq "$a" "0" "AdamW parameters have no owner"
run "$P" show "$T_TMP/own.yaml" --owners
check_rc 2 "--owners without --json refused"
run "$P" "$M/qwen2.5-1.5b.yaml" --ranks 32 --cost flops --owners
check_rc 2 "--owners applies to show"

# verify prints one count of violations
sed 's/owner: 3,/owner: 4,/' "$T_TMP/own.yaml" > "$T_TMP/own-bad.yaml"
run "$V" --plan "$T_TMP/own-bad.yaml"
check_rc 1 "an edited owner is a violation"
check_eq "$(grep -oE '[0-9]+ (invariant check|violation)' "$T_TMP/out" | wc -l)" "1" "one count of violations"

# -o - --json: stderr stays one JSON document; notes and warnings are its "notes"
run "$P" "$D" --ranks 64 --cost flops --device-memory 80G -o - --json
check_rc 0 "-o - --json with a memory warning"
python3 -m json.tool "$T_TMP/err" > /dev/null 2>&1 && ok || bad "-o - --json --device-memory: stderr is not valid JSON"
python3 -c 'import json,sys; n = json.load(open(sys.argv[1]))["notes"]; sys.exit(0 if any("at every step" in x for x in n) else 1)' \
    "$T_TMP/err" 2> /dev/null && ok || bad "-o - --json: the memory warning is not in notes"
run "$P" "$DMUON_ROOT/tests/fuzz/seed/inventory/tiny.yaml" --ranks 64 --cost flops -o - --json
python3 -c 'import json,sys; n = json.load(open(sys.argv[1]))["notes"]; sys.exit(0 if any("own no Muon matrix" in x for x in n) else 1)' \
    "$T_TMP/err" 2> /dev/null && ok || bad "-o - --json: the few-units note is not in notes, or stderr is not JSON"

# the unit of the *_ms keys follows --cost
run "$P" "$M/qwen2.5-1.5b.yaml" --nodes 1 -g 8 --cost elements --json
check_eq "$(jq -r .ms_keys_unit "$T_TMP/out")" "m*n/1e6" "--cost elements: ms_keys_unit"
run "$P" "$M/qwen2.5-1.5b.yaml" --nodes 1 -g 8 --cost flops --json
check_eq "$(jq -r .ms_keys_unit "$T_TMP/out")" "ms" "--cost flops: ms_keys_unit"
# show --ranks --owners --json gives both
run "$P" show "$T_TMP/own.yaml" --ranks --owners --json
check_eq "$(jq '(.ranks_detail | length) > 0 and (.params | length) > 0' "$T_TMP/out")" "true" \
    "show --ranks --owners --json: both"
# verify lists the violations (up to 20), not only the first
run "$V" --plan "$T_TMP/own-bad.yaml"
nv=$(grep -oE 'FAILED, [0-9]+ violation' "$T_TMP/out" | grep -oE '[0-9]+')
nl=$(grep -cE '^  [a-z]' "$T_TMP/out")
want=$nv; [ "$want" -gt 20 ] && want=21   # 20 listed and the "refused when loaded" line
[ "${nv:-0}" -gt 1 ] && check_eq "$nl" "$want" "verify lists every violation up to 20" || bad "expected several violations, got ${nv:-none}"
if [ "${nv:-0}" -gt 20 ]; then check_out "\.\.\. and $((nv - 21)) more" "verify says how many more"; fi
# --router adamw on a model with no router: a note
run "$P" "$M/qwen2.5-1.5b.yaml" --nodes 1 -g 8 --cost flops --router adamw
check_err "note: --router adamw: .* has no router weight" "--router adamw without routers: a note"
# --compare --json carries the constraint costs
run "$P" "$DMUON_ROOT/tests/data/plan/qwen3-8b.json" --nodes 16 -g 8 --cost flops --sharding hsdp --compare --json
check_eq "$(jq '[.constraint_costs[].constraint] | length' "$T_TMP/out")" "3" "--compare --json: three constraint costs (HSDP)"
finish
