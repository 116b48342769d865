#!/usr/bin/env bash
# dmuon-probe under mpirun: every rank times, the median across ranks is
# stored once by rank 0 (ranks = 2 in the row).
. "$(dirname "$0")/lib.sh"
P="$DMUON_BIN/dmuon-probe"
DB="$T_TMP/c.sqlite"
if ! command -v mpirun > /dev/null; then skip "mpirun not found"; finish; exit; fi
if [ "${DMUON_SANITIZED:-0}" = 1 ]; then skip "the MPI probe under the sanitizers (Open MPI start-up is not ours to check)"; finish; exit; fi

run mpirun -np 2 "$P" --shapes 16x48,8x8 --db "$DB" --iters 3 --warmup 0
check_rc 0 "probe on 2 ranks"
check_out '^# 2 shapes probed on 2 ranks' "summary names the ranks"
run "$P" --list --db "$DB" --json
check_eq "$(grep -c '"ranks": 2' "$T_TMP/out")" 2 "both rows combine 2 ranks"
run mpirun -np 2 "$P" --shapes 8x0 --db "$DB"
check_rc 2 "bad input under mpirun"
check_eq "$(grep -c 'error:' "$T_TMP/err")" 1 "input error reported once"
finish
