//! The crate's layering, read from its sources (issue 37): every
//! `crate::module` a top-level module names is an edge, and
//!
//! - no two top-level modules reach each other, directly or round a circle;
//! - along the request path each layer imports only downward: a protocol
//!   (`proto`) never names `conn` or the shard, the semantics layer
//!   (`serve`) no protocol, the output queue (`io`) neither, and the
//!   snapshot (`cache`) nothing above it.
//!
//! `crates/http` needs no rule: it is a crate of its own, and a back-edge
//! from it does not compile. An import added against these rules fails
//! here, with the file that made it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Layers and the modules each must never name.
const FORBIDDEN: &[(&str, &[&str])] = &[
    ("proto", &["conn", "quic", "shard", "server"]),
    ("serve", &["conn", "quic", "proto", "shard", "server", "io"]),
    ("io", &["conn", "quic", "proto", "serve", "shard", "server"]),
    (
        "cache",
        &["conn", "quic", "proto", "serve", "io", "shard", "server"],
    ),
    (
        "sys",
        &[
            "conn", "quic", "proto", "serve", "io", "cache", "shard", "server",
        ],
    ),
];

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("src/ is readable") {
        let path = entry.expect("directory entry").path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Top-level module → (module it names → the first file that names it).
fn edges() -> BTreeMap<String, BTreeMap<String, PathBuf>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    files.sort();
    let mut edges: BTreeMap<String, BTreeMap<String, PathBuf>> = BTreeMap::new();
    for file in files {
        let rel = file.strip_prefix(&src).expect("under src/");
        let first = rel.components().next().expect("a path");
        let top = first
            .as_os_str()
            .to_string_lossy()
            .trim_end_matches(".rs")
            .to_owned();
        if top == "lib" || top == "main" {
            continue;
        }
        let text = std::fs::read_to_string(&file).expect("source is UTF-8");
        for (at, _) in text.match_indices("crate::") {
            let name: String = text[at + "crate::".len()..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() && name != top {
                edges
                    .entry(top.clone())
                    .or_default()
                    .entry(name)
                    .or_insert_with(|| rel.to_path_buf());
            }
        }
    }
    edges
}

/// A path of imports from `from` back to `to`, if there is one.
fn path_to(
    edges: &BTreeMap<String, BTreeMap<String, PathBuf>>,
    from: &str,
    to: &str,
    seen: &mut BTreeSet<String>,
) -> Option<Vec<String>> {
    for next in edges.get(from).into_iter().flat_map(|e| e.keys()) {
        if next == to {
            return Some(vec![next.clone()]);
        }
        if seen.insert(next.clone()) {
            if let Some(mut rest) = path_to(edges, next, to, seen) {
                rest.insert(0, next.clone());
                return Some(rest);
            }
        }
    }
    None
}

#[test]
fn no_module_imports_in_a_circle() {
    let edges = edges();
    assert!(
        edges.get("conn").is_some_and(|e| e.contains_key("serve")),
        "the scan found no edge from conn to serve: it reads nothing"
    );
    let mut circles = Vec::new();
    for (from, targets) in &edges {
        for (to, file) in targets {
            if let Some(back) = path_to(&edges, to, from, &mut BTreeSet::new()) {
                circles.push(format!(
                    "{from} → {to} ({}) and back: {to} → {}",
                    file.display(),
                    back.join(" → ")
                ));
            }
        }
    }
    assert!(
        circles.is_empty(),
        "import circles:\n{}",
        circles.join("\n")
    );
}

#[test]
fn the_request_path_imports_only_downward() {
    let edges = edges();
    let mut wrong = Vec::new();
    for (layer, forbidden) in FORBIDDEN {
        for name in *forbidden {
            if let Some(file) = edges.get(*layer).and_then(|e| e.get(*name)) {
                wrong.push(format!("{layer} names {name} ({})", file.display()));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "imports against the layering:\n{}",
        wrong.join("\n")
    );
}
