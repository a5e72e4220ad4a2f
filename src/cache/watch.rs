//! Rebuild the snapshot when the document root changes on disk.
//!
//! [`Watcher::establish`] sets up an inotify watcher (through `notify`) on
//! the canonical root and on the configured root's parent directory, so
//! that switching a symlinked root (`current -> releases/43`, renamed into
//! place) is seen too. It runs before the initial build, and that build's
//! walk hands every directory to [`Watcher::dir_hook`] just before listing
//! it, which watches it: every change made during or after the walk is an
//! event, no change falls between a listing and the watch that should
//! report it, and the tree is walked once (`notify`'s own recursive watch
//! would walk it again and `stat` every file). Directories created or
//! renamed in later are watched (recursively) before the rebuild that walks
//! them; a new root after a swap is watched recursively.
//!
//! The inotify callback never blocks: it folds events into one [`Pending`]
//! record under a mutex and wakes the watcher thread through a channel of
//! capacity one, so a burst of events costs a bounded amount of memory
//! (paths of new directories and of files being written are capped; beyond
//! the cap the record asks for a full rescan instead).
//!
//! The record also gathers the paths the events name: a rebuild looks at
//! those again and patches the previous snapshot (`build::delta`). It walks
//! the whole root instead after an overflow, on a root swap, past
//! [`MAX_CHANGED_PATHS`], after a failed rebuild and on the safety rescan;
//! such a walk, like the first, watches each directory before listing it,
//! so one whose creation an overflow lost is watched from then on.
//!
//! The thread debounces (a rebuild starts once the tree has been quiet for
//! the debounce period), and rebuilds:
//! - at once, skipping the debounce, after a queue overflow (`IN_Q_OVERFLOW`)
//!   or a watch that could not be added;
//! - after adding (and waiting for) the watch of every directory created
//!   since the last rebuild, so a directory created and filled before
//!   `notify` watched it is still walked after its watch exists;
//! - holding files a writer still has open (`IN_MODIFY` without
//!   `IN_CLOSE_WRITE`) at their old version, for at most `write_settle_max`.
//!
//! Without inotify (or out of watches) the thread falls back to periodic
//! rescans, which cost a walk and a `stat` per file when nothing changed.

use std::collections::{HashMap, HashSet};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use notify::event::{AccessKind, AccessMode, CreateKind, Event, EventKind, ModifyKind, RenameMode};
use notify::{RecommendedWatcher, RecursiveMode, Watcher as _};

use super::Store;

/// Longest a rebuild is put off while events keep coming, in debounce
/// periods: a tree that is never quiet (a log file written inside the root)
/// must not starve rebuilds.
const MAX_DEFER_PERIODS: u32 = 10;

/// New directories remembered between two rebuilds; past this a full
/// rescan is asked for instead of adding their watches one by one.
const MAX_NEW_DIRS: usize = 4096;

/// Changed paths remembered between two rebuilds; past this the next
/// rebuild walks the whole root instead of looking at each.
const MAX_CHANGED_PATHS: usize = super::MAX_PATCH_PATHS;

/// Files tracked as open for writing; past this, further writers are not
/// held (the build's own settle check still keeps a file read mid-write
/// out of the snapshot).
const MAX_WRITING: usize = 4096;

/// Test-only hook, named relative to the root's parent directory: while
/// that file exists, the inotify callback drops every event (as a queue
/// overflow loses them), and when it is removed the callback reports an
/// overflow. It makes the overflow path testable without filling the
/// kernel's queue, whose size is a system-wide setting.
const TEST_DROP_ENV: &str = "SHARDHTTPD_TEST_DROP_EVENTS";

/// How the watcher behaves; derived once from the config.
#[derive(Debug, Clone, Copy)]
pub struct WatchOptions {
    /// Quiet time after the last event before rebuilding.
    pub debounce: Duration,
    /// Rescan period without inotify, and the retry period after a failed
    /// rebuild.
    pub rescan_interval: Duration,
    /// Longest a file with a writer still open is held at its old version.
    pub write_settle_max: Duration,
}

/// Even with inotify working, rescan this often: a safety net for anything
/// inotify cannot report (a change on another host of a network filesystem,
/// a bind mount). An unchanged rescan costs a walk and a `stat` per file
/// and swaps nothing.
const SAFETY_RESCAN: Duration = Duration::from_secs(60);

