//! The first build's lazy walk (regular files are not stated; the load
//! takes their stamps from the open file): the snapshot a stated build
//! makes, bodies placed in the reserve, and the memory budget kept.

use super::*;

/// Distinct bytes for `name`, `len` long.
fn content(name: &str, len: usize) -> Vec<u8> {
    let seed = xxh3_128(name.as_bytes()) as u8;
    (0..len)
        .map(|i| seed.wrapping_add((i % 251) as u8))
        .collect()
}

/// `n` files of `len` distinct bytes each, named `d{i % dirs}/f{i:03}.txt`.
fn write_files(dir: &TempDir, n: usize, dirs: usize, len: usize) {
    for i in 0..n {
        let name = format!("d{}/f{i:03}.txt", i % dirs);
        dir.write(&name, &content(&name, len));
    }
}

/// The body `snap` serves for `path` from memory.
fn mem_body(snap: &Snapshot, path: &[u8]) -> Vec<u8> {
    let entry = snap.entry(file_idx(snap, path));
    let Body::Mem { off } = entry.identity.body else {
        panic!("{}: expected Mem", String::from_utf8_lossy(path))
    };
    snap.mem(off, entry.identity.len as usize).to_vec()
}

#[test]
fn a_lazy_first_build_serves_what_a_stated_build_does() {
    let dir = TempDir::new("lazy-same");
    // Around every limit of the lazy load: empty, small, the largest body
    // placed from the reserve and one past it, larger than the first read,
    // the fd threshold; in a subdirectory and through a symlink.
    let files = [
        ("empty.txt", 0),
        ("a.txt", 1),
        ("b.html", 1000),
        ("sub/c.css", 4096),
        ("sub/d.bin", 64 * 1024),
        ("sub/e.bin", 64 * 1024 + 1),
        ("f.bin", 200_000),
        ("g.bin", 256 * 1024),
    ];
    for (name, len) in files {
        dir.write(name, &content(name, len));
    }
    symlink("sub/c.css", dir.0.join("link.css")).unwrap();
    let mut o = opts(&dir.0);
    o.sendfile_threshold = 256 * 1024;
    let lazy = build_first(&o, None).unwrap();
    let stated = build(&o, 1).unwrap();
    for (name, len) in files.iter().copied().chain([("link.css", 4096)]) {
        let url = format!("/{name}");
        let url = url.as_bytes();
        let (l, s) = (
            lazy.entry(file_idx(&lazy, url)),
            stated.entry(file_idx(&stated, url)),
        );
        assert_eq!(is_mem(&lazy, url), is_mem(&stated, url), "{name}");
        assert_eq!(is_mem(&lazy, url), len < 256 * 1024, "{name}");
        assert_eq!(etag(&lazy, url), etag(&stated, url), "{name}");
        assert_eq!(l.identity.len, len as u64, "{name}");
        assert_eq!(l.source, s.source, "{name}: the stamps the load took");
        assert_eq!(l.identity().head_200_vec(), s.identity().head_200_vec());
        if is_mem(&lazy, url) {
            let real = if name == "link.css" {
                "sub/c.css"
            } else {
                name
            };
            assert!(mem_body(&lazy, url) == content(real, len), "{name}");
        }
    }
    assert_eq!(lazy.stats.mem_bytes, stated.stats.mem_bytes);
    assert_eq!(lazy.stats.file_bytes, stated.stats.file_bytes);
    assert!(!lazy.walked.budget_spent);
}

#[test]
fn a_lazy_first_build_keeps_the_memory_budget() {
    let dir = TempDir::new("lazy-budget");
    for i in 0..40 {
        let name = format!("f{i:02}.txt");
        dir.write(&name, &content(&name, 1000));
    }
    let mut o = opts(&dir.0);
    o.cache_max_bytes = 10_500;
    let snap = build_first(&o, None).unwrap();
    // Which files fit depends on the order the loaders reach them; how
    // many does not.
    assert_eq!(snap.stats.mem_bytes, 10_000);
    assert_eq!(snap.stats.file_bytes, 30_000);
    let in_mem = (0..40)
        .filter(|i| is_mem(&snap, format!("/f{i:02}.txt").as_bytes()))
        .count();
    assert_eq!(in_mem, 10);
    assert!(snap.walked.budget_spent);
    for i in 0..40 {
        let name = format!("f{i:02}.txt");
        let url = format!("/{name}");
        if is_mem(&snap, url.as_bytes()) {
            assert!(mem_body(&snap, url.as_bytes()) == content(&name, 1000));
        }
    }
}

