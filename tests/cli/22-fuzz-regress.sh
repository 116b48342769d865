#!/usr/bin/env bash
# The fuzz harnesses (tests/fuzz/fuzz_*.c), built as plain replay programs,
# over every kept crash input (tests/fuzz/regress/<harness>/) and the seeds:
# none may crash (under the sanitizer build: no ASan/UBSan report either).
. "$(dirname "$0")/lib.sh"
fz=$DMUON_ROOT/tests/fuzz
for h in config safetensors inventory plan manifest; do
    bin=$DMUON_BUILD/tests/fuzz_$h
    if [ ! -x "$bin" ]; then bad "$h: replay program $bin not built (make tests)"; continue; fi
    set -- "$fz/seed/$h"
    [ -n "$(ls -A "$fz/regress/$h" 2>/dev/null)" ] && set -- "$@" "$fz/regress/$h"
    run "$bin" "$@"
    check_rc 0 "$h: replay of seeds and regression inputs"
    check_no_crash "$h: replay"
    check_out '^[1-9][0-9]* passed, 0 failed' "$h: every input replayed"
done
finish
