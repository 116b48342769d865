#!/usr/bin/env bash
# dmuon-verify --line: the baselines as group algorithms of the library
# (per-owner rooted calls, one coalesced variable-length call, the
# equal-length primitive over even shards) checked bit for bit like ours,
# blocking and split phase, on 8 ranks as 4 nodes x 2, the publish on ours and
# per-owner; a line that writes one wrong element makes the run fail (exit 1).
source "$(dirname "$0")/../cli/lib.sh"
V="$DMUON_BIN/dmuon-verify"
MPIRUN=(timeout 240 mpirun --oversubscribe --bind-to none --mca mpi_yield_when_idle 1)
SMALL=(--ranks-per-node 2 --sizes 2K,96K+2 --deadline-ms 60000)

run "${MPIRUN[@]}" -np 8 "$V" "${SMALL[@]}" --line all -v
check_rc 0 "every line passes every check"
check_out '^dmuon-verify: [0-9]+ passed, 0 failed(, [0-9]+ skipped)? \(8 ranks as 4 nodes x 2' "summary line"
for l in per-owner coalesced equal; do
    for op in agv rsv; do
        n=$(grep -cE "^ok +$op .* line=$l" "$T_TMP/out")
        [ "${n:-0}" -gt 0 ] && ok || bad "line $l: no $op check ran (got $n)"
    done
done
n=$(grep -E '^ok +publish ' "$T_TMP/out" | grep -vc ' line=')
[ "${n:-0}" -gt 0 ] && ok || bad "the publish ran on ours"
n=$(grep -cE '^ok +publish .* line=per-owner' "$T_TMP/out")
[ "${n:-0}" -gt 0 ] && ok || bad "the per-owner publish ran"

run "${MPIRUN[@]}" -np 8 "$V" "${SMALL[@]}" --line fastest
check_rc 2 "an unknown line is refused"
check_err "--line 'fastest': expected ours, per-owner, coalesced, equal or all" "names the lines"

for l in ours per-owner coalesced equal; do
    run "${MPIRUN[@]}" -np 8 "$V" "${SMALL[@]}" --line "$l" --fault "wrong:$l"
    check_rc 1 "line $l writing one wrong byte fails the run"
    check_err "fault injected: one wrong byte" "line $l: the fault was injected"
    check_out ' [1-9][0-9]* failed' "line $l: the summary counts the failure"
done
finish
