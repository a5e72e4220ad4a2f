"""Frames both ways for tests/h2/h2probe.py: the connection (TCP, or TLS with
ALPN h2 and the test CA), frame encoding, HPACK integers and literals
written by hand, and `Wire`, which parses every frame the server sends and
keeps what the scenarios check (SETTINGS, GOAWAYs, resets, header blocks,
DATA, the order streams end)."""

import hashlib
import json
import select
import socket
import ssl
import struct
import sys
import time

import hpack

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = range(10)
FRAME_NAMES = ["DATA", "HEADERS", "PRIORITY", "RST_STREAM", "SETTINGS", "PUSH_PROMISE",
               "PING", "GOAWAY", "WINDOW_UPDATE", "CONTINUATION"]
END_STREAM, ACK, END_HEADERS, PADDED, PRIO = 0x1, 0x1, 0x4, 0x8, 0x20
ERRORS = ["NO_ERROR", "PROTOCOL_ERROR", "INTERNAL_ERROR", "FLOW_CONTROL_ERROR", "SETTINGS_TIMEOUT",
          "STREAM_CLOSED", "FRAME_SIZE_ERROR", "REFUSED_STREAM", "CANCEL", "COMPRESSION_ERROR",
          "CONNECT_ERROR", "ENHANCE_YOUR_CALM", "INADEQUATE_SECURITY", "HTTP_1_1_REQUIRED"]
S_HEADER_TABLE_SIZE, S_ENABLE_PUSH, S_MAX_CONCURRENT_STREAMS, S_INITIAL_WINDOW_SIZE, \
    S_MAX_FRAME_SIZE, S_MAX_HEADER_LIST_SIZE = range(1, 7)
MAX_WINDOW = 2**31 - 1


# Streams listed one by one in a summary; the rest only counted.
SHOWN = 40


def histogram(values):
    out = {}
    for v in values:
        out[v] = out.get(v, 0) + 1
    return out


def err_name(code):
    return ERRORS[code] if code < len(ERRORS) else "0x%x" % code


# ---------------------------------------------------------------------------
# Connection
# ---------------------------------------------------------------------------

def connect(args):
    """A TCP (or TLS with ALPN h2) socket to the server."""
    sock = socket.create_connection((args.host, args.port), timeout=10)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if args.tls:
        ctx = ssl.create_default_context(cafile=args.ca)
        ctx.set_alpn_protocols(["h2", "http/1.1"] if args.offer_h1 else ["h2"])
        sock = ctx.wrap_socket(sock, server_hostname=args.sni)
        got = sock.selected_alpn_protocol()
        if got != "h2":
            emit({"error": "alpn", "alpn": got})
            sys.exit(0)
    return sock


