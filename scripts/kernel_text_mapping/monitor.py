"""Waits for the guest to say it is ready, then asks QEMU's monitor for `info tlb` (the
guest's current page tables, one line per present leaf) and quits the VM.
    python3 monitor.py MONITOR_SOCKET CONSOLE_FILE OUT_FILE"""
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from qemu_monitor import Monitor, wait_for  # noqa: E402

sock_path, console, out = sys.argv[1:4]
wait_for(console, "text-mapping: ready")
# The guest is idle in the kernel from here on: CR3 holds a kernel page table.
time.sleep(2)
monitor = Monitor(sock_path)
with open(out, "w") as f:
    for line in monitor.command("info tlb").splitlines():
        if ": " in line and not line.startswith("(qemu)"):
            f.write(line.strip() + "\n")
monitor.quit()
