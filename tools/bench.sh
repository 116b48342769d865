#!/usr/bin/env bash
# make bench: every benchmark family, side by side.
set -euo pipefail
bin=${1:-bin}
echo "== element loops of the reductions (BF16 sums, conversions) at this CPU's vector width"
"$bin/dmuon-bench" loops
echo
echo "== Newton-Schulz: Gram vs direct next to sgemm (Qwen2.5-1.5B Muon shapes)"
"$bin/dmuon-bench" ns
echo
echo "== planner speed (dmuon-bench plan)"
"$bin/dmuon-bench" plan --model models/qwen1.5-moe-a2.7b.yaml
echo
echo "== network model: held-out accuracy on the paper's Tables 5-7, fitted on its 16-GPU cells (docs/netmodel.md)"
"$bin/dmuon-bench" predict --preset h100 --cells tools/bench/paper/tables.json --fit-nodes 2 \
    --json-file build/bench-predict.json | sed -n '/^# held-out accuracy/,$p'
echo
echo "== network model: a 4096-GPU plan (Qwen2.5-7B, 512 nodes x 8, HSDP) predicted from the plan alone"
"$bin/dmuon-plan" models/qwen2.5-7b/config.json --nodes 512 -g 8 --sharding hsdp --cost flops \
    -o build/bench-predict-4096.yaml > /dev/null 2>&1
/usr/bin/time -f "predict: %e s wall, %M KiB peak" "$bin/dmuon-bench" predict \
    --params tools/bench/params/h100.json --plan build/bench-predict-4096.yaml | tail -1
echo
echo "== operators: 8 ranks as 4 virtual nodes x 2, BF16, 16 KiB - 64 MiB (ours vs per-owner, coalesced, equal-length)"
export OPENBLAS_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpirun -np 8 --oversubscribe --mca mpi_yield_when_idle 1 "$bin/dmuon-bench" --ranks-per-node 2 \
    -b 16K -e 64M -f 4 -w 5 -n 10 --launches 3 --op all --json-file build/bench-ops.json
echo
echo "== runtime optimizer step: 8 ranks as 4 virtual nodes x 2, synthetic Qwen2.5-1.5B-shaped blocks (width / 4), lines D, C, B, A"
mpirun -np 8 --oversubscribe --mca mpi_yield_when_idle 1 "$bin/dmuon-bench" step --ranks-per-node 2 \
    --line all --json-file build/bench-step.json
echo
echo "== prefetch overlap: line D forward passes, 2 ranks (one per core) and 8 ranks"
mpirun -np 2 --oversubscribe --mca mpi_yield_when_idle 1 "$bin/dmuon-bench" step --ranks-per-node 1 --overlap --tokens 512
mpirun -np 8 --oversubscribe --mca mpi_yield_when_idle 1 "$bin/dmuon-bench" step --ranks-per-node 2 --overlap --tokens 512
echo
echo "== the trainer's four lines A/B/C/D: step time per phase, 8 ranks as 4 virtual nodes x 2 (tools/train-bench.sh)"
bash tools/train-bench.sh "$bin"
echo
echo "== memory per rank: dmuon.torch lines D/C/B (FSDP, HSDP 2x2) beside torch FSDP2 + AdamW, 4 ranks (tools/memory-bench.sh)"
if "${DMUON_PYTHON:-build/pyenv/bin/python}" -c "import torch" 2> /dev/null; then
    bash tools/memory-bench.sh "$bin"
else
    echo "skipped: no torch in ${DMUON_PYTHON:-build/pyenv/bin/python} (make deps)"
fi
