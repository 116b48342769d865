#!/usr/bin/env bash
# The README's trainer example compiles against the public headers and runs:
# its loss must fall over the ten steps on 1 and 4 ranks; with a directory
# it saves a checkpoint and exports the weights, and with a second one it
# resumes from it (on another rank count).
source "$(dirname "$0")/../cli/lib.sh"
MPIRUN=(timeout 120 mpirun --oversubscribe --bind-to none --mca mpi_yield_when_idle 1)
awk '/^## Using libdmuon in a trainer/{s=1} s && /^```c$/{c=1; next} c && /^```$/{exit} c{print}' \
    "$DMUON_ROOT/README.md" > "$T_TMP/ex.c"
[ -s "$T_TMP/ex.c" ] && ok || bad "README has a C block under 'Using libdmuon in a trainer'"
lib="$DMUON_BUILD/libdmuon.a"
run mpicc -std=c11 $(grep -o -- "-fsanitize=[a-z,]*" "$DMUON_BUILD/link-flags" | head -n1) -Wall -Wextra -Werror -I"$DMUON_ROOT/libcore/include" "$T_TMP/ex.c" -o "$T_TMP/ex" \
    "$lib" $(cat "$DMUON_BUILD/link-flags")
check_rc 0 "the example compiles with -Wall -Wextra -Werror against the public headers"
for np in 1 4; do
    run "${MPIRUN[@]}" -np $np "$T_TMP/ex"
    check_rc 0 "the example runs on $np rank(s)"
    first=$(sed -nE 's/^step 0 loss ([0-9.]+)$/\1/p' "$T_TMP/out")
    last=$(sed -nE 's/^step 9 loss ([0-9.]+)$/\1/p' "$T_TMP/out")
    check_eq "$(awk -v a="${first:-0}" -v b="${last:-0}" 'BEGIN{print (b < a / 2) ? "falls" : "flat"}')" \
        falls "$np rank(s): loss falls to under half (step 0 $first, step 9 $last)"
done
# checkpoint, resume and export: "ex CK" saves after its 10 steps, "ex CK2 CK"
# resumes from CK, so its first loss is far below a fresh start's
run "${MPIRUN[@]}" -np 4 "$T_TMP/ex" "$T_TMP/ck"
check_rc 0 "the example saves and exports"
check_eq "$(grep -o '"step": [0-9]*' "$T_TMP/ck/manifest.json" 2> /dev/null)" '"step": 10' \
    "the checkpoint holds step 10"
[ -s "$T_TMP/ck.safetensors" ] && ok || bad "the export $T_TMP/ck.safetensors was not written"
fresh=$(sed -nE 's/^step 0 loss ([0-9.]+)$/\1/p' "$T_TMP/out")
run "${MPIRUN[@]}" -np 2 "$T_TMP/ex" "$T_TMP/ck2" "$T_TMP/ck"
check_rc 0 "the example resumes on 2 ranks from a checkpoint of 4"
first=$(sed -nE 's/^step 0 loss ([0-9.]+)$/\1/p' "$T_TMP/out")
check_eq "$(awk -v a="${fresh:-0}" -v b="${first:-1e9}" 'BEGIN{print (b < a / 4) ? "continues" : "restarted"}')" \
    continues "resumed first loss $first under a quarter of a fresh start's $fresh"
check_eq "$(grep -o '"step": [0-9]*' "$T_TMP/ck2/manifest.json" 2> /dev/null)" '"step": 20' \
    "the resumed run saves step 20"
finish
