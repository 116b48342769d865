#!/usr/bin/env bash
# dmuon-bench step: per-rank table and summary for each line, JSON keys,
# usage errors.
source "$(dirname "$0")/../cli/lib.sh"
B="$DMUON_BIN/dmuon-bench"
MPIRUN=(timeout 240 mpirun --oversubscribe --bind-to none --mca mpi_yield_when_idle 1)
run "${MPIRUN[@]}" -np 4 "$B" step --ranks-per-node 2 --layers 2 --width-div 8 --steps 1 \
    --line all --json-file "$T_TMP/step.json"
check_rc 0 "four lines on 4 ranks"
for l in D C B A; do check_out "^line $l\$" "line $l reported"; done
n=$(grep -cE '^ +[0-3] +[0-9]+ +[0-9.]+ +[0-9.]+ +[0-9.]+$' "$T_TMP/out")
check_eq "$n" 16 "one row per rank and line"
check_out 'busiest step [0-9.]+ s \(rank [0-3]\) = [0-9.]+ x the mean .*the plan predicts' "busiest rank vs plan"
check_out 'state: busiest rank [0-9.]+ MiB = [0-9.]+ x total/N' "state bytes vs total/N"
# line B repeats Newton-Schulz on every rank: its matrices per rank equal all of them
b=$(awk '/^line B/{s=1;next} /^line/{s=0} s && /^ +0 /{print $2}' "$T_TMP/out")
d=$(awk '/^line D/{s=1;next} /^line/{s=0} s && /^ +[0-9]+ +[0-9]+ /{t+=$2} END{print t}' "$T_TMP/out")
check_eq "$b" "$d" "line B runs every matrix on each rank; line D each matrix once in all"
python3 -c "import json,sys; d=json.load(open(sys.argv[1])); assert len(d['lines'])==4; \
  assert all(k in d['lines'][0] for k in ('busiest_step_s','busiest_state_bytes','total_state_bytes','ranks'))" \
  "$T_TMP/step.json" && ok || bad "JSON has the four lines and their keys"
run "${MPIRUN[@]}" -np 2 "$B" step --ranks-per-node 1 --layers 2 --width-div 8 --overlap --tokens 64 \
    --json-file "$T_TMP/ov.json"
check_rc 0 "--overlap on 2 ranks"
check_out '^overlap \(slowest rank.*exposed wait [0-9.]+ s -> [0-9.]+ s with prefetch' "overlap summary"
python3 -c "import json,sys; o=json.load(open(sys.argv[1]))['overlap']; assert o['pass_prefetch_s'] > 0 and o['pass_no_prefetch_s'] > 0" \
  "$T_TMP/ov.json" && ok || bad "overlap JSON"
run "${MPIRUN[@]}" -np 2 "$B" step --steps 0
check_rc 2 "--steps 0 refused"
check_err 'steps 0: expected an integer' "the message names the flag"
finish
