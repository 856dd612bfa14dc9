"""scripts/strace_io_pages.py: pages a compile job copies through read() and write()."""
import pathlib
import subprocess
import sys

SCRIPT = pathlib.Path(__file__).resolve().parents[3] / "scripts" / "strace_io_pages.py"

# strace -f output: pid first; a call another process interrupts is split into an
# unfinished and a resumed line.
STRACE = """\
100 execve("/usr/bin/make", ["make"], 0x7ffd /* 3 vars */) = 0
100 read(3, "all:"..., 8192) = 8192
101 execve("/usr/lib/gcc/x86_64-linux-gnu/12/cc1", ["cc1"], 0x7ffd /* 3 vars */) = 0
101 read(3, "#include"..., 8192 <unfinished ...>
102 execve("/bin/sh", ["sh", "-c", "rm"], 0x7ffd /* 3 vars */) = 0
102 read(4, "x"..., 4096) = 4096
101 <... read resumed>) = 8192
101 write(1, "\\t.text"..., 4096) = 4096
101 read(5, 0x7ffd, 4096) = -1 EBADF (Bad file descriptor)
103 execve("/nonexistent/as", ["as"], 0x7ffd /* 3 vars */) = -1 ENOENT (No such file or directory)
103 pwrite64(3, "\\177ELF"..., 4096, 0) = 4096
"""


def run(*args, text=STRACE):
    return subprocess.run([sys.executable, str(SCRIPT), "-", *args], input=text,
                          capture_output=True, text=True)


def test_bytes_of_the_jobs_programs_are_summed_per_job():
    out = run("--jobs", "2")
    assert out.returncode == 0, out.stderr
    # Read: cc1's resumed 8192 bytes and half of sh's 4096 (make's are not the job's, the
    # failed read counts nothing): 10240 bytes, 2.5 pages, over 2 jobs. Written: cc1's 4096
    # bytes; pid 103's exec failed, so it is nobody's program and its pwrite64 is left out.
    assert out.stdout.split() == ["read_pages", "=", "1", "write_pages", "=", "0"]
    out = run("--jobs", "0.5")
    assert out.stdout.split() == ["read_pages", "=", "5", "write_pages", "=", "2"]
