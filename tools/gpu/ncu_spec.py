#!/usr/bin/env python3
"""Steps of a speculative-decoding run from an ncu CSV (gpu__time_duration.sum): a step starts
at each embedding lookup (dequant_rows); its row count is the embedding's grid.y. A step of
fewer than 100 kernels is the MTP draft's (one layer and the head), any other one the model's.
Prints the device time per step kind, then the model's largest step (the verification) against
a one-row model step, kernel by kernel: from the same run, or from PLAIN.csv (a plain greedy
generation's ncu CSV, its last full step) when given.

Usage: ncu_spec.py NCU.csv [PLAIN.csv]
"""
import sys
from collections import defaultdict

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from ncu_step import rows, short  # noqa: E402

DRAFT_MAX_KERNELS = 100


def split(path):
    ks = list(rows(path))
    starts = [i for i, (n, _, _) in enumerate(ks) if "dequant_rows" in short(n)]
    steps = [ks[a:b] for a, b in zip(starts, starts[1:] + [len(ks)])]
    out = []
    for s in steps:
        g = s[0][1].strip("()").split(",")
        r = int(g[1]) if len(g) > 1 else 0
        kind = "draft" if len(s) < DRAFT_MAX_KERNELS else "model"
        out.append((kind, r, s))
    return ks, out


def total(s):
    return sum(t for _, _, t in s)


def by_kernel(s):
    agg = defaultdict(lambda: [0, 0.0])
    for n, _, t in s:
        agg[short(n)][0] += 1
        agg[short(n)][1] += t
    return agg


def main():
    ks, steps = split(sys.argv[1])
    print(f"{len(ks)} kernels, {len(steps)} steps (the first is the prompt)")
    groups = defaultdict(list)
    for kind, r, s in steps[1:]:
        groups[(kind, r)].append(s)
    print(f"{'kind':>6} {'rows':>5} {'steps':>6} {'kernels/step':>13} {'median us':>10}")
    for (kind, r) in sorted(groups):
        ts = sorted(total(s) for s in groups[(kind, r)])
        print(f"{kind:>6} {r:5d} {len(ts):6d} {len(groups[(kind, r)][0]):13d} {ts[len(ts) // 2]:10.1f}")
    model = {r: g for (kind, r), g in groups.items() if kind == "model"}
    if not model:
        return 0
    big = max(model)
    ver = sorted(model[big], key=total)[len(model[big]) // 2]
    if len(sys.argv) > 2:
        _, psteps = split(sys.argv[2])
        one = [s for kind, r, s in psteps[1:] if kind == "model" and r == 1]
        src = "the plain run's last full step"
    else:
        one = model.get(1, [])
        src = "a one-row model step of this run"
    if not one:
        print("no one-row model step to compare with")
        return 0
    plain = one[-1]
    a, b = by_kernel(plain), by_kernel(ver)
    print(f"\nverification ({big} rows, {total(ver):.1f} us) against {src} ({total(plain):.1f} us): "
          f"{total(ver) / total(plain):.2f}x")
    print(f"{'kernel':44} {'n 1':>4} {'us 1':>8} {'n ' + str(big):>4} {'us ' + str(big):>8} {'extra':>8}")
    for n in sorted(set(a) | set(b), key=lambda n: -(b.get(n, [0, 0])[1] - a.get(n, [0, 0])[1])):
        x, y = a.get(n, [0, 0.0]), b.get(n, [0, 0.0])
        print(f"{n[:44]:44} {x[0]:4d} {x[1]:8.1f} {y[0]:4d} {y[1]:8.1f} {y[1] - x[1]:8.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
