//! SVG figures with plotters, fit to print: requests/s and server CPU per
//! request against concurrency (one figure per file size × mode, a line per
//! server, like the classic studies), and requests/s and balance against
//! shards. Each series has its own marker and line style (grey print and
//! colour-blind readers lose colour); a point is the median of the rounds
//! with an error bar for their range; a client-saturated point is ringed,
//! as `ᶜ` marks it in the tables; ticks read `1k`, `10k`, `50k`; the legend
//! sits beside the data, not on it.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;

use crate::report::{summarize, Spread, Summary};

const COLOURS: [RGBColor; 8] = [
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0x7f, 0x7f, 0x7f),
    RGBColor(0xd6, 0x27, 0x28),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0xff, 0x7f, 0x0e),
    RGBColor(0x94, 0x67, 0xbd),
    RGBColor(0x8c, 0x56, 0x4b),
    RGBColor(0x17, 0xbe, 0xcf),
];

/// Figure size, and the band on the right that holds the legend.
const SIZE: (u32, u32) = (900, 500);
const LEGEND_WIDTH: u32 = 230;

/// How a series' points are drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Marker {
    Circle,
    Square,
    Triangle,
    Cross,
    Diamond,
    OpenCircle,
    OpenSquare,
    OpenTriangle,
}

const MARKERS: [Marker; 8] = [
    Marker::Circle,
    Marker::Square,
    Marker::Triangle,
    Marker::Cross,
    Marker::Diamond,
    Marker::OpenCircle,
    Marker::OpenSquare,
    Marker::OpenTriangle,
];

/// How a series' line is drawn: solid, dashed or dotted (pixels on, off).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dash {
    Solid,
    Dashed,
    Dotted,
}

const DASHES: [Dash; 3] = [Dash::Solid, Dash::Dashed, Dash::Dotted];

/// Series `i`'s look: colour, marker and dash all change with `i`, and no
/// two of the first 24 share both marker and dash.
fn look(i: usize) -> (RGBColor, Marker, Dash) {
    (
        COLOURS[i % COLOURS.len()],
        MARKERS[i % MARKERS.len()],
        DASHES[(i + i / MARKERS.len()) % DASHES.len()],
    )
}

/// A tick label: `1k`, `10k`, `50k`, `1.5M`, `0.5`; never `50000.0`.
pub fn tick(v: f64) -> String {
    let a = v.abs();
    let (x, unit) = if a >= 1e6 {
        (v / 1e6, "M")
    } else if a >= 1e3 {
        (v / 1e3, "k")
    } else {
        (v, "")
    };
    let mut s = format!("{x:.2}");
    while s.ends_with('0') {
        s.pop();
    }
    if s.ends_with('.') {
        s.pop();
    }
    if s == "-0" {
        s = "0".into();
    }
    s + unit
}

/// An axis of counts (shards): whole numbers only, nothing between.
fn whole_tick(v: f64) -> String {
    if (v - v.round()).abs() < 1e-9 && v >= 0.0 {
        tick(v.round())
    } else {
        String::new()
    }
}

/// Why a shard sweep on `server_cpus` CPUs draws no scaling plot, if it
/// does not: one CPU gives one point, and an axis of "0.7 shards" says
/// nothing.
pub fn sweep_warning(server_cpus: usize) -> Option<String> {
    (server_cpus < 2).then(|| {
        format!(
            "the servers have {server_cpus} CPU: the shard sweep measures 1 shard only \
             and draws no scaling plot (give the servers 2 or more CPUs with --server-cpus \
             to measure scaling)"
        )
    })
}

/// One point: x, the median with its range, and whether the client was
/// saturated there.
#[derive(Debug, Clone, Copy)]
struct Point {
    x: f64,
    y: Spread,
    saturated: bool,
}

type Series = Vec<(String, Vec<Point>)>;

