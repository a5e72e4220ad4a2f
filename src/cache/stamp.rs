//! What a build saw of a file ([`FileStamp`]) and what serving re-checks
//! on an open fd ([`Witness`]).

/// What a build saw of a file: its identity (device, inode) and what any
/// change to it moves. The build compares whole stamps (a chmod or rename
/// is worth a re-stat); serving compares only [`FileStamp::same_content`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileStamp {
    pub dev: u64,
    pub ino: u64,
    pub size: u64,
    /// Nanoseconds since the epoch; an i64 reaches the year 2262.
    pub mtime_ns: i64,
    pub ctime_ns: i64,
}

impl FileStamp {
    /// Not stated yet (see `Walk::lazy`): no real file has inode 0.
    pub const UNKNOWN: FileStamp = FileStamp {
        dev: 0,
        ino: 0,
        size: 0,
        mtime_ns: 0,
        ctime_ns: 0,
    };

    pub fn is_known(&self) -> bool {
        *self != FileStamp::UNKNOWN
    }

    pub fn of(meta: &std::fs::Metadata) -> Self {
        use std::os::unix::fs::MetadataExt;
        FileStamp {
            dev: meta.dev(),
            ino: meta.ino(),
            size: meta.size(),
            mtime_ns: nanos(meta.mtime(), meta.mtime_nsec()),
            ctime_ns: nanos(meta.ctime(), meta.ctime_nsec()),
        }
    }

    /// Whether `other` is the same file with the same bytes as far as the
    /// kernel tells: same inode, size and mtime. Not ctime: a rename over
    /// the file, an unlink, a chmod or a new hard link change the inode's
    /// ctime without touching a byte, and a download under way must outlive
    /// them (it is sent from the fd it started on).
    pub fn same_content(&self, other: &FileStamp) -> bool {
        (self.dev, self.ino) == (other.dev, other.ino) && self.witness() == other.witness()
    }

    /// The part of the stamp an open fd of this file is checked against.
    pub fn witness(&self) -> Witness {
        Witness {
            size: self.size,
            mtime_ns: self.mtime_ns,
        }
    }

    /// [`FileStamp::of`] from what `sys::lstat_at` says.
    pub fn of_lstat(st: &crate::sys::Lstat) -> Self {
        FileStamp {
            dev: st.dev,
            ino: st.ino,
            size: st.size,
            mtime_ns: nanos(st.mtime.0, st.mtime.1),
            ctime_ns: nanos(st.ctime.0, st.ctime.1),
        }
    }
}

/// What the verified copy re-checks on the fd a response is sent from,
/// around every piece: the size (a truncate or append) and the mtime (a
/// write sets it before it changes a byte, on every Linux filesystem:
/// `file_modified` precedes the copy in `generic_perform_write`). The
/// device and inode cannot change under an open fd, and the ctime is left
/// out on purpose (see [`FileStamp::same_content`]). What this cannot see:
/// a rewrite in place that then sets the mtime back to its old value to the
/// nanosecond (`utimensat`), between our read and our `fstat`; `rsync
/// --inplace` does not (its mtime is the new source's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Witness {
    pub size: u64,
    pub mtime_ns: i64,
}

impl Witness {
    pub fn of(meta: &std::fs::Metadata) -> Witness {
        use std::os::unix::fs::MetadataExt;
        Witness {
            size: meta.size(),
            mtime_ns: nanos(meta.mtime(), meta.mtime_nsec()),
        }
    }
}

/// Seconds and nanoseconds as nanoseconds, saturating past 2262.
pub(super) fn nanos(secs: i64, nsec: i64) -> i64 {
    secs.saturating_mul(1_000_000_000).saturating_add(nsec)
}
