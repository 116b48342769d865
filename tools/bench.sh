#!/usr/bin/env bash
# make bench: every benchmark family, side by side (families join as they land).
set -euo pipefail
bin=${1:-bin}
echo "== Newton-Schulz: Gram vs direct next to sgemm (Qwen2.5-1.5B Muon shapes)"
"$bin/dmuon-bench" ns
echo
echo "== planner speed (dmuon-bench plan)"
"$bin/dmuon-bench" plan --model models/qwen1.5-moe-a2.7b.yaml
