//! The two ways a large body leaves the server (`--sendfile false`: the
//! verified copy; `--sendfile true`: zero-copy), and `both_modes!`, which
//! makes one `#[test]` per mode of each scenario `fn(Mode)` named.
// Most test crates include the harness without using these.
#![allow(unused_macros, unused_imports)]

/// The two ways a large body leaves the server.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Mode {
    VerifiedCopy,
    ZeroCopy,
}

impl Mode {
    /// The `--sendfile` value that selects this mode.
    pub fn flag(self) -> &'static str {
        match self {
            Mode::VerifiedCopy => "false",
            Mode::ZeroCopy => "true",
        }
    }

    /// `flags` plus the flag that selects this mode.
    pub fn flags<'a>(self, flags: &[&'a str]) -> Vec<&'a str> {
        let mut v = flags.to_vec();
        v.extend(["--sendfile", self.flag()]);
        v
    }
}

/// One `#[test]` per mode for each scenario named, in modules
/// `verified_copy` and `zero_copy`; invoked at a test crate's root.
macro_rules! both_modes {
    ($($scenario:ident),* $(,)?) => {
        mod verified_copy {
            $(#[test] fn $scenario() {
                super::$scenario($crate::support::sendfile_mode::Mode::VerifiedCopy)
            })*
        }
        mod zero_copy {
            $(#[test] fn $scenario() {
                super::$scenario($crate::support::sendfile_mode::Mode::ZeroCopy)
            })*
        }
    };
}
pub(crate) use both_modes;
