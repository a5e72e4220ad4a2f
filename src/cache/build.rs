//! Walking the document root into a [`Snapshot`].
//!
//! A build runs in three passes:
//! 1. the **walk** decides, once per build, what every path means (file,
//!    directory needing a slash, forbidden) and stats every file;
//! 2. the **load** reads, hashes and compresses the files the previous
//!    snapshot does not already hold unchanged (same [`Source`]), spread over
//!    a scoped thread pool;
//! 3. **assembly** renders every entry's heads and lays the bodies out in a
//!    fresh arena, copying reused bodies from the old one.
//!
//! The hot path never touches the filesystem except through `sendfile` on an
//! fd opened here.

use std::ffi::OsString;
use std::fmt;
use std::fs::{self, File, Metadata, OpenOptions};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use xxhash_rust::xxh3::{xxh3_128, Xxh3Default};

use super::compress;
use super::{
    Body, BuildOptions, Entry, FileStamp, LargeFile, PathIndex, Repr, Resource, Snapshot,
    SnapshotStats, Source, SIDECARS,
};
use crate::http::accept::Coding;

/// How many times a file is read (or waited for, see [`STAMP_SETTLE`]) when
/// its stamp keeps changing under the read (it is being written). A file that
/// does not settle is not published: the old snapshot's version is kept, or
/// a new file stays out, until a later build finds it quiet.
const MAX_READ_ATTEMPTS: usize = 6;

/// Kernel file timestamps come from a coarse clock (one jiffy: up to 10 ms),
/// so two writes within one tick leave the same ctime and the stamp cannot
/// tell them apart. A stamp is trusted only once its ctime is at least this
/// old: any later write then shows as a newer ctime, both to the re-check
/// after a read here and to the connection's check around `sendfile`.
const STAMP_SETTLE: Duration = Duration::from_millis(20);

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

/// What a build produced.
pub enum Built {
    New(Snapshot),
    /// Every path means what it meant in the previous snapshot and every file
    /// is unchanged: nothing to swap.
    Unchanged,
}

/// A path listed by its directory vanished before it could be read: the tree
/// is changing under the walk, and a snapshot missing it would be a mix of two
/// states. The build fails; the change that removed it triggers another.
#[derive(Debug)]
pub struct TreeChanged(pub PathBuf);

impl fmt::Display for TreeChanged {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} vanished during the walk", self.0.display())
    }
}

impl std::error::Error for TreeChanged {}

/// Walk `opts.root` and build generation `generation` from scratch.
pub fn build(opts: &BuildOptions, generation: u64) -> anyhow::Result<Snapshot> {
    match rebuild(opts, generation, None)? {
        Built::New(snapshot) => Ok(snapshot),
        Built::Unchanged => unreachable!("a build without a previous snapshot is always new"),
    }
}

/// Walk `opts.root` and build generation `generation`, reusing the entries of
/// `old` whose files are unchanged.
///
/// Fails when the root itself cannot be read, when a listed path vanishes
/// mid-walk ([`TreeChanged`]), or when the arena cannot be allocated; other
/// trouble with a single file or directory below it is logged and that path
/// is left out (404), or marked [`Resource::Forbidden`] when the kernel says
/// EACCES/EPERM. Symlinks are followed only to targets inside the canonical
/// root, which is resolved again on every build (a symlinked root may have
/// been switched).
pub fn rebuild(
    opts: &BuildOptions,
    generation: u64,
    old: Option<&Snapshot>,
) -> anyhow::Result<Built> {
    let started = Instant::now();
    // Entries built without variants cannot stand in for ones built with
    // them (or the other way round): a change of mode reloads everything.
    let old = old.filter(|o| o.compressed == opts.compress.is_some());
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

    let mut walk = Walk::new(opts, root.clone());
    let mut ancestors = vec![(root_meta.dev(), root_meta.ino())];
    let mut url = Vec::new();
    walk.walk_children(children, &root, &mut url, &mut ancestors)?;
    walk.dirs.push(Box::default());

    let plan = Plan::new(opts, &walk, old);
    if let Some(old) = old {
        if plan.is_unchanged(&walk, old) {
            tracing::debug!(
                elapsed_ms = started.elapsed().as_millis() as u64,
                "snapshot unchanged"
            );
            return Ok(Built::Unchanged);
        }
    }
    let loaded = load_all(opts, &walk, &plan)?;
    let snapshot = assemble(opts, walk, plan, loaded, old, generation)?;
    tracing::info!(
        generation,
        files = snapshot.stats.files,
        reused = snapshot.stats.reused,
        loaded = snapshot.stats.loaded,
        mem_bytes = snapshot.stats.mem_bytes,
        file_bytes = snapshot.stats.file_bytes,
        encoded_bytes = snapshot.stats.encoded_bytes.iter().sum::<u64>(),
        elapsed_ms = started.elapsed().as_millis() as u64,
        "snapshot built"
    );
    Ok(Built::New(snapshot))
}

/// A regular file found by the walk.
struct FileJob {
    url: Box<[u8]>,
    /// Canonical (symlink-free as of the walk) path.
    path: PathBuf,
    /// As the walk saw it.
    stamp: FileStamp,
}

