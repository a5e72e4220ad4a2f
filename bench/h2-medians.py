#!/usr/bin/env python3
"""Medians of bench/h2-interleaved.sh's output (stdin): per case and server,
the median CPU µs per request and requests/s, and the paired per-round ratios
new/old, new/h2o and old/h2o (medians)."""
import statistics
import sys
from collections import defaultdict

cpu = defaultdict(dict)
rps = defaultdict(dict)
for line in sys.stdin:
    f = line.split()
    if len(f) != 6 or f[0] == "round":
        continue
    rnd, srv, case, r, us, _ = f
    cpu[case][(srv, rnd)] = float(us)
    rps[case][(srv, rnd)] = float(r)
print("case | old | new | h2o | new/old | new/h2o | old/h2o (paired medians; rps in brackets)")
for case in cpu:
    def med(srv, d):
        v = [x for (s, _), x in d[case].items() if s == srv]
        return statistics.median(v) if v else float("nan")
    def ratio(a, b):
        rounds = {r for (_, r) in cpu[case]}
        v = [cpu[case][(a, r)] / cpu[case][(b, r)] for r in rounds
             if (a, r) in cpu[case] and (b, r) in cpu[case] and cpu[case][(b, r)]]
        return statistics.median(v) if v else float("nan")
    cells = [f"{med(s, cpu):.2f} ({med(s, rps) / 1000:.1f}k)" for s in ("old", "new", "h2o")]
    print(f"{case} | " + " | ".join(cells) + f" | {ratio('new', 'old'):.2f} | {ratio('new', 'h2o'):.2f} | {ratio('old', 'h2o'):.2f}")
