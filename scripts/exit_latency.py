#!/usr/bin/env python3
"""How long a process's exit takes in the kernel, from perf tracepoints.

    perf record -a -q -e raw_syscalls:sys_enter --filter 'id == 231' -e sched:sched_switch \\
        -o exit.data -- COMMAND
    perf script -i exit.data -F tid,time,event,trace --ns | python3 scripts/exit_latency.py

An exit runs from the task's exit_group entry (raw_syscalls:sys_enter, NR 231) to its last
switch away (sched:sched_switch with prev_state Z: do_exit has run exit_mm, exit_files,
exit_notify and the parent's wake-up, and do_task_dead schedules). The task's own perf
events are closed by then, so the recording is system-wide (-a). Prints the exits seen and
the 10th percentile, median and 90th percentile of their time in ns.
"""
import re
import statistics
import sys

EVENT = re.compile(r"\s*(-?\d+)\s+([\d.]+):\s+(\S+):(.*)")
DEAD = re.compile(r"prev_pid=(\d+) .*prev_state=Z")


def exit_times(lines):
    entered, times = {}, []
    for line in lines:
        m = EVENT.match(line)
        if not m:
            continue
        tid, t, event, rest = int(m[1]), float(m[2]), m[3], m[4]
        if event == "raw_syscalls:sys_enter" and "NR 231 " in rest:
            entered[tid] = t
        elif event == "sched:sched_switch":
            dead = DEAD.search(rest)
            if dead and int(dead[1]) in entered:
                times.append((t - entered.pop(int(dead[1]))) * 1e9)
    return sorted(times)


def main():
    times = exit_times(sys.stdin)
    if not times:
        sys.exit("exit_latency.py: no exit_group entry followed by its task's last switch "
                 "(record system-wide with -a, both tracepoints)")
    n = len(times)
    print(f"exits {n}  p10 {times[n // 10]:.0f} ns  median {statistics.median(times):.0f} ns"
          f"  p90 {times[9 * n // 10]:.0f} ns")


if __name__ == "__main__":
    main()
