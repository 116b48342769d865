#!/usr/bin/env bash
# Runs each libFuzzer harness for a bounded time:  run.sh SECONDS BINARY...
# Corpus: build/fuzz/corpus/<harness>/ (seeded from tests/fuzz/seed/ and
# tests/fuzz/regress/); crashes: build/fuzz/crashes/<harness>/.  Prints one
# line per harness with its executions and crashes; exit 1 if any crashed.
set -u
secs=$1; shift
here=$(cd "$(dirname "$0")" && pwd)
status=0
for bin in "$@"; do
    h=$(basename "$bin"); h=${h#fuzz_}
    corpus=build/fuzz/corpus/$h crashes=build/fuzz/crashes/$h
    mkdir -p "$corpus" "$crashes"
    for d in "$here/seed/$h" "$here/regress/$h"; do
        [ -d "$d" ] && cp -n "$d"/* "$corpus"/ 2>/dev/null
    done
    log=build/fuzz/$h.log
    ASAN_OPTIONS=detect_leaks=1 "$bin" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
        -artifact_prefix="$crashes/" -print_final_stats=1 "$corpus" > "$log" 2>&1
    rc=$?
    execs=$(grep -E '^stat::number_of_executed_units' "$log" | awk '{print $2}')
    found=$(ls "$crashes" | wc -l)
    echo "fuzz $h: ${execs:-?} executions in ${secs}s, exit $rc, $found crash file(s) in $crashes"
    [ "$rc" -eq 0 ] && [ "$found" -eq 0 ] || status=1
done
exit $status
