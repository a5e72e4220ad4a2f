//! Pass 1, the **walk**: list the root, decide once per build what every
//! path means (file, directory needing a slash, forbidden) and stat every
//! file (but regular files in the first build: [`Walk::lazy`]), following
//! symlinks only to targets inside the canonical root.
//!
//! The walk itself runs on one thread, in sorted depth-first order, so its
//! result (file order, index) is the same from build to build. A full walk
//! hands the listing of directories (`getdents` and an `fstatat` per entry,
//! nearly all of its time) to [`Prefetch`] helpers, which list ahead of it.

use std::ffi::OsString;
use std::fs::{self, Metadata};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;

use super::place::Budget;
use super::prefetch::Prefetch;
use super::{exhausted, is_exhausted, TreeChanged};
use crate::cache::index::Shard;
use crate::cache::{BuildOptions, FileStamp, Resource, RootDir, SIDECARS};

/// Deepest directory nesting walked below the root. Bounds recursion (and the
/// blow-up from chains of symlinked directories) on hostile trees; deeper
/// directories are skipped with a warning.
pub(super) const MAX_DEPTH: usize = 64;

/// `(st_dev, st_ino)`: a directory's identity, for loop detection.
pub(super) type DirId = (u64, u64);

/// What the walk needs of an entry's `lstat` (or, for a symlink, of its
/// target's `stat`): its kind and stamp. Smaller than a `Metadata`, since a
/// full walk's listings may wait in memory for the walk to reach them.
#[derive(Debug, Clone, Copy)]
pub(super) struct Stat {
    pub(super) kind: Kind,
    pub(super) stamp: FileStamp,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Dir,
    File,
    /// FIFOs, sockets, devices (and, from an `lstat`, symlinks).
    Other,
}

impl Stat {
    pub(super) fn of(meta: &Metadata) -> Stat {
        let kind = if meta.is_dir() {
            Kind::Dir
        } else if meta.is_file() {
            Kind::File
        } else {
            Kind::Other
        };
        Stat {
            kind,
            stamp: FileStamp::of(meta),
        }
    }

    pub(super) fn id(&self) -> DirId {
        (self.stamp.dev, self.stamp.ino)
    }
}

/// A regular file found by the walk.
pub(super) struct FileJob {
    pub(super) url: Box<[u8]>,
    /// Canonical (symlink-free as of the walk) path.
    pub(super) path: PathBuf,
    /// As the walk saw it.
    pub(super) stamp: FileStamp,
}

/// Pass 1: what the tree holds.
pub(super) struct Walk<'a> {
    pub(super) opts: &'a BuildOptions,
    /// Canonical root; every path opened lies inside it (as of the check).
    pub(super) root: PathBuf,
    /// The root, open: files are opened beneath it (`sys::open_beneath`).
    pub(super) root_dir: Arc<RootDir>,
    /// `Resource::File(i)` here indexes `files`, not yet the snapshot.
    pub(super) index: Shard,
    pub(super) files: Vec<FileJob>,
    /// A symlink was followed (see [`Walked::symlinks`](crate::cache::Walked)).
    pub(super) symlinks: bool,
    /// Some file's name ends in a sidecar suffix; when none does, sidecar
    /// lookups are skipped.
    pub(super) has_sidecars: bool,
    /// Paths stat'ed or listed, for [`SnapshotStats::paths_examined`](crate::cache::SnapshotStats).
    pub(super) examined: u64,
    /// URLs of walked directories (`""` for the root); `url + "/"` is added
    /// once it is known whether one of their index files is servable.
    pub(super) dirs: Vec<Box<[u8]>>,
    /// Helpers listing directories ahead of the walk (a full walk only).
    pub(super) prefetch: Option<&'a Prefetch<'a>>,
    /// Regular files are not stated by the walk: their stamps are
    /// [`FileStamp::UNKNOWN`] and the load takes them from the open file.
    /// Only for a build with nothing to compare stamps with (the first one)
    /// and no compression (whose levels depend on the bytes in memory, known
    /// before the load). At a million files this saves a million `statx`
    /// by name, the walk's main cost.
    pub(super) lazy: bool,
    /// In a lazy walk, the bytes of `cache_max_bytes` the load has not yet
    /// taken for bodies in memory.
    pub(super) lazy_budget: Budget,
    /// A lazy walk that found more than `preload_max_files` files: the load
    /// states them and reads none ([`Snapshot::from_disk`](crate::cache::Snapshot)).
    pub(super) from_disk: bool,
}

