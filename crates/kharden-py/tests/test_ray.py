"""The Ray path: one task per point on a local Ray, the same rows as the local run."""

import json
import re
import subprocess
import sys

import pytest

import kharden

ray = pytest.importorskip("ray", reason="ray is not installed (pip install ray)")


def test_ray_rows_are_identical_to_the_local_run(small, tmp_path):
    local = tmp_path / "local.parquet"
    on_ray = tmp_path / "ray.parquet"
    a = kharden.sweep(small, output=local)
    b = kharden.sweep(small, output=on_ray, ray="local")
    assert a.equals(b)
    assert local.read_bytes() == on_ray.read_bytes()


def _slower_getppid(text, by_ns):
    """The footprint text with every getppid latency `by_ns` longer."""
    start = text.index('name = "getppid"')
    at = text.index("latency_ns = [", start)
    end = text.index("]", at)
    values = text[at + len("latency_ns = [") : end].split(",")
    slower = ", ".join(f"{float(v) + by_ns:.1f}" for v in values)
    return f"{text[:at]}latency_ns = [{slower}{text[end:]}"


def test_ray_workers_run_the_footprints_chosen_here(repo, committed_footprints, tmp_path):
    # A recording of one's own, whose host profile is a file beside it: the workers get
    # both as texts. One recording per process, so a fresh interpreter chooses it and
    # sweeps on Ray and locally; both differ from the committed recording alike.
    text = committed_footprints
    library_host = 'host_machine = "recording-host-epyc-zen4-kvm"'
    assert library_host in text
    mine = tmp_path / "mine.toml"
    own_host = text.replace(library_host, 'host_machine = "mine-host.toml"')
    mine.write_text(_slower_getppid(own_host, 1000.0))
    host = (repo / "machines" / "recording-host-epyc-zen4-kvm.toml").read_text()
    (tmp_path / "mine-host.toml").write_text(host)
    sweep = {
        "grid": {
            "machine": ["haswell-i7-4770"],
            "defense": ["none", "pti:linux"],
            "workload": [{"name": "syscall-loop", "iterations": 2000}],
        }
    }
    committed_ns = kharden.sweep(sweep)["ns_per_iteration"].tolist()
    code = (
        "import json, sys, kharden; kharden.use_footprints(sys.argv[1]); s = json.loads(sys.argv[2]); "
        "local = kharden.sweep(s); on_ray = kharden.sweep(s, ray='local'); "
        "assert local.equals(on_ray), (local, on_ray); "
        "print(json.dumps(on_ray['ns_per_iteration'].tolist()))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(mine), json.dumps(sweep)],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    mine_ns = json.loads(out.stdout.strip().splitlines()[-1])
    # 1000 ns more on the recording host is that many of its cycles more on the Haswell,
    # in every configuration.
    def ghz(toml):
        return float(re.search(r"^(?:host_ghz|frequency_ghz) = ([0-9.]+)", toml, re.M)[1])

    haswell = (repo / "machines" / "haswell-i7-4770.toml").read_text()
    expected = 1000.0 * ghz(text) / ghz(haswell)
    for before, after in zip(committed_ns, mine_ns):
        assert abs(after - before - expected) < 0.05 * expected, (committed_ns, mine_ns)
