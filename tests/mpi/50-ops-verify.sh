#!/usr/bin/env bash
# dmuon-verify over MPI: every operator on 4 ranks (2 virtual nodes x 2) and
# 8 ranks (4 x 2, and 2 x 4 with small chunks and 2 ring slots so queues wrap
# their rings many times), every layout, bf16 and f32, star and chain paths.
source "$(dirname "$0")/../cli/lib.sh"
V="$DMUON_BIN/dmuon-verify"
MPIRUN=(timeout 240 mpirun --oversubscribe --bind-to none --mca mpi_yield_when_idle 1)
export DMUON_DEADLINE_MS=60000

run "${MPIRUN[@]}" -np 4 "$V" --ranks-per-node 2
check_rc 0 "4 ranks as 2 nodes x 2: all checks pass"
check_out '^dmuon-verify: [0-9]+ passed, 0 failed(, [0-9]+ skipped)? \(4 ranks as 2 nodes x 2' "4-rank summary line"

run "${MPIRUN[@]}" -np 8 "$V" --ranks-per-node 2
check_rc 0 "8 ranks as 4 nodes x 2: all checks pass"
check_out '^dmuon-verify: [0-9]+ passed, 0 failed(, [0-9]+ skipped)? \(8 ranks as 4 nodes x 2' "8-rank summary line"
# the BF16 reduction's worst error must be below the ring order's (checked
# per run inside; the summary repeats the figures)
ours=$(sed -nE 's/.*ours ([0-9.]+), ring order ([0-9.]+).*/\1/p' "$T_TMP/out")
ring=$(sed -nE 's/.*ours ([0-9.]+), ring order ([0-9.]+).*/\2/p' "$T_TMP/out")
check_eq "$(awk -v a="${ours:-1}" -v b="${ring:-0}" 'BEGIN{print (a < b) ? "below" : "not below"}')" \
    below "worst BF16 error ours ($ours) vs ring order ($ring)"

DMUON_RANKS_PER_NODE=4 run "${MPIRUN[@]}" -np 8 "$V" --sizes 96K,200K+2 --chunk-bytes 1024 --slots 2 --op agv,rsv 2>/dev/null
check_rc 2 "--op takes one operator"
DMUON_RANKS_PER_NODE=4 run "${MPIRUN[@]}" -np 8 "$V" --sizes 96K,200K+2 --chunk-bytes 1024 --slots 2
check_rc 0 "8 ranks as 2 nodes x 4 (from DMUON_RANKS_PER_NODE), 1 KiB chunks, 2 slots"
check_out '\(8 ranks as 2 nodes x 4' "virtual nodes from the environment"
finish
