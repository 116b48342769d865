#!/usr/bin/env bash
# The one operator driver of dmuon-verify and dmuon-bench: the library's
# coalesced publish checked bit for bit next to ours and per-owner on 8 ranks
# as 4 nodes x 2 (the sparse layout cuts a rail into several runs), the
# equal-length line said to have no publish form, a publish line that writes
# one wrong byte failing the run (exit 1); both tools taking one option table
# (the other tool's spelling of a list accepted, a flag of the other tool
# alone refused naming that tool).
source "$(dirname "$0")/../cli/lib.sh"
V="$DMUON_BIN/dmuon-verify"; B="$DMUON_BIN/dmuon-bench"
MPIRUN=(timeout 240 mpirun --oversubscribe --bind-to none --mca mpi_yield_when_idle 1)
SMALL=(--ranks-per-node 2 --sizes 2K,96K+2 --deadline-ms 60000)

run "${MPIRUN[@]}" -np 8 "$V" "${SMALL[@]}" --op publish --line all -v
check_rc 0 "the publish of every line passes"
check_out '^dmuon-verify: [0-9]+ passed, 0 failed, [0-9]+ skipped \(8 ranks as 4 nodes x 2' "summary line"
for layout in node rank sparse tiny; do
    n=$(grep -cE "^ok +publish layout=$layout .* line=coalesced: step 3: leaders hold the owners' bytes bit for bit \(0 wrong here\)" "$T_TMP/out")
    check_eq "$n" 2 "coalesced publish, layout $layout: both sizes checked bit for bit"
done
n=$(grep -cE '^ok +publish .* line=per-owner: step [0-9]+: leaders hold' "$T_TMP/out")
[ "${n:-0}" -gt 0 ] && ok || bad "the per-owner publish ran"
n=$(grep -E '^ok +publish .*: step [0-9]+: leaders hold' "$T_TMP/out" | grep -vc ' line=')
[ "${n:-0}" -gt 0 ] && ok || bad "the publish of ours ran"
check_out '^skip publish line=equal: the equal-length primitive has no publish form' \
    "equal: no publish form, said"
if grep -qE '^ok +publish .* line=equal' "$T_TMP/out"; then bad "equal ran a publish"; else ok; fi

for l in ours per-owner coalesced; do
    run "${MPIRUN[@]}" -np 8 "$V" "${SMALL[@]}" --op publish --line "$l" --fault "wrong:$l"
    check_rc 1 "publish, line $l writing one wrong byte fails the run"
    check_err "fault injected: one wrong byte in the $l line's result" "publish, line $l: injected"
    check_out '^FAIL +publish .*leaders hold the owners. bytes bit for bit \(1 wrong here\)' \
        "publish, line $l: the leaders' check counts the one wrong byte"
    check_out ' [1-9][0-9]* failed' "publish, line $l: the summary counts the failure"
done

# dmuon-bench times the library's coalesced publish and checks it (#wrong 0)
run "${MPIRUN[@]}" -np 8 "$B" --ranks-per-node 2 --op publish --sizes 16K,64K \
    --line ours,coalesced -w 1 -n 2 --launches 1 --json-file "$T_TMP/rows.json"
check_rc 0 "bench: the publish of ours and coalesced, --sizes and --line spellings"
n=$(grep -cE '^publish +(16384|65536) +bf16 +[0-9.]+ +n/a +[0-9.]+ +n/a .* 0$' "$T_TMP/out")
check_eq "$n" 2 "bench: two publish rows, coalesced timed, 0 wrong"
python3 - "$T_TMP/rows.json" <<'PY' && ok || bad "bench JSON: coalesced publish rows with 0 wrong"
import json, sys
rows = [r for r in json.load(open(sys.argv[1])) if r["line"] == "coalesced"]
assert len(rows) == 2 and all(r["op"] == "publish" and r["wrong"] == 0 for r in rows), rows
PY

# one option table: the other tool's spelling of a list, the other tool's flags refused
run "${MPIRUN[@]}" -np 4 "$V" --ranks-per-node 2 --op agv -b 2K -e 8K -f 4 --layout rank \
    --dtype bf16 --path auto --lines per_owner -v
check_rc 0 "verify: -b/-e/-f, --layout, --dtype, --path, --lines"
for b in 2048 8192; do
    check_out "^ok +agv layout=rank bytes=$b dtype=bf16 line=per-owner: gathered" "verify -b/-e/-f: $b bytes"