/// What the inotify callback has seen since the watcher thread last looked.
#[derive(Debug, Default)]
struct Pending {
    /// Something relevant changed.
    changed: bool,
    /// Events were lost (queue overflow) or a watch could not be added:
    /// rebuild at once from a full walk.
    rescan: bool,
    /// The watcher failed; only rescans are reliable now.
    failed: Option<String>,
    /// Directories created since the last rebuild; their watches are added
    /// (and waited for) before it walks.
    new_dirs: Vec<PathBuf>,
    /// The paths events named since the last rebuild: all it looks at
    /// again, unless `full` is set.
    paths: HashSet<PathBuf>,
    /// Something changed that the paths do not describe (the root's name
    /// in its parent, too many paths): the next rebuild walks the whole
    /// root.
    full: bool,
    /// Files with a write (`IN_MODIFY`) not yet followed by a close
    /// (`IN_CLOSE_WRITE`), with the time of the first such write.
    writing: HashMap<PathBuf, Instant>,
}

impl Pending {
    /// Fold one event in. Reads never change what is served; in the parent
    /// directory only the root's own name matters.
    fn apply(&mut self, event: &Event, link: &Path, parent: Option<&Path>, now: Instant) {
        if event.need_rescan() {
            self.rescan = true;
            self.changed = true;
            return;
        }
        if !relevant(event, link, parent) {
            return;
        }
        // Every relevant event names what to look at again; one on the
        // root's own name (a root swap) or naming nothing is a full walk.
        self.full |= event.paths.is_empty();
        for p in &event.paths {
            if p.as_path() == link {
                self.full = true;
            } else if p.parent() == parent {
                // A sibling of the root's name (the other end of a rename
                // into the root): nothing served.
            } else if self.paths.len() < MAX_CHANGED_PATHS {
                self.paths.insert(p.clone());
            } else {
                self.full = true;
            }
        }
        match event.kind {
            EventKind::Access(AccessKind::Close(AccessMode::Write)) => {
                for p in &event.paths {
                    self.writing.remove(p);
                }
            }
            EventKind::Access(_) => return,
            EventKind::Modify(ModifyKind::Data(_)) => {
                for p in &event.paths {
                    if self.writing.len() < MAX_WRITING {
                        self.writing.entry(p.clone()).or_insert(now);
                    }
                }
            }
            // A directory renamed in arrives unwatched (its old watch went
            // with the rename): watched like a new one.
            EventKind::Create(CreateKind::Folder)
            | EventKind::Modify(ModifyKind::Name(RenameMode::To)) => {
                for p in &event.paths {
                    if matches!(event.kind, EventKind::Modify(_)) {
                        // As for any rename (below).
                        self.writing.remove(p);
                        if !p.is_dir() {
                            continue;
                        }
                    }
                    if self.new_dirs.len() < MAX_NEW_DIRS {
                        self.new_dirs.push(p.clone());
                    } else {
                        self.rescan = true;
                    }
                }
            }
            EventKind::Remove(_) | EventKind::Modify(ModifyKind::Name(_)) => {
                // A file renamed away or deleted mid-write has no writer
                // left under that name.
                for p in &event.paths {
                    self.writing.remove(p);
                }
            }
            _ => {}
        }
        self.changed = true;
    }
}

/// The inbox shared with the inotify callback.
struct Inbox {
    pending: Mutex<Pending>,
}

impl Inbox {
    fn lock(&self) -> std::sync::MutexGuard<'_, Pending> {
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Set in the environment, the watcher behaves as if inotify were missing
/// and only rescans: how the tests reach the fallback a container without
/// inotify (or out of watches) takes. Read once, at start.
pub const NO_INOTIFY_ENV: &str = "SHARDHTTPD_NO_INOTIFY";

/// Watches established before the initial build; [`Watcher::spawn`] hands
/// them to the watcher thread.
pub struct Watcher {
    opts: WatchOptions,
    inbox: Arc<Inbox>,
    wake_rx: Receiver<()>,
    watch: Option<Watch>,
}

impl Watcher {
    /// Watch `root` (as configured) from now on. Without inotify the
    /// watcher falls back to periodic rescans; that is logged, not an error.
    pub fn establish(root: &Path, opts: WatchOptions) -> Watcher {
        let link = std::path::absolute(root).unwrap_or_else(|_| root.to_path_buf());
        let inbox = Arc::new(Inbox {
            pending: Mutex::new(Pending::default()),
        });
        let (wake_tx, wake_rx) = mpsc::sync_channel(1);
        let watched = if std::env::var_os(NO_INOTIFY_ENV).is_some() {
            Err(notify::Error::generic(&format!("{NO_INOTIFY_ENV} is set")))
        } else {
            Watch::new(&link, Arc::clone(&inbox), wake_tx)
        };
        let watch = match watched {
            Ok(watch) => Some(watch),
            Err(err) => {
                fall_back(&err.to_string(), opts);
                None
            }
        };
        Watcher {
            opts,
            inbox,
            wake_rx,
            watch,
        }
    }

