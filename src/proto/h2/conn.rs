//! The frame handlers: RFC 9113's connection and stream rules (§5.1 stream
//! states, §6 frame definitions, §8 message validity), flow control on the
//! receive side, and the defences (rapid reset, CONTINUATION and control
//! floods, header list size, stream concurrency), each counted.

use std::time::Instant;

use super::frame::{self, ErrorCode, Head};
use super::request::{build, parse_priority, Malformed};
use super::stream::Stream;
use super::*;

/// Output queued past this stops reading frames until it drains: a client
/// that sends PINGs or requests without reading cannot grow it unbounded.
const BACKLOG: usize = crate::io::output::HIGH_WATER;

/// How many recently reset stream ids are remembered (see
/// `H2::reset_recently`).
const RESET_MEMORY: usize = 32;

/// Where a stream id stands (RFC 9113 §5.1), as far as a frame cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Known {
    Idle,
    Open,
    /// We reset it recently: frames in flight are ignored.
    ResetByUs,
    Closed,
}

impl H2 {
    /// Take the complete frames at the start of `input`; returns how many
    /// bytes were used. Frames we send (acks, responses, errors) go into
    /// `out`; requests are answered through `handler`.
    pub fn recv(
        &mut self,
        input: &[u8],
        out: &mut Output,
        handler: &mut dyn Handler,
        counters: &mut H2Counters,
        now: Instant,
    ) -> (usize, Recv) {
        let mut at = 0;
        loop {
            if let Phase::Failed(_) = self.phase {
                return (input.len(), Recv::Failed);
            }
            if out.pending_owned() >= BACKLOG {
                return (at, Recv::Backlogged);
            }
            let rest = &input[at..];
            if self.phase == Phase::Preface {
                let n = rest.len().min(PREFACE.len());
                if rest[..n] != PREFACE[..n] {
                    self.fail(out.buf(), ErrorCode::Protocol, counters);
                    continue;
                }
                if n < PREFACE.len() {
                    return (at, Recv::More);
                }
                at += n;
                self.phase = Phase::Open;
                continue;
            }
            let Some(head) = Head::parse(rest) else {
                return (at, self.unfinished(rest, now));
            };
            if head.len as usize > MAX_FRAME_IN {
                self.fail(out.buf(), ErrorCode::FrameSize, counters);
                continue;
            }
            let total = frame::HEAD_LEN + head.len as usize;
            if rest.len() < total {
                return (at, self.unfinished(rest, now));
            }
            let payload = &rest[frame::HEAD_LEN..total];
            at += total;
            // A block began when its first frame's first byte arrived.
            let began = self.partial_since.take().unwrap_or(now);
            self.frame(head, payload, out, handler, counters, now);
            if let Some(p) = &mut self.pending {
                p.started = p.started.min(began);
            }
        }
    }

    /// `rest` is the start of a frame still arriving: it is pending from
    /// its first byte (see [`H2::header_pending_since`]).
    fn unfinished(&mut self, rest: &[u8], now: Instant) -> Recv {
        if rest.is_empty() {
            self.partial_since = None;
        } else if self.partial_since.is_none() {
            self.partial_since = Some(now);
        }
        Recv::More
    }

