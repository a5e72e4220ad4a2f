#!/usr/bin/env python3
"""Server memory per idle connection: the RSS a running shardhttpd gains
for N connections that each made one request and then stay open.

  bench/idle-memory.py MODE PORT PID [N]

MODE is h2c (cleartext HTTP/2), h2tls (HTTP/2 over TLS, ALPN h2), h1tls
(HTTP/1.1 over TLS) or h3 (HTTP/3, `--h3`; the connections stay within the
server's 30 s idle timeout); PORT the matching listener (the TLS port for
h3), PID the server's process (one shard, `--cores 1`, a root with
100.txt). Needs Python's `h2` package, and `aioquic` for h3 (.ci/venv has
both). Prints KiB per connection: (RSS after - RSS before) / N, read from
/proc/PID/status a second after the last connection settled.
"""
import socket
import ssl
import sys
import time

import h2.config
import h2.connection
import h2.events

mode, port, pid = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
n = int(sys.argv[4]) if len(sys.argv) > 4 else 1000


def rss():
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise SystemExit("no VmRSS for the server")


ctx = ssl.create_default_context()
ctx.check_hostname = False
ctx.verify_mode = ssl.CERT_NONE


def one():
    s = socket.create_connection(("127.0.0.1", port))
    if mode in ("h2tls", "h1tls"):
        ctx.set_alpn_protocols(["h2"] if mode == "h2tls" else ["http/1.1"])
        s = ctx.wrap_socket(s, server_hostname="localhost")
    if mode == "h1tls":
        s.sendall(b"GET /100.txt HTTP/1.1\r\nHost: a\r\n\r\n")
        got = b""
        while not got.endswith(b"x" * 10):
            got += s.recv(65536)
        return (s, None)
    c = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    c.initiate_connection()
    sid = c.get_next_available_stream_id()
    scheme = "https" if mode == "h2tls" else "http"
    c.send_headers(
        sid,
        [(":method", "GET"), (":path", "/100.txt"), (":scheme", scheme), (":authority", "a")],
        end_stream=True,
    )
    s.sendall(c.data_to_send())
    done = False
    while not done:
        for e in c.receive_data(s.recv(65536)):
            done = done or isinstance(e, h2.events.StreamEnded)
        s.sendall(c.data_to_send())
    return (s, c)


async def h3_idle():
    """Like the TCP modes: one warm-up connection, then N kept open, each
    after one request (opened 50 at a time)."""
    import asyncio
    from contextlib import AsyncExitStack

    from aioquic.asyncio import connect
    from aioquic.asyncio.protocol import QuicConnectionProtocol
    from aioquic.h3.connection import H3_ALPN, H3Connection
    from aioquic.h3.events import DataReceived, HeadersReceived
    from aioquic.quic.configuration import QuicConfiguration

    class Client(QuicConnectionProtocol):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.h3 = H3Connection(self._quic)
            self.done = asyncio.get_running_loop().create_future()

        def quic_event_received(self, event):
            for ev in self.h3.handle_event(event):
                if isinstance(ev, (HeadersReceived, DataReceived)) and ev.stream_ended:
                    if not self.done.done():
                        self.done.set_result(None)

    async def one_h3(stack):
        config = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN)
        config.verify_mode = ssl.CERT_NONE
        config.server_name = "localhost"
        client = await stack.enter_async_context(
            connect("127.0.0.1", port, configuration=config, create_protocol=Client))
        sid = client._quic.get_next_available_stream_id()
        client.h3.send_headers(sid, [(b":method", b"GET"), (b":scheme", b"https"),
                                     (b":authority", b"localhost"), (b":path", b"/100.txt")],
                               end_stream=True)
        client.transmit()
        await client.done

    async with AsyncExitStack() as warm:
        await one_h3(warm)
    await asyncio.sleep(0.5)
    before = rss()
    async with AsyncExitStack() as stack:
        for i in range(0, n, 50):
            await asyncio.gather(*(one_h3(stack) for _ in range(min(50, n - i))))
        await asyncio.sleep(1.0)
        return before, rss()


if mode == "h3":
    import asyncio

    before, after = asyncio.run(h3_idle())
else:
    one()
    time.sleep(0.5)
    before = rss()
    keep = [one() for _ in range(n)]
    time.sleep(1.0)
    after = rss()
print(f"{mode}: {(after - before) / n / 1024:.2f} KiB per idle connection ({n})")
