#!/usr/bin/env bash
# dmuon-bench and dmuon-verify share the flag grammar of the other tools:
# --json on stdout (bench: --json-file FILE too), nccl-tests' algbw/busbw,
# sizes and counts out of range refused with the range, sizes the host
# cannot hold refused before MPI allocates (no MPI abort), and a plan replay
# that takes its ranks per node from the plan.
source "$(dirname "$0")/../cli/lib.sh"
B="$DMUON_BIN/dmuon-bench"; V="$DMUON_BIN/dmuon-verify"; P="$DMUON_BIN/dmuon-plan"
MPIRUN=(timeout 120 mpirun --oversubscribe --bind-to none --mca mpi_yield_when_idle 1)
QUICK=(-w 1 -n 2 --launches 1)

# the table has algbw and busbw; --json puts the rows, and only them, on stdout
run "${MPIRUN[@]}" -np 4 "$B" --ranks-per-node 2 -b 64K -e 64K --op agv "${QUICK[@]}"
check_rc 0 "table"
check_out '^#op .* algbw +busbw +#wrong' "table has algbw and busbw"
run "${MPIRUN[@]}" -np 4 "$B" --ranks-per-node 2 -b 64K -e 64K --op all "${QUICK[@]}" --json
check_rc 0 "--json"
python3 - "$T_TMP/out" <<'PY' && ok || bad "--json: rows and bandwidths (see above)"
import json, sys
rows = json.load(open(sys.argv[1]))
assert rows, "no rows"
for r in rows:
    n = r["nodes"] if r["op"] == "publish" else r["ranks"]
    alg = r["bytes"] / (r["time_us"] * 1e3)          # GB/s from bytes and time
    assert abs(r["algbw_gbps"] - alg) <= 1e-9 + 1e-6 * alg, r
    assert abs(r["busbw_gbps"] - alg * (n - 1) / n) <= 1e-9 + 1e-6 * alg, r
assert {r["op"] for r in rows} == {"agv", "rsv", "publish"}, rows
PY
if grep -q '^#' "$T_TMP/out"; then bad "--json: table lines on stdout"; else ok; fi
run "${MPIRUN[@]}" -np 2 "$V" --op agv --sizes 4K --layouts rank --dtypes bf16 --paths auto --json
check_rc 0 "verify --json"
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["passed"] > 0 and d["failed"] == 0 and d["ranks"] == 2' "$T_TMP/out" && ok || bad "verify --json: one object with the counts"

# out of range: errors with the range
run "${MPIRUN[@]}" -np 2 "$B" -b 99999999999999999999
check_rc 2 "-b beyond int64"
check_err "-b '99999999999999999999': expected a size from 1 B to 1 TiB" "gives the range"
run "${MPIRUN[@]}" -np 2 "$B" -n 1000000000
check_rc 2 "-n 1e9"
check_err "-n '1000000000': expected a whole number from 1 to 1000000" "gives the range"
for s in 16K 16KB 16KiB 16k; do
    run "${MPIRUN[@]}" -np 2 "$B" -b "$s" -e "$s" --op agv --lines ours "${QUICK[@]}"
    check_out '^agv +16384 ' "-b $s is 16384 bytes"
done

# sizes the host cannot hold: a dmuon message, exit 2, no MPI abort
avail_kb=$(awk '/^MemAvailable:/ {print $2}' /proc/meminfo)
big=$(( avail_kb / 1024 + 1 ))M
run "${MPIRUN[@]}" -np 2 "$B" -b "$big" -e "$big"
check_rc 2 "bench -b $big"
check_err "dmuon-bench: error: -e .* needs at least .* on this host" "bench: says why"
if grep -q "MPI_ABORT" "$T_TMP/err"; then bad "bench -b $big: MPI abort"; else ok; fi
run "${MPIRUN[@]}" -np 2 "$V" --sizes "$big"
check_rc 2 "verify --sizes $big"
check_err "dmuon-verify: error: --sizes .* needs at least .* on this host" "verify: says why"

# a plan replay takes the plan's ranks per node
printf -- '- {name: model.layers.0.q.weight, shape: [64, 64]}\n- {name: model.layers.0.k.weight, shape: [64, 32]}\n- {name: model.layers.1.q.weight, shape: [64, 64]}\n' > "$T_TMP/m.yaml"
"$P" "$T_TMP/m.yaml" --nodes 2 -g 2 --cost elements --small-unit-bytes 0 -o "$T_TMP/p.yaml" > /dev/null 2>&1
run "${MPIRUN[@]}" -np 4 "$B" --plan "$T_TMP/p.yaml"
check_rc 0 "replay without --ranks-per-node"
check_out '^# dmuon-bench: 4 ranks as 2 nodes x 2' "the plan's 2 x 2"
check_err "2 ranks per node, from the plan" "says where it came from"
finish
