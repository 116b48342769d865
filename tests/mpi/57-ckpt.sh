#!/usr/bin/env bash
# Checkpoints across rank counts: saved on 4 ranks (and with every piece on
# two ranks, as HSDP replicas), loaded on 2, 3 and 4 ranks with other piece
# splits and checked bit for bit; every load exports the same bytes as the
# saving run.  A corrupt file fails on every rank, naming file and tensor.
# The export and the rank files are read back with the Python safetensors
# library when it is importable (python3, or DMUON_PYTHON).
source "$(dirname "$0")/../cli/lib.sh"
T="$DMUON_BUILD/tests/test_ckpt"
MPIRUN=(timeout 120 mpirun --oversubscribe --bind-to none --mca mpi_yield_when_idle 1)
C="$T_TMP/ckpt"

# save on 4 ranks: pieces of 4 elements, one owner each
run "${MPIRUN[@]}" -np 4 "$T" save "$C" 4 0 0 1 "$T_TMP/e-save.safetensors"
check_rc 0 "save on 4 ranks"
n=$(ls "$C"/rank-*.safetensors 2>/dev/null | wc -l)
check_eq "$n" 4 "one safetensors file per saving rank"
check_no_file "$(ls -d "$C".tmp.* 2>/dev/null | head -n1)" "no temporary directory left"

# load with other splits and rank counts; export must not change
for spec in "2 5 3 1 1" "3 7 2 1 1" "4 6 1 0 2" "1 1000 0 0 1"; do
    set -- $spec
    run "${MPIRUN[@]}" -np "$1" "$T" load "$C" "$2" "$3" "$4" "$5" "$T_TMP/e-$1-$2.safetensors"
    check_rc 0 "load on $1 ranks (pieces of $2 from $3, replicas $5)"
    check_out "load on $1 ranks: 0 wrong elements; step 5, saved by 4 ranks" \
        "load on $1 ranks: every element bit-identical"
    check_cmp "$T_TMP/e-save.safetensors" "$T_TMP/e-$1-$2.safetensors" \
        "export after loading on $1 ranks equals the saving run's"
done

# save with replicas (every piece on 2 of 4 ranks): the manifest keeps one
run "${MPIRUN[@]}" -np 4 "$T" save "$T_TMP/hsdp" 4 0 0 2 "$T_TMP/e-hsdp.safetensors"
check_rc 0 "save on 4 ranks with replicas"
check_eq "$(grep -c '"param":' "$T_TMP/hsdp/manifest.json")" 37 "one manifest entry per range"
check_eq "$(grep -c '"file": "rank-0000[23]' "$T_TMP/hsdp/manifest.json")" 0 \
    "replicas are taken from the lowest rank"
check_cmp "$T_TMP/e-save.safetensors" "$T_TMP/e-hsdp.safetensors" "export with replicas"
run "${MPIRUN[@]}" -np 3 "$T" load "$T_TMP/hsdp" 5 3 1 1
check_rc 0 "replicated checkpoint loads on 3 ranks"
check_out "0 wrong elements; step 5, saved by 4 ranks \(hsdp\)" "bit-identical, sharding kept"

# a flipped data byte in rank 2's file: every rank fails and names it
cp -r "$C" "$T_TMP/bad"
f="$T_TMP/bad/rank-00002.safetensors"
size=$(stat -c %s "$f")
printf '\x55' | dd of="$f" bs=1 seek=$((size - 3)) conv=notrunc status=none
run "${MPIRUN[@]}" -np 3 "$T" load "$T_TMP/bad" 5 3 1 1
check_rc 1 "a corrupt file fails the load"
n=$(grep -c "rank-00002.safetensors: tensor '.*': digest .* the file is corrupt" "$T_TMP/err")
check_eq "$n" 3 "each of the 3 ranks names the file and tensor"

# the unit suite on 3 ranks (several files in every corruption case)
run "${MPIRUN[@]}" -np 3 "$T"
check_rc 0 "unit tests on 3 ranks"

# the reference safetensors library
PY=${DMUON_PYTHON:-python3}
if "$PY" -c 'import safetensors.numpy' 2>/dev/null; then
    run "$PY" "$DMUON_ROOT/tests/mpi/ckpt_check.py" "$C" "$T_TMP/e-save.safetensors"
    check_rc 0 "python safetensors reads the export and the rank files"
    check_out "elements of 4 tensors checked, 0 wrong" "python: values equal the masters"
    cp "$T_TMP/e-save.safetensors" "$T_TMP/e-wrong.safetensors"
    size=$(stat -c %s "$T_TMP/e-wrong.safetensors")
    printf '\x55' | dd of="$T_TMP/e-wrong.safetensors" bs=1 seek=$((size - 2)) conv=notrunc status=none
    run "$PY" "$DMUON_ROOT/tests/mpi/ckpt_check.py" "$C" "$T_TMP/e-wrong.safetensors"
    check_rc 1 "python check notices a changed export byte"
else
    skip "python safetensors not importable ($PY); export not read back (make deps installs it into build/pyenv)"
fi
finish
