//! Where the config file set each key, so an error found after parsing (a
//! root that does not exist, a level out of range, a key that does not
//! match its certificate) names the file and the line as a parse error
//! does; and serde's type errors in an operator's words.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The line of each top-level key and table header of one config file.
#[derive(Debug, Clone, Default)]
pub struct KeyLines {
    file: PathBuf,
    /// Key → the 1-based line of each time it starts (several for an
    /// array of tables, `[[tls_certificates]]`).
    lines: BTreeMap<String, Vec<usize>>,
}

impl KeyLines {
    /// Find the keys in `text` (the file at `path`, already parsed, so
    /// well-formed): a top-level key is a `key =` line before the first
    /// table header; a table is its `[name]` or `[[name]]` header line.
    pub fn scan(path: &Path, text: &str) -> KeyLines {
        let mut lines: BTreeMap<String, Vec<usize>> = BTreeMap::new();
        let mut in_table = false;
        let mut in_multiline = false;
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            // A `"""` or `'''` string can hold lines that look like keys.
            if line.matches("\"\"\"").count() % 2 == 1 || line.matches("'''").count() % 2 == 1 {
                in_multiline = !in_multiline;
                continue;
            }
            if in_multiline || line.is_empty() || line.starts_with('#') {
                continue;
            }
            let key = if let Some(header) = line.strip_prefix('[') {
                in_table = true;
                let header = header.trim_start_matches('[');
                header.split([']', '.']).next().unwrap_or_default()
            } else if in_table {
                continue;
            } else {
                line.split(['=', '.']).next().unwrap_or_default()
            };
            let key = key.trim().trim_matches('"').trim_matches('\'');
            if !key.is_empty() {
                lines.entry(key.to_owned()).or_default().push(i + 1);
            }
        }
        KeyLines {
            file: path.to_path_buf(),
            lines,
        }
    }

    /// The line where `key` is set: `name`, or `name[i]` (the i-th table of
    /// an array), with anything after it (`name[i].cert`) ignored.
    pub fn line_of(&self, key: &str) -> Option<usize> {
        let name = key.split(['.', '[']).next().unwrap_or(key);
        let index = key
            .strip_prefix(name)
            .and_then(|rest| rest.strip_prefix('['))
            .and_then(|rest| rest.split(']').next())
            .and_then(|i| i.parse::<usize>().ok())
            .unwrap_or(0);
        let at = self.lines.get(name)?;
        at.get(index).or(at.first()).copied()
    }

    /// How an error names `key` of this file: with the file and line when
    /// the file sets it.
    pub fn name(&self, key: &str) -> String {
        match self.line_of(key) {
            Some(line) => format!(
                "config file {}, line {line}: key `{key}`",
                self.file.display()
            ),
            None => format!("config key `{key}`"),
        }
    }

    /// `message` with a leading ``config key `k` `` (as the certificate
    /// loader words it) named by file and line instead.
    pub fn locate(&self, message: &str) -> String {
        let Some(rest) = message.strip_prefix("config key `") else {
            return message.to_owned();
        };
        let Some((key, after)) = rest.split_once('`') else {
            return message.to_owned();
        };
        format!("{}{after}", self.name(key))
    }
}

