#!/usr/bin/env bash
# Micro-batches that release their blocks in another order than the
# recorded one (rt_check --hold N): in the first micro-batch after the
# layout was packed, each block's post_forward / post_backward comes only
# after up to N later blocks began.  An acquisition whose recorded range is
# still held is refused with DMUON_EINVAL naming the layers, on every rank
# alike and with no effect; rt_check then ends its oldest held block and
# retries.  The held layers' weights must stay intact and every gathered
# value of the run must equal the reference (no gradient was overwritten):
# never silent overlap.  Holding every block must be refused at least once
# (the packed spaces are smaller than the blocks together).  Last, every
# line with dmuon_rt_progress called between the hooks.
source "$(dirname "$0")/../cli/lib.sh"
R="$DMUON_BUILD/tests/mpi/rt_check"
MPIRUN=(timeout 300 mpirun --oversubscribe --bind-to none --mca mpi_yield_when_idle 1)
export RT_CHECK_VERBOSE=1

refused() { sed -nE 's/^hold refused ([0-9]+)$/\1/p' "$T_TMP/out"; }
case_hold() {  # np hold description args...
    local np=$1 hold=$2 what=$3; shift 3
    run "${MPIRUN[@]}" -x RT_CHECK_VERBOSE -np "$np" "$R" --hold "$hold" "$@"
    check_rc 0 "$what"
    check_out '^[0-9]+ passed, 0 failed' "$what: summary"
    check_out '^ok   held blocks: the held layers. weights stayed intact' "$what: weights intact"
    check_out '^ok   line .* 0 of [0-9]+ gathered values differ' "$what: equal to the reference"
    if [ "$hold" -ge 8 ]; then
        n=$(refused)
        if [ -n "$n" ] && [ "$n" -gt 0 ]; then ok; else
            bad "$what: holding every block must be refused at least once (got '${n}')"; fi
    fi
}

case_hold 4 99 "D, FSDP ZeRO-3, every block held" --line D --zero 3
case_hold 4 99 "D, FSDP ZeRO-2, every block held" --line D --zero 2
case_hold 4 1 "D, FSDP ZeRO-3, one block held" --line D --zero 3
case_hold 4 99 "B, FSDP ZeRO-3, every block held" --line B --zero 3
case_hold 4 99 "C, HSDP ZeRO-3, every block held" --line C --sharding hsdp --zero 3
case_hold 4 99 "D, HSDP ZeRO-2, every block held" --line D --sharding hsdp --zero 2

# the split-phase calls moved by dmuon_rt_progress between the hooks (the
# reduction the last post_backward started is in flight while the next
# layer's gradients are written): still equal to the reference
for args in "--line D --zero 3" "--line C --sharding hsdp" "--line B --sharding hsdp --zero 2" \
            "--line A --zero 3"; do
    run "${MPIRUN[@]}" -x RT_CHECK_VERBOSE -np 4 "$R" --progress $args
    check_rc 0 "progress between hooks, $args"
    check_out '^ok   line .* 0 of [0-9]+ gathered values differ' "progress, $args: equal to the reference"
done
finish
