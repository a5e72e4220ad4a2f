//! Streams: their states (RFC 9113 §5.1), their response bodies, and the
//! DATA scheduler. A response's head is framed at once (HEADERS are not
//! flow-controlled); its body waits here, as pieces of the snapshot (arena
//! ranges, large files sent by the verified copy) or owned bytes, until
//! the windows let it out. Among streams with data, the lowest RFC 9218
//! urgency goes first; within one urgency, non-incremental streams go one
//! at a time in stream order, incremental ones round-robin by frame.

use std::collections::VecDeque;
use std::fs::File;
use std::sync::Arc;
use std::time::Instant;

use super::frame::{self, ErrorCode};
use super::{H2Counters, H2, ROUND_BYTES};
use crate::cache::{Body, Snapshot, Witness};
use crate::io::output::{read_verified, Output, COPY_MAX, HIGH_WATER};
use crate::serve::{Part, Payload};

/// A body small enough to copy rather than reference (as HTTP/1 copies it
/// into its output): its bytes, in two slices.
pub fn copied<'r>(body: &'r Payload<'_>) -> Option<[&'r [u8]; 2]> {
    match body {
        Payload::Message(m) => Some([m.as_bytes(), b"\n"]),
        Payload::Bytes(b) => Some([b, b""]),
        Payload::Snapshot(s) => match s.body {
            Body::Mem { off } if s.len as usize <= COPY_MAX => {
                Some([s.snapshot.mem(off + s.start as usize, s.len as usize), b""])
            }
            _ => None,
        },
        _ => None,
    }
}

/// RFC 9218 §4.1: the default urgency.
pub const DEFAULT_URGENCY: u8 = 3;

#[derive(Debug)]
enum Src {
    /// The next `len` bytes of the stream's `own`.
    Own(usize),
    Mem {
        off: usize,
        len: usize,
    },
    /// A large file's bytes, from the fd the response started on.
    File {
        file: Arc<File>,
        witness: Witness,
        off: u64,
        len: u64,
    },
    /// The large file could not be opened as the snapshot's version.
    Cut,
}

impl Src {
    fn len(&self) -> u64 {
        match *self {
            Src::Own(len) => len as u64,
            Src::Mem { len, .. } => len as u64,
            Src::File { len, .. } => len,
            Src::Cut => 1,
        }
    }
}

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
    body: VecDeque<Src>,
    own: Vec<u8>,
    own_at: usize,
    pin: Option<Arc<Snapshot>>,
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
            body: VecDeque::new(),
            own: Vec::new(),
            own_at: 0,
            pin: None,
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
        if let Some(parts) = copied(body) {
            self.push_own(parts[0]);
            self.push_own(parts[1]);
            return;
        }
        match body {
            Payload::Snapshot(s) => {
                self.push_slice(s.snapshot, s.body, s.start, s.len, s.file.as_ref())
            }
            Payload::Multipart(m) => m.for_each_part(|part| match part {
                Part::Bytes(b) => self.push_own(b),
                Part::Range { start, len } => {
                    self.push_slice(m.snapshot, m.body, start, len, m.file.as_ref());
                }
            }),
            _ => {}
        }
    }

    fn push_own(&mut self, b: &[u8]) {
        if b.is_empty() {
            return;
        }
        self.own.extend_from_slice(b);
        match self.body.back_mut() {
            Some(Src::Own(len)) => *len += b.len(),
            _ => self.body.push_back(Src::Own(b.len())),
        }
    }

    /// `len` bytes of a snapshot body from `start`: the arena range (the
    /// stream pins its snapshot), or the large file from the fd the
    /// response took.
    fn push_slice(
        &mut self,
        snapshot: &Arc<Snapshot>,
        body: &Body,
        start: u64,
        len: u64,
        opened: Option<&Arc<File>>,
    ) {
        if len == 0 {
            return;
        }
        self.body.push_back(match body {
            Body::Mem { off } => {
                self.pin = Some(Arc::clone(snapshot));
                Src::Mem {
                    off: off + start as usize,
                    len: len as usize,
                }
            }
            Body::File(large) => match opened.map_or_else(|| large.file(), |f| Ok(Arc::clone(f))) {
                Ok(file) => Src::File {
                    file,
                    witness: large.stamp.witness(),
                    off: start,
                    len,
                },
                Err(_) => Src::Cut,
            },
        });
    }

    /// Forget the response (the stream was reset).
    pub fn drop_body(&mut self) {
        self.body.clear();
        self.own = Vec::new();
        self.own_at = 0;
        self.pin = None;
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
            let front = s.body.front().map_or(0, Src::len);
            let n = (front as i64)
                .min(s.send_window)
                .min(self.send_window)
                .min(max_frame as i64) as usize;
            let last = s.body.len() == 1 && n as u64 == front;
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
    if let (Some(Src::Mem { off, len }), Some(snap)) = (s.body.front_mut(), s.pin.as_ref()) {
        if n >= REF_MIN && !snap.retired() && out.push_mem(snap, *off, n) {
            *off += n;
            *len -= n;
            if *len == 0 {
                s.body.pop_front();
            }
            return Ok(());
        }
    }
    if copy_front(s, n, out.buf())? == Copied::FromReplaced {
        // Counted by the connection as HTTP/1's are (`Conn::drive`).
        out.from_replaced += 1;
    }
    Ok(())
}

/// What [`copy_front`] moved.
#[derive(Debug, PartialEq, Eq)]
enum Copied {
    Bytes,
    /// The last bytes of a large file whose name was renamed over or
    /// unlinked meanwhile (link count 0): a download finished whole from
    /// the inode it started on.
    FromReplaced,
}

/// Move `n` bytes of the stream's front piece into `out`. `Err` when a
/// large file is no longer the snapshot's version (or cannot be read).
fn copy_front(s: &mut Stream, n: usize, out: &mut Vec<u8>) -> Result<Copied, ()> {
    let Some(src) = s.body.front_mut() else {
        return Ok(Copied::Bytes);
    };
    let mut copied = Copied::Bytes;
    match src {
        Src::Cut => return Err(()),
        Src::Own(len) => {
            out.extend_from_slice(&s.own[s.own_at..s.own_at + n]);
            s.own_at += n;
            *len -= n;
        }
        Src::Mem { off, len } => {
            let snap = s.pin.as_ref().ok_or(())?;
            out.extend_from_slice(snap.mem(*off, n));
            *off += n;
            *len -= n;
        }
        Src::File {
            file,
            witness,
            off,
            len,
        } => {
            // The output queue's verified copy, as for HTTP/1: read from
            // the fd the response started on (a rename or unlink of the
            // file cannot cut it), kept only if its bytes did not change in
            // place. Checked before the frame goes out, so a change resets
            // this stream rather than the connection.
            let at = out.len();
            out.resize(at + n, 0);
            let unlinked = read_verified(file, witness, *off, &mut out[at..]).map_err(|_| ())?;
            *off += n as u64;
            *len -= n as u64;
            if *len == 0 && unlinked {
                copied = Copied::FromReplaced;
            }
        }
    }
    if src.len() == 0 {
        s.body.pop_front();
    }
    Ok(copied)
}
