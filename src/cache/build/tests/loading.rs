//! The load's common case (read at once, one `fstat` after) and its
//! fallbacks: a file changed since the walk is read again with its new
//! stamp, and another file under the walked name is refused. A body is
//! read into its slot of the placed segment when the file is as long as the
//! walk saw it, into a buffer of its own otherwise.

use super::*;
use crate::cache::build::load::{load_file, LoadedBody, MemPolicy, Swapped};
use crate::cache::build::place::Dest;

fn stamp_of(path: &Path) -> FileStamp {
    FileStamp::of(&fs::metadata(path).unwrap())
}

/// Until a ctime set now is settled (older than `STAMP_SETTLE`).
fn settle() {
    std::thread::sleep(Duration::from_millis(30));
}

fn policy(size: u64) -> MemPolicy {
    MemPolicy {
        below: 1 << 20,
        budget: size,
    }
}

#[test]
fn a_settled_unchanged_file_is_read_with_the_walks_stamp() {
    let dir = TempDir::new("load-fast");
    let path = dir.write("a.txt", b"hello");
    settle();
    let seen = stamp_of(&path);
    let loaded = load_file(&path, File::open(&path).unwrap(), &seen, policy(5), None)
        .unwrap()
        .unwrap();
    assert!(loaded.settled);
    assert_eq!(loaded.stamp, seen);
    assert!(matches!(&loaded.body, LoadedBody::Mem(b) if b == b"hello"));
    assert_eq!(loaded.hash, xxh3_128(b"hello"));
}

#[test]
fn a_file_written_since_the_walk_is_read_again_with_its_new_stamp() {
    let dir = TempDir::new("load-changed");
    let path = dir.write("a.txt", b"hello");
    settle();
    let seen = stamp_of(&path);
    fs::write(&path, b"hello, again").unwrap();
    let now = stamp_of(&path);
    assert_ne!(now, seen);
    // Budgeted for the walk's size: the new, longer content no longer fits
    // and is sent from the fd, under its new stamp.
    let loaded = load_file(&path, File::open(&path).unwrap(), &seen, policy(5), None)
        .unwrap()
        .unwrap();
    assert!(loaded.settled);
    assert_eq!(loaded.stamp, now);
    assert_eq!(loaded.len, 12);
    // With room for it, its new bytes.
    let loaded = load_file(&path, File::open(&path).unwrap(), &seen, policy(64), None)
        .unwrap()
        .unwrap();
    assert_eq!(loaded.stamp, now);
    assert!(matches!(&loaded.body, LoadedBody::Mem(b) if b == b"hello, again"));
}

#[test]
fn another_file_under_the_walked_name_is_refused() {
    let dir = TempDir::new("load-swapped");
    let walked = dir.write("a.txt", b"hello");
    let other = dir.write("b.txt", b"other");
    settle();
    let seen = stamp_of(&walked);
    for budget in [5, 0] {
        let err = load_file(
            &walked,
            File::open(&other).unwrap(),
            &seen,
            policy(budget),
            None,
        )
        .err()
        .expect("a swapped file is an error");
        assert!(err.get_ref().is_some_and(|e| e.is::<Swapped>()), "{err}");
    }
}

#[test]
fn a_file_as_long_as_the_walk_saw_it_is_read_into_its_slot() {
    let dir = TempDir::new("load-placed");
    let path = dir.write("a.txt", b"hello");
    settle();
    let seen = stamp_of(&path);
    let mut slot = [0u8; 5];
    let dest = Dest {
        off: 7,
        buf: &mut slot,
    };
    let loaded = load_file(
        &path,
        File::open(&path).unwrap(),
        &seen,
        policy(5),
        Some(dest),
    )
    .unwrap()
    .unwrap();
    assert!(matches!(loaded.body, LoadedBody::Placed { off: 7 }));
    assert_eq!((loaded.len, loaded.hash), (5, xxh3_128(b"hello")));
    assert_eq!(&slot, b"hello");
}

#[test]
fn a_file_whose_length_changed_since_the_walk_gets_a_buffer_of_its_own() {
    let dir = TempDir::new("load-placed-grown");
    let path = dir.write("a.txt", b"hello");
    settle();
    let seen = stamp_of(&path);
    fs::write(&path, b"hello, again").unwrap();
    let mut slot = [0u8; 5];
    let dest = Dest {
        off: 0,
        buf: &mut slot,
    };
    let loaded = load_file(
        &path,
        File::open(&path).unwrap(),
        &seen,
        policy(64),
        Some(dest),
    )
    .unwrap()
    .unwrap();
    assert_eq!(loaded.stamp, stamp_of(&path));
    assert!(matches!(&loaded.body, LoadedBody::Mem(b) if b == b"hello, again"));
}

#[test]
fn the_first_build_loads_on_four_threads_per_core_unless_it_compresses() {
    let cores = crate::sys::cores();
    let first = Mode::First { hook: None }.loaders(false);
    // Four per core, so a loader waiting on the disk leaves its core to
    // another, but never fewer than the cores and at most 32 beyond them.
    assert!(first >= cores, "{first} loaders for {cores} cores");
    assert!(first <= cores.max(32), "{first} loaders for {cores} cores");
    if cores <= 8 {
        assert_eq!(first, 4 * cores);
    }
    assert_eq!(Mode::Background { hook: None }.loaders(false), cores);
    // Compressing, the encoders keep the cores busy and hold their state.
    assert_eq!(Mode::First { hook: None }.loaders(true), cores);
}