    fn frame(
        &mut self,
        head: Head,
        payload: &[u8],
        out: &mut Output,
        handler: &mut dyn Handler,
        counters: &mut H2Counters,
        now: Instant,
    ) {
        // RFC 9113 §6.10: a header block is contiguous.
        if let Some(p) = &self.pending {
            if head.kind != frame::CONTINUATION || head.stream != p.stream {
                return self.fail(out.buf(), ErrorCode::Protocol, counters);
            }
        }
        match head.kind {
            frame::DATA => self.on_data(head, payload, out.buf(), counters, now),
            frame::HEADERS => self.on_headers(head, payload, out, handler, counters, now),
            frame::PRIORITY => self.on_priority(head, payload, out.buf(), counters, now),
            frame::RST_STREAM => self.on_rst(head, payload, out.buf(), counters, now),
            frame::SETTINGS => self.on_settings(head, payload, out.buf(), counters, now),
            frame::PUSH_PROMISE => self.fail(out.buf(), ErrorCode::Protocol, counters),
            frame::PING => {
                if head.stream != 0 {
                    return self.fail(out.buf(), ErrorCode::Protocol, counters);
                }
                if payload.len() != 8 {
                    return self.fail(out.buf(), ErrorCode::FrameSize, counters);
                }
                if head.has(frame::FLAG_ACK) {
                    // A round trip since our first GOAWAY: every stream the
                    // client sent before reading it has arrived.
                    if self.drain_pinged && payload == DRAIN_PING && !self.goaway_sent {
                        self.goaway_sent = true;
                        frame::write_goaway(out.buf(), self.last_stream, ErrorCode::NoError);
                        counters.goaways_sent[ErrorCode::NoError as usize] += 1;
                    }
                    return;
                }
                if !self.spend_control(out.buf(), counters, now) {
                    return;
                }
                frame::write_ping_ack(out.buf(), payload);
            }
            frame::GOAWAY => {
                if head.stream != 0 {
                    return self.fail(out.buf(), ErrorCode::Protocol, counters);
                }
                if payload.len() < 8 {
                    return self.fail(out.buf(), ErrorCode::FrameSize, counters);
                }
                self.peer_goaway = true;
            }
            frame::WINDOW_UPDATE => self.on_window_update(head, payload, out.buf(), counters, now),
            frame::CONTINUATION => self.on_continuation(head, payload, out, handler, counters, now),
            frame::PRIORITY_UPDATE => {
                if head.stream != 0 {
                    return self.fail(out.buf(), ErrorCode::Protocol, counters);
                }
                if !self.spend_control(out.buf(), counters, now) {
                    return;
                }
                let Some(id) = frame::u31(payload) else {
                    return self.fail(out.buf(), ErrorCode::FrameSize, counters);
                };
                if let Some(s) = self.streams.get(id) {
                    (s.urgency, s.incremental) = parse_priority(&payload[4..]);
                }
            }
            // RFC 9113 §5.5: unknown frame types are ignored.
            _ => {}
        }
    }

    /// A connection error: GOAWAY with `code`, and nothing more is read.
    fn fail(&mut self, out: &mut Vec<u8>, code: ErrorCode, counters: &mut H2Counters) {
        if let Phase::Failed(_) = self.phase {
            return;
        }
        frame::write_goaway(out, self.last_stream, code);
        counters.goaways_sent[code as usize] += 1;
        self.goaway_sent = true;
        self.phase = Phase::Failed(code);
    }

    /// A stream error: RST_STREAM with `code`. A reset the client provoked
    /// counts toward the rapid reset budget (CVE-2025-8671).
    pub(super) fn reset_stream(
        &mut self,
        out: &mut Vec<u8>,
        id: u32,
        code: ErrorCode,
        counters: &mut H2Counters,
    ) {
        frame::write_rst(out, id, code);
        counters.resets_sent[code as usize] += 1;
        if let Some(mut s) = self.streams.remove(id) {
            s.drop_body();
        }
        if self.reset_recently.len() == RESET_MEMORY {
            self.reset_recently.pop_front();
        }
        self.reset_recently.push_back(id);
    }

    /// A stream error caused by the client: reset, and charge the budget.
    fn client_reset(
        &mut self,
        out: &mut Vec<u8>,
        id: u32,
        code: ErrorCode,
        counters: &mut H2Counters,
        now: Instant,
    ) {
        self.reset_stream(out, id, code, counters);
        self.charge_reset(out, counters, now);
    }

    fn charge_reset(&mut self, out: &mut Vec<u8>, counters: &mut H2Counters, now: Instant) {
        if !self.resets.take(RESET_BURST, RESET_RATE, now) {
            counters.defences[Defence::RapidReset as usize] += 1;
            self.fail(out, ErrorCode::EnhanceYourCalm, counters);
        }
    }

    /// One frame from the control budget; false (and GOAWAY) when spent.
    fn spend_control(
        &mut self,
        out: &mut Vec<u8>,
        counters: &mut H2Counters,
        now: Instant,
    ) -> bool {
        if self.control.take(CONTROL_BURST, CONTROL_RATE, now) {
            return true;
        }
        counters.defences[Defence::ControlFlood as usize] += 1;
        self.fail(out, ErrorCode::EnhanceYourCalm, counters);
        false
    }

