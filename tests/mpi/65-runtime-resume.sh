#!/usr/bin/env bash
# Resume checks what it resumes: a checkpoint records the optimizer's
# hyperparameters and the Newton-Schulz variant; loading it with another
# value is an error naming the field and both values on every rank, unless
# the run names the field in resume_override; an unknown override entry is
# refused; a manifest written before the variant was recorded still loads.
source "$(dirname "$0")/../cli/lib.sh"
R="$DMUON_BUILD/tests/mpi/rt_check"
MPIRUN=(timeout 300 mpirun --oversubscribe --bind-to none --mca mpi_yield_when_idle 1)
G=(--global-grads)

run "${MPIRUN[@]}" -np 4 "$R" "${G[@]}" --steps 2 --save "$T_TMP/ck"
check_rc 0 "4 ranks, 2 steps, saved"
grep -q '"ns_variant": *"gram-pe5"' "$T_TMP/ck/manifest.json" && ok || bad "the manifest records the NS variant"
grep -q '"momentum": *"0.9499999999999999' "$T_TMP/ck/manifest.json" && ok || bad "the manifest records the momentum"

load() {  # description args...
    local what=$1; shift
    RT_CHECK_VERBOSE=1 run "${MPIRUN[@]}" -x RT_CHECK_VERBOSE -np 4 "$R" "${G[@]}" \
        --load "$T_TMP/ck" --start 2 "$@"
    check_rc 0 "$what"
}
load "the same settings resume" --load-only
check_out '^ok   load .* at step 2' "same settings: loaded at step 2"
load "another momentum is refused" --momentum 0.9 --expect-load-error
check_out "hyperparameter 'momentum' was 0.9499999999999999.* when saved, this run has 0.9000000000000000" \
    "the message names the field and both values"
load "another momentum with resume_override=momentum" --momentum 0.9 --resume-override momentum --load-only
check_out '^ok   load .* at step 2' "override: loaded"
load "another NS variant is refused" --ns-variant direct-pe5 --expect-load-error
check_out "variant 'gram-pe5' when saved, this run uses 'direct-pe5'" "the message names both variants"
load "another NS variant with resume_override=all" --ns-variant direct-pe5 --momentum 0.9 \
    --resume-override all --load-only
check_out '^ok   load .* at step 2' "override all: loaded"
load "an unknown override entry is refused" --resume-override "momentum, bogus" --expect-load-error
check_out "resume_override entry 'bogus'" "the message names the entry"
# a resume_override that fills its 256 bytes with no NUL is read within them
full=$(printf 'all,%.0s' $(seq 64))
check_eq "${#full}" 256 "the override fills the field"
load "a full resume_override without NUL" --momentum 0.9 --resume-override "$full" --load-only
check_out '^ok   load .* at step 2' "full override: loaded"

# a manifest without the variant (written before it was recorded) loads
sed -i '/"ns_variant"/d' "$T_TMP/ck/manifest.json"
load "a manifest without ns_variant loads (the variant is not compared)" --ns-variant direct-pe5 --load-only
check_out '^ok   load .* at step 2' "older manifest: loaded"
finish
