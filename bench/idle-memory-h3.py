#!/usr/bin/env python3
"""Server memory per idle HTTP/3 connection: the RSS a running shardhttpd
gains for N QUIC connections that each made one request and then stay
open (within the server's 30 s idle timeout).

  bench/idle-memory-h3.py PORT PID [N]

PORT is the QUIC port (the TLS one), PID the server's process (one shard,
`--cores 1 --h3`, a root with 100.txt). Needs aioquic (.ci/venv has it).
Prints KiB per connection: (RSS after - RSS before) / N, read from
/proc/PID/status a second after the last connection settled.
"""
import asyncio
import ssl
import sys

from aioquic.asyncio import connect
from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.h3.connection import H3_ALPN, H3Connection
from aioquic.h3.events import DataReceived, HeadersReceived
from aioquic.quic.configuration import QuicConfiguration

port, pid = int(sys.argv[1]), int(sys.argv[2])
n = int(sys.argv[3]) if len(sys.argv) > 3 else 500


def rss():
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise SystemExit("no VmRSS for the server")


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


async def one(stack):
    config = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN)
    config.verify_mode = ssl.CERT_NONE
    config.server_name = "localhost"
    cm = connect("127.0.0.1", port, configuration=config, create_protocol=Client)
    client = await stack.enter_async_context(cm)
    sid = client._quic.get_next_available_stream_id()
    client.h3.send_headers(sid, [(b":method", b"GET"), (b":scheme", b"https"),
                                 (b":authority", b"localhost"), (b":path", b"/100.txt")],
                           end_stream=True)
    client.transmit()
    await client.done


async def main():
    from contextlib import AsyncExitStack
    async with AsyncExitStack() as warm:
        await one(warm)
    await asyncio.sleep(0.5)
    before = rss()
    async with AsyncExitStack() as stack:
        for i in range(0, n, 50):
            await asyncio.gather(*(one(stack) for _ in range(min(50, n - i))))
        await asyncio.sleep(1.0)
        after = rss()
        print(f"h3: {(after - before) / n / 1024:.2f} KiB per idle connection ({n})")


asyncio.run(main())
