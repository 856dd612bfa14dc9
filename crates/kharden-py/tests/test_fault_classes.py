"""scripts/fault_classes.py: the compile job's faults by kind, replayed against mappings."""
import pathlib
import subprocess
import sys

SCRIPT = pathlib.Path(__file__).resolve().parents[3] / "scripts" / "fault_classes.py"

# perf script --show-mmap-events --show-task-events -F comm,pid,tid,event,trace
TRACE = """\
            make 10/10 PERF_RECORD_FORK(11:11):(10:10)
              sh 11/11 PERF_RECORD_COMM exec: cc1:11/11
             cc1 11/11 PERF_RECORD_MMAP2 11/11: [0x400000(0x14000) @ 0 fe:00 1 0]: r-xp /usr/lib/gcc/cc1
             cc1 11/11 PERF_RECORD_MMAP2 11/11: [0x600000(0x2000) @ 0x14000 fe:00 1 0]: rw-p /usr/lib/gcc/cc1
             cc1 11/11 PERF_RECORD_MMAP2 11/11: [0x7f0000000000(0x10000) @ 0x7f0000000000 00:00 0 0]: rw-p //anon
             cc1 11/11 exceptions:page_fault_user: address=0x400123 ip=0x400123 error_code=0x14
             cc1 11/11 exceptions:page_fault_user: address=0x412000 ip=0x412000 error_code=0x14
             cc1 11/11 exceptions:page_fault_user: address=0x600010 ip=0x400200 error_code=0x6
             cc1 11/11 exceptions:page_fault_user: address=0x7f0000001000 ip=0x400200 error_code=0x4
             cc1 11/11 exceptions:page_fault_user: address=0x7f0000001000 ip=0x400200 error_code=0x7
             cc1 11/11 exceptions:page_fault_user: address=0x7f0000002000 ip=0x400200 error_code=0x6
             cc1 11/11 exceptions:page_fault_user: address=0x1000000 ip=0x400200 error_code=0x4
             cc1 11/11 PERF_RECORD_FORK(12:12):(11:11)
              sh 12/12 exceptions:page_fault_user: address=0x410000 ip=0x410000 error_code=0x14
              sh 12/12 exceptions:page_fault_user: address=0x7f0000003000 ip=0x400200 error_code=0x6
             cc1 11/11 PERF_RECORD_MMAP2 11/11: [0x400000(0x14000) @ 0 00:00 0 0]: rw-p //anon
             cc1 11/11 exceptions:page_fault_user: address=0x401000 ip=0x401000 error_code=0x6
"""


def run(tmp_path, text, jobs="1"):
    path = tmp_path / "pf.txt"
    path.write_text(text)
    out = subprocess.run([sys.executable, str(SCRIPT), str(path), "--jobs", jobs],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return out.stdout


def per_job(stdout):
    rows = {}
    for line in stdout.split("# per compile job")[1].splitlines()[1:]:
        key, value = line.split(" = ")
        rows[key] = float(value)
    return rows


def test_faults_are_classed_by_mapping_and_error_code(tmp_path):
    rows = per_job(run(tmp_path, TRACE))
    # cc1's two fetches of its text, and the forked child's one (weighted 0.5 as sh's).
    assert rows["file-read"] == 2 + 0.5
    assert rows["file-cow"] == 1
    # A read of fresh anonymous memory, and one in no mapping (the brk heap): zero pages.
    assert rows["zero-page"] == 2
    assert rows["write-protect"] == 1
    # The anonymous writes: cc1's two (the second after the text was replaced by an
    # anonymous mapping, which unmaps the text's pages) and half of sh's one.
    assert rows["anon"] == 2 + 0.5
    assert rows["all"] == 2.5 + 1 + 2 + 1 + 2.5


def test_fault_around_is_clipped_and_counts_new_pages_only(tmp_path):
    out = run(tmp_path, TRACE)
    # A fetch at 0x400123 maps its 16-page window (0x400000-0x40ffff); one at 0x412000 maps
    # 0x410000-0x413fff, clipped at the VMA's end; the child inherits its parent's page
    # tables, so its fault at 0x410000 maps nothing new: 20 pages over 2.5 weighted faults.
    assert per_job(out)["file_read_pages_per_fault"] == 8.0
    cc1 = next(l for l in out.splitlines() if l.startswith("cc1 "))
    assert cc1.split()[-2] == "10.00", cc1


def test_jobs_divide_and_other_processes_are_left_out(tmp_path):
    text = TRACE + "            make 10/10 exceptions:page_fault_user: address=0x7f0000005000 ip=0x1 error_code=0x6\n"
    rows = per_job(run(tmp_path, text, jobs="2"))
    assert rows["anon"] == 2.5 / 2
    assert "make" in run(tmp_path, text)
