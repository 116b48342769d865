#!/usr/bin/env bash
# The README's trainer example compiles against the public headers and runs:
# its loss must fall over the ten steps on 1 and 4 ranks.
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
finish