/// Pass 1: what the tree holds.
struct Walk<'a> {
    opts: &'a BuildOptions,
    /// Canonical root; every path opened lies inside it (as of the check).
    root: PathBuf,
    /// `Resource::File(i)` here indexes `files`, not yet the snapshot.
    index: PathIndex,
    files: Vec<FileJob>,
    /// URLs of walked directories (`""` for the root); `url + "/"` is added
    /// once it is known whether their `index.html` is servable.
    dirs: Vec<Box<[u8]>>,
}

impl<'a> Walk<'a> {
    fn new(opts: &'a BuildOptions, root: PathBuf) -> Self {
        Walk {
            opts,
            root,
            index: PathIndex::default(),
            files: Vec::new(),
            dirs: Vec::new(),
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
                    // A dangling link is a state of the tree, not a change.
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
                Err(err) if err.kind() == io::ErrorKind::NotFound => {
                    return Err(TreeChanged(target).into())
                }
                Err(err) => {
                    tracing::warn!(path = %target.display(), %err, "skipping symlink target");
                    return Ok(());
                }
            }
        } else {
            match fs::symlink_metadata(&path) {
                Ok(meta) => (path, meta),
                Err(err) if err.kind() == io::ErrorKind::NotFound => {
                    return Err(TreeChanged(path).into())
                }
                Err(err) => {
                    tracing::warn!(path = %path.display(), %err, "skipping unreadable entry");
                    return Ok(());
                }
            }
        };

        if meta.is_dir() {
            self.walk_dir(&path, &meta, url, ancestors)
        } else if meta.is_file() {
            let idx = u32::try_from(self.files.len())
                .context("more than u32::MAX files under the root")?;
            self.files.push(FileJob {
                url: url.as_slice().into(),
                path,
                stamp: FileStamp::of(&meta),
            });
            self.index
                .insert(url.as_slice().into(), Resource::File(idx));
            Ok(())
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
                self.index.insert(url.as_slice().into(), Resource::AddSlash);
                url.push(b'/');
                self.index
                    .insert(url.as_slice().into(), Resource::Forbidden);
                url.pop();
                return Ok(());
            }
            Err(err) if err.kind() == io::ErrorKind::NotFound => {
                return Err(TreeChanged(path.to_path_buf()).into())
            }
            Err(err) => {
                tracing::warn!(path = %path.display(), %err, "skipping unreadable directory");
                return Ok(());
            }
        };
        self.index.insert(url.as_slice().into(), Resource::AddSlash);
        ancestors.push(id);
        let result = self.walk_children(children, path, url, ancestors);
        ancestors.pop();
        result?;
        self.dirs.push(url.as_slice().into());
        Ok(())
    }

    /// The walk stamps of `job`'s sidecars, in [`SIDECARS`] order, with their
    /// indices in `files`.
    fn sidecars(&self, job: &FileJob) -> [Option<(u32, FileStamp)>; 3] {
        let mut key = Vec::with_capacity(job.url.len() + 4);
        SIDECARS.map(|(_, suffix)| {
            key.clear();
            key.extend_from_slice(&job.url);
            key.extend_from_slice(suffix.as_bytes());
            match self.index.get(key.as_slice()) {
                Some(Resource::File(j)) => Some((*j, self.files[*j as usize].stamp)),
                _ => None,
            }
        })
    }
}

/// Pass 1½: for each walked file, reuse the old entry or load it, and whether
/// its identity body goes in memory. Decided in walk order so the memory
/// budget is spent the same way on every build.
struct Plan {
    steps: Vec<Step>,
    /// Arena bytes planned for identity bodies; variants get what is left.
    identity_mem: u64,
}

#[derive(Debug, Clone, Copy)]
enum Step {
    /// The old snapshot's entry at this index is still accurate.
    Reuse(u32),
    Load {
        in_mem: bool,
    },
}

impl Plan {
    fn new(opts: &BuildOptions, walk: &Walk<'_>, old: Option<&Snapshot>) -> Plan {
        let mut identity_mem = 0u64;
        let steps = walk
            .files
            .iter()
            .map(|job| {
                let size = job.stamp.size;
                let in_mem = size < opts.sendfile_threshold
                    && identity_mem.saturating_add(size) <= opts.cache_max_bytes;
                if in_mem {
                    identity_mem += size;
                }
                let source = Source {
                    stamp: job.stamp,
                    sidecars: walk.sidecars(job).map(|s| s.map(|(_, stamp)| stamp)),
                };
                let reusable = old.and_then(|old| match old.resolve(&job.url) {
                    Some(Resource::File(i)) => {
                        let entry = old.entry(i);
                        let was_mem = matches!(entry.identity.body, Body::Mem { .. });
                        (entry.source == source && was_mem == in_mem).then_some(i)
                    }
                    _ => None,
                });
                match reusable {
                    Some(i) => Step::Reuse(i),
                    None => Step::Load { in_mem },
                }
            })
            .collect();
        Plan {
            steps,
            identity_mem,
        }
    }

