//! Walking the document root into a [`Snapshot`].
//!
//! The walk decides, once per build, what every path means (file, directory
//! needing a slash, forbidden) and renders each file's 200 head, so the hot
//! path never touches the filesystem except through `sendfile` on an fd opened
//! here. Reading and hashing one file is kept separate from the walk
//! ([`load_file`], [`render_entry`]) so an incremental rebuild can reuse it.

use std::collections::HashMap;
use std::ffi::OsString;
use std::fs::{self, File, Metadata, OpenOptions};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use xxhash_rust::xxh3::{xxh3_128, Xxh3Default};

use super::{
    Body, BuildOptions, Entry, FileStamp, LargeFile, Repr, Resource, Snapshot, SnapshotStats,
};

/// How many times a file is read in total when its stamp keeps changing under
/// the read (it is being written). After the last attempt the last read is used.
const MAX_READ_ATTEMPTS: usize = 4;

/// Deepest directory nesting walked below the root. Bounds recursion (and the
/// blow-up from chains of symlinked directories) on hostile trees; deeper
/// directories are skipped with a warning.
const MAX_DEPTH: usize = 64;

/// Read size when streaming a large file through the hasher: big enough to
/// amortise the syscalls, small enough to stay in L2.
const HASH_CHUNK: usize = 256 * 1024;

/// The last second `httpdate` can render (9999-12-31T23:59:59Z); it panics
/// beyond, and `touch -d` can put an mtime there.
const MAX_HTTP_DATE_SECS: u64 = 253_402_300_799;

/// `(st_dev, st_ino)`: a directory's identity, for loop detection.
type DirId = (u64, u64);

/// Walk `opts.root` and build generation `generation`.
///
/// Fails only when the root itself cannot be read (or the arena cannot be
/// allocated); trouble with a single file or directory below it is logged and
/// that path is left out (404), or marked [`Resource::Forbidden`] when the
/// kernel says EACCES/EPERM. Symlinks are followed only to targets inside the
/// canonical root.
pub fn build(opts: &BuildOptions, generation: u64) -> anyhow::Result<Snapshot> {
    let started = Instant::now();
    let root = fs::canonicalize(&opts.root)
        .with_context(|| format!("document root {}", opts.root.display()))?;
    let root_meta =
        fs::metadata(&root).with_context(|| format!("document root {}", root.display()))?;
    anyhow::ensure!(
        root_meta.is_dir(),
        "document root {} is not a directory",
        root.display()
    );
    // Read the root up front so that an unreadable root fails the build instead
    // of producing an empty snapshot that 404s everything.
    let children = read_dir_sorted(&root)
        .with_context(|| format!("reading document root {}", root.display()))?;

    let mut builder = Builder::new(opts, root.clone());
    let mut ancestors = vec![(root_meta.dev(), root_meta.ino())];
    let mut url = Vec::new();
    builder.walk_children(children, &root, &mut url, &mut ancestors)?;
    builder.insert_dir_slash(b"");

    let snapshot = builder.finish(generation)?;
    tracing::info!(
        generation,
        files = snapshot.stats.files,
        mem_bytes = snapshot.stats.mem_bytes,
        file_bytes = snapshot.stats.file_bytes,
        elapsed_ms = started.elapsed().as_millis() as u64,
        "snapshot built"
    );
    Ok(snapshot)
}

/// The snapshot under construction.
struct Builder<'a> {
    opts: &'a BuildOptions,
    /// Canonical root; every path opened lies inside it (as of the check).
    root: PathBuf,
    index: HashMap<Box<[u8]>, Resource>,
    entries: Vec<Entry>,
    /// Small bodies, back to back; copied into the arena at the end. This
    /// briefly doubles their memory, but sizes the arena exactly without a
    /// second pass over files that may change in between.
    staging: Vec<u8>,
    stats: SnapshotStats,
    /// Reused for every streamed file.
    chunk: Vec<u8>,
}

impl<'a> Builder<'a> {
    fn new(opts: &'a BuildOptions, root: PathBuf) -> Self {
        Builder {
            opts,
            root,
            index: HashMap::new(),
            entries: Vec::new(),
            staging: Vec::new(),
            stats: SnapshotStats::default(),
            chunk: Vec::new(),
        }
    }