impl<'a> Walk<'a> {
    pub(super) fn new(opts: &'a BuildOptions, root: PathBuf, root_dir: Arc<RootDir>) -> Self {
        Walk {
            opts,
            root,
            root_dir,
            index: Shard::default(),
            files: Vec::new(),
            symlinks: false,
            has_sidecars: false,
            examined: 0,
            dirs: Vec::new(),
            prefetch: None,
            lazy: false,
            lazy_budget: Budget::new(opts.cache_max_bytes),
            from_disk: false,
        }
    }

    /// Walk the (sorted) children of the directory at `dir`, whose URL path is
    /// `url` (empty for the root). `ancestors` holds the directories from the
    /// root down to `dir`: a child among them is a loop. Only ancestors are
    /// checked, so a directory reachable under two names (a symlink inside the
    /// root) is served under both.
    pub(super) fn walk_children(
        &mut self,
        children: Vec<Child>,
        dir: &Path,
        url: &mut Vec<u8>,
        ancestors: &mut Vec<DirId>,
    ) -> anyhow::Result<()> {
        let want = self.index.len() + children.len();
        if want > self.index.capacity() {
            let listed = self.prefetch.map_or(0, |p| p.listed());
            self.index.reserve(listed.max(want) - self.index.len());
        }
        for Child {
            name,
            file_type,
            meta,
        } in children
        {
            let url_len = url.len();
            url.push(b'/');
            url.extend_from_slice(name.as_bytes());
            if name.as_bytes().starts_with(b".")
                && !self.opts.dotfile_allow.allows(name.as_bytes(), url)
            {
                url.truncate(url_len);
                continue;
            }
            let result = self.walk_child(dir.join(&name), file_type, meta, url, ancestors);
            url.truncate(url_len);
            result?;
        }
        Ok(())
    }

