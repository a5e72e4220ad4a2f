//! One QUIC connection's HTTP/3 (RFC 9114): our control stream and its
//! SETTINGS, the client's control and QPACK streams, request streams
//! answered through the semantics layer, bodies written as DATA frames
//! as the stream and connection windows open, GOAWAY on drain.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::Instant;

use bytes::Bytes;
use quinn_proto::{
    Connection, ConnectionError, Dir, Event, ReadError, ReadableError, StreamEvent, StreamId,
    VarInt, WriteError,
};

use super::Shared;
use crate::conn::{Answer, ShardEnv};
use crate::http::Status;
use crate::proto::body::{self, BodyQueue, Copied};
use crate::proto::h2::hpack::Fields;
use crate::proto::h2::Handler;
use crate::proto::h3::{
    self, frame, qpack, Budgets, Code, Event as H3Event, Flood, Priority, RequestReader,
};
use crate::serve::Response;

/// H3_NO_ERROR, for QUIC's application close.
pub const H3_NO_ERROR: u32 = Code::NoError as u32;
/// How long a drained connection waits, at least, for requests in flight
/// after its GOAWAY before it closes (`QConn::close_at`).
const QUIET: std::time::Duration = std::time::Duration::from_millis(20);
/// DATA frames carry at most this much body each.
const DATA_CHUNK: usize = 32 * 1024;
/// Bytes of one control-stream frame we buffer at most (SETTINGS and
/// GOAWAY are a few bytes).
const CONTROL_FRAME_MAX: usize = 4096;
/// PRIORITY_UPDATEs kept for requests that have not arrived yet (a frame
/// on the control stream may overtake its request, RFC 9218 §7.1).
const EARLY_UPDATES_MAX: usize = 100;

/// A client unidirectional stream.
struct Uni {
    id: StreamId,
    /// Its type, once read.
    kind: Option<u64>,
    buf: Vec<u8>,
    /// The control stream's SETTINGS came.
    settings: bool,
}

/// A request stream.
struct Req {
    id: StreamId,
    buf: Vec<u8>,
    reader: RequestReader,
    answered: bool,
    /// The client finished sending.
    recv_done: bool,
    /// Framed bytes being put together (the HEADERS, DATA frame heads,
    /// bodies copied), then sealed into `queued`.
    out: Vec<u8>,
    /// What the stream has not taken yet, in order: sealed `out`s, and
    /// arena bodies by reference.
    queued: VecDeque<Bytes>,
    body: BodyQueue,
    /// Its place in the send order (`level`).
    level: i32,
    /// The last PRIORITY_UPDATE for it, which outranks its `priority`
    /// field.
    update: Option<Priority>,
}

impl Req {
    /// Take `resp`: its HEADERS, then a small body framed straight behind
    /// them (the response is one piece for QUIC), or a larger one queued
    /// for the windows.
    fn respond(&mut self, resp: &Response<'_>, enc: &mut qpack::Encoder) {
        let small = body::copied(&resp.body);
        let len = small.map_or(0, |[a, b]| a.len() + b.len());
        enc.headers(resp, &mut self.out, len + 8);
        match small {
            Some([a, b]) if len > 0 => {
                frame::put_head(&mut self.out, frame::DATA, len);
                self.out.extend_from_slice(a);
                self.out.extend_from_slice(b);
            }
            Some(_) => {}
            None => self.body.set(&resp.body),
        }
        self.answered = true;
    }

    /// Bytes framed but not yet taken by the stream.
    fn pending(&self) -> usize {
        self.out.len() + self.queued.iter().map(Bytes::len).sum::<usize>()
    }

    /// What `out` holds joins the queue, moved, not copied.
    fn seal(&mut self) {
        if !self.out.is_empty() {
            self.queued
                .push_back(Bytes::from(std::mem::take(&mut self.out)));
        }
    }
}

/// A request's place in the send order, as quinn's stream priority
/// (higher first): lower urgency first; within one, non-incremental
/// responses one after another in request order (`seq`: the stream's
/// number), ahead of the incremental ones, which quinn sends round-robin.
fn level(p: Priority, seq: u64) -> i32 {
    const SPAN: i32 = 1 << 20;
    let base = i32::from(7 - p.urgency.min(7)) * SPAN;
    if p.incremental {
        base
    } else {
        base + SPAN - 1 - seq.min(SPAN as u64 - 2) as i32
    }
}

