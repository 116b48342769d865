#!/usr/bin/env bash
# dmuon-probe: shapes into a new database, --list, --missing probes only
# what is absent, --json, bad input leaves the database as it was.
. "$(dirname "$0")/lib.sh"
P="$DMUON_BIN/dmuon-probe"
DB="$T_TMP/c.sqlite"

run "$P" --shapes 16x48,48x16,16x48 --db "$DB" --iters 2 --warmup 0
check_rc 0 "probe two shapes (one repeated)"
check_out '^# 2 shapes probed on 1 rank, stored in' "repeated shape probed once"
check_err '\[2/2\] 48x16 +median' "progress on stderr"
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
check_rc 3 "a file that is not a database"
check_no_crash "junk database"

run "$P" --check --db "$DB"
check_rc 0 "integrity check"
run "$P" --help
check_rc 0 "help"
check_out '--missing' "help lists --missing"
finish
