#!/usr/bin/env bash
# The communication layer over caller memory (tests/unit/test_comm.c) on
# several ranks: symmetric memory and its peers, groups whose calls name
# their buffer and window offsets (two groups sharing one memory, ranges
# reused between calls, refused ranges), split-phase calls (start, local
# work, test, wait; a gather in flight while ranks run another group's reduce
# in different orders), the publish over a copy range, and
# mismatches failing on every rank.
source "$(dirname "$0")/../cli/lib.sh"
T="${DMUON_BUILD:?}/tests/test_comm"
MPIRUN=(timeout 120 mpirun --oversubscribe --bind-to none --mca mpi_yield_when_idle 1)
export DMUON_DEADLINE_MS=30000

for shape in "4 2" "8 2" "8 4"; do
    set -- $shape
    DMUON_RANKS_PER_NODE=$2 run "${MPIRUN[@]}" -np "$1" "$T"
    check_rc 0 "$1 ranks, $2 per node: every check passes"
    check_out "^test_comm: $1 ranks as $(( $1 / $2 )) nodes x $2" "$1 ranks, $2 per node: topology"
    check_out '^[0-9]+ passed, 0 failed' "$1 ranks, $2 per node: summary"
done
finish
