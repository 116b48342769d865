#!/usr/bin/env bash
# tests/cluster/train.sh — the trainer's lines across namespace hosts
# (cluster.sh): dmuon-train on R hosts x K ranks over TCP, lines A B C D
# under FSDP ZeRO-3 and HSDP, in interleaved rounds (round 1: every
# configuration's A B C D, then round 2 …), the same model, tokens and
# seeds in every run; then the tables and checks of train-report.py.
#
#   tests/cluster/train.sh [options]
#     --hosts R        hosts (default 4)
#     --ranks K        ranks per host (default 2)
#     --rate RATE      tc token-bucket rate on every host link (e.g. 2gbit; default none)
#     --rounds N       interleaved rounds (default 3)
#     --steps S        steps per run (default 8)
#     --warm W         steps of each run left out of the medians (default 2)
#     --lines "L ..."  lines, in the order of a round (default "A B C D")
#     --configs "C .." fsdp-z2, fsdp-z3, hsdp (ZeRO-3) (default "fsdp-z3 hsdp")
#     --model "ARGS"   dmuon-train model flags (default "--layers 4 --dim 256")
#     --batch B        sequences per step over all ranks (default 2 x R x K)
#     --bin DIR        the built tools (default bin)
#     --out DIR        output folder (default build/cluster-train); its logs/, run.txt
#                      and cluster-train.* are replaced, nothing else is touched
#     --no-control     no control run (see below); the equivalence check then only
#                      reports the differences
# Environment: CLUSTER_TRAIN_TIMEOUT (seconds per run, default 600),
# DMUON_DEADLINE_MS (default 60000).
#
# Besides the rounds, each configuration has one control run in round 1: line
# D with another initial-value seed (--seed 2).  The equivalence tolerance is
# the trainer's (make equiv, tests/mpi/70-train.sh): two lines train the same
# model when their median per-step relative loss difference is below that of
# the same line with another seed.
#
# Writes to OUT: LOGS/<config>-<line>-r<round>.csv (dmuon-train --log) and
# .ranks.csv (--rank-log), cluster-train.md (tables), cluster-train.json,
# cluster-train.dat and cluster-train.svg (gnuplot), run.txt (commands, load).
# Exit: 0 when every check passes (the performance targets are reported, not
# checked), 1 when a check fails, 2 on bad usage or a machine without
# namespaces, else the failing run's status.  Every namespace goes with
# cluster.sh, also on SIGINT/SIGTERM.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
prog=train.sh
die_usage() { echo "$prog: error: $*" >&2; exit 2; }

# ---- inside the head namespace: the rounds ------------------------------------
if [ "${1:-}" = --inside ]; then
    # every setting comes from the environment of the outer call (CT_*)
    read -r -a model <<< "$CT_MODEL"
    mpirun_train() {   # LOGNAME ARGS...
        local name=$1; shift
        local cmd=(mpirun --bind-to none --mca mpi_yield_when_idle 1 -np "$DMUON_CLUSTER_NP"
                   --host "$DMUON_CLUSTER_HOSTS" "$CT_BIN/dmuon-train" "${model[@]}"
                   --batch "$CT_BATCH" --steps "$CT_STEPS" --warmup 2 --eval-every 0
                   --val-windows 16 -q "$@" --log "$CT_LOGS/$name.csv"
                   --rank-log "$CT_LOGS/$name.ranks.csv")
        echo "${cmd[*]}" >> "$CT_OUT/run.txt"
        local t0 rc=0
        t0=$(date +%s.%N)
        timeout "$CT_TIMEOUT" "${cmd[@]}" || rc=$?
        printf '%s: %-14s %6.1f s  load %s\n' "$prog" "$name" \
            "$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { print b - a }')" \
            "$(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$CT_OUT/run.txt" >&2
        [ "$rc" -eq 0 ] || { echo "$prog: error: run $name exited $rc" >&2; exit "$rc"; }
    }
    cfg_flags() {
        case "$1" in
        fsdp-z2) echo "--sharding fsdp --zero 2" ;;
        fsdp-z3) echo "--sharding fsdp --zero 3" ;;
        hsdp) echo "--sharding hsdp --zero 3" ;;
        esac
    }
    for r in $(seq 1 "$CT_ROUNDS"); do
        for c in $CT_CONFIGS; do
            for l in $CT_LINES; do
                mpirun_train "$c-$l-r$r" $(cfg_flags "$c") --line "$l" --seed 1
            done
            if [ "$r" = 1 ] && [ "$CT_CONTROL" = 1 ]; then
                mpirun_train "$c-D-seed2" $(cfg_flags "$c") --line D --seed 2
            fi
        done
    done
    exit 0
