#!/usr/bin/env bash
# A failed step changes nothing, on every rank alike.  One rank (the last)
# injects, at the second step: a finite gradient (2.5e38) whose Nesterov
# direction overflows binary32 — only that matrix's owner sees it on lines
# C/D, every rank on line B, an AdamW square on line A; a NaN gradient; a
# stall of twice the deadline before the step.  rt_check then checks on
# every rank: the same return code everywhere, the state digest (masters,
# momenta, moments, the parameter copies the gathers read, the step count)
# byte-identical to before the step, the norm reported as NaN, a retry
# without a micro-batch refused; after the numeric faults the next steps
# match the reference bit for bit (the failed step's gradients dropped).
# Last, a save whose fsync on one rank (rank 1 or the last) takes 4 deadlines: every rank returns
# DMUON_ETIMEOUT (the waiting ones within 3 deadlines), no checkpoint or
# temporary directory is left, and the runtime refuses further collectives.
source "$(dirname "$0")/../cli/lib.sh"
R="$DMUON_BUILD/tests/mpi/rt_check"
MPIRUN=(timeout 300 mpirun --oversubscribe --bind-to none --mca mpi_yield_when_idle 1)

case_ok() {  # np description args...
    local np=$1 what=$2; shift 2
    RT_CHECK_VERBOSE=1 run "${MPIRUN[@]}" -x RT_CHECK_VERBOSE -np "$np" "$R" "$@"
    check_rc 0 "$what"
    check_out '^[0-9]+ passed, 0 failed' "$what: summary"
}
for args in "--line D --zero 3" "--line D --zero 2" "--line D --sharding hsdp" "--line C" \
            "--line C --sharding hsdp" "--line B" "--line A"; do
    # shellcheck disable=SC2086
    case_ok 4 "overflowing direction on one rank, $args" --fault overflow $args
    check_out '^ok   overflow: masters, momenta, moments, weights and the step count are byte-identical' \
        "$args: the overflow check ran"
    check_out "^ok   overflow: the step fails with enumeric naming model.layers.0.self_attn.q_proj.weight" \
        "$args: every rank names the parameter"
done
case_ok 8 "overflowing direction, 8 ranks, HSDP line B" --fault overflow --line B --sharding hsdp
case_ok 4 "NaN gradient on one rank, line D" --fault nan --line D
# options or learning rates that differ on one rank: refused on every rank
case_ok 4 "rank-differing options and learning rate, line D" --fault args --line D
check_out '^ok   args: another optim.momentum on rank 3 is refused at create' "args: momentum"
check_out '^ok   args: another prefetch on rank 3 is refused at create' "args: prefetch"
check_out '^ok   args: another adamw_lr on rank 3 fails the step' "args: learning rate"
check_out '^ok   args: the refused step changed nothing' "args: nothing changed"
# a rank that reaches create late: every rank DMUON_ETIMEOUT, no wait past the deadline
case_ok 3 "a rank reaches create two deadlines late" --fault late-create --fault-rank 1 \
    --line D --deadline-ms 1000 --ranks-per-node 1
check_out '^ok   late create: create returns DMUON_ETIMEOUT on every rank' "late create: timeout"
check_out '^ok   late create: the waiting ranks returned within two deadlines' "late create: bounded"
# a rank that reaches free late: the others return within the deadline
# (one node of 3, so that the pool's free is a collective over all of them)
case_ok 3 "a rank reaches free two deadlines late" --fault late-free --fault-rank 1 \
    --line D --deadline-ms 1000 --ranks-per-node 3
check_out '^ok   late free: the waiting ranks returned from free within two deadlines' "late free: bounded"
case_ok 4 "NaN gradient on one rank, line B" --fault nan --line B

# a stall: every rank returns DMUON_ETIMEOUT, state unchanged; the runtime
# is unusable afterwards (a retry is DMUON_ECOMM on every rank)
start=$(date +%s)
case_ok 4 "a rank stalled before the step, line D" --fault stall --line D --deadline-ms 1500
check_out '^ok   stall: every rank returns the same code' "stall: the same code on every rank"
check_out '^ok   stall: the abandoned calls left rank 0' "stall: the stack check ran"
took=$(( $(date +%s) - start ))
[ "$took" -lt 60 ] && ok || bad "stall: took ${took}s"

# the slow rank is rank 1 and the last, on 2 and on 4 ranks: the others'
# abandoned rounds must never be matched by the late rank's later ones
for np_rank in "2 1" "4 1" "4 3"; do
    set -- $np_rank
    start=$(date +%s)
    case_ok "$1" "a slow fsync on rank $2 of $1 during save" --fault slow-save --fault-rank "$2" \
        --line D --deadline-ms 1000 --save "$T_TMP/ck"
    check_out '^ok   slow fsync: save returns DMUON_ETIMEOUT on every rank' "slow fsync $1/$2: the check ran"
    check_out '^ok   slow fsync: rank 0 returned after' "slow fsync $1/$2: the time check ran"
    check_out '^ok   slow fsync: the abandoned calls left rank 0' "slow fsync $1/$2: the stack check ran"
    check_eq "$(ls -d "$T_TMP"/ck* 2>/dev/null | wc -l)" 0 \
        "slow fsync $1/$2: no checkpoint or temporary directory left"
    took=$(( $(date +%s) - start ))
    [ "$took" -lt 60 ] && ok || bad "slow fsync $1/$2: took ${took}s"
done
finish
