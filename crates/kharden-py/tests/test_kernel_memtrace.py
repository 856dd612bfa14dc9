"""scripts/kernel_memtrace/summarize.py: the plugin's counts, per path and region."""
import pathlib
import subprocess
import sys
import tomllib

SCRIPT = pathlib.Path(__file__).resolve().parents[3] / "scripts" / "kernel_memtrace" / "summarize.py"

CONSOLE = """\
memtrace-release: 6.1.0-test
memtrace-scale: 0.01
memtrace-win: 0 syscalls 0 0 getppid - 94 100 200 4
memtrace-win: 0 syscalls 1 0 getppid - 94 300 400 4
memtrace-win: 1 process 0 0 fork exit 95 500 600 2
memtrace-sym: ffffffff82000000 D __start_rodata
memtrace-sym: ffffffff82010000 D __end_rodata
memtrace-sym: ffffffff82a00000 D _sdata
memtrace-sym: ffffffff82a10000 D _edata
memtrace-sym: ffffffff8330d000 B __bss_start
memtrace-sym: ffffffff8331d000 B __bss_stop
"""

# Slots: 1 + scenario * 65536 + window. getppid's windows tick their 4 operations; fork's
# does not, so its lines count by accesses against its 2 operations. Its other path, exit,
# is marked 32768 slots further by the children, with ticks of their own (50, as a spinning
# thread's turns would be): it ran once per fork, 2 operations.
LINES = """\
1 ffffffff82000040 4 0 4
1 ffff888000001000 3 1 4
1 ffff888000002000 1 0 1
1 ffffc90000003fc0 2 2 3
2 ffffffff82000040 4 0 4
2 ffff888000001000 4 0 4
2 ffffffff82a00080 1 0 1
65537 ffffffff8330d0c0 1 1 2
65537 ffffea0000000040 1 0 1
98305 ffff888000005000 3 2 2
T 1 4
T 98305 50
T 2 4
"""


def test_lines_touched_by_half_the_operations_recur_and_the_rest_count_per_operation(tmp_path):
    (tmp_path / "console.txt").write_text(CONSOLE)
    (tmp_path / "lines.txt").write_text(LINES)
    dest = tmp_path / "m.toml"
    out = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path), str(dest)],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    d = tomllib.loads(dest.read_text())
    assert d["kernel_release"] == "6.1.0-test" and d["scale"] == 0.01
    getppid = d["paths"]["getppid"]
    assert (getppid["windows"], getppid["ops"]) == (2, 8)
    # The rodata line recurs in both windows (4 of 4 operations): listed by line offset.
    assert getppid["rodata_lines"] == [1]
    # The direct-map line recurs in both windows; the second window's other line and the
    # stack line of the first (3 of 4 operations: recurring) are counted where they fall.
    assert getppid["regions"]["direct_map"]["recurring"] == 1
    assert getppid["regions"]["direct_map"]["other_per_op"] == 0.125
    # It is listed by the guest's physical address / 64; the stack line, recurring in one
    # of the two windows (half of them), by its offset in the 16 KiB stack / 64.
    assert getppid["direct_map_lines"] == [0x1000 // 64]
    assert getppid["stack_lines"] == [0x3fc0 // 64]
    assert getppid["regions"]["vmalloc"]["recurring"] == 0.5
    # A data line of one window only: not recurring there (1 of 4), so not listed.
    assert getppid["data_lines"] == []
    assert getppid["regions"]["direct_map"]["reads_per_op"] == 8 / 8
    # fork's window has no ticks: its bss line's 2 accesses reach half its 2 operations.
    fork = d["paths"]["fork"]
    assert fork["bss_lines"] == [3]
    assert fork["regions"]["vmemmap"]["recurring"] == 1
    # The children's exit: its line, touched by both operations, recurs against the fork
    # window's 2 operations (not against the 50 ticks).
    exit_path = d["paths"]["exit"]
    assert (exit_path["windows"], exit_path["ops"]) == (1, 2)
    assert exit_path["direct_map_lines"] == [0x5000 // 64]
    assert exit_path["regions"]["direct_map"]["writes_per_op"] == 1
