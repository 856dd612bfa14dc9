#!/usr/bin/env python3
"""One-way IPI latency from a Nautilus `ipitest oneway` matrix whose cores' TSCs are offset.

Each sample is the receiver's TSC in its handler minus the sender's TSC read just after the
ICR write, so a pair (i, j) measures latency(i->j) + offset(j) - offset(i). The offsets
cancel in the mean of the pair's two directions, which is what this prints: the median of
those means over all pairs (machines/xeon-platinum-8160.toml [NAUT] cites its output).

    python3 scripts/ipi_matrix.py data.csv --tsc-ghz 2.1 --skip 0

data.csv: `trial,sc,dc,latency` rows (github.com/khale/ipi-heatmaps machines/*/data.csv),
latencies as unsigned 32-bit TSC differences (negative ones wrap).
"""
import argparse
import collections
import csv
import statistics
import sys


def pair_means(path, skip):
    """The mean of each unordered pair's two directions, each direction its median sample."""
    samples = collections.defaultdict(list)
    with open(path, newline="") as f:
        for n, row in enumerate(csv.DictReader(f), start=2):
            try:
                src, dst, lat = int(row["sc"]), int(row["dc"]), int(row["latency"])
            except (KeyError, TypeError, ValueError):
                sys.exit(f"{path}: line {n}: expected integer sc, dc and latency columns")
            if lat >= 1 << 31:
                lat -= 1 << 32
            if src not in skip and dst not in skip:
                samples[(src, dst)].append(lat)
    med = {k: statistics.median(v) for k, v in samples.items()}
    return {
        (i, j): (med[(i, j)] + med[(j, i)]) / 2
        for (i, j) in med
        if i < j and (j, i) in med
    }


def split_medians(means, group):
    """Medians of the pairs within one group and across groups."""
    same = [v for (i, j), v in means.items() if group(i) == group(j)]
    across = [v for (i, j), v in means.items() if group(i) != group(j)]
    return statistics.median(same), statistics.median(across)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv")
    ap.add_argument("--tsc-ghz", type=float, required=True, help="the TSC's rate")
    ap.add_argument("--skip", type=int, action="append", default=[],
                    help="a CPU to leave out (repeatable)")
    a = ap.parse_args()
    means = pair_means(a.csv, set(a.skip))
    if not means:
        sys.exit(f"{a.csv}: no pair measured in both directions")
    v = sorted(means.values())
    q = lambda p: v[int(p * (len(v) - 1))]
    ns = lambda c: c / a.tsc_ghz
    med = statistics.median(v)
    print(f"{len(v)} pairs: median {med:.1f} TSC cycles = {ns(med):.0f} ns, "
          f"p10 {ns(q(0.1)):.0f} ns, p90 {ns(q(0.9)):.0f} ns")
    cpus = sorted({c for pair in means for c in pair})
    half = (cpus[0] + cpus[-1] + 1) / 2
    for name, group in [("lower/upper half", lambda c: c < half), ("parity", lambda c: c % 2)]:
        same, across = split_medians(means, group)
        print(f"split by {name}: within {same:.1f}, across {across:.1f} TSC cycles")


if __name__ == "__main__":
    main()
