//! The settings whose values are tables or lists rather than one unit
//! value (`[[tls_certificates]]`, `cache_control` in its two spellings,
//! `[[headers]]`, `[error_pages]`, `[error_cache_control]`, a string or a
//! list of strings), with the deserializers that read them from the file.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::de::{self, Deserializer};
use serde::Deserialize;

use super::suggest::misplaced_key;

/// A string or a list of strings (`acme_domains = "example.com"`).
pub(super) fn one_or_many_strings<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<Vec<String>>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum OneOrMany {
        One(String),
        Many(Vec<String>),
    }
    Ok(Some(match OneOrMany::deserialize(d)? {
        OneOrMany::One(s) => vec![s],
        OneOrMany::Many(v) => v,
    }))
}

/// `cores` as the flag takes it: a count (`cores = 4`) or a CPU list in
/// quotes (`cores = "0-3,6"`), both kept as the flag's text for
/// `parse_cores`. A list of numbers is refused rather than read, since
/// `[3]` could mean CPU 3 or three CPUs.
pub(super) fn count_or_cpu_list<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<String>, D::Error> {
    match toml::Value::deserialize(d)? {
        toml::Value::Integer(n) if n >= 0 => Ok(Some(n.to_string())),
        toml::Value::String(s) => Ok(Some(s)),
        other => {
            let given = match &other {
                toml::Value::Integer(n) => format!("the number {n}"),
                toml::Value::Array(_) => "a list".to_owned(),
                v => format!("a {}", v.type_str()),
            };
            Err(de::Error::custom(format!(
                "takes a count of CPUs, e.g. `4`, or a CPU list in quotes, e.g. `\"0-3,6\"`, not {given}"
            )))
        }
    }
}

/// One `[[tls_certificates]]` entry.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsPair {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// The two spellings of the `cache_control` key.
#[derive(Debug, Clone)]
pub enum CacheControlRules {
    /// `[[cache_control]]` tables: tried in file order.
    Ordered(Vec<CacheControlRule>),
    /// `[cache_control]` glob = value: a TOML table has no order, so the
    /// longest glob is tried first (ties in byte order).
    Map(BTreeMap<String, String>),
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CacheControlRule {
    pub glob: String,
    pub value: String,
}

impl<'de> Deserialize<'de> for CacheControlRules {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match toml::Value::deserialize(d)? {
            toml::Value::Array(items) => {
                let mut rules = Vec::with_capacity(items.len());
                for item in items {
                    let toml::Value::Table(table) = item else {
                        return Err(de::Error::custom(
                            "each `[[cache_control]]` entry is a table with `glob` and `value`",
                        ));
                    };
                    for (k, v) in &table {
                        if k != "glob" && k != "value" {
                            return Err(de::Error::custom(misplaced_key(
                                k,
                                v,
                                "[[cache_control]]",
                            )));
                        }
                    }
                    rules.push(
                        CacheControlRule::deserialize(toml::Value::Table(table))
                            .map_err(de::Error::custom)?,
                    );
                }
                Ok(CacheControlRules::Ordered(rules))
            }
            toml::Value::Table(table) => Ok(CacheControlRules::Map(string_table(
                table,
                "[cache_control]",
            )?)),
            other => Err(de::Error::custom(format!(
                "expected a table of glob = value, or `[[cache_control]]` tables; got {}",
                other.type_str()
            ))),
        }
    }
}

impl CacheControlRules {
    /// The rules in precedence order.
    pub fn ordered(&self) -> Vec<(String, String)> {
        match self {
            CacheControlRules::Ordered(rules) => rules
                .iter()
                .map(|r| (r.glob.clone(), r.value.clone()))
                .collect(),
            CacheControlRules::Map(map) => {
                let mut rules: Vec<(String, String)> =
                    map.iter().map(|(g, v)| (g.clone(), v.clone())).collect();
                rules.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then_with(|| a.0.cmp(&b.0)));
                rules
            }
        }
    }
}

/// One `[[headers]]` table.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HeaderRule {
    pub glob: String,
    pub set: BTreeMap<String, String>,
}

/// `[error_cache_control]` as a table of status or class = value.
pub(super) fn error_cache_control_table<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<BTreeMap<String, String>>, D::Error> {
    let table = toml::Table::deserialize(d)?;
    string_table(table, "[error_cache_control]").map(Some)
}

/// `[error_pages]` as a table of status = page.
pub(super) fn error_pages_table<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<BTreeMap<String, String>>, D::Error> {
    let table = toml::Table::deserialize(d)?;
    string_table(table, "[error_pages]").map(Some)
}

/// A TOML table of strings. A value that is not a string is almost always
/// a top-level key written after the table's header, which TOML files under
/// the table: say so, in those words.
fn string_table<E: de::Error>(
    table: toml::Table,
    header: &str,
) -> Result<BTreeMap<String, String>, E> {
    let mut out = BTreeMap::new();
    for (k, v) in table {
        match v {
            toml::Value::String(s) => {
                out.insert(k, s);
            }
            v => return Err(E::custom(misplaced_key(&k, &v, header))),
        }
    }
    Ok(out)
}