    /// What the first build's walk calls with each directory before listing
    /// it: add its watch (see the module doc). `None` without inotify. A
    /// watch that cannot be added for want of watches or memory makes the
    /// watcher fall back to periodic rescans; a directory gone or
    /// unreadable meanwhile is the walk's to report.
    pub fn dir_hook(&self) -> Option<Box<super::DirHook>> {
        let watch = self.watch.as_ref()?;
        let shared = Arc::clone(&watch.shared);
        let inbox = Arc::clone(&self.inbox);
        let wake = watch.wake.clone();
        Some(Box::new(move |dir: &Path| {
            let mut shared = shared.lock().unwrap_or_else(|e| e.into_inner());
            match shared.watcher.watch(dir, RecursiveMode::NonRecursive) {
                Ok(()) => {
                    shared.dirs.insert(dir.to_path_buf());
                }
                Err(err) if !dir.is_dir() || std::fs::read_dir(dir).is_err() => {
                    tracing::debug!(dir = %dir.display(), %err, "directory not watched");
                }
                Err(err) => {
                    drop(shared);
                    let mut pending = inbox.lock();
                    pending.failed = Some(format!("watching {}: {err}", dir.display()));
                    pending.changed = true;
                    drop(pending);
                    let _ = wake.try_send(());
                }
            }
        }))
    }

    /// Start the watcher thread. It runs for the life of the process.
    pub fn spawn(self, store: Arc<Store>) -> io::Result<JoinHandle<()>> {
        std::thread::Builder::new()
            .name("watcher".into())
            .spawn(move || self.run(&store))
    }