pub struct QConn {
    pub inner: Connection,
    /// The shard socket it arrived on.
    pub sock: usize,
    /// The deadline queued in the shard's timer heap.
    pub timer: Option<Instant>,
    established: bool,
    remote: SocketAddr,
    /// The site its SNI named.
    sni: Option<u32>,
    control: Option<StreamId>,
    control_out: Vec<u8>,
    uni: Vec<Uni>,
    reqs: Vec<Req>,
    /// The first request stream id not taken (GOAWAY's).
    next_request: u64,
    /// Responses handed to QUIC in full whose bytes the client has not
    /// all acknowledged yet: a drain closes only once there are none.
    unacked: Vec<StreamId>,
    goaway: bool,
    /// When our GOAWAY went out, or a request stream last opened after it:
    /// the drain closes once the client has been quiet a while
    /// ([`QUIET`]).
    quiet_since: Option<Instant>,
    closing: bool,
    fields: Fields,
    budgets: Budgets,
    /// PRIORITY_UPDATEs read, to apply; then those for requests not
    /// open yet.
    updates: Vec<(u64, Priority)>,
    /// Why it closed, counted when it is gone.
    lost: Option<ConnectionError>,
}

impl QConn {
    pub fn new(inner: Connection, sock: usize) -> QConn {
        let remote = inner.remote_address();
        QConn {
            inner,
            sock,
            timer: None,
            established: false,
            remote,
            sni: None,
            control: None,
            control_out: Vec::new(),
            uni: Vec::new(),
            reqs: Vec::new(),
            next_request: 0,
            unacked: Vec::new(),
            goaway: false,
            quiet_since: None,
            closing: false,
            fields: Fields::default(),
            budgets: Budgets::new(Instant::now()),
            updates: Vec::new(),
            lost: None,
        }
    }

    /// Close with an HTTP/3 error of the client's making.
    fn fail(&mut self, code: Code, env: &mut ShardEnv<'_>) {
        if !self.closing {
            self.closing = true;
            env.counters.quic.h3_errors += 1;
            self.inner.close(
                env.now,
                VarInt::from_u64(code as u64).expect("an H3 code"),
                Bytes::new(),
            );
        }
    }

    /// A request stream ended early: charged to the rapid reset budget;
    /// a spent budget is H3_EXCESSIVE_LOAD.
    fn charge_reset(&mut self, env: &mut ShardEnv<'_>) -> Result<(), Code> {
        if self.budgets.reset(env.now) {
            return Ok(());
        }
        env.counters.quic.defences[Flood::RapidReset as usize] += 1;
        Err(Code::ExcessiveLoad)
    }

