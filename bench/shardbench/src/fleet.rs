//! The servers a study measures: shardhttpd once per `--io` backend (and a
//! baseline binary beside it), the two floors, and every installed peer,
//! each started pinned to the server CPUs and checked before a cell runs.

use std::io;
use std::path::Path;

use crate::floor_uring;
use crate::machine::{has_flag, has_tls};
use crate::report::UNSUPPORTED;
use crate::servers::{self, Io, Server, Setup, Tls};

/// The started servers, and the backends this shardhttpd cannot run.
#[derive(Default)]
pub struct Fleet {
    pub running: Vec<Server>,
    /// (server name, why): reported cell by cell as unsupported, never
    /// measured on another backend.
    pub unsupported: Vec<(String, String)>,
}

impl Fleet {
    /// shardhttpd on each backend of `io` (or on its default one), the
    /// baseline binary when given, and the floors.
    pub fn start_own(
        bin: &Path,
        io: Option<&[Io]>,
        baseline: Option<&Path>,
        setup: &Setup<'_>,
        tls: Option<&Tls>,
        notes: &mut Vec<String>,
    ) -> io::Result<Fleet> {
        let mut fleet = Fleet::default();
        let knows_io = has_flag(bin, "--io")?;
        let backends: Vec<Option<Io>> = match io {
            None => vec![None],
            Some(list) => {
                let mut l = list.to_vec();
                l.sort();
                l.dedup();
                l.into_iter().map(Some).collect()
            }
        };
        for io in backends {
            let name = match io {
                None => "shardhttpd".to_owned(),
                Some(io) => format!("shardhttpd-{}", io.name()),
            };
            let flag = match io {
                // A binary without the flag has epoll alone: run it
                // without the flag, and say so.
                Some(Io::Epoll) if !knows_io => {
                    notes.push(format!(
                        "{name}: this shardhttpd has no --io flag; epoll, its only backend, runs without it"
                    ));
                    None
                }
                Some(Io::Uring) if !knows_io => {
                    fleet.cannot_run(
                        name,
                        "this shardhttpd has no --io flag (no io_uring backend)".into(),
                        notes,
                    );
                    continue;
                }
                other => other,
            };
            match servers::start_shardhttpd(bin, setup, 1, "hash", &name, tls, flag) {
                Ok((s, _)) => fleet.running.push(s),
                Err(e) if flag.is_some() => {
                    let io = io.map_or("", |i| i.name());
                    fleet.cannot_run(name, format!("it did not start with --io {io}: {e}"), notes);
                }
                Err(e) => return Err(e),
            }
        }
        if let Some(b) = baseline {
            let tls = tls.filter(|_| has_tls(b).unwrap_or(false));
            let name = "shardhttpd-baseline";
            let (base, _) = servers::start_shardhttpd(b, setup, 1, "hash", name, tls, None)?;
            fleet.running.push(base);
        }
        fleet
            .running
            .push(servers::start_floor(setup, Io::Epoll, tls)?);
        match floor_uring::available() {
            Ok(()) => fleet
                .running
                .push(servers::start_floor(setup, Io::Uring, tls)?),
            Err(why) => skip(
                format!("SKIP floor-uring: io_uring is not available here ({why})"),
                notes,
            ),
        }
        Ok(fleet)
    }

    fn cannot_run(&mut self, name: String, why: String, notes: &mut Vec<String>) {
        let why = format!("{UNSUPPORTED}: {why}");
        eprintln!("{name}: {why}");
        notes.push(format!("{name}: {why}"));
        self.unsupported.push((name, why));
    }

    /// Every installed peer; one that is missing or does not serve the
    /// documents is skipped with a note.
    pub fn start_peers(&mut self, setup: &Setup<'_>, tls: Option<&Tls>, notes: &mut Vec<String>) {
        for peer in servers::PEERS {
            if servers::installed(peer).is_none() {
                skip(
                    format!("SKIP {peer}: not installed (apt-get install {peer})"),
                    notes,
                );
                continue;
            }
            match servers::start_peer(peer, setup, tls) {
                Ok(s) => {
                    if tls.is_some() && s.tls_port.is_none() {
                        notes.push(format!(
                            "{peer} has no TLS module installed: no TLS rows for it"
                        ));
                    }
                    self.running.push(s)
                }
                Err(e) => skip(
                    format!("SKIP {peer}: it did not start or serve the documents: {e}"),
                    notes,
                ),
            }
        }
    }

    /// Logs each server's command line, and notes a server that does not
    /// answer the exact If-Modified-Since of the 100-byte page with 304
    /// (the 304 rows would measure something else for it).
    pub fn check(&self, commands: &mut Vec<String>, notes: &mut Vec<String>) -> io::Result<()> {
        for s in &self.running {
            commands.push(format!("# {} (port {})\n{}", s.name, s.port, s.command));
            if let Some(lm) = &s.last_modified {
                let a = servers::fetch(
                    s.port,
                    "GET",
                    crate::docs::SMALL.path,
                    &format!("If-Modified-Since: {lm}\r\n"),
                )?;
                if a.status != 304 {
                    notes.push(format!(
                        "{} answers the exact If-Modified-Since with {}, not 304",
                        s.name, a.status
                    ));
                }
            }
        }
        Ok(())
    }
}

/// A server left out: said now and in the notes.
fn skip(note: String, notes: &mut Vec<String>) {
    eprintln!("{note}");
    notes.push(note);
}