    /// Every file reused from the same position and every path meaning the
    /// same: the old snapshot is still exact.
    fn is_unchanged(&self, walk: &Walk<'_>, old: &Snapshot) -> bool {
        if self.steps.len() != old.len()
            || !self
                .steps
                .iter()
                .enumerate()
                .all(|(i, s)| matches!(s, Step::Reuse(j) if *j as usize == i))
        {
            return false;
        }
        // With every entry at its old position, the walk's index is final
        // once directory slashes are added.
        let mut index = walk.index.clone();
        add_dir_slashes(&mut index, &walk.dirs);
        index == old.index
    }
}

/// `dir + "/"` serves the directory's `index.html` when that is servable, and
/// is 403 otherwise (no listings).
fn add_dir_slashes(index: &mut PathIndex, dirs: &[Box<[u8]>]) {
    let mut key = Vec::new();
    for dir in dirs {
        key.clear();
        key.extend_from_slice(dir);
        key.extend_from_slice(b"/index.html");
        let resource = match index.get(key.as_slice()) {
            Some(Resource::File(idx)) => Resource::File(*idx),
            _ => Resource::Forbidden,
        };
        key.truncate(dir.len() + 1);
        index.insert(key.as_slice().into(), resource);
    }
}

/// Pass 2's result for one file.
// Nearly every result is `Ok`: boxing it would only add an allocation.
#[allow(clippy::large_enum_variant)]
enum Loaded {
    Ok {
        file: LoadedFile,
        /// Variants in [`SIDECARS`] order (br, zstd, gzip), already judged
        /// worth keeping.
        variants: Vec<(Coding, Vec<u8>)>,
        /// Stamps of the sidecars used.
        sidecars: [Option<FileStamp>; 3],
    },
    Forbidden,
    Skip,
    /// Being written throughout: keep the old version if there is one.
    Unsettled,
}

/// Pass 2: load every `Step::Load` on `available_parallelism` scoped
/// threads. Compression dominates (brotli 11 runs at about 1 MB/s per core),
/// so the work is spread file by file through a shared cursor.
fn load_all(
    opts: &BuildOptions,
    walk: &Walk<'_>,
    plan: &Plan,
) -> anyhow::Result<Vec<Option<Loaded>>> {
    let todo: Vec<usize> = plan
        .steps
        .iter()
        .enumerate()
        .filter_map(|(i, s)| matches!(s, Step::Load { .. }).then_some(i))
        .collect();
    let mut results: Vec<Option<Loaded>> = Vec::new();
    results.resize_with(walk.files.len(), || None);
    if todo.is_empty() {
        return Ok(results);
    }
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(todo.len());
    let cursor = AtomicUsize::new(0);
    let failed: Mutex<Option<anyhow::Error>> = Mutex::new(None);
    let done: Vec<Vec<(usize, Loaded)>> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    // Builders share CPUs with the shards: the request path
                    // wins whenever both want a core.
                    crate::sys::lower_thread_priority();
                    let mut chunk = Vec::new();
                    let mut out = Vec::new();
                    loop {
                        let n = cursor.fetch_add(1, Ordering::Relaxed);
                        let Some(&i) = todo.get(n) else { break };
                        let Step::Load { in_mem } = plan.steps[i] else {
                            unreachable!()
                        };
                        match load_one(opts, walk, i, in_mem, &mut chunk) {
                            Ok(loaded) => out.push((i, loaded)),
                            Err(err) => {
                                // Stop every worker: the build has failed.
                                cursor.store(todo.len(), Ordering::Relaxed);
                                let mut slot = failed.lock().unwrap_or_else(|e| e.into_inner());
                                slot.get_or_insert(err);
                                break;
                            }
                        }
                    }
                    out
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
            .collect()
    });
    if let Some(err) = failed.into_inner().unwrap_or_else(|e| e.into_inner()) {
        return Err(err);
    }
    for (i, loaded) in done.into_iter().flatten() {
        results[i] = Some(loaded);
    }
    Ok(results)
}

