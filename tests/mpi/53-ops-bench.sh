#!/usr/bin/env bash
# dmuon-bench's operator table: every line runs and checks its result, the
# JSON rows carry the documented keys, bad flags are refused; plan replay
# on a small generated plan when the planner is part of the build.
source "$(dirname "$0")/../cli/lib.sh"
B="$DMUON_BIN/dmuon-bench"
MPIRUN=(timeout 120 mpirun --oversubscribe --bind-to none --mca mpi_yield_when_idle 1)
QUICK=(-w 1 -n 2 --launches 1)

run "${MPIRUN[@]}" -np 8 "$B" --ranks-per-node 2 -b 16K -e 300K -f 16 "${QUICK[@]}" \
    --json-file "$T_TMP/rows.json"
check_rc 0 "8 ranks, agv/rsv/publish, 16 KiB and 256 KiB"
check_out '^# dmuon-bench: 8 ranks as 4 nodes x 2' "header names the topology"
for op in agv rsv publish; do
    n=$(grep -cE "^$op +(16384|262144) +bf16 .* 0$" "$T_TMP/out")
    check_eq "$n" 2 "$op: two rows with 0 wrong"
done
n=$(grep -c '"line": ' "$T_TMP/rows.json")
check_eq "$n" 22 "JSON: 4 lines x 2 sizes for agv and rsv, 3 for publish"
for k in op bytes dtype line ranks nodes time_us wrong; do
    grep -q "\"$k\": " "$T_TMP/rows.json" && ok || bad "JSON lacks key $k"
done
grep -q '"line": "equal_length"' "$T_TMP/rows.json" && ok || bad "JSON has equal_length rows"
# the publish rows say how the parameters travelled; the table says it once
check_out '^# publish routes of ours: fan-out up to 131072 bytes, relay above \(messages of 4 to 16 chunks of 65408 bytes, else of one\)$' \
    "the table names ours' publish routes"
check_eq "$(grep -c '"routes": ' "$T_TMP/rows.json")" 6 "JSON: every publish row has its routes"
check_eq "$(grep -c '"routes": "fan-out up to 131072 bytes, relay above' "$T_TMP/rows.json")" 2 \
    "JSON: ours' publish rows name the routes and limits"
DMUON_PUBLISH_ROUTE=relay DMUON_PUBLISH_MESSAGE_BYTES=0 run "${MPIRUN[@]}" -np 8 \
    -x DMUON_PUBLISH_ROUTE -x DMUON_PUBLISH_MESSAGE_BYTES "$B" --ranks-per-node 2 --op publish \
    -b 300K -e 300K "${QUICK[@]}"
check_rc 0 "a forced route runs"
check_out '^# publish routes of ours: relay for every parameter \(DMUON_PUBLISH_ROUTE\), one chunk of 65408 bytes per message$' \
    "the table names the forced route and the messages"

run "${MPIRUN[@]}" -np 4 "$B" --ranks-per-node 2 --dtype f32 --op rsv --layout rank -b 64K -e 64K "${QUICK[@]}"
check_rc 0 "f32 reduce, one segment per rank"
check_out '^rsv +65536 +f32 .* 0$' "f32 row with 0 wrong"

# every launch's median is in the JSON, and time_us is their median
run "${MPIRUN[@]}" -np 4 "$B" --ranks-per-node 2 --op agv -b 16K -e 16K -w 1 -n 3 --launches 3 \
    --json-file "$T_TMP/launches.json"
check_rc 0 "three launches"
python3 - "$T_TMP/launches.json" > "$T_TMP/launches.txt" 2>&1 <<'PY'
import json, statistics, sys
rows = json.load(open(sys.argv[1]))
assert len(rows) == 4, "%d rows, expected 4 lines" % len(rows)
for r in rows:
    assert (r["warmup"], r["iters"], r["launches"]) == (1, 3, 3), r
    assert len(r["launch_us"]) == 3 and min(r["launch_us"]) > 0, r
    assert abs(statistics.median(r["launch_us"]) - r["time_us"]) < 1e-3, r