    fn known(&mut self, id: u32) -> Known {
        if id > self.last_stream {
            Known::Idle
        } else if self.streams.get(id).is_some() {
            Known::Open
        } else if self.reset_recently.contains(&id) {
            Known::ResetByUs
        } else {
            Known::Closed
        }
    }

    fn on_data(
        &mut self,
        head: Head,
        payload: &[u8],
        out: &mut Vec<u8>,
        counters: &mut H2Counters,
        now: Instant,
    ) {
        if head.stream == 0 {
            return self.fail(out, ErrorCode::Protocol, counters);
        }
        let Some(data) = frame::unpad(head.flags, payload) else {
            return self.fail(out, ErrorCode::Protocol, counters);
        };
        // Flow control counts the whole payload, padding included.
        let len = payload.len() as i64;
        self.recv_window -= len;
        if self.recv_window < 0 {
            return self.fail(out, ErrorCode::FlowControl, counters);
        }
        self.recv_unacked += len;
        if self.recv_unacked >= WINDOW_BATCH {
            frame::write_window_update(out, 0, self.recv_unacked as u32);
            self.recv_window += self.recv_unacked;
            self.recv_unacked = 0;
        }
        if data.is_empty()
            && !head.has(frame::FLAG_END_STREAM)
            && !self.spend_control(out, counters, now)
        {
            return;
        }
        match self.known(head.stream) {
            Known::Idle => return self.fail(out, ErrorCode::Protocol, counters),
            Known::Closed => return self.fail(out, ErrorCode::StreamClosed, counters),
            Known::ResetByUs => return,
            Known::Open => {}
        }
        let id = head.stream;
        let Some(s) = self.streams.get(id) else {
            return;
        };
        if s.recv_closed {
            return self.client_reset(out, id, ErrorCode::StreamClosed, counters, now);
        }
        s.recv_window -= len;
        if s.recv_window < 0 {
            return self.client_reset(out, id, ErrorCode::FlowControl, counters, now);
        }
        s.received += data.len() as u64;
        let end = head.has(frame::FLAG_END_STREAM);
        let length_ok = match s.content_length {
            Some(cl) if end => s.received == cl,
            Some(cl) => s.received <= cl,
            None => true,
        };
        if !length_ok {
            return self.client_reset(out, id, ErrorCode::Protocol, counters, now);
        }
        if end {
            s.recv_closed = true;
            if s.done() {
                self.streams.remove(id);
            }
            return;
        }
        // The body is discarded: give the credit back, batched.
        s.recv_unacked += len;
        if s.recv_unacked >= WINDOW_BATCH {
            frame::write_window_update(out, id, s.recv_unacked as u32);
            s.recv_window += s.recv_unacked;
            s.recv_unacked = 0;
        }
    }

    fn on_headers(
        &mut self,
        head: Head,
        payload: &[u8],
        out: &mut Output,
        handler: &mut dyn Handler,
        counters: &mut H2Counters,
        now: Instant,
    ) {
        if head.stream == 0 {
            return self.fail(out.buf(), ErrorCode::Protocol, counters);
        }
        let Some(mut fragment) = frame::unpad(head.flags, payload) else {
            return self.fail(out.buf(), ErrorCode::Protocol, counters);
        };
        let mut self_dependent = false;
        if head.has(frame::FLAG_PRIORITY) {
            let Some(dep) = frame::dependency(fragment).filter(|_| fragment.len() >= 5) else {
                return self.fail(out.buf(), ErrorCode::FrameSize, counters);
            };
            self_dependent = dep == head.stream;
            fragment = &fragment[5..];
        }
        self.block.clear();
        if !self.block_fits(fragment.len(), out.buf(), counters) {
            return;
        }
        self.block.extend_from_slice(fragment);
        let end_stream = head.has(frame::FLAG_END_STREAM);
        if head.has(frame::FLAG_END_HEADERS) {
            self.headers_done(
                head.stream,
                end_stream,
                self_dependent,
                out,
                handler,
                counters,
                now,
            );
        } else {
            self.pending = Some(Pending {
                stream: head.stream,
                end_stream,
                self_dependent,
                frames: 0,
                started: now,
            });
        }
    }

