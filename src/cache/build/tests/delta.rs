//! The incremental rebuild against the full walk: after each change to a
//! scratch tree, patching the previous snapshot with the paths inotify
//! would report must serve exactly what a full walk of the tree serves,
//! while looking at a handful of paths.

use std::collections::HashSet;
use std::fs;
use std::path::{Path, PathBuf};

use super::*;
use crate::cache::{Body, BuildOptions, Resource, Snapshot};

/// The build options of `super::opts`, with large files from 4 KiB (so
/// both body kinds change) and a 404 page, for `root` canonicalised as
/// the server does.
fn opts(root: &Path) -> BuildOptions {
    BuildOptions {
        sendfile_threshold: 4096,
        error_pages: vec![(404, "404.html".into())],
        ..super::opts(&fs::canonicalize(root).unwrap())
    }
}

/// What a snapshot serves under each path: the resource kind and, for a
/// file, its 200 head and body.
fn served(snap: &Snapshot) -> Vec<(Vec<u8>, String)> {
    let mut out: Vec<(Vec<u8>, String)> = snap
        .index
        .iter()
        .map(|(url, r)| {
            let what = match r {
                Resource::File(i) => {
                    let e = snap.entry(i);
                    let body = match &e.identity.body {
                        Body::Mem { off } => snap.mem(*off, e.identity.len as usize).to_vec(),
                        Body::File(f) => {
                            use std::os::unix::fs::FileExt;
                            let mut v = vec![0; f.stamp.size as usize];
                            f.file().unwrap().read_exact_at(&mut v, 0).unwrap();
                            v
                        }
                    };
                    format!(
                        "file {} {}",
                        String::from_utf8_lossy(&e.identity().head_200_vec()),
                        String::from_utf8_lossy(&body)
                    )
                }
                r => format!("{r:?}"),
            };
            (url.to_vec(), what)
        })
        .collect();
    out.sort();
    out
}

fn error_page(snap: &Snapshot) -> Option<String> {
    snap.error_page(404).map(|i| {
        let len = snap.entry(i).identity.len as usize;
        let Body::Mem { off } = snap.entry(i).identity.body else {
            panic!("a small page")
        };
        String::from_utf8_lossy(snap.mem(off, len)).into_owned()
    })
}

/// Patch `prev` with `changed`, and check it against a full walk.
fn step(o: &BuildOptions, prev: &Snapshot, changed: &[&Path], what: &str) -> Option<Snapshot> {
    let changed: HashSet<PathBuf> = changed.iter().map(|p| p.to_path_buf()).collect();
    let generation = prev.generation + 1;
    let patched = match rebuild(o, generation, Some(prev), &HashSet::new(), Some(&changed)) {
        Ok(Built::New(s)) => Some(s),
        Ok(Built::Unchanged) => None,
        Err(err) => panic!("{what}: {err:#}"),
    };
    let full = build(o, generation).unwrap();
    let now = patched.as_ref().unwrap_or(prev);
    assert_eq!(served(now), served(&full), "{what}");
    assert_eq!(error_page(now), error_page(&full), "{what}");
    assert_eq!(now.stats.files, full.stats.files, "{what}");
    assert_eq!(now.stats.mem_bytes, full.stats.mem_bytes, "{what}");
    assert_eq!(now.stats.file_bytes, full.stats.file_bytes, "{what}");
    if let Some(p) = &patched {
        assert!(
            p.stats.paths_examined < 60,
            "{what}: examined {} paths, a full walk?",
            p.stats.paths_examined
        );
        let mem: u64 = p.segment_live.iter().sum();
        assert_eq!(mem, p.stats.mem_bytes, "{what}: live bytes");
    }
    patched
}

