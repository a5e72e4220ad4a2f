//! Advisory whole-file locks (`flock`), for the ACME state directory that
//! several replicas may share: the lock goes with the open file
//! description, so it is released when the file is closed or the process
//! dies, and never outlives a crashed holder.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;

use super::syscall;

/// Take an exclusive lock on `file` without waiting: `Ok(true)` when taken,
/// `Ok(false)` when another open file description holds it.
pub fn try_lock_exclusive(file: &File) -> io::Result<bool> {
    // SAFETY: flock takes an fd and flags and touches no memory; the fd is
    // owned by `file`, borrowed for the length of the call. With LOCK_NB it
    // never blocks.
    match syscall!(flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB)) {
        Ok(_) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(false),
        Err(e) => Err(e),
    }
}
