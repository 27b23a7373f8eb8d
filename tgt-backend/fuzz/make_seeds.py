#!/usr/bin/env python3
"""Writes the seed corpora of cdb_fuzz (corpus/cdb/) and alua_fuzz
(corpus/alua/) in the input formats their sources document.

Run from this folder: python3 make_seeds.py
"""
import os
import struct


def cdb_input(cdb, in_len=0, out_len=0, block=0, flags=1, payload=b""):
    c = bytes(cdb).ljust(16, b"\0")
    return c + bytes([len(cdb) - 6]) + struct.pack(">HHIB", in_len, out_len, block, flags) + payload


def rw16(op, lba, blocks):
    return bytes([op, 0]) + struct.pack(">QI", lba, blocks) + b"\0\0"


def unmap_params(ranges):
    desc = b"".join(struct.pack(">QI4x", lba, n) for lba, n in ranges)
    return struct.pack(">HH4x", 6 + len(desc), len(desc)) + desc


CDB = {
    "read16": cdb_input(rw16(0x88, 8, 8), in_len=4096, block=8),
    "write16-fua": cdb_input(bytes([0x8a, 0x08]) + rw16(0x8a, 16, 8)[2:], out_len=4096, block=16,
                             flags=1, payload=b"rbio"),
    "write10-wce-off": cdb_input(bytes([0x2a, 0, 0, 0, 0, 32, 0, 0, 1, 0]), out_len=512, block=32, flags=0,
                                 payload=b"x"),
    "unmap": cdb_input(bytes([0x42, 0, 0, 0, 0, 0, 0, 0, 40, 0]),
                       out_len=40, flags=3, payload=unmap_params([(64, 8), (128, 16)])),
    "write-same16-unmap": cdb_input(bytes([0x93, 0x08]) + rw16(0x93, 256, 32)[2:], out_len=512, block=256, flags=3,
                                    payload=b"\0"),
    "write-same10": cdb_input(bytes([0x41, 0, 0, 0, 1, 0, 0, 0, 16, 0]), out_len=512, block=256, payload=b"ws"),
    "compare-and-write": cdb_input(bytes([0x89, 0]) + struct.pack(">Q", 300) + bytes([0, 0, 0, 1, 0, 0]),
                                   out_len=1024, block=300, payload=b"\0"),
    "sync-cache10": cdb_input(bytes([0x35, 0, 0, 0, 0, 0, 0, 0, 0, 0])),
    "verify16-bytchk": cdb_input(bytes([0x8f, 0x02]) + rw16(0x8f, 8, 1)[2:], out_len=512, block=8, payload=b"v"),
    "prefetch10": cdb_input(bytes([0x34, 0, 0, 0, 0, 8, 0, 0, 8, 0]), block=8),
    "orwrite16": cdb_input(bytes([0x8b, 0]) + rw16(0x8b, 400, 1)[2:], out_len=512, block=400, payload=b"\x0f"),
}


def alua_input(cdb_format, out_size, state, text):
    cdb = bytes([0xa3, 0x0a | cdb_format << 5, 0, 0, 0, 0, 0, 0, 0x10, 0, 0, 0])
    return cdb + struct.pack(">HB", out_size, state) + text.encode()


ALUA = {
    "two-groups": alua_input(0, 4096, 0, "1 active/optimized\n2 standby\n"),
    "extended": alua_input(1, 64, 2, "# gateways\n1 active/non-optimized\n7\tunavailable\n3 transitioning\n"),
    "truncated": alua_input(0, 6, 3, "2 standby\n1 active/optimized\n"),
    "bad-state": alua_input(0, 256, 4, "1 sleeping\n"),
}


def write(folder, seeds):
    os.makedirs(folder, exist_ok=True)
    for name, data in seeds.items():
        with open(os.path.join(folder, name), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    write("corpus/cdb", CDB)
    write("corpus/alua", ALUA)