/// Draw every figure the rows allow into `dir`; returns the files written.
pub fn all(rows: &[crate::report::Row], dir: &Path) -> Vec<PathBuf> {
    let summaries = summarize(rows);
    let rounds = summaries.iter().map(|s| s.rounds).max().unwrap_or(0);
    let mut written = Vec::new();
    let matrix: Vec<&Summary> = summaries
        .iter()
        .filter(|s| s.row.section == "matrix" && s.row.tool == "wrk" && s.unsupported.is_none())
        .collect();
    let mut groups: Vec<(String, String)> = Vec::new();
    for s in &matrix {
        let key = (s.row.mode.clone(), s.row.size.clone());
        if !groups.contains(&key) {
            groups.push(key);
        }
    }
    for (mode, size) in groups {
        let cells: Vec<&&Summary> = matrix
            .iter()
            .filter(|s| s.row.mode == mode && s.row.size == size)
            .collect();
        let concs: BTreeSet<usize> = cells.iter().map(|s| s.row.concurrency).collect();
        if concs.len() < 2 {
            continue;
        }
        let mut servers: Vec<String> = Vec::new();
        for s in &cells {
            if !servers.contains(&s.row.server) {
                servers.push(s.row.server.clone());
            }
        }
        let series = |f: &dyn Fn(&Summary) -> Spread| -> Series {
            servers
                .iter()
                .map(|name| {
                    let mut pts: Vec<Point> = cells
                        .iter()
                        .filter(|s| &s.row.server == name)
                        .map(|s| Point {
                            x: s.row.concurrency as f64,
                            y: f(s),
                            saturated: s.client_saturated(),
                        })
                        .collect();
                    pts.sort_by(|a, b| a.x.total_cmp(&b.x));
                    (name.clone(), pts)
                })
                .collect()
        };
        let path = dir.join(format!("rps-{mode}-{size}.svg"));
        let figure = Figure {
            title: format!("requests/s, {mode}, {size}"),
            x_label: "concurrency (connections)",
            y_label: "requests/s",
            log_x: true,
            rounds,
        };
        if figure.draw(&path, &series(&|s| s.rps)) {
            written.push(path);
        }
        let path = dir.join(format!("cpu-{mode}-{size}.svg"));
        let figure = Figure {
            title: format!("server CPU per request, {mode}, {size}"),
            y_label: "server CPU µs / request",
            ..figure
        };
        if figure.draw(&path, &series(&|s| s.us_per_req)) {
            written.push(path);
        }
    }
    let sweep: Vec<&Summary> = summaries
        .iter()
        .filter(|s| s.row.section == "sweep")
        .collect();
    let shard_counts: BTreeSet<usize> = sweep.iter().map(|s| s.row.shards).collect();
    // One shard count is no scaling curve (the study warned when it began).
    if shard_counts.len() >= 2 {
        let steers: Vec<String> = ["hash", "cpu"]
            .iter()
            .filter(|s| sweep.iter().any(|r| r.row.steer == **s))
            .map(|s| s.to_string())
            .collect();
        let series = |f: &dyn Fn(&Summary) -> Option<Spread>| -> Series {
            steers
                .iter()
                .map(|steer| {
                    let pts = sweep
                        .iter()
                        .filter(|s| &s.row.steer == steer)
                        .filter_map(|s| {
                            Some(Point {
                                x: s.row.shards as f64,
                                y: f(s)?,
                                saturated: s.client_saturated(),
                            })
                        })
                        .collect();
                    (format!("steer {steer}"), pts)
                })
                .collect()
        };
        let figure = Figure {
            title: "shardhttpd requests/s against shards".into(),
            x_label: "shards",
            y_label: "requests/s",
            log_x: false,
            rounds,
        };
        let path = dir.join("sweep-rps.svg");
        if figure.draw(&path, &series(&|s| Some(s.rps))) {
            written.push(path);
        }
        // A round where a shard got nothing has no finite ratio: left out.
        let figure = Figure {
            title: "per-core balance (max/min requests) against shards".into(),
            y_label: "max / min",
            ..figure
        };
        let path = dir.join("sweep-balance.svg");
        if figure.draw(&path, &series(&|s| s.balance)) {
            written.push(path);
        }
    }
    written
}

/// One figure's labels and axes.
#[derive(Debug, Clone)]
struct Figure {
    title: String,
    x_label: &'static str,
    y_label: &'static str,
    /// Concurrency: logarithmic. Shards: linear, whole numbers.
    log_x: bool,
    /// Rounds per point: the legend says what the bars are when > 1.
    rounds: usize,
}

