#!/usr/bin/env python3
"""Per stage of a GPU script, the SM clock, power and throttle reasons that nvidia-smi sampled
(OUT/smi.csv: `--query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,<reasons>
--format=csv,noheader,nounits -lms 100`) between the times in OUT/stages.txt (`NAME epoch`
lines). The clock and power medians are over the busy samples (over 150 W).

Usage: smi_stages.py OUT
"""
import statistics as st
import sys
from datetime import datetime
o = sys.argv[1]
stages = [l.split() for l in open(f"{o}/stages.txt")]
smi = []
for l in open(f"{o}/smi.csv"):
    p = [x.strip() for x in l.split(",")]
    try:
        t = datetime.strptime(p[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
        smi.append((t, float(p[1]), float(p[3]), float(p[4]), p[5]))
    except Exception:
        pass
print(f"{'stage':10} {'n':>5} {'sm MHz med':>10} {'min':>6} {'W med':>7} {'W max':>7} {'temp max':>8}  reasons")
for (name, a), (_, b) in zip(stages, stages[1:]):
    s = [x for x in smi if float(a) <= x[0] < float(b)]
    if not s:
        continue
    busy = [x for x in s if x[2] > 150] or s
    print(f"{name:10} {len(s):5d} {st.median(x[1] for x in busy):10.0f} {min(x[1] for x in busy):6.0f} "
          f"{st.median(x[2] for x in busy):7.0f} {max(x[2] for x in s):7.0f} {max(x[3] for x in s):8.0f}  "
          f"{sorted(set(x[4] for x in busy))}")
