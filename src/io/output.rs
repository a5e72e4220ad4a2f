//! A connection's queue of response bytes, written with one `write` (one
//! `writev` once large bodies are referenced, `sendfile` for bodies served
//! from their file) per readiness event.
//!
//! Heads and small bodies are copied into one owned buffer, so a batch of
//! pipelined responses leaves in one syscall. Large bodies are referenced
//! in place, from the snapshot's arena or its file, and the snapshot they
//! belong to is pinned until they are sent.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{self, IoSlice};
use std::net::TcpStream;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::sync::Arc;

use crate::cache::{Body, Snapshot, Witness};
use crate::sys::{self, SendId};

/// Bodies up to this size are copied into the output buffer: a copy of a few
/// KiB is cheaper than an extra iovec and pinning the snapshot.
pub const COPY_MAX: usize = 16 * 1024;

/// Owned output a connection may hold unsent beyond what its socket took:
/// at this much, HTTP/1 stops answering pipelined requests and HTTP/2
/// stops reading frames and queuing DATA until the client reads. Bodies
/// queued by reference to the snapshot do not count (the snapshot holds
/// them anyway). A client that stops reading so costs about as much as
/// nginx's `output_buffers` (2 × 32 KiB), not what it asked for.
pub const HIGH_WATER: usize = 64 * 1024;

/// Written bytes at the front of the owned buffer that a partial write
/// drops (see `Output::compact`).
const COMPACT_AT: usize = 32 * 1024;

/// Most iovecs gathered into one `writev`.
const MAX_IOVECS: usize = 64;

/// Most bytes handed to one `sendfile` call.
const SENDFILE_CHUNK: usize = 256 * 1024;

/// Most writes (each at most [`SENDFILE_CHUNK`], [`COPY_CHUNK`] or one
/// `writev`) per flush, so a fast reader of a large body cannot keep the
/// shard from its other connections.
const MAX_WRITES_PER_FLUSH: usize = 8;

/// Piece size of the verified copy of large files: big enough to amortise
/// the `pread` + `fstat` per piece, small enough not to matter per
/// connection (a reader that stops holds one piece staged; over TLS also
/// up to `tls::SEND_BUFFER` of its records).
pub const COPY_CHUNK: usize = 32 * 1024;

/// Stop answering pipelined requests while this many large-file bodies
/// are queued. Each holds its file's fd (shared with the open-file cache
/// while cached there, its own once evicted), so this bounds what one
/// connection can keep open beyond `max_open_files`; the socket is busy
/// with the first body anyway.
const MAX_QUEUED_FILES: usize = 4;

/// A piece of the queue that is not in the owned buffer's tail.
#[derive(Debug)]
enum Chunk {
    /// Owned bytes up to this offset of `buf`.
    Own { end: usize },
    /// Bytes in the pinned snapshot's arena.
    Mem { off: usize, len: usize },
    /// `len` bytes from `off` of a large file, read from the fd the
    /// response started on (never reopened by path: a rename, unlink or
    /// chmod of the file cannot cut it), checked against `witness`.
    File {
        file: Arc<File>,
        witness: Witness,
        off: u64,
        len: u64,
    },
    /// A large body whose file could not be opened as the snapshot's
    /// version when it was queued: the connection closes here, after what
    /// is queued before it.
    Cut { changed: bool },
}

/// How far a [`Output::flush`] got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flush {
    /// Everything queued is with the kernel.
    Done,
    /// The socket is full: wait for EPOLLOUT.
    Blocked,
    /// The socket would take more, but this connection has had its share of
    /// the shard for now: resume on the next loop turn.
    Yielded,
}

/// Why the queue cannot continue.
#[derive(Debug)]
pub enum WriteError {
    Io(io::Error),
    /// A large file's bytes changed (size or mtime) since its response
    /// started: the bytes sent so far cannot be completed into one version.
    FileChanged,
}

impl From<io::Error> for WriteError {
    fn from(e: io::Error) -> Self {
        // A large file reopened on demand that is no longer the snapshot's
        // version is a changed file, not an I/O failure.
        if e.get_ref()
            .is_some_and(|inner| inner.is::<crate::cache::open_files::Changed>())
        {
            return WriteError::FileChanged;
        }
        WriteError::Io(e)
    }
}

