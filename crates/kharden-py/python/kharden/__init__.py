"""kharden for Python: what a memory-protection hardening mechanism costs on a given
machine and workload, as pandas DataFrames.

    import kharden
    kharden.machines()                       # the machine library
    kharden.defenses()                       # the plug-ins and their variants
    kharden.parameters(machine="xeon-platinum-8160")
    kharden.run("ivybridge-i5-3550", "syscall-loop", defense="pti:linux", iterations=20000)
    kharden.reproduce("pti-pcid")            # published vs simulated, per row
    kharden.sweep("examples/xpfo_vs_cpus.toml")          # one row per point (Parquet)
    kharden.sweep({...}, ray="auto")         # the same points as Ray tasks
    kharden.use_footprints("mine.toml")      # your kernel's recorded paths, before any run

Errors are `kharden.KhardenError` (a ValueError) with a one-line message that names the
argument at fault: `run: machine: unknown machine 'nope': expected one of ...`, or for a
sweep given as a dict, the key of the dict (`sweep dict: point[1]: machine: ...`).
"""

import contextlib as _contextlib
import json as _json
import os as _os
import struct as _struct
import tempfile as _tempfile

import pandas as _pd

from . import _native
from ._errors import naming_dict_keys as _naming_dict_keys
from ._errors import run_message as _run_message
from ._native import KhardenError

__version__ = _native.__version__
__all__ = [
    "KhardenError",
    "machines",
    "defenses",
    "parameters",
    "experiments",
    "run",
    "reproduce",
    "sweep",
    "use_footprints",
]


def __dir__():
    """The API only: what `from kharden import *` gives, and the version."""
    return sorted(__all__ + ["__version__"])


def _set_list(set):
    """{path: value} or ["path=value"] as the --set strings the simulator takes."""
    if set is None:
        return []
    if isinstance(set, dict):
        return [f"{k}={_text(v)}" for k, v in set.items()]
    return [str(s) for s in set]


def _text(v):
    return str(v).lower() if isinstance(v, bool) else str(v)


def machines():
    """The machine library: one row per profile (topology, CPU, costs as columns)."""
    profiles = _json.loads(_native.machines())
    return _pd.json_normalize(list(profiles.values()), sep=".").set_index("name")


def defenses():
    """The defense plug-ins: name, what it is, whether it is broken on purpose."""
    rows = _json.loads(_native.defenses())
    return _pd.DataFrame(rows, columns=["name", "description", "broken"])


def parameters(machine=None, set=None):
    """Every model parameter resolved (value, unit, provenance); `machine` adds its
    profile's fields as `machine.*` rows."""
    params = _json.loads(_native.parameters(machine, _set_list(set)))
    rows = [dict(path=p, **v) for p, v in params.items()]
    return _pd.DataFrame(rows).set_index("path")


def use_footprints(path):
    """Run every later simulation of this module on the kernel footprint file at `path`
    (`kharden kernel record-footprint` on your own kernel) instead of the committed
    recording: the CLI's --footprints. A later call chooses again; a file that lacks a
    path the model runs raises KhardenError naming it. Sweeps on Ray send it to their
    workers."""
    _native.use_footprints(str(path))


def experiments():
    """Names `reproduce` takes."""
    return list(_native.experiments())


def reproduce(name, set=None):
    """A reproduction of a published table: one row per table row (published,
    simulated, error, tolerance, fitted). The experiment's fitted parameters and notes are
    in `df.attrs`."""
    rep = _json.loads(_native.reproduce(name, _set_list(set)))
    rows = [dict(kind="row", **r) for r in rep.get("rows", [])]
    rows += [dict(kind="prediction", **r) for r in rep.get("predictions", [])]
    df = _pd.DataFrame(rows)
    df.insert(0, "experiment", rep["experiment"])
    df.attrs = {
        k: rep.get(k) for k in ("source", "fitted", "fitted_parameters", "notes", "params")
    }
    return df


def _rows_frame(rows):
    """Rows as the simulator returns them (ordered, typed cells) as a DataFrame."""
    records, columns = [], []
    for r in rows:
        rec = {}
        for name, kind, value in r["cells"]:
            # Reals travel as their IEEE-754 bits (exact, NaN included).
            rec[name] = _struct.unpack("<d", _struct.pack("<Q", value))[0] if kind == "f" else value
            if name not in columns:
                columns.append(name)
        records.append(rec)
    return _pd.DataFrame(records, columns=columns)


def run(machine, workload, defense="none", cpus=None, set=None, **options):
    """One simulation, as a one-row DataFrame with the columns of a sweep's row.
    `options` are the workload's (syscall, iterations, loops for syscall-loop; jobs,
    jobs_per_cpu, warmup_ms, window_ms, window_cpu_ms, seed, samples for kbuild; op,
    caches, node for kernel-op; mmu, kvm_variant, guest_model, vcpus, ept_page for ssdd);
    an option given as None takes its default."""
    options = {k: v for k, v in options.items() if v is not None}
    text = _run_text(machine, workload, defense, cpus, set, options)
    try:
        rows = _json.loads(_native.sweep_rows("run", text, []))
    except KhardenError as e:

        def alone(key, value):
            _native.sweep_keys("run", _run_text(machine, workload, "none", None, None, {key: value}))

        raise KhardenError(_run_message(str(e), options, alone)) from None
    df = _rows_frame(rows)
    if "error" in df.columns and df["error"].notna().any():
        raise KhardenError(df["error"].iloc[0])
    return df


def _run_text(machine, workload, defense, cpus, set, options):
    """The one-point sweep file `run` runs."""
    point = {
        "machine": machine,
        "defense": defense,
        "workload": dict(name=workload, **options) if options else workload,
    }
    if cpus is not None:
        point["cpus"] = cpus
    if set:
        point["set"] = dict(set)
    return _native.toml_of_json("run", _json.dumps({"point": [point]}))


def _source(file_or_dict):
    """(place, TOML text) of a sweep given as a path or a dict in the file's form."""
    if isinstance(file_or_dict, dict):
        return "sweep dict", _native.toml_of_json("sweep dict", _json.dumps(file_or_dict))
    path = _os.fspath(file_or_dict)
    try:
        with open(path, encoding="utf-8") as f:
            return path, f.read()
    except OSError as e:
        raise KhardenError(f"{path}: cannot read sweep file: {e.strerror}") from None


def sweep(file_or_dict, output=None, threads=0, set=None, ray=None):
    """Runs a sweep (a sweep file's path, or a dict in its TOML form) and returns one row
    per point. With `output`, rows go to that Parquet file and points already in it are
    skipped (resume); without, a temporary file is used. `ray`: run one Ray task per
    point on the cluster at that address ("auto", or "local" to start one here); footprints
    chosen with use_footprints go to every task."""
    place, text = _source(file_or_dict)
    sets = _set_list(set)
    generated = isinstance(file_or_dict, dict)
    with _tempfile.TemporaryDirectory() as tmp, (
        _naming_dict_keys(place, text) if generated else _contextlib.nullcontext()
    ):
        out = _os.fspath(output) if output else _os.path.join(tmp, "sweep.parquet")
        if ray is not None:
            from .ray_sweep import run_on_ray

            run_on_ray(place, text, out, ray, sets)
        else:
            _native.sweep_to_file(place, text, out, sets, threads)
        return _pd.read_parquet(out, engine="pyarrow")
