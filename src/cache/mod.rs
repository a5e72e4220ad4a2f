//! The immutable snapshot of the document root, and how it is built.
//!
//! A [`Snapshot`] maps every servable path to an [`Entry`] whose response
//! heads are pre-rendered, so a hit on the hot path is one hash lookup and one
//! write. Small bodies are copied into one anonymous arena at build time, so a
//! file rewritten or truncated on disk can never reach a response (no shared
//! file mapping, no SIGBUS); large ones are sent with `sendfile` from an fd
//! opened at build time (see [`LargeFile`]).

mod build;
mod store;

use std::collections::HashMap;
use std::fs::File;
use std::path::PathBuf;

pub use build::build;
pub use store::Store;

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
#[derive(Debug)]
pub struct Entry {
    /// `Content-Type: …\r\n`, with `; charset=utf-8` for text types.
    pub content_type_line: Box<[u8]>,
    /// Last-Modified as Unix seconds.
    pub last_modified: u64,
    /// The uncompressed representation.
    pub identity: Repr,
}

/// One representation of an entry (identity, or later a compressed variant).
#[derive(Debug)]
pub struct Repr {
    pub len: u64,
    /// Strong ETag derived from the content, quotes included.
    pub etag: Box<[u8]>,
    /// `Content-Encoding: …\r\n`, empty for identity.
    pub encoding_line: &'static [u8],
    /// Fields shared by 200, 206 and 304:
    /// `Last-Modified`, `ETag`, `Accept-Ranges: bytes` (each with CRLF).
    pub common: Box<[u8]>,
    /// The complete 200 head except `Date`, `Connection` and the final CRLF:
    /// status line, Server, Content-Type, Content-Length, encoding, common.
    pub head_200: Box<[u8]>,
    pub body: Body,
}

/// Where a representation's bytes are.
#[derive(Debug)]
pub enum Body {
    /// `len` bytes at `off` in the snapshot's arena.
    Mem { off: usize, len: usize },
    /// Sent with `sendfile` from an fd opened at build time.
    File(LargeFile),
}

/// A body served from its file. `stamp` is what the file looked like when its
/// ETag was computed; the connection re-checks it around `sendfile` and closes
/// instead of sending bytes of a different version.
#[derive(Debug)]
pub struct LargeFile {
    pub file: File,
    pub stamp: FileStamp,
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
    /// Body bytes held in the arena.
    pub mem_bytes: u64,
    /// Body bytes served from fds.
    pub file_bytes: u64,
}

/// An immutable view of the document root.
pub struct Snapshot {
    pub generation: u64,
    pub stats: SnapshotStats,
    index: HashMap<Box<[u8]>, Resource>,
    entries: Vec<Entry>,
    /// Read-only anonymous memory holding every `Body::Mem`.
    arena: Option<memmap2::Mmap>,
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

    /// An empty snapshot, generation 0.
    pub fn empty() -> Self {
        Snapshot {
            generation: 0,
            stats: SnapshotStats::default(),
            index: HashMap::new(),
            entries: Vec::new(),
            arena: None,
        }
    }
}