    fn run(mut self, store: &Store) {
        let opts = self.opts;
        let mut retry_at: Option<Instant> = None;
        let mut safety_at = Instant::now() + SAFETY_RESCAN;
        loop {
            // Walk the whole root on the safety rescan, after a failed
            // rebuild, and without inotify; otherwise look at the paths
            // the events named.
            let mut full = self.watch.is_none() || retry_at.is_some();
            let now = Instant::now();
            let mut deadline = match &self.watch {
                None => now + opts.rescan_interval,
                Some(_) => safety_at,
            };
            if let Some(at) = retry_at {
                deadline = deadline.min(at);
            }
            if let Some(at) = self.next_write_deadline() {
                deadline = deadline.min(at);
            }
            match self
                .wake_rx
                .recv_timeout(deadline.saturating_duration_since(now))
            {
                Ok(()) => {
                    if !self.inbox.lock().rescan {
                        self.debounce();
                    }
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => {
                    // No callback (rescans only, or the watch is gone):
                    // nothing will wake us, so wait out the deadline.
                    if self.watch.take().is_some() {
                        fall_back("inotify watcher stopped", opts);
                    }
                    std::thread::sleep(deadline.saturating_duration_since(Instant::now()));
                }
            }
            full |= Instant::now() >= safety_at;
            let (held, rescan, paths) = self.take_pending();
            if rescan {
                tracing::warn!("inotify lost events; rescanning the whole root");
            }
            let changed = paths.filter(|_| !full && !rescan && self.watch.is_some());
            if let Some(w) = &mut self.watch {
                // Before the walk, so a change made while it runs is an event.
                if let Err(err) = w.follow_root() {
                    self.watch = None;
                    fall_back(&err.to_string(), opts);
                }
            }
            safety_at = Instant::now() + SAFETY_RESCAN;
            // A full walk watches every directory again before listing it:
            // those whose creation an overflow lost have no watch yet.
            let hook = match changed {
                None => self.dir_hook(),
                Some(_) => None,
            };
            retry_at = match store.rebuild_changed(&held, changed.as_ref(), hook.as_deref()) {
                Ok(_) => None,
                Err(err) => {
                    tracing::error!(
                        error = format!("{err:#}"),
                        retry_s = opts.rescan_interval.as_secs_f64(),
                        "snapshot rebuild failed; serving the old one"
                    );
                    Some(Instant::now() + opts.rescan_interval)
                }
            };
        }
    }

    /// When the oldest held write reaches `write_settle_max`.
    fn next_write_deadline(&self) -> Option<Instant> {
        let pending = self.inbox.lock();
        pending
            .writing
            .values()
            .min()
            .map(|first| *first + self.opts.write_settle_max)
    }

    /// Wait until no event has come for the debounce period, or for at
    /// most [`MAX_DEFER_PERIODS`] of it; an overflow ends the wait at once.
    fn debounce(&self) {
        let quiet = self.opts.debounce;
        let give_up = Instant::now() + quiet * MAX_DEFER_PERIODS;
        loop {
            let now = Instant::now();
            if now >= give_up {
                return;
            }
            match self.wake_rx.recv_timeout(quiet.min(give_up - now)) {
                Ok(()) if self.inbox.lock().rescan => return,
                Ok(()) => {}
                Err(_) => return,
            }
        }
    }

    /// Take what the callback gathered: watch the new directories, release
    /// writes held too long, and return the files still held, whether a
    /// full rescan was asked for, and the paths to look at again (`None`:
    /// walk the whole root).
    fn take_pending(&mut self) -> (HashSet<PathBuf>, bool, Option<HashSet<PathBuf>>) {
        let now = Instant::now();
        let (new_dirs, failed, mut rescan, held, mut paths) = {
            let mut p = self.inbox.lock();
            let settle = self.opts.write_settle_max;
            let mut released = Vec::new();
            p.writing.retain(|path, first| {
                let keep = now.duration_since(*first) < settle;
                if !keep {
                    tracing::warn!(
                        path = %path.display(),
                        write_settle_max_s = settle.as_secs_f64(),
                        "file still open for writing; publishing it anyway"
                    );
                    released.push(path.clone());
                }
                keep
            });
            // Held files were looked at and kept; a released one is looked
            // at again now.
            p.paths.extend(released);
            let held: HashSet<PathBuf> = p.writing.keys().cloned().collect();
            p.changed = false;
            let rescan = std::mem::take(&mut p.rescan);
            let paths = std::mem::take(&mut p.paths);
            let full = std::mem::take(&mut p.full);
            (
                std::mem::take(&mut p.new_dirs),
                p.failed.take(),
                rescan,
                held,
                (!full).then_some(paths),
            )
        };
        if let Some(err) = failed {
            if self.watch.take().is_some() {
                fall_back(&err, self.opts);
            }
        }
        if let Some(w) = &mut self.watch {
            let mut shared = w.shared.lock().unwrap_or_else(|e| e.into_inner());
            for dir in new_dirs {
                // notify adds this watch itself after the event only below
                // directories it watches recursively; adding it here and
                // waiting for it means the walk that follows runs with the
                // watch in place.
                match shared.watcher.watch(&dir, RecursiveMode::Recursive) {
                    Ok(()) => {
                        shared.dirs.insert(dir);
                    }
                    // Gone again, or replaced by a file: the walk sees that.
                    Err(err) if !dir.is_dir() => {
                        tracing::debug!(dir = %dir.display(), %err, "new directory vanished");
                    }
                    Err(err) => {
                        tracing::warn!(dir = %dir.display(), %err, "could not watch a new directory; rescanning");
                        rescan = true;
                    }
                }
            }
        }
        if rescan {
            paths = None;
        }
        (held, rescan, paths)
    }
}

fn fall_back(err: &str, opts: WatchOptions) {
    tracing::warn!(
        error = err,
        rescan_interval_s = opts.rescan_interval.as_secs_f64(),
        "inotify unavailable; falling back to periodic rescans of the root"
    );
}

/// The inotify watches and what they are on.
struct Watch {
    /// Shared with the first build's [`Watcher::dir_hook`].
    shared: Arc<Mutex<Shared>>,
    /// Wakes the watcher thread (the hook's failures).
    wake: SyncSender<()>,
    /// The root as configured, made absolute (maybe a symlink).
    link: PathBuf,
    /// The canonical root currently watched, if it resolved.
    root: Option<PathBuf>,
}

struct Shared {
    watcher: RecommendedWatcher,
    /// Directories below the root watched one by one (the full walks',
    /// and new ones, recursively): what a root swap unwatches.
    dirs: HashSet<PathBuf>,
}

impl Watch {
    fn new(link: &Path, inbox: Arc<Inbox>, wake: SyncSender<()>) -> notify::Result<Watch> {
        let wake_hook = wake.clone();
        let parent = link.parent().map(Path::to_path_buf);
        let filter_link = link.to_path_buf();
        let filter_parent = parent.clone();
        let drop_marker =
            std::env::var_os(TEST_DROP_ENV).and_then(|name| parent.as_ref().map(|p| p.join(name)));
        let mut dropping = false;
        let mut watcher = notify::recommended_watcher(move |res: notify::Result<Event>| {
            let now = Instant::now();
            match res {
                Ok(event) => {
                    if let Some(marker) = &drop_marker {
                        if event.paths.iter().any(|p| p == marker) {
                            match event.kind {
                                EventKind::Create(_) => {
                                    tracing::warn!("test hook: dropping inotify events");
                                    dropping = true;
                                }
                                EventKind::Remove(_) if dropping => {
                                    dropping = false;
                                    let overflow = Event::new(EventKind::Other)
                                        .set_flag(notify::event::Flag::Rescan);
                                    inbox.lock().apply(
                                        &overflow,
                                        &filter_link,
                                        filter_parent.as_deref(),
                                        now,
                                    );
                                    let _ = wake.try_send(());
                                }
                                _ => {}
                            }
                            return;
                        }
                        if dropping {
                            return;
                        }
                    }
                    let mut pending = inbox.lock();
                    pending.apply(&event, &filter_link, filter_parent.as_deref(), now);
                    if !pending.changed {
                        return;
                    }
                }
                Err(err) => {
                    let mut pending = inbox.lock();
                    pending.failed = Some(err.to_string());
                    pending.changed = true;
                }
            }
            // Capacity one: a wake-up already queued covers this event too,
            // and the callback never blocks notify's thread.
            let _ = wake.try_send(());
        })?;
        if let Some(parent) = &parent {
            watcher.watch(parent, RecursiveMode::NonRecursive)?;
        }
        let mut watch = Watch {
            shared: Arc::new(Mutex::new(Shared {
                watcher,
                dirs: HashSet::new(),
            })),
            wake: wake_hook,
            link: link.to_path_buf(),
            root: None,
        };
        // Its directories are watched as the first walk lists them.
        watch.watch_root(RecursiveMode::NonRecursive)?;
        Ok(watch)
    }

