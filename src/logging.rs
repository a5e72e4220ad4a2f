//! The error log (stderr): `log_format` text or JSON lines, and a level
//! taken from `--log-level`, else the file's `log_level`, else `RUST_LOG`,
//! else `info`: what the operator wrote in the file is never overridden by
//! an environment a unit or a manifest ships. It is set up before the
//! configuration is validated, so that configuration errors come out in
//! the same format as every later line.

use std::fmt;
use std::io::IsTerminal;

use tracing::field::{Field, Visit};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::time::{FormatTime, SystemTime};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// How the error log is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Format {
    /// tracing's human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// Where the error log's level came from, first match wins.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LevelSource {
    /// `--log-level`.
    Flag,
    /// `log_level` in the configuration file.
    File,
    /// The `RUST_LOG` environment variable.
    Env,
    /// Neither: `info`.
    #[default]
    Default,
}

impl LevelSource {
    /// As the start-up line names it.
    pub fn name(self) -> &'static str {
        match self {
            LevelSource::Flag => "--log-level",
            LevelSource::File => "the config file's log_level",
            LevelSource::Env => "RUST_LOG",
            LevelSource::Default => "the default",
        }
    }
}

/// The error log's settings.
#[derive(Debug, Clone)]
pub struct Options {
    pub format: Format,
    /// An `EnvFilter` directive string.
    pub level: String,
    /// Where `level` came from.
    pub source: LevelSource,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            format: Format::Text,
            level: "info".to_owned(),
            source: LevelSource::Default,
        }
    }
}

impl Options {
    /// The options `log_format` and `log_level` name (unset: the
    /// defaults); an error is (key, what is wrong).
    pub fn of(
        log_format: Option<&str>,
        log_level: Option<&str>,
    ) -> Result<Options, (&'static str, String)> {
        let format = match log_format {
            None | Some("text") => Format::Text,
            Some("json") => Format::Json,
            Some(other) => {
                return Err((
                    "log_format",
                    format!("`{other}` is not one of `text`, `json`"),
                ))
            }
        };
        let level = log_level.unwrap_or("info").to_owned();
        // A bare word is a target to EnvFilter; here it must be a level.
        let levels = ["off", "error", "warn", "info", "debug", "trace"];
        let bare_word = level.split(',').find(|d| {
            !d.contains('=') && !levels.contains(&d.trim().to_ascii_lowercase().as_str())
        });
        let parsed = match bare_word {
            Some(word) => Err(format!("`{word}` is not a level")),
            None => tracing_subscriber::EnvFilter::builder()
                .parse(&level)
                .map(drop)
                .map_err(|e| e.to_string()),
        };
        if let Err(e) = parsed {
            return Err((
                "log_level",
                format!(
                    "`{level}` is not a level (error, warn, info, debug, trace) or a directive like `info,shardhttpd::cache=debug`: {e}"
                ),
            ));
        }
        let source = if log_level.is_some() {
            LevelSource::File
        } else {
            LevelSource::Default
        };
        Ok(Options {
            format,
            level,
            source,
        })
    }

    /// The options as far as they can be read before validation, from the
    /// format the flags or the file give and the levels `written` there
    /// (the flag's first): what cannot be read yet is left at its default
    /// (validation reports it, in that default format). The level is the
    /// first valid one written, else `rust_log` (the environment's
    /// `RUST_LOG`), else `info`.
    pub fn peek(
        format: Option<&str>,
        written: [(LevelSource, Option<&str>); 2],
        rust_log: Option<&str>,
    ) -> Options {
        let format = Options::of(format, None).map_or(Format::default(), |o| o.format);
        for (source, level) in written {
            let Some(level) = level else { continue };
            // An invalid level is a configuration error that validation
            // reports; until then the next source applies.
            if let Ok(o) = Options::of(None, Some(level)) {
                return Options {
                    format,
                    level: o.level,
                    source,
                };
            }
        }
        match rust_log.map(str::trim).filter(|v| !v.is_empty()) {
            Some(env) => Options {
                format,
                level: env.to_owned(),
                source: LevelSource::Env,
            },
            None => Options {
                format,
                ..Options::default()
            },
        }
    }
}

