//! Walking the document root into a [`Snapshot`]: the build pipeline.
//!
//! A build runs in these stages, one file each:
//! 1. [`walk`] decides, once per build, what every path means (file,
//!    directory needing a slash, forbidden) and stats every file, with
//!    [`prefetch`] helpers listing directories ahead of it;
//! 2. [`plan`] marks each file for reuse (the previous snapshot holds it
//!    unchanged, same [`Source`](crate::cache::Source)) or for loading;
//! 3. [`load`] reads, hashes and compresses the files to load, spread over a
//!    scoped thread pool;
//! 4. [`mod@assemble`], meanwhile on the building thread, lays out every
//!    entry in walk order as its file arrives, with [`render`] producing its
//!    heads; then it builds the index and the body segments (reused bodies
//!    stay in the old snapshot's segments).
//!
//! The hot path never touches the filesystem except through `sendfile` on an
//! fd opened here.
//!
//! Helper threads (listing, loading) run at background priority
//! (`sys::lower_thread_priority`) so the shards win a contended core,
//! except in the first build ([`Mode::First`]): nothing is served yet, and
//! lowering it would only let unrelated processes delay the start.

mod arrivals;
mod assemble;
mod delta;
mod load;
mod place;
mod plan;
mod prefetch;
mod render;
mod sidecar;
mod walk;

#[cfg(test)]
mod tests;

use std::collections::HashSet;
use std::fmt;
use std::fs::{self, File, Metadata};
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use anyhow::Context;

use crate::cache::{BuildOptions, RootDir, Snapshot};
use assemble::{assemble, lay_out};
pub use delta::MAX_PATCH_PATHS;
use load::load_with;
use plan::Plan;
use prefetch::Prefetch;
use walk::Walk;

/// Called with each directory a full walk is about to list, before it
/// lists it: how the first build adds the inotify watch of every directory
/// (`cache::watch`), so that no change falls between a listing and its
/// watch.
pub type DirHook = dyn Fn(&Path) + Send + Sync;

/// Who a build is for.
#[derive(Clone, Copy)]
pub enum Mode<'a> {
    /// A rebuild while snapshots are served: helpers at background
    /// priority; a full walk hands each directory to `hook` (if any) before
    /// listing it, as the first build does (the rescan after lost events
    /// watches the directories whose creation was lost).
    Background { hook: Option<&'a DirHook> },
    /// Before anything is served: helpers at normal priority, and `hook`
    /// (if any) sees each directory before it is listed.
    First { hook: Option<&'a DirHook> },
}

impl Mode<'_> {
    /// Lower the calling helper thread's priority unless this is the first
    /// build.
    pub(super) fn enter_helper(self) {
        enter_helper(self.background());
    }

    fn background(self) -> bool {
        matches!(self, Mode::Background { .. })
    }

    /// Threads loading this build's files. A rebuild takes one per core,
    /// at background priority, and so does a build that compresses (the
    /// encoders keep the cores busy, and each holds its state in memory).
    /// The first build otherwise takes [`FIRST_LOADERS_PER_CORE`] per core
    /// (at most [`FIRST_LOADERS_MAX`], and never fewer than the cores): at
    /// start the page cache may not hold the root (after a reboot, or where
    /// idle pages are reclaimed), and a loader waiting on the disk then
    /// leaves its core to another instead of idle. (The listing helpers
    /// stay one per core: more of them made the walk of a cached root
    /// slower, waking each other.)
    pub(super) fn loaders(self, compressing: bool) -> usize {
        let cores = crate::sys::cores();
        match self {
            Mode::First { .. } if !compressing => {
                (cores * FIRST_LOADERS_PER_CORE).min(cores.max(FIRST_LOADERS_MAX))
            }
            _ => cores,
        }
    }
}

/// See [`Mode::loaders`]. Measured on 2 cores: a root of 200 000 files of
/// 1 KiB wholly on disk started in 6.2-6.4 s with 4 per core against
/// 9.4-9.5 s with one; a million with a tenth on disk in 9.3-10.9 s
/// against 12.5-12.9 s; in the page cache, within the noise of the
/// machine (old and new alternated).
const FIRST_LOADERS_PER_CORE: usize = 4;

/// See [`Mode::loaders`]: enough reads in flight for a disk, without a
/// thread (and a reserve chunk, see `place::reserve_len`) per core times
/// four on a large machine.
const FIRST_LOADERS_MAX: usize = 32;

/// [`Mode::enter_helper`] for a thread that cannot borrow the mode.
fn enter_helper(background: bool) {
    if background {
        crate::sys::lower_thread_priority();
    }
}

