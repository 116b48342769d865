#!/usr/bin/env bash
# The PyTorch binding (python/dmuon) against torch.optim.Muon + AdamW: a tiny
# decoder trained through dmuon.torch on 1, 2, 4 and 8 ranks, lines B/C/D,
# FSDP and HSDP, ZeRO-2/3 (tests/python/torch_check.py: per-step losses
# within its stated tolerance of the FP32-NS reference, the mu = 0.9 control
# outside it; activation checkpointing, accumulation, export, resume
# bit-identical and on another rank count, errors), then the docs' example.
source "$(dirname "$0")/../cli/lib.sh"
PY=${DMUON_PYTHON:-python3}
if [ "${DMUON_SANITIZED:-0}" = 1 ]; then
    echo "skipped: the binding loads the plain build/libdmuon.so (Python cannot load the ASan build without preloading libasan)"
    exit 0
fi
if ! "$PY" -c 'import torch, safetensors.torch' 2>/dev/null; then
    echo "skipped: torch (2.15.0) is not installed for $PY (make deps installs it into build/pyenv)"
    exit 0
fi
export PYTHONPATH="$DMUON_ROOT/python:$DMUON_ROOT/tests/python${PYTHONPATH:+:$PYTHONPATH}"
export DMUON_LIBRARY="$DMUON_ROOT/build/libdmuon.so" OMP_NUM_THREADS=1
MPIRUN=(timeout 300 mpirun --oversubscribe --bind-to none --mca mpi_yield_when_idle 1)
for np in 1 2 4 8; do
    run "${MPIRUN[@]}" -np $np "$PY" "$DMUON_ROOT/tests/python/torch_check.py" $np "$T_TMP"
    check_rc 0 "torch_check.py on $np rank(s)"
    grep -E '^(not ok|note)' "$T_TMP/out" | sed "s/^/    np $np: /"
    p=$(grep -c '^ok - ' "$T_TMP/out"); f=$(grep -c '^not ok - ' "$T_TMP/out")
    T_PASS=$((T_PASS + p)); T_FAIL=$((T_FAIL + f))
    [ "$p" -gt 0 ] || bad "np $np: no check ran"
done
[ -n "${DMUON_PARITY_CSV:-}" ] && cp "$T_TMP/parity.csv" "$DMUON_PARITY_CSV"
finish
