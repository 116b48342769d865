#!/usr/bin/env bash
# make bench: every benchmark family, side by side (filled in as they land).
set -euo pipefail
bin=${1:-bin}
echo "bench: no benchmark is built yet" >&2
exit 3
