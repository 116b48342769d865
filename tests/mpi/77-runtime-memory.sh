#!/usr/bin/env bash
# The runtime's memory equals the planner's, to the byte: for the same plan
# (rt_check --plan-out), every rank's dmuon_rt_stats (pool, control,
# working space, windows, state, total) against dmuon-plan show --json
# (the layout of the busiest rank: the pool is the same on every rank) and
# show --ranks --json (each rank's state and total), on 1, 4 and 8 ranks,
# FSDP and HSDP, lines B, C and D, ZeRO-2 and ZeRO-3, BF16 and F32, owner
# parts as chosen and forced each way (the layout's choice is the
# runtime's).
source "$(dirname "$0")/../cli/lib.sh"
R="$DMUON_BUILD/tests/mpi/rt_check"
P="$DMUON_BIN/dmuon-plan"
MPIRUN=(timeout 300 mpirun --oversubscribe --bind-to none --mca mpi_yield_when_idle 1)

case_mem() {  # np per_node line owner_parts args...
    local np=$1 k=$2 line=$3 parts=$4; shift 4
    local what="$np ranks ($k per node), line $line, owner parts $parts $*"
    run "${MPIRUN[@]}" -np "$np" "$R" --ranks-per-node "$k" --line "$line" --steps 1 --micro 1 \
        --owner-parts "$parts" --plan-out "$T_TMP/plan.yaml" "$@"
    check_rc 0 "$what: rt_check"
    grep '^memory rank' "$T_TMP/out" > "$T_TMP/rt.txt"
    check_eq "$(wc -l < "$T_TMP/rt.txt")" "$np" "$what: one memory line per rank"
    "$P" show "$T_TMP/plan.yaml" --json --line "$line" --owner-parts "$parts" \
        > "$T_TMP/plan.json" 2> "$T_TMP/perr" &&
    "$P" show "$T_TMP/plan.yaml" --json --ranks --line "$line" --owner-parts "$parts" \
        > "$T_TMP/ranks.json" 2>> "$T_TMP/perr"
    check_eq "$?" "0" "$what: dmuon-plan show"
    python3 - "$T_TMP/rt.txt" "$T_TMP/plan.json" "$T_TMP/ranks.json" <<'EOF' > "$T_TMP/cmp"
import json, re, sys
rt = {}
for ln in open(sys.argv[1]):
    m = re.match(r"memory rank (\d+): pool (\d+) ctrl (\d+) work (\d+) windows (\d+) state (\d+) total (\d+)", ln)
    rt[int(m.group(1))] = [int(m.group(k)) for k in range(2, 8)]
mem = json.load(open(sys.argv[2]))["memory"]
ranks = {r["rank"]: r for r in json.load(open(sys.argv[3]))["ranks_detail"]}
bad = []
for r, (pool, ctrl, work, win, state, total) in sorted(rt.items()):
    want = [mem["pool_bytes"], mem["ctrl_bytes"], mem["work_bytes"], mem["window_space_bytes"],
            ranks[r]["state_bytes"], ranks[r]["total_bytes"]]
    got = [pool, ctrl, work, win, state, total]
    for name, g, w in zip(("pool", "ctrl", "work", "windows", "state", "total"), got, want):
        if g != w:
            bad.append("rank %d %s: runtime %d, plan %d" % (r, name, g, w))
busiest = max(rt, key=lambda r: (rt[r][5], -r))
if mem["rank"] != busiest or mem["total_bytes"] != rt[busiest][5]:
    bad.append("busiest: plan says rank %d (%d), the runtime rank %d (%d)"
               % (mem["rank"], mem["total_bytes"], busiest, rt[busiest][5]))
print("; ".join(bad) if bad else "equal")
EOF
    check_eq "$(cat "$T_TMP/cmp")" "equal" "$what: the runtime's bytes are the planner's"
}

case_mem 1 1 D auto
case_mem 1 1 B auto
case_mem 4 2 D auto
case_mem 4 2 C auto
case_mem 4 2 B auto
case_mem 4 2 D auto --sharding hsdp
case_mem 4 2 C auto --sharding hsdp
case_mem 4 2 B auto --sharding hsdp
case_mem 4 2 D auto --zero 2
case_mem 4 2 D auto --dtype f32
case_mem 8 2 D auto
case_mem 8 2 C auto
case_mem 8 2 B auto
case_mem 8 2 D auto --sharding hsdp
case_mem 8 2 C auto --sharding hsdp --zero 2
case_mem 4 2 D persistent
case_mem 4 2 D per-layer
case_mem 4 2 D per-layer --zero 2
case_mem 4 2 C per-layer --dtype f32
case_mem 4 2 D persistent --sharding hsdp
case_mem 4 2 D per-layer --sharding hsdp
case_mem 8 2 C persistent
case_mem 8 2 D per-layer
finish
