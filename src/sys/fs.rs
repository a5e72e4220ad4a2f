//! Opening files beneath a directory fd, so that a path component swapped
//! for a symlink after the walk cannot lead a build outside the root.

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path};
use std::sync::atomic::{AtomicBool, Ordering};

use super::syscall;

/// Flags for every file a build opens: read-only, close-on-exec, no
/// controlling terminal, and non-blocking so that a FIFO swapped in since
/// the walk cannot block the open (a regular file ignores it, `sendfile`
/// and `pread` included).
const READ_FLAGS: libc::c_int =
    libc::O_RDONLY | libc::O_CLOEXEC | libc::O_NOCTTY | libc::O_NONBLOCK;

/// Times `openat2` is retried on EAGAIN, which the kernel returns when a
/// rename or mount raced a `RESOLVE_BENEATH` lookup (it cannot then prove the
/// result stayed beneath, and asks the caller to try again).
const OPENAT2_EAGAIN_RETRIES: usize = 8;

/// Set once `openat2` answered ENOSYS (a kernel before 5.6): from then on
/// files are opened one component at a time.
static NO_OPENAT2: AtomicBool = AtomicBool::new(false);

/// Open the regular file at `rel` (relative, no `..`) beneath the directory
/// `dir`, for reading. No step of the lookup may leave `dir`: a symlink
/// whose target stays beneath it is followed, one that leads out fails with
/// `EXDEV` (or `ELOOP` on the fallback path, which follows no symlink at
/// all: the walk hands over canonical paths, so a symlink met here was
/// swapped in since).
pub fn open_beneath(dir: BorrowedFd<'_>, rel: &Path) -> io::Result<File> {
    open_resolving(dir, rel, 0)
}

/// [`open_beneath`] following no symlink at all (`ELOOP` on one): for a
/// path the caller knows to be canonical but has not stated, so a symlink
/// swapped in cannot stand for it.
pub fn open_beneath_no_symlinks(dir: BorrowedFd<'_>, rel: &Path) -> io::Result<File> {
    open_resolving(dir, rel, libc::RESOLVE_NO_SYMLINKS)
}

fn open_resolving(dir: BorrowedFd<'_>, rel: &Path, resolve: u64) -> io::Result<File> {
    if !NO_OPENAT2.load(Ordering::Relaxed) {
        match openat2_beneath(dir, rel, resolve) {
            Err(err) if err.raw_os_error() == Some(libc::ENOSYS) => {
                NO_OPENAT2.store(true, Ordering::Relaxed);
            }
            other => return other,
        }
    }
    open_by_components(dir, rel)
}

