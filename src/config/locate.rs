//! Where the config file set each key, so an error found after parsing (a
//! root that does not exist, a level out of range, a key that does not
//! match its certificate) names the file and the line as a parse error
//! does; and serde's type errors in an operator's words.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The line of each key and table header of one config file.
#[derive(Debug, Clone, Default)]
pub struct KeyLines {
    file: PathBuf,
    /// Key → the 1-based line of each time it starts (several for an
    /// array of tables, `[[tls_certificates]]`). Keys inside a table are
    /// recorded by path too: `headers[1].set`, `error_pages.404`.
    lines: BTreeMap<String, Vec<usize>>,
}

impl KeyLines {
    /// Find the keys in `text` (the file at `path`, already parsed, so
    /// well-formed): a `key =` line, under the path of the table header
    /// above it (`[name]`, `[[name]]` as `name[i]`, `[name.sub]`); a table
    /// is found at its header line.
    pub fn scan(path: &Path, text: &str) -> KeyLines {
        let mut lines: BTreeMap<String, Vec<usize>> = BTreeMap::new();
        // How many `[[name]]` tables each array has had so far.
        let mut arrays: BTreeMap<String, usize> = BTreeMap::new();
        let mut table = String::new();
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
            let mut record = |key: String| lines.entry(key).or_default().push(i + 1);
            if let Some(header) = line.strip_prefix('[') {
                let array = header.starts_with('[');
                let header = header.trim_start_matches('[');
                let header = header.split(']').next().unwrap_or_default();
                let mut parts = header.split('.').map(unquote);
                let name = parts.next().unwrap_or_default().to_owned();
                let rest: Vec<&str> = parts.collect();
                if array && rest.is_empty() {
                    let n = arrays.entry(name.clone()).or_default();
                    table = format!("{name}[{n}]");
                    *n += 1;
                    record(name);
                } else {
                    // `[headers.set]` belongs to the latest `[[headers]]`.
                    table = match arrays.get(&name) {
                        Some(n) => format!("{name}[{}]", n.saturating_sub(1)),
                        None => name.clone(),
                    };
                    if rest.is_empty() {
                        record(name);
                    }
                    for part in rest {
                        table = format!("{table}.{part}");
                    }
                    // `[[sites.headers]]`: the next of the latest site's.
                    if array {
                        record(table.clone());
                        let n = arrays.entry(table.clone()).or_default();
                        table = format!("{table}[{n}]");
                        *n += 1;
                    }
                }
                record(table.clone());
                continue;
            }
            let Some((key, _)) = line.split_once('=') else {
                continue;
            };
            // A dotted key (`a.b = 1`) is found as its first part.
            let key = unquote(key.split('.').next().unwrap_or_default());
            if key.is_empty() {
                continue;
            }
            if table.is_empty() {
                record(key.to_owned());
            } else {
                record(format!("{table}.{key}"));
            }
        }
        KeyLines {
            file: path.to_path_buf(),
            lines,
        }
    }

    /// The line where `key` is set: the key's own line (`headers[1].set`)
    /// when the scan found it, else that of the nearest enclosing key
    /// (`headers[1]`, the table's header), else `name` or `name[i]` (the
    /// i-th table of an array).
    pub fn line_of(&self, key: &str) -> Option<usize> {
        let mut path = key;
        loop {
            if let Some(at) = self.lines.get(path) {
                return at.first().copied();
            }
            match path.rfind(['.', '[']) {
                Some(i) if i > 0 => path = &path[..i],
                _ => break,
            }
        }
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
            None => format!(
                "config file {}: key `{key}` (not set there: its default)",
                self.file.display()
            ),
        }
    }

    /// `message` with a leading ``config key `k` `` (as the certificate
    /// loader words it) named by file and line instead, when the file sets
    /// `k` (a flag may have).
    pub fn locate(&self, message: &str) -> String {
        let Some(rest) = message.strip_prefix("config key `") else {
            return message.to_owned();
        };
        match rest.split_once('`') {
            Some((key, after)) if self.line_of(key).is_some() => {
                format!("{}{after}", self.name(key))
            }
            _ => message.to_owned(),
        }
    }
}

/// A key or header part without its quotes and spaces.
fn unquote(part: &str) -> &str {
    part.trim().trim_matches('"').trim_matches('\'')
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
        assert_eq!(k.line_of("tls_certificates[1].cert"), Some(13));
        assert_eq!(k.line_of("tls_certificates[1].key"), Some(12));
        assert_eq!(k.line_of("headers[0].glob"), Some(9));
        assert_eq!(k.line_of("error_pages.404"), Some(15));
        assert_eq!(k.line_of("tls_certificates[0].key"), Some(10));
        assert_eq!(k.line_of("error_pages"), Some(14));
        assert_eq!(
            k.name("root"),
            "config file /etc/s.toml, line 2: key `root`"
        );
        assert_eq!(
            k.name("cores"),
            "config file /etc/s.toml: key `cores` (not set there: its default)"
        );
        assert_eq!(
            k.locate("config key `tls_certificates[1].key`: the key in x does not match"),
            "config file /etc/s.toml, line 12: key `tls_certificates[1].key`: the key in x does not match"
        );
        assert_eq!(
            k.locate("config key `tls_cert`: reading c.pem"),
            "config key `tls_cert`: reading c.pem",
            "given as a flag, not in the file"
        );
    }

    /// Issue 36: an entry of `[[headers]]` is found at its own keys, in
    /// either spelling of `set`, not at the table's header.
    #[test]
    fn keys_inside_arrays_of_tables_are_found_by_line() {
        let text = "root = \"/srv\"\nlisten = [\n  \"127.0.0.1:0\",\n]\n\
                    [[headers]]\nglob = \"*.css\"\nset = { X-A = \"1\" }\n\
                    [[headers]]\nglob = \"*.js\"\n[headers.set]\n\"Bad Name\" = \"x\"\n";
        let k = KeyLines::scan(Path::new("s.toml"), text);
        assert_eq!(k.line_of("listen"), Some(2));
        assert_eq!(k.line_of("headers"), Some(5));
        assert_eq!(k.line_of("headers[0].glob"), Some(6));
        assert_eq!(k.line_of("headers[0].set"), Some(7));
        assert_eq!(k.line_of("headers[0].set.X-A"), Some(7));
        assert_eq!(k.line_of("headers[1]"), Some(8));
        assert_eq!(k.line_of("headers[1].glob"), Some(9));
        assert_eq!(k.line_of("headers[1].set"), Some(10));
        assert_eq!(k.line_of("headers[1].set.Bad Name"), Some(11));
    }

    #[test]
    fn arrays_of_tables_inside_arrays_of_tables_are_counted() {
        let text = "[[sites]]\nnames = \"a\"\n[[sites.headers]]\nglob = \"*\"\n\
                    [[sites]]\nnames = \"b\"\n[[sites.headers]]\nglob = \"1\"\n\
                    [[sites.headers]]\nglob = \"2\"\n[sites.error_pages]\n404 = \"x\"\n";
        let k = KeyLines::scan(Path::new("s.toml"), text);
        assert_eq!(k.line_of("sites[0].headers[0].glob"), Some(4));
        assert_eq!(k.line_of("sites[1].names"), Some(6));
        assert_eq!(k.line_of("sites[1].headers[0].glob"), Some(8));
        assert_eq!(k.line_of("sites[1].headers[1].glob"), Some(10));
        assert_eq!(k.line_of("sites[1].error_pages.404"), Some(12));
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
