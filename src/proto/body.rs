//! A response body waiting for flow control: pieces of the snapshot (arena
//! ranges, large files read by the verified copy) or owned bytes, taken
//! from a [`Payload`] and handed out a piece at a time. HTTP/2 streams and
//! HTTP/3 request streams hold one each.

use std::collections::VecDeque;
use std::fs::File;
use std::sync::Arc;

use bytes::Bytes;

use crate::cache::{Body, Snapshot, Witness};
use crate::io::output::{read_verified, Output, COPY_MAX};
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

#[derive(Debug)]
enum Src {
    /// The next `len` bytes of the queue's `own`.
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

/// A range of a snapshot's arena, which the snapshot keeps mapped for as
/// long as this holds it.
struct Arena {
    snapshot: Arc<Snapshot>,
    off: usize,
    len: usize,
}

impl AsRef<[u8]> for Arena {
    fn as_ref(&self) -> &[u8] {
        self.snapshot.mem(self.off, self.len)
    }
}

/// What [`BodyQueue::copy_front`] moved.
#[derive(Debug, PartialEq, Eq)]
pub enum Copied {
    Bytes,
    /// The last bytes of a large file whose name was renamed over or
    /// unlinked meanwhile (link count 0): a download finished whole from
    /// the inode it started on.
    FromReplaced,
}

/// A large file's bytes are no longer the snapshot's version (changed in
/// place), or could not be read: the response cannot go on.
#[derive(Debug, PartialEq, Eq)]
pub struct Changed;

/// The body still to send, in order.
#[derive(Default)]
pub struct BodyQueue {
    src: VecDeque<Src>,
    own: Vec<u8>,
    own_at: usize,
    /// The snapshot whose arena `Src::Mem` pieces are in.
    pin: Option<Arc<Snapshot>>,
}

impl std::fmt::Debug for BodyQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(&self.src).finish()
    }
}

impl BodyQueue {
    pub fn is_empty(&self) -> bool {
        self.src.is_empty()
    }

    /// Bytes of the front piece (what one copy may move at most).
    pub fn front_len(&self) -> u64 {
        self.src.front().map_or(0, Src::len)
    }

    /// Whether the front piece is the last.
    pub fn front_is_last(&self) -> bool {
        self.src.len() == 1
    }

    /// Take a response's body.
    pub fn set(&mut self, body: &Payload<'_>) {
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
        match self.src.back_mut() {
            Some(Src::Own(len)) => *len += b.len(),
            _ => self.src.push_back(Src::Own(b.len())),
        }
    }

    /// `len` bytes of a snapshot body from `start`: the arena range (the
    /// queue pins its snapshot), or the large file from the fd the
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
        self.src.push_back(match body {
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

    /// Forget the body (the stream was reset, or it is all sent).
    pub fn clear(&mut self) {
        self.src.clear();
        self.own = Vec::new();
        self.own_at = 0;
        self.pin = None;
    }

    /// Queue `n` bytes of an arena front piece into `out` by reference,
    /// when the pinned snapshot is still served and `out` pins no other;
    /// false (nothing done) otherwise.
    pub fn push_front_ref(&mut self, n: usize, out: &mut Output) -> bool {
        let Some((snap, off)) = self.front_mem() else {
            return false;
        };
        if snap.retired() || !out.push_mem(snap, off, n) {
            return false;
        }
        self.advance_mem(n);
        true
    }

    /// `n` bytes of an arena front piece as `Bytes` that keep the snapshot
    /// alive, for a transport that queues what it is given (QUIC's send
    /// buffer) rather than copying it; None, with nothing taken, when the
    /// front piece is not in the arena.
    pub fn share_front(&mut self, n: usize) -> Option<Bytes> {
        let (snap, off) = self.front_mem()?;
        let shared = Bytes::from_owner(Arena {
            snapshot: Arc::clone(snap),
            off,
            len: n,
        });
        self.advance_mem(n);
        Some(shared)
    }

    /// The pinned snapshot and the offset of an arena front piece.
    fn front_mem(&self) -> Option<(&Arc<Snapshot>, usize)> {
        match (self.src.front(), self.pin.as_ref()) {
            (Some(Src::Mem { off, .. }), Some(snap)) => Some((snap, *off)),
            _ => None,
        }
    }

    /// Past `n` bytes of the arena front piece.
    fn advance_mem(&mut self, n: usize) {
        if let Some(Src::Mem { off, len }) = self.src.front_mut() {
            *off += n;
            *len -= n;
            if *len == 0 {
                self.src.pop_front();
            }
        }
    }

    /// Move `n` bytes (at most [`BodyQueue::front_len`]) of the front
    /// piece into `out`. `Err` when a large file is no longer the
    /// snapshot's version (or cannot be read).
    pub fn copy_front(&mut self, n: usize, out: &mut Vec<u8>) -> Result<Copied, Changed> {
        let Some(src) = self.src.front_mut() else {
            return Ok(Copied::Bytes);
        };
        let mut copied = Copied::Bytes;
        match src {
            Src::Cut => return Err(Changed),
            Src::Own(len) => {
                out.extend_from_slice(&self.own[self.own_at..self.own_at + n]);
                self.own_at += n;
                *len -= n;
            }
            Src::Mem { off, len } => {
                let snap = self.pin.as_ref().ok_or(Changed)?;
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
                // The output queue's verified copy, as for HTTP/1: read
                // from the fd the response started on (a rename or unlink
                // of the file cannot cut it), kept only if its bytes did
                // not change in place. Checked before the frame goes out,
                // so a change resets this stream rather than the
                // connection.
                let at = out.len();
                out.resize(at + n, 0);
                let unlinked =
                    read_verified(file, witness, *off, &mut out[at..]).map_err(|_| Changed)?;
                *off += n as u64;
                *len -= n as u64;
                if *len == 0 && unlinked {
                    copied = Copied::FromReplaced;
                }
            }
        }
        if src.len() == 0 {
            self.src.pop_front();
        }
        Ok(copied)
    }
}
