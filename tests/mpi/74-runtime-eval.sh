#!/usr/bin/env bash
# Forward-only passes and abandoned micro-batches (dmuon_rt_discard), and
# ranks calling the hooks in different orders before the first step.
#  - rt_check --eval: before every training micro-batch a forward-only pass
#    (the root bracket around the blocks) ended by dmuon_rt_discard; before
#    the first step (while the hooks are recorded) and after it, the step's
#    first micro-batch is preceded by a pass that also begins its backward
#    (gradients written and reduced) and has a hook refused, then is
#    discarded.  Every gathered value must equal the reference bit for bit
#    and the weights digest must equal a run without these passes; a step
#    after an evaluation pass alone, or after a discarded backward, is
#    refused on every rank.
#  - rt_check --fault order: in the first micro-batch one rank runs two
#    blocks of the same size in another order (lines A/B/C exchange equal
#    sizes, matched by order alone): the first differing pre_forward is
#    DMUON_EMISMATCH on every rank, nothing moved; the pass is discarded
#    and training goes on equal to the reference.
source "$(dirname "$0")/../cli/lib.sh"
R="$DMUON_BUILD/tests/mpi/rt_check"
MPIRUN=(timeout 300 mpirun --oversubscribe --bind-to none --mca mpi_yield_when_idle 1)
export RT_CHECK_VERBOSE=1

digest() { sed -nE 's/^weights digest ([0-9a-f]+)$/\1/p' "$T_TMP/out"; }
for args in "--line D --zero 3" "--line D --zero 2" "--line C --sharding hsdp" \
            "--line B --zero 2" "--line B --sharding hsdp" "--line A --zero 3" \
            "--line D --zero 3 --recompute" "--line D --sharding hsdp --zero 2"; do
    # shellcheck disable=SC2086
    run "${MPIRUN[@]}" -x RT_CHECK_VERBOSE -np 4 "$R" --deadline-ms 10000 $args
    check_rc 0 "plain run, $args"
    plain=$(digest)
    # shellcheck disable=SC2086
    run "${MPIRUN[@]}" -x RT_CHECK_VERBOSE -np 4 "$R" --deadline-ms 10000 --eval $args
    check_rc 0 "evaluation passes, $args"
    check_out '^[0-9]+ passed, 0 failed' "eval, $args: summary"
    check_out '^ok   eval: a forward-only pass discarded on every rank' "eval, $args: forward-only pass"
    check_out "^ok   eval: a begun backward's pass discarded on every rank" "eval, $args: begun backward"
    check_out '^ok   eval: a hook out of order is refused' "eval, $args: refused hook"
    check_out '^ok   eval: a step after a forward-only pass alone is refused' "eval, $args: no step"
    check_out '^ok   eval: the discarded backward left no micro-batch' "eval, $args: gradients dropped"
    check_out '^ok   line .* 0 of [0-9]+ gathered values differ' "eval, $args: equal to the reference"
    if [ -n "$plain" ]; then check_eq "$(digest)" "$plain" "eval, $args: weights digest"; else
        bad "plain run, $args: no weights digest"; fi
done

for args in "--line A" "--line B --zero 2" "--line C --sharding hsdp" "--line D"; do
    # shellcheck disable=SC2086
    run "${MPIRUN[@]}" -x RT_CHECK_VERBOSE -np 4 "$R" --deadline-ms 10000 --fault order $args
    check_rc 0 "another order on one rank, $args"
    check_out '^[0-9]+ passed, 0 failed' "order, $args: summary"
    check_out '^ok   order: the first differing pre_forward is refused on every rank \(.*different hooks' \
        "order, $args: refused at the first difference"
    check_out '^ok   line .* 0 of [0-9]+ gathered values differ' "order, $args: equal to the reference"
done

# before the first step, a discard or a step on one rank where the others
# begin the forward: EMISMATCH on every rank (before: two different
# collectives met, and MPI aborted the job)
for args in "--line C" "--line D --sharding hsdp"; do
    # shellcheck disable=SC2086
    run "${MPIRUN[@]}" -x RT_CHECK_VERBOSE -np 4 "$R" --deadline-ms 10000 --fault onerank $args
    check_rc 0 "a discard and a step on one rank before the first step, $args"
    check_out '^ok   onerank: a discard on one rank before the first step is refused on every rank' \
        "onerank, $args: the discard refused everywhere"
    check_out '^ok   onerank: a step on one rank before the first step is refused on every rank' \
        "onerank, $args: the step refused everywhere"
    check_out '^ok   line .* 0 of [0-9]+ gathered values differ' "onerank, $args: equal to the reference"
done
finish