    /// Watch the root the configured path resolves to now, if that changed
    /// (a swapped root: recursively, before the rebuild walks it).
    fn follow_root(&mut self) -> notify::Result<()> {
        self.watch_root(RecursiveMode::Recursive)
    }

    /// Watch the root the configured path resolves to now, if that changed.
    /// A root that does not resolve is not an error here: the rebuild fails
    /// and reports it, and the parent's watch sees it come back.
    fn watch_root(&mut self, mode: RecursiveMode) -> notify::Result<()> {
        let Ok(canonical) = std::fs::canonicalize(&self.link) else {
            return Ok(());
        };
        if self.root.as_ref() == Some(&canonical) {
            return Ok(());
        }
        let mut shared = self.shared.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(old) = self.root.take() {
            // Gone already if the old release was deleted; that is fine.
            for dir in std::mem::take(&mut shared.dirs) {
                let _ = shared.watcher.unwatch(&dir);
            }
            let _ = shared.watcher.unwatch(&old);
        }
        shared.watcher.watch(&canonical, mode)?;
        tracing::info!(root = %canonical.display(), "watching the document root");
        self.root = Some(canonical);
        Ok(())
    }
}

/// Whether an event can change what the snapshot holds. Reads never do
/// (a close after writing is handled by [`Pending::apply`]); in the parent
/// directory only the root's own name matters.
fn relevant(event: &Event, link: &Path, parent: Option<&Path>) -> bool {
    if matches!(
        event.kind,
        EventKind::Access(kind) if kind != AccessKind::Close(AccessMode::Write)
    ) {
        return false;
    }
    if event.need_rescan() || event.paths.is_empty() {
        return true;
    }
    event
        .paths
        .iter()
        .any(|p| p.as_path() == link || p.parent() != parent)
}

#[cfg(test)]
mod tests {
    use super::*;
    use notify::event::{AccessKind, AccessMode, CreateKind, ModifyKind};

    fn event(kind: EventKind, path: &str) -> Event {
        Event::new(kind).add_path(PathBuf::from(path))
    }

