#!/usr/bin/env python3
"""A hostile iSCSI target on loopback for initiator-hostile.sh: it logs the
initiator in properly (AuthMethod None, the operational keys of the fuzzer's
seeds), answers TEST UNIT READY, then answers the next command with one
malformed PDU chosen by SCENARIO, and keeps the connection open (so only the
initiator's own checks can end the session).

    fake_target.py PORT SCENARIO READY_FILE

Scenario short-transfer is not malformed but short: every command is
answered properly except READ(16), which gets half its data and GOOD with
an underflow residual for the rest, and WRITE(16), which gets GOOD with a
residual of all its data (none taken).

It accepts connections until it is killed; READY_FILE appears once it listens.
PDU building comes from initiator/fuzz/make_seeds.py."""
import os
import socket
import struct
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../initiator/fuzz"))
from make_seeds import NO_TAG, OPER, pdu, text  # noqa: E402


def recv_exact(conn, n):
    b = b""
    while len(b) < n:
        chunk = conn.recv(n - len(b))
        if not chunk:
            raise EOFError
        b += chunk
    return b


def recv_pdu(conn):
    bhs = recv_exact(conn, 48)
    ahs = bhs[4] * 4
    dlen = int.from_bytes(bhs[5:8], "big")
    rest = recv_exact(conn, ahs + dlen + (-dlen % 4))
    return bhs, rest[ahs:ahs + dlen]


def login_response(req, flags, stat_sn, keys, tsih):
    itt, cmd_sn = struct.unpack_from(">I", req, 16)[0], struct.unpack_from(">I", req, 24)[0]
    p = bytearray(pdu(0x23, flags, itt, stat_sn, cmd_sn, cmd_sn + 31, text(keys), lun8=req[8:14] + tsih.to_bytes(2, "big"), ttt=0))
    p[36:38] = b"\0\0"
    return bytes(p)


def hostile(scenario, itt, stat_sn, cmd_sn):
    """The malformed answer to the command after TEST UNIT READY (READ CAPACITY(16), 32 bytes)."""
    exp, mx = cmd_sn + 1, cmd_sn + 32
    if scenario == "bad-opcode":
        return pdu(0x3A, 0x80, itt, stat_sn, exp, mx)
    if scenario == "bad-itt":
        return pdu(0x21, 0x80, 0xDEAD, stat_sn, exp, mx)
    if scenario == "dsl-too-big":
        h = bytearray(pdu(0x21, 0x80, itt, stat_sn, exp, mx))
        h[5:8] = (0xFFFFFC).to_bytes(3, "big")  # 16 MiB, beyond MaxRecvDataSegmentLength
        return bytes(h)
    if scenario == "data-in-beyond":
        return pdu(0x25, 0x81, itt, stat_sn, exp, mx, b"\x55" * 4096)
    if scenario == "sense-length":
        return pdu(0x21, 0x80, itt, stat_sn, exp, mx, struct.pack(">H", 200) + b"\x70" * 18, b3=2)
    if scenario == "bad-statsn":
        return pdu(0x21, 0x80, itt, stat_sn + 7, exp, mx)
    if scenario == "truncated":
        return pdu(0x25, 0x81, itt, stat_sn, exp, mx, b"\x55" * 32)[:30]
    raise SystemExit(f"unknown scenario {scenario}")


def data_in(itt, stat_sn, exp, mx, data, edtl):
    """Data-In with status, GOOD: data cut to EDTL, the rest an underflow residual."""
    data = data[:edtl]
    short = len(data) < edtl
    return pdu(0x25, 0x81 | (0x02 if short else 0), itt, stat_sn, exp, mx, data, res44=edtl - len(data))


def well_behaved(bhs, itt, stat_sn, cmd_sn):
    """A proper answer: a 1 MiB LU 0 of 512-byte blocks that reads as zeros."""
    exp, mx = cmd_sn + 1, cmd_sn + 32
    cdb = bhs[32:48]
    edtl = struct.unpack_from(">I", bhs, 20)[0]
    if cdb[0] == 0xA0:  # REPORT LUNS: LUN 0 alone
        return data_in(itt, stat_sn, exp, mx, struct.pack(">II", 8, 0) + b"\0" * 8, edtl)
    if cdb[0] == 0x12 and not cdb[1] & 1:  # standard INQUIRY: a disk
        inq = bytes([0, 0, 5, 2, 31, 0, 0, 0]) + b"rbio    " + b"fake target     " + b"0001"
        return data_in(itt, stat_sn, exp, mx, inq, edtl)
    if cdb[0] == 0x9E:  # READ CAPACITY(16)
        cap = struct.pack(">QI", 2047, 512) + b"\0" * 20
        return pdu(0x25, 0x81, itt, stat_sn, exp, mx, cap)
    if cdb[0] == 0x88:  # READ(16)
        return pdu(0x25, 0x81, itt, stat_sn, exp, mx, b"\0" * (struct.unpack_from(">I", cdb, 10)[0] * 512))
    return pdu(0x21, 0x80, itt, stat_sn, exp, mx)


