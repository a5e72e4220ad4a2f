//! Listing directories ahead of the walk: a full walk's time is nearly all
//! `getdents` and one `fstatat` per entry, which helpers on the other cores
//! do while the walk (one thread, in order, so its result is the same from
//! build to build) consumes their listings.
//!
//! Helpers take directories in roughly the walk's own depth-first order,
//! and push each listed directory's subdirectories. The walk takes a
//! listing when it is ready, waits for one in progress, and lists a
//! directory no helper has started itself. A
//! listing is the one [`read_dir_sorted`] would make at that moment: the
//! walk's result does not depend on who listed what, only (as ever) on the
//! tree. Helpers skip what the walk would skip (disallowed dotfiles, loops,
//! past [`MAX_DEPTH`]); symlinked directories are left to the walk.
//!
//! With a [`DirHook`] (the first build, see `cache::watch`), every directory
//! is handed to it before it is listed: the inotify watch is then in place
//! before the listing it protects. Adding a watch is a round trip to the
//! watcher's thread, so one more helper ([`Prefetch::watch_ahead`]) hands
//! queued directories to the hook in the walk's order and only then makes
//! them available to the listing helpers, which then never wait on it.

use std::collections::{HashMap, VecDeque};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};

use super::walk::{read_dir_sorted, Child, DirId, Kind, MAX_DEPTH};
use super::DirHook;
use crate::cache::BuildOptions;

/// A directory to list, as the walk would reach it.
struct Job {
    path: PathBuf,
    url: Vec<u8>,
    /// Directories from the root down to and including this one.
    ancestors: Vec<DirId>,
}

enum Slot {
    /// [`Prefetch::watch_ahead`] is handing it to the hook.
    Watching,
    /// Handed to the hook: listing it needs no further hook call.
    Watched,
    /// A helper is listing it.
    Listing,
    Done(io::Result<Vec<Child>>),
    /// The walk has it (or listed it itself): a second request (the same
    /// directory under a symlink) lists it again.
    Taken,
}

#[derive(Default)]
struct State {
    /// Directories to list, taken from the front: with a hook, in the order
    /// [`Prefetch::watch_ahead`] watched them (the walk's, roughly);
    /// without one, a stack of what was pushed, so that helpers list in the
    /// walk's depth-first order.
    ready: VecDeque<Job>,
    /// With a hook: directories waiting for their watch, popped last in
    /// first out (the walk's depth-first order).
    unwatched: Vec<Job>,
    slots: HashMap<PathBuf, Slot>,
    stop: bool,
}

/// Shared between the walk and its helpers for one build.
pub(super) struct Prefetch<'a> {
    opts: &'a BuildOptions,
    hook: Option<&'a DirHook>,
    /// Regular files are listed without a stat (see [`Walk::lazy`](super::walk::Walk::lazy)).
    lazy: bool,
    state: Mutex<State>,
    /// A listing finished, work was pushed, or the walk is done.
    changed: Condvar,
    /// Entries listed so far, by helpers and the walk: how large the walk's
    /// index will grow, at least ([`Prefetch::listed`]).
    listed: AtomicUsize,
}

