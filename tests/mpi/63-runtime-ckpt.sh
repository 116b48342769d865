#!/usr/bin/env bash
# Runtime checkpoints: save after N steps, load, run M more — bit-identical
# to N+M uninterrupted (same plan); the same checkpoint loaded on 4 ranks,
# onto an HSDP plan, and into lines C and B gives the same weights; a
# damaged checkpoint is refused on every rank.  Every run also checks each
# gathered parameter against the single-process reference (rt_check).
source "$(dirname "$0")/../cli/lib.sh"
R="$DMUON_BUILD/tests/mpi/rt_check"
MPIRUN=(timeout 300 mpirun --oversubscribe --bind-to none --mca mpi_yield_when_idle 1)
G=(--global-grads)

run "${MPIRUN[@]}" -np 8 "$R" "${G[@]}" --steps 5 --export "$T_TMP/full.safetensors"
check_rc 0 "8 ranks, 5 steps uninterrupted, exported"
run "${MPIRUN[@]}" -np 8 "$R" "${G[@]}" --steps 3 --save "$T_TMP/ck8"
check_rc 0 "8 ranks, 3 steps, saved"
check_eq "$(ls "$T_TMP/ck8" | grep -c '^rank-.*\.safetensors$')" 8 "one file per saving rank"
[ -f "$T_TMP/ck8/manifest.json" ] && ok || bad "manifest written"
check_eq "$(ls -d "$T_TMP"/ck8.tmp* 2>/dev/null | wc -l)" 0 "no temporary directory left"

resume() {  # np description args...
    local np=$1 what=$2; shift 2
    rm -f "$T_TMP/r.safetensors"
    run "${MPIRUN[@]}" -np "$np" "$R" "${G[@]}" --load "$T_TMP/ck8" --start 3 --steps 2 \
        --export "$T_TMP/r.safetensors" "$@"
    check_rc 0 "$what: load and 2 more steps"
    check_cmp "$T_TMP/r.safetensors" "$T_TMP/full.safetensors" "$what: weights bit-identical to 5 uninterrupted steps"
}
resume 8 "8 ranks, same plan"
resume 4 "4 ranks (other owners)"
resume 8 "8 ranks, HSDP plan" --sharding hsdp
resume 4 "4 ranks, line C" --line C
resume 4 "4 ranks, HSDP, line B (momentum in even shards)" --line B --sharding hsdp

PY=${DMUON_PYTHON:-python3}
if "$PY" -c 'import safetensors.numpy' 2>/dev/null; then
    "$PY" - "$T_TMP/full.safetensors" <<'PY' && ok || bad "the export loads with the Python safetensors library"
import sys
from safetensors.numpy import load_file
t = load_file(sys.argv[1])
assert "model.layers.0.self_attn.q_proj.weight" in t and t["lm_head.weight"].shape == (64, 32)
PY
else
    skip "export read-back: Python safetensors not importable ($PY) (make deps installs it)"
fi

# damaged checkpoints: every rank refuses, nothing half-loaded
cp -r "$T_TMP/ck8" "$T_TMP/bad"
f="$T_TMP/bad/rank-00003.safetensors"
head -c $(( $(stat -c %s "$f") - 16 )) "$f" > "$f.t" && mv "$f.t" "$f"
RT_CHECK_VERBOSE=1 run "${MPIRUN[@]}" -np 4 "$R" "${G[@]}" --load "$T_TMP/bad" --start 3 --expect-load-error
check_rc 0 "a truncated file is refused on every rank"
check_out 'rank-00003' "the message names the file"
rm -rf "$T_TMP/bad"; cp -r "$T_TMP/ck8" "$T_TMP/bad"
sed -i 's/"version": *1/"version": 99/' "$T_TMP/bad/manifest.json"
RT_CHECK_VERBOSE=1 run "${MPIRUN[@]}" -np 4 "$R" "${G[@]}" --load "$T_TMP/bad" --start 3 --expect-load-error
check_rc 0 "another format version is refused"
check_out "version 99" "the message names the version"
finish
