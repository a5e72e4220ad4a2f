//! The walk with its listing helpers ([`super::super::prefetch`]): the same
//! tree gives the same snapshot, in sorted depth-first order, however the
//! listings were shared out; and the first build's hook sees every
//! directory before it is listed.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use super::*;

/// A tree wide and deep enough that the helpers list ahead of the walk:
/// 40 directories of 3 levels, a skipped dotfile directory, and a symlink
/// to a directory inside the root.
fn tree(name: &str) -> TempDir {
    let dir = TempDir::new(name);
    for a in 0..5 {
        for b in 0..4 {
            for c in 0..2 {
                for f in 0..3 {
                    dir.write(
                        &format!("a{a}/b{b}/c{c}/f{f}.txt"),
                        format!("{a}{b}{c}{f}").as_bytes(),
                    );
                }
            }
            dir.write(&format!("a{a}/b{b}.txt"), b"mid");
        }
    }
    dir.write(".hidden/secret.txt", b"no");
    dir.write("index.html", b"root");
    symlink(dir.0.join("a1/b2"), dir.0.join("zlink")).unwrap();
    dir
}

/// File URLs in entry order.
fn entry_order(snap: &Snapshot) -> Vec<Vec<u8>> {
    let mut urls: Vec<(u32, Vec<u8>)> = snap
        .file_urls()
        .map(|url| (file_idx(snap, url), url.to_vec()))
        .collect();
    urls.sort();
    urls.into_iter().map(|(_, url)| url).collect()
}

/// What a sequential walk yields: sorted names, depth first, dotfiles
/// skipped, symlinks followed.
fn expected(dir: &Path, url: &str, out: &mut Vec<Vec<u8>>) {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| !n.starts_with('.'))
        .collect();
    names.sort();
    for name in names {
        let path = dir.join(&name);
        let child = format!("{url}/{name}");
        if fs::metadata(&path).unwrap().is_dir() {
            expected(&path, &child, out);
        } else {
            out.push(child.into_bytes());
        }
    }
}

#[test]
fn the_same_tree_gives_the_same_snapshot_in_walk_order() {
    let dir = tree("walk-order");
    let mut want = Vec::new();
    expected(&dir.0, "", &mut want);
    assert_eq!(want.len(), 5 * 4 * (2 * 3 + 1) + 1 + 2 * 3);
    let first = build_first(&opts(&dir.0), None).unwrap();
    assert_eq!(entry_order(&first), want);
    for _ in 0..5 {
        let again = build(&opts(&dir.0), 1).unwrap();
        assert_eq!(entry_order(&again), want);
        for url in &want {
            assert_eq!(etag(&again, url), etag(&first, url));
        }
        assert_eq!(again.resolve(b"/.hidden/secret.txt"), None);
        assert_eq!(again.resolve(b"/zlink"), Some(Resource::AddSlash));
        assert_eq!(again.resolve(b"/"), first.resolve(b"/"));
    }
}

#[test]
fn the_first_build_hands_each_directory_to_the_hook_before_listing_it() {
    let dir = tree("walk-hook");
    let seen = Arc::new(Mutex::new(BTreeSet::new()));
    // A file the hook creates is in the listing only if the hook ran first.
    let hook = {
        let seen = Arc::clone(&seen);
        move |d: &Path| {
            fs::write(d.join("hooked.txt"), b"h").unwrap();
            seen.lock().unwrap().insert(d.to_path_buf());
        }
    };
    let snap = build_first(&opts(&dir.0), Some(&hook)).unwrap();
    let root = fs::canonicalize(&dir.0).unwrap();
    let mut want = BTreeSet::from([root.clone()]);
    for a in 0..5 {
        want.insert(root.join(format!("a{a}")));
        for b in 0..4 {
            want.insert(root.join(format!("a{a}/b{b}")));
            for c in 0..2 {
                want.insert(root.join(format!("a{a}/b{b}/c{c}")));
            }
        }
    }
    // The symlinked directory is walked as its target, already seen; the
    // dotfile directory is not walked at all.
    assert_eq!(*seen.lock().unwrap(), want);
    for d in &want {
        let url = format!(
            "{}/hooked.txt",
            &d.to_str().unwrap()[root.to_str().unwrap().len()..]
        );
        file_idx(&snap, url.as_bytes());
    }
}
