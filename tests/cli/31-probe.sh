#!/usr/bin/env bash
# dmuon-probe: shapes into a new database, --list, --missing probes only
# what is absent, --json, bad input leaves the database as it was; the
# device and the database are checked before timing; a shape that fails
# part-way keeps the rows measured before it; --max-elements skips.
. "$(dirname "$0")/lib.sh"
P="$DMUON_BIN/dmuon-probe"
DB="$T_TMP/c.sqlite"

run "$P" --shapes 16x48,48x16,16x48 --db "$DB" --iters 2 --warmup 0
check_rc 0 "probe two shapes (one repeated)"
check_out '^# 2 shapes probed on 1 rank, stored in' "repeated shape probed once"
check_err '\[2/2\] 48x16 +median' "progress on stderr"
check_err '\[2/2\] 48x16 .*, 1 rank\)$' "one rank is singular"
check_out 'gram-pe5 +fp32 +16x48' "row of 16x48"

run "$P" --list --db "$DB"
check_rc 0 "list"
check_out '^# 2 rows in' "list counts the rows"
check_out '^cpu: .* x[0-9]+ +gram-pe5' "device name is the CPU model and thread count"

run "$P" --shapes 16x48,8x8 --missing --db "$DB" --iters 1 --warmup 0 --json
check_rc 0 "probe --missing"
check_err '1 shape missing' "only the absent shape is probed"
check_out '"probed": 1' "json counts one probed shape"
check_out '"m": 8' "json row of the new shape"

run "$P" --shapes 16x48,8x8 --missing --db "$DB"
check_rc 0 "second --missing run"
check_err '0 shapes missing' "second run probes nothing"

run "$P" --list --db "$DB" --json
check_out '"variant": "gram-pe5"' "list --json"
check_eq "$(grep -c '"m":' "$T_TMP/out")" 3 "three rows stored"

run "$P" --shapes 8x8 --variant direct-muon5 --dtype bf16 --db "$DB" --iters 1
check_rc 0 "probe another variant and dtype"
check_out 'direct-muon5 +bf16 +8x8' "variant and dtype stored"

cp "$DB" "$T_TMP/before.sqlite"
run "$P" --shapes 8x8,3x0 --db "$DB"
check_rc 2 "bad shape"
check_err "item 2 '3x0'" "error names the item"
run "$P" --shapes 8x8 --variant fast --db "$DB"
check_rc 2 "bad variant"
run "$P" --shapes 8x8 --iters 0 --db "$DB"
check_rc 2 "iters 0"
run "$P" --db "$DB"
check_rc 2 "nothing to probe"
check_err 'give --model MODEL or --shapes' "says what is missing"
run "$P" --list --db "$DB"
check_out '^# 4 rows in' "bad input left the rows as they were"

run "$P" --shapes 8x8 --db "$T_TMP/no/such/dir/c.sqlite"
check_rc 3 "database in a missing directory"
check_err "c.sqlite" "error names the path"
check_no_file "$T_TMP/no/such/dir/c.sqlite" "no database created"
run "$P" --list --db "$T_TMP/absent.sqlite"
check_rc 2 "list of a missing database"
check_no_file "$T_TMP/absent.sqlite" "list creates nothing"
echo "not a database" > "$T_TMP/junk.sqlite"
run "$P" --shapes 8x8 --db "$T_TMP/junk.sqlite"
check_rc 2 "a file that is not a database: bad input, as a foreign SQLite database"
check_no_crash "junk database"

run "$P" --list --check --db "$DB"
check_rc 2 "--list with --check"
check_err '--list and --check exclude each other' "usage error says why"

# an oversized shape is refused before a database is created
run "$P" --shapes 8x8,65536x32768 --db "$T_TMP/big.sqlite"
check_rc 2 "shape beyond one NS call's element range"
check_err '65536 x 32768' "error names the shape"
check_no_file "$T_TMP/big.sqlite" "no database for a refused shape list"

# the device is checked before the database file is created
run "$P" --shapes 8x8 --device cuda --db "$T_TMP/cuda.sqlite" --iters 1 --warmup 0
if [ "$RC" -ne 0 ]; then
    check_rc 3 "--device cuda without a GPU"
    check_no_file "$T_TMP/cuda.sqlite" "no empty database left behind"
fi
check_no_crash "probe --device cuda"

# a database of another schema fails before any shape is timed
if command -v python3 > /dev/null; then
    python3 -c 'import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); c.execute("create table ns_cost (a int, b int)"); c.commit()' "$T_TMP/foreign.sqlite"
    run "$P" --shapes 8x8 --db "$T_TMP/foreign.sqlite" --iters 1 --warmup 0
    check_rc 2 "a database of another schema"
    check_err "foreign.sqlite.*another program" "error names the database and the problem"
    if grep -q '\[1/1\]' "$T_TMP/err"; then bad "foreign schema: a shape was timed first"; else ok; fi
fi

# --max-elements skips and lists
run "$P" --shapes 8x8,300x300 --max-elements 1000 --db "$T_TMP/skip.sqlite" --iters 1 --warmup 0
check_rc 0 "probe with a skipped shape"
check_out '^# 300x300 skipped: 90000 elements > --max-elements 1000' "skipped shape listed"
check_out '^# 1 shape probed' "the other shape probed"
check_err 'skipping 300x300' "skip reported on stderr"
run "$P" --shapes 8x8 --max-elements -3 --db "$T_TMP/skip.sqlite"
check_rc 2 "negative --max-elements"

# a shape that fails part-way (out of memory under an address-space limit):
# the shapes measured before it are stored, the failing one is named
if [ "${DMUON_SANITIZED:-0}" != 1 ]; then
    ( ulimit -v 2000000
      "$P" --shapes 8x8,16x8,30000x30000,4x4 --db "$T_TMP/part.sqlite" --iters 1 --warmup 0 \
          > "$T_TMP/out" 2> "$T_TMP/err"; echo $? > "$T_TMP/rc" )
    RC=$(cat "$T_TMP/rc")
    check_rc 3 "a shape runs out of memory"
    check_err 'out of memory for a 30000 x 30000 input' "the failure is reported"
    check_err '30000x30000 failed; the 2 shapes measured before it \(8x8, 16x8\) are stored' \
        "says which rows were stored"
    run "$P" --list --db "$T_TMP/part.sqlite"
    check_out '^# 2 rows in' "rows measured before the failure are stored"
    check_out ' 16x8 ' "the second shape is among them"
    run "$P" --shapes 8x8,16x8,30000x30000,4x4 --missing --max-elements 100000 \
        --db "$T_TMP/part.sqlite" --iters 1 --warmup 0
    check_rc 0 "--missing measures the rest"
    check_err '1 shape missing' "only the shape never reached is missing"
fi

run "$P" --check --db "$DB"
check_rc 0 "integrity check"
run "$P" --help
check_rc 0 "help"
check_out '--missing' "help lists --missing"
check_out 'OPENBLAS_NUM_THREADS' "help explains the thread count in the CPU device name"
finish
