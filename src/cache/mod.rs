//! The immutable snapshot of the document root, and how it is built.
//!
//! A [`Snapshot`] maps every servable path to an [`Entry`] whose response
//! heads are pre-rendered, so a hit on the hot path is one hash lookup and one
//! write. Small bodies are copied into anonymous memory segments at build
//! time, so a file rewritten or truncated on disk can never reach a response
//! (no shared file mapping, no SIGBUS); generations share the segments whose
//! bodies did not change ([`Segment`]). Large ones are sent from an fd opened
//! on demand beneath the root (see [`LargeFile`]).
//!
//! A rebuild reuses every unchanged file of the previous snapshot (same
//! [`FileStamp`]) and only reads and compresses what changed; the
//! [`watch`]er triggers it when the root changes on disk.

mod build;
mod compress;
mod index;
pub mod open_files;
mod rules;
pub mod store;
pub mod watch;

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::http::accept::Coding;

pub use build::{build, sidecars_rejected, DirHook, MAX_PATCH_PATHS};
pub use compress::CompressOptions;
pub use index::{Entries, PathIndex};
pub use open_files::{OpenFiles, RootDir};
pub use rules::{
    CacheControl, DotfileAllow, HeaderRules, StatusCacheControl, DEFAULT_DOTFILE_ALLOW,
};
pub use store::{Store, StoreStats};

/// How a snapshot is built; derived once from `config::Config`.
#[derive(Debug, Clone)]
pub struct BuildOptions {
    pub root: PathBuf,
    /// Most bytes of bodies held in memory; files that don't fit are sent from
    /// their fd.
    pub cache_max_bytes: u64,
    /// Files of at least this many bytes are always sent from their fd.
    pub sendfile_threshold: u64,
    /// The rendered `Server: …\r\n` line, or empty when disabled.
    pub server_line: Vec<u8>,
    /// Which files and directories whose name starts with `.` are walked.
    pub dotfile_allow: DotfileAllow,
    /// Directory index names, in the order tried for `dir/`.
    pub index_files: Vec<String>,
    /// Media type of files whose extension has no known type.
    pub default_type: String,
    /// Files sent from their fd (at least `sendfile_threshold`) up to this
    /// size are read once by the build to check their sidecars and, when
    /// compressible, to build their variants (kept in memory, like every
    /// variant); larger ones are always sent as identity.
    pub compress_max_file_bytes: u64,
    /// Precompressed variants; `None` builds identity only.
    pub compress: Option<CompressOptions>,
    /// The compression the configuration asks for, kept while a large
    /// root's fast start builds with `compress: None`. Files that will get
    /// variants carry `Vary: Accept-Encoding` from their first response
    /// either way; during the fast start (`compress` unset, this set) their
    /// freshness is also capped at `fast_start_max_age`.
    pub compress_configured: Option<CompressOptions>,
    /// Seconds of freshness at most for those files during the fast start.
    pub fast_start_max_age: u64,
    /// Custom response headers by URL glob, baked into every head.
    pub headers: HeaderRules,
    /// `Cache-Control` of error and redirect responses.
    pub status_cache_control: StatusCacheControl,
    /// `Cache-Control` by URL glob, baked into every head.
    pub cache_control: CacheControl,
    /// Status code → page path relative to the root (`/` separated). A 404
    /// page not named here defaults to `404.html` when the root has one.
    pub error_pages: Vec<(u16, String)>,
    /// Unknown extension-less paths get `/index.html` with 200.
    pub spa_fallback: bool,
    /// The bounded cache of large files' fds (`max_open_files`), shared by
    /// every generation.
    pub open_files: Arc<OpenFiles>,
    /// A first build that finds more files than this serves them from disk
    /// (stated, not read) and leaves reading them into memory to a
    /// background build (`Store::build_loaded`): a root of a million small
    /// files then serves in the time its walk takes.
    pub preload_max_files: u64,
}

/// Default for `compress_max_file_bytes`: a 20 MB JSON file or a large JS
/// bundle is compressed, a video or disk image never is.
pub const DEFAULT_COMPRESS_MAX_FILE_BYTES: u64 = 32 * 1024 * 1024;

/// Default for `preload_max_files`: a root of 200 000 small files still
/// starts fully in memory (in about 2-3 s on 2 cores).
pub const DEFAULT_PRELOAD_MAX_FILES: u64 = 250_000;

/// What a normalised request path names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resource {
    /// A file (or a directory's `index.html`): index into [`Snapshot::entry`].
    File(u32),
    /// A directory named without its trailing slash: 301 to `path + "/"`.
    AddSlash,
    /// Present but not servable (unreadable, or a directory without index): 403.
    Forbidden,
}