/// Start a build helper thread named `name` in `scope`, so that `top -H`
/// and profiles tell the helpers apart (unnamed, each would carry the name
/// of the thread that builds). Panics when no thread can be had, as
/// `Scope::spawn` does.
pub(super) fn spawn_helper<'scope>(
    scope: &'scope std::thread::Scope<'scope, '_>,
    name: &str,
    f: impl FnOnce() + Send + 'scope,
) {
    std::thread::Builder::new()
        .name(name.into())
        .spawn_scoped(scope, f)
        .expect("spawning a snapshot build helper");
}

/// Sidecars rejected by builds since start (stale or not matching their
/// source), by reason label.
pub fn sidecars_rejected() -> [(&'static str, u64); 2] {
    use sidecar::Rejected;
    use std::sync::atomic::Ordering;
    [Rejected::Older, Rejected::Mismatch].map(|r| {
        (
            r.label(),
            sidecar::SIDECARS_REJECTED[r as usize].load(Ordering::Relaxed),
        )
    })
}

/// The canonical root and its metadata; it must be a directory.
fn canonical_root(opts: &BuildOptions) -> anyhow::Result<(PathBuf, Metadata)> {
    let root = fs::canonicalize(&opts.root)
        .with_context(|| format!("document root {}", opts.root.display()))?;
    let root_meta =
        fs::metadata(&root).with_context(|| format!("document root {}", root.display()))?;
    anyhow::ensure!(
        root_meta.is_dir(),
        "document root {} is not a directory",
        root.display()
    );
    Ok((root, root_meta))
}

/// The root open: every file is opened beneath this fd
/// (`sys::open_beneath`), so a directory swapped for a symlink after the
/// walk cannot lead outside. It must still be the directory `root_meta`
/// describes.
fn open_root(root: &Path, root_meta: &Metadata) -> anyhow::Result<Arc<RootDir>> {
    let root_dir = File::open(root)
        .map_err(|err| match is_exhausted(&err) {
            true => exhausted(root, err),
            false => anyhow::Error::new(err),
        })
        .with_context(|| format!("opening document root {}", root.display()))?;
    let root_dir_meta = root_dir.metadata()?;
    if (root_dir_meta.dev(), root_dir_meta.ino()) != (root_meta.dev(), root_meta.ino()) {
        return Err(TreeChanged(root.to_path_buf()).into());
    }
    Ok(Arc::new(RootDir { dir: root_dir }))
}

/// `opts` with the compression levels for a root of `identity_mem`
/// in-memory body bytes (see `compress_fast_above`), when they differ.
pub(super) fn leveled(opts: &BuildOptions, identity_mem: u64) -> Option<BuildOptions> {
    let configured = opts.compress?;
    let levels = configured.for_root(identity_mem);
    (levels != configured).then(|| BuildOptions {
        compress: Some(levels),
        ..opts.clone()
    })
}

/// What a build produced.
// Built once per rebuild and moved straight into an `Arc`: boxing would only
// add an allocation.
#[allow(clippy::large_enum_variant)]
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

/// The process or the system ran out of file descriptors or memory while
/// reading `path`. Nothing is wrong with the file, so leaving it out would
/// publish a snapshot that 404s content that exists: the whole build fails
/// instead, the old snapshot stays, and the watcher retries.
#[derive(Debug)]
pub struct ResourceExhausted {
    pub path: PathBuf,
    pub err: io::Error,
}

impl fmt::Display for ResourceExhausted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "out of resources reading {}: {}",
            self.path.display(),
            self.err
        )
    }
}

impl std::error::Error for ResourceExhausted {}

/// EMFILE, ENFILE, ENOMEM, ENOBUFS: a shortage of the process or the system,
/// not a property of the file (see [`ResourceExhausted`]).
pub(super) fn is_exhausted(err: &io::Error) -> bool {
    matches!(
        err.raw_os_error(),
        Some(libc::EMFILE | libc::ENFILE | libc::ENOMEM | libc::ENOBUFS)
    )
}

/// `err` from reading `path` as a build failure.
pub(super) fn exhausted(path: &Path, err: io::Error) -> anyhow::Error {
    ResourceExhausted {
        path: path.to_path_buf(),
        err,
    }
    .into()
}

/// Test-only hook: when the file named by this variable (relative to the
/// canonical root's parent directory, so each test's root has its own)
/// exists once the walk and plan are done, the build creates
/// `<file>.reached` and waits (at most [`TEST_PAUSE_MAX`]) until `<file>` is
/// removed, so a test can change the tree between the walk and the opens
/// deterministically. A flag file holding a number holds only the build of
/// that generation (0: the background build of a start from disk or
/// without variants, see `Store::build_loaded`).
const TEST_PAUSE_ENV: &str = "SHARDHTTPD_TEST_PAUSE_BEFORE_OPEN";

