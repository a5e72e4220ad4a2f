//! README's configuration table against the binary's own list (issue 36
//! §5): every flag that `--help` shows is a row with the default `--help`
//! gives (`config::help_defaults`, the constants validation uses), every
//! key of the file only that `--help` names is a row, and no row names a
//! key the binary does not take. A flag added, renamed or given a new
//! default without its row fails here, not in an operator's hands.

use crate::support;

use std::collections::BTreeMap;

/// Options that are not settings: no row.
const NOT_SETTINGS: [&str; 4] = ["config", "check", "help", "version"];

/// Each flag of `--help` as its key (`max_head_bytes`) and its
/// `[default: …]`, if it shows one.
fn help_flags(help: &str) -> BTreeMap<String, Option<String>> {
    let mut flags = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in help.lines() {
        let trimmed = line.trim_start();
        let flag = trimmed
            .strip_prefix("-h, ")
            .or_else(|| trimmed.strip_prefix("-V, "))
            .unwrap_or(trimmed)
            .strip_prefix("--");
        if let Some(flag) = flag.filter(|_| line.starts_with("  ")) {
            let name = flag.split([' ', '=']).next().unwrap_or_default();
            let key = name.replace('-', "_");
            flags.insert(key.clone(), None);
            current = Some(key);
            continue;
        }
        if line.is_empty() || !line.starts_with(' ') {
            current = None;
            continue;
        }
        let (Some(key), Some(at)) = (&current, line.find("[default: ")) else {
            continue;
        };
        let rest = &line[at + "[default: ".len()..];
        let rest = rest.split("] [possible values").next().unwrap_or(rest);
        let default = rest.strip_suffix(']').unwrap_or(rest);
        flags.insert(key.clone(), Some(default.to_owned()));
    }
    flags
}

/// The keys `--help` says are the file's only.
fn file_only_keys(help: &str) -> Vec<String> {
    let text = help.split_whitespace().collect::<Vec<_>>().join(" ");
    let list = text
        .split("Keys of the file only: ")
        .nth(1)
        .and_then(|rest| rest.split(" (README").next())
        .unwrap_or_else(|| panic!("--help names no keys of the file only:\n{help}"));
    list.split(", ").map(str::to_owned).collect()
}

/// README's "Configuration" table: each key of a row's first cell with its
/// default. A row of several keys (`brotli_level`, `gzip_level`,
/// `zstd_level`) whose default lists as many values pairs them in order;
/// otherwise each key has the row's default. Backticks are dropped.
fn readme_rows(readme: &str) -> BTreeMap<String, String> {
    let section = readme
        .split("\n## Configuration\n")
        .nth(1)
        .and_then(|s| s.split("\n## ").next())
        .expect("README has a \"## Configuration\" section");
    let mut rows = BTreeMap::new();
    for line in section.lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = line.trim_matches('|').split(" | ").map(str::trim).collect();
        assert!(cells.len() >= 3, "a row without three cells: {line}");
        let keys: Vec<&str> = cells[0]
            .split('`')
            .skip(1)
            .step_by(2)
            .filter(|k| {
                k.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
            })
            .collect();
        let default = cells[1].replace('`', "");
        let parts: Vec<&str> = default.split(", ").collect();
        for (i, key) in keys.iter().enumerate() {
            let value = if keys.len() > 1 && parts.len() == keys.len() {
                parts[i].to_owned()
            } else {
                default.clone()
            };
            let before = rows.insert((*key).to_owned(), value);
            assert!(before.is_none(), "`{key}` has two rows in README");
        }
    }
    rows
}

#[test]
fn readme_configuration_table_matches_the_binarys_flags_keys_and_defaults() {
    let out = support::command().arg("--help").output().unwrap();
    assert!(out.status.success(), "--help: {out:?}");
    let help = String::from_utf8(out.stdout).unwrap();
    let readme = std::fs::read_to_string(support::repo().join("README.md")).unwrap();
    let flags = help_flags(&help);
    let file_only = file_only_keys(&help);
    let rows = readme_rows(&readme);
    assert!(
        flags.len() > 50,
        "--help parsed to {} flags:\n{help}",
        flags.len()
    );

    let mut problems = Vec::new();
    for (key, default) in &flags {
        if NOT_SETTINGS.contains(&key.as_str()) {
            continue;
        }
        let Some(row) = rows.get(key) else {
            problems.push(format!("`{key}` (--{}) has no row", key.replace('_', "-")));
            continue;
        };
        match default {
            None => problems.push(format!("--{} shows no [default: …]", key.replace('_', "-"))),
            Some(d) if d != row => problems.push(format!(
                "`{key}`: README says the default is `{row}`, --help says `{d}`"
            )),
            Some(_) => {}
        }
    }
    for key in &file_only {
        if !rows.contains_key(key) {
            problems.push(format!("`{key}` (a key of the file only) has no row"));
        }
    }
    for key in rows.keys() {
        if !flags.contains_key(key) && !file_only.contains(key) {
            problems.push(format!(
                "README has a row for `{key}`, which is neither a flag nor a key of the file only"
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "README's configuration table has drifted from the binary:\n  {}",
        problems.join("\n  ")
    );
}

/// The parsers themselves, on a sample of each format.
#[test]
fn readme_drift_parsers_read_help_and_rows() {
    let help = "Options:\n      --root <DIR>\n          Document root [default: examples/site]\n      \
                --sendfile <BOOL>\n          Send [default: false] [possible values: true, false]\n  \
                -h, --help\n          Print help\n\nKeys of the file only: headers,\nerror_pages (README, \"Configuration\").\n";
    let flags = help_flags(help);
    assert_eq!(flags["root"].as_deref(), Some("examples/site"));
    assert_eq!(flags["sendfile"].as_deref(), Some("false"));
    assert_eq!(flags["help"], None);
    assert_eq!(file_only_keys(help), ["headers", "error_pages"]);
    let readme = "\n## Configuration\n\n| key | default | meaning |\n|---|---|---|\n\
                  | `brotli_level`, `gzip_level` | 11, 9 | levels |\n\
                  | `tls_cert`, `tls_key` | none | pair |\n| `listen` (repeatable flag) | `127.0.0.1:8080` | x |\n\n## Next\n| `nope` | 1 | x |\n";
    let rows = readme_rows(readme);
    assert_eq!(rows["brotli_level"], "11");
    assert_eq!(rows["gzip_level"], "9");
    assert_eq!(rows["tls_key"], "none");
    assert_eq!(rows["listen"], "127.0.0.1:8080");
    assert!(!rows.contains_key("nope"));
}