/// One file of the snapshot. Kept small (a root can hold millions): its
/// heads are not here but in the head bytes of its chunk of
/// [`Entries`], which it addresses by offset, in a [`Frame`] shared by
/// every file of its type and rules; read it through [`EntryRef`], which pairs the
/// two.
#[derive(Debug, Clone)]
pub struct Entry {
    /// Last-Modified as Unix seconds.
    pub last_modified: u64,
    /// The uncompressed representation.
    pub identity: Repr,
    /// Compressed representations, in server preference order (br, zstd,
    /// gzip): ties in `Accept-Encoding` go to the first. In memory, except
    /// a sidecar of at least `sendfile_threshold`, sent from its own fd.
    pub encoded: Box<[(Coding, Repr)]>,
    /// What the files looked like when read; a rebuild reuses the entry
    /// while they still look the same.
    pub source: Source,
    /// The lines of its 200 heads that other files share.
    frame: &'static Frame,
    /// The codings of `encoded`, same order, for `http::accept::negotiate`
    /// (the first `encoded.len()` count; inline, not one more allocation).
    codings: [Coding; 3],
    /// Responses depend on `Accept-Encoding` (there is at least one
    /// variant), so every head carries `Vary: Accept-Encoding`.
    pub vary: bool,
}

impl Entry {
    /// An entry whose 200 heads are framed by `frame`.
    pub(crate) fn new(
        frame: &'static Frame,
        last_modified: u64,
        identity: Repr,
        encoded: Box<[(Coding, Repr)]>,
        vary: bool,
        source: Source,
    ) -> Entry {
        let mut codings = [Coding::Identity; 3];
        for (slot, (c, _)) in codings.iter_mut().zip(encoded.iter()) {
            *slot = *c;
        }
        debug_assert!(encoded.len() <= codings.len());
        Entry {
            last_modified,
            identity,
            encoded,
            source,
            frame,
            codings,
            vary,
        }
    }

    /// What fills a slot no path points to any more.
    pub(crate) fn vacant(source: Source) -> Entry {
        Entry::new(
            &Frame::EMPTY,
            0,
            Repr::new(0, 0..0, 0, 0..0, Body::Mem { off: 0 }),
            Box::default(),
            false,
            source,
        )
    }

    /// The codings of [`Entry::encoded`], in the same order.
    #[inline]
    pub fn codings(&self) -> &[Coding] {
        &self.codings[..self.encoded.len().min(3)]
    }

    /// Every representation, identity first.
    pub(crate) fn reprs(&self) -> impl Iterator<Item = &Repr> {
        std::iter::once(&self.identity).chain(self.encoded.iter().map(|(_, r)| r))
    }

    pub(crate) fn reprs_mut(&mut self) -> impl Iterator<Item = &mut Repr> {
        std::iter::once(&mut self.identity).chain(self.encoded.iter_mut().map(|(_, r)| r))
    }
}

/// An [`Entry`] with the head bytes its representations point into: what
/// [`Snapshot::entry`] hands out. Derefs to the entry.
#[derive(Debug, Clone, Copy)]
pub struct EntryRef<'a> {
    entry: &'a Entry,
    heads: &'a [u8],
}

impl std::ops::Deref for EntryRef<'_> {
    type Target = Entry;

    #[inline]
    fn deref(&self) -> &Entry {
        self.entry
    }
}

impl<'a> EntryRef<'a> {
    #[inline]
    pub(crate) fn new(entry: &'a Entry, heads: &'a [u8]) -> Self {
        EntryRef { entry, heads }
    }

    /// The entry itself (the heads are its chunk's).
    pub fn entry(&self) -> &'a Entry {
        self.entry
    }

    /// The head bytes its representations point into.
    pub(crate) fn heads(&self) -> &'a [u8] {
        self.heads
    }

    /// The uncompressed representation.
    #[inline]
    pub fn identity(&self) -> ReprRef<'a> {
        ReprRef {
            repr: &self.entry.identity,
            heads: self.heads,
            frame: self.entry.frame,
            coding: Coding::Identity,
        }
    }

    /// The representation for a negotiated coding (identity when the entry
    /// has no such variant).
    #[inline]
    pub fn repr(&self, coding: Coding) -> ReprRef<'a> {
        match self.entry.encoded.iter().find(|(c, _)| *c == coding) {
            Some((c, repr)) => ReprRef {
                repr,
                heads: self.heads,
                frame: self.entry.frame,
                coding: *c,
            },
            None => self.identity(),
        }
    }

    /// The compressed representations, in [`Entry::encoded`] order.
    pub fn variants(&self) -> impl Iterator<Item = ReprRef<'a>> + 'a {
        let (heads, frame) = (self.heads, self.entry.frame);
        self.entry.encoded.iter().map(move |(c, repr)| ReprRef {
            repr,
            heads,
            frame,
            coding: *c,
        })
    }

    /// `Content-Type: …\r\n`, with `; charset=utf-8` for text types.
    #[inline]
    pub fn content_type_line(&self) -> &'static [u8] {
        self.entry.frame.content_type_line()
    }
}