    /// Walk the (sorted) children of the directory at `dir`, whose URL path is
    /// `url` (empty for the root). `ancestors` holds the directories from the
    /// root down to `dir`: a child among them is a loop. Only ancestors are
    /// checked, so a directory reachable under two names (a symlink inside the
    /// root) is served under both.
    fn walk_children(
        &mut self,
        children: Vec<(OsString, fs::FileType)>,
        dir: &Path,
        url: &mut Vec<u8>,
        ancestors: &mut Vec<DirId>,
    ) -> anyhow::Result<()> {
        for (name, file_type) in children {
            if !self.opts.serve_dotfiles && name.as_bytes().starts_with(b".") {
                continue;
            }
            let url_len = url.len();
            url.push(b'/');
            url.extend_from_slice(name.as_bytes());
            let result = self.walk_child(dir.join(&name), file_type, url, ancestors);
            url.truncate(url_len);
            result?;
        }
        Ok(())
    }

    /// One directory entry. Errors returned are fatal to the build; per-file
    /// trouble is logged and skipped here.
    fn walk_child(
        &mut self,
        path: PathBuf,
        file_type: fs::FileType,
        url: &mut Vec<u8>,
        ancestors: &mut Vec<DirId>,
    ) -> anyhow::Result<()> {
        // From here on `path` has no symlink in any component, as of the check:
        // a symlink is replaced by its canonical target, which must lie inside
        // the root. A component swapped for a symlink after this check is not
        // caught (that needs openat2 RESOLVE_BENEATH); the final component is,
        // by O_NOFOLLOW in `open_regular`.
        let (path, meta) = if file_type.is_symlink() {
            let target = match fs::canonicalize(&path) {
                Ok(target) => target,
                Err(err) => {
                    tracing::warn!(path = %path.display(), %err, "skipping unresolvable symlink");
                    return Ok(());
                }
            };
            if !target.starts_with(&self.root) {
                tracing::debug!(path = %path.display(), target = %target.display(), "skipping symlink out of the root");
                return Ok(());
            }
            match fs::metadata(&target) {
                Ok(meta) => (target, meta),
                Err(err) => {
                    tracing::warn!(path = %target.display(), %err, "skipping symlink target");
                    return Ok(());
                }
            }
        } else {
            match fs::symlink_metadata(&path) {
                Ok(meta) => (path, meta),
                Err(err) => {
                    tracing::warn!(path = %path.display(), %err, "skipping vanished entry");
                    return Ok(());
                }
            }
        };

        if meta.is_dir() {
            self.walk_dir(&path, &meta, url, ancestors)
        } else if meta.is_file() {
            self.add_file(&path, url)
        } else {
            // FIFOs, sockets and devices are not documents; opening a FIFO
            // would even block the build.
            tracing::debug!(path = %path.display(), "skipping special file");
            Ok(())
        }
    }

    fn walk_dir(
        &mut self,
        path: &Path,
        meta: &Metadata,
        url: &mut Vec<u8>,
        ancestors: &mut Vec<DirId>,
    ) -> anyhow::Result<()> {
        let id = (meta.dev(), meta.ino());
        if ancestors.contains(&id) {
            tracing::warn!(path = %path.display(), "skipping directory loop");
            return Ok(());
        }
        // `ancestors` starts with the root, so its length is the depth.
        if ancestors.len() > MAX_DEPTH {
            tracing::warn!(path = %path.display(), max = MAX_DEPTH, "skipping directory nested too deep");
            return Ok(());
        }
        let children = match read_dir_sorted(path) {
            Ok(children) => children,
            Err(err) if is_forbidden(&err) => {
                // It exists, so name it (301, then 403) rather than 404.
                self.insert(url, Resource::AddSlash);
                url.push(b'/');
                self.insert(url, Resource::Forbidden);
                url.pop();
                return Ok(());
            }
            Err(err) => {
                tracing::warn!(path = %path.display(), %err, "skipping unreadable directory");
                return Ok(());
            }
        };
        self.insert(url, Resource::AddSlash);
        ancestors.push(id);
        let result = self.walk_children(children, path, url, ancestors);
        ancestors.pop();
        result?;
        let dir_url = url.clone();
        self.insert_dir_slash(&dir_url);
        Ok(())
    }