impl<'a> Prefetch<'a> {
    pub(super) fn new(opts: &'a BuildOptions, hook: Option<&'a DirHook>, lazy: bool) -> Self {
        Prefetch {
            opts,
            hook,
            lazy,
            state: Mutex::new(State::default()),
            changed: Condvar::new(),
            listed: AtomicUsize::new(0),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether listing helpers need [`Prefetch::watch_ahead`] beside them.
    pub(super) fn watches(&self) -> bool {
        self.hook.is_some()
    }

    /// List `dir`, first handing it to the hook.
    pub(super) fn list(&self, dir: &Path) -> io::Result<Vec<Child>> {
        if let Some(hook) = self.hook {
            hook(dir);
        }
        self.read_dir(dir)
    }

    /// [`read_dir_sorted`], counted in [`Prefetch::listed`].
    fn read_dir(&self, dir: &Path) -> io::Result<Vec<Child>> {
        let listed = read_dir_sorted(dir, self.lazy);
        if let Ok(children) = &listed {
            self.listed.fetch_add(children.len(), Ordering::Relaxed);
        }
        listed
    }

    /// Entries in the directories listed so far. The helpers list ahead of
    /// the walk, so the walk sizes its index by this rather than doubling
    /// it (and moving every entry) a score of times.
    pub(super) fn listed(&self) -> usize {
        self.listed.load(Ordering::Relaxed)
    }

    /// Queue the subdirectories of `dir` (listed as `children`, at `url`,
    /// with `ancestors` ending in `dir` itself) for the helpers.
    pub(super) fn push_children(
        &self,
        dir: &Path,
        url: &[u8],
        ancestors: &[DirId],
        children: &[Child],
    ) {
        if ancestors.len() > MAX_DEPTH {
            return;
        }
        let mut jobs = Vec::new();
        // Reversed: the stack pops the first child first, as the walk goes.
        for child in children.iter().rev() {
            let Some(stat) = child.meta.filter(|m| m.kind == Kind::Dir) else {
                continue;
            };
            let name = child.name.as_bytes();
            let mut child_url = Vec::with_capacity(url.len() + 1 + name.len());
            child_url.extend_from_slice(url);
            child_url.push(b'/');
            child_url.extend_from_slice(name);
            if name.starts_with(b".") && !self.opts.dotfile_allow.allows(name, &child_url) {
                continue;
            }
            if ancestors.contains(&stat.id()) {
                continue;
            }
            let mut child_ancestors = ancestors.to_vec();
            child_ancestors.push(stat.id());
            jobs.push(Job {
                path: dir.join(&child.name),
                url: child_url,
                ancestors: child_ancestors,
            });
        }
        if jobs.is_empty() {
            return;
        }
        let mut state = self.lock();
        match self.hook {
            Some(_) => state.unwatched.extend(jobs),
            // Without a hook `ready` is the stack, its top at the front:
            // `jobs` is reversed, so the first child ends up on top.
            None => jobs.into_iter().for_each(|job| state.ready.push_front(job)),
        }
        drop(state);
        self.changed.notify_all();
    }

    /// The listing of `dir` (whose identity is `id`) for the walk, which
    /// reached it at `url` with `ancestors` (not yet including `dir`).
    pub(super) fn take(
        &self,
        dir: &Path,
        id: DirId,
        url: &[u8],
        ancestors: &[DirId],
    ) -> io::Result<Vec<Child>> {
        let mut state = self.lock();
        loop {
            match state.slots.get_mut(dir) {
                Some(slot @ Slot::Done(_)) => {
                    let Slot::Done(listed) = std::mem::replace(slot, Slot::Taken) else {
                        unreachable!()
                    };
                    return listed;
                }
                Some(Slot::Listing | Slot::Watching) => {
                    state = self.changed.wait(state).unwrap_or_else(|e| e.into_inner());
                }
                Some(slot @ Slot::Watched) => {
                    *slot = Slot::Taken;
                    drop(state);
                    return self.list_here(dir, id, url, ancestors, false);
                }
                Some(Slot::Taken) => break,
                None => {
                    state.slots.insert(dir.to_path_buf(), Slot::Taken);
                    break;
                }
            }
        }
        drop(state);
        // Not started by any helper (or wanted twice): list it here, and let
        // the helpers go on below it.
        self.list_here(dir, id, url, ancestors, true)
    }

    /// The walk lists `dir` itself (`hooked`: handing it to the hook first).
    fn list_here(
        &self,
        dir: &Path,
        id: DirId,
        url: &[u8],
        ancestors: &[DirId],
        hooked: bool,
    ) -> io::Result<Vec<Child>> {
        let listed = match hooked {
            true => self.list(dir),
            false => self.read_dir(dir),
        };
        if let Ok(children) = &listed {
            let mut ancestors = ancestors.to_vec();
            ancestors.push(id);
            self.push_children(dir, url, &ancestors, children);
        }
        listed
    }

    /// The next job `take` finds under the lock (skipping any it must),
    /// waiting while it finds none; `None` once the walk is done.
    fn next_job(&self, mut take: impl FnMut(&mut State) -> Option<Job>) -> Option<Job> {
        let mut state = self.lock();
        loop {
            if state.stop {
                return None;
            }
            match take(&mut state) {
                Some(job) => return Some(job),
                None => state = self.changed.wait(state).unwrap_or_else(|e| e.into_inner()),
            }
        }
    }

    /// A helper: list directories from the queue until the walk is done.
    pub(super) fn help(&self) {
        let take = |state: &mut State| {
            while let Some(job) = state.ready.pop_front() {
                match state.slots.get_mut(&job.path) {
                    // Watched by `watch_ahead`.
                    Some(slot @ Slot::Watched) => {
                        *slot = Slot::Listing;
                        return Some(job);
                    }
                    None if self.hook.is_none() => {
                        state.slots.insert(job.path.clone(), Slot::Listing);
                        return Some(job);
                    }
                    // The walk took it meanwhile.
                    _ => {}
                }
            }
            None
        };
        while let Some(job) = self.next_job(take) {
            let listed = self.read_dir(&job.path);
            if let Ok(children) = &listed {
                self.push_children(&job.path, &job.url, &job.ancestors, children);
            }
            self.lock().slots.insert(job.path, Slot::Done(listed));
            self.changed.notify_all();
        }
    }

    /// With a hook: hand each queued directory to it, in the walk's order,
    /// then queue it for the listing helpers, until the walk is done. The
    /// round trip each watch makes to the watcher's thread is then spent
    /// here, not by a listing helper or the walk waiting on it.
    pub(super) fn watch_ahead(&self) {
        let Some(hook) = self.hook else {
            return;
        };
        let take = |state: &mut State| {
            while let Some(job) = state.unwatched.pop() {
                // Unless the walk took it, and watched it itself.
                if !state.slots.contains_key(&job.path) {
                    state.slots.insert(job.path.clone(), Slot::Watching);
                    return Some(job);
                }
            }
            None
        };
        while let Some(job) = self.next_job(take) {
            hook(&job.path);
            let mut state = self.lock();
            state.slots.insert(job.path.clone(), Slot::Watched);
            state.ready.push_back(job);
            drop(state);
            self.changed.notify_all();
        }
    }

    /// The walk is over: helpers return.
    fn stop(&self) {
        self.lock().stop = true;
        self.changed.notify_all();
    }

    /// Stops the helpers when dropped, however the walk ends.
    pub(super) fn stopper(&self) -> Stopper<'_, 'a> {
        Stopper(self)
    }
}

pub(super) struct Stopper<'p, 'a>(&'p Prefetch<'a>);

impl Drop for Stopper<'_, '_> {
    fn drop(&mut self) {
        self.0.stop();
    }
}
