#!/usr/bin/env bash
# tests/cluster/prof/run.sh — runs dmuon-bench on namespace hosts under the
# mpiprof shim and sums its counters per host.
#
#   tests/cluster/prof/run.sh R K [dmuon-bench flags...]
#
# Prints the bench table, then one line per host with the summed counters
# (see mpiprof.c).  Environment: CLUSTER_RATE (tc rate per host link),
# MPIRUN_EXTRA (more mpirun flags, e.g. "--mca btl_tcp_eager_limit 131072"),
# PROF_BENCH (the dmuon-bench to run; default bin/dmuon-bench of this tree).
set -euo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
r=$1; k=$2; shift 2
mkdir -p "$root/build"
so=$root/build/mpiprof.so
[ "$so" -nt "$root/tests/cluster/prof/mpiprof.c" ] ||
    mpicc -shared -fPIC -O2 -o "$so" "$root/tests/cluster/prof/mpiprof.c" -ldl
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
unset DMUON_RANKS_PER_NODE
log=$(mktemp)
trap 'rm -f "$log"' EXIT
"$root/tests/cluster/cluster.sh" -q --hosts "$r" --ranks "$k" ${CLUSTER_RATE:+--rate "$CLUSTER_RATE"} -- \
    sh -c "mpirun --bind-to none --mca mpi_yield_when_idle 1 ${MPIRUN_EXTRA:-} -x LD_PRELOAD='$so' \
           -np \$DMUON_CLUSTER_NP --host \$DMUON_CLUSTER_HOSTS '${PROF_BENCH:-$root/bin/dmuon-bench}' $*" 2> "$log"
grep '^mpiprof' "$log" | sed -E 's/^mpiprof rank ([0-9]+) host [^:]*-(n[0-9]+):/\2 rank \1:/' | sort -V
grep -v -e '^mpiprof' -e '^dmuon-bench: ' "$log" >&2 || true