/// serde's `invalid type: …, expected …` (or `invalid value`) as what the
/// key takes, in an operator's words; `None` for other messages.
pub fn type_words(message: &str) -> Option<String> {
    let rest = message
        .strip_prefix("invalid type: ")
        .or_else(|| message.strip_prefix("invalid value: "))?;
    let (got, expected) = rest.split_once(", expected ")?;
    let whole_number = matches!(
        expected.trim(),
        "u8" | "u16" | "u32" | "u64" | "usize" | "i32" | "i64" | "an integer"
    );
    let wants = if whole_number {
        "a whole number of 0 or more, e.g. `16`".to_owned()
    } else {
        match expected.trim() {
            "a boolean" => "`true` or `false`".to_owned(),
            "a string" => "a string in double quotes, e.g. `\"value\"`".to_owned(),
            "a sequence" => "a list, e.g. `[\"a\", \"b\"]`".to_owned(),
            other => other.to_owned(),
        }
    };
    let given = if let Some(s) = got.strip_prefix("string ") {
        format!("the string {s}")
    } else if let Some(n) = got.strip_prefix("integer ") {
        format!("the number {}", n.trim_matches('`'))
    } else if let Some(f) = got.strip_prefix("floating point ") {
        format!("the number {}", f.trim_matches('`'))
    } else if let Some(b) = got.strip_prefix("boolean ") {
        b.to_owned()
    } else if got == "sequence" {
        "a list".to_owned()
    } else if got == "map" {
        "a table".to_owned()
    } else {
        got.to_owned()
    };
    // `"64"` for a number: the quotes are the whole mistake.
    let unquoted = got
        .strip_prefix("string \"")
        .and_then(|s| s.strip_suffix('"'))
        .filter(|s| whole_number && !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()));
    let hint = match (unquoted, expected.trim()) {
        (Some(_), _) => "; write it without quotes",
        (None, "a boolean") if got == "string \"true\"" || got == "string \"false\"" => {
            "; write it without quotes"
        }
        _ => "",
    };
    Some(format!("takes {wants}, not {given}{hint}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_tables_are_found_by_line() {
        let text = "# comment\nroot = \"/srv\"\nmax_ranges=3\n\"brotli_level\" = 12\n\
                    note = \"\"\"\nfake = 1\n\"\"\"\n[[headers]]\nglob = \"*\"\n\
                    [[tls_certificates]]\ncert = \"a\"\n[[tls_certificates]]\ncert = \"b\"\n\
                    [error_pages]\n404 = \"x\"\n";
        let k = KeyLines::scan(Path::new("/etc/s.toml"), text);
        assert_eq!(k.line_of("root"), Some(2));
        assert_eq!(k.line_of("max_ranges"), Some(3));
        assert_eq!(k.line_of("brotli_level"), Some(4));
        assert_eq!(k.line_of("fake"), None);
        assert_eq!(k.line_of("glob"), None);
        assert_eq!(k.line_of("headers"), Some(8));
        assert_eq!(k.line_of("tls_certificates[1].cert"), Some(12));
        assert_eq!(k.line_of("tls_certificates[0].key"), Some(10));
        assert_eq!(k.line_of("error_pages"), Some(14));
        assert_eq!(
            k.name("root"),
            "config file /etc/s.toml, line 2: key `root`"
        );
        assert_eq!(k.name("cores"), "config key `cores`");
        assert_eq!(
            k.locate("config key `tls_certificates[1].key`: the key in x does not match"),
            "config file /etc/s.toml, line 12: key `tls_certificates[1].key`: the key in x does not match"
        );
    }

    #[test]
    fn type_errors_in_operator_words() {
        let cases = [
            (
                "invalid type: string \"lots\", expected u32",
                "takes a whole number of 0 or more, e.g. `16`, not the string \"lots\"",
            ),
            (
                "invalid type: string \"64\", expected usize",
                "takes a whole number of 0 or more, e.g. `16`, not the string \"64\"; write it without quotes",
            ),
            (
                "invalid value: integer `-1`, expected u32",
                "takes a whole number of 0 or more, e.g. `16`, not the number -1",
            ),
            (
                "invalid type: string \"yes\", expected a boolean",
                "takes `true` or `false`, not the string \"yes\"",
            ),
            (
                "invalid type: integer `5`, expected a string",
                "takes a string in double quotes, e.g. `\"value\"`, not the number 5",
            ),
        ];
        for (serde, want) in cases {
            assert_eq!(type_words(serde).as_deref(), Some(want), "{serde}");
        }
        assert_eq!(type_words("unknown field `x`"), None);
    }
}
