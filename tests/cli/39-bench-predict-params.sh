#!/usr/bin/env bash
# Network parameter files and plans at the edges: fields outside the
# format and values no link can have are refused naming the file, a group
# of one rank costs nothing, an overflowing prediction is an error, and
# dmuon-plan --predict reads its parameters before it plans or writes.
source "$(dirname "$0")/lib.sh"
B="$DMUON_BIN/dmuon-bench"
PL="$DMUON_BIN/dmuon-plan"
H="$DMUON_ROOT/tools/bench/params/h100.json"
M="$DMUON_ROOT/models/qwen2.5-1.5b.yaml"

"$PL" "$M" --nodes 2 -g 4 --sharding hsdp --cost flops -o "$T_TMP/p.plan" > /dev/null
python3 - "$H" "$T_TMP" <<'PY'
import json, sys
src, d = sys.argv[1], sys.argv[2]
def w(name, f):
    p = json.load(open(src)); f(p); json.dump(p, open(f"{d}/{name}.json", "w"), indent=1)
w("unknown", lambda p: p.update(bar=1))
w("eff", lambda p: p["params"].update(ring_eff=2))
w("chan", lambda p: p["params"].update(channels=2.5))
w("huge", lambda p: p["params"].update(hop_lat=1e308))
w("ch0", lambda p: p["params"].update(channels=0))
w("slow", lambda p: p["params"].update(rail_bw=1e-300))
w("bigoh", lambda p: p["params"].update(call_oh=1e300))
PY
run "$B" predict --params "$T_TMP/unknown.json" --plan "$T_TMP/p.plan"
check_rc 2 "a parameter file with an unknown field"
check_err "unknown.json:[0-9]*: unknown field 'bar'" "names file and field"
run "$B" predict --params "$T_TMP/eff.json" --plan "$T_TMP/p.plan"
check_rc 2 "ring_eff above 1"
check_err "eff.json:[0-9]*: params.ring_eff = 2: expected a fraction of the links, above 0 and at most 1" \
    "says what ring_eff must be"
run "$B" predict --params "$T_TMP/chan.json" --plan "$T_TMP/p.plan"
check_rc 2 "a fractional channel count"
check_err "chan.json:[0-9]*: params.channels = 2.5: expected a whole number" "names the field"
run "$B" predict --params "$T_TMP/huge.json" --plan "$T_TMP/p.plan"
check_rc 2 "a hop latency past any machine's"
check_err "huge.json:[0-9]*: params.hop_lat = 1e\+308: expected at most 1000 seconds" "names the range"
for f in ch0:channels slow:rail_bw bigoh:call_oh; do
    run "$B" predict --params "$T_TMP/${f%%:*}.json" --plan "$T_TMP/p.plan" --save-params "$T_TMP/sv.json"
    check_rc 2 "params.${f#*:} out of its range"
    check_err "${f%%:*}.json:[0-9]*: params.${f#*:} = .*: expected " "names file, field and range"
    check_no_file "$T_TMP/sv.json" "an out-of-range file is not saved again"
done
# a chain of 1000-second hops: past the largest double only in the total
python3 - "$H" "$T_TMP/long.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1])); p["params"]["hop_lat"] = 1e3; p["params"]["call_oh"] = 1e3
json.dump(p, open(sys.argv[2], "w"))
PY
run "$B" predict --params "$T_TMP/long.json" --plan "$T_TMP/p.plan"
check_rc 0 "the largest times in range still predict"
if grep -qwE 'inf|nan' "$T_TMP/out"; then bad "an infinite figure printed"; else ok; fi
# rows: a cell of more than 1 TiB is refused (its replay would not fit)
python3 - "$DMUON_ROOT/tools/bench/paper/tables.json" "$T_TMP/big.json" <<'PY'
import json, sys
rows = [r for r in json.load(open(sys.argv[1])) if r["nodes"] == 2][:2]
for r in rows:
    r["bytes"] = 1 << 48
