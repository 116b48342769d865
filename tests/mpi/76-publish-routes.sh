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

DMUON_PUBLISH_ROUTE=ring run "${MPIRUN[@]}" -np 4 -x DMUON_PUBLISH_ROUTE "$V" --op publish --line ours \
    --ranks-per-node 1
check_rc 2 "an unknown route is a usage error"
check_err "DMUON_PUBLISH_ROUTE: expected the same route on every rank, one of auto, fan-out, relay or chain \\(this rank: 'ring'\\)" \
    "the unknown route is named with the routes there are"
finish
