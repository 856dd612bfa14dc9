"""Waits for the guest to say it is ready, then asks QEMU's monitor for `info tlb` (the
guest's current page tables, one line per present leaf) and quits the VM.
    python3 monitor.py MONITOR_SOCKET CONSOLE_FILE OUT_FILE"""
import os
import socket
import sys
import time

sock_path, console, out = sys.argv[1:4]
deadline = time.time() + 900


def console_says_ready():
    if not os.path.exists(console):
        return False
    with open(console, errors="replace") as f:
        return "text-mapping: ready" in f.read()


while not console_says_ready():
    if time.time() > deadline:
        sys.exit("monitor.py: the guest did not get ready in 900 s")
    time.sleep(1)
# The guest is idle in the kernel from here on: CR3 holds a kernel page table.
time.sleep(2)
s = socket.socket(socket.AF_UNIX)
s.connect(sock_path)
s.settimeout(60)


def command(text):
    s.sendall(text.encode() + b"\n")
    data = b""
    while not data.endswith(b"(qemu) "):
        chunk = s.recv(1 << 20)
        if not chunk:
            break
        data += chunk
    return data.decode(errors="replace")


command("")  # the banner
with open(out, "w") as f:
    for line in command("info tlb").splitlines():
        if ": " in line and not line.startswith("(qemu)"):
            f.write(line.strip() + "\n")
s.sendall(b"quit\n")
# Wait for QEMU to close the monitor: leaving earlier can drop the command.
try:
    while s.recv(4096):
        pass
except OSError:
    pass