json.dump(rows, open(sys.argv[2], "w"))
PY
run "$B" predict --params "$H" --cells "$T_TMP/big.json"
check_rc 2 "a cell of 2^48 bytes"
check_err "big.json:[0-9]+: bytes = 281474976710656: expected .*bytes from 1 .*to 2\^40" "names the row and the bound"
# outputs: a name with a newline is refused before any work; --save-params
# with a plan that is not there saves nothing; the SVG follows the umask
run "$B" predict --params "$H" --plan "$T_TMP/p.plan" --svg "$T_TMP/a"$'\n'"b.svg"
check_rc 2 "an --svg name with a newline"
check_err "control character" "says why"
run "$B" predict --params "$H" --plan "$T_TMP/p.plan" --json-file "$T_TMP/o.json" --svg "$T_TMP/./o.json"
check_rc 2 "two outputs on one file, spelt differently"
check_err "the same file as --json-file" "names the other flag"
cp "$H" "$T_TMP/in.json"
run "$B" predict --params "$T_TMP/in.json" --plan "$T_TMP/p.plan" --svg "$T_TMP/in.json"
check_rc 2 "an output on an input"
check_err "the same file as the input" "says it would overwrite an input"
check_cmp "$H" "$T_TMP/in.json" "the input is left as it was"
run "$B" predict --params "$H" --plan "$T_TMP/p.plan" --json-file "$T_TMP/newdir/"
check_rc 2 "an output path ending in /"
ln -s "$T_TMP/nowhere/x" "$T_TMP/dangling"
run "$B" predict --params "$H" --plan "$T_TMP/p.plan" --json-file "$T_TMP/dangling"
check_rc 2 "an output on a symbolic link to nothing"
check_err "a symbolic link to nothing" "says so"
# two rows of the paper's 2-node cells, the second with FIELD = VALUE
two_rows() {   # OUT FIELD VALUE
    python3 - "$DMUON_ROOT/tools/bench/paper/tables.json" "$@" <<'PY'
import json, sys
rows = [r for r in json.load(open(sys.argv[1])) if r["nodes"] == 2][:2]
rows[1][sys.argv[3]] = int(sys.argv[4])
json.dump(rows, open(sys.argv[2], "w"), indent=1)
PY
}
two_rows "$T_TMP/wrong.json" wrong 5
run "$B" predict --params "$H" --cells "$T_TMP/wrong.json"
check_rc 2 "a row whose results were wrong"
check_err "wrong.json:[0-9]+: wrong = 5: a run whose results were wrong is not a measurement" \
    "names the row"
run "$B" predict --params "$H" --plan "$T_TMP/none.plan" --save-params "$T_TMP/sv.json"
check_rc 2 "--save-params with a missing plan"
check_no_file "$T_TMP/sv.json" "nothing saved when the plan is missing"
(umask 022; "$B" predict --params "$H" --plan "$T_TMP/p.plan" --svg "$T_TMP/m.svg" > /dev/null 2>&1)
check_eq "$(stat -c %a "$T_TMP/m.svg" 2>/dev/null)" 644 "the SVG's mode follows the umask"
run "$B" predict --params "$H" --plan "$T_TMP/p.plan"
check_out "^# dmuon-bench predict: plan .*p.plan, 2 x 4, parameters h100 from .*h100.json$" \
    "the plan's header says where the parameters came from"

# A cell given twice (two rows of one operator, size, cluster and line) is
# refused, naming the second row.
python3 - "$DMUON_ROOT/tools/bench/paper/tables.json" "$T_TMP/dup.json" <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))[:3]
json.dump(rows + rows[:1], open(sys.argv[2], "w"), indent=1)
PY
run "$B" predict --params "$H" --cells "$T_TMP/dup.json"
check_rc 2 "a cell given twice"
check_err "dup.json:[0-9]+: a second row for agv of 16384 bytes on 2 nodes x 8 ranks, line per_owner" \
    "names the row and the cell"

# A group of one rank moves nothing: one GPU in all, and one GPU per node
# (the gathers inside a node are of one rank).
"$PL" "$M" --nodes 1 -g 1 --cost flops -o "$T_TMP/one.plan" > /dev/null
run "$B" predict --params "$H" --plan "$T_TMP/one.plan" --json-file "$T_TMP/one.json"
check_rc 0 "a plan of one rank"
check_out "D 0.0  \\(D/C -, D/A -\\)" "no ratio to lines that move nothing"
python3 - "$T_TMP/one.json" <<'PY' && ok || bad "one rank: every time 0"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["layers"] and all(v == 0 for L in d["layers"] for k in ("gather_us", "reduce_us")
                           for v in L[k].values()), d["layers"][0]
