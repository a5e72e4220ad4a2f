//! The immutable snapshot of the document root, and how it is built.
//!
//! A [`Snapshot`] maps every servable path to an [`Entry`] whose response
//! heads are pre-rendered, so a hit on the hot path is one hash lookup and one
//! write. Small bodies are copied into one anonymous arena at build time, so a
//! file rewritten or truncated on disk can never reach a response (no shared
//! file mapping, no SIGBUS); large ones are sent with `sendfile` from an fd
//! opened at build time (see [`LargeFile`]).
//!
//! A rebuild reuses every unchanged file of the previous snapshot (same
//! [`FileStamp`]) and only reads and compresses what changed; the
//! [`watch`]er triggers it when the root changes on disk.

mod build;
mod compress;
pub mod open_files;
mod rules;
pub mod store;
pub mod watch;

use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::http::accept::Coding;

pub use build::build;
pub use compress::CompressOptions;
pub use open_files::{OpenFiles, RootDir};
pub use rules::CacheControl;
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
    /// Serve files and directories whose name starts with `.`.
    pub serve_dotfiles: bool,
    /// Precompressed variants; `None` builds identity only.
    pub compress: Option<CompressOptions>,
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
}

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

/// One file of the snapshot.
#[derive(Debug, Clone)]
pub struct Entry {
    /// `Content-Type: …\r\n`, with `; charset=utf-8` for text types.
    pub content_type_line: Box<[u8]>,
    /// Last-Modified as Unix seconds.
    pub last_modified: u64,
    /// The uncompressed representation. The only one whose body may be a
    /// [`Body::File`]: `conn::output` finds a file chunk's fd through it.
    pub identity: Repr,
    /// Compressed representations, always in memory, in server preference
    /// order (br, zstd, gzip): ties in `Accept-Encoding` go to the first.
    pub encoded: Vec<(Coding, Repr)>,
    /// The codings of `encoded`, same order, for `http::accept::negotiate`.
    pub codings: Box<[Coding]>,
    /// Responses depend on `Accept-Encoding` (there is at least one
    /// variant), so every head carries `Vary: Accept-Encoding`.
    pub vary: bool,
    /// What the files looked like when read; a rebuild reuses the entry
    /// while they still look the same.
    pub source: Source,
}

impl Entry {
    /// The representation for a negotiated coding (identity when the entry
    /// has no such variant).
    pub fn repr(&self, coding: Coding) -> &Repr {
        self.encoded
            .iter()
            .find(|(c, _)| *c == coding)
            .map_or(&self.identity, |(_, r)| r)
    }
}

/// The on-disk inputs of an entry: the file and the sidecars used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Source {
    pub stamp: FileStamp,
    /// `name.br`, `name.zst`, `name.gz` (in [`SIDECARS`] order), when present.
    pub sidecars: [Option<FileStamp>; 3],
}

/// Precompressed sidecar suffixes, in the order of [`Source::sidecars`].
pub const SIDECARS: [(Coding, &str); 3] = [
    (Coding::Brotli, ".br"),
    (Coding::Zstd, ".zst"),
    (Coding::Gzip, ".gz"),
];

/// One representation of an entry: identity or a compressed variant.
#[derive(Debug, Clone)]
pub struct Repr {
    pub len: u64,
    /// xxh3-128 of the bytes sent; the ETag is rendered from it.
    pub hash: u128,
    /// Strong ETag derived from the content, quotes included.
    pub etag: Box<[u8]>,
    /// `Content-Encoding: …\r\n`, empty for identity.
    pub encoding_line: &'static [u8],
    /// Fields shared by 200, 206 and 304: `Last-Modified`, `ETag`,
    /// `Accept-Ranges: bytes`, then `Cache-Control` and
    /// `Vary: Accept-Encoding` where they apply (each with CRLF).
    pub common: Box<[u8]>,
    /// The complete 200 head except `Date`, `Connection` and the final CRLF:
    /// status line, Server, Content-Type, Content-Length, encoding, common.
    pub head_200: Box<[u8]>,
    pub body: Body,
}

/// Where a representation's bytes are.
#[derive(Debug, Clone)]
pub enum Body {
    /// `len` bytes at `off` in the snapshot's arena.
    Mem { off: usize, len: usize },
    /// Sent with `sendfile` from an fd opened at build time.
    File(LargeFile),
}

/// A body served from its file. `stamp` is what the file looked like when its
/// ETag was computed; the connection re-checks it around each piece it sends
/// and closes instead of sending bytes of a different version. The fd is not
/// held by the snapshot: [`LargeFile::file`] opens it on demand beneath the
/// root and keeps it in the bounded [`OpenFiles`] cache.
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

/// Identity of a file's contents as far as the kernel tells: any write changes
/// `ctime`, and `ctime` cannot be set from user space.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileStamp {
    pub dev: u64,
    pub ino: u64,
    pub size: u64,
    pub mtime_ns: i128,
    pub ctime_ns: i128,
}

impl FileStamp {
    pub fn of(meta: &std::fs::Metadata) -> Self {
        use std::os::unix::fs::MetadataExt;
        FileStamp {
            dev: meta.dev(),
            ino: meta.ino(),
            size: meta.size(),
            mtime_ns: i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec()),
            ctime_ns: i128::from(meta.ctime()) * 1_000_000_000 + i128::from(meta.ctime_nsec()),
        }
    }
}

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
    /// Compressed variant bytes in the arena: br, zstd, gzip
    /// ([`SIDECARS`] order).
    pub encoded_bytes: [u64; 3],
    /// Entries carried over unchanged from the previous snapshot.
    pub reused: u64,
    /// Entries read (and compressed) by this build.
    pub loaded: u64,
}

/// Normalised path → resource. Keys come from the walk, not from clients,
/// so a fast non-keyed hash is safe; it is ~3× cheaper than SipHash on the
/// short paths every request looks up.
pub type PathIndex = HashMap<Box<[u8]>, Resource, rustc_hash::FxBuildHasher>;

/// An immutable view of the document root.
pub struct Snapshot {
    pub generation: u64,
    pub stats: SnapshotStats,
    /// Built with compressed variants (`BuildOptions::compress` was set).
    pub compressed: bool,
    index: PathIndex,
    entries: Vec<Entry>,
    /// Read-only anonymous memory holding every `Body::Mem`.
    arena: Option<memmap2::Mmap>,
    /// Status code → entry served as that error's body.
    error_pages: Vec<(u16, u32)>,
    /// The entry of `/index.html` when the SPA fallback is on.
    spa_index: Option<u32>,
}

impl Snapshot {
    /// Look up a normalised path (as produced by `http::path::normalize`).
    pub fn resolve(&self, path: &[u8]) -> Option<Resource> {
        self.index.get(path).copied()
    }

    pub fn entry(&self, index: u32) -> &Entry {
        &self.entries[index as usize]
    }

    /// The bytes of a `Body::Mem`.
    pub fn mem(&self, off: usize, len: usize) -> &[u8] {
        match &self.arena {
            Some(arena) => &arena[off..off + len],
            None => &[],
        }
    }

    /// The page configured for an error status, if the snapshot has it.
    pub fn error_page(&self, code: u16) -> Option<u32> {
        self.error_pages
            .iter()
            .find_map(|&(c, idx)| (c == code).then_some(idx))
    }

    /// The entry unknown extension-less paths fall back to.
    pub fn spa_index(&self) -> Option<u32> {
        self.spa_index
    }

    /// Number of entries.
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
            index: PathIndex::default(),
            entries: Vec::new(),
            arena: None,
            error_pages: Vec::new(),
            spa_index: None,
        }
    }
}