/// Longest the test hook holds a build.
const TEST_PAUSE_MAX: Duration = Duration::from_secs(30);

fn test_pause_before_open(root: &Path, generation: u64) {
    static HOOK: OnceLock<Option<PathBuf>> = OnceLock::new();
    let Some(name) = HOOK.get_or_init(|| std::env::var_os(TEST_PAUSE_ENV).map(PathBuf::from))
    else {
        return;
    };
    let flag = root.parent().unwrap_or(root).join(name);
    let Ok(only) = fs::read_to_string(&flag) else {
        return;
    };
    let only = only.trim();
    if !only.is_empty() && only.parse() != Ok(generation) {
        return;
    }
    let mut reached = flag.clone().into_os_string();
    reached.push(".reached");
    let _ = fs::write(&reached, b"");
    let until = Instant::now() + TEST_PAUSE_MAX;
    while flag.exists() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(5));
    }
    let _ = fs::remove_file(&reached);
}

/// Walk `opts.root` and build generation `generation` from scratch.
pub fn build(opts: &BuildOptions, generation: u64) -> anyhow::Result<Snapshot> {
    match rebuild(opts, generation, None, &HashSet::new(), None)? {
        Built::New(snapshot) => Ok(snapshot),
        Built::Unchanged => unreachable!("a build without a previous snapshot is always new"),
    }
}

/// Walk `opts.root` and build generation `generation`, reusing the entries of
/// `old` whose files are unchanged. With `changed` (the paths inotify
/// reported since `old` was built), only those paths are looked at again
/// ([`delta::patch`]) unless the change needs a full walk.
///
/// Fails when the root itself cannot be read, when a listed path vanishes
/// mid-walk or is not the file the walk saw when opened ([`TreeChanged`]),
/// when fds or memory run out ([`ResourceExhausted`]), or when the arena
/// cannot be allocated; other
/// trouble with a single file or directory below it is logged and that path
/// is left out (404), or marked [`Resource::Forbidden`] when the kernel says
/// EACCES/EPERM. Symlinks are followed only to targets inside the canonical
/// root, which is resolved again on every build (a symlinked root may have
/// been switched). Files in `held` (canonical paths) have a writer that has
/// not closed them yet: they keep their version in `old`, or stay out.
pub fn rebuild(
    opts: &BuildOptions,
    generation: u64,
    old: Option<&Snapshot>,
    held: &HashSet<PathBuf>,
    changed: Option<&HashSet<PathBuf>>,
) -> anyhow::Result<Built> {
    let mode = Mode::Background { hook: None };
    rebuild_in(opts, generation, old, held, changed, mode)
}

/// [`rebuild`] by a full walk that hands every directory to `hook` before
/// listing it.
pub fn rebuild_watching(
    opts: &BuildOptions,
    generation: u64,
    old: Option<&Snapshot>,
    held: &HashSet<PathBuf>,
    hook: &DirHook,
) -> anyhow::Result<Built> {
    let mode = Mode::Background { hook: Some(hook) };
    rebuild_in(opts, generation, old, held, None, mode)
}

/// Build generation 1 before anything is served ([`Mode::First`]).
pub fn build_first(opts: &BuildOptions, hook: Option<&DirHook>) -> anyhow::Result<Snapshot> {
    match rebuild_in(opts, 1, None, &HashSet::new(), None, Mode::First { hook })? {
        Built::New(snapshot) => Ok(snapshot),
        Built::Unchanged => unreachable!("a build without a previous snapshot is always new"),
    }
}

/// What a full build holds per walked file only while it builds: the
/// walk's jobs and its path map. At a million files, some three million
/// small allocations.
type Scratch = (Vec<walk::FileJob>, crate::cache::index::Shard);

/// Free a full build's [`Scratch`] on a thread of its own, then hand the
/// freed heap back to the kernel, so that the new snapshot is served
/// without waiting for either: at a million files, about 0.2 s of `free`
/// and 0.4 s of `malloc_trim`. Inline when no thread can be had. The
/// thread is a helper like the others: below the shards in a rebuild.
fn free_aside(scratch: Scratch, mode: Mode<'_>) {
    let background = mode.background();
    let freeing = std::thread::Builder::new()
        .name("build-free".into())
        .spawn(move || {
            enter_helper(background);
            drop(scratch);
            crate::sys::trim_heap();
        });
    if freeing.is_err() {
        // The failed spawn dropped the closure, and the scratch with it.
        crate::sys::trim_heap();
    }
}