done
if grep -qE 'bytes=(4096|32768)' "$T_TMP/out"; then bad "verify -f 4: sizes between"; else ok; fi
for f in "-w 1" "-n 2" "--launches 2" "--json-file x.json" "--fp32-accum" "--rail 0"; do
    run "${MPIRUN[@]}" -np 2 "$V" $f
    check_rc 2 "verify $f refused"
    check_err "dmuon-verify: error: ${f%% *}[/a-z-]* does not apply to dmuon-verify \(a dmuon-bench option" "verify $f: names the tool it belongs to"
done
for f in "--fault wrong:ours" "--steps 2" "-v"; do
    run "${MPIRUN[@]}" -np 2 "$B" $f
    check_rc 2 "bench $f refused"
    check_err "dmuon-bench: error: ${f%% *}[/a-z-]* does not apply to dmuon-bench \(a dmuon-verify option" "bench $f: names the tool it belongs to"
done
run "${MPIRUN[@]}" -np 2 "$V" --sizes 2K -b 1K
check_rc 2 "verify --sizes with -b"
check_err "exclude each other" "says they exclude each other"
run "${MPIRUN[@]}" -np 2 "$B" --layouts node,rank
check_rc 2 "bench: two layouts"
check_err "dmuon-bench runs one layout" "says the table has one layout"
run "${MPIRUN[@]}" -np 2 "$B" --line fastest
check_rc 2 "bench --line with an unknown line"
check_err "--line 'fastest': expected ours, per-owner, coalesced, equal or all" "names the lines"
for t in "$V" "$B"; do
    run "${MPIRUN[@]}" -np 2 "$t" --op
    check_rc 2 "$(basename "$t") --op without a value"
    check_err "error: option '--op' needs a value" "$(basename "$t"): names the option that needs a value"
    if grep -q "did you mean" "$T_TMP/err"; then bad "$(basename "$t") --op: suggests itself"; else ok; fi
done
# a fault that reaches no result, or cannot, never passes: refused up front
# (exit 2, naming why) or counted over the ranks (exit 2: injected nowhere)
run "${MPIRUN[@]}" -np 4 "$V" --ranks-per-node 2 --sizes 4K --layouts node --dtypes bf16 \
    --op publish --line ours --fault wrong:ours
check_rc 2 "publish, node layout: rank 0 leads nothing, the fault reaches nothing"
check_err "--fault wrong:ours: the fault was injected on no rank" "says the fault was injected nowhere"
if grep -qE ' passed, 0 failed' "$T_TMP/out"; then bad "an uninjected fault printed a pass"; else ok; fi
for f in "--line ours --fault wrong:equal|the equal line is not among the lines run" \
         "--op publish --fault wrong:equal|the equal line has no publish form" \
         "--op agv --fault stale|--fault stale: the stale step is posted only by" \
         "--op publish --line per-owner --fault stale|--fault stale: the stale step" \
         "--fault stall:-3|--fault 'stall:-3': expected a rank R from 0" \
         "--fault table:abc|--fault 'table:abc': expected a rank R" \
         "--fault stall:|--fault 'stall:': expected a rank R" \
         "--fault kill:x|--fault 'kill:x': expected a rank R"; do
    run "${MPIRUN[@]}" -np 2 "$V" --sizes 4K ${f%%|*}
    check_rc 2 "verify ${f%%|*} refused"
    check_err "${f#*|}" "verify ${f%%|*}: says why"
done
run "${MPIRUN[@]}" -np 2 "$V" --fault table:5
check_rc 2 "a fault rank outside the world"
check_err "rank 5 is not one of the 2 ranks \(expected a rank from 0 to 1\)" "names the ranks"

# one node: the publish compares no byte, so it is skipped, not passed; a run
# that checks nothing is a usage error
run "${MPIRUN[@]}" -np 2 "$V" --sizes 4K --op publish -v
check_rc 2 "one node, publish only: nothing checked"
check_out '^skip publish \(every case\): one node' "one node: the publish skip says why"
check_err "nothing was checked: every case was skipped" "says nothing was checked"
if grep -qE '^ok +publish' "$T_TMP/out"; then bad "one node: a publish check counted as passed"; else ok; fi
run "${MPIRUN[@]}" -np 2 "$V" --sizes 4K --line equal --op publish
check_rc 2 "equal publish only: nothing checked"
check_err "nothing was checked" "equal publish only: says nothing was checked"

# the publish cases it does not run are said, each with the reason, and counted
run "${MPIRUN[@]}" -np 4 "$V" --ranks-per-node 2 --sizes 4K,8K,16K --dtypes f32,bf16 \
    --op publish --layouts rank --line ours
check_rc 0 "publish, three sizes, two types"
for c in "4096 dtype=bf16" "8192 dtype=bf16" "16384 dtype=f32" "16384 dtype=bf16"; do
    check_out "^skip publish layout=rank bytes=$c: .*first element type and the first two sizes" \
        "publish case $c not run: said"
