#!/usr/bin/env python3
"""Writes the seed corpus of session_fuzz.cpp into corpus/: well-formed
target streams for the fixed requests the fuzz target sends (login ITT 1,
ISID 40 00 00 00 00 01, CmdSN from 1), so the fuzzer starts past login.

Input layout: mode byte (0 commands, 1 discovery, 2 CHAP), settings byte,
then records (2-byte big-endian length, bytes): the fuzz target's peer
writes one record per burst of requests it receives."""
import os
import struct

ISID = bytes([0x40, 0, 0, 0, 0, 1])
NO_TAG = 0xFFFFFFFF


def pad(b):
    return b + b"\0" * (-len(b) % 4)


def pdu(opcode, flags, itt, stat_sn, exp_cmd_sn, max_cmd_sn, data=b"", b2=0, b3=0,
        lun8=b"\0" * 8, ttt=NO_TAG, sn36=0, off40=0, res44=0, tail36=None):
    h = bytearray(48)
    h[0] = opcode
    h[1] = flags
    h[2] = b2
    h[3] = b3
    h[5:8] = len(data).to_bytes(3, "big")
    h[8:16] = lun8
    struct.pack_into(">IIIIIIII", h, 16, itt, ttt, stat_sn, exp_cmd_sn, max_cmd_sn, sn36, off40, res44)
    if tail36 is not None:
        h[36:36 + len(tail36)] = tail36
    return bytes(h) + pad(data)


def text(pairs):
    return b"".join(f"{k}={v}".encode() + b"\0" for k, v in pairs)


def login_resp(flags, stat_sn, keys, tsih=0, status=(0, 0)):
    lun8 = ISID + tsih.to_bytes(2, "big")
    return pdu(0x23, flags, 1, stat_sn, 1, 32, text(keys), lun8=lun8, ttt=0,
               tail36=bytes(status))


OPER = [("HeaderDigest", "None"), ("DataDigest", "None"), ("MaxRecvDataSegmentLength", "65536"),
        ("MaxBurstLength", "262144"), ("FirstBurstLength", "65536"), ("ImmediateData", "Yes"),
        ("InitialR2T", "Yes"), ("MaxOutstandingR2T", "1"), ("DataPDUInOrder", "Yes"),
        ("DataSequenceInOrder", "Yes"), ("ErrorRecoveryLevel", "0"), ("MaxConnections", "1"),
        ("DefaultTime2Wait", "2"), ("DefaultTime2Retain", "0")]


def rec(*pdus):
    b = b"".join(pdus)
    return len(b).to_bytes(2, "big") + b


def login(discovery=False):
    # security stage -> operational (T, CSG 0, NSG 1), then -> full feature.
    s = rec(login_resp(0x81, 0, [("AuthMethod", "None")] + ([] if discovery else [("TargetPortalGroupTag", "1")])))
    keys = [k for k in OPER if not discovery or k[0] in ("HeaderDigest", "DataDigest", "MaxRecvDataSegmentLength")]
    s += rec(login_resp(0x87, 1, keys, tsih=1))
    return s


def logout_resp(stat_sn, cmd_sn):
    return pdu(0x26, 0x80, 0, stat_sn, cmd_sn, cmd_sn + 31)  # ITT set below


def with_itt(p, itt):
    return p[:16] + itt.to_bytes(4, "big") + p[20:]


def commands_stream(extra_before=b""):
    # ITT 2 READ 512, 3 WRITE 512 (immediate), 4 WRITE 8192 (512 immediate
    # + R2T for the rest), 5 READ 8192, 6 TUR; CmdSN 1..5; StatSN from 2.
    # Records: login steps; the answers up to the R2T; the rest after the
    # Data-Out; the Logout Response.
    s = login()
    sn = 2
    max_sn = 40
    a = extra_before
    a += pdu(0x25, 0x81, 2, sn, 2, max_sn, b"\x11" * 512, sn36=0, off40=0); sn += 1
    a += pdu(0x21, 0x80, 3, sn, 3, max_sn); sn += 1
    a += pdu(0x31, 0x80, 4, sn, 3, max_sn, ttt=0x1234, sn36=0, off40=512, res44=8192 - 512)
    b = pdu(0x21, 0x80, 4, sn, 4, max_sn); sn += 1
    b += pdu(0x25, 0x00, 5, 0, 4, max_sn, b"\x22" * 4096, sn36=0, off40=0)
    b += pdu(0x25, 0x81, 5, sn, 5, max_sn, b"\x33" * 4096, sn36=1, off40=4096); sn += 1
    b += pdu(0x21, 0x80, 6, sn, 6, max_sn); sn += 1
    c = with_itt(pdu(0x26, 0x80, 0, sn, 6, max_sn), 7)
    return s + rec(a) + rec(b) + rec(c)


def main():
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")
    os.makedirs(out, exist_ok=True)
    seeds = {}
    seeds["commands"] = bytes([0, 0]) + commands_stream()
    seeds["commands-direct"] = bytes([0, 8]) + commands_stream()
    nop = pdu(0x20, 0x80, NO_TAG, 2, 1, 40, b"ping", ttt=0x77)  # ping: needs an answer
    async0 = pdu(0x32, 0x80, NO_TAG, 2, 1, 40, tail36=bytes([0]))
    seeds["async"] = bytes([0, 0]) + commands_stream(extra_before=async0)
    seeds["nop-in"] = bytes([0, 0]) + login() + rec(nop)
    seeds["reject"] = bytes([0, 0]) + login() + rec(pdu(0x3F, 0x80, NO_TAG, 2, 1, 40, b"\0" * 48, b2=4))
    sense = struct.pack(">H", 18) + bytes([0x70, 0, 0x06, 0, 0, 0, 0, 10, 0, 0, 0, 0, 0x29, 0, 0, 0, 0, 0])
    seeds["check-condition"] = bytes([0, 0]) + login() + rec(pdu(0x21, 0x80, 2, 2, 2, 40, sense, b3=2))
    disc = login(True)
    disc += rec(pdu(0x24, 0x80, 2, 2, 2, 33, text([("TargetName", "iqn.2026-11.io.rbio:t1"),
                                                   ("TargetAddress", "127.0.0.1:3260,1")])))
    disc += rec(with_itt(pdu(0x26, 0x80, 0, 3, 2, 33), 3))
    seeds["discovery"] = bytes([1, 0]) + disc
    cont = login(True)
    cont += rec(pdu(0x24, 0x40, 2, 2, 2, 33, text([("TargetName", "iqn.2026-11.io.rbio:t1")]), ttt=5))
    cont += rec(pdu(0x24, 0x80, 2, 3, 3, 34, text([("TargetAddress", "127.0.0.1:3260,1")])))
    cont += rec(with_itt(pdu(0x26, 0x80, 0, 4, 3, 34), 3))
    seeds["discovery-continued"] = bytes([1, 0]) + cont
    chap = rec(login_resp(0x00, 0, [("AuthMethod", "CHAP")]))
    chap += rec(login_resp(0x00, 1, [("CHAP_A", "5"), ("CHAP_I", "7"), ("CHAP_C", "0x" + "ab" * 16)]))
    chap += rec(login_resp(0x81, 2, []))
    chap += rec(login_resp(0x87, 3, OPER, tsih=1))
    seeds["chap"] = bytes([2, 0]) + chap
    for name, data in seeds.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)
    print(f"{len(seeds)} seeds in {out}")


if __name__ == "__main__":
    main()
