"""A scripted HTTP/3 client on aioquic, for tests/it/h3*.rs.

Usage: h3probe.py HOST PORT [options] PATH...

Prints one JSON object: the connection's facts (ALPN, cipher, whether it
resumed, Retry seen) and, per request, its status, headers, body length
and SHA-256, or the stream error it ended with.
"""

import argparse
import asyncio
import hashlib
import json
import socket
import ssl
import sys

from aioquic.asyncio import connect
from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.h3.connection import H3_ALPN, H3Connection
from aioquic.h3.events import DataReceived, HeadersReceived
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.events import ConnectionTerminated, StreamReset
from aioquic.buffer import encode_uint_var as encode_varint
from aioquic.tls import CipherSuite


class Client(QuicConnectionProtocol):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.h3 = H3Connection(self._quic)
        self.waiting = {}
        self.results = {}
        self.terminated = None
        self.finished = 0
        self.closed = asyncio.get_running_loop().create_future()

    def request(self, method, authority, path, headers):
        if self.terminated is not None:
            # The server closed the connection (after a GOAWAY, a drain):
            # a client sends nothing more on it.
            fut = asyncio.get_running_loop().create_future()
            fut.set_result(None)
            key = 1 << 62 | len(self.results)  # after every stream id
            self.results[key] = {"path": path, "status": None, "not_sent": "connection closed",
                                 "headers": [], "body": hashlib.sha256(), "len": 0}
            return fut
        sid = self._quic.get_next_available_stream_id()
        fields = [
            (b":method", method.encode()),
            (b":scheme", b"https"),
            (b":authority", authority.encode()),
            (b":path", path.encode()),
        ] + [(k.encode(), v.encode()) for k, v in headers]
        self.h3.send_headers(stream_id=sid, headers=fields, end_stream=True)
        fut = asyncio.get_running_loop().create_future()
        self.waiting[sid] = fut
        self.results[sid] = {"path": path, "status": None, "headers": [], "body": hashlib.sha256(), "len": 0}
        self.transmit()
        return fut

    def raw(self, payload):
        """A request stream carrying `payload` as it is (frames and field
        sections this client's encoder would never write)."""
        sid = self._quic.get_next_available_stream_id()
        self._quic.send_stream_data(sid, payload, end_stream=True)
        fut = asyncio.get_running_loop().create_future()
        self.waiting[sid] = fut
        self.results[sid] = {"path": None, "status": None, "headers": [], "body": hashlib.sha256(), "len": 0}
        self.transmit()
        return fut

    def quic_event_received(self, event):
        if isinstance(event, ConnectionTerminated):
            self.terminated = {"error_code": event.error_code, "reason": event.reason_phrase}
            if not self.closed.done():
                self.closed.set_result(None)
            for fut in self.waiting.values():
                if not fut.done():
                    fut.set_result(None)
        if isinstance(event, StreamReset) and event.stream_id in self.waiting:
            self.results[event.stream_id]["reset"] = event.error_code
            self.waiting[event.stream_id].set_result(None)
        for ev in self.h3.handle_event(event):
            r = self.results.get(getattr(ev, "stream_id", None))
            if r is None:
                continue
            if isinstance(ev, HeadersReceived):
                for k, v in ev.headers:
                    if k == b":status":
                        r["status"] = int(v)
                    else:
                        r["headers"].append([k.decode(), v.decode()])
            elif isinstance(ev, DataReceived):
                r["body"].update(ev.data)
                r["len"] += len(ev.data)
            if getattr(ev, "stream_ended", False):
                r["done"] = self.finished
                self.finished += 1
                fut = self.waiting[ev.stream_id]
                if not fut.done():
                    fut.set_result(None)


# Where a run stands, for the report of one that fails.
STAGE = {"stage": "connecting"}