    #[test]
    fn relevant_events() {
        let link = Path::new("/srv/www/current");
        let parent = Some(Path::new("/srv/www"));
        let create = EventKind::Create(CreateKind::File);
        let table: &[(EventKind, &str, bool)] = &[
            (create, "/srv/www/releases/43/index.html", true),
            (create, "/srv/www/current", true),
            (create, "/srv/www/current.tmp", false),
            (create, "/srv/www/unrelated.log", false),
            (EventKind::Modify(ModifyKind::Any), "/srv/www/current", true),
            (
                EventKind::Access(AccessKind::Any),
                "/srv/www/releases/43/a",
                false,
            ),
        ];
        for (kind, path, want) in table {
            assert_eq!(
                relevant(&event(*kind, path), link, parent),
                *want,
                "{kind:?} {path}"
            );
        }
        let rescan = Event::new(EventKind::Other).set_flag(notify::event::Flag::Rescan);
        assert!(relevant(&rescan, link, parent));
    }

    #[test]
    fn pending_gathers_the_paths_to_look_at_again() {
        use notify::event::RenameMode;
        let link = Path::new("/srv/www/current");
        let parent = Some(Path::new("/srv/www"));
        let now = Instant::now();
        let mut p = Pending::default();
        let create = EventKind::Create(CreateKind::File);
        p.apply(
            &event(create, "/srv/www/releases/43/a.txt"),
            link,
            parent,
            now,
        );
        // A file renamed in from beside the root: only its new name counts.
        let rename = Event::new(EventKind::Modify(ModifyKind::Name(RenameMode::Both)))
            .add_path(PathBuf::from("/srv/www/tmp.txt"))
            .add_path(PathBuf::from("/srv/www/releases/43/b.txt"));
        p.apply(&rename, link, parent, now);
        let mut paths: Vec<_> = p.paths.iter().cloned().collect();
        paths.sort();
        assert_eq!(
            paths,
            [
                PathBuf::from("/srv/www/releases/43/a.txt"),
                PathBuf::from("/srv/www/releases/43/b.txt")
            ]
        );
        assert!(!p.full);
        p.apply(&event(create, "/srv/www/current"), link, parent, now);
        assert!(p.full, "a root swap walks the whole root");
        let mut p = Pending::default();
        for i in 0..=MAX_CHANGED_PATHS {
            p.apply(
                &event(create, &format!("/srv/www/r/{i}")),
                link,
                parent,
                now,
            );
        }
        assert!(p.full, "past the cap, a full walk");
    }

    #[test]
    fn pending_tracks_writers_new_dirs_and_overflow() {
        let link = Path::new("/srv/www/current");
        let parent = Some(Path::new("/srv/www"));
        let now = Instant::now();
        let mut p = Pending::default();
        let f = "/srv/www/releases/43/a.bin";
        p.apply(
            &event(
                EventKind::Modify(ModifyKind::Data(notify::event::DataChange::Any)),
                f,
            ),
            link,
            parent,
            now,
        );
        assert!(p.changed && p.writing.contains_key(Path::new(f)));
        p.apply(
            &event(EventKind::Access(AccessKind::Read), f),
            link,
            parent,
            now,
        );
        assert!(
            p.writing.contains_key(Path::new(f)),
            "a read is not a close"
        );
        p.apply(
            &event(EventKind::Access(AccessKind::Close(AccessMode::Write)), f),
            link,
            parent,
            now,
        );
        assert!(p.writing.is_empty());
        p.apply(
            &event(
                EventKind::Create(CreateKind::Folder),
                "/srv/www/releases/43/new",
            ),
            link,
            parent,
            now,
        );
        assert_eq!(p.new_dirs, vec![PathBuf::from("/srv/www/releases/43/new")]);
        assert!(!p.rescan);
        let overflow = Event::new(EventKind::Other).set_flag(notify::event::Flag::Rescan);
        p.apply(&overflow, link, parent, now);
        assert!(p.rescan);
    }

    #[test]
    fn a_directory_renamed_in_is_watched_like_a_new_one() {
        use notify::event::RenameMode;
        let base = std::env::temp_dir().join(format!("shardhttpd-watch-{}", std::process::id()));
        let dir = base.join("www/moved");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(base.join("www/file"), b"f").unwrap();
        let link = base.join("www");
        let parent = Some(base.as_path());
        let mut p = Pending::default();
        for path in [&dir, &base.join("www/file")] {
            let to = Event::new(EventKind::Modify(ModifyKind::Name(RenameMode::To)))
                .add_path(path.clone());
            p.apply(&to, &link, parent, Instant::now());
        }
        assert_eq!(
            p.new_dirs,
            vec![dir.clone()],
            "a file renamed in is no directory"
        );
        assert!(p.paths.contains(&dir));
        std::fs::remove_dir_all(&base).unwrap();
    }
}
