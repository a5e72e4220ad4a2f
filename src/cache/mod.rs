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

mod budget;
mod build;
mod compress;
mod entry;
mod index;
pub mod open_files;
mod repr;
mod rules;
mod stamp;
pub mod store;
pub mod watch;

use std::path::PathBuf;
use std::sync::Arc;

pub use budget::{Budget, SiteBudget};
pub use build::{build, sidecars_rejected, DirHook, MAX_PATCH_PATHS};
pub use compress::CompressOptions;
pub use entry::{Entry, EntryRef, Frame, Resource};
pub use index::{Entries, PathIndex};
pub use open_files::{OpenFiles, RootDir};
pub use repr::{
    encoding_line, Body, LargeFile, Repr, ReprRef, Segment, Source, SEGMENT_SHIFT, SIDECARS,
};
pub(crate) use repr::{pack_off, unpack_off};
pub use rules::{
    CacheControl, DotfileAllow, HeaderRules, StatusCacheControl, DEFAULT_DOTFILE_ALLOW,
};
pub use stamp::{FileStamp, Witness};
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
    /// This site's share of `cache_max_bytes` on a server with several
    /// (`None`: the whole of it).
    pub budget: Option<SiteBudget>,
}

/// Default for `compress_max_file_bytes`: a 20 MB JSON file or a large JS
/// bundle is compressed, a video or disk image never is.
pub const DEFAULT_COMPRESS_MAX_FILE_BYTES: u64 = 32 * 1024 * 1024;

/// Default for `preload_max_files`: a root of 200 000 small files still
/// starts fully in memory (in about 2-3 s on 2 cores).
pub const DEFAULT_PRELOAD_MAX_FILES: u64 = 250_000;

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
    /// A newer generation replaced this one (set once by the store, after
    /// the swap): connections still sending its bodies finish them before
    /// they answer more (`io::output::Output::is_backlogged`).
    retired: std::sync::atomic::AtomicBool,
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

    /// A newer generation is being served instead.
    #[inline]
    pub fn retired(&self) -> bool {
        self.retired.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Mark this generation replaced (the store, after a swap).
    pub fn retire(&self) {
        self.retired
            .store(true, std::sync::atomic::Ordering::Relaxed);
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
            retired: std::sync::atomic::AtomicBool::new(false),
        }
    }
}
