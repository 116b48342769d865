#!/usr/bin/env bash
# dmuon-plan input handling: exit codes (2 for bad input or usage), flags that
# do not apply, option values checked rather than clamped or ignored,
# messages that say what to do, --version, and show of an edited plan.
source "$(dirname "$0")/lib.sh"
P="$DMUON_BIN/dmuon-plan"
M="$DMUON_ROOT/models"
Y="$M/qwen2.5-1.5b.yaml"
usage() {  # PATTERN DESCRIPTION -- ARGS...: exit 2, one error line naming PATTERN
    local pat=$1 what=$2; shift 3
    run "$P" "$@"
    check_rc 2 "$what"
    check_err "^dmuon-plan: error: .*$pat" "$what: message"
    check_no_crash "$what"
}
run "$P" --version
check_rc 0 "--version"
check_out "^dmuon-plan \(dmuon\) 0\.1\.0$" "prints the dmuon version"
run "$P" --help
check_out "--compare .*" "--help lists --compare"
check_out "not with -o" "--help says --compare refuses -o"

# --compare with -o is refused, and writes nothing
usage "--compare writes no plan file" "--compare with -o" -- "$Y" --cost flops --compare -o "$T_TMP/c.yaml"
check_no_file "$T_TMP/c.yaml" "--compare -o: no file"
# exit codes of bad input
# a snapshot folder as MODEL: the file used is named
run "$P" "$M/qwen2.5-1.5b" --cost flops --json
check_rc 0 "a directory as MODEL"
check_err "^dmuon-plan: model directory .*qwen2.5-1.5b: using .*qwen2.5-1.5b/config.json$" "a directory as MODEL: names the file used"
usage "model directory '.*models' holds no model.safetensors.index.json, no .safetensors file and no config.json" "a directory without model files" -- "$M" --cost flops
usage "cannot open model '.*absent.json'" "missing model file" -- "$T_TMP/absent.json" --cost flops
usage "no Muon matrix" "--adamw '*' leaves no Muon matrix" -- "$Y" --cost flops --adamw '*'
usage "-o/--out '': expected a plan file path" "-o ''" -- "$Y" --cost flops -o ''
# option values
usage "--small-unit-bytes '99999999999999999999'" "--small-unit-bytes beyond int64" -- "$Y" --cost flops --small-unit-bytes 99999999999999999999
usage "--small-unit-bytes '70368744177665': expected a size from 0 B to 64 TiB" "--small-unit-bytes beyond range" -- "$Y" --cost flops --small-unit-bytes 70368744177665
usage "--muon: role pattern 'a\[b'" "invalid --muon pattern" -- "$Y" --cost flops --muon 'a[b'
usage "--adamw: role pattern 'x\\\\'" "invalid --adamw pattern" -- "$Y" --cost flops --adamw 'x\'
run "$P" "$Y" --cost flops --muon 'nothing.*' --json
check_rc 0 "a pattern matching nothing plans"
check_err "^dmuon-plan: warning: --muon 'nothing\.\*' matches no tensor" "and warns"
usage "--variant: unknown NS variant 'foo'" "unknown --variant" -- "$Y" --variant foo
usage "--device: device 'tpu: v5'" "unknown --device" -- "$Y" --device 'tpu: v5' --db "$T_TMP/none.sqlite"
usage "--probe-missing measures costs for --cost db, not --cost flops" "--probe-missing without --cost db" -- "$Y" --cost flops --probe-missing
# flags that do not apply to inspect / show
usage "--ranks does not apply to inspect" "inspect --ranks" -- inspect "$Y" --ranks 8
usage "--cost does not apply to show" "show --cost" -- show "$T_TMP/x.yaml" --cost flops
usage "--muon does not apply to show" "show --muon" -- show "$T_TMP/x.yaml" --muon 'a*'
usage "show takes one PLAN" "show with two arguments" -- show "$T_TMP/a.yaml" extra
# messages
usage "--ranks 12 is not a multiple of --gpus-per-node 8 \(the default; give --gpus-per-node K .* or --nodes R\)" "--ranks 12 alone" -- "$Y" --cost flops --ranks 12
run "$P" "$Y" --device cpu --variant gram-muon5 --db "$T_TMP/none.sqlite"
check_rc 2 "missing costs for an explicit variant"
check_err "dmuon-probe --model .* --device cpu --variant gram-muon5" "the probe command measures that device and variant"
# inspect fills the stored-MiB column; one node is "1 node"
run "$P" inspect "$M/qwen2.5-1.5b/config.json"
check_out "^  muon  *196  *1310195712  *2499\.0$" "inspect: MiB stored of the Muon tensors"
check_out "^  adamw  *142  *233518592  *445\.4$" "inspect: MiB stored of the AdamW tensors"
run "$P" "$Y" --cost flops --ranks 8
check_out "cluster: 8 ranks = 1 node x 8 GPUs" "1 node, not 1 nodes"
# show of an edited plan: bad input (2) naming the field
"$P" "$Y" --cost flops --ranks 8 -o "$T_TMP/a.yaml" > /dev/null
sed 's/heaviest_rail_over_mean: [0-9.]*/heaviest_rail_over_mean: 0.500000/' "$T_TMP/a.yaml" > "$T_TMP/s.yaml"
usage "s.yaml: field 'summary.heaviest_rail_over_mean': recorded 0.500000" "edited summary" -- show "$T_TMP/s.yaml"
sed '0,/segments: \[{owner: \([0-7]\)/s//segments: [{owner: 9/' "$T_TMP/a.yaml" > "$T_TMP/o.yaml"
usage "o.yaml:[0-9]*: layer '.*': segment 0: owner 9 is outside \[0, 8)" "segment owner out of range" -- show "$T_TMP/o.yaml"
sed '/^  - {id: 7,/d' "$T_TMP/a.yaml" > "$T_TMP/d.yaml"
usage "d.yaml:[0-9]*: field 'units': expected 112 units .*found 111" "deleted unit line" -- show "$T_TMP/d.yaml"
sed 's/zero_stage: 3/zero_stage: 2/' "$T_TMP/a.yaml" > "$T_TMP/z.yaml"
usage "z.yaml: field 'inputs.options_digest'" "edited options" -- show "$T_TMP/z.yaml"
finish
