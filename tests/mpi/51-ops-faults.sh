#!/usr/bin/env bash
# Failures must be reported, never hang: mismatched segment tables fail on
# every rank; a stalled or killed rank makes the others fail within the
# deadline, naming the peer; a stale publish step flag is refused.
source "$(dirname "$0")/../cli/lib.sh"
V="$DMUON_BIN/dmuon-verify"
MPIRUN=(timeout 120 mpirun --oversubscribe --bind-to none --mca mpi_yield_when_idle 1)
SMALL=(--ranks-per-node 2 --layouts node --sizes 96K --deadline-ms 2000)

# Mismatched tables: the 8 ranks agree on the same first difference, so it is
# printed once (by rank 0, "(every rank)"), naming rank 3's own segment.
run "${MPIRUN[@]}" -np 8 "$V" "${SMALL[@]}" --fault table:3
check_rc_nonzero() { if [ "$RC" -ne 0 ] && [ "$RC" -ne 124 ]; then ok; else bad "$1: exit $RC"; fi; }
check_rc_nonzero "mismatched tables fail (not a timeout)"
n=$(grep -c 'segment tables differ across ranks: first difference at segment 3 (rank 3 against rank 0' "$T_TMP/err")
check_eq "$n" 1 "the first differing segment, printed once for the 8 ranks"
check_err "rank 3's segment 3 is \{owner [0-9]*, bf16, offset [0-9]*, count 7022.*\(every rank\)$" \
    "rank 3's differing segment, agreed by every rank (not rank 0's own copy)"
if grep -qE 'rank [0-9]+: rank [0-9]+:' "$T_TMP/err"; then bad "a doubled rank prefix"; else ok; fi

# A stalled rank: the others give up within the deadline and name a peer.
start=$(date +%s)
run "${MPIRUN[@]}" -np 8 "$V" "${SMALL[@]}" --fault stall:5
took=$(( $(date +%s) - start ))
check_rc_nonzero "a stalled rank makes the run fail (not the outer timeout)"
check_err 'did not (arrive from rank 5|enter call 1).*within the 2000 ms deadline' \
    "the deadline message names the stalled rank"
[ "$took" -lt 60 ] && ok || bad "stalled rank: took ${took}s, expected well under 60s"

# A killed rank (SIGKILL mid-run; --enable-recovery keeps mpirun from killing
# the survivors itself): the survivors fail by their own deadline.
start=$(date +%s)
run "${MPIRUN[@]}" --enable-recovery -np 8 "$V" "${SMALL[@]}" --op rsv --fault kill:5
took=$(( $(date +%s) - start ))
[ "$RC" -ne 124 ] && ok || bad "killed rank: mpirun hung until the outer timeout"
check_err 'killing this rank' "the fault was injected"
check_err 'rank [0-9]: reducescatterv: .*(rank 5|rank 4).*within the 2000 ms deadline' \
    "survivors report the deadline naming the dead rank's node"
[ "$took" -lt 60 ] && ok || bad "killed rank: took ${took}s, expected well under 60s"

# A stale step flag: leaders of parameter 0 refuse step 1 when waiting for 2.
run "${MPIRUN[@]}" -np 8 "$V" "${SMALL[@]}" --op publish --fault stale
check_rc 1 "stale publish flag is a failed check"
check_err 'parameter 0 \(rail 0, owner rank 0\) arrived with step 1, expected step 2: stale' \
    "leaders name the stale parameter and both steps"
check_out 'FAIL publish .*step 2: every arrival flag carries step 2' "the check is reported"
finish
