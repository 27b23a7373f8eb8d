#!/usr/bin/env python3
"""Writes the seed corpus of rx_fuzz into corpus/: a few valid (and one
corrupt) PDU streams under different settings, in the input format that
rx_fuzz.cpp documents (12 bytes of settings, then the stream).

Run from this folder: python3 make_seeds.py
"""
import os
import struct


def crc32c(data, crc=0):
    crc ^= 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def pdu(opcode, itt, data=b"", ahs=b"", hd=False, dd=False):
    assert len(ahs) % 4 == 0
    bhs = bytearray(48)
    bhs[0] = opcode
    bhs[1] = 0x80
    bhs[4] = len(ahs) // 4
    bhs[5:8] = len(data).to_bytes(3, "big")
    bhs[16:20] = itt.to_bytes(4, "big")
    out = bytes(bhs) + ahs
    if hd:
        out += struct.pack("<I", crc32c(out))
    if data:
        padded = data + bytes(-len(data) % 4)
        out += padded
        if dd:
            out += struct.pack("<I", crc32c(padded))
    return out


def settings(hd=False, dd=False, batch=True, target=False, ahs_words=64, mrdsl=8192,
             cap_extra=4096, threshold=None, seed=0x1234, max_read64=3, repair=False):
    flags = (hd << 0) | (dd << 1) | ((not batch) << 2) | (target << 3) | (repair << 6)
    flags |= (1 << 4) if mrdsl > 0xFFFF else 0
    flags |= (1 << 5) if threshold is not None else 0
    return (bytes([flags, ahs_words]) + mrdsl.to_bytes(3, "big") +
            cap_extra.to_bytes(2, "big") + (threshold or 0).to_bytes(2, "big") +
            seed.to_bytes(2, "big") + bytes([max_read64]))


def mixed(hd, dd):
    ext_cdb = bytes([0, 5, 1, 0, 0x10, 0x11, 0x12, 0x13])
    return (pdu(0x01, 1, b"\x28" + bytes(15), hd=hd, dd=dd) +
            pdu(0x05, 2, bytes(range(256)) * 4, hd=hd, dd=dd) +
            pdu(0x00, 3, hd=hd, dd=dd) +
            pdu(0x01, 4, b"xyz", ahs=ext_cdb, hd=hd, dd=dd) +
            pdu(0x06, 5, hd=hd, dd=dd))


def corrupt(blob, at):
    b = bytearray(blob)
    b[at] ^= 0xFF
    return bytes(b)


seeds = {
    "plain": settings() + mixed(False, False),
    "digests": settings(hd=True, dd=True) + mixed(True, True),
    "unbatched": settings(hd=True, batch=False) + mixed(True, False),
    "direct-large": settings(dd=True, mrdsl=70000, cap_extra=64) +
                    pdu(0x05, 7, bytes(range(251)) * 200, dd=True) + pdu(0x00, 8, dd=True),
    "direct-threshold": settings(threshold=100) + mixed(False, False),
    "direct-threshold-digests": settings(hd=True, dd=True, threshold=3, max_read64=1) +
                                mixed(True, True),
    # Digests left wrong on purpose (a data byte changed): rx_fuzz repairs them.
    "repair-digests": settings(hd=True, dd=True, threshold=200, repair=True) +
                      corrupt(mixed(True, True), 130),
    "target": settings(target=True) + pdu(0x25, 9, b"data-in!") + pdu(0x21, 9) + pdu(0x3f, 1),
    "bad-digest": settings(hd=True) + pdu(0x00, 1, hd=True)[:-1] + b"\x00",
}

os.makedirs("corpus", exist_ok=True)
for name, blob in seeds.items():
    with open(os.path.join("corpus", name), "wb") as f:
        f.write(blob)
print(f"wrote {len(seeds)} seeds to corpus/")
