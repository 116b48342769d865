#!/usr/bin/env bash
# The scheduled publish's three routes across namespace hosts (4 hosts x 2,
# TCP): by default a parameter of at most $DMUON_PUBLISH_FANOUT_BYTES fans
# out from its owner and a larger one takes the relay (the owner sends each
# message to one leader, which sends it on to the others);
# $DMUON_PUBLISH_ROUTE forces one route.  dmuon-verify checks the publish
# bit for bit with each route; the PMPI shim of tests/cluster/prof counts
# the messages of one step: with the fan-out only owners send and each of
# their chunks goes to the R - 1 = 3 other nodes, on the chain every node
# but the last of a route forwards, on the relay every leader sends on the
# messages it relays, so no rank sends as much as a fan-out owner, and all
# three post the same number of messages (every chunk reaches R - 1 nodes
# once) when every chunk is one message ($DMUON_PUBLISH_MESSAGE_BYTES=0;
# the larger messages are tests/cluster/65's).  Ranks that disagree on the
# limit or the route are refused at create.
source "$(dirname "$0")/lib.sh"

# --- bit for bit with each route ---------------------------------------
for env in "DMUON_PUBLISH_FANOUT_BYTES=0" "DMUON_PUBLISH_FANOUT_BYTES=1073741824" \
           "DMUON_PUBLISH_ROUTE=fan-out" "DMUON_PUBLISH_ROUTE=relay" "DMUON_PUBLISH_ROUTE=chain"; do
    run timeout 300 "$C" -q --hosts 4 --ranks 2 -- \
        sh -c "$MPIRUN -x $env $V --op publish --line ours --sizes 2K,96K,1M+6,3M+2"
    check_rc 0 "$env: dmuon-verify --op publish passes on 4 hosts x 2"
    check_out '^dmuon-verify: [0-9]+ passed, 0 failed(, [0-9]+ skipped)? \(8 ranks as 4 nodes x 2' \
        "$env: summary line"
done

# --- message structure of one step -------------------------------------
# isends OUT: "rank isends" per rank, whole run (2 steps; create and the
# checks post no point-to-point message)
isends() { sed -nE 's/^n[0-9]+ rank ([0-9]+): isend ([0-9]+) .*/\1 \2/p' "$1"; }
# The layout "node" of 4 x 2 has owners 0, 3, 4 and 7 (one per node,
# alternating rails); ranks 1, 2, 5 and 6 own nothing.
for route in fan-out relay chain; do
    MPIRUN_EXTRA="-x DMUON_PUBLISH_ROUTE=$route -x DMUON_PUBLISH_MESSAGE_BYTES=0" \
        run timeout 300 "$P" 4 2 \
        -b 1M -e 1M --op publish --lines ours -w 0 -n 2 --launches 1
    check_rc 0 "$route: the publish under the shim"
    isends "$T_TMP/out" > "$T_TMP/$route"
    check_eq "$(wc -l < "$T_TMP/$route")" 8 "$route: every rank reports its calls"
    lead=$(awk '$1 == 1 || $1 == 2 || $1 == 5 || $1 == 6 {print $2}' "$T_TMP/$route" | sort -u | tr '\n' ' ')
    if [ $route = fan-out ]; then
        check_eq "$lead" "0 " "fan-out: ranks that own nothing send nothing"
        own=$(awk '$1 == 0 || $1 == 3 || $1 == 4 || $1 == 7 {print ($2 > 0 && $2 % 6 == 0) ? "ok" : $2}' \
              "$T_TMP/$route" | sort -u | tr '\n' ' ')
        check_eq "$own" "ok " "fan-out: each owner sends every chunk to 3 nodes in each of 2 steps"
    else
        zero=$(awk '$1 == 1 || $1 == 2 || $1 == 5 || $1 == 6 {print ($2 > 0) ? "sends" : "idle"}' \
               "$T_TMP/$route" | sort -u | tr '\n' ' ')
        check_eq "$zero" "sends " "$route: every leader sends on"
    fi
done
sum() { awk '{s += $2} END {print s}' "$1"; }
most() { awk '$2 > m {m = $2} END {print m + 0}' "$1"; }
check_eq "$(sum "$T_TMP/fan-out")" "$(sum "$T_TMP/chain")" "fan-out and chain post the same messages"
check_eq "$(sum "$T_TMP/relay")" "$(sum "$T_TMP/chain")" "relay and chain post the same messages"
# the node layout's largest parameter (3/7 of 1 MiB: 7 chunks) leaves its
# owner 21 times a step on the fan-out; on the relay 7 times, and its
# relays send on at most 3 of its chunks to 2 nodes each
check_eq "$(most "$T_TMP/fan-out")" 42 "fan-out: the busiest rank sends 21 messages a step"
check_eq "$([ "$(most "$T_TMP/relay")" -lt 42 ] && echo fewer || most "$T_TMP/relay")" fewer \
    "relay: no rank sends as many as the fan-out's busiest"

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
