#!/usr/bin/env bash
# tests/cluster/bench.sh — the operator benchmark (dmuon-bench) across
# namespace hosts: 4 hosts x 2 ranks and 8 hosts x 1 by default.
#
#   tests/cluster/bench.sh [BIN] [OUTDIR]
#
# Environment: CLUSTER_TOPOS ("4x2 8x1"), CLUSTER_RATE (a tc rate per host
# link, e.g. 2gbit; unset: no limit), BENCH_ARGS (dmuon-bench flags; default
# BF16, 16 KiB..4 MiB by 4, every operator, -w 3 -n 10 --launches 3).
# Writes OUTDIR/cluster-bench-RxK.txt (the table) and .json (the rows);
# OUTDIR defaults to build/cluster-bench.  Needs root (see cluster.sh --check).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=$(cd "${1:-$root/bin}" && pwd)
out=${2:-$root/build/cluster-bench}
mkdir -p "$out"
out=$(cd "$out" && pwd)
topos=${CLUSTER_TOPOS:-4x2 8x1}
args=${BENCH_ARGS:--b 16K -e 4M -f 4 --op all -w 3 -n 10 --launches 3}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
unset DMUON_RANKS_PER_NODE
"$root/tests/cluster/cluster.sh" --check > /dev/null
for t in $topos; do
    [[ "$t" =~ ^[1-9][0-9]?x[1-9][0-9]?$ ]] || { echo "bench.sh: error: CLUSTER_TOPOS: '$t': expected RxK, e.g. 4x2" >&2; exit 2; }
done
for t in $topos; do
    r=${t%x*}; k=${t#*x}
    echo "== dmuon-bench on $r hosts x $k ranks${CLUSTER_RATE:+, $CLUSTER_RATE per link}: $args"
    "$root/tests/cluster/cluster.sh" -q --hosts "$r" --ranks "$k" ${CLUSTER_RATE:+--rate "$CLUSTER_RATE"} -- \
        sh -c "mpirun --bind-to none --mca mpi_yield_when_idle 1 -np \$DMUON_CLUSTER_NP \
               --host \$DMUON_CLUSTER_HOSTS '$bin/dmuon-bench' $args --json-file '$out/cluster-bench-${r}x$k.json'" \
        | tee "$out/cluster-bench-${r}x$k.txt"
done
echo "tables and JSON rows in $out"