/// The lines of a 200 head that every file of one media type under the
/// same rules shares: before its own lines, `HTTP/1.1 200 OK`, `Server`
/// and `Content-Type` (77 bytes for HTML); after them, `Accept-Ranges`,
/// then `Cache-Control`, `Vary` and custom headers where they apply. Kept
/// once per process rather than once per file: interned by the build and
/// never freed, there are as many as the media types the roots have had
/// times the rule sets of the configuration (the server line is fixed for
/// the process).
#[derive(Debug)]
pub struct Frame {
    /// The lines before, then the lines after.
    bytes: &'static [u8],
    /// Where `Content-Type: …\r\n` starts: it runs to `tail_at`.
    content_type_at: usize,
    /// Where the lines after start.
    tail_at: usize,
    /// Where the tail's lines sent over TLS only start (a `[[headers]]`
    /// `Strict-Transport-Security`): they run to the end.
    tls_at: usize,
}

impl Frame {
    /// The frame of entries that are never served (vacant slots).
    pub(crate) const EMPTY: Frame = Frame {
        bytes: b"",
        content_type_at: 0,
        tail_at: 0,
        tls_at: 0,
    };

    /// The frame `status_and_server` + `content_type_line` … `tail`,
    /// interned.
    pub(crate) fn intern(
        status_and_server: &[u8],
        content_type_line: &[u8],
        tail: &[u8],
    ) -> &'static Frame {
        use std::collections::HashMap;
        use std::sync::Mutex;
        type Interned = HashMap<(usize, usize, Vec<u8>), &'static Frame>;
        static FRAMES: Mutex<Option<Interned>> = Mutex::new(None);
        let bytes = [status_and_server, content_type_line, tail].concat();
        let content_type_at = status_and_server.len();
        let tail_at = content_type_at + content_type_line.len();
        // The bytes and these two offsets decide the third.
        let key = (content_type_at, tail_at, bytes);
        let mut interned = FRAMES.lock().unwrap_or_else(|e| e.into_inner());
        let interned = interned.get_or_insert_with(HashMap::new);
        if let Some(found) = interned.get(&key) {
            return found;
        }
        let leaked: &'static Frame = Box::leak(Box::new(Frame {
            bytes: Box::leak(key.2.clone().into_boxed_slice()),
            content_type_at,
            tail_at,
            tls_at: tail_at + rules::tls_only_at(tail),
        }));
        interned.insert(key, leaked);
        leaked
    }

    /// Status line, `Server`, `Content-Type`.
    #[inline]
    pub fn head(&self) -> &'static [u8] {
        &self.bytes[..self.tail_at]
    }

    /// `Accept-Ranges` and what follows it, except the lines sent over
    /// TLS only.
    #[inline]
    pub fn tail(&self) -> &'static [u8] {
        &self.bytes[self.tail_at..self.tls_at]
    }

    /// The tail's lines sent over TLS only (`Strict-Transport-Security`
    /// from a `[[headers]]` rule); usually empty.
    #[inline]
    pub fn tls_lines(&self) -> &'static [u8] {
        &self.bytes[self.tls_at..]
    }

    #[inline]
    pub fn content_type_line(&self) -> &'static [u8] {
        &self.bytes[self.content_type_at..self.tail_at]
    }
}

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
    head_at: u32,
    head_len: u32,
    /// Where [`ReprRef::common`] starts, from the head's start.
    common_at: u16,
    /// Where [`ReprRef::etag`] is, from the head's start.
    etag_at: u16,
    etag_len: u8,
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
    repr: &'a Repr,
    heads: &'a [u8],
    frame: &'static Frame,
    coding: Coding,
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

    /// The 200 head in one piece (tests, logs).
    pub fn head_200_vec(&self) -> Vec<u8> {
        self.head_200().concat()
    }

    /// This representation's own lines.
    #[inline]
    fn own(&self) -> &'a [u8] {
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
/// it, re-checking the file's [`Witness`] around each piece: a rename, unlink
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

