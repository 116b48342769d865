#!/usr/bin/env bash
# The comm layer's non-scheduled operators on the MPI backend, through the
# driver that tests/gpu/run.sh runs on nccl (tests/mpi/comm_check.c): the
# control plane over a topology; per-owner, coalesced and equal groups at
# world and node scope, split phase and blocking, checked element by
# element against integer sums; split-phase misuse refused; the per-owner
# publish; a stalled rank making the others time out within three
# deadlines; and the nccl backend refusing clearly where no GPU exists.
source "$(dirname "$0")/../cli/lib.sh"
T="${DMUON_BUILD:?}/tests/mpi/comm_check"
MPIRUN=(timeout 180 mpirun --oversubscribe --bind-to none --mca mpi_yield_when_idle 1)
export DMUON_DEADLINE_MS=30000

for shape in "4 2" "8 4" "6 3"; do
    set -- $shape
    DMUON_RANKS_PER_NODE=$2 run "${MPIRUN[@]}" -np "$1" "$T"
    check_rc 0 "$1 ranks, $2 per node: every check passes"
    check_out "^comm_check: $1 ranks as $(( $1 / $2 )) nodes x $2, backend mpi" \
        "$1 ranks, $2 per node: topology"
    check_out "^ok   equal node: reducescatterv split phase" "$1 ranks: node-scope equal reduce"
    check_out "^ok   publish: the per-owner node half is not offered on mpi" \
        "$1 ranks: the per-owner node half refused on mpi"
    check_out '^[0-9]+ passed, 0 failed' "$1 ranks, $2 per node: summary"
done

# rank 2 never enters the call: the others return DMUON_ETIMEOUT in time
DMUON_RANKS_PER_NODE=2 run "${MPIRUN[@]}" -np 4 "$T" --stall 2
check_rc 0 "stall: every check passes"
check_out "^ok   stall: every other rank returns DMUON_ETIMEOUT within 3 deadlines" \
    "stall: timed out in time"

# the nccl backend: refused with the reason where no GPU is visible
if command -v nvidia-smi > /dev/null 2>&1 && nvidia-smi -L > /dev/null 2>&1; then
    skip "nccl without a GPU: a GPU is visible here (tests/gpu/run.sh runs nccl)"
else
    run "${MPIRUN[@]}" -np 2 "$T" --backend nccl
    check_rc 3 "nccl without a GPU: exit 3"
    check_out "^skipped: .*(no GPU found|built without GPU support)" "nccl without a GPU: why"
fi
finish
