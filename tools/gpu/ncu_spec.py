#!/usr/bin/env python3
"""Steps of a speculative-decoding run from an ncu CSV (gpu__time_duration.sum): a step starts
at each embedding lookup (dequant_rows); its row count is the embedding's grid.y. Prints the
device time per step kind (rows), then the kernel table of one step of 1 row and of the largest.

Usage: ncu_spec.py NCU.csv
"""
import sys
from collections import defaultdict

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from ncu_step import rows, short  # noqa: E402


def main():
    ks = list(rows(sys.argv[1]))
    starts = [i for i, (n, _, _) in enumerate(ks) if "dequant_rows" in short(n)]
    steps = [ks[a:b] for a, b in zip(starts, starts[1:] + [len(ks)])]
    by_rows = defaultdict(list)
    for s in steps:
        g = s[0][1].strip("()").split(",")
        r = int(g[1]) if len(g) > 1 else 0
        by_rows[r].append(s)
    print(f"{len(ks)} kernels, {len(steps)} steps")
    print(f"{'rows':>5} {'steps':>6} {'kernels/step':>13} {'median us':>10}")
    for r in sorted(by_rows):
        ts = sorted(sum(t for _, _, t in s) for s in by_rows[r])
        print(f"{r:5d} {len(ts):6d} {len(by_rows[r][0]):13d} {ts[len(ts) // 2]:10.1f}")
    for r in (min(by_rows), max(by_rows)):
        s = by_rows[r][len(by_rows[r]) // 2]
        total = sum(t for _, _, t in s)
        agg = defaultdict(lambda: [0, 0.0])
        for n, _, t in s:
            agg[short(n)][0] += 1
            agg[short(n)][1] += t
        print(f"\nstep of {r} rows: {len(s)} kernels, {total:.1f} us")
        for n, (c, t) in sorted(agg.items(), key=lambda kv: -kv[1][1])[:25]:
            print(f"  {n[:44]:44} {c:4d} {t:9.1f} {100 * t / total:5.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
