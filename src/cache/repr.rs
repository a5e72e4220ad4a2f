//! One representation of an entry (identity or a compressed variant):
//! [`Repr`] and its head lines through [`ReprRef`], where its bytes are
//! ([`Body`]: a body segment, or a [`LargeFile`] sent from its fd), and
//! the on-disk inputs an entry was read from ([`Source`], [`SIDECARS`]).

use std::fs::File;
use std::io;
use std::path::Path;
use std::sync::Arc;

use crate::http::accept::Coding;

use super::{FileStamp, Frame, OpenFiles, RootDir};

/// The on-disk inputs of an entry: the file and the sidecars considered
/// (used, or rejected as stale).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Source {
    pub stamp: FileStamp,
    /// `name.br`, `name.zst`, `name.gz` (in [`SIDECARS`] order), when
    /// present, as [`Source::sidecar_key`]: a rejected sidecar is recorded
    /// too, so the entry is reused (and the rejection not logged again)
    /// until either file changes.
    pub sidecars: u64,
}

impl Source {
    /// The stamps of a file's sidecars folded into 8 bytes (0: none) rather
    /// than 150 in every entry; only ever compared for equality.
    pub fn sidecar_key(stamps: [Option<FileStamp>; 3]) -> u64 {
        if stamps.iter().all(Option::is_none) {
            return 0;
        }
        let mut bytes = [0u8; 3 * 41];
        for (chunk, stamp) in bytes.chunks_mut(41).zip(stamps) {
            if let Some(s) = stamp {
                chunk[0] = 1;
                for (i, v) in [s.dev, s.ino, s.size, s.mtime_ns as u64, s.ctime_ns as u64]
                    .iter()
                    .enumerate()
                {
                    chunk[1 + 8 * i..9 + 8 * i].copy_from_slice(&v.to_le_bytes());
                }
            }
        }
        xxhash_rust::xxh3::xxh3_64(&bytes) | 1
    }
}

/// Precompressed sidecar suffixes, in the order of [`Source::sidecars`].
pub const SIDECARS: [(Coding, &str); 3] = [
    (Coding::Brotli, ".br"),
    (Coding::Zstd, ".zst"),
    (Coding::Gzip, ".gz"),
];

/// One representation of an entry: identity or a compressed variant. Its
/// 200 head is a range of its chunk's head bytes in its entry's [`Frame`]
/// (read it through [`ReprRef`]); the fields shared with 206 and 304 are
/// that range's tail and the frame's, the ETag a range of the first. The content hash is not kept: the ETag spells
/// it ([`ReprRef::hash`]).
#[derive(Debug, Clone)]
pub struct Repr {
    /// Body length.
    pub len: u64,
    pub body: Body,
    /// Where its own lines of the 200 head are in the chunk's head bytes.
    pub(super) head_at: u32,
    pub(super) head_len: u32,
    /// Where [`ReprRef::common`] starts, from the head's start.
    pub(super) common_at: u16,
    /// Where [`ReprRef::etag`] is, from the head's start.
    pub(super) etag_at: u16,
    pub(super) etag_len: u8,
}

impl Repr {
    /// A representation whose 200 head is `head` of the head bytes, the
    /// shared fields from `common_at` (from the head's start), the ETag the
    /// range `etag` (likewise).
    pub(crate) fn new(
        len: u64,
        head: std::ops::Range<usize>,
        common_at: usize,
        etag: std::ops::Range<usize>,
        body: Body,
    ) -> Repr {
        debug_assert!(common_at <= etag.start && etag.end <= head.len());
        Repr {
            len,
            body,
            head_at: u32::try_from(head.start).expect("a chunk's heads stay below 4 GiB"),
            head_len: u32::try_from(head.len()).expect("a head stays below 4 GiB"),
            common_at: u16::try_from(common_at).expect("the head before Last-Modified is short"),
            etag_at: u16::try_from(etag.start).expect("the head before the ETag is short"),
            etag_len: u8::try_from(etag.len()).expect("an ETag is short"),
        }
    }

    /// Where its head is in its chunk's head bytes.
    pub(crate) fn head_range(&self) -> std::ops::Range<usize> {
        self.head_at as usize..self.head_at as usize + self.head_len as usize
    }

    /// Point the head at `at` (the chunk's head bytes were laid out again).
    pub(crate) fn move_head(&mut self, at: usize) {
        self.head_at = u32::try_from(at).expect("a chunk's heads stay below 4 GiB");
    }
}

/// A [`Repr`] with the head bytes it points into. Derefs to the repr.
#[derive(Debug, Clone, Copy)]
pub struct ReprRef<'a> {
    pub(super) repr: &'a Repr,
    pub(super) heads: &'a [u8],
    pub(super) frame: &'static Frame,
    pub(super) coding: Coding,
}

impl std::ops::Deref for ReprRef<'_> {
    type Target = Repr;

    #[inline]
    fn deref(&self) -> &Repr {
        self.repr
    }
}

impl<'a> ReprRef<'a> {
    /// The representation's coding.
    pub fn coding(&self) -> Coding {
        self.coding
    }

    /// The complete 200 head except `Date`, `Connection` and the final
    /// CRLF, in three pieces: the [`Frame`]'s head (status line, Server,
    /// Content-Type), this representation's own lines (Content-Length,
    /// encoding, Last-Modified, ETag), the frame's tail.
    #[inline]
    pub fn head_200(&self) -> [&'a [u8]; 3] {
        [self.frame.head(), self.own(), self.frame.tail()]
    }

