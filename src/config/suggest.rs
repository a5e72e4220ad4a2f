//! Errors in an operator's words: the nearest flag or key for a mistyped
//! one ("did you mean"), and a top-level key written after a table's header
//! (which TOML files under that table) named as such.

use super::{locate, Settings};

pub(super) fn misplaced_key(key: &str, value: &toml::Value, header: &str) -> String {
    if setting_names().iter().any(|n| n == key) {
        format!(
            "key `{key}` after `{header}` belongs to that table; move it above `{header}` \
             (every key after a table header is part of the table)"
        )
    } else {
        format!(
            "`{key}` in `{header}` must be a string, not a {}; if it is a setting, move it above `{header}`",
            value.type_str()
        )
    }
}

/// A setting refused as an unknown field of a table (`[[headers]]`,
/// `[[tls_certificates]]`): it was written after the table's header, which
/// TOML files under the table; say so instead of "did you mean" itself.
pub(super) fn misplaced_in_table(path: &str, message: &str) -> Option<String> {
    let key = message.strip_prefix("unknown field `")?.split('`').next()?;
    let table = path.split(['.', '[']).next()?;
    if table.is_empty() || table == path || !setting_names().iter().any(|n| n == key) {
        return None;
    }
    let header = if path[table.len()..].starts_with('[') {
        format!("[[{table}]]")
    } else {
        format!("[{table}]")
    };
    Some(misplaced_key(key, &toml::Value::Boolean(true), &header))
}

/// The top-level keys, from the flag definitions.
fn setting_names() -> Vec<String> {
    let mut names: Vec<String> = Settings::command_raw()
        .get_arguments()
        .map(|a| a.get_id().to_string())
        .collect();
    names.extend(
        [
            "cache_control",
            "error_pages",
            "error_cache_control",
            "headers",
        ]
        .map(String::from),
    );
    names
}

/// A mistyped flag gets the nearest real one as a tip, as a mistyped key
/// does (clap's own suggestions need a crate this build leaves out).
pub fn suggest_flag(mut e: clap::Error) -> clap::Error {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    if e.kind() != ErrorKind::UnknownArgument {
        return e;
    }
    let Some(ContextValue::String(typed)) = e.get(ContextKind::InvalidArg) else {
        return e;
    };
    let typed = typed.split('=').next().unwrap_or_default().to_owned();
    let Some(name) = typed.strip_prefix("--") else {
        return e;
    };
    let command = Settings::command_raw();
    let near = command
        .get_arguments()
        .filter_map(|a| a.get_long())
        .map(|long| (edit_distance(long, name), long))
        .filter(|&(d, _)| d <= 2)
        .min();
    if let Some((_, long)) = near {
        e.insert(
            ContextKind::SuggestedArg,
            ContextValue::String(format!("--{long}")),
        );
    }
    e
}

/// serde's phrasing → an operator's.
pub(super) fn operator_words(message: &str) -> String {
    if let Some(rest) = message.strip_prefix("unknown field `") {
        let key = rest.split('`').next().unwrap_or(rest);
        let names = setting_names();
        let near = names
            .iter()
            .filter(|n| edit_distance(n, key) <= 2)
            .min_by_key(|n| edit_distance(n, key));
        return match near {
            Some(n) => format!("unknown key `{key}`; did you mean `{n}`?"),
            None => format!("unknown key `{key}` (README lists the keys)"),
        };
    }
    if let Some(words) = locate::type_words(message) {
        return words;
    }
    message.trim_end().to_owned()
}

/// Levenshtein distance, for "did you mean".
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != *cb)).min(row[j] + 1).min(cur + 1);
            prev = cur;
        }
    }
    row[b.len()]
}
