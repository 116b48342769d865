#!/usr/bin/env bash
# make install PREFIX=DIR: the tools, libdmuon.a/.so, the headers, the schema
# and dmuon.pc; it needs no network (run in a network namespace of its own
# where unshare can make one) and nothing installed names the build tree; a
# program built with `pkg-config --cflags --libs dmuon` (shared) and with
# `pkg-config --static` against libdmuon.a runs with LD_LIBRARY_PATH=DIR/lib
# only; the installed planner does not need cuBLAS.  DMUON_INSTALL_EXAMPLE=FILE.c
# builds another example (it gets one argument: a plan file).
source "$(dirname "$0")/lib.sh"
EX=${DMUON_INSTALL_EXAMPLE:-$DMUON_ROOT/tests/install/plan_summary.c}
PFX="$T_TMP/prefix"
# the plain build, whatever make invoked this test with
# without network: unshare -n gives a namespace with only a loopback that is down
NONET=()
if unshare -n true 2> /dev/null; then NONET=(unshare -n); else
    skip "make install without network: unshare -n is not permitted here"; fi
run "${NONET[@]}" env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make --no-print-directory -C "$DMUON_ROOT" install \
    PREFIX="$PFX" SANITIZER= BUILD=build BINDIR=bin
check_rc 0 "make install PREFIX=$PFX${NONET:+ (no network)}"
if grep -qiE 'pip (download|install)|nccl-wheel\.sh|Downloading' "$T_TMP/out" "$T_TMP/err"; then
    bad "make install tried to download"; else ok; fi
if grep -rl "$DMUON_ROOT/build" "$PFX" > "$T_TMP/grep" 2> /dev/null; then
    bad "installed files name the build tree: $(head -n3 "$T_TMP/grep" | tr '\n' ' ')"; else ok; fi
for f in bin/dmuon-plan bin/dmuon-probe bin/dmuon-bench bin/dmuon-verify bin/dmuon-train lib/libdmuon.a \
         lib/libdmuon.so include/dmuon/plan.h include/dmuon/rc.h share/dmuon/schema.sql \
         lib/pkgconfig/dmuon.pc; do
    [ -e "$PFX/$f" ] && ok || bad "not installed: $f"
done
export PKG_CONFIG_PATH="$PFX/lib/pkgconfig"
check_eq "$(pkg-config --modversion dmuon)" \
    "$(sed -n 's/^#define DMUON_VERSION "\(.*\)"/\1/p' "$DMUON_ROOT/libcore/include/dmuon/version.h")" \
    "dmuon.pc version"
grep -q '^Libs.private: .*-lyaml .*-lsqlite3 .*-lopenblas' "$PFX/lib/pkgconfig/dmuon.pc" && ok \
    || bad "dmuon.pc: Libs.private lacks libyaml, SQLite or OpenBLAS"
"$PFX/bin/dmuon-plan" "$DMUON_ROOT/tests/fuzz/seed/inventory/tiny.yaml" --nodes 2 -g 2 \
    --sharding hsdp --cost flops -o "$T_TMP/p.yaml" > /dev/null
check_eq "$?" 0 "the installed planner writes a plan"
if readelf -d "$PFX/bin/dmuon-plan" | grep -q 'NEEDED.*cublas'; then
    bad "the installed dmuon-plan needs libcublas"; else ok; fi
# the shared library carries its ABI name (major.minor while the major is 0)
# and the two links to the versioned file
ver=$(sed -n 's/^#define DMUON_VERSION "\(.*\)"/\1/p' "$DMUON_ROOT/libcore/include/dmuon/version.h")
so=libdmuon.so.$(echo "$ver" | cut -d. -f1-2)
check_eq "$(readelf -d "$PFX/lib/libdmuon.so" | sed -n 's/.*SONAME.*\[\(.*\)\]/\1/p')" "$so" "SONAME of libdmuon.so"
check_eq "$(readlink "$PFX/lib/libdmuon.so") $(readlink "$PFX/lib/$so")" "$so libdmuon.so.$ver" "libdmuon.so -> $so -> libdmuon.so.$ver"
# shared: the pkg-config line as documented
cc -o "$T_TMP/ex_shared" "$EX" $(pkg-config --cflags --libs dmuon) 2> "$T_TMP/err"
check_eq "$?" 0 "build $EX with pkg-config --cflags --libs dmuon"
run env LD_LIBRARY_PATH="$PFX/lib" "$T_TMP/ex_shared" "$T_TMP/p.yaml"
check_rc 0 "the shared-linked example runs"
check_out "^ranks 4 nodes 2 gpus_per_node 2 units [1-9]" "and reads the plan"
ldd "$T_TMP/ex_shared" | grep -q "$PFX/lib/libdmuon.so" 2> /dev/null || \
    LD_LIBRARY_PATH="$PFX/lib" ldd "$T_TMP/ex_shared" | grep -q "$PFX/lib/libdmuon.so" && ok || bad "not linked to the installed libdmuon.so"
readelf -d "$T_TMP/ex_shared" | grep -q "NEEDED.*\[$so\]" && ok || bad "the example does not record $so as NEEDED"
# static: libdmuon.a with what Libs.private lists
cc -o "$T_TMP/ex_static" "$EX" $(pkg-config --cflags dmuon) "$PFX/lib/libdmuon.a" \
    $(pkg-config --static --libs dmuon | sed 's/ -ldmuon / /') 2> "$T_TMP/err"
check_eq "$?" 0 "build $EX against libdmuon.a with pkg-config --static --libs"
run "$T_TMP/ex_static" "$T_TMP/p.yaml"
check_rc 0 "the static example runs"
check_out "^rank 3 window [0-9]+ bytes" "and prints every rank"
if ldd "$T_TMP/ex_static" | grep -q libdmuon; then bad "static example loads libdmuon.so"; else ok; fi

# the README's trainer example, built against the installed tree as the
# README says (pkg-config), and run under mpirun
awk '/^## Using libdmuon in a trainer/{s=1} s && /^```c$/{c=1; next} c && /^```$/{exit} c{print}' \
    "$DMUON_ROOT/README.md" > "$T_TMP/trainer.c"
cc -o "$T_TMP/trainer" "$T_TMP/trainer.c" $(pkg-config --cflags --libs dmuon) 2> "$T_TMP/err"
check_eq "$?" 0 "the README's trainer example builds with pkg-config --cflags --libs dmuon"
run env -u LD_LIBRARY_PATH LD_LIBRARY_PATH="$PFX/lib" OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
    timeout 120 mpirun --oversubscribe -x LD_LIBRARY_PATH -np 2 "$T_TMP/trainer"
check_rc 0 "the installed trainer example runs on 2 ranks"
check_out "^step 9 loss" "and takes ten steps"
finish