/// What a build saw of a file: its identity (device, inode) and what any
/// change to it moves. The build compares whole stamps (a chmod or rename
/// is worth a re-stat); serving compares only [`FileStamp::same_content`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileStamp {
    pub dev: u64,
    pub ino: u64,
    pub size: u64,
    /// Nanoseconds since the epoch; an i64 reaches the year 2262.
    pub mtime_ns: i64,
    pub ctime_ns: i64,
}

impl FileStamp {
    /// Not stated yet (see `Walk::lazy`): no real file has inode 0.
    pub const UNKNOWN: FileStamp = FileStamp {
        dev: 0,
        ino: 0,
        size: 0,
        mtime_ns: 0,
        ctime_ns: 0,
    };

    pub fn is_known(&self) -> bool {
        *self != FileStamp::UNKNOWN
    }

    pub fn of(meta: &std::fs::Metadata) -> Self {
        use std::os::unix::fs::MetadataExt;
        FileStamp {
            dev: meta.dev(),
            ino: meta.ino(),
            size: meta.size(),
            mtime_ns: nanos(meta.mtime(), meta.mtime_nsec()),
            ctime_ns: nanos(meta.ctime(), meta.ctime_nsec()),
        }
    }

    /// Whether `other` is the same file with the same bytes as far as the
    /// kernel tells: same inode, size and mtime. Not ctime: a rename over
    /// the file, an unlink, a chmod or a new hard link change the inode's
    /// ctime without touching a byte, and a download under way must outlive
    /// them (it is sent from the fd it started on).
    pub fn same_content(&self, other: &FileStamp) -> bool {
        (self.dev, self.ino) == (other.dev, other.ino) && self.witness() == other.witness()
    }

    /// The part of the stamp an open fd of this file is checked against.
    pub fn witness(&self) -> Witness {
        Witness {
            size: self.size,
            mtime_ns: self.mtime_ns,
        }
    }

    /// [`FileStamp::of`] from what `sys::lstat_at` says.
    pub fn of_lstat(st: &crate::sys::Lstat) -> Self {
        FileStamp {
            dev: st.dev,
            ino: st.ino,
            size: st.size,
            mtime_ns: nanos(st.mtime.0, st.mtime.1),
            ctime_ns: nanos(st.ctime.0, st.ctime.1),
        }
    }
}

/// What the verified copy re-checks on the fd a response is sent from,
/// around every piece: the size (a truncate or append) and the mtime (a
/// write sets it before it changes a byte, on every Linux filesystem:
/// `file_modified` precedes the copy in `generic_perform_write`). The
/// device and inode cannot change under an open fd, and the ctime is left
/// out on purpose (see [`FileStamp::same_content`]). What this cannot see:
/// a rewrite in place that then sets the mtime back to its old value to the
/// nanosecond (`utimensat`), between our read and our `fstat`; `rsync
/// --inplace` does not (its mtime is the new source's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Witness {
    pub size: u64,
    pub mtime_ns: i64,
}

impl Witness {
    pub fn of(meta: &std::fs::Metadata) -> Witness {
        use std::os::unix::fs::MetadataExt;
        Witness {
            size: meta.size(),
            mtime_ns: nanos(meta.mtime(), meta.mtime_nsec()),
        }
    }
}

