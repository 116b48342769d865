#!/usr/bin/env bash
# Runs every test of the suite and prints one closing line
# "N passed, N failed, N skipped".
#
#   tests/run.sh --label NAME      run unit binaries, CLI, MPI and cluster scripts
#   tests/run.sh --total FILE      add up the counts that earlier runs wrote
#
# Environment: DMUON_BIN (built tools), DMUON_BUILD (unit test binaries),
# DMUON_SANITIZED=1 under ASan/UBSan, DMUON_COUNTS (file to append counts to),
# DMUON_TEST_FILTER (substring: run only matching tests).
# Unit binaries use cmocka; their "[  PASSED  ] N" / "[  FAILED  ] N" lines are
# counted.  A script counts as what its own last "N passed, N failed[, N
# skipped]" line says, or as one test by its exit code when it prints no
# such line; a script that exits 0 having printed "skipped: REASON" and
# passed nothing counts as one skipped test, never as a pass.
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)

if [ "${1:-}" = "--total" ]; then
    p=0; f=0; s=0
    while read -r label np nf ns; do
        p=$((p + np)); f=$((f + nf)); s=$((s + ${ns:-0}))
    done < "$2"
    echo "$p passed, $f failed, $s skipped"
    [ "$f" -eq 0 ]
    exit
fi
label=${2:-plain}
export DMUON_BIN=$(cd "$root" && cd "${DMUON_BIN:-bin}" && pwd)
export DMUON_BUILD=$(cd "$root" && cd "${DMUON_BUILD:-build}" && pwd)
export DMUON_ROOT=$root
# test-only Python packages (make deps puts them in build/pyenv)
if [ -z "${DMUON_PYTHON:-}" ] && [ -x "$root/build/pyenv/bin/python" ]; then
    export DMUON_PYTHON=$root/build/pyenv/bin/python
fi
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
if [ "${DMUON_SANITIZED:-0}" = 1 ]; then
    # Open MPI's own start-up allocations are not ours to report.
    export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0:abort_on_error=0}
    export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
fi
filter=${DMUON_TEST_FILTER:-}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
passed=0; failed=0; skipped=0; failures=()

count() {   # name log rc
    local name=$1 log=$2 rc=$3 p f s line re
    p=$(grep -E '^\[  PASSED  \] [0-9]+ test' "$log" | tail -n1 | grep -oE '[0-9]+' | head -n1)
    f=$(grep -E '^\[  FAILED  \] [0-9]+ test' "$log" | tail -n1 | grep -oE '[0-9]+' | head -n1)
    s=$(grep -E '^\[  SKIPPED \] [0-9]+ test' "$log" | tail -n1 | grep -oE '[0-9]+' | head -n1)
    if [ -z "$p$f" ]; then
        re='^([A-Za-z-]+: )?([0-9]+) passed, ([0-9]+) failed(, ([0-9]+) skipped)?'
        line=$(grep -E "$re" "$log" | tail -n1)
        if [ -n "$line" ]; then
            p=$(echo "$line" | sed -E "s/$re.*/\2/")
            f=$(echo "$line" | sed -E "s/$re.*/\3/")
            s=$(echo "$line" | sed -E "s/$re.*/\5/")
        fi
    fi
    p=${p:-0}; f=${f:-0}; s=${s:-0}
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; fi
    # a script that only says why it skipped is one skipped test, not a pass
    if [ "$rc" -eq 0 ] && [ "$p" -eq 0 ] && [ "$f" -eq 0 ] && [ "$s" -eq 0 ]; then
        if grep -qE '^skipped: ' "$log"; then s=1; else p=1; fi
    fi
    passed=$((passed + p)); failed=$((failed + f)); skipped=$((skipped + s))
    if [ "$f" -gt 0 ]; then
        failures+=("$name")
        echo "FAIL $name ($p passed, $f failed, $s skipped, exit $rc); last lines:"
        tail -n 25 "$log" | sed 's/^/    /'
    elif [ "$p" -eq 0 ]; then
        line=$(grep -m1 -E '^skipped: ' "$log")
        echo "skip $name: ${line#skipped: }"
    elif [ "$s" -gt 0 ]; then
        echo "ok   $name ($p passed, $s skipped: $(grep -E '^skipped: ' "$log" | sed 's/^skipped: //' | paste -sd';'))"
    else
        echo "ok   $name ($p passed)"
    fi
}

run_one() {  # name command...
    local name=$1; shift
    case "$name" in *"$filter"*) ;; *) return ;; esac
    local log="$tmp/log" rc
    "$@" > "$log" 2>&1; rc=$?
    count "$name" "$log" "$rc"
}

echo "== dmuon tests ($label) =="
for t in "$DMUON_BUILD"/tests/test_*; do
    [ -x "$t" ] || continue
    run_one "unit/$(basename "$t")" "$t"
done
for s in "$here"/cli/[0-9]*.sh; do
    [ -f "$s" ] || continue
    run_one "cli/$(basename "$s")" bash "$s"
done
for s in "$here"/mpi/[0-9]*.sh; do
    [ -f "$s" ] || continue
    run_one "mpi/$(basename "$s")" bash "$s"
done
# The namespace cluster (needs root; skips itself otherwise).  Not under the
# sanitizers: its code paths are the MPI tests' above, over TCP.
if [ "${DMUON_SANITIZED:-0}" != 1 ]; then
    for s in "$here"/cluster/[0-9]*.sh; do
        [ -f "$s" ] || continue
        run_one "cluster/$(basename "$s")" bash "$s"
    done
fi
[ -n "${DMUON_COUNTS:-}" ] && echo "$label $passed $failed $skipped" >> "$DMUON_COUNTS"
if [ ${#failures[@]} -gt 0 ]; then
    echo "failed ($label): ${failures[*]}"
fi
echo "$label: $passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
