#!/usr/bin/env bash
# tests/run.sh counts a skipped script as skipped, never as passed: a script
# that only prints "skipped: REASON", one that calls skip and finish, and one
# that passes some checks and skips one; the closing line and --total say
# "N passed, N failed, N skipped".
source "$(dirname "$0")/lib.sh"
d=$T_TMP/suite
mkdir -p "$d/tests/cli" "$d/tests/mpi" "$d/bin" "$d/build"
cp "$DMUON_ROOT/tests/run.sh" "$d/tests/"
cp "$DMUON_ROOT/tests/cli/lib.sh" "$d/tests/cli/"
echo 'source "$(dirname "$0")/lib.sh"; skip "nothing to run"; finish' > "$d/tests/cli/10-a.sh"
echo 'echo "skipped: bare"; exit 0' > "$d/tests/cli/11-b.sh"
echo 'source "$(dirname "$0")/lib.sh"; ok; skip "one part"; finish' > "$d/tests/cli/12-c.sh"
echo 'echo "2 passed, 0 failed"' > "$d/tests/mpi/50-d.sh"
echo 'exit 0' > "$d/tests/mpi/51-e.sh"
run env -u DMUON_TEST_FILTER DMUON_BIN="$d/bin" DMUON_BUILD="$d/build" DMUON_COUNTS="$T_TMP/counts" bash "$d/tests/run.sh" --label x
check_rc 0 "a suite with skips only is not a failure"
check_out '^skip cli/10-a.sh: nothing to run$' "skip helper shown as a skip"
check_out '^skip cli/11-b.sh: bare$' "a bare skipped: line shown as a skip"
check_out '^ok   cli/12-c.sh \(1 passed, 1 skipped' "a partial skip counted apart"
check_out '^x: 4 passed, 0 failed, 3 skipped$' "closing line counts skips apart"
echo "y 1 1 0" >> "$T_TMP/counts"
run bash "$d/tests/run.sh" --total "$T_TMP/counts"
check_rc 1 "--total fails on a failure"
check_out '^5 passed, 1 failed, 3 skipped$' "--total adds up the skips"
finish
