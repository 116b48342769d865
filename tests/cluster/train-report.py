#!/usr/bin/env python3
"""The tables, checks and plot input of tests/cluster/train.sh.

Reads LOGS/<config>-<line>-r<round>.csv (dmuon-train --log: per step the
busiest rank's figure of every phase and, prefixed mean_, the mean over
ranks), LOGS/<config>-<line>-r<round>.ranks.csv (--rank-log: every rank's
figures) and LOGS/<config>-D-seed2.csv (the control), and writes to OUT:

  cluster-train.md    per configuration: the lines' medians over the timed
                      steps of every round, the exposed communication of
                      every rank, the targets; then the checks
  cluster-train.json  the same figures
  cluster-train.dat   step wall split into its exposed waits (gnuplot input)
  cluster-train.gp    the gnuplot script drawing cluster-train.svg

Checks (exit 1 when one fails): the step-0 loss is bit-identical in every run
with the same seed (every line, configuration and round); the rounds of one
line and configuration give bit-identical losses at every step; lines B and C
and D of the other configurations train the same model as D: their median
per-step relative loss difference |a - b| / |b|, and that of the final step,
are below those of the control (line D, another initial-value seed), the
tolerance of make equiv.  Line A (AdamW) is checked at step 0 only.  The
performance targets are reported, not checked.  Files are written to a
temporary name and renamed.
"""
import argparse
import csv
import json
import os
import statistics
import sys

CONFIG_NAMES = {"fsdp-z2": "FSDP ZeRO-2", "fsdp-z3": "FSDP ZeRO-3", "hsdp": "HSDP (ZeRO-3)"}


def fail_input(msg):
    print(f"train-report: error: {msg}", file=sys.stderr)
    sys.exit(2)


def read_csv(path):
    try:
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError as e:
        fail_input(f"cannot read '{path}': {e.strerror}")
    if not rows:
        fail_input(f"'{path}': no rows after the header")
    return rows


def steps_of(rows):
    """The step rows (a training loss; not the final validation row)."""
    return [r for r in rows if r.get("loss", "") != ""]


def num(row, key, path):
    try:
        return float(row[key])
    except (KeyError, ValueError):
        fail_input(f"'{path}': step {row.get('step')}: column '{key}' missing or not a number")


def median(v):
    return statistics.median(v) if v else float("nan")


def rel_diffs(a_rows, b_rows):
    b = {r["step"]: float(r["loss"]) for r in b_rows}
    return [abs(float(r["loss"]) - b[r["step"]]) / abs(b[r["step"]]) for r in a_rows if r["step"] in b]


def finite(v):
    """v with every NaN or infinite number (a ratio over a zero) as null: JSON has none."""
    if isinstance(v, float):
        return v if v == v and abs(v) != float("inf") else None
    if isinstance(v, dict):
        return {k: finite(x) for k, x in v.items()}
    if isinstance(v, list):
        return [finite(x) for x in v]
    return v


def atomic_write(path, text):
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


# the figures of the table: (log column, JSON key); seconds unless *_bytes
FIGS = [
    ("step_s", "step_s"), ("exposed_comm_s", "exposed_comm_s"),
    ("mean_exposed_comm_s", "mean_exposed_comm_s"), ("gather_wait_s", "gather_wait_s"),
    ("reduce_wait_s", "reduce_wait_s"), ("publish_wait_s", "publish_wait_s"),
    ("publish_wait_step_s", "publish_wait_step_s"), ("fwd_s", "fwd_s"), ("bwd_s", "bwd_s"),
    ("optim_s", "optim_s"), ("mean_optim_s", "mean_optim_s"), ("ns_s", "ns_s"),
    ("mean_ns_s", "mean_ns_s"), ("state_bytes", "state_bytes"),
    ("mean_state_bytes", "mean_state_bytes"),
]


