//! The fds of large files (the ones sent from disk), opened on demand and
//! kept in a bounded LRU, so a root of 100 000 large files does not need
//! 100 000 descriptors and a rebuild never needs a second set of them.
//!
//! A snapshot's [`LargeFile`](super::LargeFile) names its file by a path
//! relative to the root's directory fd and by the stamp its ETag belongs
//! to. [`OpenFiles::get`] returns a cached fd for that file, or opens it
//! beneath the root (no step may leave it) and checks it is still that file
//! before caching it. The lock is held for a map probe only; the large-file
//! path already costs a `pread`/`sendfile` and an `fstat` per piece.

use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::os::fd::AsFd;
use std::path::Path;
use std::sync::{Arc, Mutex};

use super::FileStamp;

/// Default for `max_open_files`: fds kept open for large files, shared by
/// every snapshot generation alive.
pub const DEFAULT_MAX_OPEN_FILES: usize = 1024;

/// The directory every large file is opened beneath: the canonical root of
/// the build that found the file, held open for as long as a snapshot
/// refers to it.
#[derive(Debug)]
pub struct RootDir {
    pub dir: File,
}

/// A bounded cache of open large files, keyed by (device, inode).
#[derive(Debug)]
pub struct OpenFiles {
    max: usize,
    lru: Mutex<Lru>,
}

#[derive(Debug, Default)]
struct Lru {
    map: HashMap<(u64, u64), Slot>,
    tick: u64,
    opened: u64,
}

#[derive(Debug)]
struct Slot {
    file: Arc<File>,
    stamp: FileStamp,
    used: u64,
}

/// The file is no longer the one the snapshot describes.
#[derive(Debug)]
pub struct Changed;

impl std::fmt::Display for Changed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("file changed since the snapshot was built")
    }
}

impl std::error::Error for Changed {}

impl Default for OpenFiles {
    fn default() -> Self {
        OpenFiles::new(DEFAULT_MAX_OPEN_FILES)
    }
}

impl OpenFiles {
    pub fn new(max: usize) -> OpenFiles {
        OpenFiles {
            max: max.max(1),
            lru: Mutex::new(Lru::default()),
        }
    }

    /// Most fds held.
    pub fn capacity(&self) -> usize {
        self.max
    }

    /// Fds held now, and opened since start.
    pub fn counts(&self) -> (usize, u64) {
        let lru = self.lru.lock().unwrap_or_else(|e| e.into_inner());
        (lru.map.len(), lru.opened)
    }

    /// The open file `rel` beneath `root`, which must still be the file of
    /// `stamp` with the same bytes ([`FileStamp::same_content`]; an
    /// `io::Error` wrapping [`Changed`] otherwise). Only a response not yet
    /// started calls this: one under way sends from the fd it holds, so an
    /// eviction here never makes it reopen by path.
    pub fn get(&self, root: &RootDir, rel: &Path, stamp: &FileStamp) -> io::Result<Arc<File>> {
        let key = (stamp.dev, stamp.ino);
        {
            let mut lru = self.lru.lock().unwrap_or_else(|e| e.into_inner());
            lru.tick += 1;
            let tick = lru.tick;
            if let Some(slot) = lru.map.get_mut(&key) {
                if slot.stamp.same_content(stamp) {
                    slot.used = tick;
                    return Ok(Arc::clone(&slot.file));
                }
            }
        }
        // Opened without the lock: a slow disk must not stall other shards.
        let file = match crate::sys::open_beneath(root.dir.as_fd(), rel) {
            Err(err) if err.raw_os_error() == Some(libc::EMFILE) && self.shed() > 0 => {
                crate::sys::open_beneath(root.dir.as_fd(), rel)?
            }
            other => other?,
        };
        if !FileStamp::of(&file.metadata()?).same_content(stamp) {
            return Err(io::Error::other(Changed));
        }
        let file = Arc::new(file);
        self.insert(*stamp, Arc::clone(&file), true);
        Ok(file)
    }

    /// Close every cached fd (those in use stay open until their last user
    /// drops them): the process hit its fd limit, and the cache is the one
    /// holder that can give some back. Returns how many were dropped.
    pub fn shed(&self) -> usize {
        let mut lru = self.lru.lock().unwrap_or_else(|e| e.into_inner());
        let n = lru.map.len();
        lru.map.clear();
        if n > 0 {
            tracing::warn!(closed = n, "out of fds; closed the cached large-file fds");
        }
        n
    }

    /// Cache `file`, known to match `stamp` (a build that just hashed it).
    pub fn seed(&self, stamp: FileStamp, file: File) {
        self.insert(stamp, Arc::new(file), false);
    }

    fn insert(&self, stamp: FileStamp, file: Arc<File>, opened: bool) {
        let mut lru = self.lru.lock().unwrap_or_else(|e| e.into_inner());
        lru.tick += 1;
        lru.opened += u64::from(opened);
        let used = lru.tick;
        lru.map
            .insert((stamp.dev, stamp.ino), Slot { file, stamp, used });
        while lru.map.len() > self.max {
            // Linear in the capacity, and only on a miss beyond it.
            let Some(oldest) = lru.map.iter().min_by_key(|(_, s)| s.used).map(|(k, _)| *k) else {
                break;
            };
            lru.map.remove(&oldest);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_and_verified() {
        let base =
            std::env::temp_dir().join(format!("shardhttpd-openfiles-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(&base).unwrap();
        let root = RootDir {
            dir: File::open(&base).unwrap(),
        };
        let cache = OpenFiles::new(2);
        let mut stamps = Vec::new();
        for i in 0..3 {
            let p = base.join(format!("f{i}"));
            std::fs::write(&p, format!("{i}")).unwrap();
            stamps.push(FileStamp::of(&std::fs::metadata(&p).unwrap()));
        }
        for (i, s) in stamps.iter().enumerate() {
            cache.get(&root, Path::new(&format!("f{i}")), s).unwrap();
        }
        assert_eq!(cache.counts(), (2, 3));
        // A hit does not open again.
        cache.get(&root, Path::new("f2"), &stamps[2]).unwrap();
        assert_eq!(cache.counts(), (2, 3));
        // A chmod, link or rename over changes only the ctime: still a hit.
        let mut chmodded = stamps[2];
        chmodded.ctime_ns += 1;
        cache.get(&root, Path::new("f2"), &chmodded).unwrap();
        assert_eq!(cache.counts(), (2, 3));
        // ...and opened again (evicted meanwhile) it is still the file.
        let mut chmodded = stamps[0];
        chmodded.ctime_ns += 1;
        cache.get(&root, Path::new("f0"), &chmodded).unwrap();
        assert_eq!(cache.counts(), (2, 4));
        // A changed file is refused: another size, another mtime.
        let mut stale = stamps[1];
        stale.size += 1;
        let err = cache.get(&root, Path::new("f1"), &stale).unwrap_err();
        assert!(err.get_ref().is_some_and(|e| e.is::<Changed>()));
        let mut stale = stamps[1];
        stale.mtime_ns += 1;
        let err = cache.get(&root, Path::new("f1"), &stale).unwrap_err();
        assert!(err.get_ref().is_some_and(|e| e.is::<Changed>()));
        std::fs::remove_dir_all(&base).unwrap();
    }
}
