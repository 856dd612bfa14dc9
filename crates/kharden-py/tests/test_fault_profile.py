"""scripts/fault_profile.py: an anonymous fault's parts in a build and in a fault loop."""
import pathlib
import subprocess
import sys

SCRIPT = pathlib.Path(__file__).resolve().parents[3] / "scripts" / "fault_profile.py"

FAULT = """\
{comm} 
\tffffffff81001000 {leaf}
\tffffffff81002000 do_anonymous_page
\tffffffff81003000 handle_mm_fault
\tffffffff81004000 exc_page_fault
\tffffffff81005000 asm_exc_page_fault

"""
ENTRY = """\
{comm} 
\tffffffff81004000 exc_page_fault
\tffffffff81005000 asm_exc_page_fault

"""


def test_each_part_is_timed_per_fault_in_both_runs(tmp_path):
    build = tmp_path / "build.txt"
    loop = tmp_path / "loop.txt"
    # The build: two clear samples, one allocator sample, one entry sample (shared by the
    # anonymous share, 0.5) and an `as` sample that is not the named process's.
    build.write_text(FAULT.format(comm="cc1", leaf="clear_page_erms") * 2
                     + FAULT.format(comm="cc1", leaf="__rmqueue_pcplist")
                     + ENTRY.format(comm="cc1")
                     + FAULT.format(comm="as", leaf="clear_page_erms"))
    loop.write_text(FAULT.format(comm="loop", leaf="clear_page_erms")
                    + ENTRY.format(comm="loop"))
    out = subprocess.run(
        [sys.executable, str(SCRIPT), str(build), "--faults", "2e6", "--anon-share", "0.5",
         str(loop), "--loop-comm", "loop", "--loop-faults", "1e6", "--freq", "1"],
        capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    rows = {l[:24].strip(): l[24:].split() for l in out.stdout.splitlines()[1:]}
    # 1e6 anonymous faults in the build at 1 sample per second: 1 us per sample.
    assert rows["clear_page"] == ["2.000", "1.000", "+1.000"]
    assert rows["allocator: per-CPU list"] == ["1.000", "0.000", "+1.000"]
    assert rows["entry, interrupts off"] == ["0.500", "1.000", "-0.500"]
    assert rows["anonymous fault"] == ["3.500", "2.000", "+1.500"]
