#!/usr/bin/env bash
# Across namespace hosts the operators' messages fit one eager TCP fragment
# with the default chunk (a 64 KiB chunk would take the rendezvous protocol,
# one more round trip per chunk and hop): counted by the PMPI shim of
# tests/cluster/prof on 2 hosts x 2, for AllGatherV, ReduceScatterV and the
# publish; a 64 KiB chunk, for contrast, is counted above the limit.  The
# publish runs one chunk per message ($DMUON_PUBLISH_MESSAGE_BYTES=0): by
# default a chain parameter travels in larger messages (tests/cluster/65).
source "$(dirname "$0")/lib.sh"
for op in agv rsv publish; do
    MPIRUN_EXTRA="-x DMUON_PUBLISH_MESSAGE_BYTES=0" \
        run "$P" 2 2 -b 1M -e 1M --op $op --lines ours -w 0 -n 2 --launches 1
    check_rc 0 "$op across 2 hosts x 2 under the shim"
    n=$(grep -c ': per call ' "$T_TMP/out")
    check_eq "$n" 4 "$op: every rank reports its calls"
    big=$(sed -nE 's/.*: per call .*isend ([0-9.]+) \(([0-9.]+) above eager\).*/\2/p' "$T_TMP/out" | sort -u | tr '\n' ' ')
    check_eq "$big" "0.0 " "$op: no message above the eager size with the default chunk"
    sends=$(sed -nE 's/.*: per call .*isend ([0-9.]+) .*/\1/p' "$T_TMP/out" | awk '{s += $1} END {print (s > 0) ? "some" : "none"}')
    check_eq "$sends" some "$op: messages were counted"
done
run "$P" 2 2 -b 1M -e 1M --op agv --lines ours -w 0 -n 2 --launches 1 --chunk-bytes 65536
check_rc 0 "agv with 64 KiB chunks"
big=$(sed -nE 's/.*: per call .*\(([0-9.]+) above eager\).*/\1/p' "$T_TMP/out" | awk '{s += $1} END {print (s > 0) ? "above" : "none"}')
check_eq "$big" above "64 KiB chunks are counted above the eager size"
finish
