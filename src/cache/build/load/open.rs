//! Opening a file the walk found: beneath the root's fd, checked to be the
//! very file the walk stated, and telling a tree changed under the build
//! from other errors.

use super::*;

/// Open a file the walk saw as regular, beneath the root's fd (no lookup
/// step may leave the root, whatever was swapped for a symlink since the
/// walk), and check it is the very file the walk stated: same device and
/// inode. A different one means the tree changed under the build. Returns
/// the file with that `fstat`, which is also the stamp before a read.
pub(in crate::cache::build) fn open_regular(
    walk: &Walk<'_>,
    path: &Path,
    seen: &FileStamp,
) -> io::Result<(File, Metadata)> {
    let file = open_beneath_root(walk, path, seen.is_known())?;
    let meta = file.metadata()?;
    if seen.is_known() {
        same_file(&meta, seen)?;
    } else if !meta.is_file() {
        return Err(io::Error::other(Swapped));
    }
    Ok((file, meta))
}

/// [`Swapped`] unless `meta` is the file the walk stated as `seen`.
pub(super) fn same_file(meta: &Metadata, seen: &FileStamp) -> io::Result<()> {
    if (meta.dev(), meta.ino()) != (seen.dev, seen.ino) {
        return Err(io::Error::other(Swapped));
    }
    Ok(())
}

/// Open the walked file at `path` beneath the root's fd; the caller checks
/// it is the file the walk stated. One the walk did not state (`stated`
/// false) is opened following no symlink: its canonical path then leads to
/// whatever file is there now, never elsewhere.
pub(super) fn open_beneath_root(walk: &Walk<'_>, path: &Path, stated: bool) -> io::Result<File> {
    let rel = rel_path(walk, path)?;
    let dir = walk.root_dir.dir.as_fd();
    let open = match stated {
        true => crate::sys::open_beneath,
        false => crate::sys::open_beneath_no_symlinks,
    };
    let file = match open(dir, rel) {
        // The cache of large-file fds is the one holder that can give some
        // back; only if that is not enough does the build fail.
        Err(err) if err.raw_os_error() == Some(libc::EMFILE) && walk.opts.open_files.shed() > 0 => {
            open(dir, rel)?
        }
        other => other?,
    };
    Ok(file)
}

/// A walked path relative to the walk's root (EXDEV for one outside it).
pub(super) fn rel_path<'p>(walk: &Walk<'_>, path: &'p Path) -> io::Result<&'p Path> {
    walk.rel(path)
        .ok_or_else(|| io::Error::from_raw_os_error(libc::EXDEV))
}

/// The file opened is not the one the walk stated.
#[derive(Debug)]
pub(in crate::cache::build) struct Swapped;

impl std::fmt::Display for Swapped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("replaced since the walk")
    }
}

impl std::error::Error for Swapped {}

/// Whether an open or read error means the tree changed under the build:
/// the path vanished, now leads outside the root (EXDEV from
/// `RESOLVE_BENEATH`), passes a symlink swapped in for a walked (canonical)
/// component (ELOOP), or names another file.
pub(super) fn tree_changed(err: &io::Error) -> bool {
    err.kind() == io::ErrorKind::NotFound
        || matches!(err.raw_os_error(), Some(libc::EXDEV | libc::ELOOP))
        || err.get_ref().is_some_and(|e| e.is::<Swapped>())
}
