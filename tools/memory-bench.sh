#!/usr/bin/env bash
# make bench (memory): per-rank peak memory over the post-build baseline,
# resident (VmHWM) and proportional (sampled Pss: the node-shared pool
# counted once over the node), of dmuon.torch lines D, C, B (FSDP ZeRO-3;
# HSDP 2 x 2) beside
# torch FSDP2 + AdamW (gloo), on 4 ranks, for a 16-block and a 48-block
# decoder (tools/memory-bench.py), each variant its own mpirun, the
# variants interleaved, under glibc's default allocator and with its mmap
# threshold fixed at 1 MiB (MALLOC_MMAP_THRESHOLD_: freed tensors go back
# to the system at once), the same for every variant.  Also checks that
# every dmuon rank's runtime figures equal dmuon-plan's for the same plan.
#
#   tools/memory-bench.sh [BIN]      env: MEM_LAUNCHES (default 2),
#                                    MEM_BLOCKS ("16 48"), MEM_ALLOCS ("default
#                                    mmap1M"), MEM_VARIANTS (default all),
#                                    MEM_OUT (JSON file)
set -euo pipefail
bin=${1:-bin}
root=$(cd "$(dirname "$0")/.." && pwd)
py=${DMUON_PYTHON:-$root/build/pyenv/bin/python}
launches=${MEM_LAUNCHES:-2}
blocks=${MEM_BLOCKS:-16 48}
out=${MEM_OUT:-$root/build/bench-memory.json}
variants=${MEM_VARIANTS:-fsdp2-adamw dmuon-D-fsdp dmuon-C-fsdp dmuon-B-fsdp dmuon-D-hsdp dmuon-C-hsdp dmuon-B-hsdp}
allocs=${MEM_ALLOCS:-default mmap1M}
case " $variants " in *" fsdp2-adamw "*) ;; *) variants="fsdp2-adamw $variants" ;; esac
if [ ! -x "$py" ] || ! "$py" -c "import torch, dmuon" 2> /dev/null; then
    echo "memory-bench: needs torch and dmuon in $py (make deps)" >&2
    exit 2
fi
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
port=29600
for b in $blocks; do
    for launch in $(seq 1 "$launches"); do
        for alloc in $allocs; do
            for v in $variants; do
                port=$((port + 1))
                env=(-x MASTER_PORT=$port)
                [ "$alloc" = mmap1M ] && env+=(-x MALLOC_MMAP_THRESHOLD_=1048576)
                echo "memory-bench: $b blocks, launch $launch, $alloc, $v" >&2
                timeout 600 mpirun -np 4 --oversubscribe --bind-to none --mca mpi_yield_when_idle 1 \
                    "${env[@]}" "$py" "$root/tools/memory-bench.py" --variant "$v" --blocks "$b" \
                    --plan-tool "$bin/dmuon-plan" --out "$tmp/r" > "$tmp/run.out" 2> "$tmp/run.err" || {
                    echo "memory-bench: $v failed:" >&2; tail -5 "$tmp/run.err" >&2; exit 1; }
                for f in "$tmp"/r.*.json; do
                    printf '{"blocks": %s, "launch": %s, "alloc": "%s", "r": %s}\n' \
                        "$b" "$launch" "$alloc" "$(cat "$f")" >> "$tmp/all.jsonl"
                done
                rm -f "$tmp"/r.*.json
            done
        done
    done
done
"$py" - "$tmp/all.jsonl" "$out" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
M = 1 << 20
res, bad = {}, []
for x in rows:
    r = x["r"]
    key = (x["blocks"], x["alloc"], r["variant"])
    res.setdefault(key, {}).setdefault(x["launch"], []).append((r["peak_bytes"],
                                                                 r["pss_peak_bytes"]))
    if "plan" in r:   # rank 0 brought the plan's figures: every rank's against them
        same = [y["r"] for y in rows if y["blocks"] == x["blocks"] and y["launch"] == x["launch"]
                and y["alloc"] == x["alloc"] and y["r"]["variant"] == r["variant"]]
        p = r["plan"]
        for s in same:
            rt = s["runtime"]
            want = {"pool_bytes": p["pool_bytes"], "ctrl_bytes": p["ctrl_bytes"],
                    "work_bytes": p["work_bytes"], "window_bytes": p["window_bytes"],
                    "state_bytes": p["ranks"][str(s["rank"])][0],
                    "total_bytes": p["ranks"][str(s["rank"])][1]}
            for k, w in want.items():
                if rt[k] != w:
                    bad.append("%s %d blocks rank %d %s: runtime %d, plan %d" % (
                        r["variant"], x["blocks"], s["rank"], k, rt[k], w))
runtime = {}
for x in rows:
    if "runtime" in x["r"]:
        runtime[(x["blocks"], x["r"]["variant"])] = x["r"]["runtime"]["total_bytes"]
params = {x["blocks"]: x["r"]["params"] for x in rows}
print("# peak memory over the post-build baseline, MiB per rank: the most over the 4 ranks,")
print("# median (min-max) over launches; rss: VmHWM (a shared page in every process that")
print("# touched it), pss: sampled Pss (a shared page 1/k in each of k); runtime: what dmuon's")
print("# runtime holds at most (pool + state, dmuon-plan's figure); x fsdp2: over FSDP2-AdamW's")
summary = []


def stat(b, alloc, v, i):
    peaks = [max(p[i] for p in ps) / M for _, ps in sorted(res[(b, alloc, v)].items())]
    return statistics.median(peaks), min(peaks), max(peaks), len(peaks)


for (b, alloc, v) in sorted(res, key=lambda k: (k[0], k[1] != "mmap1M", k[2] != "fsdp2-adamw", k[2])):
    rss, pss = stat(b, alloc, v, 0), stat(b, alloc, v, 1)
    ref_rss, ref_pss = stat(b, alloc, "fsdp2-adamw", 0)[0], stat(b, alloc, "fsdp2-adamw", 1)[0]
    rt = runtime.get((b, v))
    summary.append({"blocks": b, "params": params[b], "alloc": alloc, "variant": v,
                    "peak_mib_median": rss[0], "peak_mib_min": rss[1], "peak_mib_max": rss[2],
                    "pss_mib_median": pss[0], "pss_mib_min": pss[1], "pss_mib_max": pss[2],
                    "launches": rss[3], "runtime_mib": rt / M if rt else None,
                    "over_fsdp2": rss[0] / ref_rss, "pss_over_fsdp2": pss[0] / ref_pss})
print("%-6s %-8s %-7s %-13s %21s %21s %8s %6s %6s" % (
    "blocks", "params", "alloc", "variant", "rss MiB", "pss MiB", "runtime", "x rss", "x pss"))
for s in summary:
    print("%-6d %-8s %-7s %-13s %7.1f (%5.1f-%5.1f) %7.1f (%5.1f-%5.1f) %8s %6.2f %6.2f" % (
        s["blocks"], "%.1fM" % (s["params"] / 1e6), s["alloc"], s["variant"],
        s["peak_mib_median"], s["peak_mib_min"], s["peak_mib_max"],
        s["pss_mib_median"], s["pss_mib_min"], s["pss_mib_max"],
        "%.1f" % s["runtime_mib"] if s["runtime_mib"] else "-", s["over_fsdp2"],
        s["pss_over_fsdp2"]))
print("runtime bytes equal to dmuon-plan's, every rank: %s" % ("yes" if not bad else "NO"))
for b in bad[:10]:
    print("  " + b)
json.dump({"rows": summary, "plan_mismatches": bad}, open(sys.argv[2], "w"), indent=1)
sys.exit(1 if bad else 0)
EOF