impl Figure {
    /// Draw `series` to `path`. False if nothing was drawn.
    fn draw(&self, path: &Path, series: &Series) -> bool {
        let pts = || series.iter().flat_map(|(_, p)| p.iter());
        let (x_min, x_max) = pts().fold((f64::MAX, f64::MIN), |(a, b), p| (a.min(p.x), b.max(p.x)));
        if x_min > x_max {
            return false;
        }
        let y_max = pts()
            .map(|p| {
                if p.y.max.is_nan() {
                    p.y.median
                } else {
                    p.y.max
                }
            })
            .filter(|v| v.is_finite())
            .fold(0.0f64, f64::max);
        let y_top = if y_max > 0.0 { y_max * 1.1 } else { 1.0 };
        let result = (|| -> Result<(), Box<dyn std::error::Error>> {
            let root = SVGBackend::new(path, SIZE).into_drawing_area();
            root.fill(&WHITE)?;
            let (plot_area, legend_area) = root.split_horizontally(SIZE.0 - LEGEND_WIDTH);
            let mut builder = ChartBuilder::on(&plot_area);
            builder
                .caption(&self.title, ("sans-serif", 20))
                .margin(15)
                .x_label_area_size(45)
                .y_label_area_size(60);
            let y_fmt = |v: &f64| tick(*v);
            if self.log_x {
                // Ticks at the measured levels only (1, 10, 100, 1k, 10k),
                // not at every 2…9 of each decade.
                let mut levels: Vec<f64> = pts().map(|p| p.x).filter(|x| *x >= 1.0).collect();
                levels.sort_by(f64::total_cmp);
                levels.dedup();
                let mut chart = builder.build_cartesian_2d(
                    (x_min.max(1.0) * 0.8..x_max.max(2.0) * 1.25)
                        .log_scale()
                        .with_key_points(levels),
                    0.0..y_top,
                )?;
                let x_fmt = |v: &f64| tick(*v);
                // No minor grid: on a log axis it greys whole decades.
                chart
                    .configure_mesh()
                    .x_desc(self.x_label)
                    .y_desc(self.y_label)
                    .x_label_formatter(&x_fmt)
                    .y_label_formatter(&y_fmt)
                    .light_line_style(TRANSPARENT)
                    .draw()?;
                draw_series(&mut chart, series)?;
            } else {
                let mut chart =
                    builder.build_cartesian_2d((x_min - 0.5)..(x_max + 0.5), 0.0..y_top)?;
                let x_fmt = |v: &f64| whole_tick(*v);
                let labels = (x_max - x_min).round() as usize + 2;
                chart
                    .configure_mesh()
                    .x_desc(self.x_label)
                    .y_desc(self.y_label)
                    .x_labels(labels)
                    .x_label_formatter(&x_fmt)
                    .y_label_formatter(&y_fmt)
                    .light_line_style(TRANSPARENT)
                    .draw()?;
                draw_series(&mut chart, series)?;
            }
            let saturated = pts().any(|p| p.saturated);
            draw_legend(&legend_area, series, saturated, self.rounds)?;
            root.present()?;
            Ok(())
        })();
        match result {
            Ok(()) => true,
            Err(e) => {
                eprintln!("plot {} failed: {e}", path.display());
                false
            }
        }
    }
}

/// A marker's outline in pixels around its point, and whether it is
/// filled (else stroked). Plain polygons and paths: one element type each,
/// so that every marker draws through the same two calls.
fn shape(kind: Marker) -> (Vec<(i32, i32)>, bool) {
    let circle = || -> Vec<(i32, i32)> {
        (0..=16)
            .map(|i| {
                let a = i as f64 * std::f64::consts::TAU / 16.0;
                (
                    (4.5 * a.cos()).round() as i32,
                    (4.5 * a.sin()).round() as i32,
                )
            })
            .collect()
    };
    let square = vec![(-4, -4), (4, -4), (4, 4), (-4, 4), (-4, -4)];
    let triangle = vec![(0, -5), (5, 4), (-5, 4), (0, -5)];
    match kind {
        Marker::Circle => (circle(), true),
        Marker::OpenCircle => (circle(), false),
        Marker::Square => (square, true),
        Marker::OpenSquare => (square, false),
        Marker::Triangle => (triangle, true),
        Marker::OpenTriangle => (triangle, false),
        // Both diagonals in one path, through the centre and back.
        Marker::Cross => (vec![(-4, -4), (4, 4), (0, 0), (-4, 4), (4, -4)], false),
        Marker::Diamond => (vec![(0, -5), (5, 0), (0, 5), (-5, 0), (0, -5)], false),
    }
}

/// The ring around a client-saturated point: a circle of this radius in
/// pixels.
const RING: i32 = 9;