/// One piece of the queue, as [`Output::for_each_piece`] lists them for
/// the tests that look at what would be written.
#[cfg(test)]
#[derive(Debug, Clone, Copy)]
pub enum Piece<'a> {
    Bytes(&'a [u8]),
    /// Bytes in the pinned snapshot's arena.
    Mem {
        off: usize,
        len: usize,
    },
    /// Bytes of a large file: the fd the response started on, and what it
    /// is checked against around every read (as [`Output::flush`] does).
    File {
        file: &'a Arc<File>,
        witness: Witness,
        off: u64,
        len: u64,
    },
    /// The large file could not be opened as the snapshot's version: the
    /// response ends here, incomplete.
    Cut,
}

/// Where the queue's bytes go: the socket itself (cleartext), or a TLS
/// session that encrypts them (`conn::tls`). Generic, so the cleartext
/// path compiles to the same direct calls as before the seam existed.
pub trait Sink {
    /// Gathered write. `more`: a file body follows (`MSG_MORE`).
    fn write_vectored(&mut self, iov: &[IoSlice<'_>], more: bool) -> io::Result<usize>;
    fn write(&mut self, buf: &[u8]) -> io::Result<usize>;
    /// Zero-copy send of `count` bytes of `file` from `*off`.
    fn sendfile(&mut self, file: &File, off: &mut u64, count: usize) -> io::Result<usize>;
}

impl Sink for &TcpStream {
    #[inline]
    fn write_vectored(&mut self, iov: &[IoSlice<'_>], more: bool) -> io::Result<usize> {
        if more {
            sys::sendmsg_more(*self, iov)
        } else {
            sys::writev(*self, iov)
        }
    }

    #[inline]
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        sys::write(*self, buf)
    }

    #[inline]
    fn sendfile(&mut self, file: &File, off: &mut u64, count: usize) -> io::Result<usize> {
        sys::sendfile(*self, file, off, count)
    }
}

#[derive(Default)]
pub struct Output {
    buf: Vec<u8>,
    /// Bytes of `buf` already written.
    sent: usize,
    /// Pieces before the owned tail `buf[last Own end..]`, in order.
    chunks: VecDeque<Chunk>,
    /// The snapshot that `Mem` and `File` chunks point into.
    pin: Option<Arc<Snapshot>>,
    /// A response from another snapshot waits until `pin` is let go.
    pin_wait: bool,
    /// Send large files with `sendfile` instead of a verified copy.
    zero_copy: bool,
    /// Verified bytes of the front file chunk not yet written (copy mode).
    stage: Vec<u8>,
    staged: usize,
    /// `File` chunks queued (see [`MAX_QUEUED_FILES`]).
    files: usize,
    /// [`reached_bound`](Self::reached_bound) said so since the queue was
    /// last empty.
    bound_seen: bool,
    /// Large-file bodies sent in full whose file had no name left when
    /// they ended (link count 0: renamed over or unlinked meanwhile), for
    /// the connection to count and reset.
    pub from_replaced: u32,
    /// The id of the ring send its owned bytes are lent to (io_uring
    /// completions): nothing is written until they come back
    /// ([`give_back`](Self::give_back)); answers queued meanwhile go to a
    /// new buffer, after them.
    lent: Option<SendId>,
    /// Bytes of that send: owned and unsent until it comes back, so they
    /// count toward [`HIGH_WATER`] beside what is queued meanwhile.
    lent_len: usize,
}

impl std::fmt::Debug for Output {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Output")
            .field("pending", &self.pending_owned())
            .field("chunks", &self.chunks.len())
            .field("pinned", &self.pin.as_ref().map(|s| s.generation))
            .finish()
    }
}

impl Output {
    /// Set when a pooled queue is given to a connection (TLS connections
    /// never use `sendfile`).
    pub fn set_zero_copy(&mut self, zero_copy: bool) {
        self.zero_copy = zero_copy;
    }

    pub fn is_empty(&self) -> bool {
        self.chunks.is_empty()
            && self.sent == self.buf.len()
            && self.staged == self.stage.len()
            && self.lent.is_none()
    }

    /// Everything queued is owned bytes (no body by reference, no file
    /// piece staged) and none is lent: the queue can be lent to a ring
    /// send as one slice.
    pub fn lendable(&self) -> bool {
        self.lent.is_none()
            && self.chunks.is_empty()
            && self.staged == self.stage.len()
            && self.sent < self.buf.len()
    }

    /// Lend the unsent owned bytes (see [`lendable`](Self::lendable)) to
    /// ring send `id`; `spare` takes the buffer's place for answers queued
    /// meanwhile.
    pub fn lend(&mut self, spare: Vec<u8>) -> (Vec<u8>, usize) {
        debug_assert!(self.lendable() && spare.is_empty());
        let buf = std::mem::replace(&mut self.buf, spare);
        let start = std::mem::take(&mut self.sent);
        self.lent_len = buf.len() - start;
        (buf, start)
    }