def emit(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def frame(ftype, flags, stream, payload=b""):
    n = len(payload)
    return struct.pack(">BHBBI", n >> 16, n & 0xFFFF, ftype, flags, stream & 0x7FFFFFFF) + payload


def settings_frame(pairs):
    return frame(SETTINGS, 0, 0, b"".join(struct.pack(">HI", k, v) for k, v in pairs))


class Wire:
    """Raw frames both ways; the server's frames are parsed and kept."""

    def __init__(self, args, settings=(), window=None):
        self.sock = connect(args)
        self.buf = b""
        self.closed = False
        self.close_reason = None
        self.frames = []  # every frame received: (type, flags, stream, payload)
        self.goaways = []  # (last_stream_id, error name, debug text)
        self.resets = {}  # stream -> error name
        self.server_settings = {}
        self.decoder = hpack.Decoder()
        self.encoder = hpack.Encoder()
        self.headers = {}  # stream -> decoded response header list
        self.data = {}  # stream -> bytearray
        self.ended = set()  # streams the server ended
        self.end_order = []  # the same, in the order their last frame came
        self.pending_block = None  # (stream, bytes) while a header block continues
        out = PREFACE + settings_frame(list(settings))
        if window:
            out += frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", window))
        self.send(out)

    def send(self, data):
        """Writes all of `data`; False once the server has closed."""
        try:
            self.sock.sendall(data)
            return True
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError, OSError) as e:
            self.closed = True
            self.close_reason = self.close_reason or "send: %s" % type(e).__name__
            return False

    def send_nonblocking(self, data, patience):
        """Writes as much of `data` as the server takes within `patience`
        seconds of no progress: (bytes written, whether it stalled)."""
        sent = 0
        view = memoryview(data)
        while sent < len(data):
            try:
                _, w, _ = select.select([], [self.sock], [], patience)
            except (ValueError, OSError):
                self.closed = True
                return sent, False
            if not w:
                return sent, True
            try:
                sent += self.sock.send(view[sent:sent + 65536])
            except (BlockingIOError, ssl.SSLWantWriteError):
                continue
            except (BrokenPipeError, ConnectionResetError, ssl.SSLError, OSError) as e:
                self.closed = True
                self.close_reason = self.close_reason or "send: %s" % type(e).__name__
                return sent, False
        return sent, False

    def request(self, stream, path, extra=(), end_stream=True, method="GET", authority="localhost"):
        block = self.encoder.encode([(":method", method), (":scheme", "https"),
                                     (":authority", authority), (":path", path)] + list(extra))
        flags = END_HEADERS | (END_STREAM if end_stream else 0)
        return frame(HEADERS, flags, stream, block)

    def read_some(self, timeout):
        """Reads what arrives within `timeout`; parses whole frames. Returns
        False once the server has closed."""
        if self.closed:
            return False
        try:
            r, _, _ = select.select([self.sock], [], [], timeout)
        except (ValueError, OSError):
            self.closed = True
            return False
        if not r:
            return True
        try:
            chunk = self.sock.recv(1 << 20)
        except ssl.SSLWantReadError:
            return True
        except (ConnectionResetError, ssl.SSLError, OSError) as e:
            self.closed = True
            self.close_reason = self.close_reason or "recv: %s" % type(e).__name__
            return False
        if not chunk:
            self.closed = True
            self.close_reason = self.close_reason or "eof"
            return False
        self.buf += chunk
        self.parse()
        return True

    def parse(self):
        while len(self.buf) >= 9:
            hi, lo, ftype, flags, stream = struct.unpack(">BHBBI", self.buf[:9])
            n = (hi << 16) | lo
            if len(self.buf) < 9 + n:
                return
            payload = self.buf[9:9 + n]
            self.buf = self.buf[9 + n:]
            stream &= 0x7FFFFFFF
            self.frames.append((ftype, flags, stream, payload))
            self.on_frame(ftype, flags, stream, payload)

    def on_frame(self, ftype, flags, stream, payload):
        if ftype == SETTINGS and not flags & ACK:
            for i in range(0, len(payload) - 5, 6):
                k, v = struct.unpack(">HI", payload[i:i + 6])
                self.server_settings[k] = v
            self.send(frame(SETTINGS, ACK, 0))
        elif ftype == PING and not flags & ACK and self.answer_pings:
            self.send(frame(PING, ACK, 0, payload))
        elif ftype == GOAWAY:
            last, code = struct.unpack(">II", payload[:8])
            self.goaways.append((last & 0x7FFFFFFF, err_name(code),
                                 payload[8:].decode("utf-8", "replace")))
        elif ftype == RST_STREAM:
            self.resets[stream] = err_name(struct.unpack(">I", payload[:4])[0])
            self.end(stream)
        elif ftype in (HEADERS, CONTINUATION):
            if ftype == HEADERS:
                body = payload
                if flags & PADDED:
                    body = body[1:len(body) - body[0]]
                if flags & PRIO:
                    body = body[5:]
                self.pending_block = (stream, body, flags & END_STREAM)
            else:
                s, body, es = self.pending_block
                self.pending_block = (s, body + payload, es)
            if flags & END_HEADERS:
                s, body, es = self.pending_block
                self.pending_block = None
                decoded = [(k.decode() if isinstance(k, bytes) else k,
                            v.decode("latin-1") if isinstance(v, bytes) else v)
                           for k, v in self.decoder.decode(body, raw=True)]
                self.headers.setdefault(s, []).append(decoded)
                if es:
                    self.end(s)
        elif ftype == DATA:
            body = payload
            if flags & PADDED:
                body = body[1:len(body) - body[0]]
            self.data.setdefault(stream, bytearray()).extend(body)
            if flags & END_STREAM:
                self.end(stream)
            if self.auto_window and payload:
                self.send(frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", len(payload)))
                          + frame(WINDOW_UPDATE, 0, stream, struct.pack(">I", len(payload))))

    answer_pings = True
    auto_window = True

    def end(self, stream):
        if stream not in self.ended:
            self.ended.add(stream)
            self.end_order.append(stream)

    def pump(self, seconds, until=None):
        """Reads for up to `seconds`, or until `until()` holds or the server
        closes."""
        end = time.monotonic() + seconds
        while time.monotonic() < end and not self.closed:
            if until and until():
                return True
            self.read_some(min(0.05, max(0.0, end - time.monotonic())))
        return bool(until and until())

    def status(self, stream):
        blocks = self.headers.get(stream) or []
        for block in blocks:
            for k, v in block:
                if k == ":status":
                    return int(v)
        return None

    def summary(self, **extra):
        out = {
            "closed": self.closed,
            "close_reason": self.close_reason,
            "goaways": [{"last_stream_id": l, "error": e, "debug": d} for l, e, d in self.goaways],
            # The first streams only (an attack opens thousands), with
            # totals and a histogram.
            "resets": {str(k): v for k, v in sorted(self.resets.items())[:SHOWN]},
            "resets_total": len(self.resets),
            "resets_by_error": histogram(self.resets.values()),
            "server_settings": {str(k): v for k, v in sorted(self.server_settings.items())},
            "statuses": {str(s): self.status(s) for s in sorted(self.headers)[:SHOWN]},
            "statuses_total": len(self.headers),
            "statuses_by_code": histogram(str(self.status(s)) for s in self.headers),
            "frames_received": self.frame_counts(),
        }
        out.update(extra)
        return out

    def digests(self, streams):
        """SHA-256 of each stream's body, to compare with the file."""
        return {str(s): hashlib.sha256(bytes(self.data.get(s, b""))).hexdigest() for s in streams}

    def frame_counts(self):
        counts = {}
        for ftype, _, _, _ in self.frames:
            name = FRAME_NAMES[ftype] if ftype < len(FRAME_NAMES) else str(ftype)
            counts[name] = counts.get(name, 0) + 1
        return counts

    def wait_settings(self):
        """Until the server's first SETTINGS has come (its limits are then
        known)."""
        return self.pump(5, lambda: any(f[0] == SETTINGS and not f[1] & ACK for f in self.frames))

    def wait_closed(self, seconds):
        """Reads (answering nothing new) until the server closes; seconds
        taken, or None if it kept the connection open."""
        start = time.monotonic()
        self.pump(seconds)
        return round(time.monotonic() - start, 3) if self.closed else None


def hpack_int(value, prefix_bits, first_byte_flags):
    """An HPACK integer (RFC 7541 §5.1) with its prefix."""
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes([first_byte_flags | value])
    out = bytearray([first_byte_flags | limit])
    value -= limit
    while value >= 128:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def literal_no_index(name, value):
    """Literal header field without indexing, new name, no Huffman."""
    return (b"\x00" + hpack_int(len(name), 7, 0) + name + hpack_int(len(value), 7, 0) + value)