def n_of(n, word):
    """'1 run', '3 runs'."""
    return f"{n} {word}" + ("" if n == 1 else "s")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--logs", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--hosts", type=int, required=True)
    ap.add_argument("--ranks", type=int, required=True)
    ap.add_argument("--rate", default="none")
    ap.add_argument("--rounds", type=int, required=True)
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--warm", type=int, required=True)
    ap.add_argument("--lines", required=True)
    ap.add_argument("--configs", required=True)
    ap.add_argument("--model", default="")
    ap.add_argument("--batch", type=int, default=0)
    ap.add_argument("--run-info", default="")
    a = ap.parse_args()
    if not os.path.isdir(a.out):
        fail_input(f"--out '{a.out}': not a directory")
    lines, configs = a.lines.split(), a.configs.split()
    np_ = a.hosts * a.ranks
    L = a.logs

    logs = {}     # (cfg, line, round) -> step rows
    ranks = {}    # (cfg, line, round) -> rank-log rows
    for c in configs:
        for l in lines:
            for r in range(1, a.rounds + 1):
                p = f"{L}/{c}-{l}-r{r}.csv"
                logs[c, l, r] = steps_of(read_csv(p))
                if len(logs[c, l, r]) != a.steps:
                    fail_input(f"'{p}': {len(logs[c, l, r])} step rows, expected {a.steps}")
                ranks[c, l, r] = read_csv(f"{L}/{c}-{l}-r{r}.ranks.csv")
    controls = {}
    for c in configs:
        p = f"{L}/{c}-D-seed2.csv"
        if os.path.exists(p):
            controls[c] = steps_of(read_csv(p))

    def timed(rows):
        return [r for r in rows if int(r["step"]) >= a.warm]

    # ---- figures per configuration and line ---------------------------------
    res = {}
    for c in configs:
        res[c] = {}
        for l in lines:
            d = {}
            pooled = [row for r in range(1, a.rounds + 1) for row in timed(logs[c, l, r])]
            for col, key in FIGS:
                d[key] = median([num(row, col, f"{c}-{l}") for row in pooled])
            d["rounds"] = []
            for r in range(1, a.rounds + 1):
                t = timed(logs[c, l, r])
                d["rounds"].append({k: median([num(row, col, f"{c}-{l}-r{r}") for row in t])
                                    for col, k in (("step_s", "step_s"),
                                                   ("exposed_comm_s", "exposed_comm_s"))})
            # every rank's medians over the timed steps of every round
            per = []
            for k in range(np_):
                rows = [row for r in range(1, a.rounds + 1) for row in ranks[c, l, r]
                        if int(row["rank"]) == k and int(row["step"]) >= a.warm]
                if not rows:
                    fail_input(f"{c}-{l}: the rank logs have no timed step of rank {k}")
                per.append({key: median([num(row, key, f"{c}-{l} ranks") for row in rows])
                            for key in ("step_s", "exposed_comm_s", "gather_wait_s",
                                        "reduce_wait_s", "publish_wait_step_s", "ns_s",
                                        "optim_s")})
            d["ranks"] = per
            top = max(range(np_), key=lambda k: per[k]["exposed_comm_s"])
            d["most_exposed_rank"] = top
            res[c][l] = d

    # ---- targets ------------------------------------------------------------
    def ratio(c, x, kx, y, ky, rnd=None):
        vx = res[c][x]["rounds"][rnd][kx] if rnd is not None else res[c][x][kx]
        vy = res[c][y]["rounds"][rnd][ky] if rnd is not None else res[c][y][ky]
        return vx / vy if vy > 0 else float("inf")

    target_defs = [  # (text, x, key, y, key, bound, x/y <= bound (True) or >= (False))
        ("D step <= 0.95 x C step", "D", "step_s", "C", "step_s", 0.95, True),
        ("D exposed comm <= 0.85 x C's", "D", "exposed_comm_s", "C", "exposed_comm_s", 0.85, True),
        ("D exposed comm <= A's", "D", "exposed_comm_s", "A", "exposed_comm_s", 1.0, True),
        ("B step >= 1.5 x D step", "B", "step_s", "D", "step_s", 1.5, False),
    ]
    targets = {}
    for c in configs:
        targets[c] = []
        for text, x, kx, y, ky, bound, le in target_defs:
            if x not in lines or y not in lines:
                continue
            v = ratio(c, x, kx, y, ky)
            per_round = [ratio(c, x, kx, y, ky, r) for r in range(a.rounds)]
            met = v <= bound if le else v >= bound
            targets[c].append({"target": text, "ratio": v, "bound": bound, "rounds": per_round,
                               "met": met})

    # ---- checks -------------------------------------------------------------
    checks = []

    def check(name, ok, detail):
        checks.append({"check": name, "ok": bool(ok), "detail": detail})

    s0 = {f"{c}-{l}-r{r}": logs[c, l, r][0]["loss"] for c in configs for l in lines
          for r in range(1, a.rounds + 1)}
    distinct = sorted(set(s0.values()))
    check("step-0 loss bit-identical in every run (seed 1)", len(distinct) == 1,
          f"{n_of(len(s0), 'run')}, step-0 loss {', '.join(distinct)}")
    for c in configs:
        for l in lines:
            same = all([row["loss"] for row in logs[c, l, r]] ==
                       [row["loss"] for row in logs[c, l, 1]] for r in range(2, a.rounds + 1))
            if a.rounds > 1:
                check(f"{c} {l}: every round gives the same losses", same,
                      "bit-identical at every step" if same else "the rounds' losses differ")
    equiv = []
    ref_line = "D" if "D" in lines else None
    for c in configs:
        if ref_line is None:
            break
        ref = logs[c, ref_line, 1]
        ctl = controls.get(c)
        cmed = median(rel_diffs(ctl, ref)) if ctl else None
        cfin = rel_diffs(ctl[-1:], ref) if ctl else None
        cfin = cfin[0] if cfin else None
        pairs = [(f"{c} {l} vs D", logs[c, l, 1]) for l in lines if l in ("B", "C")]
        pairs += [(f"{o} D vs {c} D", logs[o, "D", 1]) for o in configs
                  if o != c and configs.index(o) > configs.index(c)]
        for name, rows in pairs:
            d = rel_diffs(rows, ref)
            med, fin = median(d), d[-1]
            e = {"pair": name, "median_rel": med, "final_rel": fin, "control_median_rel": cmed,
                 "control_final_rel": cfin}
            equiv.append(e)
            if ctl:
                check(f"{name}: the same model (below the control, D with seed 2)",
                      med < cmed and fin < cfin,
                      f"median rel. diff {med:.3e} (control {cmed:.3e}), final {fin:.3e} "
                      f"(control {cfin:.3e})" + (
                          f"; only {a.steps} steps: too few for the losses of two seeds to "
                          f"part, so a model from another seed can pass this check (the "
                          f"step-0 check catches one); take --steps 8 or more"
                          if a.steps < 8 else ""))
    passed = all(k["ok"] for k in checks)

    # ---- markdown -----------------------------------------------------------
    ms = lambda v: f"{1e3 * v:.1f}"
    kib = lambda v: f"{v / 1024:.1f}"
    timed_n = a.rounds * (a.steps - a.warm)
    md = []
    md.append(f"# dmuon-train across {n_of(a.hosts, 'host')} x {n_of(a.ranks, 'rank')} "
              f"(namespace cluster, TCP"
              f"{', ' + a.rate + ' per host link' if a.rate != 'none' else ''})")
    md.append("")
    md.append(f"Model `{a.model}`, batch {a.batch}, {a.steps} steps per run, "
              f"{n_of(a.rounds, 'interleaved round')} ({' '.join(lines)} per configuration and "
              f"round); figures are medians over the {n_of(timed_n, 'timed step')} of each line "
              f"(the first {n_of(a.warm, 'step')} "
              f"of every run left out), in ms.  Busiest = the largest figure over the ranks in "
              f"each step; mean = over ranks.  Exposed comm = time inside gather calls (waits, "
              f"split starts, whole gathers run by a prefetch; the HSDP publish's node loads "
              f"inside them), inside reductions, and publish waits inside the step.  Communication inside the optimizer step that the runtime does not time "
              f"as a wait (line B's direction gather, C's per-owner publish at the end of the "
              f"step, the step's agreement) is in optim wall, not in exposed comm.  All ranks "
              f"of all hosts share this machine's cores: wall times include waiting for a "
              f"core, and figures are noisy.")
    if a.run_info and os.path.exists(a.run_info):
        with open(a.run_info) as f:
            info = [x.rstrip("\n")[2:] for x in f if x.startswith("# ")]
        md.append("")
        md += [f"- {x}" for x in info]
    for c in configs:
        md.append("")
        md.append(f"## {CONFIG_NAMES[c]}")
        md.append("")
        md.append("| line | step wall | per round | exposed comm busiest | mean | gather wait | "
                  "reduce wait | publish wait (all) | of which in step | fwd wall | bwd wall | "
                  "optim wall busiest | mean | NS busiest | NS mean | state busiest (KiB) | "
                  "state mean (KiB) | most exposed rank: exposed = gather + reduce + step publish |")
        md.append("|" + "---|" * 18)
        for l in lines:
            d = res[c][l]
            rk = d["ranks"][d["most_exposed_rank"]]
            rounds = " / ".join(ms(x["step_s"]) for x in d["rounds"])
            md.append(
                f"| {l} | {ms(d['step_s'])} | {rounds} | {ms(d['exposed_comm_s'])} | "
                f"{ms(d['mean_exposed_comm_s'])} | {ms(d['gather_wait_s'])} | "
                f"{ms(d['reduce_wait_s'])} | {ms(d['publish_wait_s'])} | "
                f"{ms(d['publish_wait_step_s'])} | {ms(d['fwd_s'])} | {ms(d['bwd_s'])} | "
                f"{ms(d['optim_s'])} | {ms(d['mean_optim_s'])} | {ms(d['ns_s'])} | "
                f"{ms(d['mean_ns_s'])} | {kib(d['state_bytes'])} | {kib(d['mean_state_bytes'])} | "
                f"rank {d['most_exposed_rank']}: {ms(rk['exposed_comm_s'])} = "
                f"{ms(rk['gather_wait_s'])} + {ms(rk['reduce_wait_s'])} + "
                f"{ms(rk['publish_wait_step_s'])} |")
        md.append("")
        md.append(f"Exposed communication of every rank (ms, median; mpirun's by-slot mapping "
                  f"puts ranks {a.ranks}h … {a.ranks}h+{a.ranks - 1} on host h+1):")
        md.append("")
        md.append("| line | " + " | ".join(f"rank {k}" for k in range(np_)) + " |")
        md.append("|---|" + "---|" * np_)
        for l in lines:
            md.append(f"| {l} | " + " | ".join(ms(x["exposed_comm_s"]) for x in res[c][l]["ranks"])
                      + " |")
        if targets[c]:
            md.append("")
            md.append("| target | ratio (pooled medians) | per round | bound | met |")
            md.append("|---|---|---|---|---|")
            for t in targets[c]:
                md.append(f"| {t['target']} | {t['ratio']:.3f} | "
                          f"{' / '.join(f'{x:.3f}' for x in t['rounds'])} | {t['bound']} | "
                          f"{'yes' if t['met'] else 'NO'} |")
    md.append("")
    md.append("## Checks")
    md.append("")
    md.append("| check | result | detail |")
    md.append("|---|---|---|")
    for k in checks:
        md.append(f"| {k['check']} | {'pass' if k['ok'] else 'FAIL'} | {k['detail']} |")
    if equiv and not controls:
        md.append("")
        md.append("No control run (--no-control): loss differences reported, not checked.")
        for e in equiv:
            md.append(f"- {e['pair']}: median rel. diff {e['median_rel']:.3e}, final "
                      f"{e['final_rel']:.3e}")
    md.append("")

    out = a.out
    atomic_write(f"{out}/cluster-train.md", "\n".join(md))
    doc = {"hosts": a.hosts, "ranks_per_host": a.ranks, "rate": a.rate, "rounds": a.rounds,
           "steps": a.steps, "warm": a.warm, "lines": lines, "model": a.model, "batch": a.batch,
           "units": "seconds, bytes", "configs": {c: {"lines": res[c], "targets": targets[c]}
                                                  for c in configs},
           "equivalence": equiv, "checks": checks, "passed": passed}
    atomic_write(f"{out}/cluster-train.json", json.dumps(finite(doc), indent=1, allow_nan=False)
                 + "\n")

    # ---- plot: step wall = other + the busiest exposed comm, split as the ---
    # most exposed rank splits its own (the busiest gather and reduce waits
    # are often other ranks', so stacking those would overshoot the step)
    dat = ["# config line other gather_wait reduce_wait publish_wait_step (ms, medians; "
           "other = step wall - busiest exposed comm, which is split in the proportions of "
           "the most exposed rank's gather, reduce and in-step publish waits)"]
    for c in configs:
        for l in lines:
            d = res[c][l]
            rk = d["ranks"][d["most_exposed_rank"]]
            parts = [rk["gather_wait_s"], rk["reduce_wait_s"], rk["publish_wait_step_s"]]
            whole = sum(parts)
            share = [x / whole * d["exposed_comm_s"] if whole > 0 else 0.0 for x in parts]
            other = max(0.0, d["step_s"] - d["exposed_comm_s"])
            dat.append(f"{c} {l} {ms(other)} {ms(share[0])} {ms(share[1])} {ms(share[2])}")
    atomic_write(f"{out}/cluster-train.dat", "\n".join(dat) + "\n")
    title = (f"dmuon-train, {n_of(a.hosts, 'host')} x {n_of(a.ranks, 'rank')} over TCP"
             f"{', ' + a.rate if a.rate != 'none' else ''} (shared cores: noisy)")
    def gp_str(text):
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
    said = [f"{c}: {t['target']}: {t['ratio']:.3f} ({'met' if t['met'] else 'NOT met'})"
            for c in configs for t in targets[c]]
    labels = "".join(f"set label {i + 1} {gp_str(x)} at screen 0.01, {0.02 + 0.035 * i:.3f} "
                     f"font ',10'\n" for i, x in enumerate(reversed(said)))
    gp = f"""set terminal svg size 1000,{560 + 20 * len(said)} dynamic font "sans,12"
set output '{out}/cluster-train.svg.tmp'
set style data histograms
set style histogram rowstacked
set style fill solid 0.85 border -1
set boxwidth 0.75
set key outside right top
set ylabel 'ms per step (median)'
set title '{title}'
set xtics rotate by -45
set grid ytics
set bmargin {5 + round(1.5 * len(said))}
{labels}plot '{out}/cluster-train.dat' using 3:xtic(sprintf('%s %s', stringcolumn(1), stringcolumn(2))) title 'compute and unexposed', \\
     '' using 4 title 'gather wait', '' using 5 title 'reduce wait', '' using 6 title 'publish wait in step'
set output
system('mv -f "{out}/cluster-train.svg.tmp" "{out}/cluster-train.svg"')
"""
    atomic_write(f"{out}/cluster-train.gp", gp)
    print("\n".join(md))
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