    /// The CONTINUATION flood defence: a block's total size is capped.
    fn block_fits(&mut self, more: usize, out: &mut Vec<u8>, counters: &mut H2Counters) -> bool {
        let cap = self.cfg.max_header_list.max(MAX_FRAME_IN) * 2;
        if self.block.len() + more <= cap {
            return true;
        }
        counters.defences[Defence::Continuation as usize] += 1;
        self.fail(out, ErrorCode::EnhanceYourCalm, counters);
        false
    }

    fn on_continuation(
        &mut self,
        head: Head,
        payload: &[u8],
        out: &mut Output,
        handler: &mut dyn Handler,
        counters: &mut H2Counters,
        now: Instant,
    ) {
        let Some(p) = &mut self.pending else {
            return self.fail(out.buf(), ErrorCode::Protocol, counters);
        };
        p.frames += 1;
        if p.frames > MAX_CONTINUATIONS {
            counters.defences[Defence::Continuation as usize] += 1;
            return self.fail(out.buf(), ErrorCode::EnhanceYourCalm, counters);
        }
        if !self.block_fits(payload.len(), out.buf(), counters) {
            return;
        }
        self.block.extend_from_slice(payload);
        if head.has(frame::FLAG_END_HEADERS) {
            let Some(p) = self.pending.take() else {
                return;
            };
            self.headers_done(
                p.stream,
                p.end_stream,
                p.self_dependent,
                out,
                handler,
                counters,
                now,
            );
        }
    }

    /// A complete header block for stream `id`: a request, trailers, or a
    /// block to decode only to keep the HPACK state in step.
    #[allow(clippy::too_many_arguments)]
    fn headers_done(
        &mut self,
        id: u32,
        end_stream: bool,
        self_dependent: bool,
        out: &mut Output,
        handler: &mut dyn Handler,
        counters: &mut H2Counters,
        now: Instant,
    ) {
        let known = self.known(id);
        if known == Known::Idle && id % 2 == 0 {
            return self.fail(out.buf(), ErrorCode::Protocol, counters);
        }
        // Every block is decoded, even one for a stream we refuse: the
        // decoder's table must follow the client's encoder.
        let decoded = hpack::decode(
            &mut self.decoder,
            &self.block,
            self.cfg.max_header_list,
            &mut self.fields,
        );
        if decoded.is_err() {
            return self.fail(out.buf(), ErrorCode::Compression, counters);
        }
        match known {
            // A new stream's id must exceed every id the client used
            // before; one that does not is unexpected, PROTOCOL_ERROR
            // (RFC 9113 §5.1.1). A reused id cannot be told from one
            // skipped (both are closed, and remembering every id the
            // client used would cost memory it controls), so it gets the
            // same.
            Known::Closed => self.fail(out.buf(), ErrorCode::Protocol, counters),
            Known::ResetByUs => {}
            Known::Open => self.trailers(id, end_stream, out.buf(), counters, now),
            Known::Idle => {
                self.last_stream = id;
                if self.goaway_sent {
                    // Above the GOAWAY's last stream id: ignored (§6.8).
                    counters.refused_after_goaway += 1;
                    self.reset_recently.push_back(id);
                    if self.reset_recently.len() > RESET_MEMORY {
                        self.reset_recently.pop_front();
                    }
                    return;
                }
                if self_dependent {
                    return self.client_reset(out.buf(), id, ErrorCode::Protocol, counters, now);
                }
                if self.streams.len() >= self.cfg.max_concurrent as usize {
                    counters.defences[Defence::Concurrency as usize] += 1;
                    return self.reset_stream(out.buf(), id, ErrorCode::RefusedStream, counters);
                }
                counters.streams += 1;
                self.request(id, end_stream, out, handler, counters, now);
            }
        }
    }

