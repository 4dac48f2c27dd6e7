//! Charts of a simulation, in the spirit of seed 000's graph, drawn with
//! plotters as SVG: one row per strategy; on the left the wait before every
//! attempt over time (successes green, throttled attempts red), on the right
//! one line per client of its cumulative attempts (fairness: parallel lines
//! are fair shares).

use std::path::Path;

use plotters::prelude::*;

use super::engine::Outcome;
use super::SimError;

const ROW_H: u32 = 320;
const WIDTH: u32 = 1400;
/// Points of each colour per panel beyond which attempts are thinned (every
/// k-th kept), so a naive strategy's half a million retries stay drawable.
const MAX_POINTS: usize = 10_000;

/// Writes the chart to `path` (SVG).
pub fn write(
    path: &Path,
    scenario: &str,
    duration_s: f64,
    runs: &[(String, &Outcome)],
) -> Result<(), SimError> {
    let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
    if !ext.eq_ignore_ascii_case("svg") {
        return Err(SimError::Chart(format!(
            "{}: only .svg charts are supported (PNG would need a font rasterizer this build leaves out)",
            path.display()
        )));
    }
    let height = ROW_H * runs.len().max(1) as u32 + 40;
    let root = SVGBackend::new(path, (WIDTH, height)).into_drawing_area();
    draw(&root, scenario, duration_s, runs).map_err(|e| SimError::Chart(e.to_string()))?;
    root.present()
        .map_err(|e| SimError::Chart(format!("{}: {e}", path.display())))
}

type Area<'a> = DrawingArea<SVGBackend<'a>, plotters::coord::Shift>;

fn draw(
    root: &Area<'_>,
    scenario: &str,
    duration_s: f64,
    runs: &[(String, &Outcome)],
) -> Result<(), Box<dyn std::error::Error>> {
    root.fill(&WHITE)?;
    let root = root.titled(
        &format!("ingest sim: {scenario}"),
        ("sans-serif", 22).into_font(),
    )?;
    let rows = root.split_evenly((runs.len().max(1), 2));
    for (i, (label, out)) in runs.iter().enumerate() {
        waits(&rows[2 * i], label, duration_s, out)?;
        fairness(&rows[2 * i + 1], label, duration_s, out)?;
    }
    Ok(())
}

fn waits(
    area: &Area<'_>,
    label: &str,
    duration_s: f64,
    out: &Outcome,
) -> Result<(), Box<dyn std::error::Error>> {
    let max_wait = out
        .attempts
        .iter()
        .map(|a| a.wait_s)
        .fold(0.0, f64::max)
        .max(1e-3)
        * 1.05;
    let mut chart = ChartBuilder::on(area)
        .caption(
            format!("{label}: wait before each attempt"),
            ("sans-serif", 16),
        )
        .margin(8)
        .x_label_area_size(30)
        .y_label_area_size(55)
        .build_cartesian_2d(0.0..duration_s, 0.0..max_wait)?;
    chart
        .configure_mesh()
        .x_desc("time (s)")
        .y_desc("wait (s)")
        .light_line_style(WHITE)
        .draw()?;
    let thin = |throttled: bool| {
        let n = out
            .attempts
            .iter()
            .filter(|a| a.throttled == throttled)
            .count();
        let step = n.div_ceil(MAX_POINTS).max(1);
        out.attempts
            .iter()
            .filter(move |a| a.throttled == throttled)
            .step_by(step)
    };
    let ok = thin(false).map(|a| Circle::new((a.t_s, a.wait_s), 2, GREEN.filled()));
    chart
        .draw_series(ok)?
        .label("success")
        .legend(|(x, y)| Circle::new((x, y), 3, GREEN.filled()));
    let bad = thin(true).map(|a| Circle::new((a.t_s, a.wait_s), 2, RED.filled()));
    chart
        .draw_series(bad)?
        .label("throttled")
        .legend(|(x, y)| Circle::new((x, y), 3, RED.filled()));
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
    Ok(())
}

fn fairness(
    area: &Area<'_>,
    label: &str,
    duration_s: f64,
    out: &Outcome,
) -> Result<(), Box<dyn std::error::Error>> {
    let n = out.per_client.len();
    let max = out
        .per_client
        .iter()
        .map(|(a, _)| *a)
        .max()
        .unwrap_or(1)
        .max(1) as f64;
    let mut chart = ChartBuilder::on(area)
        .caption(format!("{label}: attempts per client"), ("sans-serif", 16))
        .margin(8)
        .x_label_area_size(30)
        .y_label_area_size(55)
        .build_cartesian_2d(0.0..duration_s, 0.0..max * 1.05)?;
    chart
        .configure_mesh()
        .x_desc("time (s)")
        .y_desc("attempts")
        .light_line_style(WHITE)
        .draw()?;
    let mut lines: Vec<Vec<(f64, f64)>> = vec![Vec::new(); n];
    let mut counts = vec![0u64; n];
    for a in &out.attempts {
        let c = a.client as usize;
        counts[c] += 1;
        lines[c].push((a.t_s, counts[c] as f64));
    }
    for (c, pts) in lines.into_iter().enumerate() {
        let step = (pts.len() / 2_000).max(1);
        let mut thin: Vec<(f64, f64)> = pts.iter().step_by(step).copied().collect();
        if let Some(last) = pts.last() {
            thin.push(*last);
        }
        chart.draw_series(LineSeries::new(thin, Palette99::pick(c).stroke_width(1)))?;
    }
    Ok(())
}
