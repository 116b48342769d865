#!/usr/bin/env bash
# make equiv: does dmuon (line D) train the same model as Muon by
# gather-then-replicate (line B)?  Paper §7.5, D.8.  200 steps of the
# default model on the real text, 8 ranks as 4 virtual nodes x 2:
#   D vs B                 next to the control B vs B with another init seed
#   D FSDP vs D HSDP
#   D on 8 ranks vs D on 1 rank (the same global batch and tokens)
# For each pair: is the step-0 loss bit-identical, and the median and
# largest per-step relative loss difference |a − b| / |b|.  Each pair's
# median must be below the control's; the script exits 1 otherwise.  Lines
# A and C run too, for the loss curves of make plots; C next to D is in the
# table as well (the same owners, other collectives), and D vs B once more
# with f32 instead of bf16 gathered parameters (--param-dtype f32: the
# runtime reduces gradients in f32 in every line, so what is left is the
# order of the sums, without bf16 rounding of the weights amplifying it).
# Logs: build/train/equiv/*.csv (make plots draws them); table:
# build/train/equiv.md.
#
#   tools/train-equiv.sh [BIN] [STEPS]
set -euo pipefail
bin=${1:-bin}
steps=${2:-200}
here=$(cd "$(dirname "$0")" && pwd)
source "$here/train-lib.sh"
out=build/train/equiv
mkdir -p "$out"
common=(--steps "$steps" --eval-every 50 -q)

runs=("D-fsdp-s1 8 --line D --seed 1"
      "B-fsdp-s1 8 --line B --seed 1"
      "B-fsdp-s2 8 --line B --seed 2"
      "D-hsdp-s1 8 --line D --seed 1 --sharding hsdp"
      "D-1rank-s1 1 --line D --seed 1"
      "A-fsdp-s1 8 --line A --seed 1"
      "C-fsdp-s1 8 --line C --seed 1"
      "D-f32-s1 8 --line D --seed 1 --param-dtype f32"
      "B-f32-s1 8 --line B --seed 1 --param-dtype f32")
for r in "${runs[@]}"; do
    set -- $r
    name=$1 np=$2; shift 2
    rpn=2; [ "$np" -eq 1 ] && rpn=1
    t0=$(date +%s.%N)
    train_mpirun "$np" --ranks-per-node "$rpn" "${common[@]}" "$@" --log "$out/$name.csv"
    printf '%-12s %d ranks  %6.1f s  final val %s\n' "$name" "$np" \
        "$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { print b - a }')" \
        "$(awk -F, 'END { print $3 }' "$out/$name.csv")"
done

control=$(loss_compare "$out/B-fsdp-s2.csv" "$out/B-fsdp-s1.csv")
cmed=$(echo "$control" | cut -d' ' -f2)
fail=0
table=build/train/equiv.md
{
    echo "| comparison ($steps steps, 8 ranks = 4 nodes x 2) | step-0 loss bit-identical | median rel. diff | max rel. diff | below control |"
    echo "|---|---|---|---|---|"
    row() {   # label A B
        local c; c=$(loss_compare "$out/$2.csv" "$out/$3.csv")
        set -- "$1" $c
        local below=control
        if [ "$1" != "control: B vs B, init seed 2 vs 1" ]; then
            if awk -v a="$3" -v b="$cmed" 'BEGIN { exit !(a < b) }'; then below=yes; else below=NO; fi
        fi
        echo "| $1 | $2 | $3 | $4 | $below |"
    }
    row "D vs B" D-fsdp-s1 B-fsdp-s1
    row "control: B vs B, init seed 2 vs 1" B-fsdp-s2 B-fsdp-s1
    row "D FSDP vs D HSDP" D-fsdp-s1 D-hsdp-s1
    row "D 8 ranks vs D 1 rank" D-fsdp-s1 D-1rank-s1
    row "D vs C" D-fsdp-s1 C-fsdp-s1
    row "D vs B, f32 parameters" D-f32-s1 B-f32-s1
} > "$table"
cat "$table"
grep -q '| NO |' "$table" && fail=1
exit $fail
