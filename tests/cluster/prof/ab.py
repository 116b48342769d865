#!/usr/bin/env python3
"""ab.py DIR... — summarises tests/cluster/prof/ab.sh runs: per binary and
row (operator, bytes), the median over launches of x_owner = per-owner's
time / ours' (measured side by side in one mpirun) with its range, and ours'
median time; with two or more binaries, for each one after the first, in
how many launches (paired by launch number) its x_owner beat the first
binary's.  A measurement aid, not part of libdmuon."""
import collections
import glob
import json
import os
import re
import statistics
import sys

runs = collections.defaultdict(dict)   # name -> {(op, bytes, launch): (ours, per_owner)}
for d in sys.argv[1:]:
    for f in glob.glob(os.path.join(d, '*.json')):
        m = re.match(r'(.+)-([a-z]+)(\d+)\.json$', os.path.basename(f))
        if not m:
            continue
        try:
            rows = json.load(open(f))
        except (OSError, ValueError):
            continue
        t = {(r['op'], r['bytes'], r['line']): r['time_us'] for r in rows}
        for (op, b, line), v in t.items():
            if line == 'ours' and (op, b, 'per_owner') in t:
                runs[m.group(1)][(op, b, f'{d}:{m.group(3)}')] = (v, t[(op, b, 'per_owner')])
if not runs:
    sys.exit('ab.py: no dmuon-bench JSON with ours and per_owner rows in ' + ' '.join(sys.argv[1:]))
names = sorted(runs, key=lambda n: min(os.path.getmtime(f) for d in sys.argv[1:]
                                       for f in glob.glob(os.path.join(d, n + '-*.json'))))
cells = sorted({(op, b) for n in runs for (op, b, _) in runs[n]})
for op, b in cells:
    line = f'{op:4s} {b:>9d}'
    first = names[0]
    for n in names:
        got = {l: v for (o, bb, l), v in runs[n].items() if (o, bb) == (op, b)}
        if not got:
            continue
        x = [p / o for o, p in got.values()]
        ours = statistics.median([o for o, _ in got.values()])
        line += (f' | {n}: x_owner {statistics.median(x):.2f} ({min(x):.2f}-{max(x):.2f}), '
                 f'ours {ours:.0f} us, {len(x)} launches')
        if n != first:
            base = {l: v for (o, bb, l), v in runs[first].items() if (o, bb) == (op, b)}
            pairs = [(got[l], base[l]) for l in got if l in base]
            wins = sum(1 for (o, p), (o0, p0) in pairs if p / o > p0 / o0)
            line += f', beats {first} in {wins}/{len(pairs)}'
    print(line)
