#!/usr/bin/env bash
# The profiling shim's timelines across namespace hosts (2 hosts x 2, TCP):
# with $MPIPROF_TRACE set, every rank of ours' AllGatherV and ReduceScatterV
# writes its timeline; every message a rank posted is found complete by its
# receiver (the Isend and receive events pair up per sender, receiver and
# tag); tests/cluster/prof/trace.py finds as many timed calls as the shim's
# own window count, pairs every receive with its send, and reports the
# barrier skew and the delays.
source "$(dirname "$0")/lib.sh"
T="$DMUON_ROOT/tests/cluster/prof/trace.py"
if ! command -v python3 > /dev/null; then
    skip "trace.py needs python3"
    finish
    exit
fi

for op in agv rsv; do
    d=$T_TMP/trace-$op
    mkdir -p "$d"
    run env MPIRUN_EXTRA="-x MPIPROF_TRACE=$d" "$P" 2 2 -b 256K -e 256K --op $op --lines ours \
        -w 1 -n 3 --launches 1
    check_rc 0 "$op: dmuon-bench under the tracing shim on 2 hosts x 2"
    check_eq "$(ls "$d" | grep -cE '^trace-[0-3]\.txt$')" 4 "$op: every rank wrote its timeline"
    # per sender, receiver and tag: Isends posted = receives found complete
    read -r sends recvs unpaired < <(awk '
        { r = FILENAME; sub(/.*trace-/, "", r); sub(/\.txt$/, "", r) }
        $2 == "S" { s[r " " $3 " " $4]++; ns++ }
        $2 == "R" { c[$3 " " r " " $4]++; nr++ }
        END { u = 0; for (k in s) if (s[k] != c[k]) u++; for (k in c) if (s[k] != c[k]) u++
              print ns + 0, nr + 0, u }' "$d"/trace-*.txt)
    check_eq "$([ "$sends" -gt 0 ] && echo some)" some "$op: the timelines hold Isends"
    check_eq "$recvs" "$sends" "$op: as many receives found complete as Isends posted"
    check_eq "$unpaired" 0 "$op: sends and receives pair up per sender, receiver and tag"
    windows=$(sed -nE 's/.*per call \(([0-9]+) calls\).*/\1/p' "$T_TMP/out" | sort -u | tr '\n' ' ')
    run python3 "$T" "$d" --show 1
    check_rc 0 "$op: trace.py reads the timelines"
    check_out "^${windows% }"' calls: slowest span median [0-9]+ us' \
        "$op: trace.py finds the shim's ${windows% } timed calls"
    check_out "^receives: $recvs found complete, $recvs paired with their Isend\$" \
        "$op: trace.py pairs all $recvs receives with their Isends"
    check_out '^messages: [0-9]+, Isend-to-found delay median [0-9]+ us' \
        "$op: trace.py reports the delays of the timed calls"
    check_out '^call 0: slowest rank [0-3] [0-9]+ us, barrier skew [0-9]+ us' \
        "$op: --show prints a call's timeline"
done
finish
