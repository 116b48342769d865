#!/usr/bin/env bash
# Every example in README.md and docs/*.md is run or accounted for.  A
# fenced block's info string says how: "sh run" blocks run here, in order,
# page by page, in one scratch folder per page (models/, tests/, tools/ and
# bin/ of the tree linked in, the tools on PATH) and must exit 0; "sh make"
# blocks are make targets the suite or CI runs itself (make test, make
# install in tests/cli/20-install.sh, ...); "sh gpu" blocks need a GPU
# (tests/gpu/run.sh) and count as skipped here; "sh bench" blocks are
# benchmarks that make bench runs (minutes) and count as skipped here;
# "python mpi" is the PyTorch script tests/mpi/66-torch.sh runs on 4 ranks; "c fragment" is part of a
# program, and the README's trainer program ("c") is built and run by
# tests/mpi/61-readme-example.sh; "python run" blocks run with
# $DMUON_PYTHON (skipped when it lacks the modules they import).  A block
# with another or no mark is a failure: nothing is shown that is not run.
source "$(dirname "$0")/../cli/lib.sh"
export OPENBLAS_NUM_THREADS=1 OMPI_MCA_mpi_yield_when_idle=1 OMPI_MCA_hwloc_base_binding_policy=none
root=$DMUON_ROOT
python3 - "$root" "$T_TMP/blocks" <<'PY' > "$T_TMP/list" || bad "extracting the blocks"
import os, re, sys
root, out = sys.argv[1], sys.argv[2]
os.makedirs(out)
pages = ["README.md"] + sorted("docs/" + f for f in os.listdir(os.path.join(root, "docs"))
                               if f.endswith(".md"))
n = 0
for page in pages:
    lines = open(os.path.join(root, page), encoding="utf-8").read().split("\n")
    i = 0
    while i < len(lines):
        m = re.match(r"^```(\S*)\s*(.*)$", lines[i])
        if not m:
            i += 1
            continue
        lang, mark, start = m.group(1), m.group(2).strip(), i + 1
        j = i + 1
        while j < len(lines) and not lines[j].startswith("```"):
            j += 1
        n += 1
        name = "%03d" % n
        with open(os.path.join(out, name), "w") as f:
            f.write("\n".join(lines[i + 1:j]) + "\n")
        print(name, page, start, lang or "-", mark.replace(" ", "_") or "-")
        i = j + 1
PY
prev=
while read -r name page line lang mark; do
    where="$page:$line"
    case "$lang $mark" in
    "sh run"|"bash run")
        if [ "$page" != "$prev" ]; then
            w=$T_TMP/work-${page//\//-}; mkdir -p "$w"
            for d in models tests tools bin db; do ln -s "$root/$d" "$w/$d"; done
            prev=$page
        fi
        (cd "$w" && PATH="$DMUON_BIN:$PATH" timeout 300 bash -euo pipefail "$T_TMP/blocks/$name") < /dev/null \
            > "$T_TMP/out" 2> "$T_TMP/err"; RC=$?
        check_rc 0 "$where: the example runs"
        [ "$RC" -eq 0 ] || sed 's/^/    out: /' "$T_TMP/out" | tail -n 5 ;;
    "python run")
        PY=${DMUON_PYTHON:-python3}
        mods=$(sed -nE 's/^(import|from) ([A-Za-z_.]+).*/\2/p' "$T_TMP/blocks/$name" | cut -d. -f1 | sort -u)
        missing=
        for m in $mods; do "$PY" -c "import $m" 2> /dev/null || missing="$missing $m"; done
        if [ -n "$missing" ]; then skip "$where: python example needs$missing ($PY)"; continue; fi
        (cd "$root" && timeout 300 "$PY" "$T_TMP/blocks/$name") < /dev/null > "$T_TMP/out" 2> "$T_TMP/err"; RC=$?
        check_rc 0 "$where: the python example runs" ;;
    "sh make"|"bash make") ok ;;
    "sh bench"|"bash bench") skip "$where: a benchmark run by make bench (tools/bench.sh), minutes long" ;;
    "python mpi") ok ;;    # run on 4 ranks by tests/mpi/66-torch.sh
    "sh gpu"|"bash gpu") skip "$where: needs a GPU (tests/gpu/run.sh)" ;;
    "c fragment") ok ;;
    "c -")
        if [ "$page" = README.md ]; then ok; else bad "$where: a C program outside the README is not built by any test"; fi ;;
    "yaml -"|"text -"|"json -"|"csv -") ok ;;    # data, not commands
    *) bad "$where: block '$lang $mark' is neither run nor marked (sh run|make|gpu, c fragment)" ;;
    esac
done < "$T_TMP/list"
check_eq "$(grep -c ' README.md .* sh run$' "$T_TMP/list")" 1 "the README has one end-to-end example that runs"
# every make target the pages name ("make cluster-train", "make -j2 test") is a rule of the Makefile
named=$(cd "$root" && grep -ohE '`make( -j[0-9]+)?( [A-Z_]+=[^ `]+)* [a-z][a-z-]+' README.md docs/*.md | awk '{print $NF}' | sort -u)
[ -n "$named" ] && ok || bad "no make target found in README.md and docs/ (the pattern is wrong)"
for t in $named; do
    grep -qE "^$t:" "$root/Makefile" && ok || bad "the docs name 'make $t', but the Makefile has no rule '$t'"
done
finish