    /// Where its bytes are, for as long as the snapshot is borrowed.
    #[inline]
    pub fn body(&self) -> &'a Body {
        &self.repr.body
    }

    /// The 200 head in one piece (tests, logs).
    pub fn head_200_vec(&self) -> Vec<u8> {
        self.head_200().concat()
    }

    /// This representation's own lines.
    #[inline]
    pub(super) fn own(&self) -> &'a [u8] {
        &self.heads[self.repr.head_range()]
    }

    /// Fields shared by 200, 206 and 304, in two pieces: `Last-Modified`,
    /// `ETag`, then `Accept-Ranges: bytes`, `Cache-Control` and
    /// `Vary: Accept-Encoding` where they apply (each with CRLF).
    #[inline]
    pub fn common(&self) -> [&'a [u8]; 2] {
        [
            &self.own()[self.repr.common_at as usize..],
            self.frame.tail(),
        ]
    }

    /// [`ReprRef::common`] in one piece (tests).
    pub fn common_vec(&self) -> Vec<u8> {
        self.common().concat()
    }

    /// Header lines that follow [`ReprRef::head_200`] or
    /// [`ReprRef::common`] on a TLS connection only: a `[[headers]]`
    /// `Strict-Transport-Security`, usually nothing.
    #[inline]
    pub fn tls_lines(&self) -> &'static [u8] {
        self.frame.tls_lines()
    }

    /// Strong ETag derived from the content, quotes included.
    #[inline]
    pub fn etag(&self) -> &'a [u8] {
        let at = self.repr.etag_at as usize;
        &self.own()[at..at + self.repr.etag_len as usize]
    }

    /// `Content-Encoding: …\r\n`, empty for identity.
    #[inline]
    pub fn encoding_line(&self) -> &'static [u8] {
        encoding_line(self.coding)
    }

    /// The xxh3-128 of the bytes sent (or of the stamp, for a body sent from
    /// its file) that the ETag spells in hex.
    pub fn hash(&self) -> u128 {
        let hex = self.etag().get(1..33).unwrap_or_default();
        std::str::from_utf8(hex)
            .ok()
            .and_then(|h| u128::from_str_radix(h, 16).ok())
            .unwrap_or(0)
    }
}

/// `Content-Encoding: …\r\n` for a coding; empty for identity.
pub fn encoding_line(coding: Coding) -> &'static [u8] {
    match coding {
        Coding::Identity => b"",
        Coding::Brotli => b"Content-Encoding: br\r\n",
        Coding::Zstd => b"Content-Encoding: zstd\r\n",
        Coding::Gzip => b"Content-Encoding: gzip\r\n",
    }
}

/// Where a representation's bytes are.
#[derive(Debug, Clone)]
pub enum Body {
    /// [`Repr::len`] bytes at `off` in the snapshot's body segments: the
    /// bits from [`SEGMENT_SHIFT`] up name the segment, the bits below the
    /// offset in it. Adding a range's start to `off` stays within the body's
    /// segment.
    Mem { off: usize },
    /// Sent with `sendfile` from an fd opened on demand (boxed: most
    /// bodies are in memory, and every entry pays for the largest variant).
    File(Box<LargeFile>),
}

/// A body served from its file. `stamp` is what the file looked like when its
/// ETag was computed. The fd is not held by the snapshot: [`LargeFile::file`]
/// opens it on demand beneath the root (checking it is that very file) and
/// keeps it in the bounded [`OpenFiles`] cache. A response takes its own
/// reference to the fd before its head is written and sends every byte from
/// it, re-checking the file's [`Witness`](super::Witness) around each piece: a rename, unlink
/// or chmod of the path cannot cut it, a rewrite of the bytes does.
#[derive(Debug, Clone)]
pub struct LargeFile {
    pub root: Arc<RootDir>,
    /// Canonical path relative to `root`.
    pub rel: Box<Path>,
    pub stamp: FileStamp,
    pub files: Arc<OpenFiles>,
}

impl LargeFile {
    /// The open file, still matching `stamp` when it had to be opened.
    pub fn file(&self) -> io::Result<Arc<File>> {
        self.files.get(&self.root, &self.rel, &self.stamp)
    }
}

/// Bits of a [`Body::Mem`] offset that address a byte within its segment
/// (1 TiB); the bits above are the segment's index in the snapshot.
pub const SEGMENT_SHIFT: u32 = 40;

/// Pack a segment index and an offset into a [`Body::Mem`] offset.
pub(crate) fn pack_off(segment: usize, off: usize) -> usize {
    (segment << SEGMENT_SHIFT) | off
}

/// The segment index and offset a [`Body::Mem`] offset packs.
pub(crate) fn unpack_off(off: usize) -> (usize, usize) {
    (off >> SEGMENT_SHIFT, off & ((1 << SEGMENT_SHIFT) - 1))
}

/// Read-only anonymous memory holding bodies. Generations share the
/// segments whose bodies they all still serve, so a rebuild copies only
/// what changed, and a connection pinning an old generation pins little
/// beyond what the current one holds anyway.
pub type Segment = Arc<memmap2::Mmap>;