assert all(v == 0 for v in d["step_us"].values()), d["step_us"]
PY
"$PL" "$M" --nodes 4 -g 1 --sharding hsdp --cost flops -o "$T_TMP/four.plan" > /dev/null
run "$B" predict --params "$H" --plan "$T_TMP/four.plan" --json-file "$T_TMP/four.json"
check_rc 0 "HSDP with one GPU per node"
python3 - "$T_TMP/four.json" <<'PY' && ok || bad "one GPU per node: no gather inside a node, a reduction across nodes"
import json, sys
d = json.load(open(sys.argv[1]))
assert all(v == 0 for L in d["layers"] for v in L["gather_us"].values())
assert all(L["reduce_us"]["ours"] > 0 for L in d["layers"])
assert d["step_us"]["D"] > 0 and d["rails"] and d["rails"][0]["ours"] > 0
PY

# A parameter file read and saved again keeps what it was fitted on; the
# preset's starting values are said to be so.
run "$B" predict --params "$H" --plan "$T_TMP/p.plan" --save-params "$T_TMP/again.json"
check_rc 0 "--params with --save-params"
python3 -c "import json,sys; a,b=(json.load(open(f))['fitted_on'] for f in sys.argv[1:]); sys.exit(0 if a==b and a.startswith('79 cells') else 1)" \
    "$H" "$T_TMP/again.json" && ok || bad "the saved file keeps fitted_on"
run "$B" predict --params "$H" --cells "$DMUON_ROOT/tools/bench/paper/tables.json"
check_rc 0 "--params with --cells"
check_out "not fitted here: parameters from .*h100.json \\(fitted on 79 cells" "says what the file was fitted on"
run "$B" predict --preset h100 --plan "$T_TMP/p.plan"
check_rc 0 "--preset with --plan"
check_err "note: --preset h100 predicts with the preset's starting values" "says the preset is not fitted"

# Planned again for one node, an HSDP plan has no publish: said so.
run "$B" predict --params "$H" --plan "$T_TMP/p.plan" --nodes 1
check_rc 0 "an HSDP plan planned again for one node"
check_err "warning: HSDP on one node has no replicas" "warns that there is no publish"
# A relative model path that is not found says where it is looked for.
mkdir -p "$T_TMP/w" && (cd "$DMUON_ROOT" && "$PL" models/qwen2.5-1.5b.yaml --nodes 2 -g 4 \
    --cost flops -o "$T_TMP/w/rel.plan" > /dev/null)
pushd "$T_TMP" > /dev/null
run "$B" predict --params "$H" --plan w/rel.plan --nodes 4
popd > /dev/null
check_rc 2 "a relative model path from another directory"
check_err "run from where dmuon-plan ran" "says where a relative path is read from"

# --fitted-nodes: the cells a shipped file was fitted on are scored
# in-sample without a fit, with the rms its fitted_on gives
TAB="$DMUON_ROOT/tools/bench/paper/tables.json"
run "$B" predict --params "$H" --cells "$TAB" --json-file "$T_TMP/all.json"
check_rc 0 "--params with --cells, nothing marked"
check_out "no cell is in-sample: every cell is scored as held out" "says nothing is in-sample"
run "$B" predict --params "$H" --cells "$TAB" --fitted-nodes 2 --json-file "$T_TMP/fn.json"
check_rc 0 "--fitted-nodes 2"
rms=$(python3 -c 'import json,re,sys; print(re.search(r"rms log error ([0-9.]+)", json.load(open(sys.argv[1]))["fitted_on"]).group(1))' "$H")
check_out "in-sample \(--fitted-nodes\): nodes 2 \([0-9]* cells, rms log error $rms\)" \
    "the in-sample rms is the one the file was fitted with ($rms)"
python3 - "$T_TMP/all.json" "$T_TMP/fn.json" "$TAB" > "$T_TMP/fn.txt" <<'PY'
import json, sys
a, f, tab = (json.load(open(x)) for x in sys.argv[1:])
def held(j): return sum(1 for r in j["ratios"] if not r["fit"])
print(f["fit"]["nodes"] == [2], f["fit"]["fitted_here"] is False,
      f["fit"]["cells"] == sum(1 for c in f["cells"] if c["nodes"] == 2),
      all(c["fit"] == (c["nodes"] == 2) for c in f["cells"]),
      held(a) == len(a["ratios"]), held(f) == sum(1 for r in f["ratios"] if r["nodes"] != 2) > 0,
      a["fit"]["rms_log_error"] is None)
