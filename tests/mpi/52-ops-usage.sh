#!/usr/bin/env bash
# Bad topology and options: clear errors, exit 2, no hang.
source "$(dirname "$0")/../cli/lib.sh"
V="$DMUON_BIN/dmuon-verify"
MPIRUN=(timeout 60 mpirun --oversubscribe --bind-to none --mca mpi_yield_when_idle 1)

run "${MPIRUN[@]}" -np 4 "$V" --ranks-per-node 3
check_rc_nz() { if [ "$RC" -ne 0 ] && [ "$RC" -ne 124 ]; then ok; else bad "$1: exit $RC"; fi; }
check_rc_nz "ranks per node that does not divide N"
check_err 'dmuon-verify: error: ranks per node 3 does not divide the 4 ranks' "names K and N"

DMUON_RANKS_PER_NODE=two run "${MPIRUN[@]}" -np 2 "$V"
check_rc_nz "bad DMUON_RANKS_PER_NODE"
check_err 'DMUON_RANKS_PER_NODE: expected a positive integer' "names the variable"

run "${MPIRUN[@]}" -np 2 "$V" --sizes 12Q
check_rc_nz "bad --sizes"
check_err "error: --sizes: '12Q' is not a size in bytes" "names the option and value"

run "${MPIRUN[@]}" -np 2 "$V" --layouts diagonal
check_rc_nz "bad --layouts"
check_err "unknown layout 'diagonal'" "names the layout"

run "${MPIRUN[@]}" -np 1 "$V" --help
check_rc 0 "--help"
check_out 'usage: mpirun -np N dmuon-verify' "usage text"
finish
