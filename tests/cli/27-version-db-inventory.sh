#!/usr/bin/env bash
# --version --json prints one JSON object in every tool; a --db that is not
# SQLite at all is bad input (exit 2) as another program's SQLite database
# is, and stays unchanged; a YAML inventory with an unknown key is refused
# naming the file, the line and the key.
source "$(dirname "$0")/lib.sh"
B=$DMUON_BIN
export OPENBLAS_NUM_THREADS=1
ver=$(sed -n 's/^#define DMUON_VERSION "\(.*\)"/\1/p' "$DMUON_ROOT/libcore/include/dmuon/version.h")
for t in plan probe bench verify train; do
    run "$B/dmuon-$t" --version --json
    check_rc 0 "dmuon-$t --version --json"
    got=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["tool"], d["version"])' \
          "$T_TMP/out" 2> /dev/null)
    check_eq "$got" "dmuon-$t $ver" "dmuon-$t --version --json is JSON with tool and version"
done
# --db: a text file, then a foreign SQLite database
printf 'not a database at all, just some text long enough for SQLite to look at it\n%.0s' $(seq 40) \
    > "$T_TMP/text.db"
cp "$T_TMP/text.db" "$T_TMP/text.orig"
run "$B/dmuon-probe" --shapes 8x8 --iters 1 --warmup 0 --db "$T_TMP/text.db"
check_rc 2 "dmuon-probe --db on a text file"
check_err "is not a SQLite database" "says what the file is not"
check_cmp "$T_TMP/text.db" "$T_TMP/text.orig" "the file is unchanged"
run "$B/dmuon-probe" --list --db "$T_TMP/text.db"
check_rc 2 "dmuon-probe --list --db on a text file"
run "$B/dmuon-plan" "$DMUON_ROOT/tests/fuzz/seed/inventory/tiny.yaml" --ranks 2 --db "$T_TMP/text.db"
check_rc 2 "dmuon-plan --db on a text file"
if command -v sqlite3 > /dev/null; then
    sqlite3 "$T_TMP/other.db" 'CREATE TABLE t(x);'
    run "$B/dmuon-probe" --shapes 8x8 --iters 1 --warmup 0 --db "$T_TMP/other.db"
    check_rc 2 "dmuon-probe --db on another program's SQLite database"
else
    skip "sqlite3 missing: the foreign SQLite database check"
fi
# unknown keys in a YAML inventory
printf -- '- {name: model.layers.0.mlp.up_proj.weight, shape: [64, 32]}\n- {name: model.layers.0.mlp.down_proj.weight, shap: [32, 64]}\n' \
    > "$T_TMP/typo.yaml"
run "$B/dmuon-plan" inspect "$T_TMP/typo.yaml"
check_rc 2 "an inventory item with an unknown key"
check_err "typo.yaml:2: unknown key 'shap' in a tensor \(expected name, shape, dtype\)" "names file, line and key"
printf 'dtype: bf16\ntensor:\n  - {name: a.weight, shape: [4, 4]}\n' > "$T_TMP/top.yaml"
run "$B/dmuon-plan" inspect "$T_TMP/top.yaml"
check_rc 2 "an inventory mapping with an unknown key"
check_err "top.yaml:[0-9]+: unknown key 'tensor' in the inventory" "names the key"
finish
