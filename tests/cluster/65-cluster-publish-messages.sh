#!/usr/bin/env bash
# The chain and relay routes' messages across namespace hosts: such a
# parameter travels in messages of whole chunks of up to
# $DMUON_PUBLISH_MESSAGE_BYTES (default 1 MiB; the relay also at most a
# (R - 1)-th of the parameter; fewer than 4 chunks: one each), then its
# last chunk alone; 0 sends one chunk per message.  dmuon-verify checks
# the publish bit for bit on 4 hosts x 2 with every parameter on the
# chain, then on the relay ($DMUON_PUBLISH_ROUTE), under the default, a
# size that is not a multiple of the chunk (300000: 4 chunks a message),
# one of 3 chunks (200000: one chunk each), and 0.  The PMPI shim of
# tests/cluster/prof counts one step on 2 hosts x 2 (R = 2: the chain
# only): larger messages mean fewer of them and some above the eager size,
# one chunk per message none above it, messages of 3 chunks (200000)
# go as single chunks, and no run sends a message above the eager size
# but not above the pipeline size (a leftover of 2 or 3 chunks at 300000
# goes one by one).  Ranks that disagree, and a value above 1 GiB, are
# refused.
source "$(dirname "$0")/lib.sh"
unset DMUON_PUBLISH_FANOUT_BYTES DMUON_PUBLISH_MESSAGE_BYTES DMUON_PUBLISH_ROUTE

# --- bit for bit on the chain and the relay, per message size ------------
for route in chain relay; do
    for mb in default 300000 200000 0; do
        env=$([ $mb = default ] || echo "-x DMUON_PUBLISH_MESSAGE_BYTES=$mb")
        run timeout 300 "$C" -q --hosts 4 --ranks 2 -- \
            sh -c "$MPIRUN -x DMUON_PUBLISH_ROUTE=$route $env $V --op publish --line ours --sizes 3M+2,1M+6 --dtypes bf16"
        check_rc 0 "$route, message bytes $mb: dmuon-verify --op publish passes on 4 hosts x 2"
        check_out '^dmuon-verify: [0-9]+ passed, 0 failed \(8 ranks as 4 nodes x 2' \
            "$route, message bytes $mb: summary line, nothing skipped"
    done
done

# --- messages of one step (whole run: 2 steps) ----------------------------
# per rank "isends above-eager mid" (mid: above eager, not above the
# transport's pipeline size), summed over the ranks
count() { sed -nE 's/^n[0-9]+ rank [0-9]+: isend ([0-9]+) \([0-9]+ bytes, ([0-9]+) above eager\).*not above [0-9]+ bytes: ([0-9]+)$/\1 \2 \3/p' "$1" |
          awk '{s += $1; b += $2; m += $3; n++} END {print n, s, b, m}'; }
for mb in default 0 200000 300000; do
    extra=$([ $mb = default ] || echo "-x DMUON_PUBLISH_MESSAGE_BYTES=$mb")
    MPIRUN_EXTRA="$extra" run timeout 300 "$P" 2 2 -b 1M -e 1M --op publish --lines ours \
        -w 0 -n 2 --launches 1
    check_rc 0 "message bytes $mb: the publish under the shim"
    count "$T_TMP/out" > "$T_TMP/$mb"
done
read -r nd sd bd md < "$T_TMP/default"
read -r n0 s0 b0 m0 < "$T_TMP/0"
check_eq "$nd $n0" "4 4" "every rank reports its calls, both runs"
check_eq "$([ "$s0" -gt 0 ] && [ "$sd" -lt "$s0" ] && echo fewer || echo "$sd vs $s0")" fewer \
    "the default sends fewer messages than one chunk per message"
check_eq "$([ "$bd" -gt 0 ] && echo some || echo none)" some \
    "the default sends messages above the eager size"
check_eq "$b0" 0 "one chunk per message: none above the eager size"
read -r n3 s3 b3 m3 < "$T_TMP/200000"
check_eq "$s3 $b3" "$s0 0" "messages of 3 chunks go as single chunks: as many as with 0, none above eager"
# 300000: groups of 4 chunks; the 7-chunk parameter (6 before its last
# chunk) leaves 2 after its group, which go one by one: no message is
# above eager yet not above the pipeline size, in any run
read -r n4 s4 b4 m4 < "$T_TMP/300000"
check_eq "$([ "$b4" -gt 0 ] && echo some || echo none)" some "300000: some messages of 4 chunks"
check_eq "$md $m0 $m3 $m4" "0 0 0 0" \
    "no message between the eager and the pipeline size (default, 0, 200000, 300000)"

# --- the size must agree and be in range ----------------------------------
run timeout 120 "$C" -q --hosts 2 --ranks 2 -- \
    sh -c "$MPIRUN sh -c 'DMUON_PUBLISH_MESSAGE_BYTES=\$((OMPI_COMM_WORLD_RANK * 70000)) exec $V --op publish --line ours'"
check_rc 2 "ranks with different message sizes fail"
check_err 'DMUON_PUBLISH_MESSAGE_BYTES: expected the same non-negative number of bytes of at most 1073741824 on every rank' \
    "the disagreement is named"
run timeout 120 "$C" -q --hosts 2 --ranks 2 -- \
    sh -c "$MPIRUN -x DMUON_PUBLISH_MESSAGE_BYTES=2147483648 $V --op publish --line ours"
check_rc 2 "a size above 1 GiB fails"
check_err "this rank: '2147483648'" "the bad value is named"
finish
