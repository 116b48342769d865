#!/usr/bin/env bash
# dmuon-train does not lose the run: every output path is checked before
# step 0 (a missing directory named as such, printed once); SIGTERM to one
# rank of two ends the run on both after the current step, saved to --save
# (exit 143, "interrupted at step N, saved to ..."), and --resume continues
# it bit-identically to an unbroken run; --save-every leaves a checkpoint
# at a multiple of N even when the run is killed outright.
source "$(dirname "$0")/../cli/lib.sh"
bin=$DMUON_BIN
source "$DMUON_ROOT/tools/train-lib.sh"
TR="$bin/dmuon-train"
MODEL=(--layers 2 --dim 32 --heads 4 --kv-heads 2 --ffn 64 --seq 32 --batch 8 -q)
LONG=("${MODEL[@]}" --steps 100000 --eval-every 0)
export TRAIN_TIMEOUT=300
if [ ! -d /usr/share/games/fortunes ]; then
    skip "/usr/share/games/fortunes missing (make deps installs fortunes)"
    finish; exit
fi

# --- outputs checked before step 0 ------------------------------------------
run train_mpirun 2 "${MODEL[@]}" --steps 5 --save "$T_TMP/no/such/ck" --log "$T_TMP/l.csv"
check_rc 2 "--save into a missing directory"
check_err "^dmuon-train: error: --save '$T_TMP/no/such/ck': the directory '$T_TMP/no/such' does not exist" \
    "the missing directory is named"
check_eq "$(grep -c 'does not exist' "$T_TMP/err")" 1 "printed once, not once per rank"
check_no_file "$T_TMP/l.csv" "nothing ran: no log written"
run train_mpirun 2 "${MODEL[@]}" --steps 5 --export "$T_TMP/no/w.safetensors"
check_rc 2 "--export into a missing directory"
check_err "--export '.*': the directory '$T_TMP/no' does not exist" "--export's directory named"
run train_mpirun 2 "${MODEL[@]}" --steps 5 --log "$T_TMP/no/l.csv"
check_rc 2 "--log into a missing directory"
check_err "--log '.*': the directory '$T_TMP/no' does not exist" "--log's directory named"
run train_mpirun 2 "${MODEL[@]}" --steps 5 --save-every 2
check_rc 2 "--save-every without --save"
mkdir -p "$T_TMP/notck" && echo notes > "$T_TMP/notck/notes.txt"
run train_mpirun 2 "${MODEL[@]}" --steps 5 --save "$T_TMP/notck" --log "$T_TMP/l2.csv"
check_rc 2 "--save naming a directory that is not a checkpoint"
check_err "exists and is not a checkpoint" "says why, before step 0"
check_no_file "$T_TMP/l2.csv" "nothing ran for it"
[ -f "$T_TMP/notck/notes.txt" ] && ok || bad "the directory was left as it was"

# --- SIGTERM to one rank: both stop after the same step and save ---------------
# The rank processes are mpirun's children (Open MPI's local launch); a
# scheduler's pre-emption signal reaches each rank, here only one gets it.
OPENBLAS_NUM_THREADS=1 mpirun -np 2 --oversubscribe --bind-to none --mca mpi_yield_when_idle 1 \
    "$TR" "${LONG[@]}" --save "$T_TMP/ck" --log "$T_TMP/int.csv" \
    > "$T_TMP/out" 2> "$T_TMP/err" &
mp=$!
for _ in $(seq 600); do
    [ -f "$T_TMP/int.csv" ] && [ "$(wc -l < "$T_TMP/int.csv")" -ge 4 ] && break
    sleep 0.1
done
rank=$(pgrep -P "$mp" | head -n1)
if [ -n "$rank" ]; then kill -TERM "$rank"; ok; else bad "no rank process of mpirun $mp found"; fi
wait "$mp"; RC=$?
check_rc 143 "interrupted by SIGTERM: exit 128+15"
check_err '^dmuon-train: interrupted at step [0-9]+, saved to ' "says where it saved"
n=$(sed -n 's/^dmuon-train: interrupted at step \([0-9]*\), saved to .*/\1/p' "$T_TMP/err")
n=${n:-0}
check_eq "$(grep -o '"step": [0-9]*' "$T_TMP/ck/manifest.json" 2> /dev/null)" "\"step\": $n" \
    "the checkpoint is at the step named"
check_eq "$(tail -n1 "$T_TMP/int.csv" | cut -d, -f1)" "$((n - 1))" "the log ends with the last step run"
ls "$T_TMP"/ck.tmp.* > /dev/null 2>&1 && bad "a temporary checkpoint directory was left" || ok

# --- --resume continues bit-identically ---------------------------------------
stop=$((n + 3))
run train_mpirun 2 "${LONG[@]}" --resume "$T_TMP/ck" --stop-at "$stop" --log "$T_TMP/res.csv"
check_rc 0 "resume the interrupted run to step $stop"
run train_mpirun 2 "${LONG[@]}" --stop-at "$stop" --log "$T_TMP/straight.csv"
check_rc 0 "the same run unbroken to step $stop"
keep="NR > 1 && \$1 >= $n && \$2 != \"\" { print \$1, \$2 }"
awk -F, "$keep" "$T_TMP/straight.csv" > "$T_TMP/s.txt"
awk -F, "$keep" "$T_TMP/res.csv" > "$T_TMP/r.txt"
check_eq "$(wc -l < "$T_TMP/r.txt")" 3 "resumed log: steps $n..$((stop - 1))"
check_cmp "$T_TMP/s.txt" "$T_TMP/r.txt" "resumed losses bit-identical to the unbroken run"

# --- --save-every: a checkpoint survives SIGKILL --------------------------------
"$TR" "${LONG[@]}" --save "$T_TMP/pk" --save-every 3 --log "$T_TMP/pk.csv" \
    > /dev/null 2> "$T_TMP/err" &
p=$!
for _ in $(seq 600); do
    [ -f "$T_TMP/pk/manifest.json" ] && [ "$(wc -l < "$T_TMP/pk.csv")" -ge 8 ] && break
    sleep 0.1
done
kill -KILL "$p"; wait "$p" 2> /dev/null
step=$(grep -o '"step": [0-9]*' "$T_TMP/pk/manifest.json" 2> /dev/null | grep -o '[0-9]*$')
if [ -n "$step" ] && [ "$step" -gt 0 ] && [ $((step % 3)) -eq 0 ]; then ok; else
    bad "--save-every 3: checkpoint at step '${step:-none}', expected a positive multiple of 3"; fi
run "$TR" "${LONG[@]}" --resume "$T_TMP/pk" --stop-at $((step + 1))
check_rc 0 "the periodic checkpoint resumes"
finish