    /// Everything HTTP/3 has to do after new input.
    pub(super) fn h3(
        &mut self,
        shared: &Shared,
        draining: bool,
        enc: &mut qpack::Encoder,
        env: &mut ShardEnv<'_>,
    ) {
        while let Some(ev) = self.inner.poll() {
            match ev {
                Event::HandshakeDataReady => self.sni = sni_site(&self.inner, env),
                Event::Connected => {
                    self.established = true;
                    env.counters.quic.connections += 1;
                    if let Some(id) = self.inner.streams().open(Dir::Uni) {
                        self.control = Some(id);
                        frame::control_preamble(
                            &mut self.control_out,
                            shared.max_field_section as u64,
                        );
                    }
                }
                Event::ConnectionLost { reason } => self.lost = Some(reason),
                Event::Stream(StreamEvent::Finished { id }) => {
                    self.unacked.retain(|&u| u != id);
                }
                Event::Stream(StreamEvent::Stopped { id, .. }) => {
                    self.unacked.retain(|&u| u != id);
                    // The stream's credit comes back once our half is
                    // reset too.
                    let code = VarInt::from_u32(Code::RequestCancelled as u32);
                    let _ = self.inner.send_stream(id).reset(code);
                }
                _ => {}
            }
        }
        if !self.established || self.lost.is_some() || self.closing {
            return;
        }
        if self.inner.remote_address() != self.remote {
            self.remote = self.inner.remote_address();
            env.counters.quic.migrations += 1;
        }
        while let Some(id) = self.inner.streams().accept(Dir::Uni) {
            self.uni.push(Uni {
                id,
                kind: None,
                buf: Vec::new(),
                settings: false,
            });
        }
        while let Some(id) = self.inner.streams().accept(Dir::Bi) {
            self.next_request = VarInt::from(id).into_inner() + 4;
            if self.goaway {
                self.quiet_since = Some(env.now);
                // Past our GOAWAY's id: never taken, retryable (§5.2).
                let code = VarInt::from_u32(Code::RequestRejected as u32);
                let _ = self.inner.recv_stream(id).stop(code);
                let _ = self.inner.send_stream(id).reset(code);
                continue;
            }
            self.reqs.push(Req {
                id,
                buf: Vec::new(),
                reader: RequestReader::default(),
                answered: false,
                recv_done: false,
                out: Vec::new(),
                queued: VecDeque::new(),
                body: BodyQueue::default(),
                level: 0,
                update: None,
            });
        }
        if let Err(code) = self.read_uni(env) {
            self.fail(code, env);
            return;
        }
        for (id, p) in std::mem::take(&mut self.updates) {
            if let Some(i) = self
                .reqs
                .iter()
                .position(|r| VarInt::from(r.id).into_inner() == id)
            {
                self.reqs[i].update = Some(p);
                if self.reqs[i].answered {
                    self.prioritise(i, p);
                }
            } else if id >= self.next_request && self.updates.len() < EARLY_UPDATES_MAX {
                // Its request has not come yet; one that came and went
                // has nothing left to reorder.
                self.updates.push((id, p));
            }
        }
        let max_section = shared.max_field_section;
        let mut streams = self.each_request(env, |c, i, env| c.request(i, max_section, enc, env));
        if streams.is_ok() {
            // Responses take the windows in priority order.
            self.reqs.sort_by_key(|r| std::cmp::Reverse(r.level));
            streams = self.each_request(env, |c, i, env| match c.reqs[i].answered {
                true => c.write(i, env),
                false => Ok(true),
            });
        }
        if let Err(code) = streams {
            self.fail(code, env);
            return;
        }
        if draining && !self.goaway {
            self.goaway = true;
            self.quiet_since = Some(env.now);
            frame::goaway(&mut self.control_out, self.next_request);
            env.counters.quic.goaways += 1;
        }
        if let Some(id) = self.control {
            if !self.control_out.is_empty() {
                if let Ok(n) = self.inner.send_stream(id).write(&self.control_out) {
                    self.control_out.drain(..n);
                }
            }
        }
        if self.goaway
            && self.reqs.is_empty()
            && self.unacked.is_empty()
            && self.control_out.is_empty()
            && self.close_at().is_some_and(|at| env.now >= at)
            && !self.closing
        {
            self.closing = true;
            self.inner
                .close(env.now, VarInt::from_u32(H3_NO_ERROR), Bytes::new());
        }
    }

    /// When a drained connection may close: once the client has opened no
    /// request for [`QUIET`] (at least two round trips) since our GOAWAY.
    /// A request it sent before it saw the GOAWAY then arrives while the
    /// connection is open and is refused (H3_REQUEST_REJECTED, retryable),
    /// instead of vanishing with the connection; a client that ignores
    /// GOAWAY has each new request refused until it stops.
    pub(super) fn close_at(&self) -> Option<Instant> {
        let since = self.quiet_since.filter(|_| !self.closing)?;
        Some(since + QUIET.max(self.inner.rtt() * 2))
    }

