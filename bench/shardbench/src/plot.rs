//! SVG figures with plotters: requests/s and server CPU per request against
//! concurrency (one figure per file size × mode, a line per server, like
//! the classic studies), and requests/s and balance against shards.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use plotters::prelude::*;

use crate::report::Row;

const COLOURS: [RGBColor; 6] = [
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0x7f, 0x7f, 0x7f),
    RGBColor(0xd6, 0x27, 0x28),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0xff, 0x7f, 0x0e),
    RGBColor(0x94, 0x67, 0xbd),
];

type Series = Vec<(String, Vec<(f64, f64)>)>;

/// Draw every figure the rows allow into `dir`; returns the files written.
pub fn all(rows: &[Row], dir: &Path) -> Vec<PathBuf> {
    let mut written = Vec::new();
    let matrix: Vec<&Row> = rows
        .iter()
        .filter(|r| r.section == "matrix" && r.tool == "wrk")
        .collect();
    let mut groups: Vec<(String, String)> = Vec::new();
    for r in &matrix {
        let key = (r.mode.clone(), r.size.clone());
        if !groups.contains(&key) {
            groups.push(key);
        }
    }
    for (mode, size) in groups {
        let cells: Vec<&&Row> = matrix
            .iter()
            .filter(|r| r.mode == mode && r.size == size)
            .collect();
        let concs: BTreeSet<usize> = cells.iter().map(|r| r.concurrency).collect();
        if concs.len() < 2 {
            continue;
        }
        let mut servers: Vec<String> = Vec::new();
        for r in &cells {
            if !servers.contains(&r.server) {
                servers.push(r.server.clone());
            }
        }
        let series = |f: &dyn Fn(&Row) -> f64| -> Series {
            servers
                .iter()
                .map(|s| {
                    let mut pts: Vec<(f64, f64)> = cells
                        .iter()
                        .filter(|r| &r.server == s)
                        .map(|r| (r.concurrency as f64, f(r)))
                        .collect();
                    pts.sort_by(|a, b| a.0.total_cmp(&b.0));
                    (s.clone(), pts)
                })
                .collect()
        };
        let rps = series(&|r| r.outcome.rps);
        let path = dir.join(format!("rps-{mode}-{size}.svg"));
        if line_chart(
            &path,
            &format!("requests/s, {mode}, {size}"),
            "concurrency",
            "requests/s",
            true,
            &rps,
        ) {
            written.push(path);
        }
        let cpu = series(&|r| r.server_cpu_us_per_req);
        let path = dir.join(format!("cpu-{mode}-{size}.svg"));
        if line_chart(
            &path,
            &format!("server CPU per request, {mode}, {size}"),
            "concurrency",
            "µs / request",
            true,
            &cpu,
        ) {
            written.push(path);
        }
    }
    let sweep: Vec<&Row> = rows.iter().filter(|r| r.section == "sweep").collect();
    if !sweep.is_empty() {
        let steers: Vec<String> = ["hash", "cpu"]
            .iter()
            .filter(|s| sweep.iter().any(|r| r.steer == **s))
            .map(|s| s.to_string())
            .collect();
        let series = |f: &dyn Fn(&Row) -> f64| -> Series {
            steers
                .iter()
                .map(|s| {
                    let pts = sweep
                        .iter()
                        .filter(|r| &r.steer == s)
                        .map(|r| (r.shards as f64, f(r)))
                        .collect();
                    (format!("steer {s}"), pts)
                })
                .collect()
        };
        let path = dir.join("sweep-rps.svg");
        if line_chart(
            &path,
            "shardhttpd requests/s against shards",
            "shards",
            "requests/s",
            false,
            &series(&|r| r.outcome.rps),
        ) {
            written.push(path);
        }
        // A shard with no requests has an infinite ratio: drawn at 0.
        let path = dir.join("sweep-balance.svg");
        if line_chart(
            &path,
            "per-core balance (max/min requests) against shards",
            "shards",
            "max / min",
            false,
            &series(&|r| r.balance().filter(|b| b.is_finite()).unwrap_or(0.0)),
        ) {
            written.push(path);
        }
    }
    written
}

/// One line chart; `log_x` for concurrency. False if nothing was drawn.
fn line_chart(
    path: &Path,
    title: &str,
    x_label: &str,
    y_label: &str,
    log_x: bool,
    series: &Series,
) -> bool {
    let xs = series.iter().flat_map(|(_, p)| p.iter().map(|q| q.0));
    let (x_min, x_max) = xs.fold((f64::MAX, f64::MIN), |(a, b), x| (a.min(x), b.max(x)));
    let y_max = series
        .iter()
        .flat_map(|(_, p)| p.iter().map(|q| q.1))
        .fold(0.0f64, f64::max);
    if x_min > x_max {
        return false;
    }
    let y_top = if y_max > 0.0 { y_max * 1.1 } else { 1.0 };
    let result = (|| -> Result<(), Box<dyn std::error::Error>> {
        let root = SVGBackend::new(path, (800, 500)).into_drawing_area();
        root.fill(&WHITE)?;
        let mut builder = ChartBuilder::on(&root);
        builder
            .caption(title, ("sans-serif", 20))
            .margin(15)
            .x_label_area_size(40)
            .y_label_area_size(70);
        if log_x {
            let mut chart = builder
                .build_cartesian_2d((x_min.max(1.0)..x_max.max(2.0)).log_scale(), 0.0..y_top)?;
            chart
                .configure_mesh()
                .x_desc(x_label)
                .y_desc(y_label)
                .draw()?;
            draw_series(&mut chart, series)?;
        } else {
            let pad = if x_max > x_min { 0.0 } else { 0.5 };
            let mut chart = builder.build_cartesian_2d((x_min - pad)..(x_max + pad), 0.0..y_top)?;
            chart
                .configure_mesh()
                .x_desc(x_label)
                .y_desc(y_label)
                .draw()?;
            draw_series(&mut chart, series)?;
        }
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

fn draw_series<'a, X, DB>(
    chart: &mut ChartContext<'a, DB, Cartesian2d<X, plotters::coord::types::RangedCoordf64>>,
    series: &Series,
) -> Result<(), Box<dyn std::error::Error + 'a>>
where
    DB: DrawingBackend + 'a,
    X: Ranged<ValueType = f64>,
{
    for (i, (name, pts)) in series.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        chart
            .draw_series(LineSeries::new(pts.iter().copied(), colour.stroke_width(2)))?
            .label(name.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], colour));
        chart.draw_series(pts.iter().map(|&p| Circle::new(p, 3, colour.filled())))?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperLeft)
        .draw()?;
    Ok(())
}
