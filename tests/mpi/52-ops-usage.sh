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
check_err "error: --sizes '12Q': expected a size from 1 B to 1 TiB" "names the option, value and range"

run "${MPIRUN[@]}" -np 2 "$V" --layouts diagonal
check_rc_nz "bad --layouts"
check_err "unknown layout 'diagonal'" "names the layout"

# every usage error: exit 2, printed once (not once per rank), naming the flag
once() { n=$(grep -cE -- "$1" "$T_TMP/err"); check_eq "$n" 1 "$2: printed once"; }
run "${MPIRUN[@]}" -np 4 "$V" --chunk-bytes 6
check_rc 2 "a chunk below the minimum"
check_err "error: --chunk-bytes '6': expected a multiple of 8 bytes, at least 256" "names the flag and the limits"
once "chunk-bytes" "--chunk-bytes"
run "${MPIRUN[@]}" -np 2 "$V" --chunk-bytes 1020
check_rc 2 "a chunk that is no multiple of 8"
run "${MPIRUN[@]}" -np 4 "$V" --sizes --layouts node
check_rc 2 "--sizes without a value"
check_err "error: --sizes: missing value" "says the value is missing"
once "missing value" "--sizes"
run "${MPIRUN[@]}" -np 4 "$V" --ranks-per-node 99999999999
check_rc 2 "--ranks-per-node far too large"
check_err "too large \(at most [0-9]+\)" "says too large, with the limit"
once "too large" "--ranks-per-node"
run "${MPIRUN[@]}" -np 4 "$V" --no-such-flag
check_rc 2 "an unknown option"
once "no-such-flag" "getopt's message"
DMUON_DEADLINE_MS=soon run "${MPIRUN[@]}" -np 4 "$V"
check_rc 2 "bad DMUON_DEADLINE_MS"
check_err "DMUON_DEADLINE_MS 'soon'" "names the variable"
once "DMUON_DEADLINE_MS" "DMUON_DEADLINE_MS"

# a size a layout cannot hold is skipped for that layout, not failed
run "${MPIRUN[@]}" -np 4 "$V" --ranks-per-node 2 --sizes 7 --op agv --dtypes bf16 --paths auto
check_rc 0 "7 bytes: skipped where a layout cannot hold them"
check_out '^skip agv layout=rank bytes=7 ' "a note for the skipped layout"
check_out '^dmuon-verify: [0-9]+ passed, 0 failed, [0-9]+ skipped' "skips counted apart"
run "${MPIRUN[@]}" -np 4 "$V" --ranks-per-node 2 --sizes 7 --op agv --dtypes bf16 --layouts rank,sparse
check_rc 2 "every layout skipped"
check_err "no size fits any of the layouts" "says why"

# one rank: nothing crosses ranks, so nothing would be checked: a usage error
run "${MPIRUN[@]}" -np 1 "$V" --op rsv --sizes 96K --layouts node --dtypes bf16
check_rc 2 "one rank"
check_err "1 rank: the operators move nothing between ranks.*mpirun -np 2 or more" "says to run on 2+ ranks"
if grep -q "passed" "$T_TMP/out"; then bad "one rank: reports passed checks"; else ok; fi
run "${MPIRUN[@]}" -np 4 "$V" --ranks-per-node 2 --op rsv --sizes 96K --layouts node --dtypes bf16 --paths chain -v
check_rc 0 "4 ranks, verbose"
check_out '^info .*(below|equal to|above) the ring order.*not checked: below 8 ranks' "the real relation and why it is not checked"

run "${MPIRUN[@]}" -np 1 "$V" --plan "$T_TMP/missing.plan"
check_rc 2 "a missing plan file"
check_err "missing.plan: no such plan file" "names the file"

run "${MPIRUN[@]}" -np 1 "$V" --help
check_rc 0 "--help"
check_out 'usage: mpirun -np N dmuon-verify' "usage text"
finish