PY
check_eq "$(cat "$T_TMP/fn.txt")" "True True True True True True True" \
    "JSON: the marked cells are in-sample, the rest held out, fitted_here false"
run "$B" predict --params "$H" --cells "$TAB" --fitted-nodes 2 --fit-nodes 2
check_rc 2 "--fitted-nodes with --fit-nodes"
check_err "give one" "says to give one"
run "$B" predict --params "$H" --plan "$T_TMP/p.plan" --fitted-nodes 2
check_rc 2 "--fitted-nodes without --cells"
check_err "fitted-nodes marks --cells rows" "says it needs --cells"
run "$B" predict --params "$H" --cells "$TAB" --fitted-nodes 7
check_rc 2 "--fitted-nodes matching no cell"
check_err "no cell has 7 nodes \(the cells have 2 4 8 16 32\)" "names the count and those there are"
run "$B" predict --params "$H" --cells "$TAB" --fitted-nodes 2,3
check_rc 2 "a list of which one count matches no cell"
check_err "no cell has 3 nodes" "names the count that matches none"
for a in "2,x" "" "," " 2" "2," "2,,8" "+2" "0" "65537"; do
    run "$B" predict --params "$H" --cells "$TAB" --fitted-nodes "$a" --json-file "$T_TMP/no.json"
    check_rc 2 "--fitted-nodes '$a'"
    check_err "fitted-nodes '.*': expected distinct node counts from 1 to 65536" "names flag and range"
done
check_no_file "$T_TMP/no.json" "a refused list writes nothing"
run "$B" predict --params "$H" --cells "$TAB" --fitted-nodes 2,2
check_rc 2 "a count given twice"
check_err ": 2 is given twice" "names the count"
run "$B" predict --params "$H" --cells "$TAB" --fitted-nodes 2,3
if grep -q "note:" "$T_TMP/err"; then bad "a note on a refused run"; else ok; fi
python3 - "$H" "$T_TMP" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
e = dict(d); del e["fitted_on"]; json.dump(e, open(f"{sys.argv[2]}/nofo.json", "w"))
e = dict(d); e["fitted_on"] = "hello"; json.dump(e, open(f"{sys.argv[2]}/hello.json", "w"))
e = dict(d); e["fitted_on"] = " Not Fitted "; json.dump(e, open(f"{sys.argv[2]}/nf.json", "w"))
for name, v in (("fonull", None), ("fonum", 2), ("fotrue", True)):
    e = dict(d); e["fitted_on"] = v; json.dump(e, open(f"{sys.argv[2]}/{name}.json", "w"))
e = dict(d); e["preset"] = 7; json.dump(e, open(f"{sys.argv[2]}/prenum.json", "w"))
PY
for f in fonull:null fonum:2 fotrue:true; do
    run "$B" predict --params "$T_TMP/${f%%:*}.json" --cells "$TAB" --fitted-nodes 2
    check_rc 2 "fitted_on ${f#*:} (not a string)"
    check_err "${f%%:*}.json:[0-9]*: field 'fitted_on': expected a string in quotes, got ${f#*:}" \
        "names file, line, field and value"
done
run "$B" predict --params "$T_TMP/prenum.json" --cells "$TAB"
check_rc 2 "preset 7 (not a string)"
check_err "prenum.json:[0-9]*: field 'preset': expected a string in quotes, got 7" "names the field"
run "$B" predict --params "$T_TMP/nofo.json" --cells "$TAB" --fitted-nodes 2 --save-params "$T_TMP/re.json"
check_rc 0 "--fitted-nodes with a file without fitted_on"
check_err "nofo.json has no fitted_on: nothing to check --fitted-nodes against" "notes it"
check_out "\(the file does not say what it was fitted on\)" "the header does not make one up"
grep -q '"fitted_on": "not stated in the file it was read from"' "$T_TMP/re.json" && ok ||
    bad "--save-params wrote another fitted_on than 'not stated'"
run "$B" predict --params "$T_TMP/hello.json" --cells "$TAB" --fitted-nodes 2
check_rc 0 "a fitted_on naming no node counts"
check_err "names no node counts in its fitted_on" "notes it"
run "$B" predict --params "$T_TMP/nf.json" --cells "$TAB" --fitted-nodes 2
check_rc 2 "a fitted_on of ' Not Fitted '"
check_err "says it was not fitted" "read as not fitted, any case and blanks"
run "$B" predict --preset H100 --plan "$T_TMP/p.plan"
check_rc 0 "--preset in upper case"
check_err "tools/bench/params/h100.json holds the shipped" "points to the file that exists"
two_rows "$T_TMP/t0.json" time_us 0
run "$B" predict --params "$H" --cells "$T_TMP/t0.json"
check_rc 2 "a row with time_us 0"
check_err "^dmuon-bench predict: error: --cells: .*t0.json:[0-9]*: time_us = 0: expected" \
    "names flag, file, line, field and value"