    fn trailers(
        &mut self,
        id: u32,
        end_stream: bool,
        out: &mut Vec<u8>,
        counters: &mut H2Counters,
        now: Instant,
    ) {
        let pseudo = self.fields.iter().any(|(n, _)| n.first() == Some(&b':'));
        let Some(s) = self.streams.get(id) else {
            return;
        };
        if s.recv_closed {
            return self.client_reset(out, id, ErrorCode::StreamClosed, counters, now);
        }
        let length_ok = s.content_length.is_none_or(|cl| cl == s.received);
        if !end_stream || pseudo || !length_ok {
            return self.client_reset(out, id, ErrorCode::Protocol, counters, now);
        }
        s.recv_closed = true;
        if s.done() {
            self.streams.remove(id);
        }
    }

    /// A new stream's request: validated, answered by the handler, its
    /// head framed at once and its body handed to the scheduler.
    fn request(
        &mut self,
        id: u32,
        end_stream: bool,
        out: &mut Output,
        handler: &mut dyn Handler,
        counters: &mut H2Counters,
        now: Instant,
    ) {
        let mut stream = Stream::new(id, self.peer_initial_window);
        stream.recv_closed = end_stream;
        let resp = if self.fields.too_large {
            counters.defences[Defence::HeaderList as usize] += 1;
            handler.refuse(
                Status::HeaderFieldsTooLarge,
                "request header fields too large",
            )
        } else {
            match build(&self.fields, crate::http::request::Version::Http2) {
                Err(Malformed) => {
                    return self.client_reset(out.buf(), id, ErrorCode::Protocol, counters, now)
                }
                Ok(b) => {
                    stream.content_length = b.content_length;
                    stream.urgency = b.urgency;
                    stream.incremental = b.incremental;
                    if end_stream && b.content_length.is_some_and(|cl| cl != 0) {
                        return self.client_reset(
                            out.buf(),
                            id,
                            ErrorCode::Protocol,
                            counters,
                            now,
                        );
                    }
                    if let Some(e) = b.bad_host {
                        handler.refuse(e.status(), e.message())
                    } else if b.req.target.len() > self.cfg.max_uri {
                        handler.refuse(Status::UriTooLong, "request target too long")
                    } else if b.content_length.is_some_and(|cl| cl > self.cfg.max_body) {
                        handler.refuse(Status::PayloadTooLarge, "request body too large")
                    } else {
                        handler.respond(&b.req, &self.fields)
                    }
                }
            }
        };
        let mut block = std::mem::take(&mut self.block);
        block.clear();
        self.encoder.response(&resp, &mut block);
        // The common small answer: a body that fits the windows and one
        // frame goes out at once, without being copied into the stream.
        if let Some(parts) = crate::proto::body::copied(&resp.body) {
            let body_len = parts[0].len() + parts[1].len();
            let fits = (body_len as i64) <= stream.send_window.min(self.send_window)
                && body_len <= self.peer_max_frame.min(frame::DEFAULT_MAX_FRAME as usize);
            if body_len > 0 && fits {
                let buf = out.buf();
                frame::write_headers(buf, id, &block, false, self.peer_max_frame);
                frame::write_head(buf, body_len, frame::DATA, frame::FLAG_END_STREAM, id);
                buf.extend_from_slice(parts[0]);
                buf.extend_from_slice(parts[1]);
                stream.send_window -= body_len as i64;
                self.send_window -= body_len as i64;
                self.block = block;
                stream.send_closed = true;
                if !stream.done() {
                    self.streams.insert(stream);
                }
                return;
            }
        }
        stream.set_body(&resp.body);
        let no_body = stream.body_is_empty();
        frame::write_headers(out.buf(), id, &block, no_body, self.peer_max_frame);
        self.block = block;
        if no_body {
            stream.send_closed = true;
        }
        if !stream.done() {
            self.streams.insert(stream);
        }
    }

    fn on_priority(
        &mut self,
        head: Head,
        payload: &[u8],
        out: &mut Vec<u8>,
        counters: &mut H2Counters,
        now: Instant,
    ) {
        if head.stream == 0 {
            return self.fail(out, ErrorCode::Protocol, counters);
        }
        if payload.len() != 5 {
            return self.client_reset(out, head.stream, ErrorCode::FrameSize, counters, now);
        }
        if !self.spend_control(out, counters, now) {
            return;
        }
        if frame::dependency(payload) == Some(head.stream) {
            self.client_reset(out, head.stream, ErrorCode::Protocol, counters, now);
        }
    }