    /// Run `step` on each request stream in turn, dropping those it is
    /// done with (false); stop at a connection error.
    fn each_request(
        &mut self,
        env: &mut ShardEnv<'_>,
        mut step: impl FnMut(&mut Self, usize, &mut ShardEnv<'_>) -> Result<bool, Code>,
    ) -> Result<(), Code> {
        let mut i = 0;
        while i < self.reqs.len() {
            if step(self, i, env)? {
                i += 1;
            } else {
                self.reqs.remove(i);
            }
        }
        Ok(())
    }

    /// Read the client's unidirectional streams: the control stream's
    /// frames, the QPACK streams (with no dynamic table, only a capacity
    /// of 0 may come on the encoder stream; the decoder stream has nothing
    /// to tell), others refused.
    fn read_uni(&mut self, env: &mut ShardEnv<'_>) -> Result<(), Code> {
        let mut i = 0;
        while i < self.uni.len() {
            let id = self.uni[i].id;
            let finished = read_into(
                &mut self.inner,
                id,
                &mut self.uni[i].buf,
                CONTROL_FRAME_MAX * 2,
            )?;
            let u = &mut self.uni[i];
            if u.kind.is_none() {
                if let Some((kind, n)) = frame::varint(&u.buf) {
                    u.kind = Some(kind);
                    u.buf.drain(..n);
                    if kind == frame::CONTROL_STREAM
                        && self.uni[..i]
                            .iter()
                            .any(|o| o.kind == Some(frame::CONTROL_STREAM))
                    {
                        return Err(Code::StreamCreationError);
                    }
                }
            }
            let u = &mut self.uni[i];
            // Control frames after SETTINGS, QPACK instructions and
            // streams of unknown types draw from the control budget.
            let spent = match u.kind {
                Some(frame::CONTROL_STREAM) => control_frames(u, &mut self.updates)?,
                Some(frame::QPACK_ENCODER_STREAM) => {
                    let n = qpack::encoder_instructions(&u.buf)
                        .map_err(|_| Code::QpackEncoderStreamError)?;
                    u.buf.clear();
                    n
                }
                Some(frame::QPACK_DECODER_STREAM) => {
                    let (used, n) = qpack::decoder_instructions(&u.buf)
                        .map_err(|_| Code::QpackDecoderStreamError)?;
                    u.buf.drain(..used);
                    n
                }
                Some(frame::PUSH_STREAM) => return Err(Code::StreamCreationError),
                Some(_) => {
                    // An unknown type: ignored (§6.2), and not read.
                    let code = VarInt::from_u32(Code::StreamCreationError as u32);
                    let _ = self.inner.recv_stream(id).stop(code);
                    self.uni.swap_remove(i);
                    if !self.budgets.control(1, env.now) {
                        env.counters.quic.defences[Flood::Control as usize] += 1;
                        return Err(Code::ExcessiveLoad);
                    }
                    continue;
                }
                None => 0,
            };
            if !self.budgets.control(spent, env.now) {
                env.counters.quic.defences[Flood::Control as usize] += 1;
                return Err(Code::ExcessiveLoad);
            }
            if finished
                && self.uni[i]
                    .kind
                    .is_some_and(|k| k <= frame::QPACK_DECODER_STREAM)
            {
                return Err(Code::ClosedCriticalStream);
            }
            i += 1;
        }
        Ok(())
    }

    /// Read, answer and write request stream `i`: false once it is done
    /// (or gone).
    fn request(
        &mut self,
        i: usize,
        max_section: usize,
        enc: &mut qpack::Encoder,
        env: &mut ShardEnv<'_>,
    ) -> Result<bool, Code> {
        let id = self.reqs[i].id;
        if !self.reqs[i].answered {
            let r = &mut self.reqs[i];
            let finished = match read_into(&mut self.inner, id, &mut r.buf, max_section + 64) {
                Ok(f) => f,
                // Reset by the client before an answer: the request is
                // cancelled (§4.1.1), and so is the response.
                Err(_) => {
                    let code = VarInt::from_u32(Code::RequestCancelled as u32);
                    let _ = self.inner.send_stream(id).reset(code);
                    return self.charge_reset(env).map(|()| false);
                }
            };
            r.recv_done = finished;
            let (used, event) = r.reader.read(&r.buf, max_section).inspect_err(|&code| {
                if code == Code::ExcessiveLoad {
                    env.counters.quic.defences[Flood::BeforeHeaders as usize] += 1;
                }
            })?;
            match event {
                Some(H3Event::Headers(range)) => {
                    // Lent out while the answer borrows the connection.
                    let mut buf = std::mem::take(&mut r.buf);
                    let answered = self.answer(i, &buf[range], enc, env);
                    buf.drain(..used);
                    self.reqs[i].buf = buf;
                    if !answered? {
                        // Reset for a malformed request.
                        return self.charge_reset(env).map(|()| false);
                    }
                }
                Some(H3Event::TooLarge) => {
                    self.refuse(
                        i,
                        Status::HeaderFieldsTooLarge,
                        "Request Header Fields Too Large",
                        enc,
                        env,
                    );
                }
                None => {
                    r.buf.drain(..used);
                    if finished {
                        // The stream ended before its HEADERS (§4.1.2).
                        let code = VarInt::from_u32(Code::RequestIncomplete as u32);
                        let _ = self.inner.send_stream(id).reset(code);
                        return self.charge_reset(env).map(|()| false);
                    }
                    return Ok(true);
                }
            }
            let r = &mut self.reqs[i];
            if !r.recv_done {
                // Answered: the rest of the request (a body) is not read.
                let _ = self
                    .inner
                    .recv_stream(id)
                    .stop(VarInt::from_u32(H3_NO_ERROR));
            }
        }
        Ok(true)
    }

    /// Answer request stream `i`'s HEADERS `payload`: false when the stream
    /// was reset instead (a malformed request).
    fn answer(
        &mut self,
        i: usize,
        payload: &[u8],
        enc: &mut qpack::Encoder,
        env: &mut ShardEnv<'_>,
    ) -> Result<bool, Code> {
        let remote = self.remote;
        let r = &mut self.reqs[i];
        let max_list = env.cfg.h2.max_header_list;
        if qpack::decode(payload, max_list, &mut self.fields).is_err() {
            return Err(Code::QpackDecompressionFailed);
        }
        let (req, priority) = match h3::request_of(&self.fields) {
            Ok(built) => built,
            Err(_) => {
                // A malformed request is a stream error (§4.1.2).
                let code = VarInt::from_u32(Code::MessageError as u32);
                let _ = self.inner.send_stream(r.id).reset(code);
                let _ = self.inner.recv_stream(r.id).stop(code);
                return Ok(false);
            }
        };
        let mut answer = Answer::for_h3(env, remote, self.sni);
        let resp = if self.fields.too_large {
            answer.refuse(
                Status::HeaderFieldsTooLarge,
                "Request Header Fields Too Large",
            )
        } else {
            answer.respond(&req, &self.fields)
        };
        let priority = r.update.unwrap_or(priority);
        r.respond(&resp, enc);
        env.counters.quic.requests += 1;
        self.prioritise(i, priority);
        Ok(true)
    }

    /// Request stream `i`'s place in the send order.
    fn prioritise(&mut self, i: usize, p: Priority) {
        let r = &mut self.reqs[i];
        r.level = level(p, VarInt::from(r.id).into_inner() / 4);
        let _ = self.inner.send_stream(r.id).set_priority(r.level);
    }

    /// Answer request stream `i` with an error of ours, unread.
    fn refuse(
        &mut self,
        i: usize,
        status: Status,
        message: &'static str,
        enc: &mut qpack::Encoder,
        env: &mut ShardEnv<'_>,
    ) {
        let r = &mut self.reqs[i];
        let mut answer = Answer::for_h3(env, self.remote, self.sni);
        let resp = answer.refuse(status, message);
        r.respond(&resp, enc);
        env.counters.quic.requests += 1;
    }

    /// Write request stream `i`'s response as far as the windows allow:
    /// false once all of it is handed to QUIC (or the client stopped it).
    fn write(&mut self, i: usize, env: &mut ShardEnv<'_>) -> Result<bool, Code> {
        let r = &mut self.reqs[i];
        let mut stream = self.inner.send_stream(r.id);
        loop {
            // A DATA frame joins what is pending (the HEADERS, at first),
            // so a small response is handed to QUIC in one piece; a body
            // in the arena goes by reference, behind its frame head.
            if r.pending() < DATA_CHUNK && !r.body.is_empty() {
                let n = (r.body.front_len() as usize).min(DATA_CHUNK);
                frame::put_head(&mut r.out, frame::DATA, n);
                if let Some(shared) = r.body.share_front(n) {
                    r.seal();
                    r.queued.push_back(shared);
                } else {
                    match r.body.copy_front(n, &mut r.out) {
                        Ok(Copied::FromReplaced) => env.counters.downloads_from_replaced += 1,
                        Ok(Copied::Bytes) => {}
                        Err(_) => {
                            // The file changed in place: this stream only.
                            env.counters.downloads_cut_changed += 1;
                            let _ = stream.reset(VarInt::from_u32(Code::InternalError as u32));
                            return Ok(false);
                        }
                    }
                }
            }
            r.seal();
            if r.queued.is_empty() {
                if stream.finish().is_ok() {
                    self.unacked.push(r.id);
                }
                return Ok(false);
            }
            match stream.write_chunks(r.queued.make_contiguous()) {
                // A chunk taken in part is left holding the rest.
                Ok(written) => {
                    r.queued.drain(..written.chunks);
                    if !r.queued.is_empty() {
                        return Ok(true);
                    }
                }
                Err(WriteError::Blocked) => return Ok(true),
                // Stopped by the client before the answer was out.
                Err(WriteError::Stopped(code)) => {
                    let _ = stream.reset(code);
                    return self.charge_reset(env).map(|()| false);
                }
                Err(_) => return Ok(false),
            }
        }
    }

    /// The connection is gone: count how it ended.
    pub(super) fn closed(&self, env: &mut ShardEnv<'_>) {
        let q = &mut env.counters.quic;
        if !self.established {
            q.handshakes_failed += 1;
        }
        if matches!(self.lost, Some(ConnectionError::TimedOut)) {
            q.idle_timeouts += 1;
        }
        q.lost_packets += self.inner.stats().path.lost_packets;
    }
}

/// The client control stream's frames: SETTINGS first and once, then
/// GOAWAY, PRIORITY_UPDATE (collected in `updates`) and unknown frames;
/// anything else is unexpected. The frames after SETTINGS, for the control budget.
fn control_frames(u: &mut Uni, updates: &mut Vec<(u64, Priority)>) -> Result<u32, Code> {
    let mut frames = 0;
    loop {
        let Some((ty, len, n)) = frame::head(&u.buf) else {
            return Ok(frames);
        };
        if !u.settings && ty != frame::SETTINGS {
            return Err(Code::MissingSettings);
        }
        match ty {
            frame::SETTINGS if u.settings => return Err(Code::FrameUnexpected),
            frame::DATA | frame::HEADERS | frame::PUSH_PROMISE => {
                return Err(Code::FrameUnexpected)
            }
            t if frame::is_h2_only(t) => return Err(Code::FrameUnexpected),
            _ => {}
        }
        if len > CONTROL_FRAME_MAX as u64 {
            return Err(Code::ExcessiveLoad);
        }
        let end = n + len as usize;
        if u.buf.len() < end {
            return Ok(frames);
        }
        match ty {
            frame::SETTINGS => {
                u.settings = true;
                settings(&u.buf[n..end])?;
            }
            frame::PRIORITY_UPDATE_REQUEST => updates.push(h3::priority_update(&u.buf[n..end])?),
            // We promise no push streams.
            frame::PRIORITY_UPDATE_PUSH => return Err(Code::IdError),
            _ => {}
        }
        frames += u32::from(ty != frame::SETTINGS);
        u.buf.drain(..end);
    }
}

/// A SETTINGS payload: pairs of varints, each identifier once, none of
/// HTTP/2's (§7.2.4.1).
fn settings(mut p: &[u8]) -> Result<(), Code> {
    let mut seen = Vec::new();
    while !p.is_empty() {
        let (id, a) = frame::varint(p).ok_or(Code::FrameError)?;
        let (_, b) = frame::varint(&p[a..]).ok_or(Code::FrameError)?;
        if matches!(id, 0x2..=0x5) || seen.contains(&id) {
            return Err(Code::SettingsError);
        }
        seen.push(id);
        p = &p[a + b..];
    }
    Ok(())
}

/// Append what stream `id` has (up to `max` buffered bytes): whether it
/// has finished. `Err` when it was reset.
fn read_into(
    conn: &mut Connection,
    id: StreamId,
    buf: &mut Vec<u8>,
    max: usize,
) -> Result<bool, Code> {
    let mut stream = conn.recv_stream(id);
    let mut chunks = match stream.read(true) {
        Ok(c) => c,
        Err(ReadableError::ClosedStream) => return Ok(true),
        Err(ReadableError::IllegalOrderedRead) => return Err(Code::InternalError),
    };
    let res = loop {
        if buf.len() >= max {
            break Ok(false);
        }
        match chunks.next(max - buf.len()) {
            Ok(Some(chunk)) => buf.extend_from_slice(&chunk.bytes),
            Ok(None) => break Ok(true),
            Err(ReadError::Blocked) => break Ok(false),
            Err(ReadError::Reset(_)) => break Err(Code::RequestCancelled),
        }
    };
    let _ = chunks.finalize();
    res
}

/// The site the handshake's SNI names, on a server with sites.
fn sni_site(conn: &Connection, env: &ShardEnv<'_>) -> Option<u32> {
    if env.sites.single() {
        return None;
    }
    let data = conn.crypto_session().handshake_data()?;
    let data = data
        .downcast::<quinn_proto::crypto::rustls::HandshakeData>()
        .ok()?;
    env.sites.by_sni(data.server_name.as_deref()?)
}
