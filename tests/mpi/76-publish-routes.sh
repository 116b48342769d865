#!/usr/bin/env bash
# The scheduled publish's routes on virtual nodes (shared-memory MPI, so
# also under the sanitizers): dmuon-verify checks every route bit for bit,
# with its step flags, on 8 ranks as 8 nodes x 1 (the relay's 7 leaders)
# and 4 nodes x 2, with small chunks so parameters have many messages that
# the relay spreads over its leaders, one chunk per message and several.
# dmuon-verify checks the publish at its first two sizes: 1 MiB
# (parameters of 37-110 chunks, above the fan-out limit set here, so auto
# takes the relay) and 96 KiB (4-11 chunks, below it: the fan-out).
# An unknown $DMUON_PUBLISH_ROUTE is refused at create on every rank.
source "$(dirname "$0")/../cli/lib.sh"
V="$DMUON_BIN/dmuon-verify"
MPIRUN=(timeout 240 mpirun --oversubscribe --bind-to none --mca mpi_yield_when_idle 1)
export DMUON_DEADLINE_MS=60000
unset DMUON_PUBLISH_FANOUT_BYTES DMUON_PUBLISH_MESSAGE_BYTES DMUON_PUBLISH_ROUTE

for route in relay chain fan-out auto; do
    for k in 1 2; do
        for mb in 0 20000; do
            DMUON_PUBLISH_ROUTE=$route DMUON_PUBLISH_MESSAGE_BYTES=$mb DMUON_PUBLISH_FANOUT_BYTES=100000 \
                run "${MPIRUN[@]}" -np 8 -x DMUON_PUBLISH_ROUTE -x DMUON_PUBLISH_MESSAGE_BYTES \
                -x DMUON_PUBLISH_FANOUT_BYTES "$V" --op publish --line ours --ranks-per-node $k \
                --sizes 1M+6,96K --dtypes bf16 --chunk-bytes 4096
            check_rc 0 "$route, $((8 / k)) nodes x $k, message bytes $mb: the publish is bit for bit"
            check_out "^dmuon-verify: [0-9]+ passed, 0 failed \\(8 ranks as $((8 / k)) nodes x $k" \
                "$route, $((8 / k)) x $k, message bytes $mb: summary line, nothing skipped"
        done
    done
done

# a leader past the deadline counts the messages that arrived in any order
# and names the first missing one and its sender: on 8 x 1, rank 2 stalls;
# it relays messages m = 1, 8, 15 (m mod 7 = 1) of parameter 0 (owner node
# 0, 18 chunks of 4 KiB), which never come, while the 15 others do
DMUON_PUBLISH_ROUTE=relay DMUON_PUBLISH_MESSAGE_BYTES=0 run "${MPIRUN[@]}" -np 8 \
    -x DMUON_PUBLISH_ROUTE -x DMUON_PUBLISH_MESSAGE_BYTES "$V" --op publish --ranks-per-node 1 \
    --sizes 1M+6 --layouts node --dtypes bf16 --chunk-bytes 4096 --deadline-ms 3000 --fault stall:2
check_rc 3 "a stalled relay: the leaders time out"
check_err 'parameter 0 \(rail 0, owner rank 0\) of step 1: 15 of 18 messages arrived within the 3000 ms deadline, message 2 not, due from rank 2 \(node 2\)' \
    "the deadline counts the messages that arrived and names the missing one's sender"

# byte counts are decimal digits only
for v in " 1000" "1000 " "+5" "-1" "1e6" "99999999999999999999"; do
    DMUON_PUBLISH_FANOUT_BYTES=$v run "${MPIRUN[@]}" -np 2 -x DMUON_PUBLISH_FANOUT_BYTES "$V" \
        --op publish --line ours --ranks-per-node 1
    check_rc 2 "fan-out limit '$v' is refused"
    re=$(printf '%s' "$v" | sed 's/[+.]/\\&/g')
    check_err "DMUON_PUBLISH_FANOUT_BYTES: expected the same non-negative number of bytes on every rank \\(this rank: '$re'\\)" \
        "fan-out limit '$v': named"
done

DMUON_PUBLISH_ROUTE=ring run "${MPIRUN[@]}" -np 4 -x DMUON_PUBLISH_ROUTE "$V" --op publish --line ours \
    --ranks-per-node 1
check_rc 2 "an unknown route is a usage error"
check_err "DMUON_PUBLISH_ROUTE: expected the same route on every rank, one of auto, fan-out, relay or chain \\(this rank: 'ring'\\)" \
    "the unknown route is named with the routes there are"
finish
