#!/usr/bin/env python3
"""Writes the trace files of the regression corpus (one per defect of issue 18), encoded by
hand as FORMAT.md (version 2) describes, so each holds exactly the hostile record."""
import json, struct, zlib

def varint(v):
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7f) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)

def trace(records, count=None, flip=None):
    meta = json.dumps({"command": ["regression"]}).encode()
    head = b"KHTRACE\0" + struct.pack("<HI", 2, len(meta)) + meta + struct.pack("<I", zlib.crc32(meta))
    n = sum(1 for _ in records)
    payload = b"".join(records) + b"\x00" + varint(n if count is None else count)
    body = struct.pack("<II", len(payload), zlib.crc32(payload)) + payload
    data = bytearray(head + body)
    if flip is not None:
        data[flip] ^= 0x04
    return bytes(data)

STR = lambda s: b"\x01" + varint(len(s)) + s
def task_new(dt, slot, tid, pid, parent=0, comm=0):
    return b"\x03" + varint(dt) + varint(slot) + varint(tid) + varint(pid) + varint(parent) + varint(comm)
def alloc(dt, slot, order):
    return b"\x0b" + varint(dt) + varint(slot) + varint(0) + varint(order) + varint(0) + varint(0)
def lost(dt, count):
    return b"\x0f" + varint(dt) + varint(count)

base = [STR(b"sh"), task_new(0, 0, 10, 10)]
files = {
    "trace-page-order-31.trace": trace(base + [alloc(5, 0, 31)]),
    "trace-time-delta-2e63.trace": trace(base + [b"\x06" + varint(1 << 63) + varint(0) + varint(0)]),
    "trace-lost-sum-wraps.trace": trace(base + [lost(1, (1 << 64) - 1), lost(1, 2)]),
    "trace-reused-live-tid.trace": trace(base + [task_new(1, 1, 10, 10, 11)]),
    "trace-bit-flip.trace": trace(base + [alloc(5, 0, 0)], flip=40),
    "trace-tid-zero.trace": trace([STR(b"sh"), task_new(0, 0, 0, 0)]),
}
for name, data in files.items():
    open(name, "wb").write(data)
