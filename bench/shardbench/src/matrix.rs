//! The matrix: which (mode, document, concurrency, tool) cells each run
//! measures. Every cell runs against every server it applies to, servers
//! interleaved, so drift on a busy machine hits them alike.

use crate::docs::{Doc, DOCS, LARGE, SMALL};
use crate::load::{Mode, Tool};
use clap::ValueEnum;

/// The 4 KiB page: the h2 matrix's middle size.
const MEDIUM: Doc = DOCS[2];

/// The classic concurrency levels.
pub const CONCURRENCY: [usize; 5] = [1, 10, 100, 1000, 10_000];

/// Most connections an ab row uses.
pub const AB_MAX: usize = 1000;

/// Most connections a TLS row uses: beyond, a handshake storm measures the
/// listen backlog.
pub const TLS_MAX: usize = 1000;

/// How much of the matrix to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Everything: ≤ 15 minutes on 2 cores at the default 2 s per cell.
    Full,
    /// A curve for keep-alive 100 B, every other row once at c=100: under 3
    /// minutes on 2 cores.
    Quick,
    /// One keep-alive 100 B cell per server (the tool's own test), and one
    /// h2c 100 B cell (`-m 10`) where h2load is installed.
    Tiny,
    /// The TLS comparison at c=100: keep-alive 100 B in cleartext and over
    /// TLS, `Connection: close` over TLS, keep-alive 100 KiB over TLS.
    Tls,
    /// The HTTP/2 matrix (issue 25), driven by h2load: 100 B, 4 KB and
    /// 100 KiB at `-c 100 -m 10` and `-c 1000 -m 1`, over TLS and h2c, and
    /// the HTTP/1.1 keep-alive rows (cleartext and TLS, wrk, c=100) they
    /// are compared with.
    H2,
    /// The HTTP/3 rows (issue 39): 100 B and 100 KiB at `-c 100 -m 10`
    /// over HTTP/3 (`shardbench h3load`) and, to compare, over HTTP/2 on
    /// TLS (h2load).
    H3,
}

/// The h2 matrix's (connections, streams per connection).
pub const H2_SHAPES: [(usize, usize); 2] = [(100, 10), (1000, 1)];

/// One row of the matrix.
#[derive(Debug, Clone, Copy)]
pub struct Cell {
    pub mode: Mode,
    pub doc: Doc,
    pub concurrency: usize,
    pub tool: Tool,
    /// Streams in flight per connection: h2load's `-m`; 1 otherwise.
    pub streams: usize,
}

impl Cell {
    pub fn label(&self) -> String {
        let m = if self.mode.multiplexed() {
            format!(" m={}", self.streams)
        } else {
            String::new()
        };
        format!(
            "{} {} c={}{m} {}",
            self.mode.name(),
            self.doc.label,
            self.concurrency,
            self.tool.name()
        )
    }

    /// The floor answers every request with the same 100-byte page, or
    /// with the same 100 KiB body where the requests name that document:
    /// it is measured where that is the work the others do too.
    pub fn applies_to(&self, server: &str) -> bool {
        if !crate::servers::is_floor(server) {
            return true;
        }
        let modes: &[Mode] = match self.doc.bytes {
            b if b == SMALL.bytes => &[
                Mode::KeepAlive,
                Mode::Close,
                Mode::Pipeline,
                Mode::TlsKeepAlive,
                Mode::TlsClose,
            ],
            b if b == LARGE.bytes => &[Mode::KeepAlive, Mode::Close, Mode::TlsKeepAlive],
            _ => &[],
        };
        self.tool == Tool::Wrk && modes.contains(&self.mode)
    }
}

/// The cells of a run, and what was changed to fit the machine.
pub struct Plan {
    pub cells: Vec<Cell>,
    pub notes: Vec<String>,
}

impl Plan {
    /// Keep the cells picked by one of `pieces` (`--cells`): a piece picks
    /// a cell when each of its words is a word of the cell's label, so
    /// `keep-alive 100B` is every keep-alive 100 B cell but no TLS one, and
    /// `c=100` is not `c=1000`.
    pub fn keep_only(&mut self, pieces: &[String]) {
        self.cells.retain(|c| {
            let label = c.label();
            let words: Vec<&str> = label.split_whitespace().collect();
            pieces
                .iter()
                .any(|p| p.split_whitespace().all(|w| words.contains(&w)))
        });
    }
}

