#!/usr/bin/env bash
# tests/cluster/prof/ab.sh — dmuon-bench binaries side by side on namespace
# hosts, interleaved: per launch, per operator, one mpirun per binary.
#
#   tests/cluster/prof/ab.sh R K OUT LAUNCHES "BENCH FLAGS" NAME=BIN_DIR...
#
# Writes OUT/NAME-OPL.json (dmuon-bench --json-file; OP agv or rsv, L the
# launch) and .txt, then prints tests/cluster/prof/ab.py's summary.  Every
# mpirun runs every line the flags name (say --lines ours,per_owner) with
# --launches 1, so each file holds one launch of each line, measured side
# by side.  Environment: CLUSTER_RATE (tc rate per host link), AB_OPS
# (default "agv rsv").
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
r=$1; k=$2; out=$3; n=$4; args=$5; shift 5
[ $# -gt 0 ] || { echo "ab.sh: name at least one NAME=BIN_DIR" >&2; exit 2; }
mkdir -p "$out"
out=$(cd "$out" && pwd)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
unset DMUON_RANKS_PER_NODE
loop='for i in $(seq 1 '"$n"'); do for op in '"${AB_OPS:-agv rsv}"'; do for v in '"$*"'; do
        b=${v#*=}; nm=${v%%=*}
        mpirun --bind-to none --mca mpi_yield_when_idle 1 -np $DMUON_CLUSTER_NP \
            --host $DMUON_CLUSTER_HOSTS "$b/dmuon-bench" '"$args"' --op $op --launches 1 \
            --json-file "'"$out"'/$nm-$op$i.json" > "'"$out"'/$nm-$op$i.txt" 2>&1 ||
            echo "ab.sh: $nm $op launch $i failed (see '"$out"'/$nm-$op$i.txt)" >&2
      done; done; done'
"$here/../cluster.sh" -q --hosts "$r" --ranks "$k" ${CLUSTER_RATE:+--rate "$CLUSTER_RATE"} -- \
    bash -c "$loop"
python3 "$here/ab.py" "$out"
