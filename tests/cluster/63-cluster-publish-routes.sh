#!/usr/bin/env bash
# The scheduled publish's three routes across namespace hosts (4 hosts x 2,
# TCP): by default a parameter of at most $DMUON_PUBLISH_FANOUT_BYTES fans
# out from its owner and a larger one takes the relay (the owner sends each
# message to one leader, which sends it on to the others);
# $DMUON_PUBLISH_ROUTE forces one route.  dmuon-verify checks the publish
# bit for bit with each route; the PMPI shim of tests/cluster/prof counts
# the messages every rank sends in a step, which tell the routes apart:
# with the fan-out only owners send, each chunk to the R - 1 = 3 other
# nodes; on the chain every node but the last of a route forwards; on the
# relay the owner sends each chunk once and one leader per chunk sends it
# on to the two others; auto picks by size (one chunk per message,
# $DMUON_PUBLISH_MESSAGE_BYTES=0; the larger messages are
# tests/cluster/65's).  Ranks that disagree on the
# limit or the route are refused at create.
source "$(dirname "$0")/lib.sh"

# --- bit for bit with each route ---------------------------------------
# dmuon-verify checks the publish at its first two sizes and first type:
# 3 MiB (parameters of 0.45-1.35 MiB, 7-21 chunks) and 96 KiB (one chunk),
# bf16, every layout; nothing may be skipped
for env in "DMUON_PUBLISH_FANOUT_BYTES=0" "DMUON_PUBLISH_FANOUT_BYTES=1073741824" \
           "DMUON_PUBLISH_ROUTE=fan-out" "DMUON_PUBLISH_ROUTE=relay" "DMUON_PUBLISH_ROUTE=chain"; do
    run timeout 300 "$C" -q --hosts 4 --ranks 2 -- \
        sh -c "$MPIRUN -x $env $V --op publish --line ours --sizes 3M+2,96K --dtypes bf16"
    check_rc 0 "$env: dmuon-verify --op publish passes on 4 hosts x 2"
    check_out '^dmuon-verify: [0-9]+ passed, 0 failed \(8 ranks as 4 nodes x 2' \
        "$env: summary line, nothing skipped"
done

# --- message structure of one step -------------------------------------
# isends OUT: "rank isends" per rank, whole run (2 steps; create and the
# checks post no point-to-point message), on one line
isends() { sed -nE 's/^n[0-9]+ rank ([0-9]+): isend ([0-9]+) .*/\1 \2/p' "$1" | sort -n | tr '\n' ' '; }
# The layout "node" of 1 MiB on 4 x 2: parameters p0..p3 of 74898, 149796,
# 224694 and 74900 bf16 elements (1:2:3, the rest to the last), owned by
# ranks 0, 3, 4 and 7 (node q, rail q mod 2), in 3, 5, 7 and 3 chunks of
# 32704 elements; one chunk per message.  A parameter of owner node q has
# the route q, q+1, q+2, q+3 (mod 4) on its rail; rail 0 is ranks 0 2 4 6,
# rail 1 ranks 1 3 5 7.  Sends per step:
#   fan-out  the owner sends each chunk 3 times: r0 9, r3 15, r4 21, r7 9
#   chain    every node but the last sends each chunk once:
#            p0 r0 r2 r4 3; p1 r3 r5 r7 5; p2 r4 r6 r0 7; p3 r7 r1 r3 3
#   relay    the owner sends each chunk once, chunk m goes on from the
#            route's node 1 + m mod 3 to the two other leaders:
#            p0 r0 3, r2 r4 r6 2 each; p1 r3 5, r5 r7 4 each, r1 2;
#            p2 r4 7, r6 6, r0 r2 4 each; p3 r7 3, r1 r3 r5 2 each
#   auto with a fan-out limit of 200000 bytes: p0 and p3 (about 150 kB)
#            fan out, p1 and p2 (300 and 449 kB) take the relay
# and twice that in the two steps.
want_fan="0 18 1 0 2 0 3 30 4 42 5 0 6 0 7 18 "
want_chain="0 20 1 6 2 6 3 16 4 20 5 10 6 14 7 16 "
want_relay="0 14 1 8 2 12 3 14 4 18 5 12 6 16 7 14 "
want_auto="0 26 1 4 2 8 3 10 4 14 5 8 6 12 7 26 "
for route in fan-out chain relay auto; do
    MPIRUN_EXTRA="-x DMUON_PUBLISH_ROUTE=$route -x DMUON_PUBLISH_MESSAGE_BYTES=0 \
                  -x DMUON_PUBLISH_FANOUT_BYTES=200000" \
        run timeout 300 "$P" 4 2 \
        -b 1M -e 1M --op publish --lines ours -w 0 -n 2 --launches 1
    check_rc 0 "$route: the publish under the shim"
    case $route in
        fan-out) want=$want_fan ;; chain) want=$want_chain ;;
        relay) want=$want_relay ;; auto) want=$want_auto ;;
    esac
    check_eq "$(isends "$T_TMP/out")" "$want" "$route: every rank's sends (rank, count over 2 steps)"
done
# every route posts the same messages: each chunk reaches the R - 1 = 3
# other nodes once (108 = 2 steps x 3 x 18 chunks)
for w in "$want_fan" "$want_chain" "$want_relay" "$want_auto"; do
    check_eq "$(echo $w | awk '{for (i = 2; i <= NF; i += 2) s += $i} END {print s}')" 108 \
        "the expected counts add up to every chunk reaching 3 nodes in 2 steps"
done

# --- the limit and the route must agree ----------------------------------
# refused ENV WHAT ERR: dmuon-verify --op publish on 2 hosts x 2, each rank
# with ENV set as a shell assignment (it may read $OMPI_COMM_WORLD_RANK),
# exits 2 and says ERR
refused() {
    run timeout 120 "$C" -q --hosts 2 --ranks 2 -- \
        sh -c "$MPIRUN sh -c '$1 exec $V --op publish --line ours'"
    check_rc 2 "$2"
    check_err "$3" "$2: said"
}
refused 'DMUON_PUBLISH_FANOUT_BYTES=$OMPI_COMM_WORLD_RANK' "ranks with different fan-out limits fail" \
    'DMUON_PUBLISH_FANOUT_BYTES: expected the same non-negative number of bytes on every rank'
refused 'DMUON_PUBLISH_FANOUT_BYTES=64k' "a limit that is not a decimal number fails" "this rank: '64k'"
refused 'DMUON_PUBLISH_ROUTE=$([ $OMPI_COMM_WORLD_RANK = 0 ] && echo relay || echo chain)' \
    "ranks with different routes fail" \
    'DMUON_PUBLISH_ROUTE: expected the same route on every rank, one of auto, fan-out, relay or chain'
refused 'DMUON_PUBLISH_ROUTE=star' "an unknown route fails" "this rank: 'star'"
finish