/// The cells of `kind`; `levels` replaces its concurrency levels; each level
/// is capped at `cap` (from RLIMIT_NOFILE), with a note when it is.
pub fn plan(kind: Kind, levels: Option<&[usize]>, cap: usize, tls: bool) -> Plan {
    let mut notes = Vec::new();
    let fit = |c: usize, notes: &mut Vec<String>| -> usize {
        if c > cap {
            let n = format!("concurrency {c} capped at {cap} by RLIMIT_NOFILE");
            if !notes.contains(&n) {
                notes.push(n);
            }
            cap
        } else {
            c.max(1)
        }
    };
    let mut cells = Vec::new();
    let mut add = |mode, doc, c: usize, tool, notes: &mut Vec<String>| {
        // ab is one single-threaded process: the classic tables stop at 1000.
        let c = if tool == Tool::Ab { c.min(AB_MAX) } else { c };
        let concurrency = fit(c, notes);
        let cell = Cell {
            mode,
            doc,
            concurrency,
            tool,
            streams: 1,
        };
        // Capping can make two levels equal: keep one.
        if !cells.iter().any(|x: &Cell| {
            x.mode == mode
                && x.doc.path == doc.path
                && x.concurrency == concurrency
                && x.tool == tool
        }) {
            cells.push(cell);
        }
    };
    let h2 = |mode: Mode, doc: Doc, c: usize, m: usize, notes: &mut Vec<String>| Cell {
        mode,
        doc,
        concurrency: fit(c.min(TLS_MAX), notes),
        tool: Tool::H2load,
        streams: m,
    };
    let mut h2_cells = Vec::new();
    match kind {
        Kind::Full => {
            let levels = levels.unwrap_or(&CONCURRENCY);
            for mode in [Mode::KeepAlive, Mode::Close] {
                for doc in DOCS {
                    for &c in levels {
                        add(mode, doc, c, Tool::Wrk, &mut notes);
                    }
                }
            }
            for mode in [Mode::Pipeline, Mode::Ims] {
                for &c in levels {
                    add(mode, SMALL, c, Tool::Wrk, &mut notes);
                }
            }
            // HEAD on ab (wrk 4 cannot count HEAD responses), and the
            // classic tables' ab rows: small files; all up to c=1000.
            for &c in levels.iter().filter(|&&c| c <= AB_MAX) {
                add(Mode::Head, SMALL, c, Tool::Ab, &mut notes);
            }
            if tls {
                for (mode, doc) in [
                    (Mode::TlsKeepAlive, SMALL),
                    (Mode::TlsClose, SMALL),
                    (Mode::TlsKeepAlive, LARGE),
                ] {
                    for &c in levels.iter().filter(|&&c| c <= TLS_MAX) {
                        add(mode, doc, c, Tool::Wrk, &mut notes);
                    }
                }
            }
            for mode in [Mode::Close, Mode::KeepAlive] {
                for doc in &DOCS[..2] {
                    for &c in levels.iter().filter(|&&c| c <= AB_MAX) {
                        add(mode, *doc, c, Tool::Ab, &mut notes);
                    }
                }
            }
        }
        Kind::Quick => {
            let levels = levels.unwrap_or(&[1, 100, 1000]);
            for &c in levels {
                add(Mode::KeepAlive, SMALL, c, Tool::Wrk, &mut notes);
            }
            let mid = levels.get(levels.len() / 2).copied().unwrap_or(100);
            for doc in &DOCS[1..] {
                add(Mode::KeepAlive, *doc, mid, Tool::Wrk, &mut notes);
            }
            for doc in DOCS {
                add(Mode::Close, doc, mid, Tool::Wrk, &mut notes);
            }
            for mode in [Mode::Pipeline, Mode::Ims] {
                add(mode, SMALL, mid, Tool::Wrk, &mut notes);
            }
            add(Mode::Head, SMALL, mid, Tool::Ab, &mut notes);
            add(Mode::Close, SMALL, mid, Tool::Ab, &mut notes);
            if tls {
                for mode in [Mode::TlsKeepAlive, Mode::TlsClose] {
                    add(mode, SMALL, mid.min(TLS_MAX), Tool::Wrk, &mut notes);
                }
                add(
                    Mode::TlsKeepAlive,
                    LARGE,
                    mid.min(TLS_MAX),
                    Tool::Wrk,
                    &mut notes,
                );
            }
        }
        Kind::Tiny => {
            let c = levels.and_then(|l| l.first().copied()).unwrap_or(10);
            add(Mode::KeepAlive, SMALL, c, Tool::Wrk, &mut notes);
            h2_cells.push(h2(Mode::H2c, SMALL, c, 10, &mut notes));
            if tls {
                for mode in [Mode::TlsKeepAlive, Mode::TlsClose] {
                    add(mode, SMALL, c.min(TLS_MAX), Tool::Wrk, &mut notes);
                }
            }
        }
        Kind::Tls => {
            let c = levels.and_then(|l| l.first().copied()).unwrap_or(100);
            add(Mode::KeepAlive, SMALL, c, Tool::Wrk, &mut notes);
            add(
                Mode::TlsKeepAlive,
                SMALL,
                c.min(TLS_MAX),
                Tool::Wrk,
                &mut notes,
            );
            add(Mode::TlsClose, SMALL, c.min(TLS_MAX), Tool::Wrk, &mut notes);
            add(
                Mode::TlsKeepAlive,
                LARGE,
                c.min(TLS_MAX),
                Tool::Wrk,
                &mut notes,
            );
        }
        Kind::H2 => {
            add(Mode::KeepAlive, SMALL, 100, Tool::Wrk, &mut notes);
            add(Mode::TlsKeepAlive, SMALL, 100, Tool::Wrk, &mut notes);
            for mode in [Mode::H2, Mode::H2c] {
                for doc in [SMALL, MEDIUM, LARGE] {
                    for (c, m) in H2_SHAPES {
                        h2_cells.push(h2(mode, doc, c, m, &mut notes));
                    }
                }
            }
        }
        Kind::H3 => {
            for doc in [SMALL, LARGE] {
                h2_cells.push(h2(Mode::H2, doc, 100, 10, &mut notes));
                h2_cells.push(Cell {
                    mode: Mode::H3,
                    tool: Tool::H3load,
                    ..h2(Mode::H2, doc, 100, 10, &mut notes)
                });
            }
        }
    }
    cells.extend(h2_cells);
    Plan { cells, notes }
}