print("ok")
PY
check_eq "$(cat "$T_TMP/launches.txt")" ok "JSON: warmup, iters, launches, launch_us with time_us their median"
run "${MPIRUN[@]}" -np 2 "$B" --op publish --lines equal_length
check_rc 2 "--op publish with only equal_length"
check_err "equal_length has no publish form, so nothing would be timed" "says nothing would be timed"

run "${MPIRUN[@]}" -np 2 "$B" -b 0
check_rc 2 "-b 0 is refused"
check_err "dmuon-bench: error: -b '0': expected a size from 1 B to 1 TiB" "names the flag and the range"
run "${MPIRUN[@]}" -np 2 "$B" --op scatter
check_rc 2 "unknown --op"
run "${MPIRUN[@]}" -np 2 "$B" --replay-publish x.plan
check_rc 2 "--replay-publish without --rail"
check_err "needs --rail S" "says what is missing"

once() { n=$(grep -cE -- "$1" "$T_TMP/err"); check_eq "$n" 1 "$2: printed once"; }
run "${MPIRUN[@]}" -np 4 "$B" --chunk-bytes 10
check_rc 2 "a chunk below the minimum"
once "error: --chunk-bytes '10'" "--chunk-bytes"
run "${MPIRUN[@]}" -np 4 "$B" --plan x.plan --replay-publish x.plan --rail 0
check_rc 2 "--plan with --replay-publish"
once "exclude each other" "--plan with --replay-publish"
for f in "--op publish" "-b 1K" "-e 1M" "-f 4" "--dtype f32" "--layout rank"; do
    run "${MPIRUN[@]}" -np 4 "$B" --plan x.plan $f
    check_rc 2 "--plan with $f"
    once "error: ${f%% *}( publish)? does not apply to --plan" "--plan with $f"
done
run "${MPIRUN[@]}" -np 4 "$B" --plan "$T_TMP/missing.plan"
check_rc 2 "a missing plan file"
once "missing.plan: no such plan file" "a missing plan file"
mkdir -p "$T_TMP/adir"
for j in "$T_TMP/adir" "$T_TMP/nodir/rows.json"; do
    run "${MPIRUN[@]}" -np 4 "$B" -b 16K -e 16K "${QUICK[@]}" --json-file "$j"
    check_rc 2 "--json-file $j refused"
    once "error: --json-file " "--json-file $j"
    check_eq "$(grep -c '^agv' "$T_TMP/out")" 0 "--json-file $j: refused before any timing"
done

# Plan replay: a tiny model planned for 4 nodes x 2.
cat > "$T_TMP/tiny.yaml" <<'YAML'
- {name: model.embed_tokens.weight, shape: [1000, 64]}
- {name: model.layers.0.self_attn.q_proj.weight, shape: [64, 64]}
- {name: model.layers.0.mlp.up_proj.weight, shape: [256, 64]}
- {name: model.layers.0.mlp.down_proj.weight, shape: [64, 256]}
- {name: model.layers.1.self_attn.q_proj.weight, shape: [64, 64]}
- {name: model.layers.1.mlp.up_proj.weight, shape: [256, 64]}
- {name: model.layers.1.mlp.down_proj.weight, shape: [64, 256]}
YAML
run "${MPIRUN[@]}" -np 2 "$B" --plan "$T_TMP/none.plan"
if grep -q "no plan reader" "$T_TMP/err" || \
   ! "$DMUON_BIN/dmuon-plan" "$T_TMP/tiny.yaml" --nodes 4 -g 2 --sharding hsdp --cost elements \
       --small-unit-bytes 0 -o "$T_TMP/tiny.plan" > /dev/null 2>&1; then
    skip "plan replay not checked (planner not in this build)"