run "$B" predict --params "$H" --cells "$T_TMP/none.json"
check_rc 2 "a missing --cells file"
check_err "error: --cells: cannot open" "says which flag"
run "$B" predict --params "$H" --plan "$T_TMP/p.plan" -g
check_rc 2 "-g without its value"
check_err "option '-g' needs a value" "says so"
run "$PL" "$M" -g
check_rc 2 "dmuon-plan -g without its value"
check_err "option '-g' needs a value" "says so, as for its long options"
run "$PL" "$M" --gpus-per-node
check_err "option '--gpus-per-node' needs a value" "names the option as typed"
run "$B" predict --params "$H" --cells "$TAB" --fit-nodes 2,3 --max-evals 1
check_rc 2 "--fit-nodes with a count no cell has"
check_err "fit-nodes: no cell has 3 nodes" "names it"
run "$B" predict --params "$H" --cells "$TAB" --fitted-nodes 8 --fitted-nodes 2
check_rc 0 "--fitted-nodes twice: the last one counts"
check_out "in-sample \(--fitted-nodes\): nodes 2 \(" "as every flag given twice"
if grep -q "differs from what" "$T_TMP/err"; then bad "a note for the list the file names"; else ok; fi
run "$B" predict --params "$H" --cells "$TAB" --fitted-nodes 8
check_rc 0 "--fitted-nodes other than the file's fitted_on"
check_err "note: --fitted-nodes differs from what .*h100.json says it was fitted on \(nodes 2\)" \
    "notes the difference"
run "$B" predict --params "$H" --cells "$TAB" --fitted-nodes 2,4,8,16,32
check_rc 0 "every node count in-sample"
check_out "; no cell is held out" "the in-sample line says nothing is held out"
run "$B" predict --preset h100 --cells "$TAB" --fitted-nodes 2
check_rc 2 "--fitted-nodes with a preset"
check_err "give --params FILE \(a preset's values were not fitted\)" "says why"
run "$B" predict --params "$DMUON_ROOT/tools/bench/params/namespace.json" --cells "$TAB" \
    --fitted-nodes 2
check_rc 2 "--fitted-nodes with a file that was not fitted"
check_err "namespace.json says it was not fitted" "says so"
run "$B" predict --params "$H" --cells "$TAB" --fitted-nodes
check_rc 2 "--fitted-nodes without its value"
check_err "option '--fitted-nodes' needs a value" "says the value is missing, as every tool does"
if grep -q "did you mean" "$T_TMP/err"; then bad "suggests the flag itself"; else ok; fi
# dmuon-plan --predict: a bad parameter file is refused before the plan is
# made or written; --predict with --compare (no plan) is refused.
run "$PL" "$M" --nodes 2 -g 4 --sharding hsdp --cost flops --predict "$T_TMP/none.json" \
    -o "$T_TMP/q.plan"
check_rc 2 "--predict with a missing file"
check_err "cannot open '.*none.json'" "names the file"
check_no_file "$T_TMP/q.plan" "no plan written"
[ ! -s "$T_TMP/out" ] && ok || bad "no report printed before the parameters were read"
run "$PL" "$M" --nodes 2 -g 4 --sharding hsdp --cost flops --predict "$T_TMP/eff.json" \
    -o "$T_TMP/q.plan"
check_rc 2 "--predict with a bad parameter"
check_no_file "$T_TMP/q.plan" "no plan written for a bad parameter either"
run "$PL" "$M" --nodes 2 -g 4 --sharding hsdp --cost flops --predict "$T_TMP/ch0.json" \
    -o "$T_TMP/q.plan"
check_rc 2 "--predict with channels 0"
check_no_file "$T_TMP/q.plan" "no plan written for a parameter out of range"
run "$PL" "$M" --nodes 2 -g 4 --sharding hsdp --cost flops --predict "$H" --compare
check_rc 2 "--predict with --compare"
check_err "drop one of them" "says to drop one"
finish
