#!/usr/bin/env bash
# One grammar for every tool: size flags take the same sizes everywhere,
# enum values any case, ignored or conflicting combinations are refused
# naming the flag, HSDP on one node warns, unknown options suggest the
# closest flag; under MPI a failure every rank shares is printed once,
# without doubled "rank N: rank M:" prefixes, and a ranks-per-node mismatch
# names --ranks-per-node and DMUON_RANKS_PER_NODE.
source "$(dirname "$0")/lib.sh"
B=$DMUON_BIN
export OPENBLAS_NUM_THREADS=1
M="$DMUON_ROOT/models/qwen2.5-1.5b.yaml"
TINY=(--layers 1 --dim 16 --heads 2 --kv-heads 1 --ffn 16 --seq 8 --batch 2 --steps 1 -q)

# sizes: dmuon-train --small-unit-bytes as dmuon-plan's
run "$B/dmuon-train" "${TINY[@]}" --small-unit-bytes 1M
check_rc 0 "dmuon-train --small-unit-bytes 1M"
run "$B/dmuon-train" "${TINY[@]}" --small-unit-bytes 1KiB+6
check_rc 0 "dmuon-train --small-unit-bytes 1KiB+6"
run "$B/dmuon-train" "${TINY[@]}" --small-unit-bytes 1X
check_rc 2 "dmuon-train --small-unit-bytes 1X"
check_err "expected a size from" "the size grammar's message"
run "$B/dmuon-bench" step --small-unit-bytes 1X
check_rc 2 "dmuon-bench step --small-unit-bytes 1X"
check_err "small-unit-bytes '1X': expected a size from" "dmuon-bench step: the same grammar"

# enum values in any case
run "$B/dmuon-train" "${TINY[@]}" --sharding HSDP --line d --schedule Constant
check_rc 0 "dmuon-train --sharding HSDP --line d --schedule Constant"
check_err "warning: HSDP on one node" "one-node HSDP warns"
run "$B/dmuon-plan" "$M" --ranks 8 --cost FLOPS --sharding Fsdp --strategy LPT --dtype BF16
check_rc 0 "dmuon-plan --cost FLOPS --sharding Fsdp --strategy LPT --dtype BF16"
run "$B/dmuon-plan" "$M" --nodes 1 -g 8 --sharding hsdp --cost flops
check_rc 0 "dmuon-plan HSDP on one node"
check_err "warning: HSDP on one node" "dmuon-plan warns on one-node HSDP"
run "$B/dmuon-verify" ns --shapes 8x8 --variant DIRECT-PE5 --dtype FP32
check_rc 0 "dmuon-verify ns --variant DIRECT-PE5 --dtype FP32"
run "$B/dmuon-bench" ns --shapes 8x8 --iters 1 --coeffs MUON5
check_rc 0 "dmuon-bench ns --coeffs MUON5"
run "$B/dmuon-probe" --shapes 8x8 --iters 1 --warmup 0 --db "$T_TMP/c.sqlite" --variant GRAM-PE5 --device CPU
check_rc 0 "dmuon-probe --variant GRAM-PE5 --device CPU"
run "$B/dmuon-probe" --list --db "$T_TMP/c.sqlite"
check_out "gram-pe5" "stored under the canonical variant name"

# conflicting or ignored combinations
"$B/dmuon-train" "${TINY[@]}" --write-config "$T_TMP/cfg.json"
"$B/dmuon-plan" "$T_TMP/cfg.json" --ranks 1 --cost flops --small-unit-bytes 0 -o "$T_TMP/p.yaml" > /dev/null
run "$B/dmuon-train" "${TINY[@]}" --plan "$T_TMP/p.yaml" --sharding hsdp
check_rc 2 "--plan P --sharding hsdp"
check_err "^dmuon-train: error: --sharding: the plan file fixes the sharding" "names --sharding"
run "$B/dmuon-train" "${TINY[@]}" --plan "$T_TMP/p.yaml" --param-dtype f32
check_rc 2 "--plan P --param-dtype f32"
check_err "error: --param-dtype" "names --param-dtype"
run "$B/dmuon-train" "${TINY[@]}" --plan "$T_TMP/p.yaml" --zero 2
check_rc 2 "--plan P --zero 2"
check_err "error: --zero: the plan file fixes the ZeRO stage" "names --zero"
run "$B/dmuon-train" "${TINY[@]}" --plan "$T_TMP/p.yaml" --steps 1
check_rc 0 "--plan P alone: the plan's ZeRO stage"
run "$B/dmuon-train" "${TINY[@]}" --stop-at 10 --steps 5
check_rc 2 "--stop-at 10 --steps 5"
check_err "error: --stop-at 10 is past --steps 5" "names both flags"

# unknown options suggest the closest flag
run "$B/dmuon-train" --seps 3
check_rc 2 "dmuon-train --seps"
check_err "did you mean --steps\?" "dmuon-train suggests --steps"
run "$B/dmuon-plan" "$M" --shardng hsdp
check_rc 2 "dmuon-plan --shardng"
check_err "did you mean --sharding\?" "dmuon-plan suggests --sharding"
run "$B/dmuon-probe" --lst
check_err "did you mean --list\?" "dmuon-probe suggests --list"
run "$B/dmuon-verify" ns --inptus gaussian
check_err "did you mean --inputs\?" "dmuon-verify ns suggests --inputs"
run "$B/dmuon-bench" ns --itres 2
check_err "did you mean --iters\?" "dmuon-bench ns suggests --iters"
run "$B/dmuon-verify" --plan "$T_TMP/p.yaml" --jsno
check_err "did you mean --json\?" "dmuon-verify --plan suggests --json"
run "$B/dmuon-plan" "$M" --zzzzzzzz
check_rc 2 "an option like no other"
if grep -q "did you mean" "$T_TMP/err"; then bad "no suggestion expected for --zzzzzzzz"; else ok; fi

# MPI: a failure every rank shares, printed once; mismatches name the flag and variable
if command -v mpirun > /dev/null && [ "${DMUON_SANITIZED:-0}" != 1 ]; then
    MPI=(timeout 120 mpirun -np 4 --oversubscribe --bind-to none --mca mpi_yield_when_idle 1)
    "$B/dmuon-plan" "$T_TMP/cfg.json" -N 4 -g 4 --cost flops --small-unit-bytes 0 -o "$T_TMP/p4.yaml" > /dev/null
    run "${MPI[@]}" "$B/dmuon-train" "${TINY[@]}" --batch 4 --plan "$T_TMP/p4.yaml" --ranks-per-node 2
    check_rc 2 "a plan for 4 ranks per node on virtual nodes of 2"
    check_eq "$(grep -c 'ranks per node' "$T_TMP/err")" 1 "printed once for the 4 ranks"
    check_err "give --ranks-per-node 4 \(or DMUON_RANKS_PER_NODE=4\)" "names the flag and the variable"
    if grep -qE 'rank [0-9]+: rank [0-9]+:' "$T_TMP/err"; then bad "a doubled rank prefix"; else ok; fi
    run "${MPI[@]}" "$B/dmuon-train" "${TINY[@]}" --batch 4 --plan "$T_TMP/p.yaml"
    check_rc 2 "a plan for 1 rank on 4"
    check_eq "$(grep -c 'the plan is for 1 rank' "$T_TMP/err")" 1 "printed once for the 4 ranks"
    run "${MPI[@]}" "$B/dmuon-verify" --ranks-per-node 3
    check_err "set by --ranks-per-node or DMUON_RANKS_PER_NODE" "a K that does not divide N names the flag"
else
    skip "mpirun not found, or a sanitized build: the MPI error checks"
fi
finish