fn draw_series<'a, X>(
    chart: &mut ChartContext<'a, SVGBackend<'a>, Cartesian2d<X, RangedCoordf64>>,
    series: &Series,
) -> Result<(), Box<dyn std::error::Error + 'a>>
where
    X: Ranged<ValueType = f64>,
{
    for (i, (_, pts)) in series.iter().enumerate() {
        let (colour, kind, dash) = look(i);
        let style = colour.stroke_width(2);
        let line: Vec<(f64, f64)> = pts
            .iter()
            .filter(|p| p.y.median.is_finite())
            .map(|p| (p.x, p.y.median))
            .collect();
        match dash {
            Dash::Solid => {
                chart.draw_series(LineSeries::new(line.iter().copied(), style))?;
            }
            Dash::Dashed => {
                chart.draw_series(DashedLineSeries::new(line.iter().copied(), 9, 5, style))?;
            }
            Dash::Dotted => {
                chart.draw_series(DashedLineSeries::new(line.iter().copied(), 2, 4, style))?;
            }
        }
        chart.draw_series(
            pts.iter()
                .filter(|p| p.y.max > p.y.min)
                .map(|p| ErrorBar::new_vertical(p.x, p.y.min, p.y.median, p.y.max, colour, 8)),
        )?;
        let (outline, filled) = shape(kind);
        if filled {
            chart
                .draw_series(line.iter().map(|&p| {
                    EmptyElement::at(p) + Polygon::new(outline.clone(), colour.filled())
                }))?;
        } else {
            chart.draw_series(line.iter().map(|&p| {
                EmptyElement::at(p) + PathElement::new(outline.clone(), colour.stroke_width(2))
            }))?;
        }
        chart.draw_series(
            pts.iter()
                .filter(|p| p.saturated && p.y.median.is_finite())
                .map(|p| Circle::new((p.x, p.y.median), RING, BLACK.stroke_width(1))),
        )?;
    }
    Ok(())
}

