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
    finish; exit
fi
if ! "$PY" -c 'import torch, safetensors.torch' 2>/dev/null; then
    echo "skipped: torch (2.15.0) is not installed for $PY (make deps installs it into build/pyenv)"
    finish; exit
fi
export PYTHONPATH="$DMUON_ROOT/python:$DMUON_ROOT/tests/python${PYTHONPATH:+:$PYTHONPATH}"
export OMP_NUM_THREADS=1
MPIRUN=(timeout 300 mpirun --oversubscribe --bind-to none --mca mpi_yield_when_idle 1)
# each rank writes its own file: the lines of 4 ranks on one pipe may interleave
rm -f "$T_TMP"/world.*
run "${MPIRUN[@]}" -np 4 "$PY" -c 'import sys, dmuon.torch, dmuon
r, n = dmuon.world()
open(sys.argv[1] + "/world.%d" % r, "w").write("%d %s\n" % (n, dmuon.library_path()[1]))' "$T_TMP"
check_rc 0 "import dmuon.torch on 4 ranks"
seen=0
for r in 0 1 2 3; do
    grep -qx "4 the build tree of this package" "$T_TMP/world.$r" 2>/dev/null && seen=$((seen + 1))
done
[ "$seen" = 4 ] && ok || bad "4 ranks see a world of 4 and load the tree's libdmuon.so ($seen of 4 did)"
for np in 1 2 4 8; do
    run "${MPIRUN[@]}" -np $np "$PY" "$DMUON_ROOT/tests/python/torch_check.py" $np "$T_TMP"
    check_rc 0 "torch_check.py on $np rank(s)"
    grep -E '^(not ok|note)' "$T_TMP/out" | sed "s/^/    np $np: /"
    p=$(grep -c '^ok - ' "$T_TMP/out"); f=$(grep -c '^not ok - ' "$T_TMP/out")
    T_PASS=$((T_PASS + p)); T_FAIL=$((T_FAIL + f))
    [ "$p" -gt 0 ] || bad "np $np: no check ran"
done
# an uncaught exception on rank 1 (between forward and backward) under the
# default deadline (10 minutes): the binding's sys.excepthook prints the
# traceback and aborts the job, so both ranks end at once, exit non-zero
cat > "$T_TMP/raise.py" <<'EOF'
import dmuon, dmuon.torch, tiny_decoder as td
m, (rank, _) = td.make(), dmuon.world()
rt = dmuon.torch.shard(m, dmuon.torch.plan(m))
opt = rt.optimizer()
x, y = td.batches(1)[0]
loss = td.loss_fn(m, x, y)
if rank == 1:
    raise RuntimeError("raised on purpose on rank 1")
loss.backward()
opt.step()
EOF
t0=$(date +%s)
run env -u DMUON_DEADLINE_MS timeout 120 mpirun --oversubscribe --bind-to none \
    --mca mpi_yield_when_idle 1 -np 2 "$PY" "$T_TMP/raise.py"
took=$(($(date +%s) - t0))
[ "$RC" -ne 0 ] && [ "$RC" -ne 124 ] && [ "$took" -le 60 ] && ok ||
    bad "rank 1 raising ends the 2-rank job within 60 s, non-zero (exit $RC after $took s)"
check_err "raised on purpose on rank 1" "the raising rank prints its traceback"
check_err "rank 1 of 2 ended on an uncaught RuntimeError: aborting the MPI job" \
    "the binding says it aborts the job"
# the docs' complete script, on 4 ranks: its loss falls
awk '/^## Using dmuon from PyTorch/{s=1} s && /^```python mpi$/{c=1; next} c && /^```$/{exit} c{print}' \
    "$DMUON_ROOT/docs/python.md" > "$T_TMP/ex.py"
lines=$(wc -l < "$T_TMP/ex.py")
[ "$lines" -gt 0 ] && [ "$lines" -le 30 ] && ok ||
    bad "docs/python.md has a python block of 1..30 lines under 'Using dmuon from PyTorch' ($lines)"
cd "$T_TMP" && run "${MPIRUN[@]}" -np 4 "$PY" ex.py; cd "$DMUON_ROOT"
check_rc 0 "the docs' script runs on 4 ranks"
first=$(sed -nE 's/^step 0 loss ([0-9.]+)$/\1/p' "$T_TMP/out")
last=$(sed -nE 's/^step 29 loss ([0-9.]+)$/\1/p' "$T_TMP/out")
check_eq "$(awk -v a="${first:-0}" -v b="${last:-0}" 'BEGIN{print (b < a / 2) ? "falls" : "flat"}')" \
    falls "the docs' script: loss falls to under half (step 0 $first, step 29 $last)"
[ -s "$T_TMP/model.safetensors" ] && ok || bad "the docs' script exported model.safetensors"
[ -n "${DMUON_PARITY_CSV:-}" ] && cp "$T_TMP/parity.csv" "$DMUON_PARITY_CSV"
finish
