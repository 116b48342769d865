#!/usr/bin/env bash
# A symmetric allocation that fails on one rank ends the same way on every
# rank: MPI_Win_allocate_shared is made to fail on one rank after the real
# (collective) call, by a preloaded wrapper built here.  dmuon-verify and
# dmuon-bench, groups and the publish, one node and two, the first and the
# last rank failing: exit 3 within the deadline, the same message on every
# rank (no MPI_Abort, no hang on freeing a window a rank does not hold, no
# crash).  Last, an explicit --deadline-ms with a bad $DMUON_DEADLINE_MS:
# the library is given the flag for its create-time exchanges too, so the
# run passes without the variable being read.
source "$(dirname "$0")/../cli/lib.sh"
V="$DMUON_BIN/dmuon-verify"; B="$DMUON_BIN/dmuon-bench"
MPIRUN=(timeout 120 mpirun --oversubscribe --bind-to none --mca mpi_yield_when_idle 1)

cat > "$T_TMP/fail_win.c" <<'C'
#include <mpi.h>
#include <stdlib.h>
int MPI_Win_allocate_shared(MPI_Aint size, int du, MPI_Info info, MPI_Comm comm, void *base,
                            MPI_Win *win)
{
    int rc = PMPI_Win_allocate_shared(size, du, info, comm, base, win), r = -1;
    const char *f = getenv("FAIL_WIN_RANK");
    PMPI_Comm_rank(MPI_COMM_WORLD, &r);
    if (rc == MPI_SUCCESS && f && atoi(f) == r) {
        *win = MPI_WIN_NULL;   /* this rank's window is lost: it holds none */
        return MPI_ERR_NO_MEM;
    }
    return rc;
}
C
if ! mpicc -shared -fPIC -o "$T_TMP/fail_win.so" "$T_TMP/fail_win.c" 2> "$T_TMP/cc"; then
    skip "mpicc cannot build the preloaded wrapper: $(head -1 "$T_TMP/cc")"
    finish; exit $?
fi

# under the sanitizers the ASan runtime must be the first library loaded
PRELOAD=$T_TMP/fail_win.so
if [ "${DMUON_SANITIZED:-0}" = 1 ]; then
    asan=$(mpicc -print-file-name=libasan.so 2> /dev/null)
    if [ -z "$asan" ] || [ ! -e "$asan" ]; then
        skip "the sanitized build needs libasan preloaded before the wrapper, and mpicc names none"
        finish; exit $?
    fi
    PRELOAD=$asan:$PRELOAD
fi

fails() {  # np failing-rank description command...
    local np=$1 fr=$2 what=$3; shift 3
    local t0; t0=$(date +%s)
    run "${MPIRUN[@]}" -x LD_PRELOAD="$PRELOAD" -x FAIL_WIN_RANK="$fr" -np "$np" "$@"
    local took=$(( $(date +%s) - t0 ))
    check_rc 3 "$what: exit 3 (got $RC; 124: hang, 139: crash)"
    check_err 'error: .*MPI_Win_allocate_shared of [0-9]+ bytes per rank failed' "$what: the message"
    if grep -q 'MPI_ABORT' "$T_TMP/err" "$T_TMP/out"; then bad "$what: ended in MPI_Abort"; else ok; fi
    local n; n=$(grep -c 'error: .*MPI_Win_allocate_shared' "$T_TMP/err")
    check_eq "$n" 1 "$what: the error is said once, for every rank"
    if [ "$took" -le 60 ]; then ok; else bad "$what: took ${took}s (a 2 s deadline)"; fi
}
for fr in 0 1; do
    fails 2 "$fr" "verify agv, one node, rank $fr fails" "$V" --sizes 4K --op agv --deadline-ms 2000
    fails 2 "$fr" "bench agv, one node, rank $fr fails" "$B" --sizes 4K --op agv -n 2 -w 0 \
        --launches 1 --deadline-ms 2000
done
for fr in 0 3; do
    fails 4 "$fr" "verify rsv, 2 nodes x 2, rank $fr fails" "$V" --ranks-per-node 2 --sizes 4K \
        --op rsv --deadline-ms 2000
    fails 4 "$fr" "verify publish, 2 nodes x 2, rank $fr fails" "$V" --ranks-per-node 2 \
        --sizes 4K --op publish --deadline-ms 2000
    fails 4 "$fr" "bench publish, 2 nodes x 2, rank $fr fails" "$B" --ranks-per-node 2 --sizes 4K \
        --op publish -n 2 -w 0 --launches 1 --deadline-ms 2000
done

run "${MPIRUN[@]}" -x DMUON_DEADLINE_MS=xyz -np 4 "$V" --ranks-per-node 2 --sizes 4K \
    --op all --deadline-ms 2000
check_rc 0 "--deadline-ms with a bad DMUON_DEADLINE_MS: the flag is the deadline everywhere"
check_out 'passed, 0 failed' "--deadline-ms over a bad variable: summary"
finish
