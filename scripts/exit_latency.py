#!/usr/bin/env python3
"""How long a process's exit takes in the kernel, from perf tracepoints.

    perf record -a -q -e raw_syscalls:sys_enter --filter 'id == 231' -e sched:sched_switch \\
        -o exit.data -- COMMAND
    perf script -i exit.data -F tid,time,event,trace --ns | python3 scripts/exit_latency.py

An exit runs from the task's exit_group entry (raw_syscalls:sys_enter, NR 231) to its last
switch away (sched:sched_switch with prev_state Z: do_exit has run exit_mm, exit_files,
exit_notify and the parent's wake-up, and do_task_dead schedules). The task's own perf
events are closed by then, so the recording is system-wide (-a). Prints the exits seen and
the 10th percentile, median and 90th percentile of their time in ns, from entry to last
switch and, since an exiting task can be preempted or wait for a lock asleep, of the part
of it the task was on a CPU (switched out with any other state than Z, it is off the CPU
until a switch names it next).
"""
import re
import statistics
import sys

EVENT = re.compile(r"\s*(-?\d+)\s+([\d.]+):\s+(\S+):(.*)")
SWITCH = re.compile(r"prev_pid=(\d+) .*prev_state=(\S+) ==> .*next_pid=(\d+)")


def exit_times(lines):
    """(ns from entry to last switch, ns of it on a CPU) per exit, sorted."""
    # tid -> [entry time, switched in at (None while off the CPU), seconds on a CPU so far]
    exiting, times = {}, []
    for line in lines:
        m = EVENT.match(line)
        if not m:
            continue
        tid, t, event, rest = int(m[1]), float(m[2]), m[3], m[4]
        if event == "raw_syscalls:sys_enter" and "NR 231 " in rest:
            exiting[tid] = [t, t, 0.0]
        elif event == "sched:sched_switch":
            sw = SWITCH.search(rest)
            if not sw:
                continue
            prev, state, nxt = int(sw[1]), sw[2], int(sw[3])
            if prev in exiting:
                entered, since, on_cpu = exiting[prev]
                if since is not None:
                    on_cpu += t - since
                if "Z" in state:
                    del exiting[prev]
                    times.append(((t - entered) * 1e9, on_cpu * 1e9))
                else:
                    exiting[prev] = [entered, None, on_cpu]
            if nxt in exiting:
                exiting[nxt][1] = t
    return sorted(times)


def percentiles(values):
    values = sorted(values)
    n = len(values)
    return (f"p10 {values[n // 10]:.0f} ns  median {statistics.median(values):.0f} ns"
            f"  p90 {values[9 * n // 10]:.0f} ns")


def main():
    times = exit_times(sys.stdin)
    if not times:
        sys.exit("exit_latency.py: no exit_group entry followed by its task's last switch "
                 "(record system-wide with -a, both tracepoints)")
    print(f"exits {len(times)}  {percentiles([w for w, _ in times])}"
          f"  on CPU: {percentiles([c for _, c in times])}")


if __name__ == "__main__":
    main()
