#!/usr/bin/env python3
"""Device time per kernel name (and per name + grid) of a whole process, from an ncu CSV
(gpu__time_duration.sum), for a run of one prefill (`tally run --tokens N -n 0`).

Usage: ncu_kernels.py NCU.csv [--top 40]
"""
import sys
from collections import defaultdict

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from ncu_step import rows, short  # noqa: E402


def main():
    path = sys.argv[1]
    top = int(sys.argv[3]) if len(sys.argv) > 3 and sys.argv[2] == "--top" else 40
    ks = list(rows(path))
    total = sum(t for _, _, t in ks)
    print(f"{len(ks)} kernels, {total / 1e3:.2f} ms device time (serialised by ncu)")
    for title, key in (("by kernel", lambda n, g: short(n)), ("by kernel and grid", lambda n, g: f"{short(n)} {g}")):
        agg = defaultdict(lambda: [0, 0.0])
        for n, g, t in ks:
            a = agg[key(n, g)]
            a[0] += 1
            a[1] += t
        print(f"\n{title}:")
        print(f"{'kernel':64} {'n':>5} {'total ms':>9} {'mean us':>9} {'share':>6}")
        for k, (c, t) in sorted(agg.items(), key=lambda kv: -kv[1][1])[:top]:
            print(f"{k[:64]:64} {c:5d} {t / 1e3:9.3f} {t / c:9.1f} {100 * t / total:5.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
