"""A client of QEMU's human monitor on a unix socket, for the scripts that read a guest's
state after it has printed a marker on its serial log (kernel_text_mapping/, guest_placement/)."""
import os
import socket
import sys
import time


def wait_for(log_path, marker, seconds=900):
    """The serial log once it contains `marker` (exits the script after `seconds`)."""
    deadline = time.time() + seconds
    while True:
        if os.path.exists(log_path):
            with open(log_path, errors="replace") as f:
                text = f.read()
            if marker in text:
                return text
        if time.time() > deadline:
            sys.exit(f"{marker!r} not in {log_path} after {seconds} s")
        time.sleep(1)


class Monitor:
    def __init__(self, sock_path):
        self.s = socket.socket(socket.AF_UNIX)
        self.s.connect(sock_path)
        self.s.settimeout(60)
        time.sleep(1)
        self.s.recv(1 << 20)  # the banner and first prompt

    def command(self, text):
        """The reply to one command: everything up to the next prompt, after the echo."""
        self.s.sendall(text.encode() + b"\n")
        data = b""
        while not (data.endswith(b"(qemu) ") and len(data) > len(text) + 12):
            chunk = self.s.recv(1 << 20)
            if not chunk:
                break
            data += chunk
        return data.decode(errors="replace")

    def quit(self):
        """Quits the VM, waiting for QEMU to close the monitor (leaving earlier can drop
        the command)."""
        self.s.sendall(b"quit\n")
        try:
            while self.s.recv(4096):
                pass
        except OSError:
            pass
