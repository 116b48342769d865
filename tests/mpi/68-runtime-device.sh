#!/usr/bin/env bash
# The runtime's memory is reached only through its device table
# (libcore/runtime/elem.h), on the CPU: rt_check --check-table runs device
# cpu with the checking table, which hands the runtime disguised addresses
# (real + 2^62, outside every mapping) for the pool, the optimizer state,
# the step's scratch and the FP32 views, so any load or store the runtime
# made itself, past the table, would crash the run.  Each case runs plain
# and with the checking table: both must pass every check against the
# reference and give bit-identical weights; the checkpoint save, load and
# export (host staging), the failed steps' state digests, clipping and the
# error paths run under it too.  Also the backend/device pairs refused at
# create.  The CUDA table itself cannot run here (no GPU): tests/gpu/run.sh
# runs the same program with --backend nccl --device cuda.
source "$(dirname "$0")/../cli/lib.sh"
R="$DMUON_BUILD/tests/mpi/rt_check"
MPIRUN=(timeout 300 mpirun --oversubscribe --bind-to none --mca mpi_yield_when_idle 1)
export RT_CHECK_VERBOSE=1

digest() { sed -nE 's/^weights digest ([0-9a-f]+)$/\1/p' "$T_TMP/out"; }
calls() { sed -nE 's/^checking table: ([0-9]+) calls on rank 0$/\1/p' "$T_TMP/out"; }

pair() {  # np description args...: plain, then the checking table; same weights
    local np=$1 what=$2; shift 2
    run "${MPIRUN[@]}" -x RT_CHECK_VERBOSE -np "$np" "$R" "$@"
    check_rc 0 "$what (host table)"
    check_out '^[0-9]+ passed, 0 failed' "$what (host table): summary"
    local plain
    plain=$(digest)
    run "${MPIRUN[@]}" -x RT_CHECK_VERBOSE -np "$np" "$R" "$@" --check-table
    check_rc 0 "$what (checking table)"
    check_out '^[0-9]+ passed, 0 failed' "$what (checking table): summary"
    check_eq "$(digest)" "$plain" "$what: the checking table gives the host table's weights"
    local n
    n=$(calls)
    if [ -n "$n" ] && [ "$n" -gt 0 ]; then ok; else bad "$what: the checking table was used ($n calls)"; fi
}

pair 4 "D, FSDP ZeRO-3" --line D --zero 3
pair 4 "D, FSDP ZeRO-2" --line D --zero 2
pair 4 "D, HSDP" --line D --sharding hsdp
pair 4 "C, FSDP ZeRO-2" --line C --zero 2
pair 4 "C, HSDP" --line C --sharding hsdp
pair 4 "B, FSDP (directions gathered in the pool)" --line B
pair 4 "B, HSDP" --line B --sharding hsdp
pair 4 "A, F32 parameters" --line A --dtype f32
pair 8 "D, HSDP 4 x 2, recomputation" --line D --sharding hsdp --recompute
pair 4 "D, shape scale (strided and transposed matrices)" --line D --shape-scale
pair 4 "D, global-norm clipping" --line D --clip 0.05
pair 4 "D, error paths (NaN gradient, NaN learning rate, refused hooks)" --line D --errors
check_out '^ok   device cuda on the MPI backend.s host pool is refused' "device cuda with backend mpi refused"
check_out '^ok   backend nccl with device cpu is refused' "backend nccl with device cpu refused"
check_out '^ok   a NCCL communicator and a unique id together are refused' "both NCCL handles refused"
check_out '^ok   a NCCL unique id with backend mpi is refused' "a NCCL handle with backend mpi refused"
pair 4 "D, an overflowing direction on one rank (state digest through the table)" --line D --fault overflow
check_out '^ok   overflow: masters, momenta, moments, weights and the step count are byte-identical' \
    "overflow under the checking table: the state digest is unchanged"
pair 4 "C HSDP, NaN gradient on one rank" --line C --sharding hsdp --fault nan


# checkpoints through the host staging: saved under the checking table,
# loaded by a plain run and the other way round; exports byte-identical
G=(--global-grads)
run "${MPIRUN[@]}" -np 4 "$R" "${G[@]}" --steps 2 --save "$T_TMP/ck_plain" --export "$T_TMP/e_plain.st"
check_rc 0 "plain: 2 steps, saved and exported"
run "${MPIRUN[@]}" -np 4 "$R" "${G[@]}" --steps 2 --save "$T_TMP/ck_check" --export "$T_TMP/e_check.st" \
    --check-table
check_rc 0 "checking table: 2 steps, saved and exported"
if cmp -s "$T_TMP/e_plain.st" "$T_TMP/e_check.st"; then ok; else bad "the exports are byte-identical"; fi
for f in "$T_TMP"/ck_plain/*.safetensors; do
    cmp -s "$f" "$T_TMP/ck_check/$(basename "$f")" || { bad "checkpoint file $(basename "$f") differs"; continue; }
    ok
done
run "${MPIRUN[@]}" -np 4 "$R" "${G[@]}" --load "$T_TMP/ck_plain" --start 2 --steps 2
check_rc 0 "plain load of the plain checkpoint, 2 more steps against the reference"
d_plain=$(digest)
run "${MPIRUN[@]}" -np 4 "$R" "${G[@]}" --load "$T_TMP/ck_check" --start 2 --steps 2 --check-table
check_rc 0 "checking-table load of the checking-table checkpoint, 2 more steps"
check_eq "$(digest)" "$d_plain" "resumed under the checking table: the plain run's weights"
run "${MPIRUN[@]}" -np 2 "$R" "${G[@]}" --load "$T_TMP/ck_check" --start 2 --steps 1 --check-table
check_rc 0 "a 4-rank checkpoint resumed on 2 ranks under the checking table"
finish
