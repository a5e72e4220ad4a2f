//! The shardhttpd binary the study measures: built here in release (its
//! path from cargo's own messages), or, for `--quick`, the release binary
//! an earlier build left, with a word on how old it is.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::servers::workspace_root;

/// `cargo build --release` of shardhttpd; the binary's path from cargo's
/// own JSON messages (so it works under any `CARGO_TARGET_DIR`).
pub fn build_release(log: &mut Vec<String>) -> io::Result<PathBuf> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let args = [
        "build",
        "--release",
        "-p",
        "shardhttpd",
        "--bin",
        "shardhttpd",
        "--message-format=json-render-diagnostics",
    ];
    log.push(format!("{cargo} {}", args.join(" ")));
    eprintln!("building shardhttpd in release (cargo {})", args.join(" "));
    let out = Command::new(&cargo)
        .args(args)
        .current_dir(workspace_root())
        .stderr(Stdio::inherit())
        .output()?;
    if !out.status.success() {
        return Err(io::Error::other("cargo build --release failed"));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    for line in text.lines() {
        if line.contains("\"reason\":\"compiler-artifact\"")
            && line.contains("\"name\":\"shardhttpd\"")
            && line.contains("\"kind\":[\"bin\"]")
        {
            if let Some(path) = json_string(line, "executable") {
                return Ok(PathBuf::from(path));
            }
        }
    }
    Err(io::Error::other(
        "cargo reported no shardhttpd executable in its JSON messages",
    ))
}

/// The release shardhttpd an earlier build left (`--quick` measures it
/// rather than spend its minutes on a build): its path, and a line saying
/// how old it is, with a warning when a source file is newer.
pub fn existing_release() -> Option<(PathBuf, String)> {
    let root = workspace_root();
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    let bin = target.join("release").join("shardhttpd");
    let built = fs::metadata(&bin).ok()?.modified().ok()?;
    let age = |t: std::time::SystemTime| {
        std::time::SystemTime::now()
            .duration_since(t)
            .map_or(0, |d| d.as_secs() / 60)
    };
    let mut note = format!(
        "measuring the existing release binary {} (built {} min ago), not rebuilding it",
        bin.display(),
        age(built)
    );
    let newest = [root.join("Cargo.toml"), root.join("Cargo.lock")]
        .iter()
        .filter_map(|p| fs::metadata(p).ok()?.modified().ok())
        .chain(newest_under(&root.join("src")))
        .max();
    if let Some(t) = newest.filter(|t| *t > built) {
        note.push_str(&format!(
            "; WARNING: the sources changed {} min ago, after it was built: \
             run without --quick (or cargo build --release) to measure them",
            age(t)
        ));
    }
    Some((bin, note))
}

/// The newest modification time of a file under `dir`.
fn newest_under(dir: &Path) -> Option<std::time::SystemTime> {
    let mut newest = None;
    for e in fs::read_dir(dir).ok()?.flatten() {
        let t = match e.file_type() {
            Ok(ft) if ft.is_dir() => newest_under(&e.path()),
            _ => e.metadata().ok().and_then(|m| m.modified().ok()),
        };
        newest = newest.max(t);
    }
    newest
}

/// The string value of `"key":"…"` in one JSON line (paths need only the
/// `\\` and `\"` escapes undone).
fn json_string(line: &str, key: &str) -> Option<String> {
    let start = line.find(&format!("\"{key}\":\""))? + key.len() + 4;
    let mut out = String::new();
    let mut chars = line[start..].chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => out.push(chars.next()?),
            '"' => return Some(out),
            c => out.push(c),
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn executable_from_cargo_json() {
        let line = r#"{"reason":"compiler-artifact","target":{"kind":["bin"],"name":"shardhttpd"},"executable":"/t/release/shard\"httpd","fresh":true}"#;
        assert_eq!(
            json_string(line, "executable").as_deref(),
            Some("/t/release/shard\"httpd")
        );
    }
}
