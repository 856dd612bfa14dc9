"""XPFO's cost against the number of CPUs, from the sweep file beside this script, plotted
with matplotlib.

    pip install ./crates/kharden-py matplotlib
    python3 examples/xpfo_vs_cpus.py [--ray ADDRESS] [-o xpfo_vs_cpus.svg]

Rows go to examples/xpfo_vs_cpus.parquet; a second run reuses them (resume)."""

import argparse
import pathlib

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt

import kharden

HERE = pathlib.Path(__file__).resolve().parent


def main():
    p = argparse.ArgumentParser()
    p.add_argument("-o", "--out", default=str(HERE / "xpfo_vs_cpus.svg"),
                   help="the plot (.svg or .png)")
    p.add_argument("--ray", help="run the points on the Ray cluster at this address")
    a = p.parse_args()
    df = kharden.sweep(HERE / "xpfo_vs_cpus.toml",
                       output=HERE / "xpfo_vs_cpus.parquet", ray=a.ray)
    if "error" in df.columns and df["error"].notna().any():
        raise SystemExit(f"failed points:\n{df.loc[df['error'].notna(), ['key', 'error']]}")
    # System time per compile job relative to the unhardened kernel at the same CPU count.
    base = df[df["defense"] == "pti:linux"].set_index("cpus")["system_ms_per_job"]
    df["x_baseline"] = df["system_ms_per_job"] / df["cpus"].map(base)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for defense, rows in df[df["defense"] != "pti:linux"].groupby("defense", sort=False):
        rows = rows.sort_values("cpus")
        ax.plot(rows["cpus"], rows["x_baseline"], marker="o", label=defense)
    ax.set_xscale("log", base=2)
    ax.set_xticks(sorted(df["cpus"].unique()), [str(c) for c in sorted(df["cpus"].unique())])
    ax.set_xlabel("hardware threads (xeon-platinum-8160 scaled; make -j 5/8 of them)")
    ax.set_ylabel("system time / without XPFO")
    ax.set_title("XPFO's cost against CPU count (kharden)")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(a.out)
    print(df.pivot(index="cpus", columns="defense", values="x_baseline").round(2))
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
