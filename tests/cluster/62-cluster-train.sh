#!/usr/bin/env bash
# make cluster-train in small (tests/cluster/train.sh): dmuon-train on 2
# namespace hosts x 2 ranks, HSDP, lines C and D, 2 steps, one round and the
# control run; the table has a row per line with the split of exposed
# communication, the JSON says every check passed (step-0 loss bit-identical,
# C the same model as D), the plot is drawn, and no namespace or process of
# the run is left; a SIGINT during a run ends it with 130, leaving nothing
# and writing no report.  Then the report alone on doctored logs: a step-0 loss
# changed in one run, and one line's losses moved above the control, each
# make it fail naming the check.  Bad usage (host count, rate, a missing
# value, an --out that is a file) exits 2 and leaves the earlier report; the
# plot's bars stack to the step wall.  Without root or namespaces it skips.
source "$(dirname "$0")/lib.sh"
S="$DMUON_ROOT/tests/cluster/train.sh"
if ! command -v python3 > /dev/null; then
    skip "tests/cluster/train.sh needs python3 for its report"
    finish
    exit
fi
# --- bad usage: exit 2, named, before anything in --out is touched ---------
O="$T_TMP/ct"
mkdir -p "$O"; echo keep > "$O/cluster-train.md"
for args in "--hosts 65" "--rate garbage" "--rate 0bit" "--hosts --ranks 2" "--ranks 0" "--hosts 08" \
            "--out $T_TMP/ct/cluster-train.md"; do
    run bash "$S" --bin "$DMUON_BIN" --out "$O" $args
    check_rc 2 "train.sh $args"
done
run bash "$S" --bin "$DMUON_BIN" --out "$O" --lines "C C D"
check_rc 2 "a line given twice"
run bash "$S" --bin "$DMUON_BIN" --out "$O" --model "--layers 2 --dim 63"
check_rc 2 "model flags dmuon-train refuses"
check_err "--model '--layers 2 --dim 63': dmuon-train: error: heads: 4 does not divide dim 63" \
    "dmuon-train's own reason"
CLUSTER_TRAIN_TIMEOUT=abc run bash "$S" --bin "$DMUON_BIN" --out "$O"
check_rc 2 "a timeout that is not seconds"
run bash "$S" --bin "$DMUON_BIN" --out "$O" --rate garbage
check_err "--rate 'garbage': expected a positive tc rate" "a bad rate is named"
run bash "$S" --bin "$DMUON_BIN" --out "$O" --hosts --ranks 2
check_err "--hosts needs a value \(got the option '--ranks'\)" "a missing value is named"
check_eq "$(cat "$O/cluster-train.md")" keep "bad usage leaves the earlier report as it was"
run bash "$DMUON_ROOT/tests/cluster/cluster.sh" --validate --hosts 3 --ranks 2 --rate 1gbit
check_rc 0 "cluster.sh --validate accepts good flags"
run timeout 300 bash "$S" --bin "$DMUON_BIN" --out "$O" --hosts 2 --ranks 2 --rounds 1 --steps 2 \
    --warm 1 --lines "C D" --configs hsdp --model "--layers 2 --dim 64"
check_rc 0 "2 hosts x 2, lines C and D: every check passes"
md="$O/cluster-train.md"
check_out '^# dmuon-train across 2 hosts x 2 ranks' "the table's title names the shape"
for l in C D; do
    row=$(grep -E "^\| $l \| " "$md" | head -n1)
    # step wall, exposed comm, gather, reduce: numbers; the most exposed rank's split
    if awk -F'|' '{ for (i = 3; i <= 19; i++) if (i != 4 && i != 19 && $i !~ /^ *[0-9]+(\.[0-9]+)? *$/) exit 1 }' <<< "$row" &&
       grep -qE '\| rank [0-3]: [0-9.]+ = [0-9.]+ \+ [0-9.]+ \+ [0-9.]+ \|$' <<< "$row"; then ok; else
        bad "line $l: the HSDP table row is not all figures: '$row'"; fi