/// Read, hash and compress one file; use its sidecars where present.
fn load_one(
    opts: &BuildOptions,
    walk: &Walk<'_>,
    i: usize,
    in_mem: bool,
    chunk: &mut Vec<u8>,
) -> anyhow::Result<Loaded> {
    let job = &walk.files[i];
    let policy = MemPolicy {
        below: opts.sendfile_threshold,
        budget: if in_mem { job.stamp.size } else { 0 },
    };
    let file = match open_regular(&job.path).and_then(|f| load_file(&job.path, f, policy, chunk)) {
        Ok(Some(file)) if !file.settled => return Ok(Loaded::Unsettled),
        Ok(Some(file)) => file,
        Ok(None) => {
            tracing::debug!(path = %job.path.display(), "skipping file replaced by a non-file");
            return Ok(Loaded::Skip);
        }
        Err(err) if is_forbidden(&err) => return Ok(Loaded::Forbidden),
        Err(err) if err.kind() == io::ErrorKind::NotFound => {
            return Err(TreeChanged(job.path.clone()).into())
        }
        Err(err) => {
            tracing::warn!(path = %job.path.display(), %err, "skipping file");
            return Ok(Loaded::Skip);
        }
    };
    let (_, compressible) = content_type(&job.path);
    let mut variants = Vec::new();
    let mut used = [None; 3];
    for (slot, sidecar) in walk.sidecars(job).into_iter().enumerate() {
        let coding = SIDECARS[slot].0;
        if let Some((j, _)) = sidecar {
            match read_sidecar(&walk.files[j as usize].path, opts.sendfile_threshold) {
                Ok(Some((bytes, stamp))) => {
                    used[slot] = Some(stamp);
                    variants.push((coding, bytes));
                }
                Ok(None) => {}
                Err(err) => {
                    tracing::warn!(path = %walk.files[j as usize].path.display(), %err, "skipping sidecar")
                }
            }
            continue;
        }
        let (Some(copts), LoadedBody::Mem(bytes)) = (&opts.compress, &file.body) else {
            continue;
        };
        if !compressible || (bytes.len() as u64) < copts.min_bytes {
            continue;
        }
        match compress::encode(coding, bytes, copts) {
            Ok(enc) if compress::worth_keeping(bytes.len() as u64, enc.len() as u64) => {
                variants.push((coding, enc));
            }
            Ok(_) => {}
            Err(err) => {
                tracing::warn!(path = %job.path.display(), ?coding, %err, "compression failed")
            }
        }
    }
    Ok(Loaded::Ok {
        file,
        variants,
        sidecars: used,
    })
}

/// A sidecar's bytes and stamp; `None` when it is too large to hold in memory
/// (variants are never sent from a file).
fn read_sidecar(path: &Path, below: u64) -> io::Result<Option<(Vec<u8>, FileStamp)>> {
    let file = open_regular(path)?;
    for _ in 0..MAX_READ_ATTEMPTS {
        let before = FileStamp::of(&file.metadata()?);
        if before.size >= below {
            return Ok(None);
        }
        if let Some(wait) = unsettled(&before, SystemTime::now()) {
            std::thread::sleep(wait);
            continue;
        }
        let bytes = read_prefix(&file, before.size)?;
        if FileStamp::of(&file.metadata()?) == before {
            return Ok(Some((bytes, before)));
        }
    }
    Err(io::Error::other("sidecar kept changing while read"))
}

/// Where an arena body's bytes come from at assembly.
enum Bytes {
    /// A range of the old snapshot's arena.
    Old {
        off: usize,
        len: usize,
    },
    New(Vec<u8>),
}

/// The inputs [`render_entry`] needs for one representation.
struct ReprParts {
    len: u64,
    hash: u128,
    body: Body,
}

