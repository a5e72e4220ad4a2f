//! Streams: their states (RFC 9113 §5.1), their response bodies, and the
//! DATA scheduler. A response's head is framed at once (HEADERS are not
//! flow-controlled); its body waits here, as pieces of the snapshot (arena
//! ranges, large files sent by the verified copy) or owned bytes, until
//! the windows let it out. Among streams with data, the lowest RFC 9218
//! urgency goes first; within one urgency, non-incremental streams go one
//! at a time in stream order, incremental ones round-robin by frame.

use std::time::Instant;

use super::frame::{self, ErrorCode};
use super::{H2Counters, H2, ROUND_BYTES};
use crate::io::output::{Output, HIGH_WATER};
use crate::proto::body::{BodyQueue, Copied};
use crate::serve::Payload;

/// RFC 9218 §4.1: the default urgency.
pub const DEFAULT_URGENCY: u8 = 3;

pub struct Stream {
    pub id: u32,
    /// The client's END_STREAM came (half-closed remote).
    pub recv_closed: bool,
    /// Our END_STREAM went out (half-closed local).
    pub send_closed: bool,
    pub send_window: i64,
    /// What the client may still send on this stream, and what it sent
    /// that we have not yet given back.
    pub recv_window: i64,
    pub recv_unacked: i64,
    /// Declared `content-length` of the request body, and DATA so far.
    pub content_length: Option<u64>,
    pub received: u64,
    pub urgency: u8,
    pub incremental: bool,
    /// Response body still to send.
    body: BodyQueue,
}

impl Stream {
    pub fn new(id: u32, send_window: i64) -> Stream {
        Stream {
            id,
            recv_closed: false,
            send_closed: false,
            send_window,
            recv_window: frame::DEFAULT_WINDOW,
            recv_unacked: 0,
            content_length: None,
            received: 0,
            urgency: DEFAULT_URGENCY,
            incremental: false,
            body: BodyQueue::default(),
        }
    }

    /// Both sides closed: the stream can go.
    pub fn done(&self) -> bool {
        self.recv_closed && self.send_closed
    }

    pub fn body_is_empty(&self) -> bool {
        self.body.is_empty()
    }

    fn has_body(&self) -> bool {
        !self.body.is_empty()
    }

    /// Take a response's body.
    pub fn set_body(&mut self, body: &Payload<'_>) {
        self.body.set(body);
    }

    /// Forget the response (the stream was reset).
    pub fn drop_body(&mut self) {
        self.body.clear();
    }
}

impl std::fmt::Debug for Stream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stream")
            .field("id", &self.id)
            .field("recv_closed", &self.recv_closed)
            .field("send_closed", &self.send_closed)
            .field("send_window", &self.send_window)
            .field("body", &self.body)
            .finish()
    }
}

/// The open and half-closed streams, in id order (ids only grow).
#[derive(Debug, Default)]
pub struct Streams {
    list: Vec<Stream>,
    /// Round-robin position among incremental streams (a stream id).
    cursor: u32,
}

impl Streams {
    pub fn len(&self) -> usize {
        self.list.len()
    }

    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    pub fn get(&mut self, id: u32) -> Option<&mut Stream> {
        self.list
            .binary_search_by_key(&id, |s| s.id)
            .ok()
            .map(|i| &mut self.list[i])
    }

    pub fn insert(&mut self, s: Stream) {
        debug_assert!(self.list.last().is_none_or(|l| l.id < s.id));
        self.list.push(s);
    }

    pub fn remove(&mut self, id: u32) -> Option<Stream> {
        let i = self.list.binary_search_by_key(&id, |s| s.id).ok()?;
        Some(self.list.remove(i))
    }

    pub fn iter_mut(&mut self) -> impl Iterator<Item = &mut Stream> {
        self.list.iter_mut()
    }

