#!/usr/bin/env bash
# Plots dmuon-train --log files: training loss per step as lines, validation
# loss as points, one colour, dash style and marker per log, so that logs
# lying on top of each other stay visible.  Drawn by gnuplot (SVG).
#
#   tools/plot-log.sh LOG.csv [LOG.csv ...] -o OUT.svg [--title TEXT] [--names A,B,...]
#
# The columns are found by name in each log's header (step, loss, val_loss);
# a log's name in the key is --names' entry or the file's name without .csv.
# Exit: 0 drawn, 2 bad usage or a log without those columns, 3 gnuplot failed.
set -euo pipefail
usage() { sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//' >&2; exit "${1:-2}"; }
out= title='dmuon-train loss' names= logs=()
while [ $# -gt 0 ]; do
    case "$1" in
    -o) [ $# -ge 2 ] || usage; out=$2; shift 2 ;;
    --title) [ $# -ge 2 ] || usage; title=$2; shift 2 ;;
    --names) [ $# -ge 2 ] || usage; names=$2; shift 2 ;;
    -h|--help) usage 0 ;;
    -*) echo "plot-log: unknown option '$1'" >&2; usage ;;
    *) logs+=("$1"); shift ;;
    esac
done
[ -n "$out" ] && [ ${#logs[@]} -gt 0 ] || usage
if [ -e "$out" ] && [ ! -f "$out" ]; then
    echo "plot-log: -o '$out' exists and is not a regular file (give a file name)" >&2; exit 2
fi
[ -d "$(dirname -- "$out")" ] || { echo "plot-log: -o '$out': the directory '$(dirname -- "$out")' does not exist" >&2; exit 2; }
[ -z "$names" ] || [ "$(awk -F, '{print NF}' <<< "$names")" -eq ${#logs[@]} ] ||
    { echo "plot-log: --names gives $(awk -F, '{print NF}' <<< "$names") names for ${#logs[@]} logs" >&2; exit 2; }
command -v gnuplot > /dev/null || { echo "plot-log: gnuplot missing (make deps installs gnuplot-nox)" >&2; exit 2; }
IFS=, read -r -a label <<< "$names"
colours=('#1f77b4' '#d62728' '#2ca02c' '#9467bd' '#ff7f0e' '#8c564b' '#e377c2' '#17becf')
plots=
for i in "${!logs[@]}"; do
    f=${logs[$i]}
    [ -r "$f" ] || { echo "plot-log: cannot read '$f'" >&2; exit 2; }
    cols=$(head -n1 "$f" | tr -d '\r' | awk -F, '{ for (i = 1; i <= NF; i++) c[$i] = i;
        if (!("step" in c) || !("loss" in c) || !("val_loss" in c)) exit 1;
        print c["step"], c["loss"], c["val_loss"] }') ||
        { echo "plot-log: '$f': no step, loss and val_loss columns (not a dmuon-train --log file)" >&2; exit 2; }
    read -r cs cl cv <<< "$cols"
    [ "$(wc -l < "$f")" -ge 2 ] || { echo "plot-log: '$f': no rows after the header" >&2; exit 2; }
    name=${label[$i]:-$(basename "$f" .csv)}
    name=${name//\'/}
    k=$((i % ${#colours[@]}))
    lc="lc rgb '${colours[$k]}'"
    plots="$plots${plots:+, }'$f' using $cs:(valid($cl) ? column($cl) : 1/0) with linespoints $lc dt $((i % 5 + 1)) lw 1.5 pt $((i % 7 + 1)) pi 20 ps 0.7 title '$name train'"
    plots="$plots, '$f' using $cs:(valid($cv) ? column($cv) : 1/0) with points $lc pt $((i % 7 + 4)) ps 1.1 title '$name validation'"
done
tmp="$out.tmp.$$"
trap 'rm -f "$tmp"' EXIT
gnuplot <<EOF > /dev/null || { echo "plot-log: gnuplot failed" >&2; exit 3; }
set terminal svg size 900,520 dynamic font "sans,12"
set output '$tmp'
set datafile separator ','
set datafile missing ''
set key top right
set xlabel 'step'
set ylabel 'loss (nats per token)'
set title '${title//\'/}'
set grid
plot $plots
EOF
mv "$tmp" "$out"
trap - EXIT
echo "$out"