/// [`rebuild`] for `mode`.
fn rebuild_in(
    opts: &BuildOptions,
    generation: u64,
    old: Option<&Snapshot>,
    held: &HashSet<PathBuf>,
    changed: Option<&HashSet<PathBuf>>,
    mode: Mode<'_>,
) -> anyhow::Result<Built> {
    let started = Instant::now();
    // Entries built without variants cannot stand in for ones built with
    // them (or the other way round): a change of mode reloads everything.
    let old = old.filter(|o| o.compressed == opts.compress.is_some());
    if let (Some(old), Some(changed)) = (old, changed) {
        match delta::patch(opts, generation, old, held, changed)? {
            Ok(built) => return Ok(built),
            Err(why) => tracing::debug!(why, "walking the whole root"),
        }
    }
    let (root, root_meta) = canonical_root(opts)?;
    let (Mode::First { hook } | Mode::Background { hook }) = mode;
    // Nothing to compare stamps with and no compression levels to choose:
    // the walk need not stat regular files (see `Walk::lazy`).
    let lazy = matches!(mode, Mode::First { .. }) && old.is_none() && opts.compress.is_none();
    let prefetch = Prefetch::new(opts, hook, lazy);
    // Read the root up front so that an unreadable root fails the build instead
    // of producing an empty snapshot that 404s everything.
    let children = prefetch
        .list(&root)
        .with_context(|| format!("reading document root {}", root.display()))?;
    let root_dir = open_root(&root, &root_meta)?;
    let mut walk = Walk::new(opts, root.clone(), root_dir);
    walk.lazy = lazy;
    let mut ancestors = vec![(root_meta.dev(), root_meta.ino())];
    prefetch.push_children(&root, b"", &ancestors, &children);
    walk.prefetch = Some(&prefetch);
    let walked = std::thread::scope(|scope| {
        for _ in 0..crate::sys::cores() {
            spawn_helper(scope, "build-list", || {
                mode.enter_helper();
                prefetch.help();
            });
        }
        if prefetch.watches() {
            spawn_helper(scope, "build-watch", || {
                mode.enter_helper();
                prefetch.watch_ahead();
            });
        }
        let _stop = prefetch.stopper();
        let mut url = Vec::new();
        walk.walk_children(children, &root, &mut url, &mut ancestors)
    });
    walked?;
    walk.prefetch = None;
    walk.dirs.push(Box::default());

    let walked = started.elapsed();
    walk.from_disk = lazy && walk.files.len() as u64 > opts.preload_max_files;
    let plan = Plan::new(opts, &walk, old, held);
    if let Some(old) = old {
        if plan.is_unchanged(&walk, old) {
            tracing::debug!(
                elapsed_ms = started.elapsed().as_millis() as u64,
                "snapshot unchanged"
            );
            return Ok(Built::Unchanged);
        }
    }
    test_pause_before_open(&walk.root, generation);
    let planned = started.elapsed();
    let fast = leveled(opts, plan.identity_mem);
    // Entries are laid out as their files arrive, on this thread.
    let (laid, placed) = load_with(
        fast.as_ref().unwrap_or(opts),
        &walk,
        &plan,
        mode,
        true,
        |loaded| lay_out(opts, &walk, &plan, loaded, old),
    )?;
    let load_done = started.elapsed();
    let examined = walk.examined + 1;
    let (mut snapshot, scratch) = assemble(opts, walk, laid, placed, old, generation)?;
    free_aside(scratch, mode);
    snapshot.stats.paths_examined = examined;
    tracing::info!(
        generation,
        files = snapshot.stats.files,
        reused = snapshot.stats.reused,
        loaded = snapshot.stats.loaded,
        mem_bytes = snapshot.stats.mem_bytes,
        file_bytes = snapshot.stats.file_bytes,
        encoded_bytes = snapshot.stats.encoded_bytes.iter().sum::<u64>(),
        paths_examined = snapshot.stats.paths_examined,
        bytes_copied = snapshot.stats.bytes_copied,
        segments = snapshot.stats.segments,
        walk_ms = walked.as_millis() as u64,
        plan_ms = (planned - walked).as_millis() as u64,
        load_ms = (load_done - planned).as_millis() as u64,
        assemble_ms = (started.elapsed() - load_done).as_millis() as u64,
        elapsed_ms = started.elapsed().as_millis() as u64,
        "snapshot built"
    );
    Ok(Built::New(snapshot))
}