/// Seconds and nanoseconds as nanoseconds, saturating past 2262.
fn nanos(secs: i64, nsec: i64) -> i64 {
    secs.saturating_mul(1_000_000_000).saturating_add(nsec)
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

/// Totals for logs and metrics.
#[derive(Debug, Clone, Copy, Default)]
pub struct SnapshotStats {
    pub files: u64,
    /// Identity body bytes held in the arena.
    pub mem_bytes: u64,
    /// Body bytes served from fds.
    pub file_bytes: u64,
    /// Files served from fds (each needs one while it is being sent).
    pub large_files: u64,
    /// Body bytes of those that get variants when compression is on
    /// (compressible, at most `compress_max_file_bytes`): with `mem_bytes`,
    /// what a compressing build has to read and compress (counted as
    /// files are loaded; the start's choice of compressing before serving
    /// or in the background reads it).
    pub compressible_file_bytes: u64,
    /// Compressed variant bytes (in the arena, or in large sidecars sent
    /// from their fd): br, zstd, gzip ([`SIDECARS`] order).
    pub encoded_bytes: [u64; 3],
    /// Entries carried over unchanged from the previous snapshot.
    pub reused: u64,
    /// Entries read (and compressed) by this build.
    pub loaded: u64,
    /// Files and directories this build stat'ed or listed.
    pub paths_examined: u64,
    /// Body bytes this build copied into new memory (changed files, and
    /// live bodies of compacted segments); bodies in shared segments are
    /// not copied.
    pub bytes_copied: u64,
    /// Body segments the snapshot references, and how many it shares with
    /// the previous generation.
    pub segments: u64,
    pub segments_shared: u64,
}

/// Facts of the walk behind a snapshot that decide whether the next
/// rebuild may patch it from the paths inotify reported rather than walk
/// the whole root again.
#[derive(Debug, Clone, Default)]
pub struct Walked {
    /// The canonical root walked; another one (a root swap) is walked in
    /// full.
    pub root: PathBuf,
    /// The walk followed a symlink: a change under its target is reported
    /// under the target's path only, so every rebuild walks in full.
    pub symlinks: bool,
    /// `cache_max_bytes` left a small file out of memory or a variant out:
    /// a full walk decides who gets the budget, in walk order.
    pub budget_spent: bool,
}

/// An immutable view of the document root.
pub struct Snapshot {
    pub generation: u64,
    pub stats: SnapshotStats,
    /// Built with compressed variants (`BuildOptions::compress` was set).
    pub compressed: bool,
    /// A first build past `preload_max_files`: its files are sent from disk
    /// until the background load publishes them in memory.
    pub from_disk: bool,
    index: PathIndex,
    entries: Entries,
    /// Indices of `entries` no path points to any more (left by
    /// incremental rebuilds, reused by the next ones).
    free: Vec<u32>,
    /// Read-only anonymous memory holding every `Body::Mem`, by slot; an
    /// incremental rebuild drops and adds slots without renumbering the
    /// others, so entries it does not touch stay valid as they are.
    segments: Vec<Option<Segment>>,
    /// Body bytes still served from each slot of `segments`.
    segment_live: Vec<u64>,
    /// What an incremental rebuild needs to know about the walk.
    walked: Walked,
    /// Status code → entry served as that error's body.
    error_pages: Vec<(u16, u32)>,
    /// The entry of `/index.html` when the SPA fallback is on.
    spa_index: Option<u32>,
    /// `Cache-Control` lines of error and redirect responses.
    status_cache_control: StatusCacheControl,
}

impl Snapshot {
    /// Look up a normalised path (as produced by `http::path::normalize`).
    pub fn resolve(&self, path: &[u8]) -> Option<Resource> {
        self.index.get(path)
    }

    #[inline]
    pub fn entry(&self, index: u32) -> EntryRef<'_> {
        self.entries.get(index)
    }

    /// The bytes of a `Body::Mem`.
    pub fn mem(&self, off: usize, len: usize) -> &[u8] {
        if len == 0 {
            return &[];
        }
        let (segment, at) = unpack_off(off);
        match &self.segments[segment] {
            Some(segment) => &segment[at..at + len],
            None => unreachable!("a body points into a dropped segment"),
        }
    }

    /// The page configured for an error status, if the snapshot has it.
    pub fn error_page(&self, code: u16) -> Option<u32> {
        self.error_pages
            .iter()
            .find_map(|&(c, idx)| (c == code).then_some(idx))
    }

    /// The `Cache-Control: …\r\n` line for a non-200 `status`
    /// (`error_cache_control`, `redirect_cache_control`), or empty.
    pub fn status_cache_control(&self, status: crate::http::Status) -> &[u8] {
        self.status_cache_control.line(status)
    }

    /// The URL paths of every file (not the `dir/` aliases of index files).
    pub fn file_urls(&self) -> impl Iterator<Item = &[u8]> {
        self.index
            .iter()
            .filter(|(url, r)| matches!(r, Resource::File(_)) && !url.ends_with(b"/"))
            .map(|(url, _)| url)
    }

    /// The entry unknown extension-less paths fall back to.
    pub fn spa_index(&self) -> Option<u32> {
        self.spa_index
    }

    /// Number of entry slots (files served, and slots left free by
    /// incremental rebuilds).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// An empty snapshot, generation 0.
    pub fn empty() -> Self {
        Snapshot {
            generation: 0,
            stats: SnapshotStats::default(),
            compressed: false,
            from_disk: false,
            index: PathIndex::default(),
            entries: Entries::default(),
            free: Vec::new(),
            segments: Vec::new(),
            segment_live: Vec::new(),
            walked: Walked::default(),
            error_pages: Vec::new(),
            spa_index: None,
            status_cache_control: StatusCacheControl::default(),
        }
    }
}
