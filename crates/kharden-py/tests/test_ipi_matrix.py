"""scripts/ipi_matrix.py: one-way IPI latency from a matrix whose cores' TSCs are offset."""
import pathlib
import subprocess
import sys

SCRIPT = pathlib.Path(__file__).resolve().parents[3] / "scripts" / "ipi_matrix.py"


def run(tmp_path, rows, *args):
    data = tmp_path / "data.csv"
    data.write_text("trial,sc,dc,latency\n" + "".join(f"{r}\n" for r in rows))
    return subprocess.run([sys.executable, str(SCRIPT), str(data), *args],
                          capture_output=True, text=True)


def test_tsc_offsets_cancel_over_a_pairs_two_directions(tmp_path):
    # Four CPUs whose TSCs run 0, +500, -300 and +900 cycles off; every true one-way
    # latency is 700 cycles, except that CPU 0 answers at 5000 (and is skipped).
    offset = [0, 500, -300, 900]
    rows = []
    for s in range(4):
        for d in range(4):
            if s != d:
                true = 5000 if d == 0 else 700
                raw = (true + offset[d] - offset[s]) % (1 << 32)  # stored unsigned
                rows += [f"{t},{s},{d},{raw}" for t in range(3)]
    out = run(tmp_path, rows, "--tsc-ghz", "2.0", "--skip", "0")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("3 pairs: median 700.0 TSC cycles = 350 ns"), out.stdout


def test_malformed_rows_are_named(tmp_path):
    out = run(tmp_path, ["0,1,x,3"], "--tsc-ghz", "2.0")
    assert out.returncode != 0
    assert "line 2: expected integer sc, dc and latency columns" in out.stderr