    /// The send the owned bytes are lent to, once it has an id.
    pub fn set_lent(&mut self, id: SendId) {
        self.lent = Some(id);
    }

    /// The ring send the queue's bytes are lent to.
    pub fn lent(&self) -> Option<SendId> {
        self.lent
    }

    /// A ring send ended: `buf[start..end]` was lent, `start + sent` is
    /// where the kernel stopped. What it did not take goes back in front
    /// of anything queued since. Returns a spare buffer, for the pool.
    pub fn give_back(&mut self, mut buf: Vec<u8>, start: usize, sent: usize) -> Vec<u8> {
        self.lent = None;
        self.lent_len = 0;
        let done = (start + sent).min(buf.len());
        if done == buf.len() {
            buf.clear();
            if self.is_empty() && self.buf.capacity() < buf.capacity() {
                std::mem::swap(&mut self.buf, &mut buf);
                self.sent = 0;
            }
            return buf;
        }
        if self.is_empty() {
            // Nothing queued meanwhile: the lent buffer is the queue again.
            let mut spare = std::mem::replace(&mut self.buf, buf);
            self.sent = done;
            spare.clear();
            return spare;
        }
        // A short send with answers queued behind it (rare): the rest goes
        // first, and every owned piece's end moves with it.
        debug_assert_eq!(self.sent, 0, "nothing is written while lent");
        let rest = buf.len() - done;
        self.buf.splice(..0, buf.drain(done..));
        for chunk in &mut self.chunks {
            if let Chunk::Own { end } = chunk {
                *end += rest;
            }
        }
        if !matches!(self.chunks.front(), None | Some(Chunk::Own { .. })) {
            // A body by reference was first: the rest goes before it.
            self.chunks.push_front(Chunk::Own { end: rest });
        }
        buf.clear();
        buf
    }

    /// Owned bytes not yet written (those lent to a ring send included);
    /// a rough measure of backlog.
    pub fn pending_owned(&self) -> usize {
        self.buf.len() - self.sent + self.lent_len
    }

    /// The owned buffer, to append heads and small bodies to.
    pub fn buf(&mut self) -> &mut Vec<u8> {
        &mut self.buf
    }

    /// Whether new responses must wait: too much is queued, or bodies of a
    /// snapshot a newer generation replaced are still pinned.
    #[inline]
    pub fn is_backlogged(&self) -> bool {
        self.is_full()
            || self
                .pin
                .as_ref()
                .is_some_and(|p| self.pin_wait || p.retired())
    }

    /// Whether a response from `snapshot` must wait: bodies of another
    /// snapshot (another site's, or a replaced one) are pinned. The queue
    /// then stays backlogged until they are sent.
    #[inline]
    pub fn wait_for(&mut self, snapshot: &Arc<Snapshot>) -> bool {
        let other = self.pin.as_ref().is_some_and(|p| !Arc::ptr_eq(p, snapshot));
        self.pin_wait |= other;
        other
    }

    /// The queue holds as much as a connection may: [`HIGH_WATER`] owned
    /// bytes, a `writev`'s worth of pieces or [`MAX_QUEUED_FILES`] files.
    fn is_full(&self) -> bool {
        self.pending_owned() >= HIGH_WATER
            || self.chunks.len() >= MAX_IOVECS
            || self.files >= MAX_QUEUED_FILES
    }

    /// The queue is full for the first time since it was last empty (for
    /// `shardhttpd_output_bound_hits_total`: one count per episode).
    pub fn reached_bound(&mut self) -> bool {
        let first = self.is_full() && !self.bound_seen;
        self.bound_seen |= first;
        first
    }

