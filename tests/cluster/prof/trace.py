#!/usr/bin/env python3
"""trace.py DIR [--show N] — reads the per-rank timelines mpiprof.c writes
with $MPIPROF_TRACE=DIR and says where the timed calls of dmuon-bench spend
their time.  A timed call is, per rank, the span between the driver's two
clock reads around it (B..A, right after its barrier and right after the
call); the i-th such span of every rank is the same call.  Per call it
reports the slowest rank's span (what dmuon-bench times), the skew of the
barrier's return (of the B events),
and for every message the delay from its Isend to the moment its receiver
found it complete; over all calls, the medians of those, and the long
idle waits (Y events) of the slowest rank.  First it says how many
receives of the whole run it paired with their Isends.
A measurement aid, not part of libdmuon."""
import collections
import glob
import os
import re
import statistics as st
import sys


def load(d):
    ranks = {}
    for f in glob.glob(os.path.join(d, 'trace-*.txt')):
        r = int(re.search(r'trace-(\d+)\.txt$', f).group(1))
        ev = []
        for line in open(f):
            t, w, p, tag, v = line.split()
            ev.append((int(t), w, int(p), int(tag), int(v)))
        ranks[r] = ev
    return ranks


def windows(ev):
    """(start, end, index of first event, index after last) per B..A span."""
    out, b = [], None
    for i, (t, w, *_ ) in enumerate(ev):
        if w == 'B':
            b = (t, i)
        elif w == 'A' and b is not None:
            out.append((b[0], t, b[1] + 1, i))
            b = None
    return out


def main():
    d = sys.argv[1]
    show = int(sys.argv[sys.argv.index('--show') + 1]) if '--show' in sys.argv else 0
    ranks = load(d)
    if not ranks:
        sys.exit('trace.py: no trace-*.txt in ' + d)
    # match the k-th send src->dst/tag with the k-th completed receive
    sends = collections.defaultdict(list)
    for r, ev in ranks.items():
        for t, w, p, tag, v in ev:
            if w == 'S':
                sends[(r, p, tag)].append(t)
    seen = collections.Counter()
    delay = {}   # (rank, event index) -> ns from its Isend
    for r, ev in ranks.items():
        for i, (t, w, p, tag, v) in enumerate(ev):
            if w == 'R':
                k = seen[(p, r, tag)]
                seen[(p, r, tag)] += 1
                s = sends.get((p, r, tag), [])
                if k < len(s):
                    delay[(r, i)] = t - s[k]
    nrecv = sum(1 for ev in ranks.values() for e in ev if e[1] == 'R')
    print(f'receives: {nrecv} found complete, {len(delay)} paired with their Isend')
    win = {r: windows(ev) for r, ev in ranks.items()}
    n = min(len(w) for w in win.values())
    slow, skew, dly, lastd, idle = [], [], [], [], []
    for c in range(n):
        spans = {r: win[r][c] for r in ranks}
        t0 = min(s[0] for s in spans.values())
        skew.append((max(s[0] for s in spans.values()) - t0) / 1e3)
        r_slow = max(spans, key=lambda r: spans[r][1] - spans[r][0])
        s0, s1, i0, i1 = spans[r_slow]
        slow.append((s1 - s0) / 1e3)
        ds = [delay[(r, i)] / 1e3 for r in ranks for i in range(spans[r][2], spans[r][3])
              if (r, i) in delay]
        dly.extend(ds)
        lastd.append(max(ds) if ds else 0)
        idle.append(sum(v for t, w, p, tag, v in ranks[r_slow][i0:i1] if w == 'Y') / 1e3)
        if c < show:
            print(f'call {c}: slowest rank {r_slow} {slow[-1]:.0f} us, barrier skew '
                  f'{skew[-1]:.0f} us')
            for r in sorted(ranks):
                b, e, j0, j1 = spans[r]
                items = []
                for i in range(j0, j1):
                    t, w, p, tag, v = ranks[r][i]
                    x = f'{(t - t0) / 1e3:.0f}'
                    if w == 'S':
                        items.append(f'S>{p}@{x}')
                    elif w == 'R':
                        items.append(f'R<{p}@{x}(+{delay.get((r, i), 0) / 1e3:.0f})')
                    elif w == 'Y':
                        items.append(f'Y{v / 1e3:.0f}@{x}')
                print(f'  r{r}: start {(b - t0) / 1e3:.0f} end {(e - t0) / 1e3:.0f}: ' +
                      ' '.join(items))
    if not n:
        sys.exit('trace.py: no timed calls found')
    med = st.median
    print(f'{n} calls: slowest span median {med(slow):.0f} us (min {min(slow):.0f}, '
          f'max {max(slow):.0f}); barrier skew median {med(skew):.0f} us')
    if dly:
        q = sorted(dly)
        print(f'messages: {len(dly)}, Isend-to-found delay median {med(dly):.0f} us, '
              f'90% {q[int(0.9 * (len(q) - 1))]:.0f} us, max {q[-1]:.0f} us; the longest '
              f'per call, median {med(lastd):.0f} us')
    print(f'idle waits over 100 us on the slowest rank: median {med(idle):.0f} us per call')


if __name__ == '__main__':
    main()
