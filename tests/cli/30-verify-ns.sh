#!/usr/bin/env bash
# dmuon-verify ns: the built-in numerics set passes for every variant and
# precision, --json agrees with the table, coefficients that do not
# orthogonalise make it fail with exit 1, bad input exits 2, progress goes
# to stderr per case, shapes above --max-elements are listed as skipped.
. "$(dirname "$0")/lib.sh"
V="$DMUON_BIN/dmuon-verify"

run "$V" ns
check_rc 0 "verify ns default set (gram-pe5 fp32)"
check_out '^# [0-9]+ checks, 0 failed' "verify ns summary line"
check_out '^256x1536 +gaussian +256/256 ' "verify ns covers the k/v model shape"
check_out '^1x37 ' "verify ns covers a 1 x n vector"
check_out '^37x1 ' "verify ns covers an n x 1 vector"

for v in direct-pe5 gram-muon5; do
    run "$V" ns --variant $v --shapes 24x40,40x24,9x9
    check_rc 0 "verify ns --variant $v"
done
run "$V" ns --dtype bf16 --shapes 32x96,96x32,1x37
check_rc 0 "verify ns --dtype bf16"
check_out 'gram-pe5 bf16' "bf16 run names its precision"

run "$V" ns --shapes 16x48 --inputs illcond --json
check_rc 0 "verify ns --json"
check_out '"failed": 0' "json reports no failed check"
check_out '"input": "illcond"' "json lists the case"
check_out '"above_floor": ' "json has the above-floor count"

# progress per case on stderr; large shapes skipped unless --max-elements allows
run "$V" ns --shapes 16x16,3000x2000,1x37 --inputs gaussian,illcond
check_rc 0 "verify ns with a skipped shape"
check_err '^dmuon-verify: ns \[1/4\] 16x16 gaussian$' "progress line of the first case"
check_err '^dmuon-verify: ns \[4/4\] 1x37 illcond$' "progress counts only checked cases"
check_out '^3000x2000 +skipped: 6000000 elements > --max-elements 4194304' "skipped shape listed"
check_out '^# 1 shape skipped' "summary counts the skipped shape"
check_out '^1x37 +illcond ' "cases after the skipped shape still run"
run "$V" ns --shapes 16x16,20x20 --inputs gaussian --max-elements 300 --json
check_rc 0 "verify ns --max-elements --json"
check_out '"skipped": true' "json marks the skipped shape"
check_out '"skipped": 1,' "json counts skipped shapes"
run "$V" ns --help
check_out 'O\(m\*n\*min\(m,n\)\)' "help states the SVD reference's cost"
check_out '--max-elements' "help lists --max-elements"

# the identity polynomial does not orthogonalise: the band check must fail
run "$V" ns --coeffs '1,0,0' --shapes 16x48 --inputs gaussian
check_rc 1 "identity coefficients fail the band check"
check_out 'FAIL .*band' "the failing check is named"
check_err 'checks failed' "failure summary on stderr"

run "$V" ns --shapes 0x5
check_rc 2 "zero dimension"
check_err "item 1 '0x5': expected MxN" "shape error names the item"
run "$V" ns --variant gram-pe9
check_rc 2 "unknown variant"
check_err "unknown NS variant 'gram-pe9'" "variant error names the value"
run "$V" ns --dtype fp8
check_rc 2 "unknown dtype"
run "$V" ns --restarts 7
check_rc 2 "restart beyond the steps"
check_err "1 <= k < 5" "restart error gives the range"
run "$V" ns --inputs noise
check_rc 2 "unknown input kind"
run "$V" ns --floor 2
check_rc 2 "floor out of range"
run "$V" ns --seed -5 --shapes 8x8
check_rc 2 "negative seed"
check_err "--seed '-5': expected a non-negative integer" "seed error names the value"
run "$V" ns --inputs '' --shapes 8x8
check_rc 2 "empty --inputs"
check_err 'expected one or more of gaussian' "empty inputs error says what is expected"
run "$V" ns --inputs , --shapes 8x8
check_rc 2 "--inputs with only a separator"
run "$V" ns --variant direct-pe5 --restarts 1 --shapes 8x8
check_rc 2 "restarts with a direct variant"
check_err 'restarts apply to Gram variants only' "restarts error names the reason"
run "$V" ns --restarts 1 --variant direct-muon5 --shapes 8x8
check_rc 2 "restarts before a direct variant"
run "$V" ns --max-elements 0
check_rc 2 "--max-elements 0"
run "$V" ns --shapes 65536x32768
check_rc 2 "shape beyond one NS call's element range"
check_err '65536 x 32768' "range error names the shape"

# a CUDA request without a GPU is a runtime error, never a crash
run "$V" ns --device cuda --shapes 8x8
if [ "$RC" -ne 0 ]; then
    check_rc 3 "verify ns --device cuda without a GPU"
    check_err 'CUDA|cuda' "cuda error message"
fi
check_no_crash "verify ns --device cuda"
finish