fi

# ---- outside: flags, the cluster, the report ----------------------------------
hosts=4 ranks=2 rate="" rounds=3 steps=8 warm=2 lines="A B C D" configs="fsdp-z3 hsdp"
model="--layers 4 --dim 256" batch="" bin=$root/bin out=$root/build/cluster-train control=1
while [ $# -gt 0 ]; do
    case "$1" in
    --hosts|--ranks|--rate|--rounds|--steps|--warm|--lines|--configs|--model|--batch|--bin|--out)
        [ $# -ge 2 ] || die_usage "$1 needs a value"
        # only --model's value is itself flags
        [ "$1" = --model ] || [[ "$2" != --* ]] || die_usage "$1 needs a value (got the option '$2')"
        v=$2; f=${1#--}; shift 2
        case "$f" in
        hosts) hosts=$v ;; ranks) ranks=$v ;; rate) rate=$v ;; rounds) rounds=$v ;;
        steps) steps=$v ;; warm) warm=$v ;; lines) lines=$v ;; configs) configs=$v ;;
        model) model=$v ;; batch) batch=$v ;; bin) bin=$v ;; out) out=$v ;;
        esac ;;
    --no-control) control=0; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed -e '/^set -euo/d' -e 's/^# \{0,1\}//'; exit 0 ;;
    *) die_usage "unknown option '$1' (see --help)" ;;
    esac
done
# decimal without leading zeros (bash reads 010 as octal), at most 6 digits
for v in hosts ranks rounds steps; do
    [[ "${!v}" =~ ^[1-9][0-9]{0,5}$ ]] || die_usage "--$v '${!v}': expected a positive integer"
done
[[ "$warm" =~ ^(0|[1-9][0-9]{0,5})$ ]] && [ "$warm" -lt "$steps" ] ||
    die_usage "--warm '$warm': expected an integer below --steps $steps"
[[ "${CLUSTER_TRAIN_TIMEOUT:-600}" =~ ^[1-9][0-9]{0,6}$ ]] ||
    die_usage "CLUSTER_TRAIN_TIMEOUT '${CLUSTER_TRAIN_TIMEOUT:-}': expected seconds, a positive integer"
seen=" "
for l in $lines; do
    case "$l" in A|B|C|D) ;; *) die_usage "--lines: '$l' is not a line (expected A, B, C or D)" ;; esac
    [[ "$seen" != *" $l "* ]] || die_usage "--lines: '$l' is given twice"
    seen="$seen$l "
done
[ -n "$lines" ] || die_usage "--lines: no line given"
seen=" "
for c in $configs; do
    case "$c" in fsdp-z2|fsdp-z3|hsdp) ;;
    *) die_usage "--configs: '$c' is not a configuration (expected fsdp-z2, fsdp-z3 or hsdp)" ;; esac
    [[ "$seen" != *" $c "* ]] || die_usage "--configs: '$c' is given twice"
    seen="$seen$c "
done
[ -n "$configs" ] || die_usage "--configs: no configuration given"
# the control run serves the equivalence check: B or C against D, or D of
# one configuration against another's
if [ "$control" = 1 ]; then
    compared=0
    if [[ " $lines " == *" D "* ]]; then
        [[ " $lines " == *" B "* || " $lines " == *" C "* ]] && compared=1
        [ "$(wc -w <<< "$configs")" -gt 1 ] && compared=1
    fi
    [ "$compared" = 1 ] || { control=0; echo "$prog: nothing is compared with line D: no control run" >&2; }
fi
np=$((hosts * ranks))
batch=${batch:-$((2 * np))}
[[ "$batch" =~ ^[1-9][0-9]{0,8}$ ]] && [ "$batch" -ge "$np" ] && [ $((batch % np)) -eq 0 ] ||
    die_usage "--batch '$batch': expected a positive multiple of the $np ranks"
[ -x "$bin/dmuon-train" ] || die_usage "--bin '$bin': no dmuon-train there (run make first)"
# the model flags, by dmuon-train itself (it writes the model's config.json and exits)
cfg=$(mktemp)
read -r -a model_args <<< "$model"
if ! why=$("$bin/dmuon-train" "${model_args[@]}" --write-config "$cfg" 2>&1 > /dev/null); then
    rm -f "$cfg"
    die_usage "--model '$model': $(head -n1 <<< "$why")"