done
check_eq "$(grep -c '^| D step <= 0.95 x C step | ' "$md")" 1 "the D-vs-C step target is reported"
s0=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["passed"], sum(1 for c in d["checks"] if c["ok"]), len(d["checks"]))' "$O/cluster-train.json")
check_eq "$s0" "True 2 2" "JSON: both checks (step-0 loss, C vs D) passed"
# the step-0 loss of both runs, read from the logs, not from the report
l0=$(for l in C D; do awk -F, 'NR == 2 { print $2 }' "$O/logs/hsdp-$l-r1.csv"; done | sort -u | wc -l)
check_eq "$l0" 1 "the step-0 loss of C and D is one value"
check_eq "$(head -c 5 "$O/cluster-train.svg")" "<?xml" "the plot is an SVG"
# each bar stacks to its line's step wall (or its exposed comm, when that is larger)
bars=$(python3 - "$O" <<'PY'
import json, sys
d = json.load(open(sys.argv[1] + "/cluster-train.json"))
for row in open(sys.argv[1] + "/cluster-train.dat"):
    if row.startswith("#"):
        continue
    c, l, *v = row.split()
    f = d["configs"][c]["lines"][l]
    want = 1e3 * max(f["step_s"], f["exposed_comm_s"])
    print("%s %s %s" % (c, l, "ok" if abs(sum(map(float, v)) - want) <= 0.25 else
                        "bar %.1f, step %.1f ms" % (sum(map(float, v)), want)))
PY
)
check_eq "$bars" "$(printf 'hsdp C ok\nhsdp D ok')" "the plot's bars stack to the step wall"
check_eq "$(grep -c 'only 2 steps: too few' "$md")" 1 "the equivalence check says 2 steps are too few"
id=$(sed -nE 's/^cluster\.sh: (dmc-[0-9]+-[0-9a-f]{4}): .*/\1/p' "$T_TMP/err" | head -n1)
if [ -n "$id" ]; then
    check_eq "$(ip netns list | awk '{print $1}' | grep -cE "^$id-")" 0 "no namespace of $id left"
    check_eq "$(pgrep -f -- "$id" | wc -l)" 0 "no process of $id left"
else
    bad "no run ID in train.sh's stderr"
fi

# --- SIGINT during a run: exit 130, nothing left ---------------------------
# (a shell started with SIGINT ignored, e.g. a background job of a script,
# passes that on and cannot undo it: then SIGTERM stands in, and the SIGINT
# case is reported as skipped)
sig=INT
if [ -n "$(trap -p INT)" ]; then
    skip "SIGINT is ignored in this test's environment (inherited); SIGTERM is sent instead"
    sig=TERM
fi
set -m
bash "$S" --bin "$DMUON_BIN" --out "$T_TMP/int" --hosts 2 --ranks 2 --rounds 2 --steps 50 \
    --lines D --configs hsdp --model "--layers 2 --dim 64" > "$T_TMP/out" 2> "$T_TMP/err" &
pid=$!
set +m
for i in $(seq 1 150); do
    id=$(sed -nE 's/^cluster\.sh: (dmc-[0-9]+-[0-9a-f]{4}): .*/\1/p' "$T_TMP/err" | head -n1)
    [ -n "$id" ] && [ "$(pgrep -f -- "$id-n1" | wc -l)" -gt 0 ] && break
    sleep 0.1
done
sleep 1
kill -"$sig" "$pid"
wait "$pid"
RC=$?
check_rc $((128 + $(kill -l "$sig"))) "SIG$sig: train.sh exits 128 + the signal"
if [ -n "$id" ]; then
    check_eq "$(ip netns list | awk '{print $1}' | grep -cE "^$id-")" 0 "SIGINT: no namespace of $id left"
    check_eq "$(pgrep -f -- "$id" | wc -l)" 0 "SIGINT: no process of $id left"
else
    bad "SIGINT: no run ID in train.sh's stderr"
fi
check_no_file "$T_TMP/int/cluster-train.md" "SIGINT: no report written"
check_eq "$(tail -n1 "$T_TMP/int/run.txt" | grep -c '^# interrupted .*no report$')" 1 \
    "SIGINT: run.txt says the runs are incomplete"

# --- the report refuses what is wrong --------------------------------------
report() {
    python3 "$DMUON_ROOT/tests/cluster/train-report.py" --logs "$1" --out "$1" --hosts 2 --ranks 2 \
        --rounds 1 --steps 2 --warm 1 --lines "C D" --configs hsdp
}
cp -r "$O/logs" "$T_TMP/l1"
awk -F, -v OFS=, 'NR == 2 { $2 = $2 + 1e-12 } { print }' "$O/logs/hsdp-C-r1.csv" > "$T_TMP/l1/hsdp-C-r1.csv"
run report "$T_TMP/l1"
check_rc 1 "a step-0 loss changed in one run fails"
check_out '^\| step-0 loss bit-identical in every run \(seed 1\) \| FAIL \|' "names the step-0 check"
cp -r "$O/logs" "$T_TMP/l2"
awk -F, -v OFS=, 'NR > 1 && $2 != "" { $2 = $2 * 1.5 } { print }' "$O/logs/hsdp-C-r1.csv" > "$T_TMP/l2/hsdp-C-r1.csv"
run report "$T_TMP/l2"
check_rc 1 "line C's losses far from D's fail"
check_out '^\| hsdp C vs D: the same model .* \| FAIL \|' "names the equivalence check"
rm "$T_TMP/l2/hsdp-D-r1.ranks.csv"
run report "$T_TMP/l2"
check_rc 2 "a missing rank log is an input error"
check_err "hsdp-D-r1.ranks.csv" "names the file"
finish