    /// `dir_url + "/"` serves the directory's `index.html` when that was
    /// servable, and is 403 otherwise (no listings).
    fn insert_dir_slash(&mut self, dir_url: &[u8]) {
        let mut key = dir_url.to_vec();
        key.extend_from_slice(b"/index.html");
        let resource = match self.index.get(key.as_slice()) {
            Some(Resource::File(idx)) => Resource::File(*idx),
            _ => Resource::Forbidden,
        };
        key.truncate(dir_url.len() + 1);
        self.insert(&key, resource);
    }

    fn add_file(&mut self, path: &Path, url: &[u8]) -> anyhow::Result<()> {
        let policy = MemPolicy {
            below: self.opts.sendfile_threshold,
            budget: self
                .opts
                .cache_max_bytes
                .saturating_sub(self.staging.len() as u64),
        };
        let loaded = match open_regular(path)
            .and_then(|file| load_file(path, file, policy, &mut self.chunk))
        {
            Ok(Some(loaded)) => loaded,
            Ok(None) => {
                tracing::debug!(path = %path.display(), "skipping file replaced by a non-file");
                return Ok(());
            }
            Err(err) if is_forbidden(&err) => {
                self.insert(url, Resource::Forbidden);
                return Ok(());
            }
            Err(err) => {
                tracing::warn!(path = %path.display(), %err, "skipping file");
                return Ok(());
            }
        };
        let body = match loaded.body {
            LoadedBody::Mem(bytes) => {
                let off = self.staging.len();
                self.staging.extend_from_slice(&bytes);
                self.stats.mem_bytes += bytes.len() as u64;
                Body::Mem {
                    off,
                    len: bytes.len(),
                }
            }
            LoadedBody::File(file) => {
                self.stats.file_bytes += loaded.len;
                Body::File(LargeFile {
                    file,
                    stamp: loaded.stamp,
                })
            }
        };
        let entry = render_entry(
            self.opts,
            path,
            &loaded.stamp,
            loaded.len,
            loaded.hash,
            body,
        );
        let idx =
            u32::try_from(self.entries.len()).context("more than u32::MAX files under the root")?;
        self.entries.push(entry);
        self.stats.files += 1;
        self.insert(url, Resource::File(idx));
        Ok(())
    }

    fn insert(&mut self, key: &[u8], resource: Resource) {
        self.index.insert(key.into(), resource);
    }

    fn finish(self, generation: u64) -> anyhow::Result<Snapshot> {
        let arena = if self.staging.is_empty() {
            None
        } else {
            let mut map = memmap2::MmapOptions::new()
                .len(self.staging.len())
                .map_anon()
                .context("allocating the snapshot arena")?;
            map.copy_from_slice(&self.staging);
            Some(map.make_read_only().context("sealing the snapshot arena")?)
        };
        Ok(Snapshot {
            generation,
            stats: self.stats,
            index: self.index,
            entries: self.entries,
            arena,
        })
    }
}

/// A directory's entries, sorted by name so entry indices and arena layout are
/// the same from build to build.
fn read_dir_sorted(dir: &Path) -> io::Result<Vec<(OsString, fs::FileType)>> {
    let mut children = Vec::new();
    for entry in fs::read_dir(dir)? {
        // An entry that fails here vanished or is unreadable mid-listing; the
        // rest of the directory is still worth serving.
        match entry.and_then(|e| Ok((e.file_name(), e.file_type()?))) {
            Ok(child) => children.push(child),
            Err(err) => tracing::warn!(dir = %dir.display(), %err, "skipping directory entry"),
        }
    }
    children.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
    Ok(children)
}

/// EACCES and EPERM: the path exists but we may not read it, so 403.
fn is_forbidden(err: &io::Error) -> bool {
    err.kind() == io::ErrorKind::PermissionDenied
}

/// Open a file the walk saw as regular. O_NOFOLLOW refuses a symlink swapped
/// in since the check; O_NONBLOCK keeps a FIFO swapped in from blocking the
/// open (a regular file ignores it, `sendfile` included).
fn open_regular(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
}

/// Which files [`load_file`] keeps in memory.
#[derive(Debug, Clone, Copy)]
struct MemPolicy {
    /// Files of this size or more are sent from their fd.
    below: u64,
    /// Arena bytes still free.
    budget: u64,
}

impl MemPolicy {
    fn fits(self, size: u64) -> bool {
        size < self.below && size <= self.budget
    }
}

