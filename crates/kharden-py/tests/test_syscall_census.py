"""scripts/syscall_census.py: the compile job's syscalls per job, fstat told from stat."""
import pathlib
import subprocess
import sys

SCRIPT = pathlib.Path(__file__).resolve().parents[3] / "scripts" / "syscall_census.py"

TRACE = """\
             cc1 raw_syscalls:sys_enter: NR 262 (3, 7f25c11a1c99, 7fff6dfa8ae0, 1000, 0, 0)
             cc1 raw_syscalls:sys_enter: NR 262 (3, 7f25c11a1c99, 7fff6dfa8ae0, 1000, 0, 0)
             cc1 raw_syscalls:sys_enter: NR 262 (ffffff9c, 7f25c11a1c99, 7fff6dfa8ae0, 0, 0, 0)
             cc1 raw_syscalls:sys_enter: NR 257 (ffffff9c, 55d0, 0, 0, 0, 0)
              sh raw_syscalls:sys_enter: NR 58 (0, 0, 0, 0, 0, 0)
              sh raw_syscalls:sys_enter: NR 262 (3, 7f25c11a1c99, 7fff6dfa8ae0, 1000, 0, 0)
             gcc raw_syscalls:sys_enter: NR 58 (0, 0, 0, 0, 0, 0)
            make raw_syscalls:sys_enter: NR 435 (7ffd, 58, 0, 0, 0, 0)
            make raw_syscalls:sys_enter: NR 257 (ffffff9c, 55d0, 0, 0, 0, 0)
"""


def test_calls_per_job_weigh_the_jobs_processes_and_tell_fstat_apart(tmp_path):
    path = tmp_path / "sc.txt"
    path.write_text(TRACE)
    out = subprocess.run([sys.executable, str(SCRIPT), str(path), "--jobs", "2"],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    head, starts = out.stdout.split("# process starts")
    rows = {l.split()[0]: l.split()[1:] for l in head.splitlines()[2:] if l.strip()}
    # Six weighted calls: cc1's four, half of sh's two, gcc's one; make's are not the
    # job's. cc1's two empty-path stats and half of sh's one are fstats.
    assert rows["newfstatat-empty"] == ["1.25", "0.4167"]
    assert rows["newfstatat"] == ["0.50", "0.1667"]
    assert rows["openat"] == ["0.50", "0.1667"]
    assert rows["vfork"] == ["0.75", "0.2500"]
    assert head.startswith("# per compile job (2 jobs): 3.0 calls")
    # Every process's starts, make's included.
    assert "make             clone3 1" in starts
    assert "gcc              vfork 1" in starts
