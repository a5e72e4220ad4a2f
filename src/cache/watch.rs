//! Rebuild the snapshot when the document root changes on disk.
//!
//! One thread owns an inotify watcher (through `notify`) on the canonical
//! root, recursively, and on the configured root's parent directory, so that
//! switching a symlinked root (`current -> releases/43`, renamed into place)
//! is seen too. Events are debounced: a rebuild starts once the tree has been
//! quiet for the debounce period, and any event during a rebuild causes
//! another, so a file copied in pieces is read again once it settles.
//! Without inotify (or out of watches) the thread falls back to periodic
//! rescans, which cost a walk and a `stat` per file when nothing changed.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use notify::event::{Event, EventKind};
use notify::{RecommendedWatcher, RecursiveMode, Watcher};

use super::Store;

/// Longest a rebuild is put off while events keep coming, in debounce
/// periods: a tree that is never quiet (a log file written inside the root)
/// must not starve rebuilds.
const MAX_DEFER_PERIODS: u32 = 10;

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

/// What the inotify callback tells the watcher thread.
enum Signal {
    Changed,
    /// The watcher lost events or failed; only rescans are reliable now.
    Failed(String),
}

/// Even with inotify working, rescan this often: notify cannot watch a
/// directory created and filled faster than it adds the watch, and says
/// nothing when adding one fails. An unchanged rescan costs a walk and a
/// `stat` per file and swaps nothing.
const SAFETY_RESCAN: Duration = Duration::from_secs(60);

/// Start the watcher thread. It runs for the life of the process.
pub fn spawn(store: Arc<Store>, opts: WatchOptions) -> io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name("watcher".into())
        .spawn(move || run(&store, opts))
}

fn run(store: &Store, opts: WatchOptions) {
    let link = std::path::absolute(store.root()).unwrap_or_else(|_| store.root().to_path_buf());
    let (tx, rx) = mpsc::channel();
    let mut watch = match Watch::new(&link, tx.clone()) {
        Ok(watch) => Some(watch),
        Err(err) => {
            fall_back(&err.to_string(), opts);
            None
        }
    };
    // Kept so the channel never disconnects, whatever happens to the watcher.
    let _tx = tx;
    let mut retry_at: Option<Instant> = None;
    loop {
        // Wait for something to do.
        let timeout = match (&watch, retry_at) {
            (None, _) => opts.rescan_interval,
            (Some(_), Some(at)) => at.saturating_duration_since(Instant::now()),
            (Some(_), None) => SAFETY_RESCAN,
        };
        let first = rx.recv_timeout(timeout);
        match first {
            Ok(Signal::Changed) => debounce(&rx, opts.debounce, &mut watch, opts),
            Ok(Signal::Failed(err)) => {
                if watch.take().is_some() {
                    fall_back(&err, opts);
                }
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return,
        }
        if let Some(w) = &mut watch {
            // Before the walk, so a change made while it runs is an event.
            if let Err(err) = w.follow_root() {
                watch = None;
                fall_back(&err.to_string(), opts);
            }
        }
        retry_at = match store.rebuild() {
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

/// Wait until no event has come for `quiet`, or for at most
/// [`MAX_DEFER_PERIODS`] of it.
fn debounce(
    rx: &mpsc::Receiver<Signal>,
    quiet: Duration,
    watch: &mut Option<Watch>,
    opts: WatchOptions,
) {
    let give_up = Instant::now() + quiet * MAX_DEFER_PERIODS;
    loop {
        let now = Instant::now();
        if now >= give_up {
            return;
        }
        match rx.recv_timeout(quiet.min(give_up - now)) {
            Ok(Signal::Changed) => {}
            Ok(Signal::Failed(err)) => {
                if watch.take().is_some() {
                    fall_back(&err, opts);
                }
            }
            Err(_) => return,
        }
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
    watcher: RecommendedWatcher,
    /// The root as configured, made absolute (maybe a symlink).
    link: PathBuf,
    /// The canonical root currently watched, if it resolved.
    root: Option<PathBuf>,
}

impl Watch {
    fn new(link: &Path, tx: mpsc::Sender<Signal>) -> notify::Result<Watch> {
        let parent = link.parent().map(Path::to_path_buf);
        let filter_link = link.to_path_buf();
        let filter_parent = parent.clone();
        let mut watcher = notify::recommended_watcher(move |res: notify::Result<Event>| {
            let signal = match res {
                Ok(event) if relevant(&event, &filter_link, filter_parent.as_deref()) => {
                    Signal::Changed
                }
                Ok(_) => return,
                Err(err) => Signal::Failed(err.to_string()),
            };
            let _ = tx.send(signal);
        })?;
        if let Some(parent) = &parent {
            watcher.watch(parent, RecursiveMode::NonRecursive)?;
        }
        let mut watch = Watch {
            watcher,
            link: link.to_path_buf(),
            root: None,
        };
        watch.follow_root()?;
        Ok(watch)
    }

    /// Watch the root the configured path resolves to now, if that changed.
    /// A root that does not resolve is not an error here: the rebuild fails
    /// and reports it, and the parent's watch sees it come back.
    fn follow_root(&mut self) -> notify::Result<()> {
        let Ok(canonical) = std::fs::canonicalize(&self.link) else {
            return Ok(());
        };
        if self.root.as_ref() == Some(&canonical) {
            return Ok(());
        }
        if let Some(old) = self.root.take() {
            // Gone already if the old release was deleted; that is fine.
            let _ = self.watcher.unwatch(&old);
        }
        self.watcher.watch(&canonical, RecursiveMode::Recursive)?;
        tracing::info!(root = %canonical.display(), "watching the document root");
        self.root = Some(canonical);
        Ok(())
    }
}

/// Whether an event can change what the snapshot holds. Reads never do; in
/// the parent directory only the root's own name matters.
fn relevant(event: &Event, link: &Path, parent: Option<&Path>) -> bool {
    if matches!(event.kind, EventKind::Access(_)) {
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
    use notify::event::{AccessKind, CreateKind, ModifyKind};

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
}