/// One file read and hashed, not yet placed in a snapshot.
struct LoadedFile {
    /// The stamp the hashed content belongs to (see [`load_file`]).
    stamp: FileStamp,
    /// Bytes hashed, and so the body length.
    len: u64,
    /// xxh3-128 of the content.
    hash: u128,
    body: LoadedBody,
}

enum LoadedBody {
    Mem(Vec<u8>),
    File(File),
}

/// Read and hash `file` (opened from `path`, used for logs). Files that fit
/// `policy` are kept in memory; others are streamed through the hasher and
/// keep their fd.
/// `Ok(None)` when the fd is not a regular file (swapped since the walk).
///
/// The stamp is taken before and after each read; when they differ the file
/// was written meanwhile and is read again, up to [`MAX_READ_ATTEMPTS`]. If it
/// never settles, the last read is used with the stamp from *before* it: the
/// file has moved past that stamp, so the connection's check refuses to send
/// it from the fd until the next rebuild rather than sending bytes that don't
/// match the ETag.
fn load_file(
    path: &Path,
    file: File,
    policy: MemPolicy,
    chunk: &mut Vec<u8>,
) -> io::Result<Option<LoadedFile>> {
    let mut attempt = 1;
    loop {
        let meta = file.metadata()?;
        if !meta.is_file() {
            return Ok(None);
        }
        let before = FileStamp::of(&meta);
        let (len, hash, in_mem) = if policy.fits(before.size) {
            // Read at most the size we budgeted for; a file that grew shows up
            // as a changed stamp below.
            let bytes = read_prefix(&file, before.size)?;
            (bytes.len() as u64, xxh3_128(&bytes), Some(bytes))
        } else {
            let (len, hash) = hash_stream(&file, chunk)?;
            (len, hash, None)
        };
        let after = FileStamp::of(&file.metadata()?);
        let settled = after == before;
        if settled || attempt == MAX_READ_ATTEMPTS {
            if !settled {
                tracing::warn!(
                    path = %path.display(),
                    attempts = attempt,
                    "file kept changing while read; using the last read"
                );
            }
            let body = match in_mem {
                Some(bytes) => LoadedBody::Mem(bytes),
                None => LoadedBody::File(file),
            };
            return Ok(Some(LoadedFile {
                stamp: before,
                len,
                hash,
                body,
            }));
        }
        attempt += 1;
    }
}

/// Up to `size` bytes from the start of `file`, fewer if it ends first.
/// Positional reads leave the fd's offset alone.
fn read_prefix(file: &File, size: u64) -> io::Result<Vec<u8>> {
    let size = usize::try_from(size).map_err(|_| io::Error::other("file too large for memory"))?;
    let mut buf = vec![0; size];
    let mut filled = 0;
    while filled < size {
        match file.read_at(&mut buf[filled..], filled as u64) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
            Err(err) => return Err(err),
        }
    }
    buf.truncate(filled);
    Ok(buf)
}

/// Hash the whole of `file` in [`HASH_CHUNK`] pieces, so a large file never
/// has to fit in memory. Returns the bytes hashed and the hash.
fn hash_stream(file: &File, chunk: &mut Vec<u8>) -> io::Result<(u64, u128)> {
    chunk.resize(HASH_CHUNK, 0);
    let mut hasher = Xxh3Default::new();
    let mut pos = 0u64;
    loop {
        match file.read_at(chunk, pos) {
            Ok(0) => break,
            Ok(n) => {
                hasher.update(&chunk[..n]);
                pos += n as u64;
            }
            Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
            Err(err) => return Err(err),
        }
    }
    Ok((pos, hasher.digest128()))
}

