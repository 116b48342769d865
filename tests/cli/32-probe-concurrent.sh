#!/usr/bin/env bash
# Two probes at once on one database both finish and the database passes
# the integrity check; a probe killed with SIGKILL mid-run loses no rows
# written before it and leaves the database consistent.
. "$(dirname "$0")/lib.sh"
P="$DMUON_BIN/dmuon-probe"
DB="$T_TMP/c.sqlite"

"$P" --shapes 24x24,32x64,64x32,8x8 --db "$DB" --iters 3 --warmup 0 > "$T_TMP/a.out" 2> "$T_TMP/a.err" &
pa=$!
"$P" --shapes 24x24,40x40,16x8 --variant direct-pe5 --db "$DB" --iters 3 --warmup 0 > "$T_TMP/b.out" 2> "$T_TMP/b.err" &
pb=$!
wait $pa; ra=$?
wait $pb; rb=$?
check_eq "$ra" 0 "first concurrent probe"
check_eq "$rb" 0 "second concurrent probe"
run "$P" --check --db "$DB"
check_rc 0 "integrity after concurrent probes"
run "$P" --list --db "$DB"
check_out '^# 7 rows in' "both probes' rows are there"

# SIGKILL while timing a large shape: the earlier rows stay, nothing partial
"$P" --shapes 512x4096,600x4000 --db "$DB" --iters 50 --warmup 0 > /dev/null 2> "$T_TMP/k.err" &
pk=$!
for _ in $(seq 1 100); do
    grep -q '\[1/2\]' "$T_TMP/k.err" 2>/dev/null && break
    sleep 0.1
done
kill -KILL $pk 2>/dev/null
wait $pk 2>/dev/null
run "$P" --check --db "$DB"
check_rc 0 "integrity after SIGKILL"
run "$P" --list --db "$DB"
check_out '^# 7 rows in' "killed probe lost no earlier row and wrote none"
finish