    /// The unsent queue in order (see [`Piece`]).
    #[cfg(test)]
    pub fn for_each_piece(&self, mut f: impl FnMut(Piece<'_>)) {
        let mut cursor = self.sent;
        for chunk in &self.chunks {
            match *chunk {
                Chunk::Own { end } => {
                    if end > cursor {
                        f(Piece::Bytes(&self.buf[cursor..end]));
                        cursor = end;
                    }
                }
                Chunk::Mem { off, len } => f(Piece::Mem { off, len }),
                Chunk::File {
                    ref file,
                    witness,
                    off,
                    len,
                } => f(Piece::File {
                    file,
                    witness,
                    off,
                    len,
                }),
                Chunk::Cut { .. } => f(Piece::Cut),
            }
        }
        if cursor < self.buf.len() {
            f(Piece::Bytes(&self.buf[cursor..]));
        }
    }

    /// The snapshot the queue's `Mem` and `File` pieces belong to.
    #[cfg(test)]
    pub fn pinned(&self) -> Option<&Arc<Snapshot>> {
        self.pin.as_ref()
    }

    /// Give the buffer's memory back when idle (see `Conn::park`).
    pub fn take_buf(&mut self) -> Vec<u8> {
        debug_assert!(self.is_empty());
        self.sent = 0;
        std::mem::take(&mut self.buf)
    }

    pub fn set_buf(&mut self, buf: Vec<u8>) {
        debug_assert!(self.is_empty() && buf.is_empty());
        self.buf = buf;
    }

    /// Queue a body by reference. `snapshot` is the one `body` belongs to;
    /// it is pinned until the body has been sent. A [`Body::File`] is sent
    /// from `opened` (the fd its response checked before writing the head),
    /// or from the fd the open-file cache gives now.
    pub fn push_body(
        &mut self,
        snapshot: &Arc<Snapshot>,
        body: &Body,
        off: u64,
        len: u64,
        opened: Option<&Arc<File>>,
    ) {
        if len == 0 {
            return;
        }
        match body {
            Body::Mem { off: base, .. } if len as usize <= COPY_MAX => {
                let start = base + off as usize;
                self.buf
                    .extend_from_slice(snapshot.mem(start, len as usize));
                return;
            }
            _ => {}
        }
        match &self.pin {
            Some(pinned) => debug_assert!(
                Arc::ptr_eq(pinned, snapshot),
                "callers stop answering while another snapshot is pinned"
            ),
            None => self.pin = Some(Arc::clone(snapshot)),
        }
        if self.tail_start() < self.buf.len() {
            self.chunks.push_back(Chunk::Own {
                end: self.buf.len(),
            });
        }
        self.chunks.push_back(match body {
            Body::Mem { off: base, .. } => Chunk::Mem {
                off: base + off as usize,
                len: len as usize,
            },
            Body::File(large) => {
                let file = match opened {
                    Some(file) => Ok(Arc::clone(file)),
                    None => large.file(),
                };
                match file {
                    Ok(file) => {
                        self.files += 1;
                        Chunk::File {
                            file,
                            witness: large.stamp.witness(),
                            off,
                            len,
                        }
                    }
                    Err(e) => Chunk::Cut {
                        changed: matches!(WriteError::from(e), WriteError::FileChanged),
                    },
                }
            }
        });
    }

    /// Queue `len` bytes of `snapshot`'s arena from `off` by reference,
    /// after everything queued so far, whatever their size (HTTP/2 DATA
    /// payloads, each behind a frame header in the owned bytes). False,
    /// with nothing queued, when another snapshot is pinned, or when half
    /// of `MAX_IOVECS` pieces are already queued (tiny frames from tiny
    /// windows, or a socket that takes nothing): the caller copies the
    /// bytes instead, so one `writev` still covers what is queued and the
    /// owned bytes' `HIGH_WATER` bounds the rest.
    pub fn push_mem(&mut self, snapshot: &Arc<Snapshot>, off: usize, len: usize) -> bool {
        if len == 0 {
            return true;
        }
        if self.chunks.len() >= MAX_IOVECS / 2 {
            return false;
        }
        match &self.pin {
            Some(pinned) if !Arc::ptr_eq(pinned, snapshot) => return false,
            Some(_) => {}
            None => self.pin = Some(Arc::clone(snapshot)),
        }
        if self.tail_start() < self.buf.len() {
            self.chunks.push_back(Chunk::Own {
                end: self.buf.len(),
            });
        }
        self.chunks.push_back(Chunk::Mem { off, len });
        true
    }

    /// Start of the owned tail (bytes not yet covered by an `Own` chunk).
    fn tail_start(&self) -> usize {
        self.chunks
            .iter()
            .rev()
            .find_map(|c| match c {
                Chunk::Own { end } => Some(*end),
                _ => None,
            })
            .unwrap_or(0)
            .max(self.sent)
    }

    /// Write as much as the socket takes. `Ok(true)` when everything is out.
    pub fn flush<S: Sink>(&mut self, stream: &mut S) -> Result<Flush, WriteError> {
        for _ in 0..MAX_WRITES_PER_FLUSH {
            if self.is_empty() {
                self.reset();
                return Ok(Flush::Done);
            }
            let progressed = match self.chunks.front() {
                Some(Chunk::File { .. }) => self.send_file(stream)?,
                Some(Chunk::Cut { changed: true }) => return Err(WriteError::FileChanged),
                Some(Chunk::Cut { changed: false }) => {
                    return Err(io::Error::other("large file could not be opened").into())
                }
                _ => self.write_gathered(stream)?,
            };
            if !progressed {
                return Ok(Flush::Blocked);
            }
        }
        if self.is_empty() {
            self.reset();
            return Ok(Flush::Done);
        }
        Ok(Flush::Yielded)
    }

    fn reset(&mut self) {
        self.buf.clear();
        self.sent = 0;
        self.chunks.clear();
        self.files = 0;
        self.bound_seen = false;
        self.pin = None;
        self.pin_wait = false;
    }

    /// Empty and unpinned, for reuse by another connection; the staging
    /// buffer of large-file copies is freed.
    pub fn clear(&mut self) {
        self.reset();
        self.stage = Vec::new();
        self.staged = 0;
        self.from_replaced = 0;
    }

    /// One `writev` of the owned and arena pieces up to the next file chunk.
    /// Returns false on WouldBlock.
    fn write_gathered<S: Sink>(&mut self, stream: &mut S) -> Result<bool, WriteError> {
        if self.chunks.is_empty() {
            // Only owned bytes, as for every small response: one `write`
            // (`sys::write` says why not a one-slice `writev`).
            let res = stream.write(&self.buf[self.sent..]);
            return self.wrote(res);
        }
        let mut iov: [IoSlice<'_>; MAX_IOVECS] = [IoSlice::new(&[]); MAX_IOVECS];
        let mut n_iov = 0;
        let mut cursor = self.sent;
        let mut before_file = false;
        for chunk in &self.chunks {
            if n_iov == MAX_IOVECS {
                break;
            }
            match chunk {
                Chunk::Own { end } => {
                    if *end > cursor {
                        iov[n_iov] = IoSlice::new(&self.buf[cursor..*end]);
                        n_iov += 1;
                        cursor = *end;
                    }
                }
                Chunk::Mem { off, len } => {
                    let snap = self
                        .pin
                        .as_ref()
                        .expect("Mem chunk without pinned snapshot");
                    iov[n_iov] = IoSlice::new(snap.mem(*off, *len));
                    n_iov += 1;
                }
                Chunk::File { .. } | Chunk::Cut { .. } => {
                    before_file = true;
                    break;
                }
            }
        }
        let reached_tail = !before_file && n_iov < MAX_IOVECS;
        if reached_tail && cursor < self.buf.len() {
            iov[n_iov] = IoSlice::new(&self.buf[cursor..]);
            n_iov += 1;
        }
        if n_iov == 0 {
            // Only empty Own markers before a file chunk.
            while let Some(Chunk::Own { .. }) = self.chunks.front() {
                self.chunks.pop_front();
            }
            return Ok(true);
        }
        let res = stream.write_vectored(&iov[..n_iov], before_file);
        self.wrote(res)
    }

    /// Account for a write of the queue's front: false on WouldBlock.
    fn wrote(&mut self, res: io::Result<usize>) -> Result<bool, WriteError> {
        let written = match res {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
            Err(e) => return Err(e.into()),
        };
        if written == 0 {
            return Err(io::Error::from(io::ErrorKind::WriteZero).into());
        }
        self.advance(written);
        self.compact();
        Ok(true)
    }

    /// Drop written bytes from the front of the owned buffer once there
    /// are [`COMPACT_AT`] of them. A queue that never empties (an HTTP/2
    /// connection refilled with frames while its client reads a little at
    /// a time, or rustls taking a record at a time) is never reset, and
    /// would otherwise keep everything it ever sent: 3 MiB per stalled
    /// HTTP/2 reader over TLS on io_uring.
    fn compact(&mut self) {
        let n = self.sent;
        if n < COMPACT_AT || self.lent.is_some() || n == self.buf.len() {
            return;
        }
        self.buf.drain(..n);
        self.sent = 0;
        for chunk in &mut self.chunks {
            if let Chunk::Own { end } = chunk {
                *end -= n;
            }
        }
    }

    /// Consume `n` written bytes from the front of the queue.
    fn advance(&mut self, mut n: usize) {
        while n > 0 {
            match self.chunks.front_mut() {
                Some(Chunk::Own { end }) => {
                    let avail = *end - self.sent;
                    let take = avail.min(n);
                    self.sent += take;
                    n -= take;
                    if self.sent == *end {
                        self.chunks.pop_front();
                    }
                }
                Some(Chunk::Mem { off, len }) => {
                    let take = (*len).min(n);
                    *off += take;
                    *len -= take;
                    n -= take;
                    if *len == 0 {
                        self.chunks.pop_front();
                    }
                }
                Some(Chunk::File { .. } | Chunk::Cut { .. }) => {
                    unreachable!("writev never covers a file chunk")
                }
                None => {
                    self.sent += n;
                    n = 0;
                }
            }
        }
        while let Some(Chunk::Own { end }) = self.chunks.front() {
            if *end <= self.sent {
                self.chunks.pop_front();
            } else {
                break;
            }
        }
    }

    /// Send the front file chunk, in the mode the server runs in.
    fn send_file<S: Sink>(&mut self, stream: &mut S) -> Result<bool, WriteError> {
        if self.zero_copy {
            self.sendfile(stream)
        } else {
            self.copy_file(stream)
        }
    }

    /// Verified copy: `pread` a piece into the staging buffer, check with
    /// `fstat` that the file's bytes are still the response's version (its
    /// [`Witness`]: size and mtime), then write it. A write to the file
    /// updates the mtime (and a truncate the size) before it changes any
    /// byte, so every byte sent was read from that version. Unlike
    /// `sendfile`, the bytes are ours once read: a later rewrite cannot
    /// reach into data already queued on the socket. The fd is the one the
    /// response started on, so a rename, unlink or chmod of the path (which
    /// change only the inode's ctime and link count) never cuts it.
    fn copy_file<S: Sink>(&mut self, stream: &mut S) -> Result<bool, WriteError> {
        if self.staged < self.stage.len() {
            return match stream.write(&self.stage[self.staged..]) {
                Ok(0) => Err(io::Error::from(io::ErrorKind::WriteZero).into()),
                Ok(n) => {
                    self.staged += n;
                    if self.staged == self.stage.len() {
                        self.staged = 0;
                        self.stage.clear();
                        if let Some(Chunk::File { len: 0, .. }) = self.chunks.front() {
                            self.pop_file();
                            // Don't hold a large buffer on an idle connection.
                            self.stage = Vec::new();
                        }
                    }
                    Ok(true)
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(false),
                Err(e) => Err(e.into()),
            };
        }
        let Some(Chunk::File {
            file,
            witness,
            off,
            len,
        }) = self.chunks.front_mut()
        else {
            unreachable!("the front chunk is a file")
        };
        let n = (*len as usize).min(COPY_CHUNK);
        self.stage.resize(n, 0);
        let unlinked = read_verified(file, witness, *off, &mut self.stage)?;
        *off += n as u64;
        *len -= n as u64;
        if *len == 0 && unlinked {
            self.from_replaced += 1;
        }
        self.staged = 0;
        Ok(true)
    }

    /// Zero-copy: all but the last byte go by `sendfile`; the last byte is
    /// read with `pread` and sent only after `fstat` shows the file's
    /// [`Witness`] unchanged. This catches a file changed before the end of
    /// the send, but TCP keeps referencing the page cache until the peer has
    /// read the data, so a rewrite in place can still reach bytes already
    /// queued: only for roots that change by rename (`sendfile = true`). A
    /// rename over the file, unlink or chmod leaves the body whole, as in
    /// the verified copy.
    fn sendfile<S: Sink>(&mut self, stream: &mut S) -> Result<bool, WriteError> {
        let Some(Chunk::File {
            file,
            witness,
            off,
            len,
        }) = self.chunks.front_mut()
        else {
            unreachable!("the front chunk is a file")
        };
        if *len > 1 {
            let count = ((*len - 1) as usize).min(SENDFILE_CHUNK);
            match stream.sendfile(file, off, count) {
                Ok(0) => return Err(WriteError::FileChanged),
                Ok(n) => {
                    *len -= n as u64;
                    return Ok(true);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) => return Err(e.into()),
            }
        }
        let mut last = [0u8; 1];
        let unlinked = read_verified(file, witness, *off, &mut last)?;
        match stream.write(&last) {
            Ok(1) => {
                if unlinked {
                    self.from_replaced += 1;
                }
                self.pop_file();
                Ok(true)
            }
            Ok(_) => Err(io::Error::from(io::ErrorKind::WriteZero).into()),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// Drop the front file chunk, sent in full, and its fd reference.
    fn pop_file(&mut self) {
        self.chunks.pop_front();
        self.files -= 1;
    }
}

/// The verified copy's one check, for every protocol: `buf.len()` bytes
/// of `file` from `off`, read with `pread` and kept only if `fstat` then
/// shows the file unchanged since the build (`witness`: a write updates
/// the mtime, a truncate the size, before any byte changes). Returns
/// whether the file's name was renamed over or unlinked meanwhile (link
/// count 0): the bytes are still the snapshot's, from the inode the
/// response started on.
pub fn read_verified(
    file: &File,
    witness: &Witness,
    off: u64,
    buf: &mut [u8],
) -> Result<bool, WriteError> {
    match file.read_exact_at(buf, off) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Err(WriteError::FileChanged),
        Err(e) => return Err(e.into()),
    }
    let meta = file.metadata()?;
    if Witness::of(&meta) != *witness {
        return Err(WriteError::FileChanged);
    }
    Ok(meta.nlink() == 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The unsent queue as bytes (owned pieces only).
    fn queued(out: &Output) -> Vec<u8> {
        let mut all = Vec::new();
        out.for_each_piece(|p| match p {
            Piece::Bytes(b) => all.extend_from_slice(b),
            other => panic!("unexpected piece {other:?}"),
        });
        all
    }

    fn lent_queue(bytes: &[u8]) -> (Output, Vec<u8>, usize) {
        let mut out = Output::default();
        out.buf().extend_from_slice(bytes);
        assert!(out.lendable());
        let (buf, start) = out.lend(Vec::with_capacity(64));
        out.set_lent(SendId::for_tests(7));
        assert!(
            !out.is_empty() && !out.lendable(),
            "lent bytes are still owed"
        );
        assert_eq!(out.lent(), Some(SendId::for_tests(7)));
        (out, buf, start)
    }

    /// A sink that takes at most `per_write` bytes a call and keeps them.
    struct Trickle {
        per_write: usize,
        got: Vec<u8>,
    }

    impl Sink for Trickle {
        fn write_vectored(&mut self, iov: &[IoSlice<'_>], _more: bool) -> io::Result<usize> {
            let mut n = 0;
            for b in iov {
                let take = b.len().min(self.per_write - n);
                self.got.extend_from_slice(&b[..take]);
                n += take;
            }
            Ok(n)
        }

        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.write_vectored(&[IoSlice::new(buf)], false)
        }

        fn sendfile(&mut self, _: &File, _: &mut u64, _: usize) -> io::Result<usize> {
            Err(io::ErrorKind::Unsupported.into())
        }
    }

    /// A queue that never empties, refilled while a slow reader takes a
    /// little at a time, keeps what is unsent, not everything it sent
    /// (it grew by every byte before `compact`); the bytes come out whole
    /// and in order.
    #[test]
    fn a_queue_refilled_while_a_slow_reader_takes_a_little_stays_bounded() {
        let mut out = Output::default();
        let mut sink = Trickle {
            per_write: 1000,
            got: Vec::new(),
        };
        let mut want = Vec::new();
        for i in 0..2_000u32 {
            let piece = i.to_be_bytes().repeat(2500);
            out.buf().extend_from_slice(&piece);
            want.extend_from_slice(&piece);
            out.flush(&mut sink).unwrap();
            assert!(
                out.buf().capacity() <= 2 * (HIGH_WATER + COMPACT_AT),
                "round {i}: {} B kept for {} B unsent",
                out.buf().capacity(),
                out.pending_owned()
            );
            while out.pending_owned() > HIGH_WATER {
                out.flush(&mut sink).unwrap();
            }
        }
        while !out.is_empty() {
            out.flush(&mut sink).unwrap();
        }
        assert!(sink.got == want, "bytes lost or reordered");
    }

    #[test]
    fn a_send_that_took_everything_leaves_the_queue_empty() {
        let (mut out, buf, start) = lent_queue(b"HTTP/1.1 200 OK\r\n\r\nhello");
        let n = buf.len() - start;
        let spare = out.give_back(buf, start, n);
        assert!(spare.is_empty());
        assert!(out.is_empty());
        assert_eq!(out.lent(), None);
    }

    #[test]
    fn a_short_send_owes_the_rest_first() {
        let (mut out, buf, start) = lent_queue(b"0123456789");
        let _ = out.give_back(buf, start, 4);
        assert_eq!(queued(&out), b"456789");
        assert!(out.lendable());
    }

    #[test]
    fn answers_queued_while_lent_go_after_what_a_short_send_left() {
        let (mut out, buf, start) = lent_queue(b"first-answer;");
        out.buf().extend_from_slice(b"second-answer;");
        let _ = out.give_back(buf, start, 6);
        assert_eq!(queued(&out), b"answer;second-answer;");
        // A full send leaves just what was queued meanwhile.
        let (mut out, buf, start) = lent_queue(b"first;");
        out.buf().extend_from_slice(b"second;");
        let n = buf.len() - start;
        let _ = out.give_back(buf, start, n);
        assert_eq!(queued(&out), b"second;");
    }

    /// The unsent queue's pieces, owned bytes as text, ranges as
    /// `mem OFF+LEN`.
    fn shape(out: &Output) -> Vec<String> {
        let mut all = Vec::new();
        out.for_each_piece(|p| match p {
            Piece::Bytes(b) => all.push(String::from_utf8_lossy(b).into_owned()),
            Piece::Mem { off, len } => all.push(format!("mem {off}+{len}")),
            other => panic!("unexpected piece {other:?}"),
        });
        all
    }

    #[test]
    fn referenced_ranges_keep_their_place_between_owned_bytes() {
        let snap = Arc::new(Snapshot::empty());
        let mut out = Output::default();
        out.buf().extend_from_slice(b"head1;");
        assert!(out.push_mem(&snap, 100, 5000));
        out.buf().extend_from_slice(b"head2;");
        assert!(out.push_mem(&snap, 5100, 3000));
        assert!(out.push_mem(&snap, 8100, 0), "an empty range is nothing");
        out.buf().extend_from_slice(b"tail;");
        assert_eq!(
            shape(&out),
            ["head1;", "mem 100+5000", "head2;", "mem 5100+3000", "tail;"]
        );
        assert!(!out.lendable(), "ranges are not one owned slice");
        assert!(Arc::ptr_eq(out.pinned().unwrap(), &snap));
        assert_eq!(out.pending_owned(), 17, "ranges are not owned bytes");
    }

    #[test]
    fn a_range_of_another_snapshot_is_refused() {
        let (a, b) = (Arc::new(Snapshot::empty()), Arc::new(Snapshot::empty()));
        let mut out = Output::default();
        assert!(out.push_mem(&b, 0, 0));
        assert!(out.pinned().is_none(), "an empty range pins nothing");
        out.buf().extend_from_slice(b"h;");
        assert!(out.push_mem(&a, 0, 2000));
        assert!(!out.push_mem(&b, 0, 2000));
        assert_eq!(shape(&out), ["h;", "mem 0+2000"]);
        assert!(Arc::ptr_eq(out.pinned().unwrap(), &a));
    }

    #[test]
    fn ranges_past_half_the_iovecs_are_refused() {
        let snap = Arc::new(Snapshot::empty());
        let mut out = Output::default();
        let mut taken = 0;
        loop {
            out.buf().extend_from_slice(b"h");
            if !out.push_mem(&snap, taken * 4096, 4096) {
                break;
            }
            taken += 1;
        }
        // Each took two pieces: its frame header, then the range.
        assert_eq!(taken, MAX_IOVECS / 4);
        assert!(!out.is_backlogged(), "the chunk bound is not reached");
    }

    #[test]
    fn ranges_queued_while_lent_follow_what_a_short_send_left() {
        let snap = Arc::new(Snapshot::empty());
        // Owned bytes between the lent ones and the range.
        let (mut out, buf, start) = lent_queue(b"settings;");
        out.buf().extend_from_slice(b"head;");
        assert!(out.push_mem(&snap, 0, 4096));
        let _ = out.give_back(buf, start, 3);
        assert_eq!(shape(&out), ["tings;head;", "mem 0+4096"]);
        // The range first after the lent bytes.
        let (mut out, buf, start) = lent_queue(b"settings;");
        assert!(out.push_mem(&snap, 0, 4096));
        out.buf().extend_from_slice(b"tail;");
        let _ = out.give_back(buf, start, 2);
        assert_eq!(shape(&out), ["ttings;", "mem 0+4096", "tail;"]);
        // A full send leaves the range and what followed it.
        let (mut out, buf, start) = lent_queue(b"settings;");
        assert!(out.push_mem(&snap, 0, 4096));
        out.buf().extend_from_slice(b"tail;");
        let n = buf.len() - start;
        let _ = out.give_back(buf, start, n);
        assert_eq!(shape(&out), ["mem 0+4096", "tail;"]);
        assert!(!out.lendable());
    }

    #[test]
    fn a_lend_starts_where_earlier_writes_stopped() {
        let mut out = Output::default();
        out.buf().extend_from_slice(b"abcdef");
        out.sent = 2;
        let (buf, start) = out.lend(Vec::new());
        assert_eq!(&buf[start..], b"cdef");
        let _ = out.give_back(buf, start, 1);
        assert_eq!(queued(&out), b"def");
    }
}