async def run(args):
    config = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN)
    config.server_name = args.sni or args.host
    if args.cafile:
        config.load_verify_locations(args.cafile)
    else:
        config.verify_mode = ssl.CERT_NONE
    if args.chacha:
        config.cipher_suites = [CipherSuite.CHACHA20_POLY1305_SHA256]
    tickets = []
    if args.ticket_in:
        import pickle
        with open(args.ticket_in, "rb") as f:
            config.session_ticket = pickle.load(f)
    out = {"requests": []}
    async with connect(args.host, args.port, configuration=config, create_protocol=Client,
                       session_ticket_handler=tickets.append, wait_connected=True) as client:
        quic = client._quic
        STAGE.update(stage="connected", client=client)
        out["alpn"] = quic.tls.alpn_negotiated
        out["cipher"] = str(quic.tls.key_schedule.cipher_suite) if quic.tls.key_schedule else None
        out["resumed"] = quic.tls.session_resumed
        out["retry"] = quic._retry_source_connection_id is not None
        if args.reset_flood:
            # Requests cancelled as soon as they are sent (the rapid reset
            # pattern): the server's budget runs out and it closes.
            loop = asyncio.get_running_loop()
            deadline = loop.time() + args.timeout
            for i in range(args.reset_flood):
                sid = quic.get_next_available_stream_id()
                # Within the server's stream credit, which it extends as
                # the cancelled streams close (until it closes instead).
                while sid // 4 >= quic._remote_max_streams_bidi and client.terminated is None:
                    if loop.time() > deadline:
                        raise TimeoutError("no stream credit")
                    await asyncio.sleep(0.002)
                if client.terminated is not None:
                    break
                fields = [(b":method", b"GET"), (b":scheme", b"https"),
                          (b":authority", (args.authority or args.host).encode()), (b":path", b"/")]
                client.h3.send_headers(stream_id=sid, headers=fields, end_stream=True)
                quic.reset_stream(sid, 0x10c)
                quic.stop_stream(sid, 0x10c)
                client.transmit()
                if i % 20 == 19:
                    await asyncio.sleep(0)
        if args.control_flood:
            # Reserved frames (§7.2.8) on our control stream after its
            # SETTINGS, each cheap to send and to skip.
            frame = encode_varint(0x21 + 0x1f * 7) + encode_varint(0)
            for _ in range(args.control_flood // 100):
                quic.send_stream_data(client.h3._local_control_stream_id, frame * 100)
                client.transmit()
                await asyncio.sleep(0)
        if (args.reset_flood or args.control_flood) and not args.paths_after_raw:
            try:
                await asyncio.wait_for(asyncio.shield(client.closed), args.timeout)
            except asyncio.TimeoutError:
                out["timeout"] = True
            args.paths = []
        if args.raw:
            payload = bytes.fromhex(args.raw)
            if args.raw_section:
                section = payload
                payload = encode_varint(1) + encode_varint(len(section)) + section
            try:
                await asyncio.wait_for(client.raw(payload), args.timeout)
            except asyncio.TimeoutError:
                out["timeout"] = True
            args.paths = [] if not args.paths_after_raw else args.paths
        paths = args.paths * args.repeat
        for i in range(0, len(paths), args.concurrency):
            batch = paths[i:i + args.concurrency]
            priority = dict(args.priority_of)
            futs = [client.request(args.method, args.authority or args.host, p,
                                   args.header + ([("priority", priority[p])] if p in priority else []))
                    for p in batch]
            if args.priority_update and i == 0:
                # PRIORITY_UPDATE for request streams (RFC 9218 §7.1) on
                # our control stream, after the requests went out.
                for path, value in args.priority_update:
                    for sid, r in client.results.items():
                        if r["path"] == path and sid < 1 << 62:
                            update = encode_varint(sid) + value.encode()
                            frame = encode_varint(0xF0700) + encode_varint(len(update)) + update
                            quic.send_stream_data(client.h3._local_control_stream_id, frame)
                client.transmit()
            if args.key_update and i == 0:
                quic.request_key_update()
            if args.migrate and i == 0:
                # A new local port for the same connection, as a NAT
                # rebinding looks to the server: datagrams now leave from
                # (and return to) another socket.
                loop = asyncio.get_running_loop()

                class Forward(asyncio.DatagramProtocol):
                    def datagram_received(self, data, addr):
                        client.datagram_received(data, addr)

                family = client._transport.get_extra_info("socket").family
                local = ("::", 0) if family == socket.AF_INET6 else ("127.0.0.1", 0)
                transport, _ = await loop.create_datagram_endpoint(Forward, local_addr=local, family=family)
                client._transport = transport
                quic.change_connection_id()
                client.transmit()
            await asyncio.wait_for(asyncio.gather(*futs), args.timeout)
        for sid, r in sorted(client.results.items()):
            r["sha256"] = r.pop("body").hexdigest()
            out["requests"].append(r)
        if args.await_close:
            # The server closes (a drain): wait for its CONNECTION_CLOSE.
            await asyncio.wait_for(asyncio.shield(client.closed), args.timeout)
        out["terminated"] = client.terminated
    if args.ticket_out and tickets:
        import pickle
        with open(args.ticket_out, "wb") as f:
            pickle.dump(tickets[-1], f)
    out["tickets"] = len(tickets)
    print(json.dumps(out))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("host")
    p.add_argument("port", type=int)
    p.add_argument("paths", nargs="*", default=[])
    p.add_argument("--sni")
    p.add_argument("--authority")
    p.add_argument("--cafile")
    p.add_argument("--method", default="GET")
    p.add_argument("--header", nargs=2, action="append", default=[])
    p.add_argument("--priority-of", nargs=2, action="append", default=[], metavar=("PATH", "VALUE"),
                   help="a priority field (RFC 9218) for requests of PATH")
    p.add_argument("--priority-update", nargs=2, action="append", default=[], metavar=("PATH", "VALUE"),
                   help="a PRIORITY_UPDATE frame giving requests of PATH this priority, once they are sent")
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--concurrency", type=int, default=100)
    p.add_argument("--timeout", type=float, default=20)
    p.add_argument("--await-close", action="store_true", help="wait for the server to close the connection")
    p.add_argument("--chacha", action="store_true")
    p.add_argument("--key-update", action="store_true")
    p.add_argument("--migrate", action="store_true")
    p.add_argument("--raw", help="hex bytes sent as a request stream")
    p.add_argument("--reset-flood", type=int, default=0, help="this many requests, each cancelled at once")
    p.add_argument("--control-flood", type=int, default=0, help="this many reserved frames on the control stream")
    p.add_argument("--raw-section", action="store_true", help="--raw is a field section: frame it as HEADERS")
    p.add_argument("--paths-after-raw", action="store_true", help="the paths too, after --raw or a flood")
    p.add_argument("--ticket-in")
    p.add_argument("--ticket-out")
    args = p.parse_intermixed_args()
    try:
        asyncio.run(run(args))
    except Exception as e:  # a failed handshake or timeout, reported
        report = {"error": f"{type(e).__name__}: {e}", "stage": STAGE["stage"]}
        client = STAGE.get("client")
        if client is not None:
            # What each request had got, and the connection IDs in use.
            report["requests"] = [
                {k: v for k, v in r.items() if k != "body"} for r in client.results.values()
            ]
            report["terminated"] = client.terminated
            report["peer_cid"] = client._quic._peer_cid.cid.hex()
        print(json.dumps(report))
        sys.exit(2)


if __name__ == "__main__":
    main()
