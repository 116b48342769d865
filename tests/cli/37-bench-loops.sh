#!/usr/bin/env bash
# dmuon-bench loops: every element loop of dmuon/bf16.h timed and checked
# against its scalar definition (#wrong 0) at the width in use, for even,
# odd and one-element arrays; --json; bad input exits 2.
. "$(dirname "$0")/lib.sh"
B="$DMUON_BIN/dmuon-bench"

for n in 16384 4099 1; do
    run "$B" loops --elements $n --warmup 1 --iters 3
    check_rc 0 "bench loops --elements $n"
    check_out "^# dmuon-bench loops: $n elements per array, width (baseline|x86-64-v3|x86-64-v4), -w 1 -n 3 " \
        "header names the size and the width ($n)"
    for l in add add_pair add_rounded accum from_f32 to_f32 f32_add; do
        check_out "^$l +[0-9]+\.[0-9]+ +[0-9]+\.[0-9]+ +0$" "$l row with #wrong 0 ($n)"
    done
    check_eq "$(grep -c '^[a-z_0-9]* \+[0-9]' "$T_TMP/out")" 7 "seven rows ($n)"
done

run "$B" loops --elements 64 -w 0 -n 2 --json
check_rc 0 "bench loops --json"
check_out '"width": "(baseline|x86-64-v3|x86-64-v4)"' "json width"
check_eq "$(grep -c '"elements_per_ns": [0-9]' "$T_TMP/out")" 7 "json: a rate per loop"
check_out '^  "wrong": 0' "json total wrong"
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert len(d["loops"])==7 and d["wrong"]==0' \
    "$T_TMP/out" && ok || bad "json parses with 7 loops"

run "$B" loops --elements 0
check_rc 2 "--elements 0"
check_err "^dmuon-bench loops: error: --elements '0': expected a whole number from 1 to 16777216" "range message"
run "$B" loops --iters 0
check_rc 2 "--iters 0"
run "$B" loops --elements 16M+1
check_rc 2 "--elements above the limit"
run "$B" loops extra
check_rc 2 "a stray argument"
check_err "unexpected argument 'extra'" "names the argument"
run "$B" loops --help
check_rc 0 "--help"
check_out '^usage: dmuon-bench loops' "usage line"
finish