/// Render the heads of one file. Everything here derives from the path name,
/// the stamp and the content hash, so an entry is a pure function of a loaded
/// file.
fn render_entry(
    opts: &BuildOptions,
    path: &Path,
    stamp: &FileStamp,
    len: u64,
    hash: u128,
    body: Body,
) -> Entry {
    let content_type_line = format!("Content-Type: {}\r\n", content_type(path)).into_bytes();
    let last_modified = last_modified_secs(stamp.mtime_ns, SystemTime::now());
    let date = httpdate::fmt_http_date(UNIX_EPOCH + Duration::from_secs(last_modified));
    // The ETag covers the content only, so it is the same on every rebuild
    // and every host serving the same bytes.
    let etag = format!("\"{hash:032x}\"").into_bytes();

    let mut common = Vec::with_capacity(96);
    common.extend_from_slice(b"Last-Modified: ");
    common.extend_from_slice(date.as_bytes());
    common.extend_from_slice(b"\r\nETag: ");
    common.extend_from_slice(&etag);
    common.extend_from_slice(b"\r\nAccept-Ranges: bytes\r\n");

    let encoding_line: &'static [u8] = b"";
    let mut head_200 = Vec::with_capacity(160 + opts.server_line.len());
    head_200.extend_from_slice(b"HTTP/1.1 200 OK\r\n");
    head_200.extend_from_slice(&opts.server_line);
    head_200.extend_from_slice(&content_type_line);
    head_200.extend_from_slice(format!("Content-Length: {len}\r\n").as_bytes());
    head_200.extend_from_slice(encoding_line);
    head_200.extend_from_slice(&common);

    Entry {
        content_type_line: content_type_line.into(),
        last_modified,
        identity: Repr {
            len,
            etag: etag.into(),
            encoding_line,
            common: common.into(),
            head_200: head_200.into(),
            body,
        },
    }
}

/// The media type for `path`, with `; charset=utf-8` on textual types: the
/// site's text is assumed UTF-8, and without a charset browsers guess.
fn content_type(path: &Path) -> String {
    let mime = mime_guess::from_path(path).first_or_octet_stream();
    let essence = mime.essence_str();
    let textual = mime.type_().as_str() == "text"
        || matches!(
            essence,
            "application/javascript" | "application/json" | "application/xml" | "image/svg+xml"
        );
    if textual {
        format!("{essence}; charset=utf-8")
    } else {
        essence.to_owned()
    }
}