impl ValueEnum for Kind {
    fn value_variants<'a>() -> &'a [Self] {
        &[
            Kind::Full,
            Kind::Quick,
            Kind::Tiny,
            Kind::Tls,
            Kind::H2,
            Kind::H3,
        ]
    }

    fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
        Some(clap::builder::PossibleValue::new(match self {
            Kind::Full => "full",
            Kind::Quick => "quick",
            Kind::Tiny => "tiny",
            Kind::Tls => "tls",
            Kind::H2 => "h2",
            Kind::H3 => "h3",
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_keeps_the_rows_whose_label_holds_a_piece() {
        let mut p = plan(Kind::Full, Some(&[100, 10_000]), 100_000, true);
        let all = p.cells.len();
        p.keep_only(&["keep-alive 100B c=100 wrk".into(), "pipeline16".into()]);
        let labels: Vec<String> = p.cells.iter().map(Cell::label).collect();
        assert!(labels.contains(&"keep-alive 100B c=100 wrk".to_string()));
        assert!(labels.contains(&"pipeline16 100B c=10000 wrk".to_string()));
        assert!(!labels.iter().any(|l| l.starts_with("close")), "{labels:?}");
        assert!(p.cells.len() < all);
        p.keep_only(&["no such row".into()]);
        assert!(p.cells.is_empty());
    }

    #[test]
    fn cells_match_whole_words_of_the_label() {
        let mut p = plan(Kind::Full, Some(&[100, 1000]), 100_000, true);
        p.keep_only(&["keep-alive 100B c=100".into()]);
        let labels: Vec<String> = p.cells.iter().map(Cell::label).collect();
        // Both tools; not tls-keep-alive, not c=1000.
        assert_eq!(
            labels,
            ["keep-alive 100B c=100 wrk", "keep-alive 100B c=100 ab"]
        );
        // The word order does not matter.
        let mut p = plan(Kind::Full, Some(&[100, 1000]), 100_000, true);
        p.keep_only(&["c=1000 tls-keep-alive".into()]);
        let labels: Vec<String> = p.cells.iter().map(Cell::label).collect();
        assert!(!labels.is_empty());
        assert!(labels
            .iter()
            .all(|l| l.starts_with("tls-keep-alive ") && l.contains(" c=1000 ")));
        p.keep_only(&["keep-alive".into()]);
        assert!(p.cells.is_empty());
    }

    #[test]
    fn full_matrix_covers_every_classic_row() {
        let p = plan(Kind::Full, None, 100_000, false);
        // 2 modes × 4 sizes × 5 levels + 2 rows × 5, then on ab HEAD × 4
        // and 2 modes × 2 sizes × 4 (up to c=1000).
        assert_eq!(p.cells.len(), 40 + 10 + 4 + 16);
        assert!(p.notes.is_empty());
    }

    #[test]
    fn tls_rows_only_when_asked() {
        let p = plan(Kind::Full, None, 100_000, true);
        let tls: Vec<&Cell> = p.cells.iter().filter(|c| c.mode.is_tls()).collect();
        assert_eq!(
            tls.len(),
            3 * 4,
            "keep-alive and close at 100 B, keep-alive at 100 KiB, c ≤ 1000"
        );
        // The floors have a TLS listener: they answer the TLS rows too.
        assert!(tls.iter().all(|c| c.applies_to("floor")));
    }

    #[test]
    fn tls_matrix_is_the_issue_rows_at_c100() {
        let p = plan(Kind::Tls, None, 100_000, true);
        let rows: Vec<String> = p.cells.iter().map(Cell::label).collect();
        assert_eq!(
            rows,
            [
                "keep-alive 100B c=100 wrk",
                "tls-keep-alive 100B c=100 wrk",
                "tls-close 100B c=100 wrk",
                "tls-keep-alive 100KiB c=100 wrk",
            ]
        );
    }

    #[test]
    fn h3_matrix_pairs_each_h3_row_with_its_h2_row() {
        let p = plan(Kind::H3, None, 100_000, true);
        let rows: Vec<String> = p.cells.iter().map(Cell::label).collect();
        assert_eq!(
            rows,
            [
                "h2 100B c=100 m=10 h2load",
                "h3 100B c=100 m=10 h3load",
                "h2 100KiB c=100 m=10 h2load",
                "h3 100KiB c=100 m=10 h3load",
            ]
        );
        assert!(p.cells.iter().all(|c| !c.applies_to("floor")));
        assert!(p.cells.iter().all(|c| c.mode.is_tls()));
    }

    #[test]
    fn h2_matrix_is_the_issue_rows() {
        let p = plan(Kind::H2, None, 100_000, true);
        let rows: Vec<String> = p.cells.iter().map(Cell::label).collect();
        assert_eq!(
            rows,
            [
                "keep-alive 100B c=100 wrk",
                "tls-keep-alive 100B c=100 wrk",
                "h2 100B c=100 m=10 h2load",
                "h2 100B c=1000 m=1 h2load",
                "h2 4KB c=100 m=10 h2load",
                "h2 4KB c=1000 m=1 h2load",
                "h2 100KiB c=100 m=10 h2load",
                "h2 100KiB c=1000 m=1 h2load",
                "h2c 100B c=100 m=10 h2load",
                "h2c 100B c=1000 m=1 h2load",
                "h2c 4KB c=100 m=10 h2load",
                "h2c 4KB c=1000 m=1 h2load",
                "h2c 100KiB c=100 m=10 h2load",
                "h2c 100KiB c=1000 m=1 h2load",
            ]
        );
        assert!(p
            .cells
            .iter()
            .filter(|c| c.mode.is_h2())
            .all(|c| !c.applies_to("floor")));
        let tiny = plan(Kind::Tiny, None, 100_000, false);
        let rows: Vec<String> = tiny.cells.iter().map(Cell::label).collect();
        assert_eq!(
            rows,
            ["keep-alive 100B c=10 wrk", "h2c 100B c=10 m=10 h2load"]
        );
    }

    #[test]
    fn concurrency_is_capped_and_reported() {
        let p = plan(Kind::Full, Some(&[100, 1000, 10_000]), 4000, false);
        assert!(p.cells.iter().all(|c| c.concurrency <= 4000));
        assert!(p.cells.iter().any(|c| c.concurrency == 4000));
        assert_eq!(
            p.notes,
            vec!["concurrency 10000 capped at 4000 by RLIMIT_NOFILE"]
        );
    }

    #[test]
    fn the_floor_serves_only_the_small_page_and_100_kib_rows() {
        let p = plan(Kind::Quick, None, 100_000, false);
        let floor = p.cells.iter().filter(|c| c.applies_to("floor")).count();
        assert_eq!(
            floor,
            3 + 1 + 1 + 2,
            "keep-alive curve, close and pipelining at 100 B; keep-alive and close at 100 KiB"
        );
        assert!(p.cells.iter().all(|c| c.applies_to("nginx")));
        let p = plan(Kind::Quick, Some(&[10_000]), 100_000, false);
        assert!(p
            .cells
            .iter()
            .all(|c| c.tool == Tool::Wrk || c.concurrency == AB_MAX));
    }
}