fi
rm -f "$cfg"
command -v python3 > /dev/null || die_usage "needs python3 for the report (make deps installs it)"
# the cluster's own flags (host and rank counts, rate), before anything is removed
"$here/cluster.sh" --validate --hosts "$hosts" --ranks "$ranks" ${rate:+--rate "$rate"} || exit 2
"$here/cluster.sh" --check > /dev/null || exit 2

bin=$(cd "$bin" && pwd)
[ ! -e "$out" ] || [ -d "$out" ] || die_usage "--out '$out': exists and is not a folder"
mkdir -p "$out" 2> /dev/null && [ -w "$out" ] || die_usage "--out '$out': cannot create or write this folder"
out=$(cd "$out" && pwd)
rm -rf "$out/logs" "$out"/cluster-train.* "$out/run.txt"
mkdir -p "$out/logs" 2> /dev/null || die_usage "--out '$out': cannot create $out/logs"
{
    echo "# $(date -u '+%Y-%m-%d %H:%M:%S UTC'), $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "# $prog --hosts $hosts --ranks $ranks ${rate:+--rate $rate }--rounds $rounds --steps $steps --warm $warm --lines '$lines' --configs '$configs' --model '$model' --batch $batch"
    # the library's settings from the environment, which the runs inherit
    env | sed -n 's/^\(DMUON_[A-Z_]*=\|OMPI_MCA_[a-z_]*=\)/# environment: \1/p' | sort
} > "$out/run.txt"

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
export DMUON_DEADLINE_MS=${DMUON_DEADLINE_MS:-60000}
unset DMUON_RANKS_PER_NODE
export CT_BIN=$bin CT_OUT=$out CT_LOGS=$out/logs CT_MODEL=$model CT_BATCH=$batch CT_STEPS=$steps
export CT_ROUNDS=$rounds CT_CONFIGS=$configs CT_LINES=$lines CT_CONTROL=$control
export CT_TIMEOUT=${CLUSTER_TRAIN_TIMEOUT:-600}
n_of() { [ "$1" = 1 ] && echo "$1 $2" || echo "$1 $2s"; }   # "1 round", "3 rounds"
echo "$prog: $(n_of "$hosts" host) x $(n_of "$ranks" rank)${rate:+, $rate per link}: lines $lines; $configs; $(n_of "$rounds" round) of $(n_of "$steps" step); model $model, batch $batch" >&2

# cluster.sh removes its namespaces on any exit; a signal to this script is
# passed on to it as SIGTERM (a background job of a script ignores SIGINT,
# so Ctrl-C reaches cluster.sh only this way), and the report is not written
child=""
on_signal() {
    trap - INT TERM HUP
    [ -n "$child" ] && kill -TERM "$child" 2> /dev/null
    wait "$child" 2> /dev/null || true
    echo "# interrupted $(date -u '+%H:%M:%S UTC') (exit $1): the runs are incomplete, no report" >> "$out/run.txt"
    echo "$prog: interrupted; $out holds the logs so far and no report" >&2
    exit "$1"
}
trap 'on_signal 130' INT
trap 'on_signal 143' TERM
trap 'on_signal 129' HUP
"$here/cluster.sh" --hosts "$hosts" --ranks "$ranks" ${rate:+--rate "$rate"} -- \
    bash "$here/train.sh" --inside &
child=$!
rc=0
wait "$child" || rc=$?
child=""
trap - INT TERM HUP
[ "$rc" -eq 0 ] || exit "$rc"
echo "# finished $(date -u '+%H:%M:%S UTC'), load average $(cut -d' ' -f1-3 /proc/loadavg)" >> "$out/run.txt"

rrc=0
python3 "$here/train-report.py" --logs "$out/logs" --out "$out" --hosts "$hosts" --ranks "$ranks" \
    --rate "${rate:-none}" --rounds "$rounds" --steps "$steps" --warm "$warm" --lines "$lines" \
    --configs "$configs" --model "$model" --batch "$batch" --run-info "$out/run.txt" || rrc=$?
[ "$rrc" -le 1 ] || exit "$rrc"
if command -v gnuplot > /dev/null; then
    gnuplot "$out/cluster-train.gp" || { echo "$prog: error: gnuplot failed" >&2; exit 3; }
    echo "$out/cluster-train.svg"
else
    echo "$prog: gnuplot missing (make deps installs gnuplot-nox): no plot" >&2
fi
exit "$rrc"