def short_transfer(bhs, itt, stat_sn, cmd_sn):
    """GOOD with a residual: READ(16) gets half its data, WRITE(16) none taken."""
    exp, mx = cmd_sn + 1, cmd_sn + 32
    edtl = struct.unpack_from(">I", bhs, 20)[0]
    op = bhs[32]
    if op == 0x88:  # READ(16): F, S, U; the residual is the half not sent
        half = edtl // 2
        return pdu(0x25, 0x83, itt, stat_sn, exp, mx, b"\xab" * half, res44=edtl - half)
    if op == 0x8A:  # WRITE(16): a SCSI Response, GOOD, U, nothing taken
        return pdu(0x21, 0x82, itt, stat_sn, exp, mx, res44=edtl)
    return well_behaved(bhs, itt, stat_sn, cmd_sn)


# Task management scenarios: the third command gets no answer; ABORT TASK
# is answered with this response code ("abort": function complete,
# "abort-unsupported": not supported, then LOGICAL UNIT RESET completes),
# and the command sent again is answered properly.
TMF_SCENARIOS = {"abort": 0, "abort-unsupported": 5}


def serve(conn, scenario):
    stat_sn = 0
    commands = 0
    held = None
    while True:
        bhs, data = recv_pdu(conn)
        op = bhs[0] & 0x3F
        itt = struct.unpack_from(">I", bhs, 16)[0]
        cmd_sn = struct.unpack_from(">I", bhs, 24)[0]
        if op == 0x03:  # Login Request: CSG 0 -> 1, then 1 -> full feature
            csg = (bhs[1] >> 2) & 3
            if csg == 0:
                conn.sendall(login_response(bhs, 0x81, stat_sn, [("AuthMethod", "None"), ("TargetPortalGroupTag", "1")], 0))
            else:
                final = login_response(bhs, 0x87, stat_sn, OPER, 1)
                if scenario == "nop-after-login":
                    # tgt's iSER driver pings every connection in full feature
                    # phase every 5 s; one may leave right behind the final
                    # Login Response. Unsolicited: ITT and TTT reserved, the
                    # next StatSN not advanced.
                    cmd_sn = struct.unpack_from(">I", bhs, 24)[0]
                    final += pdu(0x20, 0x80, NO_TAG, stat_sn + 1, cmd_sn, cmd_sn + 31)
                conn.sendall(final)
            stat_sn += 1
        elif op == 0x02 and scenario in TMF_SCENARIOS:  # Task Management Function Request
            function = bhs[1] & 0x7F
            response = TMF_SCENARIOS[scenario] if function == 1 else 0
            if response == 0 and held is not None:
                held = None  # the aborted or reset task ends without a response
            conn.sendall(pdu(0x22, 0x80, itt, stat_sn, cmd_sn, cmd_sn + 31, b2=response))
            stat_sn += 1
        elif op == 0x01 and scenario in TMF_SCENARIOS:
            commands += 1
            if commands == 3:  # bench's first READ(16), which has bench's --timeout
                held = itt
                continue
            conn.sendall(well_behaved(bhs, itt, stat_sn, cmd_sn))
            stat_sn += 1
        elif op == 0x01 and scenario == "short-transfer":
            conn.sendall(short_transfer(bhs, itt, stat_sn, cmd_sn))
            stat_sn += 1
        elif op == 0x01 and scenario == "nop-after-login":
            conn.sendall(well_behaved(bhs, itt, stat_sn, cmd_sn))
            stat_sn += 1
        elif op == 0x01:  # SCSI Command
            commands += 1
            if commands == 1 and scenario != "truncated":
                conn.sendall(pdu(0x21, 0x80, itt, stat_sn, cmd_sn + 1, cmd_sn + 32))
                stat_sn += 1
            else:
                conn.sendall(hostile(scenario, itt, stat_sn, cmd_sn))
                if scenario == "truncated":
                    conn.close()
                    return
        elif op == 0x00:  # NOP-Out
            if itt != NO_TAG:
                conn.sendall(pdu(0x20, 0x80, itt, stat_sn, cmd_sn, cmd_sn + 31))
                stat_sn += 1
        elif op == 0x06:  # Logout
            conn.sendall(pdu(0x26, 0x80, itt, stat_sn, cmd_sn, cmd_sn + 31))
            return


def main():
    port, scenario, ready = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", port))
    srv.listen(4)
    open(ready, "w").close()
    while True:
        conn, _ = srv.accept()
        try:
            serve(conn, scenario)
        except (EOFError, ConnectionError):
            pass
        finally:
            conn.close()


if __name__ == "__main__":
    main()
