#!/usr/bin/env bash
# An output that did not arrive is never a success: every tool's --json
# (and --help) written to /dev/full exits 3 and says it could not write
# standard output.  Under mpirun a rank's stdout is a pipe to mpirun, so the
# tools run here as single processes.
source "$(dirname "$0")/lib.sh"
B=$DMUON_BIN
INV="$DMUON_ROOT/tests/fuzz/seed/inventory/tiny.yaml"
ST="$DMUON_ROOT/tests/reference/hf/st/qwen3_moe"
export OPENBLAS_NUM_THREADS=1
if [ ! -w /dev/full ]; then skip "/dev/full is not writable here"; finish; exit; fi
"$B/dmuon-plan" "$INV" --ranks 4 --cost flops -o "$T_TMP/p.yaml" > /dev/null
"$B/dmuon-probe" --shapes 8x8 --iters 1 --warmup 0 --db "$T_TMP/c.sqlite" > /dev/null 2>&1
full() {  # DESCRIPTION COMMAND...: the command's stdout to /dev/full exits 3 with a message
    local what=$1; shift
    "$@" > /dev/full 2> "$T_TMP/err"; RC=$?
    check_rc 3 "$what > /dev/full"
    check_err 'cannot write standard output' "$what names the failed write"
}
full "plan --json" "$B/dmuon-plan" "$DMUON_ROOT/models/qwen2.5-1.5b.yaml" --ranks 64 --cost flops --json
full "plan report" "$B/dmuon-plan" "$INV" --ranks 4 --cost flops
full "plan -o -" "$B/dmuon-plan" "$INV" --ranks 4 --cost flops -o -
full "plan inspect --tensors --json" "$B/dmuon-plan" inspect --tensors --json "$ST"
full "plan show --json" "$B/dmuon-plan" show "$T_TMP/p.yaml" --json
full "verify --plan --json" "$B/dmuon-verify" --plan "$T_TMP/p.yaml" --json
full "verify ns --json" "$B/dmuon-verify" ns --shapes 8x8 --json
full "probe --list --json" "$B/dmuon-probe" --list --json --db "$T_TMP/c.sqlite"
full "probe --json" "$B/dmuon-probe" --shapes 8x8 --iters 1 --warmup 0 --db "$T_TMP/d.sqlite" --json
full "bench ns --json" "$B/dmuon-bench" ns --shapes 8x8 --iters 1 --json
full "bench --json" "$B/dmuon-bench" -b 1K -e 1K --json
full "train --help" "$B/dmuon-train" --help
full "train --write-config -" "$B/dmuon-train" --write-config -
full "train --write-yaml -" "$B/dmuon-train" --write-yaml -
# a failed write of standard output is said once, not again at exit
for a in "--write-config -" "plan -o -"; do
    if [ "$a" = "plan -o -" ]; then
        "$B/dmuon-plan" "$INV" --ranks 4 --cost flops -o - > /dev/full 2> "$T_TMP/err"
    else
        # shellcheck disable=SC2086
        "$B/dmuon-train" $a > /dev/full 2> "$T_TMP/err"
    fi
    n=$(grep -c 'cannot write standard output' "$T_TMP/err")
    check_eq "$n" 1 "$a > /dev/full: the failed write is said once ($(tr '\n' '|' < "$T_TMP/err"))"
done
for t in plan probe bench verify train; do
    full "dmuon-$t --version" "$B/dmuon-$t" --version
done

# a new cost database on a full file system: exit 3, and no empty file left
if [ "$(id -u)" = 0 ] && mkdir -p "$T_TMP/fs" && mount -t tmpfs -o size=8k tmpfs "$T_TMP/fs" 2> /dev/null; then
    dd if=/dev/zero of="$T_TMP/fs/fill" bs=1k count=8 2> /dev/null
    run "$B/dmuon-probe" --shapes 8x8 --iters 1 --warmup 0 --db "$T_TMP/fs/c.sqlite"
    check_rc 3 "probe --db on a full file system"
    check_err "c.sqlite.*full" "and says the disk is full"
    left=$(ls "$T_TMP/fs" | grep -v '^fill$' | tr '\n' ' ')
    check_eq "$left" "" "no database debris on the full file system"
    umount "$T_TMP/fs"
else
    skip "a full file system needs root and a tmpfs mount"
fi
finish
