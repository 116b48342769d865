#!/usr/bin/env bash
# make demo: the main job on the bundled models.  Qwen2.5-1.5B is planned
# from measured costs: --probe-missing times its four Muon shapes on this CPU
# the first time (a few minutes on a small machine) and stores them in the
# cost database; later runs measure nothing.  The larger models use the
# analytic estimate (--cost flops), which the report states.
set -euo pipefail
bin=${1:-bin}
mkdir -p plans
cost=(--cost flops)
echo "== Qwen2.5-1.5B, FSDP on 32 ranks (4 nodes x 8 GPUs), measured NS costs"
"$bin/dmuon-plan" models/qwen2.5-1.5b.yaml --ranks 32 --probe-missing -o plans/qwen2.5-1.5b-fsdp32.yaml
echo
echo "== Qwen1.5-MoE-A2.7B, FSDP on 256 ranks, one unit per expert matrix"
"$bin/dmuon-plan" models/qwen1.5-moe-a2.7b.yaml --ranks 256 "${cost[@]}" -o plans/qwen1.5-moe-fsdp256.yaml
echo
echo "== pi0.5, HSDP on 16 nodes x 8 GPUs"
"$bin/dmuon-plan" models/pi05.yaml --nodes 16 --gpus-per-node 8 --sharding hsdp "${cost[@]}" -o plans/pi05-hsdp128.yaml
echo
echo "== Qwen2.5-7B (config.json), HSDP on 16 nodes x 8 GPUs: the ablations side by side"
"$bin/dmuon-plan" models/qwen2.5-7b/config.json --nodes 16 --sharding hsdp "${cost[@]}" --compare
echo
for p in plans/qwen2.5-1.5b-fsdp32.yaml plans/qwen1.5-moe-fsdp256.yaml plans/pi05-hsdp128.yaml; do
    "$bin/dmuon-verify" --plan "$p"
done
