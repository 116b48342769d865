#!/usr/bin/env bash
# make plots: SVG pictures of the trainer's logs, drawn by gnuplot; it draws
# what the logs present allow, after any of make train, make equiv, make bench.
#   build/train/train.svg    loss of make train (build/train/train.csv)
#   build/train/loss.svg     training and validation loss of the four lines
#                            (make equiv: build/train/equiv/{A,B,C,D}-fsdp-s1.csv)
#   build/train/equiv.svg    per-step relative loss difference D vs B, the
#                            control B vs B (other seed), D FSDP vs HSDP,
#                            D 8 vs 1 rank
#   build/train/phases.svg   per-phase step time of the four lines for FSDP
#                            ZeRO-2, ZeRO-3 and HSDP (make bench:
#                            build/train/bench/phases.dat), wall time
#   build/train/phases-cpu.svg   the same in CPU time per rank
# A missing input is named with the target that makes it; the others are
# still drawn.
set -euo pipefail
command -v gnuplot > /dev/null || { echo "train-plots: gnuplot missing (make deps installs gnuplot-nox)" >&2; exit 2; }
eq=build/train/equiv
b=build/train/bench
made=0 missing=0

if [ -f build/train/train.csv ]; then   # make train
    tools/plot-log.sh build/train/train.csv -o build/train/train.svg --names 'line D' \
        --title 'make train: dmuon-train line D, 8 ranks as 4 nodes x 2' > /dev/null
    echo "build/train/train.svg"; made=$((made + 1))
fi
if [ -f "$eq/D-fsdp-s1.csv" ] && [ -f "$eq/B-fsdp-s1.csv" ]; then
    logs=() names=
    for l in A B C D; do
        [ -f "$eq/$l-fsdp-s1.csv" ] || continue
        logs+=("$eq/$l-fsdp-s1.csv"); names="$names${names:+,}line $l"
    done
    tools/plot-log.sh "${logs[@]}" -o build/train/loss.svg --names "$names" \
        --title 'dmuon-train on the fortunes text, 8 ranks as 4 nodes x 2, FSDP ZeRO-3' > /dev/null
    echo "build/train/loss.svg"; made=$((made + 1))
    # per-step relative differences
    rel() {   # A B -> "step rel" lines
        awk -F, 'FNR == 1 { next } $2 == "" { next } FNR == NR { a[$1] = $2; next }
                 ($1 in a) { d = a[$1] - $2; if (d < 0) d = -d; print $1, d / $2 }' "$1" "$2"
    }
    rel "$eq/D-fsdp-s1.csv" "$eq/B-fsdp-s1.csv" > "$eq/rel-DB.dat"
    [ -f "$eq/B-fsdp-s2.csv" ] && rel "$eq/B-fsdp-s2.csv" "$eq/B-fsdp-s1.csv" > "$eq/rel-BB.dat"
    [ -f "$eq/D-hsdp-s1.csv" ] && rel "$eq/D-fsdp-s1.csv" "$eq/D-hsdp-s1.csv" > "$eq/rel-FH.dat"
    [ -f "$eq/D-1rank-s1.csv" ] && rel "$eq/D-fsdp-s1.csv" "$eq/D-1rank-s1.csv" > "$eq/rel-81.dat"
    # dash styles and markers keep curves that coincide visible
    p="'$eq/rel-DB.dat' using 1:(\$2 > 0 ? \$2 : 1/0) with linespoints lw 1.5 dt 1 pt 7 pi 15 ps 0.6 title 'D vs B'"
    [ -f "$eq/rel-BB.dat" ] && p="$p, '$eq/rel-BB.dat' using 1:(\$2 > 0 ? \$2 : 1/0) with linespoints lw 1.5 dt 2 pt 5 pi 15 ps 0.6 title 'control: B vs B, other seed'"
    [ -f "$eq/rel-FH.dat" ] && p="$p, '$eq/rel-FH.dat' using 1:(\$2 > 0 ? \$2 : 1/0) with linespoints dt 3 pt 9 pi 15 ps 0.6 title 'D FSDP vs D HSDP'"
    [ -f "$eq/rel-81.dat" ] && p="$p, '$eq/rel-81.dat' using 1:(\$2 > 0 ? \$2 : 1/0) with linespoints dt 4 pt 11 pi 15 ps 0.6 title 'D 8 ranks vs 1 rank'"
    gnuplot <<EOF
set terminal svg size 900,520 dynamic font "sans,12"
set output 'build/train/equiv.svg'
set logscale y
set format y '10^{%T}'
set key bottom right
set xlabel 'step'
set ylabel '|loss a - loss b| / loss b'
set title 'per-step relative loss difference (zero differences not drawn)'
set grid
plot $p
EOF
    echo "build/train/equiv.svg"; made=$((made + 1))
else
    echo "train-plots: no logs in $eq (make equiv draws loss.svg and equiv.svg)" >&2; missing=1
fi

if [ -f "$b/phases.dat" ]; then
    gnuplot <<EOF
set terminal svg size 1000,540 dynamic font "sans,12"
set output 'build/train/phases.svg'
set style data histograms
set style histogram rowstacked
set style fill solid 0.85 border -1
set boxwidth 0.75
set key outside right top
set ylabel 'seconds per step (busiest rank, median)'
set title 'per-phase step time, 8 ranks as 4 nodes x 2 (8 ranks share 2 cores)'
set xtics rotate by -45
set grid ytics
plot '$b/phases.dat' using 3:xtic(sprintf('%s %s', stringcolumn(1), stringcolumn(2))) title 'forward compute', \
     '' using 4 title 'backward compute', '' using 5 title 'optimizer', \
     '' using (\$6 - \$7) title 'exposed communication', '' using 7 title 'publish wait'
EOF
    echo "build/train/phases.svg"; made=$((made + 1))
    gnuplot <<EOF
set terminal svg size 1000,540 dynamic font "sans,12"
set output 'build/train/phases-cpu.svg'
set style data histograms
set style histogram rowstacked
set style fill solid 0.85 border -1
set boxwidth 0.75
set key outside right top
set ylabel 'CPU seconds per step (busiest rank, median)'
set title 'per-phase CPU time per rank, 8 ranks as 4 nodes x 2'
set xtics rotate by -45
set grid ytics
plot '$b/phases.dat' using 8:xtic(sprintf('%s %s', stringcolumn(1), stringcolumn(2))) title 'forward', \
     '' using 9 title 'backward', '' using 10 title 'optimizer'
EOF
    echo "build/train/phases-cpu.svg"; made=$((made + 1))
else
    echo "train-plots: no $b/phases.dat (make bench draws phases.svg)" >&2; missing=1
fi
if [ "$made" -eq 0 ]; then
    echo "train-plots: nothing to draw: run make train, make equiv or make bench first" >&2
    exit 2
fi
exit 0
