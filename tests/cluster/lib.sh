# tests/cluster/lib.sh — the start every cluster test script shares: the
# CLI test helpers (tests/cli/lib.sh), the harness's paths (C: cluster.sh,
# P: the profiling run.sh, V: dmuon-verify), MPIRUN (the mpirun line inside
# a cluster, for sh -c), a 60 s operator deadline, nodes found by shared
# memory (no DMUON_RANKS_PER_NODE), and on a machine without root or network
# namespaces one skip with the reason, then exit.  Source it first.
source "$(dirname "${BASH_SOURCE[0]}")/../cli/lib.sh"
C="$DMUON_ROOT/tests/cluster/cluster.sh"
P="$DMUON_ROOT/tests/cluster/prof/run.sh"
V="$DMUON_BIN/dmuon-verify"
MPIRUN='mpirun --bind-to none --mca mpi_yield_when_idle 1 -np $DMUON_CLUSTER_NP --host $DMUON_CLUSTER_HOSTS'
export DMUON_DEADLINE_MS=60000
unset DMUON_RANKS_PER_NODE

if ! why=$("$C" --check 2>&1); then
    skip "the cluster tests need root and network namespaces: $why"
    finish
    exit
fi
