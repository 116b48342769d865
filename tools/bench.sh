#!/usr/bin/env bash
# make bench: every benchmark family, side by side (filled in as they land).
set -euo pipefail
bin=${1:-bin}
echo "== Newton-Schulz: Gram vs direct next to sgemm (Qwen2.5-1.5B Muon shapes)"
"$bin/dmuon-bench" ns
