#!/usr/bin/env python3
"""Where one kernel's warps wait, from ncu's per-instruction source page
(`ncu -i R.ncu-rep --page source --print-source sass --csv > K.csv`, gzip optional).

Prints the stall reasons over the whole kernel (share of all samples), then the samples of each
stretch of SASS between two barriers (BAR) or exits, with that stretch's top four reasons: the
barriers split a kernel into the phases its source has, so this says which phase holds the time
and why. With TOP, also the TOP instructions with the most samples.

Usage: ncu_stalls.py K.csv[.gz] [TOP]
"""
import csv
import gzip
import sys


def main():
    path = sys.argv[1]
    top_n = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        rows = list(csv.reader(f))
    hdr, data = rows[1], rows[2:]
    reasons = [i for i, c in enumerate(hdr) if c.startswith("stall_") and "Not Issued" not in c]
    i_all = hdr.index("Warp Stall Sampling (All Samples)")
    i_exec = hdr.index("Instructions Executed")

    def num(r, i):
        return int(r[i] or 0)

    tot = {hdr[i]: sum(num(r, i) for r in data) for i in reasons}
    total = sum(tot.values()) or 1
    ranked = sorted(tot.items(), key=lambda x: -x[1])
    print(f"total samples {total}: " + " ".join(f"{k[6:]}={v * 100 / total:.1f}%" for k, v in ranked if v * 100 / total > 1))
    print("SASS lines     share  executed  stretch ends with                         top reasons (% of all)")
    acc, start, ex = {}, 0, 0
    for n, r in enumerate(data):
        for i in reasons:
            acc[hdr[i]] = acc.get(hdr[i], 0) + num(r, i)
        ex += num(r, i_exec)
        src = r[1].strip()
        if "BAR" in src or "EXIT" in src or n == len(data) - 1:
            s = sum(acc.values())
            if s > 0.005 * total:
                best = sorted(acc.items(), key=lambda x: -x[1])[:4]
                print(f"{start:5d}-{n:5d} {s * 100 / total:5.1f}% {ex:9d}  {src[:40]:40s}  "
                      + " ".join(f"{k[6:]}={v * 100 / total:.1f}" for k, v in best))
            acc, start, ex = {}, n + 1, 0
    if top_n:
        print(f"\ntop {top_n} instructions by samples:")
        for n in sorted(sorted(range(len(data)), key=lambda n: -num(data[n], i_all))[:top_n]):
            r = data[n]
            print(f"{n:5d} {num(r, i_all) * 100 / total:5.2f}% {r[i_exec]:>9} {r[1].strip()[:70]:70s} "
                  + " ".join(f"{hdr[i][6:]}={r[i]}" for i in reasons if num(r, i) > num(r, i_all) * 0.2))


if __name__ == "__main__":
    main()