/// Install the subscriber: stderr in `options.format`, filtered by
/// `options.level`. Events inside the start-up build that repeats the
/// identity build with compression are dropped: that build would log the
/// same lines again.
pub fn init(options: &Options) {
    use tracing_subscriber::layer::{Layer, SubscriberExt};
    use tracing_subscriber::util::SubscriberInitExt;
    let filter = tracing_subscriber::EnvFilter::new(&options.level);
    let not_repeated = tracing_subscriber::filter::DynFilterFn::new(|meta, cx| {
        meta.is_span()
            || cx.lookup_current().is_none_or(|span| {
                span.scope()
                    .all(|s| s.name() != crate::cache::store::REPEAT_BUILD_SPAN)
            })
    });
    let fmt = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let fmt = match options.format {
        Format::Text => fmt
            .with_ansi(std::io::stderr().is_terminal())
            .with_filter(not_repeated)
            .boxed(),
        Format::Json => fmt
            .with_ansi(false)
            .event_format(JsonLine)
            .with_filter(not_repeated)
            .boxed(),
    };
    tracing_subscriber::registry().with(fmt).with(filter).init();
    // A RUST_LOG that a unit or a manifest sets is no longer obeyed over
    // the file: say so once, rather than silently.
    if let Ok(env) = std::env::var("RUST_LOG") {
        if !env.trim().is_empty()
            && env.trim() != options.level
            && matches!(options.source, LevelSource::Flag | LevelSource::File)
        {
            tracing::info!(
                level = %options.level,
                rust_log = %env.trim(),
                "error log level from {}; RUST_LOG is set but comes after it",
                options.source.name()
            );
        }
    }
}

/// A configuration error before the server starts, in the log's format:
/// the plain `shardhttpd: configuration error: …` line, or a JSON line.
pub fn config_error(format: Format, what: &str, error: &anyhow::Error) {
    match format {
        Format::Text => eprintln!("shardhttpd: {what}: {error:#}"),
        Format::Json => tracing::error!(error = format!("{error:#}"), "{what}"),
    }
}

/// One event as one JSON object: `timestamp` (RFC 3339, UTC), `level`,
/// `pid`, `target`, `message`, then the event's own fields.
struct JsonLine;

impl<S, N> FormatEvent<S, N> for JsonLine
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &tracing::Event<'_>,
    ) -> fmt::Result {
        let mut timestamp = String::new();
        SystemTime.format_time(&mut Writer::new(&mut timestamp))?;
        let meta = event.metadata();
        let mut line = serde_json::Map::new();
        line.insert("timestamp".into(), timestamp.into());
        line.insert("level".into(), meta.level().as_str().into());
        line.insert("pid".into(), std::process::id().into());
        line.insert("target".into(), meta.target().into());
        line.insert("message".into(), "".into());
        event.record(&mut Fields(&mut line));
        let text = serde_json::to_string(&line).map_err(|_| fmt::Error)?;
        writeln!(writer, "{text}")
    }
}

/// Collects an event's fields into the line's object.
struct Fields<'a>(&'a mut serde_json::Map<String, serde_json::Value>);

impl Fields<'_> {
    fn put(&mut self, field: &Field, value: serde_json::Value) {
        self.0.insert(field.name().to_owned(), value);
    }
}

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.put(field, format!("{value:?}").into());
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.put(field, value.into());
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.put(field, value.into());
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.put(field, value.into());
    }
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.put(field, value.into());
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.put(field, value.into());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The level's precedence: flag, file, `RUST_LOG`, `info`.
    #[test]
    fn level_comes_from_flag_then_file_then_rust_log() {
        let written = |flag: Option<&'static str>, file: Option<&'static str>| {
            [(LevelSource::Flag, flag), (LevelSource::File, file)]
        };
        let cases = [
            (
                written(Some("debug"), Some("warn")),
                Some("trace"),
                "debug",
                LevelSource::Flag,
            ),
            (
                written(None, Some("warn")),
                Some("trace"),
                "warn",
                LevelSource::File,
            ),
            (
                written(None, None),
                Some("trace"),
                "trace",
                LevelSource::Env,
            ),
            (written(None, None), Some(" "), "info", LevelSource::Default),
            (written(None, None), None, "info", LevelSource::Default),
            // An invalid flag is refused by validation; meanwhile the next
            // source applies.
            (
                written(Some("verbose"), Some("warn")),
                None,
                "warn",
                LevelSource::File,
            ),
        ];
        for (written, env, level, source) in cases {
            let o = Options::peek(None, written, env);
            assert_eq!(
                (o.level.as_str(), o.source),
                (level, source),
                "{written:?} {env:?}"
            );
        }
    }
}