    fn on_rst(
        &mut self,
        head: Head,
        payload: &[u8],
        out: &mut Vec<u8>,
        counters: &mut H2Counters,
        now: Instant,
    ) {
        if head.stream == 0 {
            return self.fail(out, ErrorCode::Protocol, counters);
        }
        if payload.len() != 4 {
            return self.fail(out, ErrorCode::FrameSize, counters);
        }
        match self.known(head.stream) {
            Known::Idle => self.fail(out, ErrorCode::Protocol, counters),
            Known::Closed | Known::ResetByUs => {}
            Known::Open => {
                let Some(mut s) = self.streams.remove(head.stream) else {
                    return;
                };
                // Cancelled before its response was out: the rapid reset
                // pattern when it happens faster than streams are served.
                if !s.send_closed {
                    s.drop_body();
                    self.charge_reset(out, counters, now);
                }
            }
        }
    }

    fn on_settings(
        &mut self,
        head: Head,
        payload: &[u8],
        out: &mut Vec<u8>,
        counters: &mut H2Counters,
        now: Instant,
    ) {
        if head.stream != 0 {
            return self.fail(out, ErrorCode::Protocol, counters);
        }
        if head.has(frame::FLAG_ACK) {
            if !payload.is_empty() {
                self.fail(out, ErrorCode::FrameSize, counters);
            }
            return;
        }
        let Some(params) = frame::settings(payload) else {
            return self.fail(out, ErrorCode::FrameSize, counters);
        };
        if !self.spend_control(out, counters, now) {
            return;
        }
        for (id, value) in params {
            match id {
                frame::SETTINGS_ENABLE_PUSH if value > 1 => {
                    return self.fail(out, ErrorCode::Protocol, counters)
                }
                frame::SETTINGS_INITIAL_WINDOW_SIZE => {
                    if i64::from(value) > frame::MAX_WINDOW {
                        return self.fail(out, ErrorCode::FlowControl, counters);
                    }
                    // §6.9.2: the change applies to every open stream.
                    let delta = i64::from(value) - self.peer_initial_window;
                    self.peer_initial_window = i64::from(value);
                    let mut overflow = false;
                    for s in self.streams.iter_mut() {
                        s.send_window += delta;
                        overflow |= s.send_window > frame::MAX_WINDOW;
                    }
                    if overflow {
                        return self.fail(out, ErrorCode::FlowControl, counters);
                    }
                }
                frame::SETTINGS_MAX_FRAME_SIZE => {
                    if !(frame::DEFAULT_MAX_FRAME..1 << 24).contains(&value) {
                        return self.fail(out, ErrorCode::Protocol, counters);
                    }
                    self.peer_max_frame = value as usize;
                }
                // Bounds our encoder's table from the next block on.
                frame::SETTINGS_HEADER_TABLE_SIZE => self.encoder.peer_table_size(value),
                // The rest concern push or are informative.
                _ => {}
            }
        }
        frame::write_settings_ack(out);
    }

    fn on_window_update(
        &mut self,
        head: Head,
        payload: &[u8],
        out: &mut Vec<u8>,
        counters: &mut H2Counters,
        now: Instant,
    ) {
        if payload.len() != 4 {
            return self.fail(out, ErrorCode::FrameSize, counters);
        }
        let increment = i64::from(frame::u31(payload).unwrap_or(0));
        if head.stream == 0 {
            if increment == 0 {
                return self.fail(out, ErrorCode::Protocol, counters);
            }
            self.send_window += increment;
            if self.send_window > frame::MAX_WINDOW {
                self.fail(out, ErrorCode::FlowControl, counters);
            }
            return;
        }
        match self.known(head.stream) {
            Known::Idle => self.fail(out, ErrorCode::Protocol, counters),
            Known::Closed | Known::ResetByUs => {}
            Known::Open => {
                let id = head.stream;
                if increment == 0 {
                    return self.client_reset(out, id, ErrorCode::Protocol, counters, now);
                }
                let Some(s) = self.streams.get(id) else {
                    return;
                };
                s.send_window += increment;
                if s.send_window > frame::MAX_WINDOW {
                    self.client_reset(out, id, ErrorCode::FlowControl, counters, now);
                }
            }
        }
    }
}
