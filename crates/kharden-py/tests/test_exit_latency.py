"""scripts/exit_latency.py: exit_group entry to the task's last switch."""
import pathlib
import subprocess
import sys

SCRIPT = pathlib.Path(__file__).resolve().parents[3] / "scripts" / "exit_latency.py"

# Three children exit, the last preempted for 90 us on its way (30 us on a CPU of its 120); a
# fourth enters exit_group but its last switch is not in the trace, and a living task
# switches away asleep (S): neither is an exit.
TRACE = """\
  101 10.000001000:   raw_syscalls:sys_enter: NR 231 (0, 0, 0, 0, 4adaa0, 7ffd8c3d9360)
  101 10.000031000:     sched:sched_switch: prev_comm=a prev_pid=101 prev_prio=120 prev_state=Z ==> next_comm=b next_pid=100 next_prio=120
  100 10.000040000:     sched:sched_switch: prev_comm=b prev_pid=100 prev_prio=120 prev_state=S ==> next_comm=c next_pid=102 next_prio=120
  102 10.000050000:   raw_syscalls:sys_enter: NR 231 (0, 0, 0, 0, 4adaa0, 7ffd8c3d9360)
   -1 10.000100000:     sched:sched_switch: prev_comm=c prev_pid=102 prev_prio=120 prev_state=Z ==> next_comm=b next_pid=100 next_prio=120
  103 10.000200000:   raw_syscalls:sys_enter: NR 231 (0, 0, 0, 0, 4adaa0, 7ffd8c3d9360)
  104 10.000300000:   raw_syscalls:sys_enter: NR 231 (0, 0, 0, 0, 4adaa0, 7ffd8c3d9360)
  104 10.000310000:     sched:sched_switch: prev_comm=d prev_pid=104 prev_prio=120 prev_state=R+ ==> next_comm=b next_pid=100 next_prio=120
  100 10.000400000:     sched:sched_switch: prev_comm=b prev_pid=100 prev_prio=120 prev_state=S ==> next_comm=d next_pid=104 next_prio=120
  104 10.000420000:     sched:sched_switch: prev_comm=d prev_pid=104 prev_prio=120 prev_state=Z ==> next_comm=b next_pid=100 next_prio=120
"""


def run(text):
    return subprocess.run([sys.executable, str(SCRIPT)], input=text, capture_output=True,
                          text=True)


def test_each_exit_runs_from_its_entry_to_its_last_switch_on_a_cpu_or_not():
    out = run(TRACE)
    assert out.returncode == 0, out.stderr
    # Entry to last switch 30, 50 and 120 us; on a CPU 30, 50 and 30.
    assert out.stdout.split() == [
        "exits", "3", "p10", "30000", "ns", "median", "50000", "ns", "p90", "120000", "ns",
        "on", "CPU:", "p10", "30000", "ns", "median", "30000", "ns", "p90", "50000", "ns"]


def test_a_trace_without_exits_is_an_error():
    out = run("  100 10.0:     sched:sched_switch: prev_pid=100 prev_state=S ==>\n")
    assert out.returncode != 0
    assert "no exit_group entry" in out.stderr
