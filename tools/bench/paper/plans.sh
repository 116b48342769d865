#!/usr/bin/env bash
# tools/bench/paper/plans.sh — the HSDP plans behind the paper's Table 7 for
# dmuon-bench predict --plans: the five bundled models at 2, 4, 8, 16, 32
# nodes x 8 GPUs (Qwen2.5-32B under ZeRO-3, the others ZeRO-2, as the
# table's titles say), analytic Gram-NS costs (--cost flops: no device
# measurements needed).
#
#   tools/bench/paper/plans.sh [BIN] [OUTDIR]      (default bin, build/paper-plans)
set -euo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
bin=${1:-$root/bin}
out=${2:-$root/build/paper-plans}
mkdir -p "$out"
for m in qwen2.5-1.5b:2 qwen2.5-7b:2 qwen2.5-32b:3 wall-oss-0.5:2 pi05:2; do
    model=${m%:*}; zero=${m#*:}
    for r in 2 4 8 16 32; do
        "$bin/dmuon-plan" "$root/models/$model.yaml" --nodes "$r" --gpus-per-node 8 \
            --sharding hsdp --zero "$zero" --cost flops -o "$out/$model-${r}x8.plan" > /dev/null
    done
done
echo "plans in $out"
