# Helpers for the numbered CLI scripts: source it, call check_* , end with
# `finish`, which prints "N passed, N failed, N skipped" and sets the exit
# code.  `skip REASON` records a check that could not run here ("skipped:
# REASON" on stdout); tests/run.sh counts it as skipped, never as passed.
# Each check names what it expected, so a failure says what went wrong.
set -u
: "${DMUON_BIN:?run through tests/run.sh or set DMUON_BIN}"
: "${DMUON_ROOT:=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}"
T_PASS=0; T_FAIL=0; T_SKIP=0
T_TMP=$(mktemp -d); trap 'rm -rf "$T_TMP"' EXIT
ok()   { T_PASS=$((T_PASS + 1)); }
bad()  { T_FAIL=$((T_FAIL + 1)); echo "not ok: $*"; }
skip() { T_SKIP=$((T_SKIP + 1)); echo "skipped: $*"; }

# run CMD...: captures stdout in $T_TMP/out, stderr in $T_TMP/err, exit in RC
run() { "$@" > "$T_TMP/out" 2> "$T_TMP/err"; RC=$?; }

# check_rc EXPECTED DESCRIPTION
check_rc() {
    if [ "$RC" -eq "$1" ]; then ok; else
        bad "$2: exit $RC, expected $1"; sed 's/^/    stderr: /' "$T_TMP/err" | head -n 5; fi
}
# check_err PATTERN DESCRIPTION   (grep -E on stderr)
check_err() {
    if grep -qE -- "$1" "$T_TMP/err"; then ok; else
        bad "$2: stderr lacks /$1/"; sed 's/^/    stderr: /' "$T_TMP/err" | head -n 5; fi
}
# check_out PATTERN DESCRIPTION   (grep -E on stdout)
check_out() {
    if grep -qE -- "$1" "$T_TMP/out"; then ok; else
        bad "$2: stdout lacks /$1/"; sed 's/^/    stdout: /' "$T_TMP/out" | head -n 5; fi
}
# check_no_file PATH DESCRIPTION
check_no_file() { if [ ! -e "$1" ]; then ok; else bad "$2: $1 exists"; fi; }
# check_eq ACTUAL EXPECTED DESCRIPTION
check_eq() { if [ "$1" = "$2" ]; then ok; else bad "$3: got '$1', expected '$2'"; fi; }
# check_cmp FILE1 FILE2 DESCRIPTION (byte-identical)
check_cmp() { if cmp -s "$1" "$2"; then ok; else bad "$3: $1 and $2 differ"; fi; }
# check_no_crash: exit codes 0..2 only, no sanitizer report
check_no_crash() {
    if [ "$RC" -ge 128 ] || grep -qE 'AddressSanitizer|runtime error:|Segmentation' "$T_TMP/err"; then
        bad "$1: crashed (exit $RC)"; head -n 8 "$T_TMP/err" | sed 's/^/    /'; else ok; fi
}
finish() { echo "$T_PASS passed, $T_FAIL failed, $T_SKIP skipped"; [ "$T_FAIL" -eq 0 ]; }
