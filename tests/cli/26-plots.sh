#!/usr/bin/env bash
# tools/plot-log.sh draws one's own dmuon-train --log files (training loss as
# lines with markers, validation as points, each log its own style), refuses
# a file that is not such a log; make plots (tools/train-plots.sh) draws
# whatever the logs present allow: after make train alone it draws the
# training log, with no logs it says which targets make them.
source "$(dirname "$0")/lib.sh"
if ! command -v gnuplot > /dev/null; then skip "gnuplot missing (make deps installs gnuplot-nox)"; finish; exit; fi
w=$T_TMP/w; mkdir -p "$w/build/train"; ln -s "$DMUON_ROOT/tools" "$w/tools"
# two logs as dmuon-train writes them: a row per step, val_loss every 5 steps
for s in 1 2; do
    awk -v s=$s 'BEGIN { print "step,loss,val_loss,muon_lr"
        for (i = 0; i <= 20; i++) printf "%d,%.6f,%s,0.02\n", i, 5.5 / (1 + 0.1 * i * s), (i % 5 ? "" : 5.6 / (1 + 0.1 * i * s)) }' \
        > "$w/log$s.csv"
done
run "$DMUON_ROOT/tools/plot-log.sh" "$w/log1.csv" "$w/log2.csv" -o "$w/loss.svg" --names 'line D,line B'
check_rc 0 "plot-log.sh draws two logs"
[ -s "$w/loss.svg" ] && grep -q '<svg' "$w/loss.svg" && ok || bad "no SVG written"
for t in 'line D train' 'line D validation' 'line B train' 'line B validation'; do
    grep -q "$t" "$w/loss.svg" && ok || bad "the key lacks '$t'"
done
check_eq "$(grep -c 'stroke-dasharray' "$w/loss.svg" | awk '{print ($1 > 0) ? "dashed" : "solid"}')" dashed \
    "the second log is dashed"
echo "a,b" > "$w/bad.csv"; echo "1,2" >> "$w/bad.csv"
run "$DMUON_ROOT/tools/plot-log.sh" "$w/bad.csv" -o "$w/bad.svg"
check_rc 2 "a CSV that is not a --log file"
check_err "no step, loss and val_loss columns" "says what is missing"
check_no_file "$w/bad.svg" "nothing written for it"
run "$DMUON_ROOT/tools/plot-log.sh" "$w/log1.csv"
check_rc 2 "no -o"
mkfifo "$w/fifo"
run "$DMUON_ROOT/tools/plot-log.sh" "$w/log1.csv" -o "$w/fifo"
check_rc 2 "-o naming a FIFO"
[ -p "$w/fifo" ] && ok || bad "the FIFO was replaced by a file"
mkdir "$w/outdir"
run "$DMUON_ROOT/tools/plot-log.sh" "$w/log1.csv" -o "$w/outdir"
check_rc 2 "-o naming a directory"
check_eq "$(ls "$w/outdir" | wc -l)" 0 "nothing left inside the directory"
run "$DMUON_ROOT/tools/plot-log.sh" "$w/log1.csv" -o "$w/no/such/dir/x.svg"
check_rc 2 "-o in a missing directory"
check_err "does not exist" "names the missing directory"
run "$DMUON_ROOT/tools/plot-log.sh" "$w/log1.csv" "$w/log2.csv" -o "$w/n.svg" --names only
check_rc 2 "--names with fewer names than logs"
head -n1 "$w/log1.csv" > "$w/empty.csv"
run "$DMUON_ROOT/tools/plot-log.sh" "$w/empty.csv" -o "$w/e.svg"
check_rc 2 "a log with a header only"
run "$DMUON_ROOT/tools/plot-log.sh" --help
check_rc 0 "--help"
# make plots: nothing there, then only the make train log
run bash -c "cd '$w' && bash tools/train-plots.sh"
check_rc 2 "no logs at all"
check_err "run make train, make equiv or make bench" "names the targets"
cp "$w/log1.csv" "$w/build/train/train.csv"
run bash -c "cd '$w' && bash tools/train-plots.sh"
check_rc 0 "make plots after make train"
check_out "build/train/train.svg" "draws the training log"
[ -s "$w/build/train/train.svg" ] && ok || bad "build/train/train.svg not written"
finish
