#!/usr/bin/env bash
# Commands that only read the cost database never change a file that is not
# dmuon's (no table added, an empty file not turned into a database), and the
# default database does not depend on the working directory.
source "$(dirname "$0")/lib.sh"
PR="$DMUON_BIN/dmuon-probe"
P="$DMUON_BIN/dmuon-plan"
INV="$DMUON_ROOT/tests/fuzz/seed/inventory/tiny.yaml"
unset DMUON_DB
python3 -c 'import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); c.execute("create table notes (t text)"); c.commit()' "$T_TMP/other.sqlite"
sum0=$(sha256sum < "$T_TMP/other.sqlite")
: > "$T_TMP/empty.sqlite"
for db in other empty; do
    f="$T_TMP/$db.sqlite"
    for args in "--list" "--list --json" "--check"; do
        run "$PR" $args --db "$f"
        check_rc 2 "probe $args on the $db file"
        check_err "$db.sqlite' is (not a dmuon cost database|an empty file)" "probe $args on the $db file: says why"
        if [ "$RC" -eq 0 ] && grep -q "integrity check ok" "$T_TMP/out"; then bad "probe $args reports ok on the $db file"; else ok; fi
    done
    run "$P" "$INV" --ranks 2 --db "$f"
    check_rc 2 "plan --db on the $db file"
    check_err "$db.sqlite" "plan --db on the $db file: names it"
done
check_eq "$(sha256sum < "$T_TMP/other.sqlite")" "$sum0" "the other program's database is unchanged"
check_eq "$(stat -c %s "$T_TMP/empty.sqlite")" 0 "the empty file is still empty"
tables=$(python3 -c 'import sqlite3, sys; print(",".join(r[0] for r in sqlite3.connect(sys.argv[1]).execute("select name from sqlite_master")))' "$T_TMP/other.sqlite")
check_eq "$tables" "notes" "no dmuon table added"
# a probe (which writes) refuses another program's database as well
run "$PR" --shapes 8x8 --iters 1 --warmup 0 --db "$T_TMP/other.sqlite"
check_rc 2 "probe into another program's database"
check_eq "$(sha256sum < "$T_TMP/other.sqlite")" "$sum0" "and leaves it unchanged"

# the default database: the same from any working directory
mkdir -p "$T_TMP/elsewhere"
( cd "$T_TMP/elsewhere" && "$PR" --list > "$T_TMP/l1" 2> "$T_TMP/e1" )
( cd / && "$PR" --list > "$T_TMP/l2" 2> "$T_TMP/e2" )
name1=$(grep -oE "'/[^']*dmuon\.sqlite'|in /[^ ]*dmuon\.sqlite" "$T_TMP/l1" "$T_TMP/e1" | head -n1 | grep -oE "/[^' ]*dmuon\.sqlite")
name2=$(grep -oE "'/[^']*dmuon\.sqlite'|in /[^ ]*dmuon\.sqlite" "$T_TMP/l2" "$T_TMP/e2" | head -n1 | grep -oE "/[^' ]*dmuon\.sqlite")
check_eq "$name1" "$DMUON_ROOT/db/dmuon.sqlite" "build tree: the default is the tree's db/dmuon.sqlite"
check_eq "$name2" "$name1" "the same default from another working directory"
# a copy outside any build tree: the XDG data folder
mkdir -p "$T_TMP/inst/bin" "$T_TMP/home"
cp "$PR" "$T_TMP/inst/bin/"
run env -u XDG_DATA_HOME HOME="$T_TMP/home" "$T_TMP/inst/bin/dmuon-probe" --list
check_err "'$T_TMP/home/.local/share/dmuon/dmuon.sqlite' does not exist" "installed: ~/.local/share/dmuon/dmuon.sqlite"
run env XDG_DATA_HOME="$T_TMP/xdg" HOME="$T_TMP/home" "$T_TMP/inst/bin/dmuon-probe" --shapes 8x8 --iters 1 --warmup 0
check_rc 0 "installed: a probe creates the XDG database and its folder"
[ -f "$T_TMP/xdg/dmuon/dmuon.sqlite" ] && ok || bad "no $T_TMP/xdg/dmuon/dmuon.sqlite"
run env DMUON_DB="$T_TMP/env.sqlite" "$T_TMP/inst/bin/dmuon-probe" --list
check_err "'$T_TMP/env.sqlite' does not exist" "DMUON_DB wins"
finish