/// Pass 3: entries in walk order, the final index, and the arena.
fn assemble(
    opts: &BuildOptions,
    walk: Walk<'_>,
    plan: Plan,
    loaded: Vec<Option<Loaded>>,
    old: Option<&Snapshot>,
    generation: u64,
) -> anyhow::Result<Snapshot> {
    let mut stats = SnapshotStats::default();
    let mut arena = ArenaPlan::default();
    let mut variant_budget = opts.cache_max_bytes.saturating_sub(plan.identity_mem);
    let mut entries = Vec::with_capacity(walk.files.len());
    let mut remap: Vec<Option<Resource>> = vec![None; walk.files.len()];

    for ((i, job), (step, loaded)) in walk
        .files
        .iter()
        .enumerate()
        .zip(plan.steps.iter().zip(loaded))
    {
        // A file that never held still keeps the version the old snapshot
        // has under its URL, if any.
        let step = match (*step, &loaded) {
            (Step::Load { .. }, Some(Loaded::Unsettled)) => {
                match old.and_then(|old| old.resolve(&job.url)) {
                    Some(Resource::File(o)) => Step::Reuse(o),
                    _ => continue,
                }
            }
            (step, _) => step,
        };
        let (identity, variants, source) = match (step, loaded) {
            (Step::Reuse(o), _) => {
                let old = old.expect("reuse needs an old snapshot");
                let entry = old.entry(o);
                stats.reused += 1;
                let identity = arena.carry(old, &entry.identity);
                let variants: Vec<_> = entry
                    .encoded
                    .iter()
                    .map(|(c, r)| (*c, r.len, r.hash, Bytes::from_old(&r.body)))
                    .collect();
                (identity, variants, entry.source)
            }
            (
                Step::Load { .. },
                Some(Loaded::Ok {
                    file,
                    variants,
                    sidecars,
                }),
            ) => {
                stats.loaded += 1;
                let body = match file.body {
                    LoadedBody::Mem(bytes) => arena.push(Bytes::New(bytes)),
                    LoadedBody::File(f) => Body::File(LargeFile {
                        file: Arc::new(f),
                        stamp: file.stamp,
                    }),
                };
                let identity = ReprParts {
                    len: file.len,
                    hash: file.hash,
                    body,
                };
                let variants: Vec<_> = variants
                    .into_iter()
                    .map(|(c, bytes)| (c, bytes.len() as u64, xxh3_128(&bytes), Bytes::New(bytes)))
                    .collect();
                let source = Source {
                    stamp: file.stamp,
                    sidecars,
                };
                (identity, variants, source)
            }
            (Step::Load { .. }, Some(Loaded::Forbidden)) => {
                remap[i] = Some(Resource::Forbidden);
                continue;
            }
            (Step::Load { .. }, Some(Loaded::Skip | Loaded::Unsettled) | None) => continue,
        };
        match identity.body {
            Body::Mem { len, .. } => stats.mem_bytes += len as u64,
            Body::File(_) => stats.file_bytes += identity.len,
        }
        let mut kept = Vec::with_capacity(variants.len());
        for (coding, len, hash, bytes) in variants {
            // Variants are a luxury: they get what the identity bodies left of
            // the budget, in walk order.
            if len > variant_budget {
                continue;
            }
            variant_budget -= len;
            let slot = SIDECARS.iter().position(|(c, _)| *c == coding).unwrap_or(0);
            stats.encoded_bytes[slot] += len;
            kept.push((
                coding,
                ReprParts {
                    len,
                    hash,
                    body: arena.push(bytes),
                },
            ));
        }
        let idx = u32::try_from(entries.len()).context("more than u32::MAX files")?;
        let cache_control = opts.cache_control.value_for(&job.url);
        entries.push(render_entry(
            opts,
            &job.path,
            cache_control,
            source,
            identity,
            kept,
        ));
        remap[i] = Some(Resource::File(idx));
    }
    stats.files = entries.len() as u64;

    let mut index = walk.index;
    index.retain(|_, r| match *r {
        Resource::File(j) => match remap[j as usize] {
            Some(new) => {
                *r = new;
                true
            }
            None => false,
        },
        _ => true,
    });
    add_dir_slashes(&mut index, &walk.dirs);

    let mut error_pages = Vec::new();
    let mut has_404 = false;
    for (code, rel) in &opts.error_pages {
        has_404 |= *code == 404;
        let url = format!("/{}", rel.trim_start_matches('/'));
        match index.get(url.as_bytes()) {
            Some(Resource::File(idx)) => error_pages.push((*code, *idx)),
            _ => {
                tracing::warn!(code, page = %url, "error page not in the snapshot; using plain text")
            }
        }
    }
    if !has_404 {
        if let Some(Resource::File(idx)) = index.get(&b"/404.html"[..]) {
            error_pages.push((404, *idx));
        }
    }
    let spa_index = match index.get(&b"/index.html"[..]) {
        Some(Resource::File(idx)) if opts.spa_fallback => Some(*idx),
        _ => None,
    };

    Ok(Snapshot {
        generation,
        stats,
        compressed: opts.compress.is_some(),
        index,
        entries,
        arena: arena.finish(old)?,
        error_pages,
        spa_index,
    })
}

impl Bytes {
    fn from_old(body: &Body) -> Bytes {
        match body {
            Body::Mem { off, len } => Bytes::Old {
                off: *off,
                len: *len,
            },
            Body::File(_) => unreachable!("variants are always in memory"),
        }
    }
}

/// The new arena's layout: every body's source, back to back. The arena is
/// allocated once at the end, at its exact size.
#[derive(Default)]
struct ArenaPlan {
    parts: Vec<Bytes>,
    len: usize,
}

impl ArenaPlan {
    fn push(&mut self, bytes: Bytes) -> Body {
        let len = match &bytes {
            Bytes::Old { len, .. } => *len,
            Bytes::New(v) => v.len(),
        };
        let off = self.len;
        self.len += len;
        if len > 0 {
            self.parts.push(bytes);
        }
        Body::Mem { off, len }
    }

    /// Carry an old representation over: its arena bytes are copied (cheap,
    /// and the new snapshot owns all of its memory), its fd is shared.
    fn carry(&mut self, _old: &Snapshot, repr: &Repr) -> ReprParts {
        let body = match &repr.body {
            Body::Mem { .. } => self.push(Bytes::from_old(&repr.body)),
            Body::File(large) => Body::File(large.clone()),
        };
        ReprParts {
            len: repr.len,
            hash: repr.hash,
            body,
        }
    }

