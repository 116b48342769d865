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
check_out '^dmuon-verify: [0-9]+ passed, 0 failed \(8 ranks as 4 nodes x 2' "summary line"
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
finish