done
check_out ' 4 skipped ' "the four cases not run are counted as skipped"

# an explicit --deadline-ms wins over a bad $DMUON_DEADLINE_MS
run "${MPIRUN[@]}" -np 2 -x DMUON_DEADLINE_MS=xyz "$V" --sizes 4K --op agv --layouts rank \
    --dtypes bf16 --deadline-ms 60000
check_rc 0 "--deadline-ms over a bad DMUON_DEADLINE_MS"
# a shared window the host cannot hold (--slots, --chunk-bytes) is refused
# before MPI is asked for it, naming the flags (no MPI abort)
for f in "--slots 1000000" "--chunk-bytes 1T"; do
    run "${MPIRUN[@]}" -np 4 "$V" --ranks-per-node 2 --sizes 96K --op rsv --layouts node \
        --dtypes bf16 --line ours $f
    check_rc 2 "verify $f: refused"
    check_err "--slots/--chunk-bytes: the group's shared window of .* needs at least" "verify $f: names the flags"
done
run "${MPIRUN[@]}" -np 4 "$B" --ranks-per-node 2 --sizes 96K --op rsv --line ours \
    --chunk-bytes 1T -w 0 -n 1 --launches 1
check_rc 2 "bench --chunk-bytes 1T: refused"
check_err "--slots/--chunk-bytes: the group's shared window" "bench --chunk-bytes 1T: names the flags"
# --chunk-bytes 0 is the backend's choice
run "${MPIRUN[@]}" -np 2 "$V" --sizes 4K --op agv --layouts rank --dtypes bf16 --chunk-bytes 0
check_rc 0 "--chunk-bytes 0: the backend's chunk"

# bench: a size the layout cannot hold is skipped as verify does, said once
# without a rank; tiny reports the bytes it moves, not the size asked for
run "${MPIRUN[@]}" -np 4 "$B" --ranks-per-node 2 -n 1 -w 0 --launches 1 --sizes 16K,2 --op agv
check_rc 0 "bench --sizes 16K,2: the size that fits runs"
check_out '^# skip agv bytes=2 dtype=bf16 \(--sizes --layout\): layout node: 2 bytes cannot hold' \
    "bench: the size the layout cannot hold is skipped, naming the flags"
if grep -q 'rank 0:' "$T_TMP/out" "$T_TMP/err"; then bad "bench skip: no rank prefix"; else ok; fi
run "${MPIRUN[@]}" -np 4 "$B" --ranks-per-node 2 -n 1 -w 0 --launches 1 --sizes 2 --op agv
check_rc 2 "bench --sizes 2 alone: nothing timed"
check_err '^dmuon-bench: error: --sizes: no size fits layout node' "bench --sizes 2: says why, once, without a rank"
run "${MPIRUN[@]}" -np 4 "$B" --ranks-per-node 2 -n 1 -w 0 --launches 1 --sizes 64M --layout tiny \
    --op agv --line ours
check_rc 0 "bench tiny"
if grep -qE '^agv +67108864 ' "$T_TMP/out"; then bad "bench tiny: the row claims 64M bytes"; else ok; fi
check_out '^agv +[0-9]{1,3} +bf16 ' "bench tiny: the row gives the few bytes moved"
run "${MPIRUN[@]}" -np 4 "$V" --ranks-per-node 2 --sizes 4M --layouts tiny --op agv --dtypes bf16 \
    --line ours -v
check_rc 0 "verify tiny"
if grep -q 'bytes=4194304' "$T_TMP/out"; then bad "verify tiny: label claims 4M bytes"; else ok; fi
# a list item given twice is named as such; --json ends with one newline
for f in "--dtypes bf16,f32,bf16|--dtypes: 'bf16' is given twice" \
         "--paths auto,chain,star,auto|--paths: 'auto' is given twice" \
         "--layouts rank,rank|--layouts: 'rank' is given twice"; do
    run "${MPIRUN[@]}" -np 2 "$V" ${f%%|*}
    check_rc 2 "verify ${f%%|*} refused"
    check_err "${f#*|}" "verify ${f%%|*}: names the duplicate"
done
run "${MPIRUN[@]}" -np 2 "$V" --sizes 4K --op agv --layouts rank --dtypes bf16 --json
check_rc 0 "verify --json"
check_eq "$(tail -c 2 "$T_TMP/out" | od -An -c | tr -d ' ')" '}\n' "--json ends with one newline"
run "$V" --version --json
check_rc 0 "verify --version --json"
check_eq "$(tail -c 2 "$T_TMP/out" | od -An -c | tr -d ' ')" '}\n' "--version --json ends with one newline"
finish
