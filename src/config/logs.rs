//! The logging settings checked: the error log's options, the access log's
//! format and (for JSON) its fields, and the request-id header that the
//! access log records.

use super::*;

/// What [`logs()`] validates.
pub(super) struct Logs {
    pub(super) access_log: Option<PathBuf>,
    pub(super) access_log_format: LogFormat,
    pub(super) access_log_fields: Vec<crate::metrics::access_log::Field>,
}

/// The error log's options and the access log's format.
pub(super) fn logs(s: &Settings) -> anyhow::Result<Logs> {
    crate::logging::Options::of(s.log_format.as_deref(), s.log_level.as_deref())
        .map_err(|(key, e)| anyhow::anyhow!("{}: {e}", s.name(key)))?;
    let access_log_format = match s.access_log_format.as_deref() {
        None | Some("combined") => LogFormat::Combined,
        Some("combined_timed") => LogFormat::CombinedTimed,
        Some("json") => LogFormat::Json,
        Some(other) => bail!(
            "{}: `{other}` is not one of `combined`, `combined_timed`, `json`",
            s.name("access_log_format")
        ),
    };
    Ok(Logs {
        access_log: s.access_log.clone(),
        access_log_format,
        access_log_fields: access_log_fields(s, access_log_format)?,
    })
}

/// `access_log_fields`: known names, each once, for the JSON format.
fn access_log_fields(
    s: &Settings,
    format: LogFormat,
) -> anyhow::Result<Vec<crate::metrics::access_log::Field>> {
    use crate::metrics::access_log::Field;
    let Some(names) = &s.access_log_fields else {
        return Ok(Field::ALL.to_vec());
    };
    if format != LogFormat::Json {
        bail!(
            "{}: chooses the fields of the `json` access log; set \
             `access_log_format = \"json\"`, or remove it",
            s.name("access_log_fields")
        );
    }
    let all = || Field::ALL.map(Field::name).join(", ");
    let mut fields = Vec::with_capacity(names.len());
    for name in names {
        let Some(field) = Field::parse(name.trim()) else {
            bail!(
                "{}: unknown field `{name}`; the fields are {}",
                s.name("access_log_fields"),
                all()
            );
        };
        if fields.contains(&field) {
            bail!("{}: `{name}` is listed twice", s.name("access_log_fields"));
        }
        fields.push(field);
    }
    if fields.is_empty() {
        bail!(
            "{}: names no field; list some of {}",
            s.name("access_log_fields"),
            all()
        );
    }
    Ok(fields)
}

/// `request_id_header`: a header name short enough for the stack line the
/// id is rendered into.
pub(super) fn request_id_header(s: &Settings) -> anyhow::Result<Option<String>> {
    let Some(name) = &s.request_id_header else {
        return Ok(None);
    };
    let token = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
    if name.is_empty() || name.len() > REQUEST_ID_NAME_MAX || !name.bytes().all(token) {
        bail!(
            "{}: must be a header name of at most {} characters, such as `X-Request-Id`",
            s.name("request_id_header"),
            REQUEST_ID_NAME_MAX
        );
    }
    Ok(Some(name.clone()))
}

/// The error log's options as far as they can be read before validation:
/// the flags over the file they name (read here, errors left to
/// validation), then `rust_log` (see `logging::Options::peek`).
pub fn log_options(flags: &Settings, rust_log: Option<&str>) -> crate::logging::Options {
    use crate::logging::{LevelSource, Options};
    let file = flags
        .config
        .as_deref()
        .and_then(|p| Settings::from_file(p).ok())
        .unwrap_or_default();
    let format = flags.log_format.as_deref().or(file.log_format.as_deref());
    let written = [
        (LevelSource::Flag, flags.log_level.as_deref()),
        (LevelSource::File, file.log_level.as_deref()),
    ];
    Options::peek(format, written, rust_log)
}