fn cstring(bytes: &[u8]) -> io::Result<CString> {
    CString::new(bytes).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

fn openat2_beneath(dir: BorrowedFd<'_>, rel: &Path, resolve: u64) -> io::Result<File> {
    let path = cstring(rel.as_os_str().as_bytes())?;
    // `open_how` is non-exhaustive in libc; zeroed is its documented
    // "no options" value, then the fields are set.
    // SAFETY: open_how is a plain struct of three u64s; all-zero is valid.
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = READ_FLAGS as u64;
    how.resolve = libc::RESOLVE_BENEATH | libc::RESOLVE_NO_MAGICLINKS | resolve;
    let mut tries = 0;
    loop {
        // SAFETY: `dir` is a live fd borrowed by the caller, `path` a
        // NUL-terminated string and `how` a live open_how, both outliving
        // the call; the size passed is open_how's own, so the kernel reads
        // no more than the struct holds.
        let res = syscall!(syscall(
            libc::SYS_openat2,
            dir.as_raw_fd(),
            path.as_ptr(),
            &how as *const libc::open_how,
            std::mem::size_of::<libc::open_how>(),
        ));
        match res {
            Ok(fd) => {
                // SAFETY: openat2 returned a new fd that nothing else owns.
                return Ok(File::from(unsafe {
                    OwnedFd::from_raw_fd(fd as libc::c_int)
                }));
            }
            Err(err)
                if err.raw_os_error() == Some(libc::EAGAIN) && tries < OPENAT2_EAGAIN_RETRIES =>
            {
                tries += 1;
            }
            Err(err) => return Err(err),
        }
    }
}

/// `openat` one component at a time with `O_NOFOLLOW`: directories with
/// `O_DIRECTORY`, the last component as a file.
fn open_by_components(dir: BorrowedFd<'_>, rel: &Path) -> io::Result<File> {
    let mut names = Vec::new();
    for component in rel.components() {
        match component {
            Component::Normal(name) => names.push(name),
            Component::CurDir => {}
            _ => return Err(io::Error::from_raw_os_error(libc::EXDEV)),
        }
    }
    let Some((last, dirs)) = names.split_last() else {
        return Err(io::Error::from_raw_os_error(libc::EISDIR));
    };
    let mut held: Option<OwnedFd> = None;
    for name in dirs {
        let at = held.as_ref().map_or(dir.as_raw_fd(), |fd| fd.as_raw_fd());
        let fd = openat(
            at,
            name.as_bytes(),
            libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        )?;
        held = Some(fd);
    }
    let at = held.as_ref().map_or(dir.as_raw_fd(), |fd| fd.as_raw_fd());
    Ok(File::from(openat(
        at,
        last.as_bytes(),
        READ_FLAGS | libc::O_NOFOLLOW,
    )?))
}

fn openat(dir: libc::c_int, name: &[u8], flags: libc::c_int) -> io::Result<OwnedFd> {
    let name = cstring(name)?;
    // SAFETY: `dir` is a live fd borrowed by the caller, `name` a
    // NUL-terminated string that outlives the call.
    let fd = syscall!(openat(dir, name.as_ptr(), flags))?;
    // SAFETY: openat returned a new fd that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// What `fstatat(dir, rel, AT_SYMLINK_NOFOLLOW)` says of a path: the
/// fields a build's file stamp needs. Times are (seconds, nanoseconds).
#[derive(Debug, Clone, Copy)]
pub struct Lstat {
    pub is_file: bool,
    pub dev: u64,
    pub ino: u64,
    pub size: u64,
    pub mtime: (i64, i64),
    pub ctime: (i64, i64),
}

/// `lstat` of `rel` relative to the directory `dir`: the directory the
/// build's opens start from too, whatever its path names meanwhile (a
/// swapped root symlink). Unlike [`open_beneath`] it may pass a symlink
/// swapped in for a directory; callers that serve the file open it beneath
/// `dir` and check it against this stamp first.
pub fn lstat_at(dir: BorrowedFd<'_>, rel: &Path) -> io::Result<Lstat> {
    let name = cstring(rel.as_os_str().as_bytes())?;
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: `dir` is a live fd borrowed by the caller, `name` a
    // NUL-terminated string and `st` writable memory of the size fstatat
    // fills, both outliving the call.
    syscall!(fstatat(
        dir.as_raw_fd(),
        name.as_ptr(),
        st.as_mut_ptr(),
        libc::AT_SYMLINK_NOFOLLOW
    ))?;
    // SAFETY: fstatat succeeded, so it filled `st`.
    let st = unsafe { st.assume_init() };
    Ok(Lstat {
        is_file: st.st_mode & libc::S_IFMT == libc::S_IFREG,
        dev: st.st_dev,
        ino: st.st_ino,
        size: st.st_size as u64,
        mtime: (st.st_mtime, st.st_mtime_nsec),
        ctime: (st.st_ctime, st.st_ctime_nsec),
    })
}

/// The soft `RLIMIT_NOFILE`: how many fds this process may hold.
pub fn nofile_limit() -> Option<u64> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit into the struct we pass.
    syscall!(getrlimit(libc::RLIMIT_NOFILE, &mut lim)).ok()?;
    Some(lim.rlim_cur)
}

/// Shrink an anonymous mapping to its first `len` bytes, in place (the
/// rest is unmapped); `len` must be non-zero and at most its length.
pub fn shrink_anon(map: &mut memmap2::MmapMut, len: usize) -> io::Result<()> {
    debug_assert!(len > 0 && len <= map.len());
    // SAFETY: the mapping is anonymous (no file whose end could be passed),
    // it only shrinks, and without `may_move` it stays where it is, so
    // the first `len` bytes, which every reference into it lies within
    // (the caller handed out no more), keep their address and contents.
    unsafe { map.remap(len, memmap2::RemapOptions::new()) }
}

/// Fault in the anonymous memory of `buf` for writing, in one call rather
/// than a fault per page as it is filled (`MADV_POPULATE_WRITE`, Linux
/// 5.14). Best effort: an older kernel's EINVAL leaves the faults to come.
pub fn populate_write(buf: &mut [u8]) {
    static PAGE: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    // SAFETY: sysconf reads a constant of the system; no preconditions.
    let page = *PAGE.get_or_init(|| match unsafe { libc::sysconf(libc::_SC_PAGESIZE) } {
        n if n > 0 => n as usize,
        _ => 4096,
    });
    let start = buf.as_mut_ptr() as usize;
    let aligned = start.next_multiple_of(page);
    let end = (start + buf.len()) / page * page;
    if end <= aligned {
        return;
    }
    // SAFETY: the range lies within `buf`, memory this caller borrows
    // mutably; populating anonymous memory maps zero pages where none were
    // and changes no byte already written.
    unsafe {
        libc::madvise(
            aligned as *mut libc::c_void,
            end - aligned,
            libc::MADV_POPULATE_WRITE,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::os::fd::AsFd;
    use std::os::unix::fs::symlink;

    #[test]
    fn beneath_follows_inner_links_and_refuses_outer_ones() {
        let base = std::env::temp_dir().join(format!("shardhttpd-sysfs-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let root = base.join("root");
        std::fs::create_dir_all(root.join("real")).unwrap();
        std::fs::create_dir_all(base.join("outside")).unwrap();
        std::fs::write(root.join("real/f"), b"inside").unwrap();
        std::fs::write(base.join("outside/f"), b"outside").unwrap();
        symlink("real", root.join("inner")).unwrap();
        symlink(base.join("outside"), root.join("outer")).unwrap();
        let dir = File::open(&root).unwrap();
        for fallback in [false, true] {
            let open = |rel: &str| {
                if fallback {
                    open_by_components(dir.as_fd(), Path::new(rel))
                } else {
                    open_beneath(dir.as_fd(), Path::new(rel))
                }
            };
            let mut s = String::new();
            open("real/f").unwrap().read_to_string(&mut s).unwrap();
            assert_eq!(s, "inside");
            assert!(open("outer/f").is_err(), "fallback={fallback}");
            assert!(open("../outside/f").is_err(), "fallback={fallback}");
            if !fallback {
                let mut s = String::new();
                open("inner/f").unwrap().read_to_string(&mut s).unwrap();
                assert_eq!(s, "inside");
            }
        }
        std::fs::remove_dir_all(&base).unwrap();
    }
}
