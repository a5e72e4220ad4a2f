#!/usr/bin/env python3
"""Server memory held by clients that stop reading (issue 35).

Opens N connections per protocol, each asking for one large file with a
small receive buffer and never reading the answer, then reports the
server's RSS growth per connection once it has settled. Protocols: HTTP/1.1
cleartext, HTTP/1.1 over TLS, h2c and HTTP/2 over TLS (full windows: the
client grants 2^31-1 so only the socket holds data back).

    bench/stalled-readers.py --pid PID --plain 127.0.0.1:8080 \
        --tls 127.0.0.1:8443 --path /big.bin [-n 1000]

The server should run with `--cores 1` and a file larger than what N
sockets hold (50 MB is plenty). Only the standard library is used.
"""

import argparse
import socket
import ssl
import struct
import time

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


def rss(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise SystemExit("no VmRSS")


def settled(pid):
    last = rss(pid)
    for _ in range(50):
        time.sleep(0.3)
        now = rss(pid)
        if now == last:
            return now
        last = now
    return last


def frame(kind, flags, stream, payload):
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(">I", stream) + payload


def literal(name, value):
    return bytes([0, len(name)]) + name + bytes([len(value)]) + value


def h2_request(path):
    settings = frame(4, 0, 0, struct.pack(">HI", 4, 0x7FFFFFFF))
    window = frame(8, 0, 0, struct.pack(">I", 0x7FFFFFFF - 65535))
    block = b"".join(
        literal(n, v)
        for n, v in [
            (b":method", b"GET"),
            (b":scheme", b"https"),
            (b":authority", b"localhost"),
            (b":path", path.encode()),
        ]
    )
    return PREFACE + settings + window + frame(1, 5, 1, block)


def h1_request(path):
    return f"GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n".encode()


def connect(addr, tls, alpn):
    host, port = addr.rsplit(":", 1)
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect((host, int(port)))
    if tls:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        ctx.set_alpn_protocols([alpn])
        s = ctx.wrap_socket(s, server_hostname="localhost")
    return s


def run(pid, addr, tls, h2, path, n):
    before = settled(pid)
    held = []
    for _ in range(n):
        s = connect(addr, tls, "h2" if h2 else "http/1.1")
        s.sendall(h2_request(path) if h2 else h1_request(path))
        held.append(s)
    after = settled(pid)
    for s in held:
        s.close()
    settled(pid)
    return (after - before) / n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pid", type=int, required=True)
    ap.add_argument("--plain")
    ap.add_argument("--tls")
    ap.add_argument("--path", default="/big.bin")
    ap.add_argument("-n", type=int, default=1000)
    a = ap.parse_args()
    cases = []
    if a.plain:
        cases += [("HTTP/1.1", a.plain, False, False), ("h2c", a.plain, False, True)]
    if a.tls:
        cases += [("HTTP/1.1 TLS", a.tls, True, False), ("h2 TLS", a.tls, True, True)]
    for name, addr, tls, h2 in cases:
        per = run(a.pid, addr, tls, h2, a.path, a.n)
        print(f"{name:14} {a.n} stalled readers: {per / 1024:7.1f} KiB per connection")


if __name__ == "__main__":
    main()