    /// Copy every part into fresh anonymous memory and seal it read-only.
    fn finish(self, old: Option<&Snapshot>) -> anyhow::Result<Option<memmap2::Mmap>> {
        if self.len == 0 {
            return Ok(None);
        }
        let mut map = memmap2::MmapOptions::new()
            .len(self.len)
            .map_anon()
            .context("allocating the snapshot arena")?;
        let mut at = 0;
        for part in &self.parts {
            let bytes = match part {
                Bytes::Old { off, len } => old.map_or(&[][..], |o| o.mem(*off, *len)),
                Bytes::New(v) => v.as_slice(),
            };
            map[at..at + bytes.len()].copy_from_slice(bytes);
            at += bytes.len();
        }
        debug_assert_eq!(at, self.len);
        Ok(Some(
            map.make_read_only().context("sealing the snapshot arena")?,
        ))
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
    /// The stamp held still around the read (and was old enough to trust).
    settled: bool,
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
/// was written meanwhile and is read again, up to [`MAX_READ_ATTEMPTS`]. A
/// stamp younger than [`STAMP_SETTLE`] is waited out first. `Ok(Some)` with
/// `settled == false` when the file never held still.
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
        if let Some(wait) = unsettled(&before, SystemTime::now()) {
            if attempt < MAX_READ_ATTEMPTS {
                attempt += 1;
                std::thread::sleep(wait);
                continue;
            }
            // Still fresh on the last attempt: the read below may miss a
            // write within the same tick, so it cannot count as settled.
        }
        let fresh = unsettled(&before, SystemTime::now()).is_some();
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
        let settled = after == before && !fresh;
        if settled || attempt == MAX_READ_ATTEMPTS {
            if !settled {
                tracing::warn!(
                    path = %path.display(),
                    attempts = attempt,
                    "file kept changing while read; keeping its previous version"
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
                settled,
            }));
        }
        attempt += 1;
    }
}

/// How long until `stamp`'s ctime is [`STAMP_SETTLE`] old, if it is not yet.
fn unsettled(stamp: &FileStamp, now: SystemTime) -> Option<Duration> {
    let now_ns = now
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i128);
    let age_ns = now_ns - stamp.ctime_ns;
    let settle_ns = STAMP_SETTLE.as_nanos() as i128;
    (age_ns < settle_ns).then(|| {
        // A ctime ahead of our clock (skew between the coarse and fine
        // clocks) waits at most one settle period.
        Duration::from_nanos((settle_ns - age_ns).min(settle_ns) as u64)
    })
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
/// the URL's Cache-Control rule, the stamp and the content hashes, so an entry
/// is a pure function of its inputs and reused entries are simply rendered
/// again.
fn render_entry(
    opts: &BuildOptions,
    path: &Path,
    cache_control: Option<&str>,
    source: Source,
    identity: ReprParts,
    variants: Vec<(Coding, ReprParts)>,
) -> Entry {
    let (content_type, _) = content_type(path);
    let content_type_line = format!("Content-Type: {content_type}\r\n").into_bytes();
    let last_modified = last_modified_secs(source.stamp.mtime_ns, SystemTime::now());
    let date = httpdate::fmt_http_date(UNIX_EPOCH + Duration::from_secs(last_modified));
    let vary = !variants.is_empty();
    // Fields after the ETag, the same for every representation.
    let mut tail = Vec::with_capacity(64);
    tail.extend_from_slice(b"Accept-Ranges: bytes\r\n");
    if let Some(value) = cache_control {
        tail.extend_from_slice(b"Cache-Control: ");
        tail.extend_from_slice(value.as_bytes());
        tail.extend_from_slice(b"\r\n");
    }
    if vary {
        tail.extend_from_slice(b"Vary: Accept-Encoding\r\n");
    }

    let render = |coding: Coding, parts: ReprParts| -> Repr {
        // The ETag covers the bytes sent only, so it is the same on every
        // rebuild and every host serving the same bytes; the suffix keeps the
        // variants' tags apart from the identity's at a glance.
        let hash = parts.hash;
        let etag = match coding_token(coding) {
            None => format!("\"{hash:032x}\""),
            Some(token) => format!("\"{hash:032x}-{token}\""),
        }
        .into_bytes();
        let mut common = Vec::with_capacity(96 + tail.len());
        common.extend_from_slice(b"Last-Modified: ");
        common.extend_from_slice(date.as_bytes());
        common.extend_from_slice(b"\r\nETag: ");
        common.extend_from_slice(&etag);
        common.extend_from_slice(b"\r\n");
        common.extend_from_slice(&tail);

        let encoding_line = encoding_line(coding);
        let mut head_200 = Vec::with_capacity(160 + opts.server_line.len() + common.len());
        head_200.extend_from_slice(b"HTTP/1.1 200 OK\r\n");
        head_200.extend_from_slice(&opts.server_line);
        head_200.extend_from_slice(&content_type_line);
        head_200.extend_from_slice(format!("Content-Length: {}\r\n", parts.len).as_bytes());
        head_200.extend_from_slice(encoding_line);
        head_200.extend_from_slice(&common);
        Repr {
            len: parts.len,
            hash,
            etag: etag.into(),
            encoding_line,
            common: common.into(),
            head_200: head_200.into(),
            body: parts.body,
        }
    };
    let codings: Box<[Coding]> = variants.iter().map(|(c, _)| *c).collect();
    let encoded = variants
        .into_iter()
        .map(|(c, p)| (c, render(c, p)))
        .collect();
    let identity = render(Coding::Identity, identity);
    Entry {
        content_type_line: content_type_line.into(),
        last_modified,
        identity,
        encoded,
        codings,
        vary,
        source,
    }
}

/// The ETag suffix of a coding; `None` for identity.
fn coding_token(coding: Coding) -> Option<&'static str> {
    match coding {
        Coding::Identity => None,
        Coding::Brotli => Some("br"),
        Coding::Zstd => Some("zstd"),
        Coding::Gzip => Some("gzip"),
    }
}