    /// One directory entry. Errors returned are fatal to the build; per-file
    /// trouble is logged and skipped here.
    pub(super) fn walk_child(
        &mut self,
        path: PathBuf,
        file_type: fs::FileType,
        listed: Option<Stat>,
        url: &mut Vec<u8>,
        ancestors: &mut Vec<DirId>,
    ) -> anyhow::Result<()> {
        self.examined += 1;
        // From here on `path` has no symlink in any component, as of the check:
        // a symlink is replaced by its canonical target, which must lie inside
        // the root. A component swapped for a symlink after this check cannot
        // lead the load outside: files are opened beneath the root's fd, and
        // must be the (dev, inode) stated here.
        let (path, meta) = if file_type.is_symlink() {
            self.symlinks = true;
            let target = match fs::canonicalize(&path) {
                Ok(target) => target,
                Err(err) if is_exhausted(&err) => return Err(exhausted(&path, err)),
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
                Ok(meta) => (target, Stat::of(&meta)),
                Err(err) if err.kind() == io::ErrorKind::NotFound => {
                    return Err(TreeChanged(target).into())
                }
                Err(err) if is_exhausted(&err) => return Err(exhausted(&target, err)),
                Err(err) => {
                    tracing::warn!(path = %target.display(), %err, "skipping symlink target");
                    return Ok(());
                }
            }
        } else if let Some(meta) = listed {
            (path, meta)
        } else {
            match fs::symlink_metadata(&path) {
                Ok(meta) => (path, Stat::of(&meta)),
                Err(err) if err.kind() == io::ErrorKind::NotFound => {
                    return Err(TreeChanged(path).into())
                }
                Err(err) if is_exhausted(&err) => return Err(exhausted(&path, err)),
                Err(err) => {
                    tracing::warn!(path = %path.display(), %err, "skipping unreadable entry");
                    return Ok(());
                }
            }
        };

        if meta.kind == Kind::Dir {
            self.walk_dir(&path, &meta, url, ancestors)
        } else if meta.kind == Kind::File {
            let idx = u32::try_from(self.files.len())
                .context("more than u32::MAX files under the root")?;
            self.has_sidecars |= SIDECARS
                .iter()
                .any(|(_, suffix)| url.ends_with(suffix.as_bytes()));
            self.files.push(FileJob {
                url: url.as_slice().into(),
                path,
                stamp: meta.stamp,
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

    pub(super) fn walk_dir(
        &mut self,
        path: &Path,
        meta: &Stat,
        url: &mut Vec<u8>,
        ancestors: &mut Vec<DirId>,
    ) -> anyhow::Result<()> {
        let id = meta.id();
        if ancestors.contains(&id) {
            tracing::warn!(path = %path.display(), "skipping directory loop");
            return Ok(());
        }
        // `ancestors` starts with the root, so its length is the depth.
        if ancestors.len() > MAX_DEPTH {
            tracing::warn!(path = %path.display(), max = MAX_DEPTH, "skipping directory nested too deep");
            return Ok(());
        }
        let listed = match self.prefetch {
            Some(prefetch) => prefetch.take(path, id, url, ancestors),
            None => read_dir_sorted(path, self.lazy),
        };
        let children = match listed {
            Ok(children) => children,
            Err(err) if is_forbidden(&err) => {
                tracing::warn!(path = %path.display(), %err, "unreadable directory; answering 403");
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
            Err(err) if is_exhausted(&err) => return Err(exhausted(path, err)),
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

    /// A walked path relative to the root; `None` for one outside it.
    pub(super) fn rel<'p>(&self, path: &'p Path) -> Option<&'p Path> {
        // Walked paths are the canonical root joined with names: a byte
        // prefix, cheaper than `Path::strip_prefix`'s component by component
        // compare.
        path.as_os_str()
            .as_bytes()
            .strip_prefix(self.root.as_os_str().as_bytes())
            .and_then(|rest| rest.strip_prefix(b"/"))
            .filter(|rest| !rest.is_empty())
            .map(|rest| Path::new(std::ffi::OsStr::from_bytes(rest)))
    }

    /// The walk stamps of `job`'s sidecars, in [`SIDECARS`] order, with their
    /// indices in `files`.
    pub(super) fn sidecars(&self, job: &FileJob) -> [Option<(u32, FileStamp)>; 3] {
        if !self.has_sidecars {
            return [None; 3];
        }
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

/// One directory entry as listed: its name, type, and (except for
/// symlinks) its `lstat`, when that succeeded; in a lazy listing, a regular
/// file's stamp is [`FileStamp::UNKNOWN`].
pub(super) struct Child {
    pub(super) name: OsString,
    pub(super) file_type: fs::FileType,
    pub(super) meta: Option<Stat>,
}

/// A directory's entries, sorted by name so entry indices and arena layout are
/// the same from build to build. `lazy`: regular files (by the type the
/// directory itself records) are not stated; the load stamps them.
pub(super) fn read_dir_sorted(dir: &Path, lazy: bool) -> io::Result<Vec<Child>> {
    let mut children = Vec::new();
    for entry in fs::read_dir(dir)? {
        // An entry that fails here vanished or is unreadable mid-listing; the
        // rest of the directory is still worth serving.
        match entry.and_then(|e| {
            let file_type = e.file_type()?;
            if lazy && file_type.is_file() {
                return Ok(Child {
                    name: e.file_name(),
                    file_type,
                    meta: Some(Stat {
                        kind: Kind::File,
                        stamp: FileStamp::UNKNOWN,
                    }),
                });
            }
            // `fstatat` relative to the directory being listed: no path
            // lookup from the root per file. An error is classified again
            // by the walk's own `lstat`.
            let meta = (!file_type.is_symlink())
                .then(|| e.metadata().ok())
                .flatten()
                .map(|m| Stat::of(&m));
            Ok(Child {
                name: e.file_name(),
                file_type,
                meta,
            })
        }) {
            Ok(child) => children.push(child),
            Err(err) if is_exhausted(&err) => return Err(err),
            Err(err) => tracing::warn!(dir = %dir.display(), %err, "skipping directory entry"),
        }
    }
    children.sort_by(|a, b| a.name.as_bytes().cmp(b.name.as_bytes()));
    Ok(children)
}

/// EACCES and EPERM: the path exists but we may not read it, so 403.
pub(super) fn is_forbidden(err: &io::Error) -> bool {
    err.kind() == io::ErrorKind::PermissionDenied
}