/// The legend, in its own band beside the plot: each series' line, marker
/// and name; the saturated ring and the error bars when the figure has them.
fn draw_legend(
    area: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
    series: &Series,
    saturated: bool,
    rounds: usize,
) -> Result<(), Box<dyn std::error::Error>> {
    let text = ("sans-serif", 14).into_font().color(&BLACK);
    let mut y = 60;
    let x = 10;
    for (i, (name, _)) in series.iter().enumerate() {
        let (colour, kind, dash) = look(i);
        let style = colour.stroke_width(2);
        let seg = vec![(x, y), (x + 36, y)];
        match dash {
            Dash::Solid => area.draw(&PathElement::new(seg, style))?,
            Dash::Dashed => {
                area.draw(&plotters::element::DashedPathElement::new(seg, 9, 5, style))?
            }
            Dash::Dotted => {
                area.draw(&plotters::element::DashedPathElement::new(seg, 2, 4, style))?
            }
        }
        let (outline, filled) = shape(kind);
        let at: Vec<(i32, i32)> = outline
            .iter()
            .map(|&(dx, dy)| (x + 18 + dx, y + dy))
            .collect();
        if filled {
            area.draw(&Polygon::new(at, colour.filled()))?;
        } else {
            area.draw(&PathElement::new(at, colour.stroke_width(2)))?;
        }
        area.draw(&Text::new(name.clone(), (x + 46, y - 8), text.clone()))?;
        y += 24;
    }
    if saturated {
        y += 6;
        area.draw(&Circle::new((x + 18, y), RING, BLACK.stroke_width(1)))?;
        area.draw(&Text::new(
            "client CPU saturated",
            (x + 46, y - 8),
            text.clone(),
        ))?;
        area.draw(&Text::new(
            "(compare µs/request there)",
            (x + 46, y + 8),
            text.clone(),
        ))?;
        y += 34;
    }
    if rounds > 1 {
        y += 6;
        area.draw(&PathElement::new(
            vec![(x + 18, y - 9), (x + 18, y + 9)],
            BLACK.stroke_width(1),
        ))?;
        area.draw(&PathElement::new(
            vec![(x + 14, y - 9), (x + 22, y - 9)],
            BLACK,
        ))?;
        area.draw(&PathElement::new(
            vec![(x + 14, y + 9), (x + 22, y + 9)],
            BLACK,
        ))?;
        area.draw(&Text::new(
            format!("median of {rounds} rounds,"),
            (x + 46, y - 8),
            text.clone(),
        ))?;
        area.draw(&Text::new("bar: min–max", (x + 46, y + 8), text))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::Outcome;
    use crate::report::Row;

    #[test]
    fn tick_labels_read_like_a_paper() {
        for (v, want) in [
            (1.0, "1"),
            (10.0, "10"),
            (100.0, "100"),
            (1000.0, "1k"),
            (10_000.0, "10k"),
            (50_000.0, "50k"),
            (2500.0, "2.5k"),
            (125_000.0, "125k"),
            (1_500_000.0, "1.5M"),
            (0.5, "0.5"),
            (7.25, "7.25"),
            (0.0, "0"),
        ] {
            assert_eq!(tick(v), want, "{v}");
        }
        assert_eq!(whole_tick(2.0), "2");
        assert_eq!(whole_tick(0.7), "", "no fractional shards");
    }

    #[test]
    fn series_differ_by_more_than_colour() {
        let looks: Vec<(Marker, Dash)> = (0..8).map(|i| (look(i).1, look(i).2)).collect();
        for (i, a) in looks.iter().enumerate() {
            assert!(!looks[i + 1..].contains(a), "series {i} repeats {a:?}");
        }
        // Neighbours differ in marker and in line style both.
        for i in 0..7 {
            assert_ne!(look(i).1, look(i + 1).1);
            assert_ne!(look(i).2, look(i + 1).2);
        }
    }

    #[test]
    fn one_server_cpu_warns_and_draws_no_sweep() {
        assert!(sweep_warning(1).is_some_and(|w| w.contains("no scaling plot")));
        assert!(sweep_warning(0).is_some());
        assert_eq!(sweep_warning(2), None);
        let dir = std::env::temp_dir().join(format!("shardbench-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let sweep = |shards: usize, steer: &str, rps: f64| Row {
            section: "sweep".into(),
            server: "shardhttpd".into(),
            tool: "wrk".into(),
            shards,
            steer: steer.into(),
            per_core: vec![10; shards],
            outcome: Outcome {
                rps,
                ..Outcome::default()
            },
            round: 1,
            ..Row::default()
        };
        let one = vec![sweep(1, "hash", 100.0), sweep(1, "cpu", 90.0)];
        assert!(all(&one, &dir).is_empty(), "one shard count: no plot");
        let two = vec![
            sweep(1, "hash", 100.0),
            sweep(1, "cpu", 90.0),
            sweep(2, "hash", 190.0),
            sweep(2, "cpu", 170.0),
        ];
        let files = all(&two, &dir);
        assert_eq!(files.len(), 2, "{files:?}");
        let svg = std::fs::read_to_string(dir.join("sweep-rps.svg")).unwrap();
        assert!(
            !svg.contains(">0.5<") && !svg.contains(">1.5<"),
            "whole shards only"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A concurrency figure over rounds: error bars, the ring on a
    /// saturated point, `1k`/`10k` ticks, and the legend right of the data.
    #[test]
    fn concurrency_figure_has_bars_rings_and_short_ticks() {
        let dir = std::env::temp_dir().join(format!("shardbench-fig-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut rows = Vec::new();
        for (server, base) in [("shardhttpd", 100_000.0), ("floor", 120_000.0)] {
            for c in [1usize, 1000, 10_000] {
                for round in 1..=3 {
                    rows.push(Row {
                        section: "matrix".into(),
                        server: server.into(),
                        tool: "wrk".into(),
                        mode: "keep-alive".into(),
                        size: "100B".into(),
                        concurrency: c,
                        outcome: Outcome {
                            rps: base + 1000.0 * round as f64,
                            ..Outcome::default()
                        },
                        server_cpu_us_per_req: 5.0 + round as f64,
                        client_cpu_busy_pct: if c == 10_000 { 99.0 } else { 50.0 },
                        round,
                        ..Row::default()
                    });
                }
            }
        }
        let files = all(&rows, &dir);
        assert_eq!(files.len(), 2, "{files:?}");
        let svg = std::fs::read_to_string(dir.join("rps-keep-alive-100B.svg")).unwrap();
        let texts: Vec<&str> = svg
            .split("<text")
            .skip(1)
            .filter_map(|t| Some(t.split('>').nth(1)?.split('<').next()?.trim()))
            .collect();
        for want in ["1k", "10k", "median of 3 rounds,", "client CPU saturated"] {
            assert!(texts.contains(&want), "{want} in the figure: {texts:?}");
        }
        for t in &texts {
            assert!(!t.contains("000"), "{t} as a label: {texts:?}");
        }
        // The legend's names are right of the plot band.
        let name_x = svg
            .split("<text")
            .filter(|t| {
                t.split('>')
                    .nth(1)
                    .is_some_and(|x| x.trim().starts_with("floor"))
            })
            .filter_map(|t| {
                t.split("x=\"")
                    .nth(1)?
                    .split('"')
                    .next()?
                    .parse::<f64>()
                    .ok()
            })
            .next()
            .expect("legend entry");
        assert!(name_x > (SIZE.0 - LEGEND_WIDTH) as f64, "{name_x}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
