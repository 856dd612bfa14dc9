"""scripts/kernel_time_split.py: the recorded compile job's kernel time by operation."""
import importlib.util
import pathlib
import subprocess
import sys

SCRIPT = pathlib.Path(__file__).resolve().parents[3] / "scripts" / "kernel_time_split.py"

# perf script -F comm,ip,sym of seven samples: call chains innermost first.
PERF_SCRIPT = """\
cc1 
\tffffffff81001000 clear_page_erms
\tffffffff81002000 do_anonymous_page
\tffffffff81003000 handle_mm_fault
\tffffffff81004000 asm_exc_page_fault
\t          401000 main

cc1 
\tffffffff81005000 next_uptodate_folio
\tffffffff81006000 filemap_map_pages
\tffffffff81004000 asm_exc_page_fault

cc1 
\tffffffff81007000 exc_page_fault
\tffffffff81004000 asm_exc_page_fault

as 
\tffffffff81008000 filemap_read
\tffffffff81009000 ksys_read
\tffffffff8100a000 entry_SYSCALL_64_after_hwframe

gcc 
\tffffffff8100b000 link_path_walk
\tffffffff8100c000 __x64_sys_openat
\tffffffff8100a000 entry_SYSCALL_64_after_hwframe

sh 
\tffffffff8100b000 link_path_walk
\tffffffff8100c000 __x64_sys_openat
\tffffffff8100a000 entry_SYSCALL_64_after_hwframe

nm 
\tffffffff8100b000 link_path_walk
\tffffffff8100c000 __x64_sys_openat
\tffffffff8100a000 entry_SYSCALL_64_after_hwframe

cc1 
\t          401000 main
"""


def shares(*args):
    out = subprocess.run(
        [sys.executable, str(SCRIPT), "-", *args],
        input=PERF_SCRIPT, capture_output=True, text=True, check=True,
    ).stdout
    lines = [l for l in out.splitlines() if not l.startswith("#")]
    return {k.strip().strip('"'): float(v) for k, v in (l.split("=") for l in lines)}


def test_samples_are_split_by_operation_with_common_fault_time_shared_by_count():
    s = shares("--anon-faults", "3", "--file-faults", "1")
    # Five kernel samples of the job's processes and half of sh's (the recipe's shells are
    # shared with another job; nm's is another job's, main is user): 5.5 in all, the
    # entry-only fault sample shared 3:1 by anonymous and file faults.
    assert s == {"fault-anon": 0.3182, "fault-file": 0.2273, "read": 0.1818, "openat": 0.2727}


def test_a_syscall_without_its_own_frame_is_named_by_the_ksys_helper():
    # Run as a program, the script finds its sibling kbuild_job.py on sys.path; imported,
    # it needs the scripts directory there too.
    if str(SCRIPT.parent) not in sys.path:
        sys.path.insert(0, str(SCRIPT.parent))
    spec = importlib.util.spec_from_file_location("kts", SCRIPT)
    kts = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(kts)
    assert kts.classify(["do_mmap", "vm_mmap_pgoff", "do_syscall_64", "entry_SYSCALL_64"]) == "mmap"
    assert kts.classify(["do_syscall_64", "entry_SYSCALL_64_after_hwframe"]) == "syscall-entry"
    assert kts.classify(["tick_sched_timer", "asm_sysvec_apic_timer_interrupt"]) == "interrupts"


def test_jobs_gives_user_and_system_seconds_per_job():
    # One user-only sample (cc1's last) and 5.5 weighted kernel samples, at 1 sample per
    # second, over 2 jobs.
    s = shares("--anon-faults", "3", "--file-faults", "1", "--jobs", "2", "--freq", "1")
    assert (s["user_seconds"], s["system_seconds"]) == (0.5, 2.75)
