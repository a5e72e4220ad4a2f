#!/usr/bin/env python3
"""Medians of bench/h2-interleaved.sh's output (stdin): per case and server,
the median CPU µs per request with its range over the rounds, requests/s and
the client's CPU share, and the paired per-round ratios of new to old, h2o
and nginx (medians)."""
import statistics
import sys
from collections import defaultdict

SERVERS = ("old", "new", "h2o", "nginx")
cpu = defaultdict(dict)
rps = defaultdict(dict)
client = defaultdict(dict)
for line in sys.stdin:
    f = line.split()
    if len(f) not in (6, 7) or f[0] == "round":
        continue
    rnd, srv, case, r, us = f[:5]
    cpu[case][(srv, rnd)] = float(us)
    rps[case][(srv, rnd)] = float(r)
    if len(f) == 7:
        client[case][(srv, rnd)] = float(f[6])
servers = [s for s in SERVERS if any(s == k[0] for c in cpu.values() for k in c)]
print("case | " + " | ".join(servers)
      + " | new/old | new/h2o | new/nginx (µs per request: median [min-max] (rps; client CPU %);"
      " ratios: paired medians)")
for case in cpu:
    def values(srv, d):
        return [x for (s, _), x in d[case].items() if s == srv]

    def med(srv, d):
        v = values(srv, d)
        return statistics.median(v) if v else float("nan")

    def ratio(a, b):
        rounds = {r for (_, r) in cpu[case]}
        v = [cpu[case][(a, r)] / cpu[case][(b, r)] for r in rounds
             if (a, r) in cpu[case] and (b, r) in cpu[case] and cpu[case][(b, r)]]
        return statistics.median(v) if v else float("nan")

    def cell(s):
        v = values(s, cpu)
        if not v:
            return "-"
        return (f"{med(s, cpu):.2f} [{min(v):.2f}-{max(v):.2f}] ({med(s, rps) / 1000:.1f}k; "
                f"{med(s, client):.0f}%)")
    print(f"{case} | " + " | ".join(cell(s) for s in servers)
          + f" | {ratio('new', 'old'):.2f} | {ratio('new', 'h2o'):.2f} | {ratio('new', 'nginx'):.2f}")
