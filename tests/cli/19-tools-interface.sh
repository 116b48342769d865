#!/usr/bin/env bash
# The same flag means the same in every tool: --version and --json alike,
# numbers out of range are errors that give the range (never clamped), and
# checks that would check nothing are refused: an all-skipped NS check, an
# edited plan that dmuon-verify --plan used to pass.  A probe stopped by
# SIGINT keeps what it measured; noisy timings are named.
source "$(dirname "$0")/lib.sh"
P="$DMUON_BIN/dmuon-plan"; PR="$DMUON_BIN/dmuon-probe"
B="$DMUON_BIN/dmuon-bench"; V="$DMUON_BIN/dmuon-verify"
INV="$DMUON_ROOT/tests/fuzz/seed/inventory/tiny.yaml"
export OPENBLAS_NUM_THREADS=1
ver=$(sed -n 's/^#define DMUON_VERSION "\(.*\)"/\1/p' "$DMUON_ROOT/libcore/include/dmuon/version.h")
for t in plan probe bench verify "bench ns" "verify ns" "bench plan"; do
    tool=${t%% *}
    run $DMUON_BIN/dmuon-$t --version
    check_rc 0 "dmuon-$t --version"
    check_eq "$(cat "$T_TMP/out")" "dmuon-$tool (dmuon) $ver" "dmuon-$t --version line"
done
json_ok() {  # DESCRIPTION: stdout is one JSON document
    python3 -c 'import json,sys; json.load(open(sys.argv[1]))' "$T_TMP/out" 2> /dev/null && ok || bad "$1: stdout is not JSON"
}
"$P" "$INV" --ranks 4 --cost flops -o "$T_TMP/p.yaml" > /dev/null
run "$PR" --shapes 8x8 --iters 1 --warmup 0 --db "$T_TMP/j.sqlite" --json; check_rc 0 "probe --json"; json_ok "probe --json"
run "$PR" --list --db "$T_TMP/j.sqlite" --json; check_rc 0 "probe --list --json"; json_ok "probe --list --json"
run "$P" "$INV" --ranks 4 --cost flops --json; check_rc 0 "plan --json"; json_ok "plan --json"
run "$P" show "$T_TMP/p.yaml" --json; check_rc 0 "show --json"; json_ok "show --json"
run "$V" --plan "$T_TMP/p.yaml" --json; check_rc 0 "verify --plan --json"; json_ok "verify --plan --json"
run "$V" ns --shapes 8x8 --json; check_rc 0 "verify ns --json"; json_ok "verify ns --json"
run "$B" ns --shapes 8x8 --json; check_rc 0 "bench ns --json"; json_ok "bench ns --json"

# 3. an edited summary: refused by show, and now a violation for verify --plan
sed -E 's/busiest_ns_over_mean: [0-9.]+/busiest_ns_over_mean: 1.000000/' "$T_TMP/p.yaml" > "$T_TMP/edited.yaml"
cmp -s "$T_TMP/p.yaml" "$T_TMP/edited.yaml" && bad "the edit changed nothing" || ok
run "$P" show "$T_TMP/edited.yaml"; check_rc 2 "show refuses the edited plan"
run "$V" --plan "$T_TMP/edited.yaml"
check_rc 1 "verify --plan fails the edited plan"
check_out "FAILED, 1 violation" "one violation"
check_out "would be refused when loaded .*summary.busiest_ns_over_mean" "names the field"

# 11. a check that skips every case is a usage error, not a pass
run "$V" ns --shapes 3000x3000
check_rc 2 "verify ns with every shape above --max-elements"
check_err "every shape has more than --max-elements 4194304 elements.*nothing would be checked" "says nothing would be checked"
run "$V" ns --shapes 3000x3000,8x8
check_rc 0 "one shape left: checked"

# 6. numbers out of range: errors with the range
run "$PR" --shapes 8x8 --iters 1000000000 --db "$T_TMP/r.sqlite"
check_rc 2 "probe --iters 1e9"
check_err "--iters '1000000000': expected a whole number from 1 to 1000000" "gives the range"
run "$P" "$INV" --nodes 99999999999999999999 --cost flops
check_rc 2 "plan --nodes beyond int64"
check_err "--nodes '99999999999999999999': expected a whole number from 1 to 1048576" "gives the range"
run "$P" "$INV" --ranks 4 --cost flops --small-unit-bytes 99999999999999999999
check_rc 2 "plan --small-unit-bytes beyond int64"
check_err "expected a size from 0 B to 64 TiB" "gives the range"

# 7. SIGINT during a probe: the shapes measured so far are stored and named
set -m
"$PR" --shapes 700x700,701x700,702x700,703x700,704x700,705x700 --iters 3 --warmup 1 \
    --db "$T_TMP/int.sqlite" > "$T_TMP/iout" 2> "$T_TMP/ierr" &
pid=$!
for _ in $(seq 300); do grep -q '\[1/6\]' "$T_TMP/ierr" && break; sleep 0.1; done
kill -INT "$pid"; wait "$pid"; rc=$?
set +m
check_eq "$rc" 130 "SIGINT: exit 128 + 2"
grep -q "interrupted" "$T_TMP/ierr" && ok || bad "SIGINT: says it was interrupted"
grep -qE "measured before it \(700x700.*\) (is|are) stored in" "$T_TMP/ierr" && ok || bad "SIGINT: names the stored shapes"
rows=$("$PR" --list --db "$T_TMP/int.sqlite" | grep -c 'x700 ')
if [ "$rows" -ge 1 ] && [ "$rows" -lt 6 ]; then ok; else bad "SIGINT: $rows rows stored (expected 1..5)"; fi
run "$PR" --shapes 700x700,701x700,702x700,703x700,704x700,705x700 --iters 1 --warmup 0 --db "$T_TMP/int.sqlite" --missing
check_rc 0 "--missing measures the rest"
check_err "$((6 - rows)) shapes? missing" "only the rest"

# 8. a CPU probe names the device its rows are stored under
run "$PR" --shapes 8x8 --iters 1 --warmup 0 --db "$T_TMP/k.sqlite"
check_err "rows stored under device 'cpu: .* x1'.*--device 'cpu: .* x1'" "names the stored device and the flag"
# 9. an option given without its value says so (not "did you mean" itself)
run "$P" "$DMUON_ROOT/models/pi05.yaml" --nodes
check_rc 2 "dmuon-plan --nodes without a value"
check_err "option '--nodes' needs a value" "names the option that needs a value"
check_eq "$(LC_ALL=C grep -c $'\xff' "$T_TMP/err")" 0 "no stray byte in the message"
run "$PR" --db
check_rc 2 "dmuon-probe --db without a value"
check_err "option '--db' needs a value" "dmuon-probe names it too"
run "$P" "$DMUON_ROOT/models/qwen1.5-moe-a2.7b.yaml" --ranks 8 --cost flops --router ADAMW
check_rc 0 "--router takes its value in any case"
run "$P" "$DMUON_ROOT/tests/data/plan/mixtral-8x7b.json" --nodes 2 -g 8 --cost flops --router adamw
check_rc 0 "Mixtral with --router adamw"
check_out "router weights: 32 tensors" "Mixtral's block_sparse_moe.gate weights are routers"
check_out "0 on Muon, 32 on AdamW" "and go to AdamW"
finish