#[test]
fn a_patched_snapshot_serves_what_a_full_walk_serves() {
    let root = TempDir::new("delta-equiv");
    for d in 0..20 {
        for f in 0..20 {
            root.write(
                &format!("d{d:02}/f{f:02}.txt"),
                format!("{d} {f}\n").as_bytes(),
            );
        }
    }
    root.write("d03/index.html", b"index of d03\n");
    root.write("big/large.bin", &[7u8; 10_000]);
    let o = opts(&root.0);
    let mut snap = build(&o, 1).unwrap();
    let r = &root.0;
    let next = |snap: &mut Snapshot, changed: &[&Path], what: &str, want_new: bool| {
        let patched = step(&o, snap, changed, what);
        assert_eq!(patched.is_some(), want_new, "{what}");
        if let Some(p) = patched {
            *snap = p;
        }
    };

    let f = root.write("d01/f01.txt", b"changed\n");
    next(&mut snap, &[&f], "a file rewritten", true);
    assert_eq!(snap.stats.bytes_copied, 8, "only its bytes");
    next(&mut snap, &[&f], "nothing new", false);
    let f = root.write("d01/new.txt", b"new\n");
    next(&mut snap, &[&f], "a file added", true);
    fs::remove_file(r.join("d02/f05.txt")).unwrap();
    next(&mut snap, &[&r.join("d02/f05.txt")], "a file removed", true);
    root.write("d05/a/b/c/d/deep.txt", b"deep\n");
    root.write("d05/a/b/x.txt", b"x\n");
    next(
        &mut snap,
        &[&r.join("d05/a")],
        "a directory created and filled",
        true,
    );
    fs::rename(r.join("d06"), r.join("d05/a/moved")).unwrap();
    next(
        &mut snap,
        &[&r.join("d06"), &r.join("d05/a/moved")],
        "a directory moved",
        true,
    );
    fs::remove_dir_all(r.join("d07")).unwrap();
    next(&mut snap, &[&r.join("d07")], "a directory removed", true);
    let f = root.write("d08/index.html", b"now an index\n");
    next(&mut snap, &[&f], "an index file added", true);
    fs::remove_file(r.join("d03/index.html")).unwrap();
    next(
        &mut snap,
        &[&r.join("d03/index.html")],
        "an index file removed",
        true,
    );
    let f = root.write("404.html", b"not here\n");
    next(&mut snap, &[&f], "an error page added", true);
    fs::remove_file(r.join("d09/f00.txt")).unwrap();
    root.write("d09/f00.txt/inner.txt", b"a file became a directory\n");
    next(
        &mut snap,
        &[&r.join("d09/f00.txt")],
        "a file replaced by a directory",
        true,
    );
    let f = root.write("big/large.bin", &[8u8; 12_000]);
    next(&mut snap, &[&f], "a large file rewritten", true);
    let f = root.write("d10/.hidden", b"dotfile\n");
    next(&mut snap, &[&f], "a dotfile", false);
    // Many rounds: segments stay bounded, bodies right.
    for round in 0..80 {
        let f = root.write(
            &format!("d{:02}/f{:02}.txt", 11 + round % 5, round % 20),
            format!("round {round}\n").as_bytes(),
        );
        next(&mut snap, &[&f], "rounds", true);
        assert!(snap.stats.segments <= 32);
    }
}

#[test]
fn a_patch_gives_way_to_a_full_walk_when_it_cannot_decide_locally() {
    let root = TempDir::new("delta-fallback");
    root.write("a/b.txt", b"b\n");
    root.write(".hidden/c.txt", b"c\n");
    let o = opts(&root.0);
    let snap = build(&o, 1).unwrap();
    // A file in a directory the walk never entered: a full walk.
    let f = root.write(".hidden/x/d.txt", b"d\n");
    let changed: HashSet<PathBuf> = [f].into_iter().collect();
    assert!(matches!(
        rebuild(&o, 2, Some(&snap), &HashSet::new(), Some(&changed)),
        Ok(Built::Unchanged)
    ));
    // A symlink appears: patched no more.
    std::os::unix::fs::symlink(root.0.join("a"), root.0.join("link")).unwrap();
    let changed: HashSet<PathBuf> = [root.0.join("link")].into_iter().collect();
    let Ok(Built::New(next)) = rebuild(&o, 2, Some(&snap), &HashSet::new(), Some(&changed)) else {
        panic!("the link is new")
    };
    assert!(next.walked.symlinks);
    assert_eq!(next.resolve(b"/link/b.txt").map(|_| ()), Some(()));
    assert!(next.stats.paths_examined >= 4, "a full walk");
}