/// Last-Modified in Unix seconds: the mtime, but never before the epoch, never
/// after `now` (RFC 9110 §8.8.2.1: not later than the response's Date) and
/// never past what an HTTP date can express.
fn last_modified_secs(mtime_ns: i128, now: SystemTime) -> u64 {
    let secs = mtime_ns.div_euclid(1_000_000_000).max(0);
    let mtime = u64::try_from(secs).unwrap_or(u64::MAX);
    let now = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    mtime.min(now).min(MAX_HTTP_DATE_SECS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{symlink, PermissionsExt};
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A scratch directory removed on drop.
    struct TempDir(PathBuf);

    impl TempDir {
        fn new(name: &str) -> Self {
            static NEXT: AtomicUsize = AtomicUsize::new(0);
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            let path = std::env::temp_dir().join(format!(
                "shardhttpd-build-{}-{name}-{n}",
                std::process::id()
            ));
            let _ = fs::remove_dir_all(&path);
            fs::create_dir_all(&path).unwrap();
            TempDir(path)
        }

        fn write(&self, rel: &str, content: &[u8]) -> PathBuf {
            let path = self.0.join(rel);
            fs::create_dir_all(path.parent().unwrap()).unwrap();
            fs::write(&path, content).unwrap();
            path
        }

        fn mkdir(&self, rel: &str) {
            fs::create_dir_all(self.0.join(rel)).unwrap();
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    fn opts(root: &Path) -> BuildOptions {
        BuildOptions {
            root: root.to_path_buf(),
            cache_max_bytes: 1 << 20,
            sendfile_threshold: 64 * 1024,
            server_line: b"Server: shardhttpd\r\n".to_vec(),
            serve_dotfiles: false,
        }
    }

    fn file_idx(snap: &Snapshot, path: &[u8]) -> u32 {
        match snap.resolve(path) {
            Some(Resource::File(idx)) => idx,
            other => panic!(
                "{}: expected a file, got {other:?}",
                String::from_utf8_lossy(path)
            ),
        }
    }

    fn etag(snap: &Snapshot, path: &[u8]) -> Vec<u8> {
        snap.entry(file_idx(snap, path)).identity.etag.to_vec()
    }

    fn is_mem(snap: &Snapshot, path: &[u8]) -> bool {
        matches!(
            snap.entry(file_idx(snap, path)).identity.body,
            Body::Mem { .. }
        )
    }

    #[test]
    fn index_keys_for_files_and_directories() {
        let dir = TempDir::new("keys");
        dir.write("index.html", b"<h1>root</h1>");
        dir.write("a/b.css", b"body{}");
        dir.write("docs/index.html", b"<h1>docs</h1>");
        dir.write("docs/guide.html", b"guide");
        dir.mkdir("empty");
        let snap = build(&opts(&dir.0), 7).unwrap();

        assert_eq!(snap.generation, 7);
        assert_eq!(snap.stats.files, 4);
        let root_index = file_idx(&snap, b"/index.html");
        assert_eq!(snap.resolve(b"/"), Some(Resource::File(root_index)));
        file_idx(&snap, b"/a/b.css");
        assert_eq!(snap.resolve(b"/a"), Some(Resource::AddSlash));
        assert_eq!(snap.resolve(b"/a/"), Some(Resource::Forbidden));
        let docs_index = file_idx(&snap, b"/docs/index.html");
        assert_eq!(snap.resolve(b"/docs/"), Some(Resource::File(docs_index)));
        assert_eq!(snap.resolve(b"/docs"), Some(Resource::AddSlash));
        file_idx(&snap, b"/docs/guide.html");
        assert_eq!(snap.resolve(b"/empty"), Some(Resource::AddSlash));
        assert_eq!(snap.resolve(b"/empty/"), Some(Resource::Forbidden));
        assert_eq!(snap.resolve(b"/missing"), None);
        assert_eq!(snap.resolve(b"/a/b.css/"), None);
    }

    #[test]
    fn root_without_index_is_forbidden() {
        let dir = TempDir::new("noindex");
        dir.write("x.txt", b"x");
        let snap = build(&opts(&dir.0), 1).unwrap();
        assert_eq!(snap.resolve(b"/"), Some(Resource::Forbidden));
    }

    #[test]
    fn missing_root_is_an_error() {
        let dir = TempDir::new("gone");
        let root = dir.0.join("nope");
        assert!(build(&opts(&root), 1).is_err());
    }

    #[test]
    fn dotfiles_skipped_unless_enabled() {
        let dir = TempDir::new("dot");
        dir.write(".env", b"SECRET=1");
        dir.write(".git/config", b"[core]");
        dir.write("visible.txt", b"hi");
        let snap = build(&opts(&dir.0), 1).unwrap();
        assert_eq!(snap.resolve(b"/.env"), None);
        assert_eq!(snap.resolve(b"/.git"), None);
        assert_eq!(snap.resolve(b"/.git/config"), None);
        file_idx(&snap, b"/visible.txt");

        let mut o = opts(&dir.0);
        o.serve_dotfiles = true;
        let snap = build(&o, 2).unwrap();
        file_idx(&snap, b"/.env");
        file_idx(&snap, b"/.git/config");
    }

    #[test]
    fn symlinks_followed_only_inside_root() {
        let outside = TempDir::new("outside");
        let secret = outside.write("secret.txt", b"top secret");
        let dir = TempDir::new("links");
        dir.write("real/page.html", b"page");
        symlink(&secret, dir.0.join("leak.txt")).unwrap();
        symlink(&outside.0, dir.0.join("leakdir")).unwrap();
        symlink(dir.0.join("real/page.html"), dir.0.join("alias.html")).unwrap();
        symlink(dir.0.join("real"), dir.0.join("aliasdir")).unwrap();
        // A loop back to the root must not recurse forever.
        symlink(&dir.0, dir.0.join("real/up")).unwrap();
        symlink(dir.0.join("nowhere"), dir.0.join("dangling")).unwrap();
        let snap = build(&opts(&dir.0), 1).unwrap();

        assert_eq!(snap.resolve(b"/leak.txt"), None);
        assert_eq!(snap.resolve(b"/leakdir"), None);
        assert_eq!(snap.resolve(b"/leakdir/secret.txt"), None);
        assert_eq!(snap.resolve(b"/dangling"), None);
        assert_eq!(snap.resolve(b"/real/up"), None);
        let alias = snap.entry(file_idx(&snap, b"/alias.html"));
        let Body::Mem { off, len } = alias.identity.body else {
            panic!("expected Mem")
        };
        assert_eq!(snap.mem(off, len), b"page");
        assert_eq!(snap.resolve(b"/aliasdir"), Some(Resource::AddSlash));
        assert_eq!(
            etag(&snap, b"/aliasdir/page.html"),
            etag(&snap, b"/real/page.html")
        );
    }

    #[test]
    fn etag_depends_on_content_only() {
        let dir = TempDir::new("etag");
        dir.write("one.txt", b"same bytes");
        dir.write("sub/two.css", b"same bytes");
        dir.write("other.txt", b"other bytes");
        let first = build(&opts(&dir.0), 1).unwrap();
        let second = build(&opts(&dir.0), 2).unwrap();

        let tag = etag(&first, b"/one.txt");
        assert_eq!(tag.len(), 34);
        assert!(tag.starts_with(b"\"") && tag.ends_with(b"\""));
        assert!(tag[1..33].iter().all(|b| b"0123456789abcdef".contains(b)));
        assert_eq!(etag(&first, b"/sub/two.css"), tag);
        assert_eq!(etag(&second, b"/one.txt"), tag);
        assert_ne!(etag(&first, b"/other.txt"), tag);
    }

    #[test]
    fn streamed_hash_matches_in_memory_hash() {
        let dir = TempDir::new("stream");
        // Several hash chunks and a ragged tail.
        let content: Vec<u8> = (0..HASH_CHUNK * 2 + 123)
            .map(|i| (i * 31 % 251) as u8)
            .collect();
        dir.write("big.bin", &content);
        let mut o = opts(&dir.0);
        o.cache_max_bytes = 1 << 30;
        o.sendfile_threshold = 1 << 30;
        let in_mem = build(&o, 1).unwrap();
        assert!(is_mem(&in_mem, b"/big.bin"));
        o.sendfile_threshold = 1024;
        let streamed = build(&o, 2).unwrap();
        assert!(!is_mem(&streamed, b"/big.bin"));
        assert_eq!(etag(&in_mem, b"/big.bin"), etag(&streamed, b"/big.bin"));
    }

    #[test]
    fn files_at_threshold_are_sent_from_fd() {
        let dir = TempDir::new("threshold");
        dir.write("small.txt", &[b'a'; 99]);
        dir.write("large.txt", &[b'b'; 100]);
        let mut o = opts(&dir.0);
        o.sendfile_threshold = 100;
        let snap = build(&o, 1).unwrap();
        assert!(is_mem(&snap, b"/small.txt"));
        let large = snap.entry(file_idx(&snap, b"/large.txt"));
        let Body::File(ref lf) = large.identity.body else {
            panic!("expected File")
        };
        assert_eq!(large.identity.len, 100);
        assert_eq!(lf.stamp, FileStamp::of(&lf.file.metadata().unwrap()));
        assert_eq!(snap.stats.mem_bytes, 99);
        assert_eq!(snap.stats.file_bytes, 100);

        // Threshold 0: nothing is below it, not even an empty file.
        dir.write("empty.txt", b"");
        o.sendfile_threshold = 0;
        let snap = build(&o, 2).unwrap();
        assert!(!is_mem(&snap, b"/empty.txt"));
        assert!(snap.arena.is_none());
    }

    #[test]
    fn cache_budget_overflow_is_sent_from_fd() {
        let dir = TempDir::new("budget");
        // Sorted walk: a.txt fills the budget, b.txt no longer fits, c.txt does.
        dir.write("a.txt", &[b'a'; 60]);
        dir.write("b.txt", &[b'b'; 60]);
        dir.write("c.txt", &[b'c'; 40]);
        let mut o = opts(&dir.0);
        o.cache_max_bytes = 100;
        let snap = build(&o, 1).unwrap();
        assert!(is_mem(&snap, b"/a.txt"));
        assert!(!is_mem(&snap, b"/b.txt"));
        assert!(is_mem(&snap, b"/c.txt"));
        assert_eq!(snap.stats.mem_bytes, 100);
        assert_eq!(snap.stats.file_bytes, 60);
    }

    #[test]
    fn head_200_exact_bytes() {
        let dir = TempDir::new("head");
        let path = dir.write("hello.txt", b"hello");
        // 2015-10-21T07:28:00Z
        let mtime = UNIX_EPOCH + Duration::from_secs(1_445_412_480);
        File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(mtime)
            .unwrap();
        let snap = build(&opts(&dir.0), 1).unwrap();
        let entry = snap.entry(file_idx(&snap, b"/hello.txt"));
        let etag = format!("\"{:032x}\"", xxh3_128(b"hello"));
        let common = format!(
            "Last-Modified: Wed, 21 Oct 2015 07:28:00 GMT\r\nETag: {etag}\r\nAccept-Ranges: bytes\r\n"
        );
        let head = format!(
            "HTTP/1.1 200 OK\r\nServer: shardhttpd\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: 5\r\n{common}"
        );
        assert_eq!(entry.last_modified, 1_445_412_480);
        assert_eq!(
            &*entry.content_type_line,
            b"Content-Type: text/plain; charset=utf-8\r\n"
        );
        assert_eq!(&*entry.identity.etag, etag.as_bytes());
        assert_eq!(&*entry.identity.common, common.as_bytes());
        assert_eq!(String::from_utf8_lossy(&entry.identity.head_200), head,);
        assert_eq!(entry.identity.encoding_line, b"");
    }

    #[test]
    fn mem_returns_content() {
        let dir = TempDir::new("mem");
        dir.write("a.txt", b"alpha");
        dir.write("b.txt", b"");
        dir.write("c.txt", b"gamma!");
        let snap = build(&opts(&dir.0), 1).unwrap();
        for (path, content) in [
            (&b"/a.txt"[..], &b"alpha"[..]),
            (b"/b.txt", b""),
            (b"/c.txt", b"gamma!"),
        ] {
            let entry = snap.entry(file_idx(&snap, path));
            let Body::Mem { off, len } = entry.identity.body else {
                panic!("expected Mem")
            };
            assert_eq!(entry.identity.len, content.len() as u64);
            assert_eq!(snap.mem(off, len), content);
        }
        assert_eq!(snap.stats.mem_bytes, 11);
    }

    #[test]
    fn zero_length_file_needs_no_arena() {
        let dir = TempDir::new("empty");
        dir.write("zero.txt", b"");
        let snap = build(&opts(&dir.0), 1).unwrap();
        let entry = snap.entry(file_idx(&snap, b"/zero.txt"));
        let Body::Mem { off, len } = entry.identity.body else {
            panic!("expected Mem")
        };
        assert_eq!(snap.mem(off, len), b"");
        assert!(snap.arena.is_none());
        assert!(entry
            .identity
            .head_200
            .windows(19)
            .any(|w| w == b"Content-Length: 0\r\n"));
    }

    #[test]
    fn unreadable_file_and_directory_are_forbidden() {
        let dir = TempDir::new("perm");
        let file = dir.write("locked.txt", b"no");
        dir.write("lockeddir/inner.txt", b"no");
        fs::set_permissions(&file, fs::Permissions::from_mode(0o000)).unwrap();
        fs::set_permissions(dir.0.join("lockeddir"), fs::Permissions::from_mode(0o000)).unwrap();
        // Root ignores permission bits; then there is nothing to test.
        let enforced = File::open(&file).is_err();
        let snap = build(&opts(&dir.0), 1).unwrap();
        fs::set_permissions(dir.0.join("lockeddir"), fs::Permissions::from_mode(0o755)).unwrap();
        if enforced {
            assert_eq!(snap.resolve(b"/locked.txt"), Some(Resource::Forbidden));
            assert_eq!(snap.resolve(b"/lockeddir"), Some(Resource::AddSlash));
            assert_eq!(snap.resolve(b"/lockeddir/"), Some(Resource::Forbidden));
            assert_eq!(snap.resolve(b"/lockeddir/inner.txt"), None);
        }
    }

    #[test]
    fn content_types() {
        let table: &[(&str, &str)] = &[
            ("a.html", "text/html; charset=utf-8"),
            ("a.css", "text/css; charset=utf-8"),
            ("a.js", "text/javascript; charset=utf-8"),
            ("a.mjs", "application/javascript; charset=utf-8"),
            ("a.json", "application/json; charset=utf-8"),
            ("a.svg", "image/svg+xml; charset=utf-8"),
            ("a.png", "image/png"),
            ("noext", "application/octet-stream"),
        ];
        for (name, want) in table {
            assert_eq!(content_type(Path::new(name)), *want, "{name}");
        }
    }

    #[test]
    fn last_modified_is_clamped() {
        let now = UNIX_EPOCH + Duration::from_secs(2_000_000_000);
        assert_eq!(
            last_modified_secs(1_500_000_000_123_456_789, now),
            1_500_000_000
        );
        assert_eq!(last_modified_secs(-5, now), 0);
        assert_eq!(
            last_modified_secs(3_000_000_000_000_000_000, now),
            2_000_000_000
        );
        let far = UNIX_EPOCH + Duration::from_secs(u64::MAX / 4);
        assert_eq!(last_modified_secs(i128::MAX, far), MAX_HTTP_DATE_SECS);
    }
}
