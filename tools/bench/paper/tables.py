#!/usr/bin/env python3
"""Reads the communication tables of the seed paper (DMuon-2, Tables 5, 6
and 7) from its text and writes them as dmuon-bench rows (the --json row
format plus "source", and "model"/"sharding" for Table 7), for
`dmuon-bench predict --cells`.

    python3 tools/bench/paper/tables.py PAPER.txt > tools/bench/paper/tables.json   (PAPER.txt: the DMuon-2 paper as text)

Table 5 (AllGatherV) and 6 (ReduceScatterV): each cell is "per-owner / ours"
over "ncclBroadcast / ncclAllGather" (ncclReduce / ncclReduceScatter), times
in ms, at 16, 64, 128, 256 GPUs (8 per node) and 16 KiB .. 1 GiB.  Table 7:
the publish of rail 0 of five models, per-owner, coalesced and ours at
2 .. 32 nodes, with the load of each subtable title (load_params,
load_bytes, load_largest).  Every figure is checked to be read exactly once."""
import json
import re
import sys

SIZES = [16 << 10, 64 << 10, 256 << 10, 1 << 20, 16 << 20, 64 << 20, 256 << 20, 1 << 30]
GPUS = [16, 64, 128, 256]
MODELS = {"Qwen2.5-1.5B": "qwen2.5-1.5b", "Qwen2.5-7B": "qwen2.5-7b", "Qwen2.5-32B": "qwen2.5-32b",
          "Wall-OSS-0.5": "wall-oss-0.5", "π0.5": "pi05"}
NUM = re.compile(r"^[0-9.]+$")


def rows_of(block):
    """Lines of a block that are 16 numbers separated by '/'."""
    out = []
    for line in block.splitlines():
        toks = line.replace("/", " ").split()
        if len(toks) == 16 and all(NUM.match(t) for t in toks):
            out.append([float(t) for t in toks])
    return out


def op_table(text, start, stop, op, root_line):
    block = text[text.index(start):text.index(stop)]
    rows = rows_of(block)
    if len(rows) != len(SIZES):
        sys.exit(f"{start}: expected {len(SIZES)} rows of 16 figures, found {len(rows)}")
    out = []
    for size, row in zip(SIZES, rows):
        for g, gpus in enumerate(GPUS):
            po, ours, root, equal = row[4 * g:4 * g + 4]
            for line, ms in (("per_owner", po), ("ours", ours), ("root", root),
                             ("equal_length", equal)):
                out.append({"op": op, "bytes": size, "dtype": "bf16", "line": line,
                            "ranks": gpus, "nodes": gpus // 8, "time_us": round(ms * 1000, 3),
                            "source": start.strip(" .")})
    return out


def publish_table(text):
    block = text[text.index("Table 7."):]
    out = []
    heads = list(re.finditer(r"\(([a-e])\) (\S+) \((HSDP-Z[23])\): (\d+) parameters, ([0-9.]+) MiB, "
                             r"largest ([0-9.]+) MiB", block))
    if len(heads) != 5:
        sys.exit(f"Table 7: expected 5 models, found {len(heads)}")
    for i, h in enumerate(heads):
        sub = block[h.end():heads[i + 1].start() if i + 1 < len(heads) else len(block)]
        nums = [l.split() for l in sub.splitlines()
                if len(l.split()) == 5 and all(NUM.match(t) for t in l.split())]
        if len(nums) < 4 or nums[0] != ["1", "3", "7", "15", "31"]:
            sys.exit(f"Table 7 ({h.group(1)}): expected the chain depths then three rows")
        model = MODELS[h.group(2)]
        # the load of the subtable title, MiB to bytes (whole BF16 elements)
        load = {"load_params": int(h.group(4)),
                "load_bytes": 2 * round(float(h.group(5)) * (1 << 20) / 2),
                "load_largest": 2 * round(float(h.group(6)) * (1 << 20) / 2)}
        for line, row in (("per_owner", nums[1]), ("coalesced", nums[2]), ("ours", nums[3])):
            for nodes, ms in zip([2, 4, 8, 16, 32], row):
                out.append({"op": "publish", "bytes": 0, "dtype": "bf16", "line": line,
                            "ranks": nodes * 8, "nodes": nodes, "time_us": round(float(ms) * 1000, 3),
                            "layer": "rail0", "model": model, "sharding": h.group(3).lower(),
                            **load, "source": f"Table 7 ({h.group(1)})"})
    return out


def main():
    text = "".join(open(p, encoding="utf-8").read() for p in sys.argv[1:])
    rows = op_table(text, "Table 5.", "Table 6.", "agv", "ncclBroadcast")
    rows += op_table(text, "Table 6.", "Table 7.", "rsv", "ncclReduce")
    rows += publish_table(text)
    json.dump(rows, sys.stdout, indent=1, ensure_ascii=False)
    sys.stdout.write("\n")


main()