    /// The stream that sends next: lowest urgency with data and window;
    /// within it, the first non-incremental, else the incremental one
    /// after the cursor.
    fn pick(&mut self) -> Option<usize> {
        let mut best: Option<(u8, bool, usize)> = None;
        let mut next_rr: Option<usize> = None;
        let mut first_rr: Option<usize> = None;
        let mut urgency = u8::MAX;
        for (i, s) in self.list.iter().enumerate() {
            if !s.has_body() || s.send_window <= 0 {
                continue;
            }
            if s.urgency < urgency {
                urgency = s.urgency;
                best = None;
                next_rr = None;
                first_rr = None;
            }
            if s.urgency > urgency {
                continue;
            }
            if !s.incremental {
                if best.is_none_or(|b| b.1) {
                    best = Some((s.urgency, false, i));
                }
            } else {
                if first_rr.is_none() {
                    first_rr = Some(i);
                }
                if next_rr.is_none() && s.id > self.cursor {
                    next_rr = Some(i);
                }
            }
        }
        if let Some((_, _, i)) = best {
            return Some(i);
        }
        let i = next_rr.or(first_rr)?;
        self.cursor = self.list[i].id;
        Some(i)
    }
}

/// Why sending stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sent {
    /// Every body is out, or waits for a window.
    Idle,
    /// The round's budget is spent with data still sendable.
    More,
}

impl H2 {
    /// Queue DATA frames into `out` under the windows, at most about
    /// `ROUND_BYTES` per call. Payloads of at least `REF_MIN` bytes
    /// from the arena of a snapshot still being served go by reference
    /// (see `put_front`). Streams whose large file changed on disk are
    /// reset (their bytes could not be one version).
    pub fn send(&mut self, out: &mut Output, counters: &mut H2Counters, now: Instant) -> Sent {
        let mut queued = 0;
        let max_frame = self.peer_max_frame.min(frame::DEFAULT_MAX_FRAME as usize);
        let res = loop {
            if self.send_window <= 0 {
                break Sent::Idle;
            }
            // The connection's bound on owned output (frames copied from
            // files or old snapshots) applies across calls: a client that
            // stops reading holds at most that much, plus one frame. The
            // same bound makes the output backlogged (`Output::is_full`),
            // so the connection waits for the socket instead of calling
            // again.
            if queued >= ROUND_BYTES || out.pending_owned() >= HIGH_WATER {
                break Sent::More;
            }
            let Some(i) = self.streams.pick() else {
                break Sent::Idle;
            };
            let s = &mut self.streams.list[i];
            let front = s.body.front_len();
            let n = (front as i64)
                .min(s.send_window)
                .min(self.send_window)
                .min(max_frame as i64) as usize;
            let last = s.body.front_is_last() && n as u64 == front;
            let flags = if last { frame::FLAG_END_STREAM } else { 0 };
            let mark = out.buf().len();
            frame::write_head(out.buf(), n, frame::DATA, flags, s.id);
            if let Err(()) = put_front(s, n, out) {
                out.buf().truncate(mark);
                let id = s.id;
                self.reset_stream(out.buf(), id, ErrorCode::Internal, counters);
                continue;
            }
            queued += frame::HEAD_LEN + n;
            s.send_window -= n as i64;
            self.send_window -= n as i64;
            if last {
                s.send_closed = true;
                s.drop_body();
                if s.done() {
                    let id = s.id;
                    self.streams.remove(id);
                }
            }
        };
        let blocked = self.streams.list.iter().any(Stream::has_body);
        if blocked && res == Sent::Idle {
            if self.stalled_since.is_none() {
                counters.flow_stalls += 1;
                self.stalled_since = Some(now);
            }
        } else {
            self.stalled_since = None;
        }
        res
    }
}

/// DATA payloads from the arena shorter than this are copied into the
/// owned buffer after their frame header; longer ones are queued by
/// reference. A reference costs two queue entries (the owned bytes before
/// it, then the arena range) and an iovec per write; a copy of up to
/// ~1 KiB costs less than that bookkeeping.
pub const REF_MIN: usize = 1024;

/// Queue `n` bytes of the stream's front piece into `out`, after the
/// frame header just written. Arena bytes go by reference when the
/// stream's snapshot is still served and `out` pins no other (another
/// site's): after a reload, a stream still answering from the old snapshot
/// copies, so the output never pins a replaced one (and never holds the
/// connection back from new requests, see `Output::is_backlogged`). `Err`
/// when a large file is no longer the snapshot's version (or cannot be
/// read).
fn put_front(s: &mut Stream, n: usize, out: &mut Output) -> Result<(), ()> {
    if n >= REF_MIN && s.body.push_front_ref(n, out) {
        return Ok(());
    }
    if s.body.copy_front(n, out.buf()).map_err(|_| ())? == Copied::FromReplaced {
        // Counted by the connection as HTTP/1's are (`Conn::drive`).
        out.from_replaced += 1;
    }
    Ok(())
}