#[test]
fn the_reserve_is_given_back_after_the_load() {
    let dir = TempDir::new("lazy-reserve");
    write_files(&dir, 300, 7, 3000);
    let mut o = opts(&dir.0);
    o.cache_max_bytes = 1 << 30;
    let snap = build_first(&o, None).unwrap();
    assert_eq!(snap.stats.mem_bytes, 900_000);
    // One segment, at least half of it bodies (so that the next build
    // shares it): not the reservation of a whole budget, nor the loaders'
    // chunks mostly unused.
    assert_eq!(snap.segments.len(), 1);
    let len = snap.segments[0].as_ref().unwrap().len();
    assert!(
        (900_000..=1_800_000).contains(&len),
        "segment of {len} B for 900 000 B of bodies"
    );
    for i in (0..300).step_by(37) {
        let name = format!("d{}/f{i:03}.txt", i % 7);
        let url = format!("/{name}");
        assert!(mem_body(&snap, url.as_bytes()) == content(&name, 3000));
    }
}

/// A first build past `preload_max_files` states its files and reads none:
/// it serves what a build sending every file from its fd serves (same
/// heads, validators from the stamps), and a build of no more files than
/// that keeps them in memory.
#[test]
fn a_first_build_past_preload_max_files_serves_every_file_from_disk() {
    let dir = TempDir::new("from-disk");
    let mut names = Vec::new();
    for i in 0..12 {
        let name = format!("d{}/f{i:02}.html", i % 3);
        dir.write(&name, &content(&name, 100 * i + 1));
        names.push(name);
    }
    symlink("d0/f03.html", dir.0.join("link.html")).unwrap();
    names.push("link.html".into());
    let mut o = opts(&dir.0);
    // 13 files: the link is walked as one.
    o.preload_max_files = 13;
    let preloaded = build_first(&o, None).unwrap();
    assert!(!preloaded.from_disk);
    o.preload_max_files = 12;
    let snap = build_first(&o, None).unwrap();
    assert!(snap.from_disk);
    assert_eq!(snap.stats.mem_bytes, 0);
    assert_eq!(snap.stats.file_bytes, preloaded.stats.mem_bytes);
    let mut fds = opts(&dir.0);
    fds.sendfile_threshold = 1;
    let from_fds = build(&fds, 1).unwrap();
    for name in &names {
        let url = format!("/{name}");
        let url = url.as_bytes();
        let (s, f) = (
            snap.entry(file_idx(&snap, url)),
            from_fds.entry(file_idx(&from_fds, url)),
        );
        assert!(matches!(s.identity.body, Body::File(_)), "{name} from disk");
        assert_eq!(s.identity.len, f.identity.len, "{name}");
        assert_eq!(s.source, f.source, "{name}: the stamps it states");
        assert_eq!(
            s.identity().head_200_vec(),
            f.identity().head_200_vec(),
            "{name}: head and validator"
        );
    }
}

/// A start from disk reads no sidecar (it has no bytes to check one
/// against): files get their variants from the background load.
#[test]
fn a_first_build_from_disk_leaves_sidecars_to_the_load() {
    let dir = TempDir::new("from-disk-sidecar");
    let page = content("page", 5000);
    dir.write("page.html", &page);
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    std::io::Write::write_all(&mut gz, &page).unwrap();
    dir.write("page.html.gz", &gz.finish().unwrap());
    let mut o = opts(&dir.0);
    o.preload_max_files = 0;
    let snap = build_first(&o, None).unwrap();
    assert!(snap.from_disk);
    let entry = snap.entry(file_idx(&snap, b"/page.html"));
    assert_eq!(entry.variants().count(), 0);
    o.preload_max_files = crate::cache::DEFAULT_PRELOAD_MAX_FILES;
    let loaded = build_first(&o, None).unwrap();
    let entry = loaded.entry(file_idx(&loaded, b"/page.html"));
    assert_eq!(entry.variants().count(), 1, "the sidecar, once loaded");
}

/// A full walk while a start from disk is served (SIGHUP, a rescan) keeps
/// its entries rather than reading the whole root under the rebuild lock:
/// nothing changed, nothing to swap; one file changed, only it is read,
/// and the snapshot still says it is served from disk.
#[test]
fn a_full_walk_during_a_start_from_disk_reads_only_what_changed() {
    let dir = TempDir::new("from-disk-rescan");
    write_files(&dir, 20, 4, 500);
    let mut o = opts(&dir.0);
    o.preload_max_files = 10;
    let snap = build_first(&o, None).unwrap();
    assert!(snap.from_disk);
    let none = HashSet::new();
    assert!(matches!(
        rebuild(&o, 2, Some(&snap), &none, None).unwrap(),
        Built::Unchanged
    ));
    std::thread::sleep(Duration::from_millis(30));
    dir.write("d1/f005.txt", b"changed");
    let Built::New(next) = rebuild(&o, 2, Some(&snap), &none, None).unwrap() else {
        panic!("a changed file must make a new snapshot");
    };
    assert_eq!((next.stats.loaded, next.stats.reused), (1, 19));
    assert!(next.from_disk);
    assert!(mem_body(&next, b"/d1/f005.txt") == b"changed");
}
