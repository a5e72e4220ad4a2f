//! `systemctl reload` (SIGHUP): apply a changed configuration file, or
//! refuse a bad edit while the running configuration keeps serving.
//!
//! The process keeps the configuration file's text as it was when the
//! process read it. On SIGHUP the file is read again and, when its text
//! differs, parsed and validated exactly as `--check` and a start would;
//! an invalid edit is refused with the same error and nothing else
//! changes. A valid changed configuration is applied by the listener
//! handover that SIGUSR2 uses (a new process of the same binary reads the
//! file, takes the sockets over and this one drains), so every setting
//! takes effect, listeners and shard counts included, and no connection
//! is refused on the way. A reload with an unchanged file only rebuilds the
//! snapshot and reloads the certificates, as SIGHUP always did.

use std::ffi::OsString;
use std::path::PathBuf;

use crate::config::{Config, Settings};

/// The environment variable a process started to apply a configuration
/// reload finds set (to `1`), so it counts the reload as applied.
pub const RELOAD_ENV: &str = "SHARDHTTPD_CONFIG_RELOAD";

/// Where this process's configuration came from: its arguments and the
/// configuration file's text as read at start.
#[derive(Debug, Clone, Default)]
pub struct Source {
    args: Vec<OsString>,
    file: Option<(PathBuf, Option<String>)>,
}

/// What a reload found.
#[derive(Debug)]
pub enum Outcome {
    /// The file's text is what this process runs with (or there is no file).
    Unchanged,
    /// The file changed and the new configuration is valid.
    Changed,
    /// The file changed and the new configuration is refused; the error is
    /// what `--check` prints.
    Invalid(anyhow::Error),
}

impl Source {
    /// The process's arguments (without the program name) and the text of
    /// the configuration file they name, read now: call it before the
    /// configuration is loaded, so an edit made meanwhile is seen as a
    /// change by the next reload rather than missed.
    pub fn capture(args: Vec<OsString>) -> Source {
        let file = Settings::try_from_args(&args)
            .ok()
            .and_then(|s| s.config)
            .map(|path| {
                let text = std::fs::read_to_string(&path).ok();
                (path, text)
            });
        Source { args, file }
    }

    /// The arguments the process was started with.
    pub fn args(&self) -> &[OsString] {
        &self.args
    }

    /// Read the file again and judge the change. On [`Outcome::Changed`]
    /// the new text becomes the reference, so a later reload of the same
    /// text does not hand over again.
    pub fn examine(&mut self) -> Outcome {
        let Some((path, running)) = &mut self.file else {
            return Outcome::Unchanged;
        };
        let now = std::fs::read_to_string(&*path).ok();
        if now.is_some() && now == *running {
            return Outcome::Unchanged;
        }
        let loaded = Settings::try_from_args(&self.args)
            .map_err(|e| anyhow::anyhow!("{}", e.to_string().trim_end()))
            .and_then(Config::load);
        match loaded {
            Ok(_) => {
                *running = now;
                Outcome::Changed
            }
            Err(e) => Outcome::Invalid(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_root(tag: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("shardhttpd-reload-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("root")).unwrap();
        dir
    }

    fn source_for(dir: &std::path::Path, text: &str) -> Source {
        let file = dir.join("shardhttpd.toml");
        std::fs::write(&file, text).unwrap();
        Source::capture(vec!["--config".into(), file.into_os_string()])
    }

    #[test]
    fn no_config_file_is_always_unchanged() {
        let mut source = Source::capture(vec!["--listen".into(), "127.0.0.1:0".into()]);
        assert!(matches!(source.examine(), Outcome::Unchanged));
    }

    #[test]
    fn same_text_is_unchanged_and_an_edit_is_changed_once() {
        let dir = temp_root("edit");
        let root = dir.join("root").display().to_string();
        let mut source = source_for(&dir, &format!("root = {root:?}\n"));
        assert!(matches!(source.examine(), Outcome::Unchanged));
        std::fs::write(
            dir.join("shardhttpd.toml"),
            format!("root = {root:?}\nserver_header = \"edited\"\n"),
        )
        .unwrap();
        assert!(matches!(source.examine(), Outcome::Changed));
        // The edit is now the reference.
        assert!(matches!(source.examine(), Outcome::Unchanged));
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_bad_edit_is_refused_with_the_check_error_and_stays_refused() {
        let dir = temp_root("bad");
        let root = dir.join("root").display().to_string();
        let mut source = source_for(&dir, &format!("root = {root:?}\n"));
        std::fs::write(
            dir.join("shardhttpd.toml"),
            format!("root = {root:?}\nbrotli_level = 99\n"),
        )
        .unwrap();
        match source.examine() {
            Outcome::Invalid(e) => assert!(format!("{e:#}").contains("brotli_level"), "{e:#}"),
            other => panic!("a bad edit must be refused, got {other:?}"),
        }
        // Still refused: the reference stays the running text.
        assert!(matches!(source.examine(), Outcome::Invalid(_)));
        std::fs::remove_dir_all(dir).unwrap();
    }
}
