"""A sweep's points as Ray tasks (one per point), gathered into the Parquet file the local
run writes: `kharden sweep FILE --ray ADDRESS` runs `python3 -m kharden.ray_sweep`, and
`kharden.sweep(..., ray=ADDRESS)` calls `run_on_ray`.

Every task gets the sweep's text and its point's index and returns the row; a row
depends only on its point, so the file is the one a local run writes. Footprints chosen
in this process (kharden.use_footprints, the CLI's --footprints) go with every task as
their texts: a worker on another machine does not have the files."""

import argparse
import json
import sys

from . import _native
from ._native import KhardenError


def _point(place, text, index, sets, footprints):
    if footprints is not None:
        _native.use_footprints_portable(footprints)
    return _native.sweep_point(place, text, index, sets)


def run_on_ray(place, text, output, address, sets=()):
    try:
        import ray
    except ImportError:
        raise KhardenError(
            "ray: the ray package is not installed (pip install ray)"
        ) from None
    sets = list(sets)
    # Checks the whole sweep (and a resumed output) before anything is sent out.
    pending = json.loads(_native.sweep_pending(place, text, output, sets))
    footprints = _native.chosen_footprints()
    started_here = not ray.is_initialized()
    if started_here:
        if address in ("local", ""):
            ray.init(include_dashboard=False, log_to_driver=False)
        else:
            ray.init(address=address, include_dashboard=False, log_to_driver=False)
    try:
        task = ray.remote(_point)
        futures = [task.remote(place, text, i, sets, footprints) for i in pending]
        rows = [json.loads(r) for r in ray.get(futures)]
    finally:
        if started_here:
            ray.shutdown()
    _native.sweep_write(place, text, output, json.dumps(rows), sets)
    failed = sum(
        1 for r in rows if any(c[0] == "error" for c in r["cells"])
    )
    return {"points": len(json.loads(_native.sweep_keys(place, text, sets))),
            "ran": len(rows), "failed": failed}


def main(argv=None):
    p = argparse.ArgumentParser(prog="python3 -m kharden.ray_sweep")
    p.add_argument("file")
    p.add_argument("--address", required=True)
    p.add_argument("--output", required=True)
    p.add_argument("--set", action="append", default=[])
    p.add_argument("--footprints")
    a = p.parse_args(argv)
    try:
        if a.footprints is not None:
            _native.use_footprints(a.footprints)
        with open(a.file, encoding="utf-8") as f:
            text = f.read()
        s = run_on_ray(a.file, text, a.output, a.address, a.set)
    except KhardenError as e:
        print(f"kharden: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"kharden: {a.file}: cannot read sweep file: {e.strerror}", file=sys.stderr)
        return 2
    print(
        f"sweep on ray: {s['points']} points, {s['ran']} ran as Ray tasks "
        f"({s['failed']} failed); wrote {a.output}",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
