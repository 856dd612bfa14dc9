import pathlib

import pytest

REPO = pathlib.Path(__file__).resolve().parents[3]

# A small sweep: two syscall-loop configurations on two machines, a parameter value,
# and one short kernel-build window on a scaled machine.
SMALL = {
    "grid": {
        "machine": ["ivybridge-i5-3550", "skylake-i7-6700k"],
        "defense": ["none", "pti:linux"],
        "workload": [{"name": "syscall-loop", "iterations": 2000}],
        "set": {"kernel.irq_path_cycles": [300, 374]},
    },
    "point": [
        {
            "machine": "xeon-platinum-8160",
            "cpus": 8,
            "defense": "pti:linux,xpfo:deferred",
            "workload": {"name": "kbuild", "jobs": 5, "warmup_ms": 1, "window_ms": 2},
        }
    ],
}


@pytest.fixture
def small():
    return SMALL


@pytest.fixture
def repo():
    return REPO


@pytest.fixture
def committed_footprints():
    """The text of the committed kernel recording (kernels/)."""
    (path,) = REPO.glob("kernels/linux-6.18.*.toml")
    return path.read_text()
