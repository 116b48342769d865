#!/usr/bin/env bash
# The training runtime against the single-process reference (rt_check):
# FSDP ZeRO-2 / ZeRO-3 and HSDP on 4 ranks (2 virtual nodes x 2) and 8 ranks
# (4 x 2), the four lines, recomputation, F32 parameters, merged units, the
# shape-dependent update scale (the model holds transposed and strided
# gate/up expert tensors), and the error paths.  Every run compares every
# gathered parameter of every step with the reference bit for bit; lines B,
# C and D must end with the same weights, and a second run must repeat the
# first bit for bit.
source "$(dirname "$0")/../cli/lib.sh"
R="$DMUON_BUILD/tests/mpi/rt_check"
MPIRUN=(timeout 300 mpirun --oversubscribe --bind-to none --mca mpi_yield_when_idle 1)

digest() { sed -nE 's/^weights digest ([0-9a-f]+)$/\1/p' "$T_TMP/out"; }
export RT_CHECK_VERBOSE=1   # every check's line, for the check_out below
case_ok() {  # np description args...
    local np=$1 what=$2; shift 2
    run "${MPIRUN[@]}" -x RT_CHECK_VERBOSE -np "$np" "$R" "$@"
    check_rc 0 "$what"
    check_out '^[0-9]+ passed, 0 failed' "$what: summary"
}

case_ok 4 "D, FSDP ZeRO-3, 4 ranks" --line D --zero 3
d_fsdp=$(digest)
case_ok 4 "D, FSDP ZeRO-3, 4 ranks, again" --line D --zero 3
check_eq "$(digest)" "$d_fsdp" "two runs give bit-identical weights"
case_ok 4 "D, FSDP ZeRO-2, 4 ranks" --line D --zero 2
check_eq "$(digest)" "$d_fsdp" "ZeRO-2 and ZeRO-3 give the same weights"
case_ok 4 "D, HSDP, 4 ranks" --line D --sharding hsdp
check_eq "$(digest)" "$d_fsdp" "HSDP and FSDP give the same weights"
case_ok 4 "C, FSDP, 4 ranks" --line C
check_eq "$(digest)" "$d_fsdp" "line C gives line D's weights"
case_ok 4 "B, FSDP, 4 ranks" --line B
check_eq "$(digest)" "$d_fsdp" "line B (gather-then-replicate) gives line D's weights"
# owner parts: owner windows or per-layer blocks of the working space (the
# layout picks the smaller pool; both forced here) move the same bytes
for parts in persistent per-layer; do
    case_ok 4 "D, FSDP ZeRO-3, owner parts $parts" --line D --owner-parts $parts
    check_eq "$(digest)" "$d_fsdp" "owner parts $parts give the same weights"
    case_ok 4 "D, FSDP ZeRO-2, owner parts $parts" --line D --zero 2 --owner-parts $parts
    check_eq "$(digest)" "$d_fsdp" "ZeRO-2, owner parts $parts give the same weights"
    case_ok 4 "D, HSDP, owner parts $parts" --line D --sharding hsdp --owner-parts $parts
    check_eq "$(digest)" "$d_fsdp" "HSDP, owner parts $parts give the same weights"
    case_ok 4 "C, FSDP, owner parts $parts" --line C --owner-parts $parts
    check_eq "$(digest)" "$d_fsdp" "line C, owner parts $parts give the same weights"
done
case_ok 4 "A, FSDP, 4 ranks" --line A
if [ "$(digest)" != "$d_fsdp" ]; then ok; else bad "line A (AdamW) must differ from Muon"; fi
case_ok 4 "C, HSDP, 4 ranks" --line C --sharding hsdp
case_ok 8 "D, FSDP ZeRO-3, 8 ranks" --line D --zero 3
d8=$(digest)
case_ok 8 "D, HSDP ZeRO-2, 8 ranks" --line D --sharding hsdp --zero 2
check_eq "$(digest)" "$d8" "8 ranks: HSDP and FSDP give the same weights"
case_ok 8 "B, HSDP, 8 ranks" --line B --sharding hsdp
check_eq "$(digest)" "$d8" "8 ranks: line B gives line D's weights"
case_ok 4 "D, update scale sqrt(max(1, m/n)) (transposed and strided m x n matter)" --line D --shape-scale
d_shape=$(digest)
if [ "$d_shape" != "$d_fsdp" ]; then ok; else bad "the shape scale must change the weights"; fi
case_ok 4 "B, update scale sqrt(max(1, m/n))" --line B --shape-scale
check_eq "$(digest)" "$d_shape" "line B gives line D's weights with the shape scale"
case_ok 8 "D, recomputation, F32 parameters, 8 ranks" --line D --recompute --dtype f32
for parts in persistent per-layer; do
    case_ok 8 "D, recomputation, F32, 8 ranks, owner parts $parts" --line D --recompute \
        --dtype f32 --owner-parts $parts
done
case_ok 4 "D, merged small units" --line D --small-unit-bytes 16777216
# error paths; a refused hook call (out of the recorded order) changes
# nothing: the correct order then runs and matches the reference
case_ok 4 "D, error paths (registration, hook order, NaN gradient)" --line D --errors
check_out '^ok   pre_backward of a block before the root.s is refused' "ZeRO-3: the refused pre_backward ran"
check_out '^ok   pre_forward of a block after the forward is refused' "ZeRO-3: the refused pre_forward ran"
check_out '^ok   a NaN learning rate on rank 3 is refused on every rank' "a NaN learning rate on one rank"
case_ok 4 "D ZeRO-2, error paths" --line D --zero 2 --errors
check_out '^ok   pre_backward of a block before the root.s is refused' "ZeRO-2: the refused pre_backward ran"

case_ok 4 "D, global-norm clipping (1e-5 relative: the norm's summation order differs)" \
    --line D --clip 0.05 --dtype f32
case_ok 4 "B, global-norm clipping" --line B --clip 0.05 --dtype f32
case_ok 4 "D, all-zero gradients: only weight decay moves the weights" --line D --zero-grads

# a plan for other nodes than the run's
run "${MPIRUN[@]}" -np 4 "$R" --mismatch
check_rc 0 "ranks per node differing from the plan's: a clear error on every rank"
check_out '^1 passed, 0 failed' "mismatch summary"

# a stalled rank: the others fail within the deadline, naming the layer
for line in D C; do
    start=$(date +%s)
    run "${MPIRUN[@]}" --enable-recovery -np 4 "$R" --line $line --stall 2 --deadline-ms 1500
    took=$(( $(date +%s) - start ))
    # (mpirun --enable-recovery may exit 0 when ranks fail: the run must not
    # have reached its summary, and must not have hit the outer timeout)
    if [ "$RC" -ne 124 ] && ! grep -q ' passed, ' "$T_TMP/out"; then ok; else
        bad "line $line, stalled rank: exit $RC, the run finished"; fi
    n=$(grep -E '^rank [013]: FAIL .*within the 1500 ms deadline' "$T_TMP/err" | wc -l)
    check_eq "$n" 3 "line $line: each of the 3 other ranks reports the deadline"
    [ "$took" -lt 60 ] && ok || bad "line $line, stalled rank: took ${took}s"
done
finish
