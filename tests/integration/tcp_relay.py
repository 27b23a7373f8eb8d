#!/usr/bin/env python3
"""A link a test can cut: forwards every connection to 127.0.0.1:LISTEN_PORT
to TARGET (HOST:PORT), byte for byte, until either side closes.

    tcp_relay.py LISTEN_PORT HOST:PORT READY_FILE [CUT_HEX]

Creates READY_FILE once it listens. Says "connection N ended" on stderr
when the Nth connection (from 1) has nothing more to pass on from TARGET. SIGSTOP cuts the link without closing
anything: bytes sent through it wait, and new connections complete their
TCP handshake (the kernel's backlog) but get no answer; SIGCONT restores
it. Ends on SIGTERM. With CUT_HEX (bytes in hex), a connection whose
client sends those bytes is closed at once, both ways, before they pass
("connection N cut" on stderr): a command that breaks every path it takes."""
import socket
import sys
import threading


def pump(src, dst, ended=None, cut=b"", number=0):
    tail = b""  # the end of what passed, for a pattern split across reads
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            if cut and cut in tail + data:
                sys.stderr.write("connection %d cut\n" % number)
                sys.stderr.flush()
                break
            tail = (tail + data)[-len(cut):] if cut else b""
            dst.sendall(data)
    except OSError:
        pass
    for s in (src, dst):
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
    if ended:
        sys.stderr.write(ended + "\n")
        sys.stderr.flush()


def serve(client, target, number, cut):
    try:
        upstream = socket.create_connection(target)
    except OSError:
        client.close()
        sys.stderr.write("connection %d ended\n" % number)
        sys.stderr.flush()
        return
    threading.Thread(target=pump, args=(client, upstream, None, cut, number), daemon=True).start()
    ended = "connection %d ended" % number
    threading.Thread(target=pump, args=(upstream, client, ended), daemon=True).start()


def main():
    if len(sys.argv) not in (4, 5):
        sys.exit("usage: tcp_relay.py LISTEN_PORT HOST:PORT READY_FILE [CUT_HEX]")
    cut = bytes.fromhex(sys.argv[4]) if len(sys.argv) == 5 else b""
    host, _, port = sys.argv[2].rpartition(":")
    target = (host, int(port))
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", int(sys.argv[1])))
    listener.listen(16)
    with open(sys.argv[3], "w") as ready:
        ready.write("listening\n")
    number = 0
    while True:
        client, _ = listener.accept()
        number += 1
        serve(client, target, number, cut)


if __name__ == "__main__":
    main()