else
    run "${MPIRUN[@]}" -np 8 "$B" --ranks-per-node 2 --plan "$T_TMP/tiny.plan" "${QUICK[@]}"
    check_rc 0 "replay of every layer"
    check_out '^agv +[0-9]+ +bf16 .* 0  model.layers.1$' "a row per layer: op, then the layer name last"
    check_out '^rsv +[0-9]+ +bf16 .* 0  \(all layers\)$' "a total row"
    check_err 'dmuon-bench: agv layer 1/[0-9]+ ' "progress: layer i/N"
    # the total's launch i sums the layers' launch i, and its time is their median
    run "${MPIRUN[@]}" -np 8 "$B" --ranks-per-node 2 --plan "$T_TMP/tiny.plan" --op rsv \
        --lines ours,per_owner -w 1 -n 2 --launches 3 --json-file "$T_TMP/plan.json"
    check_rc 0 "replay, three launches"
    python3 - "$T_TMP/plan.json" > "$T_TMP/plan.txt" 2>&1 <<'PY'
import json, statistics, sys
rows = json.load(open(sys.argv[1]))
for line in ("ours", "per_owner"):
    layers = [r for r in rows if r["line"] == line and r["layer"] != "(all layers)"]
    total = [r for r in rows if r["line"] == line and r["layer"] == "(all layers)"]
    assert len(layers) > 1 and len(total) == 1, (len(layers), len(total))
    sums = [sum(r["launch_us"][i] for r in layers) for i in range(3)]
    t = total[0]
    assert all(abs(a - b) < 0.01 for a, b in zip(sums, t["launch_us"])), (sums, t["launch_us"])
    assert abs(statistics.median(t["launch_us"]) - t["time_us"]) < 1e-3, t
print("ok")
PY
    check_eq "$(cat "$T_TMP/plan.txt")" ok "the total: per-launch sums over the layers, time_us their median"
    run "${MPIRUN[@]}" -np 8 "$B" --ranks-per-node 2 --plan "$T_TMP/tiny.plan" --op agv --layers 1:2
    check_rc 0 "--layers 1:2 with the replay defaults"
    check_out '^# dmuon-bench: .*\(layers 1\.\.1 of [0-9]+\), -w 2 -n 5 --launches 1 \(replay defaults\)' "header: the window and the defaults"
    check_eq "$(grep -c '^agv .* 0  model\.layers\.' "$T_TMP/out")" 1 "one layer row"
    run "${MPIRUN[@]}" -np 8 "$B" --ranks-per-node 2 --replay-publish "$T_TMP/tiny.plan" --rail 7 "${QUICK[@]}"
    check_rc 2 "--rail out of range"
    once "--rail 7: out of range" "--rail out of range"
    run "${MPIRUN[@]}" -np 8 "$B" --ranks-per-node 2 --replay-publish "$T_TMP/tiny.plan" --rail 1 "${QUICK[@]}"
    check_rc 0 "publish replay of rail 1"
    check_out '^rail1 +[0-9]+ +bf16 .* 0$' "the rail's row"
    run "${MPIRUN[@]}" -np 8 "$B" --replay-publish "$T_TMP/tiny.plan" --rail 1 "${QUICK[@]}"
    check_rc 0 "publish replay without --ranks-per-node"
    check_err "2 ranks per node, from the plan" "the publish replay takes the ranks per node from the plan"
    run "${MPIRUN[@]}" -np 8 "$B" --ranks-per-node 2 --replay-publish "$T_TMP/tiny.plan" --rail 1 --op rsv
    check_rc 2 "--op rsv with --replay-publish"
    once "--op rsv does not apply to --replay-publish" "--op rsv with --replay-publish"
    "$DMUON_BIN/dmuon-plan" "$T_TMP/tiny.yaml" --nodes 4 -g 2 --sharding fsdp --cost elements \
        --small-unit-bytes 0 -o "$T_TMP/fsdp.plan" > /dev/null 2>&1
    run "${MPIRUN[@]}" -np 8 "$B" --replay-publish "$T_TMP/fsdp.plan" --rail 0 "${QUICK[@]}"
    check_rc 0 "publish replay of an FSDP plan"
    check_err "has sharding fsdp, which publishes nothing in training" "an FSDP plan's publish replay is noted"
    run "${MPIRUN[@]}" -np 4 "$B" --ranks-per-node 2 --plan "$T_TMP/tiny.plan" "${QUICK[@]}"
    check_rc 2 "a plan for another world size"
    check_err 'the plan is for 8 ranks as 4 nodes x 2, this run has 4 ranks' "names both"
fi
finish