fn encoding_line(coding: Coding) -> &'static [u8] {
    match coding {
        Coding::Identity => b"",
        Coding::Brotli => b"Content-Encoding: br\r\n",
        Coding::Zstd => b"Content-Encoding: zstd\r\n",
        Coding::Gzip => b"Content-Encoding: gzip\r\n",
    }
}

/// The media type for `path`, with `; charset=utf-8` on textual types (the
/// site's text is assumed UTF-8, and without a charset browsers guess), and
/// whether the type is worth compressing.
fn content_type(path: &Path) -> (String, bool) {
    let mime = mime_guess::from_path(path).first_or_octet_stream();
    let essence = mime.essence_str();
    let textual = mime.type_().as_str() == "text"
        || matches!(
            essence,
            "application/javascript" | "application/json" | "application/xml" | "image/svg+xml"
        );
    let compressible = compress::compressible(essence);
    if textual {
        (format!("{essence}; charset=utf-8"), compressible)
    } else {
        (essence.to_owned(), compressible)
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
    use crate::cache::{CacheControl, CompressOptions};
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
            compress: None,
            cache_control: CacheControl::default(),
            error_pages: Vec::new(),
            spa_fallback: false,
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
            assert_eq!(content_type(Path::new(name)).0, *want, "{name}");
        }
    }

    fn body<'s>(snap: &'s Snapshot, repr: &Repr) -> &'s [u8] {
        match repr.body {
            Body::Mem { off, len } => snap.mem(off, len),
            Body::File(_) => panic!("expected Mem"),
        }
    }

    fn fast_compress() -> Option<CompressOptions> {
        Some(CompressOptions {
            min_bytes: 256,
            brotli_level: 5,
            gzip_level: 6,
            zstd_level: 3,
        })
    }

    fn page(n: usize) -> Vec<u8> {
        format!(
            "<html><body>{}</body></html>\n",
            "<p>compressible text</p>".repeat(n)
        )
        .into_bytes()
    }

    fn rebuilt(o: &BuildOptions, generation: u64, old: &Snapshot) -> Option<Snapshot> {
        match rebuild(o, generation, Some(old)).unwrap() {
            Built::New(s) => Some(s),
            Built::Unchanged => None,
        }
    }

    #[test]
    fn rebuild_reuses_unchanged_files() {
        let dir = TempDir::new("incr");
        dir.write("a.html", &page(50));
        dir.write("b.txt", b"bee");
        dir.write("sub/c.css", b"body{}");
        let mut o = opts(&dir.0);
        o.compress = fast_compress();
        let first = build(&o, 1).unwrap();
        assert_eq!((first.stats.loaded, first.stats.reused), (3, 0));
        assert!(rebuilt(&o, 2, &first).is_none(), "nothing changed");

        dir.write("b.txt", b"bee, changed");
        let second = rebuilt(&o, 2, &first).expect("b.txt changed");
        assert_eq!((second.stats.loaded, second.stats.reused), (1, 2));
        let b = second.entry(file_idx(&second, b"/b.txt"));
        assert_eq!(body(&second, &b.identity), b"bee, changed");
        let a_old = first.entry(file_idx(&first, b"/a.html"));
        let a = second.entry(file_idx(&second, b"/a.html"));
        assert_eq!(body(&second, &a.identity), page(50));
        assert_eq!(a.identity.etag, a_old.identity.etag);
        assert_eq!(a.codings, a_old.codings);
        for ((c, r), (_, r_old)) in a.encoded.iter().zip(&a_old.encoded) {
            assert_eq!(body(&second, r), body(&first, r_old), "{c:?}");
            assert_eq!(r.etag, r_old.etag);
        }

        // Deleting, adding and renaming change the index even when no file
        // needs reading.
        fs::rename(dir.0.join("sub/c.css"), dir.0.join("sub/d.css")).unwrap();
        let third = rebuilt(&o, 3, &second).expect("renamed");
        assert_eq!(third.resolve(b"/sub/c.css"), None);
        file_idx(&third, b"/sub/d.css");
        // Entries are matched by URL, so only the renamed file is read again.
        assert_eq!((third.stats.loaded, third.stats.reused), (1, 2));
        fs::remove_dir_all(dir.0.join("sub")).unwrap();
        let fourth = rebuilt(&o, 4, &third).expect("removed");
        assert_eq!(fourth.stats.loaded, 0);
        assert_eq!(fourth.resolve(b"/sub"), None);
        assert_eq!(fourth.stats.files, 2);
    }

    #[test]
    fn variants_decode_to_the_original() {
        use std::io::Read;
        let dir = TempDir::new("variants");
        let html = page(100);
        dir.write("big.html", &html);
        dir.write("tiny.html", b"<p>hi</p>");
        dir.write("logo.png", &page(100));
        let mut o = opts(&dir.0);
        o.compress = fast_compress();
        let snap = build(&o, 1).unwrap();

        let e = snap.entry(file_idx(&snap, b"/big.html"));
        assert!(e.vary);
        assert_eq!(&*e.codings, &[Coding::Brotli, Coding::Zstd, Coding::Gzip]);
        let mut etags = vec![e.identity.etag.clone()];
        for (coding, r) in &e.encoded {
            let bytes = body(&snap, r);
            let mut out = Vec::new();
            match coding {
                Coding::Brotli => {
                    brotli::Decompressor::new(bytes, 4096)
                        .read_to_end(&mut out)
                        .unwrap();
                }
                Coding::Gzip => {
                    flate2::read::GzDecoder::new(bytes)
                        .read_to_end(&mut out)
                        .unwrap();
                }
                Coding::Zstd => out = zstd::stream::decode_all(bytes).unwrap(),
                Coding::Identity => unreachable!(),
            }
            assert_eq!(out, html, "{coding:?}");
            assert_eq!(r.len, bytes.len() as u64);
            let head = String::from_utf8_lossy(&r.head_200);
            assert!(
                head.contains(&format!("Content-Length: {}\r\n", r.len)),
                "{head}"
            );
            assert!(head.contains("Content-Encoding: "), "{head}");
            assert!(head.contains("Vary: Accept-Encoding\r\n"), "{head}");
            etags.push(r.etag.clone());
        }
        let ident = String::from_utf8_lossy(&e.identity.common);
        assert!(ident.contains("Vary: Accept-Encoding\r\n"), "{ident}");
        etags.sort();
        etags.dedup();
        assert_eq!(etags.len(), 4, "an ETag per representation");
        let sum: u64 = snap.stats.encoded_bytes.iter().sum();
        assert_eq!(sum, e.encoded.iter().map(|(_, r)| r.len).sum::<u64>());

        for path in [&b"/tiny.html"[..], b"/logo.png"] {
            let e = snap.entry(file_idx(&snap, path));
            assert!(!e.vary && e.encoded.is_empty());
            assert!(!String::from_utf8_lossy(&e.identity.common).contains("Vary"));
        }
    }

    #[test]
    fn sidecars_win_and_are_tracked() {
        let dir = TempDir::new("sidecar");
        dir.write("app.js", &page(40));
        dir.write("app.js.gz", b"precompressed gzip bytes");
        let mut o = opts(&dir.0);
        o.compress = fast_compress();
        let snap = build(&o, 1).unwrap();
        let e = snap.entry(file_idx(&snap, b"/app.js"));
        let gz = e.repr(Coding::Gzip);
        assert_eq!(body(&snap, gz), b"precompressed gzip bytes");
        assert!(e.source.sidecars[2].is_some());
        assert!(e.codings.contains(&Coding::Brotli), "others still computed");
        // The sidecar is served at its own URL too.
        file_idx(&snap, b"/app.js.gz");

        // Without compression the sidecar is still used.
        o.compress = None;
        let plain = build(&o, 2).unwrap();
        let e = plain.entry(file_idx(&plain, b"/app.js"));
        assert_eq!(&*e.codings, &[Coding::Gzip]);

        // Changing only the sidecar reloads the entry.
        dir.write("app.js.gz", b"new gzip bytes");
        let next = rebuilt(&o, 3, &plain).expect("sidecar changed");
        let e = next.entry(file_idx(&next, b"/app.js"));
        assert_eq!(body(&next, e.repr(Coding::Gzip)), b"new gzip bytes");
    }

    #[test]
    fn cache_control_error_pages_and_spa() {
        let dir = TempDir::new("pages");
        dir.write("index.html", b"<app>");
        dir.write("404.html", b"<h1>lost</h1>");
        dir.write("errors/403.html", b"<h1>no</h1>");
        dir.write("assets/app.js", b"js");
        let mut o = opts(&dir.0);
        o.cache_control = CacheControl::new(
            &[
                ("assets/**".into(), "immutable".into()),
                ("*.html".into(), "no-cache".into()),
            ],
            Some("max-age=60".into()),
        )
        .unwrap();
        o.error_pages = vec![
            (403, "errors/403.html".into()),
            (500, "missing.html".into()),
        ];
        let snap = build(&o, 1).unwrap();
        let cc = |path: &[u8]| {
            String::from_utf8_lossy(&snap.entry(file_idx(&snap, path)).identity.common).into_owned()
        };
        assert!(cc(b"/index.html").contains("Cache-Control: no-cache\r\n"));
        assert!(cc(b"/assets/app.js").contains("Cache-Control: immutable\r\n"));
        assert!(cc(b"/errors/403.html").contains("Cache-Control: no-cache\r\n"));
        assert_eq!(snap.error_page(404), Some(file_idx(&snap, b"/404.html")));
        assert_eq!(
            snap.error_page(403),
            Some(file_idx(&snap, b"/errors/403.html"))
        );
        assert_eq!(snap.error_page(500), None);
        assert_eq!(snap.spa_index(), None);
        o.spa_fallback = true;
        let snap = build(&o, 2).unwrap();
        assert_eq!(snap.spa_index(), Some(file_idx(&snap, b"/index.html")));
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
