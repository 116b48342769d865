#!/usr/bin/env bash
# --backend of dmuon-verify and dmuon-bench: a bad name is a usage error
# (exit 2, printed once); a GPU backend on a machine without a GPU (or a
# build without GPU support) is a clear DMUON_EUNSUPPORTED error (exit 3,
# printed once) before any test runs.  On a machine with a GPU the GPU cases
# are tests/gpu/run.sh's and are skipped here.
source "$(dirname "$0")/../cli/lib.sh"
V="$DMUON_BIN/dmuon-verify"
B="$DMUON_BIN/dmuon-bench"
MPIRUN=(timeout 60 mpirun --oversubscribe --bind-to none --mca mpi_yield_when_idle 1)
once() { n=$(grep -cE -- "$1" "$T_TMP/err"); check_eq "$n" 1 "$2: printed once"; }

for tool in "$V" "$B"; do
    name=$(basename "$tool")
    run "${MPIRUN[@]}" -np 2 "$tool" --backend cuda
    check_rc 2 "$name --backend cuda"
    check_err "error: --backend: backend 'cuda': expected mpi, nccl or nccl-dev" "$name names the value and the names"
    once "expected mpi, nccl" "$name bad backend"
done

if command -v nvidia-smi > /dev/null && nvidia-smi -L > /dev/null 2>&1; then
    skip "a GPU is visible: the no-GPU refusals are not checked here (tests/gpu/run.sh checks the GPU backends)"
else
    for tool in "$V" "$B"; do
        name=$(basename "$tool")
        for b in nccl nccl-dev; do
            run "${MPIRUN[@]}" -np 2 "$tool" --backend $b --sizes 2K
            [ "$name" = dmuon-bench ] && run "${MPIRUN[@]}" -np 2 "$tool" --backend $b -b 2K -e 2K
            check_rc 3 "$name --backend $b without a GPU"
            check_err "the $b backend: (no GPU found|this dmuon was built without GPU support|this dmuon was built with an NCCL older)" "$name --backend $b says why"
            once "the $b backend" "$name --backend $b"
            check_eq "$(grep -c '^ok\|passed' "$T_TMP/out")" 0 "$name --backend $b ran nothing"
        done
    done
fi
# the default stays mpi: one rank, one small case, passes
run "${MPIRUN[@]}" -np 2 "$V" --backend mpi --op agv --sizes 2K --layouts rank --dtypes f32 --paths chain
check_rc 0 "dmuon-verify --backend mpi"
check_out 'passed, 0 failed' "mpi summary"
finish
