#!/usr/bin/env python3
"""Per-kernel device time of one engine step, from an ncu CSV (gpu__time_duration.sum).

Usage: ncu_step.py NCU.csv [--first-kernel dequant_rows]
A step starts at each launch of the first plan kernel (the embedding lookup). The first step is the
prefill; the rest are decode steps. Prints every step's total, then the last step grouped by kernel
name and in launch order.
"""
import csv
import gzip
import sys
from collections import OrderedDict

UNIT = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3, "second": 1e6, "s": 1e6}


def rows(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", newline="") as f:
        lines = [l for l in f if not l.startswith("==")]
    for r in csv.DictReader(lines):
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        v = float(r["Metric Value"].replace(",", ""))
        yield r["Kernel Name"], r.get("Grid Size", ""), v * UNIT.get(r["Metric Unit"], 1.0)


def short(name):
    return name.split("(")[0].replace("void ", "")


def main():
    path = sys.argv[1]
    first = sys.argv[3] if len(sys.argv) > 3 and sys.argv[2] == "--first-kernel" else "dequant_rows"
    ks = list(rows(path))
    starts = [i for i, (n, _, _) in enumerate(ks) if first in short(n)]
    if not starts:
        print(f"no kernel named like `{first}` in {len(ks)} kernels")
        return 1
    steps = [ks[a:b] for a, b in zip(starts, starts[1:] + [len(ks)])]
    print(f"{len(ks)} kernels, {len(steps)} steps (step 0 = prefill)")
    for i, s in enumerate(steps):
        print(f"step {i}: {len(s)} kernels, {sum(t for _, _, t in s):.1f} us device time")
    last = steps[-2] if len(steps) > 2 else steps[-1]
    total = sum(t for _, _, t in last)
    print(f"\nlast full decode step: {len(last)} kernels, {total:.1f} us")
    g = OrderedDict()
    for n, _, t in last:
        c = g.setdefault(short(n), [0, 0.0])
        c[0] += 1
        c[1] += t
    print(f"{'kernel':48} {'n':>4} {'total us':>9} {'mean us':>8} {'share':>6}")
    for n, (c, t) in sorted(g.items(), key=lambda kv: -kv[1][1]):
        print(f"{n[:48]:48} {c:4d} {t:9.1f} {t / c:8.2f} {100 * t / total:5.1f}%")
    print("\nin launch order:")
    for n, grid, t in last:
        print(f"  {short(n)[:44]:44} {grid:>16} {t:8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
